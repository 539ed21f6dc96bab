/*
 * pool.c - the stream-ordered allocator: memory pools (each device's default pool, and pools of
 * their own), their attributes and statistics, and the blocks allocated from them, each valid from
 * the point of its allocation in its stream until the point of its free.
 *
 * A block's memory is taken when the allocation is enqueued, but the block is only usable once its
 * stream reaches the allocation (cusw_block_reached), and no longer once a stream reaches its free
 * (cusw_block_freed). Stream work that touches a block outside that span (cusw_pool_misused: a
 * copy, a set or a memory operation, when it runs) is a misuse, as a kernel reading freed memory
 * is: the real driver keeps freed memory in its pool, where such a read goes unnoticed; here it
 * fails the context (CUDA_ERROR_ILLEGAL_ADDRESS), is counted and logged. To tell such a use from a
 * use of new memory at the same address, a freed block's memory is kept, unused, for a while
 * (QUARANTINE_BLOCKS, QUARANTINE_BYTES) before it goes back to the system.
 *
 * Pools keep no memory of their own: their statistics are what they would hold. A block's bytes
 * are used from its allocation to its free; a pool reserves what it uses plus what it kept from
 * frees, down to its release threshold at each free (the real driver gives memory back at
 * synchronisations instead), and cuMemPoolTrimTo gives back what it kept beyond what it is asked
 * to keep. Everything here is [locked] but cusw_pool_misused, which takes the lock.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define BLOCK_ALIGNMENT 256 /* as cuMemAlloc's */
#define QUARANTINE_BLOCKS 1024
#define QUARANTINE_BYTES (64ULL << 20)

enum block_state { BLOCK_PENDING, BLOCK_LIVE, BLOCK_FREE_ENQUEUED, BLOCK_FREED };

struct cusw_block {
    void *memory;
    size_t size;
    struct cusw_pool *pool;
    enum block_state state;
    struct cusw_block *next_freed; /* the quarantine, oldest first */
};

struct cusw_pool {
    uintptr_t handle; /* 0 once destroyed */
    int device;
    bool is_default;
    int reuse[3]; /* CU_MEMPOOL_ATTR_REUSE_*, 1 to 3 */
    uint64_t release_threshold;
    uint64_t used, used_high, kept, reserved_high;
    size_t blocks; /* allocated and not yet freed at their point */
    struct cusw_pool *next; /* every pool, destroyed ones with blocks left included */
};

static struct cusw_pool *pools;

static struct cusw_pool *default_pools[CUSW_MAX_DEVICES];
static struct cusw_pool *current_pools[CUSW_MAX_DEVICES];
static struct cusw_map blocks; /* memory -> block, freed blocks in quarantine included */
static struct cusw_block *quarantine_head, *quarantine_tail;
static size_t quarantined_blocks, quarantined_bytes;
static atomic_size_t tracked_blocks; /* in `blocks`: lets a check skip the lock when 0 */
static atomic_ullong misuses;

static struct cusw_pool *pool_new(int device, bool is_default)
{
    struct cusw_pool *p = calloc(1, sizeof *p);
    if (p == NULL || (p->handle = cusw_handle_new(CUSW_KIND_POOL, p)) == 0) {
        free(p);
        return NULL;
    }
    p->device = device;
    p->is_default = is_default;
    p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
    p->next = pools;
    pools = p;
    return p;
}

/* A destroyed pool goes once its last block is freed. */
static void pool_free_if_done(struct cusw_pool *pool)
{
    if (pool->handle != 0 || pool->blocks != 0)
        return;
    for (struct cusw_pool **link = &pools; *link != NULL; link = &(*link)->next) {
        if (*link == pool) {
            *link = pool->next;
            break;
        }
    }
    free(pool);
}

struct cusw_pool *cusw_pool_default(int device)
{
    if (default_pools[device] == NULL)
        default_pools[device] = pool_new(device, true);
    return default_pools[device];
}

struct cusw_pool *cusw_pool_current(int device)
{
    return current_pools[device] != NULL ? current_pools[device] : cusw_pool_default(device);
}

void cusw_pool_set_current(int device, struct cusw_pool *pool) { current_pools[device] = pool; }

uintptr_t cusw_pool_handle(const struct cusw_pool *pool) { return pool->handle; }
int cusw_pool_device(const struct cusw_pool *pool) { return pool->device; }

struct cusw_pool *cusw_pool_create(int device) { return pool_new(device, false); }

CUresult cusw_pool_from_handle(CUmemoryPool handle, struct cusw_pool **out)
{
    struct cusw_pool *p = cusw_handle_get((uintptr_t)handle, CUSW_KIND_POOL);
    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *out = p;
    return CUDA_SUCCESS;
}

CUresult cusw_pool_destroy(struct cusw_pool *pool)
{
    if (pool->is_default)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_handle_remove(pool->handle);
    pool->handle = 0;
    for (int d = 0; d < CUSW_MAX_DEVICES; d++)
        if (current_pools[d] == pool)
            current_pools[d] = NULL;
    /* As documented, what is still allocated from it keeps it until freed. */
    pool_free_if_done(pool);
    return CUDA_SUCCESS;
}

static uint64_t reserved(const struct cusw_pool *p) { return p->used + p->kept; }

static void note_reserved(struct cusw_pool *p)
{
    if (reserved(p) > p->reserved_high)
        p->reserved_high = reserved(p);
}

CUresult cusw_pool_get_attribute(const struct cusw_pool *p, CUmemPool_attribute attribute,
                                 void *value)
{
    switch (attribute) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = p->reuse[attribute - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = p->release_threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = reserved(p); break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = p->reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = p->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = p->used_high; break;
    case CU_MEMPOOL_ATTR_ALLOCATION_TYPE: *(int *)value = CU_MEM_ALLOCATION_TYPE_PINNED; break;
    case CU_MEMPOOL_ATTR_EXPORT_HANDLE_TYPES: *(int *)value = 0; break;
    case CU_MEMPOOL_ATTR_LOCATION_ID: *(int *)value = p->device; break;
    case CU_MEMPOOL_ATTR_LOCATION_TYPE: *(int *)value = CU_MEM_LOCATION_TYPE_DEVICE; break;
    case CU_MEMPOOL_ATTR_MAX_POOL_SIZE: *(cuuint64_t *)value = 0; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult cusw_pool_set_attribute(struct cusw_pool *p, CUmemPool_attribute attribute,
                                 const void *value)
{
    switch (attribute) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        p->reuse[attribute - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] =
            *(const int *)value != 0;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        p->release_threshold = *(const cuuint64_t *)value;
        return CUDA_SUCCESS;
    /* The high watermarks may only be reset, to what is reserved or used now. */
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        if (*(const cuuint64_t *)value != 0)
            return CUDA_ERROR_INVALID_VALUE;
        p->reserved_high = reserved(p);
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (*(const cuuint64_t *)value != 0)
            return CUDA_ERROR_INVALID_VALUE;
        p->used_high = p->used;
        return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

void cusw_pool_trim(struct cusw_pool *p, size_t keep)
{
    if (reserved(p) > keep)
        p->kept -= (reserved(p) - keep) < p->kept ? reserved(p) - keep : p->kept;
}

uint64_t cusw_pool_reserved_bytes(int device)
{
    uint64_t total = 0;
    for (const struct cusw_pool *p = pools; p != NULL; p = p->next)
        if (p->device == device)
            total += reserved(p);
    return total;
}

CUresult cusw_block_allocate(struct cusw_pool *pool, size_t size, struct cusw_block **out)
{
    struct cusw_block *b = malloc(sizeof *b);
    void *memory = NULL;
    if (b == NULL || posix_memalign(&memory, BLOCK_ALIGNMENT, size) != 0 ||
        !cusw_map_put(&blocks, (uintptr_t)memory, b)) {
        free(b);
        free(memory);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *b = (struct cusw_block){ .memory = memory, .size = size, .pool = pool };
    atomic_fetch_add(&tracked_blocks, 1);
    pool->blocks++;
    pool->used += size;
    if (pool->used > pool->used_high)
        pool->used_high = pool->used;
    pool->kept -= size < pool->kept ? size : pool->kept; /* taken from what it kept */
    note_reserved(pool);
    *out = b;
    return CUDA_SUCCESS;
}

void *cusw_block_memory(const struct cusw_block *b) { return b->memory; }

struct cusw_block *cusw_block_to_free(const void *memory)
{
    struct cusw_block *b = cusw_map_get(&blocks, (uintptr_t)memory);
    if (b == NULL || (b->state != BLOCK_PENDING && b->state != BLOCK_LIVE))
        return NULL;
    b->state = BLOCK_FREE_ENQUEUED;
    return b;
}

void cusw_block_reached(struct cusw_block *b)
{
    if (b->state == BLOCK_PENDING)
        b->state = BLOCK_LIVE;
}

/* The oldest freed block's memory goes back to the system. */
static void release_oldest(void)
{
    struct cusw_block *b = quarantine_head;
    quarantine_head = b->next_freed;
    if (quarantine_head == NULL)
        quarantine_tail = NULL;
    quarantined_blocks--;
    quarantined_bytes -= b->size;
    cusw_map_remove(&blocks, (uintptr_t)b->memory);
    atomic_fetch_sub(&tracked_blocks, 1);
    free(b->memory);
    free(b);
}

void cusw_block_freed(struct cusw_block *b)
{
    struct cusw_pool *p = b->pool;
    b->state = BLOCK_FREED;
    p->blocks--;
    p->used -= b->size;
    p->kept += b->size;
    if (reserved(p) > p->release_threshold)
        cusw_pool_trim(p, p->release_threshold > p->used ? p->release_threshold : p->used);
    b->pool = NULL;
    pool_free_if_done(p);
    b->next_freed = NULL;
    if (quarantine_tail != NULL)
        quarantine_tail->next_freed = b;
    else
        quarantine_head = b;
    quarantine_tail = b;
    quarantined_blocks++;
    quarantined_bytes += b->size;
    while (quarantined_blocks > QUARANTINE_BLOCKS || quarantined_bytes > QUARANTINE_BYTES)
        release_oldest();
}

bool cusw_pool_misused(const void *memory, size_t bytes)
{
    if (atomic_load(&tracked_blocks) == 0 || bytes == 0)
        return false;
    uintptr_t start = (uintptr_t)memory, end = start + bytes;
    const struct cusw_block *misused = NULL;
    cusw_lock_acquire();
    size_t cursor = 0;
    uintptr_t base;
    void *value;
    while (misused == NULL && cusw_map_next(&blocks, &cursor, &base, &value)) {
        const struct cusw_block *b = value;
        if (base < end && start < base + b->size &&
            (b->state == BLOCK_PENDING || b->state == BLOCK_FREED))
            misused = b;
    }
    bool before = misused != NULL && misused->state == BLOCK_PENDING;
    cusw_lock_release();
    if (misused != NULL && atomic_fetch_add(&misuses, 1) == 0)
        cusw_log("stream work used stream-ordered memory at %p %s; it fails the context (logged "
                 "once; cuswStreamOrderedMemoryMisuses counts them)",
                 memory, before ? "before its allocation's point" : "after its free's point");
    return misused != NULL;
}

bool cusw_pool_holds(const void *memory)
{
    uintptr_t address = (uintptr_t)memory;
    size_t cursor = 0;
    uintptr_t base;
    void *value;
    while (cusw_map_next(&blocks, &cursor, &base, &value))
        if (address >= base && address - base < ((const struct cusw_block *)value)->size)
            return true;
    return false;
}

unsigned long long cusw_pool_misuses(void) { return atomic_load(&misuses); }

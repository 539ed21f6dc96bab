/*
 * memory.c - allocations: device memory, page-locked host memory and managed memory (which is
 * device memory to the copy rules). Host memory stands in for device memory: a CUdeviceptr is a
 * plain host address, so device memory is as accessible from the host as from stream operations
 * (which, like the unified addressing of the real device, is what host-side tests want). The
 * stream-ordered allocator's memory is pool.c's; cuMemFree frees it too, and the device's memory
 * left counts what its pools reserve.
 *
 * Allocations are tracked per context (freed when the context is deactivated) and checked on
 * free. Frees synchronise the context first, as the real driver's implicit synchronisation does,
 * so that pending stream work never touches freed memory. Which async copies the real driver does
 * synchronously is decided here too, since it depends on where the memory is.
 */
#include "internal.h"

#include <stdlib.h>

struct allocation {
    size_t size;
    struct cusw_ctx *ctx;
    enum cusw_memory_kind kind;
};

static struct cusw_map allocations; /* base address -> struct allocation */
static size_t device_bytes_in_use[CUSW_MAX_DEVICES]; /* each device has its own memory */
static size_t host_allocations, device_allocations; /* live, for cuswLiveObjects */

void cusw_memory_counts(size_t *host, size_t *device)
{
    *host = host_allocations;
    *device = device_allocations;
}

size_t cusw_device_memory_free(int device)
{
    uint64_t used = device_bytes_in_use[device] + cusw_pool_reserved_bytes(device);
    return used < CUSW_DEVICE_MEMORY_BYTES ? (size_t)(CUSW_DEVICE_MEMORY_BYTES - used) : 0;
}

#define ALLOCATION_ALIGNMENT 256 /* cudaMalloc guarantees at least 256 bytes */

/* [locked] The current context, for an allocation or a free: both are "potentially unsafe"
 * during a capture. */
static CUresult context_for_memory(struct cusw_ctx **ctx)
{
    CUresult rc = cusw_ctx_current(ctx);
    return rc != CUDA_SUCCESS ? rc : cusw_capture_check_unsafe();
}

CUresult cusw_memory_allocate(size_t size, enum cusw_memory_kind kind, void **out)
{
    struct cusw_ctx *ctx = NULL;
    CUresult rc = context_for_memory(&ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    bool host = kind == CUSW_MEMORY_HOST;
    if (!host && size > cusw_device_memory_free(ctx->device))
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct allocation *a = malloc(sizeof *a);
    void *p = NULL;
    if (a == NULL || posix_memalign(&p, ALLOCATION_ALIGNMENT, size) != 0 ||
        !cusw_map_put(&allocations, (uintptr_t)p, a)) {
        free(a);
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->size = size;
    a->ctx = ctx;
    a->kind = kind;
    if (host) {
        host_allocations++;
    } else {
        device_allocations++;
        device_bytes_in_use[ctx->device] += size;
    }
    *out = p;
    return CUDA_SUCCESS;
}

/* [locked] */
static void release(void *p, struct allocation *a)
{
    cusw_map_remove(&allocations, (uintptr_t)p);
    if (a->kind == CUSW_MEMORY_HOST) {
        host_allocations--;
    } else {
        device_allocations--;
        device_bytes_in_use[a->ctx->device] -= a->size;
    }
    free(a);
    free(p);
}

/* cuMemFree of stream-ordered memory: it goes once the context's work is done, as cuMemFree of
 * any device memory. */
static CUresult free_block(void *p, struct cusw_ctx *ctx)
{
    struct cusw_block *b = cusw_block_to_free(p);
    if (b == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_ctx_drain(ctx);
    cusw_block_reached(b);
    cusw_block_freed(b);
    return cusw_ctx_sticky(ctx);
}

CUresult cusw_memory_free(void *p, bool host)
{
    struct cusw_ctx *ctx = NULL;
    CUresult rc = context_for_memory(&ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct allocation *a = cusw_map_get(&allocations, (uintptr_t)p);
    if (a == NULL && !host)
        return free_block(p, ctx);
    if (a == NULL || (a->kind == CUSW_MEMORY_HOST) != host)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_ctx_drain(a->ctx);
    /* Another thread may have freed it while the lock was released for the drain. */
    a = cusw_map_get(&allocations, (uintptr_t)p);
    if (a == NULL || (a->kind == CUSW_MEMORY_HOST) != host)
        return CUDA_ERROR_INVALID_VALUE;
    release(p, a);
    return cusw_ctx_sticky(ctx);
}

/* [locked] The allocation that holds address p, or NULL: then p is pageable host memory. */
static struct allocation *allocation_of(const void *p)
{
    size_t cursor = 0;
    uintptr_t base;
    void *value;
    while (cusw_map_next(&allocations, &cursor, &base, &value)) {
        struct allocation *a = value;
        if ((uintptr_t)p >= base && (uintptr_t)p - base < a->size)
            return a;
    }
    return NULL;
}

bool cusw_memory_is_page_locked(const void *p)
{
    const struct allocation *a = allocation_of(p);
    return a != NULL && a->kind == CUSW_MEMORY_HOST;
}

bool cusw_memory_is_managed(const void *p, size_t bytes)
{
    const struct allocation *a = allocation_of(p);
    const struct allocation *last = bytes > 0 ? allocation_of((const char *)p + bytes - 1) : a;
    return a != NULL && a == last && a->kind == CUSW_MEMORY_MANAGED;
}

void cusw_memory_release_context(struct cusw_ctx *ctx)
{
    size_t cursor = 0;
    uintptr_t key;
    void *value;
    while (cusw_map_next(&allocations, &cursor, &key, &value)) {
        struct allocation *a = value;
        if (a->ctx == ctx)
            release((void *)key, a); /* removal leaves a tombstone: iteration stays valid */
    }
}

/* The rules of the driver API's synchronisation behaviour (its reference's "API synchronization
 * behavior" page), where the memory of a device allocation is the device's and all else the
 * host's. */
enum cusw_copy_rule cusw_copy_rule(const void *dst, const void *src, bool async)
{
    cusw_lock_acquire();
    const struct allocation *to = allocation_of(dst);
    const struct allocation *from = allocation_of(src);
    bool to_host = to == NULL ? !cusw_pool_holds(dst) : to->kind == CUSW_MEMORY_HOST;
    bool from_host = from == NULL ? !cusw_pool_holds(src) : from->kind == CUSW_MEMORY_HOST;
    enum cusw_copy_rule rule = CUSW_COPY_RETURNS_AT_ONCE;
    bool to_pageable = to == NULL && to_host, from_pageable = from == NULL && from_host;
    if (async ? to_pageable || (to_host && from_host) : to_host || from_host)
        rule = CUSW_COPY_WAITS;
    else if (from_pageable)
        rule = CUSW_COPY_STAGES_SOURCE; /* pageable host memory to the device */
    cusw_lock_release();
    return rule;
}

bool cusw_set_waits_for_stream(const void *dst)
{
    cusw_lock_acquire();
    bool waits = cusw_memory_is_page_locked(dst);
    cusw_lock_release();
    return waits;
}

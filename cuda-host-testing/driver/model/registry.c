/*
 * registry.c - the table of live handles, and the small hash map it is built on.
 *
 * Handles are numbers handed out from a counter (never reused, never NULL, never the special
 * stream values 0x1/0x2), mapped to the object and its kind. Every API argument that is a handle
 * is looked up here before use, so destroyed or invented handles answer
 * CUDA_ERROR_INVALID_HANDLE instead of touching freed memory; and because numbers are not reused,
 * a stale handle cannot alias a newer object, and a lookup tells a stale one from an invented one:
 * it counts the stale ones (cuswStaleHandleUses).
 */
#include "internal.h"

#include <stdlib.h>

#define KEY_EMPTY ((uintptr_t)0)
#define KEY_TOMBSTONE ((uintptr_t)1)

struct cusw_map_slot {
    uintptr_t key;
    void *value;
};

static size_t slot_of(uintptr_t key, size_t capacity)
{
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ULL; /* Fibonacci hashing */
    return (size_t)(h >> 17) & (capacity - 1);
}

static bool map_rehash(struct cusw_map *m, size_t capacity)
{
    struct cusw_map_slot *slots = calloc(capacity, sizeof *slots);
    if (slots == NULL)
        return false;
    for (size_t i = 0; i < m->capacity; i++) {
        uintptr_t key = m->slots[i].key;
        if (key == KEY_EMPTY || key == KEY_TOMBSTONE)
            continue;
        size_t j = slot_of(key, capacity);
        while (slots[j].key != KEY_EMPTY)
            j = (j + 1) & (capacity - 1);
        slots[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->capacity = capacity;
    m->tombstones = 0;
    return true;
}

bool cusw_map_put(struct cusw_map *m, uintptr_t key, void *value)
{
    if ((m->used + m->tombstones + 1) * 4 >= m->capacity * 3) {
        size_t capacity = m->capacity ? m->capacity : 64;
        while ((m->used + 1) * 2 >= capacity)
            capacity *= 2;
        if (!map_rehash(m, capacity))
            return false;
    }
    size_t i = slot_of(key, m->capacity);
    size_t reuse = SIZE_MAX;
    while (m->slots[i].key != KEY_EMPTY) {
        if (m->slots[i].key == key) {
            m->slots[i].value = value;
            return true;
        }
        if (m->slots[i].key == KEY_TOMBSTONE && reuse == SIZE_MAX)
            reuse = i;
        i = (i + 1) & (m->capacity - 1);
    }
    if (reuse != SIZE_MAX) {
        i = reuse;
        m->tombstones--;
    }
    m->slots[i].key = key;
    m->slots[i].value = value;
    m->used++;
    return true;
}

static struct cusw_map_slot *map_find(const struct cusw_map *m, uintptr_t key)
{
    if (m->capacity == 0 || key == KEY_EMPTY || key == KEY_TOMBSTONE)
        return NULL;
    size_t i = slot_of(key, m->capacity);
    while (m->slots[i].key != KEY_EMPTY) {
        if (m->slots[i].key == key)
            return &m->slots[i];
        i = (i + 1) & (m->capacity - 1);
    }
    return NULL;
}

void *cusw_map_get(const struct cusw_map *m, uintptr_t key)
{
    struct cusw_map_slot *slot = map_find(m, key);
    return slot ? slot->value : NULL;
}

void *cusw_map_remove(struct cusw_map *m, uintptr_t key)
{
    struct cusw_map_slot *slot = map_find(m, key);
    if (slot == NULL)
        return NULL;
    void *value = slot->value;
    slot->key = KEY_TOMBSTONE;
    slot->value = NULL;
    m->used--;
    m->tombstones++;
    return value;
}

bool cusw_map_next(const struct cusw_map *m, size_t *cursor, uintptr_t *key, void **value)
{
    for (; *cursor < m->capacity; (*cursor)++) {
        struct cusw_map_slot *slot = &m->slots[*cursor];
        if (slot->key != KEY_EMPTY && slot->key != KEY_TOMBSTONE) {
            *key = slot->key;
            *value = slot->value;
            (*cursor)++;
            return true;
        }
    }
    return false;
}

/* ---- Handle registry ------------------------------------------------------------------------- */

struct registration {
    enum cusw_kind kind;
    void *object;
};

static struct cusw_map handles;
static uintptr_t next_handle_number = 1;
static size_t live_handles[CUSW_KIND_COUNT]; /* by kind */
static atomic_ullong stale_handle_uses; /* read without the lock */

/* Handles look like aligned pointers (some callers print or hash them) but point nowhere. */
#define HANDLE_BASE ((uintptr_t)0x5c0000000000ULL)
#define HANDLE_STEP ((uintptr_t)0x10)

uintptr_t cusw_handle_new(enum cusw_kind kind, void *object)
{
    struct registration *r = malloc(sizeof *r);
    if (r == NULL)
        return 0;
    r->kind = kind;
    r->object = object;
    uintptr_t handle = HANDLE_BASE + next_handle_number * HANDLE_STEP;
    if (!cusw_map_put(&handles, handle, r)) {
        free(r);
        return 0;
    }
    next_handle_number++;
    live_handles[kind]++;
    return handle;
}

void *cusw_handle_get(uintptr_t handle, enum cusw_kind kind)
{
    struct registration *r = cusw_map_get(&handles, handle);
    if (r == NULL && handle > HANDLE_BASE && handle < HANDLE_BASE + next_handle_number * HANDLE_STEP &&
        (handle - HANDLE_BASE) % HANDLE_STEP == 0)
        atomic_fetch_add(&stale_handle_uses, 1);
    return (r != NULL && r->kind == kind) ? r->object : NULL;
}

void cusw_handle_remove(uintptr_t handle)
{
    struct registration *r = cusw_map_remove(&handles, handle);
    if (r != NULL)
        live_handles[r->kind]--;
    free(r);
}

size_t cusw_handle_count(enum cusw_kind kind) { return live_handles[kind]; }

unsigned long long cusw_stale_handle_uses(void) { return atomic_load(&stale_handle_uses); }

/*
 * context.c - devices and their contexts: initialisation, each device's primary context, the
 * calling thread's stack of current contexts, sticky errors, and waiting for all of a context's
 * streams. What activates a context and tears it down is activation.c's.
 *
 * Each device has one primary context object for the life of the process, so its handle stays
 * the same across releases (as on the real driver) and its sticky error survives them: measured
 * on the real driver, a sticky error never clears for the process, and retaining the primary
 * context again answers it. Contexts cuCtxCreate makes live on after cuCtxDestroy too, out of
 * the registry.
 */
#include "internal.h"

#include <stdlib.h>

static atomic_bool initialized;
static struct cusw_ctx contexts[CUSW_MAX_DEVICES];

bool cusw_initialized(void) { return atomic_load(&initialized); }

int cusw_device_count(void) { return cusw_config_device_count(); }

CUresult cusw_check_device(CUdevice dev)
{
    return (dev >= 0 && dev < cusw_device_count()) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

const size_t cusw_default_limits[CUSW_LIMIT_COUNT] = {
    [CU_LIMIT_STACK_SIZE] = 1024,
    [CU_LIMIT_PRINTF_FIFO_SIZE] = 1048576,
    [CU_LIMIT_MALLOC_HEAP_SIZE] = 8388608,
    [CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2,
    [CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048,
    [CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64,
    [CU_LIMIT_PERSISTING_L2_CACHE_SIZE] = 0,
};

/* A context's configuration as the device gives it. */
static void configure(struct cusw_ctx *c)
{
    for (size_t i = 0; i < CUSW_LIMIT_COUNT; i++)
        c->limits[i] = cusw_default_limits[i];
    c->cache_config = CU_FUNC_CACHE_PREFER_NONE;
}

void cusw_initialize(void)
{
    cusw_lock_acquire();
    if (!atomic_load(&initialized)) {
        for (int i = 0; i < cusw_device_count(); i++) {
            contexts[i].device = i;
            contexts[i].flags = CU_CTX_SCHED_AUTO;
            contexts[i].primary = true;
            configure(&contexts[i]);
            contexts[i].handle = cusw_handle_new(CUSW_KIND_CONTEXT, &contexts[i]);
        }
        atomic_store(&initialized, true);
    }
    cusw_lock_release();
}

struct cusw_ctx *cusw_primary_ctx(CUdevice dev) { return &contexts[dev]; }

/* [locked] Contexts are never freed, so that a thread may keep a plain pointer to one, even after
 * cuCtxDestroy: kept here, they stay reachable. */
static struct cusw_ctx *created;

static struct cusw_stream *stream_of_id_in(struct cusw_ctx *ctx, unsigned long long id)
{
    for (struct cusw_stream *s = ctx->streams; s != NULL; s = s->ctx_next)
        if (s->id == id)
            return s;
    return NULL;
}

struct cusw_stream *cusw_stream_of_id(unsigned long long id)
{
    struct cusw_stream *s = NULL;
    for (int dev = 0; dev < CUSW_MAX_DEVICES && s == NULL; dev++)
        s = stream_of_id_in(&contexts[dev], id);
    for (struct cusw_ctx *c = created; c != NULL && s == NULL; c = c->next_created)
        s = stream_of_id_in(c, id);
    return s;
}

struct cusw_ctx *cusw_ctx_new(CUdevice dev, unsigned int flags)
{
    struct cusw_ctx *c = calloc(1, sizeof *c);
    if (c == NULL || (c->handle = cusw_handle_new(CUSW_KIND_CONTEXT, c)) == 0) {
        free(c);
        return NULL;
    }
    c->device = dev;
    c->flags = flags;
    configure(c);
    c->next_created = created;
    created = c;
    return c;
}

CUresult cusw_ctx_from_handle(CUcontext handle, struct cusw_ctx **out)
{
    struct cusw_ctx *ctx = cusw_handle_get((uintptr_t)handle, CUSW_KIND_CONTEXT);
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = ctx;
    return CUDA_SUCCESS;
}

/* ---- Sticky errors --------------------------------------------------------------------------- */

CUresult cusw_ctx_sticky(const struct cusw_ctx *ctx)
{
    return (CUresult)atomic_load(&ctx->sticky);
}

void cusw_ctx_set_sticky(struct cusw_ctx *ctx, CUresult code)
{
    int expected = CUDA_SUCCESS;
    atomic_compare_exchange_strong(&ctx->sticky, &expected, (int)code);
}

CUresult cusw_ctx_check(const struct cusw_ctx *ctx)
{
    if (!ctx->active)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    return cusw_ctx_sticky(ctx);
}

/* ---- The calling thread's current context ---------------------------------------------------- */

/* The calling thread's stack of current contexts: cuCtxPushCurrent pushes, cuCtxPopCurrent pops,
 * cuCtxSetCurrent replaces the top, which is the current context. Contexts are never freed, so a
 * thread may keep plain pointers. Kept as a thread-specific value, freed when the thread exits
 * (pthread clears it first, so a CUDA call made by a later destructor of the exiting thread
 * starts afresh instead of finding freed memory). */
struct context_stack {
    struct cusw_ctx **entries;
    size_t depth, capacity;
};

static pthread_key_t stack_key;
static pthread_once_t stack_once = PTHREAD_ONCE_INIT;

static void free_stack(void *p)
{
    struct context_stack *stack = p;
    free(stack->entries);
    free(stack);
}

static void make_stack_key(void) { pthread_key_create(&stack_key, free_stack); }

/* The calling thread's stack, made on first use when `make`; NULL if it has none (or no memory). */
static struct context_stack *thread_stack(bool make)
{
    pthread_once(&stack_once, make_stack_key);
    struct context_stack *stack = pthread_getspecific(stack_key);
    if (stack == NULL && make) {
        stack = calloc(1, sizeof *stack);
        if (stack != NULL && pthread_setspecific(stack_key, stack) != 0) {
            free(stack);
            stack = NULL;
        }
    }
    return stack;
}

struct cusw_ctx *cusw_ctx_bound(void)
{
    const struct context_stack *stack = thread_stack(false);
    return stack != NULL && stack->depth > 0 ? stack->entries[stack->depth - 1] : NULL;
}

CUresult cusw_ctx_push(struct cusw_ctx *ctx)
{
    struct context_stack *stack = thread_stack(true);
    if (stack == NULL || !cusw_reserve((void **)&stack->entries, &stack->capacity,
                                       stack->depth + 1, sizeof *stack->entries))
        return CUDA_ERROR_OUT_OF_MEMORY;
    stack->entries[stack->depth++] = ctx;
    return CUDA_SUCCESS;
}

struct cusw_ctx *cusw_ctx_pop(void)
{
    struct context_stack *stack = thread_stack(false);
    if (stack == NULL || stack->depth == 0)
        return NULL;
    return stack->entries[--stack->depth];
}

CUresult cusw_ctx_bind(struct cusw_ctx *ctx)
{
    if (ctx == NULL) {
        (void)cusw_ctx_pop(); /* nothing to unbind is no error */
        return CUDA_SUCCESS;
    }
    struct context_stack *stack = thread_stack(false);
    if (stack == NULL || stack->depth == 0)
        return cusw_ctx_push(ctx);
    stack->entries[stack->depth - 1] = ctx;
    return CUDA_SUCCESS;
}

CUresult cusw_ctx_current(struct cusw_ctx **out)
{
    struct cusw_ctx *current = cusw_ctx_bound();
    if (current == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUresult rc = cusw_ctx_check(current);
    if (rc == CUDA_SUCCESS)
        *out = current;
    return rc;
}

/* ---- Waiting for every stream ---------------------------------------------------------------- */

void cusw_ctx_drain(struct cusw_ctx *ctx)
{
    size_t n = 0;
    for (struct cusw_stream *s = ctx->streams; s != NULL; s = s->ctx_next)
        n++;
    struct cusw_dep *targets = calloc(n ? n : 1, sizeof *targets);
    if (targets == NULL) {
        /* Out of memory: fall back to waiting stream by stream until all are idle. */
        for (bool busy = true; busy;) {
            busy = false;
            for (struct cusw_stream *s = ctx->streams; s != NULL && !busy; s = s->ctx_next)
                busy = cusw_stream_pending(s);
            if (busy)
                cusw_wait_progress();
        }
        return;
    }
    size_t k = 0;
    for (struct cusw_stream *s = ctx->streams; s != NULL; s = s->ctx_next) {
        cusw_stream_ref(s);
        targets[k].stream = s;
        targets[k].seq = s->enqueued;
        k++;
    }
    for (size_t i = 0; i < k; i++) {
        while (targets[i].stream->completed < targets[i].seq)
            cusw_wait_progress();
    }
    for (size_t i = 0; i < k; i++)
        cusw_stream_unref(targets[i].stream);
    free(targets);
}

/*
 * context.c - primary contexts, the per-thread context stack, sticky errors, context-wide
 * synchronisation.
 *
 * Each device has one primary context object for the life of the process, so its handle stays
 * the same across release/reset (as on the real driver) and its sticky error survives a reset:
 * measured on the real driver, a sticky error never clears for the process, and retaining the
 * primary context again answers it. Deactivating a context (last release, or reset) destroys its
 * streams (after they drain), events and allocations.
 */
#include "internal.h"
#include "entries.h"

static struct cusw_ctx contexts[CUSW_MAX_DEVICES];

void cusw_contexts_init(int device_count)
{
    for (int i = 0; i < device_count; i++) {
        contexts[i].device = i;
        contexts[i].flags = CU_CTX_SCHED_AUTO;
        contexts[i].handle = cusw_handle_new(CUSW_KIND_CONTEXT, &contexts[i]);
    }
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

/* ---- Per-thread context stack ---------------------------------------------------------------- */

#define CONTEXT_STACK_DEPTH 64

/* Contexts are never freed, so the stack may hold plain pointers. */
static _Thread_local struct cusw_ctx *context_stack[CONTEXT_STACK_DEPTH];
static _Thread_local int context_depth;

static struct cusw_ctx *current_context(void)
{
    return context_depth > 0 ? context_stack[context_depth - 1] : NULL;
}

CUresult cusw_ctx_current(struct cusw_ctx **out)
{
    struct cusw_ctx *ctx = current_context();
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUresult rc = cusw_ctx_check(ctx);
    if (rc == CUDA_SUCCESS)
        *out = ctx;
    return rc;
}

/* [locked] */
static CUresult context_from_handle(CUcontext handle, struct cusw_ctx **out)
{
    struct cusw_ctx *ctx = cusw_handle_get((uintptr_t)handle, CUSW_KIND_CONTEXT);
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = ctx;
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    CUSW_ENTRY("cuCtxSetCurrent", "cuCtxSetCurrent");
    CUresult rc = cusw_require_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (ctx == NULL) {
        if (context_depth > 0)
            context_depth--;
        return CUDA_SUCCESS;
    }
    struct cusw_ctx *c = NULL;
    cusw_lock_acquire();
    rc = context_from_handle(ctx, &c);
    cusw_lock_release();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (context_depth == 0)
        context_depth = 1;
    context_stack[context_depth - 1] = c;
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    CUSW_ENTRY("cuCtxGetCurrent", "cuCtxGetCurrent");
    CUresult rc = cusw_require_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct cusw_ctx *c = current_context();
    *pctx = c ? (CUcontext)c->handle : NULL;
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    CUSW_ENTRY("cuCtxPushCurrent", "cuCtxPushCurrent_v2");
    CUresult rc = cusw_require_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct cusw_ctx *c = NULL;
    cusw_lock_acquire();
    rc = context_from_handle(ctx, &c);
    cusw_lock_release();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (context_depth == CONTEXT_STACK_DEPTH)
        return CUDA_ERROR_OUT_OF_MEMORY;
    context_stack[context_depth++] = c;
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    CUSW_ENTRY("cuCtxPopCurrent", "cuCtxPopCurrent_v2");
    CUresult rc = cusw_require_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (context_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct cusw_ctx *c = context_stack[--context_depth];
    if (pctx != NULL)
        *pctx = (CUcontext)c->handle;
    return CUDA_SUCCESS;
}

/* ---- Primary contexts ------------------------------------------------------------------------ */

static CUresult check_device(CUdevice dev)
{
    CUresult rc = cusw_require_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    return (dev >= 0 && dev < cusw_device_count()) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* [locked] A reset or last release may be draining the context's streams with the lock
 * released; nothing may re-activate it meanwhile. */
static void wait_teardown(struct cusw_ctx *c)
{
    while (atomic_load(&c->tearing_down))
        cusw_wait_progress();
}

/* [locked] */
static void deactivate(struct cusw_ctx *c)
{
    c->active = false;
    atomic_store(&c->tearing_down, true);
    for (struct cusw_stream *s = c->streams; s != NULL; s = s->ctx_next)
        if (s->handle != 0)
            cusw_stream_destroy(s);
    c->legacy = NULL;
    /* Pending work still runs to completion, as on a device: the allocations it uses are freed
     * only after it has drained. Workers unlink their stream and broadcast when they exit. */
    while (c->streams != NULL)
        cusw_wait_progress();
    while (c->events != NULL)
        cusw_event_destroy(c->events);
    cusw_memory_release_context(c);
    atomic_store(&c->tearing_down, false);
    cusw_broadcast_progress();
}

CUSW_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUSW_ENTRY("cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain");
    CUresult rc = check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_ctx *c = &contexts[dev];
    wait_teardown(c);
    rc = cusw_ctx_sticky(c);
    if (rc == CUDA_SUCCESS && !c->active) {
        c->legacy = cusw_stream_create(c, CUSW_STREAM_LEGACY, 0, 0);
        if (c->legacy == NULL)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else
            c->active = true;
    }
    if (rc == CUDA_SUCCESS) {
        c->retain_count++;
        *pctx = (CUcontext)c->handle;
    }
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUSW_ENTRY("cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2");
    CUresult rc = check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    cusw_lock_acquire();
    struct cusw_ctx *c = &contexts[dev];
    wait_teardown(c);
    if (c->retain_count == 0) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
    } else if (--c->retain_count == 0 && c->active) {
        deactivate(c); /* succeeds also with a sticky error, as measured */
    }
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    CUSW_ENTRY("cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxReset_v2");
    CUresult rc = check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    cusw_lock_acquire();
    struct cusw_ctx *c = &contexts[dev];
    wait_teardown(c);
    if (c->active)
        deactivate(c);
    c->retain_count = 0;
    cusw_lock_release();
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    CUSW_ENTRY("cuDevicePrimaryCtxGetState", "cuDevicePrimaryCtxGetState");
    CUresult rc = check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (flags == NULL || active == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    *flags = contexts[dev].flags;
    *active = contexts[dev].active ? 1 : 0;
    cusw_lock_release();
    return CUDA_SUCCESS;
}

/* ---- Context queries and synchronisation ------------------------------------------------------ */

/* [locked] `handle` NULL means the current context. */
static CUresult context_checked(CUcontext handle, struct cusw_ctx **out)
{
    if (handle == NULL)
        return cusw_ctx_current(out);
    CUresult rc = context_from_handle(handle, out);
    return rc != CUDA_SUCCESS ? rc : cusw_ctx_check(*out);
}

static CUresult get_device(CUdevice *device, CUcontext handle)
{
    CUresult rc = cusw_require_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct cusw_ctx *c = NULL;
    cusw_lock_acquire();
    rc = context_checked(handle, &c);
    if (rc == CUDA_SUCCESS)
        *device = c->device;
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
    CUSW_ENTRY("cuCtxGetDevice", "cuCtxGetDevice");
    return get_device(device, NULL);
}

CUSW_EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    CUSW_ENTRY("cuCtxGetDevice", "cuCtxGetDevice_v2");
    return get_device(device, ctx);
}

static CUresult synchronize(CUcontext handle)
{
    CUresult rc = cusw_require_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct cusw_ctx *c = NULL;
    cusw_lock_acquire();
    rc = context_checked(handle, &c);
    if (rc == CUDA_SUCCESS)
        rc = cusw_capture_check_unsafe();
    if (rc == CUDA_SUCCESS) {
        cusw_ctx_drain(c);
        rc = cusw_ctx_sticky(c);
    }
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuCtxSynchronize(void)
{
    CUSW_ENTRY("cuCtxSynchronize", "cuCtxSynchronize");
    return synchronize(NULL);
}

CUSW_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    CUSW_ENTRY("cuCtxSynchronize", "cuCtxSynchronize_v2");
    return synchronize(ctx);
}

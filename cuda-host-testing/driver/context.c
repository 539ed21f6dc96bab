/*
 * context.c - primary contexts, the calling thread's current context, sticky errors, context-wide
 * synchronisation.
 *
 * Each device has one primary context object for the life of the process, so its handle stays
 * the same across releases (as on the real driver) and its sticky error survives them: measured
 * on the real driver, a sticky error never clears for the process, and retaining the
 * primary context again answers it. Deactivating a context (its last release) destroys its streams
 * (after they drain), events and allocations.
 */
#include "internal.h"

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

/* ---- The calling thread's current context ---------------------------------------------------- */

/* Contexts are never freed, so a thread may keep a plain pointer. */
static _Thread_local struct cusw_ctx *current;

CUresult cusw_ctx_current(struct cusw_ctx **out)
{
    if (current == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUresult rc = cusw_ctx_check(current);
    if (rc == CUDA_SUCCESS)
        *out = current;
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
    CUSW_INIT_ENTRY();
    CUresult rc = CUDA_SUCCESS;
    struct cusw_ctx *c = NULL; /* NULL unbinds */
    if (ctx != NULL) {
        cusw_lock_acquire();
        rc = context_from_handle(ctx, &c);
        cusw_lock_release();
    }
    if (rc == CUDA_SUCCESS)
        current = c;
    return rc;
}

CUSW_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    CUSW_INIT_ENTRY();
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = current ? (CUcontext)current->handle : NULL;
    return CUDA_SUCCESS;
}

/* ---- Primary contexts ------------------------------------------------------------------------ */

/* [locked] A last release may be draining the context's streams with the lock
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
    CUSW_INIT_ENTRY();
    CUresult rc = cusw_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_ctx *c = &contexts[dev];
    wait_teardown(c);
    rc = cusw_ctx_sticky(c);
    if (rc == CUDA_SUCCESS && !c->active) {
        c->legacy = cusw_stream_create(c, CUSW_STREAM_LEGACY, 0);
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
    CUSW_INIT_ENTRY();
    CUresult rc = cusw_check_device(dev);
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

CUSW_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    CUSW_INIT_ENTRY();
    CUresult rc = cusw_check_device(dev);
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
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct cusw_ctx *c = NULL;
    cusw_lock_acquire();
    CUresult rc = context_checked(handle, &c);
    if (rc == CUDA_SUCCESS)
        *device = c->device;
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
    CUSW_INIT_ENTRY();
    return get_device(device, NULL);
}

CUSW_EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    CUSW_INIT_ENTRY();
    return get_device(device, ctx);
}

static CUresult synchronize(CUcontext handle)
{
    struct cusw_ctx *c = NULL;
    cusw_lock_acquire();
    CUresult rc = context_checked(handle, &c);
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
    CUSW_INIT_ENTRY();
    return synchronize(NULL);
}

CUSW_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    CUSW_INIT_ENTRY();
    return synchronize(ctx);
}

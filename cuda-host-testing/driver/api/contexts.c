/*
 * contexts.c - Primary Context Management and Context Management: cuDevicePrimaryCtxRetain,
 * cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxGetState, cuCtxCreate_v4, cuCtxDestroy_v2,
 * cuCtxSetCurrent, cuCtxGetCurrent,
 * cuCtxPushCurrent_v2, cuCtxPopCurrent_v2, cuCtxGetDevice (both ABIs), cuCtxGetFlags,
 * cuCtxSetFlags, cuCtxGetStreamPriorityRange, cuCtxSynchronize (both ABIs), cuCtxGetLimit,
 * cuCtxSetLimit, cuCtxGetCacheConfig, cuCtxSetCacheConfig. What a context holds, and what its
 * activation and deactivation do, is model/context.c's and model/activation.c's.
 */
#include "internal.h"

CUSW_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUSW_INIT_ENTRY();
    CUresult rc = cusw_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_ctx *c = cusw_primary_ctx(dev);
    rc = cusw_primary_ctx_retain(c);
    if (rc == CUDA_SUCCESS)
        *pctx = (CUcontext)c->handle;
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
    rc = cusw_primary_ctx_release(cusw_primary_ctx(dev));
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
    const struct cusw_ctx *c = cusw_primary_ctx(dev);
    *flags = c->flags;
    *active = c->active ? 1 : 0;
    cusw_lock_release();
    return CUDA_SUCCESS;
}

/* ---- Contexts of their own ------------------------------------------------------------------- */

/* As documented, a new context is pushed onto the calling thread's stack: current until popped
 * or destroyed. Execution affinity (MPS) and graphics interop are not modelled. */
CUSW_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                    unsigned int flags, CUdevice dev)
{
    CUSW_INIT_ENTRY();
    CUresult rc = cusw_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (pctx == NULL || (flags & ~(unsigned int)CU_CTX_FLAGS_MASK) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (ctxCreateParams != NULL &&
        (ctxCreateParams->execAffinityParams != NULL || ctxCreateParams->cigParams != NULL))
        return CUDA_ERROR_NOT_SUPPORTED;
    cusw_lock_acquire();
    struct cusw_ctx *c = cusw_ctx_new(dev, flags);
    rc = c == NULL ? CUDA_ERROR_OUT_OF_MEMORY : cusw_ctx_activate(c);
    if (rc == CUDA_SUCCESS)
        rc = cusw_ctx_push(c);
    if (rc == CUDA_SUCCESS)
        *pctx = (CUcontext)c->handle;
    else if (c != NULL)
        cusw_ctx_destroy(c);
    cusw_lock_release();
    return rc;
}

/* As documented: destroyed whichever threads it is current to; popped if the calling thread's
 * current one, and an error to use for the others. A primary context is released, not destroyed
 * (answering CUDA_ERROR_INVALID_CONTEXT for one is not measured on the real driver). */
CUSW_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    CUSW_INIT_ENTRY();
    cusw_lock_acquire();
    struct cusw_ctx *c = NULL;
    CUresult rc = cusw_ctx_from_handle(ctx, &c);
    if (rc == CUDA_SUCCESS && c->primary)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    if (rc == CUDA_SUCCESS) {
        cusw_ctx_destroy(c);
        if (cusw_ctx_bound() == c)
            (void)cusw_ctx_pop();
    }
    cusw_lock_release();
    return rc;
}

/* ---- The calling thread's current context ---------------------------------------------------- */

/* As documented: with no stack, binds `ctx`; with one, replaces its top, and NULL pops it. */
CUSW_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    CUSW_INIT_ENTRY();
    CUresult rc = CUDA_SUCCESS;
    struct cusw_ctx *c = NULL;
    if (ctx != NULL) {
        cusw_lock_acquire();
        rc = cusw_ctx_from_handle(ctx, &c);
        cusw_lock_release();
    }
    return rc == CUDA_SUCCESS ? cusw_ctx_bind(c) : rc;
}

CUSW_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    CUSW_INIT_ENTRY();
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    const struct cusw_ctx *c = cusw_ctx_bound();
    *pctx = c != NULL ? (CUcontext)c->handle : NULL;
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    CUSW_INIT_ENTRY();
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct cusw_ctx *c = NULL;
    cusw_lock_acquire();
    CUresult rc = cusw_ctx_from_handle(ctx, &c);
    cusw_lock_release();
    return rc == CUDA_SUCCESS ? cusw_ctx_push(c) : rc;
}

/* Answers the popped context; the one below it, if any, is current again. */
CUSW_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    CUSW_INIT_ENTRY();
    const struct cusw_ctx *c = cusw_ctx_pop();
    if (c == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx != NULL)
        *pctx = (CUcontext)c->handle;
    return CUDA_SUCCESS;
}

/* ---- Queries and synchronisation ------------------------------------------------------------- */

/* [locked] `handle` NULL means the current context. */
static CUresult context_checked(CUcontext handle, struct cusw_ctx **out)
{
    if (handle == NULL)
        return cusw_ctx_current(out);
    CUresult rc = cusw_ctx_from_handle(handle, out);
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

/* The current context's flags: its scheduling policy and the others of cuCtxCreate, which change
 * nothing here. */
CUSW_EXPORT CUresult cuCtxGetFlags(unsigned int *flags)
{
    CUSW_INIT_ENTRY();
    if (flags == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_ctx *c = NULL;
    CUresult rc = cusw_ctx_current(&c);
    if (rc == CUDA_SUCCESS)
        *flags = c->flags;
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuCtxSetFlags(unsigned int flags)
{
    CUSW_INIT_ENTRY();
    if ((flags & ~(unsigned int)CU_CTX_FLAGS_MASK) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_ctx *c = NULL;
    CUresult rc = cusw_ctx_current(&c);
    if (rc == CUDA_SUCCESS)
        c->flags = flags;
    cusw_lock_release();
    return rc;
}

/* Priorities are kept and clamped, but schedule nothing: every stream has a worker of its own. */
CUSW_EXPORT CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    CUSW_INIT_ENTRY();
    cusw_lock_acquire();
    struct cusw_ctx *c = NULL;
    CUresult rc = cusw_ctx_current(&c);
    cusw_lock_release();
    if (rc == CUDA_SUCCESS && leastPriority != NULL)
        *leastPriority = CUSW_LEAST_STREAM_PRIORITY;
    if (rc == CUDA_SUCCESS && greatestPriority != NULL)
        *greatestPriority = CUSW_GREATEST_STREAM_PRIORITY;
    return rc;
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

/* ---- Limits and cache configuration ---------------------------------------------------------- */

/* A context's limits are kept and read back; they limit nothing, since no device code runs.
 * A limit of a feature the device lacks (compute instance graphics, CIG) is unsupported, as on a
 * device without it; a value that is no limit is invalid. */
static CUresult limit_checked(CUlimit limit)
{
    if ((unsigned int)limit < CUSW_LIMIT_COUNT)
        return CUDA_SUCCESS;
    if (limit <= CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED)
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    return CUDA_ERROR_INVALID_VALUE;
}

CUSW_EXPORT CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    CUSW_INIT_ENTRY();
    if (pvalue == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = limit_checked(limit);
    if (rc != CUDA_SUCCESS)
        return rc;
    cusw_lock_acquire();
    struct cusw_ctx *c = NULL;
    rc = cusw_ctx_current(&c);
    if (rc == CUDA_SUCCESS)
        *pvalue = c->limits[limit];
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    CUSW_INIT_ENTRY();
    CUresult rc = limit_checked(limit);
    if (rc != CUDA_SUCCESS)
        return rc;
    int persisting_max = 0;
    if (limit == CU_LIMIT_PERSISTING_L2_CACHE_SIZE &&
        cusw_device_attribute(0, CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE,
                              &persisting_max) &&
        value > (size_t)persisting_max)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_ctx *c = NULL;
    rc = cusw_ctx_current(&c);
    if (rc == CUDA_SUCCESS)
        c->limits[limit] = value;
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuCtxGetCacheConfig(CUfunc_cache *pconfig)
{
    CUSW_INIT_ENTRY();
    if (pconfig == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_ctx *c = NULL;
    CUresult rc = cusw_ctx_current(&c);
    if (rc == CUDA_SUCCESS)
        *pconfig = c->cache_config;
    cusw_lock_release();
    return rc;
}

/* Kept and read back: a preference the device may ignore, as the real one may. */
CUSW_EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
    CUSW_INIT_ENTRY();
    if ((unsigned int)config > CU_FUNC_CACHE_PREFER_EQUAL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_ctx *c = NULL;
    CUresult rc = cusw_ctx_current(&c);
    if (rc == CUDA_SUCCESS)
        c->cache_config = config;
    cusw_lock_release();
    return rc;
}

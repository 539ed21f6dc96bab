/*
 * fresh_contexts.c - fresh contexts (control API): a context of a device beside its primary
 * context, so that a test can fail it on purpose (cuswSetStickyError, cuswLaunchFault) while the
 * other tests of the process go on, in parallel, on the primary context.
 *
 * Why a fresh context rather than a reset of the failed one: on the real driver a sticky error
 * never clears for the process, and cuda-host remembers a failed context by its handle for the
 * life of the process (it reclaims the context's host functions and never runs one of it again).
 * A reset that kept the handle would leave the context unusable to cuda-host; a reset that gave
 * the primary context a new handle cannot be squared with cuDevicePrimaryCtxRelease, which names
 * the device, not the handle, while other tests still hold the context. A fresh context has a
 * handle no context had before.
 *
 * A fresh context is a primary context in all but its making: it has its own legacy stream,
 * per-thread streams, events, allocations (from its device's memory) and sticky error; host
 * functions of every context share the one host-function thread. Destroying it does what the last
 * release of a primary context does (context.c), then retires it:
 *  - its handle answers CUDA_ERROR_INVALID_CONTEXT at once, and a thread that still has it
 *    current gets CUDA_ERROR_CONTEXT_IS_DESTROYED until it makes another context current;
 *  - its streams are destroyed and drain first: pending work still runs, host functions too
 *    unless the context failed (then they are skipped and stream callbacks get the error), and
 *    waits on memory give up; so a host function or callback in flight has returned when the
 *    destroy does. (Called from one of the context's own host functions or callbacks, the
 *    destroy would wait for itself: callers must not.)
 *  - then its events are destroyed and its allocations freed.
 * Its struct is never freed, since a thread may still have it current (model/context.c keeps
 * every context made); the slot its per-thread streams are found by is reused.
 */
#include "internal.h"

/* [locked] Which slots a live fresh context holds. */
static bool slot_taken[CUSW_MAX_FRESH_CONTEXTS];

/* [locked] Made as cuCtxCreate makes a context (model/context.c, model/activation.c), with a slot
 * of its own. */
static CUresult create(CUdevice dev, CUcontext *pctx)
{
    size_t slot = 0;
    while (slot < CUSW_MAX_FRESH_CONTEXTS && slot_taken[slot])
        slot++;
    if (slot == CUSW_MAX_FRESH_CONTEXTS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct cusw_ctx *c = cusw_ctx_new(dev, CU_CTX_SCHED_AUTO);
    if (c == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->fresh_slot = (unsigned int)slot + 1;
    CUresult rc = cusw_ctx_activate(c);
    if (rc != CUDA_SUCCESS) {
        cusw_ctx_destroy(c);
        return rc;
    }
    slot_taken[slot] = true;
    *pctx = (CUcontext)c->handle;
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuswFreshContextCreate(CUcontext *pctx, CUdevice dev)
{
    CUSW_INIT_ENTRY();
    CUresult rc = cusw_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    rc = create(dev, pctx);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuswFreshContextDestroy(CUcontext ctx)
{
    CUSW_INIT_ENTRY();
    CUresult rc = CUDA_SUCCESS;
    cusw_lock_acquire();
    struct cusw_ctx *c = cusw_handle_get((uintptr_t)ctx, CUSW_KIND_CONTEXT);
    /* A primary context is released, never destroyed. */
    if (c == NULL || c->fresh_slot == 0)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    else {
        /* As a primary context's last release, then the slot is given back. */
        cusw_ctx_destroy(c);
        slot_taken[c->fresh_slot - 1] = false;
    }
    cusw_lock_release();
    return rc;
}

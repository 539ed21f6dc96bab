/*
 * activation.c - a context's activation, which makes its legacy stream, and its deactivation,
 * which destroys its streams (once they have drained: pending work still runs to completion, as
 * on a device), its events, its allocations and its modules. A primary context is activated by its first
 * retain and deactivated by its last release; nothing may activate it again while a
 * deactivation, which lets go of the lock while streams drain, is under way. A context
 * cuCtxCreate made is activated as it is made and deactivated by cuCtxDestroy, for good.
 */
#include "internal.h"

/* [locked] */
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
    /* The allocations pending work uses are freed only after it has drained. Workers unlink
     * their stream and broadcast when they exit. */
    while (c->streams != NULL)
        cusw_wait_progress();
    while (c->events != NULL)
        cusw_event_destroy(c->events);
    cusw_memory_release_context(c);
    cusw_modules_release_context(c);
    atomic_store(&c->tearing_down, false);
    cusw_broadcast_progress();
}

CUresult cusw_ctx_activate(struct cusw_ctx *c)
{
    c->legacy = cusw_stream_create(c, CUSW_STREAM_LEGACY, 0);
    if (c->legacy == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->active = true;
    return CUDA_SUCCESS;
}

CUresult cusw_primary_ctx_retain(struct cusw_ctx *c)
{
    wait_teardown(c);
    CUresult rc = cusw_ctx_sticky(c);
    if (rc == CUDA_SUCCESS && !c->active)
        rc = cusw_ctx_activate(c);
    if (rc == CUDA_SUCCESS)
        c->retain_count++;
    return rc;
}

CUresult cusw_primary_ctx_release(struct cusw_ctx *c)
{
    wait_teardown(c);
    if (c->retain_count == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (--c->retain_count == 0 && c->active)
        deactivate(c); /* succeeds also with a sticky error, as measured */
    return CUDA_SUCCESS;
}

void cusw_ctx_destroy(struct cusw_ctx *c)
{
    cusw_handle_remove(c->handle); /* the value stays: cuCtxGetCurrent still tells it */
    wait_teardown(c);
    if (c->active)
        deactivate(c);
}

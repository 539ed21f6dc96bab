/*
 * streams.c - Stream Management: cuStreamCreate, cuStreamCreateWithPriority, cuStreamDestroy_v2,
 * cuStreamSynchronize, cuStreamQuery, cuStreamGetCtx (both ABIs), cuStreamGetId,
 * cuStreamGetPriority, cuStreamGetFlags, cuStreamWaitEvent, cuStreamAttachMemAsync.
 */
#include "internal.h"

static CUresult create(CUstream *phStream, unsigned int Flags, int priority)
{
    if (phStream == NULL || (Flags & ~(unsigned int)CU_STREAM_NON_BLOCKING) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_ctx *ctx = NULL;
    CUresult rc = cusw_ctx_current(&ctx);
    if (rc == CUDA_SUCCESS) {
        struct cusw_stream *s = cusw_stream_create(ctx, CUSW_STREAM_USER, Flags);
        if (s == NULL) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            s->priority = priority;
            *phStream = (CUstream)s->handle;
        }
    }
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    CUSW_INIT_ENTRY();
    return create(phStream, Flags, 0);
}

/* As documented, a priority outside cuCtxGetStreamPriorityRange's is clamped to it. */
CUSW_EXPORT CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags,
                                                int priority)
{
    CUSW_INIT_ENTRY();
    if (priority > CUSW_LEAST_STREAM_PRIORITY)
        priority = CUSW_LEAST_STREAM_PRIORITY;
    if (priority < CUSW_GREATEST_STREAM_PRIORITY)
        priority = CUSW_GREATEST_STREAM_PRIORITY;
    return create(phStream, flags, priority);
}

CUSW_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
    CUSW_INIT_ENTRY();
    CUresult rc = CUDA_SUCCESS;
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    if (hStream != NULL && hStream != CU_STREAM_LEGACY && hStream != CU_STREAM_PER_THREAD)
        s = cusw_handle_get((uintptr_t)hStream, CUSW_KIND_STREAM);
    if (s == NULL) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else {
        /* Returns at once; pending work still runs. With a sticky error the call answers the
         * error, but the stream is destroyed all the same so that nothing leaks. */
        rc = cusw_ctx_sticky(s->ctx);
        cusw_stream_destroy(s);
    }
    cusw_lock_release();
    return rc;
}

/* Synchronize (`wait`) or query a stream. */
static CUresult finish_or_query(CUstream hStream, bool per_thread, bool wait)
{
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    CUresult rc = cusw_stream_resolve(hStream, per_thread, &s);
    if (rc == CUDA_SUCCESS)
        rc = cusw_capture_check_sync(s);
    if (rc == CUDA_SUCCESS && wait) {
        cusw_stream_drain(s);
        rc = cusw_ctx_sticky(s->ctx);
    } else if (rc == CUDA_SUCCESS && cusw_stream_pending(s)) {
        rc = CUDA_ERROR_NOT_READY;
    }
    cusw_lock_release();
    return rc;
}

CUSW_TWINS(cuStreamSynchronize, (CUstream hStream), finish_or_query(hStream, per_thread, true))
CUSW_TWINS(cuStreamQuery, (CUstream hStream), finish_or_query(hStream, per_thread, false))

/* The stream's context, and for the _v2 form its green context: this driver has none. */
static CUresult get_ctx(CUstream hStream, bool per_thread, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
    if (pCtx == NULL && pGreenCtx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    CUresult rc = cusw_stream_resolve(hStream, per_thread, &s);
    if (rc == CUDA_SUCCESS && pCtx != NULL)
        *pCtx = (CUcontext)s->ctx->handle;
    if (rc == CUDA_SUCCESS && pGreenCtx != NULL)
        *pGreenCtx = NULL;
    cusw_lock_release();
    return rc;
}

CUSW_TWINS(cuStreamGetCtx, (CUstream hStream, CUcontext *pctx),
           get_ctx(hStream, per_thread, pctx, NULL))

CUSW_TWINS(cuStreamGetCtx_v2, (CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx),
           get_ctx(hStream, per_thread, pCtx, pGreenCtx))

static CUresult get_id(CUstream hStream, bool per_thread, unsigned long long *streamId)
{
    if (streamId == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    CUresult rc = cusw_stream_resolve(hStream, per_thread, &s);
    if (rc == CUDA_SUCCESS)
        *streamId = s->id;
    cusw_lock_release();
    return rc;
}

CUSW_TWINS(cuStreamGetId, (CUstream hStream, unsigned long long *streamId),
           get_id(hStream, per_thread, streamId))

/* The priority or the flags a stream was created with. */
static CUresult get_priority_or_flags(CUstream hStream, bool per_thread, int *priority,
                                      unsigned int *flags)
{
    if (priority == NULL && flags == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    CUresult rc = cusw_stream_resolve(hStream, per_thread, &s);
    if (rc == CUDA_SUCCESS && priority != NULL)
        *priority = s->priority;
    if (rc == CUDA_SUCCESS && flags != NULL)
        *flags = s->flags;
    cusw_lock_release();
    return rc;
}

CUSW_TWINS(cuStreamGetPriority, (CUstream hStream, int *priority),
           get_priority_or_flags(hStream, per_thread, priority, NULL))
CUSW_TWINS(cuStreamGetFlags, (CUstream hStream, unsigned int *flags),
           get_priority_or_flags(hStream, per_thread, NULL, flags))

/* Waiting on an event adds a barrier operation that depends on the recorded point; waiting on an
 * event recorded in a capture forks or joins the stream into that capture. */
static CUresult wait_event(CUstream hStream, bool per_thread, CUevent hEvent, unsigned int Flags)
{
    if ((Flags & ~(unsigned int)CU_EVENT_WAIT_EXTERNAL) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    struct cusw_event *e = NULL;
    bool capturing = false;
    CUresult rc = cusw_stream_resolve(hStream, per_thread, &s);
    if (rc == CUDA_SUCCESS) {
        /* The event may belong to another context; only the handle must be valid. */
        e = cusw_handle_get((uintptr_t)hEvent, CUSW_KIND_EVENT);
        if (e == NULL)
            rc = CUDA_ERROR_INVALID_HANDLE;
    }
    if (rc == CUDA_SUCCESS)
        rc = cusw_capture_check_enqueue(s, &capturing);
    struct cusw_capture *event_capture = rc == CUDA_SUCCESS ? cusw_capture_of_event(e) : NULL;
    if (event_capture != NULL) {
        /* Fork into, or join within, the capture the event was recorded in. */
        if (s->kind == CUSW_STREAM_LEGACY) {
            cusw_capture_invalidate(event_capture);
            rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        } else if (s->capture != NULL && s->capture != event_capture) {
            rc = CUDA_ERROR_STREAM_CAPTURE_MERGE;
        } else {
            rc = cusw_capture_join(event_capture, s, e->cap_nodes, e->n_cap_nodes);
        }
    } else if (rc == CUDA_SUCCESS && capturing) {
        /* A dependency on work outside the capture cannot be expressed in the graph. External
         * event wait nodes are not modelled. */
        if (Flags & CU_EVENT_WAIT_EXTERNAL) {
            rc = CUDA_ERROR_NOT_SUPPORTED;
        } else {
            cusw_capture_invalidate(s->capture);
            rc = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
        }
    } else if (rc == CUDA_SUCCESS && !cusw_event_complete(e)) {
        struct cusw_dep dep = { e->stream, e->seq };
        struct cusw_action barrier = { .kind = CUSW_ACT_NOP };
        rc = cusw_stream_enqueue(s, &barrier, &dep, 1);
    }
    cusw_lock_release();
    return rc;
}

CUSW_TWINS(cuStreamWaitEvent, (CUstream hStream, CUevent hEvent, unsigned int Flags),
           wait_event(hStream, per_thread, hEvent, Flags))

/* Attaching managed memory to a stream is an operation of the stream that changes nothing: every
 * stream reaches managed memory here (api/memory.c). As documented, a single stream's attachment
 * needs a stream of its own, not the null stream; a range that is not managed memory is refused. */
static CUresult attach(CUstream hStream, bool per_thread, CUdeviceptr dptr, size_t length,
                       unsigned int flags)
{
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST &&
        flags != CU_MEM_ATTACH_SINGLE)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags == CU_MEM_ATTACH_SINGLE && (hStream == NULL || hStream == CU_STREAM_LEGACY))
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    /* A length of 0 attaches the whole allocation. */
    bool managed = cusw_memory_is_managed((void *)(uintptr_t)dptr, length != 0 ? length : 1);
    cusw_lock_release();
    if (!managed)
        return CUDA_ERROR_INVALID_VALUE;
    struct cusw_action a = { .kind = CUSW_ACT_NOP };
    return cusw_submit(hStream, per_thread, &a);
}

CUSW_TWINS(cuStreamAttachMemAsync,
           (CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags),
           attach(hStream, per_thread, dptr, length, flags))

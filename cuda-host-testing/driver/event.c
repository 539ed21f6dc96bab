/*
 * event.c - events and cuStreamWaitEvent.
 *
 * Recording an event enqueues an operation on the stream; the event then stands for "that stream
 * has completed that operation" (stream, sequence number). The operation stamps the time when the
 * stream reaches it, for cuEventElapsedTime. Waiting on an event adds a barrier operation that
 * depends on the recorded point. An event recorded in a capturing stream instead remembers the
 * capture's current dependency nodes, so that waiting on it from another stream forks or joins
 * that stream into the capture (the standard multi-stream capture pattern).
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static void forget_record(struct cusw_event *e)
{
    if (e->stream != NULL)
        cusw_stream_unref(e->stream);
    e->stream = NULL;
    e->seq = 0;
    e->stamped = false;
    free(e->cap_nodes);
    e->cap_nodes = NULL;
    e->n_cap_nodes = 0;
    e->capture_id = 0;
}

void cusw_event_unref(struct cusw_event *e)
{
    if (--e->refs != 0)
        return;
    forget_record(e);
    free(e);
}

void cusw_event_destroy(struct cusw_event *e)
{
    if (e->handle == 0)
        return;
    cusw_handle_remove(e->handle);
    e->handle = 0;
    if (e->ctx_prev != NULL)
        e->ctx_prev->ctx_next = e->ctx_next;
    else
        e->ctx->events = e->ctx_next;
    if (e->ctx_next != NULL)
        e->ctx_next->ctx_prev = e->ctx_prev;
    cusw_event_unref(e); /* pending record operations keep it alive until they have run */
}

/* [locked] Looks the event up and checks its context. */
static CUresult event_checked(CUevent handle, struct cusw_event **out)
{
    struct cusw_event *e = cusw_handle_get((uintptr_t)handle, CUSW_KIND_EVENT);
    if (e == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult rc = cusw_ctx_check(e->ctx);
    if (rc == CUDA_SUCCESS)
        *out = e;
    return rc;
}

/* [locked] Recorded inside a capture that is still going on. */
static struct cusw_capture *live_capture_of(const struct cusw_event *e)
{
    return e->capture_id != 0 ? cusw_capture_find(e->capture_id) : NULL;
}

static bool complete(const struct cusw_event *e)
{
    return e->stream == NULL || e->stream->completed >= e->seq;
}

CUSW_EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    CUSW_INIT_ENTRY();
    const unsigned int supported = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING;
    /* Interprocess events need a second process to make sense; this driver has no IPC. */
    if (phEvent == NULL || (Flags & ~supported) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_ctx *ctx = NULL;
    CUresult rc = cusw_ctx_current(&ctx);
    struct cusw_event *e = NULL;
    if (rc == CUDA_SUCCESS) {
        e = calloc(1, sizeof *e);
        if (e == NULL || (e->handle = cusw_handle_new(CUSW_KIND_EVENT, e)) == 0) {
            free(e);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (rc == CUDA_SUCCESS) {
        e->ctx = ctx;
        e->flags = Flags;
        e->refs = 1;
        e->ctx_next = ctx->events;
        if (ctx->events != NULL)
            ctx->events->ctx_prev = e;
        ctx->events = e;
        *phEvent = (CUevent)e->handle;
    }
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuEventDestroy_v2(CUevent hEvent)
{
    CUSW_INIT_ENTRY();
    CUresult rc = CUDA_SUCCESS;
    cusw_lock_acquire();
    struct cusw_event *e = cusw_handle_get((uintptr_t)hEvent, CUSW_KIND_EVENT);
    if (e == NULL) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else {
        rc = cusw_ctx_sticky(e->ctx); /* reported, but the event is released regardless */
        cusw_event_destroy(e);
    }
    cusw_lock_release();
    return rc;
}

static CUresult record(CUevent hEvent, CUstream hStream, bool per_thread)
{
    cusw_lock_acquire();
    struct cusw_event *e = NULL;
    struct cusw_stream *s = NULL;
    bool capturing = false;
    CUresult rc = event_checked(hEvent, &e);
    if (rc == CUDA_SUCCESS)
        rc = cusw_stream_resolve(hStream, per_thread, &s);
    if (rc == CUDA_SUCCESS)
        rc = cusw_capture_check_enqueue(s, &capturing);
    if (rc == CUDA_SUCCESS && capturing) {
        struct cusw_node **nodes = NULL;
        if (s->n_cap_deps > 0 && (nodes = malloc(s->n_cap_deps * sizeof *nodes)) == NULL) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            forget_record(e);
            if (s->n_cap_deps > 0)
                memcpy(nodes, s->cap_deps, s->n_cap_deps * sizeof *nodes);
            e->cap_nodes = nodes;
            e->n_cap_nodes = s->n_cap_deps;
            e->capture_id = s->capture->id;
        }
    } else if (rc == CUDA_SUCCESS) {
        struct cusw_action a = { .kind = CUSW_ACT_EVENT_RECORD,
                                 .u.record = { e, e->generation + 1 } };
        rc = cusw_stream_enqueue(s, &a, NULL, 0);
        if (rc == CUDA_SUCCESS) {
            forget_record(e);
            e->generation++;
            e->refs++; /* the record operation's */
            cusw_stream_ref(s);
            e->stream = s;
            e->seq = s->enqueued;
        }
    }
    cusw_lock_release();
    return rc;
}

CUSW_TWINS(cuEventRecord, (CUevent hEvent, CUstream hStream), record(hEvent, hStream, per_thread))

/* [locked] event_checked, and not recorded in a capture still going on: for queries and waits. */
static CUresult event_outside_capture(CUevent handle, struct cusw_event **out)
{
    CUresult rc = event_checked(handle, out);
    return rc == CUDA_SUCCESS && live_capture_of(*out) != NULL ? CUDA_ERROR_CAPTURED_EVENT : rc;
}

/* Measured: a query of an event a capture took answers CUDA_ERROR_CAPTURED_EVENT and invalidates
 * that capture, whatever the modes; a query of another event is a potentially unsafe call. */
CUSW_EXPORT CUresult cuEventQuery(CUevent hEvent)
{
    CUSW_INIT_ENTRY();
    cusw_lock_acquire();
    struct cusw_event *e = NULL;
    CUresult rc = event_checked(hEvent, &e);
    struct cusw_capture *taken = rc == CUDA_SUCCESS ? live_capture_of(e) : NULL;
    if (taken != NULL) {
        cusw_capture_invalidate(taken);
        rc = CUDA_ERROR_CAPTURED_EVENT;
    }
    if (rc == CUDA_SUCCESS)
        rc = cusw_capture_check_unsafe();
    if (rc == CUDA_SUCCESS && !complete(e))
        rc = CUDA_ERROR_NOT_READY;
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuEventSynchronize(CUevent hEvent)
{
    CUSW_INIT_ENTRY();
    cusw_lock_acquire();
    struct cusw_event *e = NULL;
    CUresult rc = event_outside_capture(hEvent, &e);
    if (rc == CUDA_SUCCESS && e->stream != NULL) {
        /* Wait for the point recorded now, even if the event is re-recorded meanwhile. */
        struct cusw_stream *s = e->stream;
        uint64_t seq = e->seq;
        struct cusw_ctx *ctx = e->ctx;
        cusw_stream_ref(s);
        while (s->completed < seq)
            cusw_wait_progress();
        cusw_stream_unref(s);
        rc = cusw_ctx_sticky(ctx);
    }
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    CUSW_INIT_ENTRY();
    if (pMilliseconds == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_event *start = NULL, *end = NULL;
    CUresult rc = event_checked(hStart, &start);
    if (rc == CUDA_SUCCESS)
        rc = event_checked(hEnd, &end);
    if (rc == CUDA_SUCCESS) {
        if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING)
            rc = CUDA_ERROR_INVALID_HANDLE;
        else if (start->stream == NULL || end->stream == NULL) /* never recorded */
            rc = CUDA_ERROR_INVALID_HANDLE;
        else if (!complete(start) || !complete(end))
            rc = CUDA_ERROR_NOT_READY;
        else
            *pMilliseconds = (float)(end->stamp_ms - start->stamp_ms);
    }
    cusw_lock_release();
    return rc;
}

/* ---- cuStreamWaitEvent ----------------------------------------------------------------------- */

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
    struct cusw_capture *event_capture = rc == CUDA_SUCCESS ? live_capture_of(e) : NULL;
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
    } else if (rc == CUDA_SUCCESS && e->stream != NULL && !complete(e)) {
        struct cusw_dep dep = { e->stream, e->seq };
        struct cusw_action barrier = { .kind = CUSW_ACT_NOP };
        rc = cusw_stream_enqueue(s, &barrier, &dep, 1);
    }
    cusw_lock_release();
    return rc;
}

CUSW_TWINS(cuStreamWaitEvent, (CUstream hStream, CUevent hEvent, unsigned int Flags),
           wait_event(hStream, per_thread, hEvent, Flags))

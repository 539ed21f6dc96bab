/*
 * events.c - Event Management: cuEventCreate, cuEventDestroy_v2, cuEventRecord, cuEventQuery,
 * cuEventSynchronize, cuEventElapsedTime_v2. What an event stands for is model/event.c's.
 */
#include "internal.h"

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
    if (rc == CUDA_SUCCESS) {
        struct cusw_event *e = cusw_event_new(ctx, Flags);
        if (e == NULL)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else
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
        rc = cusw_event_recorded_in_capture(e, s);
    } else if (rc == CUDA_SUCCESS) {
        struct cusw_action a = cusw_event_record_action(e);
        rc = cusw_stream_enqueue(s, &a, NULL, 0);
        if (rc == CUDA_SUCCESS)
            cusw_event_recorded(e, s);
    }
    cusw_lock_release();
    return rc;
}

CUSW_TWINS(cuEventRecord, (CUevent hEvent, CUstream hStream), record(hEvent, hStream, per_thread))

/* Measured: a query of an event a capture took answers CUDA_ERROR_CAPTURED_EVENT and invalidates
 * that capture, whatever the modes; a query of another event is a potentially unsafe call. */
CUSW_EXPORT CUresult cuEventQuery(CUevent hEvent)
{
    CUSW_INIT_ENTRY();
    cusw_lock_acquire();
    struct cusw_event *e = NULL;
    CUresult rc = event_checked(hEvent, &e);
    struct cusw_capture *taken = rc == CUDA_SUCCESS ? cusw_capture_of_event(e) : NULL;
    if (taken != NULL) {
        cusw_capture_invalidate(taken);
        rc = CUDA_ERROR_CAPTURED_EVENT;
    }
    if (rc == CUDA_SUCCESS)
        rc = cusw_capture_check_unsafe();
    if (rc == CUDA_SUCCESS && !cusw_event_complete(e))
        rc = CUDA_ERROR_NOT_READY;
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuEventSynchronize(CUevent hEvent)
{
    CUSW_INIT_ENTRY();
    cusw_lock_acquire();
    struct cusw_event *e = NULL;
    CUresult rc = event_checked(hEvent, &e);
    if (rc == CUDA_SUCCESS && cusw_capture_of_event(e) != NULL)
        rc = CUDA_ERROR_CAPTURED_EVENT; /* recorded in a capture still going on */
    if (rc == CUDA_SUCCESS && e->stream != NULL) {
        struct cusw_ctx *ctx = e->ctx;
        cusw_event_wait(e);
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
        else if (!cusw_event_complete(start) || !cusw_event_complete(end))
            rc = CUDA_ERROR_NOT_READY;
        else
            *pMilliseconds = (float)(end->stamp_ms - start->stamp_ms);
    }
    cusw_lock_release();
    return rc;
}

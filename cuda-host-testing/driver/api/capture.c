/*
 * capture.c - Stream Management, stream capture: cuStreamBeginCapture_v2, cuStreamEndCapture,
 * cuStreamIsCapturing, cuStreamGetCaptureInfo_v3, cuThreadExchangeStreamCaptureMode. What a
 * capture records, and which calls it allows, is model/capture.c's.
 */
#include "internal.h"

static bool valid_mode(CUstreamCaptureMode mode)
{
    return mode == CU_STREAM_CAPTURE_MODE_GLOBAL || mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ||
           mode == CU_STREAM_CAPTURE_MODE_RELAXED;
}

static CUresult begin_capture(CUstream hStream, bool per_thread, CUstreamCaptureMode mode)
{
    if (!valid_mode(mode))
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    CUresult rc = cusw_stream_resolve(hStream, per_thread, &s);
    if (rc == CUDA_SUCCESS)
        rc = cusw_capture_begin(s, mode);
    cusw_lock_release();
    return rc;
}

CUSW_TWINS(cuStreamBeginCapture_v2, (CUstream hStream, CUstreamCaptureMode mode),
           begin_capture(hStream, per_thread, mode))

static CUresult end_capture(CUstream hStream, bool per_thread, CUgraph *phGraph)
{
    if (phGraph == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    CUresult rc = cusw_stream_resolve(hStream, per_thread, &s);
    if (rc == CUDA_SUCCESS)
        rc = cusw_capture_end(s, phGraph);
    cusw_lock_release();
    return rc;
}

CUSW_TWINS(cuStreamEndCapture, (CUstream hStream, CUgraph *phGraph),
           end_capture(hStream, per_thread, phGraph))

/* [locked] The stream a capture-state query names: the legacy stream while a blocking stream of
 * its context captures answers CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, but asking invalidates
 * nothing (measured). */
static CUresult queried_stream(CUstream hStream, bool per_thread, struct cusw_stream **s)
{
    CUresult rc = cusw_stream_resolve(hStream, per_thread, s);
    if (rc != CUDA_SUCCESS)
        return rc;
    return cusw_capture_implicit(*s) ? CUDA_ERROR_STREAM_CAPTURE_IMPLICIT : CUDA_SUCCESS;
}

static CUresult is_capturing(CUstream hStream, bool per_thread, CUstreamCaptureStatus *status)
{
    if (status == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    CUresult rc = queried_stream(hStream, per_thread, &s);
    if (rc == CUDA_SUCCESS)
        *status = cusw_capture_status(s);
    cusw_lock_release();
    return rc;
}

CUSW_TWINS(cuStreamIsCapturing, (CUstream hStream, CUstreamCaptureStatus *captureStatus),
           is_capturing(hStream, per_thread, captureStatus))

static CUresult get_capture_info(CUstream hStream, bool per_thread,
                                 CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
                                 CUgraph *graph_out, const CUgraphNode **dependencies_out,
                                 const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
    if (captureStatus_out == NULL || (edgeData_out != NULL && dependencies_out == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    CUresult rc = queried_stream(hStream, per_thread, &s);
    if (rc == CUDA_SUCCESS) {
        *captureStatus_out = cusw_capture_status(s);
        if (s->capture != NULL && id_out != NULL)
            *id_out = s->capture->id;
    }
    /* The rest is only valid while the capture is active, as documented. */
    const CUgraphNode *nodes = NULL;
    const CUgraphEdgeData *edges = NULL;
    if (rc == CUDA_SUCCESS && *captureStatus_out == CU_STREAM_CAPTURE_STATUS_ACTIVE)
        rc = cusw_capture_dependencies(s, &nodes, &edges);
    if (rc == CUDA_SUCCESS && *captureStatus_out == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        if (graph_out != NULL)
            *graph_out = (CUgraph)s->capture->graph->handle;
        if (dependencies_out != NULL)
            *dependencies_out = nodes;
        if (edgeData_out != NULL)
            *edgeData_out = edges;
        if (numDependencies_out != NULL)
            *numDependencies_out = s->n_cap_deps;
    }
    cusw_lock_release();
    return rc;
}

CUSW_TWINS(cuStreamGetCaptureInfo_v3,
           (CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
            CUgraph *graph_out, const CUgraphNode **dependencies_out,
            const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out),
           get_capture_info(hStream, per_thread, captureStatus_out, id_out, graph_out,
                            dependencies_out, edgeData_out, numDependencies_out))

CUSW_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    CUSW_INIT_ENTRY();
    if (mode == NULL || !valid_mode(*mode))
        return CUDA_ERROR_INVALID_VALUE;
    *mode = cusw_capture_exchange_mode(*mode);
    return CUDA_SUCCESS;
}

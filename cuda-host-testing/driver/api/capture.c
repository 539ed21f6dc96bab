/*
 * capture.c - Stream Management, stream capture: cuStreamBeginCapture_v2,
 * cuStreamBeginCaptureToGraph, cuStreamBeginRecaptureToGraph, cuStreamEndCapture,
 * cuStreamIsCapturing, cuStreamGetCaptureInfo_v3, cuThreadExchangeStreamCaptureMode. What a
 * capture records, and which calls it allows, is model/capture.c's.
 */
#include "internal.h"

#include <stdlib.h>

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

/* A graph being built by another capture answers CUDA_ERROR_ILLEGAL_STATE, as a stream already
 * capturing does (not measured). */
static CUresult begin_capture_to_graph(CUstream hStream, bool per_thread, CUgraph hGraph,
                                       const CUgraphNode *dependencies,
                                       const CUgraphEdgeData *dependencyData,
                                       size_t numDependencies, CUstreamCaptureMode mode)
{
    if (!valid_mode(mode) || !cusw_edges_default(dependencyData, numDependencies))
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    struct cusw_graph *g = cusw_handle_get((uintptr_t)hGraph, CUSW_KIND_GRAPH);
    struct cusw_node **deps = NULL;
    CUresult rc = cusw_stream_resolve(hStream, per_thread, &s);
    if (rc == CUDA_SUCCESS)
        rc = g == NULL ? CUDA_ERROR_INVALID_VALUE
                       : cusw_graph_nodes_of(g, dependencies, numDependencies, &deps);
    if (rc == CUDA_SUCCESS)
        rc = cusw_capture_begin_to_graph(s, mode, g, deps, numDependencies);
    cusw_lock_release();
    free(deps);
    return rc;
}

CUSW_TWINS(cuStreamBeginCaptureToGraph,
           (CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
            const CUgraphEdgeData *dependencyData, size_t numDependencies,
            CUstreamCaptureMode mode),
           begin_capture_to_graph(hStream, per_thread, hGraph, dependencies, dependencyData,
                                  numDependencies, mode))

/* The callback may be NULL: as documented, mismatches "can be configured" to call it (not
 * measured). */
static CUresult begin_recapture(CUstream hStream, bool per_thread, CUstreamCaptureMode mode,
                                CUgraph hGraph, CUgraphRecaptureCallback callbackFunc,
                                void *userData)
{
    if (!valid_mode(mode))
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    struct cusw_graph *g = cusw_handle_get((uintptr_t)hGraph, CUSW_KIND_GRAPH);
    CUresult rc = cusw_stream_resolve(hStream, per_thread, &s);
    if (rc == CUDA_SUCCESS && g == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = cusw_capture_begin_recapture(s, mode, g, callbackFunc, userData);
    cusw_lock_release(); /* the destructors of the user objects the graph let go of run here */
    return rc;
}

CUSW_TWINS(cuStreamBeginRecaptureToGraph,
           (CUstream hStream, CUstreamCaptureMode mode, CUgraph hGraph,
            CUgraphRecaptureCallback callbackFunc, void *userData),
           begin_recapture(hStream, per_thread, mode, hGraph, callbackFunc, userData))

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

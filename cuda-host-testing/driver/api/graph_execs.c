/*
 * graph_execs.c - Graph Management, executable graphs: cuGraphInstantiateWithFlags,
 * cuGraphLaunch, cuGraphUpload, cuGraphExecDestroy, cuGraphExecHostNodeSetParams,
 * cuGraphExecBatchMemOpNodeSetParams, cuGraphExecUpdate_v2.
 */
#include "internal.h"

/* [locked] */
static struct cusw_exec *exec_of(CUgraphExec handle)
{
    return cusw_handle_get((uintptr_t)handle, CUSW_KIND_EXEC);
}

CUSW_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                 unsigned long long flags)
{
    CUSW_INIT_ENTRY();
    /* Graph memory nodes and node priorities do not exist here, so those flags change nothing.
     * UPLOAD is only valid with cuGraphInstantiateWithParams; device launch is not modelled. */
    const unsigned long long accepted = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                        CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
    if (phGraphExec == NULL || (flags & ~accepted) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_ctx *ctx = NULL;
    struct cusw_exec *x = NULL;
    CUresult rc = cusw_ctx_current(&ctx);
    struct cusw_graph *g = NULL;
    if (rc == CUDA_SUCCESS && (g = cusw_handle_get((uintptr_t)hGraph, CUSW_KIND_GRAPH)) == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = cusw_exec_new(g, ctx, &x);
    if (rc == CUDA_SUCCESS)
        *phGraphExec = (CUgraphExec)cusw_exec_handle(x);
    cusw_lock_release();
    return rc;
}

static CUresult launch(CUgraphExec hGraphExec, CUstream hStream, bool per_thread)
{
    cusw_lock_acquire();
    struct cusw_exec *x = exec_of(hGraphExec);
    struct cusw_stream *s = NULL;
    bool capturing = false;
    CUresult rc = x == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS)
        rc = cusw_stream_resolve(hStream, per_thread, &s);
    if (rc == CUDA_SUCCESS)
        rc = cusw_capture_check_enqueue(s, &capturing);
    if (rc == CUDA_SUCCESS)
        rc = cusw_exec_launch(x, s, capturing);
    cusw_lock_release();
    return rc;
}

CUSW_TWINS(cuGraphLaunch, (CUgraphExec hGraphExec, CUstream hStream),
           launch(hGraphExec, hStream, per_thread))

/* An upload into a capture is refused and invalidates it, as a call the capture cannot record
 * (not measured on the real driver). */
static CUresult upload(CUgraphExec hGraphExec, CUstream hStream, bool per_thread)
{
    cusw_lock_acquire();
    struct cusw_exec *x = exec_of(hGraphExec);
    struct cusw_stream *s = NULL;
    bool capturing = false;
    CUresult rc = x == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS)
        rc = cusw_stream_resolve(hStream, per_thread, &s);
    if (rc == CUDA_SUCCESS)
        rc = cusw_capture_check_enqueue(s, &capturing);
    if (rc == CUDA_SUCCESS && capturing) {
        cusw_capture_invalidate(s->capture);
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (rc == CUDA_SUCCESS)
        rc = cusw_exec_upload(x, s);
    cusw_lock_release();
    return rc;
}

CUSW_TWINS(cuGraphUpload, (CUgraphExec hGraphExec, CUstream hStream),
           upload(hGraphExec, hStream, per_thread))

CUSW_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    CUSW_INIT_ENTRY();
    CUresult rc = CUDA_SUCCESS;
    cusw_lock_acquire();
    struct cusw_exec *x = exec_of(hGraphExec);
    if (x == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        cusw_exec_free(x);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                  const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    CUSW_INIT_ENTRY();
    if (nodeParams == NULL || nodeParams->fn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_exec *x = exec_of(hGraphExec);
    CUresult rc = x == NULL ? CUDA_ERROR_INVALID_VALUE
                            : cusw_exec_set_host_params(x, hNode, nodeParams->fn,
                                                        nodeParams->userData);
    cusw_lock_release();
    return rc;
}

/* As documented, only the operations' addresses and values and a wait's comparison may change;
 * another context, count or operation type answers CUDA_ERROR_INVALID_VALUE. The graph's node
 * keeps its parameters. */
CUSW_EXPORT CUresult
cuGraphExecBatchMemOpNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                   const CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams)
{
    CUSW_INIT_ENTRY();
    cusw_lock_acquire();
    struct cusw_exec *x = exec_of(hGraphExec);
    struct cusw_action a;
    CUresult rc = x == NULL ? CUDA_ERROR_INVALID_VALUE : cusw_batch_params_action(nodeParams, &a);
    if (rc == CUDA_SUCCESS) {
        rc = cusw_exec_set_batch_params(x, hNode, &a);
        cusw_action_release(&a);
    }
    cusw_lock_release();
    return rc;
}

/* As documented: resultInfo->result is CU_GRAPH_EXEC_UPDATE_ERROR for an invalid value, and
 * CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE answers an update refused for the graph it was given
 * (model/exec.c says which checks and results are modelled). A NULL resultInfo, which the
 * documentation does not allow, answers CUDA_ERROR_INVALID_VALUE (not measured on the real
 * driver); so does a graph still being captured. The update takes no context: it may be made
 * while the executable's launches are in flight. */
CUSW_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                          CUgraphExecUpdateResultInfo *resultInfo)
{
    CUSW_INIT_ENTRY();
    if (resultInfo == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_exec *x = exec_of(hGraphExec);
    struct cusw_graph *g = cusw_handle_get((uintptr_t)hGraph, CUSW_KIND_GRAPH);
    CUresult rc;
    if (x == NULL || g == NULL || g->capture != NULL) {
        resultInfo->result = CU_GRAPH_EXEC_UPDATE_ERROR;
        resultInfo->errorNode = resultInfo->errorFromNode = NULL;
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        rc = cusw_exec_update(x, g, resultInfo);
    }
    cusw_lock_release();
    return rc;
}

/*
 * graphs.c - Graph Management, graphs and their nodes: cuGraphCreate, cuGraphDestroy,
 * cuGraphAddHostNode, cuGraphAddDependencies_v2, cuGraphGetNodes, cuGraphNodeGetType,
 * cuGraphClone, cuGraphHostNodeGetParams, cuGraphHostNodeSetParams, cuGraphAddBatchMemOpNode,
 * cuGraphBatchMemOpNodeGetParams, cuGraphBatchMemOpNodeSetParams.
 */
#include "internal.h"

#include <stdlib.h>

/* [locked] */
static struct cusw_graph *graph_of(CUgraph handle)
{
    return cusw_handle_get((uintptr_t)handle, CUSW_KIND_GRAPH);
}

/* [locked] */
static struct cusw_node *node_of(CUgraphNode handle)
{
    return cusw_handle_get((uintptr_t)handle, CUSW_KIND_NODE);
}

/* [locked] Adds a node for `a` (the node holds a copy of its own). */
static CUresult add_node(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                         size_t numDependencies, const struct cusw_action *a)
{
    struct cusw_graph *g = graph_of(hGraph);
    struct cusw_node **deps = NULL;
    CUresult rc = g == NULL ? CUDA_ERROR_INVALID_VALUE
                            : cusw_graph_nodes_of(g, dependencies, numDependencies, &deps);
    if (rc == CUDA_SUCCESS) {
        struct cusw_node *n = cusw_graph_add_node(g, a, deps, numDependencies);
        if (n == NULL)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else
            *phGraphNode = (CUgraphNode)n->handle;
    }
    free(deps);
    return rc;
}

CUSW_EXPORT CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    CUSW_INIT_ENTRY();
    CUresult rc = CUDA_SUCCESS;
    if (phGraph == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_graph *g = cusw_graph_new();
    if (g == NULL)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    else
        *phGraph = (CUgraph)g->handle;
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuGraphDestroy(CUgraph hGraph)
{
    CUSW_INIT_ENTRY();
    CUresult rc = CUDA_SUCCESS;
    cusw_lock_acquire();
    struct cusw_graph *g = graph_of(hGraph);
    if (g == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (g->capture != NULL)
        rc = CUDA_ERROR_ILLEGAL_STATE; /* owned by its capture until cuStreamEndCapture */
    else
        cusw_graph_free(g);
    cusw_lock_release();
    return rc;
}

static bool valid_host_params(const CUDA_HOST_NODE_PARAMS *p) { return p != NULL && p->fn != NULL; }

CUSW_EXPORT CUresult cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                        const CUgraphNode *dependencies, size_t numDependencies,
                                        const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    CUSW_INIT_ENTRY();
    if (phGraphNode == NULL || !valid_host_params(nodeParams))
        return CUDA_ERROR_INVALID_VALUE;
    struct cusw_action a = { .kind = CUSW_ACT_HOST_FN,
                             .u.host = { nodeParams->fn, nodeParams->userData } };
    cusw_lock_acquire();
    CUresult rc = add_node(phGraphNode, hGraph, dependencies, numDependencies, &a);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from,
                                               const CUgraphNode *to,
                                               const CUgraphEdgeData *edgeData,
                                               size_t numDependencies)
{
    CUSW_INIT_ENTRY();
    CUresult rc = CUDA_SUCCESS;
    if (numDependencies > 0 && (from == NULL || to == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    if (!cusw_edges_default(edgeData, numDependencies))
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_graph *g = graph_of(hGraph);
    if (g == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    /* Validate everything first, so that a failing call adds no edge at all. */
    for (size_t i = 0; rc == CUDA_SUCCESS && i < numDependencies; i++) {
        struct cusw_node *f = node_of(from[i]);
        struct cusw_node *t = node_of(to[i]);
        if (f == NULL || t == NULL || f->graph != g || t->graph != g || f == t ||
            cusw_node_has_dep(t, f))
            rc = CUDA_ERROR_INVALID_VALUE;
        for (size_t j = 0; rc == CUDA_SUCCESS && j < i; j++)
            if (from[j] == from[i] && to[j] == to[i])
                rc = CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; rc == CUDA_SUCCESS && i < numDependencies; i++)
        if (!cusw_node_add_dep(node_of(to[i]), node_of(from[i])))
            rc = CUDA_ERROR_OUT_OF_MEMORY;
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    CUSW_INIT_ENTRY();
    CUresult rc = CUDA_SUCCESS;
    if (numNodes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_graph *g = graph_of(hGraph);
    if (g == NULL) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (nodes == NULL) {
        *numNodes = g->n_nodes;
    } else if (*numNodes == 0) {
        /* The 13.0 driver refuses an array with room for no node (measured on an empty graph). */
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        /* As documented: fill what fits, NULL the rest, report how many were written. */
        size_t k = *numNodes < g->n_nodes ? *numNodes : g->n_nodes;
        for (size_t i = 0; i < *numNodes; i++)
            nodes[i] = i < k ? (CUgraphNode)g->nodes[i]->handle : NULL;
        *numNodes = k;
    }
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
    CUSW_INIT_ENTRY();
    CUresult rc = CUDA_SUCCESS;
    if (type == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_node *n = node_of(hNode);
    if (n == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *type = cusw_action_node_type(&n->action);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
    CUSW_INIT_ENTRY();
    if (phGraphClone == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_graph *g = graph_of(originalGraph), *clone = NULL;
    CUresult rc = g == NULL ? CUDA_ERROR_INVALID_VALUE : cusw_graph_clone(g, &clone);
    if (rc == CUDA_SUCCESS)
        *phGraphClone = (CUgraph)clone->handle;
    cusw_lock_release();
    return rc;
}

/* Sets a host node's parameters from `in`, or reads them into `out`. */
static CUresult host_node_params(CUgraphNode hNode, const CUDA_HOST_NODE_PARAMS *in,
                                 CUDA_HOST_NODE_PARAMS *out)
{
    cusw_lock_acquire();
    struct cusw_node *n = node_of(hNode);
    CUresult rc = CUDA_SUCCESS;
    if (n == NULL || n->action.kind != CUSW_ACT_HOST_FN) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (in != NULL) {
        n->action.u.host.fn = in->fn;
        n->action.u.host.data = in->userData;
    } else {
        out->fn = n->action.u.host.fn;
        out->userData = n->action.u.host.data;
    }
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuGraphHostNodeGetParams(CUgraphNode hNode, CUDA_HOST_NODE_PARAMS *nodeParams)
{
    CUSW_INIT_ENTRY();
    if (nodeParams == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return host_node_params(hNode, NULL, nodeParams);
}

CUSW_EXPORT CUresult cuGraphHostNodeSetParams(CUgraphNode hNode,
                                              const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    CUSW_INIT_ENTRY();
    if (!valid_host_params(nodeParams))
        return CUDA_ERROR_INVALID_VALUE;
    return host_node_params(hNode, nodeParams, NULL);
}

/* As documented, the parameters' operations are copied (the caller may free its array once the
 * call returns) and, read back, point to memory the node owns, valid until its parameters change
 * or it is destroyed. Which operations and parameters are taken: cusw_batch_params_action. */
CUSW_EXPORT CUresult cuGraphAddBatchMemOpNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                              const CUgraphNode *dependencies,
                                              size_t numDependencies,
                                              const CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams)
{
    CUSW_INIT_ENTRY();
    if (phGraphNode == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_action a;
    CUresult rc = cusw_batch_params_action(nodeParams, &a);
    if (rc == CUDA_SUCCESS) {
        rc = add_node(phGraphNode, hGraph, dependencies, numDependencies, &a);
        cusw_action_release(&a);
    }
    cusw_lock_release();
    return rc;
}

/* [locked] The batch node `hNode` names, or NULL. */
static struct cusw_node *batch_node_of(CUgraphNode hNode)
{
    struct cusw_node *n = node_of(hNode);
    return n != NULL && n->action.kind == CUSW_ACT_BATCH ? n : NULL;
}

CUSW_EXPORT CUresult cuGraphBatchMemOpNodeGetParams(CUgraphNode hNode,
                                                    CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams_out)
{
    CUSW_INIT_ENTRY();
    if (nodeParams_out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_node *n = batch_node_of(hNode);
    CUresult rc = n == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS) {
        struct cusw_batch *b = n->action.u.batch;
        *nodeParams_out = (CUDA_BATCH_MEM_OP_NODE_PARAMS){
            .ctx = (CUcontext)b->ctx->handle,
            .count = b->count,
            .paramArray = b->params,
            .flags = 0,
        };
    }
    cusw_lock_release();
    return rc;
}

/* The node's own batch is replaced: its clones, executables and launches keep theirs. */
CUSW_EXPORT CUresult cuGraphBatchMemOpNodeSetParams(CUgraphNode hNode,
                                                    const CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams)
{
    CUSW_INIT_ENTRY();
    cusw_lock_acquire();
    struct cusw_node *n = batch_node_of(hNode);
    struct cusw_action a;
    CUresult rc = n == NULL ? CUDA_ERROR_INVALID_VALUE : cusw_batch_params_action(nodeParams, &a);
    if (rc == CUDA_SUCCESS) {
        cusw_action_release(&n->action);
        n->action = a; /* the node takes over the one reference */
    }
    cusw_lock_release();
    return rc;
}

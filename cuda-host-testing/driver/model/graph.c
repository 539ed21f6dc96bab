/*
 * graph.c - graphs and their nodes. A node's dependencies are stored on the node (its incoming
 * edges); a graph owns its nodes and its user-object references. Graphs belong to no context. A
 * clone's nodes share what the original's actions share (their batches, which never change: new
 * parameters give a node a new batch), so each graph keeps its own parameters.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

struct cusw_graph *cusw_graph_new(void)
{
    struct cusw_graph *g = calloc(1, sizeof *g);
    if (g == NULL)
        return NULL;
    g->handle = cusw_handle_new(CUSW_KIND_GRAPH, g);
    if (g->handle == 0) {
        free(g);
        return NULL;
    }
    return g;
}

static void node_free(struct cusw_node *n)
{
    cusw_handle_remove(n->handle);
    cusw_action_release(&n->action);
    free(n->deps);
    free(n);
}

void cusw_graph_free(struct cusw_graph *g)
{
    for (size_t i = 0; i < g->n_nodes; i++)
        node_free(g->nodes[i]);
    free(g->nodes);
    cusw_urefs_release(&g->urefs, CUSW_DESTROY_INLINE); /* destructors may run in this call */
    cusw_handle_remove(g->handle);
    free(g);
}

bool cusw_node_add_dep(struct cusw_node *n, struct cusw_node *dep)
{
    if (!cusw_reserve((void **)&n->deps, &n->deps_capacity, n->ndeps + 1, sizeof *n->deps))
        return false;
    n->deps[n->ndeps++] = dep;
    return true;
}

bool cusw_node_has_dep(const struct cusw_node *n, const struct cusw_node *dep)
{
    for (size_t i = 0; i < n->ndeps; i++)
        if (n->deps[i] == dep)
            return true;
    return false;
}

bool cusw_node_deps_are(const struct cusw_node *n, struct cusw_node *const *deps, size_t ndeps)
{
    if (n->ndeps != ndeps)
        return false;
    for (size_t i = 0; i < ndeps; i++)
        if (!cusw_node_has_dep(n, deps[i]))
            return false;
    return true;
}

void cusw_node_set_action(struct cusw_node *n, const struct cusw_action *a)
{
    struct cusw_action old = n->action;
    cusw_action_copy(&n->action, a);
    cusw_action_release(&old);
}

CUresult cusw_graph_nodes_of(struct cusw_graph *g, const CUgraphNode *handles, size_t n,
                             struct cusw_node ***out)
{
    *out = NULL;
    if (n == 0)
        return CUDA_SUCCESS;
    if (handles == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct cusw_node **nodes = malloc(n * sizeof *nodes);
    if (nodes == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < n; i++) {
        nodes[i] = cusw_handle_get((uintptr_t)handles[i], CUSW_KIND_NODE);
        bool duplicate = false;
        for (size_t j = 0; j < i && !duplicate; j++)
            duplicate = nodes[j] == nodes[i];
        if (nodes[i] == NULL || nodes[i]->graph != g || duplicate) {
            free(nodes);
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    *out = nodes;
    return CUDA_SUCCESS;
}

bool cusw_edges_default(const CUgraphEdgeData *edges, size_t n)
{
    static const CUgraphEdgeData default_edge;
    for (size_t i = 0; edges != NULL && i < n; i++)
        if (memcmp(&edges[i], &default_edge, sizeof default_edge) != 0)
            return false;
    return true;
}

void cusw_graph_release_user_objects(struct cusw_graph *g)
{
    cusw_urefs_release(&g->urefs, CUSW_DESTROY_INLINE);
}

struct cusw_node *cusw_graph_add_node(struct cusw_graph *g, const struct cusw_action *a,
                                      struct cusw_node *const *deps, size_t ndeps)
{
    if (!cusw_reserve((void **)&g->nodes, &g->nodes_capacity, g->n_nodes + 1, sizeof *g->nodes))
        return NULL;
    struct cusw_node *n = calloc(1, sizeof *n);
    if (n == NULL)
        return NULL;
    n->graph = g;
    for (size_t i = 0; i < ndeps; i++) {
        if (!cusw_node_add_dep(n, deps[i])) {
            free(n->deps);
            free(n);
            return NULL;
        }
    }
    n->handle = cusw_handle_new(CUSW_KIND_NODE, n);
    if (n->handle == 0) {
        free(n->deps);
        free(n);
        return NULL;
    }
    cusw_action_copy(&n->action, a);
    g->nodes[g->n_nodes++] = n;
    return n;
}

CUresult cusw_graph_clone(struct cusw_graph *g, struct cusw_graph **out)
{
    struct cusw_graph *clone = cusw_graph_new();
    if (clone == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = CUDA_SUCCESS;
    /* Nodes first, then edges by index: an edge added with cuGraphAddDependencies may point from
     * a node created later. */
    for (size_t i = 0; rc == CUDA_SUCCESS && i < g->n_nodes; i++) {
        g->nodes[i]->scratch = i;
        if (cusw_graph_add_node(clone, &g->nodes[i]->action, NULL, 0) == NULL)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; rc == CUDA_SUCCESS && i < g->n_nodes; i++) {
        const struct cusw_node *src = g->nodes[i];
        for (size_t d = 0; rc == CUDA_SUCCESS && d < src->ndeps; d++)
            if (!cusw_node_add_dep(clone->nodes[i], clone->nodes[src->deps[d]->scratch]))
                rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* The clone owns references of its own to the same user objects. */
    if (rc == CUDA_SUCCESS && !cusw_urefs_copy(&clone->urefs, &g->urefs))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS)
        *out = clone;
    else
        cusw_graph_free(clone);
    return rc;
}

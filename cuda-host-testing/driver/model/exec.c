/*
 * exec.c - executable graphs: instantiation, launch, upload, destruction, host- and batch-node
 * updates, whole-graph updates.
 *
 * Instantiation flattens the graph into its nodes' actions in a topological order (Kahn's
 * algorithm, ties broken by creation order), so the executable is independent of its graph from
 * then on. The executable holds references to all of the graph's user objects until it is
 * destroyed. A launch enqueues one stream operation carrying a snapshot of the actions (later
 * cuGraphExec*NodeSetParams calls do not affect a launch already enqueued) plus references to
 * the user objects, dropped when the launch has finished. Launches of one executable are ordered
 * behind each other, also across streams, as documented for cuGraphLaunch. Destructors made due
 * by a launch, or by destroying an executable that has been launched, run on the destructor
 * thread; those made due by destroying one never launched run inside cuGraphExecDestroy.
 *
 * The executable also keeps its graph's topology (each node's incoming edges, in the order they
 * were added, by creation index), which cuGraphExecUpdate compares another graph against.
 */
#include "internal.h"

#include <stdlib.h>

struct cusw_exec {
    uintptr_t handle;
    struct cusw_ctx *ctx;
    struct cusw_action *actions; /* topological order */
    uintptr_t *node_handles;     /* the graph node each action came from */
    size_t n;
    /* The graph's topology, by the nodes' creation index i: the action it became, action_of[i];
     * the creation indices of its dependencies, in edge order, edges[edge_start[i]] up to
     * edges[edge_start[i + 1]]. */
    size_t *action_of;
    size_t *edge_start, *edges;
    struct cusw_uref_list urefs;
    struct cusw_dep last_launch; /* stream NULL before the first launch */
    bool launched;               /* its user objects then die on the destructor thread */
};

void cusw_exec_free(struct cusw_exec *x)
{
    cusw_handle_remove(x->handle);
    /* Destructors may run now (in-flight launches hold references of their own): inside this
     * call for an executable never launched, else on the destructor thread. */
    cusw_urefs_release(&x->urefs,
                       x->launched ? CUSW_DESTROY_DRIVER_THREAD : CUSW_DESTROY_INLINE);
    if (x->last_launch.stream != NULL)
        cusw_stream_unref(x->last_launch.stream);
    for (size_t i = 0; i < x->n; i++)
        cusw_action_release(&x->actions[i]);
    free(x->actions);
    free(x->node_handles);
    free(x->action_of);
    free(x->edge_start);
    free(x->edges);
    free(x);
}

/* [locked] Fills x->actions / x->node_handles from g in a topological order. */
static CUresult flatten(struct cusw_graph *g, struct cusw_exec *x)
{
    size_t n = g->n_nodes;
    size_t *indegree = calloc(n + 1, sizeof *indegree);
    size_t *offsets = calloc(n + 2, sizeof *offsets); /* dependents, in CSR form */
    size_t *dependents = NULL;
    size_t *queue = malloc((n + 1) * sizeof *queue);
    x->actions = malloc((n + 1) * sizeof *x->actions);
    x->node_handles = malloc((n + 1) * sizeof *x->node_handles);
    x->action_of = malloc((n + 1) * sizeof *x->action_of);
    x->edge_start = malloc((n + 1) * sizeof *x->edge_start);
    CUresult rc = CUDA_SUCCESS;
    size_t edges = 0;
    for (size_t i = 0; i < n; i++) {
        g->nodes[i]->scratch = i;
        edges += g->nodes[i]->ndeps;
    }
    dependents = malloc((edges + 1) * sizeof *dependents);
    x->edges = malloc((edges + 1) * sizeof *x->edges);
    if (indegree == NULL || offsets == NULL || dependents == NULL || queue == NULL ||
        x->actions == NULL || x->node_handles == NULL || x->action_of == NULL ||
        x->edge_start == NULL || x->edges == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    x->edge_start[0] = 0;
    for (size_t i = 0; i < n; i++) {
        indegree[i] = g->nodes[i]->ndeps;
        for (size_t d = 0; d < g->nodes[i]->ndeps; d++) {
            offsets[g->nodes[i]->deps[d]->scratch + 1]++;
            x->edges[x->edge_start[i] + d] = g->nodes[i]->deps[d]->scratch;
        }
        x->edge_start[i + 1] = x->edge_start[i] + g->nodes[i]->ndeps;
    }
    for (size_t i = 0; i < n; i++)
        offsets[i + 1] += offsets[i];
    size_t *fill = calloc(n + 1, sizeof *fill);
    if (fill == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t d = 0; d < g->nodes[i]->ndeps; d++) {
            size_t from = g->nodes[i]->deps[d]->scratch;
            dependents[offsets[from] + fill[from]++] = i;
        }
    }
    free(fill);
    size_t head = 0, tail = 0;
    for (size_t i = 0; i < n; i++)
        if (indegree[i] == 0)
            queue[tail++] = i;
    while (head < tail) {
        size_t i = queue[head++];
        x->action_of[i] = x->n;
        cusw_action_copy(&x->actions[x->n], &g->nodes[i]->action);
        x->node_handles[x->n] = g->nodes[i]->handle;
        x->n++;
        for (size_t k = offsets[i]; k < offsets[i + 1]; k++)
            if (--indegree[dependents[k]] == 0)
                queue[tail++] = dependents[k];
    }
    if (x->n != n)
        rc = CUDA_ERROR_INVALID_VALUE; /* a cycle */
out:
    free(indegree);
    free(offsets);
    free(dependents);
    free(queue);
    return rc;
}

CUresult cusw_exec_new(struct cusw_graph *g, struct cusw_ctx *ctx, struct cusw_exec **out)
{
    struct cusw_exec *x = calloc(1, sizeof *x);
    if (x == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    x->ctx = ctx;
    CUresult rc = flatten(g, x);
    if (rc == CUDA_SUCCESS && !cusw_urefs_copy(&x->urefs, &g->urefs))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS && (x->handle = cusw_handle_new(CUSW_KIND_EXEC, x)) == 0)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS)
        *out = x;
    else
        cusw_exec_free(x);
    return rc;
}

uintptr_t cusw_exec_handle(const struct cusw_exec *x) { return x->handle; }

/* [locked] A graph launched into a capturing stream joins the capture: its nodes are appended in
 * their (valid) topological order, and the capture graph takes references to its user objects. */
static CUresult capture_launch(struct cusw_exec *x, struct cusw_stream *s)
{
    for (size_t i = 0; i < x->n; i++) {
        CUresult rc = cusw_capture_add_node(s, &x->actions[i]);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    if (!cusw_urefs_copy(&s->capture->graph->urefs, &x->urefs)) {
        cusw_capture_invalidate(s->capture);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

CUresult cusw_exec_launch(struct cusw_exec *x, struct cusw_stream *s, bool capturing)
{
    if (capturing)
        return capture_launch(x, s);
    struct cusw_launch *l = calloc(1, sizeof *l);
    if (l == NULL || (l->actions = malloc((x->n + 1) * sizeof *l->actions)) == NULL ||
        !cusw_urefs_copy(&l->urefs, &x->urefs)) {
        if (l != NULL) {
            cusw_urefs_release(&l->urefs, CUSW_DESTROY_DRIVER_THREAD);
            free(l->actions);
            free(l);
        }
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (l->n = 0; l->n < x->n; l->n++)
        cusw_action_copy(&l->actions[l->n], &x->actions[l->n]);
    struct cusw_action a = { .kind = CUSW_ACT_GRAPH, .u.launch = l };
    size_t ndeps = x->last_launch.stream != NULL ? 1 : 0;
    CUresult rc = cusw_stream_enqueue(s, &a, &x->last_launch, ndeps);
    if (rc != CUDA_SUCCESS) {
        cusw_action_release(&a);
        return rc;
    }
    if (x->last_launch.stream != NULL)
        cusw_stream_unref(x->last_launch.stream);
    cusw_stream_ref(s);
    x->last_launch.stream = s;
    x->last_launch.seq = s->enqueued;
    x->launched = true;
    return CUDA_SUCCESS;
}

CUresult cusw_exec_upload(struct cusw_exec *x, struct cusw_stream *s)
{
    /* Nothing to upload: the operation only keeps the documented order, behind the stream's
     * earlier work and the executable's earlier launches. */
    struct cusw_action nothing = { .kind = CUSW_ACT_NOP };
    size_t ndeps = x->last_launch.stream != NULL ? 1 : 0;
    return cusw_stream_enqueue(s, &nothing, &x->last_launch, ndeps);
}

CUresult cusw_exec_set_host_params(struct cusw_exec *x, CUgraphNode node, CUhostFn fn, void *data)
{
    /* Matched by handle: node handles are never reused, so this stays right even after the
     * original graph or node has been destroyed. */
    for (size_t i = 0; i < x->n; i++) {
        if (x->node_handles[i] == (uintptr_t)node && x->actions[i].kind == CUSW_ACT_HOST_FN) {
            x->actions[i].u.host.fn = fn;
            x->actions[i].u.host.data = data;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cusw_exec_set_batch_params(struct cusw_exec *x, CUgraphNode node,
                                    const struct cusw_action *a)
{
    for (size_t i = 0; i < x->n; i++) {
        if (x->node_handles[i] == (uintptr_t)node && x->actions[i].kind == CUSW_ACT_BATCH) {
            if (!cusw_batch_same_shape(&x->actions[i], a))
                return CUDA_ERROR_INVALID_VALUE;
            cusw_action_release(&x->actions[i]);
            cusw_action_copy(&x->actions[i], a);
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* ---- Whole-graph update (cuGraphExecUpdate) -------------------------------------------------- */

/* Fills *info for a failed update; CU_GRAPH_EXEC_UPDATE_ERROR (a reason the result does not
 * name) is here always a lack of memory. */
static CUresult update_fails(CUgraphExecUpdateResultInfo *info, CUgraphExecUpdateResult result,
                             const struct cusw_node *node, const struct cusw_node *from)
{
    info->result = result;
    info->errorNode = node != NULL ? (CUgraphNode)node->handle : NULL;
    info->errorFromNode = from != NULL ? (CUgraphNode)from->handle : NULL;
    return result == CU_GRAPH_EXEC_UPDATE_ERROR ? CUDA_ERROR_OUT_OF_MEMORY
                                                : CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
}

/* [locked] Pairs each node of g (by creation index) with one of the executable's graph, into
 * pair[], as the documentation describes the real driver's pairing: exit nodes (those nothing
 * depends on) in creation order, then, from each paired node, its dependencies in edge order.
 * The checks and the node each names are cuGraphExecUpdate's documented ones for
 * CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED: a different node count (no node); more exit
 * nodes in g (g's first one beyond the executable's count); a node of g with another number of
 * dependencies than its pair (that node); a dependency that does not pair with its pair's
 * dependency of the same edge order, because either is paired otherwise already (the node and
 * that dependency). */
static CUresult pair_nodes(const struct cusw_exec *x, struct cusw_graph *g, size_t *pair,
                           CUgraphExecUpdateResultInfo *info)
{
    size_t n = x->n;
    if (g->n_nodes != n)
        return update_fails(info, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, NULL, NULL);
    const size_t unpaired = (size_t)-1;
    size_t *paired_with = malloc((n + 1) * sizeof *paired_with); /* the inverse of pair[] */
    bool *g_depended = calloc(n + 1, sizeof *g_depended);
    bool *x_depended = calloc(n + 1, sizeof *x_depended);
    size_t *queue = malloc((n + 1) * sizeof *queue);
    CUresult rc = CUDA_SUCCESS;
    if (paired_with == NULL || g_depended == NULL || x_depended == NULL || queue == NULL) {
        rc = update_fails(info, CU_GRAPH_EXEC_UPDATE_ERROR, NULL, NULL);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        g->nodes[i]->scratch = i;
        pair[i] = paired_with[i] = unpaired;
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t d = 0; d < g->nodes[i]->ndeps; d++)
            g_depended[g->nodes[i]->deps[d]->scratch] = true;
        for (size_t e = x->edge_start[i]; e < x->edge_start[i + 1]; e++)
            x_depended[x->edges[e]] = true;
    }
    size_t head = 0, tail = 0, xi = 0;
    for (size_t i = 0; i < n; i++) {
        if (g_depended[i])
            continue;
        while (xi < n && x_depended[xi])
            xi++;
        if (xi == n) {
            rc = update_fails(info, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, g->nodes[i],
                              NULL);
            goto out;
        }
        pair[i] = xi;
        paired_with[xi++] = i;
        queue[tail++] = i;
    }
    while (head < tail) {
        size_t i = queue[head++];
        const struct cusw_node *node = g->nodes[i];
        size_t first = x->edge_start[pair[i]];
        if (node->ndeps != x->edge_start[pair[i] + 1] - first) {
            rc = update_fails(info, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, node, NULL);
            goto out;
        }
        for (size_t d = 0; d < node->ndeps; d++) {
            size_t dep = node->deps[d]->scratch, x_dep = x->edges[first + d];
            if (pair[dep] == unpaired && paired_with[x_dep] == unpaired) {
                pair[dep] = x_dep;
                paired_with[x_dep] = dep;
                queue[tail++] = dep;
            } else if (pair[dep] != x_dep) {
                rc = update_fails(info, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, node,
                                  node->deps[d]);
                goto out;
            }
        }
    }
    /* Every node of g leads to an exit node, so all are paired now, one to one, with the same
     * edges: the two topologies are the same. */
out:
    free(paired_with);
    free(g_depended);
    free(x_depended);
    free(queue);
    return rc;
}

CUresult cusw_exec_update(struct cusw_exec *x, struct cusw_graph *g,
                          CUgraphExecUpdateResultInfo *info)
{
    size_t *pair = malloc((x->n + 1) * sizeof *pair);
    if (pair == NULL)
        return update_fails(info, CU_GRAPH_EXEC_UPDATE_ERROR, NULL, NULL);
    CUresult rc = pair_nodes(x, g, pair, info);
    for (size_t i = 0; rc == CUDA_SUCCESS && i < g->n_nodes; i++) {
        const struct cusw_action *now = &x->actions[x->action_of[pair[i]]];
        const struct cusw_action *wanted = &g->nodes[i]->action;
        if (cusw_action_node_type(wanted) != cusw_action_node_type(now))
            rc = update_fails(info, CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED, g->nodes[i],
                              NULL);
        /* What cuGraphExecBatchMemOpNodeSetParams may not change either. */
        else if (wanted->kind == CUSW_ACT_BATCH && !cusw_batch_same_shape(wanted, now))
            rc = update_fails(info, CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED, g->nodes[i],
                              NULL);
    }
    struct cusw_uref_list urefs = { 0 };
    if (rc == CUDA_SUCCESS && !cusw_urefs_copy(&urefs, &g->urefs)) {
        cusw_urefs_release(&urefs, CUSW_DESTROY_INLINE); /* none of them the last reference */
        rc = update_fails(info, CU_GRAPH_EXEC_UPDATE_ERROR, NULL, NULL);
    }
    if (rc != CUDA_SUCCESS) {
        free(pair);
        return rc;
    }
    /* Every parameter the double models comes over whole (host functions and their data,
     * copies, sets, memory operations, the stand-ins for kernels); of the real driver's limits
     * on parameter changes only a batch node's is modelled, not a copy's memory from other
     * contexts or a memset's shape. The executable's node handles stay those of the graph it was
     * made from, which cuGraphExec*NodeSetParams take. */
    for (size_t i = 0; i < g->n_nodes; i++) {
        struct cusw_action *now = &x->actions[x->action_of[pair[i]]];
        cusw_action_release(now);
        cusw_action_copy(now, &g->nodes[i]->action);
    }
    free(pair);
    /* The references of the new graph are cloned and replace the executable's, as documented for
     * user objects; launches in flight hold references of their own (cusw_exec_launch), so what
     * is released here lives until they have finished. Routed as cuGraphExecDestroy routes them
     * (not measured for an update). */
    cusw_urefs_release(&x->urefs, x->launched ? CUSW_DESTROY_DRIVER_THREAD : CUSW_DESTROY_INLINE);
    x->urefs = urefs;
    info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    info->errorNode = info->errorFromNode = NULL;
    return CUDA_SUCCESS;
}

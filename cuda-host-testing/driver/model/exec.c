/*
 * exec.c - executable graphs: instantiation, launch, upload, destruction, host-node updates.
 *
 * Instantiation flattens the graph into its nodes' actions in a topological order (Kahn's
 * algorithm, ties broken by creation order), so the executable is independent of its graph from
 * then on. The executable holds references to all of the graph's user objects until it is
 * destroyed. A launch enqueues one stream operation carrying a snapshot of the actions (later
 * cuGraphExecHostNodeSetParams calls do not affect a launch already enqueued) plus references to
 * the user objects, dropped when the launch has finished. Launches of one executable are ordered
 * behind each other, also across streams, as documented for cuGraphLaunch. Destructors made due
 * by a launch, or by destroying an executable that has been launched, run on the destructor
 * thread; those made due by destroying one never launched run inside cuGraphExecDestroy.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

struct cusw_exec {
    uintptr_t handle;
    struct cusw_ctx *ctx;
    struct cusw_action *actions; /* topological order */
    uintptr_t *node_handles;     /* the graph node each action came from */
    size_t n;
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
    free(x->actions);
    free(x->node_handles);
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
    CUresult rc = CUDA_SUCCESS;
    size_t edges = 0;
    for (size_t i = 0; i < n; i++) {
        g->nodes[i]->scratch = i;
        edges += g->nodes[i]->ndeps;
    }
    dependents = malloc((edges + 1) * sizeof *dependents);
    if (indegree == NULL || offsets == NULL || dependents == NULL || queue == NULL ||
        x->actions == NULL || x->node_handles == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        indegree[i] = g->nodes[i]->ndeps;
        for (size_t d = 0; d < g->nodes[i]->ndeps; d++)
            offsets[g->nodes[i]->deps[d]->scratch + 1]++;
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
        x->actions[x->n] = g->nodes[i]->action;
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
    if (x->n > 0)
        memcpy(l->actions, x->actions, x->n * sizeof *l->actions);
    l->n = x->n;
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

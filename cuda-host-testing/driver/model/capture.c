/*
 * capture.c - stream capture: captures begun and ended, streams joining them through events, the
 * state a query reports, and the rules that decide which calls are allowed while captures are
 * going on.
 *
 * While a stream captures, the stream-ordered work given to it becomes graph nodes chained on the
 * stream's current dependency set instead of running. The rules reproduce the real driver,
 * including these measured behaviours:
 *  - while a blocking stream (flags 0, or a per-thread stream) captures, the legacy stream of its
 *    context may not be used: cuStreamIsCapturing/GetCaptureInfo on it answer
 *    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT; enqueueing on it or synchronising it answer the same
 *    error and invalidate the capture. Non-blocking captures do not involve the legacy stream.
 *  - synchronising or querying a capturing stream answers CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
 *    and invalidates the capture.
 *  - "potentially unsafe" calls (allocation, context or legacy-stream synchronisation, an event
 *    query) follow the documented rules of the calling thread's capture interaction mode
 *    (cuThreadExchangeStreamCaptureMode; GLOBAL until changed): in GLOBAL mode a thread may not
 *    make them while it has a non-relaxed capture of its own or any thread has a GLOBAL capture;
 *    in THREAD_LOCAL mode only its own captures count; in RELAXED mode none does. A prohibited
 *    call answers CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the captures that
 *    prohibited it. A capture of a failed context prohibits nothing (not measured: its end
 *    answers the sticky error, so it never ends).
 * An invalidated capture stays until cuStreamEndCapture, which then answers
 * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and no graph.
 *
 * A capture may build a graph of its own, or the caller's (cuStreamBeginCaptureToGraph, after
 * given nodes of it; a recapture): the caller's is never freed by the capture, and its end
 * answers that same graph. A recapture (cuStreamBeginRecaptureToGraph) records nothing new: as
 * documented, the graph lets go of its user objects first, then each node captured must be the
 * graph's next node in creation order, of its type, on the same dependencies, or the recapture
 * fails at once (a topology mismatch); one whose parameters differ takes the new ones, and the
 * recapture's callback is told (below, where it is called). A failed recapture is invalidated:
 * it stays until cuStreamEndCapture, and the call that failed it, later captured work and the
 * end answer CUDA_ERROR_GRAPH_RECAPTURE_FAILURE (not measured). The documentation leaves its
 * graph undefined; here it is left as the recapture made it (the nodes matched so far with their
 * new parameters, the others with their old ones), usable, but nothing may rely on that.
 */
#include "internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static struct cusw_capture *captures; /* all captures going on, process-wide */
static uint64_t next_capture_id = 1;

struct cusw_capture *cusw_capture_find(uint64_t id)
{
    for (struct cusw_capture *c = captures; c != NULL; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

void cusw_capture_invalidate(struct cusw_capture *c) { c->invalidated = true; }

/* What an invalidated capture answers the calls it refuses. */
static CUresult invalidated_answer(const struct cusw_capture *c)
{
    return c->recapture.failed ? CUDA_ERROR_GRAPH_RECAPTURE_FAILURE
                               : CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
}

/* The recapture fails: invalidated, it answers CUDA_ERROR_GRAPH_RECAPTURE_FAILURE. */
static CUresult fail_recapture(struct cusw_capture *c)
{
    c->recapture.failed = true;
    cusw_capture_invalidate(c);
    return CUDA_ERROR_GRAPH_RECAPTURE_FAILURE;
}

/* A capture of a blocking stream of `ctx` implicitly involves the legacy stream. With
 * `invalidate`, every such capture is invalidated. */
static bool blocking_capture(struct cusw_ctx *ctx, bool invalidate)
{
    bool found = false;
    for (struct cusw_stream *s = ctx->streams; s != NULL; s = s->ctx_next) {
        if (s->capture != NULL && cusw_stream_syncs_with_legacy(s)) {
            found = true;
            if (invalidate)
                cusw_capture_invalidate(s->capture);
        }
    }
    return found;
}

CUresult cusw_capture_check_enqueue(struct cusw_stream *s, bool *capturing)
{
    *capturing = false;
    if (s->kind == CUSW_STREAM_LEGACY)
        return blocking_capture(s->ctx, true) ? CUDA_ERROR_STREAM_CAPTURE_IMPLICIT : CUDA_SUCCESS;
    if (s->capture == NULL)
        return CUDA_SUCCESS;
    if (s->capture->invalidated)
        return invalidated_answer(s->capture);
    *capturing = true;
    return CUDA_SUCCESS;
}

static bool set_deps(struct cusw_stream *s, struct cusw_node *const *nodes, size_t n)
{
    if (!cusw_reserve((void **)&s->cap_deps, &s->cap_deps_capacity, n, sizeof *s->cap_deps))
        return false;
    if (n > 0)
        memmove(s->cap_deps, nodes, n * sizeof *nodes);
    s->n_cap_deps = n;
    return true;
}

/* ---- Recapture ------------------------------------------------------------------------------ */

/* A node whose parameters a recapture changed, for the recapture's callback. The callback is user
 * code, so it cannot run under the lock the capture is recorded under: the capturing thread calls
 * it once its call has let go of the lock, before that call returns. A verdict other than
 * CUDA_SUCCESS then fails the recapture: the call that captured the node has already answered
 * success, and what is captured after it, and the end, answer the failure (not measured). The
 * node has taken its new parameters by then, which a failed recapture's undefined graph may keep.
 * A verdict that comes after the capture ended (another thread ended it meanwhile) is dropped. */
struct verdict {
    struct cusw_deferred after_unlock;
    uint64_t capture_id;
    CUgraphRecaptureCallback callback;
    void *data;
    CUgraphNode node;
    CUgraphRecaptureStatus status;
    /* Read under the lock; the actions hold what the parameters point to (a batch's operations)
     * until the callback has returned, as documented. */
    CUgraphNodeParams original_params, recaptured_params;
    struct cusw_action original, recaptured;
};

static void ask_callback(struct cusw_deferred *d)
{
    struct verdict *v = (struct verdict *)((char *)d - offsetof(struct verdict, after_unlock));
    CUresult answer = v->callback(v->data, v->node, &v->original_params, &v->recaptured_params,
                                  v->status);
    cusw_lock_acquire();
    struct cusw_capture *c = cusw_capture_find(v->capture_id);
    if (answer != CUDA_SUCCESS && c != NULL)
        fail_recapture(c);
    cusw_action_release(&v->original);
    cusw_action_release(&v->recaptured);
    cusw_lock_release();
    free(v);
}

/* What the callback is told of a change from `was` to `now`: whether an executable could take
 * it, as this driver's cuGraphExecUpdate would (cusw_exec_update takes every change but a batch
 * node's operations of another shape). The real driver's status for a host node's new function
 * or data is not known (not measured): ELIGIBLE_FOR_UPDATE, as cuGraphExecUpdate and
 * cuGraphExecHostNodeSetParams take them. CU_GRAPH_RECAPTURE_ERROR is never told: the only error
 * here, a lack of memory, fails the recapture without a callback. */
static CUgraphRecaptureStatus change_status(const struct cusw_action *was,
                                            const struct cusw_action *now)
{
    if (was->kind == CUSW_ACT_BATCH && !cusw_batch_same_shape(was, now))
        return CU_GRAPH_RECAPTURE_INELIGIBLE_FOR_UPDATE;
    return CU_GRAPH_RECAPTURE_ELIGIBLE_FOR_UPDATE;
}

/* [locked] Defers the callback's call about `n`, whose parameters change to those of `now`. */
static bool ask_about(struct cusw_capture *c, const struct cusw_node *n,
                      const struct cusw_action *now)
{
    struct verdict *v = calloc(1, sizeof *v);
    if (v == NULL)
        return false;
    v->capture_id = c->id;
    v->callback = c->recapture.callback;
    v->data = c->recapture.data;
    v->node = (CUgraphNode)n->handle;
    v->status = change_status(&n->action, now);
    cusw_action_copy(&v->original, &n->action);
    cusw_action_copy(&v->recaptured, now);
    cusw_action_node_params(&v->original, &v->original_params);
    cusw_action_node_params(&v->recaptured, &v->recaptured_params);
    cusw_defer_until_unlocked(&v->after_unlock, ask_callback);
    return true;
}

/* [locked] The recapture `s` takes part in records `a`: as the graph's next node. A node of
 * another type is another node, so it fails as a topology mismatch would (not measured). The
 * documented failure for a memory allocation's or free's new parameters cannot arise: a capture
 * refuses them (graph memory nodes are not modelled). Without a callback, a node takes its new
 * parameters all the same (not measured). */
static CUresult recapture_node(struct cusw_stream *s, const struct cusw_action *a)
{
    struct cusw_capture *c = s->capture;
    if (c->recapture.next == c->recapture.count)
        return fail_recapture(c); /* more nodes than the graph had */
    struct cusw_node *n = c->graph->nodes[c->recapture.next];
    if (cusw_action_node_type(&n->action) != cusw_action_node_type(a) ||
        !cusw_node_deps_are(n, s->cap_deps, s->n_cap_deps))
        return fail_recapture(c);
    if (!cusw_action_same_params(&n->action, a)) {
        if (c->recapture.callback != NULL && !ask_about(c, n, a)) {
            fail_recapture(c);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        cusw_node_set_action(n, a);
    }
    c->recapture.next++;
    if (!set_deps(s, &n, 1)) {
        cusw_capture_invalidate(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

CUresult cusw_capture_add_node(struct cusw_stream *s, const struct cusw_action *a)
{
    if (s->capture->recapture.active)
        return recapture_node(s, a);
    struct cusw_node *node = cusw_graph_add_node(s->capture->graph, a, s->cap_deps, s->n_cap_deps);
    if (node == NULL || !set_deps(s, &node, 1)) {
        cusw_capture_invalidate(s->capture);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/* The calling thread's capture interaction mode. */
static _Thread_local CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

CUstreamCaptureMode cusw_capture_exchange_mode(CUstreamCaptureMode mode)
{
    CUstreamCaptureMode previous = thread_mode;
    thread_mode = mode;
    return previous;
}

CUresult cusw_capture_check_unsafe(void)
{
    if (thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_SUCCESS;
    uint64_t self = cusw_thread_serial();
    bool prohibited = false;
    for (struct cusw_capture *c = captures; c != NULL; c = c->next) {
        /* A capture of a failed context can never end in a graph, and its end answers the
         * sticky error: it polices no other context's calls (not measured). */
        if (cusw_ctx_sticky(c->origin->ctx) != CUDA_SUCCESS)
            continue;
        bool own = c->thread_serial == self && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED;
        bool global = thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                      c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
        if (own || global) {
            cusw_capture_invalidate(c);
            prohibited = true;
        }
    }
    return prohibited ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult cusw_capture_check_sync(struct cusw_stream *s)
{
    if (s->kind == CUSW_STREAM_LEGACY) {
        if (blocking_capture(s->ctx, true))
            return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        /* Synchronising the legacy stream waits for the whole context: a potentially unsafe
         * call (measured: 900 while a non-blocking stream captures in global mode). */
        return cusw_capture_check_unsafe();
    }
    if (s->capture == NULL)
        return CUDA_SUCCESS;
    if (s->capture->invalidated)
        return invalidated_answer(s->capture);
    cusw_capture_invalidate(s->capture);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

static bool add_member(struct cusw_capture *c, struct cusw_stream *s)
{
    if (!cusw_reserve((void **)&c->members, &c->members_capacity, c->n_members + 1,
                      sizeof *c->members))
        return false;
    c->members[c->n_members++] = s;
    s->capture = c;
    s->n_cap_deps = 0;
    return true;
}

CUresult cusw_capture_join(struct cusw_capture *c, struct cusw_stream *s,
                           struct cusw_node *const *nodes, size_t n)
{
    if (c->invalidated)
        return invalidated_answer(c);
    if (s->capture == NULL) {
        if (!add_member(c, s))
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (!set_deps(s, nodes, n)) {
            cusw_capture_invalidate(c);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        return CUDA_SUCCESS;
    }
    for (size_t i = 0; i < n; i++) {
        bool present = false;
        for (size_t j = 0; j < s->n_cap_deps && !present; j++)
            present = s->cap_deps[j] == nodes[i];
        if (present)
            continue;
        if (!cusw_reserve((void **)&s->cap_deps, &s->cap_deps_capacity, s->n_cap_deps + 1,
                          sizeof *s->cap_deps)) {
            cusw_capture_invalidate(c);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        s->cap_deps[s->n_cap_deps++] = nodes[i];
    }
    return CUDA_SUCCESS;
}

/* Ends the capture: every member stream leaves it; the graph goes to *graph_out, or is freed
 * unless it is the caller's. */
static void finish(struct cusw_capture *c, CUgraph *graph_out)
{
    for (size_t i = 0; i < c->n_members; i++) {
        c->members[i]->capture = NULL;
        c->members[i]->n_cap_deps = 0;
    }
    for (struct cusw_capture **link = &captures; *link != NULL; link = &(*link)->next) {
        if (*link == c) {
            *link = c->next;
            break;
        }
    }
    c->graph->capture = NULL;
    if (graph_out != NULL)
        *graph_out = (CUgraph)c->graph->handle;
    else if (c->owns_graph)
        cusw_graph_free(c->graph);
    free(c->members);
    free(c);
}

void cusw_capture_stream_gone(struct cusw_stream *s)
{
    struct cusw_capture *c = s->capture;
    if (s == c->origin) {
        finish(c, NULL); /* nothing can end it any more */
        return;
    }
    for (size_t i = 0; i < c->n_members; i++) {
        if (c->members[i] == s) {
            c->members[i] = c->members[--c->n_members];
            break;
        }
    }
    s->capture = NULL;
    s->n_cap_deps = 0;
    cusw_capture_invalidate(c); /* its forked work can never be joined */
}

/* Work forked onto another stream must be joined back: every dependency node of every other
 * member must be an ancestor of (or one of) the origin stream's dependency nodes. */
static CUresult check_joined(struct cusw_capture *c)
{
    static uint64_t epoch; /* [locked] marks visited nodes without clearing the marks */
    epoch++;
    struct cusw_graph *g = c->graph;
    struct cusw_node **stack = malloc((g->n_nodes + 1) * sizeof *stack);
    if (stack == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t top = 0;
    for (size_t i = 0; i < c->origin->n_cap_deps; i++) {
        struct cusw_node *n = c->origin->cap_deps[i];
        if (n->visit_epoch != epoch) {
            n->visit_epoch = epoch;
            stack[top++] = n;
        }
    }
    while (top > 0) {
        struct cusw_node *n = stack[--top];
        for (size_t i = 0; i < n->ndeps; i++) {
            if (n->deps[i]->visit_epoch != epoch) {
                n->deps[i]->visit_epoch = epoch;
                stack[top++] = n->deps[i];
            }
        }
    }
    free(stack);
    for (size_t m = 0; m < c->n_members; m++)
        for (size_t i = 0; i < c->members[m]->n_cap_deps; i++)
            if (c->members[m]->cap_deps[i]->visit_epoch != epoch)
                return CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
    return CUDA_SUCCESS;
}

/* [locked] Begins a capture of `s` into `g`, the caller's, or (NULL) a graph of its own. */
static CUresult begin(struct cusw_stream *s, CUstreamCaptureMode mode, struct cusw_graph *g,
                      struct cusw_capture **out)
{
    if (s->kind == CUSW_STREAM_LEGACY)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream cannot be captured */
    if (s->capture != NULL)
        return CUDA_ERROR_ILLEGAL_STATE;
    if (g != NULL && g->capture != NULL)
        return CUDA_ERROR_ILLEGAL_STATE; /* another capture builds it (not measured) */
    struct cusw_capture *c = calloc(1, sizeof *c);
    if (c == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->owns_graph = g == NULL;
    c->graph = c->owns_graph ? cusw_graph_new() : g;
    if (c->graph == NULL || !add_member(c, s)) {
        if (c->owns_graph && c->graph != NULL)
            cusw_graph_free(c->graph);
        free(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    c->id = next_capture_id++;
    c->mode = mode;
    c->thread_serial = cusw_thread_serial();
    c->origin = s;
    c->graph->capture = c;
    c->next = captures;
    captures = c;
    *out = c;
    return CUDA_SUCCESS;
}

CUresult cusw_capture_begin(struct cusw_stream *s, CUstreamCaptureMode mode)
{
    struct cusw_capture *c;
    return begin(s, mode, NULL, &c);
}

CUresult cusw_capture_begin_to_graph(struct cusw_stream *s, CUstreamCaptureMode mode,
                                     struct cusw_graph *g, struct cusw_node *const *deps,
                                     size_t ndeps)
{
    struct cusw_capture *c;
    CUresult rc = begin(s, mode, g, &c);
    if (rc == CUDA_SUCCESS && !set_deps(s, deps, ndeps)) {
        finish(c, NULL); /* the graph stays the caller's */
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    return rc;
}

CUresult cusw_capture_begin_recapture(struct cusw_stream *s, CUstreamCaptureMode mode,
                                      struct cusw_graph *g, CUgraphRecaptureCallback callback,
                                      void *data)
{
    struct cusw_capture *c;
    CUresult rc = begin(s, mode, g, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    /* As documented, before anything is recaptured. Their destructors run inside this call, on
     * the calling thread, once it has let go of the lock, as a graph's references dropped by
     * cuGraphDestroy or cuGraphReleaseUserObject go (not measured for a recapture); what an
     * executable or a launch of the graph holds is theirs, and lives on. */
    cusw_graph_release_user_objects(g);
    c->recapture.active = true;
    c->recapture.count = g->n_nodes;
    c->recapture.callback = callback;
    c->recapture.data = data;
    return CUDA_SUCCESS;
}

CUresult cusw_capture_end(struct cusw_stream *s, CUgraph *graph)
{
    struct cusw_capture *c = s->capture;
    if (c == NULL)
        return CUDA_ERROR_ILLEGAL_STATE;
    if (c->origin != s)
        return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && c->thread_serial != cusw_thread_serial()) {
        /* Refused, yet the capture ends, its graph discarded: the stream is not capturing
         * afterwards and the beginning thread's own end answers CUDA_ERROR_ILLEGAL_STATE (the
         * 13.0 driver on an H200). */
        finish(c, NULL);
        return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    }
    *graph = NULL;
    CUresult rc = c->invalidated ? invalidated_answer(c) : check_joined(c);
    /* A recapture that stopped short of the graph's nodes is a topology mismatch too. */
    if (rc == CUDA_SUCCESS && c->recapture.active && c->recapture.next != c->recapture.count)
        rc = fail_recapture(c);
    finish(c, rc == CUDA_SUCCESS ? graph : NULL);
    return rc;
}

/* ---- What queries see ------------------------------------------------------------------------ */

CUstreamCaptureStatus cusw_capture_status(const struct cusw_stream *s)
{
    if (s->capture == NULL)
        return CU_STREAM_CAPTURE_STATUS_NONE;
    return s->capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                   : CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

bool cusw_capture_implicit(const struct cusw_stream *s)
{
    return s->kind == CUSW_STREAM_LEGACY && blocking_capture(s->ctx, false);
}

struct cusw_capture *cusw_capture_of_event(const struct cusw_event *e)
{
    return e->capture_id != 0 ? cusw_capture_find(e->capture_id) : NULL;
}

CUresult cusw_capture_dependencies(struct cusw_stream *s, const CUgraphNode **nodes,
                                   const CUgraphEdgeData **edges)
{
    size_t n = s->n_cap_deps;
    if (!cusw_reserve((void **)&s->info_nodes, &s->info_capacity, n ? n : 1,
                      sizeof *s->info_nodes))
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* info_edges grows with info_nodes: keep it at the same capacity, all defaults. */
    CUgraphEdgeData *grown = realloc(s->info_edges, s->info_capacity * sizeof *grown);
    if (grown == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->info_edges = grown;
    memset(grown, 0, s->info_capacity * sizeof *grown);
    for (size_t i = 0; i < n; i++)
        s->info_nodes[i] = (CUgraphNode)s->cap_deps[i]->handle;
    *nodes = s->info_nodes;
    *edges = s->info_edges;
    return CUDA_SUCCESS;
}

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
 */
#include "internal.h"

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
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
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

CUresult cusw_capture_add_node(struct cusw_stream *s, const struct cusw_action *a)
{
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
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
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
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
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

/* Ends the capture: every member stream leaves it; the graph goes to *graph_out or is freed. */
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
    else
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

CUresult cusw_capture_begin(struct cusw_stream *s, CUstreamCaptureMode mode)
{
    if (s->kind == CUSW_STREAM_LEGACY)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream cannot be captured */
    if (s->capture != NULL)
        return CUDA_ERROR_ILLEGAL_STATE;
    struct cusw_capture *c = calloc(1, sizeof *c);
    if (c == NULL || (c->graph = cusw_graph_new()) == NULL) {
        free(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!add_member(c, s)) {
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
    CUresult rc = c->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : check_joined(c);
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

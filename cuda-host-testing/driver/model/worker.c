/*
 * worker.c - what runs a stream: its queue of operations, run in FIFO order by the stream's own
 * worker thread, and the dependencies that order them after other streams' work.
 *
 * Ordering between streams is expressed as dependencies of an operation on a point of another
 * stream ("stream X has completed its operation number N"). They come from event waits, from
 * launches of one executable, and from the legacy default stream's implicit synchronisation:
 *  - an operation on the legacy stream depends on everything enqueued so far on every blocking
 *    stream (flags 0, and per-thread default streams) of its context;
 *  - an operation on a blocking stream depends on everything enqueued so far on the legacy
 *    stream.
 * Non-blocking streams take part in neither. Dependencies only ever name earlier operations, so
 * they cannot form cycles.
 *
 * A destroyed stream loses its handle at once and leaves its capture; its worker still drains
 * what was enqueued (as a device would) and then exits.
 */
#include "internal.h"

#include <stdlib.h>

static void op_free(struct cusw_op *op)
{
    for (size_t i = 0; i < op->ndeps; i++)
        cusw_stream_unref(op->deps[i].stream);
    free(op->deps);
    cusw_action_release(&op->action);
    free(op);
}

static bool deps_done(const struct cusw_op *op)
{
    for (size_t i = 0; i < op->ndeps; i++)
        if (op->deps[i].stream->completed < op->deps[i].seq)
            return false;
    return true;
}

static void *worker_main(void *arg)
{
    struct cusw_stream *s = arg;
    cusw_lock_acquire();
    for (;;) {
        while (s->head == NULL && !s->destroyed)
            pthread_cond_wait(&s->wake, &cusw_lock);
        struct cusw_op *op = s->head;
        if (op == NULL)
            break; /* destroyed and drained */
        while (!deps_done(op))
            cusw_wait_progress();
        cusw_lock_release();
        /* Sticky errors are handled by the action: host functions are skipped, callbacks get
         * the error, the rest completes at once, so a faulted context drains quickly. */
        cusw_action_run(&op->action, s->ctx);
        cusw_lock_acquire();
        s->head = op->next;
        if (s->head == NULL)
            s->tail = NULL;
        s->completed = op->seq;
        op_free(op);
        cusw_broadcast_progress();
    }
    cusw_stream_unlink(s);
    cusw_broadcast_progress();
    cusw_stream_unref(s); /* the worker's reference */
    cusw_lock_release();
    return NULL;
}

struct cusw_stream *cusw_stream_create(struct cusw_ctx *ctx, enum cusw_stream_kind kind,
                                       unsigned int flags)
{
    struct cusw_stream *s = cusw_stream_new(ctx, kind, flags);
    if (s == NULL)
        return NULL;
    if (!cusw_spawn_thread(worker_main, s)) {
        cusw_stream_close(s);
        cusw_stream_unlink(s);
        cusw_stream_unref(s);
        return NULL;
    }
    return s;
}

void cusw_stream_destroy(struct cusw_stream *s)
{
    if (s->capture != NULL)
        cusw_capture_stream_gone(s);
    cusw_stream_close(s);
}

static void add_dep(struct cusw_op *op, struct cusw_stream *on, uint64_t seq)
{
    cusw_stream_ref(on);
    op->deps[op->ndeps].stream = on;
    op->deps[op->ndeps].seq = seq;
    op->ndeps++;
}

CUresult cusw_stream_enqueue(struct cusw_stream *s, const struct cusw_action *a,
                             const struct cusw_dep *extra, size_t nextra)
{
    struct cusw_ctx *ctx = s->ctx;
    size_t max_deps = nextra + 1;
    if (s->kind == CUSW_STREAM_LEGACY)
        for (struct cusw_stream *t = ctx->streams; t != NULL; t = t->ctx_next)
            max_deps++;
    struct cusw_op *op = calloc(1, sizeof *op);
    struct cusw_dep *deps = calloc(max_deps, sizeof *deps);
    if (op == NULL || deps == NULL) {
        free(op);
        free(deps);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    op->deps = deps;
    for (size_t i = 0; i < nextra; i++)
        if (extra[i].stream->completed < extra[i].seq)
            add_dep(op, extra[i].stream, extra[i].seq);
    if (s->kind == CUSW_STREAM_LEGACY) {
        for (struct cusw_stream *t = ctx->streams; t != NULL; t = t->ctx_next)
            if (t != s && cusw_stream_syncs_with_legacy(t) && cusw_stream_pending(t))
                add_dep(op, t, t->enqueued);
    } else if (cusw_stream_syncs_with_legacy(s) && ctx->legacy != NULL &&
               cusw_stream_pending(ctx->legacy)) {
        add_dep(op, ctx->legacy, ctx->legacy->enqueued);
    }
    op->action = *a;
    cusw_action_enqueued(a);
    op->seq = ++s->enqueued;
    if (s->tail != NULL)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    pthread_cond_signal(&s->wake);
    return CUDA_SUCCESS;
}

void cusw_stream_drain(struct cusw_stream *s)
{
    uint64_t target = s->enqueued;
    cusw_stream_ref(s); /* the worker may exit and drop its reference meanwhile */
    while (s->completed < target)
        cusw_wait_progress();
    cusw_stream_unref(s);
}

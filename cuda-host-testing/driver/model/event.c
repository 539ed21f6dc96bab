/*
 * event.c - the event object. Recording an event enqueues an operation on the stream; the event
 * then stands for "that stream has completed that operation" (stream, sequence number), and the
 * operation stamps the time when the stream reaches it, for cuEventElapsedTime. An event recorded
 * in a capturing stream instead remembers the capture's current dependency nodes, so that waiting
 * on it from another stream forks or joins that stream into the capture (the standard
 * multi-stream capture pattern). An event's references: its handle's, plus one per record
 * operation not yet run.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

struct cusw_event *cusw_event_new(struct cusw_ctx *ctx, unsigned int flags)
{
    struct cusw_event *e = calloc(1, sizeof *e);
    if (e == NULL || (e->handle = cusw_handle_new(CUSW_KIND_EVENT, e)) == 0) {
        free(e);
        return NULL;
    }
    e->ctx = ctx;
    e->flags = flags;
    e->refs = 1;
    e->ctx_next = ctx->events;
    if (ctx->events != NULL)
        ctx->events->ctx_prev = e;
    ctx->events = e;
    return e;
}

static void forget_record(struct cusw_event *e)
{
    if (e->stream != NULL)
        cusw_stream_unref(e->stream);
    e->stream = NULL;
    e->seq = 0;
    e->stamped = false;
    free(e->cap_nodes);
    e->cap_nodes = NULL;
    e->n_cap_nodes = 0;
    e->capture_id = 0;
}

void cusw_event_unref(struct cusw_event *e)
{
    if (--e->refs != 0)
        return;
    forget_record(e);
    free(e);
}

void cusw_event_destroy(struct cusw_event *e)
{
    if (e->handle == 0)
        return;
    cusw_handle_remove(e->handle);
    e->handle = 0;
    if (e->ctx_prev != NULL)
        e->ctx_prev->ctx_next = e->ctx_next;
    else
        e->ctx->events = e->ctx_next;
    if (e->ctx_next != NULL)
        e->ctx_next->ctx_prev = e->ctx_prev;
    cusw_event_unref(e); /* pending record operations keep it alive until they have run */
}

bool cusw_event_complete(const struct cusw_event *e)
{
    return e->stream == NULL || e->stream->completed >= e->seq;
}

struct cusw_action cusw_event_record_action(const struct cusw_event *e)
{
    struct cusw_action a = { .kind = CUSW_ACT_EVENT_RECORD,
                             .u.record = { (struct cusw_event *)e, e->generation + 1 } };
    return a;
}

void cusw_event_recorded(struct cusw_event *e, struct cusw_stream *s)
{
    forget_record(e);
    e->generation++;
    e->refs++; /* the record operation's */
    cusw_stream_ref(s);
    e->stream = s;
    e->seq = s->enqueued;
}

CUresult cusw_event_recorded_in_capture(struct cusw_event *e, const struct cusw_stream *s)
{
    struct cusw_node **nodes = NULL;
    if (s->n_cap_deps > 0 && (nodes = malloc(s->n_cap_deps * sizeof *nodes)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    forget_record(e);
    if (s->n_cap_deps > 0)
        memcpy(nodes, s->cap_deps, s->n_cap_deps * sizeof *nodes);
    e->cap_nodes = nodes;
    e->n_cap_nodes = s->n_cap_deps;
    e->capture_id = s->capture->id;
    return CUDA_SUCCESS;
}

void cusw_event_stamp(struct cusw_event *e, uint64_t generation)
{
    if (e->generation == generation) { /* not re-recorded since */
        e->stamp_ms = cusw_now_ms();
        e->stamped = true;
    }
}

void cusw_event_wait(struct cusw_event *e)
{
    if (e->stream == NULL)
        return;
    /* The point recorded now, even if the event is re-recorded meanwhile. */
    struct cusw_stream *s = e->stream;
    uint64_t seq = e->seq;
    cusw_stream_ref(s);
    while (s->completed < seq)
        cusw_wait_progress();
    cusw_stream_unref(s);
}

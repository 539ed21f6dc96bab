/*
 * stream.c - the stream object: its identity (a handle, and an id never reused, like the real
 * driver's, which tells streams apart for the life of the process even when a handle's address is
 * reused), its place in its context's list, and its lifetime. References decide that lifetime:
 * its worker's, plus one per dependency, event, wait or executable launch that names it, so a
 * destroyed stream's object lives on until its worker has drained it and nothing names it any
 * more. What a stream does is worker.c's.
 */
#include "internal.h"

#include <stdlib.h>

static size_t user_streams;                 /* [locked] made by cuStreamCreate, not destroyed */
static unsigned long long next_stream_id = 1; /* [locked] */

size_t cusw_user_stream_count(void) { return user_streams; }

bool cusw_stream_syncs_with_legacy(const struct cusw_stream *s)
{
    return s->kind == CUSW_STREAM_PER_THREAD ||
           (s->kind == CUSW_STREAM_USER && (s->flags & CU_STREAM_NON_BLOCKING) == 0);
}

bool cusw_stream_pending(const struct cusw_stream *s) { return s->completed < s->enqueued; }

struct cusw_stream *cusw_stream_new(struct cusw_ctx *ctx, enum cusw_stream_kind kind,
                                    unsigned int flags)
{
    struct cusw_stream *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    if (pthread_cond_init(&s->wake, NULL) != 0) {
        free(s);
        return NULL;
    }
    s->ctx = ctx;
    s->kind = kind;
    s->flags = flags;
    s->refs = 1; /* the creator's, which becomes its worker's */
    s->handle = cusw_handle_new(CUSW_KIND_STREAM, s);
    if (s->handle == 0) {
        pthread_cond_destroy(&s->wake);
        free(s);
        return NULL;
    }
    s->id = next_stream_id++;
    if (kind == CUSW_STREAM_USER)
        user_streams++;
    s->ctx_next = ctx->streams;
    if (ctx->streams != NULL)
        ctx->streams->ctx_prev = s;
    ctx->streams = s;
    return s;
}

void cusw_stream_ref(struct cusw_stream *s) { s->refs++; }

void cusw_stream_unref(struct cusw_stream *s)
{
    if (--s->refs != 0)
        return;
    free(s->cap_deps);
    free(s->info_nodes);
    free(s->info_edges);
    pthread_cond_destroy(&s->wake);
    free(s);
}

void cusw_stream_close(struct cusw_stream *s)
{
    if (s->handle != 0) {
        cusw_handle_remove(s->handle);
        s->handle = 0;
        if (s->kind == CUSW_STREAM_USER)
            user_streams--;
    }
    s->destroyed = true;
    pthread_cond_signal(&s->wake);
}

void cusw_stream_unlink(struct cusw_stream *s)
{
    if (s->ctx_prev != NULL)
        s->ctx_prev->ctx_next = s->ctx_next;
    else
        s->ctx->streams = s->ctx_next;
    if (s->ctx_next != NULL)
        s->ctx_next->ctx_prev = s->ctx_prev;
    s->ctx_prev = s->ctx_next = NULL;
}

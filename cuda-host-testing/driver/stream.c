/*
 * stream.c - streams: one worker thread per stream runs its operations in FIFO order.
 *
 * Ordering between streams is expressed as dependencies of an operation on a point of another
 * stream ("stream X has completed its operation number N"). They come from event waits and from
 * the legacy default stream's implicit synchronisation:
 *  - an operation on the legacy stream depends on everything enqueued so far on every blocking
 *    stream (flags 0, and per-thread default streams) of its context;
 *  - an operation on a blocking stream depends on everything enqueued so far on the legacy
 *    stream.
 * Non-blocking streams take part in neither. Dependencies only ever name earlier operations, so
 * they cannot form cycles.
 *
 * A destroyed stream loses its handle at once; its worker still drains what was enqueued (as a
 * device would) and then exits. A stream object is freed when its worker has exited and no
 * dependency or event names it any more (reference count).
 */
#include "internal.h"

#include <stdlib.h>

static size_t user_streams; /* [locked] with a handle: not destroyed */

size_t cusw_user_stream_count(void) { return user_streams; }

/* [locked] Never reused, like the real driver's stream ids, which tell streams apart for the
 * life of the process even when a handle's address is reused. */
static unsigned long long next_stream_id = 1;

bool cusw_stream_syncs_with_legacy(const struct cusw_stream *s)
{
    return s->kind == CUSW_STREAM_PER_THREAD ||
           (s->kind == CUSW_STREAM_USER && (s->flags & CU_STREAM_NON_BLOCKING) == 0);
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

static void ctx_unlink(struct cusw_stream *s)
{
    if (s->ctx_prev != NULL)
        s->ctx_prev->ctx_next = s->ctx_next;
    else
        s->ctx->streams = s->ctx_next;
    if (s->ctx_next != NULL)
        s->ctx_next->ctx_prev = s->ctx_prev;
    s->ctx_prev = s->ctx_next = NULL;
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
    ctx_unlink(s);
    cusw_broadcast_progress();
    cusw_stream_unref(s); /* the worker's reference */
    cusw_lock_release();
    return NULL;
}

struct cusw_stream *cusw_stream_create(struct cusw_ctx *ctx, enum cusw_stream_kind kind,
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
    s->refs = 1; /* the worker's */
    s->id = next_stream_id++;
    s->handle = cusw_handle_new(CUSW_KIND_STREAM, s);
    if (s->handle == 0 || !cusw_spawn_thread(worker_main, s)) {
        if (s->handle != 0)
            cusw_handle_remove(s->handle);
        pthread_cond_destroy(&s->wake);
        free(s);
        return NULL;
    }
    if (kind == CUSW_STREAM_USER)
        user_streams++;
    s->ctx_next = ctx->streams;
    if (ctx->streams != NULL)
        ctx->streams->ctx_prev = s;
    ctx->streams = s;
    return s;
}

void cusw_stream_destroy(struct cusw_stream *s)
{
    if (s->handle != 0) {
        cusw_handle_remove(s->handle);
        s->handle = 0;
        if (s->kind == CUSW_STREAM_USER)
            user_streams--;
    }
    s->destroyed = true;
    if (s->capture != NULL)
        cusw_capture_stream_gone(s);
    pthread_cond_signal(&s->wake);
}

/* ---- Per-thread default streams ------------------------------------------------------------- */

/* Per thread, the handle of its per-thread stream in each context (by cusw_ctx_slot). Handles,
 * not pointers: a context's last release destroys the stream behind the thread's back, and a stale
 * handle is then simply not found. The streams are destroyed when the thread exits. */
struct thread_streams {
    uintptr_t handles[CUSW_CONTEXT_SLOTS];
};

/* Kept as a thread-specific value (not a _Thread_local pointer): pthread clears it before calling
 * the destructor, so a CUDA call made by a later destructor of the exiting thread starts afresh
 * instead of finding freed memory. */
static pthread_key_t thread_streams_key;
static pthread_once_t thread_streams_once = PTHREAD_ONCE_INIT;

static void thread_streams_exit(void *p)
{
    struct thread_streams *ts = p;
    cusw_lock_acquire();
    for (int i = 0; i < CUSW_CONTEXT_SLOTS; i++) {
        struct cusw_stream *s = cusw_handle_get(ts->handles[i], CUSW_KIND_STREAM);
        if (s != NULL)
            cusw_stream_destroy(s);
    }
    cusw_lock_release();
    free(ts);
}

static void make_thread_streams_key(void)
{
    pthread_key_create(&thread_streams_key, thread_streams_exit);
}

static CUresult per_thread_stream(struct cusw_ctx *ctx, struct cusw_stream **out)
{
    pthread_once(&thread_streams_once, make_thread_streams_key);
    struct thread_streams *ts = pthread_getspecific(thread_streams_key);
    if (ts == NULL) {
        ts = calloc(1, sizeof *ts);
        if (ts == NULL || pthread_setspecific(thread_streams_key, ts) != 0) {
            free(ts);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    uintptr_t *slot = &ts->handles[cusw_ctx_slot(ctx)];
    struct cusw_stream *s = cusw_handle_get(*slot, CUSW_KIND_STREAM);
    if (s == NULL) {
        s = cusw_stream_create(ctx, CUSW_STREAM_PER_THREAD, 0);
        if (s == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        *slot = s->handle;
    }
    *out = s;
    return CUDA_SUCCESS;
}

/* ---- Resolution, enqueue, waiting ----------------------------------------------------------- */

CUresult cusw_stream_resolve(CUstream handle, bool per_thread, struct cusw_stream **out)
{
    if (handle == NULL)
        handle = per_thread ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    if (handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD) {
        struct cusw_ctx *ctx = NULL;
        CUresult rc = cusw_ctx_current(&ctx);
        if (rc != CUDA_SUCCESS)
            return rc;
        if (handle == CU_STREAM_PER_THREAD)
            return per_thread_stream(ctx, out);
        *out = ctx->legacy;
        return CUDA_SUCCESS;
    }
    struct cusw_stream *s = cusw_handle_get((uintptr_t)handle, CUSW_KIND_STREAM);
    if (s == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult rc = cusw_ctx_check(s->ctx);
    if (rc == CUDA_SUCCESS)
        *out = s;
    return rc;
}

static bool pending(const struct cusw_stream *s) { return s->completed < s->enqueued; }

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
            if (t != s && cusw_stream_syncs_with_legacy(t) && pending(t))
                add_dep(op, t, t->enqueued);
    } else if (cusw_stream_syncs_with_legacy(s) && ctx->legacy != NULL && pending(ctx->legacy)) {
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

void cusw_ctx_drain(struct cusw_ctx *ctx)
{
    size_t n = 0;
    for (struct cusw_stream *s = ctx->streams; s != NULL; s = s->ctx_next)
        n++;
    struct cusw_dep *targets = calloc(n ? n : 1, sizeof *targets);
    if (targets == NULL) {
        /* Out of memory: fall back to waiting stream by stream until all are idle. */
        for (bool busy = true; busy;) {
            busy = false;
            for (struct cusw_stream *s = ctx->streams; s != NULL && !busy; s = s->ctx_next)
                busy = pending(s);
            if (busy)
                cusw_wait_progress();
        }
        return;
    }
    size_t k = 0;
    for (struct cusw_stream *s = ctx->streams; s != NULL; s = s->ctx_next) {
        cusw_stream_ref(s);
        targets[k].stream = s;
        targets[k].seq = s->enqueued;
        k++;
    }
    for (size_t i = 0; i < k; i++) {
        while (targets[i].stream->completed < targets[i].seq)
            cusw_wait_progress();
    }
    for (size_t i = 0; i < k; i++)
        cusw_stream_unref(targets[i].stream);
    free(targets);
}

static CUresult submit(CUstream stream, bool per_thread, const struct cusw_action *actions,
                       size_t n, bool wait)
{
    if (!cusw_initialized()) /* the controls that submit are not entry points of the driver */
        return CUDA_ERROR_NOT_INITIALIZED;
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    bool capturing = false;
    CUresult rc = cusw_stream_resolve(stream, per_thread, &s);
    if (rc == CUDA_SUCCESS)
        rc = cusw_capture_check_enqueue(s, &capturing);
    for (size_t i = 0; rc == CUDA_SUCCESS && i < n; i++)
        rc = capturing ? cusw_capture_add_node(s, &actions[i])
                       : cusw_stream_enqueue(s, &actions[i], NULL, 0);
    if (rc == CUDA_SUCCESS && wait && !capturing) {
        cusw_stream_drain(s); /* lets go of the lock while it waits */
        rc = cusw_ctx_sticky(s->ctx);
    }
    cusw_lock_release();
    return rc;
}

CUresult cusw_submit(CUstream stream, bool per_thread, const struct cusw_action *a)
{
    return submit(stream, per_thread, a, 1, false);
}

CUresult cusw_submit_all(CUstream stream, bool per_thread, const struct cusw_action *actions,
                         size_t n)
{
    return submit(stream, per_thread, actions, n, false);
}

CUresult cusw_submit_and_wait(CUstream stream, bool per_thread, const struct cusw_action *a)
{
    return submit(stream, per_thread, a, 1, true);
}

/* ---- Stream API ------------------------------------------------------------------------------ */

CUSW_EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    CUSW_INIT_ENTRY();
    if (phStream == NULL || (Flags & ~(unsigned int)CU_STREAM_NON_BLOCKING) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_ctx *ctx = NULL;
    CUresult rc = cusw_ctx_current(&ctx);
    if (rc == CUDA_SUCCESS) {
        struct cusw_stream *s = cusw_stream_create(ctx, CUSW_STREAM_USER, Flags);
        if (s == NULL)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else
            *phStream = (CUstream)s->handle;
    }
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
    CUSW_INIT_ENTRY();
    CUresult rc = CUDA_SUCCESS;
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    if (hStream != NULL && hStream != CU_STREAM_LEGACY && hStream != CU_STREAM_PER_THREAD)
        s = cusw_handle_get((uintptr_t)hStream, CUSW_KIND_STREAM);
    if (s == NULL) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else {
        /* Returns at once; pending work still runs. With a sticky error the call answers the
         * error, but the stream is destroyed all the same so that nothing leaks. */
        rc = cusw_ctx_sticky(s->ctx);
        cusw_stream_destroy(s);
    }
    cusw_lock_release();
    return rc;
}

/* Synchronize (`wait`) or query a stream. */
static CUresult finish_or_query(CUstream hStream, bool per_thread, bool wait)
{
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    CUresult rc = cusw_stream_resolve(hStream, per_thread, &s);
    if (rc == CUDA_SUCCESS)
        rc = cusw_capture_check_sync(s);
    if (rc == CUDA_SUCCESS && wait) {
        cusw_stream_drain(s);
        rc = cusw_ctx_sticky(s->ctx);
    } else if (rc == CUDA_SUCCESS && pending(s)) {
        rc = CUDA_ERROR_NOT_READY;
    }
    cusw_lock_release();
    return rc;
}

CUSW_TWINS(cuStreamSynchronize, (CUstream hStream), finish_or_query(hStream, per_thread, true))
CUSW_TWINS(cuStreamQuery, (CUstream hStream), finish_or_query(hStream, per_thread, false))

/* The stream's context, and for the _v2 form its green context: this driver has none. */
static CUresult get_ctx(CUstream hStream, bool per_thread, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
    if (pCtx == NULL && pGreenCtx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    CUresult rc = cusw_stream_resolve(hStream, per_thread, &s);
    if (rc == CUDA_SUCCESS && pCtx != NULL)
        *pCtx = (CUcontext)s->ctx->handle;
    if (rc == CUDA_SUCCESS && pGreenCtx != NULL)
        *pGreenCtx = NULL;
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
    CUSW_INIT_ENTRY();
    return get_ctx(hStream, false, pctx, NULL);
}

CUSW_TWINS(cuStreamGetCtx_v2, (CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx),
           get_ctx(hStream, per_thread, pCtx, pGreenCtx))

static CUresult get_id(CUstream hStream, bool per_thread, unsigned long long *streamId)
{
    if (streamId == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    CUresult rc = cusw_stream_resolve(hStream, per_thread, &s);
    if (rc == CUDA_SUCCESS)
        *streamId = s->id;
    cusw_lock_release();
    return rc;
}

CUSW_TWINS(cuStreamGetId, (CUstream hStream, unsigned long long *streamId),
           get_id(hStream, per_thread, streamId))

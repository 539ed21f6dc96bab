/*
 * host_thread.c - the single driver thread that runs host functions and stream callbacks.
 *
 * Measured on the real driver: one driver thread runs the host functions of all streams (they all
 * see the same thread id). So a stream worker that reaches a host function hands it to this
 * thread and waits for it to return before the stream continues; host functions of different
 * streams therefore never run concurrently, and one that blocks holds up the others, as on the
 * real driver.
 */
#include "internal.h"

struct host_job {
    struct host_job *next;
    struct cusw_ctx *ctx;
    bool is_callback;
    CUhostFn fn;
    CUstreamCallback callback;
    CUstream stream;
    void *data;
    bool done;
    pthread_cond_t done_cv; /* per job: only its submitter is woken */
};

static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t host_work = PTHREAD_COND_INITIALIZER; /* the host thread waits here */
static struct host_job *queue_head, *queue_tail;
static pthread_once_t host_once = PTHREAD_ONCE_INIT;
static bool host_thread_running;

/* The sticky state is read when the job starts, not when it was queued: a host function waiting
 * here while another stream faults never runs. */
static void run_job(struct host_job *job)
{
    CUresult sticky = cusw_ctx_sticky(job->ctx);
    if (job->is_callback)
        job->callback(job->stream, sticky, job->data);
    else if (sticky == CUDA_SUCCESS)
        job->fn(job->data);
}

static void *host_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&host_lock);
    for (;;) {
        while (queue_head == NULL)
            pthread_cond_wait(&host_work, &host_lock);
        struct host_job *job = queue_head;
        queue_head = job->next;
        if (queue_head == NULL)
            queue_tail = NULL;
        pthread_mutex_unlock(&host_lock);
        run_job(job);
        pthread_mutex_lock(&host_lock);
        job->done = true;
        pthread_cond_signal(&job->done_cv);
    }
    return NULL;
}

static void start_host_thread(void)
{
    host_thread_running = cusw_spawn_thread(host_main, NULL);
}

static void submit_and_wait(struct host_job *job)
{
    pthread_once(&host_once, start_host_thread);
    if (!host_thread_running) {
        run_job(job); /* no thread could be started: degrade to running on the stream worker */
        return;
    }
    pthread_cond_init(&job->done_cv, NULL);
    pthread_mutex_lock(&host_lock);
    job->next = NULL;
    if (queue_tail != NULL)
        queue_tail->next = job;
    else
        queue_head = job;
    queue_tail = job;
    pthread_cond_signal(&host_work);
    while (!job->done)
        pthread_cond_wait(&job->done_cv, &host_lock);
    pthread_mutex_unlock(&host_lock);
    pthread_cond_destroy(&job->done_cv); /* signalled under host_lock, so no longer in use */
}

void cusw_host_run_fn(struct cusw_ctx *ctx, CUhostFn fn, void *data)
{
    struct host_job job = { .ctx = ctx, .fn = fn, .data = data };
    submit_and_wait(&job);
}

void cusw_host_run_callback(struct cusw_ctx *ctx, CUstreamCallback fn, CUstream stream, void *data)
{
    struct host_job job = { .ctx = ctx, .is_callback = true, .callback = fn, .stream = stream,
                            .data = data };
    submit_and_wait(&job);
}

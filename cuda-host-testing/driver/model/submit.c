/*
 * submit.c - from an API call's stream argument to stream-ordered work: which stream the argument
 * names (NULL, the legacy stream, the calling thread's per-thread stream, or a handle), and
 * submitting an action to it under the capture rules, where a capturing stream takes the action
 * as a graph node instead of running it.
 */
#include "internal.h"

#include <stdlib.h>

/* ---- Per-thread default streams -------------------------------------------------------------- */

/* Per thread, the handle of its per-thread stream in each context it used one of. Handles, not
 * pointers: a context's deactivation destroys the stream behind the thread's back, and a stale
 * handle is then simply not found. The streams are destroyed when the thread exits. */
struct thread_stream {
    const struct cusw_ctx *ctx; /* contexts are never freed */
    uintptr_t handle;
};

struct thread_streams {
    struct thread_stream *items;
    size_t n, capacity;
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
    for (size_t i = 0; i < ts->n; i++) {
        struct cusw_stream *s = cusw_handle_get(ts->items[i].handle, CUSW_KIND_STREAM);
        if (s != NULL)
            cusw_stream_destroy(s);
    }
    cusw_lock_release();
    free(ts->items);
    free(ts);
}

static void make_thread_streams_key(void)
{
    pthread_key_create(&thread_streams_key, thread_streams_exit);
}

/* [locked] The calling thread's entry for `ctx`, made on first use; NULL when out of memory. */
static struct thread_stream *thread_stream_of(const struct cusw_ctx *ctx)
{
    pthread_once(&thread_streams_once, make_thread_streams_key);
    struct thread_streams *ts = pthread_getspecific(thread_streams_key);
    if (ts == NULL) {
        ts = calloc(1, sizeof *ts);
        if (ts == NULL || pthread_setspecific(thread_streams_key, ts) != 0) {
            free(ts);
            return NULL;
        }
    }
    for (size_t i = 0; i < ts->n; i++)
        if (ts->items[i].ctx == ctx)
            return &ts->items[i];
    if (!cusw_reserve((void **)&ts->items, &ts->capacity, ts->n + 1, sizeof *ts->items))
        return NULL;
    ts->items[ts->n] = (struct thread_stream){ .ctx = ctx };
    return &ts->items[ts->n++];
}

/* [locked] */
static CUresult per_thread_stream(struct cusw_ctx *ctx, struct cusw_stream **out)
{
    struct thread_stream *entry = thread_stream_of(ctx);
    if (entry == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct cusw_stream *s = cusw_handle_get(entry->handle, CUSW_KIND_STREAM);
    if (s == NULL) {
        s = cusw_stream_create(ctx, CUSW_STREAM_PER_THREAD, 0);
        if (s == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        entry->handle = s->handle;
    }
    *out = s;
    return CUDA_SUCCESS;
}

/* ---- Resolution ------------------------------------------------------------------------------ */

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

/* ---- Submission ------------------------------------------------------------------------------ */

/* [locked] The stream an API call's argument names, checked, and whether the capture rules make
 * its work a graph node (cusw_capture_check_enqueue). */
static CUresult target(CUstream stream, bool per_thread, struct cusw_stream **s, bool *capturing)
{
    if (!cusw_initialized()) /* the controls that submit are not entry points of the driver */
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = cusw_stream_resolve(stream, per_thread, s);
    return rc != CUDA_SUCCESS ? rc : cusw_capture_check_enqueue(*s, capturing);
}

/* [locked] Gives `a` to `s`, taking over the references it holds: a capture's new node takes
 * references of its own and `a`'s are released; an operation of the stream takes `a`'s. */
static CUresult give(struct cusw_stream *s, bool capturing, struct cusw_action *a)
{
    CUresult rc;
    if (capturing)
        rc = cusw_capture_add_node(s, a);
    else if (!cusw_action_stage(a))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    else if ((rc = cusw_stream_enqueue(s, a, NULL, 0)) == CUDA_SUCCESS)
        return rc;
    cusw_action_release(a);
    return rc;
}

static CUresult submit(CUstream stream, bool per_thread, const struct cusw_action *a, bool wait)
{
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    bool capturing = false;
    CUresult rc = target(stream, per_thread, &s, &capturing);
    if (rc == CUDA_SUCCESS) {
        struct cusw_action given = *a;
        rc = give(s, capturing, &given);
    }
    if (rc == CUDA_SUCCESS && wait && !capturing) {
        cusw_stream_drain(s); /* lets go of the lock while it waits */
        rc = cusw_ctx_sticky(s->ctx);
    }
    cusw_lock_release();
    return rc;
}

CUresult cusw_submit(CUstream stream, bool per_thread, const struct cusw_action *a)
{
    return submit(stream, per_thread, a, false);
}

CUresult cusw_submit_and_wait(CUstream stream, bool per_thread, const struct cusw_action *a)
{
    return submit(stream, per_thread, a, true);
}

CUresult cusw_submit_batch(CUstream stream, bool per_thread, unsigned int count,
                           const CUstreamBatchMemOpParams *ops)
{
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    bool capturing = false;
    struct cusw_action a;
    CUresult rc = target(stream, per_thread, &s, &capturing);
    if (rc == CUDA_SUCCESS && !cusw_batch_action(s->ctx, count, ops, &a))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS)
        rc = give(s, capturing, &a);
    cusw_lock_release();
    return rc;
}

/* ---- The stream-ordered allocator ------------------------------------------------------------ */

/* Graph memory nodes (an allocation or a free captured) are not modelled: a capturing stream
 * refuses them, and the capture goes on. */
CUresult cusw_submit_allocation(CUstream stream, bool per_thread, CUmemoryPool pool, size_t size,
                                CUdeviceptr *out)
{
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    bool capturing = false;
    CUresult rc = target(stream, per_thread, &s, &capturing);
    if (rc == CUDA_SUCCESS && capturing)
        rc = CUDA_ERROR_NOT_SUPPORTED;
    struct cusw_pool *from = NULL;
    if (rc == CUDA_SUCCESS && pool != NULL)
        rc = cusw_pool_from_handle(pool, &from);
    else if (rc == CUDA_SUCCESS && (from = cusw_pool_current(s->ctx->device)) == NULL)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS && cusw_pool_device(from) != s->ctx->device)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS && size > cusw_device_memory_free(s->ctx->device))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    struct cusw_block *b = NULL;
    if (rc == CUDA_SUCCESS)
        rc = cusw_block_allocate(from, size, &b);
    if (rc == CUDA_SUCCESS) {
        struct cusw_action a = { .kind = CUSW_ACT_ALLOCATE, .u.block = b };
        rc = cusw_stream_enqueue(s, &a, NULL, 0);
        if (rc != CUDA_SUCCESS) {
            cusw_block_to_free(cusw_block_memory(b));
            cusw_block_freed(b);
        } else {
            *out = (CUdeviceptr)(uintptr_t)cusw_block_memory(b);
        }
    }
    cusw_lock_release();
    return rc;
}

CUresult cusw_submit_free(CUstream stream, bool per_thread, CUdeviceptr memory)
{
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    bool capturing = false;
    CUresult rc = target(stream, per_thread, &s, &capturing);
    if (rc == CUDA_SUCCESS && capturing)
        rc = CUDA_ERROR_NOT_SUPPORTED;
    struct cusw_block *b = NULL;
    if (rc == CUDA_SUCCESS && (b = cusw_block_to_free((void *)(uintptr_t)memory)) == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        struct cusw_action a = { .kind = CUSW_ACT_FREE, .u.block = b };
        rc = cusw_stream_enqueue(s, &a, NULL, 0);
        if (rc != CUDA_SUCCESS)
            cusw_block_freed(b); /* given back at once: the stream cannot take it */
    }
    cusw_lock_release();
    return rc;
}

/* ---- Kernels' launches ----------------------------------------------------------------------- */

/* [locked] Whether a launch's geometry is one the device takes, for `f`. */
static CUresult launch_checked(const struct cusw_function *f, const unsigned int grid[3],
                               const unsigned int block[3], unsigned int shared_bytes,
                               bool cooperative)
{
    static const CUdevice_attribute block_limits[3] = { CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
                                                        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
                                                        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z };
    static const CUdevice_attribute grid_limits[3] = { CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
                                                       CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
                                                       CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z };
    unsigned long long threads = 1, blocks = 1;
    for (int i = 0; i < 3; i++) {
        int block_limit = 0, grid_limit = 0;
        cusw_device_attribute(0, block_limits[i], &block_limit);
        cusw_device_attribute(0, grid_limits[i], &grid_limit);
        if (grid[i] == 0 || block[i] == 0 || block[i] > (unsigned int)block_limit ||
            grid[i] > (unsigned int)grid_limit)
            return CUDA_ERROR_INVALID_VALUE;
        threads *= block[i];
        blocks *= grid[i];
    }
    int max_threads = 0;
    cusw_function_attribute(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &max_threads);
    if (threads > (unsigned long long)max_threads ||
        shared_bytes > cusw_function_max_dynamic_shared(f))
        return CUDA_ERROR_INVALID_VALUE;
    if (cooperative) {
        int processors = 0;
        cusw_device_attribute(0, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &processors);
        unsigned long long resident =
            (unsigned long long)cusw_function_occupancy(f, (int)threads, shared_bytes) *
            (unsigned long long)processors;
        if (blocks > resident)
            return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
    }
    return CUDA_SUCCESS;
}

CUresult cusw_submit_kernel(CUstream stream, bool per_thread, CUfunction function,
                            const unsigned int grid[3], const unsigned int block[3],
                            unsigned int shared_bytes, void **kernel_params, void **extra,
                            bool cooperative)
{
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    bool capturing = false;
    struct cusw_function *f = NULL;
    CUresult rc = function == NULL ? CUDA_ERROR_INVALID_HANDLE
                                   : target(stream, per_thread, &s, &capturing);
    if (rc == CUDA_SUCCESS)
        rc = cusw_function_from_handle(function, s->ctx, &f);
    /* A module's functions are its context's. */
    if (rc == CUDA_SUCCESS && f->module->ctx != s->ctx)
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS)
        rc = launch_checked(f, grid, block, shared_bytes, cooperative);
    struct cusw_action a;
    if (rc == CUDA_SUCCESS)
        rc = cusw_kernel_action(f, grid, block, shared_bytes, (CUstream)s->handle, kernel_params,
                                extra, &a);
    if (rc == CUDA_SUCCESS)
        rc = give(s, capturing, &a);
    cusw_lock_release();
    return rc;
}

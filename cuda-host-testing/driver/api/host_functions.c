/*
 * host_functions.c - the host's work in stream order: cuLaunchHostFunc (both ABIs, Execution
 * Control) and cuStreamAddCallback (Stream Management). Both run on the one host-function
 * thread (model/host_thread.c); a callback also runs, with the error as its status, once the
 * context has a sticky error, where a host function is skipped.
 */
#include "internal.h"

static CUresult launch_host_func(CUstream hStream, bool per_thread, CUhostFn fn, void *userData)
{
    if (fn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct cusw_action a = { .kind = CUSW_ACT_HOST_FN, .u.host = { fn, userData } };
    return cusw_submit(hStream, per_thread, &a);
}

/* Every valid mode means "run in stream order" here: the host thread always blocks for work. */
static CUresult launch_host_func_v2(CUstream hStream, bool per_thread, CUhostFn fn,
                                    void *userData, unsigned int syncMode)
{
    if (syncMode != CU_HOST_TASK_BLOCKING && syncMode != CU_HOST_TASK_SPINWAIT)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = launch_host_func(hStream, per_thread, fn, userData);
    if (rc == CUDA_SUCCESS)
        cusw_count_host_task_sync_mode(syncMode);
    return rc;
}

CUSW_TWINS(cuLaunchHostFunc, (CUstream hStream, CUhostFn fn, void *userData),
           launch_host_func(hStream, per_thread, fn, userData))
CUSW_TWINS(cuLaunchHostFunc_v2,
           (CUstream hStream, CUhostFn fn, void *userData, unsigned int syncMode),
           launch_host_func_v2(hStream, per_thread, fn, userData, syncMode))

static CUresult add_callback(CUstream hStream, bool per_thread, CUstreamCallback callback,
                             void *userData, unsigned int flags)
{
    if (callback == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    bool capturing = false;
    CUresult rc = cusw_stream_resolve(hStream, per_thread, &s);
    if (rc == CUDA_SUCCESS)
        rc = cusw_capture_check_enqueue(s, &capturing);
    if (rc == CUDA_SUCCESS && capturing) {
        /* Measured: callbacks cannot be captured; the call fails and invalidates the capture. */
        cusw_capture_invalidate(s->capture);
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (rc == CUDA_SUCCESS) {
        struct cusw_action a = { .kind = CUSW_ACT_CALLBACK,
                                 .u.callback = { callback, userData, hStream } };
        rc = cusw_stream_enqueue(s, &a, NULL, 0);
    }
    cusw_lock_release();
    return rc;
}

CUSW_TWINS(cuStreamAddCallback,
           (CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags),
           add_callback(hStream, per_thread, callback, userData, flags))

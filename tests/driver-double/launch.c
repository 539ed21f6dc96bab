/*
 * launch.c - stream-ordered host work and memory operations: cuLaunchHostFunc (both ABIs),
 * cuStreamAddCallback, cuStreamWrite/WaitValue32/64; and the kernel and module entry points,
 * which exist but answer CUDA_ERROR_NOT_SUPPORTED since this driver runs no device code.
 */
#include "internal.h"
#include "entries.h"

/* ---- Host functions -------------------------------------------------------------------------- */

static CUresult launch_host_func(CUstream hStream, bool per_thread, CUhostFn fn, void *userData)
{
    CUresult rc = cusw_require_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (fn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct cusw_action a = { .kind = CUSW_ACT_HOST_FN, .u.host = { fn, userData } };
    return cusw_submit(hStream, per_thread, &a);
}

/* Every valid mode means "run in stream order" here: the host thread always blocks for work. */
static bool valid_sync_mode(unsigned int syncMode)
{
    return syncMode == CU_HOST_TASK_BLOCKING || syncMode == CU_HOST_TASK_SPINWAIT;
}

CUSW_EXPORT CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    CUSW_ENTRY("cuLaunchHostFunc", "cuLaunchHostFunc");
    return launch_host_func(hStream, false, fn, userData);
}

CUSW_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
{
    CUSW_ENTRY("cuLaunchHostFunc", "cuLaunchHostFunc_ptsz");
    return launch_host_func(hStream, true, fn, userData);
}

CUSW_EXPORT CUresult cuLaunchHostFunc_v2(CUstream hStream, CUhostFn fn, void *userData,
                                         unsigned int syncMode)
{
    CUSW_ENTRY("cuLaunchHostFunc", "cuLaunchHostFunc_v2");
    if (!valid_sync_mode(syncMode))
        return CUDA_ERROR_INVALID_VALUE;
    return launch_host_func(hStream, false, fn, userData);
}

CUSW_EXPORT CUresult cuLaunchHostFunc_v2_ptsz(CUstream hStream, CUhostFn fn, void *userData,
                                              unsigned int syncMode)
{
    CUSW_ENTRY("cuLaunchHostFunc", "cuLaunchHostFunc_v2_ptsz");
    if (!valid_sync_mode(syncMode))
        return CUDA_ERROR_INVALID_VALUE;
    return launch_host_func(hStream, true, fn, userData);
}

/* ---- Stream callbacks ------------------------------------------------------------------------ */

static CUresult add_callback(CUstream hStream, bool per_thread, CUstreamCallback callback,
                             void *userData, unsigned int flags)
{
    CUresult rc = cusw_require_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (callback == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    bool capturing = false;
    rc = cusw_stream_resolve(hStream, per_thread, &s);
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

CUSW_EXPORT CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback,
                                         void *userData, unsigned int flags)
{
    CUSW_ENTRY("cuStreamAddCallback", "cuStreamAddCallback");
    return add_callback(hStream, false, callback, userData, flags);
}

CUSW_EXPORT CUresult cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback,
                                              void *userData, unsigned int flags)
{
    CUSW_ENTRY("cuStreamAddCallback", "cuStreamAddCallback_ptsz");
    return add_callback(hStream, true, callback, userData, flags);
}

/* ---- Stream memory operations ---------------------------------------------------------------- */

static CUresult mem_op(CUstream stream, bool per_thread, enum cusw_action_kind kind,
                       CUdeviceptr addr, uint64_t value, unsigned int flags, bool is64)
{
    CUresult rc = cusw_require_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    uintptr_t alignment = is64 ? 8 : 4;
    if (addr == 0 || addr % alignment != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (kind == CUSW_ACT_WAIT_VALUE) {
        /* FLUSH needs CAN_FLUSH_REMOTE_WRITES, which this device reports as 0. */
        if (flags > CU_STREAM_WAIT_VALUE_NOR)
            return CUDA_ERROR_INVALID_VALUE;
    } else if (flags != CU_STREAM_WRITE_VALUE_DEFAULT) {
        return CUDA_ERROR_INVALID_VALUE; /* NO_MEMORY_BARRIER is not supported by the v2 API */
    }
    struct cusw_action a = { .kind = kind, .u.mem = { addr, value, flags, is64 } };
    return cusw_submit(stream, per_thread, &a);
}

CUSW_EXPORT CUresult cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                             unsigned int flags)
{
    CUSW_ENTRY("cuStreamWriteValue32", "cuStreamWriteValue32_v2");
    return mem_op(stream, false, CUSW_ACT_WRITE_VALUE, addr, value, flags, false);
}

CUSW_EXPORT CUresult cuStreamWriteValue32_v2_ptsz(CUstream stream, CUdeviceptr addr,
                                                  cuuint32_t value, unsigned int flags)
{
    CUSW_ENTRY("cuStreamWriteValue32", "cuStreamWriteValue32_v2_ptsz");
    return mem_op(stream, true, CUSW_ACT_WRITE_VALUE, addr, value, flags, false);
}

CUSW_EXPORT CUresult cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                            unsigned int flags)
{
    CUSW_ENTRY("cuStreamWaitValue32", "cuStreamWaitValue32_v2");
    return mem_op(stream, false, CUSW_ACT_WAIT_VALUE, addr, value, flags, false);
}

CUSW_EXPORT CUresult cuStreamWaitValue32_v2_ptsz(CUstream stream, CUdeviceptr addr,
                                                 cuuint32_t value, unsigned int flags)
{
    CUSW_ENTRY("cuStreamWaitValue32", "cuStreamWaitValue32_v2_ptsz");
    return mem_op(stream, true, CUSW_ACT_WAIT_VALUE, addr, value, flags, false);
}

CUSW_EXPORT CUresult cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                             unsigned int flags)
{
    CUSW_ENTRY("cuStreamWriteValue64", "cuStreamWriteValue64_v2");
    return mem_op(stream, false, CUSW_ACT_WRITE_VALUE, addr, value, flags, true);
}

CUSW_EXPORT CUresult cuStreamWriteValue64_v2_ptsz(CUstream stream, CUdeviceptr addr,
                                                  cuuint64_t value, unsigned int flags)
{
    CUSW_ENTRY("cuStreamWriteValue64", "cuStreamWriteValue64_v2_ptsz");
    return mem_op(stream, true, CUSW_ACT_WRITE_VALUE, addr, value, flags, true);
}

CUSW_EXPORT CUresult cuStreamWaitValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                            unsigned int flags)
{
    CUSW_ENTRY("cuStreamWaitValue64", "cuStreamWaitValue64_v2");
    return mem_op(stream, false, CUSW_ACT_WAIT_VALUE, addr, value, flags, true);
}

CUSW_EXPORT CUresult cuStreamWaitValue64_v2_ptsz(CUstream stream, CUdeviceptr addr,
                                                 cuuint64_t value, unsigned int flags)
{
    CUSW_ENTRY("cuStreamWaitValue64", "cuStreamWaitValue64_v2_ptsz");
    return mem_op(stream, true, CUSW_ACT_WAIT_VALUE, addr, value, flags, true);
}

/* ---- Modules and kernels: not run by this driver --------------------------------------------- */

static CUresult not_supported(void)
{
    CUresult rc = cusw_require_init();
    return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_NOT_SUPPORTED;
}

/* Loading a module needs a current context, as on the real driver, which answers
 * CUDA_ERROR_INVALID_CONTEXT without one; with one, this driver cannot run kernels. */
static CUresult not_supported_in_context(void)
{
    CUresult rc = cusw_require_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    cusw_lock_acquire();
    struct cusw_ctx *ctx;
    rc = cusw_ctx_current(&ctx);
    cusw_lock_release();
    return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_NOT_SUPPORTED;
}

CUSW_EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    CUSW_ENTRY("cuModuleLoad", "cuModuleLoad");
    (void)module;
    (void)fname;
    return not_supported_in_context();
}

CUSW_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    CUSW_ENTRY("cuModuleLoadData", "cuModuleLoadData");
    (void)module;
    (void)image;
    return not_supported_in_context();
}

CUSW_EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    CUSW_ENTRY("cuModuleGetFunction", "cuModuleGetFunction");
    (void)hfunc;
    (void)hmod;
    (void)name;
    return not_supported();
}

/* No module can ever be loaded, so every module handle is invalid. */
CUSW_EXPORT CUresult cuModuleUnload(CUmodule hmod)
{
    CUSW_ENTRY("cuModuleUnload", "cuModuleUnload");
    (void)hmod;
    CUresult rc = cusw_require_init();
    return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_INVALID_HANDLE;
}

CUSW_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                    unsigned int gridDimZ, unsigned int blockDimX,
                                    unsigned int blockDimY, unsigned int blockDimZ,
                                    unsigned int sharedMemBytes, CUstream hStream,
                                    void **kernelParams, void **extra)
{
    CUSW_ENTRY("cuLaunchKernel", "cuLaunchKernel");
    (void)f, (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY;
    (void)blockDimZ, (void)sharedMemBytes, (void)hStream, (void)kernelParams, (void)extra;
    return not_supported();
}

CUSW_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                         unsigned int gridDimY, unsigned int gridDimZ,
                                         unsigned int blockDimX, unsigned int blockDimY,
                                         unsigned int blockDimZ, unsigned int sharedMemBytes,
                                         CUstream hStream, void **kernelParams, void **extra)
{
    CUSW_ENTRY("cuLaunchKernel", "cuLaunchKernel_ptsz");
    (void)f, (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY;
    (void)blockDimZ, (void)sharedMemBytes, (void)hStream, (void)kernelParams, (void)extra;
    return not_supported();
}

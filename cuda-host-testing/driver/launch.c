/*
 * launch.c - stream-ordered host work and memory operations: cuLaunchHostFunc (both ABIs),
 * cuStreamAddCallback, cuStreamWrite/WaitValue32/64; and cuModuleLoadData, which answers
 * CUDA_ERROR_NOT_SUPPORTED since this driver runs no device code.
 */
#include "internal.h"

/* ---- Host functions -------------------------------------------------------------------------- */

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

/* ---- Stream callbacks ------------------------------------------------------------------------ */

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

/* ---- Stream memory operations ---------------------------------------------------------------- */

/* A write or a wait as an action, or false for what this driver does not take: a misaligned
 * or null address, or flags other than the comparisons (FLUSH needs CAN_FLUSH_REMOTE_WRITES,
 * which this device reports as 0) and the default write (NO_MEMORY_BARRIER is not supported by
 * the v2 API). */
static bool mem_op_action(enum cusw_action_kind kind, CUdeviceptr addr, uint64_t value,
                          unsigned int flags, bool is64, struct cusw_action *a)
{
    if (addr == 0 || addr % (is64 ? 8 : 4) != 0)
        return false;
    if (kind == CUSW_ACT_WAIT_VALUE ? flags > CU_STREAM_WAIT_VALUE_NOR
                                    : flags != CU_STREAM_WRITE_VALUE_DEFAULT)
        return false;
    *a = (struct cusw_action){ .kind = kind, .u.mem = { addr, value, flags, is64 } };
    return true;
}

static CUresult mem_op(CUstream stream, bool per_thread, enum cusw_action_kind kind,
                       CUdeviceptr addr, uint64_t value, unsigned int flags, bool is64)
{
    struct cusw_action a;
    if (!mem_op_action(kind, addr, value, flags, is64, &a))
        return CUDA_ERROR_INVALID_VALUE;
    return cusw_submit(stream, per_thread, &a);
}

/* The four operations have the same parameters but for the value's width. */
#define MEM_OP_TWINS(name, value_type, kind, is64)                                               \
    CUSW_TWINS(name, (CUstream stream, CUdeviceptr addr, value_type value, unsigned int flags),   \
               mem_op(stream, per_thread, kind, addr, value, flags, is64))

/* One batched operation as an action, or false when this driver does not take it (a flush of
 * remote writes, a barrier, an atomic reduction, or what mem_op_action refuses). */
static bool batched_action(const CUstreamBatchMemOpParams *op, struct cusw_action *a)
{
    bool wait = op->operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 ||
                op->operation == CU_STREAM_MEM_OP_WAIT_VALUE_64;
    bool is64 = op->operation == CU_STREAM_MEM_OP_WAIT_VALUE_64 ||
                op->operation == CU_STREAM_MEM_OP_WRITE_VALUE_64;
    if (!wait && !is64 && op->operation != CU_STREAM_MEM_OP_WRITE_VALUE_32)
        return false;
    /* The wait's and the write's parameters share one layout. */
    const struct CUstreamMemOpWriteValueParams_st *p = &op->writeValue;
    return mem_op_action(wait ? CUSW_ACT_WAIT_VALUE : CUSW_ACT_WRITE_VALUE, p->address,
                         is64 ? p->value64 : p->value, p->flags, is64, a);
}

#define CUSW_BATCH_MAX 256

/* cuStreamBatchMemOp_v2: the operations submitted together, so that nothing else enqueued on the
 * stream comes between them. A capture takes them as one node each (the real driver makes one
 * batch node). */
static CUresult batch_mem_op(CUstream stream, bool per_thread, unsigned int count,
                             CUstreamBatchMemOpParams *ops, unsigned int flags)
{
    if (count == 0 || count > CUSW_BATCH_MAX || ops == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct cusw_action actions[CUSW_BATCH_MAX];
    for (unsigned int i = 0; i < count; i++)
        if (!batched_action(&ops[i], &actions[i]))
            return CUDA_ERROR_INVALID_VALUE;
    return cusw_submit_all(stream, per_thread, actions, count);
}

CUSW_TWINS(cuStreamBatchMemOp_v2,
           (CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray,
            unsigned int flags),
           batch_mem_op(stream, per_thread, count, paramArray, flags))

MEM_OP_TWINS(cuStreamWriteValue32_v2, cuuint32_t, CUSW_ACT_WRITE_VALUE, false)
MEM_OP_TWINS(cuStreamWaitValue32_v2, cuuint32_t, CUSW_ACT_WAIT_VALUE, false)
MEM_OP_TWINS(cuStreamWriteValue64_v2, cuuint64_t, CUSW_ACT_WRITE_VALUE, true)
MEM_OP_TWINS(cuStreamWaitValue64_v2, cuuint64_t, CUSW_ACT_WAIT_VALUE, true)

/* ---- Modules: none can be loaded ------------------------------------------------------------ */

/* Loading a module needs a current context, as on the real driver, which answers
 * CUDA_ERROR_INVALID_CONTEXT without one; with one, this driver cannot run kernels. */
CUSW_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    CUSW_INIT_ENTRY();
    (void)module;
    (void)image;
    cusw_lock_acquire();
    struct cusw_ctx *ctx;
    CUresult rc = cusw_ctx_current(&ctx);
    cusw_lock_release();
    return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_NOT_SUPPORTED;
}

/*
 * stream_memory.c - Stream Memory Operations: cuStreamWriteValue32/64_v2,
 * cuStreamWaitValue32/64_v2, cuStreamBatchMemOp_v2, on the host memory that stands in for device
 * memory (a wait polls it from the stream's worker). Each call enqueues one batch of operations
 * (model/action.c says which it takes): one operation of the stream, so that nothing else
 * enqueued on it comes between a batch's operations, and one batch node of a capture.
 */
#include "internal.h"

/* A single operation is a batch of one, described as cuStreamBatchMemOp_v2 takes it. */
static CUresult mem_op(CUstream stream, bool per_thread, CUstreamBatchMemOpType operation,
                       CUdeviceptr addr, uint64_t value, unsigned int flags)
{
    CUstreamBatchMemOpParams op = { .writeValue = { .operation = operation,
                                                    .address = addr,
                                                    .flags = flags } };
    if (operation == CU_STREAM_MEM_OP_WRITE_VALUE_64 || operation == CU_STREAM_MEM_OP_WAIT_VALUE_64)
        op.writeValue.value64 = value;
    else
        op.writeValue.value = (cuuint32_t)value;
    CUresult rc = cusw_batch_check(1, &op);
    return rc != CUDA_SUCCESS ? rc : cusw_submit_batch(stream, per_thread, 1, &op);
}

/* The four operations have the same parameters but for the value's width. */
#define MEM_OP_TWINS(name, value_type, operation)                                                \
    CUSW_TWINS(name, (CUstream stream, CUdeviceptr addr, value_type value, unsigned int flags),   \
               mem_op(stream, per_thread, operation, addr, value, flags))

static CUresult batch_mem_op(CUstream stream, bool per_thread, unsigned int count,
                             CUstreamBatchMemOpParams *ops, unsigned int flags)
{
    CUresult rc = flags != 0 ? CUDA_ERROR_INVALID_VALUE : cusw_batch_check(count, ops);
    return rc != CUDA_SUCCESS ? rc : cusw_submit_batch(stream, per_thread, count, ops);
}

CUSW_TWINS(cuStreamBatchMemOp_v2,
           (CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray,
            unsigned int flags),
           batch_mem_op(stream, per_thread, count, paramArray, flags))

MEM_OP_TWINS(cuStreamWriteValue32_v2, cuuint32_t, CU_STREAM_MEM_OP_WRITE_VALUE_32)
MEM_OP_TWINS(cuStreamWaitValue32_v2, cuuint32_t, CU_STREAM_MEM_OP_WAIT_VALUE_32)
MEM_OP_TWINS(cuStreamWriteValue64_v2, cuuint64_t, CU_STREAM_MEM_OP_WRITE_VALUE_64)
MEM_OP_TWINS(cuStreamWaitValue64_v2, cuuint64_t, CU_STREAM_MEM_OP_WAIT_VALUE_64)

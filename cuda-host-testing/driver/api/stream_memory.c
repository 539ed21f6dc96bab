/*
 * stream_memory.c - Stream Memory Operations: cuStreamWriteValue32/64_v2,
 * cuStreamWaitValue32/64_v2, cuStreamBatchMemOp_v2, on the host memory that stands in for device
 * memory (a wait polls it from the stream's worker).
 */
#include "internal.h"

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

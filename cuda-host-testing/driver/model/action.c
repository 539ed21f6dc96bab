/*
 * action.c - what stream operations and graph nodes do when they execute, what an operation
 * holds until it is released, which node type each action stands for, and the batches of stream
 * memory operations.
 *
 * The same action describes a stream operation and a graph node (a captured host function is
 * the host node's action), so a graph launch runs its nodes' actions one after the other on the
 * launching stream's worker. Sticky context errors are honoured here: once the context has one,
 * host functions and memory work are skipped, while stream callbacks still run exactly once with
 * the error as their status (as on the real driver).
 *
 * Stream memory operations, batched or single, are one batch action (a batch node once
 * captured, as on the real driver), whose operations run in order: a wait holds the rest of the
 * batch, and what follows it, until its word satisfies it.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static bool wait_condition_met(const struct cusw_action *a)
{
    unsigned int op = a->u.mem.flags & ~(unsigned int)CU_STREAM_WAIT_VALUE_FLUSH;
    if (a->u.mem.is64) {
        uint64_t v = __atomic_load_n((uint64_t *)(uintptr_t)a->u.mem.addr, __ATOMIC_ACQUIRE);
        uint64_t ref = a->u.mem.value;
        switch (op) {
        case CU_STREAM_WAIT_VALUE_GEQ: return (int64_t)(v - ref) >= 0; /* cyclic comparison */
        case CU_STREAM_WAIT_VALUE_EQ: return v == ref;
        case CU_STREAM_WAIT_VALUE_AND: return (v & ref) != 0;
        default: return ~(v | ref) != 0; /* NOR */
        }
    }
    uint32_t v = __atomic_load_n((uint32_t *)(uintptr_t)a->u.mem.addr, __ATOMIC_ACQUIRE);
    uint32_t ref = (uint32_t)a->u.mem.value;
    switch (op) {
    case CU_STREAM_WAIT_VALUE_GEQ: return (int32_t)(v - ref) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ: return v == ref;
    case CU_STREAM_WAIT_VALUE_AND: return (v & ref) != 0;
    default: return ~(v | ref) != 0;
    }
}

/* Microseconds between a wait's reads of its word set by cuswSetWaitPollInterval; 0: the backoff. */
static atomic_uint wait_poll_interval_us;

void cusw_set_wait_poll_interval(unsigned int usec)
{
    atomic_store(&wait_poll_interval_us, usec);
}

/* The device polls memory; so do we, backing off from 1 us to 1 ms between reads, or at the
 * interval a test set. The wait gives up when the context gets a sticky error or is being torn
 * down, so a faulted or released context never leaves a worker polling forever. */
static void wait_value(const struct cusw_action *a, struct cusw_ctx *ctx)
{
    unsigned long delay = 1;
    while (!wait_condition_met(a)) {
        if (cusw_ctx_sticky(ctx) != CUDA_SUCCESS || atomic_load(&ctx->tearing_down))
            return;
        unsigned int interval = atomic_load(&wait_poll_interval_us);
        cusw_sleep_us(interval != 0 ? interval : delay);
        if (delay < 1000)
            delay *= 2;
    }
}

/* Element by element, each an atomic store, as a device's memset writes whole words: the host may
 * read a word of mapped memory (a flag) while the stream sets it, which plain stores would make a
 * data race. */
static void fill(const struct cusw_action *a)
{
    size_t count = a->u.set.count;
    switch (a->u.set.width) {
    case 1:
        for (size_t i = 0; i < count; i++)
            __atomic_store_n(&((uint8_t *)a->u.set.dst)[i], (uint8_t)a->u.set.value,
                             __ATOMIC_RELEASE);
        break;
    case 2:
        for (size_t i = 0; i < count; i++)
            __atomic_store_n(&((uint16_t *)a->u.set.dst)[i], (uint16_t)a->u.set.value,
                             __ATOMIC_RELEASE);
        break;
    default:
        for (size_t i = 0; i < count; i++)
            __atomic_store_n(&((uint32_t *)a->u.set.dst)[i], a->u.set.value, __ATOMIC_RELEASE);
        break;
    }
}

/* Host functions and callbacks enqueued on streams that have not finished (cuswLiveObjects). */
static atomic_ullong pending_host_functions;

static unsigned long long host_functions_in(const struct cusw_action *a)
{
    if (a->kind == CUSW_ACT_HOST_FN || a->kind == CUSW_ACT_CALLBACK)
        return 1;
    unsigned long long n = 0;
    if (a->kind == CUSW_ACT_GRAPH)
        for (size_t i = 0; i < a->u.launch->n; i++)
            n += host_functions_in(&a->u.launch->actions[i]);
    return n;
}

void cusw_action_enqueued(const struct cusw_action *a)
{
    atomic_fetch_add(&pending_host_functions, host_functions_in(a));
}

unsigned long long cusw_pending_host_functions(void) { return atomic_load(&pending_host_functions); }

/* Whether the memory `a` touches is stream-ordered memory outside its span, which fails the
 * context as a device's fault would (pool.c). */
static bool misuses_memory(const struct cusw_action *a, struct cusw_ctx *ctx)
{
    bool misused = false;
    switch (a->kind) {
    case CUSW_ACT_COPY:
        misused = cusw_pool_misused(a->u.copy.dst, a->u.copy.bytes) ||
                  (!a->u.copy.staged && cusw_pool_misused(a->u.copy.src, a->u.copy.bytes));
        break;
    case CUSW_ACT_SET:
        misused = cusw_pool_misused(a->u.set.dst, a->u.set.count * a->u.set.width);
        break;
    case CUSW_ACT_WRITE_VALUE:
    case CUSW_ACT_WAIT_VALUE:
        misused = cusw_pool_misused((const void *)(uintptr_t)a->u.mem.addr, a->u.mem.is64 ? 8 : 4);
        break;
    default: break;
    }
    if (misused)
        cusw_ctx_set_sticky(ctx, CUDA_ERROR_ILLEGAL_ADDRESS);
    return misused;
}

/* A kernel's launch: its stand-in, once for the grid; a kernel without one does nothing. */
static void run_kernel(const struct cusw_kernel_call *call, struct cusw_ctx *ctx)
{
    cuswStandIn stand_in = NULL;
    void *user_data = NULL;
    if (!cusw_stand_in_find(call->name, &stand_in, &user_data)) {
        cusw_stand_in_missing(call->name);
        return;
    }
    int result = stand_in(&call->launch, user_data);
    if (result != CUDA_SUCCESS)
        cusw_ctx_set_sticky(ctx, (CUresult)result);
}

void cusw_action_run(const struct cusw_action *a, struct cusw_ctx *ctx)
{
    bool sticky = cusw_ctx_sticky(ctx) != CUDA_SUCCESS || misuses_memory(a, ctx);
    switch (a->kind) {
    case CUSW_ACT_NOP:
        break;
    case CUSW_ACT_HOST_FN:
        if (!sticky)
            cusw_host_run_fn(ctx, a->u.host.fn, a->u.host.data);
        atomic_fetch_sub(&pending_host_functions, 1); /* run or skipped: no longer pending */
        break;
    case CUSW_ACT_CALLBACK:
        cusw_host_run_callback(ctx, a->u.callback.fn, a->u.callback.stream, a->u.callback.data);
        atomic_fetch_sub(&pending_host_functions, 1);
        break;
    case CUSW_ACT_COPY:
        if (!sticky && a->u.copy.bytes > 0)
            memmove(a->u.copy.dst, a->u.copy.src, a->u.copy.bytes);
        break;
    case CUSW_ACT_SET:
        if (!sticky)
            fill(a);
        break;
    case CUSW_ACT_WRITE_VALUE:
        if (sticky)
            break;
        if (a->u.mem.is64)
            __atomic_store_n((uint64_t *)(uintptr_t)a->u.mem.addr, a->u.mem.value, __ATOMIC_RELEASE);
        else
            __atomic_store_n((uint32_t *)(uintptr_t)a->u.mem.addr, (uint32_t)a->u.mem.value,
                             __ATOMIC_RELEASE);
        break;
    case CUSW_ACT_WAIT_VALUE:
        if (!sticky)
            wait_value(a, ctx);
        break;
    case CUSW_ACT_BATCH:
        for (unsigned int i = 0; i < a->u.batch->count; i++)
            cusw_action_run(&a->u.batch->ops[i], ctx);
        break;
    case CUSW_ACT_FAULT:
        if (!sticky)
            cusw_ctx_set_sticky(ctx, a->u.fault.code);
        break;
    case CUSW_ACT_SLEEP:
        if (!sticky)
            cusw_sleep_us(a->u.sleep.usec);
        break;
    case CUSW_ACT_EVENT_RECORD:
        cusw_lock_acquire();
        cusw_event_stamp(a->u.record.event, a->u.record.generation);
        cusw_lock_release();
        break;
    case CUSW_ACT_GRAPH:
        for (size_t i = 0; i < a->u.launch->n; i++)
            cusw_action_run(&a->u.launch->actions[i], ctx);
        break;
    case CUSW_ACT_KERNEL:
        if (!sticky)
            run_kernel(a->u.kernel, ctx);
        break;
    /* Run whatever the context's state: memory is taken and given back in any case. */
    case CUSW_ACT_ALLOCATE:
        cusw_lock_acquire();
        cusw_block_reached(a->u.block);
        cusw_lock_release();
        break;
    case CUSW_ACT_FREE:
        cusw_lock_acquire();
        cusw_block_freed(a->u.block);
        cusw_lock_release();
        break;
    }
}

bool cusw_action_stage(struct cusw_action *a)
{
    if (a->kind != CUSW_ACT_COPY || !a->u.copy.stage || a->u.copy.bytes == 0)
        return true;
    void *staged = malloc(a->u.copy.bytes);
    if (staged == NULL)
        return false;
    memcpy(staged, a->u.copy.src, a->u.copy.bytes);
    a->u.copy.src = staged;
    a->u.copy.staged = true;
    return true;
}

void cusw_action_copy(struct cusw_action *dst, const struct cusw_action *src)
{
    *dst = *src;
    if (src->kind == CUSW_ACT_BATCH)
        src->u.batch->refs++;
    else if (src->kind == CUSW_ACT_KERNEL)
        src->u.kernel->refs++;
}

void cusw_action_release(struct cusw_action *a)
{
    if (a->kind == CUSW_ACT_COPY && a->u.copy.staged) {
        free((void *)a->u.copy.src);
    } else if (a->kind == CUSW_ACT_EVENT_RECORD) {
        cusw_event_unref(a->u.record.event);
    } else if (a->kind == CUSW_ACT_GRAPH) {
        /* The launch has finished: its user-object references go (destructors may now run, on
         * the destructor thread), and so do its snapshot's. */
        cusw_urefs_release(&a->u.launch->urefs, CUSW_DESTROY_DRIVER_THREAD);
        for (size_t i = 0; i < a->u.launch->n; i++)
            cusw_action_release(&a->u.launch->actions[i]);
        free(a->u.launch->actions);
        free(a->u.launch);
    } else if (a->kind == CUSW_ACT_BATCH && --a->u.batch->refs == 0) {
        free(a->u.batch);
    } else if (a->kind == CUSW_ACT_KERNEL && --a->u.kernel->refs == 0) {
        free(a->u.kernel->name);
        free(a->u.kernel->params);
        free(a->u.kernel->types);
        free(a->u.kernel->arguments);
        free(a->u.kernel);
    }
    a->kind = CUSW_ACT_NOP;
}

CUgraphNodeType cusw_action_node_type(const struct cusw_action *a)
{
    switch (a->kind) {
    case CUSW_ACT_HOST_FN:
    case CUSW_ACT_CALLBACK: return CU_GRAPH_NODE_TYPE_HOST;
    case CUSW_ACT_COPY: return CU_GRAPH_NODE_TYPE_MEMCPY;
    case CUSW_ACT_SET: return CU_GRAPH_NODE_TYPE_MEMSET;
    case CUSW_ACT_WRITE_VALUE:
    case CUSW_ACT_WAIT_VALUE:
    case CUSW_ACT_BATCH: return CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
    case CUSW_ACT_KERNEL:
    case CUSW_ACT_FAULT:
    case CUSW_ACT_SLEEP: return CU_GRAPH_NODE_TYPE_KERNEL; /* stand-ins for kernels */
    case CUSW_ACT_EVENT_RECORD: return CU_GRAPH_NODE_TYPE_EVENT_RECORD;
    case CUSW_ACT_GRAPH: return CU_GRAPH_NODE_TYPE_GRAPH;
    case CUSW_ACT_ALLOCATE: return CU_GRAPH_NODE_TYPE_MEM_ALLOC;
    case CUSW_ACT_FREE: return CU_GRAPH_NODE_TYPE_MEM_FREE;
    case CUSW_ACT_NOP: break;
    }
    return CU_GRAPH_NODE_TYPE_EMPTY;
}

static bool same_kernel_call(const struct cusw_kernel_call *x, const struct cusw_kernel_call *y)
{
    const cuswKernelLaunch *a = &x->launch, *b = &y->launch;
    if (strcmp(a->name, b->name) != 0 || memcmp(a->grid, b->grid, sizeof a->grid) != 0 ||
        memcmp(a->block, b->block, sizeof a->block) != 0 ||
        a->shared_memory_bytes != b->shared_memory_bytes || a->param_count != b->param_count)
        return false;
    for (size_t i = 0; i < a->param_count; i++)
        if (a->params[i].size != b->params[i].size ||
            memcmp(a->params[i].value, b->params[i].value, a->params[i].size) != 0)
            return false;
    return true;
}

static bool same_batch(const struct cusw_batch *x, const struct cusw_batch *y)
{
    if (x->ctx != y->ctx || x->count != y->count)
        return false;
    for (unsigned int i = 0; i < x->count; i++) {
        const struct cusw_action *a = &x->ops[i], *b = &y->ops[i];
        if (a->kind != b->kind || a->u.mem.addr != b->u.mem.addr ||
            a->u.mem.value != b->u.mem.value || a->u.mem.flags != b->u.mem.flags ||
            a->u.mem.is64 != b->u.mem.is64)
            return false;
    }
    return true;
}

bool cusw_action_same_params(const struct cusw_action *a, const struct cusw_action *b)
{
    if (a->kind != b->kind)
        return false;
    switch (a->kind) {
    case CUSW_ACT_HOST_FN: return a->u.host.fn == b->u.host.fn && a->u.host.data == b->u.host.data;
    case CUSW_ACT_CALLBACK:
        return a->u.callback.fn == b->u.callback.fn && a->u.callback.data == b->u.callback.data;
    case CUSW_ACT_COPY:
        return a->u.copy.dst == b->u.copy.dst && a->u.copy.src == b->u.copy.src &&
               a->u.copy.bytes == b->u.copy.bytes;
    case CUSW_ACT_SET:
        return a->u.set.dst == b->u.set.dst && a->u.set.value == b->u.set.value &&
               a->u.set.count == b->u.set.count && a->u.set.width == b->u.set.width;
    case CUSW_ACT_WRITE_VALUE:
    case CUSW_ACT_WAIT_VALUE:
        return a->u.mem.addr == b->u.mem.addr && a->u.mem.value == b->u.mem.value &&
               a->u.mem.flags == b->u.mem.flags && a->u.mem.is64 == b->u.mem.is64;
    case CUSW_ACT_BATCH: return same_batch(a->u.batch, b->u.batch);
    case CUSW_ACT_FAULT: return a->u.fault.code == b->u.fault.code;
    case CUSW_ACT_SLEEP: return a->u.sleep.usec == b->u.sleep.usec;
    case CUSW_ACT_KERNEL: return same_kernel_call(a->u.kernel, b->u.kernel);
    /* Never a node's: only a stream runs them. */
    case CUSW_ACT_EVENT_RECORD:
    case CUSW_ACT_GRAPH:
    case CUSW_ACT_ALLOCATE:
    case CUSW_ACT_FREE: return false;
    case CUSW_ACT_NOP: break;
    }
    return true;
}

/* cudasw.h declares only some members of its union: the layout must stay cuda.h's. */
_Static_assert(sizeof(CUgraphNodeParams) == 256, "CUgraphNodeParams is 256 bytes in cuda.h");

void cusw_action_node_params(const struct cusw_action *a, CUgraphNodeParams *out)
{
    memset(out, 0, sizeof *out);
    out->type = cusw_action_node_type(a);
    if (a->kind == CUSW_ACT_HOST_FN) {
        out->host.fn = a->u.host.fn;
        out->host.userData = a->u.host.data;
        out->host.syncMode = CU_HOST_TASK_BLOCKING;
    } else if (a->kind == CUSW_ACT_BATCH) {
        out->memOp.ctx = (CUcontext)a->u.batch->ctx->handle;
        out->memOp.count = a->u.batch->count;
        out->memOp.paramArray = a->u.batch->params;
    }
}

/* ---- Batches of stream memory operations ----------------------------------------------------- */

/* A write or a wait as an action, or false for what this driver does not take. */
static bool mem_action(enum cusw_action_kind kind, CUdeviceptr addr, uint64_t value,
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

bool cusw_mem_op_action(const CUstreamBatchMemOpParams *op, struct cusw_action *a)
{
    bool wait = op->operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 ||
                op->operation == CU_STREAM_MEM_OP_WAIT_VALUE_64;
    bool is64 = op->operation == CU_STREAM_MEM_OP_WAIT_VALUE_64 ||
                op->operation == CU_STREAM_MEM_OP_WRITE_VALUE_64;
    if (!wait && !is64 && op->operation != CU_STREAM_MEM_OP_WRITE_VALUE_32)
        return false;
    /* The wait's and the write's parameters share one layout. */
    const struct CUstreamMemOpWriteValueParams_st *p = &op->writeValue;
    return mem_action(wait ? CUSW_ACT_WAIT_VALUE : CUSW_ACT_WRITE_VALUE, p->address,
                      is64 ? p->value64 : p->value, p->flags, is64, a);
}

/* Whether the device reports what `a` needs: 64-bit operations, the NOR comparison. */
static bool device_supports(const struct cusw_action *a)
{
    if (a->u.mem.is64 && !cusw_device_supports(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS))
        return false;
    return a->kind != CUSW_ACT_WAIT_VALUE || a->u.mem.flags != CU_STREAM_WAIT_VALUE_NOR ||
           cusw_device_supports(CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR);
}

CUresult cusw_batch_check(unsigned int count, const CUstreamBatchMemOpParams *ops)
{
    if (count == 0 || count > CUSW_BATCH_MAX || ops == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < count; i++) {
        struct cusw_action a;
        if (!cusw_mem_op_action(&ops[i], &a))
            return CUDA_ERROR_INVALID_VALUE;
        if (!device_supports(&a))
            return CUDA_ERROR_NOT_SUPPORTED;
    }
    return CUDA_SUCCESS;
}

/* The operations' actions follow the parameters in the batch's one allocation. */
_Static_assert(sizeof(CUstreamBatchMemOpParams) % _Alignof(struct cusw_action) == 0,
               "a batch's actions are aligned after its parameters");

bool cusw_batch_action(struct cusw_ctx *ctx, unsigned int count,
                       const CUstreamBatchMemOpParams *ops, struct cusw_action *out)
{
    struct cusw_batch *b = malloc(sizeof *b + count * (sizeof *b->params + sizeof *b->ops));
    if (b == NULL)
        return false;
    b->refs = 1;
    b->ctx = ctx;
    b->count = count;
    b->ops = (struct cusw_action *)(void *)&b->params[count];
    memcpy(b->params, ops, count * sizeof *ops);
    for (unsigned int i = 0; i < count; i++)
        cusw_mem_op_action(&ops[i], &b->ops[i]); /* checked: takes each */
    *out = (struct cusw_action){ .kind = CUSW_ACT_BATCH, .u.batch = b };
    return true;
}

CUresult cusw_batch_params_action(const CUDA_BATCH_MEM_OP_NODE_PARAMS *p, struct cusw_action *out)
{
    if (p == NULL || p->flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = cusw_batch_check(p->count, p->paramArray);
    struct cusw_ctx *ctx = NULL;
    if (rc == CUDA_SUCCESS)
        rc = cusw_ctx_from_handle(p->ctx, &ctx);
    if (rc == CUDA_SUCCESS && !cusw_batch_action(ctx, p->count, p->paramArray, out))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    return rc;
}

bool cusw_batch_same_shape(const struct cusw_action *a, const struct cusw_action *b)
{
    if (a->kind != CUSW_ACT_BATCH || b->kind != CUSW_ACT_BATCH)
        return false;
    const struct cusw_batch *x = a->u.batch, *y = b->u.batch;
    if (x->ctx != y->ctx || x->count != y->count)
        return false;
    for (unsigned int i = 0; i < x->count; i++)
        if (x->params[i].operation != y->params[i].operation)
            return false;
    return true;
}

/* ---- Kernels' launches ----------------------------------------------------------------------- */

#define LAUNCH_PARAM_END ((void *)0x00)
#define LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)

/* `extra`'s argument buffer and its size, or false when it gives none. */
static bool extra_buffer(void **extra, const unsigned char **buffer, size_t *size)
{
    *buffer = NULL;
    *size = 0;
    for (size_t i = 0; extra != NULL && extra[i] != LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == LAUNCH_PARAM_BUFFER_POINTER)
            *buffer = extra[i + 1];
        else if (extra[i] == LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1] != NULL)
            *size = *(const size_t *)extra[i + 1];
        else
            return false;
    }
    return *buffer != NULL;
}

CUresult cusw_kernel_action(const struct cusw_function *f, const unsigned int grid[3],
                            const unsigned int block[3], unsigned int shared_bytes,
                            CUstream stream, void **kernel_params, void **extra,
                            struct cusw_action *out)
{
    const struct cusw_ptx_entry *e = f->entry;
    /* The parameters' offsets, each aligned as declared, as the device lays them out. */
    size_t total = 0;
    size_t *offsets = calloc(e->n_params ? e->n_params : 1, sizeof *offsets);
    if (offsets == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < e->n_params; i++) {
        size_t align = e->params[i].align ? e->params[i].align : 1;
        offsets[i] = (total + align - 1) / align * align;
        total = offsets[i] + e->params[i].size;
    }
    const unsigned char *buffer = NULL;
    size_t buffer_size = 0;
    bool from_extra = kernel_params == NULL && extra_buffer(extra, &buffer, &buffer_size);
    if (e->n_params > 0 && kernel_params == NULL && (!from_extra || buffer_size < total)) {
        free(offsets);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct cusw_kernel_call *call = calloc(1, sizeof *call);
    if (call != NULL) {
        call->name = strdup(e->name);
        call->params = calloc(e->n_params ? e->n_params : 1, sizeof *call->params);
        call->types = calloc(e->n_params ? e->n_params : 1, sizeof *call->types);
        call->arguments = calloc(total ? total : 1, 1);
    }
    if (call == NULL || call->name == NULL || call->params == NULL || call->types == NULL ||
        call->arguments == NULL) {
        if (call != NULL) {
            free(call->name);
            free(call->params);
            free(call->types);
            free(call->arguments);
        }
        free(call);
        free(offsets);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < e->n_params; i++) {
        const struct cusw_ptx_param *p = &e->params[i];
        const void *value = from_extra ? buffer + offsets[i] : kernel_params[i];
        memcpy(call->arguments + offsets[i], value, p->size);
        memcpy(call->types[i], p->type, sizeof call->types[i]);
        call->params[i] = (cuswKernelParam){ .value = call->arguments + offsets[i],
                                             .size = p->size,
                                             .align = p->align,
                                             .type = call->types[i] };
    }
    free(offsets);
    call->refs = 1;
    call->launch = (cuswKernelLaunch){
        .size = sizeof call->launch,
        .name = call->name,
        .grid = { grid[0], grid[1], grid[2] },
        .block = { block[0], block[1], block[2] },
        .shared_memory_bytes = shared_bytes,
        .stream = stream,
        .param_count = e->n_params,
        .params = call->params,
    };
    *out = (struct cusw_action){ .kind = CUSW_ACT_KERNEL, .u.kernel = call };
    return CUDA_SUCCESS;
}

/*
 * memory.c - Memory Management: allocation and free of device, managed and page-locked host
 * memory, its mapping, the memory left, copies (async, peer, synchronous) and sets (of 8, 16 and 32 bits,
 * async and synchronous). Where the memory is, and which calls return only once done, is
 * model/memory.c's.
 *
 * Async copies and sets return at once, except the copies between two host buffers, or into
 * pageable host memory, which the real driver does synchronously: their enqueue returns only once
 * the stream has reached and done them (docs/REAL-DRIVER.md). An async copy from pageable host
 * memory to the device returns at once too, having read its source, as the real driver stages
 * it: the caller may use that memory again at once. The synchronous copies and sets
 * work on the legacy stream (their _ptds forms on the per-thread stream), and return at once only where the driver API's documented
 * synchronisation behaviour lets them (a copy between device allocations, a set of device
 * memory). The stream's worker does the copy or set, in order, while a caller that waits waits.
 */
#include "internal.h"

CUSW_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    CUSW_INIT_ENTRY();
    if (dptr == NULL || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = NULL;
    cusw_lock_acquire();
    CUresult rc = cusw_memory_allocate(bytesize, CUSW_MEMORY_DEVICE, &p);
    cusw_lock_release();
    if (rc == CUDA_SUCCESS)
        *dptr = (CUdeviceptr)(uintptr_t)p;
    return rc;
}

CUSW_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    CUSW_INIT_ENTRY();
    if (dptr == 0)
        return CUDA_SUCCESS;
    cusw_lock_acquire();
    CUresult rc = cusw_memory_free((void *)(uintptr_t)dptr, false);
    cusw_lock_release();
    return rc;
}

/* Managed memory is host memory, as all of this driver's device memory is: the host and every
 * stream reach it alike, whatever it is attached to. A device without managed memory
 * (MANAGED_MEMORY 0) refuses it. */
CUSW_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    CUSW_INIT_ENTRY();
    if (!cusw_device_supports(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY))
        return CUDA_ERROR_NOT_SUPPORTED;
    if (dptr == NULL || bytesize == 0 ||
        (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    void *p = NULL;
    cusw_lock_acquire();
    CUresult rc = cusw_memory_allocate(bytesize, CUSW_MEMORY_MANAGED, &p);
    cusw_lock_release();
    if (rc == CUDA_SUCCESS)
        *dptr = (CUdeviceptr)(uintptr_t)p;
    return rc;
}

CUSW_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    CUSW_INIT_ENTRY();
    const unsigned int known_flags =
        CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
    if (pp == NULL || bytesize == 0 || (Flags & ~known_flags) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    CUresult rc = cusw_memory_allocate(bytesize, CUSW_MEMORY_HOST, pp);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuMemFreeHost(void *p)
{
    CUSW_INIT_ENTRY();
    cusw_lock_acquire();
    CUresult rc = cusw_memory_free(p, true);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    CUSW_INIT_ENTRY();
    if (pdptr == NULL || p == NULL || Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_ctx *ctx = NULL;
    CUresult rc = cusw_ctx_current(&ctx);
    /* Any address inside a page-locked allocation maps to itself. */
    if (rc == CUDA_SUCCESS && cusw_memory_is_page_locked(p))
        *pdptr = (CUdeviceptr)(uintptr_t)p;
    else if (rc == CUDA_SUCCESS)
        rc = CUDA_ERROR_INVALID_VALUE;
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    CUSW_INIT_ENTRY();
    if (free == NULL || total == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_ctx *ctx = NULL;
    CUresult rc = cusw_ctx_current(&ctx);
    if (rc == CUDA_SUCCESS) {
        *total = (size_t)CUSW_DEVICE_MEMORY_BYTES;
        *free = cusw_device_memory_free(ctx->device);
    }
    cusw_lock_release();
    return rc;
}

/* ---- Copies and sets ------------------------------------------------------------------------- */

#define HOST(p) ((void *)(uintptr_t)(p))

/* A copy on `stream`, or for the synchronous calls (not `async`) on the null stream, returning
 * once done where model/memory.c's rules say so. */
static CUresult copy(void *dst, const void *src, size_t bytes, bool async, CUstream stream,
                     bool per_thread)
{
    if (bytes > 0 && (dst == NULL || src == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    enum cusw_copy_rule rule = cusw_copy_rule(dst, src, async);
    struct cusw_action a = { .kind = CUSW_ACT_COPY, .u.copy = { dst, src, bytes } };
    a.u.copy.stage = rule == CUSW_COPY_STAGES_SOURCE;
    if (rule == CUSW_COPY_WAITS)
        return cusw_submit_and_wait(stream, per_thread, &a);
    return cusw_submit(stream, per_thread, &a);
}

/* `count` elements of `width` bytes set to `value`; the address aligned for them. The
 * synchronous calls (not `async`) return once done only into page-locked memory. */
static CUresult set(CUdeviceptr dstDevice, uint32_t value, size_t count, unsigned int width,
                    bool async, CUstream stream, bool per_thread)
{
    void *dst = HOST(dstDevice);
    if (count > 0 && (dst == NULL || dstDevice % width != 0))
        return CUDA_ERROR_INVALID_VALUE;
    struct cusw_action a = { .kind = CUSW_ACT_SET, .u.set = { dst, value, count, width } };
    if (!async && cusw_set_waits_for_stream(dst))
        return cusw_submit_and_wait(stream, per_thread, &a);
    return cusw_submit(stream, per_thread, &a);
}

CUSW_TWINS(cuMemcpyHtoDAsync_v2,
           (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream),
           copy(HOST(dstDevice), srcHost, ByteCount, true, hStream, per_thread))
CUSW_TWINS(cuMemcpyDtoHAsync_v2,
           (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
           copy(dstHost, HOST(srcDevice), ByteCount, true, hStream, per_thread))
CUSW_TWINS(cuMemcpyDtoDAsync_v2,
           (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
           copy(HOST(dstDevice), HOST(srcDevice), ByteCount, true, hStream, per_thread))

/* [locked] Both contexts of a peer copy are live; the memory is the same host memory. */
static CUresult peer_contexts(CUcontext dstContext, CUcontext srcContext)
{
    struct cusw_ctx *dst = NULL, *src = NULL;
    CUresult rc = cusw_ctx_from_handle(dstContext, &dst);
    if (rc == CUDA_SUCCESS)
        rc = cusw_ctx_check(dst);
    if (rc == CUDA_SUCCESS)
        rc = cusw_ctx_from_handle(srcContext, &src);
    if (rc == CUDA_SUCCESS)
        rc = cusw_ctx_check(src);
    return rc;
}

static CUresult copy_peer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                          CUcontext srcContext, size_t ByteCount, CUstream hStream,
                          bool per_thread)
{
    cusw_lock_acquire();
    CUresult rc = peer_contexts(dstContext, srcContext);
    cusw_lock_release();
    if (rc != CUDA_SUCCESS)
        return rc;
    return copy(HOST(dstDevice), HOST(srcDevice), ByteCount, true, hStream, per_thread);
}

CUSW_TWINS(cuMemcpyPeerAsync,
           (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
            CUcontext srcContext, size_t ByteCount, CUstream hStream),
           copy_peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream,
                     per_thread))

CUSW_TWINS(cuMemsetD8Async, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream),
           set(dstDevice, uc, N, 1, true, hStream, per_thread))
CUSW_TWINS(cuMemsetD16Async,
           (CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream),
           set(dstDevice, us, N, 2, true, hStream, per_thread))
CUSW_TWINS(cuMemsetD32Async, (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream),
           set(dstDevice, ui, N, 4, true, hStream, per_thread))

/* The synchronous forms: on the legacy stream, and their per-thread forms (_ptds) on the calling
 * thread's per-thread stream. */
CUSW_PTDS_TWINS(cuMemcpyHtoD_v2, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount),
                copy(HOST(dstDevice), srcHost, ByteCount, false, NULL, per_thread))
CUSW_PTDS_TWINS(cuMemcpyDtoH_v2, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount),
                copy(dstHost, HOST(srcDevice), ByteCount, false, NULL, per_thread))
CUSW_PTDS_TWINS(cuMemcpyDtoD_v2,
                (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount),
                copy(HOST(dstDevice), HOST(srcDevice), ByteCount, false, NULL, per_thread))
CUSW_PTDS_TWINS(cuMemsetD8_v2, (CUdeviceptr dstDevice, unsigned char uc, size_t N),
                set(dstDevice, uc, N, 1, false, NULL, per_thread))
CUSW_PTDS_TWINS(cuMemsetD16_v2, (CUdeviceptr dstDevice, unsigned short us, size_t N),
                set(dstDevice, us, N, 2, false, NULL, per_thread))
CUSW_PTDS_TWINS(cuMemsetD32_v2, (CUdeviceptr dstDevice, unsigned int ui, size_t N),
                set(dstDevice, ui, N, 4, false, NULL, per_thread))

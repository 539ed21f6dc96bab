/*
 * memory.c - Memory Management: allocation and free of device and page-locked host memory, its
 * mapping, the memory left, and the async copies and sets. Where the memory is, and which copies
 * are synchronous, is model/memory.c's.
 *
 * Async copies and sets return at once, except the copies between two host buffers, or into
 * pageable host memory, which the real driver does synchronously: their enqueue returns only once
 * the stream has reached and done them (docs/REAL-DRIVER.md). Here the stream's worker does the
 * copy, in order, while the caller waits.
 */
#include "internal.h"

CUSW_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    CUSW_INIT_ENTRY();
    if (dptr == NULL || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = NULL;
    cusw_lock_acquire();
    CUresult rc = cusw_memory_allocate(bytesize, false, &p);
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

CUSW_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    CUSW_INIT_ENTRY();
    const unsigned int known_flags =
        CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
    if (pp == NULL || bytesize == 0 || (Flags & ~known_flags) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    CUresult rc = cusw_memory_allocate(bytesize, true, pp);
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

/* ---- Async copies and sets ------------------------------------------------------------------- */

#define HOST(p) ((void *)(uintptr_t)(p))

static CUresult copy_async(void *dst, const void *src, size_t bytes, CUstream stream)
{
    if (bytes > 0 && (dst == NULL || src == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    struct cusw_action a = { .kind = CUSW_ACT_COPY, .u.copy = { dst, src, bytes } };
    if (cusw_copy_waits_for_stream(dst, src))
        return cusw_submit_and_wait(stream, false, &a);
    return cusw_submit(stream, false, &a);
}

CUSW_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost,
                                          size_t ByteCount, CUstream hStream)
{
    CUSW_INIT_ENTRY();
    return copy_async(HOST(dstDevice), srcHost, ByteCount, hStream);
}

CUSW_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                          CUstream hStream)
{
    CUSW_INIT_ENTRY();
    return copy_async(dstHost, HOST(srcDevice), ByteCount, hStream);
}

CUSW_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                          size_t ByteCount, CUstream hStream)
{
    CUSW_INIT_ENTRY();
    return copy_async(HOST(dstDevice), HOST(srcDevice), ByteCount, hStream);
}

CUSW_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                      CUstream hStream)
{
    CUSW_INIT_ENTRY();
    uint32_t *dst = HOST(dstDevice);
    if (N > 0 && (dst == NULL || (uintptr_t)dst % 4 != 0))
        return CUDA_ERROR_INVALID_VALUE;
    struct cusw_action a = { .kind = CUSW_ACT_SET, .u.set = { dst, ui, N } };
    return cusw_submit(hStream, false, &a);
}

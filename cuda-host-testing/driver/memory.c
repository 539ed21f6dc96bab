/*
 * memory.c - memory management and copies. Host memory stands in for device memory: a
 * CUdeviceptr is a plain host address, so device memory is as accessible from the host as from
 * stream operations (which, like the unified addressing of the real device, is what host-side
 * tests want).
 *
 * Allocations are tracked per context (freed when the context is released) and checked on free.
 * Async copies and sets return at once, except the copies the real driver does synchronously
 * (copy_waits_for_stream). Frees synchronise the context first, as the real driver's implicit
 * synchronisation does, so that pending stream work never touches freed memory.
 */
#include "internal.h"

#include <stdlib.h>

struct allocation {
    size_t size;
    struct cusw_ctx *ctx;
    bool host; /* cuMemHostAlloc */
};

static struct cusw_map allocations; /* base address -> struct allocation */
static size_t device_bytes_in_use[CUSW_MAX_DEVICES]; /* each device has its own memory */
static size_t host_allocations, device_allocations; /* live, for cuswLiveObjects */

void cusw_memory_counts(size_t *host, size_t *device)
{
    *host = host_allocations;
    *device = device_allocations;
}

#define ALLOCATION_ALIGNMENT 256 /* cudaMalloc guarantees at least 256 bytes */

/* [locked] The current context, for an allocation or a free: both are "potentially unsafe"
 * during a capture. */
static CUresult context_for_memory(struct cusw_ctx **ctx)
{
    CUresult rc = cusw_ctx_current(ctx);
    return rc != CUDA_SUCCESS ? rc : cusw_capture_check_unsafe();
}

/* [locked] */
static CUresult allocate(size_t size, bool host, void **out)
{
    struct cusw_ctx *ctx = NULL;
    CUresult rc = context_for_memory(&ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!host && size > CUSW_DEVICE_MEMORY_BYTES - device_bytes_in_use[ctx->device])
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct allocation *a = malloc(sizeof *a);
    void *p = NULL;
    if (a == NULL || posix_memalign(&p, ALLOCATION_ALIGNMENT, size) != 0 ||
        !cusw_map_put(&allocations, (uintptr_t)p, a)) {
        free(a);
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->size = size;
    a->ctx = ctx;
    a->host = host;
    if (host) {
        host_allocations++;
    } else {
        device_allocations++;
        device_bytes_in_use[ctx->device] += size;
    }
    *out = p;
    return CUDA_SUCCESS;
}

/* [locked] */
static void release(void *p, struct allocation *a)
{
    cusw_map_remove(&allocations, (uintptr_t)p);
    if (a->host) {
        host_allocations--;
    } else {
        device_allocations--;
        device_bytes_in_use[a->ctx->device] -= a->size;
    }
    free(a);
    free(p);
}

/* [locked] */
static CUresult deallocate(void *p, bool host)
{
    struct cusw_ctx *ctx = NULL;
    CUresult rc = context_for_memory(&ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct allocation *a = cusw_map_get(&allocations, (uintptr_t)p);
    if (a == NULL || a->host != host)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_ctx_drain(a->ctx);
    /* Another thread may have freed it while the lock was released for the drain. */
    a = cusw_map_get(&allocations, (uintptr_t)p);
    if (a == NULL || a->host != host)
        return CUDA_ERROR_INVALID_VALUE;
    release(p, a);
    return cusw_ctx_sticky(ctx);
}

/* [locked] The allocation that holds address p, or NULL: then p is pageable host memory. */
static struct allocation *allocation_of(const void *p)
{
    size_t cursor = 0;
    uintptr_t base;
    void *value;
    while (cusw_map_next(&allocations, &cursor, &base, &value)) {
        struct allocation *a = value;
        if ((uintptr_t)p >= base && (uintptr_t)p - base < a->size)
            return a;
    }
    return NULL;
}

void cusw_memory_release_context(struct cusw_ctx *ctx)
{
    size_t cursor = 0;
    uintptr_t key;
    void *value;
    while (cusw_map_next(&allocations, &cursor, &key, &value)) {
        struct allocation *a = value;
        if (a->ctx == ctx)
            release((void *)key, a); /* removal leaves a tombstone: iteration stays valid */
    }
}

CUSW_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    CUSW_INIT_ENTRY();
    if (dptr == NULL || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = NULL;
    cusw_lock_acquire();
    CUresult rc = allocate(bytesize, false, &p);
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
    CUresult rc = deallocate((void *)(uintptr_t)dptr, false);
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
    CUresult rc = allocate(bytesize, true, pp);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuMemFreeHost(void *p)
{
    CUSW_INIT_ENTRY();
    cusw_lock_acquire();
    CUresult rc = deallocate(p, true);
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
    if (rc == CUDA_SUCCESS) {
        /* Any address inside a page-locked allocation maps to itself. */
        const struct allocation *a = allocation_of(p);
        if (a != NULL && a->host)
            *pdptr = (CUdeviceptr)(uintptr_t)p;
        else
            rc = CUDA_ERROR_INVALID_VALUE;
    }
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
        *free = (size_t)CUSW_DEVICE_MEMORY_BYTES - device_bytes_in_use[ctx->device];
    }
    cusw_lock_release();
    return rc;
}

/* ---- Copies and sets ------------------------------------------------------------------------- */

#define HOST(p) ((void *)(uintptr_t)(p))

static struct cusw_action copy_action(void *dst, const void *src, size_t bytes)
{
    struct cusw_action a = { .kind = CUSW_ACT_COPY, .u.copy = { dst, src, bytes } };
    return a;
}

static bool valid(const struct cusw_action *a)
{
    if (a->kind == CUSW_ACT_COPY)
        return a->u.copy.bytes == 0 || (a->u.copy.dst != NULL && a->u.copy.src != NULL);
    return a->u.set.count == 0 || (a->u.set.dst != NULL && (uintptr_t)a->u.set.dst % 4 == 0);
}

/* An async copy between two host buffers (page-locked or pageable), or into pageable host
 * memory: the real driver does it synchronously, so its enqueue returns only once the stream has
 * reached and done it (docs/REAL-DRIVER.md). Here the stream's worker does the copy, in order,
 * while the caller waits. Every other copy and set returns at once. */
static bool copy_waits_for_stream(const struct cusw_action *a)
{
    if (a->kind != CUSW_ACT_COPY)
        return false;
    cusw_lock_acquire();
    const struct allocation *dst = allocation_of(a->u.copy.dst);
    const struct allocation *src = allocation_of(a->u.copy.src);
    bool waits = dst == NULL || (dst->host && (src == NULL || src->host));
    cusw_lock_release();
    return waits;
}

static CUresult run_async(CUstream stream, const struct cusw_action *a)
{
    if (!valid(a))
        return CUDA_ERROR_INVALID_VALUE;
    if (copy_waits_for_stream(a))
        return cusw_submit_and_wait(stream, false, a);
    return cusw_submit(stream, false, a);
}

CUSW_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost,
                                          size_t ByteCount, CUstream hStream)
{
    CUSW_INIT_ENTRY();
    struct cusw_action a = copy_action(HOST(dstDevice), srcHost, ByteCount);
    return run_async(hStream, &a);
}

CUSW_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                          CUstream hStream)
{
    CUSW_INIT_ENTRY();
    struct cusw_action a = copy_action(dstHost, HOST(srcDevice), ByteCount);
    return run_async(hStream, &a);
}

CUSW_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                          size_t ByteCount, CUstream hStream)
{
    CUSW_INIT_ENTRY();
    struct cusw_action a = copy_action(HOST(dstDevice), HOST(srcDevice), ByteCount);
    return run_async(hStream, &a);
}

CUSW_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                      CUstream hStream)
{
    CUSW_INIT_ENTRY();
    struct cusw_action a = { .kind = CUSW_ACT_SET, .u.set = { HOST(dstDevice), ui, N } };
    return run_async(hStream, &a);
}

/*
 * pools.c - the Stream Ordered Memory Allocator: cuMemAllocAsync, cuMemAllocFromPoolAsync and
 * cuMemFreeAsync (with their per-thread forms), each device's default and current pool, pools of
 * their own, their attributes and trimming. An allocation is usable from its point in its stream,
 * and its free takes effect at its point (model/pool.c, which also catches stream work that uses
 * it outside that span). Where the device reports no memory pools (MEMORY_POOLS_SUPPORTED 0),
 * every call answers CUDA_ERROR_NOT_SUPPORTED, as on such a device.
 */
#include "internal.h"

#include <string.h>

static bool pools_supported(void)
{
    return cusw_device_supports(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
}

static CUresult allocate(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream stream,
                         bool per_thread)
{
    if (!pools_supported())
        return CUDA_ERROR_NOT_SUPPORTED;
    if (dptr == NULL || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return cusw_submit_allocation(stream, per_thread, pool, bytesize, dptr);
}

static CUresult free_async(CUdeviceptr dptr, CUstream stream, bool per_thread)
{
    if (!pools_supported())
        return CUDA_ERROR_NOT_SUPPORTED;
    return cusw_submit_free(stream, per_thread, dptr);
}

CUSW_TWINS(cuMemAllocAsync, (CUdeviceptr *dptr, size_t bytesize, CUstream hStream),
           allocate(dptr, bytesize, NULL, hStream, per_thread))
CUSW_TWINS(cuMemAllocFromPoolAsync,
           (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream),
           pool == NULL ? CUDA_ERROR_INVALID_VALUE
                        : allocate(dptr, bytesize, pool, hStream, per_thread))
CUSW_TWINS(cuMemFreeAsync, (CUdeviceptr dptr, CUstream hStream),
           free_async(dptr, hStream, per_thread))

/* ---- Pools ----------------------------------------------------------------------------------- */

/* [locked] The device's default or current pool. */
static CUresult device_pool(CUmemoryPool *pool_out, CUdevice dev, bool current)
{
    if (!pools_supported())
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult rc = cusw_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (pool_out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct cusw_pool *p = current ? cusw_pool_current(dev) : cusw_pool_default(dev);
    if (p == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pool_out = (CUmemoryPool)cusw_pool_handle(p);
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    CUSW_INIT_ENTRY();
    cusw_lock_acquire();
    CUresult rc = device_pool(pool_out, dev, false);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    CUSW_INIT_ENTRY();
    cusw_lock_acquire();
    CUresult rc = device_pool(pool, dev, true);
    cusw_lock_release();
    return rc;
}

/* The pool cuMemAllocAsync takes from on the device's streams; one of another device is refused. */
CUSW_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    CUSW_INIT_ENTRY();
    if (!pools_supported())
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult rc = cusw_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    cusw_lock_acquire();
    struct cusw_pool *p = NULL;
    rc = cusw_pool_from_handle(pool, &p);
    if (rc == CUDA_SUCCESS && cusw_pool_device(p) != dev)
        rc = CUDA_ERROR_INVALID_DEVICE;
    if (rc == CUDA_SUCCESS)
        cusw_pool_set_current(dev, p);
    cusw_lock_release();
    return rc;
}

/* A pool of device memory of one device; the properties' other choices (exported handles, a
 * maximum size, usage hints) are taken and not modelled. */
CUSW_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    CUSW_INIT_ENTRY();
    if (!pools_supported())
        return CUDA_ERROR_NOT_SUPPORTED;
    if (pool == NULL || poolProps == NULL ||
        poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = cusw_check_device(poolProps->location.id);
    if (rc != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_pool *p = cusw_pool_create(poolProps->location.id);
    if (p == NULL)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    else
        *pool = (CUmemoryPool)cusw_pool_handle(p);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    CUSW_INIT_ENTRY();
    cusw_lock_acquire();
    struct cusw_pool *p = NULL;
    CUresult rc = cusw_pool_from_handle(pool, &p);
    if (rc == CUDA_SUCCESS)
        rc = cusw_pool_destroy(p);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                           void *value)
{
    CUSW_INIT_ENTRY();
    if (value == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_pool *p = NULL;
    CUresult rc = cusw_pool_from_handle(pool, &p);
    if (rc == CUDA_SUCCESS)
        rc = cusw_pool_get_attribute(p, attr, value);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                           void *value)
{
    CUSW_INIT_ENTRY();
    if (value == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_pool *p = NULL;
    CUresult rc = cusw_pool_from_handle(pool, &p);
    if (rc == CUDA_SUCCESS)
        rc = cusw_pool_set_attribute(p, attr, value);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    CUSW_INIT_ENTRY();
    cusw_lock_acquire();
    struct cusw_pool *p = NULL;
    CUresult rc = cusw_pool_from_handle(pool, &p);
    if (rc == CUDA_SUCCESS)
        cusw_pool_trim(p, minBytesToKeep);
    cusw_lock_release();
    return rc;
}

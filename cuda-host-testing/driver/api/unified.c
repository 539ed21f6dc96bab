/*
 * unified.c - Unified Addressing's managed-memory hints: cuMemPrefetchAsync_v2 (with its
 * per-thread form) and cuMemAdvise_v2. Managed memory is host memory here, where the host and
 * every stream reach it alike: a prefetch is an operation of its stream that moves nothing, and
 * advice is taken and followed by nothing. Each refuses a range that is not managed memory, as
 * the real driver does on a device without pageable memory access.
 */
#include "internal.h"

/* A location a prefetch or advice may name: a device, or the host. */
static bool location_valid(CUmemLocation location)
{
    switch (location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE: return cusw_check_device(location.id) == CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: return true;
    default: return false;
    }
}

static bool managed(CUdeviceptr devPtr, size_t count)
{
    cusw_lock_acquire();
    bool is_managed = count > 0 && cusw_memory_is_managed((void *)(uintptr_t)devPtr, count);
    cusw_lock_release();
    return is_managed;
}

static CUresult prefetch(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                         unsigned int flags, CUstream hStream, bool per_thread)
{
    if (flags != 0 || !location_valid(location) || !managed(devPtr, count))
        return CUDA_ERROR_INVALID_VALUE;
    struct cusw_action a = { .kind = CUSW_ACT_NOP };
    return cusw_submit(hStream, per_thread, &a);
}

CUSW_TWINS(cuMemPrefetchAsync_v2,
           (CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags,
            CUstream hStream),
           prefetch(devPtr, count, location, flags, hStream, per_thread))

CUSW_EXPORT CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                                    CUmemLocation location)
{
    CUSW_INIT_ENTRY();
    if (advice < CU_MEM_ADVISE_SET_READ_MOSTLY || advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY)
        return CUDA_ERROR_INVALID_VALUE;
    /* Read-mostly advice names no location. */
    bool names_location = advice != CU_MEM_ADVISE_SET_READ_MOSTLY &&
                          advice != CU_MEM_ADVISE_UNSET_READ_MOSTLY;
    if ((names_location && !location_valid(location)) || !managed(devPtr, count))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/*
 * host_task_sync.c - the sync modes cuLaunchHostFunc_v2 was asked for (CUDA 13.1), counted per
 * mode, so that a test can tell that a caller's option reached the driver. This driver's
 * host-function thread serves both modes alike (it always blocks for work); what differs on the
 * real driver is only how that thread waits, not the order in which functions run.
 */
#include "internal.h"

static _Atomic unsigned long long launches_in_mode[2];

void cusw_note_host_task_sync_mode(unsigned int syncMode)
{
    if (syncMode < 2)
        atomic_fetch_add_explicit(&launches_in_mode[syncMode], 1, memory_order_relaxed);
}

CUSW_EXPORT CUresult cuswHostTaskSyncModeLaunches(unsigned int syncMode, unsigned long long *count)
{
    CUSW_ENTRY();
    if (syncMode >= 2 || count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *count = atomic_load_explicit(&launches_in_mode[syncMode], memory_order_relaxed);
    return CUDA_SUCCESS;
}

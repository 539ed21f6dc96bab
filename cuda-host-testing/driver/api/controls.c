/*
 * controls.c - the software driver's test controls (cusw*, declared in cudasw.h): what a test
 * makes happen (failures, delays and captures armed for the next calls of an entry point, sticky
 * errors, stand-ins for faulting and long kernels, an older driver version) and what it reads
 * (calls made, objects alive, handles used after their destruction, sync modes asked for).
 */
#include "internal.h"

#include <stddef.h>
#include <string.h>

static bool valid_capture_mode(CUstreamCaptureMode mode)
{
    return mode == CU_STREAM_CAPTURE_MODE_GLOBAL || mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ||
           mode == CU_STREAM_CAPTURE_MODE_RELAXED;
}

/* ---- What a test makes happen ---------------------------------------------------------------- */

/* Arming again replaces the earlier failure of the same entry and scope; count 0 disarms. An
 * unknown entry name answers CUDA_ERROR_NOT_FOUND, which catches typos in tests. */
static CUresult arm_failure(const char *entry, unsigned int count, CUresult code, uint64_t thread)
{
    if (entry == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cusw_entry_name_known(entry))
        return CUDA_ERROR_NOT_FOUND;
    return cusw_fault_arm(entry, count, code, thread);
}

CUSW_EXPORT CUresult cuswFailNextCalls(const char *entry, unsigned int count, CUresult code)
{
    CUSW_ENTRY();
    return arm_failure(entry, count, code, cusw_thread_serial());
}

CUSW_EXPORT CUresult cuswFailNextCallsAnyThread(const char *entry, unsigned int count,
                                                CUresult code)
{
    CUSW_ENTRY();
    return arm_failure(entry, count, code, 0);
}

CUSW_EXPORT CUresult cuswDelayNextCalls(const char *entry, unsigned int count,
                                        unsigned int microseconds)
{
    CUSW_ENTRY();
    if (entry == NULL || (count != 0 && microseconds == 0))
        return CUDA_ERROR_INVALID_VALUE;
    if (!cusw_entry_name_known(entry))
        return CUDA_ERROR_NOT_FOUND;
    return cusw_delay_arm(entry, count, microseconds);
}

CUSW_EXPORT CUresult cuswBeginCaptureAtNextCall(const char *entry, CUstream stream,
                                                CUstreamCaptureMode mode)
{
    CUSW_ENTRY();
    if (entry == NULL)
        return cusw_capture_disarm();
    if (!valid_capture_mode(mode))
        return CUDA_ERROR_INVALID_VALUE;
    if (!cusw_entry_name_known(entry))
        return CUDA_ERROR_NOT_FOUND;
    return cusw_capture_arm(entry, 0, stream, mode);
}

CUSW_EXPORT CUresult cuswBeginCaptureAtCall(const char *entry, unsigned int calls_before,
                                            CUstream stream, CUstreamCaptureMode mode)
{
    CUSW_ENTRY();
    if (entry == NULL || !valid_capture_mode(mode))
        return CUDA_ERROR_INVALID_VALUE;
    if (!cusw_entry_name_known(entry))
        return CUDA_ERROR_NOT_FOUND;
    return cusw_capture_arm(entry, calls_before, stream, mode);
}

CUSW_EXPORT CUresult cuswSetStickyError(CUcontext ctx, CUresult code)
{
    CUSW_INIT_ENTRY();
    CUresult rc = CUDA_SUCCESS;
    if (code == CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_ctx *c = cusw_handle_get((uintptr_t)ctx, CUSW_KIND_CONTEXT);
    if (c == NULL) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
    } else {
        cusw_ctx_set_sticky(c, code);
        cusw_broadcast_progress();
    }
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuswLaunchFault(CUstream stream, CUresult code)
{
    CUSW_ENTRY();
    if (code == CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_VALUE;
    struct cusw_action a = { .kind = CUSW_ACT_FAULT, .u.fault.code = code };
    return cusw_submit(stream, false, &a);
}

CUSW_EXPORT CUresult cuswLaunchSleep(CUstream stream, unsigned int microseconds)
{
    CUSW_ENTRY();
    struct cusw_action a = { .kind = CUSW_ACT_SLEEP, .u.sleep.usec = microseconds };
    return cusw_submit(stream, false, &a);
}

CUSW_EXPORT CUresult cuswSetWaitPollInterval(unsigned int microseconds)
{
    CUSW_ENTRY();
    cusw_set_wait_poll_interval(microseconds);
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuswSetDriverVersion(int version)
{
    CUSW_ENTRY();
    if (version < 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_set_reported_driver_version(version);
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuswOverrideDeviceAttribute(CUdevice_attribute attribute, const int *value)
{
    CUSW_ENTRY();
    return cusw_override_device_attribute(attribute, value) ? CUDA_SUCCESS
                                                            : CUDA_ERROR_INVALID_VALUE;
}

/* ---- What a test reads ----------------------------------------------------------------------- */

/* What a count of what is armed for `entry` answers before counting. */
static CUresult armed_count_refusal(const char *entry, const unsigned int *remaining)
{
    if (entry == NULL || remaining == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return cusw_entry_name_known(entry) ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUSW_EXPORT CUresult cuswArmedFailures(const char *entry, unsigned int *remaining)
{
    CUSW_ENTRY();
    CUresult refusal = armed_count_refusal(entry, remaining);
    if (refusal == CUDA_SUCCESS)
        *remaining = cusw_fault_armed(entry, cusw_thread_serial());
    return refusal;
}

CUSW_EXPORT CUresult cuswArmedDelays(const char *entry, unsigned int *remaining)
{
    CUSW_ENTRY();
    CUresult refusal = armed_count_refusal(entry, remaining);
    if (refusal == CUDA_SUCCESS)
        *remaining = cusw_delay_armed(entry);
    return refusal;
}

CUSW_EXPORT CUresult cuswCallCount(const char *entry, unsigned long long *count)
{
    CUSW_ENTRY();
    if (entry == NULL || count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cusw_entry_name_known(entry))
        return CUDA_ERROR_NOT_FOUND; /* catches typos in tests */
    *count = cusw_calls_of(entry, true);
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuswHostTaskSyncModeLaunches(unsigned int syncMode, unsigned long long *count)
{
    CUSW_ENTRY();
    if (syncMode >= 2 || count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *count = cusw_host_task_sync_mode_launches(syncMode);
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuswUnmodelledCalls(unsigned long long *count)
{
    CUSW_ENTRY();
    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *count = cusw_unmodelled_calls();
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuswStreamOrderedMemoryMisuses(unsigned long long *count)
{
    CUSW_ENTRY();
    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *count = cusw_pool_misuses();
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuswStaleHandleUses(unsigned long long *count)
{
    CUSW_ENTRY();
    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *count = cusw_stale_handle_uses();
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuswUserObjectStats(unsigned long long *destroyed, unsigned long long *alive)
{
    CUSW_ENTRY();
    if (destroyed != NULL)
        *destroyed = cusw_user_object_destructors_run();
    if (alive != NULL)
        *alive = cusw_user_objects_alive();
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuswStreamOperations(unsigned long long id, unsigned long long *enqueued,
                                          unsigned long long *completed)
{
    CUSW_ENTRY();
    if (enqueued == NULL || completed == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    const struct cusw_stream *s = cusw_stream_of_id(id);
    if (s != NULL) {
        *enqueued = s->enqueued;
        *completed = s->completed;
    }
    cusw_lock_release();
    return s != NULL ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUSW_EXPORT CUresult cuswLiveObjects(struct cuswLiveCounts *counts)
{
    CUSW_ENTRY();
    if (counts == NULL || counts->size < sizeof counts->size)
        return CUDA_ERROR_INVALID_VALUE;
    struct cuswLiveCounts now = { .size = sizeof now };
    size_t host = 0, device = 0;
    /* One snapshot under the lock: the counts agree with each other. */
    cusw_lock_acquire();
    now.streams = cusw_user_stream_count();
    now.events = cusw_handle_count(CUSW_KIND_EVENT);
    now.graphs = cusw_handle_count(CUSW_KIND_GRAPH);
    now.graph_execs = cusw_handle_count(CUSW_KIND_EXEC);
    now.user_objects = cusw_user_objects_alive();
    cusw_memory_counts(&host, &device);
    now.host_allocations = host;
    now.device_allocations = device;
    now.pending_host_functions = cusw_pending_host_functions();
    cusw_lock_release();
    /* A caller built against a shorter struct gets the whole members it knows of. */
    const size_t first = offsetof(struct cuswLiveCounts, streams), member = sizeof now.streams;
    size_t filled = sizeof now;
    if (counts->size < filled)
        filled = counts->size < first ? sizeof counts->size
                                      : first + (counts->size - first) / member * member;
    now.size = filled;
    memcpy(counts, &now, filled);
    return CUDA_SUCCESS;
}

/* ---- Kernels' stand-ins ---------------------------------------------------------------------- */

CUSW_EXPORT CUresult cuswRegisterStandIn(const char *kernel, cuswStandIn stand_in, void *user_data)
{
    CUSW_ENTRY();
    if (kernel == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return cusw_stand_in_register(kernel, stand_in, user_data);
}

CUSW_EXPORT CUresult cuswKernelsWithoutStandIn(unsigned long long *count)
{
    CUSW_ENTRY();
    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *count = cusw_stand_in_missing_launches();
    return CUDA_SUCCESS;
}

/*
 * proc_address.c - the table of entry points, cuGetProcAddress / cuGetProcAddress_v2, and the
 * reported driver version (cuDriverGetVersion, cuswSetDriverVersion).
 *
 * One row per implemented ABI: the base name a caller asks for, the CUDA version at which that
 * ABI appeared (the N of cudaTypedefs.h's PFN_<base>_v<N>), the exported function, and its
 * per-thread-default-stream variant where cuda.h has one. A lookup takes, among the rows of that
 * base name whose N is at most both the requested version and the reported driver version, the
 * largest N. The pointers are the exported functions themselves, so they equal what dlsym gives.
 */
#include "internal.h"
#include "entries.h"

#include <string.h>

struct entry {
    const char *base;
    int version;
    const char *symbol;
    void *fn;
    const char *ptds_symbol; /* NULL when the entry has no _ptsz/_ptds variant */
    void *ptds_fn;
};

#define ROW(base, version, fn) { base, version, #fn, (void *)fn, NULL, NULL }
#define ROW_PT(base, version, fn, pt_fn) { base, version, #fn, (void *)fn, #pt_fn, (void *)pt_fn }
/* Control functions of the software driver: present at every version. */
#define CONTROL(fn) { #fn, 0, #fn, (void *)fn, NULL, NULL }

static const struct entry entries[] = {
    ROW("cuInit", 2000, cuInit),
    ROW("cuDriverGetVersion", 2020, cuDriverGetVersion),
    ROW("cuGetErrorString", 6000, cuGetErrorString),
    ROW("cuGetErrorName", 6000, cuGetErrorName),
#ifndef CUSW_VARIANT_NO_PROC_ADDRESS
    ROW("cuGetProcAddress", 11030, cuGetProcAddress),
    ROW("cuGetProcAddress", 12000, cuGetProcAddress_v2),
#endif

    ROW("cuDeviceGet", 2000, cuDeviceGet),
    ROW("cuDeviceGetCount", 2000, cuDeviceGetCount),
    ROW("cuDeviceGetName", 2000, cuDeviceGetName),
    ROW("cuDeviceGetUuid", 9020, cuDeviceGetUuid),
    ROW("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    ROW("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    ROW("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),

    ROW("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    ROW("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    ROW("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    ROW("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    ROW("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    ROW("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    ROW("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    ROW("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    ROW("cuCtxGetDevice", 2000, cuCtxGetDevice),
    ROW("cuCtxGetDevice", 13000, cuCtxGetDevice_v2),
    ROW("cuCtxSynchronize", 2000, cuCtxSynchronize),
    ROW("cuCtxSynchronize", 13000, cuCtxSynchronize_v2),

    ROW("cuStreamCreate", 2000, cuStreamCreate),
    ROW("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority),
    ROW("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    ROW_PT("cuStreamSynchronize", 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz),
    ROW_PT("cuStreamQuery", 2000, cuStreamQuery, cuStreamQuery_ptsz),
    ROW_PT("cuStreamWaitEvent", 3020, cuStreamWaitEvent, cuStreamWaitEvent_ptsz),
    ROW_PT("cuStreamGetFlags", 5050, cuStreamGetFlags, cuStreamGetFlags_ptsz),
    ROW_PT("cuStreamGetPriority", 5050, cuStreamGetPriority, cuStreamGetPriority_ptsz),
    ROW_PT("cuStreamGetCtx", 9020, cuStreamGetCtx, cuStreamGetCtx_ptsz),
    ROW_PT("cuStreamGetCtx", 12050, cuStreamGetCtx_v2, cuStreamGetCtx_v2_ptsz),
    ROW_PT("cuStreamGetId", 12000, cuStreamGetId, cuStreamGetId_ptsz),

    ROW_PT("cuLaunchHostFunc", 10000, cuLaunchHostFunc, cuLaunchHostFunc_ptsz),
    ROW_PT("cuLaunchHostFunc", 13010, cuLaunchHostFunc_v2, cuLaunchHostFunc_v2_ptsz),
    ROW_PT("cuStreamAddCallback", 5000, cuStreamAddCallback, cuStreamAddCallback_ptsz),
    ROW_PT("cuStreamWriteValue32", 11070, cuStreamWriteValue32_v2, cuStreamWriteValue32_v2_ptsz),
    ROW_PT("cuStreamWaitValue32", 11070, cuStreamWaitValue32_v2, cuStreamWaitValue32_v2_ptsz),
    ROW_PT("cuStreamWriteValue64", 11070, cuStreamWriteValue64_v2, cuStreamWriteValue64_v2_ptsz),
    ROW_PT("cuStreamWaitValue64", 11070, cuStreamWaitValue64_v2, cuStreamWaitValue64_v2_ptsz),

    ROW("cuEventCreate", 2000, cuEventCreate),
    ROW("cuEventDestroy", 4000, cuEventDestroy_v2),
    ROW_PT("cuEventRecord", 2000, cuEventRecord, cuEventRecord_ptsz),
    ROW_PT("cuEventRecordWithFlags", 11010, cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz),
    ROW("cuEventQuery", 2000, cuEventQuery),
    ROW("cuEventSynchronize", 2000, cuEventSynchronize),
    ROW("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),

    ROW_PT("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz),
    ROW_PT("cuStreamEndCapture", 10000, cuStreamEndCapture, cuStreamEndCapture_ptsz),
    ROW_PT("cuStreamIsCapturing", 10000, cuStreamIsCapturing, cuStreamIsCapturing_ptsz),
    ROW_PT("cuStreamGetCaptureInfo", 12030, cuStreamGetCaptureInfo_v3,
           cuStreamGetCaptureInfo_v3_ptsz),
    ROW("cuThreadExchangeStreamCaptureMode", 10010, cuThreadExchangeStreamCaptureMode),

    ROW("cuGraphCreate", 10000, cuGraphCreate),
    ROW("cuGraphDestroy", 10000, cuGraphDestroy),
    ROW("cuGraphAddHostNode", 10000, cuGraphAddHostNode),
    ROW("cuGraphAddEmptyNode", 10000, cuGraphAddEmptyNode),
    ROW("cuGraphAddDependencies", 12030, cuGraphAddDependencies_v2),
    ROW("cuGraphGetNodes", 10000, cuGraphGetNodes),
    ROW("cuGraphNodeGetType", 10000, cuGraphNodeGetType),
    ROW("cuGraphClone", 10000, cuGraphClone),
    ROW("cuGraphDestroyNode", 10000, cuGraphDestroyNode),
    ROW("cuGraphHostNodeGetParams", 10000, cuGraphHostNodeGetParams),
    ROW("cuGraphHostNodeSetParams", 10000, cuGraphHostNodeSetParams),
    ROW("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags),
    ROW_PT("cuGraphLaunch", 10000, cuGraphLaunch, cuGraphLaunch_ptsz),
    ROW("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
    ROW("cuGraphExecHostNodeSetParams", 10020, cuGraphExecHostNodeSetParams),

    ROW("cuUserObjectCreate", 11030, cuUserObjectCreate),
    ROW("cuUserObjectRetain", 11030, cuUserObjectRetain),
    ROW("cuUserObjectRelease", 11030, cuUserObjectRelease),
    ROW("cuGraphRetainUserObject", 11030, cuGraphRetainUserObject),
    ROW("cuGraphReleaseUserObject", 11030, cuGraphReleaseUserObject),

    ROW("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    ROW("cuMemAlloc", 3020, cuMemAlloc_v2),
    ROW("cuMemFree", 3020, cuMemFree_v2),
    ROW("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    ROW("cuMemHostAlloc", 2020, cuMemHostAlloc),
    ROW("cuMemHostGetDevicePointer", 3020, cuMemHostGetDevicePointer_v2),
    ROW("cuMemFreeHost", 2000, cuMemFreeHost),
    ROW_PT("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds),
    ROW_PT("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds),
    ROW_PT("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds),
    ROW_PT("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz),
    ROW_PT("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz),
    ROW_PT("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz),
    ROW_PT("cuMemsetD8", 3020, cuMemsetD8_v2, cuMemsetD8_v2_ptds),
    ROW_PT("cuMemsetD32", 3020, cuMemsetD32_v2, cuMemsetD32_v2_ptds),
    ROW_PT("cuMemsetD8Async", 3020, cuMemsetD8Async, cuMemsetD8Async_ptsz),
    ROW_PT("cuMemsetD32Async", 3020, cuMemsetD32Async, cuMemsetD32Async_ptsz),

    ROW("cuModuleLoad", 2000, cuModuleLoad),
    ROW("cuModuleLoadData", 2000, cuModuleLoadData),
    ROW("cuModuleUnload", 2000, cuModuleUnload),
    ROW("cuModuleGetFunction", 2000, cuModuleGetFunction),
    ROW_PT("cuLaunchKernel", 4000, cuLaunchKernel, cuLaunchKernel_ptsz),

    CONTROL(cuswFailNextCalls),
    CONTROL(cuswFailNextCallsAnyThread),
    CONTROL(cuswSetStickyError),
    CONTROL(cuswLaunchFault),
    CONTROL(cuswLaunchSleep),
    CONTROL(cuswSetDriverVersion),
    CONTROL(cuswUserObjectStats),
    CONTROL(cuswDelayNextCalls),
    CONTROL(cuswStaleHandleUses),
    CONTROL(cuswLiveObjects),
    CONTROL(cuswArmedFailures),
    CONTROL(cuswCallCount),
};

#define ENTRY_COUNT (sizeof entries / sizeof entries[0])

bool cusw_entry_name_known(const char *name)
{
    for (size_t i = 0; i < ENTRY_COUNT; i++) {
        const struct entry *e = &entries[i];
        if (strcmp(name, e->base) == 0 || strcmp(name, e->symbol) == 0 ||
            (e->ptds_symbol != NULL && strcmp(name, e->ptds_symbol) == 0))
            return true;
    }
    return false;
}

void cusw_for_each_export(void (*fn)(const char *symbol, void *arg), void *arg)
{
    for (size_t i = 0; i < ENTRY_COUNT; i++) {
        fn(entries[i].symbol, arg);
        if (entries[i].ptds_symbol != NULL)
            fn(entries[i].ptds_symbol, arg);
    }
}

/* ---- Reported driver version ---------------------------------------------------------------- */

static atomic_int version_override; /* 0: the configured default */

int cusw_reported_driver_version(void)
{
    int version = atomic_load(&version_override);
    return version != 0 ? version : cusw_config_driver_version();
}

CUSW_EXPORT CUresult cuDriverGetVersion(int *driverVersion)
{
    CUSW_ENTRY("cuDriverGetVersion", "cuDriverGetVersion");
    if (driverVersion == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = cusw_reported_driver_version();
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuswSetDriverVersion(int version)
{
    CUSW_ENTRY("cuswSetDriverVersion", "cuswSetDriverVersion");
    if (version < 0)
        return CUDA_ERROR_INVALID_VALUE;
    atomic_store(&version_override, version);
    return CUDA_SUCCESS;
}

/* ---- Lookup ---------------------------------------------------------------------------------- */

/* The NO_PROC_ADDRESS variant exports no cuGetProcAddress: its loader must fall back to dlsym of
 * the exported names. The table above still serves cusw_entry_name_known. */
#ifndef CUSW_VARIANT_NO_PROC_ADDRESS

static CUresult lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *symbolStatus)
{
    if (symbol == NULL || pfn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    const cuuint64_t known_flags =
        CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    if ((flags & ~known_flags) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* Measured on the real 13.0 driver: asking for a newer ABI than the driver's own version is
     * an invalid argument, not a missing symbol. */
    int reported = cusw_reported_driver_version();
    if (cudaVersion > reported)
        return CUDA_ERROR_INVALID_VALUE;

    const struct entry *best = NULL;
    bool name_exists = false;
    for (size_t i = 0; i < ENTRY_COUNT; i++) {
        const struct entry *e = &entries[i];
        if (strcmp(e->base, symbol) != 0)
            continue;
        name_exists = true;
        /* Rows newer than the reported version are hidden, as they would be on an older driver. */
        if (e->version <= cudaVersion && e->version <= reported &&
            (best == NULL || e->version > best->version))
            best = e;
    }
    if (best == NULL) {
        if (symbolStatus != NULL)
            *symbolStatus = name_exists ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                        : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    *pfn = (per_thread && best->ptds_fn != NULL) ? best->ptds_fn : best->fn;
    if (symbolStatus != NULL)
        *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                         cuuint64_t flags,
                                         CUdriverProcAddressQueryResult *symbolStatus)
{
    CUSW_ENTRY("cuGetProcAddress", "cuGetProcAddress_v2");
    return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

CUSW_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                      cuuint64_t flags)
{
    CUSW_ENTRY("cuGetProcAddress", "cuGetProcAddress");
    return lookup(symbol, pfn, cudaVersion, flags, NULL);
}

#endif /* CUSW_VARIANT_NO_PROC_ADDRESS */

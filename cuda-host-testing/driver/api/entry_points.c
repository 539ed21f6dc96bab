/*
 * entry_points.c - Version Management and Driver Entry Point Access: cuDriverGetVersion,
 * cuGetProcAddress in both its ABIs, and cuGetExportTable, which has no table to give.
 */
#include "internal.h"

CUSW_EXPORT CUresult cuDriverGetVersion(int *driverVersion)
{
    CUSW_ENTRY();
    if (driverVersion == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = cusw_reported_driver_version();
    return CUDA_SUCCESS;
}

/* The NO_PROC_ADDRESS variant exports no cuGetProcAddress: its loader must fall back to dlsym of
 * the exported names. */
#ifndef CUSW_VARIANT_NO_PROC_ADDRESS

/* The functions of entries.def's and unmodelled.def's rows, in the order of model/entries.c's
 * table of their names, which decides what a lookup finds. The pointers are the exported
 * functions themselves, so they equal what dlsym gives. */
struct functions {
    void *fn;
    void *twin_fn; /* NULL when the entry has no per-thread form (_ptsz, _ptds) */
};

#define ENTRY(base, version, name, params) { (void *)name, NULL },
#define TWIN(base, version, name, params) { (void *)name, (void *)name##_ptsz },
#define PTDS_TWIN(base, version, name, params) { (void *)name, (void *)name##_ptds },
#define CONTROL(name) { (void *)name, NULL },
#define UNMODELLED(base, version, name) { (void *)name, NULL },
#define UNMODELLED_TWIN(base, version, name, twin) { (void *)name, (void *)twin },
static const struct functions functions[] = {
#include "entries.def"
#include "unmodelled.def"
};
#undef ENTRY
#undef TWIN
#undef PTDS_TWIN
#undef CONTROL
#undef UNMODELLED
#undef UNMODELLED_TWIN

/* Both ABIs' work; the first ABI has no symbolStatus (NULL here). */
static CUresult proc_address(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
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
    if (cudaVersion > cusw_reported_driver_version())
        return CUDA_ERROR_INVALID_VALUE;

    bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    bool name_exists = false;
    long row = cusw_entry_lookup(symbol, cudaVersion, per_thread, &name_exists);
    /* Measured on the real 13.0 driver: a name it lacks, or has only in a newer form than the
     * version asked for, is answered with success and a null pointer; the status says which. */
    if (row < 0) {
        if (symbolStatus != NULL)
            *symbolStatus = name_exists ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                        : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_SUCCESS;
    }
    const struct functions *found = &functions[row];
    *pfn = (per_thread && found->twin_fn != NULL) ? found->twin_fn : found->fn;
    if (symbolStatus != NULL)
        *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                      cuuint64_t flags)
{
    CUSW_ENTRY();
    return proc_address(symbol, pfn, cudaVersion, flags, NULL);
}

CUSW_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                         cuuint64_t flags,
                                         CUdriverProcAddressQueryResult *symbolStatus)
{
    CUSW_ENTRY();
    return proc_address(symbol, pfn, cudaVersion, flags, symbolStatus);
}

#endif /* CUSW_VARIANT_NO_PROC_ADDRESS */

/* The tables NVIDIA's own libraries (the runtime, NVRTC) ask for by UUID are the real driver's
 * private interface: this driver has none, and answers as a driver without the one asked for does,
 * so that such a library loaded beside it goes on without (NVRTC compiles without a driver). */
CUSW_EXPORT CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    CUSW_ENTRY();
    if (ppExportTable == NULL || pExportTableId == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *ppExportTable = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/*
 * proc_address.c - the table of entry points, cuGetProcAddress_v2, and the reported driver version
 * (cuDriverGetVersion, cuswSetDriverVersion).
 *
 * One row per exported ABI (entries.def): the base name a caller asks for, the CUDA version at
 * which that ABI appeared, the exported function, and its per-thread-default-stream twin where it
 * has one. A lookup takes, among the rows of that base name whose version is at most both the
 * requested version and the reported driver version, the newest. A lookup for the per-thread
 * default stream counts a twin's version instead, which is never older than CUDA 7.0, where the
 * per-thread forms came (cudaTypedefs.h: PFN_cuEventRecord_v7000_ptsz for an ABI of 2000): as on
 * the real driver, asking for such a form at an older version finds none. The pointers are the
 * exported functions themselves, so they equal what dlsym gives.
 */
#include "internal.h"

#include <string.h>

struct entry {
    const char *base;
    int version;
    const char *symbol;
    void *fn;
    const char *twin_symbol; /* NULL when the entry has no _ptsz twin */
    void *twin_fn;
};

#define ENTRY(base, version, name, params) { base, version, #name, (void *)name, NULL, NULL },
#define TWIN(base, version, name, params)                                                        \
    { base, version, #name, (void *)name, #name "_ptsz", (void *)name##_ptsz },
#define CONTROL(name) { #name, 0, #name, (void *)name, NULL, NULL },
static const struct entry entries[] = {
#include "entries.def"
};
#undef ENTRY
#undef TWIN
#undef CONTROL

#define ENTRY_COUNT (sizeof entries / sizeof entries[0])

/* The CUDA version of the first per-thread-default-stream forms. */
#define PER_THREAD_FORMS_SINCE 7000

bool cusw_entry_name_known(const char *name)
{
    for (size_t i = 0; i < ENTRY_COUNT; i++) {
        const struct entry *e = &entries[i];
        if (strcmp(name, e->base) == 0 || strcmp(name, e->symbol) == 0 ||
            (e->twin_symbol != NULL && strcmp(name, e->twin_symbol) == 0))
            return true;
    }
    return false;
}

const char *cusw_entry_base(const char *symbol)
{
    for (size_t i = 0; i < ENTRY_COUNT; i++) {
        const struct entry *e = &entries[i];
        if (strcmp(symbol, e->symbol) == 0 ||
            (e->twin_symbol != NULL && strcmp(symbol, e->twin_symbol) == 0))
            return e->base;
    }
    return symbol;
}

void cusw_for_each_export(void (*fn)(const char *symbol, void *arg), void *arg)
{
    for (size_t i = 0; i < ENTRY_COUNT; i++) {
        fn(entries[i].symbol, arg);
        if (entries[i].twin_symbol != NULL)
            fn(entries[i].twin_symbol, arg);
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
    CUSW_ENTRY();
    if (driverVersion == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = cusw_reported_driver_version();
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuswSetDriverVersion(int version)
{
    CUSW_ENTRY();
    if (version < 0)
        return CUDA_ERROR_INVALID_VALUE;
    atomic_store(&version_override, version);
    return CUDA_SUCCESS;
}

/* ---- Lookup ---------------------------------------------------------------------------------- */

/* The NO_PROC_ADDRESS variant exports no cuGetProcAddress: its loader must fall back to dlsym of
 * the exported names. The table above still serves cusw_entry_name_known. */
#ifndef CUSW_VARIANT_NO_PROC_ADDRESS

CUSW_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                         cuuint64_t flags,
                                         CUdriverProcAddressQueryResult *symbolStatus)
{
    CUSW_ENTRY();
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

    bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const struct entry *best = NULL;
    int best_version = 0;
    bool name_exists = false;
    for (size_t i = 0; i < ENTRY_COUNT; i++) {
        const struct entry *e = &entries[i];
        if (strcmp(e->base, symbol) != 0)
            continue;
        name_exists = true;
        int version = e->version;
        if (per_thread && e->twin_fn != NULL && version < PER_THREAD_FORMS_SINCE)
            version = PER_THREAD_FORMS_SINCE;
        /* Rows newer than the reported version are hidden, as they would be on an older driver. */
        if (version <= cudaVersion && version <= reported && (best == NULL || version > best_version)) {
            best = e;
            best_version = version;
        }
    }
    /* Measured on the real 13.0 driver: a name it lacks, or has only in a newer form than the
     * version asked for, is answered with success and a null pointer; the status says which. */
    if (best == NULL) {
        if (symbolStatus != NULL)
            *symbolStatus = name_exists ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                        : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_SUCCESS;
    }
    *pfn = (per_thread && best->twin_fn != NULL) ? best->twin_fn : best->fn;
    if (symbolStatus != NULL)
        *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

#endif /* CUSW_VARIANT_NO_PROC_ADDRESS */

/*
 * entries.c - the driver's entry points and controls by name (entries.def), and the version the
 * driver reports.
 *
 * One row per exported ABI: the base name a caller asks for, the CUDA version at which that ABI
 * appeared, the exported name, and its per-thread-default-stream twin's where it has one; the
 * modelled ones (entries.def), then the others (unmodelled.def). The functions themselves are in
 * api/entry_points.c's table, made from the same lists in the same order, so a row found here is
 * the index of its function there.
 *
 * A lookup takes, among the rows of that base name whose version is at most both the requested
 * version and the reported driver version, the newest. A lookup for the per-thread default stream
 * counts a twin's version instead, which is never older than CUDA 7.0, where the per-thread forms
 * came (cudaTypedefs.h: PFN_cuEventRecord_v7000_ptsz for an ABI of 2000): as on the real driver,
 * asking for such a form at an older version finds none.
 */
#include "internal.h"

#include <string.h>

struct entry {
    const char *base;
    int version;
    const char *symbol;
    const char *twin_symbol; /* NULL when the entry has no _ptsz twin */
};

#define ENTRY(base, version, name, params) { base, version, #name, NULL },
#define TWIN(base, version, name, params) { base, version, #name, #name "_ptsz" },
#define PTDS_TWIN(base, version, name, params) { base, version, #name, #name "_ptds" },
#define CONTROL(name) { #name, 0, #name, NULL },
#define UNMODELLED(base, version, name) { base, version, #name, NULL },
#define UNMODELLED_TWIN(base, version, name, twin) { base, version, #name, #twin },
static const struct entry entries[] = {
#include "entries.def"
#include "unmodelled.def"
};
#undef ENTRY
#undef TWIN
#undef PTDS_TWIN
#undef CONTROL
#undef UNMODELLED
#undef UNMODELLED_TWIN

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

long cusw_entry_lookup(const char *base, int cudaVersion, bool per_thread, bool *name_exists)
{
    int reported = cusw_reported_driver_version();
    long best = -1;
    int best_version = 0;
    *name_exists = false;
    for (size_t i = 0; i < ENTRY_COUNT; i++) {
        const struct entry *e = &entries[i];
        if (strcmp(e->base, base) != 0)
            continue;
        *name_exists = true;
        int version = e->version;
        if (per_thread && e->twin_symbol != NULL && version < PER_THREAD_FORMS_SINCE)
            version = PER_THREAD_FORMS_SINCE;
        /* Rows newer than the reported version are hidden, as they would be on an older driver. */
        if (version <= cudaVersion && version <= reported && (best < 0 || version > best_version)) {
            best = (long)i;
            best_version = version;
        }
    }
    return best;
}

/* ---- Reported driver version ----------------------------------------------------------------- */

static atomic_int version_override; /* 0: the configured default */

int cusw_reported_driver_version(void)
{
    int version = atomic_load(&version_override);
    return version != 0 ? version : cusw_config_driver_version();
}

void cusw_set_reported_driver_version(int version) { atomic_store(&version_override, version); }

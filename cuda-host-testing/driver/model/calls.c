/*
 * calls.c - what every exported function does first (CUSW_ENTRY): what a test armed for the call
 * (injection.c) and its count; and what tests read of the calls made: calls of each entry point
 * since load (cuswCallCount), the host functions launched in each sync mode, and with
 * CUSW_CALL_LOG set, every entry point's count written at exit, so that a test can tell which
 * entry points a whole run called.
 *
 * Calls of the entry points the driver does not model are counted together too, and each is
 * named in the log the first time.
 *
 * Call counting is lock-free, since every entry point does it: each exported function has its own
 * static call site (CUSW_ENTRY), which counts with one relaxed atomic add and puts itself on a
 * list the first time it is called. A site's `next` is written before the site is published
 * (release) and never again, so readers walk the list without a lock.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Atomic(struct cusw_call_site *) call_sites;

/* The capture a test armed for this call, begun as the calling thread's own
 * cuStreamBeginCapture_v2 would begin it (its answer is not reported). */
static void begin_injected_capture(const char *base, const char *symbol)
{
    CUstream stream = NULL;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (!cusw_capture_injected(base, symbol, &stream, &mode) || !cusw_initialized())
        return;
    cusw_lock_acquire();
    struct cusw_stream *s = NULL;
    if (cusw_stream_resolve(stream, false, &s) == CUDA_SUCCESS)
        (void)cusw_capture_begin(s, mode);
    cusw_lock_release();
}

bool cusw_enter(struct cusw_call_site *site, CUresult *injected)
{
    const char *base = atomic_load_explicit(&site->base, memory_order_acquire);
    if (base == NULL) {
        base = cusw_entry_base(site->symbol);
        atomic_store_explicit(&site->base, base, memory_order_release);
    }
    cusw_delay_injected(base, site->symbol);
    begin_injected_capture(base, site->symbol);
    atomic_fetch_add_explicit(&site->calls, 1, memory_order_relaxed);
    if (!atomic_load_explicit(&site->listed, memory_order_relaxed) &&
        !atomic_exchange(&site->listed, true)) {
        struct cusw_call_site *head = atomic_load_explicit(&call_sites, memory_order_relaxed);
        do {
            site->next = head;
        } while (!atomic_compare_exchange_weak_explicit(&call_sites, &head, site,
                                                        memory_order_release,
                                                        memory_order_relaxed));
    }
    return cusw_fault_injected(base, site->symbol, injected);
}

unsigned long long cusw_calls_of(const char *entry, bool by_base)
{
    unsigned long long total = 0;
    for (const struct cusw_call_site *site =
             atomic_load_explicit(&call_sites, memory_order_acquire);
         site != NULL; site = site->next) {
        const char *base = atomic_load_explicit(&site->base, memory_order_acquire);
        if (strcmp(site->symbol, entry) == 0 || (by_base && strcmp(base, entry) == 0))
            total += atomic_load_explicit(&site->calls, memory_order_relaxed);
    }
    return total;
}

static void log_calls(const char *symbol, void *file)
{
    fprintf(file, "%s %llu\n", symbol, cusw_calls_of(symbol, false));
}

/* CUSW_CALL_LOG=DIR: at exit, each process writes DIR/calls-PID, a line per exported entry point
 * (controls included): its name and its calls, zero too. Children of the process write their own
 * files, so a run's whole set of calls is the sum over the folder. */
__attribute__((destructor)) static void write_call_log(void)
{
    const char *dir = getenv("CUSW_CALL_LOG");
    if (CUSW_IS_STUB || dir == NULL || *dir == '\0')
        return;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/calls-%ld", dir, (long)getpid()) >= (int)sizeof path)
        return;
    FILE *file = fopen(path, "w");
    if (file == NULL)
        return;
    cusw_for_each_export(log_calls, file);
    fclose(file);
}

/* ---- Sync modes of cuLaunchHostFunc_v2 ------------------------------------------------------- */

/* This driver's host-function thread serves both modes alike (it always blocks for work); what
 * differs on the real driver is only how that thread waits, not the order in which functions
 * run. So tests count the modes asked for, to see a caller's option reach the driver. */
static _Atomic unsigned long long launches_in_mode[2];

void cusw_count_host_task_sync_mode(unsigned int syncMode)
{
    if (syncMode < 2)
        atomic_fetch_add_explicit(&launches_in_mode[syncMode], 1, memory_order_relaxed);
}

unsigned long long cusw_host_task_sync_mode_launches(unsigned int syncMode)
{
    return syncMode < 2 ? atomic_load_explicit(&launches_in_mode[syncMode], memory_order_relaxed)
                        : 0;
}

/* ---- Entry points the driver does not model -------------------------------------------------- */

static atomic_ullong unmodelled_calls;

CUresult cusw_unmodelled_call(const char *symbol, atomic_bool *logged)
{
    atomic_fetch_add_explicit(&unmodelled_calls, 1, memory_order_relaxed);
    if (!atomic_load_explicit(logged, memory_order_relaxed) && !atomic_exchange(logged, true))
        cusw_log("%s is not modelled: it answers CUDA_ERROR_NOT_SUPPORTED", symbol);
    return CUDA_ERROR_NOT_SUPPORTED;
}

unsigned long long cusw_unmodelled_calls(void)
{
    return atomic_load_explicit(&unmodelled_calls, memory_order_relaxed);
}

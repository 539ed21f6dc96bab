/*
 * counts.c - what tests count: calls of each entry point since load (cuswCallCount) and the
 * objects alive now (cuswLiveObjects), so that a test can tell that a call was made, or that
 * nothing leaked; and, with CUSW_CALL_LOG set, every entry point's count written at exit, so that
 * a test can tell which entry points a whole run called.
 *
 * Call counting is lock-free, since every entry point does it: each exported function has its own
 * static call site (CUSW_ENTRY), which counts with one relaxed atomic add and puts itself on a
 * list the first time it is called. A site's `next` is written before the site is published
 * (release) and never again, so readers walk the list without a lock.
 */
#include "internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Atomic(struct cusw_call_site *) call_sites;

bool cusw_enter(struct cusw_call_site *site, CUresult *injected)
{
    const char *base = atomic_load_explicit(&site->base, memory_order_acquire);
    if (base == NULL) {
        base = cusw_entry_base(site->symbol);
        atomic_store_explicit(&site->base, base, memory_order_release);
    }
    cusw_delay_injected(base, site->symbol);
    cusw_capture_triggered(base, site->symbol);
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

/* Calls of the sites whose exported name, or with `by_base` also whose base name, is `entry`. */
static unsigned long long calls_of(const char *entry, bool by_base)
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

CUSW_EXPORT CUresult cuswCallCount(const char *entry, unsigned long long *count)
{
    CUSW_ENTRY();
    if (entry == NULL || count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cusw_entry_name_known(entry))
        return CUDA_ERROR_NOT_FOUND; /* catches typos in tests */
    *count = calls_of(entry, true);
    return CUDA_SUCCESS;
}

static void log_calls(const char *symbol, void *file)
{
    fprintf(file, "%s %llu\n", symbol, calls_of(symbol, false));
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

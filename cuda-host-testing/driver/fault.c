/*
 * fault.c - fault injection for tests: failing the next calls of an entry point, sticky context
 * errors, and the stand-ins for faulting and long-running kernels.
 *
 * Armed injections live in one list behind their own mutex; an atomic count of armed injections
 * keeps the check on every entry point to a single relaxed load when none is armed.
 */
#include "internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct injection {
    struct injection *next;
    char *entry;
    uint64_t thread; /* cusw_thread_serial() of the arming thread, or 0 for any thread */
    unsigned int remaining;
    CUresult code;
};

static pthread_mutex_t injection_lock = PTHREAD_MUTEX_INITIALIZER;
static struct injection *injections;
static atomic_uint armed_count;

static bool matches(const struct injection *inj, const char *base, const char *symbol)
{
    return strcmp(inj->entry, base) == 0 || strcmp(inj->entry, symbol) == 0;
}

static void unlink_injection(struct injection **link)
{
    struct injection *inj = *link;
    *link = inj->next;
    free(inj->entry);
    free(inj);
    atomic_fetch_sub(&armed_count, 1);
}

bool cusw_fault_injected(const char *base, const char *symbol, CUresult *code)
{
    if (atomic_load_explicit(&armed_count, memory_order_relaxed) == 0)
        return false;
    uint64_t self = cusw_thread_serial();
    pthread_mutex_lock(&injection_lock);
    /* An injection armed for this thread takes precedence over one armed for any thread. */
    struct injection **chosen = NULL;
    for (struct injection **link = &injections; *link != NULL; link = &(*link)->next) {
        struct injection *inj = *link;
        if (!matches(inj, base, symbol))
            continue;
        if (inj->thread == self) {
            chosen = link;
            break;
        }
        if (inj->thread == 0 && chosen == NULL)
            chosen = link;
    }
    bool hit = chosen != NULL;
    if (hit) {
        *code = (*chosen)->code;
        if (--(*chosen)->remaining == 0)
            unlink_injection(chosen);
    }
    pthread_mutex_unlock(&injection_lock);
    return hit;
}

/* Arming again replaces the earlier injection of the same entry and scope; count 0 disarms. */
static CUresult arm(const char *entry, unsigned int count, CUresult code, uint64_t thread)
{
    if (entry == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cusw_entry_name_known(entry))
        return CUDA_ERROR_NOT_FOUND; /* catches typos in tests */
    struct injection *inj = NULL;
    if (count > 0) {
        inj = calloc(1, sizeof *inj);
        if (inj == NULL || (inj->entry = strdup(entry)) == NULL) {
            free(inj);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        inj->thread = thread;
        inj->remaining = count;
        inj->code = code;
    }
    pthread_mutex_lock(&injection_lock);
    for (struct injection **link = &injections; *link != NULL;) {
        if ((*link)->thread == thread && strcmp((*link)->entry, entry) == 0)
            unlink_injection(link);
        else
            link = &(*link)->next;
    }
    if (inj != NULL) {
        inj->next = injections;
        injections = inj;
        atomic_fetch_add(&armed_count, 1);
    }
    pthread_mutex_unlock(&injection_lock);
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuswFailNextCalls(const char *entry, unsigned int count, CUresult code)
{
    CUSW_ENTRY();
    return arm(entry, count, code, cusw_thread_serial());
}

CUSW_EXPORT CUresult cuswFailNextCallsAnyThread(const char *entry, unsigned int count,
                                                CUresult code)
{
    CUSW_ENTRY();
    return arm(entry, count, code, 0);
}

CUSW_EXPORT CUresult cuswArmedFailures(const char *entry, unsigned int *remaining)
{
    CUSW_ENTRY();
    if (entry == NULL || remaining == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cusw_entry_name_known(entry))
        return CUDA_ERROR_NOT_FOUND;
    uint64_t self = cusw_thread_serial();
    unsigned long long total = 0;
    pthread_mutex_lock(&injection_lock);
    for (const struct injection *inj = injections; inj != NULL; inj = inj->next)
        if ((inj->thread == self || inj->thread == 0) && strcmp(inj->entry, entry) == 0)
            total += inj->remaining;
    pthread_mutex_unlock(&injection_lock);
    *remaining = total > UINT_MAX ? UINT_MAX : (unsigned int)total; /* one per scope at most */
    return CUDA_SUCCESS;
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

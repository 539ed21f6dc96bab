/*
 * delay.c - holding an entry point back for a while before it does anything, so that a test can
 * open the window of a race on purpose (another thread acts while the call is held).
 *
 * Armed delays live in one list behind their own mutex; an atomic count of armed delays keeps the
 * check on every entry point to a single relaxed load when none is armed.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct delay {
    struct delay *next;
    char *entry;
    unsigned int remaining;
    unsigned int usec;
};

static pthread_mutex_t delay_lock = PTHREAD_MUTEX_INITIALIZER;
static struct delay *delays;
static atomic_uint armed_delays;

void cusw_delay_injected(const char *base, const char *symbol)
{
    if (atomic_load_explicit(&armed_delays, memory_order_relaxed) == 0)
        return;
    unsigned int usec = 0;
    pthread_mutex_lock(&delay_lock);
    for (struct delay **link = &delays; *link != NULL; link = &(*link)->next) {
        struct delay *d = *link;
        if (strcmp(d->entry, base) != 0 && strcmp(d->entry, symbol) != 0)
            continue;
        usec = d->usec;
        if (--d->remaining == 0) {
            *link = d->next;
            free(d->entry);
            free(d);
            atomic_fetch_sub(&armed_delays, 1);
        }
        break;
    }
    pthread_mutex_unlock(&delay_lock);
    if (usec > 0) {
        struct timespec pause = { .tv_sec = usec / 1000000, .tv_nsec = (long)(usec % 1000000) * 1000 };
        while (nanosleep(&pause, &pause) != 0) {
        }
    }
}

CUSW_EXPORT CUresult cuswDelayNextCalls(const char *entry, unsigned int count,
                                        unsigned int microseconds)
{
    CUSW_ENTRY();
    if (entry == NULL || count == 0 || microseconds == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cusw_entry_name_known(entry))
        return CUDA_ERROR_NOT_FOUND;
    struct delay *d = calloc(1, sizeof *d);
    if (d == NULL || (d->entry = strdup(entry)) == NULL) {
        free(d);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    d->remaining = count;
    d->usec = microseconds;
    pthread_mutex_lock(&delay_lock);
    d->next = delays;
    delays = d;
    atomic_fetch_add(&armed_delays, 1);
    pthread_mutex_unlock(&delay_lock);
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

/*
 * injection.c - what a test arms for the next calls of an entry point: failures (the call answers
 * a given error and does nothing else), delays (the call is held back for a while first, to open
 * the window of a race on purpose) and a capture begun first (other code's capture begun between
 * two calls of an operation). calls.c applies them at every call.
 *
 * Each kind lives behind its own mutex, never cusw_lock; an atomic count of what is armed keeps
 * the check on every entry point to a single relaxed load when nothing is.
 */
#include "internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static bool names(const char *entry, const char *base, const char *symbol)
{
    return strcmp(entry, base) == 0 || strcmp(entry, symbol) == 0;
}

/* ---- Failures -------------------------------------------------------------------------------- */

struct failure {
    struct failure *next;
    char *entry;
    uint64_t thread; /* cusw_thread_serial() of the arming thread, or 0 for any thread */
    unsigned int remaining;
    CUresult code;
};

static pthread_mutex_t failure_lock = PTHREAD_MUTEX_INITIALIZER;
static struct failure *failures;
static atomic_uint armed_failures;

static void unlink_failure(struct failure **link)
{
    struct failure *f = *link;
    *link = f->next;
    free(f->entry);
    free(f);
    atomic_fetch_sub(&armed_failures, 1);
}

bool cusw_fault_injected(const char *base, const char *symbol, CUresult *code)
{
    if (atomic_load_explicit(&armed_failures, memory_order_relaxed) == 0)
        return false;
    uint64_t self = cusw_thread_serial();
    pthread_mutex_lock(&failure_lock);
    /* A failure armed for this thread takes precedence over one armed for any thread. */
    struct failure **chosen = NULL;
    for (struct failure **link = &failures; *link != NULL; link = &(*link)->next) {
        struct failure *f = *link;
        if (!names(f->entry, base, symbol))
            continue;
        if (f->thread == self) {
            chosen = link;
            break;
        }
        if (f->thread == 0 && chosen == NULL)
            chosen = link;
    }
    bool hit = chosen != NULL;
    if (hit) {
        *code = (*chosen)->code;
        if (--(*chosen)->remaining == 0)
            unlink_failure(chosen);
    }
    pthread_mutex_unlock(&failure_lock);
    return hit;
}

CUresult cusw_fault_arm(const char *entry, unsigned int count, CUresult code, uint64_t thread)
{
    struct failure *f = NULL;
    if (count > 0) {
        f = calloc(1, sizeof *f);
        if (f == NULL || (f->entry = strdup(entry)) == NULL) {
            free(f);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        f->thread = thread;
        f->remaining = count;
        f->code = code;
    }
    pthread_mutex_lock(&failure_lock);
    for (struct failure **link = &failures; *link != NULL;) {
        if ((*link)->thread == thread && strcmp((*link)->entry, entry) == 0)
            unlink_failure(link);
        else
            link = &(*link)->next;
    }
    if (f != NULL) {
        f->next = failures;
        failures = f;
        atomic_fetch_add(&armed_failures, 1);
    }
    pthread_mutex_unlock(&failure_lock);
    return CUDA_SUCCESS;
}

unsigned int cusw_fault_armed(const char *entry, uint64_t thread)
{
    unsigned long long total = 0;
    pthread_mutex_lock(&failure_lock);
    for (const struct failure *f = failures; f != NULL; f = f->next)
        if ((f->thread == thread || f->thread == 0) && strcmp(f->entry, entry) == 0)
            total += f->remaining;
    pthread_mutex_unlock(&failure_lock);
    return total > UINT_MAX ? UINT_MAX : (unsigned int)total; /* one per scope at most */
}

/* ---- Delays ---------------------------------------------------------------------------------- */

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
        if (!names(d->entry, base, symbol))
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
    if (usec > 0)
        cusw_sleep_us(usec);
}

unsigned int cusw_delay_armed(const char *entry)
{
    unsigned long long total = 0;
    pthread_mutex_lock(&delay_lock);
    for (const struct delay *d = delays; d != NULL; d = d->next)
        if (strcmp(d->entry, entry) == 0)
            total += d->remaining;
    pthread_mutex_unlock(&delay_lock);
    return total > UINT_MAX ? UINT_MAX : (unsigned int)total;
}

CUresult cusw_delay_arm(const char *entry, unsigned int count, unsigned int usec)
{
    if (count == 0) { /* disarms the delays armed for `entry` */
        pthread_mutex_lock(&delay_lock);
        for (struct delay **link = &delays; *link != NULL;) {
            struct delay *d = *link;
            if (strcmp(d->entry, entry) != 0) {
                link = &d->next;
                continue;
            }
            *link = d->next;
            free(d->entry);
            free(d);
            atomic_fetch_sub(&armed_delays, 1);
        }
        pthread_mutex_unlock(&delay_lock);
        return CUDA_SUCCESS;
    }
    struct delay *d = calloc(1, sizeof *d);
    if (d == NULL || (d->entry = strdup(entry)) == NULL) {
        free(d);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    d->remaining = count;
    d->usec = usec;
    pthread_mutex_lock(&delay_lock);
    d->next = delays;
    delays = d;
    atomic_fetch_add(&armed_delays, 1);
    pthread_mutex_unlock(&delay_lock);
    return CUDA_SUCCESS;
}

/* ---- A capture begun first ------------------------------------------------------------------- */

/* One armed capture at a time. */
static pthread_mutex_t capture_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool capture_armed;
static char *capture_entry;
static CUstream capture_stream;
static CUstreamCaptureMode capture_mode;
/* Calls of the entry still to go before the one that begins the capture. */
static unsigned int capture_calls_before;

CUresult cusw_capture_arm(const char *entry, unsigned int calls_before, CUstream stream,
                          CUstreamCaptureMode mode)
{
    char *copy = strdup(entry);
    if (copy == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&capture_lock);
    free(capture_entry);
    capture_entry = copy;
    capture_stream = stream;
    capture_mode = mode;
    capture_calls_before = calls_before;
    atomic_store(&capture_armed, true);
    pthread_mutex_unlock(&capture_lock);
    return CUDA_SUCCESS;
}

CUresult cusw_capture_disarm(void)
{
    pthread_mutex_lock(&capture_lock);
    free(capture_entry);
    capture_entry = NULL;
    atomic_store(&capture_armed, false);
    pthread_mutex_unlock(&capture_lock);
    return CUDA_SUCCESS;
}

bool cusw_capture_injected(const char *base, const char *symbol, CUstream *stream,
                           CUstreamCaptureMode *mode)
{
    if (!atomic_load_explicit(&capture_armed, memory_order_relaxed))
        return false;
    bool hit = false;
    pthread_mutex_lock(&capture_lock);
    if (capture_entry != NULL && names(capture_entry, base, symbol) &&
        capture_calls_before > 0) {
        capture_calls_before--;
    } else if (capture_entry != NULL && names(capture_entry, base, symbol)) {
        hit = true;
        *stream = capture_stream;
        *mode = capture_mode;
        free(capture_entry);
        capture_entry = NULL;
        atomic_store(&capture_armed, false);
    }
    pthread_mutex_unlock(&capture_lock);
    return hit;
}

/*
 * runtime.c - process-wide plumbing: the global lock and the work its holders defer until they
 * let go of it, internal thread creation, configuration read from the environment at load time,
 * per-thread serial numbers, a growth helper.
 */
#include "internal.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

pthread_mutex_t cusw_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t cusw_progress = PTHREAD_COND_INITIALIZER;

void cusw_lock_acquire(void) { pthread_mutex_lock(&cusw_lock); }

/* Guarded by cusw_lock; each entry is tagged with the thread that deferred it, which takes its
 * own entries in its next cusw_lock_release. So the queue is empty whenever the lock is free,
 * except while a thread that deferred work waits on a condition variable mid-call. (Not
 * thread-local storage: the library is dlopen'd, and its dynamic TLS read by detached driver
 * threads on every unlock makes ThreadSanitizer report glibc freeing it as a race.) */
static struct cusw_deferred *deferred_head, *deferred_tail;

void cusw_defer_until_unlocked(struct cusw_deferred *d, void (*run)(struct cusw_deferred *))
{
    d->thread = pthread_self();
    d->run = run;
    d->next = NULL;
    if (deferred_tail != NULL)
        deferred_tail->next = d;
    else
        deferred_head = d;
    deferred_tail = d;
}

/* [locked] Unlinks the calling thread's entries, in the order they were deferred. */
static struct cusw_deferred *take_own_deferred(void)
{
    if (deferred_head == NULL)
        return NULL; /* the usual case */
    pthread_t self = pthread_self();
    struct cusw_deferred *mine = NULL, **mine_tail = &mine;
    struct cusw_deferred **link = &deferred_head;
    deferred_tail = NULL;
    while (*link != NULL) {
        struct cusw_deferred *d = *link;
        if (pthread_equal(d->thread, self)) {
            *link = d->next;
            d->next = NULL;
            *mine_tail = d;
            mine_tail = &d->next;
        } else {
            deferred_tail = d;
            link = &d->next;
        }
    }
    return mine;
}

void cusw_lock_release(void)
{
    struct cusw_deferred *mine = take_own_deferred();
    pthread_mutex_unlock(&cusw_lock);
    /* User code, never under the lock. What it defers in its own driver calls runs in those
     * calls' unlocks. */
    while (mine != NULL) {
        struct cusw_deferred *d = mine;
        mine = d->next; /* read first: running it may free it */
        d->run(d);
    }
}

void cusw_wait_progress(void) { pthread_cond_wait(&cusw_progress, &cusw_lock); }
void cusw_broadcast_progress(void) { pthread_cond_broadcast(&cusw_progress); }

/* ---- Configuration ------------------------------------------------------------------------- */

static int config_device_count = 1;
static int config_driver_version = CUSW_DEFAULT_DRIVER_VERSION;

static bool parse_int(const char *text, long min, long max, int *out)
{
    if (text == NULL || *text == '\0')
        return false;
    char *end = NULL;
    long value = strtol(text, &end, 10);
    if (*end != '\0' || value < min || value > max)
        return false;
    *out = (int)value;
    return true;
}

/* Read once at load, as a real driver reads its environment once: tests that need another
 * configuration load the library in a fresh process. Invalid values are ignored. */
__attribute__((constructor)) static void read_configuration(void)
{
    parse_int(getenv("CUSW_DEVICE_COUNT"), 0, CUSW_MAX_DEVICES, &config_device_count);
    parse_int(getenv("CUSW_DRIVER_VERSION"), 1000, 1000000, &config_driver_version);
}

int cusw_config_device_count(void) { return config_device_count; }
int cusw_config_driver_version(void) { return config_driver_version; }

/* ---- Threads -------------------------------------------------------------------------------- */

/* Once a driver thread exists, unloading the library would pull its code from under that thread
 * (e.g. a test that dlcloses the driver while a stream still drains). A real libcuda is never
 * unloaded either, so mark the library RTLD_NODELETE the first time a thread is started. */
static void pin_library(void)
{
    Dl_info info;
    if (dladdr((void *)&pin_library, &info) == 0 || info.dli_fname == NULL)
        return;
    void *self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    if (self != NULL)
        dlclose(self); /* drops the extra reference; NODELETE stays */
}

static pthread_once_t pin_once = PTHREAD_ONCE_INIT;

bool cusw_spawn_thread(void *(*fn)(void *), void *arg)
{
    pthread_once(&pin_once, pin_library);
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0)
        return false;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t thread;
    int rc = pthread_create(&thread, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    return rc == 0;
}

static atomic_uint_fast64_t next_thread_serial = 1;
static _Thread_local uint64_t thread_serial;

uint64_t cusw_thread_serial(void)
{
    if (thread_serial == 0)
        thread_serial = atomic_fetch_add(&next_thread_serial, 1);
    return thread_serial;
}

/* ---- Growth helper -------------------------------------------------------------------------- */

bool cusw_reserve(void **array, size_t *capacity, size_t needed, size_t elem_size)
{
    if (needed <= *capacity)
        return true;
    size_t new_capacity = *capacity ? *capacity * 2 : 4;
    while (new_capacity < needed)
        new_capacity *= 2;
    void *grown = realloc(*array, new_capacity * elem_size);
    if (grown == NULL)
        return false;
    *array = grown;
    *capacity = new_capacity;
    return true;
}

/*
 * runtime.c - process-wide plumbing: configuration read from the environment at load time, the
 * driver's log, internal thread creation, per-thread serial numbers, the clock and sleeps, a
 * growth helper.
 */
#include "internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- Configuration --------------------------------------------------------------------------- */

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

/* ---- The log --------------------------------------------------------------------------------- */

/* CUSW_LOG, read at the first line: unset or empty, standard error; "off", nowhere; else a file,
 * appended to. One line a call, written whole (a single write of a stdio stream of its own). */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *log_file;
static bool log_opened;

void cusw_log(const char *format, ...)
{
    char line[512];
    va_list args;
    va_start(args, format);
    int length = vsnprintf(line, sizeof line - 1, format, args);
    va_end(args);
    if (length < 0)
        return;
    size_t size = (size_t)length < sizeof line - 1 ? (size_t)length : sizeof line - 2;
    line[size] = '\n';
    line[size + 1] = '\0';
    pthread_mutex_lock(&log_lock);
    if (!log_opened) {
        log_opened = true;
        const char *target = getenv("CUSW_LOG");
        if (target == NULL || *target == '\0')
            log_file = stderr;
        else if (strcmp(target, "off") != 0)
            log_file = fopen(target, "a");
    }
    if (log_file != NULL) {
        fprintf(log_file, "cuda-host-testing software driver: %s", line);
        fflush(log_file);
    }
    pthread_mutex_unlock(&log_lock);
}

/* ---- Threads --------------------------------------------------------------------------------- */

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

/* ---- Time ------------------------------------------------------------------------------------ */

double cusw_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void cusw_sleep_us(unsigned long usec)
{
    struct timespec ts = { .tv_sec = (time_t)(usec / 1000000),
                           .tv_nsec = (long)(usec % 1000000) * 1000 };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- Growth helper --------------------------------------------------------------------------- */

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

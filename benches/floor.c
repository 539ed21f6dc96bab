/*
 * The floor of the host-function benchmark: cuLaunchHostFunc called from C in a tight loop,
 * with a C host function, through the pointer the platform loader gives for the driver's symbol.
 * Nothing between the caller and the driver but the call itself.
 */
#include <stdint.h>

typedef int floor_result;
typedef void *floor_stream;
typedef void (*floor_host_fn)(void *);
typedef floor_result (*floor_launch_host_func)(floor_stream, floor_host_fn, void *);

/* The host function: counts its calls. */
void floor_count_call(void *counter) {
    __atomic_fetch_add((uint64_t *)counter, 1, __ATOMIC_RELAXED);
}

/* Enqueues `launches` calls of floor_count_call(counter) on `stream`; returns the first error
 * (a CUresult), or 0. */
floor_result floor_launch_host_funcs(floor_launch_host_func launch, floor_stream stream,
                                     uint64_t *counter, uint64_t launches) {
    for (uint64_t i = 0; i < launches; i++) {
        floor_result result = launch(stream, floor_count_call, counter);
        if (result != 0)
            return result;
    }
    return 0;
}

/* Calibration: spins for about `nanoseconds` on the calling thread. */
#include <time.h>
static void spin(uint64_t nanoseconds) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((uint64_t)(now.tv_sec - start.tv_sec) * 1000000000u + (uint64_t)(now.tv_nsec - start.tv_nsec) <
             nanoseconds);
}

/* The floor with `spin_ns` of extra work on the enqueuing thread before each launch. */
floor_result floor_launch_host_funcs_spinning(floor_launch_host_func launch, floor_stream stream,
                                              uint64_t *counter, uint64_t launches, uint64_t spin_ns) {
    for (uint64_t i = 0; i < launches; i++) {
        spin(spin_ns);
        floor_result result = launch(stream, floor_count_call, counter);
        if (result != 0)
            return result;
    }
    return 0;
}

/* The floor's host function with 200 ns of extra work on the driver's thread. */
void floor_count_call_spinning(void *counter) {
    spin(200);
    __atomic_fetch_add((uint64_t *)counter, 1, __ATOMIC_RELAXED);
}

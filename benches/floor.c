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

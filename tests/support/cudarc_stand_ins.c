/*
 * cudarc_stand_ins.c - stand-ins for the kernels of cudarc 0.19.10's own driver tests
 * (those of its launch and unified-memory tests), as a user of the software driver writes them
 * for a test suite they cannot change: a shared library, named in CUSW_STAND_INS, that registers a
 * stand-in for each kernel's name (cuda-host-testing/driver/stand_in.h). Each does what the
 * kernel's threads do, for the whole grid, on device memory, which is host memory on the software
 * driver; a failed device-side assert() is CUDA_ERROR_ASSERT.
 *
 * Built by the suite's build script (for tests/driver_contract/modules.rs) and by
 * .ci/cudarc-tests, which runs cudarc's tests with it.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep */

#include "stand_in.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define SUCCESS 0
#define ERROR_ASSERT 710
#define ERROR_LAUNCH_FAILED 719

/* The launch's threads along x: the kernels index by blockIdx.x * blockDim.x + threadIdx.x. */
static uint64_t threads(const cuswKernelLaunch *launch)
{
    return (uint64_t)launch->grid[0] * launch->block[0];
}

/* The `index`th argument's bytes into `out`, when its size is `size`. */
static int argument(const cuswKernelLaunch *launch, size_t index, void *out, size_t size)
{
    if (index >= launch->param_count || launch->params[index].size != size)
        return 0;
    memcpy(out, launch->params[index].value, size);
    return 1;
}

static void *pointer(const cuswKernelLaunch *launch, size_t index)
{
    uint64_t address = 0;
    return argument(launch, index, &address, sizeof address) ? (void *)(uintptr_t)address : NULL;
}

/* The single-precision constant of these bits. */
static float bits(uint32_t word)
{
    float value;
    memcpy(&value, &word, sizeof value);
    return value;
}

/* sinf as a CUDA device computes it, which is not correctly rounded (sinf(1.0f) is one ulp above
 * the host's): the argument less the nearest multiple of pi/2, in three fused steps, then a
 * polynomial in single precision with fused multiply-adds, sine's or cosine's by the quadrant.
 * Beyond 105615, where the device reduces the argument exactly, the host's sinf stands in. */
static float device_sinf(float a)
{
    if (isinf(a))
        return a * 0.0f;
    if (fabsf(a) >= 105615.0f)
        return sinf(a);
    float j = rintf(a * bits(0x3F22F983)); /* 2/pi */
    float t = fmaf(j, bits(0xBFC90FDA), a); /* -pi/2, in three parts */
    t = fmaf(j, bits(0xB3A22168), t);
    t = fmaf(j, bits(0xA7C234C5), t);
    long quadrant = lrintf(j);
    float t2 = t * t;
    float z;
    if (quadrant & 1) {
        float p = fmaf(fmaf(bits(0x37CBAC00), t2, bits(0xBAB607ED)), t2, bits(0x3D2AAABB));
        p = fmaf(p, t2, bits(0xBEFFFFFF));
        z = fmaf(p, t2, 1.0f);
    } else {
        float p = fmaf(bits(0xB94D4153), t2, bits(0x3C0885E4));
        p = fmaf(p, t2, bits(0xBE2AAAA8));
        z = fmaf(p, t2 * t, t);
    }
    return (quadrant & 2) ? -z : z;
}

/* sin_kernel(float *out, const float *inp, size_t numel): out[i] = sin(inp[i]), as the device
 * rounds it (cudarc's test compares sin(1.0) bit for bit). */
static int sin_kernel(const cuswKernelLaunch *launch, void *user_data)
{
    (void)user_data;
    float *out = pointer(launch, 0);
    const float *inp = pointer(launch, 1);
    uint64_t numel = 0;
    if (out == NULL || inp == NULL || !argument(launch, 2, &numel, sizeof numel))
        return ERROR_LAUNCH_FAILED;
    for (uint64_t i = 0; i < threads(launch) && i < numel; i++)
        out[i] = device_sinf(inp[i]);
    return SUCCESS;
}

/* Two kernels of cudarc's tests are named `kernel`; their parameters tell them apart:
 * kernel(const TensorMeta meta), a struct of 1 + 2 * 128 size_t, asserts meta.shape[i] == i and
 * meta.strides[i] == i for i below meta.num_dims (the fields in the order the kernel declares
 * them); kernel(float *buf) asserts buf[t] == t for each thread t below 100. */
static int kernel(const cuswKernelLaunch *launch, void *user_data)
{
    (void)user_data;
    if (launch->param_count == 1 && launch->params[0].size == (1 + 2 * 128) * sizeof(uint64_t)) {
        uint64_t meta[1 + 2 * 128];
        memcpy(meta, launch->params[0].value, sizeof meta);
        for (uint64_t i = 0; i < meta[0] && i < 128; i++)
            if (meta[1 + i] != i || meta[1 + 128 + i] != i)
                return ERROR_ASSERT;
        return SUCCESS;
    }
    const float *buf = pointer(launch, 0);
    if (buf == NULL)
        return ERROR_LAUNCH_FAILED;
    for (uint64_t t = 0; t < threads(launch) && t < 100; t++)
        if (buf[t] != (float)t)
            return ERROR_ASSERT;
    return SUCCESS;
}

/* int_Nbit(signed s_min, s_max, unsigned u_min, u_max): asserts the type's bounds. */
#define INT_KERNEL(name, signed_type, unsigned_type, smin, smax, umax)                           \
    static int name(const cuswKernelLaunch *launch, void *user_data)                             \
    {                                                                                            \
        (void)user_data;                                                                         \
        signed_type s_min = 0, s_max = 0;                                                        \
        unsigned_type u_min = 1, u_max = 0;                                                      \
        if (!argument(launch, 0, &s_min, sizeof s_min) ||                                        \
            !argument(launch, 1, &s_max, sizeof s_max) ||                                        \
            !argument(launch, 2, &u_min, sizeof u_min) ||                                        \
            !argument(launch, 3, &u_max, sizeof u_max))                                          \
            return ERROR_LAUNCH_FAILED;                                                          \
        return s_min == (smin) && s_max == (smax) && u_min == 0 && u_max == (umax)               \
                   ? SUCCESS                                                                     \
                   : ERROR_ASSERT;                                                               \
    }

INT_KERNEL(int_8bit, int8_t, uint8_t, INT8_MIN, INT8_MAX, UINT8_MAX)
INT_KERNEL(int_16bit, int16_t, uint16_t, INT16_MIN, INT16_MAX, UINT16_MAX)
INT_KERNEL(int_32bit, int32_t, uint32_t, INT32_MIN, INT32_MAX, UINT32_MAX)
INT_KERNEL(int_64bit, int64_t, uint64_t, INT64_MIN, INT64_MAX, UINT64_MAX)

/* floating(float f, double d): asserts f is 1.2345678 and d -10.123456789876543, as the kernel
 * compares them (the float widened to double). */
static int floating(const cuswKernelLaunch *launch, void *user_data)
{
    (void)user_data;
    float f = 0;
    double d = 0;
    if (!argument(launch, 0, &f, sizeof f) || !argument(launch, 1, &d, sizeof d))
        return ERROR_LAUNCH_FAILED;
    return fabs((double)f - 1.2345678) <= 1e-7 && fabs(d - -10.123456789876543) <= 1e-16
               ? SUCCESS
               : ERROR_ASSERT;
}

/* How long slow_worker keeps its stream busy: a GPU thread runs its million iterations in about
 * this time, whatever else the device does, so two of them on two streams take this long together
 * and twice as long one after the other (cudarc's test_par_launch compares the two). The stand-in
 * sums on the host, then waits out the rest of that time. */
#define SLOW_WORKER_NANOSECONDS 30000000L

static int64_t now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* slow_worker(const float *data, size_t len, float *out): *out = the sum of a million reads of
 * data[i % len]. */
static int slow_worker(const cuswKernelLaunch *launch, void *user_data)
{
    (void)user_data;
    int64_t until = now_ns() + SLOW_WORKER_NANOSECONDS;
    const float *data = pointer(launch, 0);
    uint64_t len = 0;
    float *out = pointer(launch, 2);
    if (data == NULL || out == NULL || !argument(launch, 1, &len, sizeof len) || len == 0)
        return ERROR_LAUNCH_FAILED;
    float sum = 0.0f;
    for (uint64_t i = 0; i < 1000000; i++)
        sum += data[i % len];
    for (int64_t left = until - now_ns(); left > 0; left = until - now_ns()) {
        struct timespec pause = { .tv_sec = 0, .tv_nsec = left };
        nanosleep(&pause, NULL);
    }
    *out = sum;
    return SUCCESS;
}

/* foo(...): assert(0). */
static int foo(const cuswKernelLaunch *launch, void *user_data)
{
    (void)launch;
    (void)user_data;
    return ERROR_ASSERT;
}

__attribute__((visibility("default"))) void
cusw_register_stand_ins(cuswRegisterStandInFn register_stand_in)
{
    register_stand_in("sin_kernel", sin_kernel, NULL);
    register_stand_in("kernel", kernel, NULL);
    register_stand_in("int_8bit", int_8bit, NULL);
    register_stand_in("int_16bit", int_16bit, NULL);
    register_stand_in("int_32bit", int_32bit, NULL);
    register_stand_in("int_64bit", int_64bit, NULL);
    register_stand_in("floating", floating, NULL);
    register_stand_in("slow_worker", slow_worker, NULL);
    register_stand_in("foo", foo, NULL);
}

/*
 * stand_in.h - what a kernel's stand-in sees, and how a library of stand-ins registers them: the
 * part of the software driver's interface a stand-in library (CUSW_STAND_INS) includes. It needs
 * no other header: results are CUresult values as ints (CUDA_SUCCESS is 0).
 *
 * The driver runs no device code. A launch of a kernel runs, in its stream's order on the
 * stream's worker thread, the stand-in registered for the kernel's name, once for the whole grid:
 * the stand-in does what the kernel's threads would do, on device memory, which is host memory
 * here (a device pointer among the arguments is an address the stand-in may read and write). Its
 * answer other than 0 fails the launch's context with that error, as a fault or a failed
 * assertion in the kernel would (CUDA_ERROR_ASSERT is 710, CUDA_ERROR_ILLEGAL_ADDRESS 700).
 */
#ifndef CUSW_STAND_IN_H
#define CUSW_STAND_IN_H

#include <stddef.h>

/* One argument of a launch, as the kernel's PTX declares its parameter: `value` points to its
 * bytes (`size` of them, aligned to `align`), valid during the stand-in's call; `type` is the
 * PTX type of its elements (".u64", ".f32", ".b8" for a struct). */
typedef struct cuswKernelParam_st {
    const void *value;
    size_t size;
    size_t align;
    const char *type;
} cuswKernelParam;

/* A launch, during the stand-in's call. `size` is sizeof(cuswKernelLaunch) as the driver knows
 * it: members are only ever added at the end. */
typedef struct cuswKernelLaunch_st {
    size_t size;
    const char *name;                 /* the kernel's, as its PTX names it */
    unsigned int grid[3];             /* blocks in x, y, z */
    unsigned int block[3];            /* threads of a block in x, y, z */
    unsigned int shared_memory_bytes; /* dynamic shared memory of a block */
    void *stream;                     /* the CUstream it was launched on */
    size_t param_count;
    const cuswKernelParam *params;    /* param_count of them, in order */
} cuswKernelLaunch;

/* A stand-in: 0 (CUDA_SUCCESS), or the error that fails the launch's context. */
typedef int (*cuswStandIn)(const cuswKernelLaunch *launch, void *user_data);

/* Registers `stand_in` for launches of kernels named `kernel` (replacing the one registered
 * before; NULL removes it): cuswRegisterStandIn, which the driver also hands to a library's
 * cusw_register_stand_ins. */
typedef int (*cuswRegisterStandInFn)(const char *kernel, cuswStandIn stand_in, void *user_data);

/* What a library named in CUSW_STAND_INS exports: called once, the first time the driver needs a
 * stand-in, with the function that registers one. */
void cusw_register_stand_ins(cuswRegisterStandInFn register_stand_in);

#endif /* CUSW_STAND_IN_H */

/*
 * launches.c - Execution Control's kernels and Occupancy: a function's attributes and cache
 * preference, launches (cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel, with their
 * per-thread forms), each running the kernel's stand-in in its stream's order, and the occupancy a
 * function would have (model/module.c's model of the device's limits).
 */
#include "internal.h"

/* [locked] The function `hfunc` names (a library's kernel: its function in the current context). */
static CUresult function_of(CUfunction hfunc, struct cusw_function **out)
{
    struct cusw_ctx *ctx = cusw_ctx_bound();
    return cusw_function_from_handle(hfunc, ctx, out);
}

CUSW_EXPORT CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    CUSW_INIT_ENTRY();
    if (pi == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_function *f = NULL;
    CUresult rc = function_of(hfunc, &f);
    if (rc == CUDA_SUCCESS)
        rc = cusw_function_attribute(f, attrib, pi);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    CUSW_INIT_ENTRY();
    cusw_lock_acquire();
    struct cusw_function *f = NULL;
    CUresult rc = function_of(hfunc, &f);
    if (rc == CUDA_SUCCESS)
        rc = cusw_function_set_attribute(f, attrib, value);
    cusw_lock_release();
    return rc;
}

/* Kept: a preference the device may ignore, as the real one may. */
CUSW_EXPORT CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
    CUSW_INIT_ENTRY();
    if ((unsigned int)config > CU_FUNC_CACHE_PREFER_EQUAL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_function *f = NULL;
    CUresult rc = function_of(hfunc, &f);
    if (rc == CUDA_SUCCESS)
        f->cache_config = config;
    cusw_lock_release();
    return rc;
}

/* ---- Launches -------------------------------------------------------------------------------- */

static CUresult launch(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                       unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                       unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                       void **kernelParams, void **extra, bool per_thread, bool cooperative)
{
    const unsigned int grid[3] = { gridDimX, gridDimY, gridDimZ };
    const unsigned int block[3] = { blockDimX, blockDimY, blockDimZ };
    return cusw_submit_kernel(hStream, per_thread, f, grid, block, sharedMemBytes, kernelParams,
                              extra, cooperative);
}

CUSW_TWINS(cuLaunchKernel,
           (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
            unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
            unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra),
           launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                  sharedMemBytes, hStream, kernelParams, extra, per_thread, false))

CUSW_TWINS(cuLaunchCooperativeKernel,
           (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
            unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
            unsigned int sharedMemBytes, CUstream hStream, void **kernelParams),
           launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                  sharedMemBytes, hStream, kernelParams, NULL, per_thread, true))

/* The configuration's attributes (clusters, priorities, ...) are taken and change nothing. */
static CUresult launch_ex(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                          void **extra, bool per_thread)
{
    if (config == NULL || (config->numAttrs > 0 && config->attrs == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                  config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream,
                  kernelParams, extra, per_thread, false);
}

CUSW_TWINS(cuLaunchKernelEx,
           (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra),
           launch_ex(config, f, kernelParams, extra, per_thread))

/* ---- Occupancy ------------------------------------------------------------------------------- */

/* The flag that leaves out the caching of globals in L1: changes nothing here. */
#define OCCUPANCY_DISABLE_CACHING_OVERRIDE 0x1

CUSW_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int *numBlocks, CUfunction func, int blockSize, size_t dynamicSMemSize, unsigned int flags)
{
    CUSW_INIT_ENTRY();
    if (numBlocks == NULL || (flags & ~(unsigned int)OCCUPANCY_DISABLE_CACHING_OVERRIDE) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_function *f = NULL;
    CUresult rc = function_of(func, &f);
    if (rc == CUDA_SUCCESS)
        *numBlocks = cusw_function_occupancy(f, blockSize, dynamicSMemSize);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func,
                                                                 int blockSize,
                                                                 size_t dynamicSMemSize)
{
    CUSW_INIT_ENTRY();
    return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize,
                                                                dynamicSMemSize, 0);
}

/* The block size of most threads resident on a multiprocessor (the largest such size), and the
 * grid that fills the device with it. `blockSizeToDynamicSMemSize`, the caller's code, runs on the
 * calling thread without the driver's lock. */
CUSW_EXPORT CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(
    int *minGridSize, int *blockSize, CUfunction func,
    CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize, int blockSizeLimit,
    unsigned int flags)
{
    CUSW_INIT_ENTRY();
    if (minGridSize == NULL || blockSize == NULL || blockSizeLimit < 0 ||
        (flags & ~(unsigned int)OCCUPANCY_DISABLE_CACHING_OVERRIDE) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    int limit = 0, warp = 0, processors = 0;
    cusw_lock_acquire();
    struct cusw_function *f = NULL;
    CUresult rc = function_of(func, &f);
    if (rc == CUDA_SUCCESS)
        rc = cusw_function_attribute(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &limit);
    cusw_lock_release();
    if (rc != CUDA_SUCCESS)
        return rc;
    cusw_device_attribute(0, CU_DEVICE_ATTRIBUTE_WARP_SIZE, &warp);
    cusw_device_attribute(0, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &processors);
    if (blockSizeLimit > 0 && blockSizeLimit < limit)
        limit = blockSizeLimit;
    int best_size = 0, best_blocks = 0;
    for (int size = limit / warp * warp; size > 0; size -= warp) {
        size_t dynamic = blockSizeToDynamicSMemSize != NULL ? blockSizeToDynamicSMemSize(size)
                                                            : dynamicSMemSize;
        cusw_lock_acquire();
        int blocks = cusw_function_occupancy(f, size, dynamic);
        cusw_lock_release();
        if ((long)blocks * size > (long)best_blocks * best_size) {
            best_blocks = blocks;
            best_size = size;
        }
    }
    *blockSize = best_size;
    *minGridSize = best_blocks * processors;
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize,
                                                      CUfunction func,
                                                      CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                      size_t dynamicSMemSize, int blockSizeLimit)
{
    CUSW_INIT_ENTRY();
    return cuOccupancyMaxPotentialBlockSizeWithFlags(minGridSize, blockSize, func,
                                                     blockSizeToDynamicSMemSize, dynamicSMemSize,
                                                     blockSizeLimit, 0);
}

/* The dynamic shared memory each of `numBlocks` blocks of `blockSize` threads may have with all of
 * them resident on one multiprocessor. */
CUSW_EXPORT CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize,
                                                             CUfunction func, int numBlocks,
                                                             int blockSize)
{
    CUSW_INIT_ENTRY();
    if (dynamicSmemSize == NULL || numBlocks <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    int per_processor = 0, reserved = 0;
    cusw_device_attribute(0, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
                          &per_processor);
    cusw_device_attribute(0, CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, &reserved);
    cusw_lock_acquire();
    struct cusw_function *f = NULL;
    CUresult rc = function_of(func, &f);
    if (rc == CUDA_SUCCESS) {
        size_t fit = 0;
        if (cusw_function_occupancy(f, blockSize, 0) >= numBlocks) {
            size_t share = (size_t)per_processor / (size_t)numBlocks;
            size_t used = f->entry->shared_bytes + (size_t)reserved;
            fit = share > used ? share - used : 0;
            size_t most = cusw_function_max_dynamic_shared(f);
            if (fit > most)
                fit = most;
        }
        *dynamicSmemSize = fit;
    }
    cusw_lock_release();
    return rc;
}

/*
 * modules.c - Module Management: cuModuleLoadData, which answers CUDA_ERROR_NOT_SUPPORTED, since
 * this driver runs no device code.
 */
#include "internal.h"

/* Loading a module needs a current context, as on the real driver, which answers
 * CUDA_ERROR_INVALID_CONTEXT without one; with one, this driver cannot run kernels. */
CUSW_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    CUSW_INIT_ENTRY();
    (void)module;
    (void)image;
    cusw_lock_acquire();
    struct cusw_ctx *ctx;
    CUresult rc = cusw_ctx_current(&ctx);
    cusw_lock_release();
    return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_NOT_SUPPORTED;
}

/*
 * modules.c - Module Management and Library Management: modules loaded from PTX text, or a fat
 * binary holding PTX (cuModuleLoad, cuModuleLoadData, cuModuleLoadDataEx), their functions and
 * variables, and libraries (cuLibraryLoadData) with their kernels. What is read of the PTX is
 * model/ptx.c's; a launch runs the kernel's stand-in (model/stand_in.c).
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A module of `image` in the current context. */
static CUresult load(CUmodule *module, const void *image)
{
    if (module == NULL || image == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_ctx *ctx = NULL;
    CUresult rc = cusw_ctx_current(&ctx);
    struct cusw_module *m = NULL;
    if (rc == CUDA_SUCCESS)
        rc = cusw_module_load(ctx, image, &m);
    if (rc == CUDA_SUCCESS)
        *module = (CUmodule)m->handle;
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    CUSW_INIT_ENTRY();
    return load(module, image);
}

/* The JIT's options are taken; the logs they ask for are empty, as nothing is compiled. */
CUSW_EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image,
                                        unsigned int numOptions, CUjit_option *options,
                                        void **optionValues)
{
    CUSW_INIT_ENTRY();
    if (numOptions > 0 && (options == NULL || optionValues == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < numOptions; i++) {
        if (options[i] != CU_JIT_INFO_LOG_BUFFER && options[i] != CU_JIT_ERROR_LOG_BUFFER)
            continue;
        CUjit_option size_option = options[i] + 1; /* the buffer's size follows it */
        for (unsigned int j = 0; j < numOptions; j++)
            if (options[j] == size_option && (uintptr_t)optionValues[j] > 0 &&
                optionValues[i] != NULL)
                *(char *)optionValues[i] = '\0';
    }
    return load(module, image);
}

/* The file's contents, NUL-terminated (PTX text is read as a string). */
CUSW_EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    CUSW_INIT_ENTRY();
    if (module == NULL || fname == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    FILE *file = fopen(fname, "rb");
    if (file == NULL)
        return CUDA_ERROR_FILE_NOT_FOUND;
    char *image = NULL;
    size_t size = 0, capacity = 0;
    bool ok = true;
    for (;;) {
        if (!cusw_reserve((void **)&image, &capacity, size + 4097, 1)) {
            ok = false;
            break;
        }
        size_t got = fread(image + size, 1, 4096, file);
        size += got;
        if (got < 4096)
            break;
    }
    fclose(file);
    if (!ok) {
        free(image);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    image[size] = '\0';
    CUresult rc = load(module, image);
    free(image);
    return rc;
}

CUSW_EXPORT CUresult cuModuleUnload(CUmodule hmod)
{
    CUSW_INIT_ENTRY();
    cusw_lock_acquire();
    struct cusw_module *m = NULL;
    CUresult rc = cusw_module_from_handle(hmod, &m);
    if (rc == CUDA_SUCCESS && m->library != NULL)
        rc = CUDA_ERROR_INVALID_HANDLE; /* a library's goes with the library */
    if (rc == CUDA_SUCCESS)
        cusw_module_unload(m);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    CUSW_INIT_ENTRY();
    if (hfunc == NULL || name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_module *m = NULL;
    struct cusw_function *f = NULL;
    CUresult rc = cusw_module_from_handle(hmod, &m);
    if (rc == CUDA_SUCCESS)
        rc = cusw_module_function(m, name, &f);
    if (rc == CUDA_SUCCESS)
        *hfunc = (CUfunction)f->handle;
    cusw_lock_release();
    return rc;
}

/* A variable's memory (host memory, as all of this driver's device memory) and size; either may be
 * left out. */
CUSW_EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod,
                                          const char *name)
{
    CUSW_INIT_ENTRY();
    if (name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_module *m = NULL;
    void *memory = NULL;
    size_t size = 0;
    CUresult rc = cusw_module_from_handle(hmod, &m);
    if (rc == CUDA_SUCCESS)
        rc = cusw_module_global(m, name, &memory, &size);
    cusw_lock_release();
    if (rc == CUDA_SUCCESS && dptr != NULL)
        *dptr = (CUdeviceptr)(uintptr_t)memory;
    if (rc == CUDA_SUCCESS && bytes != NULL)
        *bytes = size;
    return rc;
}

/* ---- Libraries ------------------------------------------------------------------------------- */

/* Loaded for every context, without one current; the JIT's and the library's options are taken. */
CUSW_EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code,
                                       CUjit_option *jitOptions, void **jitOptionsValues,
                                       unsigned int numJitOptions,
                                       CUlibraryOption *libraryOptions,
                                       void **libraryOptionValues,
                                       unsigned int numLibraryOptions)
{
    CUSW_INIT_ENTRY();
    if (library == NULL || code == NULL ||
        (numJitOptions > 0 && (jitOptions == NULL || jitOptionsValues == NULL)) ||
        (numLibraryOptions > 0 && (libraryOptions == NULL || libraryOptionValues == NULL)))
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_library *l = NULL;
    CUresult rc = cusw_library_load(code, &l);
    if (rc == CUDA_SUCCESS)
        *library = (CUlibrary)cusw_library_handle(l);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuLibraryUnload(CUlibrary library)
{
    CUSW_INIT_ENTRY();
    cusw_lock_acquire();
    struct cusw_library *l = NULL;
    CUresult rc = cusw_library_from_handle(library, &l);
    if (rc == CUDA_SUCCESS)
        cusw_library_unload(l);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    CUSW_INIT_ENTRY();
    if (pKernel == NULL || name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_library *l = NULL;
    CUresult rc = cusw_library_from_handle(library, &l);
    if (rc == CUDA_SUCCESS)
        rc = cusw_library_kernel(l, name, pKernel);
    cusw_lock_release();
    return rc;
}

/* The kernel's function in the current context, where its library is loaded the first time. */
CUSW_EXPORT CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    CUSW_INIT_ENTRY();
    if (pFunc == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_ctx *ctx = NULL;
    struct cusw_function *f = NULL;
    CUresult rc = cusw_ctx_current(&ctx);
    if (rc == CUDA_SUCCESS)
        rc = cusw_kernel_function(kernel, ctx, &f);
    if (rc == CUDA_SUCCESS)
        *pFunc = (CUfunction)f->handle;
    cusw_lock_release();
    return rc;
}

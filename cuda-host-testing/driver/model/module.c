/*
 * module.c - modules, their functions and variables, and libraries with their kernels. A module
 * is PTX (ptx.c) loaded into a context: a function for each of its kernels, and memory for each of
 * its variables, holding their initial values. A library is PTX loaded for every context: it is
 * loaded as a module into a context the first time one of its kernels is used there
 * (cuKernelGetFunction, a launch of the kernel). A function's attributes and occupancy are the
 * device's limits applied to what its PTX declares. Everything here is [locked].
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

struct cusw_library {
    uintptr_t handle;
    struct cusw_ptx *ptx;
    uintptr_t *kernels;              /* a kernel's handle for each entry of ptx */
    struct cusw_module *modules;     /* one per context it was used in */
};

struct cusw_kernel {
    struct cusw_library *library;
    size_t index;
};

static struct cusw_module *loaded; /* every module loaded and not unloaded */

static void module_free(struct cusw_module *m)
{
    for (size_t i = 0; m->functions != NULL && i < m->n_functions; i++)
        if (m->functions[i].handle != 0)
            cusw_handle_remove(m->functions[i].handle);
    for (size_t i = 0; m->globals != NULL && i < m->ptx->n_globals; i++)
        free(m->globals[i]);
    if (m->library == NULL)
        cusw_ptx_free(m->ptx);
    free(m->functions);
    free(m->globals);
    free(m);
}

/* A module of `ptx` in `ctx`, owning `ptx` unless it is a library's. */
static CUresult module_new(struct cusw_ctx *ctx, struct cusw_ptx *ptx, struct cusw_library *library,
                           struct cusw_module **out)
{
    struct cusw_module *m = calloc(1, sizeof *m);
    if (m == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->ctx = ctx;
    m->ptx = ptx;
    m->library = library;
    m->n_functions = ptx->n_entries;
    m->functions = calloc(ptx->n_entries ? ptx->n_entries : 1, sizeof *m->functions);
    m->globals = calloc(ptx->n_globals ? ptx->n_globals : 1, sizeof *m->globals);
    bool ok = m->functions != NULL && m->globals != NULL &&
              (m->handle = cusw_handle_new(CUSW_KIND_MODULE, m)) != 0;
    for (size_t i = 0; ok && i < ptx->n_globals; i++) {
        const struct cusw_ptx_global *g = &ptx->globals[i];
        size_t align = g->align < sizeof(void *) ? sizeof(void *) : g->align;
        ok = posix_memalign(&m->globals[i], align, g->size ? g->size : 1) == 0;
        if (ok)
            memcpy(m->globals[i], g->init, g->size);
    }
    for (size_t i = 0; ok && i < ptx->n_entries; i++) {
        struct cusw_function *f = &m->functions[i];
        f->module = m;
        f->entry = &ptx->entries[i];
        f->cache_config = CU_FUNC_CACHE_PREFER_NONE;
        ok = (f->handle = cusw_handle_new(CUSW_KIND_FUNCTION, f)) != 0;
    }
    if (!ok) {
        if (m->handle != 0)
            cusw_handle_remove(m->handle);
        module_free(m); /* and `ptx`, unless a library's */
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->next = loaded;
    loaded = m;
    *out = m;
    return CUDA_SUCCESS;
}

CUresult cusw_module_load(struct cusw_ctx *ctx, const void *image, struct cusw_module **out)
{
    const char *text = NULL;
    size_t length = 0;
    CUresult rc = cusw_image_ptx(image, &text, &length);
    struct cusw_ptx *ptx = NULL;
    if (rc == CUDA_SUCCESS)
        rc = cusw_ptx_parse(text, length, &ptx);
    return rc == CUDA_SUCCESS ? module_new(ctx, ptx, NULL, out) : rc;
}

CUresult cusw_module_from_handle(CUmodule handle, struct cusw_module **out)
{
    struct cusw_module *m = cusw_handle_get((uintptr_t)handle, CUSW_KIND_MODULE);
    if (m == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = m;
    return CUDA_SUCCESS;
}

void cusw_module_unload(struct cusw_module *m)
{
    cusw_handle_remove(m->handle);
    for (struct cusw_module **link = &loaded; *link != NULL; link = &(*link)->next) {
        if (*link == m) {
            *link = m->next;
            break;
        }
    }
    if (m->library != NULL) {
        for (struct cusw_module **link = &m->library->modules; *link != NULL;
             link = &(*link)->next_of_library) {
            if (*link == m) {
                *link = m->next_of_library;
                break;
            }
        }
    }
    module_free(m);
}

void cusw_modules_release_context(struct cusw_ctx *ctx)
{
    struct cusw_module *m = loaded;
    while (m != NULL) {
        struct cusw_module *next = m->next;
        if (m->ctx == ctx)
            cusw_module_unload(m);
        m = next;
    }
}

size_t cusw_module_count(void)
{
    size_t n = 0;
    for (const struct cusw_module *m = loaded; m != NULL; m = m->next)
        n += m->library == NULL;
    return n;
}

CUresult cusw_module_function(struct cusw_module *m, const char *name, struct cusw_function **out)
{
    long index = cusw_ptx_entry_index(m->ptx, name);
    if (index < 0)
        return CUDA_ERROR_NOT_FOUND;
    *out = &m->functions[index];
    return CUDA_SUCCESS;
}

CUresult cusw_module_global(const struct cusw_module *m, const char *name, void **memory,
                            size_t *bytes)
{
    for (size_t i = 0; i < m->ptx->n_globals; i++) {
        if (strcmp(m->ptx->globals[i].name, name) == 0) {
            *memory = m->globals[i];
            *bytes = m->ptx->globals[i].size;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_NOT_FOUND;
}

/* ---- Libraries and their kernels ------------------------------------------------------------- */

CUresult cusw_library_load(const void *image, struct cusw_library **out)
{
    const char *text = NULL;
    size_t length = 0;
    CUresult rc = cusw_image_ptx(image, &text, &length);
    struct cusw_ptx *ptx = NULL;
    if (rc == CUDA_SUCCESS)
        rc = cusw_ptx_parse(text, length, &ptx);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct cusw_library *l = calloc(1, sizeof *l);
    uintptr_t *kernels = calloc(ptx->n_entries ? ptx->n_entries : 1, sizeof *kernels);
    bool ok = l != NULL && kernels != NULL;
    if (ok) {
        l->ptx = ptx;
        l->kernels = kernels;
        ok = (l->handle = cusw_handle_new(CUSW_KIND_LIBRARY, l)) != 0;
    }
    for (size_t i = 0; ok && i < ptx->n_entries; i++) {
        struct cusw_kernel *k = malloc(sizeof *k);
        ok = k != NULL;
        if (ok) {
            *k = (struct cusw_kernel){ .library = l, .index = i };
            ok = (kernels[i] = cusw_handle_new(CUSW_KIND_KERNEL, k)) != 0;
            if (!ok)
                free(k);
        }
    }
    if (!ok) {
        if (l != NULL && l->kernels != NULL) {
            cusw_library_unload(l); /* and `ptx` and `kernels` */
        } else {
            free(l);
            free(kernels);
            cusw_ptx_free(ptx);
        }
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = l;
    return CUDA_SUCCESS;
}

uintptr_t cusw_library_handle(const struct cusw_library *l) { return l->handle; }

CUresult cusw_library_from_handle(CUlibrary handle, struct cusw_library **out)
{
    struct cusw_library *l = cusw_handle_get((uintptr_t)handle, CUSW_KIND_LIBRARY);
    if (l == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = l;
    return CUDA_SUCCESS;
}

void cusw_library_unload(struct cusw_library *l)
{
    while (l->modules != NULL)
        cusw_module_unload(l->modules);
    for (size_t i = 0; l->kernels != NULL && i < l->ptx->n_entries && l->kernels[i] != 0; i++) {
        free(cusw_handle_get(l->kernels[i], CUSW_KIND_KERNEL));
        cusw_handle_remove(l->kernels[i]);
    }
    if (l->handle != 0)
        cusw_handle_remove(l->handle);
    cusw_ptx_free(l->ptx);
    free(l->kernels);
    free(l);
}

CUresult cusw_library_kernel(const struct cusw_library *l, const char *name, CUkernel *out)
{
    long index = cusw_ptx_entry_index(l->ptx, name);
    if (index < 0)
        return CUDA_ERROR_NOT_FOUND;
    *out = (CUkernel)l->kernels[index];
    return CUDA_SUCCESS;
}

CUresult cusw_kernel_function(CUkernel handle, struct cusw_ctx *ctx, struct cusw_function **out)
{
    struct cusw_kernel *k = cusw_handle_get((uintptr_t)handle, CUSW_KIND_KERNEL);
    if (k == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    struct cusw_module *m = k->library->modules;
    while (m != NULL && m->ctx != ctx)
        m = m->next_of_library;
    if (m == NULL) {
        CUresult rc = module_new(ctx, k->library->ptx, k->library, &m);
        if (rc != CUDA_SUCCESS)
            return rc;
        m->next_of_library = k->library->modules;
        k->library->modules = m;
    }
    *out = &m->functions[k->index];
    return CUDA_SUCCESS;
}

CUresult cusw_function_from_handle(CUfunction handle, struct cusw_ctx *ctx,
                                   struct cusw_function **out)
{
    struct cusw_function *f = cusw_handle_get((uintptr_t)handle, CUSW_KIND_FUNCTION);
    if (f != NULL) {
        *out = f;
        return CUDA_SUCCESS;
    }
    /* As documented, a kernel of a library may stand for its function in the current context. */
    if (ctx != NULL)
        return cusw_kernel_function((CUkernel)handle, ctx, out);
    return CUDA_ERROR_INVALID_HANDLE;
}

/* ---- Functions' attributes and occupancy ----------------------------------------------------- */

/* What PTX does not tell: the registers a thread uses. */
#define REGISTERS_PER_THREAD 32
#define STATIC_SHARED_DEFAULT (48 * 1024) /* a block's shared memory without opting in */

static int device_value(CUdevice_attribute attribute)
{
    int value = 0;
    cusw_device_attribute(0, attribute, &value);
    return value;
}

static int max_threads(const struct cusw_function *f)
{
    int device = device_value(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    return f->entry->max_threads > 0 && f->entry->max_threads < device ? f->entry->max_threads
                                                                       : device;
}

size_t cusw_function_max_dynamic_shared(const struct cusw_function *f)
{
    size_t static_bytes = f->entry->shared_bytes;
    if (f->is_set[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES])
        return (size_t)f->set[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES];
    return static_bytes < STATIC_SHARED_DEFAULT ? STATIC_SHARED_DEFAULT - static_bytes : 0;
}

CUresult cusw_function_attribute(const struct cusw_function *f, CUfunction_attribute attribute,
                                 int *value)
{
    if ((unsigned int)attribute >= CUSW_FUNCTION_ATTRIBUTES)
        return CUDA_ERROR_INVALID_VALUE;
    switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = max_threads(f); break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *value = (int)f->entry->shared_bytes; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *value = (int)f->entry->local_bytes; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *value = REGISTERS_PER_THREAD; break;
    /* The virtual architecture the PTX was written for, as documented (not its ISA version). */
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *value = f->module->ptx->target; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
        *value = device_value(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 +
                 device_value(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
        break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        *value = (int)cusw_function_max_dynamic_shared(f);
        break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        *value = f->is_set[attribute] ? f->set[attribute] : -1;
        break;
    default: *value = f->is_set[attribute] ? f->set[attribute] : 0; break;
    }
    return CUDA_SUCCESS;
}

CUresult cusw_function_set_attribute(struct cusw_function *f, CUfunction_attribute attribute,
                                     int value)
{
    int optin = device_value(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    bool valid;
    switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        valid = value >= 0 && (size_t)value + f->entry->shared_bytes <= (size_t)optin;
        break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        valid = value >= -1 && value <= 100;
        break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        valid = value >= 0;
        break;
    default: valid = false; break;
    }
    if (!valid)
        return CUDA_ERROR_INVALID_VALUE;
    f->set[attribute] = value;
    f->is_set[attribute] = true;
    return CUDA_SUCCESS;
}

int cusw_function_occupancy(const struct cusw_function *f, int block_size, size_t dynamic_shared)
{
    if (block_size <= 0 || block_size > max_threads(f))
        return 0;
    int warp = device_value(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    int warps = (block_size + warp - 1) / warp;
    int blocks = device_value(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR) / (warps * warp);
    int most = device_value(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
    if (blocks > most)
        blocks = most;
    int by_registers = device_value(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR) /
                       (warps * warp * REGISTERS_PER_THREAD);
    if (blocks > by_registers)
        blocks = by_registers;
    size_t shared = f->entry->shared_bytes + dynamic_shared;
    if (shared > 0) {
        size_t per_block =
            shared + (size_t)device_value(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK);
        size_t by_shared =
            (size_t)device_value(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR) /
            per_block;
        if ((size_t)blocks > by_shared)
            blocks = (int)by_shared;
    }
    return blocks;
}

/*
 * internal.h - the software CUDA driver's one internal header: the model's types and functions
 * (model/), and the macros the exported functions (api/) are defined with.
 *
 * Concurrency model (read this first):
 *  - One process-wide mutex, `cusw_lock`, guards every driver object (contexts, streams and
 *    their queues, events, captures, graphs, executables, user objects, the handle registry,
 *    the allocation table). API calls take it for their bookkeeping and never call user code
 *    while holding it. A single lock keeps the many cross-object rules (legacy-stream ordering,
 *    capture invalidation, ownership of user objects) easy to get right; the work itself (host
 *    functions, copies, sleeps, waits) always runs unlocked.
 *  - `cusw_progress` is broadcast (under the lock) whenever a stream operation completes or a
 *    stream or context changes state; everything that waits for stream progress (synchronize
 *    calls, stream workers waiting for cross-stream dependencies) waits on it.
 *  - Each stream has one worker thread that runs its operations in FIFO order. Host functions
 *    and stream callbacks of all streams run on one process-wide host-function thread
 *    (model/host_thread.c), as on the real driver. A user object's destructor runs where the
 *    real driver runs it (model/user_object.c): on the thread whose API call dropped the last
 *    reference, inside that call but after it has let go of cusw_lock (the call defers it to its
 *    cusw_lock_release), or, for references a launch or a launched executable held, on one
 *    process-wide destructor thread.
 *  - Handles given to the application are opaque numbers from the registry (model/registry.c),
 *    never pointers and never reused, so a stale or made-up handle is detected, never
 *    dereferenced.
 *  - What tests arm (failures, delays, captures begun at a call) and the call counts live behind
 *    their own mutexes and atomics, never cusw_lock: every exported function checks them first.
 *
 * The sections below follow the model's layers, bottom up: each file calls only those above it
 * here (README.md has the map and the rule). Every function in this file whose comment says
 * "[locked]" must be called with cusw_lock held.
 */
#ifndef CUSW_INTERNAL_H
#define CUSW_INTERNAL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "cudasw.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- Export and entry-point prologue (api/) -------------------------------------------------- */

#define CUSW_EXPORT __attribute__((visibility("default")))

#ifdef CUSW_VARIANT_STUB
#define CUSW_IS_STUB 1
#else
#define CUSW_IS_STUB 0
#endif

/* First statement of every exported function. The stub variant answers like NVIDIA's toolkit
 * stub libcuda.so; otherwise the call does what a test armed for it and is counted (cusw_enter,
 * model/calls.c), and an armed failure answers in its place. Each function's call site knows it
 * by its exported name, __func__. */
#define CUSW_ENTRY()                                                                             \
    do {                                                                                         \
        if (CUSW_IS_STUB)                                                                        \
            return CUDA_ERROR_STUB_LIBRARY;                                                      \
        static struct cusw_call_site cusw_site_ = { .symbol = __func__ };                        \
        CUresult cusw_injected_;                                                                 \
        if (cusw_enter(&cusw_site_, &cusw_injected_))                                            \
            return cusw_injected_;                                                               \
    } while (0)

/* CUSW_ENTRY for the entry points that need a successful cuInit first. */
#define CUSW_INIT_ENTRY()                                                                        \
    do {                                                                                         \
        CUSW_ENTRY();                                                                            \
        if (!cusw_initialized())                                                                 \
            return CUDA_ERROR_NOT_INITIALIZED;                                                   \
    } while (0)

/* Defines the exported function `name` and its twin name##_ptsz (entries.def's TWIN), both
 * answering `call`, an expression of the parameters and of `per_thread`: false in `name`, true in
 * the twin, where a NULL stream means the calling thread's per-thread stream. */
#define CUSW_TWINS(name, params, call)                                                           \
    CUSW_EXPORT CUresult name params                                                             \
    {                                                                                            \
        const bool per_thread = false;                                                           \
        CUSW_INIT_ENTRY();                                                                       \
        return call;                                                                             \
    }                                                                                            \
    CUSW_EXPORT CUresult name##_ptsz params                                                      \
    {                                                                                            \
        const bool per_thread = true;                                                            \
        CUSW_INIT_ENTRY();                                                                       \
        return call;                                                                             \
    }

/* Defines the exported function `name` and its twin name##_ptds (entries.def's PTDS_TWIN), both
 * answering `call`, an expression of the parameters and of `per_thread`: false in `name`, true in
 * the twin, which works on the calling thread's per-thread stream instead of the legacy one. */
#define CUSW_PTDS_TWINS(name, params, call)                                                      \
    CUSW_EXPORT CUresult name params                                                             \
    {                                                                                            \
        const bool per_thread = false;                                                           \
        CUSW_INIT_ENTRY();                                                                       \
        return call;                                                                             \
    }                                                                                            \
    CUSW_EXPORT CUresult name##_ptds params                                                      \
    {                                                                                            \
        const bool per_thread = true;                                                            \
        CUSW_INIT_ENTRY();                                                                       \
        return call;                                                                             \
    }

/* ---- Limits and defaults --------------------------------------------------------------------- */

#define CUSW_MAX_DEVICES 8
#define CUSW_DEFAULT_DRIVER_VERSION 13050
#define CUSW_DEVICE_MEMORY_BYTES (16ULL << 30)
/* cuCtxGetStreamPriorityRange's answer: lower numbers are greater priorities. */
#define CUSW_LEAST_STREAM_PRIORITY 0
#define CUSW_GREATEST_STREAM_PRIORITY (-5)
/* The context limits the driver models: CU_LIMIT_STACK_SIZE to
 * CU_LIMIT_PERSISTING_L2_CACHE_SIZE (cuCtxGetLimit answers the others CUDA_ERROR_UNSUPPORTED_LIMIT,
 * as a device without them does). */
#define CUSW_LIMIT_COUNT 7
/* Fresh contexts alive at once, at most (api/fresh_contexts.c). */
#define CUSW_MAX_FRESH_CONTEXTS 64

/* ---- The lock (model/lock.c) ----------------------------------------------------------------- */

extern pthread_mutex_t cusw_lock;
extern pthread_cond_t cusw_progress;

void cusw_lock_acquire(void);
/* Unlocks, then runs what the calling thread deferred while it held the lock: the one place
 * where a driver call runs user code on the caller's thread. */
void cusw_lock_release(void);
void cusw_wait_progress(void);      /* [locked] waits for the next broadcast of cusw_progress */
void cusw_broadcast_progress(void); /* [locked] */

/* Work a holder of cusw_lock leaves for its own thread once it has let go of the lock: user code
 * made due by an API call (a user object's destructor). */
struct cusw_deferred {
    struct cusw_deferred *next;
    pthread_t thread; /* whose cusw_lock_release runs it */
    void (*run)(struct cusw_deferred *);
};
/* [locked] `run(d)` runs on the calling thread, unlocked, in its next cusw_lock_release, after
 * what it deferred before; it may free d. */
void cusw_defer_until_unlocked(struct cusw_deferred *d, void (*run)(struct cusw_deferred *));

/* ---- Process-wide plumbing (model/runtime.c) ------------------------------------------------- */

/* Configuration read from the environment when the library is loaded. */
int cusw_config_device_count(void);
int cusw_config_driver_version(void);

/* Writes one line to the driver's log: standard error, or where CUSW_LOG names (a file, or "off"
 * for nowhere). For what a user should know once: an entry point or a kernel the driver does not
 * model. Takes a lock of its own, never cusw_lock. */
void cusw_log(const char *format, ...) __attribute__((format(printf, 1, 2)));

/* Creates a detached internal thread (pins the library in memory first, so that a dlclose by
 * the application cannot unmap code that driver threads are still running). */
bool cusw_spawn_thread(void *(*fn)(void *), void *arg);

/* Per-thread serial number: unique for the process lifetime, unlike pthread_t. */
uint64_t cusw_thread_serial(void);

double cusw_now_ms(void); /* a monotonic clock */
void cusw_sleep_us(unsigned long usec);

/* Grows *array (of *capacity elements of elem_size bytes) to hold at least `needed`. */
bool cusw_reserve(void **array, size_t *capacity, size_t needed, size_t elem_size);

/* ---- Handle registry (model/registry.c) ------------------------------------------------------ */

enum cusw_kind {
    CUSW_KIND_CONTEXT = 1,
    CUSW_KIND_STREAM,
    CUSW_KIND_EVENT,
    CUSW_KIND_GRAPH,
    CUSW_KIND_NODE,
    CUSW_KIND_EXEC,
    CUSW_KIND_USER_OBJECT,
    CUSW_KIND_POOL,
    CUSW_KIND_MODULE,
    CUSW_KIND_FUNCTION,
    CUSW_KIND_LIBRARY,
    CUSW_KIND_KERNEL,
    CUSW_KIND_COUNT
};

/* Open-addressing hash map from non-zero keys (> 1) to pointers. */
struct cusw_map {
    struct cusw_map_slot *slots;
    size_t capacity, used, tombstones;
};
bool cusw_map_put(struct cusw_map *m, uintptr_t key, void *value);
void *cusw_map_get(const struct cusw_map *m, uintptr_t key);
void *cusw_map_remove(struct cusw_map *m, uintptr_t key);
/* Iteration: start with *cursor = 0; returns false at the end. */
bool cusw_map_next(const struct cusw_map *m, size_t *cursor, uintptr_t *key, void **value);

uintptr_t cusw_handle_new(enum cusw_kind kind, void *object);   /* [locked] 0 when out of memory */
void *cusw_handle_get(uintptr_t handle, enum cusw_kind kind);   /* [locked] NULL unless live */
void cusw_handle_remove(uintptr_t handle);                      /* [locked] */
size_t cusw_handle_count(enum cusw_kind kind);                  /* [locked] live handles */
/* Lookups of a handle the registry issued and has since removed, since load. */
unsigned long long cusw_stale_handle_uses(void);

/* ---- What a module image says (model/ptx.c) -------------------------------------------------- */

struct cusw_ptx_param {
    size_t size, align;
    char type[16]; /* of its elements: ".u64", ".b8" */
};

struct cusw_ptx_entry {
    char *name;
    struct cusw_ptx_param *params;
    size_t n_params;
    size_t shared_bytes, local_bytes; /* what its body declares */
    int max_threads;                  /* .maxntid or .reqntid, 0 without */
};

struct cusw_ptx_global {
    char *name;
    size_t size, align;
    unsigned char *init; /* size bytes: its initial value */
};

struct cusw_ptx {
    int version; /* .version 9.0 as 90 */
    int target;  /* .target sm_75 as 75 */
    struct cusw_ptx_entry *entries;
    size_t n_entries;
    struct cusw_ptx_global *globals;
    size_t n_globals;
};

/* The PTX text of a module image: the image itself, or a fat binary's uncompressed PTX entry
 * (also through its wrapper). CUDA_ERROR_NOT_SUPPORTED (and a log line) for machine code, or
 * compressed PTX, which this driver does not read. */
CUresult cusw_image_ptx(const void *image, const char **text, size_t *length);
/* CUDA_ERROR_INVALID_PTX for text that is no PTX. */
CUresult cusw_ptx_parse(const char *text, size_t length, struct cusw_ptx **out);
void cusw_ptx_free(struct cusw_ptx *ptx);
long cusw_ptx_entry_index(const struct cusw_ptx *ptx, const char *name); /* -1 when none */

/* ---- Kernels' stand-ins (model/stand_in.c) --------------------------------------------------- */

CUresult cusw_stand_in_register(const char *kernel, cuswStandIn stand_in, void *user_data);
/* The stand-in of kernels named `kernel` (loading CUSW_STAND_INS's libraries the first time). */
bool cusw_stand_in_find(const char *kernel, cuswStandIn *stand_in, void **user_data);
/* A launch of `kernel` found none: counted, and named in the log the first time. */
void cusw_stand_in_missing(const char *kernel);
unsigned long long cusw_stand_in_missing_launches(void);

/* ---- What the device reports of itself (model/device.c) -------------------------------------- */

/* What device `dev` answers for `attribute` (an H200's value, unless replaced); false for a value
 * that is no CUdevice_attribute. */
bool cusw_device_attribute(int dev, CUdevice_attribute attribute, int *value);
/* Whether the devices answer `attribute` with other than 0: for the attributes that say whether a
 * feature the driver models is there (memory pools, 64-bit stream memory operations, ...). */
bool cusw_device_supports(CUdevice_attribute attribute);
/* Makes every device answer `*value` for `attribute` (NULL: its own value again); false for a
 * value that is no CUdevice_attribute. */
bool cusw_override_device_attribute(CUdevice_attribute attribute, const int *value);

/* ---- The stream-ordered allocator (model/pool.c) --------------------------------------------- */

struct cusw_pool;
struct cusw_block;

struct cusw_pool *cusw_pool_default(int device);  /* [locked] NULL when out of memory */
struct cusw_pool *cusw_pool_current(int device);  /* [locked] cuDeviceGetMemPool's */
void cusw_pool_set_current(int device, struct cusw_pool *pool); /* [locked] */
struct cusw_pool *cusw_pool_create(int device);   /* [locked] registered; NULL when out of memory */
/* [locked] CUDA_ERROR_INVALID_VALUE unless `handle` names a pool. */
CUresult cusw_pool_from_handle(CUmemoryPool handle, struct cusw_pool **out);
/* [locked] Invalidates its handle; it goes once what was allocated from it is freed.
 * CUDA_ERROR_INVALID_VALUE for a device's default pool. */
CUresult cusw_pool_destroy(struct cusw_pool *pool);
uintptr_t cusw_pool_handle(const struct cusw_pool *pool);
int cusw_pool_device(const struct cusw_pool *pool);
/* [locked] CUDA_ERROR_INVALID_VALUE for an attribute it does not have, or cannot set. */
CUresult cusw_pool_get_attribute(const struct cusw_pool *pool, CUmemPool_attribute attribute,
                                 void *value);
CUresult cusw_pool_set_attribute(struct cusw_pool *pool, CUmemPool_attribute attribute,
                                 const void *value);
void cusw_pool_trim(struct cusw_pool *pool, size_t keep); /* [locked] cuMemPoolTrimTo's */
uint64_t cusw_pool_reserved_bytes(int device); /* [locked] what the device's pools reserve */
/* [locked] `size` bytes from `pool`, usable once its stream reaches the allocation. */
CUresult cusw_block_allocate(struct cusw_pool *pool, size_t size, struct cusw_block **out);
void *cusw_block_memory(const struct cusw_block *block);
/* [locked] The block allocated at `memory`, if it is neither freed nor to be freed: then it is
 * to be freed (a second free of it finds none). */
struct cusw_block *cusw_block_to_free(const void *memory);
void cusw_block_reached(struct cusw_block *block); /* [locked] its allocation's point is reached */
void cusw_block_freed(struct cusw_block *block);   /* [locked] its free's point is reached */
/* Whether stream work touching [memory, memory + bytes) misuses a block: before its allocation's
 * point or after its free's (counted, logged once). Takes the lock. */
bool cusw_pool_misused(const void *memory, size_t bytes);
unsigned long long cusw_pool_misuses(void);
/* [locked] Whether `memory` is in a block's memory (freed ones kept to catch misuse included):
 * device memory, to the copy rules. */
bool cusw_pool_holds(const void *memory);

/* ---- Modules, functions, libraries and kernels (model/module.c) ------------------------------ */

struct cusw_module;
struct cusw_library;

/* The attributes cuFuncSetAttribute sets (CUfunction_attribute's values below this). */
#define CUSW_FUNCTION_ATTRIBUTES 18

struct cusw_function {
    uintptr_t handle;
    struct cusw_module *module;
    const struct cusw_ptx_entry *entry;
    int set[CUSW_FUNCTION_ATTRIBUTES]; /* values cuFuncSetAttribute set */
    bool is_set[CUSW_FUNCTION_ATTRIBUTES];
    CUfunc_cache cache_config;
};

struct cusw_module {
    uintptr_t handle;
    struct cusw_ctx *ctx;
    struct cusw_ptx *ptx;
    struct cusw_function *functions; /* one per entry of ptx */
    size_t n_functions;
    void **globals;                  /* one per variable of ptx */
    struct cusw_library *library;    /* loaded for a library's kernels, or NULL */
    struct cusw_module *next, *next_of_library;
};

/* [locked] The PTX of `image` (cusw_image_ptx) as a module of `ctx`, registered. */
CUresult cusw_module_load(struct cusw_ctx *ctx, const void *image, struct cusw_module **out);
CUresult cusw_module_from_handle(CUmodule handle, struct cusw_module **out); /* [locked] */
void cusw_module_unload(struct cusw_module *m);                              /* [locked] */
void cusw_modules_release_context(struct cusw_ctx *ctx); /* [locked] unloads its modules */
size_t cusw_module_count(void); /* [locked] loaded by cuModuleLoad*, not unloaded */
/* [locked] CUDA_ERROR_NOT_FOUND when the module has no such kernel or variable. */
CUresult cusw_module_function(struct cusw_module *m, const char *name, struct cusw_function **out);
CUresult cusw_module_global(const struct cusw_module *m, const char *name, void **memory,
                            size_t *bytes);
CUresult cusw_library_load(const void *image, struct cusw_library **out); /* [locked] */
uintptr_t cusw_library_handle(const struct cusw_library *l);
CUresult cusw_library_from_handle(CUlibrary handle, struct cusw_library **out); /* [locked] */
void cusw_library_unload(struct cusw_library *l); /* [locked] with its modules */
CUresult cusw_library_kernel(const struct cusw_library *l, const char *name, CUkernel *out);
/* [locked] A kernel's function in `ctx`: the library is loaded there the first time. */
CUresult cusw_kernel_function(CUkernel handle, struct cusw_ctx *ctx, struct cusw_function **out);
/* [locked] A function, or a library's kernel standing for its function in `ctx` (may be NULL). */
CUresult cusw_function_from_handle(CUfunction handle, struct cusw_ctx *ctx,
                                   struct cusw_function **out);
/* [locked] What cuFuncGetAttribute answers for `f`; CUDA_ERROR_INVALID_VALUE for a value that is
 * no attribute. Registers and constant memory are not known from PTX: a function is said to use
 * 32 registers a thread and no constant memory. */
CUresult cusw_function_attribute(const struct cusw_function *f, CUfunction_attribute attribute,
                                 int *value);
/* [locked] cuFuncSetAttribute's work: CUDA_ERROR_INVALID_VALUE for an attribute that is read only,
 * or a value out of its range. */
CUresult cusw_function_set_attribute(struct cusw_function *f, CUfunction_attribute attribute,
                                     int value);
/* [locked] How many blocks of `block_size` threads, each with `dynamic_shared` bytes of dynamic
 * shared memory, fit on one multiprocessor of the device at once, by its limits of threads,
 * blocks, registers and shared memory. */
int cusw_function_occupancy(const struct cusw_function *f, int block_size, size_t dynamic_shared);
/* [locked] The most dynamic shared memory a block may ask for at launch. */
size_t cusw_function_max_dynamic_shared(const struct cusw_function *f);

/* ---- Entry points by name, and the reported version (model/entries.c) ------------------------ */

bool cusw_entry_name_known(const char *name); /* base or exported name of an entry or control */
/* The base name of the entry point or control exported as `symbol`. */
const char *cusw_entry_base(const char *symbol);
/* Calls fn with the exported name of every entry point and control. */
void cusw_for_each_export(void (*fn)(const char *symbol, void *arg), void *arg);
/* The row of entries.def that a lookup of `base` at `cudaVersion` finds, or -1; then
 * *name_exists tells a name the driver has only in newer forms from one it lacks. */
long cusw_entry_lookup(const char *base, int cudaVersion, bool per_thread, bool *name_exists);
int cusw_reported_driver_version(void);
void cusw_set_reported_driver_version(int version); /* 0: the configured one */

/* ---- What tests arm for the next calls of an entry (model/injection.c) ----------------------- */

/* Arms `count` failures answering `code` for calls from the thread of serial `thread` (0: any),
 * replacing those armed before for the same entry and thread; count 0 disarms. */
CUresult cusw_fault_arm(const char *entry, unsigned int count, CUresult code, uint64_t thread);
/* Whether an armed failure takes this call (then *code is its answer). */
bool cusw_fault_injected(const char *base, const char *symbol, CUresult *code);
/* Failures still armed for calls of `entry` (as it was armed) from the thread `thread`. */
unsigned int cusw_fault_armed(const char *entry, uint64_t thread);
CUresult cusw_delay_arm(const char *entry, unsigned int count, unsigned int usec);
unsigned int cusw_delay_armed(const char *entry);
void cusw_delay_injected(const char *base, const char *symbol); /* sleeps when one is armed */
/* Arms the capture for the call of `entry` after `calls_before` others. */
CUresult cusw_capture_arm(const char *entry, unsigned int calls_before, CUstream stream,
                          CUstreamCaptureMode mode);
CUresult cusw_capture_disarm(void);
/* Whether a capture is armed for this call: then it is disarmed and named. */
bool cusw_capture_injected(const char *base, const char *symbol, CUstream *stream,
                           CUstreamCaptureMode *mode);

/* ---- Devices and contexts (model/context.c) -------------------------------------------------- */

struct cusw_stream;
struct cusw_event;

struct cusw_ctx {
    uintptr_t handle; /* out of the registry once a created context is destroyed */
    int device;
    unsigned int flags;
    bool primary;     /* else made by cuCtxCreate: destroyed by cuCtxDestroy, never freed */
    unsigned int fresh_slot; /* 0, or 1 + its slot of a fresh context (api/fresh_contexts.c) */
    int retain_count; /* of a primary context */
    bool active;
    atomic_int sticky;          /* CUresult; never cleared for the process */
    atomic_bool tearing_down;   /* makes wait-value polls give up while the context is torn down */
    struct cusw_stream *legacy; /* while active */
    struct cusw_stream *streams; /* every stream of the context, also destroyed ones still draining */
    struct cusw_event *events;
    struct cusw_ctx *next_created; /* every context cuCtxCreate made, process-wide */
    /* [locked] cuCtxSetLimit's and cuCtxSetCacheConfig's, an H200's by default. */
    size_t limits[CUSW_LIMIT_COUNT];
    CUfunc_cache cache_config;
};

/* What a context's limits (CUlimit) are until cuCtxSetLimit changes them: an H200's. */
extern const size_t cusw_default_limits[CUSW_LIMIT_COUNT];

bool cusw_initialized(void); /* whether cuInit has succeeded */
void cusw_initialize(void);  /* cuInit's work: the devices' primary contexts */
int cusw_device_count(void);
CUresult cusw_check_device(CUdevice dev); /* CUDA_ERROR_INVALID_DEVICE unless a device's ordinal */
struct cusw_ctx *cusw_primary_ctx(CUdevice dev); /* of a checked device */
/* [locked] The stream whose cuStreamGetId answer is `id`, of any context, destroyed ones still
 * draining included; NULL once it is gone. */
struct cusw_stream *cusw_stream_of_id(unsigned long long id);
/* [locked] A context of a checked device, registered and inactive (cuCtxCreate's), or NULL. */
struct cusw_ctx *cusw_ctx_new(CUdevice dev, unsigned int flags);
/* [locked] CUDA_ERROR_INVALID_CONTEXT unless `handle` names a context. */
CUresult cusw_ctx_from_handle(CUcontext handle, struct cusw_ctx **out);
/* [locked] The calling thread's current context, checked: CUDA_ERROR_INVALID_CONTEXT if none,
 * CUDA_ERROR_CONTEXT_IS_DESTROYED if it is inactive (a released primary context, a destroyed
 * created one), its sticky error if any. */
CUresult cusw_ctx_current(struct cusw_ctx **out);
struct cusw_ctx *cusw_ctx_bound(void); /* the calling thread's current context, unchecked */
/* The calling thread's stack of current contexts: a push makes `ctx` current; a pop makes the one
 * below current again and answers the popped one (NULL: the stack was empty); a bind replaces the
 * top, or pushes onto an empty stack, and a bind of NULL pops. */
CUresult cusw_ctx_push(struct cusw_ctx *ctx);
struct cusw_ctx *cusw_ctx_pop(void);
CUresult cusw_ctx_bind(struct cusw_ctx *ctx);
/* [locked] Same checks as cusw_ctx_current, for a context reached through an object. */
CUresult cusw_ctx_check(const struct cusw_ctx *ctx);
CUresult cusw_ctx_sticky(const struct cusw_ctx *ctx); /* CUDA_SUCCESS or the sticky error */
void cusw_ctx_set_sticky(struct cusw_ctx *ctx, CUresult code); /* first error wins */
/* [locked] Waits until every stream of the context has completed everything enqueued so far. */
void cusw_ctx_drain(struct cusw_ctx *ctx);

/* ---- The stream object (model/stream.c) ------------------------------------------------------ */

enum cusw_stream_kind { CUSW_STREAM_USER, CUSW_STREAM_LEGACY, CUSW_STREAM_PER_THREAD };

struct cusw_capture;
struct cusw_node;
struct cusw_op;

struct cusw_stream {
    uintptr_t handle; /* 0 once destroyed */
    struct cusw_ctx *ctx;
    enum cusw_stream_kind kind;
    unsigned int flags;
    int priority;          /* cuStreamCreateWithPriority's, clamped; 0 for every other stream */
    unsigned long long id; /* cuStreamGetId's answer */
    unsigned int refs;
    bool destroyed;
    pthread_cond_t wake; /* the worker waits here for new operations */
    struct cusw_op *head, *tail;
    uint64_t enqueued, completed;
    struct cusw_stream *ctx_prev, *ctx_next;
    /* Capture state (model/capture.c). */
    struct cusw_capture *capture;
    struct cusw_node **cap_deps;
    size_t n_cap_deps, cap_deps_capacity;
    CUgraphNode *info_nodes; /* arrays handed out by cuStreamGetCaptureInfo */
    CUgraphEdgeData *info_edges;
    size_t info_capacity;
};

/* A point of a stream. */
struct cusw_dep {
    struct cusw_stream *stream; /* referenced */
    uint64_t seq;               /* reached once stream->completed >= seq */
};

/* [locked] A stream of `ctx` with a handle, in its context's list, holding one reference (which
 * its worker takes over), without a worker yet. */
struct cusw_stream *cusw_stream_new(struct cusw_ctx *ctx, enum cusw_stream_kind kind,
                                    unsigned int flags);
void cusw_stream_ref(struct cusw_stream *s);   /* [locked] */
void cusw_stream_unref(struct cusw_stream *s); /* [locked] frees it with the last reference */
/* [locked] Invalidates the handle at once and wakes the worker, which drains, then exits. */
void cusw_stream_close(struct cusw_stream *s);
void cusw_stream_unlink(struct cusw_stream *s); /* [locked] out of its context's list */
bool cusw_stream_syncs_with_legacy(const struct cusw_stream *s); /* blocking or per-thread */
bool cusw_stream_pending(const struct cusw_stream *s); /* [locked] work not completed */
size_t cusw_user_stream_count(void); /* [locked] made by cuStreamCreate, not destroyed */

/* ---- The event object (model/event.c) -------------------------------------------------------- */

struct cusw_event {
    uintptr_t handle; /* 0 once destroyed */
    struct cusw_ctx *ctx;
    unsigned int flags;
    unsigned int refs; /* the handle's, plus one per pending record operation */
    struct cusw_stream *stream; /* last record point, or NULL: never recorded */
    uint64_t seq;
    uint64_t generation;  /* bumped by each record; a record operation only stamps its own */
    bool stamped;
    double stamp_ms;
    /* Set when last recorded inside a capture: the capture and its dependency set then. */
    uint64_t capture_id;
    struct cusw_node **cap_nodes;
    size_t n_cap_nodes;
    struct cusw_event *ctx_prev, *ctx_next;
};

struct cusw_action;

struct cusw_event *cusw_event_new(struct cusw_ctx *ctx, unsigned int flags); /* [locked] */
void cusw_event_unref(struct cusw_event *e); /* [locked] */
void cusw_event_destroy(struct cusw_event *e); /* [locked] invalidates the handle */
bool cusw_event_complete(const struct cusw_event *e); /* [locked] its point reached, or none */
/* The operation that records `e` where it is enqueued; once it is, cusw_event_recorded(e, s)
 * makes that the event's point. [locked] */
struct cusw_action cusw_event_record_action(const struct cusw_event *e);
void cusw_event_recorded(struct cusw_event *e, struct cusw_stream *s);
/* [locked] `e` recorded in the capture of `s`: its current dependency nodes. */
CUresult cusw_event_recorded_in_capture(struct cusw_event *e, const struct cusw_stream *s);
/* [locked] The record operation of `generation` reached: stamps the time unless re-recorded. */
void cusw_event_stamp(struct cusw_event *e, uint64_t generation);
/* [locked] Waits for the point recorded now (lets go of the lock meanwhile). */
void cusw_event_wait(struct cusw_event *e);

/* ---- User objects (model/user_object.c) ------------------------------------------------------ */

struct cusw_user_object {
    uintptr_t handle;
    void *ptr;
    CUhostFn destroy;
    unsigned long long refs;
    struct cusw_user_object *next_due; /* once unreferenced: in the destructor thread's queue */
    struct cusw_deferred after_unlock; /* or deferred to the releasing thread's unlock */
};

/* References to user objects, as held by a graph, an executable or a launch. */
struct cusw_uref {
    struct cusw_user_object *object;
    unsigned int count;
};
struct cusw_uref_list {
    struct cusw_uref *items;
    size_t n, capacity;
};

/* Where the destructor runs when a release drops the last reference (measured on the real
 * driver). INLINE: on the releasing thread, inside the releasing API call, after it has let go of
 * cusw_lock (deferred to its cusw_lock_release); for the references of the application, of a
 * graph and of an executable never launched. DRIVER_THREAD: later, on the destructor thread; for
 * the references a launch held, and those of an executable that has been launched. */
enum cusw_destroy_route { CUSW_DESTROY_INLINE, CUSW_DESTROY_DRIVER_THREAD };

/* [locked] Registered, with `refs` references of the application. */
struct cusw_user_object *cusw_user_object_new(void *ptr, CUhostFn destroy, unsigned int refs);
void cusw_user_object_retain(struct cusw_user_object *o, unsigned int count); /* [locked] */
void cusw_user_object_release(struct cusw_user_object *o, unsigned int count,
                              enum cusw_destroy_route route); /* [locked] */
/* [locked] Adds `count` references to the list; they are not retained. */
bool cusw_urefs_add(struct cusw_uref_list *l, struct cusw_user_object *o, unsigned int count);
/* [locked] Adds src's references to dst, as new references (retained). */
bool cusw_urefs_copy(struct cusw_uref_list *dst, const struct cusw_uref_list *src);
/* [locked] Takes `count` references of `o` off the list, unreleased; false if it holds fewer. */
bool cusw_urefs_take(struct cusw_uref_list *l, struct cusw_user_object *o, unsigned int count);
/* [locked] Releases all and frees the list. */
void cusw_urefs_release(struct cusw_uref_list *l, enum cusw_destroy_route route);
unsigned long long cusw_user_objects_alive(void); /* whose destructor has not run */
unsigned long long cusw_user_object_destructors_run(void);

/* ---- Host-function thread (model/host_thread.c) ---------------------------------------------- */

/* Run on the single host-function thread and wait for it to finish. The host function is skipped
 * if the context has a sticky error by the time the host thread reaches it; the callback runs
 * with that error as its status. */
void cusw_host_run_fn(struct cusw_ctx *ctx, CUhostFn fn, void *data);
void cusw_host_run_callback(struct cusw_ctx *ctx, CUstreamCallback fn, CUstream stream,
                            void *data);

/* ---- Actions: what a stream operation or a graph node does (model/action.c) ------------------ */

struct cusw_launch;
struct cusw_batch;

enum cusw_action_kind {
    CUSW_ACT_NOP,          /* barrier (event wait) or empty graph node */
    CUSW_ACT_HOST_FN,      /* cuLaunchHostFunc / host node: skipped once the context is sticky */
    CUSW_ACT_CALLBACK,     /* cuStreamAddCallback: always runs once, with the error status */
    CUSW_ACT_COPY,
    CUSW_ACT_SET,
    CUSW_ACT_WRITE_VALUE,  /* one operation of a batch */
    CUSW_ACT_WAIT_VALUE,   /* one operation of a batch */
    CUSW_ACT_BATCH,        /* stream memory operations, in order; a batch node */
    CUSW_ACT_FAULT,        /* cuswLaunchFault: the stand-in for a faulting kernel */
    CUSW_ACT_SLEEP,        /* cuswLaunchSleep: the stand-in for a long kernel */
    CUSW_ACT_EVENT_RECORD, /* stream only */
    CUSW_ACT_GRAPH,        /* stream only: one launch of an executable graph */
    CUSW_ACT_KERNEL,       /* a kernel's launch: its stand-in runs */
    CUSW_ACT_ALLOCATE,     /* stream only: a stream-ordered allocation's point */
    CUSW_ACT_FREE,         /* stream only: a stream-ordered free's point */
};

struct cusw_action {
    enum cusw_action_kind kind;
    union {
        struct { CUhostFn fn; void *data; } host;
        struct { CUstreamCallback fn; void *data; CUstream stream; } callback;
        /* `stage`: the source is read when the copy is enqueued, into a buffer of its own
         * (`staged`), as the real driver stages pageable memory; a captured copy reads it when
         * its node runs. */
        struct { void *dst; const void *src; size_t bytes; bool stage, staged; } copy;
        struct { void *dst; uint32_t value; size_t count; unsigned int width; } set; /* bytes */
        struct { CUdeviceptr addr; uint64_t value; unsigned int flags; bool is64; } mem;
        struct { CUresult code; } fault;
        struct { unsigned int usec; } sleep;
        struct { struct cusw_event *event; uint64_t generation; } record;
        struct cusw_launch *launch;
        struct cusw_batch *batch; /* shared: counted by the actions that hold it */
        struct cusw_block *block;
        struct cusw_kernel_call *kernel; /* shared: counted by the actions that hold it */
    } u;
};

/* One launch of an executable graph: a snapshot of its nodes' actions in a topological order
 * (the real driver snapshots node parameters at launch too), and the references to the
 * executable's user objects that the launch holds until it has finished. */
struct cusw_launch {
    struct cusw_action *actions;
    size_t n;
    struct cusw_uref_list urefs;
};

/* A kernel's launch: what its stand-in gets (stand_in.h), copied at the launch, so that it
 * outlives the module; unchanged once made, shared by the copies of its action. */
struct cusw_kernel_call {
    unsigned int refs; /* [locked] */
    cuswKernelLaunch launch;
    char *name;
    cuswKernelParam *params;
    char (*types)[16];        /* the parameters' types */
    unsigned char *arguments; /* the parameters' bytes, laid out as the PTX declares them */
};

/* [locked] A kernel action of `f` with the launch's geometry and arguments, holding the one
 * reference (the caller's): `kernel_params` (cuLaunchKernel's, a pointer to each argument) or
 * else `extra`'s buffer. CUDA_ERROR_INVALID_VALUE when neither gives the kernel's parameters. */
CUresult cusw_kernel_action(const struct cusw_function *f, const unsigned int grid[3],
                            const unsigned int block[3], unsigned int shared_bytes,
                            CUstream stream, void **kernel_params, void **extra,
                            struct cusw_action *out);

/* Every stream wait on memory reads its word once every `usec` from now on; 0 restores the
 * backoff (cuswSetWaitPollInterval). */
void cusw_set_wait_poll_interval(unsigned int usec);
/* Runs the action on the calling (worker) thread, unlocked. */
void cusw_action_run(const struct cusw_action *a, struct cusw_ctx *ctx);
/* Called when the action is enqueued on a stream: counts the host functions it will run or skip
 * (cusw_action_run uncounts each one as it finishes). */
void cusw_action_enqueued(const struct cusw_action *a);
unsigned long long cusw_pending_host_functions(void);
/* [locked] The action as a stream enqueues it: a copy asked to stage its source reads it now, into
 * a buffer the action owns. False when out of memory. */
bool cusw_action_stage(struct cusw_action *a);
/* [locked] *dst becomes `src` with references of its own to what `src` shares (a batch): how a
 * node, a clone, an executable and a launch each hold an action. */
void cusw_action_copy(struct cusw_action *dst, const struct cusw_action *src);
/* [locked] Drops the references the action holds (event, launch snapshot, staged source, batch). */
void cusw_action_release(struct cusw_action *a);
CUgraphNodeType cusw_action_node_type(const struct cusw_action *a);
/* Whether two actions of one kind have the same parameters, as a node's (a recapture compares
 * them): a host function and its data, a copy's or a set's memory and values, a batch's
 * operations, a kernel's geometry and arguments (not the stream it was launched on). */
bool cusw_action_same_params(const struct cusw_action *a, const struct cusw_action *b);
/* The node parameters of the action, as cuGraphNodeGetParams would read them: a host node's
 * and a batch node's filled in (a batch's operations are the batch's own array, valid while it
 * is held); of the other types, only the type (cudasw.h does not declare their parameters). */
void cusw_action_node_params(const struct cusw_action *a, CUgraphNodeParams *out);

/* Stream memory operations as one action, what cuStreamBatchMemOp_v2 and each single operation
 * enqueue, and a batch node's parameters: unchanged once made (new parameters make a new batch),
 * so the copies of an action share it; freed with the last reference. */
struct cusw_batch {
    unsigned int refs; /* [locked] */
    struct cusw_ctx *ctx;
    unsigned int count;
    struct cusw_action *ops;            /* count writes and waits, run in this order */
    CUstreamBatchMemOpParams params[];  /* count, as given: what the node's parameters read back */
};

#define CUSW_BATCH_MAX 256

/* CUDA_SUCCESS when `ops` are 1 to CUSW_BATCH_MAX operations this driver takes, each a write or a
 * wait as cusw_mem_op_action takes it; CUDA_ERROR_NOT_SUPPORTED for a 64-bit one or a NOR wait
 * where the device reports them unsupported (CAN_USE_64_BIT_STREAM_MEM_OPS,
 * CAN_USE_STREAM_WAIT_VALUE_NOR); CUDA_ERROR_INVALID_VALUE otherwise. */
CUresult cusw_batch_check(unsigned int count, const CUstreamBatchMemOpParams *ops);
/* The write or wait `op` describes, or false for one this driver does not take: a null or
 * misaligned address; a wait's flags other than a comparison (FLUSH needs
 * CAN_FLUSH_REMOTE_WRITES, which this device reports as 0); a write's other than the default
 * (NO_MEMORY_BARRIER is not supported by the v2 API); another operation (a flush of remote
 * writes, a barrier, an atomic reduction). */
bool cusw_mem_op_action(const CUstreamBatchMemOpParams *op, struct cusw_action *a);
/* [locked] A batch action of operations cusw_batch_check took, in `ctx`, holding the one
 * reference (the caller's). False when out of memory. */
bool cusw_batch_action(struct cusw_ctx *ctx, unsigned int count,
                       const CUstreamBatchMemOpParams *ops, struct cusw_action *out);
/* [locked] A batch action of a batch node's parameters, holding the one reference (the caller's):
 * CUDA_ERROR_INVALID_VALUE for parameters cusw_batch_check refuses or flags other than 0,
 * CUDA_ERROR_INVALID_CONTEXT unless `p->ctx` names a context (neither measured). */
CUresult cusw_batch_params_action(const CUDA_BATCH_MEM_OP_NODE_PARAMS *p, struct cusw_action *out);
/* Whether two batch actions differ only in what an executable's batch node may change: the
 * addresses, the values and a wait's comparison; not the context, the count or an operation's
 * type. */
bool cusw_batch_same_shape(const struct cusw_action *a, const struct cusw_action *b);

/* ---- What runs a stream (model/worker.c) ----------------------------------------------------- */

/* An operation in a stream's queue. */
struct cusw_op {
    struct cusw_op *next;
    uint64_t seq;
    struct cusw_dep *deps;
    size_t ndeps;
    struct cusw_action action;
};

/* [locked] A new stream with its worker. */
struct cusw_stream *cusw_stream_create(struct cusw_ctx *ctx, enum cusw_stream_kind kind,
                                       unsigned int flags);
/* [locked] Invalidates the handle at once and leaves the capture; the worker drains pending work,
 * then exits. */
void cusw_stream_destroy(struct cusw_stream *s);
/* [locked] Appends an operation (with extra dependencies, also the implicit legacy-stream ones). */
CUresult cusw_stream_enqueue(struct cusw_stream *s, const struct cusw_action *a,
                             const struct cusw_dep *extra, size_t nextra);
/* [locked] Waits until the stream has completed everything enqueued so far. */
void cusw_stream_drain(struct cusw_stream *s);

/* ---- Graphs and their nodes (model/graph.c) -------------------------------------------------- */

struct cusw_node {
    uintptr_t handle;
    struct cusw_graph *graph;
    struct cusw_action action;
    struct cusw_node **deps;
    size_t ndeps, deps_capacity;
    size_t scratch;       /* index during instantiation and cloning */
    uint64_t visit_epoch; /* cuStreamEndCapture's join check */
};

struct cusw_graph {
    uintptr_t handle;
    struct cusw_node **nodes;
    size_t n_nodes, nodes_capacity;
    struct cusw_uref_list urefs;
    struct cusw_capture *capture; /* non-NULL while a capture builds this graph */
};

struct cusw_graph *cusw_graph_new(void); /* [locked] registered */
void cusw_graph_free(struct cusw_graph *g); /* [locked] unregisters, releases user objects */
/* [locked] Adds a node holding a copy of `a` of its own (cusw_action_copy); deps must be nodes
 * of g. */
struct cusw_node *cusw_graph_add_node(struct cusw_graph *g, const struct cusw_action *a,
                                      struct cusw_node *const *deps, size_t ndeps);
bool cusw_node_add_dep(struct cusw_node *n, struct cusw_node *dep); /* [locked] an edge dep -> n */
bool cusw_node_has_dep(const struct cusw_node *n, const struct cusw_node *dep);
/* Whether n's dependencies are exactly the `ndeps` distinct nodes `deps`, in any order. */
bool cusw_node_deps_are(const struct cusw_node *n, struct cusw_node *const *deps, size_t ndeps);
/* [locked] The node takes the parameters of `a` (a copy of its own), letting go of its own. */
void cusw_node_set_action(struct cusw_node *n, const struct cusw_action *a);
/* [locked] The nodes the API handles `handles` name, each a distinct node of g, in an array the
 * caller frees (NULL when n is 0); CUDA_ERROR_INVALID_VALUE for any other handle. */
CUresult cusw_graph_nodes_of(struct cusw_graph *g, const CUgraphNode *handles, size_t n,
                             struct cusw_node ***out);
/* Whether the edge data given with dependencies is absent or all default edges, the only ones
 * the driver models (other ports and types concern kernel nodes). */
bool cusw_edges_default(const CUgraphEdgeData *edges, size_t n);
/* [locked] The graph lets go of every user-object reference it holds; destructors made due run
 * inside the calling API call, as cuGraphDestroy's do. */
void cusw_graph_release_user_objects(struct cusw_graph *g);
/* [locked] A copy of g with its nodes, edges and references of its own to g's user objects. */
CUresult cusw_graph_clone(struct cusw_graph *g, struct cusw_graph **out);

/* ---- Stream capture (model/capture.c) -------------------------------------------------------- */

struct cusw_capture {
    uint64_t id;
    CUstreamCaptureMode mode;
    bool invalidated;
    uint64_t thread_serial; /* the thread that began it */
    struct cusw_graph *graph;
    bool owns_graph; /* false when capturing into the caller's graph, which it never frees */
    /* cuStreamBeginRecaptureToGraph's: the graph's first `count` nodes, in creation order, are
     * matched by the nodes captured; `next` is the next to match. A failed recapture is
     * invalidated too, and answers CUDA_ERROR_GRAPH_RECAPTURE_FAILURE. */
    struct {
        bool active, failed;
        size_t next, count;
        CUgraphRecaptureCallback callback;
        void *data;
    } recapture;
    struct cusw_stream *origin;
    struct cusw_stream **members; /* origin included */
    size_t n_members, members_capacity;
    struct cusw_capture *next;
};

/* [locked] Begins a capture of `s` in `mode` by the calling thread. */
CUresult cusw_capture_begin(struct cusw_stream *s, CUstreamCaptureMode mode);
/* [locked] The same into the caller's graph g (not being captured into, else
 * CUDA_ERROR_ILLEGAL_STATE), its first node depending on `deps`, nodes of g. */
CUresult cusw_capture_begin_to_graph(struct cusw_stream *s, CUstreamCaptureMode mode,
                                     struct cusw_graph *g, struct cusw_node *const *deps,
                                     size_t ndeps);
/* [locked] The same as a recapture of g: g lets go of its user objects first; the nodes captured
 * must match g's in creation order, type and dependencies, and each whose parameters differ
 * takes the new ones, `callback` (if any) called with `data` about it. */
CUresult cusw_capture_begin_recapture(struct cusw_stream *s, CUstreamCaptureMode mode,
                                      struct cusw_graph *g, CUgraphRecaptureCallback callback,
                                      void *data);
/* [locked] Ends the capture `s` began: its graph to *graph, or an error and no graph. */
CUresult cusw_capture_end(struct cusw_stream *s, CUgraph *graph);
/* [locked] Called before an operation is enqueued on `s`: answers 906 (and invalidates) when `s` is
 * the legacy stream while a blocking stream of its context captures, 901 on an invalidated capture.
 * *capturing tells whether the operation must become a graph node (cusw_capture_add_node). */
CUresult cusw_capture_check_enqueue(struct cusw_stream *s, bool *capturing);
/* [locked] Adds a node for the action to the capture of `s`, depending on the current
 * dependencies of `s`, and makes it the new dependency set. */
CUresult cusw_capture_add_node(struct cusw_stream *s, const struct cusw_action *a);
/* [locked] For stream-synchronising calls on `s` (synchronize, query): answers 900/901/906 and
 * invalidates as the real driver does. */
CUresult cusw_capture_check_sync(struct cusw_stream *s);
/* [locked] For "potentially unsafe" calls (allocation, context sync). */
CUresult cusw_capture_check_unsafe(void);
/* The calling thread's capture interaction mode becomes `mode`; answers the one before. */
CUstreamCaptureMode cusw_capture_exchange_mode(CUstreamCaptureMode mode);
/* [locked] Marks the capture invalidated (it stays until cuStreamEndCapture). */
void cusw_capture_invalidate(struct cusw_capture *c);
/* [locked] Event waits across streams during capture (fork/join): `s` joins capture `c` with the
 * given dependency set, or (already a member) adds the nodes to its dependency set. */
CUresult cusw_capture_join(struct cusw_capture *c, struct cusw_stream *s,
                           struct cusw_node *const *nodes, size_t n);
/* [locked] A stream leaves its capture because it is being destroyed. */
void cusw_capture_stream_gone(struct cusw_stream *s);
struct cusw_capture *cusw_capture_find(uint64_t id); /* [locked] */
/* [locked] The capture, still going on, that `e` was last recorded in, or NULL. */
struct cusw_capture *cusw_capture_of_event(const struct cusw_event *e);
CUstreamCaptureStatus cusw_capture_status(const struct cusw_stream *s); /* [locked] */
/* [locked] Whether `s` is the legacy stream while a blocking stream of its context captures. */
bool cusw_capture_implicit(const struct cusw_stream *s);
/* [locked] The dependency nodes of the active capture of `s`, with their (default) edge data,
 * in arrays of `s` that stay valid until the next such call on it. */
CUresult cusw_capture_dependencies(struct cusw_stream *s, const CUgraphNode **nodes,
                                   const CUgraphEdgeData **edges);

/* ---- Executable graphs (model/exec.c) -------------------------------------------------------- */

struct cusw_exec;

/* [locked] An executable of `g` in `ctx`, registered. */
CUresult cusw_exec_new(struct cusw_graph *g, struct cusw_ctx *ctx, struct cusw_exec **out);
uintptr_t cusw_exec_handle(const struct cusw_exec *x);
void cusw_exec_free(struct cusw_exec *x); /* [locked] unregisters, releases user objects */
/* [locked] One launch on `s`, or, `capturing`, its nodes added to the capture of `s`. */
CUresult cusw_exec_launch(struct cusw_exec *x, struct cusw_stream *s, bool capturing);
/* [locked] An upload on `s`: ordered behind the stream's work and the executable's launches. */
CUresult cusw_exec_upload(struct cusw_exec *x, struct cusw_stream *s);
/* [locked] The host node made from graph node `node` runs fn(data) from the next launch on. */
CUresult cusw_exec_set_host_params(struct cusw_exec *x, CUgraphNode node, CUhostFn fn,
                                   void *data);
/* [locked] The batch node made from graph node `node` runs the batch `a` from the next launch
 * on (the executable takes a reference of its own), if `a` has the node's shape
 * (cusw_batch_same_shape); else CUDA_ERROR_INVALID_VALUE. */
CUresult cusw_exec_set_batch_params(struct cusw_exec *x, CUgraphNode node,
                                    const struct cusw_action *a);
/* [locked] cuGraphExecUpdate's work: when `g` has the topology of the executable's graph (its
 * nodes in creation order, their types, each node's edges in order) and each batch node the
 * shape of its pair (cusw_batch_same_shape), every node's parameters come from `g`'s node
 * paired with it, and the executable's user-object references are replaced
 * by references of its own to `g`'s (the old ones, released now, live on in launches in flight).
 * Otherwise CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE and nothing changes. Either way *info says
 * which (its nodes are `g`'s). */
CUresult cusw_exec_update(struct cusw_exec *x, struct cusw_graph *g,
                          CUgraphExecUpdateResultInfo *info);

/* ---- Memory (model/memory.c) ----------------------------------------------------------------- */

enum cusw_memory_kind { CUSW_MEMORY_DEVICE, CUSW_MEMORY_HOST, CUSW_MEMORY_MANAGED };

/* [locked] Device, page-locked host (cuMemHostAlloc) or managed (cuMemAllocManaged) memory in the
 * current context. */
CUresult cusw_memory_allocate(size_t size, enum cusw_memory_kind kind, void **out);
/* [locked] Frees an allocation, of page-locked host memory (`host`) or else of device or managed
 * memory or a stream-ordered allocation, once its context has drained. */
CUresult cusw_memory_free(void *p, bool host);
bool cusw_memory_is_page_locked(const void *p); /* [locked] inside a cuMemHostAlloc allocation */
/* [locked] Whether [p, p + bytes) is inside one cuMemAllocManaged allocation. */
bool cusw_memory_is_managed(const void *p, size_t bytes);
size_t cusw_device_memory_free(int device); /* [locked] */
void cusw_memory_release_context(struct cusw_ctx *ctx); /* [locked] frees its allocations */
void cusw_memory_counts(size_t *host, size_t *device); /* [locked] live allocations */
/* How a copy from src to dst behaves (takes the lock). Of the async copies, one into pageable host
 * memory, or between two host buffers, returns only once its stream has done it; one from
 * pageable host memory to the device reads its source before it returns; any other returns at
 * once. Of the synchronous ones, every copy but one between two device allocations returns only
 * once done. */
enum cusw_copy_rule { CUSW_COPY_RETURNS_AT_ONCE, CUSW_COPY_STAGES_SOURCE, CUSW_COPY_WAITS };
enum cusw_copy_rule cusw_copy_rule(const void *dst, const void *src, bool async);
/* Whether a synchronous set of memory at dst returns only once done: into page-locked memory. */
bool cusw_set_waits_for_stream(const void *dst);

/* ---- Stream arguments and submission (model/submit.c) ---------------------------------------- */

/* [locked] Resolves an API stream argument: NULL means the legacy stream, or the per-thread stream
 * for the _ptsz twins; CU_STREAM_LEGACY / CU_STREAM_PER_THREAD name the current
 * context's. Checks the context (see cusw_ctx_check). */
CUresult cusw_stream_resolve(CUstream handle, bool per_thread, struct cusw_stream **out);
/* Submits a stream-ordered action (takes the lock): checks initialisation, resolves the stream,
 * applies the capture rules (while capturing, the action becomes a graph node) and enqueues it. */
CUresult cusw_submit(CUstream stream, bool per_thread, const struct cusw_action *a);
/* Same, but unless the action was captured, returns only once the stream has run it (in its
 * order, on its worker), answering the context's sticky error if one arose meanwhile. */
CUresult cusw_submit_and_wait(CUstream stream, bool per_thread, const struct cusw_action *a);
/* Submits the stream memory operations `ops` (cusw_batch_check took them) as one batch action in
 * the stream's context: one operation of the stream, or one node of its capture. */
CUresult cusw_submit_batch(CUstream stream, bool per_thread, unsigned int count,
                           const CUstreamBatchMemOpParams *ops);

/* A stream-ordered allocation of `size` bytes from `pool` (NULL: the current pool of the stream's
 * device) at this point of the stream, its address to *out; CUDA_ERROR_NOT_SUPPORTED while the
 * stream captures (graph memory nodes are not modelled). */
CUresult cusw_submit_allocation(CUstream stream, bool per_thread, CUmemoryPool pool, size_t size,
                                CUdeviceptr *out);
/* A stream-ordered free of the allocation at `memory`, at this point of the stream;
 * CUDA_ERROR_INVALID_VALUE unless it is one that is neither freed nor to be freed. */
CUresult cusw_submit_free(CUstream stream, bool per_thread, CUdeviceptr memory);

/* A launch of `function` (a function, or a library's kernel standing for its function in the
 * stream's context) on `stream`: checked against the device's limits and the function's
 * (CUDA_ERROR_INVALID_VALUE; a `cooperative` grid larger than the blocks that fit on the device at
 * once, CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE), then one operation of the stream, or one node
 * of its capture, that runs the kernel's stand-in. */
CUresult cusw_submit_kernel(CUstream stream, bool per_thread, CUfunction function,
                            const unsigned int grid[3], const unsigned int block[3],
                            unsigned int shared_bytes, void **kernel_params, void **extra,
                            bool cooperative);

/* ---- Activation and deactivation of contexts (model/activation.c) ---------------------------- */

/* [locked] A retain of a primary context: the first one activates it (unless it has a sticky
 * error, which it answers). */
CUresult cusw_primary_ctx_retain(struct cusw_ctx *c);
/* [locked] A release: the last one deactivates it. CUDA_ERROR_INVALID_CONTEXT if none is held. */
CUresult cusw_primary_ctx_release(struct cusw_ctx *c);
/* [locked] Activates a context cusw_ctx_new made. */
CUresult cusw_ctx_activate(struct cusw_ctx *c);
/* [locked] Deactivates a context cusw_ctx_new made and invalidates its handle; the object stays,
 * so that threads it is current to are answered CUDA_ERROR_CONTEXT_IS_DESTROYED. */
void cusw_ctx_destroy(struct cusw_ctx *c);

/* ---- Every call (model/calls.c) -------------------------------------------------------------- */

/* One per exported function (a static in CUSW_ENTRY), put on a process-wide list at its first
 * call; cuswCallCount sums the sites whose base or exported name matches. */
struct cusw_call_site {
    const char *symbol;
    _Atomic(const char *) base; /* looked up at the first call */
    atomic_ullong calls;
    atomic_bool listed;
    struct cusw_call_site *next; /* written once, before the site is published */
};

/* CUSW_ENTRY's work: what a test armed for the call (a delay, a capture begun first), the count,
 * and whether an armed failure takes the call (then *injected is its answer). */
bool cusw_enter(struct cusw_call_site *site, CUresult *injected);
/* Calls of the sites whose exported name, or with `by_base` also whose base name, is `entry`. */
unsigned long long cusw_calls_of(const char *entry, bool by_base);
void cusw_count_host_task_sync_mode(unsigned int syncMode); /* cuLaunchHostFunc_v2's */
/* An unmodelled entry point's answer (api/unmodelled.c): counts the call, names `symbol` in the
 * log the first time (`*logged` is its function's own flag), and answers
 * CUDA_ERROR_NOT_SUPPORTED. */
CUresult cusw_unmodelled_call(const char *symbol, atomic_bool *logged);
unsigned long long cusw_unmodelled_calls(void); /* since load, every unmodelled entry point's */
unsigned long long cusw_host_task_sync_mode_launches(unsigned int syncMode);

/* ---- The exported functions (entries.def; api/) ---------------------------------------------- */

#define ENTRY(base, version, name, params) CUresult name params;
#define TWIN(base, version, name, params) CUresult name params; CUresult name##_ptsz params;
#define PTDS_TWIN(base, version, name, params) CUresult name params; CUresult name##_ptds params;
#define CONTROL(name)
#include "entries.def"
#undef ENTRY
#undef TWIN
#undef PTDS_TWIN
#undef CONTROL

/* The functions the driver exports without modelling them (unmodelled.def, which the build writes
 * from exports.txt less entries.def): declared without parameters, which they never read
 * (api/unmodelled.c says why that is sound). */
#define UNMODELLED(base, version, name) CUresult name(void);
#define UNMODELLED_TWIN(base, version, name, twin) CUresult name(void); CUresult twin(void);
#include "unmodelled.def"
#undef UNMODELLED
#undef UNMODELLED_TWIN

#endif /* CUSW_INTERNAL_H */

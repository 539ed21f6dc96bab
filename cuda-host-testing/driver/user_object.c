/*
 * user_object.c - user objects, the references graphs/executables/launches hold on them, and
 * where their destructors run.
 *
 * Ownership follows the real driver: the application holds the references it created or
 * retained; a graph holds its own (cuGraphRetainUserObject adds them, or with
 * CU_GRAPH_USER_OBJECT_MOVE takes over the caller's); a clone gets references of its own; an
 * executable holds references to all of its graph's user objects until destroyed; a launch holds
 * references until it has finished.
 *
 * Where the destructor runs when the last reference goes (measured on the real driver, H200,
 * 580.159.04): on the thread that drops it, inside that API call (cuUserObjectRelease on any
 * thread, cuGraphReleaseUserObject, cuGraphDestroy, cuGraphExecDestroy of an executable never
 * launched), before the call returns. Only what a launch held, or an executable that has been
 * launched (even if its launches have all finished), goes later, on one process-wide destructor
 * thread that is neither the host-function thread nor the caller's (about 0.1 ms after
 * cuGraphExecDestroy). The software driver drops a launched executable's references at once, in
 * cuGraphExecDestroy, and hands the destructors they make due to that thread.
 *
 * User code never runs under cusw_lock: an inline destructor is deferred to the releasing thread's
 * cusw_lock_release (runtime.c), which runs it once it has unlocked, still inside the API call. A
 * destructor may itself call the driver.
 */
#include "internal.h"

#include <stddef.h>
#include <stdlib.h>

static atomic_ullong objects_alive;
static atomic_ullong destructors_run;

/* Runs the destructor of an unreferenced user object (unlocked) and frees it. */
static void run_destructor(struct cusw_user_object *o)
{
    o->destroy(o->ptr);
    free(o);
    atomic_fetch_add(&destructors_run, 1);
    atomic_fetch_sub(&objects_alive, 1);
}

/* ---- Inline destructors: run by the releasing thread once it unlocks ------------------------ */

static void run_deferred_destructor(struct cusw_deferred *d)
{
    run_destructor((struct cusw_user_object *)((char *)d - offsetof(struct cusw_user_object,
                                                                     after_unlock)));
}

static void queue_inline(struct cusw_user_object *o) /* [locked] */
{
    cusw_defer_until_unlocked(&o->after_unlock, run_deferred_destructor);
}

/* ---- Destructor thread ----------------------------------------------------------------------- */

static pthread_mutex_t destructor_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t destructor_work = PTHREAD_COND_INITIALIZER;
static struct cusw_user_object *destructor_head, *destructor_tail;
static pthread_once_t destructor_once = PTHREAD_ONCE_INIT;
static bool destructor_thread_running;

static void *destructor_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&destructor_lock);
    for (;;) {
        while (destructor_head == NULL)
            pthread_cond_wait(&destructor_work, &destructor_lock);
        struct cusw_user_object *o = destructor_head;
        destructor_head = o->next_due;
        if (destructor_head == NULL)
            destructor_tail = NULL;
        pthread_mutex_unlock(&destructor_lock);
        run_destructor(o);
        pthread_mutex_lock(&destructor_lock);
    }
    return NULL;
}

static void start_destructor_thread(void)
{
    destructor_thread_running = cusw_spawn_thread(destructor_main, NULL);
}

static void queue_on_destructor_thread(struct cusw_user_object *o) /* [locked] */
{
    pthread_once(&destructor_once, start_destructor_thread);
    if (!destructor_thread_running) {
        queue_inline(o); /* degraded: runs on the releasing thread once it unlocks */
        return;
    }
    o->next_due = NULL;
    pthread_mutex_lock(&destructor_lock);
    if (destructor_tail != NULL)
        destructor_tail->next_due = o;
    else
        destructor_head = o;
    destructor_tail = o;
    pthread_cond_signal(&destructor_work);
    pthread_mutex_unlock(&destructor_lock);
}

/* ---- References ------------------------------------------------------------------------------ */

void cusw_user_object_retain(struct cusw_user_object *o, unsigned int count) { o->refs += count; }

void cusw_user_object_release(struct cusw_user_object *o, unsigned int count,
                              enum cusw_destroy_route route)
{
    o->refs -= count;
    if (o->refs != 0)
        return;
    cusw_handle_remove(o->handle);
    if (route == CUSW_DESTROY_DRIVER_THREAD)
        queue_on_destructor_thread(o);
    else
        queue_inline(o);
}

bool cusw_urefs_add(struct cusw_uref_list *l, struct cusw_user_object *o, unsigned int count)
{
    for (size_t i = 0; i < l->n; i++) {
        if (l->items[i].object == o) {
            l->items[i].count += count;
            return true;
        }
    }
    if (!cusw_reserve((void **)&l->items, &l->capacity, l->n + 1, sizeof *l->items))
        return false;
    l->items[l->n].object = o;
    l->items[l->n].count = count;
    l->n++;
    return true;
}

bool cusw_urefs_copy(struct cusw_uref_list *dst, const struct cusw_uref_list *src)
{
    for (size_t i = 0; i < src->n; i++) {
        if (!cusw_urefs_add(dst, src->items[i].object, src->items[i].count))
            return false;
        cusw_user_object_retain(src->items[i].object, src->items[i].count);
    }
    return true;
}

void cusw_urefs_release(struct cusw_uref_list *l, enum cusw_destroy_route route)
{
    for (size_t i = 0; i < l->n; i++)
        cusw_user_object_release(l->items[i].object, l->items[i].count, route);
    free(l->items);
    l->items = NULL;
    l->n = l->capacity = 0;
}

/* ---- API ------------------------------------------------------------------------------------- */

CUSW_EXPORT CUresult cuUserObjectCreate(CUuserObject *object_out, void *ptr, CUhostFn destroy,
                                        unsigned int initialRefcount, unsigned int flags)
{
    CUSW_INIT_ENTRY();
    CUresult rc = CUDA_SUCCESS;
    if (object_out == NULL || destroy == NULL || initialRefcount == 0 ||
        flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
        return CUDA_ERROR_INVALID_VALUE;
    struct cusw_user_object *o = calloc(1, sizeof *o);
    if (o == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    o->ptr = ptr;
    o->destroy = destroy;
    o->refs = initialRefcount;
    cusw_lock_acquire();
    o->handle = cusw_handle_new(CUSW_KIND_USER_OBJECT, o);
    if (o->handle == 0) {
        free(o);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        atomic_fetch_add(&objects_alive, 1);
        *object_out = (CUuserObject)o->handle;
    }
    cusw_lock_release();
    return rc;
}

/* The application's retain (`retain`) or release of `count` references. */
static CUresult retain_or_release(CUuserObject object, unsigned int count, bool retain)
{
    if (count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_user_object *o = cusw_handle_get((uintptr_t)object, CUSW_KIND_USER_OBJECT);
    CUresult rc = CUDA_SUCCESS;
    /* Releasing more than exists would take references owned by graphs: refuse. */
    if (o == NULL || (!retain && count > o->refs))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (retain)
        cusw_user_object_retain(o, count);
    else
        cusw_user_object_release(o, count, CUSW_DESTROY_INLINE);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuUserObjectRetain(CUuserObject object, unsigned int count)
{
    CUSW_INIT_ENTRY();
    return retain_or_release(object, count, true);
}

CUSW_EXPORT CUresult cuUserObjectRelease(CUuserObject object, unsigned int count)
{
    CUSW_INIT_ENTRY();
    return retain_or_release(object, count, false);
}

CUSW_EXPORT CUresult cuGraphRetainUserObject(CUgraph graph, CUuserObject object,
                                             unsigned int count, unsigned int flags)
{
    CUSW_INIT_ENTRY();
    CUresult rc = CUDA_SUCCESS;
    if (count == 0 || (flags & ~(unsigned int)CU_GRAPH_USER_OBJECT_MOVE) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_graph *g = cusw_handle_get((uintptr_t)graph, CUSW_KIND_GRAPH);
    struct cusw_user_object *o = cusw_handle_get((uintptr_t)object, CUSW_KIND_USER_OBJECT);
    bool move = (flags & CU_GRAPH_USER_OBJECT_MOVE) != 0;
    if (g == NULL || o == NULL || (move && count > o->refs))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (!cusw_urefs_add(&g->urefs, o, count))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    else if (!move)
        cusw_user_object_retain(o, count); /* new references; a move re-labels the caller's */
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuGraphReleaseUserObject(CUgraph graph, CUuserObject object,
                                              unsigned int count)
{
    CUSW_INIT_ENTRY();
    CUresult rc = CUDA_SUCCESS;
    if (count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_graph *g = cusw_handle_get((uintptr_t)graph, CUSW_KIND_GRAPH);
    struct cusw_user_object *o = cusw_handle_get((uintptr_t)object, CUSW_KIND_USER_OBJECT);
    struct cusw_uref *ref = NULL;
    for (size_t i = 0; g != NULL && o != NULL && i < g->urefs.n; i++)
        if (g->urefs.items[i].object == o)
            ref = &g->urefs.items[i];
    if (ref == NULL || count > ref->count) {
        rc = CUDA_ERROR_INVALID_VALUE; /* the graph does not hold that many */
    } else {
        ref->count -= count;
        if (ref->count == 0)
            *ref = g->urefs.items[--g->urefs.n];
        cusw_user_object_release(o, count, CUSW_DESTROY_INLINE);
    }
    cusw_lock_release();
    return rc;
}

unsigned long long cusw_user_objects_alive(void) { return atomic_load(&objects_alive); }

unsigned long long cusw_user_object_destructors_run(void) { return atomic_load(&destructors_run); }

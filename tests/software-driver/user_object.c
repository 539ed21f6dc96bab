/*
 * user_object.c - user objects, the references graphs/executables/launches hold on them, and the
 * destructor thread.
 *
 * Ownership follows the real driver: the application holds the references it created or
 * retained; a graph holds its own (cuGraphRetainUserObject adds them, or with
 * CU_GRAPH_USER_OBJECT_MOVE takes over the caller's); a clone gets references of its own; an
 * executable holds references to all of its graph's user objects until destroyed; a launch holds
 * references until it has finished. When the last reference goes, the destructor runs
 * asynchronously on one process-wide destructor thread, which is neither the host-function
 * thread nor the caller's (measured on the real driver: about 0.1 ms after the releasing call).
 */
#include "internal.h"
#include "entries.h"

#include <stdlib.h>

/* ---- Destructor thread ----------------------------------------------------------------------- */

struct pending_destructor {
    struct pending_destructor *next;
    CUhostFn destroy;
    void *ptr;
};

static pthread_mutex_t destructor_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t destructor_work = PTHREAD_COND_INITIALIZER;
static struct pending_destructor *destructor_head, *destructor_tail;
static pthread_once_t destructor_once = PTHREAD_ONCE_INIT;
static bool destructor_thread_running;

static atomic_ullong objects_alive;
static atomic_ullong destructors_run;

static void *destructor_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&destructor_lock);
    for (;;) {
        while (destructor_head == NULL)
            pthread_cond_wait(&destructor_work, &destructor_lock);
        struct pending_destructor *d = destructor_head;
        destructor_head = d->next;
        if (destructor_head == NULL)
            destructor_tail = NULL;
        pthread_mutex_unlock(&destructor_lock);
        d->destroy(d->ptr);
        free(d);
        atomic_fetch_add(&destructors_run, 1);
        atomic_fetch_sub(&objects_alive, 1);
        pthread_mutex_lock(&destructor_lock);
    }
    return NULL;
}

static void start_destructor_thread(void)
{
    destructor_thread_running = cusw_spawn_thread(destructor_main, NULL);
}

/* Called under cusw_lock; never runs user code there unless no thread could be started. */
static void schedule_destructor(CUhostFn destroy, void *ptr)
{
    pthread_once(&destructor_once, start_destructor_thread);
    struct pending_destructor *d = malloc(sizeof *d);
    if (!destructor_thread_running || d == NULL) {
        free(d);
        destroy(ptr); /* degraded: better late in the wrong thread than never */
        atomic_fetch_add(&destructors_run, 1);
        atomic_fetch_sub(&objects_alive, 1);
        return;
    }
    d->next = NULL;
    d->destroy = destroy;
    d->ptr = ptr;
    pthread_mutex_lock(&destructor_lock);
    if (destructor_tail != NULL)
        destructor_tail->next = d;
    else
        destructor_head = d;
    destructor_tail = d;
    pthread_cond_signal(&destructor_work);
    pthread_mutex_unlock(&destructor_lock);
}

/* ---- References ------------------------------------------------------------------------------ */

void cusw_user_object_retain(struct cusw_user_object *o, unsigned int count) { o->refs += count; }

void cusw_user_object_release(struct cusw_user_object *o, unsigned int count)
{
    o->refs -= count;
    if (o->refs != 0)
        return;
    cusw_handle_remove(o->handle);
    schedule_destructor(o->destroy, o->ptr);
    free(o);
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

void cusw_urefs_release(struct cusw_uref_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        cusw_user_object_release(l->items[i].object, l->items[i].count);
    free(l->items);
    l->items = NULL;
    l->n = l->capacity = 0;
}

/* ---- API ------------------------------------------------------------------------------------- */

CUSW_EXPORT CUresult cuUserObjectCreate(CUuserObject *object_out, void *ptr, CUhostFn destroy,
                                        unsigned int initialRefcount, unsigned int flags)
{
    CUSW_ENTRY("cuUserObjectCreate", "cuUserObjectCreate");
    CUresult rc = cusw_require_init();
    if (rc != CUDA_SUCCESS)
        return rc;
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

CUSW_EXPORT CUresult cuUserObjectRetain(CUuserObject object, unsigned int count)
{
    CUSW_ENTRY("cuUserObjectRetain", "cuUserObjectRetain");
    CUresult rc = cusw_require_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_user_object *o = cusw_handle_get((uintptr_t)object, CUSW_KIND_USER_OBJECT);
    if (o == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        cusw_user_object_retain(o, count);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuUserObjectRelease(CUuserObject object, unsigned int count)
{
    CUSW_ENTRY("cuUserObjectRelease", "cuUserObjectRelease");
    CUresult rc = cusw_require_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    cusw_lock_acquire();
    struct cusw_user_object *o = cusw_handle_get((uintptr_t)object, CUSW_KIND_USER_OBJECT);
    /* Releasing more than exists would take references owned by graphs: refuse. */
    if (o == NULL || count > o->refs)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        cusw_user_object_release(o, count);
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuGraphRetainUserObject(CUgraph graph, CUuserObject object,
                                             unsigned int count, unsigned int flags)
{
    CUSW_ENTRY("cuGraphRetainUserObject", "cuGraphRetainUserObject");
    CUresult rc = cusw_require_init();
    if (rc != CUDA_SUCCESS)
        return rc;
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
    CUSW_ENTRY("cuGraphReleaseUserObject", "cuGraphReleaseUserObject");
    CUresult rc = cusw_require_init();
    if (rc != CUDA_SUCCESS)
        return rc;
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
        cusw_user_object_release(o, count);
    }
    cusw_lock_release();
    return rc;
}

CUSW_EXPORT CUresult cuswUserObjectStats(unsigned long long *destroyed, unsigned long long *alive)
{
    CUSW_ENTRY("cuswUserObjectStats", "cuswUserObjectStats");
    if (destroyed != NULL)
        *destroyed = atomic_load(&destructors_run);
    if (alive != NULL)
        *alive = atomic_load(&objects_alive);
    return CUDA_SUCCESS;
}

/*
 * user_object.c - user objects, the references graphs, executables and launches hold on them,
 * and where their destructors run.
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
 * cusw_lock_release (lock.c), which runs it once it has unlocked, still inside the API call. A
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

/* ---- Inline destructors: run by the releasing thread once it unlocks ------------------------- */

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

struct cusw_user_object *cusw_user_object_new(void *ptr, CUhostFn destroy, unsigned int refs)
{
    struct cusw_user_object *o = calloc(1, sizeof *o);
    if (o == NULL)
        return NULL;
    o->ptr = ptr;
    o->destroy = destroy;
    o->refs = refs;
    o->handle = cusw_handle_new(CUSW_KIND_USER_OBJECT, o);
    if (o->handle == 0) {
        free(o);
        return NULL;
    }
    atomic_fetch_add(&objects_alive, 1);
    return o;
}

unsigned long long cusw_user_objects_alive(void) { return atomic_load(&objects_alive); }

unsigned long long cusw_user_object_destructors_run(void) { return atomic_load(&destructors_run); }

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

bool cusw_urefs_take(struct cusw_uref_list *l, struct cusw_user_object *o, unsigned int count)
{
    for (size_t i = 0; i < l->n; i++) {
        struct cusw_uref *ref = &l->items[i];
        if (ref->object != o)
            continue;
        if (count > ref->count)
            return false;
        ref->count -= count;
        if (ref->count == 0)
            *ref = l->items[--l->n];
        return true;
    }
    return false;
}

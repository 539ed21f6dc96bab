/*
 * lock.c - the one lock that guards every driver object, the condition variable that tells of
 * stream progress, and the work a holder of the lock defers until it has let go of it (see the
 * concurrency model in internal.h).
 */
#include "internal.h"

pthread_mutex_t cusw_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t cusw_progress = PTHREAD_COND_INITIALIZER;

void cusw_lock_acquire(void) { pthread_mutex_lock(&cusw_lock); }

void cusw_wait_progress(void) { pthread_cond_wait(&cusw_progress, &cusw_lock); }
void cusw_broadcast_progress(void) { pthread_cond_broadcast(&cusw_progress); }

/* Guarded by cusw_lock; each entry is tagged with the thread that deferred it, which takes its
 * own entries in its next cusw_lock_release. So the queue is empty whenever the lock is free,
 * except while a thread that deferred work waits on a condition variable mid-call. (Not
 * thread-local storage: the library is dlopen'd, and its dynamic TLS read by detached driver
 * threads on every unlock makes ThreadSanitizer report glibc freeing it as a race.) */
static struct cusw_deferred *deferred_head, *deferred_tail;

void cusw_defer_until_unlocked(struct cusw_deferred *d, void (*run)(struct cusw_deferred *))
{
    d->thread = pthread_self();
    d->run = run;
    d->next = NULL;
    if (deferred_tail != NULL)
        deferred_tail->next = d;
    else
        deferred_head = d;
    deferred_tail = d;
}

/* [locked] Unlinks the calling thread's entries, in the order they were deferred. */
static struct cusw_deferred *take_own_deferred(void)
{
    if (deferred_head == NULL)
        return NULL; /* the usual case */
    pthread_t self = pthread_self();
    struct cusw_deferred *mine = NULL, **mine_tail = &mine;
    struct cusw_deferred **link = &deferred_head;
    deferred_tail = NULL;
    while (*link != NULL) {
        struct cusw_deferred *d = *link;
        if (pthread_equal(d->thread, self)) {
            *link = d->next;
            d->next = NULL;
            *mine_tail = d;
            mine_tail = &d->next;
        } else {
            deferred_tail = d;
            link = &d->next;
        }
    }
    return mine;
}

void cusw_lock_release(void)
{
    struct cusw_deferred *mine = take_own_deferred();
    pthread_mutex_unlock(&cusw_lock);
    /* User code, never under the lock. What it defers in its own driver calls runs in those
     * calls' unlocks. */
    while (mine != NULL) {
        struct cusw_deferred *d = mine;
        mine = d->next; /* read first: running it may free it */
        d->run(d);
    }
}

//! Dropping finished records: on which thread, when, and what a panicking `Drop` does. The lists
//! they wait on are `record`'s inboxes.
//!
//! **Which thread drops what.** Every record has a home: the inbox of the thread that made it
//! (the thread that launched a host function, added a graph's callable, or dropped a stream).
//! When the record is finished (its host function ran, its context failed, its user object was
//! released) it goes to its home inbox, and that thread drops it at its next cuda-host call or
//! [`reclaim`]. A thread is never handed another thread's values, so a thread that holds a lock
//! cannot be made to run a `Drop` that needs it. When a thread exits, its inbox closes: what it
//! held, and whatever finishes later, goes to the shared list, which every thread drains.
//! Records made where no inbox exists (during the thread's own teardown) go there too.
//!
//! **When not to drop.** Rules 1 and 2 of the folder's map (`launch`): never on a host
//! function's thread, where a `Drop` may not call CUDA, and never during a builder capture
//! , which a `Drop` that frees memory would invalidate.
//!
//! **Panics.** Each drop is caught: a `Drop` that panics is reported (log and hook, as coming
//! from a `Drop`) and the drain goes on; the call that drained is not disturbed.
//!
//! The driver's thread only pushes (one compare-and-swap); a drain takes a whole list with one
//! swap. A list holds at most the records of work in flight plus those finished since its
//! thread's last call.

use crate::contain::in_host_function;
use crate::error::{Error, Result};
use crate::launch::held::{self, Look};
use crate::launch::panic_report;
use crate::launch::record::{self, HELD_RECORDS, RecordHeader, SHARED, ThreadState};
use crate::launch::record_list::last_of;
use crate::launch::slot;
use std::num::NonZeroU32;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// Global-mode builder captures and not yet ended.
static GLOBAL_CAPTURES: AtomicUsize = AtomicUsize::new(0);
static LAUNCH_INTERVAL: AtomicU32 = AtomicU32::new(1);

/// Makes launches reclaim on every `launches`-th launch of each thread instead of on every
/// launch (the default, 1). Synchronize, stream drop and [`reclaim`] always reclaim.
///
/// Each reclaim looks at the calling thread's inbox, which the driver's thread pushes onto;
/// with a larger interval that cache line moves less often, at the cost of up to `launches`
/// more finished records (and their captured values) per launching thread waiting to be
/// dropped. `docs/PERFORMANCE.md` has the measurements.
pub fn set_launch_reclaim_interval(launches: NonZeroU32) {
    LAUNCH_INTERVAL.store(launches.get(), Ordering::Relaxed);
}

/// What each launch calls: reclaims on every interval-th launch of the calling thread.
#[inline]
pub(crate) fn reclaim_on_launch() {
    let interval = LAUNCH_INTERVAL.load(Ordering::Relaxed);
    let due = record::with_thread(|thread| {
        let launches = thread.launches_since_reclaim.get() + 1;
        let due = launches >= interval;
        thread
            .launches_since_reclaim
            .set(if due { 0 } else { launches });
        due
    });
    if due == Some(true) {
        record::with_thread(|thread| drain(thread, Look::Paced));
    }
}

/// Drops the finished records of the calling thread's launches (and those of threads that
/// exited) on the calling thread; returns how many. A thread has exited, here, once its
/// thread-local destructors ran: an explicit `join` waits for them, the implicit join at the end
/// of `std::thread::scope` does not.
///
/// cuda-host calls it on each launch, stream synchronize and stream drop; call it yourself to
/// release captured values promptly when a thread makes no other cuda-host call for a while.
/// It does nothing inside a host function, on a thread that is capturing a stream through
/// cuda-host, or while a global-mode builder capture is open (the crate
/// documentation's [How it works](crate#how-it-works) says why). A `Drop` that panics is reported through the panic hook and the
/// drain goes on: this function never panics.
///
/// Values released in stream order are looked at afresh here (their streams' events queried),
/// where a launch's drain looks at each stream at most every 50 µs.
pub fn reclaim() -> usize {
    record::with_thread(|thread| drain(thread, Look::Fresh)).unwrap_or(0)
}

fn drain(thread: &ThreadState, look: Look) -> usize {
    if !may_drain(thread) {
        return 0;
    }
    // Values released in stream order whose points were passed join the inboxes first (this
    // only moves records; no `Drop` runs).
    if HELD_RECORDS.load(Ordering::Relaxed) != 0 {
        held::release_passed(look);
    }
    let own_empty = thread
        .existing_inbox()
        .is_none_or(|inbox| inbox.list.is_empty());
    if own_empty && SHARED.is_empty() {
        return 0;
    }
    let inbox = std::sync::Arc::clone(thread.inbox());
    let depth = thread.drain_depth.get();
    if depth == 0 {
        // Sequentially consistent with a global-mode capture's count and wait: either the
        // capture sees this drain and waits for it, or this drain sees the capture.
        inbox.draining.store(true, Ordering::SeqCst);
        if GLOBAL_CAPTURES.load(Ordering::SeqCst) != 0 {
            inbox.draining.store(false, Ordering::SeqCst);
            return 0;
        }
    }
    thread.drain_depth.set(depth + 1);
    let mut count = drop_chain(thread, inbox.list.take());
    if !SHARED.is_empty() {
        count += drop_chain(thread, SHARED.take());
    }
    thread.drain_depth.set(depth);
    if depth == 0 {
        inbox.draining.store(false, Ordering::SeqCst);
    }
    slot::return_released();
    count
}

/// Whether this thread may run user `Drop`s now.
fn may_drain(thread: &ThreadState) -> bool {
    !in_host_function()
        && thread.capturing.get() == 0
        && GLOBAL_CAPTURES.load(Ordering::Relaxed) == 0
}

/// Drops the records of the chain at `first`, each under `catch_unwind`; stops where a `Drop`
/// made draining wrong (it began a capture), handing the rest back to this thread's inbox.
fn drop_chain(thread: &ThreadState, mut next: *mut RecordHeader) -> usize {
    let mut count = 0;
    while let Some(record) = NonNull::new(next) {
        if thread.capturing.get() != 0 {
            // SAFETY: the rest of the chain is ours; it goes back to this thread's list, which
            // is open while the thread runs.
            let _ = unsafe { thread.inbox().list.push_chain(next, last_of(next)) };
            break;
        }
        // SAFETY: the chain is ours; the link is read before the record is dropped.
        next = unsafe { *<RecordHeader as crate::launch::record_list::Linked>::next(next) };
        // SAFETY: the record left its list, so this is its only owner; it is dropped once.
        let dropped = catch_unwind(AssertUnwindSafe(|| unsafe { RecordHeader::drop(record) }));
        if let Err(payload) = dropped {
            panic_report::report_drop_panic(payload);
        }
        count += 1;
    }
    count
}

/// Runs `call`, a driver call that a capture forbids (an allocation or a free of memory), unless a
/// builder capture forbids it now: one of this thread's, or a global-mode one of
/// any thread; `None` then, and `call` is not made. A global-mode capture that begins meanwhile
/// waits until `call` returned, as it waits for a drain.
pub(crate) fn unless_capture_forbids<T>(call: impl FnOnce() -> T) -> Option<T> {
    let mut call = Some(call);
    let guarded = record::with_thread(|thread| {
        if thread.capturing.get() != 0 {
            return None;
        }
        let depth = thread.drain_depth.get();
        let inbox = std::sync::Arc::clone(thread.inbox());
        if depth == 0 {
            // As a drain does: either a capture beginning sees this flag and waits, or this
            // call sees the capture.
            inbox.draining.store(true, Ordering::SeqCst);
            if GLOBAL_CAPTURES.load(Ordering::SeqCst) != 0 {
                inbox.draining.store(false, Ordering::SeqCst);
                return None;
            }
        }
        thread.drain_depth.set(depth + 1);
        let answer = call.take().map(|call| call());
        thread.drain_depth.set(depth);
        if depth == 0 {
            inbox.draining.store(false, Ordering::SeqCst);
        }
        answer
    });
    match guarded {
        Some(answer) => answer,
        // The thread is being torn down: no capture of its own is open any more.
        None => match call {
            Some(call) if GLOBAL_CAPTURES.load(Ordering::SeqCst) == 0 => Some(call()),
            _ => None,
        },
    }
}

/// Drops a record the calling thread owns as soon as the rule allows: now if this thread may run
/// drops (the drop is caught and reported like a drain's), else at its next call that may; inside
/// a host function, on the thread whose host function is running. How refused launches and
/// failed attachments let go of their values.
///
/// # Safety
/// `record` must be live and owned by the caller; ownership passes on.
pub(crate) unsafe fn drop_soon(record: NonNull<RecordHeader>) {
    if in_host_function() {
        // SAFETY: per the caller.
        unsafe { record::defer(record) };
        return;
    }
    // SAFETY: per the caller.
    unsafe { record::keep_here(record) };
    reclaim();
}

/// Drops `value` as soon as the rule allows (see [`drop_soon`]).
pub(crate) fn drop_when_allowed<T: Send + 'static>(value: T) {
    // SAFETY: a fresh record, owned here.
    unsafe { drop_soon(record::holding(value, None, None)) };
}

/// `Ok(value)` outside a host function; inside one (on the driver's thread) the refusal a
/// cuda-host call answers there, with `value` (a user's closure) dropped later on the thread whose
/// host function is running rather than here.
pub(crate) fn outside_host_function<T: Send + 'static>(call: &'static str, value: T) -> Result<T> {
    if in_host_function() {
        drop_when_allowed(value);
        Err(Error::InHostFunction { call })
    } else {
        Ok(value)
    }
}

/// Runs `call` now, or, inside a host function, later on the thread whose host function is
/// running. `Drop`s that destroy driver objects use it.
pub(crate) fn call_outside_host_function(call: impl FnOnce() + Send + 'static) {
    if in_host_function() {
        // SAFETY: a fresh record, owned here; ownership passes to the list.
        unsafe { record::defer(record::calling(call)) };
    } else {
        call();
    }
}

/// A builder capture, as drains see it: while it is open, this thread does not
/// drain, and for a global-mode capture no thread does. Made before the capture begins (it then
/// waits for drains in progress on other threads), dropped when it has ended. Not `Send`: it
/// belongs to the capturing thread.
#[derive(Debug)]
pub(crate) struct CaptureMark {
    global: bool,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl CaptureMark {
    /// Marks this thread as capturing; for a global-mode capture, also stops drains everywhere
    /// and waits for those in progress on other threads to finish.
    pub(crate) fn new(global: bool) -> CaptureMark {
        let own = record::with_thread(|thread| {
            thread.capturing.set(thread.capturing.get() + 1);
            thread.existing_inbox().cloned()
        })
        .flatten();
        if global {
            GLOBAL_CAPTURES.fetch_add(1, Ordering::SeqCst);
            for inbox in record::every_inbox() {
                if own
                    .as_ref()
                    .is_some_and(|own| std::sync::Arc::ptr_eq(own, &inbox))
                {
                    continue;
                }
                while inbox.draining.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
            }
        }
        CaptureMark {
            global,
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for CaptureMark {
    fn drop(&mut self) {
        let _ = record::with_thread(|thread| thread.capturing.set(thread.capturing.get() - 1));
        if self.global {
            GLOBAL_CAPTURES.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

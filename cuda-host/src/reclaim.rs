//! The reclaim lists: finished records wait here until a caller's thread drops them.
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
//! **When not to drop.** Never on the driver's thread (inside a host function): a `Drop` may call
//! CUDA, which the driver forbids there. Never on a thread that is capturing a stream through
//! cuda-host, nor anywhere while a global-mode capture begun through cuda-host is open: a `Drop`
//! that frees memory would invalidate it. A drain that may not run leaves everything for the
//! next call that may. Captures begun by other code are invisible here: a `Drop` that frees
//! memory during another library's global-mode capture still invalidates it.
//!
//! **Panics.** Each drop is caught: a `Drop` that panics is reported (log and hook, as coming
//! from a `Drop`) and the drain goes on; the call that drained is not disturbed.
//!
//! The driver's thread only pushes (one compare-and-swap); a drain takes a whole list with one
//! swap. A list holds at most the records of work in flight plus those finished since its
//! thread's last call.

use crate::panic_report;
use crate::record::RecordHeader;
use crate::record_list::{RecordList, last_of};
use crate::trampoline;
use std::cell::{Cell, OnceCell};
use std::num::NonZeroU32;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// A thread's reclaim list.
pub(crate) struct Inbox {
    list: RecordList<RecordHeader>,
    /// Set while the owning thread drains: a global-mode capture waits until it is clear.
    draining: AtomicBool,
}

/// Records whose home thread exited, and records with no home.
static SHARED: RecordList<RecordHeader> = RecordList::new();
/// Every live thread's inbox, for a global-mode capture to wait for drains in progress.
static INBOXES: Mutex<Vec<Arc<Inbox>>> = Mutex::new(Vec::new());
/// Global-mode captures begun through cuda-host and not yet ended.
static GLOBAL_CAPTURES: AtomicUsize = AtomicUsize::new(0);
static LAUNCH_INTERVAL: AtomicU32 = AtomicU32::new(1);

struct ThreadState {
    inbox: OnceCell<Arc<Inbox>>,
    /// Nesting of drains (a `Drop` may call into cuda-host and drain again).
    drain_depth: Cell<u32>,
    /// Captures this thread began through cuda-host and has not ended.
    capturing: Cell<u32>,
    launches_since_reclaim: Cell<u32>,
}

impl Drop for ThreadState {
    fn drop(&mut self) {
        let Some(inbox) = self.inbox.get() else {
            return;
        };
        INBOXES
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|other| !Arc::ptr_eq(other, inbox));
        let first = inbox.list.close();
        if !first.is_null() {
            // SAFETY: the closed list handed its chain over; it passes to the shared list,
            // which is never closed.
            let _ = unsafe { SHARED.push_chain(first, last_of(first)) };
        }
    }
}

thread_local! {
    static THREAD: ThreadState = const {
        ThreadState {
            inbox: OnceCell::new(),
            drain_depth: Cell::new(0),
            capturing: Cell::new(0),
            launches_since_reclaim: Cell::new(0),
        }
    };
}

impl ThreadState {
    fn inbox(&self) -> &Arc<Inbox> {
        self.inbox.get_or_init(|| {
            let inbox = Arc::new(Inbox {
                list: RecordList::new(),
                draining: AtomicBool::new(false),
            });
            INBOXES
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(Arc::clone(&inbox));
            inbox
        })
    }
}

/// The calling thread's inbox, the home of the records it makes; `None` while the thread is
/// being torn down.
pub(crate) fn home() -> Option<Arc<Inbox>> {
    THREAD.try_with(|thread| Arc::clone(thread.inbox())).ok()
}

/// Hands a finished record to its home inbox, or to the shared list when its home thread
/// exited or it has none. Only pushes, so it is right on any thread.
///
/// # Safety
/// `record` must be live and owned by the caller; ownership passes to a list.
pub(crate) unsafe fn finish(record: NonNull<RecordHeader>) {
    let record = record.as_ptr();
    // SAFETY: the record is live (caller).
    let home = unsafe { (*record).home() };
    let refused = match home {
        // SAFETY: the record is the caller's; ownership passes to the list.
        Some(inbox) => unsafe { inbox.list.push(record) },
        None => Err(record),
    };
    if let Err(record) = refused {
        // SAFETY: as above; the shared list is never closed.
        let _ = unsafe { SHARED.push(record) };
    }
}

/// Hands `record` to the inbox of the record running on this thread, or the shared list: how
/// values are deferred from the driver's thread.
///
/// # Safety
/// As [`finish`].
pub(crate) unsafe fn defer(record: NonNull<RecordHeader>) {
    let pushed = match trampoline::running_home() {
        // SAFETY: the record is the caller's; ownership passes to the list.
        Some(inbox) => unsafe { inbox.list.push(record.as_ptr()) },
        None => Err(record.as_ptr()),
    };
    if let Err(record) = pushed {
        // SAFETY: as above; the shared list is never closed.
        let _ = unsafe { SHARED.push(record) };
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
    if trampoline::in_host_function() {
        // SAFETY: per the caller.
        unsafe { defer(record) };
        return;
    }
    let pushed = match THREAD.try_with(|thread| Arc::clone(thread.inbox())) {
        // SAFETY: per the caller; the thread's own list is open while it runs.
        Ok(inbox) => unsafe { inbox.list.push(record.as_ptr()) },
        Err(_) => Err(record.as_ptr()),
    };
    if let Err(record) = pushed {
        // SAFETY: per the caller; the shared list is never closed.
        let _ = unsafe { SHARED.push(record) };
    }
    reclaim();
}

/// Drops `value` as soon as the rule allows (see [`drop_soon`]).
pub(crate) fn drop_when_allowed<T: Send + 'static>(value: T) {
    // SAFETY: a fresh record, owned here.
    unsafe { drop_soon(crate::record::new_deferred_drop(value)) };
}

/// `Ok(value)` outside a host function; inside one (on the driver's thread) the refusal a
/// cuda-host call answers there, with `value` (a user's closure) dropped later on the thread whose
/// host function is running rather than here.
pub(crate) fn outside_host_function<T: Send + 'static>(
    call: &'static str,
    value: T,
) -> crate::Result<T> {
    if trampoline::in_host_function() {
        drop_when_allowed(value);
        Err(crate::Error::InHostFunction { call })
    } else {
        Ok(value)
    }
}

/// Runs `call` now, or, inside a host function, later on the thread whose host function is
/// running. `Drop`s that destroy driver objects use it.
pub(crate) fn call_outside_host_function(call: impl FnOnce() + Send + 'static) {
    if trampoline::in_host_function() {
        // SAFETY: a fresh record, owned here; ownership passes to the list.
        unsafe { defer(crate::record::new_deferred_call(call)) };
    } else {
        call();
    }
}

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
    let due = THREAD
        .try_with(|thread| {
            let launches = thread.launches_since_reclaim.get() + 1;
            let due = launches >= interval;
            thread
                .launches_since_reclaim
                .set(if due { 0 } else { launches });
            due
        })
        .unwrap_or(false);
    if due {
        reclaim();
    }
}

/// Drops the finished records of the calling thread's launches (and those of threads that
/// exited) on the calling thread; returns how many.
///
/// cuda-host calls it on each launch, stream synchronize and stream drop; call it yourself to
/// release captured values promptly when a thread makes no other cuda-host call for a while.
/// It does nothing inside a host function, on a thread that is capturing a stream through
/// cuda-host, or while a global-mode capture begun through cuda-host is open (see the module
/// documentation of the rule). A `Drop` that panics is reported through the panic hook and the
/// drain goes on: this function never panics.
pub fn reclaim() -> usize {
    THREAD.try_with(drain).unwrap_or(0)
}

fn drain(thread: &ThreadState) -> usize {
    let own_empty = thread.inbox.get().is_none_or(|inbox| inbox.list.is_empty());
    if (own_empty && SHARED.is_empty()) || !may_drain(thread) {
        return 0;
    }
    let inbox = Arc::clone(thread.inbox());
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
    let mut count = drop_chain(thread, &inbox, inbox.list.take());
    if !SHARED.is_empty() {
        count += drop_chain(thread, &inbox, SHARED.take());
    }
    thread.drain_depth.set(depth);
    if depth == 0 {
        inbox.draining.store(false, Ordering::SeqCst);
    }
    crate::launch_slot::return_released();
    count
}

/// Whether this thread may run user `Drop`s now.
fn may_drain(thread: &ThreadState) -> bool {
    !trampoline::in_host_function()
        && thread.capturing.get() == 0
        && GLOBAL_CAPTURES.load(Ordering::Relaxed) == 0
}

/// Drops the records of the chain at `first`, each under `catch_unwind`; stops where a `Drop`
/// made draining wrong (it began a capture), handing the rest back to `inbox`.
fn drop_chain(thread: &ThreadState, inbox: &Inbox, mut next: *mut RecordHeader) -> usize {
    let mut count = 0;
    while !next.is_null() {
        if thread.capturing.get() != 0 {
            // SAFETY: the rest of the chain is ours; it goes back to this thread's list, which
            // is open while the thread runs.
            let _ = unsafe { inbox.list.push_chain(next, last_of(next)) };
            break;
        }
        let record = next;
        // SAFETY: the chain is ours; the link is read before the record is dropped.
        next = unsafe { (*record).next };
        // SAFETY: the record left its list, so this is its only owner; it is dropped once.
        let dropped = catch_unwind(AssertUnwindSafe(|| unsafe { RecordHeader::drop(record) }));
        if let Err(payload) = dropped {
            panic_report::report_drop_panic(payload);
        }
        count += 1;
    }
    count
}

/// A capture begun through cuda-host, as drains see it: while it is open, this thread does not
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
        let _ = THREAD.try_with(|thread| thread.capturing.set(thread.capturing.get() + 1));
        if global {
            GLOBAL_CAPTURES.fetch_add(1, Ordering::SeqCst);
            let own = THREAD
                .try_with(|thread| thread.inbox.get().map(Arc::clone))
                .ok()
                .flatten();
            let inboxes = INBOXES
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            for inbox in inboxes {
                if own.as_ref().is_some_and(|own| Arc::ptr_eq(own, &inbox)) {
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
        let _ = THREAD.try_with(|thread| thread.capturing.set(thread.capturing.get() - 1));
        if self.global {
            GLOBAL_CAPTURES.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

//! The reclaim list: finished launch records wait here until a caller's thread drops them.
//!
//! The driver's host-function thread only pushes (a compare-and-swap); every drain takes the whole
//! list at once (a swap), so there is no ABA hazard and no lock. Records are dropped by threads
//! that call into cuda-host (each launch, stream synchronize, stream drop, [`reclaim`]), never by
//! the driver's thread: a captured value's `Drop` may call CUDA (freeing device memory), which
//! the driver forbids there and which can deadlock.
//!
//! The list holds at most the records of work in flight plus those finished since the last drain.

use crate::record::{self, RecordHeader};
use crate::trampoline::in_host_function;
use std::cell::Cell;
use std::num::NonZeroU32;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

static FINISHED: AtomicPtr<RecordHeader> = AtomicPtr::new(ptr::null_mut());
static LAUNCH_INTERVAL: AtomicU32 = AtomicU32::new(1);

thread_local! {
    static LAUNCHES_SINCE_RECLAIM: Cell<u32> = const { Cell::new(0) };
}

/// Makes launches reclaim on every `launches`-th launch of each thread instead of on every
/// launch (the default, 1). Synchronize, stream drop and [`reclaim`] always reclaim.
///
/// Each reclaim takes the list's head from the driver's thread, which pushes onto it; with a
/// larger interval that cache line moves less often, at the cost of up to `launches` more
/// finished records (and their captured values) per launching thread waiting to be dropped.
/// `docs/PERFORMANCE.md` has the measurements.
pub fn set_launch_reclaim_interval(launches: NonZeroU32) {
    LAUNCH_INTERVAL.store(launches.get(), Ordering::Relaxed);
}

/// What each launch calls: reclaims on every interval-th launch of the calling thread.
#[inline]
pub(crate) fn reclaim_on_launch() {
    let interval = LAUNCH_INTERVAL.load(Ordering::Relaxed);
    let due = LAUNCHES_SINCE_RECLAIM.with(|count| {
        let launches = count.get() + 1;
        let due = launches >= interval;
        count.set(if due { 0 } else { launches });
        due
    });
    if due {
        reclaim();
    }
}

/// Pushes a finished record.
///
/// # Safety
/// `record` must be a live record that nothing else references any more; ownership passes to
/// the list.
pub(crate) unsafe fn push(record: *mut RecordHeader) {
    let mut head = FINISHED.load(Ordering::Relaxed);
    loop {
        // SAFETY: the caller passed ownership; nobody else reads `next` until it is published.
        unsafe { (*record).next = head };
        match FINISHED.compare_exchange_weak(head, record, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return,
            Err(current) => head = current,
        }
    }
}

/// Drops every finished record on the calling thread; returns how many.
///
/// Called by cuda-host on each launch, stream synchronize and stream drop; call it yourself to
/// release captured values promptly when you make no other cuda-host call for a while.
///
/// # Panics
/// When a captured value's `Drop` panics, the panic continues here after the remaining records
/// were dropped (or is logged when this thread is already panicking).
pub fn reclaim() -> usize {
    // Inside a host function this is the driver's thread, where no user `Drop` may run.
    if FINISHED.load(Ordering::Relaxed).is_null() || in_host_function() {
        return 0;
    }
    // Acquire pairs with the pushes' Release: what the host functions wrote is visible here.
    let mut next = FINISHED.swap(ptr::null_mut(), Ordering::Acquire);
    let mut count = 0;
    let mut first_panic = None;
    while !next.is_null() {
        let record = next;
        // SAFETY: the list owned `record`; reading its link before dropping it.
        next = unsafe { (*record).next };
        // SAFETY: the record left the list above, so this is its only owner and it is dropped
        // once.
        let dropped = catch_unwind(AssertUnwindSafe(|| unsafe { RecordHeader::drop(record) }));
        if let Err(payload) = dropped {
            first_panic.get_or_insert(payload);
        }
        count += 1;
    }
    if let Some(payload) = first_panic {
        if std::thread::panicking() {
            log::error!("a value captured by a host function panicked in its Drop");
        } else {
            resume_unwind(payload);
        }
    }
    count
}

/// Runs `call` now, or, when called inside a host function (on the driver's thread, where the
/// driver forbids CUDA calls), later on a caller's thread through the list. `Drop`s that destroy
/// driver objects use it.
pub(crate) fn call_outside_host_function(call: impl FnOnce() + Send + 'static) {
    if in_host_function() {
        // SAFETY: a fresh record, owned here; ownership passes to the list.
        unsafe { push(record::new_deferred_call(call).as_ptr()) };
    } else {
        call();
    }
}

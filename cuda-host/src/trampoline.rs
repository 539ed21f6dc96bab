//! The `extern "C"` functions the driver calls, and the mark that tells cuda-host it is running
//! inside a host function.
//!
//! A trampoline runs a record's payload under `catch_unwind`, so a panic never crosses into the
//! driver; it reports the panic and hands the record to the reclaim list. It never drops user
//! values itself.

use crate::launch_slot::{self, Ticket};
use crate::panic_report;
use crate::reclaim;
use crate::record::{self, RecordHeader};
use cuda_host_sys::CUstream;
use std::cell::Cell;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;

thread_local! {
    static IN_HOST_FUNCTION: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is running a host function launched through cuda-host.
pub fn in_host_function() -> bool {
    IN_HOST_FUNCTION.with(Cell::get)
}

/// `Err` when called from inside a host function: cuda-host then does not reach the driver.
pub(crate) fn ensure_outside_host_function(call: &'static str) -> crate::Result<()> {
    if in_host_function() {
        Err(crate::Error::InHostFunction { call })
    } else {
        Ok(())
    }
}

/// Marks the thread as inside a host function for its lifetime.
struct HostFunctionScope {
    previous: bool,
}

impl HostFunctionScope {
    fn enter() -> Self {
        HostFunctionScope {
            previous: IN_HOST_FUNCTION.with(|mark| mark.replace(true)),
        }
    }
}

impl Drop for HostFunctionScope {
    fn drop(&mut self) {
        IN_HOST_FUNCTION.with(|mark| mark.set(self.previous));
    }
}

/// Runs the record's payload with the thread marked, catching a panic; a caught panic is
/// reported, and its payload goes to the reclaim list, to be dropped on a caller's thread.
///
/// # Safety
/// As [`RecordHeader::run`].
unsafe fn run_caught(record: NonNull<RecordHeader>, stream: Option<CUstream>) {
    let outcome = {
        let _scope = HostFunctionScope::enter();
        // SAFETY: per the caller.
        catch_unwind(AssertUnwindSafe(|| unsafe { RecordHeader::run(record) }))
    };
    if let Err(payload) = outcome {
        panic_report::report(payload.as_ref(), stream);
        // SAFETY: a fresh record, owned here; ownership passes to the list.
        unsafe { reclaim::push(record::new_deferred_drop(payload).as_ptr()) };
    }
}

/// The `CUhostFn` of run-once records; its user data is a launch ticket, not an address. The
/// driver calls it at most once per launch; a stale ticket (its record was abandoned after the
/// context failed, or was run already) is ignored. A run record goes to the reclaim list.
///
/// # Safety
/// `data` must be a ticket of `launch_slot`, given to the driver by a launch.
pub(crate) unsafe extern "C" fn run_once_host_fn(data: *mut c_void) {
    let Some((record, stream)) = launch_slot::claim(Ticket::from_user_data(data)) else {
        log::debug!("ignored a host function call with a stale launch ticket");
        return;
    };
    // SAFETY: claimed: the record is owned here and has not run.
    unsafe { run_caught(record, Some(stream)) };
    // SAFETY: the record is finished and owned here; ownership passes to the list.
    unsafe { reclaim::push(record.as_ptr()) };
}

/// The `CUhostFn` of graph host nodes: runs the callable (or copied-bytes function), which stays
/// owned by a user object of the graph or by the executable.
///
/// # Safety
/// `data` must be a graph callable or copied-bytes record kept alive while graphs can run it.
pub(crate) unsafe extern "C" fn graph_host_fn(data: *mut c_void) {
    if let Some(record) = NonNull::new(data.cast::<RecordHeader>()) {
        // SAFETY: the record's owner keeps it alive while a graph can run it; these records may
        // run many times.
        unsafe { run_caught(record, None) };
    }
}

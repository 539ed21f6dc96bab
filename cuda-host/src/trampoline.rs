//! The `extern "C"` functions the driver calls, and the mark that tells cuda-host it is running
//! inside a host function.
//!
//! Nothing that runs here may unwind into the driver or abort: the user's function runs under
//! `catch_unwind`, its panic is reported by code that catches its own panics (a panicking logger
//! or hook), the panic's payload is dropped on a caller's thread, and everything else is under a
//! last `catch_unwind` too. No user value is dropped here: finished records go to their home
//! thread's inbox (`reclaim`).

use crate::launch_slot::{self, Ticket};
use crate::panic_report;
use crate::reclaim::{self, Inbox};
use crate::record::RecordHeader;
use cuda_host_sys::CUstream;
use std::cell::Cell;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::{self, NonNull};

thread_local! {
    static IN_HOST_FUNCTION: Cell<bool> = const { Cell::new(false) };
    /// The home inbox of the record running on this thread, where values deferred from here go.
    static RUNNING_HOME: Cell<*const Inbox> = const { Cell::new(ptr::null()) };
}

/// Whether the calling thread is running a host function launched through cuda-host (or the
/// panic hook, which runs there too).
pub fn in_host_function() -> bool {
    IN_HOST_FUNCTION.try_with(Cell::get).unwrap_or(false)
}

/// `Err` when called from inside a host function: cuda-host then does not reach the driver.
pub(crate) fn ensure_outside_host_function(call: &'static str) -> crate::Result<()> {
    if in_host_function() {
        Err(crate::Error::InHostFunction { call })
    } else {
        Ok(())
    }
}

/// The home inbox of the record running on this thread, if any.
pub(crate) fn running_home() -> Option<&'static Inbox> {
    let home = RUNNING_HOME.try_with(Cell::get).unwrap_or(ptr::null());
    // SAFETY: set by `HostFunctionScope` from a record it runs; the record, which holds a
    // reference to its home, is alive while its function runs and until the scope ends, and
    // what is deferred is pushed during that time.
    unsafe { home.as_ref() }
}

/// Marks the thread as inside a host function, running a record of `home`, for its lifetime.
struct HostFunctionScope {
    previous: (bool, *const Inbox),
}

impl HostFunctionScope {
    fn enter(home: *const Inbox) -> Self {
        HostFunctionScope {
            previous: (
                IN_HOST_FUNCTION.with(|mark| mark.replace(true)),
                RUNNING_HOME.with(|running| running.replace(home)),
            ),
        }
    }
}

impl Drop for HostFunctionScope {
    fn drop(&mut self) {
        IN_HOST_FUNCTION.with(|mark| mark.set(self.previous.0));
        RUNNING_HOME.with(|running| running.set(self.previous.1));
    }
}

/// Runs the record's payload with the thread marked, catching a panic and reporting it (the
/// report runs marked too, and never unwinds).
///
/// # Safety
/// As [`RecordHeader::run`].
unsafe fn run_marked(record: NonNull<RecordHeader>, stream: Option<CUstream>) {
    // SAFETY: the record is live (caller).
    let _scope = HostFunctionScope::enter(unsafe { record.as_ref() }.home_address());
    // SAFETY: per the caller.
    let outcome = catch_unwind(AssertUnwindSafe(|| unsafe { RecordHeader::run(record) }));
    if let Err(payload) = outcome {
        panic_report::report_host_function_panic(payload, stream);
    }
}

/// Keeps a panic that escaped everything else from crossing into the driver: its payload is
/// dropped later on a caller's thread.
fn contain(outcome: std::thread::Result<()>) {
    if let Err(payload) = outcome {
        panic_report::dispose(payload);
    }
}

/// The `CUhostFn` of run-once records; its user data is a launch ticket, not an address. The
/// driver calls it at most once per launch; a stale ticket (its record was abandoned after the
/// context failed, or was run already) is ignored. A run record goes to its home's inbox.
///
/// # Safety
/// `data` must be a ticket of `launch_slot`, given to the driver by a launch.
pub(crate) unsafe extern "C" fn run_once_host_fn(data: *mut c_void) {
    contain(catch_unwind(|| {
        let Some((record, stream)) = launch_slot::claim(Ticket::from_user_data(data)) else {
            log::debug!("ignored a host function call with a stale launch ticket");
            return;
        };
        // SAFETY: claimed: the record is owned here and has not run.
        unsafe { run_marked(record, Some(stream)) };
        // SAFETY: the record is finished and owned here; ownership passes to its home's list.
        unsafe { reclaim::finish(record) };
    }));
}

/// The `CUhostFn` of graph host nodes: runs the callable (or copied-bytes function), which stays
/// owned by a user object of the graph or by the executable.
///
/// # Safety
/// `data` must be a graph callable or copied-bytes record kept alive while graphs can run it.
pub(crate) unsafe extern "C" fn graph_host_fn(data: *mut c_void) {
    contain(catch_unwind(|| {
        if let Some(record) = NonNull::new(data.cast::<RecordHeader>()) {
            // SAFETY: the record's owner keeps it alive while a graph can run it; these records
            // may run many times.
            unsafe { run_marked(record, None) };
        }
    }));
}

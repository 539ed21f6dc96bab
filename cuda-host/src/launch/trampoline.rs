//! The `extern "C"` functions the driver calls.
//!
//! Nothing that runs here may unwind into the driver or abort: the user's function runs under
//! `catch_unwind`, its panic is reported by code that catches its own panics (a panicking logger
//! or hook), the panic's payload is dropped on a caller's thread, and everything else is under a
//! last `catch_unwind` too. No user value is dropped here: finished records go to their home
//! thread's inbox (`inboxes`). The thread is marked for the whole call, not only while the
//! function runs: cuda-host's own log calls here reach a logger, which is user code too. A run
//! is observed (`crate::observe`: an NVTX range, a `tracing` span) while the thread is marked,
//! and the observation ends after the `catch_unwind`, not while a panic unwinds.

use crate::contain::{InHostFunction, dispose, logged};
use crate::launch::context_failure::{enter_running, has_failed};
use crate::launch::inboxes::{self, RunningHome};
use crate::launch::panic_report;
use crate::launch::record::RecordHeader;
use crate::launch::slot::{self, Ticket};
use crate::observe::{self, Run};
use cuda_host_sys::CUstream;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;

/// Runs the record's payload on the thread its caller marked as inside a host function, with
/// the record's home as the one values are deferred to, observed as `run`, catching a panic and
/// reporting it (the report runs marked too, and never unwinds).
///
/// # Safety
/// As [`RecordHeader::run`]; the caller holds the thread's mark.
unsafe fn run_marked(record: NonNull<RecordHeader>, stream: Option<CUstream>, run: Run) {
    // SAFETY: the record stays live while it runs (caller).
    let _home = unsafe { RunningHome::enter(record) };
    // SAFETY: as above.
    let observed = observe::running(unsafe { RecordHeader::name(record) }, run);
    // SAFETY: per the caller.
    let outcome = catch_unwind(AssertUnwindSafe(|| unsafe { RecordHeader::run(record) }));
    observed.end();
    if let Err(payload) = outcome {
        panic_report::report_host_function_panic(payload, stream);
    }
}

/// Keeps a panic that escaped everything else from crossing into the driver: its payload is
/// dropped later on a caller's thread.
fn contain(outcome: std::thread::Result<()>) {
    if let Err(payload) = outcome {
        dispose(payload);
    }
}

/// The `CUhostFn` of run-once records; its user data is a launch ticket, not an address. The
/// driver calls it at most once per launch; a stale ticket (its record was abandoned after the
/// context failed, or was run already) is ignored. A run record goes to its home's inbox.
///
/// # Safety
/// `data` must be a ticket of `slot`, given to the driver by a launch.
pub(crate) unsafe extern "C" fn run_once_host_fn(data: *mut c_void) {
    let _marked = InHostFunction::enter(inboxes::defer_value);
    contain(catch_unwind(|| {
        let Some((record, stream)) = slot::claim(Ticket::from_user_data(data)) else {
            logged!(debug!(
                "ignored a host function call with a stale launch ticket"
            ));
            return;
        };
        // Listed until the record was handed on, so that a call answering the context's
        // failure returns only after this function (`context_failure::enter_running`).
        // SAFETY: claimed: the record is owned here.
        let context = unsafe { record.as_ref() }.context_handle();
        let _running = enter_running(Some(stream), context);
        if has_failed(context) {
            // The failure was seen: a call answering it may have returned already, so the
            // function must not run now (the real driver still calls functions queued before
            // the failure).
            logged!(debug!("a host function of a failed context was not run"));
        } else {
            // SAFETY: claimed: the record is owned here and has not run.
            unsafe {
                run_marked(
                    record,
                    Some(stream),
                    Run::HostFunction(slot::launched_at(record)),
                )
            };
        }
        // SAFETY: the record is finished and owned here; ownership passes to its home's list.
        unsafe { inboxes::finish(record) };
    }));
}

/// The `CUhostFn` of graph host nodes: runs the callable (or copied-bytes function), which stays
/// owned by a user object of the graph or by the executable.
///
/// # Safety
/// `data` must be a graph callable or copied-bytes record kept alive while graphs can run it.
pub(crate) unsafe extern "C" fn graph_host_fn(data: *mut c_void) {
    let _marked = InHostFunction::enter(inboxes::defer_value);
    contain(catch_unwind(|| {
        if let Some(record) = NonNull::new(data.cast::<RecordHeader>()) {
            // SAFETY: the record's owner keeps it alive while a graph can run it.
            let context = unsafe { record.as_ref() }.context_handle();
            // Listed for every stream of its context: a graph's node knows no stream.
            let _running = enter_running(None, context);
            if has_failed(context) {
                logged!(debug!("a graph host node of a failed context was not run"));
                return;
            }
            // SAFETY: the record's owner keeps it alive while a graph can run it; these records
            // may run many times.
            unsafe { run_marked(record, None, Run::GraphNode) };
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_driver;
    use crate::launch::context_failure::abandon_context_if_failed;
    use crate::launch::context_shared::ContextShared;
    use crate::launch::payload::{self, RunOnceClosure};
    use crate::launch::reclaim::reclaim;
    use cuda_host_sys::{CUcontext, CUresult};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn a_record_the_driver_calls_after_its_context_was_seen_failed_does_not_run() {
        // The real driver still calls host functions queued before a failure; a record it calls
        // once cuda-host has seen the failure must not run (a call answering it may have
        // returned already). A context handle of this test alone: a failure stays recorded.
        const FAILED: usize = 0x7_7000;
        // SAFETY: no entry points beyond the fakes' defaults.
        let driver = unsafe { fake_driver::driver(&[]) };
        let context = Arc::new(ContextShared::retained_primary(
            Arc::clone(&driver),
            0,
            FAILED as CUcontext,
        ));
        let ran = Arc::new(AtomicBool::new(false));
        let in_closure = Arc::clone(&ran);
        let slot = payload::in_slot(
            Arc::clone(&context),
            RunOnceClosure(move || in_closure.store(true, Ordering::SeqCst)),
        );
        // Not yet marked launched, so the failure's scan leaves it to the host function.
        let ticket = slot.begin_launch(FAILED, 0x88_usize as CUstream);
        abandon_context_if_failed(FAILED, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
        // SAFETY: the ticket of a launch, given to the driver (here, this call) once.
        unsafe { run_once_host_fn(ticket.into_user_data()) };
        assert!(
            !ran.load(Ordering::SeqCst),
            "ran after the failure was seen"
        );
        reclaim();
        assert_eq!(
            Arc::strong_count(&ran),
            1,
            "the record was not handed back and dropped"
        );
    }
}

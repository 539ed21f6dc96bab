//! Handing a launch to the driver, and the `extern "C"` functions the driver calls back.
//!
//! **To the driver**: the capture check held until the driver took the launch, the record under
//! a ticket, the failure handshake, and the look for a capture other code began.
//!
//! **Back from it** (`run_once_host_fn`, `graph_host_fn`): nothing that runs there may unwind
//! into the driver or abort: the user's function runs under `catch_unwind`, its panic is reported
//! by code that catches its own panics (a panicking logger or hook), the panic's payload is
//! dropped on a caller's thread, and everything else is under a last `catch_unwind` too. No user
//! value is dropped there: finished records go to their home thread's inbox (`record`). The
//! thread is marked for the whole call, not only while the function runs: cuda-host's own log
//! calls there reach a logger, which is user code too. A run is observed (`crate::observe`: an
//! NVTX range, a `tracing` span) while the thread is marked, and the observation ends after the
//! `catch_unwind`, not while a panic unwinds.

use crate::checked::checked;
use crate::contain::{InHostFunction, dispose, logged};
use crate::error::{CaptureState, Error, Result};
use crate::launch::capture_check::EnqueueWindow;
use crate::launch::context_failure::{self, enter_running, has_failed};
use crate::launch::context_shared::ContextShared;
use crate::launch::panic_report;
use crate::launch::reclaim;
use crate::launch::record::{self, RecordHeader, RunningHome};
use crate::launch::slot::{self, RunOnce, Ticket};
use crate::observe::{self, Run};
use cuda_host_sys::CUstream;
use std::ffi::{c_uint, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::Arc;

/// The entry point a host function is launched through.
#[derive(Clone, Copy)]
pub(crate) enum HostFuncEntry<'a> {
    /// `cuLaunchHostFunc`.
    Classic,
    /// `cuLaunchHostFunc_v2` with this `CUhostTaskSyncMode`.
    WithSyncMode(c_uint),
    /// The polled engine (`crate::polled`): the lanes of the stream's context, which the stream
    /// names, with the stream's id where it is known already (not for a special stream, whose
    /// id depends on the calling thread).
    Polled {
        engine: &'a dyn PolledEngine,
        stream_id: Option<u64>,
    },
}

/// What the polled engine (`crate::polled`) offers this layer, which does not import it.
pub(crate) trait PolledEngine: Send + Sync {
    /// Enqueues on `stream` (of `context`; current where the driver resolves a special stream
    /// against it; its id `stream_id` where known) the call of `function` with `data` on the
    /// engine's thread once the stream reaches it, holding the stream's later work until it
    /// returned.
    ///
    /// # Errors
    /// [`Error::StreamCapturing`] when a capture other code began since the launch's check took
    /// the enqueue: `function` is then never called. Others when nothing was enqueued.
    ///
    /// # Safety
    /// As `cuLaunchHostFunc`: a valid stream; `function` callable with `data` on that thread.
    unsafe fn enqueue(
        &self,
        context: &Arc<ContextShared>,
        stream: CUstream,
        stream_id: Option<u64>,
        function: unsafe extern "C" fn(*mut c_void),
        data: *mut c_void,
    ) -> Result<()>;
}

impl HostFuncEntry<'_> {
    /// Enqueues `function` with `data` on `stream` of `context` through this entry point.
    ///
    /// # Safety
    /// As `cuLaunchHostFunc`: a valid stream; `function` callable with `data` on the driver's
    /// thread (or the engine's).
    unsafe fn enqueue(
        self,
        context: &Arc<ContextShared>,
        stream: CUstream,
        function: unsafe extern "C" fn(*mut c_void),
        data: *mut c_void,
    ) -> Result<()> {
        let driver = context.driver();
        let launched = match self {
            HostFuncEntry::Polled { engine, stream_id } => {
                // SAFETY: per the caller.
                return unsafe { engine.enqueue(context, stream, stream_id, function, data) };
            }
            // SAFETY: per the caller.
            HostFuncEntry::Classic => unsafe {
                checked!(driver, cuLaunchHostFunc(stream, Some(function), data))
            },
            // SAFETY: per the caller; the driver validates the mode.
            HostFuncEntry::WithSyncMode(mode) => unsafe {
                checked!(
                    driver,
                    cuLaunchHostFunc_v2(stream, Some(function), data, mode)
                )
            },
        };
        Ok(launched?)
    }
}

/// Launches `payload` once on `stream` of `context`, after the work enqueued there before it,
/// through `entry`; profilers show its run as `named` when the caller named it. The stream's context must be current where the driver resolves `stream`
/// against it (the special streams). A refused payload is dropped as the reclaim rule allows.
pub(crate) fn run_once<P: RunOnce>(
    context: &Arc<ContextShared>,
    stream: CUstream,
    payload: P,
    entry: HostFuncEntry<'_>,
    named: Option<&'static str>,
) -> Result<()> {
    // Before the window opens: a subscriber asked whether it is interested is user code.
    let launched = observe::launch_stamp(named);
    let window = match open_window(context, stream) {
        Ok(window) => window,
        Err(error) => {
            reclaim::drop_when_allowed(payload);
            return Err(error);
        }
    };
    let mut slot = slot::in_slot(Arc::clone(context), payload);
    slot.stamp(launched);
    let ticket = slot.begin_launch(context.raw().addr(), window.stream());
    // SAFETY: the stream handle is valid (the caller's); the ticket names a slot whose record
    // stays valid until it is claimed, and the trampoline claims before it runs.
    let launched = unsafe {
        entry.enqueue(
            context,
            window.stream(),
            run_once_host_fn,
            ticket.into_user_data(),
        )
    };
    if let Err(error) = launched {
        // Let go before the failure is noted, which logs: a logger may begin a capture through
        // cuda-host, which waits for the window.
        drop(window);
        match slot::take_refused(ticket) {
            // SAFETY: the driver refused the launch, so its record is exclusively ours again.
            Some(record) => unsafe { reclaim::drop_soon(record) },
            None => logged!(error!(
                "the driver ran a host function whose launch it refused"
            )),
        }
        if let Some(result) = error.driver_result() {
            context_failure::abandon_if_failed(context, result);
        }
        return Err(error);
    }
    context_failure::mark_launched(context.raw().addr(), ticket);
    let look = match entry {
        // The engine looked itself, while no later launch could take a number on the lane, and
        // answered a capture that took its batch as a refusal (handled above).
        HostFuncEntry::Polled { .. } => Ok(false),
        _ => window.launch_was_captured(run_once_host_fn, ticket.into_user_data()),
    };
    let taken = match look {
        Ok(false) => None,
        Ok(true) => Some(Error::StreamCapturing {
            status: CaptureState::Active,
        }),
        // A look that fails cannot tell whether a graph may call the record: taken.
        Err(error) => Some(error),
    };
    let Some(error) = taken else {
        return Ok(());
    };
    // Other code began a capture of the stream between the check and the launch, which may
    // have made the launch a node of its graph. Abandoned, the record does nothing wherever it
    // is called; one the trampoline claimed first ran live, and the launch stands.
    let abandoned = slot::abandon_ticket(ticket);
    // Let go before the closure's drop (user code, which may begin a capture through cuda-host,
    // which waits for the window) and before the failure is noted (which logs).
    drop(window);
    let Some(record) = abandoned else {
        return Ok(());
    };
    // SAFETY: abandoning claimed the record, which never ran: it is ours to drop.
    unsafe { reclaim::drop_soon(record) };
    if let Some(result) = error.driver_result() {
        context_failure::abandon_if_failed(context, result);
    }
    Err(error)
}

/// Launches `function` with `pointer` on `stream`, with the same capture check; nothing is
/// allocated.
///
/// # Safety
/// As `host_launch_raw`: `function` must be callable with `pointer` on the driver's thread.
pub(crate) unsafe fn pass_through(
    context: &Arc<ContextShared>,
    stream: CUstream,
    function: unsafe extern "C" fn(*mut c_void),
    pointer: *mut c_void,
    entry: HostFuncEntry<'_>,
) -> Result<()> {
    // A capture that took a pass-through launch of the driver's path would call the caller's
    // function on every launch of its graph: nothing to abandon, so a builder capture
    //  waits for it however long.
    let window = match entry {
        HostFuncEntry::Polled { .. } => {
            // The engine's call is observed: the profiler is attached here, before it.
            observe::prepare();
            open_window(context, stream)?
        }
        _ => {
            EnqueueWindow::open_for_pass_through(context.driver(), stream).inspect_err(|error| {
                if let Some(result) = error.driver_result() {
                    context_failure::abandon_if_failed(context, result);
                }
            })?
        }
    };
    // SAFETY: the stream handle is valid (the caller's); the caller vouches for `function`
    // and `pointer`.
    let launched = unsafe { entry.enqueue(context, window.stream(), function, pointer) };
    // A capture other code began between the check and the launch may have taken it: a node of
    // that graph, which calls the function on each of its launches and never now. Nothing to
    // abandon, but the caller is told, as for a run-once launch; a look that fails cannot tell,
    // and is told as taken. (The engine answers a capture that took its batch as a refusal
    // itself.)
    let look = if launched.is_ok() && !matches!(entry, HostFuncEntry::Polled { .. }) {
        window.launch_was_captured(function, pointer)
    } else {
        Ok(false)
    };
    // Let go before a failure is noted, which logs: a logger may begin a capture through
    // cuda-host, which waits for a pass-through launch's window however long.
    drop(window);
    if let Err(error) = &launched
        && let Some(result) = error.driver_result()
    {
        context_failure::abandon_if_failed(context, result);
    }
    match look {
        Ok(false) => launched,
        Ok(true) => Err(Error::StreamCapturing {
            status: CaptureState::Active,
        }),
        Err(error) => Err(error),
    }
}

/// Opens the launch's window on `stream` (`capture_check`); a failure its check sees is noted.
fn open_window<'context>(
    context: &'context ContextShared,
    stream: CUstream,
) -> Result<EnqueueWindow<'context>> {
    EnqueueWindow::open(context.driver(), stream).inspect_err(|error| {
        if let Some(result) = error.driver_result() {
            context_failure::abandon_if_failed(context, result);
        }
    })
}

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
    let _marked = InHostFunction::enter(record::defer_value);
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
        unsafe { record::finish(record) };
    }));
}

/// The `CUhostFn` of graph host nodes: runs the callable (or copied-bytes function), which stays
/// owned by a user object of the graph or by the executable.
///
/// # Safety
/// `data` must be a graph callable or copied-bytes record kept alive while graphs can run it.
pub(crate) unsafe extern "C" fn graph_host_fn(data: *mut c_void) {
    let _marked = InHostFunction::enter(record::defer_value);
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
    use crate::launch::reclaim::reclaim;
    use crate::launch::slot::RunOnceClosure;
    use cuda_host_sys::{CUcontext, CUhostFn, CUresult, CUstreamCaptureStatus};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

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
        let slot = slot::in_slot(
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

    unsafe extern "C" fn not_capturing(
        _stream: CUstream,
        status: *mut CUstreamCaptureStatus,
    ) -> CUresult {
        // SAFETY: the caller passes a valid out-pointer.
        unsafe { status.write(CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE) };
        CUresult::CUDA_SUCCESS
    }

    unsafe extern "C" fn refuse_launch(
        _stream: CUstream,
        _function: CUhostFn,
        _data: *mut c_void,
    ) -> CUresult {
        CUresult::CUDA_ERROR_OUT_OF_MEMORY
    }

    /// Counts its drops and the thread it was dropped on.
    struct Counted(Arc<AtomicUsize>, std::thread::ThreadId);

    impl Drop for Counted {
        fn drop(&mut self) {
            assert_eq!(
                std::thread::current().id(),
                self.1,
                "dropped on another thread"
            );
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_refused_launch_drops_its_payload_at_once_and_names_the_call() {
        // SAFETY: both fakes have their entry points' signatures.
        let driver = unsafe {
            fake_driver::driver(&[
                (c"cuStreamIsCapturing", not_capturing as *mut c_void),
                (c"cuLaunchHostFunc", refuse_launch as *mut c_void),
            ])
        };
        let context = fake_driver::context(&driver);
        let drops = Arc::new(AtomicUsize::new(0));
        let counted = Counted(Arc::clone(&drops), std::thread::current().id());
        let ran = Arc::new(AtomicUsize::new(0));
        let in_closure = Arc::clone(&ran);
        let payload = crate::launch::RunOnceClosure(move || {
            let _ = &counted;
            in_closure.fetch_add(1, Ordering::SeqCst);
        });
        let error = run_once(
            &context,
            0x77_usize as CUstream,
            payload,
            HostFuncEntry::Classic,
            None,
        )
        .unwrap_err();
        assert_eq!(
            error.driver_result(),
            Some(CUresult::CUDA_ERROR_OUT_OF_MEMORY)
        );
        assert!(error.to_string().contains("cuLaunchHostFunc"), "{error}");
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "the payload was not dropped at once"
        );
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    }
}

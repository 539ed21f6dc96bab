//! Handing a launch to the driver: the capture check held until the driver took the launch, the
//! record under a ticket, the failure handshake, and the look for a capture other code began.

use crate::checked::checked;
use crate::contain::logged;
use crate::error::{CaptureState, Error, Result};
use crate::launch::capture_check::EnqueueWindow;
use crate::launch::context_failure;
use crate::launch::context_shared::ContextShared;
use crate::launch::payload::{self, RunOnce};
use crate::launch::reclaim;
use crate::launch::slot;
use crate::launch::trampoline;
use crate::observe;
use cuda_host_sys::CUstream;
use std::ffi::{c_uint, c_void};
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
    let mut slot = payload::in_slot(Arc::clone(context), payload);
    slot.stamp(launched);
    let ticket = slot.begin_launch(context.raw().addr(), window.stream());
    // SAFETY: the stream handle is valid (the caller's); the ticket names a slot whose record
    // stays valid until it is claimed, and the trampoline claims before it runs.
    let launched = unsafe {
        entry.enqueue(
            context,
            window.stream(),
            trampoline::run_once_host_fn,
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
        _ => window.launch_was_captured(trampoline::run_once_host_fn, ticket.into_user_data()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_driver;
    use cuda_host_sys::{CUhostFn, CUresult, CUstreamCaptureStatus};
    use std::sync::atomic::{AtomicUsize, Ordering};

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

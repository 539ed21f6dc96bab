//! A failed context: reclaiming the run-once records its driver will never run.
//!
//! After a sticky error (a kernel's illegal address, a device-side assert, ...), the driver never
//! calls host functions of that context again, so their launch records would leak, together
//! with the context reference each holds. cuda-host abandons them (claims their launch slots,
//! see `slot`, and reclaims them on a caller's thread) as soon as it sees such an error:
//! from a synchronize, a refused launch, a stream's destruction, or the watch each stream that
//! launched gets when it is dropped. The watch is a `cuStreamAddCallback`, which the driver
//! calls exactly once also after a failure, with the error as its status; so the records of a
//! stream are reclaimed at the latest when that stream is torn down, even if nothing else called
//! into cuda-host after the failure. (A [`Stream::per_thread`](crate::Stream::per_thread) value
//! shared between threads is watched on the dropping thread's default stream; records launched
//! through it from other threads are then reclaimed when any call answers the failure, and at
//! the latest when the last value of the context they were launched through is dropped after
//! the failure, which asks the driver ([`look_for_failure`]); a failure after that value went
//! is learnt only from a call that answers it. A stream that is capturing when dropped is not
//! watched: a callback would join the capture.)

use crate::checked::checked;
use crate::contain::{InHostFunction, logged};
use crate::launch::capture_check;
use crate::launch::context_shared::ContextShared;
use crate::launch::record::{self, RecordHeader};
use crate::launch::running::{self, ENTRIES, FailedContexts, Running, RunningStreams};
use crate::launch::slot::{self, Ticket};
use crate::query_events;
use cuda_host_sys::{CUresult, CUstream};
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

/// Whether `result` is an error after which the context runs no more work: those `cuda.h`
/// documents as leaving the process "in an inconsistent state", and the device-side assert.
pub(crate) fn is_sticky(result: CUresult) -> bool {
    matches!(
        result,
        CUresult::CUDA_ERROR_CONTAINED
            | CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
            | CUresult::CUDA_ERROR_LAUNCH_TIMEOUT
            | CUresult::CUDA_ERROR_ASSERT
            | CUresult::CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUresult::CUDA_ERROR_MISALIGNED_ADDRESS
            | CUresult::CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUresult::CUDA_ERROR_INVALID_PC
            | CUresult::CUDA_ERROR_LAUNCH_FAILED
            | CUresult::CUDA_ERROR_TENSOR_MEMORY_LEAK
    )
}

/// Abandons the context's launched records when `result` says it failed. Only pushes onto the
/// reclaim lists, so it is right on any thread; the records' home threads drop them.
pub(crate) fn abandon_if_failed(context: &ContextShared, result: CUresult) {
    if is_sticky(result) {
        failed(context.raw().addr(), result);
    }
}

/// [`abandon_if_failed`] for a context known by its address (`CUcontext`).
pub(crate) fn abandon_context_if_failed(context: usize, result: CUresult) {
    if is_sticky(result) {
        failed(context, result);
    }
}

/// The streams with a run-once host function running (`running`).
static RUNNING: RunningStreams<ENTRIES> = RunningStreams::new();

/// Lists a function of `stream` (`None`: a graph's host node, of no one stream) of `context` as
/// running while the result lives: the trampolines call it before they look whether the
/// context failed ([`has_failed`]).
pub(crate) fn enter_running(stream: Option<CUstream>, context: usize) -> Running<'static, ENTRIES> {
    let key = stream.map_or(running::ANY_STREAM, |stream| running::key(stream.addr()));
    RUNNING.enter(key, context)
}

/// Waits until no host function of `stream` (of any stream, for `None`) of `context` is
/// running. Call it after recording the context's failure, never inside a host function (it
/// would wait for itself).
fn wait_until_none_running(stream: Option<CUstream>, context: usize) {
    let key = stream.map(|stream| running::key(stream.addr()));
    let mut pause = Duration::from_micros(20);
    while RUNNING.any_running(key, context) {
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(1));
    }
}

/// [`abandon_if_failed`], then, when `result` says the context failed, waits until no host
/// function of `stream` (of any, for `None`: the context's synchronize) is still running: for a
/// call that answered `result`. The real driver answers a failure at once while a host function
/// of the stream still runs.
pub(crate) fn abandon_if_failed_then_wait(
    context: &ContextShared,
    result: CUresult,
    stream: Option<CUstream>,
) {
    if is_sticky(result) {
        abandon_if_failed(context, result);
        wait_until_none_running(stream, context.raw().addr());
    }
}

/// The contexts that failed (`CUcontext` addresses). A failure is sticky: they stay failed.
static FAILED: FailedContexts = FailedContexts::new();

/// Whether the context (a `CUcontext` address) failed, as far as cuda-host has seen.
pub(crate) fn has_failed(context: usize) -> bool {
    FAILED.has_failed(context)
}

/// [`has_failed`] without its fence, for the stream points' looks, which are no part of a
/// launch's handshake: a future and the watcher, which looks again each round while futures
/// wait, so that a failure recorded on another thread is seen at its next round at the latest
/// (`FailedContexts::seen_failed`).
pub(crate) fn seen_failed(context: usize) -> bool {
    FAILED.seen_failed(context)
}

fn failed(context: usize, result: CUresult) {
    FAILED.record(context);
    let mut count = 0usize;
    slot::abandon_launched(context, |record| {
        count += 1;
        // SAFETY: abandoning claimed the record; ownership passes to its home's list.
        unsafe { record::finish(record) };
    });
    if count > 0 {
        logged!(debug!(
            "the context failed with {result}: {count} host functions will never run"
        ));
    }
}

/// Marks the launch of `ticket` launched (the driver accepted it), then abandons it at once if
/// its context (a `CUcontext` address) failed meanwhile: the other half of the handshake
/// described at `FailedContexts`.
#[inline]
pub(crate) fn mark_launched(context: usize, ticket: Ticket) {
    slot::mark_launched(ticket);
    if FAILED.has_failed(context)
        && let Some(record) = slot::abandon_ticket(ticket)
    {
        // SAFETY: abandoning claimed the record; ownership passes to its home's list.
        unsafe { record::finish(record) };
    }
}

/// Watches `stream` for the failure of its context: the driver calls the watch once, after the
/// stream's earlier work, with the context's error if it failed, and the records launched
/// before it are then abandoned. Used when a stream that launched is dropped.
pub(crate) fn watch_stream(context: &Arc<ContextShared>, stream: CUstream) {
    let driver = context.driver();
    // A callback added to a capturing stream would join, and on the legacy stream invalidate,
    // the capture: leave such a stream alone.
    match capture_check::capture_state(driver, stream) {
        Ok(None) => {}
        Ok(Some(_)) => {
            logged!(debug!(
                "not watching a capturing stream for its context's failure"
            ));
            return;
        }
        Err(error) => {
            if let Some(result) = error.driver_result() {
                abandon_if_failed(context, result);
            }
            return;
        }
    }
    // A record that only keeps the context, handed to the driver and back.
    let watch = record::holding((), Some(Arc::clone(context)), record::home());
    // SAFETY: the stream handle is valid (the caller's); the callback takes ownership of the
    // watch when the driver calls it, which it does exactly once if this call succeeds.
    let watched = unsafe {
        checked!(
            driver,
            cuStreamAddCallback(stream, Some(failure_watch), watch.as_ptr().cast(), 0)
        )
    };
    if let Err(error) = watched {
        // Records of this stream a later failure strands are then reclaimed when a call answers
        // the failure.
        logged!(warn!(
            "cannot watch a dropped stream for its context's failure: {error}"
        ));
        // SAFETY: refused, so the watch is still exclusively ours; it only holds the context,
        // and goes with this thread's next drain.
        unsafe { record::keep_here(watch) };
        abandon_if_failed(context, error.result());
    }
}

/// Asks the driver whether `context` failed, without waiting for its work, and abandons its
/// launched records if it did: for the context's last value, when records still keep it.
/// After that drop no call of cuda-host can answer the failure, and a record may have no watch:
/// one launched on a thread's per-thread stream through a value another thread dropped (the
/// watch went on the dropping thread's stream). The question is a query of an event never
/// recorded, which answers only a failure, made in the relaxed capture mode so that no capture
/// of any thread is disturbed.
pub(crate) fn look_for_failure(context: &ContextShared) {
    let driver = context.driver();
    let answered = context.with_current(|| {
        let _relaxed = capture_check::RelaxedCaptureMode::enter(driver)?;
        let event = query_events::create(driver)?;
        // SAFETY: the event was made above and is destroyed once, below.
        let queried = unsafe { checked!(driver, cuEventQuery(event)) };
        // SAFETY: as above.
        if let Err(error) = unsafe { query_events::destroy(driver, event) } {
            logged!(debug!("cannot destroy a failure probe: {error}"));
        }
        Ok(queried?)
    });
    if let Err(error) = answered {
        match error.driver_result() {
            Some(result) if is_sticky(result) => abandon_if_failed(context, result),
            _ => logged!(warn!(
                "cannot ask whether a context failed as its last value goes ({error}): records \
                 a failure strands are reclaimed when a call answers it"
            )),
        }
    }
}

/// The `CUstreamCallback` of a failure watch. It runs wholly under `catch_unwind`, as the
/// trampolines do: nothing unwinds into the driver, and a caught panic's payload is dropped
/// later on a caller's thread. (Its log calls catch their own panics; this is for the rest.)
///
/// # Safety
/// `data` must be a watch record of `watch_stream`, given to the driver once.
unsafe extern "C" fn failure_watch(_stream: CUstream, status: CUresult, data: *mut c_void) {
    // On the driver's thread: what the logger or a panic leaves goes to a caller's thread.
    let _marked = InHostFunction::enter(record::defer_value);
    let watch = data.cast::<RecordHeader>();
    let abandoned = catch_unwind(AssertUnwindSafe(|| {
        if is_sticky(status) {
            // SAFETY: the driver hands the watch back once; it is live until pushed below.
            failed(unsafe { (*watch).context_handle() }, status);
        }
    }));
    if let Err(payload) = abandoned {
        crate::contain::dispose(payload);
    }
    // Pushed whatever happened above, so that its context reference is dropped.
    let finished = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the watch is owned here; ownership passes to its home's list (its context
        // reference is dropped on a caller's thread).
        unsafe { record::finish(NonNull::new_unchecked(watch)) };
    }));
    if let Err(payload) = finished {
        crate::contain::dispose(payload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::slot::LaunchSlot;
    use std::ptr;

    #[test]
    fn a_launch_marked_launched_after_its_contexts_scan_is_abandoned_by_the_launcher() {
        const CONTEXT: usize = 0x2000_0000;
        // The interleaving: the launch is being made while the context fails and is scanned.
        let ticket = LaunchSlot::acquire().begin_launch(CONTEXT, ptr::null_mut());
        FAILED.record(CONTEXT);
        let mut scanned = 0;
        slot::abandon_launched(CONTEXT, |_| scanned += 1);
        assert_eq!(
            scanned, 0,
            "the scan ran before the launch was marked launched"
        );
        // The launcher abandons it; its record is taken back here rather than pushed, since the
        // test's slot holds no record header.
        slot::mark_launched(ticket);
        assert!(FAILED.has_failed(CONTEXT));
        let record = slot::abandon_ticket(ticket).expect("abandoned by the launcher");
        assert!(
            slot::claim(ticket).is_none(),
            "abandoned: the host function would find its ticket stale"
        );
        // SAFETY: the test's records hold nothing to drop.
        unsafe { slot::release(record) };
        // Another context's launch is left alone.
        assert!(!FAILED.has_failed(CONTEXT + 8));
        let other = LaunchSlot::acquire().begin_launch(CONTEXT + 8, ptr::null_mut());
        mark_launched(CONTEXT + 8, other);
        let (record, _) = slot::claim(other).expect("still live");
        // SAFETY: the test's records hold nothing to drop.
        unsafe { slot::release(record) };
    }

    #[test]
    fn kernel_faults_are_sticky_and_ordinary_errors_are_not() {
        assert!(is_sticky(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS));
        assert!(is_sticky(CUresult::CUDA_ERROR_LAUNCH_FAILED));
        assert!(is_sticky(CUresult::CUDA_ERROR_ASSERT));
        for ordinary in [
            CUresult::CUDA_SUCCESS,
            CUresult::CUDA_ERROR_NOT_READY,
            CUresult::CUDA_ERROR_INVALID_VALUE,
            CUresult::CUDA_ERROR_INVALID_HANDLE,
            CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
            CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
        ] {
            assert!(!is_sticky(ordinary), "{ordinary}");
        }
    }
}

//! A timeline's stream operations: a wait (a 64-bit stream memory wait, `GEQ`) and a signal (a
//! 64-bit stream memory write), each followed by a stream point that holds the word until the
//! stream passed the operation.
//!
//! **One call.** The operation and its point are one `cuStreamBatchMemOp`: the point is a write
//! of its number into its stream's track's word (`crate::tracks`,
//! `ContextTracks::mark_written`), which costs the stream no call of its own and the watcher no
//! query. Where the track has no word to offer, the batch holds the operation alone and the
//! point is an event's record after it.
//!
//! **Captures: refused.** A memory operation a capture takes becomes a node of the graph, which
//! replays its constant value on every launch, at any later time: a signal would set an old value
//! again, a wait would wait for one the timeline passed long ago, and the word would have to
//! outlive every launch. So the stream is asked before the operation (through a
//! [`EnqueueWindow`], which a builder capture waits for) and refused with
//! [`Error::TimelineInCapture`], nothing enqueued and the capture intact; and asked again after
//! it, as stream points are: an operation that a capture other code began in between took is
//! refused in the same way, and its word is kept for the life of the process, since the graph
//! reads or writes it whenever it runs (the track's word, which the batch's point writes, is
//! taken from the track and kept too). Not seen: a capture that other code begins and also ends
//! between the operation and that question. Where the point is an event's record, a capture
//! begun after the operation, before the record, leaves the operation on the stream with no
//! point after it (so does a record that fails): a point nothing records stands after it
//! instead (`ContextTracks::mark_unread`), which a later point of the stream, a synchronize or
//! the stream's drop shows passed; it holds the word, and notes the stream with the timeline, as
//! any point after an operation does, so that the last handle's drop raises the value again
//! after a signal of it that lands late (`super::waits`).
//!
//! **Narrow devices.** Where the device cannot use 64-bit memory operations
//! (`CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS` is 0, or the driver lacks the entry
//! points), a wait compares the word's low 32 bits (a 32-bit wait), which the driver does
//! cyclically, and a signal writes the low half, then the high half, in one batch
//! (`cuStreamBatchMemOp`): see [`Timeline`](super::Timeline) for the window that holds in. A
//! wait beyond the window is refused; one for a value reached compares the value now; each is
//! noted with its value, so that the last handle's drop raises the value past no wait a stream
//! has yet to pass by 2^31 or more (`super::waits`).

use crate::checked::checked;
use crate::contain::{ensure_outside_host_function, holding_logs, logged};
use crate::error::{Error, Result};
use crate::launch::{
    EnqueueWindow, Progress, abandon_if_failed, hold_or_extend, reclaim_on_launch, refuse_capture,
};
use crate::objects::Stream;
use crate::sync::lock;
use crate::timeline::{MAX, NARROW_WINDOW, Shared};
use crate::tracks::PointWrite;
use cuda_host_sys::{
    CUdeviceptr, CUstream, CUstreamBatchMemOpParams, CUstreamBatchMemOpType,
    CUstreamWaitValue_flags, Driver,
};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Which operation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Operation {
    Wait,
    Signal,
}

impl Operation {
    fn call(self) -> &'static str {
        match self {
            Operation::Wait => "Timeline::enqueue_wait",
            Operation::Signal => "Timeline::enqueue_signal",
        }
    }
}

/// Enqueues `operation` for `value` of the timeline `shared` on `stream`.
///
/// What may call a logger (a context's failure, which logs as it abandons its launches, the
/// warning of an operation left with no point after it, and whatever logs under the locks) comes
/// once the timeline's and the track's locks and the stream's window are released: a logger may
/// call cuda-host back, even on this timeline and stream.
pub(super) fn enqueue(
    shared: &Shared,
    stream: &Stream,
    operation: Operation,
    value: u64,
) -> Result<()> {
    ensure_outside_host_function(operation.call())?;
    if value > MAX {
        return Err(Error::InvalidArgument {
            what: format!("a timeline's value is at most {MAX} (2^63 - 1), not {value}"),
        });
    }
    let word = shared.word();
    let context = stream.shared_context();
    let device = word.device_in(context, shared.wide)?;
    reclaim_on_launch();
    // A stream that marked points is watched for its context's failure when dropped.
    stream.note_launch();
    // The log calls made under the locks (a quiet track taken back for the stream, after a look)
    // are held until they are released.
    let outcome = holding_logs(|| {
        stream.with_stream_context(|| enqueue_locked(shared, stream, operation, value, device))
    });
    stream.mark_unread_if_exiting();
    let (unmarked, kept) = match outcome {
        Ok(Enqueued::Marked) => return Ok(()),
        Ok(Enqueued::Unread(error)) => (error, false),
        Ok(Enqueued::Unmarked(error)) => (error, true),
        Err(error) => {
            if let Some(result) = error.driver_result() {
                abandon_if_failed(context, result);
            }
            return Err(error);
        }
    };
    if let Some(result) = unmarked.driver_result() {
        abandon_if_failed(context, result);
    }
    if kept {
        logged!(warn!(
            "no stream point after a timeline's operation; its word is kept for the life of the \
             process: {unmarked}"
        ));
    } else {
        logged!(warn!(
            "the stream point after a timeline's operation could not be marked ({unmarked}); the \
             stream's next point, a synchronize of it or its drop shows the operation passed"
        ));
    }
    Ok(())
}

/// What [`enqueue_locked`] did, when the operation went to the stream.
enum Enqueued {
    /// With a point after it that holds the word until the stream passed it.
    Marked,
    /// With a point after it that nothing records or writes (marking one failed with this
    /// error), which holds the word until a later point of the stream passed, or a synchronize
    /// or the stream's drop shows it passed (`ContextTracks::mark_unread`).
    Unread(Error),
    /// With no point after it (marking failed with this error): the word is kept.
    Unmarked(Error),
}

/// [`enqueue`]'s part under the timeline's lock, in the stream's context; the word's device
/// address in that context is `device`.
fn enqueue_locked(
    shared: &Shared,
    stream: &Stream,
    operation: Operation,
    value: u64,
    device: CUdeviceptr,
) -> Result<Enqueued> {
    let word = shared.word();
    let context = stream.shared_context();
    let driver = context.driver();
    // Held until the operation is enqueued: signals are checked and enqueued in order.
    let mut enqueued = lock(&shared.enqueued);
    if operation == Operation::Signal {
        let above = enqueued
            .signalled
            .max(word.atomic().load(Ordering::Acquire));
        if value <= above {
            return Err(Error::InvalidArgument {
                what: format!(
                    "a stream's signal of a timeline must be above its value and every signal \
                     enqueued before ({above}), not {value}: a stream's signal is a store"
                ),
            });
        }
    }
    // The value a wait compares: on a narrow timeline, the low 32 bits, cyclically, which tell
    // values up to 2^31 above the timeline's value from those below it. One more than 2^31
    // above would let the stream go at once; one 2^31 or more below, reached long ago, would
    // hold it: waiting for the value now instead holds nothing, as a wait for a value reached.
    let compared = match operation {
        Operation::Wait if !shared.wide => {
            let reached = word.atomic().load(Ordering::Acquire);
            if value > reached + NARROW_WINDOW {
                return Err(Error::OutsideNarrowWindow { value, reached });
            }
            value.max(reached)
        }
        _ => value,
    };
    // Held until the operation is enqueued: a builder capture waits for it.
    let window = EnqueueWindow::open(driver, stream.as_raw()).map_err(|error| match error {
        Error::StreamCapturing { status } => Error::TimelineInCapture { status },
        other => other,
    })?;
    let stream_id = stream.id()?;
    let raw = window.stream();
    let tracks = stream.context().tracks();
    // Whether the operation went to the stream (or to a capture that took it).
    let mut operated = false;
    // The point after the operation is a write of the stream's track's word in the same batch
    // where the track has a word to offer (`crate::tracks`), else an event's record.
    let written = tracks.mark_written(context, raw, stream_id, |point| {
        // SAFETY: a valid stream; `device` is the word's address in the stream's context (its
        // pinned, portable, device-mapped memory), 8-byte aligned, kept until the stream passed
        // the point marked after it (or for the life of the process); the point's address is
        // its track's word, of the same memory.
        unsafe { operate(driver, raw, device, shared.wide, operation, compared, point) }?;
        operated = true;
        Ok(())
    });
    if operated {
        match operation {
            Operation::Wait => enqueued.waited = enqueued.waited.max(compared),
            Operation::Signal => enqueued.signalled = value,
        }
    }
    let in_capture = |error| match error {
        Error::PointInCapture { status } => Error::TimelineInCapture { status },
        other => other,
    };
    let narrow_wait = (operation == Operation::Wait && !shared.wide).then_some(compared);
    // Refused after the operation, which a capture may have taken, or the stream may hold live
    // (the capture began after it): the word is kept, and the stream noted with a point nothing
    // records, which a later point of the stream, a synchronize or its drop shows passed. A
    // dropped timeline then keeps its value where the operation lets the stream go: a narrow
    // wait takes its turn, a signal landing late is raised over again.
    let keep_refused = || {
        word.keep();
        if let Ok(marked) = tracks.mark_unread(context, stream_id) {
            stream.note_unread_point();
            word.waits().note_stream(
                marked.track,
                marked.point,
                context.raw().addr(),
                narrow_wait,
            );
        }
    };
    let (marked, unread) = match written {
        Ok(Some(marked)) => (marked, None),
        Err(error) => {
            if operated {
                keep_refused();
            }
            return Err(in_capture(error));
        }
        Ok(None) => {
            // Asked again: a capture other code began since the check took the operation.
            if let Err(refusal) =
                refuse_capture(driver, raw, |status| Error::TimelineInCapture { status })
            {
                keep_refused();
                return Err(refusal);
            }
            match tracks.mark(context, raw, stream_id) {
                Ok(marked) => (marked, None),
                // The operation is on the stream, live (asked just above), with no point after
                // it: a point nothing records stands there instead, which a later point of the
                // stream, a synchronize or its drop shows passed. Noted, so that a dropped
                // timeline is raised again while the stream may still read or write the word.
                Err(error) => match tracks.mark_unread(context, stream_id) {
                    Ok(marked) => {
                        stream.note_unread_point();
                        (marked, Some(error))
                    }
                    Err(_) => {
                        // Nothing tells when the stream passed it.
                        word.keep();
                        if let Error::PointInCapture { .. } = error {
                            return Err(in_capture(error));
                        }
                        return Ok(Enqueued::Unmarked(error));
                    }
                },
            }
        }
    };
    word.waits().note_stream(
        Arc::clone(&marked.track),
        marked.point,
        context.raw().addr(),
        narrow_wait,
    );
    let progress = Arc::clone(&marked.track) as Arc<dyn Progress>;
    // The word, and the context whose tracks its drains look at, stay until the stream passed
    // the operation: this thread's hold of the word after its last operation on the stream, if
    // that hold is still its newest there, now lasts until this one.
    hold_or_extend(
        &progress,
        context,
        marked.point,
        Arc::as_ptr(word).addr(),
        || (Arc::clone(word), stream.context().clone()),
    );
    match unread {
        None => Ok(Enqueued::Marked),
        // The capture took the point's record, not the operation: refused all the same, as the
        // stream captures.
        Some(error @ Error::PointInCapture { .. }) => Err(in_capture(error)),
        Some(error) => Ok(Enqueued::Unread(error)),
    }
}

/// Enqueues the operation on `stream`, in one `cuStreamBatchMemOp` with the write of `point`
/// after it where there is one.
///
/// # Safety
/// `stream` is a live stream of the context whose pinned memory `device` and the point's address
/// are, each aligned, and the memory outlives the stream's use of it.
unsafe fn operate(
    driver: &Driver,
    stream: CUstream,
    device: CUdeviceptr,
    wide: bool,
    operation: Operation,
    value: u64,
    point: Option<PointWrite>,
) -> Result<()> {
    let mut operations = [CUstreamBatchMemOpParams::default(); 3];
    let mut count = 0;
    let mut push = |operation: CUstreamBatchMemOpParams| {
        operations[count] = operation;
        count += 1;
    };
    match (operation, wide) {
        (Operation::Wait, _) => {
            let mut wait = CUstreamBatchMemOpParams::default();
            wait.waitValue.address = device;
            wait.waitValue.flags = CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ.0;
            if wide {
                wait.waitValue.operation = CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WAIT_VALUE_64;
                wait.waitValue.__bindgen_anon_1.value64 = value;
            } else {
                // The low 32 bits, which the driver compares cyclically.
                wait.waitValue.operation = CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WAIT_VALUE_32;
                wait.waitValue.__bindgen_anon_1.value = value as u32;
            }
            push(wait);
        }
        (Operation::Signal, true) => push(write_64(device, value)),
        (Operation::Signal, false) => {
            // The low half first: a read between the two writes finds the value below the new
            // one, never above it (the new value's high half is at least the old one's).
            push(write_32(device, value as u32));
            push(write_32(device + 4, (value >> 32) as u32));
        }
    }
    if let Some(point) = point {
        push(write_32(point.address, point.value));
    }
    // SAFETY: the caller's promise; `count` operations, in order: the operation, then the
    // point's write.
    unsafe {
        checked!(
            driver,
            cuStreamBatchMemOp_v2(stream, count as u32, operations.as_mut_ptr(), 0)
        )
    }
    .map_err(Error::from)
}

fn write_32(address: CUdeviceptr, value: u32) -> CUstreamBatchMemOpParams {
    let mut write = CUstreamBatchMemOpParams::default();
    write.writeValue.operation = CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_32;
    write.writeValue.address = address;
    write.writeValue.__bindgen_anon_1.value = value;
    write
}

fn write_64(address: CUdeviceptr, value: u64) -> CUstreamBatchMemOpParams {
    let mut write = CUstreamBatchMemOpParams::default();
    write.writeValue.operation = CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_64;
    write.writeValue.address = address;
    write.writeValue.__bindgen_anon_1.value64 = value;
    write
}

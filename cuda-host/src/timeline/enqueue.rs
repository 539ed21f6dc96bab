//! A timeline's stream operations: a wait (`cuStreamWaitValue64`, `GEQ`) and a signal
//! (`cuStreamWriteValue64`), each followed by a stream point that holds the word until the
//! stream passed the operation.
//!
//! **Captures: refused.** A memory operation a capture takes becomes a node of the graph, which
//! replays its constant value on every launch, at any later time: a signal would set an old value
//! again, a wait would wait for one the timeline passed long ago, and the word would have to
//! outlive every launch. So the stream is asked before the operation (through a
//! [`EnqueueWindow`], which a capture begun through cuda-host waits for) and refused with
//! [`Error::TimelineInCapture`], nothing enqueued and the capture intact; and asked again after
//! it, as stream points are: an operation that a capture other code began in between took is
//! refused in the same way, and its word is kept for the life of the process, since the graph
//! reads or writes it whenever it runs. Not seen: a capture that other code begins and also ends
//! between the operation and that question. A capture begun after the operation, before its
//! stream point, leaves the operation on the stream with no point after it (so does a point
//! whose record fails): its word is kept too, and the last handle's drop releases it as it
//! releases the streams it sees (`super::Shared`'s drop).
//!
//! **Narrow devices.** Where the device cannot use 64-bit memory operations
//! (`CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS` is 0, or the driver lacks the entry
//! points), a wait compares the word's low 32 bits (`cuStreamWaitValue32`), which the driver
//! does cyclically, and a signal writes the low half, then the high half, in one batch
//! (`cuStreamBatchMemOp`): see [`Timeline`](super::Timeline) for the window that holds in.

use crate::checked::checked;
use crate::contained_log::logged;
use crate::error::{CaptureState, Error, Result};
use crate::launch::{
    EnqueueWindow, Progress, abandon_if_failed, capture_state, ensure_outside_host_function,
    hold_until, reclaim_on_launch,
};
use crate::objects::Stream;
use crate::sync::lock;
use crate::timeline::{MAX, Shared};
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
    stream.with_stream_context(|| {
        let driver = context.driver();
        let noted = |error: Error| {
            if let Some(result) = error.driver_result() {
                abandon_if_failed(context, result);
            }
            error
        };
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
        // Held until the operation is enqueued: a capture begun through cuda-host waits for it.
        let window = EnqueueWindow::open(driver, stream.as_raw()).map_err(|error| match error {
            Error::StreamCapturing { status } => Error::TimelineInCapture { status },
            other => noted(other),
        })?;
        let stream_id = stream.id().map_err(|error| noted(error.into()))?;
        let raw = window.stream();
        // SAFETY: a valid stream; `device` is the word's address in the stream's context (its
        // pinned, portable, device-mapped memory), 8-byte aligned, kept until the stream passed
        // the point marked below (or for the life of the process).
        unsafe { operate(driver, raw, device, shared.wide, operation, value) }.map_err(noted)?;
        match operation {
            Operation::Wait => enqueued.waited = enqueued.waited.max(value),
            Operation::Signal => enqueued.signalled = value,
        }
        // Asked again: a capture other code began since the check took the operation.
        let taken = match capture_state(driver, raw) {
            Ok(None) => None,
            Ok(Some(status)) => Some(Error::TimelineInCapture { status }),
            Err(error) => Some(error),
        };
        if let Some(refusal) = taken {
            word.keep();
            return Err(refusal);
        }
        match stream.context().tracks().mark(context, raw, stream_id) {
            Ok(marked) => {
                let progress = Arc::clone(&marked.track) as Arc<dyn Progress>;
                word.waits()
                    .note_stream(Arc::clone(&progress), marked.point, context.raw().addr());
                // The word, and the context whose tracks its drains look at, stay until the
                // stream passed the operation.
                hold_until(
                    progress,
                    Arc::clone(context),
                    marked.point,
                    (Arc::clone(word), stream.context().clone()),
                );
            }
            Err(error) => {
                // The operation is on the stream, live: nothing tells when the stream passed it.
                word.keep();
                if let Error::PointInCapture { .. } = error {
                    return Err(Error::TimelineInCapture {
                        status: CaptureState::Active,
                    });
                }
                logged!(warn!(
                    "no stream point after a timeline's operation; its word is kept for the \
                     life of the process: {error}"
                ));
            }
        }
        Ok(())
    })
}

/// Enqueues the operation on `stream`.
///
/// # Safety
/// `stream` is a live stream of the context whose pinned memory `device` is, 8-byte aligned, and
/// the memory outlives the stream's use of it.
unsafe fn operate(
    driver: &Driver,
    stream: CUstream,
    device: CUdeviceptr,
    wide: bool,
    operation: Operation,
    value: u64,
) -> Result<()> {
    let geq = CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ.0;
    match (operation, wide) {
        // SAFETY: the caller's promise.
        (Operation::Wait, true) => unsafe {
            checked!(driver, cuStreamWaitValue64_v2(stream, device, value, geq))
        },
        // SAFETY: the caller's promise.
        (Operation::Signal, true) => unsafe {
            checked!(driver, cuStreamWriteValue64_v2(stream, device, value, 0))
        },
        // SAFETY: the caller's promise.
        (Operation::Wait, false) => unsafe {
            checked!(
                driver,
                cuStreamWaitValue32_v2(stream, device, value as u32, geq)
            )
        },
        (Operation::Signal, false) => {
            // The low half first: a read between the two writes finds the value below the new
            // one, never above it (the new value's high half is at least the old one's).
            let mut operations = [
                CUstreamBatchMemOpParams::default(),
                CUstreamBatchMemOpParams::default(),
            ];
            for (index, (address, half)) in
                [(device, value as u32), (device + 4, (value >> 32) as u32)]
                    .into_iter()
                    .enumerate()
            {
                operations[index].writeValue.operation =
                    CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_32;
                operations[index].writeValue.address = address;
                operations[index].writeValue.__bindgen_anon_1.value = half;
            }
            // SAFETY: the caller's promise; two operations, the low and high halves of the
            // 8-byte aligned word.
            unsafe {
                checked!(
                    driver,
                    cuStreamBatchMemOp_v2(stream, 2, operations.as_mut_ptr(), 0)
                )
            }
        }
    }
    .map_err(Error::from)
}

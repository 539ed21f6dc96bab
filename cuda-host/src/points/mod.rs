//! Stream points: marks in a stream's order that the host sees passed without a host function.
//! Two features are made of them: releasing a value in stream order
//! ([`release_in_stream_order`]) and awaiting a stream ([`StreamPoint`]).
//!
//! **Why not a host function.** A host function between two kernels costs the stream 17–37 µs on
//! an H200 (the driver's host-function thread must wake, run it and report back before the next
//! kernel may start); a 32-bit stream memory write costs it 0.9 µs (`benches/stream_points.rs`).
//! A point is one `cuStreamWriteValue32` of the stream's next sequence number to a counter in
//! pinned, device-mapped host memory (`counters`); the host sees the point passed once the
//! counter reaches that number. The stream never waits for the host.
//!
//! **Why not an event.** Recording an event costs the stream less (0.3 µs), but the host can only
//! look at it through `cuEventQuery`, 1.4 µs a call on the same machine, against one read of
//! memory for a counter, which also answers for every earlier point of the stream at once.
//!
//! **Counter width: 32 bits, numbers of 64.** A 64-bit write costs the stream 1.3 µs. Points are
//! numbered in 64 bits and written as their low half; the host extends what it reads from the
//! highest point it knows passed, and ignores values that are no point between that one and the
//! last issued, so a late, stale write never unpasses a point (`counters`).
//!
//! **Captures: refused.** A point on a stream that is being captured would become a node of the
//! graph, which writes it on every launch or never: a value released there would belong to the
//! graph's lifetime, not the stream's. cuda-host refuses such points with
//! [`Error::PointInCapture`](crate::Error::PointInCapture) (a release hands its value back), and,
//! as for host functions, a capture begun through cuda-host waits for points being marked on its
//! stream. A capture other code begins at the same moment can take the write; the point is then
//! passed when a later point of the stream is (its number is higher), so a value is never
//! released early, only later.
//!
//! **Failed contexts.** A stream whose context failed never writes again. A point of a context
//! that cuda-host saw fail (a call answering the sticky error, or the failure watch of a stream
//! that marked points, when it is dropped) counts as never to be passed: released values are
//! dropped by their thread's next drain, and futures complete with
//! [`Error::ContextFailed`](crate::Error::ContextFailed).
//!
//! **Who looks.** Released values are looked at by their own thread's drains (every cuda-host
//! call that reclaims, and [`reclaim`](crate::reclaim)): they are dropped there, by the rule of
//! launch records. Futures are looked at by one process-wide watcher thread (`watcher`), which
//! polls the counters while futures wait, backs off, and parks once none has for a while.

mod counters;
mod future;
mod release;
mod watcher;

pub use future::{StreamPoint, stream_point};
pub use release::{Unreleased, release_in_stream_order};

use crate::checked::checked;
use crate::error::{Error, Result};
use crate::launch::{ContextShared, LaunchWindow, Progress, abandon_if_failed, has_failed};
use crate::objects::Stream;
use counters::{ContextCounters, Counter};
use std::sync::Arc;

/// A point marked on a stream: its context (kept retained, which keeps the counter's memory),
/// its counter and its number.
pub(crate) struct Mark {
    context: Arc<ContextShared>,
    counter: Arc<Counter>,
    point: u64,
}

impl Mark {
    /// `Some(Ok)` once the stream passed the point, `Some(Err)` once its context failed before,
    /// `None` while it may still come.
    fn outcome(&self) -> Option<Result<()>> {
        if self.counter.passed() >= self.point {
            Some(Ok(()))
        } else if has_failed(self.context.raw().addr()) {
            // Passed after all between the two looks? Then it counts as passed.
            Some(if self.counter.passed() >= self.point {
                Ok(())
            } else {
                Err(Error::ContextFailed)
            })
        } else {
            None
        }
    }
}

/// Marks the next point of `stream`.
///
/// # Errors
/// [`Error::PointInCapture`] when the stream is capturing; the driver's error from
/// `cuStreamIsCapturing`, `cuStreamGetId`, `cuStreamWriteValue32_v2`, or, for the context's
/// first points, `cuMemHostAlloc` and `cuMemHostGetDevicePointer_v2`.
fn mark(stream: &Stream) -> Result<Mark> {
    let shared = stream.shared_context();
    stream.with_stream_context(|| {
        let driver = shared.driver();
        let noted = |error: Error| {
            if let Some(result) = error.driver_result() {
                abandon_if_failed(shared, result);
            }
            error
        };
        // Held until the write is enqueued: a capture begun through cuda-host waits for it.
        let window = LaunchWindow::open(driver, stream.as_raw()).map_err(|error| match error {
            Error::StreamCapturing { status } => Error::PointInCapture { status },
            other => noted(other),
        })?;
        let mut stream_id = 0;
        // SAFETY: a valid stream (the caller's); `stream_id` is a valid out-pointer.
        unsafe { checked!(driver, cuStreamGetId(window.stream(), &mut stream_id)) }
            .map_err(|error| noted(error.into()))?;
        let counters = shared.stream_points(|| ContextCounters::new(shared));
        let marked = counters
            .mark(shared, window.stream(), stream_id)
            .map_err(noted)?;
        Ok(Mark {
            context: Arc::clone(shared),
            counter: marked.counter,
            point: marked.point,
        })
    })
}

/// What stream points hold now, process-wide: for leak checks and to see the watcher idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamPointCounts {
    /// Values released in stream order whose point no drain has seen passed yet.
    pub held: usize,
    /// Futures waiting with the watcher (polled, not yet woken or dropped).
    pub waiting: usize,
    /// Whether the watcher thread is parked (nothing waits).
    pub watcher_parked: bool,
    /// How many times the watcher thread parked since it started.
    pub watcher_parks: u64,
}

/// What stream points hold now (see [`StreamPointCounts`]).
pub fn stream_point_counts() -> StreamPointCounts {
    let (waiting, watcher_parked, watcher_parks) = watcher::counts();
    StreamPointCounts {
        held: crate::launch::held_count(),
        waiting,
        watcher_parked,
        watcher_parks,
    }
}

/// A counter as the held records see it.
fn progress(counter: &Arc<Counter>) -> Arc<dyn Progress> {
    Arc::clone(counter) as Arc<dyn Progress>
}

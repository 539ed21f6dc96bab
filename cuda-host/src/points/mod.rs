//! Stream points: marks in a stream's order that the host sees passed without a host function.
//! Two features are made of them: releasing a value in stream order
//! ([`release_in_stream_order`]) and awaiting a stream ([`StreamPoint`]).
//!
//! ```no_run
//! use cuda_host::points::{release_in_stream_order, stream_point};
//! use cuda_host::{Device, Stream, StreamFlags};
//!
//! # async fn demo() -> cuda_host::Result<()> {
//! let context = Device::get(cuda_host::driver()?, 0)?.primary_context()?;
//! let stream = Stream::new(&context, StreamFlags::NonBlocking)?;
//! let staging = vec![0u8; 1 << 20];
//! // ... enqueue a copy from `staging` on `stream` ...
//! // Dropped on this thread once the stream passed this point, never before.
//! release_in_stream_order(&stream, staging).map_err(|refused| refused.error)?;
//! // ... enqueue kernels ...
//! stream_point(&stream)?.await?; // the stream passed everything enqueued before
//! # Ok(()) }
//! ```
//!
//! **Why not a host function.** A host function between two kernels costs the stream 17–45 µs on
//! an H200 (`docs/PERFORMANCE.md`): the driver's host-function thread must wake, run it and
//! report back before the next kernel may start. A point is one `cuEventRecord` of an event of
//! its own, which costs the enqueuing thread 0.13 µs; the host sees the point passed once a
//! query of that event, or of a later point's, answers that it completed. The stream never
//! waits for the host. Between two kernels on the H200 a release point costs the stream
//! 0.8–1.4 µs, a future point 1.2–2.4 µs, most of it the watcher's queries slowing the thread
//! that enqueues (`benches/stream_points.rs`, `docs/PERFORMANCE.md`).
//!
//! **Why not a stream memory write.** A 32-bit write to pinned, device-mapped memory
//! (`cuStreamWriteValue32`) would let the host look with one read of memory instead of a 0.1 µs
//! query, but it costs the enqueuing thread 0.8 µs, and when enqueuing is what holds a stream
//! back, the stream pays it all: 0.9–1.3 µs between two kernels, before anything cuda-host adds.
//! Events are cheap to mark; looks query one event while the stream has not got further. Where
//! a stream memory operation is enqueued anyway (a timeline's), the point after it is a write in
//! the same batch, which costs neither (`crate::tracks`).
//!
//! **Captures: refused.** A point on a stream that is being captured would become a node of the
//! graph, which records it on every launch or never: a value released there would belong to the
//! graph's lifetime, not the stream's. cuda-host refuses such points with
//! [`Error::PointInCapture`] (a release hands its value back), and,
//! as for host functions, a builder capture waits for points being marked on its
//! stream. A capture other code begins between the check and the record takes the record: the
//! event then stands for a point of the capture, and a query of it would invalidate the capture
//! (and, once it ended, answer that it completed, whatever the stream did). So the stream is
//! asked again after the record: if it is capturing, the point is refused in the same way and
//! its event retired, never queried or recorded again; no look sees the event before that
//! answer (`crate::tracks`). Not seen: a capture that other code begins and also ends between the
//! record and that question, on a stream cuda-host is marking at that moment; its point would
//! be seen passed at the next look.
//!
//! **Failed contexts.** A stream whose context failed never completes another event. A point of
//! a context that cuda-host saw fail (a call answering the sticky error, a look whose query
//! answers it, or the failure watch of a stream that marked points, when it is dropped) counts as
//! never to be passed: released values are dropped by their thread's next drain, and futures
//! complete with [`Error::ContextFailed`].
//!
//! **Who looks.** Released values are looked at by their own thread's drains (every cuda-host
//! call that reclaims, and [`reclaim`](crate::reclaim)): they are dropped there, by the rule of
//! launch records. Futures are looked at by one process-wide watcher thread (`watcher`), which
//! spins while futures wait and points pass, looking every 5 µs, then waits as its
//! [`WatcherPace`] says ([`set_watcher_pace`]: by default it sleeps between looks once no point
//! passed for 1 ms), and parks once no future has waited for 1 ms; [`stream_point`] refuses with
//! [`Error::ThreadStart`] where that thread cannot be started.
//!
//! **Panics.** A logger is user code: every log call of a look, of the watcher and of a drain
//! catches its panic. A look restores what it set (the track's "being looked at" flag, the
//! thread's capture interaction mode) also when it unwinds, so a panic from anywhere inside it
//! wedges no track and leaves no thread in another mode; the watcher runs each round under
//! `catch_unwind` and goes on.

// The map: [`mark`] here marks a point on a stream's track (`crate::tracks`: a context's
// tracks of events, kept with the context, and the watcher thread that wakes futures);
// `release` and `future` are the two features. Released values wait in the launch machinery's
// held queues (`crate::launch::hold_until`), which look at a track through [`Progress`]; every
// look is a [`Look`]. How a point is recorded and seen passed (one event a point, exact, with
// no cap; looks that never break a capture) is `crate::tracks`'s.

mod future;
mod release;

pub use crate::tracks::watcher::WatcherPace;
pub use future::{StreamPoint, stream_point};
pub use release::{Unreleased, release_in_stream_order};

use crate::contain::holding_logs;
use crate::error::{Error, Result};
use crate::launch::{EnqueueWindow, Look, Progress, abandon_if_failed, seen_failed};
use crate::objects::{Context, Stream};
use crate::observe::{self, Points};
use crate::tracks::{Track, watcher};
use std::sync::Arc;

/// A point marked on a stream: its context (kept, which keeps the track's events), its track and
/// its number.
pub(crate) struct Mark {
    context: Context,
    track: Arc<Track>,
    point: u64,
}

impl Mark {
    /// `Some(Ok)` once the stream passed the point, `Some(Err)` once its context failed before,
    /// `None` while it may still come; the track's events are queried as `look` says, or, with
    /// `None`, not at all (what looks saw so far).
    fn outcome(&self, look: Option<Look>) -> Option<Result<()>> {
        let passed = match look {
            Some(look) => self.track.look_for(self.point, look),
            None => self.track.seen_passed(),
        };
        if passed >= self.point {
            Some(Ok(()))
        } else if seen_failed(self.context.as_raw().addr()) {
            // Passed after all between the two looks? Then it counts as passed.
            let passed = match look {
                Some(_) => self.track.look_for(self.point, Look::Fresh),
                None => self.track.seen_passed(),
            };
            Some(if passed >= self.point {
                Ok(())
            } else {
                Err(Error::ContextFailed)
            })
        } else {
            None
        }
    }
}

/// Marks the next point of `stream`, for `points`, observed with `name` (`crate::observe`).
///
/// # Errors
/// [`Error::PointInCapture`] when the stream is capturing; the driver's error from
/// `cuStreamIsCapturing`, `cuStreamGetId`, `cuEventRecord`, or, when its track has no event
/// free, `cuEventCreate`.
fn mark(stream: &Stream, points: Points, name: &'static str) -> Result<Mark> {
    observe::prepare();
    let shared = stream.shared_context();
    // Log calls made while the stream's window is held (a failure noted, a quiet track taken
    // back after a look) wait until it is let go: a logger may begin a capture through
    // cuda-host, which waits for the window.
    let (mark, stream_id) = holding_logs(|| {
        stream.with_stream_context(|| {
            let driver = shared.driver();
            let noted = |error: Error| {
                if let Some(result) = error.driver_result() {
                    abandon_if_failed(shared, result);
                }
                error
            };
            // Held until the write is enqueued: a builder capture waits for it.
            let window =
                EnqueueWindow::open(driver, stream.as_raw()).map_err(|error| match error {
                    Error::StreamCapturing { status } => Error::PointInCapture { status },
                    other => noted(other),
                })?;
            let stream_id = stream.id().map_err(|error| noted(error.into()))?;
            let marked = stream
                .context()
                .tracks()
                .mark(shared, window.stream(), stream_id)
                .map_err(noted)?;
            let mark = Mark {
                context: stream.context().clone(),
                track: marked.track,
                point: marked.point,
            };
            Ok((mark, stream_id))
        })
    })?;
    // Observed once the stream's context is no longer made current for the mark.
    observe::point_marked(points, name, stream_id);
    Ok(mark)
}

/// What stream points hold now, process-wide: for leak checks and to see the watcher idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamPointCounts {
    /// Values released in stream order whose point no drain has seen passed yet.
    pub held: usize,
    /// Futures waiting with the watcher (polled, not yet woken or dropped).
    pub waiting: usize,
    /// Whether the watcher thread is parked: nothing waits, but perhaps dropped timelines that
    /// streams may still read, which it looks at every few milliseconds.
    pub watcher_parked: bool,
    /// How many times the watcher thread parked since it started.
    pub watcher_parks: u64,
    /// How many times, since it started, the watcher rested between its looks at dropped
    /// timelines that streams may still read: each rest ends in one wake.
    pub watcher_rests: u64,
    /// How many times, since it started, the watcher slept between two looks while futures or
    /// host waits waited (never, at [`WatcherPace::Spinning`]).
    pub watcher_sleeps: u64,
}

/// What stream points hold now (see [`StreamPointCounts`]).
pub(crate) fn stream_point_counts() -> StreamPointCounts {
    let watcher = watcher::counts();
    StreamPointCounts {
        held: crate::launch::held_count(),
        waiting: watcher.waiting,
        watcher_parked: watcher.parked,
        watcher_parks: watcher.parks,
        watcher_rests: watcher.rests,
        watcher_sleeps: watcher.sleeps,
    }
}

/// Sets how the watcher thread waits while futures of stream points, or host waits of
/// timelines, wait for points that have not passed: [`WatcherPace::Balanced`] (the default),
/// [`WatcherPace::Spinning`] or [`WatcherPace::Frugal`]. Process-wide; takes effect at the
/// watcher's next round.
pub fn set_watcher_pace(pace: WatcherPace) {
    watcher::set_pace(pace);
}

/// A track as the held records see it.
fn progress(track: &Arc<Track>) -> Arc<dyn Progress> {
    Arc::clone(track) as Arc<dyn Progress>
}

//! Awaiting a stream: a future that completes once the stream passes the point where it was
//! made, with any executor, without a host function and without blocking a thread.

use crate::contain::{ensure_outside_host_function, in_host_function};
use crate::error::Result;
use crate::launch::Look;
use crate::launch::reclaim_on_launch;
use crate::objects::Stream;
use crate::observe::Points;
use crate::points::{Mark, mark};
use crate::tracks::{Registration, watcher};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Marks a point on `stream` now and returns a future that completes once the stream has passed
/// it, that is, once all work enqueued on the stream before this call finished.
///
/// NVIDIA's reference: [`cuEventRecord`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html).
///
/// The point costs the stream one event record (`cuEventRecord`), not a host function. The
/// future works with any executor: a pending future is woken by cuda-host's watcher thread,
/// which looks at the points futures wait for every 5 µs while any waits (spinning, and so using
/// a core meanwhile), and parks once none has waited for 1 ms. A future is seen passed once its
/// stream passed it, however many points follow it on the stream; there is no limit on how many
/// wait. Dropping the future at any time is safe and takes its registration back.
///
/// It completes with `Ok(())` once the point was passed, or with
/// [`Error::ContextFailed`](crate::Error::ContextFailed) once cuda-host has seen the stream's
/// context fail before it (a cuda-host call or a look at the point answering the sticky error,
/// or the stream's drop).
///
/// A future is only made when the watcher thread runs: where it cannot be started (a failed
/// spawn), the call is refused before anything is enqueued, rather than hand back a future that
/// nothing would wake, and a later call tries to start it again. (Values released in stream order
/// need no watcher.)
///
/// # Errors
/// [`Error::PointInCapture`](crate::Error::PointInCapture) on a stream that is being captured,
/// also when a capture other code began took the point's record (see
/// [`release_in_stream_order`](crate::points::release_in_stream_order));
/// [`Error::InHostFunction`](crate::Error::InHostFunction) inside a host function;
/// [`Error::ThreadStart`](crate::Error::ThreadStart) when the watcher thread cannot be started;
/// the driver's error when it refuses the record, or the stream's events cannot be made.
///
/// ```no_run
/// # async fn demo(stream: &cuda_host::Stream) -> cuda_host::Result<()> {
/// // ... enqueue kernels and copies on `stream` ...
/// cuda_host::points::stream_point(stream)?.await?; // no thread blocked meanwhile
/// # Ok(()) }
/// ```
#[doc(alias = "cuEventRecord")]
pub fn stream_point(stream: &Stream) -> Result<StreamPoint> {
    ensure_outside_host_function("stream_point")?;
    watcher::ensure_running()?;
    reclaim_on_launch();
    // A stream that marked points is watched for its context's failure when dropped.
    stream.note_launch();
    Ok(StreamPoint {
        mark: Some(mark(stream, Points::Future, "stream_point")?),
        registration: None,
    })
}

/// A point of a stream, as a future: see [`stream_point`].
#[must_use = "a stream point does nothing unless awaited or polled"]
pub struct StreamPoint {
    /// Always `Some` until dropped.
    mark: Option<Mark>,
    /// Its registration with the watcher, while it has one.
    registration: Option<Registration>,
}

impl StreamPoint {
    /// Whether the stream has passed the point, without waiting.
    ///
    /// # Errors
    /// [`Error::ContextFailed`](crate::Error::ContextFailed) once the stream's context was seen
    /// failing before the point; [`Error::InHostFunction`](crate::Error::InHostFunction) inside
    /// a host function, where the look's driver calls are forbidden.
    pub fn is_passed(&self) -> Result<bool> {
        ensure_outside_host_function("StreamPoint::is_passed")?;
        self.mark()
            .outcome(Some(Look::Fresh))
            .transpose()
            .map(|passed| passed.is_some())
    }

    fn mark(&self) -> &Mark {
        self.mark.as_ref().expect("a point until dropped")
    }

    fn forget(&mut self) {
        if let Some(registration) = self.registration.take() {
            watcher::forget(&self.mark().track, registration);
        }
    }
}

impl Future for StreamPoint {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        // Inside a host function, where driver calls are forbidden, it goes by what looks saw
        // so far, and the watcher looks. So it does while the watcher has the track on its
        // list: the watcher looks at the points futures wait for within its pace, so this
        // poll needs no look of its own (a clock read and, at times, queries).
        let watched = this.mark().track.is_watched();
        let look = (!watched && !in_host_function()).then_some(Look::Paced);
        if let Some(outcome) = this.mark().outcome(look) {
            this.forget();
            return Poll::Ready(outcome);
        }
        let mark = this.mark();
        match watcher::register(&mark.track, mark.point, cx.waker(), this.registration) {
            Ok(registration) => this.registration = Some(registration),
            // No watcher thread to wake it (`stream_point` made sure of one; kept for safety).
            Err(error) => return Poll::Ready(Err(error)),
        }
        // Another thread's look may have seen the point passed since the first look; after the
        // registration, the watcher's looks see it.
        if let Some(outcome) = this.mark().outcome(None) {
            this.forget();
            return Poll::Ready(outcome);
        }
        Poll::Pending
    }
}

impl Drop for StreamPoint {
    fn drop(&mut self) {
        // The mark's context defers itself when dropped where it may not go (`Context`).
        self.forget();
    }
}

impl fmt::Debug for StreamPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mark = self.mark();
        f.debug_struct("StreamPoint")
            .field("context", &mark.context)
            .field("point", &mark.point)
            .field("waiting", &self.registration.is_some())
            .finish()
    }
}

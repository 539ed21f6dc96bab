//! Tracks: how the host sees a stream pass points without a host function. Per stream in use,
//! a track of points, each recorded on an event of its own or written into the track's word in
//! the batch of a stream memory operation (`track`: [`Track`], and a
//! context's [`ContextTracks`], kept with the context, `objects::context`); the futures
//! waiting on a track's points (`waiters`); and the one process-wide thread that wakes them
//! (`watcher`), which also wakes the host waiters of timelines (`crate::timeline`, through
//! [`Watched`], keeping theirs in [`Waiters`] too). The features made of points, releases and futures, are `crate::points`'s; the
//! held values of releases look at a track through `crate::launch`'s `Progress`.
//!
//! **Exact.** Each point has an event of its own until it is seen passed (no ring that a later
//! point records again), or a number written into its track's word, so a point is seen passed at
//! the first look after its stream passed it, however many points follow it, and never before;
//! there is no cap on the points in flight. (Written points whose word a capture took are seen
//! passed later: with the next point, a synchronize, or the stream's drop; `track`.)
//!
//! **Looks never break a capture.** An event query is a "potentially unsafe" call: made in the
//! driver's default capture interaction mode while any thread captures in global mode, it is
//! refused and invalidates that capture. Every look runs in the relaxed mode, set for the query
//! and given back (`track`), also while it gives events back to the driver; marking a point
//! (`cuEventRecord` on a stream that is not capturing) and making a track's events are allowed
//! during captures (measured on the 13.0 driver, `docs/probes/capture_event_calls.c`).
//!

pub(crate) mod track;

outside_loom_models! {
    mod waiters;
    pub(crate) mod watcher;

    pub(crate) use track::{ContextTracks, PointWrite, Synchronizing, Track};
    pub(crate) use waiters::{Registration, Waiters};
    pub(crate) use watcher::{Due, Watched, watch};
}

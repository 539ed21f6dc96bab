//! What cuda-host holds and has done, for diagnostics and for tests that check nothing leaked:
//! [`metrics()`] returns a handle whose methods each take one area's snapshot when called.
//!
//! ```no_run
//! let launches = cuda_host::metrics().launch_slots();
//! assert_eq!(launches.in_flight, 0, "no host function is pending");
//! let points = cuda_host::metrics().stream_points();
//! println!("{} values wait to be released in stream order", points.held);
//! ```

pub use crate::launch::LaunchSlotCounts;
pub use crate::points::StreamPointCounts;
pub use crate::polled::PolledEngineCounts;
pub use crate::timeline::TimelineCounts;

/// The handle [`metrics()`] returns. Each method reads its area when called; none is for a hot
/// path.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct Metrics;

/// The handle to cuda-host's diagnostics: see [`Metrics`]'s methods.
pub fn metrics() -> Metrics {
    Metrics
}

impl Metrics {
    /// What the launch-slot table holds: launches in flight, records waiting to be dropped,
    /// slots allocated. It walks the whole table under the pool's lock.
    ///
    /// A closure of up to 64 bytes lives in a slot from its launch until its record is dropped;
    /// a burst of launches grows the table, and after the burst drained, slots beyond the
    /// reserve go back to the allocator.
    pub fn launch_slots(&self) -> LaunchSlotCounts {
        crate::launch::launch_slot_counts()
    }

    /// What stream points hold: values released in stream order not seen passed, futures
    /// waiting, the watcher's parks.
    pub fn stream_points(&self) -> StreamPointCounts {
        crate::points::stream_point_counts()
    }

    /// What timelines hold: their words, and the streams that may still read them.
    pub fn timelines(&self) -> TimelineCounts {
        crate::timeline::timeline_counts()
    }

    /// What the polled engine's servers hold and have done.
    pub fn polled_engine(&self) -> PolledEngineCounts {
        crate::polled::polled_engine_counts()
    }
}

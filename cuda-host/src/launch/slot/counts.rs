//! What the table holds, for diagnostics.

use super::table::{RESERVE_SLOTS, pool};
use crate::launch::slot_state::Phase;
use std::sync::atomic::Ordering;

/// What the launch-slot table holds, for diagnostics: see
/// [`Metrics::launch_slots`](crate::metrics::Metrics::launch_slots).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LaunchSlotCounts {
    /// Slots that exist (128 bytes each; 192 with the `nvtx` or `tracing` feature, for the
    /// launch's stamp).
    pub allocated: usize,
    /// The most slots that existed at once.
    pub peak: usize,
    /// Slots never given back once made: the first 16,320 (about 2 MiB).
    pub reserve: usize,
    /// Launches the driver holds (or is being handed) whose host function has not run.
    pub in_flight: usize,
    /// Records whose host function ran, or whose context failed, waiting to be dropped (or
    /// running now).
    pub finished: usize,
    /// Slots that are never used again: their launch was abandoned, or they ran out of
    /// generations.
    pub retired: usize,
}

/// Counts the launch-slot table's slots by what they hold. It walks the whole table under the
/// pool's lock: a diagnostic, not for hot paths.
///
/// A closure of up to 64 bytes lives in a slot from its launch until its record is dropped; a
/// burst of launches grows the table, and after the burst drained, slots beyond the reserve go
/// back to the allocator.
pub fn launch_slot_counts() -> LaunchSlotCounts {
    let pool = pool();
    let mut counts = LaunchSlotCounts {
        allocated: pool.allocated(),
        peak: pool.peak(),
        reserve: RESERVE_SLOTS,
        retired: pool.retired(),
        ..LaunchSlotCounts::default()
    };
    let mut abandoned_or_claimed = 0;
    for slot in pool.slots() {
        match slot.state.load(Ordering::Relaxed).0 {
            Phase::Launching | Phase::Launched => counts.in_flight += 1,
            Phase::Claimed | Phase::Abandoned => abandoned_or_claimed += 1,
            Phase::Free => {}
        }
    }
    counts.finished = abandoned_or_claimed - counts.retired.min(abandoned_or_claimed);
    counts
}

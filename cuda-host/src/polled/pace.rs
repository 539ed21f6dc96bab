//! How the engine's servers wait while host functions are queued that their streams have not
//! reached: the user's choice, as `cuLaunchHostFunc_v2`'s sync mode chooses for the driver's
//! thread, between a core for the soonest runs and a tenth of one.

use std::sync::atomic::{AtomicU8, Ordering};

/// How the polled engine's servers wait while host functions are queued behind work their
/// streams have not finished, set with [`set_polled_engine_pace`]. Whatever the pace, a server
/// spins for 100 µs after a function ran and yields until 1 ms, a stream handed to a sleeping
/// server wakes it, and a server parks once nothing is queued (but for one serving graph nodes
/// retired for a capture, which it looks at every 200 µs for the life of the process:
/// [`PolledEngineCounts::retired_graph_nodes`](crate::metrics::PolledEngineCounts));
/// measured costs are in `docs/PERFORMANCE.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum EnginePace {
    /// Once no function ran for 1 ms, sleeps between looks, in pauses of 50 µs, with the
    /// thread's timer slack at its least, or longer where a look and a sleep's wake cost the
    /// server more than a ninth of that (up to 1 ms): about a tenth of a core for each server
    /// while a function waits, and a function run within about a pause of its stream reaching
    /// it.
    #[default]
    Balanced,
    /// Never sleeps while functions are queued, however long: a core for each server with
    /// functions queued (yielding between looks), for the soonest runs after short and long
    /// waits alike.
    Spinning,
    /// As [`Balanced`](EnginePace::Balanced), with Linux's default timer slack (50 µs), which
    /// lengthens each pause by up to that much: fewer wakes, runs up to that much later.
    Frugal,
}

/// The pace, as its discriminant.
static PACE: AtomicU8 = AtomicU8::new(EnginePace::Balanced as u8);

/// Sets how the polled engine's servers wait while host functions are queued behind work their
/// streams have not finished: [`EnginePace::Balanced`] (the default), [`EnginePace::Spinning`]
/// or [`EnginePace::Frugal`]. Process-wide; each server takes it at its next round.
pub fn set_polled_engine_pace(pace: EnginePace) {
    PACE.store(pace as u8, Ordering::Relaxed);
}

/// The servers' pace now.
pub(crate) fn pace() -> EnginePace {
    match PACE.load(Ordering::Relaxed) {
        value if value == EnginePace::Spinning as u8 => EnginePace::Spinning,
        value if value == EnginePace::Frugal as u8 => EnginePace::Frugal,
        _ => EnginePace::Balanced,
    }
}

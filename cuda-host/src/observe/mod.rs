//! Host functions visible in profilers: NVTX ranges and marks (feature `nvtx`, `nvtx`) and
//! `tracing` spans and events (feature `tracing`, `spans`) for what runs on cuda-host's side of a
//! stream, named by the caller, so that a timeline shows which host function made a bubble
//! between kernels.
//!
//! What is observed, each from one line at its site:
//! - a host function run, on the thread that runs it (the driver's or the polled engine's), as a
//!   range or span named after its closure's type or the name given with [`named`]; the span
//!   carries the queue delay (from the launch to the start of the run) and the run time
//!   (`crate::launch`'s trampoline);
//! - a graph host node run, likewise, without a queue delay (a graph node has no launch of its
//!   own);
//! - each call the polled engine makes, as an outer range or span around the host function's
//!   (`crate::polled`), so that a raw C function it serves shows too;
//! - a stream point marked (a release in stream order, a future), and points seen passed by a
//!   drain (released values handed on) or by the watcher (futures woken), as marks or events.
//!
//! **Cost.** Without the features nothing here is compiled: every function is an empty inline
//! one and [`Stamp`] has no size, so the launch slot keeps its two cache lines (with a feature,
//! a third holds the stamp: a caller's name, and the launch's time for `tracing`). With a feature
//! but no profiler or subscriber attached, an observation is one load: a state word for NVTX
//! (set once, at the first launch), the global level filter for `tracing` (kept by `tracing`
//! itself); `benches/observe.rs` measures the enqueue and run loop inactive and with each
//! attached.
//!
//! **User code.** A profiler's injection library and a subscriber are user code running on the
//! driver's, the engine's and the watcher's threads and inside cuda-host's calls. So every call
//! into them is made with no lock of cuda-host's held (rule 1 of [`crate::launch`] holds around
//! them: a host function's observations are made while its thread is marked as inside one, so a
//! cuda-host call they make is refused there rather than reach the driver); a subscriber's panic
//! is caught and its payload disposed of through the ground floor of containment
//! (`crate::contain`), as every catch is; and an observation made while one is under way on the same thread (a subscriber that calls
//! cuda-host back) is skipped, so a subscriber cannot recurse into itself through cuda-host. An
//! NVTX injection library is C and does not unwind.
//!
//! Naming is allocation-free: a name is a `&'static str` (a type name, or the caller's, kept in
//! the launch's stamp rather than beside the closure, so that it takes none of the 64 bytes a
//! closure has inside its launch slot).

#[cfg(feature = "nvtx")]
mod nvtx;
#[cfg(feature = "tracing")]
mod spans;

#[cfg(any(feature = "nvtx", feature = "tracing"))]
use std::cell::Cell;

/// A host function with the name a profiler shows for it: launch it with
/// [`host_launch`](fn@crate::host_launch) on a stream or a graph builder. Made by [`named`].
#[derive(Debug, Clone, Copy)]
pub struct Named<F> {
    pub(crate) name: &'static str,
    pub(crate) function: F,
}

/// Gives `function` the name NVTX ranges and `tracing` spans show for its runs (features `nvtx`
/// and `tracing`), in place of its closure's type name (such as `app::decode::{{closure}}`).
/// Without either feature the name is dropped at the launch and costs nothing.
///
/// ```no_run
/// # fn demo(stream: &cuda_host::Stream) -> cuda_host::Result<()> {
/// use cuda_host::{host_launch, options::named};
/// host_launch(stream, named("decode batch", || println!("decoding")))?;
/// # Ok(()) }
/// ```
pub fn named<F>(name: &'static str, function: F) -> Named<F> {
    Named { name, function }
}

/// What is observed of a run-once host function's launch: the name its caller gave it
/// ([`named`]), and when it was launched, for its queue delay (nanoseconds since a process-wide
/// origin, 0 when nobody was interested at the launch; feature `tracing`). No size without the
/// features.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Stamp {
    #[cfg(feature = "tracing")]
    nanos: u64,
    #[cfg(any(feature = "nvtx", feature = "tracing"))]
    name: Option<&'static str>,
}

/// The stamp of a launch being made now, of a function named `name` by its caller.
#[inline]
pub(crate) fn launch_stamp(name: Option<&'static str>) -> Stamp {
    let _ = name;
    #[cfg(feature = "nvtx")]
    nvtx::prepare();
    Stamp {
        #[cfg(feature = "tracing")]
        nanos: spans::stamp(),
        #[cfg(any(feature = "nvtx", feature = "tracing"))]
        name,
    }
}

/// What runs, for [`running`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Run {
    /// A run-once host function, launched at the stamp.
    HostFunction(Stamp),
    /// A graph's host node.
    GraphNode,
}

/// Prepares observing before the first observation a thread of cuda-host's makes (a graph
/// attaching a callable, a point marked, a raw launch the polled engine serves): opens the NVTX injection library if it is to be
/// opened, on a caller's thread, never a host function's.
#[inline]
pub(crate) fn prepare() {
    #[cfg(feature = "nvtx")]
    nvtx::prepare();
}

/// An observation under way on this thread: a nested one (a subscriber calling cuda-host back)
/// is skipped.
#[cfg(any(feature = "nvtx", feature = "tracing"))]
struct Observing;

#[cfg(any(feature = "nvtx", feature = "tracing"))]
thread_local! {
    static OBSERVING: Cell<bool> = const { Cell::new(false) };
}

#[cfg(any(feature = "nvtx", feature = "tracing"))]
impl Observing {
    fn begin() -> Option<Observing> {
        OBSERVING
            .try_with(|observing| !observing.replace(true))
            .unwrap_or(false)
            // Lazily: a guard made and dropped here would clear the outer observation's mark.
            .then(|| Observing)
    }
}

#[cfg(any(feature = "nvtx", feature = "tracing"))]
impl Drop for Observing {
    fn drop(&mut self) {
        let _ = OBSERVING.try_with(|observing| observing.set(false));
    }
}

/// Runs `call` (a call into a profiler or subscriber) as an observation: skipped inside another
/// one (`call` is then only dropped, which may reach a subscriber too: a span it owns closes, so
/// that drop is contained as well), a panic caught and its payload disposed of as the
/// trampolines do. `call` must own nothing whose drop reaches a subscriber while it can panic:
/// dropped during the unwinding, a second panic would abort.
#[cfg(any(feature = "nvtx", feature = "tracing"))]
fn observe<T>(call: impl FnOnce() -> T) -> Option<T> {
    let observing = Observing::begin();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        if observing.is_some() {
            Some(call())
        } else {
            drop(call);
            None
        }
    }));
    match outcome {
        Ok(value) => value,
        Err(payload) => {
            crate::contain::dispose(payload);
            None
        }
    }
}

/// A run being observed, from [`running`] until [`Running::end`].
#[must_use = "a run's range ends with `end`"]
pub(crate) struct Running {
    #[cfg(feature = "nvtx")]
    range: nvtx::Range,
    #[cfg(feature = "tracing")]
    span: Option<spans::RunSpan>,
}

/// Begins observing the run of `name` (unless its launch's stamp names it), on the thread that
/// runs it, which is marked as inside a host function. End it with [`Running::end`] once the run
/// returned or unwound (not in a `Drop` during the unwinding: a subscriber may panic).
#[inline]
pub(crate) fn running(name: &'static str, run: Run) -> Running {
    let _ = (name, run);
    #[cfg(any(feature = "nvtx", feature = "tracing"))]
    let name = match run {
        Run::HostFunction(Stamp {
            name: Some(named), ..
        }) => named,
        _ => name,
    };
    Running {
        #[cfg(feature = "nvtx")]
        range: nvtx::Range::push(
            match run {
                Run::HostFunction(_) => nvtx::Category::HostFunction,
                Run::GraphNode => nvtx::Category::GraphNode,
            },
            name,
        ),
        #[cfg(feature = "tracing")]
        span: spans::RunSpan::enter(name, run),
    }
}

impl Running {
    /// Ends the run's range and span.
    #[inline]
    pub(crate) fn end(self) {
        #[cfg(feature = "tracing")]
        if let Some(span) = self.span {
            span.end();
        }
        #[cfg(feature = "nvtx")]
        self.range.pop();
    }
}

/// Begins observing a call the polled engine makes (a host function's trampoline or a raw C
/// function), on its thread.
#[inline]
pub(crate) fn engine_call() -> Running {
    Running {
        #[cfg(feature = "nvtx")]
        range: nvtx::Range::push(nvtx::Category::Engine, "polled engine call"),
        #[cfg(feature = "tracing")]
        span: spans::RunSpan::engine_call(),
    }
}

/// Which stream points an observation is about.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Points {
    /// Points of releases in stream order.
    Release,
    /// Points of futures.
    Future,
}

/// A point marked on a stream: a release of a value of type `name`, or a future.
#[inline]
pub(crate) fn point_marked(points: Points, name: &'static str, stream_id: u64) {
    let _ = (points, name, stream_id);
    #[cfg(feature = "nvtx")]
    nvtx::mark(nvtx::Category::of(points), name, stream_id);
    #[cfg(feature = "tracing")]
    spans::point_marked(points, name, stream_id);
}

/// `count` points seen passed: values released in stream order handed on to be dropped (by a
/// drain), or futures woken (by the watcher).
#[inline]
pub(crate) fn points_passed(points: Points, count: usize) {
    let _ = (points, count);
    #[cfg(any(feature = "nvtx", feature = "tracing"))]
    if count != 0 {
        #[cfg(feature = "nvtx")]
        nvtx::mark(
            nvtx::Category::of(points),
            match points {
                Points::Release => "released values passed",
                Points::Future => "stream points passed",
            },
            count as u64,
        );
        #[cfg(feature = "tracing")]
        spans::points_passed(points, count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_features_a_stamp_takes_no_room() {
        let name = if cfg!(any(feature = "nvtx", feature = "tracing")) {
            16
        } else {
            0
        };
        let time = if cfg!(feature = "tracing") { 8 } else { 0 };
        assert_eq!(size_of::<Stamp>(), name + time);
    }

    #[cfg(any(feature = "nvtx", feature = "tracing"))]
    #[test]
    fn an_observation_inside_another_is_skipped_and_a_panic_is_contained() {
        let nested = observe(|| [observe(|| ()).is_some(), observe(|| ()).is_some()]);
        assert_eq!(
            nested,
            Some([false, false]),
            "a nested observation ran, or a skipped one cleared the mark"
        );
        let panicked = observe(|| panic!("deliberate panic of a subscriber"));
        assert!(panicked.is_none());
        assert_eq!(observe(|| 7), Some(7), "the mark was left set");
    }
}

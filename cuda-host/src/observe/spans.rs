//! `tracing` spans and events (feature `tracing`).
//!
//! - A host function's run is a span `host_function` (target `cuda_host::host_function`, level
//!   TRACE) entered on the thread that runs it, with the fields `name`, `queue_delay_ns` (from the
//!   launch to the start of the run, when a subscriber was interested at the launch already) and
//!   `run_ns`; a graph host node's run is a span `graph_host_node` (target
//!   `cuda_host::graph_host_node`) with `name` and `run_ns`; a call of the polled engine a span
//!   `polled_engine_call` (target `cuda_host::polled_engine`) around the host function's.
//! - Stream points are events of target `cuda_host::stream_points`: `point marked` (fields
//!   `points`: "release" or "future", `name`, `stream_id`) and `points passed` (`points`,
//!   `count`).
//!
//! With no subscriber interested in TRACE, an observation costs the load of `tracing`'s global
//! level filter (`level_enabled!`); past it, every call that may reach a subscriber (asking
//! whether a callsite is enabled reaches it too) goes through [`super::observe`]. The clock is
//! read only for an interested one.

use super::{Points, Run, observe};
use std::sync::OnceLock;
use std::time::Instant;
use tracing::field::Empty;
use tracing::{Level, Span, trace, trace_span};

/// The origin of launch stamps.
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// Nanoseconds since [`origin`], at least 1.
fn now() -> u64 {
    u64::try_from(origin().elapsed().as_nanos()).map_or(u64::MAX, |nanos| nanos.max(1))
}

/// A launch's stamp: the time now when a subscriber is interested in host functions' spans, else
/// 0. (Asking may reach the subscriber, the first time or when its interest varies.)
pub(super) fn stamp() -> u64 {
    let interested = tracing::level_enabled!(Level::TRACE)
        && observe(|| tracing::enabled!(target: "cuda_host::host_function", Level::TRACE))
            .unwrap_or(false);
    if interested { now() } else { 0 }
}

/// A run's span, entered on the running thread.
///
/// Entered, recorded, exited and closed by one observation each, the span borrowed rather than
/// owned by the call: a subscriber panicking in one of them then unwinds through no guard of the
/// span, whose drop (an exit, a close: the subscriber again) would panic during the unwinding
/// and abort the process.
pub(super) struct RunSpan {
    span: Span,
    /// Whether the subscriber's `enter` returned, so that the span is exited.
    entered: bool,
    began: Instant,
}

impl RunSpan {
    /// The span `make` makes, entered; `None` when no subscriber is interested.
    fn entered(make: impl FnOnce() -> Span) -> Option<RunSpan> {
        let span = observe(|| {
            let span = make();
            (!span.is_disabled()).then_some(span)
        })
        .flatten()?;
        let entered = observe(|| span.with_subscriber(|(id, dispatch)| dispatch.enter(id)))
            .flatten()
            .is_some();
        Some(RunSpan {
            span,
            entered,
            began: Instant::now(),
        })
    }

    /// The span of the run of `name`, entered; `None` when no subscriber is interested.
    pub(super) fn enter(name: &'static str, run: Run) -> Option<RunSpan> {
        if !tracing::level_enabled!(Level::TRACE) {
            return None;
        }
        RunSpan::entered(|| match run {
            Run::HostFunction(launched) => {
                let delay = (launched.nanos != 0).then(|| now().saturating_sub(launched.nanos));
                trace_span!(
                    target: "cuda_host::host_function",
                    "host_function",
                    name,
                    queue_delay_ns = delay,
                    run_ns = Empty,
                )
            }
            Run::GraphNode => trace_span!(
                target: "cuda_host::graph_host_node",
                "graph_host_node",
                name,
                run_ns = Empty,
            ),
        })
    }

    /// The span of a call of the polled engine, entered; `None` when no subscriber is
    /// interested.
    pub(super) fn engine_call() -> Option<RunSpan> {
        if !tracing::level_enabled!(Level::TRACE) {
            return None;
        }
        RunSpan::entered(|| {
            trace_span!(
                target: "cuda_host::polled_engine",
                "polled_engine_call",
                run_ns = Empty
            )
        })
    }

    /// Records the run time, then exits and closes the span.
    pub(super) fn end(self) {
        let RunSpan {
            span,
            entered,
            began,
        } = self;
        let run_ns = u64::try_from(began.elapsed().as_nanos()).unwrap_or(u64::MAX);
        observe(|| span.record("run_ns", run_ns));
        if entered {
            observe(|| span.with_subscriber(|(id, dispatch)| dispatch.exit(id)));
        }
        // Closed when dropped: the subscriber's `try_close`.
        observe(move || drop(span));
    }
}

fn points_name(points: Points) -> &'static str {
    match points {
        Points::Release => "release",
        Points::Future => "future",
    }
}

pub(super) fn point_marked(points: Points, name: &'static str, stream_id: u64) {
    if tracing::level_enabled!(Level::TRACE) {
        observe(|| {
            trace!(
                target: "cuda_host::stream_points",
                points = points_name(points),
                name,
                stream_id,
                "point marked"
            );
        });
    }
}

pub(super) fn points_passed(points: Points, count: usize) {
    if tracing::level_enabled!(Level::TRACE) {
        observe(|| {
            trace!(
                target: "cuda_host::stream_points",
                points = points_name(points),
                count,
                "points passed"
            );
        });
    }
}

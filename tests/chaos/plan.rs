//! What a sequence does: its steps, each an operation on a worker, and the proptest strategies
//! that make them. Objects are named by small numbers taken modulo how many exist when the step
//! runs, so that every sequence (and every sequence proptest shrinks it to) is valid.

use crate::world::ContextKind;
use proptest::prelude::*;

/// One step: `op` on worker `worker` (modulo the workers); with `beside`, the next step starts
/// without waiting for this one, so that the two run at once.
#[derive(Debug, Clone)]
pub struct Step {
    pub worker: u8,
    pub op: Op,
    pub beside: bool,
}

/// A driver entry point cuda-host calls, for failures, delays and captures begun at a call.
pub const ENTRIES: [&std::ffi::CStr; 22] = [
    c"cuLaunchHostFunc",
    c"cuEventRecord",
    c"cuEventQuery",
    c"cuEventCreate",
    c"cuStreamIsCapturing",
    c"cuStreamQuery",
    c"cuStreamSynchronize",
    c"cuStreamBatchMemOp",
    c"cuStreamAddCallback",
    c"cuThreadExchangeStreamCaptureMode",
    c"cuCtxPushCurrent",
    c"cuCtxPopCurrent",
    c"cuCtxSetCurrent",
    c"cuCtxGetCurrent",
    c"cuMemHostAlloc",
    c"cuStreamCreate",
    c"cuStreamGetCaptureInfo_v3",
    c"cuGraphLaunch",
    c"cuGraphExecHostNodeSetParams",
    c"cuStreamDestroy_v2",
    c"cuEventDestroy_v2",
    c"cuMemFreeHost",
];

/// The destroys among [`ENTRIES`]. A failed one leaves its object alive and, where a `Drop`
/// made it, an error for the context's next call (`Error::DropFailed`): the failure of no other
/// call. A graph's or an executable's destroy is not among them: one that fails keeps the
/// callables it holds for good, which the harness could not tell from a leak.
pub const DESTROYS: [&std::ffi::CStr; 3] = [
    c"cuStreamDestroy_v2",
    c"cuEventDestroy_v2",
    c"cuMemFreeHost",
];

/// Entry points whose next call a capture may begin at: those a worker's own step makes on the
/// stream it names (a capture begun there belongs to that worker's thread).
pub const CAPTURE_ENTRIES: [&std::ffi::CStr; 5] = [
    c"cuLaunchHostFunc",
    c"cuEventRecord",
    c"cuStreamBatchMemOp",
    c"cuStreamIsCapturing",
    c"cuGraphLaunch",
];

/// How a capture interacts with other threads' calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Global,
    ThreadLocal,
    Relaxed,
}

/// What the process-wide logger does with a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoggerMode {
    /// Counts it.
    Quiet,
    /// Panics.
    Panicking,
    /// Calls cuda-host back: reclaims, asks for the counts, launches on the base context.
    CallingBack,
}

/// An operation.
#[derive(Debug, Clone)]
pub enum Op {
    // ---- Objects ----
    NewContext {
        kind: ContextKind,
    },
    DropContext {
        index: u8,
    },
    /// Makes a context value current on the worker's thread, as an application does; it stays
    /// current there (also once the context is destroyed, as a fresh one is when its last value
    /// goes).
    Bind {
        context: u8,
    },
    NewStream {
        context: u8,
        blocking: bool,
        polled: bool,
    },
    SpecialStream {
        context: u8,
        legacy: bool,
    },
    DropStream {
        index: u8,
    },
    // ---- Run-once work ----
    Launch {
        stream: u8,
        panic_in_run: bool,
        panic_in_drop: bool,
    },
    Replayable {
        stream: u8,
    },
    Release {
        stream: u8,
        panic_in_drop: bool,
    },
    Point {
        stream: u8,
    },
    Poll {
        point: u8,
    },
    DropPoint {
        point: u8,
    },
    // ---- Ordering and waiting ----
    Hold {
        stream: u8,
    },
    Open {
        gate: u8,
    },
    Synchronize {
        stream: u8,
    },
    Reclaim,
    // ---- Captures through cuda-host ----
    BuilderBegin {
        stream: u8,
        mode: Mode,
    },
    BuilderCallback {
        builder: u8,
        panic_in_run: bool,
    },
    BuilderEnd {
        builder: u8,
        launch_on: Option<u8>,
    },
    // ---- Adversity ----
    Fail {
        context: u8,
    },
    FailNext {
        entry: u8,
        count: u8,
    },
    DelayNext {
        entry: u8,
        micros: u16,
    },
    ForeignBegin {
        stream: u8,
        mode: Mode,
    },
    ForeignEnd {
        capture: u8,
    },
    /// With `look_fails`, the next look at a capture's nodes (`cuStreamGetCaptureInfo`, a
    /// launch's look whether the capture took it) fails too. With `calls_before`, that many calls
    /// of the entry go first (an operation's second look whether its stream captures, after the
    /// work it enqueued).
    CaptureAtNextCall {
        entry: u8,
        stream: u8,
        mode: Mode,
        look_fails: bool,
        calls_before: u8,
    },
    /// A capture of a fresh blocking stream of the context, begun while the driver holds a
    /// launch on each of many other ordinary streams of it: it begins within its bound.
    CaptureBesideHeldLaunches {
        context: u8,
    },
    /// Several threads at one stream's points at once: one marks, three poll, synchronize and
    /// reclaim.
    ContendedLooks {
        stream: u8,
    },
    /// A fresh context becomes current on the worker, and another thread destroys it: the
    /// worker's calls that switch contexts cannot switch back (and log so). Then perhaps a
    /// replayable launch on a special stream of a context, whose capture look-up switches.
    StrandCurrent {
        replayable: Option<(u8, bool)>,
    },
    Logger {
        mode: LoggerMode,
    },
    Hook {
        panicking: bool,
    },
    /// The stream-point watcher's pace and the polled engine's (process-wide): spinning,
    /// sleeping between looks with the least timer slack, or with the default one.
    Pace {
        pace: cuda_host::points::WatcherPace,
        engine: cuda_host::polled::EnginePace,
    },
    /// The worker's thread exits (a fresh one takes its place): its records pass to any thread.
    Retire,
    /// A new stream of a fresh context held at a gate, a launch behind it, the stream dropped,
    /// then its context failed: what is left for its failure watch on the driver's thread.
    FailBehindDroppedStream {
        context: u8,
    },
    /// A fresh context of its own, a stream held at a gate, a launch behind it, an event made,
    /// the context failed, the event dropped (its destroy is the first call to meet the failure,
    /// left as a drop error), then the next call, which answers it: the launch, which will never
    /// run, must be reclaimed.
    FailSeenByDrop,
    /// An error a failed destroy left, cuda-host's own work on the context, then the next call,
    /// which must answer it (`drop_errors`).
    DropErrorKept {
        between: u8,
    },
    // ---- Families ----
    Timeline(crate::timelines::TimelineOp),
    Copy(crate::copies::CopyOp),
    /// Graphs, executables and their host nodes (`graphs`).
    Graph(crate::graphs::GraphOp),
}

impl Op {
    /// Whether the step may run beside the next one. Not those whose outcome the harness's own
    /// bookkeeping must see complete before the next step plans (gates, synchronizes, failures,
    /// captures of other code, exiting workers), nor a replayable launch, whose safety contract
    /// forbids another thread to end a capture of its stream meanwhile.
    pub fn may_run_beside(&self) -> bool {
        if let Op::Graph(op) = self {
            return op.may_run_beside();
        }
        if let Op::Timeline(op) = self
            && !op.may_run_beside()
        {
            return false;
        }
        !matches!(
            self,
            Op::Replayable { .. }
                | Op::ContendedLooks { .. }
                | Op::StrandCurrent {
                    replayable: Some(_)
                }
                | Op::CaptureBesideHeldLaunches { .. }
                | Op::Hold { .. }
                | Op::Synchronize { .. }
                | Op::Fail { .. }
                | Op::FailBehindDroppedStream { .. }
                | Op::FailSeenByDrop
                | Op::ForeignBegin { .. }
                | Op::ForeignEnd { .. }
                | Op::CaptureAtNextCall { .. }
                | Op::Retire
        ) && !self.runs_alone()
    }

    /// Whether the step must run with no other step beside it, before or after.
    pub fn runs_alone(&self) -> bool {
        match self {
            Op::Timeline(op) => op.runs_alone(),
            Op::Copy(op) => op.runs_alone(),
            _ => false,
        }
    }

    /// Whether the step makes something panic: a run, a `Drop`, the hook or the logger.
    pub fn asks_for_a_panic(&self) -> bool {
        match *self {
            Op::Launch {
                panic_in_run,
                panic_in_drop,
                ..
            } => panic_in_run || panic_in_drop,
            Op::Release { panic_in_drop, .. } => panic_in_drop,
            Op::BuilderCallback { panic_in_run, .. } => panic_in_run,
            Op::Logger { mode } => mode == LoggerMode::Panicking,
            Op::Hook { panicking } => panicking,
            Op::Copy(crate::copies::CopyOp::SyncMode { panic_in_run, .. }) => panic_in_run,
            Op::Graph(ref op) => op.asks_for_a_panic(),
            _ => false,
        }
    }
}

pub fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![
        Just(Mode::Global),
        Just(Mode::ThreadLocal),
        Just(Mode::Relaxed)
    ]
}

fn rarely() -> impl Strategy<Value = bool> {
    prop::bool::weighted(0.1)
}

/// Any operation, weighted towards the common ones.
pub fn op() -> impl Strategy<Value = Op> {
    let index = any::<u8>;
    prop_oneof![
        2 => prop_oneof![
            Just(ContextKind::Primary),
            Just(ContextKind::Borrowed),
            Just(ContextKind::Fresh)
        ]
        .prop_map(|kind| Op::NewContext { kind }),
        1 => index().prop_map(|index| Op::DropContext { index }),
        2 => index().prop_map(|context| Op::Bind { context }),
        4 => (index(), any::<bool>(), prop::bool::weighted(0.3))
            .prop_map(|(context, blocking, polled)| Op::NewStream { context, blocking, polled }),
        1 => (index(), any::<bool>())
            .prop_map(|(context, legacy)| Op::SpecialStream { context, legacy }),
        1 => index().prop_map(|index| Op::DropStream { index }),
        1 => index().prop_map(|context| Op::FailBehindDroppedStream { context }),
        1 => Just(Op::FailSeenByDrop),
        1 => index().prop_map(|between| Op::DropErrorKept { between }),
        12 => (index(), rarely(), rarely()).prop_map(|(stream, panic_in_run, panic_in_drop)| {
            Op::Launch { stream, panic_in_run, panic_in_drop }
        }),
        2 => index().prop_map(|stream| Op::Replayable { stream }),
        6 => (index(), rarely())
            .prop_map(|(stream, panic_in_drop)| Op::Release { stream, panic_in_drop }),
        4 => index().prop_map(|stream| Op::Point { stream }),
        3 => index().prop_map(|point| Op::Poll { point }),
        1 => index().prop_map(|point| Op::DropPoint { point }),
        4 => index().prop_map(|stream| Op::Hold { stream }),
        4 => index().prop_map(|gate| Op::Open { gate }),
        3 => index().prop_map(|stream| Op::Synchronize { stream }),
        2 => Just(Op::Reclaim),
        2 => (index(), mode()).prop_map(|(stream, mode)| Op::BuilderBegin { stream, mode }),
        3 => (index(), rarely())
            .prop_map(|(builder, panic_in_run)| Op::BuilderCallback { builder, panic_in_run }),
        2 => (index(), prop::option::of(index()))
            .prop_map(|(builder, launch_on)| Op::BuilderEnd { builder, launch_on }),
        1 => index().prop_map(|context| Op::Fail { context }),
        1 => (index(), 1..3u8).prop_map(|(entry, count)| Op::FailNext { entry, count }),
        1 => (index(), 1..2000u16).prop_map(|(entry, micros)| Op::DelayNext { entry, micros }),
        2 => (index(), mode()).prop_map(|(stream, mode)| Op::ForeignBegin { stream, mode }),
        2 => index().prop_map(|capture| Op::ForeignEnd { capture }),
        // Holding launches costs wall time: a sequence in about two hundred has one.
        1 => (index(), prop::bool::weighted(0.02)).prop_map(|(context, held)| {
            if held { Op::CaptureBesideHeldLaunches { context } } else { Op::Reclaim }
        }),
        1 => index().prop_map(|stream| Op::ContendedLooks { stream }),
        1 => prop::option::of((index(), any::<bool>()))
            .prop_map(|replayable| Op::StrandCurrent { replayable }),
        1 => (
            index(),
            index(),
            mode(),
            prop::bool::weighted(0.3),
            prop_oneof![3 => Just(0u8), 1 => Just(1u8)],
        )
            .prop_map(|(entry, stream, mode, look_fails, calls_before)| {
                Op::CaptureAtNextCall {
                    entry,
                    stream,
                    mode,
                    look_fails,
                    calls_before,
                }
            }),
        1 => prop_oneof![
            1 => Just(LoggerMode::Quiet),
            1 => Just(LoggerMode::Panicking),
            2 => Just(LoggerMode::CallingBack)
        ]
        .prop_map(|mode| Op::Logger { mode }),
        1 => any::<bool>().prop_map(|panicking| Op::Hook { panicking }),
        1 => (
            prop_oneof![
                Just(cuda_host::points::WatcherPace::Balanced),
                Just(cuda_host::points::WatcherPace::Spinning),
                Just(cuda_host::points::WatcherPace::Frugal),
            ],
            prop_oneof![
                Just(cuda_host::polled::EnginePace::Balanced),
                Just(cuda_host::polled::EnginePace::Spinning),
                Just(cuda_host::polled::EnginePace::Frugal),
            ]
        )
            .prop_map(|(pace, engine)| Op::Pace { pace, engine }),
        1 => Just(Op::Retire),
        20 => crate::timelines::op().prop_map(Op::Timeline),
        6 => crate::copies::op().prop_map(Op::Copy),
        30 => crate::graphs::op().prop_map(Op::Graph),
    ]
}

/// A sequence of `1..=steps` steps over the workers.
pub fn sequence(steps: usize) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (any::<u8>(), op(), prop::bool::weighted(0.25)).prop_map(|(worker, op, beside)| {
            let beside = beside && op.may_run_beside();
            Step { worker, op, beside }
        }),
        1..=steps,
    )
    .prop_map(|mut steps| {
        // A step that runs alone starts once the one before it returned.
        for at in 1..steps.len() {
            if steps[at].op.runs_alone() {
                steps[at - 1].beside = false;
            }
        }
        steps
    })
}

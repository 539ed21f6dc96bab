//! The timeline family: timelines made on the sequence's contexts (some on a narrow device, whose
//! streams compare 32 bits), handles cloned and dropped in any order on any worker, streams'
//! waits and signals at values near and far above the value, host signals, reads, blocking waits
//! and futures, and context values made per request whose streams ran a timeline's operation.
//!
//! What it checks: a stream passes a wait only once the value reached it, or once the last
//! handle went (never early); a host wait or future completes as soon as the value reached its
//! value (never late) and only then, or with `ContextFailed` once the context failed; the value
//! never falls while a handle lives; a narrow timeline refuses a wait more than 2^31 above the
//! value with `Error::OutsideNarrowWindow` and accepts every other; every stream's wait is
//! passed once the last handle went (no stranded wait); context values made per request leave
//! the context's pinned pages as they found them.

use crate::execute::Env;
use crate::plan::ENTRIES;
use crate::witness::violated;
use crate::world::{ContextEntry, ContextKind, Progress, StreamEntry, StreamKind};
use cuda_host::{Context, Device, Error, Stream, StreamFlags, timeline::Timeline};
use cuda_host_sys::{CUdevice_attribute, CUresult};
use proptest::prelude::*;
use std::future::Future as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::task::Poll;
use std::time::{Duration, Instant};

/// How far a narrow timeline's streams see: a wait for `v` lets its stream go while the value
/// is in `v ..= v + 2^31 - 1`.
const WINDOW: u64 = 1 << 31;

/// The device attribute a narrow device answers 0 to.
const NARROW: CUdevice_attribute =
    CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS;

/// How many context values a burst of requests makes: more than a page of pinned words holds,
/// so that one word left behind by each grows the context's pages.
const REQUESTS: usize = 600;

/// An operation of the family.
#[derive(Debug, Clone)]
pub enum TimelineOp {
    /// A timeline of a context of the sequence, narrow (its streams compare 32 bits) or not,
    /// raised by the host or signalled by one stream.
    New {
        context: u8,
        narrow: bool,
        start: Start,
        by_stream: bool,
    },
    Clone {
        timeline: u8,
    },
    /// Drops a handle (a clone) of a timeline, on this worker, whichever made it.
    DropHandle {
        timeline: u8,
        handle: u8,
    },
    /// A stream waits for a value; with `held`, behind a gate closed on it first.
    Wait {
        timeline: u8,
        stream: u8,
        ahead: Ahead,
        held: bool,
    },
    /// A stream signals a value (a timeline signalled by streams: its one stream).
    StreamSignal {
        timeline: u8,
        stream: u8,
        ahead: Ahead,
    },
    /// The host raises the value (a timeline the host raises).
    HostSignal {
        timeline: u8,
        ahead: Ahead,
    },
    /// Reads the value.
    Read {
        timeline: u8,
    },
    /// A blocking wait with a short timeout.
    HostWait {
        timeline: u8,
        ahead: Ahead,
        micros: u16,
    },
    /// A future of a value, kept for later polls.
    Future {
        timeline: u8,
        ahead: Ahead,
    },
    PollFuture {
        future: u8,
    },
    DropFuture {
        future: u8,
    },
    /// Context values made per request, as libraries make them (a borrowed handle or the
    /// primary context retained per call), each with a stream that signals a timeline of it.
    Requests {
        primary: bool,
    },
    /// Waits across a narrow timeline's window, then its last handle goes: stream `held` waits
    /// for the next value behind a gate, the host raises the value past it, stream `far` waits
    /// at the window's far end (2^31 above the value, more than 2^31 above the held wait), and
    /// every handle is dropped while the gate still holds the first. The last drop's raise must
    /// release both, the first before it passes its window. With `capture_between`, other code
    /// begins a capture of the held stream at cuda-host's second look whether it captures, after
    /// the first wait went to the stream: refused, but live there. With `far_passes`, once the
    /// far stream passed its wait (in its turn), this worker's drains let go of its hold, which
    /// may be the word's last while the gate still holds the first.
    AcrossTheWindow {
        timeline: u8,
        held: u8,
        far: u8,
        capture_between: bool,
        far_passes: bool,
    },
    /// A wait on the worker's own per-thread stream of the timeline's context whose point is one
    /// nothing records (the stream's new track cannot make its word's probe, so the point is an
    /// event's record, which fails). The stream's value joins the sequence's, dropped on another
    /// thread (whose drop names that thread's per-thread stream), so once the worker exited only
    /// the point it marks as it exits shows the wait passed.
    /// With `exits`, on a thread of the step's own that then exits, its next records failing as
    /// many times as it says (the first tries of the point its exit marks); with `drop_error`,
    /// that thread also drops a stream of the context whose destroy fails just before it exits,
    /// so that the exit marks its point while the error waits for the context's next call.
    UnmarkedOnOwnStream {
        timeline: u8,
        ahead: Ahead,
        exits: Option<u8>,
        drop_error: bool,
    },
    /// Narrow timelines (8 to 24 as `count` says) of the context at `context`, each dropped in
    /// turn while two new streams, each held at a gate, have yet to pass its waits 2^31 apart:
    /// each takes turns until the gates open. With no step beside it, once the watcher rests,
    /// its wakes are counted: the turns end on one grid, so it wakes a few times per longest
    /// pause, not once per timeline per turn. Then the gates open, and both streams pass every
    /// wait in their turns.
    DroppedTurns {
        context: u8,
        count: u8,
    },
}

/// Where a timeline starts.
#[derive(Debug, Clone, Copy)]
pub enum Start {
    Zero,
    /// Just below a carry into the high 32 bits.
    BelowCarry,
    /// 2^62.
    High,
}

/// A value relative to the timeline's.
#[derive(Debug, Clone, Copy)]
pub enum Ahead {
    /// This far below the value (a value reached).
    Below(u8),
    /// This far above it.
    By(u8),
    /// 2^31 − 1 above it.
    WindowLess,
    /// 2^31 above it: the highest a narrow timeline's wait may be for.
    Window,
    /// 2^31 + 1 above it: beyond a narrow timeline's window.
    Beyond,
    /// The highest value waited for (a signal), or the far end of the window (a wait).
    Highest,
}

impl TimelineOp {
    /// Whether it must run with no other step beside it (it measures the process's pinned
    /// pages, or the watcher's wakes).
    pub fn runs_alone(&self) -> bool {
        matches!(
            self,
            TimelineOp::Requests { .. } | TimelineOp::DroppedTurns { .. }
        )
    }

    /// Whether the step may run beside the next: not a stream's wait, which holds its stream
    /// (behind a gate it closes first, or until a later step raises the value), so that a
    /// synchronize beside it, which looked before the wait was there, would wait for good (as
    /// beside `Op::Hold`).
    pub fn may_run_beside(&self) -> bool {
        !matches!(
            self,
            TimelineOp::Wait { .. }
                | TimelineOp::UnmarkedOnOwnStream { .. }
                | TimelineOp::AcrossTheWindow { .. }
                | TimelineOp::DroppedTurns { .. }
        )
    }
}

fn ahead() -> impl Strategy<Value = Ahead> {
    prop_oneof![
        2 => (0..3u8).prop_map(Ahead::Below),
        5 => (1..4u8).prop_map(Ahead::By),
        2 => Just(Ahead::WindowLess),
        3 => Just(Ahead::Window),
        2 => Just(Ahead::Beyond),
        3 => Just(Ahead::Highest),
    ]
}

/// Any operation of the family.
pub fn op() -> impl Strategy<Value = TimelineOp> {
    let index = any::<u8>;
    let start = prop_oneof![
        Just(Start::Zero),
        Just(Start::BelowCarry),
        Just(Start::High)
    ];
    prop_oneof![
        8 => (index(), prop::bool::weighted(0.7), start, prop::bool::weighted(0.3)).prop_map(
            |(context, narrow, start, by_stream)| TimelineOp::New { context, narrow, start, by_stream }
        ),
        2 => index().prop_map(|timeline| TimelineOp::Clone { timeline }),
        2 => (index(), index())
            .prop_map(|(timeline, handle)| TimelineOp::DropHandle { timeline, handle }),
        8 => (index(), index(), ahead(), prop::bool::weighted(0.3)).prop_map(
            |(timeline, stream, ahead, held)| TimelineOp::Wait { timeline, stream, ahead, held }
        ),
        3 => (index(), index(), ahead()).prop_map(|(timeline, stream, ahead)| {
            TimelineOp::StreamSignal { timeline, stream, ahead }
        }),
        2 => (index(), ahead(), prop::option::of(0..3u8), any::<bool>()).prop_map(
            |(timeline, ahead, exits, drop_error)| TimelineOp::UnmarkedOnOwnStream {
                timeline,
                ahead,
                exits,
                drop_error,
            }
        ),
        5 => (index(), ahead()).prop_map(|(timeline, ahead)| TimelineOp::HostSignal { timeline, ahead }),
        1 => index().prop_map(|timeline| TimelineOp::Read { timeline }),
        2 => (index(), ahead(), 0..2000u16).prop_map(|(timeline, ahead, micros)| {
            TimelineOp::HostWait { timeline, ahead, micros }
        }),
        2 => (index(), ahead()).prop_map(|(timeline, ahead)| TimelineOp::Future { timeline, ahead }),
        2 => index().prop_map(|future| TimelineOp::PollFuture { future }),
        1 => index().prop_map(|future| TimelineOp::DropFuture { future }),
        1 => any::<bool>().prop_map(|primary| TimelineOp::Requests { primary }),
        1 => (index(), index(), index(), any::<bool>(), any::<bool>()).prop_map(
            |(timeline, held, far, capture_between, far_passes)| TimelineOp::AcrossTheWindow {
                timeline,
                held,
                far,
                capture_between,
                far_passes,
            }
        ),
        1 => (index(), index())
            .prop_map(|(context, count)| TimelineOp::DroppedTurns { context, count }),
    ]
}

/// A stream's wait, with the marker enqueued right after it.
struct StreamWait {
    value: u64,
    /// What the wait compares against in effect: its value, or the value when it was asked if
    /// higher (a narrow wait for a value reached compares the value then).
    effective: u64,
    stream_name: String,
    /// The stream's handle and kind, for what its wait holds back.
    raw: usize,
    kind: StreamKind,
    context_raw: usize,
    context: Weak<ContextEntry>,
    /// Whether its stream's context may fail (a fresh one).
    may_fail: bool,
    progress: Arc<Progress>,
    /// `None` when the stream has no marker after it (a capture took it, a per-thread stream):
    /// then it counts as pending for good.
    marker: Option<u32>,
    passed: bool,
}

impl StreamWait {
    /// `stream`'s wait for `value`, asked at `before`, with the marker its stream writes after it.
    fn new(value: u64, before: u64, stream: &StreamEntry, marker: Option<u32>) -> StreamWait {
        StreamWait {
            value,
            effective: value.max(before),
            stream_name: stream.name.clone(),
            raw: stream.stream.as_raw().addr(),
            kind: stream.kind,
            context_raw: stream.context.context.as_raw().addr(),
            context: Arc::downgrade(&stream.context),
            may_fail: stream.context.kind == ContextKind::Fresh,
            progress: Arc::clone(&stream.progress),
            marker,
            passed: false,
        }
    }

    /// Whether its stream's context failed: `None` when it is gone and may have.
    fn failed(&self) -> Option<bool> {
        failed(&self.context, self.may_fail)
    }
}

/// Whether a context failed: `None` when its value is gone and it may have (a fresh one).
fn failed(context: &Weak<ContextEntry>, may_fail: bool) -> Option<bool> {
    match context.upgrade() {
        Some(context) => Some(context.failed.load(Ordering::SeqCst)),
        None => (!may_fail).then_some(false),
    }
}

/// A future of a value, kept between steps.
struct PendingFuture {
    future: cuda_host::timeline::Reached,
    value: u64,
}

/// A timeline of the sequence and what the harness knows of it.
struct TimelineEntry {
    name: String,
    context: Weak<ContextEntry>,
    may_fail: bool,
    narrow: bool,
    /// Signalled by a narrow device's stream: each signal writes the low half, then the high
    /// one, so the host may see a value between two signals for a moment.
    torn: bool,
    by_stream: bool,
    handles: Vec<Timeline>,
    futures: Vec<PendingFuture>,
    /// The last handle (futures included) went: its streams are released.
    abandoned: bool,
    /// The highest value anything may have set: the start, the host's signals, the streams'
    /// signals enqueued (set before each is asked for).
    ceiling: u64,
    /// The highest value a read saw.
    seen: u64,
    /// The stream that signals it, for one signalled by a stream.
    signaller: Option<Weak<StreamEntry>>,
    waits: Vec<StreamWait>,
    highest_waited: u64,
}

impl TimelineEntry {
    /// Whether its context failed, or is gone and may have.
    fn context_failed_or_gone(&self) -> bool {
        failed(&self.context, self.may_fail) != Some(false)
    }

    /// A handle, while any lives (not counting futures).
    fn handle(&self) -> Option<&Timeline> {
        self.handles.first()
    }

    /// Marks the waits whose streams passed them; a wait passed before the value could have
    /// reached it, with a handle alive, is a violation. Reads each marker before what is known
    /// of the value, which only rises (the drop of the last handle sets `abandoned` first).
    fn check_waits(&mut self) {
        for wait in self.waits.iter_mut().filter(|wait| !wait.passed) {
            let Some(marker) = wait.marker else { continue };
            if wait.progress.seen() < marker {
                continue;
            }
            wait.passed = true;
            WAITS_PASSED.fetch_add(1, Ordering::Relaxed);
            if !self.abandoned && self.ceiling < wait.value {
                violated(format!(
                    "{} passed its wait on {} for {} before the value reached it (nothing set \
                     more than {})",
                    wait.stream_name, self.name, wait.value, self.ceiling
                ));
            }
        }
    }

    /// The highest value a signal may set without moving the value 2^31 or more past a wait
    /// of a narrow timeline's stream that has yet to pass it (which would then hold it).
    fn safe_ceiling(&self) -> u64 {
        if !self.narrow {
            return Timeline::MAX - WINDOW * 4;
        }
        self.waits
            .iter()
            .filter(|wait| !wait.passed && wait.failed() != Some(true))
            .map(|wait| wait.effective + WINDOW - 1)
            .min()
            .unwrap_or(Timeline::MAX - WINDOW * 4)
    }
}

/// What the family did over the run, for the figures printed at its end.
static MADE_NARROW: AtomicU64 = AtomicU64::new(0);
static MADE_WIDE: AtomicU64 = AtomicU64::new(0);
static WAITS: AtomicU64 = AtomicU64::new(0);
static WAITS_PASSED: AtomicU64 = AtomicU64::new(0);
static REFUSED_BEYOND: AtomicU64 = AtomicU64::new(0);
static BURSTS_MEASURED: AtomicU64 = AtomicU64::new(0);
static TURNS_RESTS_COUNTED: AtomicU64 = AtomicU64::new(0);

/// The calls marking the point after a stream operation: one that fails leaves a point nothing
/// records, which only a later point, a synchronize or the drop of the stream shows passed.
const MARKING_CALLS: [&std::ffi::CStr; 3] =
    [c"cuEventRecord", c"cuEventCreate", c"cuStreamIsCapturing"];

/// Per worker (by id), its operations on its own per-thread streams whose point may be one
/// nothing records; and, for the sequence under way, those of workers that exited. Only the
/// worker's thread can name its per-thread stream, so it marks a point there as it exits, which
/// shows such points passed (`docs/RELIABILITY.md`, "a point nothing records"): the counts at
/// the sequence's end must be back at their baseline all the same.
static UNRECORDED: Mutex<Vec<(usize, u64)>> = Mutex::new(Vec::new());
static UNRECORDED_AT_EXIT: AtomicU64 = AtomicU64::new(0);
static UNRECORDED_TOTAL: AtomicU64 = AtomicU64::new(0);

/// Runs `operate`, a timeline operation on `stream`: on a per-thread stream, an injected failure
/// of a call marking its point that fired meanwhile is noted for the worker's exit.
fn operating<T>(env: &Env, stream: &StreamEntry, operate: impl FnOnce() -> T) -> T {
    let armed = || -> u32 {
        MARKING_CALLS
            .iter()
            .map(|call| env.controls.armed_failures(call))
            .sum()
    };
    if stream.kind != StreamKind::PerThread {
        return operate();
    }
    let before = armed();
    let outcome = operate();
    if armed() < before
        && let Some(worker) = crate::witness::current_worker()
    {
        let mut unrecorded = UNRECORDED.lock().unwrap();
        match unrecorded.iter_mut().find(|(id, _)| *id == worker) {
            Some((_, count)) => *count += 1,
            None => unrecorded.push((worker, 1)),
        }
    }
    outcome
}

/// The worker of id `worker` exits: its operations whose point may be one nothing records pass
/// with the point its exit marks.
pub fn worker_exits(worker: usize) {
    let mut unrecorded = UNRECORDED.lock().unwrap();
    if let Some(at) = unrecorded.iter().position(|(id, _)| *id == worker) {
        UNRECORDED_AT_EXIT.fetch_add(unrecorded.remove(at).1, Ordering::SeqCst);
    }
}

/// Adds what [`worker_exits`] counted in the sequence to the run's figure; the count starts
/// again.
pub fn count_unrecorded_on_exit() {
    UNRECORDED.lock().unwrap().clear();
    let exited = UNRECORDED_AT_EXIT.swap(0, Ordering::SeqCst);
    UNRECORDED_TOTAL.fetch_add(exited, Ordering::Relaxed);
}

/// The family's figures over the run.
pub fn figures() -> String {
    let load = |count: &AtomicU64| count.load(Ordering::Relaxed);
    format!(
        "{} narrow and {} wide timelines, {} stream waits ({} seen passed), {} waits beyond \
         a narrow window refused, {} bursts of {REQUESTS} requests measured, the watcher's \
         wakes counted while dropped timelines took turns {} times; {} operations on exited \
         workers' per-thread streams whose failed marking may have left a point nothing records \
         (passed with the point each worker marked as it exited); {} holds excused by a warning \
         that no point could follow",
        load(&MADE_NARROW),
        load(&MADE_WIDE),
        load(&WAITS),
        load(&WAITS_PASSED),
        load(&REFUSED_BEYOND),
        load(&BURSTS_MEASURED),
        load(&TURNS_RESTS_COUNTED),
        load(&UNRECORDED_TOTAL),
        load(&crate::finish::UNFOLLOWED_EXCUSED)
    )
}

/// The timelines of the sequence under way (emptied at its end).
static TIMELINES: Mutex<Vec<Arc<Mutex<TimelineEntry>>>> = Mutex::new(Vec::new());

/// Held to read while a step makes a timeline or enqueues a 64-bit operation, and to write while
/// one plays a narrow device: the software driver's answer is process-wide, and refuses 64-bit
/// operations meanwhile.
static ATTRIBUTE: RwLock<()> = RwLock::new(());

fn attribute_read() -> std::sync::RwLockReadGuard<'static, ()> {
    ATTRIBUTE
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn timeline(index: u8) -> Option<Arc<Mutex<TimelineEntry>>> {
    let timelines = TIMELINES.lock().unwrap();
    (!timelines.is_empty()).then(|| Arc::clone(&timelines[usize::from(index) % timelines.len()]))
}

impl TimelineEntry {
    /// Notes that a handle or future was taken out to be dropped: once none is left, the
    /// timeline is abandoned (its last drop raises it). Whether that was the last.
    fn note_let_go(&mut self) -> bool {
        let last = self.handles.is_empty() && self.futures.is_empty();
        if last {
            self.abandoned = true;
        }
        last
    }
}

fn lock(entry: &Mutex<TimelineEntry>) -> std::sync::MutexGuard<'_, TimelineEntry> {
    entry
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Checks every timeline's waits.
fn check_all() {
    let timelines: Vec<_> = TIMELINES.lock().unwrap().clone();
    for entry in timelines {
        lock(&entry).check_waits();
    }
}

/// Whether the legacy stream orders streams of this kind with each other.
fn orders_with_legacy(kind: StreamKind) -> bool {
    matches!(
        kind,
        StreamKind::Blocking | StreamKind::Legacy | StreamKind::PerThread
    )
}

/// Whether work enqueued on `stream` now may be ordered after `wait`: the same stream, or two
/// the legacy stream orders in one context.
fn ordered(wait: &StreamWait, stream: &StreamEntry) -> bool {
    wait.raw == stream.stream.as_raw().addr()
        || (orders_with_legacy(stream.kind)
            && orders_with_legacy(wait.kind)
            && wait.context_raw == stream.context.context.as_raw().addr())
}

/// Whether work enqueued on `stream` now may wait for a timeline's value nobody signalled yet:
/// a wait on it its stream has not been seen passing, or, for the legacy stream and blocking
/// streams, one on a blocking, legacy or per-thread stream of its context (the legacy stream
/// orders them).
pub fn holds(stream: &StreamEntry) -> bool {
    check_all();
    let timelines: Vec<_> = TIMELINES.lock().unwrap().clone();
    timelines.iter().any(|entry| {
        lock(entry)
            .waits
            .iter()
            .any(|wait| !wait.passed && ordered(wait, stream))
    })
}

/// A value `ahead` of `base`, for a wait or a future.
fn target(entry: &TimelineEntry, base: u64, ahead: Ahead) -> u64 {
    let value = match ahead {
        Ahead::Below(by) => base.saturating_sub(u64::from(by)),
        Ahead::By(by) => base + u64::from(by),
        Ahead::WindowLess => base + WINDOW - 1,
        Ahead::Window => base + WINDOW,
        Ahead::Beyond => base + WINDOW + 1,
        Ahead::Highest => entry.highest_waited.max(base + WINDOW),
    };
    value.min(Timeline::MAX)
}

/// Runs an operation of the family on the calling worker: its outcome, for the log.
pub fn execute(env: &Env, op: &TimelineOp) -> String {
    let outcome = match *op {
        TimelineOp::New {
            context,
            narrow,
            start,
            by_stream,
        } => new(env, context, narrow, start, by_stream),
        TimelineOp::Clone { timeline: index } => {
            let Some(entry) = timeline(index) else {
                return "no timeline".to_owned();
            };
            let mut entry = lock(&entry);
            match entry.handle().cloned() {
                Some(clone) => {
                    entry.handles.push(clone);
                    format!("{} has {} handles", entry.name, entry.handles.len())
                }
                None => format!("{}: no handle left", entry.name),
            }
        }
        TimelineOp::DropHandle {
            timeline: index,
            handle,
        } => {
            let Some(entry) = timeline(index) else {
                return "no timeline".to_owned();
            };
            let mut locked = lock(&entry);
            if locked.handles.is_empty() {
                return format!("{}: no handle left", locked.name);
            }
            let at = usize::from(handle) % locked.handles.len();
            let dropped = locked.handles.remove(at);
            let last = locked.note_let_go();
            let name = locked.name.clone();
            drop(locked);
            drop(dropped);
            format!(
                "a handle of {name} dropped{}",
                if last { ", the last" } else { "" }
            )
        }
        TimelineOp::Wait {
            timeline: index,
            stream,
            ahead,
            held,
        } => wait(env, index, stream, ahead, held),
        TimelineOp::StreamSignal {
            timeline: index,
            stream,
            ahead,
        } => stream_signal(env, index, stream, ahead),
        TimelineOp::HostSignal {
            timeline: index,
            ahead,
        } => host_signal(index, ahead),
        TimelineOp::Read { timeline: index } => {
            let Some(entry) = timeline(index) else {
                return "no timeline".to_owned();
            };
            let mut entry = lock(&entry);
            let Some(value) = entry.handle().map(Timeline::value) else {
                return format!("{}: no handle left", entry.name);
            };
            read(&mut entry, value);
            format!("{} is at {value}", entry.name)
        }
        TimelineOp::HostWait {
            timeline: index,
            ahead,
            micros,
        } => host_wait(index, ahead, micros),
        TimelineOp::Future {
            timeline: index,
            ahead,
        } => {
            let Some(entry) = timeline(index) else {
                return "no timeline".to_owned();
            };
            let mut entry = lock(&entry);
            let Some(handle) = entry.handle() else {
                return format!("{}: no handle left", entry.name);
            };
            let value = target(&entry, handle.value(), ahead);
            let future = handle.reached(value);
            entry.futures.push(PendingFuture { future, value });
            format!("a future of {} for {value}", entry.name)
        }
        TimelineOp::PollFuture { future } => poll_future(future),
        TimelineOp::DropFuture { future } => {
            let Some((entry, at)) = future_at(future) else {
                return "no future".to_owned();
            };
            let mut locked = lock(&entry);
            if at >= locked.futures.len() {
                return FUTURE_WENT.to_owned();
            }
            let dropped = locked.futures.remove(at);
            let last = locked.note_let_go();
            let name = locked.name.clone();
            drop(locked);
            drop(dropped);
            format!(
                "a future of {name} dropped{}",
                if last { ", the last handle" } else { "" }
            )
        }
        TimelineOp::Requests { primary } => requests(env, primary),
        TimelineOp::AcrossTheWindow {
            timeline: index,
            held,
            far,
            capture_between,
            far_passes,
        } => across_the_window(env, index, held, far, capture_between, far_passes),
        TimelineOp::DroppedTurns { context, count } => dropped_turns(env, context, count),
        TimelineOp::UnmarkedOnOwnStream {
            timeline: index,
            ahead,
            exits,
            drop_error,
        } => unmarked_on_own_stream(env, index, ahead, exits, drop_error),
    };
    check_all();
    outcome
}

/// A read `value`: the value never falls while a handle lives, and never exceeds what was set.
fn read(entry: &mut TimelineEntry, value: u64) {
    if value < entry.seen && !entry.torn {
        violated(format!(
            "{} fell from {} to {value}",
            entry.name, entry.seen
        ));
    }
    if value > entry.ceiling {
        violated(format!(
            "{} is at {value}, above anything set ({})",
            entry.name, entry.ceiling
        ));
    }
    entry.seen = entry.seen.max(value);
}

/// A timeline as a device without 64-bit stream memory operations has it. Playing a narrow
/// device refuses every 64-bit operation meanwhile: only while no step makes one. A step that
/// holds it long (a burst of requests) leaves this one wide.
fn new_narrow(env: &Env, context: &Context, initial: u64) -> cuda_host::Result<Timeline> {
    let deadline = Instant::now() + Duration::from_millis(50);
    let guard = loop {
        match ATTRIBUTE.try_write() {
            Ok(guard) => break Some(guard),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => {
                break Some(poisoned.into_inner());
            }
            Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_micros(100));
            }
            Err(std::sync::TryLockError::WouldBlock) => break None,
        }
    };
    if guard.is_some() {
        env.controls.override_device_attribute(NARROW, Some(0));
    }
    let made = Timeline::new(context, initial);
    if guard.is_some() {
        env.controls.override_device_attribute(NARROW, None);
    }
    made
}

fn new(env: &Env, context: u8, narrow: bool, start: Start, by_stream: bool) -> String {
    let world = &env.world;
    let context = world.context(context);
    let initial = match start {
        Start::Zero => 0,
        Start::BelowCarry => (1 << 32) - 2,
        Start::High => 1 << 62,
    };
    let made = if narrow {
        new_narrow(env, &context.context, initial)
    } else {
        let _read = attribute_read();
        Timeline::new(&context.context, initial)
    };
    let handle = match made {
        Ok(handle) => handle,
        Err(error) => {
            env.check_refusal_in("Timeline::new", Some(&context), &error);
            return format!("refused: {error}");
        }
    };
    let narrow = !handle.uses_64_bit_operations();
    if narrow { &MADE_NARROW } else { &MADE_WIDE }.fetch_add(1, Ordering::Relaxed);
    let name = format!(
        "timeline {} ({}, {}) of {}",
        world.number(),
        if narrow { "narrow" } else { "wide" },
        if by_stream {
            "signalled by a stream"
        } else {
            "raised by the host"
        },
        context.name
    );
    let entry = TimelineEntry {
        name: name.clone(),
        context: Arc::downgrade(&context),
        may_fail: context.kind == ContextKind::Fresh,
        narrow,
        torn: narrow && by_stream,
        by_stream,
        handles: vec![handle],
        futures: Vec::new(),
        abandoned: false,
        ceiling: initial,
        seen: initial,
        signaller: None,
        waits: Vec::new(),
        highest_waited: initial,
    };
    TIMELINES.lock().unwrap().push(Arc::new(Mutex::new(entry)));
    format!("{name} made at {initial}")
}

/// Whether a refusal of a timeline's operation on `stream` has a reason the harness knows of.
fn check_refused(
    env: &Env,
    what: &str,
    entry: &TimelineEntry,
    stream: &StreamEntry,
    error: &Error,
) {
    if entry.context_failed_or_gone() {
        return;
    }
    env.check_refusal(what, Some(stream), error);
}

fn wait(env: &Env, index: u8, stream: u8, ahead: Ahead, held: bool) -> String {
    let Some(entry) = timeline(index) else {
        return "no timeline".to_owned();
    };
    wait_on(env, &entry, stream, ahead, held)
}

fn wait_on(
    env: &Env,
    entry: &Mutex<TimelineEntry>,
    stream: u8,
    ahead: Ahead,
    held: bool,
) -> String {
    let Some(stream) = env.world.stream(stream) else {
        return "no stream".to_owned();
    };
    wait_on_stream(env, entry, stream, ahead, held)
}

/// The worker's own per-thread stream of the timeline's context waits, its point one nothing
/// records: see [`TimelineOp::UnmarkedOnOwnStream`].
fn unmarked_on_own_stream(
    env: &Env,
    index: u8,
    ahead: Ahead,
    exits: Option<u8>,
    drop_error: bool,
) -> String {
    let Some(entry) = timeline(index) else {
        return "no timeline".to_owned();
    };
    let Some(context) = lock(&entry).context.upgrade() else {
        return "its context is gone".to_owned();
    };
    // A value of its own where the context is the primary one, as a library makes per request:
    // its tracks are new, so the stream's track has no word and its point is an event's record,
    // which fails. (Another value's quiet track, taken back, would offer its word.)
    let value = match context.kind {
        ContextKind::Primary | ContextKind::Borrowed => Device::get(env.world.base.driver(), 0)
            .and_then(|device| Context::primary(&device))
            .ok(),
        ContextKind::Fresh => None,
    };
    let stream = env.world.add_stream(
        Stream::per_thread(value.as_ref().unwrap_or(&context.context)),
        &context,
        StreamKind::PerThread,
        false,
    );
    drop(value);
    env.world.use_stream(&stream);
    let name = stream.name.clone();
    let wait = || {
        let failing = [c"cuEventCreate", c"cuEventRecord"];
        for call in failing {
            env.controls
                .fail_next_calls(call, 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        }
        let outcome = wait_on_stream(env, &entry, stream, ahead, false);
        // Disarmed where the wait did not get that far.
        for call in failing {
            env.controls
                .fail_next_calls(call, 0, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        }
        outcome
    };
    let Some(failures) = exits else {
        return format!("on {name}, its point failing: {outcome}", outcome = wait());
    };
    let outcome = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // Values of exited threads it drains may be dropped here, as on any worker.
                let _step = crate::workers::become_step_thread();
                let outcome = wait();
                env.controls.fail_next_calls(
                    c"cuEventRecord",
                    u32::from(failures),
                    CUresult::CUDA_ERROR_OUT_OF_MEMORY,
                );
                let left =
                    drop_error && crate::drop_errors::leave(env, &context.context).unwrap_or(false);
                (outcome, left)
            })
            .join()
    });
    match outcome {
        Ok((outcome, left)) => format!(
            "on {name} of a thread that then exited{}, its next {failures} records failing, \
             its point failing: {outcome}",
            if left {
                " with a failed destroy's error waiting"
            } else {
                ""
            }
        ),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

fn wait_on_stream(
    env: &Env,
    entry: &Mutex<TimelineEntry>,
    stream: Arc<StreamEntry>,
    ahead: Ahead,
    held: bool,
) -> String {
    // A gate in front: the stream meets the wait only once a later step opened it, the value
    // moved on meanwhile, or the last handle went.
    let gate = (held && matches!(stream.stream.capture_state(), Ok(None)))
        .then(|| env.world.hold(&stream))
        .flatten();
    let mut entry = lock(entry);
    entry.check_waits();
    let Some(handle) = entry.handle().cloned() else {
        return format!("{}: no handle left", entry.name);
    };
    let before = handle.value();
    let mut value = target(&entry, before, ahead);
    if entry.narrow {
        if matches!(ahead, Ahead::Highest) {
            value = value.min(before + WINDOW);
        }
        // Not 2^31 or more below a signal a stream may still land: it would hold the stream.
        value = value.max(entry.ceiling.saturating_sub(WINDOW - 1));
        // Nor 2^31 or more below a wait its stream (or one the legacy stream orders it after)
        // has yet to pass: no value releases the two in that order.
        let effective = value.max(before);
        if let Some(higher) = entry.waits.iter().find(|wait| {
            !wait.passed && ordered(wait, &stream) && wait.effective >= effective + WINDOW
        }) {
            return format!(
                "{}: no wait for {value}: {} waits for {} first",
                entry.name, higher.stream_name, higher.value
            );
        }
    }
    let enqueued = {
        let _read = (!entry.narrow).then(attribute_read);
        operating(env, &stream, || handle.enqueue_wait(&stream.stream, value))
    };
    let after = handle.value();
    match enqueued {
        Ok(()) => {
            if entry.narrow && value > after + WINDOW {
                violated(format!(
                    "{} accepted a wait for {value}, more than 2^31 above its value {after}",
                    entry.name
                ));
            }
            let marker = (stream.kind != StreamKind::PerThread)
                .then(|| stream.progress.mark(&stream.stream))
                .flatten();
            entry.highest_waited = entry.highest_waited.max(value);
            WAITS.fetch_add(1, Ordering::Relaxed);
            entry
                .waits
                .push(StreamWait::new(value, before, &stream, marker));
            format!(
                "{}{} waits on {} for {value} (at {before}), marker {marker:?}",
                stream.name,
                gate.map_or(String::new(), |gate| format!(" behind gate {gate}")),
                entry.name
            )
        }
        Err(Error::OutsideNarrowWindow { .. }) if entry.narrow && value > before + WINDOW => {
            REFUSED_BEYOND.fetch_add(1, Ordering::Relaxed);
            format!(
                "{} refused a wait for {value} beyond its window (at {before})",
                entry.name
            )
        }
        Err(error @ Error::OutsideNarrowWindow { .. }) => {
            violated(format!(
                "{} refused a wait for {value} at {before} as beyond its window: {error}",
                entry.name
            ));
            format!("refused: {error}")
        }
        Err(error) => {
            check_refused(env, "Timeline::enqueue_wait", &entry, &stream, &error);
            // Refused after the driver took the wait (a capture other code began just then, or a
            // look that failed), it may hold the stream live: pending for good, to the harness.
            entry.highest_waited = entry.highest_waited.max(value);
            entry
                .waits
                .push(StreamWait::new(value, before, &stream, None));
            format!("refused: {error}")
        }
    }
}

fn stream_signal(env: &Env, index: u8, stream: u8, ahead: Ahead) -> String {
    let Some(entry) = timeline(index) else {
        return "no timeline".to_owned();
    };
    let mut entry = lock(&entry);
    if !entry.by_stream {
        return format!("{} is raised by the host", entry.name);
    }
    entry.check_waits();
    // One stream signals it, so that its signals land in order and the value only rises.
    let stream = match entry.signaller.as_ref().map(Weak::upgrade) {
        Some(Some(stream)) => stream,
        Some(None) => return format!("{}: its signalling stream is gone", entry.name),
        None => match env.world.stream(stream) {
            Some(stream) if stream.kind != StreamKind::PerThread => {
                entry.signaller = Some(Arc::downgrade(&stream));
                stream
            }
            _ => return "no stream to signal from".to_owned(),
        },
    };
    let Some(handle) = entry.handle().cloned() else {
        return format!("{}: no handle left", entry.name);
    };
    let value = signal_target(&entry, ahead);
    if value <= entry.ceiling {
        return format!("{}: no room for a signal", entry.name);
    }
    entry.ceiling = value;
    let enqueued = {
        let _read = (!entry.narrow).then(attribute_read);
        operating(env, &stream, || {
            handle.enqueue_signal(&stream.stream, value)
        })
    };
    match enqueued {
        Ok(()) => format!("{} signals {} to {value}", stream.name, entry.name),
        Err(error) => {
            check_refused(env, "Timeline::enqueue_signal", &entry, &stream, &error);
            format!("refused: {error}")
        }
    }
}

/// The value a signal `ahead` sets: above everything set so far, within the narrow window of
/// every wait pending.
fn signal_target(entry: &TimelineEntry, ahead: Ahead) -> u64 {
    let base = entry.ceiling;
    let wanted = match ahead {
        Ahead::Below(_) | Ahead::By(_) => base + 1 + u64::from(matches!(ahead, Ahead::By(2..))),
        Ahead::WindowLess | Ahead::Window | Ahead::Beyond => base + WINDOW - 1,
        Ahead::Highest => entry.highest_waited.max(base + 1),
    };
    wanted.min(entry.safe_ceiling())
}

fn host_signal(index: u8, ahead: Ahead) -> String {
    let Some(entry) = timeline(index) else {
        return "no timeline".to_owned();
    };
    host_signal_on(&entry, ahead)
}

fn host_signal_on(entry: &Mutex<TimelineEntry>, ahead: Ahead) -> String {
    let mut entry = lock(entry);
    if entry.by_stream {
        return format!("{} is signalled by a stream", entry.name);
    }
    entry.check_waits();
    let Some(handle) = entry.handle().cloned() else {
        return format!("{}: no handle left", entry.name);
    };
    let value = signal_target(&entry, ahead).max(entry.ceiling);
    entry.ceiling = value;
    match handle.signal(value) {
        Ok(()) => {
            let now = handle.value();
            if now < value {
                violated(format!(
                    "{} is at {now} after the host's signal of {value}",
                    entry.name
                ));
            }
            format!("{} raised to {value}", entry.name)
        }
        Err(error) => {
            violated(format!("Timeline::signal({value}) refused: {error}"));
            format!("refused: {error}")
        }
    }
}

fn across_the_window(
    env: &Env,
    index: u8,
    held: u8,
    far: u8,
    capture_between: bool,
    far_passes: bool,
) -> String {
    let fits = |entry: &Arc<Mutex<TimelineEntry>>| {
        let locked = lock(entry);
        locked.narrow && !locked.by_stream && !locked.handles.is_empty()
    };
    // Where the timeline picked is none of a narrow one the host raises, a new one (of the
    // context at `index`) takes its place.
    let mut made = String::new();
    let entry = match timeline(index).filter(fits) {
        Some(entry) => entry,
        None => {
            made = format!("{}; ", new(env, index, true, Start::Zero, false));
            let latest = TIMELINES.lock().unwrap().last().cloned();
            match latest.filter(fits) {
                Some(entry) => entry,
                None => return format!("{made}no narrow timeline the host raises"),
            }
        }
    };
    // Any two streams: the same one, or the legacy stream beside another, orders the far wait
    // after the held one.
    let (Some(held_stream), Some(_)) = (env.world.stream(held), env.world.stream(far)) else {
        return "no stream".to_owned();
    };
    let armed = capture_between
        && matches!(
            held_stream.kind,
            StreamKind::NonBlocking | StreamKind::Blocking
        )
        && matches!(held_stream.stream.capture_state(), Ok(None))
        && env.world.armed.lock().unwrap().is_none();
    if armed {
        // The held wait's own looks: the gate's (`wait_on`), then cuda-host's before and after
        // the wait went to the stream.
        env.world.arm_capture_at_call(
            env.controls,
            c"cuStreamIsCapturing",
            2,
            &held_stream,
            cuda_host_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        );
    }
    drop(held_stream);
    let steps = [
        wait_on(env, &entry, held, Ahead::By(1), true),
        host_signal_on(&entry, Ahead::By(2)),
        wait_on(env, &entry, far, Ahead::Window, false),
    ];
    let mut locked = lock(&entry);
    let handles = std::mem::take(&mut locked.handles);
    let futures = std::mem::take(&mut locked.futures);
    let had = !handles.is_empty() || !futures.is_empty();
    let last = had && locked.note_let_go();
    let name = locked.name.clone();
    // The far wait, the last one noted, if its stream writes a marker after it.
    let far_wait = locked
        .waits
        .last()
        .and_then(|wait| Some((Arc::clone(&wait.progress), wait.marker?)));
    drop(locked);
    drop(futures);
    drop(handles);
    let passed = match far_wait.filter(|_| far_passes && last) {
        Some((progress, marker)) => {
            // Passed in its turn, unless another gate holds the far stream.
            let passed = progress.seen_within(marker, Duration::from_millis(200)) >= marker;
            if passed {
                // The drains look at the far stream's track at their own pace.
                for _ in 0..5 {
                    cuda_host::reclaim();
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            if passed {
                "; the far stream passed its wait and this worker's drains ran"
            } else {
                "; the far stream did not pass its wait within 200 ms"
            }
        }
        None => "",
    };
    format!(
        "{made}{}{}; then {name}'s handles dropped{}{passed}",
        if armed {
            "a capture armed at the held wait's second look; "
        } else {
            ""
        },
        steps.join("; "),
        if last { ", the last" } else { "" }
    )
}

fn host_wait(index: u8, ahead: Ahead, micros: u16) -> String {
    let Some(entry) = timeline(index) else {
        return "no timeline".to_owned();
    };
    let (handle, value, name, failed_before, torn) = {
        let entry = lock(&entry);
        let Some(handle) = entry.handle().cloned() else {
            return format!("{}: no handle left", entry.name);
        };
        let value = target(&entry, handle.value(), ahead);
        let failed = entry.context_failed_or_gone();
        (handle, value, entry.name.clone(), failed, entry.torn)
    };
    let before = handle.value();
    let answer = handle.wait(value, Duration::from_micros(u64::from(micros)));
    let after = handle.value();
    let failed = failed_before || lock(&entry).context_failed_or_gone();
    match answer {
        Ok(true) if after < value && !torn => violated(format!(
            "{name}: a wait for {value} returned reached at {after}"
        )),
        Ok(false) if before >= value && !torn => violated(format!(
            "{name}: a wait for {value} timed out, though the value was {before}"
        )),
        Err(Error::ContextFailed) if failed => {}
        Err(ref error) => violated(format!("{name}: a wait for {value}: {error}")),
        Ok(_) => {}
    }
    drop(handle);
    format!("{name}: a wait for {value} (at {before}): {answer:?}")
}

/// The `index`-th future over every timeline: its timeline and its place there.
/// What a step says of a future another step beside it completed or dropped since
/// [`future_at`] picked it (its entry's lock is not held in between).
const FUTURE_WENT: &str = "the future went meanwhile";

fn future_at(index: u8) -> Option<(Arc<Mutex<TimelineEntry>>, usize)> {
    let timelines: Vec<_> = TIMELINES.lock().unwrap().clone();
    let counts: Vec<usize> = timelines
        .iter()
        .map(|entry| lock(entry).futures.len())
        .collect();
    let total: usize = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let mut at = usize::from(index) % total;
    for (entry, count) in timelines.into_iter().zip(counts) {
        if at < count {
            return Some((entry, at));
        }
        at -= count;
    }
    None
}

/// Polls a future once: `Some(outcome)` when it completed (and was checked).
fn poll_once(entry: &mut TimelineEntry, at: usize) -> Option<cuda_host::Result<()>> {
    let failed = entry.context_failed_or_gone();
    let pending = &mut entry.futures[at];
    let value = pending.value;
    let before = entry.handles.first().map_or(0, Timeline::value);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    let polled = std::pin::Pin::new(&mut pending.future).poll(&mut context);
    let after = entry.handles.first().map_or(u64::MAX, Timeline::value);
    match polled {
        Poll::Pending => {
            if before >= value && !entry.handles.is_empty() && !entry.torn {
                violated(format!(
                    "a future of {} for {value} pending, though the value was {before}",
                    entry.name
                ));
            }
            None
        }
        Poll::Ready(outcome) => {
            match &outcome {
                Ok(()) if after < value && !entry.torn => violated(format!(
                    "a future of {} for {value} completed at {after}",
                    entry.name
                )),
                Ok(()) => {}
                Err(Error::ContextFailed) if failed => {}
                Err(error) => violated(format!(
                    "a future of {} for {value} completed with {error}",
                    entry.name
                )),
            }
            Some(outcome)
        }
    }
}

fn poll_future(index: u8) -> String {
    let Some((entry, at)) = future_at(index) else {
        return "no future".to_owned();
    };
    let mut locked = lock(&entry);
    if at >= locked.futures.len() {
        return FUTURE_WENT.to_owned();
    }
    let value = locked.futures[at].value;
    match poll_once(&mut locked, at) {
        None => format!("a future of {} for {value} pending", locked.name),
        Some(outcome) => {
            let done = locked.futures.remove(at);
            locked.note_let_go();
            let name = locked.name.clone();
            drop(locked);
            drop(done);
            format!("a future of {name} for {value} completed: {outcome:?}")
        }
    }
}

/// A burst of context values made per request over the primary context, each with a stream
/// that signals a timeline of it, synchronized, then dropped: once every request's stream passed
/// its signal, each value gives its stream's point word back, and the context's pinned pages do
/// not grow. Measured only where nothing else may take or keep pinned words meanwhile (no other
/// step runs, no failure armed, no capture).
fn requests(env: &Env, primary: bool) -> String {
    let world = &env.world;
    let device = match Device::get(world.base.driver(), 0) {
        Ok(device) => device,
        Err(error) => return format!("no device: {error}"),
    };
    let _read = attribute_read();
    let quiet = || {
        !world.any_capture()
            && ENTRIES
                .iter()
                .chain([&c"cuMemsetD32Async"])
                .all(|entry| env.controls.inner().armed_failures(entry).unwrap_or(1) == 0)
    };
    let request = || -> Result<(), Error> {
        let value = if primary {
            Context::primary(&device)?
        } else {
            // SAFETY: the base value keeps the primary context retained for the whole run, and
            // its handle is of this driver.
            unsafe { Context::borrow_raw(world.base.driver(), world.base.as_raw()) }?
        };
        let stream = Stream::new(&value, StreamFlags::NonBlocking)?;
        let timeline = Timeline::new(&value, 0)?;
        timeline.enqueue_signal(&stream, 1)?;
        stream.synchronize()?;
        drop((timeline, stream, value));
        Ok(())
    };
    // The first request takes what a request needs from the pages, the others reuse it.
    if let Err(error) = request() {
        env.check_refusal_in("a request", None, &error);
        return format!("the first request refused: {error}");
    }
    cuda_host::reclaim();
    let quiet_before = quiet();
    let before = env.controls.live_objects().host_allocations;
    for round in 1..=REQUESTS {
        if let Err(error) = request() {
            env.check_refusal_in("a request", None, &error);
            return format!("request {round} refused: {error}");
        }
    }
    cuda_host::reclaim();
    let after = env.controls.live_objects().host_allocations;
    let measured = quiet_before && quiet();
    BURSTS_MEASURED.fetch_add(u64::from(measured), Ordering::Relaxed);
    if measured && after > before {
        violated(format!(
            "{REQUESTS} context values made per request, each synchronized before it went, grew \
             the page-locked allocations from {before} to {after}"
        ));
    }
    format!(
        "{REQUESTS} requests over {} values: page-locked allocations {before} -> {after}",
        if primary { "primary" } else { "borrowed" }
    )
}

/// The timelines ended by [`drop_handles`], for [`check_no_wait_stranded`].
static ENDED: Mutex<Vec<Arc<Mutex<TimelineEntry>>>> = Mutex::new(Vec::new());

/// At the end of a sequence, before the gates open: raises the timelines the host raises
/// towards the values their futures wait for (as far as strands no narrow wait a gate holds
/// back), checks that each future whose value is reached completes, then drops every handle,
/// while streams may still be held in front of their waits.
pub fn drop_handles() -> String {
    let timelines: Vec<_> = std::mem::take(&mut *TIMELINES.lock().unwrap());
    let mut futures = 0;
    for entry in &timelines {
        let mut locked = lock(entry);
        locked.check_waits();
        let Some(handle) = locked.handles.first().cloned() else {
            continue;
        };
        let wanted = locked.futures.iter().map(|future| future.value).max();
        if let Some(wanted) = wanted
            && !locked.by_stream
        {
            let value = wanted.min(locked.safe_ceiling()).max(locked.ceiling);
            locked.ceiling = value;
            let _ = handle.signal(value);
        }
        let now = handle.value();
        let mut at = 0;
        while at < locked.futures.len() {
            if locked.futures[at].value <= now {
                // A future pending once its value was reached is a violation there.
                let _ = poll_once(&mut locked, at);
                drop(locked.futures.remove(at));
                futures += 1;
            } else {
                at += 1;
            }
        }
    }
    for entry in &timelines {
        let mut locked = lock(entry);
        locked.abandoned = true;
        let handles = std::mem::take(&mut locked.handles);
        let pending = std::mem::take(&mut locked.futures);
        drop(locked);
        drop(pending);
        drop(handles);
    }
    let count = timelines.len();
    ENDED.lock().unwrap().extend(timelines);
    format!("{count} timelines' handles dropped, {futures} futures reached")
}

/// At the end of a sequence, once every gate is open and every handle went: every stream passes
/// every wait it has (none stranded).
pub fn check_no_wait_stranded() -> String {
    let timelines: Vec<_> = std::mem::take(&mut *ENDED.lock().unwrap());
    let waits: usize = timelines.iter().map(|entry| lock(entry).waits.len()).sum();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut stranded = Vec::new();
        for entry in &timelines {
            let mut locked = lock(entry);
            locked.check_waits();
            for wait in locked.waits.iter().filter(|wait| {
                !wait.passed && wait.marker.is_some() && wait.failed() == Some(false)
            }) {
                stranded.push(format!(
                    "{} never passed its wait on {} for {} (marker {:?}, at {}) once the last \
                     handle went",
                    wait.stream_name,
                    locked.name,
                    wait.value,
                    wait.marker,
                    wait.progress.seen()
                ));
            }
        }
        if stranded.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            for what in stranded {
                // Printed now too: the synchronize at the end will not return.
                println!("chaos: {what}");
                violated(what);
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    format!(
        "{} timelines ended, each of their {waits} waits passed",
        timelines.len()
    )
}

/// How the watcher's wakes are counted in `DroppedTurns`: once it rests, after the pauses grew
/// to their longest, over a span of about three longest pauses, with at most this many wakes
/// (a few per longest pause: the turns of all the timelines end together; one per timeline per
/// turn would be 8 or more a pause).
const TURNS_WAKES_WITHIN: (Duration, u64) = (Duration::from_millis(60), 12);

fn dropped_turns(env: &Env, index: u8, count: u8) -> String {
    let world = &env.world;
    let context = world.context(index);
    let count = 8 + u32::from(count % 17);
    let mut streams = Vec::new();
    let mut gates = Vec::new();
    for _ in 0..2 {
        let stream = match Stream::new(&context.context, StreamFlags::NonBlocking) {
            Ok(stream) => world.add_stream(stream, &context, StreamKind::NonBlocking, false),
            Err(error) => {
                env.check_refusal_in("Stream::new", Some(&context), &error);
                return format!("refused: {error}");
            }
        };
        gates.extend(world.hold(&stream));
        streams.push(stream);
    }
    let outcome = if gates.len() == 2 {
        let (first, second) = (&streams[0].stream, &streams[1].stream);
        let mut made = 0;
        let mut refused = None;
        while made < count && refused.is_none() {
            let timeline = match new_narrow(env, &context.context, 0) {
                Ok(timeline) if !timeline.uses_64_bit_operations() => timeline,
                Ok(_) => break,
                Err(error) => {
                    env.check_refusal_in("Timeline::new", Some(&context), &error);
                    refused = Some(error);
                    break;
                }
            };
            MADE_NARROW.fetch_add(1, Ordering::Relaxed);
            let enqueued = timeline
                .enqueue_wait(first, 1)
                .and_then(|()| timeline.signal(2))
                .and_then(|()| timeline.enqueue_wait(second, 2 + (1 << 31)));
            if let Err(error) = enqueued {
                env.check_refusal_in("Timeline::enqueue_wait", Some(&context), &error);
                refused = Some(error);
            }
            drop(timeline);
            made += 1;
            // Dropped over one longest pause: each at its own time.
            let spread = Instant::now();
            while spread.elapsed() < Duration::from_micros(20_000 / u64::from(count)) {
                std::hint::spin_loop();
            }
        }
        let rested = if made == count && refused.is_none() {
            turns_rest(count)
        } else {
            "the watcher's wakes not counted".to_owned()
        };
        let refused = refused.map_or_else(String::new, |error| format!(", then refused: {error}"));
        format!("{made} narrow timelines dropped taking turns{refused}; {rested}")
    } else {
        "a gate refused".to_owned()
    };
    for id in gates {
        if let Some(word) = world.forget_gate(id) {
            world.open_forgotten(word);
        }
    }
    // An injected failure may refuse a synchronize: the end of the sequence synchronizes the
    // streams again.
    let mut synchronized = 0;
    for stream in &streams {
        match stream.stream.synchronize() {
            Ok(()) => synchronized += 1,
            Err(error) => env.check_refusal_in("Stream::synchronize", Some(&context), &error),
        }
    }
    format!("{outcome}; the gates opened, {synchronized} of the 2 streams synchronized")
}

/// The watcher's wakes while `count` dropped narrow timelines take turns, as
/// [`TURNS_WAKES_WITHIN`] says; not counted while something else keeps it looking (a future
/// that waits for a point).
fn turns_rest(count: u32) -> String {
    let parked = || cuda_host::metrics().stream_points().watcher_parked;
    if !suite::wait::holds_within(Duration::from_secs(1), parked) {
        return "the watcher looks for something else".to_owned();
    }
    // The pauses, and so the turns, grow to their longest (20 ms) over nine looks after the last
    // drop, each at a turn's end: about 50 ms, and up to a turn more for the grid.
    std::thread::sleep(Duration::from_millis(150));
    // Its rests, each ended by one wake: not the thread's sleeps, which count its waits for
    // locks too (the software driver's, under load).
    let rests = || cuda_host::metrics().stream_points().watcher_rests;
    let before = rests();
    std::thread::sleep(TURNS_WAKES_WITHIN.0);
    let wakes = rests() - before;
    if !parked() {
        return "the watcher was woken meanwhile".to_owned();
    }
    TURNS_RESTS_COUNTED.fetch_add(1, Ordering::Relaxed);
    if wakes > TURNS_WAKES_WITHIN.1 {
        violated(format!(
            "the watcher, counted parked with {count} dropped narrow timelines taking turns, woke \
             {wakes} times in {:?}",
            TURNS_WAKES_WITHIN.0
        ));
    }
    format!(
        "the watcher rested: {wakes} wakes in {:?}",
        TURNS_WAKES_WITHIN.0
    )
}

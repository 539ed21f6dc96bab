//! The process-wide logger and panic hook, whose behaviour a step changes: quiet, panicking, or
//! calling cuda-host back from wherever cuda-host logs (its threads, its locks, its drains); and
//! the counts of what they were given, which the end of a sequence checks against what the
//! harness injected.

use crate::plan::LoggerMode;
use crate::witness::{PANIC_IN_DROP, PANIC_IN_RUN, Witness};
use cuda_host::{Stream, panics::HostFunctionPanic, panics::PanicOrigin};
use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

static LOGGER_MODE: AtomicU8 = AtomicU8::new(0);
static HOOK_PANICS: AtomicBool = AtomicBool::new(false);
/// Panics the hook was told of, by what the harness injected.
pub static REPORTED_RUN_PANICS: AtomicU64 = AtomicU64::new(0);
pub static REPORTED_DROP_PANICS: AtomicU64 = AtomicU64::new(0);
/// Records the logger was given, and call backs it made.
pub static RECORDS: AtomicU64 = AtomicU64::new(0);
pub static CALL_BACKS: AtomicU64 = AtomicU64::new(0);
/// Warnings that no point could follow a stream's points nothing records (every try failed, or
/// a capture took it): what those points hold stays, as documented.
static UNFOLLOWED: AtomicU64 = AtomicU64::new(0);
/// How such a warning begins.
const UNFOLLOWED_WARNING: &str = "no point after a stream's points nothing records";

/// What an error a `Drop` left for its context's next call says (`Error::DropFailed`).
const DROP_ERROR: &str = "failed earlier:";

/// The warnings counted in [`UNFOLLOWED`] since the last call.
pub fn take_unfollowed() -> u64 {
    UNFOLLOWED.swap(0, Ordering::SeqCst)
}

thread_local! {
    /// Whether this thread's logger call is calling cuda-host back now: a record logged
    /// meanwhile calls nothing more.
    static CALLING_BACK: Cell<bool> = const { Cell::new(false) };
}

struct ChaosLogger;

impl log::Log for ChaosLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        RECORDS.fetch_add(1, Ordering::Relaxed);
        if record.level() == log::Level::Warn {
            let text = record.args().to_string();
            if text.starts_with(UNFOLLOWED_WARNING) {
                UNFOLLOWED.fetch_add(1, Ordering::SeqCst);
                // The mark leaves such an error for the context's next call: it never fails
                // for one.
                if text.contains(DROP_ERROR) {
                    crate::witness::violated(format!(
                        "a point nothing records was left unfollowed for an error a drop left: \
                         {text}"
                    ));
                }
            }
        }
        if std::env::var_os("CHAOS_LOG").is_some() {
            eprintln!("[{}] {}", record.level(), record.args());
        }
        // Whatever cuda-host logs on the driver's thread, the thread is marked: a logger's call
        // back is refused there, and its panic's payload handed to a caller's thread.
        if crate::witness::runs_host_functions() && !cuda_host::in_host_function() {
            crate::witness::violated(format!(
                "a logger was called on the driver's thread unmarked: {}",
                record.args()
            ));
        }
        match logger_mode() {
            LoggerMode::Quiet => {}
            LoggerMode::Panicking => std::panic::panic_any(suite::quiet::WatchedPayload {
                // Made on a worker outside a host function: the worker's own, dropped there.
                home: (crate::witness::current_worker().is_some_and(|worker| worker != RUNNER)
                    && !cuda_host::in_host_function())
                .then(|| std::thread::current().id()),
                dropped: payload_dropped,
            }),
            LoggerMode::CallingBack => {
                if CALLING_BACK.with(|calling| calling.replace(true)) {
                    return;
                }
                /// Ends the call back, also on unwind.
                struct Ended;
                impl Drop for Ended {
                    fn drop(&mut self) {
                        CALLING_BACK.with(|calling| calling.set(false));
                    }
                }
                let _ended = Ended;
                call_back();
            }
        }
    }

    fn flush(&self) {}
}

/// Checks where a logger's panic payload is dropped: never on the driver's thread, and one made
/// on a worker outside a host function on that worker, at once.
fn payload_dropped(payload: &suite::quiet::WatchedPayload) {
    if crate::witness::runs_host_functions() {
        crate::witness::violated(
            "a logger's panic payload was dropped on the driver's thread".to_owned(),
        );
    }
    if payload
        .home
        .is_some_and(|home| home != std::thread::current().id())
    {
        crate::witness::violated(
            "a logger's panic payload made on a worker outside a host function was dropped on \
             another thread"
                .to_owned(),
        );
    }
}

/// What a user's logger may do, on whichever thread logs and inside whichever call: reclaim and
/// ask for the counts (inside a host function these return or refuse at once); on a worker also
/// launch on the logger's own stream, a run-once function or a replayable one, each a witness
/// of the worker's. One turn in three reclaims twice: inside a drain the first is refused, and
/// the second must find the drain under way still in force.
fn call_back() {
    let turn = CALL_BACKS.fetch_add(1, Ordering::Relaxed);
    cuda_host::reclaim();
    if turn % 3 == 1 {
        cuda_host::reclaim();
    }
    let _ = cuda_host::metrics().launch_slots();
    let _ = cuda_host::metrics().stream_points();
    let _ = cuda_host::metrics().timelines();
    let _ = cuda_host::metrics().polled_engine();
    let on_worker = crate::witness::current_worker().is_some_and(|worker| worker != RUNNER);
    let Some(stream) = LOGGER_STREAM.get().filter(|_| on_worker) else {
        return;
    };
    if turn.is_multiple_of(2) {
        let witness = Witness::new("host_launch from a logger".to_owned(), false, false, true);
        let probe = witness.probe();
        if cuda_host::host_launch(stream, move || probe.ran()).is_ok() {
            witness.must_run.store(true, Ordering::SeqCst);
        }
    } else {
        let witness = Witness::new(
            "host_launch_replayable from a logger".to_owned(),
            false,
            false,
            false,
        );
        let probe = witness.probe();
        // SAFETY: no capture of the logger's stream is ever begun.
        let launched =
            unsafe { cuda_host::graph::host_launch_replayable(stream, move || probe.ran()) };
        // Only code the driver runs inside a node's addition may meet the capture lock held by
        // its own thread; a log call made under it is held until it is released.
        if let Err(error @ cuda_host::Error::Reentered { .. }) = launched {
            crate::witness::violated(format!(
                "a logger's replayable launch met the capture lock its own thread held: {error}"
            ));
        }
    }
}

/// The worker id of the runner's thread, which is no worker: the logger launches nothing there.
pub const RUNNER: usize = usize::MAX;

/// The stream the logger launches on, of the base context, never captured.
static LOGGER_STREAM: OnceLock<Stream> = OnceLock::new();

/// The stream the logger launches on: the end of a sequence synchronizes it.
pub fn logger_stream() -> Option<&'static Stream> {
    LOGGER_STREAM.get()
}

fn logger_mode() -> LoggerMode {
    match LOGGER_MODE.load(Ordering::Relaxed) {
        1 => LoggerMode::Panicking,
        2 => LoggerMode::CallingBack,
        _ => LoggerMode::Quiet,
    }
}

/// Installs the logger and the hook, once per process; the logger launches on a stream of
/// `base`.
pub fn install(base: &cuda_host::Context) {
    let stream =
        Stream::new(base, cuda_host::StreamFlags::NonBlocking).expect("the logger's stream");
    let _ = LOGGER_STREAM.set(stream);
    static LOGGER: ChaosLogger = ChaosLogger;
    log::set_logger(&LOGGER).expect("the chaos harness's logger is the process's first");
    log::set_max_level(log::LevelFilter::Trace);
    cuda_host::panics::set_host_panic_hook(hook);
}

fn hook(report: &HostFunctionPanic<'_>) {
    match (report.origin, report.message) {
        (PanicOrigin::HostFunction, PANIC_IN_RUN) => {
            REPORTED_RUN_PANICS.fetch_add(1, Ordering::SeqCst);
        }
        (PanicOrigin::Drop, PANIC_IN_DROP) => {
            REPORTED_DROP_PANICS.fetch_add(1, Ordering::SeqCst);
        }
        (origin, message) => crate::witness::violated(format!(
            "the panic hook was told of a panic the harness did not inject: {message} ({origin:?})"
        )),
    }
    if HOOK_PANICS.load(Ordering::Relaxed) {
        panic!("deliberate chaos panic in the panic hook");
    }
}

pub fn set_logger(mode: LoggerMode) {
    let value = match mode {
        LoggerMode::Quiet => 0,
        LoggerMode::Panicking => 1,
        LoggerMode::CallingBack => 2,
    };
    LOGGER_MODE.store(value, Ordering::Relaxed);
}

pub fn set_hook_panicking(panicking: bool) {
    HOOK_PANICS.store(panicking, Ordering::Relaxed);
}

/// Resets the counts for the next sequence, the logger and hook quiet.
pub fn reset() {
    set_logger(LoggerMode::Quiet);
    set_hook_panicking(false);
    REPORTED_RUN_PANICS.store(0, Ordering::SeqCst);
    REPORTED_DROP_PANICS.store(0, Ordering::SeqCst);
}

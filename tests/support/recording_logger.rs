//! A logger that records the records a test picks (their message, thread, and whether cuda-host
//! said the thread was inside a host function), and on each may panic with a payload that notes
//! the thread it is dropped on, or call cuda-host back once. cuda-host logs on the driver's thread
//! and on callers' threads, and a logger is user code: where its payload goes and what its calls
//! back meet is where a thread cuda-host failed to mark shows. A logger is set once per process,
//! so a test that installs it runs in a child process of its own.

use crate::quiet::WatchedPayload;
use crate::wait::wait_until;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread::ThreadId;

/// Which records the logger acts on.
#[derive(Clone, Copy, Debug)]
pub enum Pick {
    /// None (as installed).
    Nothing,
    /// Those logged on this thread.
    OnThread(ThreadId),
    /// Those whose message contains this.
    Containing(&'static str),
}

/// A record the logger acted on.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The record's message.
    pub message: String,
    /// The thread that logged it.
    pub thread: ThreadId,
    /// What `cuda_host::in_host_function()` answered on that thread then.
    pub in_host_function: bool,
}

static PICK: Mutex<Pick> = Mutex::new(Pick::Nothing);
static SEEN: Mutex<Vec<Seen>> = Mutex::new(Vec::new());
static PANIC: AtomicBool = AtomicBool::new(false);
static PAYLOADS_MADE: AtomicUsize = AtomicUsize::new(0);
static PAYLOADS_DROPPED_ON: Mutex<Vec<ThreadId>> = Mutex::new(Vec::new());
#[allow(clippy::type_complexity)]
static CALL_BACK: Mutex<Option<Box<dyn FnOnce() + Send>>> = Mutex::new(None);

/// A lock that a panic elsewhere (the tests' deliberate ones) does not make unusable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn note_drop(_: &WatchedPayload) {
    lock(&PAYLOADS_DROPPED_ON).push(std::thread::current().id());
}

struct RecordingLogger;

impl log::Log for RecordingLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        let thread = std::thread::current().id();
        let message = record.args().to_string();
        let picked = match *lock(&PICK) {
            Pick::Nothing => false,
            Pick::OnThread(picked) => picked == thread,
            Pick::Containing(part) => message.contains(part),
        };
        if !picked {
            return;
        }
        lock(&SEEN).push(Seen {
            message,
            thread,
            in_host_function: cuda_host::in_host_function(),
        });
        let call = lock(&CALL_BACK).take();
        if let Some(call) = call {
            call();
        }
        if PANIC.load(Ordering::SeqCst) {
            PAYLOADS_MADE.fetch_add(1, Ordering::SeqCst);
            std::panic::panic_any(WatchedPayload {
                home: None,
                dropped: note_drop,
            });
        }
    }

    fn flush(&self) {}
}

/// Installs the logger, picking nothing yet, for every level, with deliberate panics kept quiet.
///
/// # Panics
/// When the process has a logger already.
pub fn install() {
    crate::quiet::quiet_deliberate_panics();
    log::set_logger(&RecordingLogger).expect("the only logger of this process");
    log::set_max_level(log::LevelFilter::Trace);
}

/// Acts on the records `pick` picks from now on.
pub fn pick(pick: Pick) {
    *lock(&PICK) = pick;
}

/// Panics on each picked record from now on (`true`), or no longer.
pub fn panic_on_picked(panic: bool) {
    PANIC.store(panic, Ordering::SeqCst);
}

/// Runs `call` on the next picked record, on the thread that logged it, before any panic.
pub fn call_back_once(call: impl FnOnce() + Send + 'static) {
    *lock(&CALL_BACK) = Some(Box::new(call));
}

/// The picked records so far.
pub fn seen() -> Vec<Seen> {
    lock(&SEEN).clone()
}

/// How many payloads the logger panicked with.
pub fn payloads_made() -> usize {
    PAYLOADS_MADE.load(Ordering::SeqCst)
}

/// The threads the payloads were dropped on so far, in order.
pub fn payloads_dropped_on() -> Vec<ThreadId> {
    lock(&PAYLOADS_DROPPED_ON).clone()
}

/// Waits until the logger panicked and a payload was dropped, reclaiming on this thread
/// meanwhile (a payload handed to a caller's thread goes with its drains); then picks nothing.
///
/// # Panics
/// When that does not happen within the suite's bound.
pub fn wait_for_a_dropped_payload() {
    wait_until("the logger to panic", || payloads_made() > 0);
    wait_until("the payload to be dropped", || {
        cuda_host::reclaim();
        !lock(&PAYLOADS_DROPPED_ON).is_empty()
    });
    pick(Pick::Nothing);
}

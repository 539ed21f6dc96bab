//! A logger that calls cuda-host back: on a record, it runs what the test gave it, on the thread
//! that logged, as a user's logger may (ask for counts, reclaim, synchronize, mark a point,
//! enqueue a timeline operation). cuda-host logs inside its drains and looks, on the watcher's
//! thread and while it holds locks, so a logger that calls back is where a lock held across a log
//! call shows. A logger is set once per process, so a test that installs it runs in a child
//! process of its own.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};

/// What the logger runs on a record.
enum CallBack {
    /// On the next record only.
    Once(Box<dyn FnOnce() + Send>),
    /// On every record.
    Every(Arc<dyn Fn() + Send + Sync>),
}

static CALL_BACK: Mutex<Option<CallBack>> = Mutex::new(None);
/// The outcome of the last call back: `Err` with the panic's message when it panicked.
static OUTCOME: Mutex<Option<Result<(), String>>> = Mutex::new(None);

thread_local! {
    /// Whether this thread runs a call back now: a record it logs meanwhile calls nothing.
    static CALLING_BACK: Cell<bool> = const { Cell::new(false) };
}

struct CallingBackLogger;

impl log::Log for CallingBackLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, _: &log::Record<'_>) {
        if CALLING_BACK.with(|calling| calling.replace(true)) {
            return;
        }
        /// Ends the call back, also on unwind.
        struct End;
        impl Drop for End {
            fn drop(&mut self) {
                CALLING_BACK.with(|calling| calling.set(false));
            }
        }
        let _end = End;
        let call: Box<dyn FnOnce() + Send> = {
            let mut call_back = CALL_BACK
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match call_back.take() {
                None => return,
                Some(CallBack::Once(call)) => call,
                Some(CallBack::Every(call)) => {
                    let every = Arc::clone(&call);
                    *call_back = Some(CallBack::Every(call));
                    Box::new(move || every())
                }
            }
        };
        let outcome = catch_unwind(AssertUnwindSafe(call)).map_err(|payload| {
            payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default()
        });
        *OUTCOME
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(outcome);
    }

    fn flush(&self) {}
}

/// Installs the logger, calling nothing yet, for every level, with deliberate panics kept quiet.
///
/// # Panics
/// When the process has a logger already.
pub fn install() {
    crate::quiet::quiet_deliberate_panics();
    log::set_logger(&CallingBackLogger).expect("the only logger of this process");
    log::set_max_level(log::LevelFilter::Trace);
}

/// Runs `call` on the next record of any thread, once.
pub fn on_next_record(call: impl FnOnce() + Send + 'static) {
    *CALL_BACK.lock().expect("the call back") = Some(CallBack::Once(Box::new(call)));
}

/// On the next record, begins a thread-local capture of `stream` through cuda-host and ends it:
/// a call back that waits for the launches in flight on the stream and the special streams.
pub fn on_next_record_capture(stream: &Arc<cuda_host::Stream>) {
    let stream = Arc::clone(stream);
    on_next_record(move || {
        let builder = cuda_host::graph::GraphBuilder::begin(
            &stream,
            cuda_host::graph::CaptureMode::ThreadLocal,
        )
        .expect("capture begun");
        drop(builder.end());
    });
}

/// Runs `call` on every record from now on (but those logged inside a call back).
pub fn on_every_record(call: impl Fn() + Send + Sync + 'static) {
    *CALL_BACK.lock().expect("the call back") = Some(CallBack::Every(Arc::new(call)));
}

/// Calls nothing back from now on.
pub fn stop() {
    *CALL_BACK.lock().expect("the call back") = None;
}

/// How the last call back ended (`Err` with the message of its panic), if one ran.
pub fn outcome() -> Option<Result<(), String>> {
    OUTCOME.lock().expect("the outcome").clone()
}

//! Keeping the tests' deliberate panics out of the test output.
//!
//! Tests make host functions, captured values' `Drop`s, hooks and loggers panic on purpose (their
//! messages start with "deliberate"), and check that cuda-host catches and reports them. The
//! standard panic hook would print each one with its backtrace as if something went wrong; this
//! hook stays silent for those and reports every other panic as before.

use std::sync::Once;

/// Whether a panic's payload is one of the tests' deliberate panics.
pub fn is_deliberate(payload: &(dyn std::any::Any + Send)) -> bool {
    payload.is::<WatchedPayload>()
        || payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .is_some_and(|message| message.starts_with("deliberate"))
}

/// A deliberate panic's payload that calls `dropped` where it is dropped: for tests that check
/// which thread a caught panic's payload goes to (`std::panic::panic_any`).
pub struct WatchedPayload {
    /// The thread that must drop it, where the test knows one.
    pub home: Option<std::thread::ThreadId>,
    /// Called by the payload's `Drop`, on the thread that drops it.
    pub dropped: fn(&WatchedPayload),
}

impl Drop for WatchedPayload {
    fn drop(&mut self) {
        (self.dropped)(self);
    }
}

/// Installs the hook, once per process.
pub fn quiet_deliberate_panics() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !is_deliberate(info.payload()) {
                report(info);
            }
        }));
    });
}

//! Bounded waiting: no test waits forever.

use std::time::{Duration, Instant};

/// How long a test waits for something that should happen promptly, before it fails.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Polls `condition` until it holds; panics naming `what` after [`TIMEOUT`].
///
/// # Panics
/// When the condition does not hold within the bound.
#[track_caller]
pub fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    let mut pause = Duration::from_micros(50);
    while !condition() {
        assert!(
            start.elapsed() < TIMEOUT,
            "timed out after {TIMEOUT:?} waiting for {what}"
        );
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(10));
    }
}

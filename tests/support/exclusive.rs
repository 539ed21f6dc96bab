//! Tests that must not overlap within a process.

use std::sync::{Mutex, MutexGuard};

static CAPTURE: Mutex<()> = Mutex::new(());

/// Held by each test that captures a stream: a global-mode capture makes the driver refuse
/// "potentially unsafe" calls (allocations, synchronous copies, module loads) from every thread
/// of the process, and invalidates itself when one is made, and a blocking stream's capture
/// makes the legacy stream unusable. Tests of a binary run on parallel threads, so those that
/// capture take turns. A test that failed while holding it does not block the others.
pub fn capture_lock() -> MutexGuard<'static, ()> {
    CAPTURE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

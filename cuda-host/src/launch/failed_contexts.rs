//! The contexts that failed, and the flag that makes a launch racing with a failure safe.
//!
//! The handshake: a failure is recorded (`any` set, then a sequentially consistent fence) before
//! its scan walks the launch slots; a launch marks its slot launched, then (after such a fence)
//! reads `any`. The two fences are ordered one way or the other: if the failure's comes first,
//! the launch reads `any` set and abandons its own slot; if the launch's comes first, the scan
//! sees the slot launched and abandons it. Both may try: the slot's compare-and-swap lets
//! exactly one win (`slot_state`). Fences rather than sequentially consistent accesses, so that
//! the loom model checks the argument (loom treats such accesses as acquire/release).

use crate::sync::fence;
use crate::sync::{AtomicBool, Mutex};
use std::sync::PoisonError;
use std::sync::atomic::Ordering;

/// The failed contexts (`CUcontext` addresses); a failure is sticky.
pub(crate) struct FailedContexts {
    any: AtomicBool,
    contexts: Mutex<Vec<usize>>,
}

impl FailedContexts {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        FailedContexts {
            any: AtomicBool::new(false),
            contexts: Mutex::new(Vec::new()),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        FailedContexts {
            any: AtomicBool::new(false),
            contexts: Mutex::new(Vec::new()),
        }
    }

    /// Records that `context` failed; from now on, launches of it abandon themselves. Call it
    /// before scanning for the context's launched records.
    pub(crate) fn record(&self, context: usize) {
        {
            let mut contexts = self.contexts.lock().unwrap_or_else(PoisonError::into_inner);
            if !contexts.contains(&context) {
                contexts.push(context);
            }
        }
        self.any.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    /// Whether `context` failed; a fence and one load while none has. Call it after marking a
    /// launch launched.
    pub(crate) fn has_failed(&self, context: usize) -> bool {
        fence(Ordering::SeqCst);
        self.any.load(Ordering::Relaxed)
            && self
                .contexts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(&context)
    }

    /// Whether `context` failed, as far as the calling thread has seen: one load while none
    /// has, without the fence, for callers outside the launch handshake. A failure recorded on
    /// this thread is seen at once; one recorded on another thread, once anything ordered the
    /// record before this call (a join, a lock) or its store reached this thread anyway, so
    /// such a caller must look again later (the watcher does each round).
    pub(crate) fn seen_failed(&self, context: usize) -> bool {
        self.any.load(Ordering::Acquire)
            && self
                .contexts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(&context)
    }
}

//! The failure handshake's two lock-free cores: the contexts that failed, and which streams have
//! a run-once host function running now.
//!
//! **Failed contexts.** A failure is recorded (`any` set, then a sequentially consistent fence)
//! before its scan walks the launch slots; a launch marks its slot launched, then (after such a
//! fence) reads `any`. The two fences are ordered one way or the other: if the failure's comes
//! first, the launch reads `any` set and abandons its own slot; if the launch's comes first, the
//! scan sees the slot launched and abandons it. Both may try: the slot's compare-and-swap lets
//! exactly one win (`slot_state`). Fences rather than sequentially consistent accesses, so that
//! the loom model checks the argument (loom treats such accesses as acquire/release).
//!
//! **Running streams.** The real driver answers a failure at once while its thread is still
//! inside a host function of the stream (`docs/probes/failure_during_host_function.c`), and
//! still calls host functions queued before the failure. So a host function, once claimed, lists
//! its stream here ([`RunningStreams::enter`]) and then looks whether cuda-host has seen its
//! context fail; if so it does not run. A call that saw the failure records it
//! (`context_failure`), then waits until no host function of its stream is listed
//! (`context_failure::wait_until_none_running`), so that it returns only once none of its stream
//! still runs. The two meet as the launch and the failure do above: each stores, then fences,
//! then loads what the other stored (the function's fence is the one
//! `FailedContexts::has_failed` makes, the call's the one `FailedContexts::record` makes), so at
//! least one sees the other. Either the function sees the failure and does not run, or the call
//! sees the function listed and waits for it.
//!
//! A function is listed with its context and its stream; the special streams, which the driver
//! resolves per call (null is the legacy stream, or the per-thread one on a per-thread table),
//! share one key, so a call on one of them also waits for functions of the others of its
//! context; a graph's host node counts for every stream of its context. A function that finds
//! every entry taken counts as unlisted, and a call then waits until no unlisted function runs,
//! whatever its stream: late, never early. Both are model-checked with loom (`crate::models`).

use crate::sync::{AtomicBool, AtomicUsize, Mutex, fence};
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

/// Entries for functions running at once: the real driver runs one at a time, the polled engine
/// one, the software driver one per stream.
pub(crate) const ENTRIES: usize = 64;

/// The streams with a host function running, `N` of them listed, each with its context.
pub(crate) struct RunningStreams<const N: usize> {
    /// Each entry: 0 when free, else its function's [`key`].
    streams: [AtomicUsize; N],
    /// Each entry's context (`CUcontext` address); 0 while it is being listed or cleared, which
    /// counts as any context.
    contexts: [AtomicUsize; N],
    /// Functions running that found no free entry.
    unlisted: AtomicUsize,
}

/// The key of the special streams, which the driver resolves per call (`CU_STREAM_LEGACY`,
/// `CU_STREAM_PER_THREAD`, null): one for all of them, since the same stream may be named by
/// several (null is the legacy stream, or the per-thread one on a per-thread table).
const SPECIAL: usize = 1;

/// The key of a function of no one stream (a graph's host node): it counts for every stream of
/// its context.
pub(crate) const ANY_STREAM: usize = usize::MAX;

/// A stream's key in the list, from its handle.
pub(crate) fn key(stream: usize) -> usize {
    if stream <= 2 { SPECIAL } else { stream }
}

/// A function listed as running while this lives.
pub(crate) struct Running<'list, const N: usize> {
    list: &'list RunningStreams<N>,
    entry: Option<usize>,
}

impl<const N: usize> RunningStreams<N> {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        RunningStreams {
            streams: [const { AtomicUsize::new(0) }; N],
            contexts: [const { AtomicUsize::new(0) }; N],
            unlisted: AtomicUsize::new(0),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        RunningStreams {
            streams: std::array::from_fn(|_| AtomicUsize::new(0)),
            contexts: std::array::from_fn(|_| AtomicUsize::new(0)),
            unlisted: AtomicUsize::new(0),
        }
    }

    /// Lists a function of the stream `key` of `context` as running. Then look whether the
    /// context failed with `FailedContexts::has_failed`, whose fence orders the two.
    pub(crate) fn enter(&self, key: usize, context: usize) -> Running<'_, N> {
        let entry = self.streams.iter().position(|entry| {
            entry
                .compare_exchange(0, key, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        });
        match entry {
            Some(index) => self.contexts[index].store(context, Ordering::Relaxed),
            None => {
                self.unlisted.fetch_add(1, Ordering::Relaxed);
            }
        }
        Running { list: self, entry }
    }

    /// Whether a function of the stream `key` (any stream, for `None`) of `context` may be
    /// running: fences, then looks. Call it after recording the context's failure.
    pub(crate) fn any_running(&self, key: Option<usize>, context: usize) -> bool {
        fence(Ordering::SeqCst);
        // Acquire: pairs with `Running`'s drop, so the function's effects are visible once it is
        // seen gone.
        self.streams.iter().zip(&self.contexts).any(|(stream, of)| {
            let listed = stream.load(Ordering::Acquire);
            let listed_context = of.load(Ordering::Relaxed);
            listed != 0
                && (listed_context == 0 || listed_context == context)
                && key.is_none_or(|key| key == listed || listed == ANY_STREAM)
        }) || self.unlisted.load(Ordering::Acquire) > 0
    }
}

impl<const N: usize> Drop for Running<'_, N> {
    fn drop(&mut self) {
        match self.entry {
            Some(index) => {
                self.list.contexts[index].store(0, Ordering::Relaxed);
                // Release: what the function did happens before a waiter sees it gone.
                self.list.streams[index].store(0, Ordering::Release);
            }
            None => {
                self.list.unlisted.fetch_sub(1, Ordering::Release);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Barrier};
    use std::time::Duration;

    #[test]
    fn a_function_is_seen_running_until_it_left_and_only_for_its_stream() {
        const STREAM: usize = 0x5000;
        const CONTEXT: usize = 0x9000;
        let list = Arc::new(RunningStreams::<2>::new());
        let left = Arc::new(AtomicBool::new(false));
        let listed = Arc::new(Barrier::new(2));
        let runner = {
            let (list, left, listed) = (Arc::clone(&list), Arc::clone(&left), Arc::clone(&listed));
            std::thread::spawn(move || {
                let running = list.enter(key(STREAM), CONTEXT);
                let elsewhere = list.enter(key(STREAM + 0x1000), CONTEXT);
                listed.wait();
                std::thread::sleep(Duration::from_millis(20));
                left.store(true, Ordering::Relaxed);
                drop(running);
                listed.wait();
                drop(elsewhere);
            })
        };
        listed.wait();
        assert!(list.any_running(Some(key(STREAM)), CONTEXT));
        assert!(list.any_running(None, CONTEXT));
        while list.any_running(Some(key(STREAM)), CONTEXT) {
            std::thread::yield_now();
        }
        assert!(left.load(Ordering::Relaxed), "seen gone while it ran");
        assert!(
            list.any_running(None, CONTEXT),
            "another stream's function is still listed"
        );
        listed.wait();
        runner.join().unwrap();
        assert!(!list.any_running(None, CONTEXT));
        // With every entry taken, a function is unlisted and counts for every stream.
        let (first, second) = (
            list.enter(key(0x10), CONTEXT),
            list.enter(key(0x20), CONTEXT),
        );
        let third = list.enter(key(0x30), CONTEXT);
        assert!(list.any_running(Some(key(STREAM)), CONTEXT));
        drop(third);
        assert!(!list.any_running(Some(key(STREAM)), CONTEXT));
        drop((first, second));
    }

    #[test]
    fn the_special_streams_share_a_key_contexts_are_apart_and_graph_nodes_count_for_all() {
        const CONTEXT: usize = 0x9000;
        let list = RunningStreams::<4>::new();
        // Null (the default stream), CU_STREAM_LEGACY and CU_STREAM_PER_THREAD: one key.
        let legacy = list.enter(key(1), CONTEXT);
        assert!(list.any_running(Some(key(0)), CONTEXT));
        assert!(list.any_running(Some(key(2)), CONTEXT));
        assert!(!list.any_running(Some(key(0x7000)), CONTEXT));
        assert!(
            !list.any_running(None, CONTEXT + 8),
            "another context's function counted"
        );
        drop(legacy);
        let node = list.enter(ANY_STREAM, CONTEXT);
        assert!(list.any_running(Some(key(0x7000)), CONTEXT));
        assert!(!list.any_running(Some(key(0x7000)), CONTEXT + 8));
        drop(node);
        assert!(!list.any_running(None, CONTEXT));
    }
}

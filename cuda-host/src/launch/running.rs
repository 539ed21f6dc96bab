//! Which streams have a run-once host function running now, so that a call answering its
//! context's failure returns only once none of its stream is still running.
//!
//! The real driver answers a failure at once while its thread is still inside a host function of
//! the stream (`docs/probes/failure_during_host_function.c`), and still calls host functions
//! queued before the failure. So a host function, once claimed, lists its stream here
//! ([`RunningStreams::enter`]) and then looks whether cuda-host has seen its context fail; if so it does
//! not run. A call that saw the failure records it (`context_failure`), then waits until no host
//! function of its stream is listed ([`wait_until_none_running`]). The two meet as the failure
//! handshake does (`failed_contexts`): each stores, then fences, then loads what the other
//! stored (the function's fence is the one `FailedContexts::has_failed` makes, the call's the
//! one `FailedContexts::record` makes), so at least one sees the other. Either the function sees the failure and does not
//! run, or the call sees the function listed and waits for it.
//!
//! A function that finds every entry taken counts as unlisted, and a call then waits until no
//! unlisted function runs, whatever its stream: late, never early. The list is a lock-free core,
//! model-checked with loom (`crate::models`).

use crate::sync::{AtomicUsize, fence};
use std::sync::atomic::Ordering;

/// Entries for functions running at once: the real driver runs one at a time, the polled engine
/// one, the software driver one per stream.
pub(crate) const ENTRIES: usize = 64;

/// The streams with a host function running, `N` of them listed.
pub(crate) struct RunningStreams<const N: usize> {
    /// Each entry: 0 when free, else a stream's key ([`key`]).
    entries: [AtomicUsize; N],
    /// Functions running that found no free entry.
    unlisted: AtomicUsize,
}

/// A stream's key in the list: its handle plus one (the legacy stream's handle is null).
pub(crate) fn key(stream: usize) -> usize {
    stream.wrapping_add(1)
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
            entries: [const { AtomicUsize::new(0) }; N],
            unlisted: AtomicUsize::new(0),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        RunningStreams {
            entries: std::array::from_fn(|_| AtomicUsize::new(0)),
            unlisted: AtomicUsize::new(0),
        }
    }

    /// Lists a function of the stream `key` as running. Then look whether the function's
    /// context failed with `FailedContexts::has_failed`, whose fence orders the two.
    pub(crate) fn enter(&self, key: usize) -> Running<'_, N> {
        let entry = self.entries.iter().position(|entry| {
            entry
                .compare_exchange(0, key, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        });
        if entry.is_none() {
            self.unlisted.fetch_add(1, Ordering::Relaxed);
        }
        Running { list: self, entry }
    }

    /// Whether a function of the stream `key` (any, for `None`) may be running: fences, then
    /// looks. Call it after recording the context's failure.
    pub(crate) fn any_running(&self, key: Option<usize>) -> bool {
        fence(Ordering::SeqCst);
        // Acquire: pairs with `Running`'s drop, so the function's effects are visible once it is
        // seen gone.
        self.entries.iter().any(|entry| {
            let listed = entry.load(Ordering::Acquire);
            listed != 0 && key.is_none_or(|key| key == listed)
        }) || self.unlisted.load(Ordering::Acquire) > 0
    }
}

impl<const N: usize> Drop for Running<'_, N> {
    fn drop(&mut self) {
        // Release: what the function did happens before a waiter sees it gone.
        match self.entry {
            Some(index) => self.list.entries[index].store(0, Ordering::Release),
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
        let list = Arc::new(RunningStreams::<2>::new());
        let left = Arc::new(AtomicBool::new(false));
        let listed = Arc::new(Barrier::new(2));
        let runner = {
            let (list, left, listed) = (Arc::clone(&list), Arc::clone(&left), Arc::clone(&listed));
            std::thread::spawn(move || {
                let running = list.enter(key(STREAM));
                let elsewhere = list.enter(key(STREAM + 0x1000));
                listed.wait();
                std::thread::sleep(Duration::from_millis(20));
                left.store(true, Ordering::Relaxed);
                drop(running);
                listed.wait();
                drop(elsewhere);
            })
        };
        listed.wait();
        assert!(list.any_running(Some(key(STREAM))));
        assert!(list.any_running(None));
        while list.any_running(Some(key(STREAM))) {
            std::thread::yield_now();
        }
        assert!(left.load(Ordering::Relaxed), "seen gone while it ran");
        assert!(
            list.any_running(None),
            "another stream's function is still listed"
        );
        listed.wait();
        runner.join().unwrap();
        assert!(!list.any_running(None));
        // With every entry taken, a function is unlisted and counts for every stream.
        let (first, second) = (list.enter(key(1)), list.enter(key(2)));
        let third = list.enter(key(3));
        assert!(list.any_running(Some(key(STREAM))));
        drop(third);
        assert!(!list.any_running(Some(key(STREAM))));
        drop((first, second));
    }
}

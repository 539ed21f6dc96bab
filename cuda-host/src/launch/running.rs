//! Which streams have a run-once host function running now, so that a call answering its
//! context's failure returns only once none of its stream is still running.
//!
//! The real driver answers a failure at once while its thread is still inside a host function of
//! the stream (`docs/probes/failure_during_host_function.c`), and still calls host functions
//! queued before the failure. So a host function, once claimed, lists its stream here
//! ([`Running::enter`]) and then looks whether cuda-host has seen its context fail; if so it does
//! not run. A call that saw the failure records it (`context_failure`), then waits until no host
//! function of its stream is listed ([`wait_until_none_running`]). The two meet as the failure
//! handshake does (`failed_contexts`): each stores, then fences, then loads what the other
//! stored, so at least one sees the other. Either the function sees the failure and does not
//! run, or the call sees the function listed and waits for it.
//!
//! A function that finds every entry taken counts in `UNLISTED`, and a call then waits until no
//! unlisted function runs, whatever its stream: late, never early.

use crate::launch::context_failure::{abandon_if_failed, is_sticky};
use crate::launch::context_shared::ContextShared;
use cuda_host_sys::{CUresult, CUstream};
use std::sync::atomic::{AtomicUsize, Ordering, fence};
use std::time::Duration;

/// Entries for functions running at once: the real driver runs one at a time, the polled engine
/// one, the software driver one per stream.
const ENTRIES: usize = 64;

/// Each entry: 0 when free, else the stream's handle plus one (the legacy stream is null).
static RUNNING: [AtomicUsize; ENTRIES] = [const { AtomicUsize::new(0) }; ENTRIES];
/// Functions running that found no free entry.
static UNLISTED: AtomicUsize = AtomicUsize::new(0);

fn key(stream: CUstream) -> usize {
    stream.addr().wrapping_add(1)
}

/// A host function of a stream, listed as running while this lives.
pub(crate) struct Running {
    entry: Option<&'static AtomicUsize>,
}

impl Running {
    /// Lists a function of `stream` as running, then fences: call it before looking whether the
    /// function's context failed.
    pub(crate) fn enter(stream: CUstream) -> Running {
        let key = key(stream);
        let entry = RUNNING.iter().find(|entry| {
            entry
                .compare_exchange(0, key, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        });
        if entry.is_none() {
            UNLISTED.fetch_add(1, Ordering::Relaxed);
        }
        fence(Ordering::SeqCst);
        Running { entry }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Release: what the function did happens before a waiter sees it gone.
        match self.entry {
            Some(entry) => entry.store(0, Ordering::Release),
            None => {
                UNLISTED.fetch_sub(1, Ordering::Release);
            }
        }
    }
}

/// Waits until no host function of `stream` is running, or none at all for `None` (a context's
/// synchronize). Call it after recording the context's failure, never inside a host function (it
/// would wait for itself).
pub(crate) fn wait_until_none_running(stream: Option<CUstream>) {
    let key = stream.map(key);
    fence(Ordering::SeqCst);
    let mut pause = Duration::from_micros(20);
    // Acquire: pairs with `Running`'s drop, so the function's effects are visible on return.
    while RUNNING.iter().any(|entry| {
        let listed = entry.load(Ordering::Acquire);
        listed != 0 && key.is_none_or(|key| key == listed)
    }) || UNLISTED.load(Ordering::Acquire) > 0
    {
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(1));
    }
}

/// [`abandon_if_failed`], then, when `result` says the context failed, waits as
/// [`wait_until_none_running`]: for a call of `stream` (`None`: of the whole context) that
/// answered `result`.
pub(crate) fn abandon_if_failed_then_wait(
    context: &ContextShared,
    result: CUresult,
    stream: Option<CUstream>,
) {
    if is_sticky(result) {
        abandon_if_failed(context, result);
        wait_until_none_running(stream);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Barrier};

    #[test]
    fn a_wait_returns_only_after_a_running_function_of_its_stream_left() {
        const STREAM: usize = 0x5000;
        let stream = STREAM as CUstream;
        let left = Arc::new(AtomicBool::new(false));
        let listed = Arc::new(Barrier::new(2));
        let runner = {
            let (left, listed) = (Arc::clone(&left), Arc::clone(&listed));
            std::thread::spawn(move || {
                let running = Running::enter(STREAM as CUstream);
                let _elsewhere = Running::enter((STREAM + 0x1000) as CUstream);
                listed.wait();
                std::thread::sleep(Duration::from_millis(50));
                left.store(true, Ordering::Relaxed);
                drop(running);
                listed.wait();
            })
        };
        listed.wait();
        wait_until_none_running(Some(stream));
        assert!(
            left.load(Ordering::Relaxed),
            "returned while a function ran"
        );
        listed.wait();
        runner.join().unwrap();
        // Nothing of the stream runs: at once.
        wait_until_none_running(Some(stream));
    }
}

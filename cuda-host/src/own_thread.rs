//! cuda-host's own threads (the stream-point watcher, the polled engine's servers): each started
//! by its first use and kept for the life of the process.

use crate::error::{Error, Result};
use crate::sync::lock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::Thread;

/// A named thread running `run`, started on first use.
pub(crate) struct OwnThread {
    name: &'static str,
    run: fn(),
    thread: OnceLock<Thread>,
    /// Held while a start is tried, so that one thread is started.
    starting: Mutex<()>,
}

impl OwnThread {
    pub(crate) const fn new(name: &'static str, run: fn()) -> OwnThread {
        OwnThread {
            name,
            run,
            thread: OnceLock::new(),
            starting: Mutex::new(()),
        }
    }

    /// The thread, started by the first call that finds none.
    ///
    /// # Errors
    /// [`Error::ThreadStart`] when the thread cannot be started; the next call tries again.
    pub(crate) fn get(&self) -> Result<&Thread> {
        if let Some(thread) = self.thread.get() {
            return Ok(thread);
        }
        let _starting = lock(&self.starting);
        if let Some(thread) = self.thread.get() {
            return Ok(thread);
        }
        let handle = std::thread::Builder::new()
            .name(self.name.to_owned())
            .spawn(self.run)
            .map_err(|error| Error::ThreadStart {
                thread: self.name,
                reason: error.to_string(),
            })?;
        Ok(self.thread.get_or_init(|| handle.thread().clone()))
    }
}

/// Up to `N` threads of one name, the `index`-th running `run(index)`, started in order on
/// demand and kept for the life of the process: a pool.
pub(crate) struct OwnThreads<const N: usize> {
    name: &'static str,
    run: fn(usize),
    threads: [OnceLock<Thread>; N],
    /// How many run: `threads[..started]` are set.
    started: AtomicUsize,
    /// Held while threads are started, so that each is started once.
    starting: Mutex<()>,
}

impl<const N: usize> OwnThreads<N> {
    pub(crate) const fn new(name: &'static str, run: fn(usize)) -> OwnThreads<N> {
        OwnThreads {
            name,
            run,
            threads: [const { OnceLock::new() }; N],
            started: AtomicUsize::new(0),
            starting: Mutex::new(()),
        }
    }

    /// Starts the first `count` threads (at most `N`) that do not run yet, calling `prepare`
    /// with each one's index just before it starts.
    ///
    /// # Errors
    /// [`Error::ThreadStart`] when one cannot be started: those before it run, and the next call
    /// tries again from it.
    pub(crate) fn start(&self, count: usize, mut prepare: impl FnMut(usize)) -> Result<()> {
        let count = count.min(N);
        if self.started() >= count {
            return Ok(());
        }
        let _starting = lock(&self.starting);
        for index in self.started()..count {
            prepare(index);
            let run = self.run;
            let handle = std::thread::Builder::new()
                .name(self.name.to_owned())
                .spawn(move || run(index))
                .map_err(|error| Error::ThreadStart {
                    thread: self.name,
                    reason: error.to_string(),
                })?;
            let _ = self.threads[index].set(handle.thread().clone());
            self.started.store(index + 1, Ordering::Release);
        }
        Ok(())
    }

    /// How many run (the first ones).
    pub(crate) fn started(&self) -> usize {
        self.started.load(Ordering::Acquire)
    }

    /// The `index`-th thread, if it runs.
    pub(crate) fn get(&self, index: usize) -> Option<&Thread> {
        self.threads.get(index)?.get()
    }
}

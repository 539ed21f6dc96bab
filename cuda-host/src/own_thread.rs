//! cuda-host's own threads (the stream-point watcher, the polled engine's server): each started
//! by its first use and kept for the life of the process.

use crate::error::{Error, Result};
use crate::sync::lock;
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

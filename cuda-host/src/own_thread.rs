//! cuda-host's own threads (the stream-point watcher, the polled engine's server): each started
//! by its first use and kept for the life of the process.

use std::sync::OnceLock;
use std::thread::Thread;

/// A named thread running `run`, started on first use.
pub(crate) struct OwnThread {
    name: &'static str,
    run: fn(),
    thread: OnceLock<Option<Thread>>,
}

impl OwnThread {
    pub(crate) const fn new(name: &'static str, run: fn()) -> OwnThread {
        OwnThread {
            name,
            run,
            thread: OnceLock::new(),
        }
    }

    /// The thread, started by the first call; `None` (logged once) if it could not be started.
    pub(crate) fn get(&self) -> Option<&Thread> {
        self.thread
            .get_or_init(|| {
                match std::thread::Builder::new()
                    .name(self.name.to_owned())
                    .spawn(self.run)
                {
                    Ok(handle) => Some(handle.thread().clone()),
                    Err(error) => {
                        log::error!("cannot start cuda-host's thread {}: {error}", self.name);
                        None
                    }
                }
            })
            .as_ref()
    }
}

//! Who runs a stream's host functions: the driver's thread or cuda-host's polled engine
//! (`crate::polled`), and the refusal of a stream that cannot have the engine asked for.

use super::Stream;
use crate::error::Error;
use std::fmt;

/// Who runs the host functions launched on a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum HostEngine {
    /// The driver's host-function thread, through `cuLaunchHostFunc`: the default.
    #[default]
    Driver,
    /// cuda-host's polled engine: one of a small pool of cuda-host's threads
    /// ([`set_polled_engine_threads`](crate::polled::set_polled_engine_threads)) serves the stream through
    /// a write and a wait on pinned, device-mapped memory, under every rule of
    /// [`host_launch`](fn@crate::host_launch). Between two kernels a host function costs the stream
    /// 1.5–2.3 µs more than nothing, against 17–45 µs through the driver, on an H200. Functions of
    /// streams on different threads of the pool run in parallel, where the driver runs every
    /// host function of the process on one thread. A thread polls while functions are queued, a
    /// core's worth while they follow one another closely (so a busy pool of `n`, up to `n`
    /// cores).
    /// Choose it for many short host functions between kernels with a core to spare; not for one
    /// in a while, nor without a core to spare, nor to queue thousands of host functions behind a
    /// stream wait the same thread releases afterwards (the driver then blocks the enqueue).
    /// A sync mode ([`LaunchOptions::sync_mode`](crate::options::LaunchOptions::sync_mode)) is refused.
    Polled,
}

/// A stream [`Stream::with_host_engine`] could not give the engine asked for, with why: the
/// stream comes back unchanged (its engine the one it had).
#[non_exhaustive]
pub struct HostEngineRefused {
    /// Why: [`Error::ThreadStart`] when one of the engine's threads cannot
    /// start, or an error of preparing the stream's lane.
    pub error: Error,
    /// The stream, unchanged (boxed: the error stays small).
    stream: Box<Stream>,
}

impl HostEngineRefused {
    pub(crate) fn new(error: Error, stream: Stream) -> HostEngineRefused {
        HostEngineRefused {
            error,
            stream: Box::new(stream),
        }
    }

    /// The stream, unchanged.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// The stream, unchanged.
    pub fn into_stream(self) -> Stream {
        *self.stream
    }
}

impl fmt::Debug for HostEngineRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostEngineRefused")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for HostEngineRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the stream keeps its host engine: {}", self.error)
    }
}

impl std::error::Error for HostEngineRefused {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// The error alone, the stream dropped: for `?` in functions answering cuda-host's [`Result`].
impl From<HostEngineRefused> for Error {
    fn from(refused: HostEngineRefused) -> Error {
        refused.error
    }
}

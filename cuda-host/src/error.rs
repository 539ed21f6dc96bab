//! The one error type of cuda-host.

use std::fmt;

/// Why a cuda-host call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The driver answered an error, lacks the entry point, or could not be loaded. The inner
    /// error names the call, the driver's code, its name and its message.
    #[error(transparent)]
    Driver(#[from] cuda_host_sys::Error),

    /// The stream is being captured into a graph, so a run-once host function cannot be enqueued.
    #[error(
        "cannot enqueue a run-once host function: {status}. A captured host function becomes a \
         graph node that runs on every launch of the graph, or never; add it through \
         GraphBuilder::callback, whose graph owns it"
    )]
    StreamCapturing {
        /// What `cuStreamIsCapturing` reported.
        status: CaptureState,
    },

    /// The stream's capture is not active: a graph builder's stream no longer captures, or a
    /// capture was invalidated, so that nothing can be added to its graph.
    #[error(
        "the stream's capture is not active{}: end the capture and capture again",
        if *invalidated { " (a forbidden call invalidated the capture)" } else { "" }
    )]
    CaptureNotActive {
        /// Whether the capture was invalidated (rather than ended elsewhere).
        invalidated: bool,
    },

    /// A cuda-host call was made from inside a host function. The driver forbids CUDA calls
    /// there: they may fail, or deadlock waiting on the stream the host function is blocking.
    #[error(
        "{call} was called from inside a host function, where CUDA calls are forbidden (they may \
         fail or deadlock); move the call to a thread of your own"
    )]
    InHostFunction {
        /// The cuda-host function that was called.
        call: &'static str,
    },

    /// Destroying an object failed earlier, in a `Drop`, where the error could not be returned;
    /// it is returned by the next call through the same context value or a clone of it that
    /// makes a stream, an event or a graph, enqueues on a stream, or synchronizes (queries and
    /// edits of what exists, such as `Event::is_complete` or a graph's node edits, leave it
    /// waiting); another value of the same context, such as a second
    /// [`Context::primary`](crate::Context::primary), keeps errors of its own; and what
    /// cuda-host calls on its own account never takes it. Where the error is the context's
    /// failure, the host functions the context will never run are reclaimed as the destroy
    /// fails, and a synchronize that returns it waits as for the driver's answer.
    #[error("destroying the {object} failed earlier: {source}")]
    DropFailed {
        /// What was being destroyed: `"stream"`, `"event"`, ...
        object: &'static str,
        /// The driver's error.
        source: cuda_host_sys::Error,
    },

    /// A value does not fit what the driver accepts.
    #[error("{what}")]
    InvalidArgument {
        /// What is wrong.
        what: String,
    },

    /// Another library's stream belongs to another context than the [`Context`](crate::Context)
    /// it was given with.
    #[error(
        "the stream belongs to context {stream_context:#x}, not to the context given \
         ({context:#x})"
    )]
    ContextMismatch {
        /// The address of the given context's handle.
        context: usize,
        /// The address of the handle of the stream's context.
        stream_context: usize,
    },

    /// Another library reaches CUDA through another loaded driver library than cuda-host's
    /// [`Driver`](crate::sys::Driver), so its handles mean nothing to cuda-host's driver.
    #[error(
        "{library} uses another CUDA driver library than cuda-host's ({driver}): its handles are \
         not valid there; make both load the same libcuda"
    )]
    DriverMismatch {
        /// The other library, e.g. `"cudarc"`.
        library: &'static str,
        /// The name cuda-host's driver library was opened by.
        driver: String,
    },

    /// A stream point (a release in stream order, a [`StreamPoint`](crate::points::StreamPoint)) was
    /// asked of a stream that is being captured into a graph. Such a point would belong to the
    /// graph, which may pass it many times or never, so cuda-host refuses it; nothing is
    /// enqueued and the capture is left intact.
    #[error(
        "cannot mark a stream point: {status}. A captured point would belong to the graph, which \
         passes it on every launch or never; mark points on a stream that is not capturing"
    )]
    PointInCapture {
        /// What `cuStreamIsCapturing` reported.
        status: CaptureState,
    },

    /// A timeline's wait or signal ([`Timeline::enqueue_wait`](crate::timeline::Timeline::enqueue_wait),
    /// [`Timeline::enqueue_signal`](crate::timeline::Timeline::enqueue_signal)) was asked of a stream that
    /// is being captured into a graph. A captured memory operation replays its constant value on
    /// every launch of the graph, at any later time, so cuda-host refuses it: nothing is enqueued
    /// and the capture is left intact.
    #[error(
        "cannot enqueue a timeline's wait or signal: {status}. A captured one would replay its \
         value on every launch of the graph; enqueue it on a stream that is not capturing"
    )]
    TimelineInCapture {
        /// What `cuStreamIsCapturing` reported.
        status: CaptureState,
    },

    /// The stream's context failed (a sticky error, such as a kernel's illegal address) before
    /// the stream reached the point: it never will.
    #[error(
        "the stream's context failed before the stream reached the point (a sticky error, such \
         as a kernel's illegal address): the point will never be passed"
    )]
    ContextFailed,

    /// A call that adds a node to a capture, or ends a builder capture, was made from code the
    /// driver ran inside such a call of cuda-host's on the same thread (other code's recapture
    /// callback, which the driver calls as a node is captured, CUDA 13.3): it would wait for
    /// itself. Nothing was added; make the call once the driver's call returned.
    #[error(
        "{call} was called from code the driver ran while cuda-host added a node to a capture \
         or ended one on this thread (a recapture's callback); it would wait for itself"
    )]
    Reentered {
        /// The cuda-host function that was called.
        call: &'static str,
    },

    /// A thread cuda-host needs (the stream-point watcher, the polled engine's server) could
    /// not be started; nothing was enqueued. The next call that needs it tries again.
    #[error("cannot start cuda-host's thread {thread}: {reason}")]
    ThreadStart {
        /// The thread's name: `"cuda-host-watch"` or `"cuda-host-poll"`.
        thread: &'static str,
        /// What the system answered.
        reason: String,
    },

    /// The call needs pinned memory allocated (a polled stream's lane: see
    /// [`HostEngine::Polled`](crate::options::HostEngine::Polled)) while a builder capture
    /// forbids it: one of the calling thread's, or a global-mode one of any thread, which the
    /// allocation would invalidate. Nothing was enqueued; the same call succeeds once the capture
    /// ended.
    #[error(
        "cannot allocate {what} while a builder capture forbids it (this thread's, \
         or a global-mode one): the allocation would invalidate the capture; call again once it \
         ended"
    )]
    AllocationInCapture {
        /// What needed the allocation.
        what: &'static str,
    },

    /// A stream wait on a timeline whose streams compare only the low 32 bits of its value (see
    /// [`Timeline::uses_64_bit_operations`](crate::timeline::Timeline::uses_64_bit_operations)) for a value
    /// more than 2^31 above the value now: the cyclic comparison would take it for one below,
    /// and let the stream go at once. Nothing was enqueued.
    #[error(
        "a stream of a device without 64-bit stream memory operations compares the low 32 bits \
         of a timeline's value, cyclically: it can wait only for values up to {} (2^31 above the \
         value now, {reached}), not {value}",
        reached.saturating_add(1 << 31)
    )]
    OutsideNarrowWindow {
        /// The value the wait was for.
        value: u64,
        /// The timeline's value when the wait was asked.
        reached: u64,
    },

    /// A host copy whose source and destination overlap.
    #[error(
        "a host copy's buffers overlap: source {:#x}..{:#x}, destination {:#x}..{:#x}",
        from.start, from.end, to.start, to.end
    )]
    OverlappingCopy {
        /// The source's addresses.
        from: std::ops::Range<usize>,
        /// The destination's addresses.
        to: std::ops::Range<usize>,
    },
}

impl Error {
    /// The driver's code behind this error, if the driver answered one.
    pub fn driver_result(&self) -> Option<cuda_host_sys::CUresult> {
        match self {
            Error::Driver(error) | Error::DropFailed { source: error, .. } => Some(error.result()),
            _ => None,
        }
    }
}

/// Why a stream counts as capturing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CaptureState {
    /// The stream is capturing (`CU_STREAM_CAPTURE_STATUS_ACTIVE`).
    Active,
    /// The stream's capture was invalidated but not yet ended
    /// (`CU_STREAM_CAPTURE_STATUS_INVALIDATED`).
    Invalidated,
    /// The legacy stream, while a blocking stream of its context captures
    /// (`CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`): work on it would join that capture.
    Implicit,
}

impl fmt::Display for CaptureState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CaptureState::Active => "the stream is capturing",
            CaptureState::Invalidated => "the stream's capture was invalidated and not yet ended",
            CaptureState::Implicit => {
                "the legacy stream would join the capture of a blocking stream of its context"
            }
        })
    }
}

/// The result of a cuda-host call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

//! Timelines: a monotonic 64-bit counter in pinned, device-mapped host memory, which the host
//! signals and streams wait on, streams signal and the host waits on (as Vulkan's timeline
//! semaphores and IREE's semaphores), with no host function and no driver thread blocked.
//!
//! ```no_run
//! use cuda_host::timeline::Timeline;
//! use cuda_host::{Device, Stream, StreamFlags};
//! use std::time::Duration;
//!
//! let context = Device::get(cuda_host::driver()?, 0)?.primary_context()?;
//! let stream = Stream::new(&context, StreamFlags::NonBlocking)?;
//! let input_ready = Timeline::new(&context, 0)?;
//! let output_done = Timeline::new(&context, 0)?;
//! input_ready.enqueue_wait(&stream, 1)?; // the stream's later work waits for the host
//! // ... enqueue kernels on `stream` ...
//! output_done.enqueue_signal(&stream, 1)?;
//! input_ready.signal(1)?; // from any thread: the stream goes on
//! assert!(output_done.wait(1, Duration::from_secs(10))?, "the stream finished its work");
//! # Ok::<(), cuda_host::Error>(())
//! ```
//!
//! **Why.** CUDA has no event the host can signal. The usual stand-ins each cost something: a
//! host function that blocks until the host is ready stalls the driver's one host-function
//! thread, and so every stream's host functions; a kernel spinning on memory deadlocks with
//! `cuMemFree`, which waits for it. A stream memory wait (`cuStreamWaitValue64`) waits in the
//! GPU's front end, on host memory the host writes with one atomic store.
//!
//! **Values.** From 0 to [`Timeline::MAX`] (2^63 − 1): the driver's `GEQ` comparison is cyclic,
//! `(int64_t)(word - value) >= 0` (measured on the 13.0 driver, and so in the software driver),
//! which is exactly "at least" for values below 2^63 and nothing larger.
//!
//! **Hazards** (`docs/RELIABILITY.md` says how each is tested):
//! - A stream waiting on a timeline is busy: `cuStreamSynchronize` of it and `cuCtxSynchronize`
//!   block until the wait is released, and so may calls that synchronize the device implicitly
//!   (`cuMemFree`, `cuMemFreeHost`) and copies the driver does synchronously (into pageable
//!   memory, between host buffers: `docs/REAL-DRIVER.md`). The thread that would signal must not
//!   make such a call first: it never returns (the hazard of a kernel spinning on memory, which
//!   a stream wait shares). Signal from a thread that does not wait on the GPU, or signal
//!   before.
//! - With `CUDA_DEVICE_MAX_CONNECTIONS=1` every stream shares one hardware queue: a stream
//!   blocked on a wait also holds back other streams' work enqueued after it, which may be what
//!   the signal waits for.
//! - The driver takes only so many operations behind a wait nothing released before an enqueue
//!   blocks (`docs/REAL-DRIVER.md`): a thread must not enqueue thousands of operations behind a
//!   wait that it signals itself only afterwards.

// The map: `word` is the counter's memory and when it is freed; `enqueue` the stream
// operations (a memory wait or write and the stream point after it that holds the word until
// the stream passed it, one batch), with the capture rule; `waits` what the stream-point watcher (`crate::points`)
// looks at: host waiters, failures, and a timeline whose last handle is gone while streams may
// still read it; `reached` the host's future and blocking wait.

mod enqueue;
mod reached;
mod waits;
mod word;

pub use reached::Reached;

use crate::checked::checked;
use crate::contain::{ensure_outside_host_function, in_host_function, logged};
use crate::error::{Error, Result};
use crate::launch::{ContextShared, drop_when_allowed};
use crate::objects::{Context, Stream};
use crate::sync::lock;
use crate::tracks::watcher::ensure_running as ensure_watcher_running;
use cuda_host_sys::CUdevice_attribute;
use enqueue::Operation;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use waits::Waits;
use word::Word;

/// The largest value of a timeline.
const MAX: u64 = i64::MAX as u64;

/// How far a 32-bit wait's cyclic comparison reaches: a wait for `v` holds the stream while the
/// value is in `v - 2^31 .. v`, and lets it go while it is in `v ..= v + 2^31 - 1`.
const NARROW_WINDOW: u64 = 1 << 31;

/// A monotonic 64-bit counter that the host and streams signal and wait on: the host signals, a
/// stream's later work waits until the value reaches a number; a stream signals, the host waits
/// or awaits. Cheap to clone: clones share the counter.
///
/// The counter lives in pinned, device-mapped host memory of the context it was made in (one
/// small `cuMemHostAlloc`, portable): streams of that context and of other contexts of the same
/// driver (another device's) wait on it and signal it, so a stream of one device can wait for a
/// stream of another. The host's [`signal`](Self::signal) is an atomic maximum on it, so host
/// signals never lower it; a stream's wait ([`enqueue_wait`](Self::enqueue_wait)) is a 64-bit
/// stream memory wait for "at least", which the GPU's front end evaluates without any host
/// thread; a stream's signal ([`enqueue_signal`](Self::enqueue_signal)) is a 64-bit stream
/// memory write. Each is one `cuStreamBatchMemOp` with the write of the stream point after it.
/// Host waits ([`wait`](Self::wait), [`reached`](Self::reached)) are woken by the host signal
/// that reaches their value, or by cuda-host's watcher thread (the one that wakes
/// [`StreamPoint`](crate::points::StreamPoint)s), which reads the counter every 5 µs while
/// anyone waits, then, after 1 ms with nothing reached, in pauses of 50 µs (longer, up to 1 ms,
/// where the watcher's looks cost it more: see [`WatcherPace`](crate::points::WatcherPace)).
///
/// **Never leaves a stream waiting.** When the last handle (clones and [`Reached`] futures
/// included) is dropped while streams may still read the counter, its value is raised to
/// [`MAX`](Self::MAX) (on a device without 64-bit memory operations, to the highest value a wait
/// was enqueued for, in a way that strands no wait: see below), with one warning logged if an
/// enqueued wait was not satisfied yet; a stream signal enqueued earlier that lands afterwards
/// is raised over again by the watcher. The memory is freed only once no handle is left and
/// every stream that enqueued an operation on it passed that operation (a stream point after
/// each, as [`release_in_stream_order`](crate::points::release_in_stream_order) does), never
/// while a stream may read it.
///
/// **Stream signals are stores.** A write cannot take a maximum: a stream's signal sets the
/// value it carries when the stream gets there, and lowers it if the host or another stream
/// raised it further in the meantime. So an enqueued signal must be above the value and above
/// every signal enqueued before (else it is refused); one stream's signals then land in order,
/// and the value only rises as long as nothing else raises it past a signal still pending:
/// signal a timeline either from the host or from streams, or order them (Vulkan states the
/// same rule for its timeline semaphores).
///
/// **Failures.** If the timeline's context fails (a kernel's illegal address), no stream of it
/// signals again: host waits still waiting once cuda-host has seen the failure (a call answering
/// the sticky error, or the watcher's look at the stream point after a stream's operation on the
/// timeline) complete with [`Error::ContextFailed`]. A failed context of another device's stream
/// only stops that stream: waits for its signals time out, or wait for a signal from elsewhere.
///
/// **Captures: refused**, see [`Error::TimelineInCapture`]: a captured memory operation would
/// replay its constant value on every launch of the graph.
///
/// **Narrow devices.** Where the device lacks 64-bit stream memory operations
/// (`CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS` is 0; see
/// [`uses_64_bit_operations`](Self::uses_64_bit_operations)), a stream's wait compares the low 32
/// bits of the value, cyclically: a wait for `v` is released while the value is in
/// `v ..= v + 2^31 - 1`, and held while it is in `v - 2^31 .. v`. So a wait for more than 2^31
/// above the value is refused ([`Error::OutsideNarrowWindow`]), and a wait for a value reached
/// compares the value now (one 2^31 or more below it would hold the stream). It is exact as long
/// as the value never moves 2^31 or more past a wait still pending. The last handle's drop
/// keeps to that: while a stream may have yet to pass a wait, it raises the value at most
/// 2^31 − 1 past it. Waits 2^31 or more apart, which no one value releases, take turns: the
/// value releases the waits of one window for a few milliseconds, then those of the next, until
/// every stream passed its waits.
///
/// ```no_run
/// # fn demo(context: &cuda_host::Context, stream: &cuda_host::Stream) -> cuda_host::Result<()> {
/// use cuda_host::timeline::Timeline;
/// let ready = Timeline::new(context, 0)?;
/// ready.enqueue_wait(stream, 1)?; // the stream's later work waits for the host
/// // ... enqueue kernels and copies on `stream`; a stream signal of a second timeline ...
/// let producer = ready.clone();
/// std::thread::spawn(move || {
///     // ... fill the input ...
///     producer.signal(1) // the stream goes on
/// });
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Timeline {
    shared: Arc<Shared>,
}

/// What the handles of a timeline share.
struct Shared {
    /// Always `Some` until dropped.
    word: Option<Arc<Word>>,
    /// Whether the streams use 64-bit memory operations.
    wide: bool,
    enqueued: Mutex<Enqueued>,
}

/// What the handles enqueued on streams.
#[derive(Default)]
struct Enqueued {
    /// The last (highest) value a stream was given to signal.
    signalled: u64,
    /// The highest value a stream was given to wait for.
    waited: u64,
}

impl Shared {
    fn word(&self) -> &Arc<Word> {
        self.word.as_ref().expect("a word until dropped")
    }
}

impl Timeline {
    /// The largest value a timeline takes: 2^63 − 1, where the driver's cyclic "at least"
    /// comparison is exact.
    pub const MAX: u64 = MAX;

    /// A timeline of `context` whose value starts at `initial`.
    ///
    /// Starts cuda-host's watcher thread (it wakes host waiters, and keeps an abandoned
    /// timeline's streams going), if it does not run yet.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `initial` is above [`MAX`](Self::MAX);
    /// [`Error::ThreadStart`] when the watcher thread cannot be started;
    /// [`Error::AllocationInCapture`] while a builder capture forbids the
    /// allocation; [`Error::InHostFunction`] inside a host function; the driver's error from
    /// `cuDeviceGetAttribute`, `cuMemHostAlloc` or `cuMemHostGetDevicePointer`.
    #[doc(alias = "cuMemHostAlloc")]
    #[doc(alias = "cuMemHostGetDevicePointer")]
    pub fn new(context: &Context, initial: u64) -> Result<Timeline> {
        ensure_outside_host_function("Timeline::new")?;
        if initial > MAX {
            return Err(Error::InvalidArgument {
                what: format!("a timeline's value is at most {MAX} (2^63 - 1), not {initial}"),
            });
        }
        ensure_watcher_running()?;
        let wide = has_64_bit_operations(context.shared())?;
        Ok(Timeline {
            shared: Arc::new(Shared {
                word: Some(Arc::new(Word::new(context, initial)?)),
                wide,
                enqueued: Mutex::new(Enqueued::default()),
            }),
        })
    }

    /// The value now.
    pub fn value(&self) -> u64 {
        self.word().atomic().load(Ordering::SeqCst)
    }

    /// Raises the value to `value`, from any thread, unless it is there already: a signal never
    /// lowers it. Streams waiting for values up to it go on; host waits up to it complete (woken
    /// here, or, inside a host function, by the watcher).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `value` is above [`MAX`](Self::MAX).
    pub fn signal(&self, value: u64) -> Result<()> {
        if value > MAX {
            return Err(Error::InvalidArgument {
                what: format!("a timeline's value is at most {MAX} (2^63 - 1), not {value}"),
            });
        }
        let word = self.word();
        let reached = word.atomic().fetch_max(value, Ordering::SeqCst).max(value);
        // A waker is the executor's code: not run on the driver's thread.
        if !in_host_function() {
            word.waits().wake_up_to(reached);
        }
        Ok(())
    }

    /// Makes `stream`'s later work wait until the value reaches `value` (a stream memory wait:
    /// no host thread involved). Costs the stream one `cuStreamBatchMemOp`: the wait, and the
    /// write of the stream point that keeps the counter's memory until the stream passed the
    /// wait (where the stream's points have no word to write, an event's record instead).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `value` is above [`MAX`](Self::MAX), or for a stream of a
    /// device without 64-bit stream memory operations when the timeline uses them;
    /// [`Error::OutsideNarrowWindow`] when the timeline's streams compare 32 bits and `value` is
    /// more than 2^31 above its value;
    /// [`Error::ContextMismatch`] for a stream of another driver library's context;
    /// [`Error::TimelineInCapture`] on a stream that is being captured;
    /// [`Error::InHostFunction`] inside a host function; the driver's error from
    /// `cuStreamBatchMemOp` (the wait and the stream point after it), `cuStreamIsCapturing`,
    /// `cuStreamGetId`, and, where the stream's points have no word to write (a capture took a
    /// write of it, or the context had no pinned word free for it), `cuEventRecord` or
    /// `cuEventCreate`; the first time a stream
    /// of another context uses the timeline, `cuDeviceGetAttribute` or
    /// `cuMemHostGetDevicePointer`.
    #[doc(alias = "cuStreamWaitValue64")]
    #[doc(alias = "cuStreamWaitValue32")]
    pub fn enqueue_wait(&self, stream: &Stream, value: u64) -> Result<()> {
        enqueue::enqueue(&self.shared, stream, Operation::Wait, value)
    }

    /// Makes `stream` set the value to `value` when it gets there (a stream memory write), after
    /// the work enqueued before. A store, not a maximum: see the type's documentation.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `value` is above [`MAX`](Self::MAX), or not above both the
    /// value now and every signal enqueued before; otherwise as
    /// [`enqueue_wait`](Self::enqueue_wait) (the batch's write is two 32-bit writes on a narrow
    /// device).
    #[doc(alias = "cuStreamWriteValue64")]
    pub fn enqueue_signal(&self, stream: &Stream, value: u64) -> Result<()> {
        enqueue::enqueue(&self.shared, stream, Operation::Signal, value)
    }

    /// Blocks until the value reaches `value` (`Ok(true)`) or `timeout` passed (`Ok(false)`).
    ///
    /// # Errors
    /// [`Error::ContextFailed`] once cuda-host has seen the context fail before the value was
    /// reached; [`Error::InHostFunction`] inside a host function (a host function that waits
    /// for the host blocks every stream's host functions).
    pub fn wait(&self, value: u64, timeout: Duration) -> Result<bool> {
        ensure_outside_host_function("Timeline::wait")?;
        if self.value() >= value {
            return Ok(true);
        }
        reached::block_on(self.reached(value), timeout)
    }

    /// A future that completes once the value reaches `value`, with any executor; with
    /// [`Error::ContextFailed`] once cuda-host has seen the context fail before. Dropping it at
    /// any time is safe and takes its registration back; it holds the timeline meanwhile.
    pub fn reached(&self, value: u64) -> Reached {
        Reached::new(self.clone(), value)
    }

    /// Whether streams wait and signal with 64-bit memory operations (else 32-bit ones: see the
    /// type's documentation for the window they hold in).
    pub fn uses_64_bit_operations(&self) -> bool {
        self.shared.wide
    }

    fn word(&self) -> &Arc<Word> {
        self.shared.word()
    }

    fn waits(&self) -> &Arc<Waits> {
        self.word().waits()
    }
}

impl fmt::Debug for Timeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timeline")
            .field("value", &self.value())
            .field("wide", &self.shared.wide)
            .finish_non_exhaustive()
    }
}

/// Whether streams of `context` can use 64-bit memory operations: its device has them, and the
/// driver the entry points.
///
/// # Errors
/// The driver's error from `cuDeviceGetAttribute`.
fn has_64_bit_operations(context: &ContextShared) -> Result<bool> {
    let driver = context.driver();
    let mut attribute = 0;
    // SAFETY: a valid out-pointer; the context's device.
    unsafe {
        checked!(
            driver,
            cuDeviceGetAttribute(
                &mut attribute,
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
                context.device()
            )
        )
    }?;
    let has = |entry: &str| driver.availability(entry).is_some_and(|a| a.is_available());
    Ok(attribute != 0 && has("cuStreamWaitValue64_v2") && has("cuStreamWriteValue64_v2"))
}

impl Drop for Shared {
    fn drop(&mut self) {
        let Some(word) = self.word.take() else {
            return;
        };
        let waits = word.waits();
        // A kept word may be read by an operation no look sees passed (a graph's, or one no
        // point could follow at all): released too.
        if waits.streams_may_read() || word.is_kept() {
            let waited = lock(&self.enqueued).waited;
            let release = if self.wide { MAX } else { waited };
            match waits.abandon(release) {
                (before, None) => logged!(warn!(
                    "a timeline was dropped while streams may wait on it for values up to \
                     {waited} (its value was {before}), 2^31 or more apart, which no one value \
                     releases (their device compares 32 bits): its value takes in turn one that \
                     releases each, until the streams passed them"
                )),
                (before, Some(raised)) if waited > raised => logged!(warn!(
                    "a timeline was dropped while streams may wait on it for values up to \
                     {waited} (its value was {before}): raised to {raised}, the highest that \
                     releases the waits not seen passed (their device compares 32 bits), and on \
                     to {release} once the streams passed them"
                )),
                (before, Some(raised)) if waited > before => logged!(warn!(
                    "a timeline was dropped while streams may wait on it for values up to \
                     {waited} (its value was {before}): raised to {raised} so that none waits"
                )),
                _ => {}
            }
        }
        // Its memory may be freed here: a driver call, made where the rules allow.
        drop_when_allowed(word);
    }
}

/// What timelines hold now, process-wide: for leak checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TimelineCounts {
    /// Timelines' words allocated and not freed (handles alive, or streams that may still read
    /// them), kept ones included; a word of a failed context counts as freed once let go (the
    /// driver frees it with the context).
    pub words: u64,
    /// Words kept for the life of the process because a capture may have taken an operation on
    /// them.
    pub kept: u64,
    /// Streams noted as perhaps still reading a timeline's word (their last operation on it not
    /// seen passed yet), over every timeline: what a dropped timeline keeps raising its value
    /// for.
    pub streams: u64,
}

/// What timelines hold now (see [`TimelineCounts`]).
pub(crate) fn timeline_counts() -> TimelineCounts {
    TimelineCounts {
        words: word::LIVE_WORDS.load(Ordering::Relaxed),
        kept: word::KEPT_WORDS.load(Ordering::Relaxed),
        streams: waits::NOTED_STREAMS.load(Ordering::Relaxed),
    }
}

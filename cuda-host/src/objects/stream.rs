//! Streams: owned ones, the two special default streams, and streams borrowed from other code.
//!
//! `Stream`'s methods are all here but `Stream::from_cudarc`, which is the `cudarc` feature's
//! (`objects/cudarc.rs`); the features that launch on a stream take it as `&Stream`.

use super::context::ContextState;
use super::host_engine::{HostEngine, HostEngineRefused};
use super::keep_alive::KeepAlive;
use super::{Context, Event, destroy_later};
use crate::checked::checked;
use crate::contain::{ensure_outside_host_function, holding_logs, in_host_function, logged};
use crate::error::{CaptureState, Error, Result};
use crate::launch::{
    ContextShared, EnqueueWindow, HostFuncEntry, abandon_if_failed, abandon_if_failed_then_wait,
    capture_state, is_sticky, reclaim, watch_stream,
};
use crate::tracks::Synchronizing;
use cuda_host_sys::{CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, CUresult, CUstream, CUstream_flags};
use std::cell::RefCell;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// How a new stream orders itself against the legacy default stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamFlags {
    /// Work waits for earlier work of the legacy stream, and the legacy stream waits for it
    /// (`CU_STREAM_DEFAULT`).
    #[default]
    Blocking,
    /// No implicit ordering with the legacy stream (`CU_STREAM_NON_BLOCKING`).
    NonBlocking,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ownership {
    /// Created here; destroyed on drop.
    Owned,
    /// Somebody else's; never destroyed here.
    Borrowed,
    /// `CU_STREAM_LEGACY` or `CU_STREAM_PER_THREAD`: the driver resolves them against the
    /// calling thread's current context, so the context is made current before each use.
    Special,
}

/// A CUDA stream of a [`Context`]: work enqueued on it runs in order.
///
/// A `Stream` may be shared between threads; the driver orders concurrent enqueues.
#[derive(Debug)]
pub struct Stream {
    context: Context,
    raw: CUstream,
    ownership: Ownership,
    /// Whether run-once host functions were launched through this value: its drop then watches
    /// the stream for the context's failure (`context_failure`).
    launched: AtomicBool,
    /// The stream's id (`cuStreamGetId`), once asked, for streams other than the special ones
    /// (whose id depends on the calling thread); 0 until then.
    id: AtomicU64,
    /// Who runs the host functions launched through this value.
    host_engine: HostEngine,
    /// What keeps a borrowed stream alive, if held (cudarc's `Arc`): dropped after `drop` no
    /// longer uses the handle, as the reclaim rules allow.
    #[cfg_attr(not(feature = "cudarc"), allow(dead_code))]
    pub(crate) keep_alive: Option<KeepAlive>,
}

// SAFETY: `raw` is a driver handle, valid from any thread; the driver API is thread-safe.
unsafe impl Send for Stream {}
// SAFETY: as above; its only interior mutability is an atomic.
unsafe impl Sync for Stream {}

impl Stream {
    /// Creates a stream in `context`.
    ///
    /// NVIDIA's reference: [`cuStreamCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html).
    ///
    /// # Errors
    /// An error recorded by an earlier `Drop`, or the driver's error from `cuStreamCreate`.
    #[doc(alias = "cuStreamCreate")]
    pub fn new(context: &Context, flags: StreamFlags) -> Result<Stream> {
        ensure_outside_host_function("Stream::new")?;
        let shared = context.shared();
        shared.take_drop_error()?;
        let flags = match flags {
            StreamFlags::Blocking => CUstream_flags::CU_STREAM_DEFAULT,
            StreamFlags::NonBlocking => CUstream_flags::CU_STREAM_NON_BLOCKING,
        };
        let mut raw = ptr::null_mut();
        shared.with_current(|| {
            // SAFETY: `raw` is a valid out-pointer; the context is current.
            Ok(unsafe { checked!(shared.driver(), cuStreamCreate(&mut raw, flags.0)) }?)
        })?;
        Ok(Stream {
            context: context.clone(),
            raw,
            ownership: Ownership::Owned,
            launched: AtomicBool::new(false),
            id: AtomicU64::new(0),
            host_engine: HostEngine::Driver,
            keep_alive: None,
        })
    }

    /// The legacy default stream of `context` (`CU_STREAM_LEGACY`), which synchronises with every
    /// blocking stream of the context.
    pub fn legacy(context: &Context) -> Stream {
        Stream {
            context: context.clone(),
            raw: CU_STREAM_LEGACY,
            ownership: Ownership::Special,
            launched: AtomicBool::new(false),
            id: AtomicU64::new(0),
            host_engine: HostEngine::Driver,
            keep_alive: None,
        }
    }

    /// The calling thread's default stream of `context` (`CU_STREAM_PER_THREAD`).
    pub fn per_thread(context: &Context) -> Stream {
        Stream {
            context: context.clone(),
            raw: CU_STREAM_PER_THREAD,
            ownership: Ownership::Special,
            launched: AtomicBool::new(false),
            id: AtomicU64::new(0),
            host_engine: HostEngine::Driver,
            keep_alive: None,
        }
    }

    /// Wraps a stream created by other code (the CUDA runtime, cudarc, a C library) without
    /// taking ownership: dropping the `Stream` does not destroy it. (With the `cudarc` feature,
    /// `Stream::from_cudarc` does this for cudarc's streams in safe code.)
    ///
    /// # Safety
    /// 1. `raw` must be a stream of `context`'s CUDA context, or a special stream the driver
    ///    resolves against `context` on each use: `CU_STREAM_LEGACY` (as [`Stream::legacy`]),
    ///    `CU_STREAM_PER_THREAD` (as [`Stream::per_thread`]) or null, the default stream, which
    ///    is the legacy stream on a legacy driver table and the calling thread's per-thread
    ///    default stream on a per-thread table (`CUDA_SYS_PER_THREAD_DEFAULT_STREAM=1`).
    /// 2. It must not be destroyed while the returned `Stream` exists: the driver crashes on a
    ///    destroyed stream handle.
    /// 3. Other code must not end a capture that a [`GraphBuilder`](crate::graph::GraphBuilder) began on
    ///    it (in any mode: another thread's end is refused in global and thread-local mode, yet
    ///    ends the capture) while a callback is being added: the callback uses the graph being
    ///    captured, whose handle is valid only until the capture ends.
    pub unsafe fn borrow_raw(context: &Context, raw: CUstream) -> Stream {
        let ownership = if raw.is_null() || raw == CU_STREAM_LEGACY || raw == CU_STREAM_PER_THREAD {
            Ownership::Special
        } else {
            Ownership::Borrowed
        };
        Stream {
            context: context.clone(),
            raw,
            ownership,
            launched: AtomicBool::new(false),
            id: AtomicU64::new(0),
            host_engine: HostEngine::Driver,
            keep_alive: None,
        }
    }

    /// The driver's handle. It stays valid while this `Stream` exists.
    pub fn as_raw(&self) -> CUstream {
        self.raw
    }

    /// This stream value with host functions launched through it run by `engine`: with
    /// [`HostEngine::Polled`], by cuda-host's polled engine instead of the driver's
    /// host-function thread, under the same rules. Other `Stream` values of the same handle
    /// keep their own engine.
    ///
    /// For the polled engine this starts the engine's threads if they do not run yet
    /// ([`set_polled_engine_threads`](crate::polled::set_polled_engine_threads) says how many), and gives
    /// the stream its lane now (for a per-thread default stream, the calling thread's),
    /// allocating pinned memory for the context's first 512 streams at once: an allocation is a
    /// call that a global-mode capture on any thread forbids (it would invalidate the capture),
    /// so make polled streams before such captures begin. A launch that needs a lane after all
    /// (more than 512 streams of the context with functions pending, or a per-thread stream used
    /// from another thread) while a builder capture forbids the allocation is
    /// refused with [`Error::AllocationInCapture`].
    ///
    /// # Errors
    /// The stream, unchanged, with why ([`HostEngineRefused`]):
    /// [`Error::ThreadStart`] when one of the engine's threads cannot start,
    /// [`Error::AllocationInCapture`] when the lane's memory
    /// must be allocated while a builder capture forbids it, or the driver's
    /// error from `cuStreamGetId`, or from `cuMemHostAlloc` or `cuMemHostGetDevicePointer_v2`
    /// for the context's first polled stream. `?` turns it into the error alone.
    pub fn with_host_engine(
        mut self,
        engine: HostEngine,
    ) -> std::result::Result<Stream, HostEngineRefused> {
        if engine == HostEngine::Polled
            && let Err(error) = self.prepare_polled()
        {
            return Err(HostEngineRefused::new(error, self));
        }
        self.host_engine = engine;
        Ok(self)
    }

    /// Makes the polled engine ready to serve this stream: its thread started, the lane given.
    fn prepare_polled(&self) -> Result<()> {
        crate::polled::start()?;
        self.with_stream_context(|| {
            let id = self.id()?;
            self.context.lanes().prepare(self.context.shared(), id)
        })
    }

    /// Who runs the host functions launched through this value.
    pub fn host_engine(&self) -> HostEngine {
        self.host_engine
    }

    /// The entry point a plain launch on this stream goes through.
    pub(crate) fn host_func_entry(&self) -> HostFuncEntry<'_> {
        match self.host_engine {
            HostEngine::Driver => HostFuncEntry::Classic,
            HostEngine::Polled => HostFuncEntry::Polled {
                engine: self.context.lanes(),
                stream_id: Some(self.id.load(Ordering::Relaxed)).filter(|&id| id != 0),
            },
        }
    }

    /// The context the stream belongs to.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// Whether another library's safe API holds the stream too ([`Stream::from_cudarc`]): it
    /// may end a capture of it on any thread.
    pub(crate) fn is_shared_with_a_library(&self) -> bool {
        self.keep_alive.is_some()
    }

    /// What the stream's context shares with its launch records.
    pub(crate) fn shared_context(&self) -> &std::sync::Arc<ContextShared> {
        &self.context.state.shared
    }

    /// The stream's id (`cuStreamGetId`), unique for the life of the process; a special
    /// stream's is the one it resolves to on the calling thread. The context must be current
    /// for a special stream.
    pub(crate) fn id(&self) -> std::result::Result<u64, cuda_host_sys::Error> {
        let known = self.id.load(Ordering::Relaxed);
        if known != 0 {
            return Ok(known);
        }
        let mut id = 0;
        // SAFETY: the stream handle is valid while `self` exists; a valid out-pointer.
        unsafe {
            checked!(
                self.context.shared().driver(),
                cuStreamGetId(self.raw, &mut id)
            )
        }?;
        if self.ownership != Ownership::Special {
            self.id.store(id, Ordering::Relaxed);
        }
        Ok(id)
    }

    /// Marks that run-once host functions were launched through this value.
    #[inline]
    pub(crate) fn note_launch(&self) {
        if !self.launched.load(Ordering::Relaxed) {
            self.launched.store(true, Ordering::Relaxed);
        }
    }

    /// Runs `call`, a driver call on this stream, with what it needs: the context's deferred drop
    /// errors are returned first, and for the special streams, which the driver resolves against
    /// the current context, their context is made current for the call (and what was current
    /// restored).
    pub(crate) fn with_stream_context<T>(&self, call: impl FnOnce() -> Result<T>) -> Result<T> {
        self.shared_context().take_drop_error()?;
        self.in_stream_context(call)
    }

    /// As [`with_stream_context`](Self::with_stream_context), leaving the context's deferred
    /// drop errors for its next call: for what cuda-host calls on its own account (a `Drop`, a
    /// mark), whose caller would never see them.
    pub(crate) fn in_stream_context<T>(&self, call: impl FnOnce() -> Result<T>) -> Result<T> {
        if self.ownership == Ownership::Special {
            self.shared_context().with_current(call)
        } else {
            call()
        }
    }

    /// Blocks until all work enqueued on the stream has finished, then reclaims: the values
    /// captured by host functions this thread launched on the stream before the call have been
    /// dropped, here, when it returns (unless drops must wait: this thread is capturing, or a
    /// global-mode builder capture is open; see [`reclaim`]).
    /// Values other threads' host functions captured are theirs to drop.
    ///
    /// NVIDIA's reference: [`cuStreamSynchronize`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html).
    ///
    /// # Errors
    /// [`Error::InHostFunction`] inside a host function (waiting
    /// there deadlocks), an error an earlier `Drop` left ([`Error::DropFailed`], returned before
    /// waiting unless it is the context's failure), or the driver's error from
    /// `cuStreamSynchronize`, which also reports an earlier asynchronous failure of the context.
    #[doc(alias = "cuStreamSynchronize")]
    pub fn synchronize(&self) -> Result<()> {
        ensure_outside_host_function("Stream::synchronize")?;
        let shared = self.context.shared();
        let synchronized = self.with_stream_context(|| {
            // Where the special streams resolve against the current context.
            let synchronizing = self.context.synchronizing(Some(self.raw));
            // SAFETY: the stream handle is valid while `self` exists.
            let synchronized = unsafe { checked!(shared.driver(), cuStreamSynchronize(self.raw)) };
            if synchronized.is_ok() {
                synchronizing.into_iter().for_each(Synchronizing::returned);
            }
            Ok(synchronized)
        });
        // A drop error stored earlier may be the failure itself: answered here, it waits too.
        let synchronized = synchronized.and_then(|answer| answer.map_err(Error::from));
        if let Some(result) = synchronized.as_ref().err().and_then(Error::driver_result) {
            abandon_if_failed_then_wait(shared, result, Some(self.raw));
        }
        reclaim();
        synchronized
    }

    /// Whether all work enqueued on the stream has finished (`cuStreamQuery`).
    ///
    /// NVIDIA's reference: [`cuStreamQuery`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html).
    ///
    /// # Errors
    /// The driver's error from `cuStreamQuery`, other than `CUDA_ERROR_NOT_READY`.
    #[doc(alias = "cuStreamQuery")]
    pub fn is_complete(&self) -> Result<bool> {
        ensure_outside_host_function("Stream::is_complete")?;
        let shared = self.context.shared();
        let queried = self.with_stream_context(|| {
            // SAFETY: the stream handle is valid while `self` exists.
            Ok(unsafe { checked!(shared.driver(), cuStreamQuery(self.raw)) })
        });
        let queried = queried.and_then(|answer| answer.map_err(Error::from));
        match queried {
            Err(ref error) if error.driver_result() == Some(CUresult::CUDA_ERROR_NOT_READY) => {
                return Ok(false);
            }
            Err(ref error) => {
                if let Some(result) = error.driver_result() {
                    abandon_if_failed_then_wait(shared, result, Some(self.raw));
                }
            }
            Ok(()) => {}
        }
        reclaim();
        queried?;
        Ok(true)
    }

    /// Makes later work on this stream wait until `event` has completed.
    ///
    /// NVIDIA's reference: [`cuStreamWaitEvent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html).
    ///
    /// # Errors
    /// The driver's error from `cuStreamWaitEvent`.
    #[doc(alias = "cuStreamWaitEvent")]
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        ensure_outside_host_function("Stream::wait_event")?;
        self.with_stream_context(|| {
            let driver = self.context.shared().driver();
            // SAFETY: both handles are valid while their owners exist.
            Ok(unsafe { checked!(driver, cuStreamWaitEvent(self.raw, event.as_raw(), 0)) }?)
        })
    }

    /// Whether the stream is being captured into a graph (`cuStreamIsCapturing`); `None` when it
    /// is not.
    ///
    /// NVIDIA's reference: [`cuStreamIsCapturing`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html).
    ///
    /// # Errors
    /// The driver's error from `cuStreamIsCapturing` other than the implicit-capture answer,
    /// which is reported as [`CaptureState::Implicit`].
    #[doc(alias = "cuStreamIsCapturing")]
    pub fn capture_state(&self) -> Result<Option<CaptureState>> {
        ensure_outside_host_function("Stream::capture_state")?;
        self.with_stream_context(|| capture_state(self.context.shared().driver(), self.raw))
    }
}

impl Stream {
    /// Whether the stream is the calling thread's per-thread default stream.
    fn is_per_thread(&self) -> bool {
        self.ownership == Ownership::Special
            && (self.raw == CU_STREAM_PER_THREAD
                || (self.raw.is_null()
                    && self.shared_context().driver().per_thread_default_stream()))
    }

    /// Notes that a point nothing records or writes was marked on the stream
    /// (`ContextTracks::mark_unread`). Only a later point of the stream, a synchronize of it or
    /// its drop shows such a point passed; on the calling thread's per-thread stream only this
    /// thread can make any of them, so the thread marks one when it exits
    /// ([`UnreadAtExit`]), if nothing did before.
    pub(crate) fn note_unread_point(&self) {
        if self.is_per_thread() {
            let _ = UNREAD_AT_EXIT.try_with(|unread| unread.note(&self.context));
        }
    }

    /// Once an operation that may have noted a point nothing records let go of its locks: on the
    /// calling thread's per-thread stream while the thread exits, its note gone (an operation
    /// from a thread-local's destructor that runs after it), marks a point after such points
    /// now, as the exit would have.
    pub(crate) fn mark_unread_if_exiting(&self) {
        if self.is_per_thread() && UNREAD_AT_EXIT.try_with(|_| ()).is_err() {
            self.mark_after_unread_points();
        }
    }

    /// Marks a point after written points a capture left unread on the stream's track, if
    /// nothing follows them (`crate::tracks`): what holds the timelines' words they were the
    /// points of sees them passed once the stream passed that one. A failed mark is tried again
    /// a few times (on a per-thread stream at its thread's exit nothing else ever marks one),
    /// but not where the stream captures or the context failed (what a failed context's
    /// points hold goes with the failure); a mark that could not be made but in a failed
    /// context warns. Leaves an error an earlier drop recorded for the context's next call.
    fn mark_after_unread_points(&self) {
        const TRIES: usize = 4;
        let Some(tracks) = self.context.tracks_if_made() else {
            return;
        };
        let shared = self.context.shared();
        // In the stream's window, as every point is marked (a builder capture
        // waits for it, and a capturing stream is refused), and with the log calls held until it
        // is let go.
        let mark = || {
            let id = self.id()?;
            if !tracks.unread_at_the_end(id) {
                return Ok(());
            }
            let window = EnqueueWindow::open(shared.driver(), self.raw)?;
            tracks.mark_after_unread(shared, window.stream(), id)
        };
        let final_failure = |error: &Error| {
            matches!(
                error,
                Error::StreamCapturing { .. } | Error::PointInCapture { .. }
            ) || error.driver_result().is_some_and(is_sticky)
        };
        let mut marked = Ok(());
        for _ in 0..TRIES {
            marked = holding_logs(|| self.in_stream_context(mark));
            match &marked {
                Err(error) if !final_failure(error) => {}
                _ => break,
            }
        }
        match marked {
            Ok(()) => {}
            Err(error) if error.driver_result().is_some_and(is_sticky) => {
                logged!(debug!(
                    "no point after a stream's points nothing records, in a failed context \
                     (what they hold goes with the failure): {error}"
                ));
            }
            Err(error) => logged!(warn!(
                "no point after a stream's points nothing records: what they hold (a \
                 timeline's word, a value of the context) is held until the stream is \
                 synchronized or marks a later point: {error}"
            )),
        }
    }
}

/// The contexts whose per-thread stream of this thread holds a point nothing records: at the
/// thread's exit, a point is marked after it on each (as a dropped stream marks one), which the
/// watcher or a drain then sees passed, and what the unread point holds (a timeline's word, a
/// value of the context) is let go. Held weakly: a context whose last value went has no tracks
/// left to mark on. Thread-local destructors run before the driver's per-thread ones (glibc
/// calls them first), so the thread's per-thread stream still exists then; a capture on it
/// refuses the point, as it would any.
struct UnreadAtExit(RefCell<Vec<Weak<ContextState>>>);

thread_local! {
    static UNREAD_AT_EXIT: UnreadAtExit = const { UnreadAtExit(RefCell::new(Vec::new())) };
}

impl UnreadAtExit {
    fn note(&self, context: &Context) {
        let Ok(mut contexts) = self.0.try_borrow_mut() else {
            return;
        };
        // Contexts made per request would otherwise pile up on a long-lived thread.
        contexts.retain(|state| state.strong_count() > 0);
        let state = &context.state;
        if !contexts
            .iter()
            .any(|noted| ptr::eq(noted.as_ptr(), Arc::as_ptr(state)))
        {
            contexts.push(Arc::downgrade(state));
        }
    }
}

impl Drop for UnreadAtExit {
    fn drop(&mut self) {
        for state in std::mem::take(self.0.get_mut()) {
            if let Some(state) = state.upgrade() {
                Stream::per_thread(&Context { state }).mark_after_unread_points();
            }
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let launched = *self.launched.get_mut();
        if launched && !in_host_function() {
            self.mark_after_unread_points();
        }
        if self.ownership != Ownership::Owned {
            if !launched {
                return;
            }
            if in_host_function() {
                // Deferred, a call could reach a borrowed handle after its owner destroyed it;
                // records a failed context never runs are then reclaimed when a call answers the
                // failure.
                logged!(debug!(
                    "a stream wrapper dropped inside a host function is not watched"
                ));
                return;
            }
            let shared = self.context.shared();
            let watched = self.in_stream_context(|| {
                watch_stream(shared, self.raw);
                Ok(())
            });
            if let Err(error) = watched {
                logged!(error!(
                    "cannot watch a dropped stream for its context's failure: {error}"
                ));
            }
            reclaim();
            return;
        }
        // Pending work still runs after `cuStreamDestroy`, and launch records stay owned by the
        // driver until their host functions ran (and keep the context retained until then). If
        // the context fails first, they never run: the watch, added before the destruction,
        // reclaims them. The handle is this value's own, so both may be deferred from a host
        // function, together.
        let watch = launched.then(|| std::sync::Arc::clone(self.context.shared()));
        destroy_later(
            self.context.shared(),
            "stream",
            self.raw,
            move |context, raw| {
                if let Some(watched) = &watch {
                    watch_stream(watched, raw);
                }
                // SAFETY: the stream was created by `Stream::new` and is destroyed once.
                let destroyed = unsafe { checked!(context.driver(), cuStreamDestroy_v2(raw)) };
                if let Err(error) = &destroyed {
                    abandon_if_failed(context, error.result());
                }
                destroyed
            },
        );
        if !in_host_function() {
            reclaim();
        }
    }
}

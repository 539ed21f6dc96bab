//! Host functions that may run many times: once in stream order on a stream that is not
//! capturing, or as a node of the graph being captured, whoever began the capture, owned by
//! that graph (`capture`).

use super::capture::{self, Capture};
use super::capture_lock;
use crate::contain::ensure_outside_host_function;
use crate::error::{CaptureState, Error, Result};
use crate::host_launch::{UserData, launch_raw, launch_run_once};
use crate::launch::{
    GraphRecord, HostCallable, RunOnceClosure, drop_when_allowed, outside_host_function,
    reclaim_on_launch,
};
use crate::objects::Stream;
use cuda_host_sys::CUgraph;
use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

/// Enqueues `function` on `stream` as a host function that may run many times: on a stream
/// that is not capturing it runs once, in stream order, as with [`host_launch`]; on a stream
/// that any code is capturing (through [`GraphBuilder`], cudarc's `begin_capture`, another
/// library's `cuStreamBeginCapture`), in any mode, it becomes a host node of the graph being
/// captured, and runs on every launch of every executable made from that graph.
///
/// NVIDIA's reference: [`cuLaunchHostFunc`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html),
/// [`cuStreamGetCaptureInfo`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html),
/// [`cuGraphRetainUserObject`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html).
///
/// A captured node's callable is owned by the graph through a CUDA user object, as
/// [`GraphBuilder::callback`]'s are: it lives while the graph, its clones, the executables made
/// from them and their launches in flight can run it, and is dropped afterwards, once, on the
/// thread that made this call, at its next cuda-host call or [`reclaim`](fn@crate::reclaim)
/// (or on any thread, once that thread exited). Nothing else is retained: the capture stays
/// valid, and ends in a graph that instantiates.
///
/// The callable runs on the driver's host-function thread, where it must not call CUDA (cuda-host
/// calls refuse there); a panic in it is caught and reported as for [`host_launch`]. A stream on
/// the polled engine runs it on the engine when it is not capturing; a graph's node is the
/// driver's host node whatever the stream's engine. [`host_launch`] keeps refusing capturing
/// streams: a run-once closure cannot run on every replay.
///
/// On a stream that is not capturing, a capture other code begins during the call takes the
/// node instead: the live launch refuses (as [`host_launch`]'s does) before the function could
/// run, and the call looks again.
///
/// ```no_run
/// # fn demo(stream: &cuda_host::Stream) -> cuda_host::Result<()> {
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// let replays = Arc::new(AtomicU64::new(0));
/// let counter = Arc::clone(&replays);
/// // SAFETY: no other thread ends a capture of `stream` during the call.
/// unsafe {
///     cuda_host::graph::host_launch_replayable(stream, move || {
///         counter.fetch_add(1, Ordering::Relaxed);
///     })
/// }?;
/// # Ok(()) }
/// ```
///
/// # Safety
/// While the call runs, no other thread ends a capture of `stream` that code other than
/// cuda-host began, nor calls the driver on that capture's graph. The call adds the node
/// through the graph's handle that `cuStreamGetCaptureInfo` gives, which the driver keeps valid
/// only until the capture ends (another thread's `cuStreamEndCapture` ends it in any mode, also
/// when it answers that it was the wrong thread), and the driver's calls on one graph must not
/// overlap (NVIDIA's rule for graphs). A capture begun through [`GraphBuilder`] does not end
/// meanwhile: its end waits until no thread is adding a node to a capture, and other code
/// cannot end it on another thread (a builder refuses a stream cudarc holds). The rule covers a
/// capture another thread begins during the call too, which the call may find and add to:
/// where no other thread captures `stream` during the call, and on the calling thread's own
/// captures, there is nothing to uphold.
///
/// # Errors
/// [`Error::InHostFunction`] inside a host function; [`Error::CaptureNotActive`] when the
/// stream's capture was invalidated (nothing is enqueued: ending it yields no graph); the
/// driver's error (`CUDA_ERROR_STREAM_CAPTURE_IMPLICIT` for the legacy stream while a blocking
/// stream of its context captures). On error nothing stays attached to a graph and the callable
/// is dropped as [`host_launch`]'s refused closures are; refused by a capturing stream's
/// driver calls, at this thread's next cuda-host call or [`reclaim`](fn@crate::reclaim) (a drop
/// during the capture could invalidate it).
///
/// [`host_launch`]: fn@crate::host_launch
/// [`GraphBuilder`]: crate::graph::GraphBuilder
/// [`GraphBuilder::callback`]: crate::graph::GraphBuilder::callback
#[doc(alias = "cuLaunchHostFunc")]
#[doc(alias = "cuGraphRetainUserObject")]
pub unsafe fn host_launch_replayable<F>(stream: &Stream, function: F) -> Result<()>
where
    F: Fn() + Send + Sync + 'static,
{
    let function = Arc::new(outside_host_function("host_launch_replayable", function)?);
    let name = std::any::type_name::<F>();
    // A profiler attaching, or a log that none is set, is user code: not under the capture
    // lock the node's record is made under.
    crate::observe::prepare();
    let live = || {
        let run = Arc::clone(&function);
        launch_run_once(
            stream,
            RunOnceClosure(move || run()),
            stream.host_func_entry(),
            None,
        )
    };
    let node = |graph| {
        let shared = Arc::clone(stream.shared_context());
        let callable: HostCallable = Arc::clone(&function) as HostCallable;
        let record = GraphRecord::callable(shared, callable, name);
        // SAFETY: `graph` is the graph the stream captures into, which does not end during the
        // call (`launch`).
        unsafe { capture::add_record_node(stream, graph, record) }
    };
    // SAFETY: per the caller.
    let launched = unsafe { launch(stream, live, node) };
    // Where a launch or a graph's record took a reference (also one refused and waiting in
    // this thread's inbox), this one only goes: no drain runs here, where a `Drop` of this
    // thread's could invalidate a capture other code began. The last reference, when nothing
    // took one, is dropped as a refused closure is.
    if let Some(function) = Arc::into_inner(function) {
        drop_when_allowed(function);
    }
    launched
}

/// As [`host_launch_replayable`], for a C function: with [`UserData::Copied`], the live launch's
/// record or the graph owns the copy, as [`host_launch_raw`] and
/// [`GraphBuilder::callback_raw`] keep it.
///
/// # Safety
/// As [`host_launch_replayable`]; and `function` must be safe to call with the pointer it gets
/// on the driver's host-function thread (or the polled engine's), as often as the graph runs,
/// and must not call CUDA. With [`UserData::PassThrough`], the pointer must stay valid while
/// the node can run (the graph, its executables and their launches in flight), or until the
/// function ran once on a stream that was not capturing; with [`UserData::Copied`], `function`
/// must not keep the pointer after it returns.
///
/// # Errors
/// As [`host_launch_replayable`].
///
/// [`host_launch_raw`]: fn@crate::host_launch_raw
/// [`GraphBuilder::callback_raw`]: crate::graph::GraphBuilder::callback_raw
#[doc(alias = "cuLaunchHostFunc")]
pub unsafe fn host_launch_replayable_raw(
    stream: &Stream,
    function: unsafe extern "C" fn(*mut c_void),
    user_data: UserData<'_>,
) -> Result<()> {
    ensure_outside_host_function("host_launch_replayable_raw")?;
    // SAFETY: per the caller, for both the live launch and the node.
    unsafe {
        launch(
            stream,
            || launch_raw(stream, function, user_data, stream.host_func_entry()),
            |graph| match user_data {
                UserData::Copied(bytes) => {
                    let shared = Arc::clone(stream.shared_context());
                    let record = GraphRecord::copied_bytes(shared, function, bytes);
                    capture::add_record_node(stream, graph, record)
                }
                UserData::PassThrough(pointer) => capture::add_node(stream, function, pointer),
                UserData::None => capture::add_node(stream, function, ptr::null_mut()),
            },
        )
    }
}

/// Runs `live` when `stream` is not capturing, and `node` with the graph being captured when
/// it is; `node` runs while no builder capture can end.
///
/// # Safety
/// As [`host_launch_replayable`].
unsafe fn launch(
    stream: &Stream,
    mut live: impl FnMut() -> Result<()>,
    node: impl FnOnce(CUgraph) -> Result<()>,
) -> Result<()> {
    // A capture that begins between the look and the live launch refuses the launch (its own
    // capture check, step 1 of a record's life in `crate::launch`), and the next look finds it. Captures that keep
    // beginning and ending on the stream meanwhile get the live launch's refusal after two.
    let mut refused = None;
    for _ in 0..2 {
        let adding = capture_lock::adding("host_launch_replayable")?;
        match capture::capture_of(stream)? {
            Capture::None => {
                drop(adding);
                reclaim_on_launch();
                match live() {
                    Err(error @ Error::StreamCapturing { status }) => {
                        if status == CaptureState::Invalidated {
                            return Err(Error::CaptureNotActive { invalidated: true });
                        }
                        refused = Some(error);
                    }
                    launched => return launched,
                }
            }
            // SAFETY: the graph the stream captures into, which stays valid while `adding` is
            // held (a builder capture) or per the caller (any other).
            Capture::Active { graph } => return node(graph),
            Capture::Invalidated => return Err(Error::CaptureNotActive { invalidated: true }),
        }
    }
    Err(refused.unwrap_or(Error::StreamCapturing {
        status: CaptureState::Active,
    }))
}

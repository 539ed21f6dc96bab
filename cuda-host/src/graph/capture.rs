//! The graph a stream's capture records into, whoever began the capture, and the host nodes
//! cuda-host adds to it, their records owned by that graph.
//!
//! `cuStreamGetCaptureInfo` names the graph being captured; the record goes to it through a
//! user object (`user_object::attach_for`), then `cuLaunchHostFunc` on the capturing stream adds
//! the node that runs it. The graph's handle is valid only until the capture ends, and the
//! driver's calls on one graph must not overlap (NVIDIA's rule for graphs), so adding a node
//! holds one process-wide lock ([`adding`]), which a builder capture
//! ([`GraphBuilder`](super::GraphBuilder)) takes to end (`capture_lock`). Other code that could end
//! a builder's capture on another thread meanwhile is kept out: a builder refuses a stream
//! another library's safe API holds (`Stream::from_cudarc`; any thread's end ends a capture, in
//! any mode, though it is refused outside relaxed mode), and `Stream::borrow_raw`'s callers
//! promise it for theirs. A capture other code began must not end on another thread during the
//! call, which is the safety rule of [`host_launch_replayable`](super::host_launch_replayable).

use super::capture_lock::adding;
use super::user_object;
use crate::checked::checked;
use crate::error::{Error, Result};
use crate::launch::GraphRecord;
use crate::objects::Stream;
use cuda_host_sys::{CUgraph, CUstreamCaptureStatus};
use std::ffi::c_void;
use std::ptr;

/// What `cuStreamGetCaptureInfo` says of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Capture {
    /// Not capturing.
    None,
    /// Capturing into `graph`.
    Active { graph: CUgraph },
    /// Capturing, but invalidated: ending it yields no graph.
    Invalidated,
}

/// What `stream`'s capture is now.
///
/// # Errors
/// The driver's error (`CUDA_ERROR_STREAM_CAPTURE_IMPLICIT` for the legacy stream while a
/// blocking stream of its context captures).
pub(crate) fn capture_of(stream: &Stream) -> Result<Capture> {
    let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut graph = ptr::null_mut();
    stream.with_stream_context(|| {
        let driver = stream.context().driver();
        // SAFETY: a valid stream; the out-pointers are valid or null where the driver allows it.
        Ok(unsafe {
            checked!(
                driver,
                cuStreamGetCaptureInfo_v3(
                    stream.as_raw(),
                    &mut status,
                    ptr::null_mut(),
                    &mut graph,
                    ptr::null_mut(),
                    ptr::null_mut(),
                    ptr::null_mut(),
                )
            )
        }?)
    })?;
    Ok(match status {
        CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => Capture::None,
        CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE if !graph.is_null() => {
            Capture::Active { graph }
        }
        // Invalidated, or a status a newer driver may add: nothing can be added to it.
        _ => Capture::Invalidated,
    })
}

/// The graph `stream` captures into, while its capture is active.
///
/// # Errors
/// [`Error::CaptureNotActive`] when it is not capturing, or its capture was invalidated; the
/// driver's error otherwise.
pub(crate) fn capturing_graph(stream: &Stream) -> Result<CUgraph> {
    match capture_of(stream)? {
        Capture::Active { graph } => Ok(graph),
        Capture::Invalidated => Err(Error::CaptureNotActive { invalidated: true }),
        Capture::None => Err(Error::CaptureNotActive { invalidated: false }),
    }
}

/// Adds to the graph `stream` captures into a host node running `record` on every launch, the
/// record owned by the graph; on error nothing stays attached and the record is dropped as the
/// reclaim rule allows.
///
/// # Errors
/// [`Error::CaptureNotActive`] when the stream is not capturing or its capture was invalidated;
/// [`Error::Reentered`] inside such a call of this thread's (as `call`); the driver's error
/// otherwise.
///
/// # Safety
/// A capture of `stream` that is no builder capture does not end during the call.
pub(crate) unsafe fn add_to_capture(
    stream: &Stream,
    record: GraphRecord,
    call: &'static str,
) -> Result<()> {
    let adding = match adding(call) {
        Ok(adding) => adding,
        Err(error) => {
            record.drop_soon();
            return Err(error);
        }
    };
    let graph = match capturing_graph(stream) {
        Ok(graph) => graph,
        Err(error) => {
            drop(adding);
            record.drop_soon();
            return Err(error);
        }
    };
    // SAFETY: the graph `stream` captures into, which does not end while `adding` is held (a
    // builder capture) or per the caller (any other).
    unsafe { add_record_node(stream, graph, record) }
}

/// Adds to `graph`, which `stream` captures into, a host node running `record` on every launch,
/// the record owned by the graph; on error nothing stays attached.
///
/// # Errors
/// As `user_object::attach_for`; `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED` when the capture was
/// invalidated meanwhile.
///
/// # Safety
/// `graph` is the graph `stream`'s capture records into, and the capture does not end during
/// the call (the caller holds [`adding`] for builder captures, and vouches for
/// the others).
pub(crate) unsafe fn add_record_node(
    stream: &Stream,
    graph: CUgraph,
    record: GraphRecord,
) -> Result<()> {
    let driver = stream.context().driver();
    // SAFETY: per the caller; the record passes to the user object, which keeps it alive as
    // long as the captured node can run.
    unsafe {
        user_object::attach_for(driver, graph, record, |data| {
            add_node(stream, GraphRecord::host_fn(), data)
        })
    }
}

/// `cuLaunchHostFunc` on a capturing stream: adds a node running `function` with `data`.
///
/// # Safety
/// `function` must be callable with `data` whenever the graph runs; the stream captures.
pub(crate) unsafe fn add_node(
    stream: &Stream,
    function: unsafe extern "C" fn(*mut c_void),
    data: *mut c_void,
) -> Result<()> {
    stream.with_stream_context(|| {
        let driver = stream.context().driver();
        // SAFETY: per the caller; on a capturing stream this adds a host node to the graph.
        Ok(unsafe {
            checked!(
                driver,
                cuLaunchHostFunc(stream.as_raw(), Some(function), data)
            )
        }?)
    })
}

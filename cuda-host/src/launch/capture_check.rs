//! Refusing run-once host functions on streams that are being captured.
//!
//! A host function enqueued on a capturing stream becomes a node of the graph being built; the
//! graph may then run it many times, or never, so a launch record that frees itself after one run
//! would be used after free or leaked. cuda-host therefore asks `cuStreamIsCapturing` before
//! enqueueing and refuses, leaving the capture untouched. It must ask rather than try: on the
//! legacy stream, a refused `cuLaunchHostFunc` invalidates the capture it would have joined.

use crate::checked::checked;
use crate::error::{CaptureState, Error, Result};
use crate::launch::contained_log::logged;
use cuda_host_sys::{
    CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, CUDA_HOST_NODE_PARAMS, CUgraph, CUgraphNode,
    CUgraphNodeType, CUresult, CUstream, CUstreamCaptureMode, CUstreamCaptureStatus, Driver,
};
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// What `cuStreamIsCapturing` says of `stream`: `None` when it is not capturing.
pub(crate) fn capture_state(driver: &Driver, stream: CUstream) -> Result<Option<CaptureState>> {
    let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the caller's stream handle is valid; `status` is a valid out-pointer.
    match unsafe { checked!(driver, cuStreamIsCapturing(stream, &mut status)) } {
        Ok(()) => Ok(match status {
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => None,
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED => {
                Some(CaptureState::Invalidated)
            }
            // ACTIVE, and any status a newer driver may add: not safe for a run-once record.
            _ => Some(CaptureState::Active),
        }),
        Err(error) if error.result() == CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT => {
            Ok(Some(CaptureState::Implicit))
        }
        Err(error) => Err(error.into()),
    }
}

/// `Err(Error::StreamCapturing)` unless `stream` is free of any capture.
#[inline]
fn ensure_not_capturing(driver: &Driver, stream: CUstream) -> Result<()> {
    match capture_state(driver, stream)? {
        None => Ok(()),
        Some(status) => Err(Error::StreamCapturing { status }),
    }
}

/// The calling thread in the relaxed capture interaction mode while it lives; its own mode is
/// given back on drop, also on unwind. A "potentially unsafe" call (an event or stream query)
/// made in the default mode is refused, and invalidates the capture, while any thread captures
/// in global mode or this thread captures; in relaxed mode it is not (measured on the 13.0
/// driver; the two exchanges cost 21 ns).
pub(crate) struct RelaxedCaptureMode<'driver> {
    driver: &'driver Driver,
    previous: CUstreamCaptureMode,
}

impl<'driver> RelaxedCaptureMode<'driver> {
    /// Puts the calling thread in relaxed mode.
    ///
    /// # Errors
    /// The driver's error from `cuThreadExchangeStreamCaptureMode`; the mode is unchanged.
    pub(crate) fn enter(driver: &'driver Driver) -> Result<Self> {
        let mut mode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: a valid pointer to a mode.
        unsafe { checked!(driver, cuThreadExchangeStreamCaptureMode(&mut mode)) }?;
        Ok(RelaxedCaptureMode {
            driver,
            previous: mode,
        })
    }
}

impl Drop for RelaxedCaptureMode<'_> {
    fn drop(&mut self) {
        let mut mode = self.previous;
        // SAFETY: a valid pointer to a mode, the thread's own from before.
        let given_back =
            unsafe { checked!(self.driver, cuThreadExchangeStreamCaptureMode(&mut mode)) };
        if let Err(error) = given_back {
            logged!(error!(
                "cannot give a thread its capture interaction mode back: {error}"
            ));
        }
    }
}

// ---- Launches and captures of one stream exclude each other ------------------------------------

/// Launches in flight and captures beginning, per group of streams. A launch holds its group
/// from before its capture check until the driver accepted it; a capture begun through
/// cuda-host first waits until no launch holds the group of its stream (or of the legacy
/// stream, which a blocking stream's capture draws in). So the check's answer still holds when
/// the driver takes the launch: a run-once record does not become a node of such a capture.
///
/// For a launch its look can refuse (`launching`), the wait is bounded (`LAUNCH_WAIT`): a launch
/// takes microseconds, and one still in flight after that is held by the driver, such as an
/// enqueue blocked behind a stream wait that only the capturing thread may release. The capture
/// then begins; if it takes the launch, the launch's look afterwards finds it there, abandons it
/// and refuses it, as for a capture other code began, and its node does nothing. A pass-through
/// launch of the driver's path (`launching_pass_through`) cannot be refused so: its node would
/// call the caller's function on every launch of the graph. A capture waits for it however long.
const LAUNCH_WAIT: Duration = Duration::from_millis(10);

#[repr(align(128))]
struct StreamGroup {
    /// Launches in flight that a capture taking them leaves refused.
    launching: AtomicUsize,
    /// Pass-through launches in flight that a capture taking them would run.
    launching_pass_through: AtomicUsize,
    beginning: AtomicUsize,
}

const GROUPS: usize = 64;

static GROUPS_OF_STREAMS: [StreamGroup; GROUPS] = [const {
    StreamGroup {
        launching: AtomicUsize::new(0),
        launching_pass_through: AtomicUsize::new(0),
        beginning: AtomicUsize::new(0),
    }
}; GROUPS];

fn group_of(stream: CUstream) -> &'static StreamGroup {
    // The null stream means the legacy stream unless the per-thread default stream is on; both
    // special streams share the legacy stream's group, which costs at most some waiting.
    let key = if stream.is_null() || stream == CU_STREAM_PER_THREAD {
        CU_STREAM_LEGACY.addr()
    } else {
        stream.addr()
    };
    let hash = (key as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
    &GROUPS_OF_STREAMS[hash as usize % GROUPS]
}

/// An enqueue's window on its stream (a host function's launch, a stream point's record, a host
/// copy): opened before the capture check, which it makes, and held until the driver accepted or
/// refused the work; it then looks whether other code's capture took it.
pub(crate) struct EnqueueWindow<'driver> {
    /// The count of its stream's group this window holds.
    count: &'static AtomicUsize,
    driver: &'driver Driver,
    stream: CUstream,
}

impl<'driver> EnqueueWindow<'driver> {
    /// Waits while a capture of `stream`'s group is beginning, holds the group, and checks that
    /// `stream` is not capturing: for a launch whose look afterwards refuses it if a capture
    /// took it after all.
    ///
    /// # Errors
    /// [`Error::StreamCapturing`] when it is, or the driver's error from `cuStreamIsCapturing`.
    #[inline]
    pub(crate) fn open(driver: &'driver Driver, stream: CUstream) -> Result<Self> {
        let group = group_of(stream);
        Self::open_holding(driver, stream, group, &group.launching)
    }

    /// [`open`](Self::open) for a pass-through launch of the driver's path, which a capture must
    /// never take: a capture waits for it without bound.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    #[inline]
    pub(crate) fn open_for_pass_through(driver: &'driver Driver, stream: CUstream) -> Result<Self> {
        let group = group_of(stream);
        Self::open_holding(driver, stream, group, &group.launching_pass_through)
    }

    #[inline]
    fn open_holding(
        driver: &'driver Driver,
        stream: CUstream,
        group: &'static StreamGroup,
        count: &'static AtomicUsize,
    ) -> Result<Self> {
        loop {
            // Sequentially consistent with `CaptureBeginning::wait_for_launches`: either the
            // capture sees this launch and waits, or the launch sees the capture and waits.
            count.fetch_add(1, Ordering::SeqCst);
            if group.beginning.load(Ordering::SeqCst) == 0 {
                break;
            }
            count.fetch_sub(1, Ordering::SeqCst);
            while group.beginning.load(Ordering::SeqCst) != 0 {
                std::thread::yield_now();
            }
        }
        let window = EnqueueWindow {
            count,
            driver,
            stream,
        };
        ensure_not_capturing(driver, stream)?;
        Ok(window)
    }

    /// The stream the window is on.
    pub(crate) fn stream(&self) -> CUstream {
        self.stream
    }

    /// Whether the launch of `function` with `user_data` made through this window became a node
    /// of a capture that other code began between the check and the launch (see
    /// [`captured_by_other_code`]).
    pub(crate) fn launch_was_captured(
        &self,
        function: unsafe extern "C" fn(*mut c_void),
        user_data: *mut c_void,
    ) -> bool {
        captured_by_other_code(self.driver, self.stream, function, user_data)
    }
}

impl Drop for EnqueueWindow<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Held while a capture of a stream begins: launches of its group (and of the legacy stream's)
/// wait, and those in flight were waited for.
pub(crate) struct CaptureBeginning {
    groups: [&'static StreamGroup; 2],
}

impl CaptureBeginning {
    /// Stops new launches on `stream`'s group and the legacy stream's, and waits until the
    /// launches in flight there were accepted or refused, for at most `LAUNCH_WAIT`.
    pub(crate) fn wait_for_launches(stream: CUstream) -> CaptureBeginning {
        let groups = [group_of(stream), group_of(CU_STREAM_LEGACY)];
        for (index, group) in groups.iter().enumerate() {
            if index == 1 && std::ptr::eq(groups[0], groups[1]) {
                continue;
            }
            group.beginning.fetch_add(1, Ordering::SeqCst);
        }
        let began = Instant::now();
        let legacy = group_of(CU_STREAM_LEGACY);
        let mut held = false;
        for group in groups {
            // A launch on a special stream the capture would take would not join it but
            // invalidate it (a blocking stream's capture draws in the legacy stream): the
            // legacy stream's group is waited for however long.
            let bounded = !std::ptr::eq(group, legacy);
            while group.launching_pass_through.load(Ordering::SeqCst) != 0
                || !(held && bounded) && group.launching.load(Ordering::SeqCst) != 0
            {
                if bounded && !held && began.elapsed() > LAUNCH_WAIT {
                    held = true;
                    logged!(debug!(
                        "a capture begins while the driver holds a launch of its stream's group"
                    ));
                }
                std::thread::yield_now();
            }
        }
        CaptureBeginning { groups }
    }
}

impl Drop for CaptureBeginning {
    fn drop(&mut self) {
        for (index, group) in self.groups.iter().enumerate() {
            if index == 1 && std::ptr::eq(self.groups[0], self.groups[1]) {
                continue;
            }
            group.beginning.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

// ---- Captures begun by other code ---------------------------------------------------------------

/// Whether the launch whose host function is `function` with `user_data` became a node of a
/// capture of `stream` that other code began between the check and the launch (or that began
/// through cuda-host past a launch the driver held): the stream captures now, and a host node of
/// the capture's graph is that launch. The capture's last nodes are looked at first; since the
/// capturing thread may have added work after the launch, then every node. A capture that began
/// and ended between the launch and this look is not seen (`docs/RELIABILITY.md`).
fn captured_by_other_code(
    driver: &Driver,
    stream: CUstream,
    function: unsafe extern "C" fn(*mut c_void),
    user_data: *mut c_void,
) -> bool {
    if !matches!(capture_state(driver, stream), Ok(Some(_))) {
        return false;
    }
    let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut graph: CUgraph = std::ptr::null_mut();
    let mut last_nodes: *const CUgraphNode = std::ptr::null();
    let mut count = 0usize;
    // SAFETY: a valid stream; the out-pointers are valid or null where the driver allows it.
    let result = unsafe {
        driver.cuStreamGetCaptureInfo_v3(
            stream,
            &mut status,
            std::ptr::null_mut(),
            &mut graph,
            &mut last_nodes,
            std::ptr::null_mut(),
            &mut count,
        )
    };
    if result != CUresult::CUDA_SUCCESS {
        return false;
    }
    let is_the_launch = |node: CUgraphNode| {
        let mut kind = CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: a node of the capture's graph; `kind` is a valid out-pointer.
        let result = unsafe { driver.cuGraphNodeGetType(node, &mut kind) };
        if result != CUresult::CUDA_SUCCESS || kind != CUgraphNodeType::CU_GRAPH_NODE_TYPE_HOST {
            return false;
        }
        let mut params = CUDA_HOST_NODE_PARAMS {
            fn_: None,
            userData: std::ptr::null_mut(),
        };
        // SAFETY: a host node of the capture's graph; `params` is a valid out-pointer.
        let result = unsafe { driver.cuGraphHostNodeGetParams(node, &mut params) };
        result == CUresult::CUDA_SUCCESS
            && params.userData == user_data
            && params
                .fn_
                .is_some_and(|found| std::ptr::fn_addr_eq(found, function))
    };
    let last_nodes = if last_nodes.is_null() {
        Vec::new()
    } else {
        // SAFETY: the driver hands back `count` nodes, valid until the next call on the stream.
        unsafe { std::slice::from_raw_parts(last_nodes, count) }.to_vec()
    };
    if last_nodes.into_iter().any(is_the_launch) {
        return true;
    }
    if graph.is_null() {
        return false;
    }
    let mut nodes = 0usize;
    // SAFETY: the capture's graph; a null array asks for the count.
    if unsafe { driver.cuGraphGetNodes(graph, std::ptr::null_mut(), &mut nodes) }
        != CUresult::CUDA_SUCCESS
    {
        return false;
    }
    let mut all = vec![std::ptr::null_mut(); nodes];
    // SAFETY: room for `nodes` nodes; the driver writes at most that many and says how many.
    if unsafe { driver.cuGraphGetNodes(graph, all.as_mut_ptr(), &mut nodes) }
        != CUresult::CUDA_SUCCESS
    {
        return false;
    }
    all.truncate(nodes);
    all.into_iter().any(is_the_launch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_driver;
    use std::cell::Cell;

    thread_local! {
        /// What the fake `cuStreamIsCapturing` answers on this thread: the result and status.
        static ANSWER: Cell<(CUresult, CUstreamCaptureStatus)> =
            const { Cell::new((CUresult::CUDA_SUCCESS, CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)) };
    }

    unsafe extern "C" fn is_capturing(
        _stream: CUstream,
        status: *mut CUstreamCaptureStatus,
    ) -> CUresult {
        let (result, answer) = ANSWER.with(Cell::get);
        // SAFETY: the caller passes a valid out-pointer.
        unsafe { status.write(answer) };
        result
    }

    fn state_when(result: CUresult, status: CUstreamCaptureStatus) -> Result<Option<CaptureState>> {
        ANSWER.with(|answer| answer.set((result, status)));
        // SAFETY: `is_capturing` has `cuStreamIsCapturing`'s signature.
        let driver = unsafe {
            fake_driver::driver(&[(c"cuStreamIsCapturing", is_capturing as *mut c_void)])
        };
        capture_state(&driver, std::ptr::null_mut())
    }

    #[test]
    fn the_drivers_capture_answers_map_to_capture_states() {
        use CUstreamCaptureStatus as Status;
        let ok = CUresult::CUDA_SUCCESS;
        assert_eq!(
            state_when(ok, Status::CU_STREAM_CAPTURE_STATUS_NONE),
            Ok(None)
        );
        assert_eq!(
            state_when(ok, Status::CU_STREAM_CAPTURE_STATUS_ACTIVE),
            Ok(Some(CaptureState::Active))
        );
        assert_eq!(
            state_when(ok, Status::CU_STREAM_CAPTURE_STATUS_INVALIDATED),
            Ok(Some(CaptureState::Invalidated))
        );
        assert_eq!(
            state_when(ok, CUstreamCaptureStatus(9)),
            Ok(Some(CaptureState::Active)),
            "a status a newer driver adds counts as capturing"
        );
        assert_eq!(
            state_when(
                CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
                Status::CU_STREAM_CAPTURE_STATUS_NONE
            ),
            Ok(Some(CaptureState::Implicit))
        );
        let error = state_when(
            CUresult::CUDA_ERROR_INVALID_HANDLE,
            Status::CU_STREAM_CAPTURE_STATUS_NONE,
        )
        .unwrap_err();
        assert_eq!(
            error.driver_result(),
            Some(CUresult::CUDA_ERROR_INVALID_HANDLE)
        );
        assert!(error.to_string().contains("cuStreamIsCapturing"), "{error}");
    }

    #[test]
    fn a_launch_window_refuses_a_capturing_stream() {
        ANSWER.with(|answer| {
            answer.set((
                CUresult::CUDA_SUCCESS,
                CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE,
            ))
        });
        // SAFETY: `is_capturing` has `cuStreamIsCapturing`'s signature.
        let driver = unsafe {
            fake_driver::driver(&[(c"cuStreamIsCapturing", is_capturing as *mut c_void)])
        };
        let stream = 0x77_usize as CUstream;
        let refused = EnqueueWindow::open(&driver, stream).err();
        assert_eq!(
            refused,
            Some(Error::StreamCapturing {
                status: CaptureState::Active
            })
        );
        // The refused window let go of its stream's group: a capture can begin at once.
        let beginning = CaptureBeginning::wait_for_launches(stream);
        drop(beginning);
    }
}

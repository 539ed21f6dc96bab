//! Refusing run-once host functions on streams that are being captured.
//!
//! A host function enqueued on a capturing stream becomes a node of the graph being built; the
//! graph may then run it many times, or never, so a launch record that frees itself after one run
//! would be used after free or leaked. cuda-host therefore asks `cuStreamIsCapturing` before
//! enqueueing and refuses, leaving the capture untouched. It must ask rather than try: on the
//! legacy stream, a refused `cuLaunchHostFunc` invalidates the capture it would have joined.

use crate::checked::checked;
use crate::contain::logged;
use crate::error::{CaptureState, Error, Result};
use crate::launch::graph_nodes::nodes_of;
use crate::sync::lock;
use cuda_host_sys::{
    CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, CUDA_HOST_NODE_PARAMS, CUgraph, CUgraphNode,
    CUgraphNodeType, CUresult, CUstream, CUstreamCaptureMode, CUstreamCaptureStatus, Driver,
};
use std::ffi::c_void;
use std::sync::Mutex;
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

/// Asks the driver whether `stream` captures, and refuses it if it does: `Ok` only for a stream
/// free of any capture; `refusal` of the capture's state while one is open; the look's own
/// error when the driver cannot tell, which every caller takes as a capture (what it was
/// about to enqueue, or just enqueued, may be a capture's).
#[inline]
pub(crate) fn refuse_capture(
    driver: &Driver,
    stream: CUstream,
    refusal: fn(CaptureState) -> Error,
) -> Result<()> {
    match capture_state(driver, stream)? {
        None => Ok(()),
        Some(status) => Err(refusal(status)),
    }
}

/// [`refuse_capture`] with [`Error::StreamCapturing`].
#[inline]
pub(crate) fn ensure_not_capturing(driver: &Driver, stream: CUstream) -> Result<()> {
    refuse_capture(driver, stream, |status| Error::StreamCapturing { status })
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

/// Launches in flight and captures beginning, by stream. A launch holds its stream from before
/// its capture check until the driver accepted it; a builder capture first
/// waits until no launch holds its stream or a special stream (the legacy stream, which a
/// blocking stream's capture draws in, and the per-thread one), and the launches of those
/// streams wait until it began. So the check's answer still holds when the driver takes the
/// launch: a run-once record does not become a node of such a capture.
///
/// For a launch its look can refuse (`launching`), the wait is bounded (`LAUNCH_WAIT`): a launch
/// takes microseconds, and one still in flight after that is held by the driver, such as an
/// enqueue blocked behind a stream wait that only the capturing thread may release. The capture
/// then begins; if it takes the launch, the launch's look afterwards finds it there, abandons it
/// and refuses it, as for a capture other code began, and its node does nothing. A pass-through
/// launch of the driver's path (`passing`) cannot be refused so: its node would call the
/// caller's function on every launch of the graph. A capture waits for it however long, and for
/// every launch of a special stream, which would not join the capture but invalidate it.
///
/// Every other stream is hashed into one of 64 groups, so that a launch costs one atomic add on
/// a line few streams share; the special streams have a group of their own, which no other
/// stream shares. A group's count may be another stream's, so it bounds a wait at most: what is
/// waited for without bound is named by its stream. A pass-through launch takes a seat with its
/// stream's handle, and a beginning capture lists its stream in [`BEGINNING`]: a capture waits
/// however long only for its own stream's pass-through launches and the special streams', and
/// a launch only for a capture of its own stream (of any stream, on a special stream).
const LAUNCH_WAIT: Duration = Duration::from_millis(10);

/// Seats for pass-through launches in flight per group; those that find them taken list their
/// stream in [`UNSEATED`].
const SEATS: usize = 4;

#[repr(align(128))]
struct StreamGroup {
    /// Launches in flight that a capture taking them leaves refused; in the special streams'
    /// group, every launch in flight.
    launching: AtomicUsize,
    /// The handles of the streams of pass-through launches in flight, a seat each; 0 when free.
    passing: [AtomicUsize; SEATS],
    /// Pass-through launches in flight that found every seat taken: their streams are in
    /// [`UNSEATED`].
    unseated: AtomicUsize,
    /// Captures beginning on the group's streams, which [`BEGINNING`] names; in the special
    /// streams' group, every capture beginning.
    beginning: AtomicUsize,
}

impl StreamGroup {
    const fn new() -> Self {
        StreamGroup {
            launching: AtomicUsize::new(0),
            passing: [const { AtomicUsize::new(0) }; SEATS],
            unseated: AtomicUsize::new(0),
            beginning: AtomicUsize::new(0),
        }
    }
}

const GROUPS: usize = 64;

static GROUPS_OF_STREAMS: [StreamGroup; GROUPS] = [const { StreamGroup::new() }; GROUPS];

/// The special streams' group: the null handle (the legacy stream, or the per-thread one where
/// the per-thread default stream is on), `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`.
static SPECIAL_STREAMS: StreamGroup = StreamGroup::new();

/// The streams (not special) whose capture is beginning, once per capture.
static BEGINNING: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The streams of pass-through launches in flight that found their group's seats taken, once
/// per launch.
static UNSEATED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// What a launch or a capture of a stream holds.
#[derive(Clone, Copy)]
enum StreamKey {
    /// A special stream: their own group.
    Special,
    /// Any other stream: its handle (never 0), in the group it is hashed into.
    Ordinary {
        group: &'static StreamGroup,
        handle: usize,
    },
}

impl StreamKey {
    fn of(stream: CUstream) -> StreamKey {
        if stream.is_null() || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD {
            return StreamKey::Special;
        }
        let handle = stream.addr();
        let hash = (handle as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
        StreamKey::Ordinary {
            group: &GROUPS_OF_STREAMS[hash as usize % GROUPS],
            handle,
        }
    }

    /// Whether a capture of this stream (of any stream, for a special one) is beginning.
    fn capture_beginning(self) -> bool {
        match self {
            StreamKey::Special => SPECIAL_STREAMS.beginning.load(Ordering::SeqCst) != 0,
            StreamKey::Ordinary { group, handle } => {
                // A capture lists its stream before it counts itself: the list names every
                // capture whose count was seen.
                group.beginning.load(Ordering::SeqCst) != 0 && lock(&BEGINNING).contains(&handle)
            }
        }
    }
}

/// What an open window holds, let go on drop.
enum WindowHold {
    /// A count of a group, taken one.
    Count(&'static AtomicUsize),
    /// A pass-through launch's seat, holding its stream's handle.
    Seat(&'static AtomicUsize),
    /// A pass-through launch that found the seats of its group taken: its stream in
    /// [`UNSEATED`], counted in the group.
    Unseated {
        group: &'static StreamGroup,
        handle: usize,
    },
}

impl WindowHold {
    /// Holds `key` for a launch, a pass-through launch of the driver's path if `pass_through`.
    /// Sequentially consistent with `CaptureBeginning::wait_for_launches`: either the capture
    /// sees this hold and waits, or the launch, looking after it, sees the capture and waits.
    fn take(key: StreamKey, pass_through: bool) -> WindowHold {
        let (group, handle) = match key {
            StreamKey::Special => {
                SPECIAL_STREAMS.launching.fetch_add(1, Ordering::SeqCst);
                return WindowHold::Count(&SPECIAL_STREAMS.launching);
            }
            StreamKey::Ordinary { group, handle } if pass_through => (group, handle),
            StreamKey::Ordinary { group, .. } => {
                group.launching.fetch_add(1, Ordering::SeqCst);
                return WindowHold::Count(&group.launching);
            }
        };
        for seat in &group.passing {
            if seat
                .compare_exchange(0, handle, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
            {
                return WindowHold::Seat(seat);
            }
        }
        // Counted before listed: a capture that sees the count looks at the list, which names
        // the stream unless the launch is yet to look at the capture.
        group.unseated.fetch_add(1, Ordering::SeqCst);
        lock(&UNSEATED).push(handle);
        WindowHold::Unseated { group, handle }
    }
}

impl Drop for WindowHold {
    fn drop(&mut self) {
        match *self {
            WindowHold::Count(count) => {
                count.fetch_sub(1, Ordering::SeqCst);
            }
            WindowHold::Seat(seat) => seat.store(0, Ordering::SeqCst),
            WindowHold::Unseated { group, handle } => {
                let mut unseated = lock(&UNSEATED);
                if let Some(index) = unseated.iter().position(|&listed| listed == handle) {
                    unseated.swap_remove(index);
                }
                drop(unseated);
                group.unseated.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

/// An enqueue's window on its stream (a host function's launch, a stream point's record, a host
/// copy): opened before the capture check, which it makes, and held until the driver accepted or
/// refused the work; it then looks whether other code's capture took it.
pub(crate) struct EnqueueWindow<'driver> {
    /// What this window holds of its stream.
    _hold: WindowHold,
    driver: &'driver Driver,
    stream: CUstream,
}

impl<'driver> EnqueueWindow<'driver> {
    /// Waits while a capture of `stream` is beginning, holds the stream, and checks that
    /// `stream` is not capturing: for a launch whose look afterwards refuses it if a capture
    /// took it after all.
    ///
    /// # Errors
    /// [`Error::StreamCapturing`] when it is, or the driver's error from `cuStreamIsCapturing`.
    #[inline]
    pub(crate) fn open(driver: &'driver Driver, stream: CUstream) -> Result<Self> {
        Self::open_holding(driver, stream, false)
    }

    /// [`open`](Self::open) for a pass-through launch of the driver's path, which a capture must
    /// never take: a capture of its stream waits for it without bound.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    #[inline]
    pub(crate) fn open_for_pass_through(driver: &'driver Driver, stream: CUstream) -> Result<Self> {
        Self::open_holding(driver, stream, true)
    }

    #[inline]
    fn open_holding(driver: &'driver Driver, stream: CUstream, pass_through: bool) -> Result<Self> {
        let key = StreamKey::of(stream);
        let hold = loop {
            let hold = WindowHold::take(key, pass_through);
            if !key.capture_beginning() {
                break hold;
            }
            drop(hold);
            while key.capture_beginning() {
                std::thread::yield_now();
            }
        };
        let window = EnqueueWindow {
            _hold: hold,
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
    ///
    /// # Errors
    /// The driver's error when the look fails: it cannot tell, so the caller counts the launch as
    /// taken.
    pub(crate) fn launch_was_captured(
        &self,
        function: unsafe extern "C" fn(*mut c_void),
        user_data: *mut c_void,
    ) -> Result<bool> {
        captured_by_other_code(self.driver, self.stream, function, user_data)
    }
}

/// Held while a capture of a stream begins: launches of that stream (and of the special
/// streams) wait, and those in flight were waited for.
pub(crate) struct CaptureBeginning {
    key: StreamKey,
}

impl CaptureBeginning {
    /// Stops new launches on `stream` and the special streams, and waits until the launches in
    /// flight there were accepted or refused: those of the special streams and pass-through
    /// launches of `stream` however long, the others of `stream`'s group at most `LAUNCH_WAIT`.
    pub(crate) fn wait_for_launches(stream: CUstream) -> CaptureBeginning {
        let key = StreamKey::of(stream);
        if let StreamKey::Ordinary { group, handle } = key {
            // Listed before counted (`StreamKey::capture_beginning`).
            lock(&BEGINNING).push(handle);
            group.beginning.fetch_add(1, Ordering::SeqCst);
        }
        SPECIAL_STREAMS.beginning.fetch_add(1, Ordering::SeqCst);
        let began = Instant::now();
        let mut held = false;
        loop {
            let special = SPECIAL_STREAMS.launching.load(Ordering::SeqCst) != 0;
            let (passing, launching) = match key {
                StreamKey::Special => (false, false),
                StreamKey::Ordinary { group, handle } => (
                    group
                        .passing
                        .iter()
                        .any(|seat| seat.load(Ordering::SeqCst) == handle)
                        || group.unseated.load(Ordering::SeqCst) != 0
                            && lock(&UNSEATED).contains(&handle),
                    !held && group.launching.load(Ordering::SeqCst) != 0,
                ),
            };
            if !(special || passing || launching) {
                break;
            }
            if launching && began.elapsed() > LAUNCH_WAIT {
                held = true;
                logged!(debug!(
                    "a capture begins while the driver holds a launch of its stream's group"
                ));
            }
            std::thread::yield_now();
        }
        CaptureBeginning { key }
    }
}

impl Drop for CaptureBeginning {
    fn drop(&mut self) {
        SPECIAL_STREAMS.beginning.fetch_sub(1, Ordering::SeqCst);
        if let StreamKey::Ordinary { group, handle } = self.key {
            group.beginning.fetch_sub(1, Ordering::SeqCst);
            let mut beginning = lock(&BEGINNING);
            if let Some(index) = beginning.iter().position(|&listed| listed == handle) {
                beginning.swap_remove(index);
            }
        }
    }
}

// ---- Captures begun by other code ---------------------------------------------------------------

/// Whether the launch whose host function is `function` with `user_data` became a node of a
/// capture of `stream` that other code began between the check and the launch (or that began
/// through cuda-host past a launch the driver held): the stream captures now, and a host node of
/// the capture's graph is that launch. The capture's last nodes are looked at first; since the
/// capturing thread may have added work after the launch, then every node. A capture that began
/// and ended between the launch and this look is not seen (`docs/RELIABILITY.md`). A node whose
/// type or parameters cannot be read may be the launch: it counts as found.
///
/// # Errors
/// The driver's error from `cuStreamIsCapturing`, `cuStreamGetCaptureInfo` or `cuGraphGetNodes`:
/// the look tells nothing then, and a graph may call the launch's record.
fn captured_by_other_code(
    driver: &Driver,
    stream: CUstream,
    function: unsafe extern "C" fn(*mut c_void),
    user_data: *mut c_void,
) -> Result<bool> {
    if capture_state(driver, stream)?.is_none() {
        return Ok(false);
    }
    let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut graph: CUgraph = std::ptr::null_mut();
    let mut last_nodes: *const CUgraphNode = std::ptr::null();
    let mut count = 0usize;
    // SAFETY: a valid stream; the out-pointers are valid or null where the driver allows it.
    unsafe {
        checked!(
            driver,
            cuStreamGetCaptureInfo_v3(
                stream,
                &mut status,
                std::ptr::null_mut(),
                &mut graph,
                &mut last_nodes,
                std::ptr::null_mut(),
                &mut count,
            )
        )
    }?;
    let is_the_launch = |node: CUgraphNode| {
        let mut kind = CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: a node of the capture's graph; `kind` is a valid out-pointer.
        let result = unsafe { driver.cuGraphNodeGetType(node, &mut kind) };
        if result != CUresult::CUDA_SUCCESS {
            return true;
        }
        if kind != CUgraphNodeType::CU_GRAPH_NODE_TYPE_HOST {
            return false;
        }
        let mut params = CUDA_HOST_NODE_PARAMS {
            fn_: None,
            userData: std::ptr::null_mut(),
        };
        // SAFETY: a host node of the capture's graph; `params` is a valid out-pointer.
        let result = unsafe { driver.cuGraphHostNodeGetParams(node, &mut params) };
        result != CUresult::CUDA_SUCCESS
            || params.userData == user_data
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
        return Ok(true);
    }
    if graph.is_null() {
        return Ok(false);
    }
    // SAFETY: the capture's graph, which only its capturing thread adds to meanwhile.
    Ok(unsafe { nodes_of(driver, graph) }?
        .into_iter()
        .any(is_the_launch))
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
        // The refused window let go of its stream: a capture can begin at once.
        let beginning = CaptureBeginning::wait_for_launches(stream);
        drop(beginning);
    }

    /// A driver whose `cuStreamIsCapturing` answers this thread's [`ANSWER`], by default that
    /// no stream is capturing.
    fn driver() -> std::sync::Arc<Driver> {
        // SAFETY: `is_capturing` has `cuStreamIsCapturing`'s signature.
        unsafe { fake_driver::driver(&[(c"cuStreamIsCapturing", is_capturing as *mut c_void)]) }
    }

    /// Begins a capture of `stream` on a thread of its own: a receiver that answers once it
    /// began (and the beginning was let go).
    fn begin_elsewhere(stream: CUstream) -> std::sync::mpsc::Receiver<()> {
        let handle = stream.addr();
        let (began, beginning) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            drop(CaptureBeginning::wait_for_launches(handle as CUstream));
            let _ = began.send(());
        });
        beginning
    }

    /// How long a wrong beginning is given to show.
    const A_WRONG_BEGINNING_SHOWS: Duration = Duration::from_millis(100);
    /// How long a capture that should begin is waited for.
    const BEGINS_WITHIN: Duration = Duration::from_secs(5);

    /// Handles of ordinary streams, 2,048 of them, each group holding many (under Miri, 128).
    fn ordinary_handles() -> impl Iterator<Item = CUstream> {
        let count = if cfg!(miri) { 128 } else { 2048 };
        (1..=count).map(|index: usize| (index * 0x40 + 0x1_0000) as CUstream)
    }

    #[test]
    fn no_window_on_another_stream_holds_a_capture_beginning_past_the_bound() {
        let driver = driver();
        let capturing = 0x7_0000_usize as CUstream;
        for (index, stream) in ordinary_handles().enumerate() {
            let window = if index % 2 == 0 {
                EnqueueWindow::open(&driver, stream)
            } else {
                EnqueueWindow::open_for_pass_through(&driver, stream)
            }
            .expect("a window");
            let began = begin_elsewhere(capturing).recv_timeout(BEGINS_WITHIN);
            drop(window);
            assert!(
                began.is_ok(),
                "a capture of {capturing:?} waited for a window on {stream:?}"
            );
        }
    }

    #[test]
    fn a_window_on_a_special_stream_holds_every_capture_beginning_until_it_closes() {
        let driver = driver();
        for special in [std::ptr::null_mut(), CU_STREAM_LEGACY, CU_STREAM_PER_THREAD] {
            for pass_through in [false, true] {
                let window = if pass_through {
                    EnqueueWindow::open_for_pass_through(&driver, special)
                } else {
                    EnqueueWindow::open(&driver, special)
                }
                .expect("a window");
                let beginning = begin_elsewhere(0x7_1000_usize as CUstream);
                assert!(
                    beginning.recv_timeout(A_WRONG_BEGINNING_SHOWS).is_err(),
                    "a capture began while a window on {special:?} was open"
                );
                drop(window);
                assert!(beginning.recv_timeout(BEGINS_WITHIN).is_ok());
            }
        }
    }

    #[test]
    fn pass_through_windows_hold_a_capture_of_their_stream_until_the_last_closes() {
        let driver = driver();
        let stream = 0x7_2000_usize as CUstream;
        // More than a group's seats: the last windows find them taken.
        let mut windows: Vec<_> = (0..SEATS + 2)
            .map(|_| EnqueueWindow::open_for_pass_through(&driver, stream).expect("a window"))
            .collect();
        assert!(
            windows
                .iter()
                .any(|window| matches!(window._hold, WindowHold::Unseated { .. }))
        );
        let beginning = begin_elsewhere(stream);
        while let Some(window) = windows.pop() {
            assert!(
                beginning.recv_timeout(A_WRONG_BEGINNING_SHOWS).is_err(),
                "a capture began while {} pass-through windows on its stream were open",
                windows.len() + 1
            );
            drop(window);
        }
        assert!(beginning.recv_timeout(BEGINS_WITHIN).is_ok());
    }
}

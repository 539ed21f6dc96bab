//! The software driver's own tests: the CUDA driver behaviour the suite relies on, written as its
//! specification through raw driver calls. Every test runs on both drivers unless it cannot (and
//! then says why): here on the software driver, on a GPU machine with `CUDA_TEST_DRIVER=real`,
//! where the real driver is right wherever the two disagree (`FACTS.md`).
//!
//! - ordering: host functions of a stream run in FIFO order, all on one driver thread;
//! - streams: legacy, blocking and non-blocking ordering, queries, events;
//! - capture: modes, capture state and info, the implicit legacy-stream rules, invalidation;
//! - graphs: explicit host-node graphs, clones, parameter updates;
//! - user objects: who keeps them alive, where and when their destructor runs;
//! - the software driver's fault-injection controls, call counts and live-object counts (software
//!   driver only);
//! - destroyed streams, and a sticky error from a faulting launch;
//! - copies whose enqueue waits until the stream has reached them, and copies whose does not.
//!
//! Tests that capture a stream, use the legacy stream (which a blocking stream's capture
//! implicitly involves) or allocate device memory run alone ([`alone`]); the others share the
//! process ([`shared`]).
//! Whatever a host function or a destructor reads is leaked on purpose, so that one the driver
//! still runs after a failed assertion never reads freed memory.

use cuda_host::{Context, Event, EventFlags, Stream, StreamFlags};
use cuda_host_sys::{
    Availability, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, CUcontext, CUdevice_attribute,
    CUdeviceptr, CUdriverProcAddress_flags, CUdriverProcAddressQueryResult, CUevent,
    CUgraphNodeType, CUgreenCtx, CUhostTaskSyncMode, CUresult, CUstream, CUstream_flags,
    CUstreamCaptureMode, CUstreamCaptureStatus, CUuserObject, CUuserObject_flags,
    CUuserObjectRetain_flags, CUuuid, Driver, Error,
};
use std::ffi::{CStr, c_char, c_uint, c_void};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{
    Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
use std::thread::ThreadId;
use std::time::{Duration, Instant};
use suite::capture::{Capture, Graph, is_capturing};
use suite::host_function::{host_params, launch_host, leak_closure, run_closure};
use suite::software::{Controls, LiveCounts, LiveObjects, LiveObjectsFn};
use suite::{Gate, MappedWords, ok, test_driver, wait_until};

// ---- Harness for this file ----------------------------------------------------------------------

fn driver() -> &'static Driver {
    &test_driver().driver
}

/// The primary context, made current on the calling thread: legacy-stream calls and raw
/// creations use the current context.
fn current_context() -> Context {
    let context = suite::context();
    context.bind_to_thread().expect("the context binds");
    context
}

fn non_blocking(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking).expect("stream")
}

fn blocking(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::Blocking).expect("stream")
}

static ISOLATION: RwLock<()> = RwLock::new(());

/// Held by the tests that may run beside each other: they use only non-blocking streams.
fn shared() -> RwLockReadGuard<'static, ()> {
    ISOLATION.read().unwrap_or_else(PoisonError::into_inner)
}

/// Held by the tests that capture or use the legacy stream: a global-mode capture refuses (and
/// is invalidated by) other threads' unsafe calls, and a blocking stream's capture by any use of
/// the legacy stream, so these run with no other test of this binary.
struct Alone {
    _capture: MutexGuard<'static, ()>,
    _isolation: RwLockWriteGuard<'static, ()>,
}

fn alone() -> Alone {
    let capture = suite::capture_lock();
    let isolation = ISOLATION.write().unwrap_or_else(PoisonError::into_inner);
    Alone {
        _capture: capture,
        _isolation: isolation,
    }
}

/// The software driver's controls; `None` (and a skip note) on the real driver.
fn controls_or_skip(test: &str) -> Option<&'static Controls> {
    let controls = suite::software::controls();
    if controls.is_none() {
        suite::skip(
            test,
            "fault injection is a control of the software driver; the real driver has none",
        );
    }
    controls
}

fn leak<T>(value: T) -> &'static T {
    Box::leak(Box::new(value))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A driver handle moved to another thread; it is only passed back to the driver.
struct SendHandle<T>(T);

// SAFETY: driver handles are valid on every thread; the driver API is thread-safe.
unsafe impl<T> Send for SendHandle<T> {}

impl<T: Copy> SendHandle<T> {
    fn get(&self) -> T {
        self.0
    }
}

impl<T> SendHandle<T> {
    fn into_inner(self) -> T {
        self.0
    }
}

// ---- Host functions -----------------------------------------------------------------------------

/// What host functions saw, in the order they ran.
#[derive(Debug, Clone, Default)]
struct Log(Arc<Mutex<Vec<&'static str>>>);

impl Log {
    fn entries(&self) -> Vec<&'static str> {
        lock(&self.0).clone()
    }

    /// A host function that appends `entry`.
    fn marker(&self, entry: &'static str) -> impl Fn() + Send + Sync + 'static {
        let log = self.clone();
        move || lock(&log.0).push(entry)
    }
}

/// A host function that counts its runs in `counter`.
fn counting(counter: &Arc<AtomicUsize>) -> impl Fn() + Send + Sync + 'static {
    let counter = Arc::clone(counter);
    move || {
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

fn count(counter: &AtomicUsize) -> usize {
    counter.load(Ordering::SeqCst)
}

/// Runs a host function through `stream` and waits (bounded) until it has run; also warms up a
/// stream before a test relies on how soon it runs.
#[track_caller]
fn round_trip(stream: &Stream) {
    let ran = Arc::new(AtomicUsize::new(0));
    ok(
        "cuLaunchHostFunc",
        launch_host(stream.as_raw(), counting(&ran)),
    );
    wait_until("a host function on an idle stream", || count(&ran) == 1);
}

/// Before a test checks that work it holds has *not* run: a few round trips through the idle,
/// independent stream `witness`, enqueued after that work. On a driver that wrongly let the work
/// go, it would have reached the single host-function thread well before they finish.
fn let_free_work_run(witness: &Stream) {
    for _ in 0..3 {
        round_trip(witness);
    }
}

/// Runs `call` on another thread and waits (bounded) for it to return: for calls that must not
/// wait for work a test holds at a gate, so that a driver that does wait fails the test instead
/// of hanging it.
#[track_caller]
fn returns_while_held<T: Send + 'static>(
    what: &str,
    call: impl FnOnce() -> T + Send + 'static,
) -> T {
    let answer: Arc<Mutex<Option<T>>> = Arc::default();
    let slot = Arc::clone(&answer);
    std::thread::spawn(move || {
        let value = call();
        *lock(&slot) = Some(value);
    });
    wait_until(what, || lock(&answer).is_some());
    lock(&answer).take().expect("the answer")
}

/// Records every status a stream callback is called with.
#[derive(Debug, Default)]
struct CallbackProbe {
    statuses: Mutex<Vec<CUresult>>,
}

unsafe extern "C" fn record_status(_stream: CUstream, status: CUresult, data: *mut c_void) {
    // SAFETY: added with a pointer to a leaked `CallbackProbe`.
    let probe = unsafe { &*data.cast::<CallbackProbe>() };
    lock(&probe.statuses).push(status);
}

fn add_callback(stream: CUstream, probe: &'static CallbackProbe) -> CUresult {
    let data = ptr::from_ref(probe).cast_mut().cast();
    // SAFETY: `record_status` only reads the leaked probe, from any thread.
    unsafe { driver().cuStreamAddCallback(stream, Some(record_status), data, 0) }
}

// ---- Streams, events, captures, graphs ----------------------------------------------------------

fn query(stream: CUstream) -> CUresult {
    // SAFETY: a live stream or a special handle, with the context current.
    unsafe { driver().cuStreamQuery(stream) }
}

fn synchronize(stream: CUstream) -> CUresult {
    // SAFETY: as above.
    unsafe { driver().cuStreamSynchronize(stream) }
}

fn record(event: &Event, stream: CUstream) {
    // SAFETY: a live event and a live stream of its context.
    ok("cuEventRecord", unsafe {
        driver().cuEventRecord(event.as_raw(), stream)
    });
}

fn event_query(event: CUevent) -> CUresult {
    // SAFETY: a live event.
    unsafe { driver().cuEventQuery(event) }
}

fn elapsed_ms(start: &Event, end: &Event) -> (CUresult, f32) {
    let mut milliseconds = f32::NAN;
    // SAFETY: live events and a valid out-pointer.
    let result =
        unsafe { driver().cuEventElapsedTime_v2(&mut milliseconds, start.as_raw(), end.as_raw()) };
    (result, milliseconds)
}

const SUCCESS: CUresult = CUresult::CUDA_SUCCESS;
const NONE: CUstreamCaptureStatus = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
const ACTIVE: CUstreamCaptureStatus = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE;
const INVALIDATED: CUstreamCaptureStatus =
    CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED;
const GLOBAL: CUstreamCaptureMode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL;
const RELAXED: CUstreamCaptureMode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;

// ---- 1. Ordering of host functions --------------------------------------------------------------

/// What the host functions of one stream share.
struct StreamState {
    next: AtomicUsize,
    out_of_order: AtomicUsize,
    threads: &'static HostThreads,
}

/// The threads host functions ran on: the first one seen, and how many runs were elsewhere.
#[derive(Default)]
struct HostThreads {
    first: OnceLock<ThreadId>,
    elsewhere: AtomicUsize,
}

/// One host function's user data: its stream's state and its place in the stream.
struct Call {
    state: &'static StreamState,
    sequence: usize,
}

unsafe extern "C" fn count_in_order(data: *mut c_void) {
    // SAFETY: launched with a pointer to a leaked `Call`.
    let call = unsafe { &*data.cast::<Call>() };
    let state = call.state;
    if state.next.fetch_add(1, Ordering::SeqCst) != call.sequence {
        state.out_of_order.fetch_add(1, Ordering::SeqCst);
    }
    let thread = std::thread::current().id();
    if *state.threads.first.get_or_init(|| thread) != thread {
        state.threads.elsewhere.fetch_add(1, Ordering::SeqCst);
    }
}

/// Enqueues `per_stream` host functions on each of 4 non-blocking streams, round-robin from this
/// thread, and waits for the streams.
fn run_on_four_streams(per_stream: usize) -> (Vec<&'static StreamState>, &'static HostThreads) {
    let context = current_context();
    let streams: Vec<Stream> = (0..4).map(|_| non_blocking(&context)).collect();
    let threads: &'static HostThreads = leak(HostThreads::default());
    let states: Vec<&'static StreamState> = streams
        .iter()
        .map(|_| {
            leak(StreamState {
                next: AtomicUsize::new(0),
                out_of_order: AtomicUsize::new(0),
                threads,
            })
        })
        .collect();
    let calls: Vec<&'static [Call]> = states
        .iter()
        .map(|&state| {
            let calls: Vec<Call> = (0..per_stream)
                .map(|sequence| Call { state, sequence })
                .collect();
            &*Box::leak(calls.into_boxed_slice())
        })
        .collect();
    for sequence in 0..per_stream {
        for (stream, calls) in streams.iter().zip(&calls) {
            let data = ptr::from_ref(&calls[sequence]).cast_mut().cast();
            // SAFETY: `count_in_order` reads a leaked `Call`, from any thread.
            let result =
                unsafe { driver().cuLaunchHostFunc(stream.as_raw(), Some(count_in_order), data) };
            ok("cuLaunchHostFunc", result);
        }
    }
    for stream in &streams {
        ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    }
    (states, threads)
}

#[test]
fn host_functions_of_each_stream_all_run_in_fifo_order() {
    const PER_STREAM: usize = 10_000;
    let _shared = shared();
    let (states, _) = run_on_four_streams(PER_STREAM);
    for (index, state) in states.iter().enumerate() {
        assert_eq!(
            count(&state.next),
            PER_STREAM,
            "stream {index}: not all ran"
        );
        assert_eq!(
            count(&state.out_of_order),
            0,
            "stream {index}: out of order"
        );
    }
}

#[test]
fn host_functions_of_all_streams_run_on_one_thread_that_is_not_the_callers() {
    let _shared = shared();
    let (states, threads) = run_on_four_streams(500);
    assert!(states.iter().all(|state| count(&state.next) == 500));
    assert_eq!(
        count(&threads.elsewhere),
        0,
        "host functions ran on more than one thread"
    );
    assert_ne!(
        threads.first.get().copied(),
        Some(std::thread::current().id()),
        "host functions ran on the enqueuing thread"
    );
}

// ---- 2. Stream semantics ------------------------------------------------------------------------

#[test]
fn a_blocking_stream_waits_for_earlier_work_of_the_legacy_stream() {
    let _alone = alone();
    let context = current_context();
    let legacy = Stream::legacy(&context);
    let (stream, witness) = (blocking(&context), non_blocking(&context));
    let gate = Gate::new(&context);
    let log = Log::default();
    round_trip(&stream);

    gate.hold(&legacy);
    ok(
        "cuLaunchHostFunc",
        launch_host(CU_STREAM_LEGACY, log.marker("legacy")),
    );
    ok(
        "cuLaunchHostFunc",
        launch_host(stream.as_raw(), log.marker("blocking")),
    );
    let_free_work_run(&witness);
    assert!(log.entries().is_empty(), "ran with the legacy stream held");
    assert_eq!(
        query(stream.as_raw()),
        CUresult::CUDA_ERROR_NOT_READY,
        "the blocking stream did not wait for the held legacy stream"
    );
    gate.open();
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(log.entries(), ["legacy", "blocking"]);
}

#[test]
fn the_legacy_stream_waits_for_earlier_work_of_blocking_streams() {
    let _alone = alone();
    let context = current_context();
    let (stream, witness) = (blocking(&context), non_blocking(&context));
    let gate = Gate::new(&context);
    let log = Log::default();
    ok("cuStreamSynchronize", synchronize(CU_STREAM_LEGACY));

    gate.hold(&stream);
    ok(
        "cuLaunchHostFunc",
        launch_host(stream.as_raw(), log.marker("blocking")),
    );
    ok(
        "cuLaunchHostFunc",
        launch_host(CU_STREAM_LEGACY, log.marker("legacy")),
    );
    let_free_work_run(&witness);
    assert!(
        log.entries().is_empty(),
        "ran with the blocking stream held"
    );
    assert_eq!(
        query(CU_STREAM_LEGACY),
        CUresult::CUDA_ERROR_NOT_READY,
        "the legacy stream did not wait for the held blocking stream"
    );
    gate.open();
    ok("cuStreamSynchronize", synchronize(CU_STREAM_LEGACY));
    assert_eq!(log.entries(), ["blocking", "legacy"]);
}

#[test]
fn a_non_blocking_stream_does_not_wait_for_a_held_legacy_stream() {
    let _alone = alone();
    let context = current_context();
    let legacy = Stream::legacy(&context);
    let stream = non_blocking(&context);
    let gate = Gate::new(&context);
    let log = Log::default();

    gate.hold(&legacy);
    ok(
        "cuLaunchHostFunc",
        launch_host(CU_STREAM_LEGACY, log.marker("legacy")),
    );
    ok(
        "cuLaunchHostFunc",
        launch_host(stream.as_raw(), log.marker("non-blocking")),
    );
    wait_until(
        "the non-blocking stream's host function, with the legacy stream held",
        || !log.entries().is_empty(),
    );
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(query(CU_STREAM_LEGACY), CUresult::CUDA_ERROR_NOT_READY);
    gate.open();
    ok("cuStreamSynchronize", synchronize(CU_STREAM_LEGACY));
    assert_eq!(log.entries(), ["non-blocking", "legacy"]);
}

#[test]
fn a_host_function_launch_without_a_function_answers_invalid_value() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    // SAFETY: a live stream; the driver refuses the missing function before using anything.
    let result = unsafe { driver().cuLaunchHostFunc(stream.as_raw(), None, ptr::null_mut()) };
    assert_eq!(result, CUresult::CUDA_ERROR_INVALID_VALUE);
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
}

#[test]
fn stream_query_answers_not_ready_while_work_is_pending_and_success_after() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let gate = Gate::new(&context);
    let runs = Arc::new(AtomicUsize::new(0));
    assert_eq!(query(stream.as_raw()), SUCCESS, "a new stream is idle");

    gate.hold(&stream);
    ok(
        "cuLaunchHostFunc",
        launch_host(stream.as_raw(), counting(&runs)),
    );
    assert_eq!(query(stream.as_raw()), CUresult::CUDA_ERROR_NOT_READY);
    gate.open();
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(query(stream.as_raw()), SUCCESS);
    assert_eq!(count(&runs), 1);
}

#[test]
fn an_event_is_not_ready_until_its_stream_reaches_it() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let event = Event::new(&context, EventFlags::Timing).expect("event");
    let gate = Gate::new(&context);

    gate.hold(&stream);
    record(&event, stream.as_raw());
    assert_eq!(event_query(event.as_raw()), CUresult::CUDA_ERROR_NOT_READY);
    gate.open();
    // SAFETY: a live event.
    ok("cuEventSynchronize", unsafe {
        driver().cuEventSynchronize(event.as_raw())
    });
    assert_eq!(event_query(event.as_raw()), SUCCESS);
}

#[test]
fn elapsed_time_is_not_ready_before_both_events_complete_and_not_negative_after() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let start = Event::new(&context, EventFlags::Timing).expect("event");
    let end = Event::new(&context, EventFlags::Timing).expect("event");
    let gate = Gate::new(&context);
    let runs = Arc::new(AtomicUsize::new(0));

    gate.hold(&stream);
    record(&start, stream.as_raw());
    ok(
        "cuLaunchHostFunc",
        launch_host(stream.as_raw(), counting(&runs)),
    );
    record(&end, stream.as_raw());
    assert_eq!(elapsed_ms(&start, &end).0, CUresult::CUDA_ERROR_NOT_READY);
    gate.open();
    // SAFETY: a live event.
    ok("cuEventSynchronize", unsafe {
        driver().cuEventSynchronize(end.as_raw())
    });
    let (result, milliseconds) = elapsed_ms(&start, &end);
    ok("cuEventElapsedTime_v2", result);
    assert!(
        milliseconds.is_finite() && milliseconds >= 0.0,
        "elapsed {milliseconds} ms"
    );
    assert_eq!(count(&runs), 1);
}

#[test]
fn stream_wait_event_orders_one_stream_after_another() {
    let _shared = shared();
    let context = current_context();
    let (first, second) = (non_blocking(&context), non_blocking(&context));
    let witness = non_blocking(&context);
    let event = Event::new(&context, EventFlags::DisableTiming).expect("event");
    let gate = Gate::new(&context);
    let log = Log::default();
    round_trip(&second);

    gate.hold(&first);
    ok(
        "cuLaunchHostFunc",
        launch_host(first.as_raw(), log.marker("first")),
    );
    record(&event, first.as_raw());
    // SAFETY: a live stream and a live event.
    ok("cuStreamWaitEvent", unsafe {
        driver().cuStreamWaitEvent(second.as_raw(), event.as_raw(), 0)
    });
    ok(
        "cuLaunchHostFunc",
        launch_host(second.as_raw(), log.marker("second")),
    );
    let_free_work_run(&witness);
    assert!(log.entries().is_empty(), "ran with the first stream held");
    assert_eq!(
        query(second.as_raw()),
        CUresult::CUDA_ERROR_NOT_READY,
        "the waiting stream went ahead"
    );
    gate.open();
    ok("cuStreamSynchronize", synchronize(second.as_raw()));
    assert_eq!(log.entries(), ["first", "second"]);
}

// ---- 3. Capture semantics -----------------------------------------------------------------------

#[test]
fn every_capture_mode_yields_a_graph_whose_captured_host_node_runs_on_each_launch() {
    let _alone = alone();
    let context = current_context();
    for mode in [
        GLOBAL,
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        RELAXED,
    ] {
        let stream = non_blocking(&context);
        let runs = Arc::new(AtomicUsize::new(0));
        let capture = Capture::begin(stream.as_raw(), mode);
        ok(
            "cuLaunchHostFunc",
            launch_host(stream.as_raw(), counting(&runs)),
        );
        let graph = capture
            .end()
            .unwrap_or_else(|(result, _)| panic!("{mode:?}: the capture ended with {result}"));
        assert_eq!(count(&runs), 0, "{mode:?}: a captured host function ran");
        let exec = graph.instantiate();
        exec.launch(stream.as_raw());
        exec.launch(stream.as_raw());
        ok("cuStreamSynchronize", synchronize(stream.as_raw()));
        assert_eq!(count(&runs), 2, "{mode:?}: once per launch");
    }
}

#[test]
fn is_capturing_answers_active_during_a_capture_and_none_after_it() {
    let _alone = alone();
    let context = current_context();
    let stream = non_blocking(&context);
    assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, NONE));
    let capture = Capture::begin(stream.as_raw(), GLOBAL);
    assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, ACTIVE));
    let graph = capture.end();
    assert!(graph.is_ok(), "an empty capture ends in a graph");
    assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, NONE));
}

#[test]
fn capture_info_reports_an_active_capture_with_a_unique_id_its_graph_and_its_last_node() {
    let _alone = alone();
    let context = current_context();
    let stream = non_blocking(&context);
    let mut ids = Vec::new();
    for _ in 0..2 {
        let capture = Capture::begin(stream.as_raw(), GLOBAL);
        ok(
            "cuLaunchHostFunc",
            launch_host(stream.as_raw(), Log::default().marker("captured")),
        );
        let mut status = CUstreamCaptureStatus(77);
        let (mut id, mut graph) = (0u64, ptr::null_mut());
        let (mut dependencies, mut count) = (ptr::null(), usize::MAX);
        // SAFETY: a live stream and valid out-pointers; no edge data asked for.
        ok("cuStreamGetCaptureInfo_v3", unsafe {
            driver().cuStreamGetCaptureInfo_v3(
                stream.as_raw(),
                &mut status,
                &mut id,
                &mut graph,
                &mut dependencies,
                ptr::null_mut(),
                &mut count,
            )
        });
        assert_eq!(status, ACTIVE);
        assert_ne!(id, 0, "a capture's id is not zero");
        assert!(!graph.is_null(), "the graph being built is reported");
        assert_eq!(count, 1, "the stream depends on its last captured node");
        // SAFETY: the driver reported an array of `count` nodes, valid during the capture.
        let node = unsafe { *dependencies };
        let mut kind = CUgraphNodeType(77);
        // SAFETY: a node of the capture's graph and a valid out-pointer.
        ok("cuGraphNodeGetType", unsafe {
            driver().cuGraphNodeGetType(node, &mut kind)
        });
        assert_eq!(kind, CUgraphNodeType::CU_GRAPH_NODE_TYPE_HOST);
        let ended = capture.end().expect("the capture ends in a graph");
        assert_eq!(
            ended.0, graph,
            "the reported graph is the one the capture ends in"
        );
        ids.push(id);
    }
    assert_ne!(ids[0], ids[1], "two captures have different ids");
}

#[test]
fn a_blocking_capture_makes_legacy_is_capturing_answer_implicit_and_stays_valid() {
    let _alone = alone();
    let context = current_context();
    for mode in [GLOBAL, RELAXED] {
        let stream = blocking(&context);
        let runs = Arc::new(AtomicUsize::new(0));
        let capture = Capture::begin(stream.as_raw(), mode);
        for legacy in [CU_STREAM_LEGACY, ptr::null_mut()] {
            assert_eq!(
                is_capturing(legacy).0,
                CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
                "{mode:?}: cuStreamIsCapturing({legacy:?})"
            );
        }
        assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, ACTIVE), "{mode:?}");
        ok(
            "cuLaunchHostFunc",
            launch_host(stream.as_raw(), counting(&runs)),
        );
        let graph = capture
            .end()
            .unwrap_or_else(|(result, _)| panic!("{mode:?}: the capture ended with {result}"));
        let exec = graph.instantiate();
        exec.launch(stream.as_raw());
        ok("cuStreamSynchronize", synchronize(stream.as_raw()));
        assert_eq!(count(&runs), 1, "{mode:?}: the captured node runs");
    }
}

#[test]
fn a_blocking_capture_leaves_the_per_thread_stream_not_capturing() {
    let _alone = alone();
    let context = current_context();
    let stream = blocking(&context);
    let capture = Capture::begin(stream.as_raw(), GLOBAL);
    assert_eq!(is_capturing(CU_STREAM_PER_THREAD), (SUCCESS, NONE));
    assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, ACTIVE));
    assert!(capture.end().is_ok(), "the capture stays valid");
}

#[test]
fn a_blocking_capture_refuses_a_legacy_launch_as_implicit_and_is_invalidated() {
    let _alone = alone();
    let context = current_context();
    let stream = blocking(&context);
    let runs = Arc::new(AtomicUsize::new(0));
    let capture = Capture::begin(stream.as_raw(), GLOBAL);
    assert_eq!(
        launch_host(CU_STREAM_LEGACY, counting(&runs)),
        CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
    );
    assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, INVALIDATED));
    let ended = capture.end();
    assert_eq!(
        ended.err(),
        Some((
            CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
            ptr::null_mut()
        ))
    );
    ok("cuStreamSynchronize", synchronize(CU_STREAM_LEGACY));
    assert_eq!(count(&runs), 0, "a refused launch enqueued nothing");
}

/// Synchronizing the legacy stream while `stream` captures in global mode answers `expected` and
/// invalidates the capture, which then ends without a graph.
fn assert_legacy_synchronize_invalidates(stream: &Stream, expected: CUresult) {
    let capture = Capture::begin(stream.as_raw(), GLOBAL);
    assert_eq!(synchronize(CU_STREAM_LEGACY), expected);
    assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, INVALIDATED));
    assert_eq!(
        capture.end().err().map(|(result, _)| result),
        Some(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
    );
    ok("cuStreamSynchronize", synchronize(CU_STREAM_LEGACY));
}

#[test]
fn a_blocking_capture_refuses_a_legacy_synchronize_as_implicit_and_is_invalidated() {
    let _alone = alone();
    let context = current_context();
    assert_legacy_synchronize_invalidates(
        &blocking(&context),
        CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
    );
}

#[test]
fn a_non_blocking_capture_leaves_the_legacy_stream_free_to_launch_and_run() {
    let _alone = alone();
    let context = current_context();
    let stream = non_blocking(&context);
    let (legacy_runs, node_runs) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let capture = Capture::begin(stream.as_raw(), GLOBAL);
    assert_eq!(
        is_capturing(CU_STREAM_LEGACY),
        (SUCCESS, NONE),
        "the legacy stream is not involved"
    );
    ok(
        "cuLaunchHostFunc",
        launch_host(CU_STREAM_LEGACY, counting(&legacy_runs)),
    );
    wait_until(
        "the legacy stream's host function to run during the capture",
        || count(&legacy_runs) == 1,
    );
    assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, ACTIVE));
    ok(
        "cuLaunchHostFunc",
        launch_host(stream.as_raw(), counting(&node_runs)),
    );
    let graph = capture.end().expect("the capture stays valid");
    ok("cuStreamSynchronize", synchronize(CU_STREAM_LEGACY));
    let exec = graph.instantiate();
    exec.launch(stream.as_raw());
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!((count(&legacy_runs), count(&node_runs)), (1, 1));
}

#[test]
fn a_non_blocking_global_capture_refuses_a_legacy_synchronize_as_unsupported_and_is_invalidated() {
    let _alone = alone();
    let context = current_context();
    assert_legacy_synchronize_invalidates(
        &non_blocking(&context),
        CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
    );
}

#[test]
fn an_invalidated_capture_reports_invalidated_refuses_launches_and_ends_without_a_graph() {
    let _alone = alone();
    let context = current_context();
    let stream = non_blocking(&context);
    let (refused, after) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let capture = Capture::begin(stream.as_raw(), GLOBAL);
    assert_ne!(
        synchronize(CU_STREAM_LEGACY),
        SUCCESS,
        "invalidates the capture"
    );

    assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, INVALIDATED));
    assert_eq!(
        launch_host(stream.as_raw(), counting(&refused)),
        CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    );
    assert_eq!(
        capture.end().err(),
        Some((
            CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
            ptr::null_mut()
        ))
    );
    assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, NONE));
    ok(
        "cuLaunchHostFunc",
        launch_host(stream.as_raw(), counting(&after)),
    );
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    ok("cuStreamSynchronize", synchronize(CU_STREAM_LEGACY));
    assert_eq!((count(&refused), count(&after)), (0, 1));
}

// ---- 4. Graphs ----------------------------------------------------------------------------------

/// A graph `first → middle → last`, its nodes created last-first so that creation order cannot
/// pass for dependency order: `middle` depends on `first` from its creation, `last` on `middle`
/// through `cuGraphAddDependencies_v2`.
fn chain(log: &Log) -> Graph {
    let graph = Graph::new();
    let last = graph.add_host_node(&[], log.marker("last"));
    let first = graph.add_host_node(&[], log.marker("first"));
    let middle = graph.add_host_node(&[first], log.marker("middle"));
    graph.add_dependency(middle, last);
    graph
}

#[test]
fn an_explicit_graph_runs_each_host_node_once_per_launch_after_its_dependencies() {
    const LAUNCHES: usize = 5;
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let log = Log::default();
    let graph = chain(&log);
    let exec = graph.instantiate();
    assert!(log.entries().is_empty(), "nothing runs before a launch");
    for _ in 0..LAUNCHES {
        exec.launch(stream.as_raw());
    }
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(log.entries(), ["first", "middle", "last"].repeat(LAUNCHES));
}

#[test]
fn a_cloned_graph_has_the_same_nodes_and_dependencies_and_outlives_its_original() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let log = Log::default();
    let original = chain(&log);
    let clone = original.clone_graph();
    drop(original);
    let exec = clone.instantiate();
    exec.launch(stream.as_raw());
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(log.entries(), ["first", "middle", "last"]);
}

#[test]
fn exec_host_node_set_params_changes_later_launches_of_that_executable_only() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let log = Log::default();
    let graph = Graph::new();
    let node = graph.add_host_node(&[], log.marker("original"));
    let (changed, untouched) = (graph.instantiate(), graph.instantiate());
    changed.launch(stream.as_raw());
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));

    let params = host_params(log.marker("updated"));
    // SAFETY: a live executable, a node of its graph, and parameters living for the process.
    ok("cuGraphExecHostNodeSetParams", unsafe {
        driver().cuGraphExecHostNodeSetParams(changed.0, node, &params)
    });
    changed.launch(stream.as_raw());
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    untouched.launch(stream.as_raw());
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    let fresh = graph.instantiate();
    fresh.launch(stream.as_raw());
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(
        log.entries(),
        ["original", "updated", "original", "original"],
        "before the update, the updated executable, another executable, a new one"
    );
}

#[test]
fn graph_host_node_set_params_changes_the_graph_but_not_an_existing_executable() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let log = Log::default();
    let graph = Graph::new();
    let node = graph.add_host_node(&[], log.marker("original"));
    let existing = graph.instantiate();

    let params = host_params(log.marker("updated"));
    // SAFETY: a node of a live graph, and parameters living for the process.
    ok("cuGraphHostNodeSetParams", unsafe {
        driver().cuGraphHostNodeSetParams(node, &params)
    });
    existing.launch(stream.as_raw());
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    let fresh = graph.instantiate();
    fresh.launch(stream.as_raw());
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(log.entries(), ["original", "updated"]);
}

// ---- 5. User objects ----------------------------------------------------------------------------

/// What a user object's destructor saw; also counts the runs of a host node next to it.
///
/// A test announces each release step with [`DestructorProbe::release`] just before making it,
/// and the destructor records the step it ran after: that it ran only after the last step does
/// not depend on how soon the driver's destructor thread gets to it.
#[derive(Debug)]
struct DestructorProbe {
    runs: AtomicUsize,
    thread: Mutex<Option<ThreadId>>,
    node_runs: AtomicUsize,
    node_thread: Mutex<Option<ThreadId>>,
    step: Mutex<&'static str>,
    seen: Mutex<Option<(&'static str, usize)>>,
}

impl DestructorProbe {
    fn new() -> &'static DestructorProbe {
        leak(DestructorProbe {
            runs: AtomicUsize::new(0),
            thread: Mutex::new(None),
            node_runs: AtomicUsize::new(0),
            node_thread: Mutex::new(None),
            step: Mutex::new("created"),
            seen: Mutex::new(None),
        })
    }

    /// A host function that counts its runs and remembers its thread.
    fn node(&'static self) -> impl Fn() + Send + Sync + 'static {
        move || {
            *lock(&self.node_thread) = Some(std::thread::current().id());
            self.node_runs.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Says that the test is about to make the release step `step`.
    fn release(&self, step: &'static str) {
        *lock(&self.step) = step;
    }

    fn runs(&self) -> usize {
        count(&self.runs)
    }

    /// The release step the destructor ran after, and how many node runs it saw.
    fn seen(&self) -> Option<(&'static str, usize)> {
        *lock(&self.seen)
    }

    fn thread(&self) -> ThreadId {
        lock(&self.thread).expect("the destructor recorded its thread")
    }
}

unsafe extern "C" fn record_destruction(data: *mut c_void) {
    // SAFETY: created with a pointer to a leaked `DestructorProbe`.
    let probe = unsafe { &*data.cast::<DestructorProbe>() };
    *lock(&probe.seen) = Some((*lock(&probe.step), count(&probe.node_runs)));
    *lock(&probe.thread) = Some(std::thread::current().id());
    probe.runs.fetch_add(1, Ordering::SeqCst);
}

/// A user object owning `probe`, with `references` references held by the caller.
fn user_object(probe: &'static DestructorProbe, references: u32) -> CUuserObject {
    let mut object = ptr::null_mut();
    let data = ptr::from_ref(probe).cast_mut().cast();
    // SAFETY: a valid out-pointer; the destructor only touches the leaked probe, on any thread.
    ok("cuUserObjectCreate", unsafe {
        driver().cuUserObjectCreate(
            &mut object,
            data,
            Some(record_destruction),
            references,
            CUuserObject_flags::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC.0,
        )
    });
    object
}

fn graph_retain(graph: &Graph, object: CUuserObject, flags: u32) {
    // SAFETY: a live graph and a live user object; moving takes one of the caller's references.
    ok("cuGraphRetainUserObject", unsafe {
        driver().cuGraphRetainUserObject(graph.0, object, 1, flags)
    });
}

fn release(object: CUuserObject, references: u32) {
    // SAFETY: a live user object; the caller holds the references it releases.
    ok("cuUserObjectRelease", unsafe {
        driver().cuUserObjectRelease(object, references)
    });
}

const MOVE: u32 = CUuserObjectRetain_flags::CU_GRAPH_USER_OBJECT_MOVE.0;

/// Before a test checks that a destructor has *not* run: a user object released now has been
/// destroyed when this returns. Where destructors run in turn on one driver thread (the software
/// driver's), one the driver had wrongly scheduled earlier has run too.
fn destructor_round_trip() {
    let sentinel = DestructorProbe::new();
    release(user_object(sentinel, 1), 1);
    wait_until("a released user object's destructor", || {
        sentinel.runs() == 1
    });
}

#[test]
fn a_moved_user_object_is_destroyed_only_after_its_graph_its_executable_and_its_last_launch() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let probe = DestructorProbe::new();
    let object = user_object(probe, 1);
    let graph = Graph::new();
    graph.add_host_node(&[], probe.node());
    graph_retain(&graph, object, MOVE);
    let exec = graph.instantiate();
    exec.launch(stream.as_raw());
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));

    probe.release("graph destroyed");
    drop(graph);
    exec.launch(stream.as_raw());
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    destructor_round_trip();
    assert_eq!(probe.runs(), 0, "destroyed while its executable exists");

    let gate = Gate::new(&context);
    gate.hold(&stream);
    exec.launch(stream.as_raw());
    probe.release("executable destroyed, launch held");
    let (exec, destroy_context) = (SendHandle(exec), context.clone());
    returns_while_held("cuGraphExecDestroy with its launch held", move || {
        destroy_context.bind_to_thread().expect("the context binds");
        drop(exec.into_inner());
    });
    destructor_round_trip();
    assert_eq!(probe.runs(), 0, "destroyed while a launch is in flight");
    assert_eq!(count(&probe.node_runs), 2, "the held launch ran early");
    gate.open();
    wait_until("the user object's destructor", || probe.runs() == 1);
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));

    assert_eq!(
        probe.seen(),
        Some(("executable destroyed, launch held", 3)),
        "the destructor runs after the last of graph, executable and launch has gone"
    );
    assert_ne!(probe.thread(), std::thread::current().id());
    assert_ne!(
        Some(probe.thread()),
        *lock(&probe.node_thread),
        "the destructor ran on the host-function thread"
    );
    assert_eq!(probe.runs(), 1, "the destructor runs once");
}

#[test]
fn a_moved_user_object_is_destroyed_when_its_graph_goes_last() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let probe = DestructorProbe::new();
    let object = user_object(probe, 1);
    let graph = Graph::new();
    graph.add_host_node(&[], probe.node());
    graph_retain(&graph, object, MOVE);
    let exec = graph.instantiate();
    exec.launch(stream.as_raw());
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));

    probe.release("executable destroyed");
    drop(exec);
    destructor_round_trip();
    assert_eq!(probe.runs(), 0, "destroyed while its graph exists");
    probe.release("graph destroyed");
    drop(graph);
    // Measured on the real driver: the launched executable's references go a little later on a
    // driver thread, so the destructor runs there or here, whichever drops the last reference.
    wait_until("the user object's destructor", || probe.runs() == 1);
    assert_eq!(probe.seen(), Some(("graph destroyed", 1)));
}

#[test]
fn user_object_references_are_counted_by_retain_and_release() {
    let _shared = shared();
    let _context = current_context();
    let probe = DestructorProbe::new();
    let object = user_object(probe, 1);
    // SAFETY: a live user object.
    ok("cuUserObjectRetain", unsafe {
        driver().cuUserObjectRetain(object, 2)
    });
    probe.release("2 of 3 released");
    release(object, 2);
    destructor_round_trip();
    assert_eq!(probe.runs(), 0, "destroyed with a reference left");
    probe.release("last released");
    release(object, 1);
    wait_until("the user object's destructor", || probe.runs() == 1);
    assert_eq!(probe.seen().map(|(step, _)| step), Some("last released"));
}

#[test]
fn dropping_the_last_reference_outside_a_launch_runs_the_destructor_inside_that_call() {
    // Measured on the real driver (H200, 580.159.04): the destructor runs on the thread that
    // drops the last reference, inside the call (`cuUserObjectRelease`, `cuGraphDestroy`, or
    // `cuGraphExecDestroy` of an executable never launched); only references a launch held go
    // later, on a driver thread (see the test above with a launch in flight).
    let _shared = shared();
    let _context = current_context();
    let here = std::thread::current().id();

    let released = DestructorProbe::new();
    release(user_object(released, 1), 1);
    assert_eq!(released.runs(), 1, "cuUserObjectRelease returned first");
    assert_eq!(released.thread(), here);

    let elsewhere = DestructorProbe::new();
    let object = SendHandle(user_object(elsewhere, 1));
    let releasing_thread = std::thread::spawn(move || {
        release(object.get(), 1);
        (elsewhere.runs(), std::thread::current().id())
    })
    .join()
    .expect("the releasing thread");
    assert_eq!(
        releasing_thread,
        (1, elsewhere.thread()),
        "on the releasing thread"
    );

    let in_graph = DestructorProbe::new();
    let graph = Graph::new();
    graph_retain(&graph, user_object(in_graph, 1), MOVE);
    drop(graph);
    assert_eq!(in_graph.runs(), 1, "cuGraphDestroy returned first");
    assert_eq!(in_graph.thread(), here);

    let in_exec = DestructorProbe::new();
    let graph = Graph::new();
    graph.add_host_node(&[], in_exec.node());
    graph_retain(&graph, user_object(in_exec, 1), MOVE);
    let exec = graph.instantiate();
    drop(graph);
    assert_eq!(in_exec.runs(), 0, "destroyed while its executable exists");
    drop(exec);
    assert_eq!(in_exec.runs(), 1, "cuGraphExecDestroy returned first");
    assert_eq!(in_exec.thread(), here);
}

#[test]
fn a_graph_retains_a_reference_of_its_own_unless_the_callers_is_moved() {
    let _shared = shared();
    let _context = current_context();
    let probe = DestructorProbe::new();
    let object = user_object(probe, 1);
    let graph = Graph::new();
    graph_retain(&graph, object, 0);
    probe.release("the caller's released");
    release(object, 1);
    destructor_round_trip();
    assert_eq!(
        probe.runs(),
        0,
        "destroyed while the graph holds a reference"
    );
    probe.release("graph destroyed");
    drop(graph);
    wait_until("the user object's destructor", || probe.runs() == 1);
    assert_eq!(probe.seen().map(|(step, _)| step), Some("graph destroyed"));
}

// ---- 6. Fault injection (software driver only) --------------------------------------------------

/// Disarms an injection when the test ends, also when it fails.
struct Disarm {
    controls: &'static Controls,
    entry: &'static std::ffi::CStr,
    any_thread: bool,
}

impl Drop for Disarm {
    fn drop(&mut self) {
        if self.any_thread {
            self.controls
                .fail_next_calls_any_thread(self.entry, 0, SUCCESS);
        } else {
            self.controls.fail_next_calls(self.entry, 0, SUCCESS);
        }
    }
}

#[test]
fn fail_next_calls_fails_the_next_calls_of_this_thread_only_then_calls_succeed() {
    let Some(controls) = controls_or_skip(
        "fail_next_calls_fails_the_next_calls_of_this_thread_only_then_calls_succeed",
    ) else {
        return;
    };
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let runs = Arc::new(AtomicUsize::new(0));
    let code = CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    controls.fail_next_calls(c"cuLaunchHostFunc", 2, code);
    let _disarm = Disarm {
        controls,
        entry: c"cuLaunchHostFunc",
        any_thread: false,
    };

    let handle = SendHandle(stream.as_raw());
    let other_runs = Arc::clone(&runs);
    let other = std::thread::spawn(move || launch_host(handle.get(), counting(&other_runs)))
        .join()
        .expect("the other thread");
    assert_eq!(other, SUCCESS, "another thread's call failed");
    assert_eq!(launch_host(stream.as_raw(), counting(&runs)), code);
    assert_eq!(launch_host(stream.as_raw(), counting(&runs)), code);
    assert_eq!(
        launch_host(stream.as_raw(), counting(&runs)),
        SUCCESS,
        "only 2 calls fail"
    );
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(count(&runs), 2, "a failed call enqueues nothing");
}

/// `cuswFailNextCalls`, as `cudasw.h` declares it.
type FailNextCalls = unsafe extern "C" fn(*const c_char, c_uint, CUresult) -> CUresult;

#[test]
fn the_controls_are_reachable_through_proc_address_and_refuse_unknown_entry_names() {
    let test = "the_controls_are_reachable_through_proc_address_and_refuse_unknown_entry_names";
    if controls_or_skip(test).is_none() {
        return;
    }
    let _shared = shared();
    let mut address = ptr::null_mut();
    let mut status = CUdriverProcAddressQueryResult(77);
    // SAFETY: a NUL-terminated name and valid out-pointers.
    ok("cuGetProcAddress_v2", unsafe {
        driver().cuGetProcAddress_v2(
            c"cuswFailNextCalls".as_ptr(),
            &mut address,
            10000,
            0,
            &mut status,
        )
    });
    assert!(!address.is_null());
    // SAFETY: the software driver's `cuswFailNextCalls` has this C signature (cudasw.h).
    let fail_next_calls = unsafe { std::mem::transmute::<*mut c_void, FailNextCalls>(address) };
    let code = CUresult::CUDA_ERROR_OUT_OF_MEMORY;
    // SAFETY: NUL-terminated names; a count of 0 arms nothing.
    unsafe {
        assert_eq!(
            fail_next_calls(c"cuNoSuchEntryPoint".as_ptr(), 1, code),
            CUresult::CUDA_ERROR_NOT_FOUND,
            "a misspelt entry name is refused"
        );
        assert_eq!(
            fail_next_calls(c"cuLaunchHostFunc".as_ptr(), 0, code),
            SUCCESS
        );
    }
}

#[test]
fn fail_next_calls_with_a_count_of_zero_disarms() {
    let Some(controls) = controls_or_skip("fail_next_calls_with_a_count_of_zero_disarms") else {
        return;
    };
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let runs = Arc::new(AtomicUsize::new(0));
    controls.fail_next_calls(c"cuLaunchHostFunc", 3, CUresult::CUDA_ERROR_UNKNOWN);
    let _disarm = Disarm {
        controls,
        entry: c"cuLaunchHostFunc",
        any_thread: false,
    };
    controls.fail_next_calls(c"cuLaunchHostFunc", 0, CUresult::CUDA_ERROR_UNKNOWN);
    ok(
        "cuLaunchHostFunc",
        launch_host(stream.as_raw(), counting(&runs)),
    );
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(count(&runs), 1);
}

#[test]
fn fail_next_calls_any_thread_fails_the_next_call_from_another_thread() {
    let test = "fail_next_calls_any_thread_fails_the_next_call_from_another_thread";
    let Some(controls) = controls_or_skip(test) else {
        return;
    };
    // Alone in a process: it fails calls of every thread.
    if !suite::in_child_process() {
        return suite::run_in_child(module_path!(), test, &[]);
    }
    let context = current_context();
    let stream = non_blocking(&context);
    let runs = Arc::new(AtomicUsize::new(0));
    let code = CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    controls.fail_next_calls_any_thread(c"cuLaunchHostFunc", 1, code);
    let _disarm = Disarm {
        controls,
        entry: c"cuLaunchHostFunc",
        any_thread: true,
    };

    let handle = SendHandle(stream.as_raw());
    let other_runs = Arc::clone(&runs);
    let other = std::thread::spawn(move || launch_host(handle.get(), counting(&other_runs)))
        .join()
        .expect("the other thread");
    assert_eq!(other, code, "the other thread's call was not failed");
    ok(
        "cuLaunchHostFunc",
        launch_host(stream.as_raw(), counting(&runs)),
    );
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(count(&runs), 1);
}

#[test]
fn set_sticky_error_skips_pending_host_functions_calls_back_once_with_it_and_answers_it() {
    let test =
        "set_sticky_error_skips_pending_host_functions_calls_back_once_with_it_and_answers_it";
    let Some(controls) = controls_or_skip(test) else {
        return;
    };
    if !suite::in_child_process() {
        return suite::run_in_child(module_path!(), test, &[]);
    }
    let code = CUresult::CUDA_ERROR_HARDWARE_STACK_ERROR;
    let context = current_context();
    let stream = non_blocking(&context);
    let gate = Gate::new(&context);
    let (log, callback) = (Log::default(), leak(CallbackProbe::default()));
    gate.hold(&stream);
    ok(
        "cuLaunchHostFunc",
        launch_host(stream.as_raw(), log.marker("pending")),
    );
    ok(
        "cuStreamAddCallback",
        add_callback(stream.as_raw(), callback),
    );

    controls.set_sticky_error(&context, code);
    gate.open();
    wait_until("the pending callback", || {
        !lock(&callback.statuses).is_empty()
    });
    assert_eq!(*lock(&callback.statuses), [code]);
    assert_eq!(synchronize(stream.as_raw()), code);
    assert!(log.entries().is_empty(), "a pending host function ran");
    assert_eq!(launch_host(stream.as_raw(), log.marker("after")), code);
    let mut raw = ptr::null_mut();
    // SAFETY: a valid out-pointer and device 0.
    let retained = unsafe { driver().cuDevicePrimaryCtxRetain(&mut raw, context.device()) };
    assert_eq!(retained, code, "the error stays with the process");
}

#[test]
fn launch_fault_fails_the_context_with_its_code_when_the_stream_reaches_it() {
    let test = "launch_fault_fails_the_context_with_its_code_when_the_stream_reaches_it";
    let Some(controls) = controls_or_skip(test) else {
        return;
    };
    if !suite::in_child_process() {
        return suite::run_in_child(module_path!(), test, &[]);
    }
    let code = CUresult::CUDA_ERROR_LAUNCH_FAILED;
    let context = current_context();
    let stream = non_blocking(&context);
    let gate = Gate::new(&context);
    let log = Log::default();
    gate.hold(&stream);
    controls.launch_fault(&stream, code);
    ok(
        "cuLaunchHostFunc",
        launch_host(stream.as_raw(), log.marker("after")),
    );
    assert_eq!(
        query(stream.as_raw()),
        CUresult::CUDA_ERROR_NOT_READY,
        "the context failed before the stream reached the fault"
    );
    gate.open();
    assert_eq!(synchronize(stream.as_raw()), code);
    assert!(log.entries().is_empty(), "work after the fault ran");
    assert_eq!(launch_host(stream.as_raw(), log.marker("later")), code);
}

#[test]
fn launch_sleep_holds_its_stream_for_at_least_the_time_given() {
    let Some(controls) =
        controls_or_skip("launch_sleep_holds_its_stream_for_at_least_the_time_given")
    else {
        return;
    };
    const SLEEP: Duration = Duration::from_millis(500);
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let reached: Arc<Mutex<Option<Duration>>> = Arc::default();
    let start = Instant::now();
    controls.launch_sleep(&stream, u32::try_from(SLEEP.as_micros()).expect("fits"));
    let host_reached = Arc::clone(&reached);
    ok(
        "cuLaunchHostFunc",
        launch_host(stream.as_raw(), move || {
            *lock(&host_reached) = Some(start.elapsed());
        }),
    );
    assert_eq!(query(stream.as_raw()), CUresult::CUDA_ERROR_NOT_READY);
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    let reached = lock(&reached).expect("the host function ran");
    assert!(
        reached >= SLEEP,
        "work after the sleep started after {reached:?}"
    );
}

#[test]
fn set_driver_version_hides_newer_entry_points_from_proc_address_and_from_a_new_driver_table() {
    let test =
        "set_driver_version_hides_newer_entry_points_from_proc_address_and_from_a_new_driver_table";
    let Some(controls) = controls_or_skip(test) else {
        return;
    };
    if !suite::in_child_process() {
        return suite::run_in_child(module_path!(), test, &[]);
    }
    let context = current_context();
    let stream = non_blocking(&context);
    controls.set_driver_version(13000);

    let mut version = 0;
    // SAFETY: a valid out-pointer.
    ok("cuDriverGetVersion", unsafe {
        driver().cuDriverGetVersion(&mut version)
    });
    assert_eq!(version, 13000);
    let lookup = |abi: i32| {
        let mut address = ptr::null_mut();
        let mut status = CUdriverProcAddressQueryResult(77);
        let flags = u64::from(CUdriverProcAddress_flags::CU_GET_PROC_ADDRESS_DEFAULT.0);
        // SAFETY: a NUL-terminated name and valid out-pointers.
        let result = unsafe {
            driver().cuGetProcAddress_v2(
                c"cuLaunchHostFunc".as_ptr(),
                &mut address,
                abi,
                flags,
                &mut status,
            )
        };
        (result, address.is_null())
    };
    assert_eq!(
        lookup(13010),
        (CUresult::CUDA_ERROR_INVALID_VALUE, true),
        "an ABI newer than the driver is an invalid value"
    );
    assert_eq!(
        lookup(13000),
        (SUCCESS, false),
        "older ABIs are still found"
    );

    // SAFETY: the software driver implements the driver API's signatures.
    let fresh =
        unsafe { Driver::open(suite::software_driver_path("libcudasw.so")) }.expect("driver opens");
    assert_eq!(fresh.version(), 13000);
    assert_eq!(
        fresh.availability("cuLaunchHostFunc_v2"),
        Some(Availability::NeedsNewerDriver { required: 13010 })
    );
    assert_eq!(
        fresh.availability("cuLaunchHostFunc"),
        Some(Availability::Available)
    );
    let data = leak_closure(|| {});
    // SAFETY: a live stream and a host function valid for the process (the table has no
    // cuLaunchHostFunc_v2, so the driver is not called at all).
    let result = unsafe {
        fresh.cuLaunchHostFunc_v2(
            stream.as_raw(),
            Some(run_closure),
            data,
            CUhostTaskSyncMode::CU_HOST_TASK_BLOCKING.0,
        )
    };
    match fresh.check("cuLaunchHostFunc_v2", result) {
        Err(Error::EntryPointUnavailable {
            entry_point,
            availability,
            ..
        }) => {
            assert_eq!(entry_point, "cuLaunchHostFunc_v2");
            assert_eq!(
                availability,
                Availability::NeedsNewerDriver { required: 13010 }
            );
        }
        other => panic!("expected an unavailable entry point, got {other:?}"),
    }
    controls.set_driver_version(0);
}

#[test]
fn user_object_stats_count_live_user_objects_and_destructors_run() {
    let test = "user_object_stats_count_live_user_objects_and_destructors_run";
    let Some(controls) = controls_or_skip(test) else {
        return;
    };
    // Alone in a process: the counts are process-wide.
    if !suite::in_child_process() {
        return suite::run_in_child(module_path!(), test, &[]);
    }
    let _context = current_context();
    let (destroyed, alive) = controls.user_object_stats();
    let probe = DestructorProbe::new();
    let object = user_object(probe, 1);
    assert_eq!(controls.user_object_stats(), (destroyed, alive + 1));
    release(object, 1);
    wait_until("the destructor to be counted", || {
        controls.user_object_stats() == (destroyed + 1, alive)
    });
    assert_eq!(probe.runs(), 1);
}

/// A software-driver control resolved by name through `cuGetProcAddress_v2`, as a caller without
/// the harness would find it.
fn control_address(name: &CStr) -> *mut c_void {
    let mut address = ptr::null_mut();
    let mut status = CUdriverProcAddressQueryResult(77);
    // SAFETY: a NUL-terminated name and valid out-pointers.
    ok("cuGetProcAddress_v2", unsafe {
        driver().cuGetProcAddress_v2(name.as_ptr(), &mut address, 10000, 0, &mut status)
    });
    assert!(!address.is_null(), "{name:?} resolves");
    address
}

#[test]
fn live_objects_count_each_kind_from_its_creation_until_its_destruction() {
    let test = "live_objects_count_each_kind_from_its_creation_until_its_destruction";
    let Some(controls) = controls_or_skip(test) else {
        return;
    };
    // Alone in a process: the counts are process-wide.
    if !suite::in_child_process() {
        return suite::run_in_child(module_path!(), test, &[]);
    }
    let context = current_context();
    let held = non_blocking(&context);
    let gate = Gate::new(&context); // takes its pinned pool before the counts are read
    let before = controls.live_objects();

    let mut stream = ptr::null_mut();
    // SAFETY: a valid out-pointer; the context is current.
    ok("cuStreamCreate", unsafe {
        driver().cuStreamCreate(&mut stream, CUstream_flags::CU_STREAM_NON_BLOCKING.0)
    });
    let event = Event::new(&context, EventFlags::DisableTiming).expect("event");
    let log = Log::default();
    let graph = Graph::new();
    graph.add_host_node(&[], log.marker("node"));
    let exec = graph.instantiate();
    let object = user_object(DestructorProbe::new(), 1);
    let (mut host, mut device) = (ptr::null_mut(), 0);
    // SAFETY: valid out-pointers; the context is current.
    unsafe {
        ok("cuMemHostAlloc", driver().cuMemHostAlloc(&mut host, 64, 0));
        ok("cuMemAlloc_v2", driver().cuMemAlloc_v2(&mut device, 64));
    }
    gate.hold(&held);
    ok(
        "cuLaunchHostFunc",
        launch_host(held.as_raw(), log.marker("host function")),
    );
    let callback = leak(CallbackProbe::default());
    ok("cuStreamAddCallback", add_callback(held.as_raw(), callback));
    exec.launch(held.as_raw());

    let one_more = LiveObjects {
        streams: before.streams + 1,
        events: before.events + 1,
        graphs: before.graphs + 1,
        graph_execs: before.graph_execs + 1,
        user_objects: before.user_objects + 1,
        host_allocations: before.host_allocations + 1,
        device_allocations: before.device_allocations + 1,
        // the host function, the callback and the graph's host node
        pending_host_functions: before.pending_host_functions + 3,
    };
    assert_eq!(controls.live_objects(), one_more);
    gate.open();
    ok("cuStreamSynchronize", synchronize(held.as_raw()));
    assert_eq!(log.entries(), ["host function", "node"]);
    assert_eq!(
        controls.live_objects(),
        LiveObjects {
            pending_host_functions: before.pending_host_functions,
            ..one_more
        },
        "run host functions are no longer pending"
    );

    // SAFETY: each object is live and destroyed once.
    unsafe {
        ok("cuStreamDestroy_v2", driver().cuStreamDestroy_v2(stream));
        ok("cuMemFreeHost", driver().cuMemFreeHost(host));
        ok("cuMemFree_v2", driver().cuMemFree_v2(device));
    }
    drop((event, exec, graph));
    release(object, 1); // the last reference: the destructor runs inside this call
    assert_eq!(controls.live_objects(), before);
}

#[test]
fn live_objects_fills_only_the_whole_counts_a_shorter_struct_has_room_for() {
    let test = "live_objects_fills_only_the_whole_counts_a_shorter_struct_has_room_for";
    if controls_or_skip(test).is_none() {
        return;
    }
    let _shared = shared();
    // SAFETY: the software driver's `cuswLiveObjects` has this C signature (cudasw.h).
    let live_objects = unsafe {
        std::mem::transmute::<*mut c_void, LiveObjectsFn>(control_address(c"cuswLiveObjects"))
    };
    const UNTOUCHED: u64 = u64::MAX;
    // Room for the size, two counts and half of the third.
    let short = size_of::<usize>() + 2 * size_of::<u64>() + 4;
    let mut counts = LiveCounts {
        size: short,
        counts: [UNTOUCHED; 8],
    };
    // SAFETY: the struct is larger than the size it declares.
    ok("cuswLiveObjects", unsafe { live_objects(&mut counts) });
    assert_eq!(counts.size, size_of::<usize>() + 2 * size_of::<u64>());
    assert!(counts.counts[..2].iter().all(|&count| count != UNTOUCHED));
    assert_eq!(counts.counts[2..], [UNTOUCHED; 6], "counts past the size");

    counts.size = 0;
    // SAFETY: as above; a size without room for `size` itself is refused.
    let refused = unsafe { live_objects(&mut counts) };
    assert_eq!(refused, CUresult::CUDA_ERROR_INVALID_VALUE);
    // SAFETY: a null pointer is refused, not written.
    let refused = unsafe { live_objects(ptr::null_mut()) };
    assert_eq!(refused, CUresult::CUDA_ERROR_INVALID_VALUE);
}

#[test]
fn armed_failures_count_down_as_injected_failures_fire_on_this_thread_then_any_thread() {
    let test = "armed_failures_count_down_as_injected_failures_fire_on_this_thread_then_any_thread";
    let Some(controls) = controls_or_skip(test) else {
        return;
    };
    // Alone in a process: an injection armed for any thread fails other tests' calls.
    if !suite::in_child_process() {
        return suite::run_in_child(module_path!(), test, &[]);
    }
    let context = current_context();
    let stream = non_blocking(&context);
    let entry = c"cuStreamQuery";
    let code = CUresult::CUDA_ERROR_LAUNCH_TIMEOUT;
    let other_thread = |work: fn(CUstream) -> (CUresult, u32)| {
        let handle = SendHandle(stream.as_raw());
        std::thread::spawn(move || work(handle.get()))
            .join()
            .expect("the other thread")
    };
    fn armed_here(_: CUstream) -> (CUresult, u32) {
        let controls = suite::software::expect_controls();
        (SUCCESS, controls.armed_failures(c"cuStreamQuery"))
    }
    fn query_there(stream: CUstream) -> (CUresult, u32) {
        let controls = suite::software::expect_controls();
        (query(stream), controls.armed_failures(c"cuStreamQuery"))
    }

    assert_eq!(controls.armed_failures(entry), 0);
    controls.fail_next_calls(entry, 2, code);
    controls.fail_next_calls_any_thread(entry, 3, code);
    let _disarm = [false, true].map(|any_thread| Disarm {
        controls,
        entry,
        any_thread,
    });
    assert_eq!(
        controls.armed_failures(entry),
        5,
        "this thread's and any thread's"
    );
    assert_eq!(other_thread(armed_here), (SUCCESS, 3), "only any thread's");

    assert_eq!(query(stream.as_raw()), code);
    assert_eq!(
        controls.armed_failures(entry),
        4,
        "this thread's fire first"
    );
    assert_eq!(query(stream.as_raw()), code);
    assert_eq!(controls.armed_failures(entry), 3);
    assert_eq!(other_thread(query_there), (code, 2));
    assert_eq!(controls.armed_failures(entry), 2);
    assert_eq!(query(stream.as_raw()), code);
    assert_eq!(query(stream.as_raw()), code);
    assert_eq!(controls.armed_failures(entry), 0);
    assert_eq!(query(stream.as_raw()), SUCCESS, "all fired");
    assert_eq!(
        controls.armed_failures(c"cuStreamQuery_ptsz"),
        0,
        "counted under the name they were armed with"
    );
}

#[test]
fn call_count_counts_every_call_by_base_name_and_by_exported_name() {
    let test = "call_count_counts_every_call_by_base_name_and_by_exported_name";
    let Some(controls) = controls_or_skip(test) else {
        return;
    };
    // Alone in a process: the counts are process-wide.
    if !suite::in_child_process() {
        return suite::run_in_child(module_path!(), test, &[]);
    }
    let context = current_context();
    let stream = non_blocking(&context);
    let names = [
        c"cuStreamGetCtx",
        c"cuStreamGetCtx_v2",
        c"cuStreamGetCtx_v2_ptsz",
    ];
    let counts = || names.map(|name| controls.call_count(name));
    assert_eq!(counts(), [0, 0, 0], "never called in this process");
    assert_eq!(controls.call_count(c"cuEventElapsedTime"), 0);

    let mut per_thread = ptr::null_mut();
    let mut status = CUdriverProcAddressQueryResult(77);
    let flags =
        u64::from(CUdriverProcAddress_flags::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.0);
    // SAFETY: a NUL-terminated name and valid out-pointers.
    ok("cuGetProcAddress_v2", unsafe {
        driver().cuGetProcAddress_v2(
            c"cuStreamGetCtx".as_ptr(),
            &mut per_thread,
            12050,
            flags,
            &mut status,
        )
    });
    // SAFETY: the per-thread form of cuStreamGetCtx_v2 has the same C signature.
    let per_thread = unsafe { std::mem::transmute::<*mut c_void, GetCtx>(per_thread) };
    let (mut raw, mut green) = (ptr::null_mut(), ptr::null_mut());
    let mut get_ctx = |per_thread: Option<GetCtx>| match per_thread {
        // SAFETY: a live stream and valid out-pointers.
        Some(get) => unsafe { get(stream.as_raw(), &mut raw, &mut green) },
        // SAFETY: as above.
        None => unsafe { driver().cuStreamGetCtx_v2(stream.as_raw(), &mut raw, &mut green) },
    };
    for _ in 0..3 {
        ok("cuStreamGetCtx_v2", get_ctx(None));
    }
    ok("cuStreamGetCtx_v2_ptsz", get_ctx(Some(per_thread)));
    assert_eq!(counts(), [4, 3, 1]);

    let code = CUresult::CUDA_ERROR_UNKNOWN;
    controls.fail_next_calls(c"cuStreamGetCtx", 1, code);
    assert_eq!(get_ctx(None), code);
    assert_eq!(
        counts(),
        [5, 4, 1],
        "a call an injected failure answered counts too"
    );
}

/// `cuStreamGetCtx_v2`, as `cuda.h` declares it.
type GetCtx = unsafe extern "C" fn(CUstream, *mut CUcontext, *mut CUgreenCtx) -> CUresult;
/// `cuswArmedFailures`, as `cudasw.h` declares it.
type ArmedFailures = unsafe extern "C" fn(*const c_char, *mut c_uint) -> CUresult;
/// `cuswCallCount`, as `cudasw.h` declares it.
type CallCount = unsafe extern "C" fn(*const c_char, *mut u64) -> CUresult;

#[test]
fn armed_failures_and_call_count_refuse_unknown_entry_names_and_null_pointers() {
    let test = "armed_failures_and_call_count_refuse_unknown_entry_names_and_null_pointers";
    if controls_or_skip(test).is_none() {
        return;
    }
    let _shared = shared();
    // SAFETY: the software driver's controls have these C signatures (cudasw.h).
    let (armed_failures, call_count) = unsafe {
        (
            std::mem::transmute::<*mut c_void, ArmedFailures>(control_address(
                c"cuswArmedFailures",
            )),
            std::mem::transmute::<*mut c_void, CallCount>(control_address(c"cuswCallCount")),
        )
    };
    let (mut remaining, mut calls) = (7, 7);
    let (not_found, invalid) = (
        CUresult::CUDA_ERROR_NOT_FOUND,
        CUresult::CUDA_ERROR_INVALID_VALUE,
    );
    // SAFETY: NUL-terminated names or null pointers, which the controls refuse.
    unsafe {
        assert_eq!(
            armed_failures(c"cuNoSuchEntryPoint".as_ptr(), &mut remaining),
            not_found
        );
        assert_eq!(
            call_count(c"cuNoSuchEntryPoint".as_ptr(), &mut calls),
            not_found
        );
        assert_eq!(armed_failures(ptr::null(), &mut remaining), invalid);
        assert_eq!(call_count(ptr::null(), &mut calls), invalid);
        assert_eq!(armed_failures(c"cuInit".as_ptr(), ptr::null_mut()), invalid);
        assert_eq!(call_count(c"cuInit".as_ptr(), ptr::null_mut()), invalid);
    }
    assert_eq!((remaining, calls), (7, 7), "nothing written on refusal");
}

#[test]
fn a_delayed_entry_point_returns_only_after_its_delay_and_others_are_not_held() {
    let test = "a_delayed_entry_point_returns_only_after_its_delay_and_others_are_not_held";
    let Some(controls) = controls_or_skip(test) else {
        return;
    };
    // Alone in a process: a delay armed for any thread would hold other tests' calls too.
    if !suite::in_child_process() {
        return suite::run_in_child(module_path!(), test, &[]);
    }
    let context = current_context();
    let stream = non_blocking(&context);
    const DELAY: Duration = Duration::from_millis(200);
    controls.delay_next_calls(c"cuStreamQuery", 1, DELAY);
    let start = Instant::now();
    assert_eq!(synchronize(stream.as_raw()), CUresult::CUDA_SUCCESS);
    assert!(start.elapsed() < DELAY, "another entry point was held");
    assert_eq!(query(stream.as_raw()), CUresult::CUDA_SUCCESS);
    assert!(start.elapsed() >= DELAY, "the delayed call returned early");
    let again = Instant::now();
    assert_eq!(query(stream.as_raw()), CUresult::CUDA_SUCCESS);
    assert!(
        again.elapsed() < DELAY,
        "the delay applies to the next call only"
    );
}

#[test]
fn calls_naming_a_destroyed_handle_are_counted() {
    let test = "calls_naming_a_destroyed_handle_are_counted";
    let Some(controls) = controls_or_skip(test) else {
        return;
    };
    // Alone in a process: the count is process-wide.
    if !suite::in_child_process() {
        return suite::run_in_child(module_path!(), test, &[]);
    }
    let _context = current_context();
    let mut stream = ptr::null_mut();
    // SAFETY: a valid out-pointer; the context is current.
    ok("cuStreamCreate", unsafe {
        driver().cuStreamCreate(&mut stream, CUstream_flags::CU_STREAM_NON_BLOCKING.0)
    });
    assert_eq!(query(stream), CUresult::CUDA_SUCCESS);
    let before = controls.stale_handle_uses();
    // SAFETY: a live stream, destroyed once; the stale handle is used on purpose.
    ok("cuStreamDestroy_v2", unsafe {
        driver().cuStreamDestroy_v2(stream)
    });
    assert_eq!(
        controls.stale_handle_uses(),
        before,
        "a live handle is not stale"
    );
    assert_eq!(query(stream), CUresult::CUDA_ERROR_INVALID_HANDLE);
    assert_eq!(synchronize(stream), CUresult::CUDA_ERROR_INVALID_HANDLE);
    assert_eq!(controls.stale_handle_uses(), before + 2);
    // A made-up handle the driver never issued is not a destroyed one.
    assert_eq!(query(0x40 as CUstream), CUresult::CUDA_ERROR_INVALID_HANDLE);
    assert_eq!(controls.stale_handle_uses(), before + 2);
}

#[test]
fn loading_a_module_without_a_current_context_answers_invalid_context() {
    let _shared = shared();
    let _context = suite::context();
    // A thread of its own, with no context current.
    let result = std::thread::spawn(|| {
        let ptx = c".version 7.0\n.target sm_50\n.address_size 64\n";
        let mut module = ptr::null_mut();
        // SAFETY: a valid out-pointer and a NUL-terminated image.
        unsafe { driver().cuModuleLoadData(&mut module, ptx.as_ptr().cast()) }
    })
    .join()
    .unwrap();
    assert_eq!(result, CUresult::CUDA_ERROR_INVALID_CONTEXT);
}

// ---- 7. Destroyed streams and sticky errors -----------------------------------------------------

#[test]
fn a_destroyed_stream_handle_answers_invalid_handle() {
    if !test_driver().is_software() {
        return suite::skip(
            "a_destroyed_stream_handle_answers_invalid_handle",
            "the real driver segfaults on a destroyed stream handle (FACTS.md); only the \
             software driver's answer is specified",
        );
    }
    let _shared = shared();
    let _context = current_context();
    let mut stream = ptr::null_mut();
    // SAFETY: a valid out-pointer; the context is current.
    ok("cuStreamCreate", unsafe {
        driver().cuStreamCreate(&mut stream, CUstream_flags::CU_STREAM_NON_BLOCKING.0)
    });
    // SAFETY: a live stream, destroyed once; later calls use the stale handle on purpose, which
    // the software driver detects.
    unsafe {
        ok("cuStreamDestroy_v2", driver().cuStreamDestroy_v2(stream));
        let invalid = CUresult::CUDA_ERROR_INVALID_HANDLE;
        assert_eq!(launch_host(stream, || {}), invalid);
        assert_eq!(query(stream), invalid);
        assert_eq!(synchronize(stream), invalid);
        assert_eq!(driver().cuStreamDestroy_v2(stream), invalid);
    }
}

#[test]
fn destroying_a_stream_with_pending_work_returns_at_once_and_the_work_still_runs() {
    let _shared = shared();
    let context = current_context();
    let mut stream = ptr::null_mut();
    // SAFETY: a valid out-pointer; the context is current.
    ok("cuStreamCreate", unsafe {
        driver().cuStreamCreate(&mut stream, CUstream_flags::CU_STREAM_NON_BLOCKING.0)
    });
    let gate = Gate::new(&context);
    {
        // SAFETY: the stream is a stream of the context, destroyed only after this borrow ends.
        let borrowed = unsafe { Stream::borrow_raw(&context, stream) };
        gate.hold(&borrowed);
    }
    let runs = Arc::new(AtomicUsize::new(0));
    ok("cuLaunchHostFunc", launch_host(stream, counting(&runs)));

    let (handle, destroy_context) = (SendHandle(stream), context.clone());
    let answer = returns_while_held("cuStreamDestroy_v2 with its stream held", move || {
        destroy_context.bind_to_thread().expect("the context binds");
        // SAFETY: a live stream, destroyed once.
        unsafe { driver().cuStreamDestroy_v2(handle.get()) }
    });
    assert_eq!(answer, SUCCESS);
    assert_eq!(count(&runs), 0, "the held host function ran early");
    gate.open();
    wait_until("the destroyed stream's pending host function", || {
        count(&runs) == 1
    });
}

#[test]
fn after_a_fault_only_earlier_host_functions_run_and_a_later_callback_gets_the_error_once() {
    let test =
        "after_a_fault_only_earlier_host_functions_run_and_a_later_callback_gets_the_error_once";
    // Alone in a process: the sticky error stays with it.
    if !suite::in_child_process() {
        return suite::run_in_child(module_path!(), test, &[]);
    }
    let context = current_context();
    let stream = non_blocking(&context);
    let kernels = suite::kernels::for_faults(driver());
    let gate = Gate::new(&context);
    let (log, callback) = (Log::default(), leak(CallbackProbe::default()));

    gate.hold(&stream);
    ok(
        "cuLaunchHostFunc",
        launch_host(stream.as_raw(), log.marker("before")),
    );
    suite::kernels::launch_fault(&stream, kernels.as_ref());
    ok(
        "cuLaunchHostFunc",
        launch_host(stream.as_raw(), log.marker("after")),
    );
    ok(
        "cuStreamAddCallback",
        add_callback(stream.as_raw(), callback),
    );
    gate.open();

    let illegal_address = CUresult::CUDA_ERROR_ILLEGAL_ADDRESS;
    assert_eq!(synchronize(stream.as_raw()), illegal_address);
    wait_until("the callback after the fault", || {
        !lock(&callback.statuses).is_empty()
    });
    assert_eq!(
        *lock(&callback.statuses),
        [illegal_address],
        "called once, with the error"
    );
    assert_eq!(log.entries(), ["before"]);
    assert_eq!(
        launch_host(stream.as_raw(), log.marker("later")),
        illegal_address
    );
    std::mem::forget(kernels); // unloading answers the sticky error too
}

// ---- 8. Copies the enqueuing thread waits for ---------------------------------------------------

/// A word of device memory, freed on drop. Tests that use one run alone: allocating can be refused
/// by another test's global-mode capture, and freeing waits for the whole context.
struct DeviceWord(CUdeviceptr);

impl DeviceWord {
    fn new() -> DeviceWord {
        let mut address = 0;
        // SAFETY: a valid out-pointer; the context is current.
        ok("cuMemAlloc_v2", unsafe {
            driver().cuMemAlloc_v2(&mut address, 4)
        });
        DeviceWord(address)
    }
}

impl Drop for DeviceWord {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAlloc_v2 and freed once, here.
        let _ = unsafe { driver().cuMemFree_v2(self.0) };
    }
}

/// How long after an enqueue began the gate that holds its stream opens.
const RELEASE_AFTER: Duration = Duration::from_millis(200);

/// Calls `enqueue` on another thread (with `context` bound) while its stream is held at `gate`,
/// and opens the gate from this thread [`RELEASE_AFTER`] after the call began. Answers what the
/// call returned, and whether it returned only after the gate opened. Bounded: a call that never
/// returns fails the test.
fn enqueue_then_open<T: Send + 'static>(
    context: &Context,
    gate: &Gate,
    enqueue: impl FnOnce() -> T + Send + 'static,
) -> (T, bool) {
    let began = Arc::new(AtomicBool::new(false));
    let answer: Arc<Mutex<Option<(T, Instant)>>> = Arc::default();
    let (thread_began, slot) = (Arc::clone(&began), Arc::clone(&answer));
    let context = context.clone();
    std::thread::spawn(move || {
        context.bind_to_thread().expect("the context binds");
        thread_began.store(true, Ordering::SeqCst);
        let value = enqueue();
        *lock(&slot) = Some((value, Instant::now()));
    });
    wait_until("the enqueuing thread", || began.load(Ordering::SeqCst));
    std::thread::sleep(RELEASE_AFTER);
    let opened = Instant::now();
    gate.open();
    wait_until("the enqueue, once the gate opened", || {
        lock(&answer).is_some()
    });
    let (value, returned) = lock(&answer).take().expect("the answer");
    (value, returned >= opened)
}

#[test]
fn a_copy_between_mapped_host_buffers_returns_only_once_the_stream_reached_it() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let gate = Gate::new(&context);
    let words = Arc::new(MappedWords::new(&context, 2));
    words.set(0, 7);
    gate.hold(&stream);

    let (copy_words, handle) = (Arc::clone(&words), SendHandle(stream.as_raw()));
    let ((result, copied), waited) = enqueue_then_open(&context, &gate, move || {
        let (to, from) = (copy_words.device_address(1), copy_words.device_address(0));
        // SAFETY: both addresses are mapped host memory of the stream's context.
        let result = unsafe { driver().cuMemcpyDtoDAsync_v2(to, from, 4, handle.get()) };
        (result, copy_words.get(1))
    });
    ok("cuMemcpyDtoDAsync_v2", result);
    assert!(waited, "returned before the stream reached the copy");
    assert_eq!(copied, 7, "returned before the copy was done");
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
}

#[test]
fn a_copy_from_device_memory_into_pageable_host_memory_returns_only_once_the_stream_reached_it() {
    let _alone = alone();
    let context = current_context();
    let device = DeviceWord::new(); // freed after the gate has opened
    let stream = non_blocking(&context);
    let gate = Gate::new(&context);
    let words = MappedWords::new(&context, 1);
    words.set(0, 7);
    // SAFETY: mapped host memory to device memory, both of the stream's context.
    ok("cuMemcpyDtoDAsync_v2", unsafe {
        driver().cuMemcpyDtoDAsync_v2(device.0, words.device_address(0), 4, stream.as_raw())
    });
    gate.hold(&stream);

    // Plain heap memory, leaked: a driver that copied later would still write to live memory.
    let pageable: &'static AtomicU32 = leak(AtomicU32::new(0));
    let (from, handle) = (device.0, SendHandle(stream.as_raw()));
    let ((result, copied), waited) = enqueue_then_open(&context, &gate, move || {
        // SAFETY: four writable bytes that live for the process; device memory of the stream's
        // context.
        let result = unsafe {
            driver().cuMemcpyDtoHAsync_v2(pageable.as_ptr().cast(), from, 4, handle.get())
        };
        (result, pageable.load(Ordering::SeqCst))
    });
    ok("cuMemcpyDtoHAsync_v2", result);
    assert!(waited, "returned before the stream reached the copy");
    assert_eq!(copied, 7, "returned before the copy was done");
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
}

#[test]
fn a_copy_from_mapped_host_memory_to_device_memory_returns_at_once_behind_a_held_stream() {
    let _alone = alone();
    let context = current_context();
    let device = DeviceWord::new(); // freed after the gate has opened
    let stream = non_blocking(&context);
    let gate = Gate::new(&context);
    let words = MappedWords::new(&context, 2);
    words.set(0, 7);
    gate.hold(&stream);

    let (to, from) = (device.0, words.device_address(0));
    let (handle, copy_context) = (SendHandle(stream.as_raw()), context.clone());
    let result = returns_while_held("a copy to device memory with its stream held", move || {
        copy_context.bind_to_thread().expect("the context binds");
        // SAFETY: mapped host memory to device memory, both of the stream's context.
        unsafe { driver().cuMemcpyDtoDAsync_v2(to, from, 4, handle.get()) }
    });
    ok("cuMemcpyDtoDAsync_v2", result);
    assert_eq!(
        query(stream.as_raw()),
        CUresult::CUDA_ERROR_NOT_READY,
        "the stream went on before the gate opened"
    );
    gate.open();
    // Copied back behind it: the copy ran, in order, once the stream went on.
    // SAFETY: device memory to mapped host memory, both of the stream's context.
    ok("cuMemcpyDtoDAsync_v2", unsafe {
        driver().cuMemcpyDtoDAsync_v2(words.device_address(1), to, 4, stream.as_raw())
    });
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(words.get(1), 7);
}

// ---- 9. Two devices -----------------------------------------------------------------------------

/// What `attribute` of `device` reads.
fn attribute(device: &cuda_host::Device, attribute: CUdevice_attribute) -> i32 {
    let mut value = 0;
    // SAFETY: a valid out-pointer and a device of the driver.
    ok("cuDeviceGetAttribute", unsafe {
        driver().cuDeviceGetAttribute(&mut value, attribute, device.as_raw())
    });
    value
}

/// Free device memory as `cuMemGetInfo` reports it for `context`'s device.
fn free_memory(context: &Context) -> usize {
    context.bind_to_thread().expect("the context binds");
    let (mut free, mut total) = (0, 0);
    // SAFETY: valid out-pointers; the context is current.
    ok("cuMemGetInfo_v2", unsafe {
        driver().cuMemGetInfo_v2(&mut free, &mut total)
    });
    free
}

#[test]
fn two_devices_have_their_own_primary_contexts_streams_host_functions_events_and_memory() {
    let test =
        "two_devices_have_their_own_primary_contexts_streams_host_functions_events_and_memory";
    let devices = cuda_host::Device::count(&test_driver().driver).expect("device count");
    if !test_driver().is_software() && devices < 2 {
        return suite::skip(test, "the real driver has fewer than two devices here");
    }
    // The software driver reads its device count when it is loaded: a fresh process.
    if !suite::in_child_process() {
        return suite::run_in_child(module_path!(), test, &[("CUSW_DEVICE_COUNT", "2")]);
    }
    assert!(devices >= 2, "{devices} devices");
    let device = [0, 1]
        .map(|ordinal| cuda_host::Device::get(&test_driver().driver, ordinal).expect("device"));
    let context = [&device[0], &device[1]].map(|device| device.primary_context().expect("ctx"));
    assert_ne!(context[0].as_raw(), context[1].as_raw());
    let mut uuid = [CUuuid::default(); 2];
    for (ordinal, context) in context.iter().enumerate() {
        assert_eq!(context.device(), device[ordinal].as_raw());
        context.bind_to_thread().expect("the context binds");
        let mut current = -1;
        // SAFETY: a valid out-pointer; the context is current.
        ok("cuCtxGetDevice", unsafe {
            driver().cuCtxGetDevice(&mut current)
        });
        assert_eq!(current, device[ordinal].as_raw());
        // SAFETY: a valid out-pointer and a device of the driver.
        ok("cuDeviceGetUuid_v2", unsafe {
            driver().cuDeviceGetUuid_v2(&mut uuid[ordinal], device[ordinal].as_raw())
        });
    }
    assert_ne!(uuid[0].bytes, uuid[1].bytes, "each device has its own UUID");
    let pci = |device: &cuda_host::Device| {
        [
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID,
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID,
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID,
        ]
        .map(|which| attribute(device, which))
    };
    assert_ne!(
        pci(&device[0]),
        pci(&device[1]),
        "each device has its own PCI address"
    );

    // Each device's stream belongs to its context; holding one holds nothing of the other.
    let stream = [&context[0], &context[1]].map(non_blocking);
    for (stream, context) in stream.iter().zip(&context) {
        let mut owner = ptr::null_mut();
        // SAFETY: a live stream and a valid out-pointer.
        ok("cuStreamGetCtx", unsafe {
            driver().cuStreamGetCtx(stream.as_raw(), &mut owner)
        });
        assert_eq!(owner, context.as_raw());
    }
    let event = [&context[0], &context[1]]
        .map(|context| Event::new(context, EventFlags::DisableTiming).expect("event"));
    let gate = Gate::new(&context[0]);
    let log = Log::default();
    gate.hold(&stream[0]);
    // A held blocking stream of device 0 would hold device 0's legacy stream, not device 1's.
    let held_blocking = blocking(&context[0]);
    gate.hold(&held_blocking);
    context[1].bind_to_thread().expect("the context binds");
    let legacy_ran = Arc::new(AtomicUsize::new(0));
    ok(
        "cuLaunchHostFunc",
        launch_host(CU_STREAM_LEGACY, counting(&legacy_ran)),
    );
    wait_until("device 1's legacy stream", || count(&legacy_ran) == 1);
    ok(
        "cuLaunchHostFunc",
        launch_host(stream[0].as_raw(), log.marker("device 0")),
    );
    record(&event[0], stream[0].as_raw());
    ok(
        "cuLaunchHostFunc",
        launch_host(stream[1].as_raw(), log.marker("device 1")),
    );
    record(&event[1], stream[1].as_raw());
    ok("cuEventSynchronize", event_synchronize(&event[1]));
    assert_eq!(log.entries(), ["device 1"], "device 1 waited for device 0");
    assert_eq!(
        event_query(event[0].as_raw()),
        CUresult::CUDA_ERROR_NOT_READY
    );
    assert_eq!(
        query(stream[0].as_raw()),
        CUresult::CUDA_ERROR_NOT_READY,
        "device 0's stream went on while held"
    );

    // An event of one device orders a stream of the other.
    stream[1]
        .wait_event(&event[0])
        .expect("waits for device 0's event");
    ok(
        "cuLaunchHostFunc",
        launch_host(stream[1].as_raw(), log.marker("device 1 after device 0")),
    );
    let_free_work_run(&non_blocking(&context[1]));
    assert_eq!(
        log.entries(),
        ["device 1"],
        "device 1 ran past device 0's event"
    );
    gate.open();
    ok("cuStreamSynchronize", synchronize(stream[1].as_raw()));
    assert_eq!(
        log.entries(),
        ["device 1", "device 0", "device 1 after device 0"]
    );

    // Memory: an allocation on device 0 takes nothing from device 1.
    const GIB: usize = 1 << 30;
    let free_before = [&context[0], &context[1]].map(free_memory);
    context[0].bind_to_thread().expect("the context binds");
    let mut allocation = 0;
    // SAFETY: a valid out-pointer; device 0's context is current.
    ok("cuMemAlloc_v2", unsafe {
        driver().cuMemAlloc_v2(&mut allocation, GIB)
    });
    let free_after = [&context[0], &context[1]].map(free_memory);
    context[0].bind_to_thread().expect("the context binds");
    // SAFETY: allocated above, freed once.
    ok("cuMemFree_v2", unsafe { driver().cuMemFree_v2(allocation) });
    assert!(
        free_after[0] + GIB <= free_before[0],
        "device 0 lost the allocation"
    );
    assert!(
        free_after[1] + GIB / 2 > free_before[1],
        "device 1 lost {} bytes to device 0's allocation",
        free_before[1] - free_after[1]
    );
}

fn event_synchronize(event: &Event) -> CUresult {
    // SAFETY: a live event.
    unsafe { driver().cuEventSynchronize(event.as_raw()) }
}

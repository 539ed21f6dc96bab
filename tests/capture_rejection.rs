//! cuda-host refuses run-once host functions on streams under capture, and leaves the capture
//! intact. A global-mode capture forbids other threads' unsafe calls, so these tests run one at a
//! time ([`suite::capture_lock`]) in their own test binary.

use cuda_host::{
    Context, Error, Stream, StreamFlags, UserData, graph::CaptureMode, graph::CaptureState,
    graph::GraphBuilder, host_launch, host_launch_raw,
};
use cuda_host_sys::{CUresult, CUstreamCaptureMode, CUstreamCaptureStatus};
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;
use suite::capture::{Capture, Graph, is_capturing};
use suite::software::Controls;
use suite::{Tally, capture_lock, context};

fn new_stream(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking).expect("stream")
}

unsafe extern "C" fn add_one(counter: *mut c_void) {
    // SAFETY: launched with a pointer to a live `AtomicUsize`.
    unsafe { &*counter.cast::<AtomicUsize>() }.fetch_add(1, Ordering::SeqCst);
}

/// Instantiates `graph`, launches it `times` times on `stream`, waits, and destroys both.
fn run_graph(graph: Graph, stream: &Stream, times: usize) {
    graph.instantiate().run(stream, times);
}

#[test]
fn a_capturing_stream_is_refused_and_its_capture_still_yields_a_graph_that_runs() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let nodes_run = Arc::new(AtomicUsize::new(0));
    let capture = Capture::begin(
        stream.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
    );

    let probe = tally.probe();
    let error = host_launch(&stream, move || probe.ran()).unwrap_err();
    assert_eq!(
        error,
        Error::StreamCapturing {
            status: CaptureState::Active
        }
    );
    assert!(error.to_string().contains("GraphBuilder::callback"));
    assert_eq!(
        (tally.runs(), tally.drops()),
        (0, 1),
        "refused closures are dropped at once"
    );
    assert_eq!(
        is_capturing(stream.as_raw()),
        (
            CUresult::CUDA_SUCCESS,
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
        )
    );

    // A host node the graph owns the data of (`nodes_run` outlives the graph).
    let driver = context.driver();
    let counter = Arc::as_ptr(&nodes_run).cast_mut().cast::<c_void>();
    // SAFETY: the counter outlives the graph run below.
    let result = unsafe { driver.cuLaunchHostFunc(stream.as_raw(), Some(add_one), counter) };
    driver.check("cuLaunchHostFunc", result).unwrap();
    let graph = capture.end().expect("the capture is still valid");
    run_graph(graph, &stream, 2);
    assert_eq!(nodes_run.load(Ordering::SeqCst), 2);
    assert_eq!(tally.runs(), 0);
}

#[test]
fn the_raw_forms_are_refused_on_a_capturing_stream_and_leave_the_capture_intact() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let counter = AtomicUsize::new(0);
    let capture = Capture::begin(
        stream.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
    );
    let pointer = (&raw const counter).cast_mut().cast::<c_void>();
    let bytes = [7u8; 16];
    for data in [UserData::PassThrough(pointer), UserData::Copied(&bytes)] {
        // SAFETY: `add_one` is never run: the launch is refused (and were it not, the counter
        // outlives the graph, which is never launched).
        let refused = unsafe { host_launch_raw(&stream, add_one, data) };
        assert!(
            matches!(refused, Err(Error::StreamCapturing { .. })),
            "{refused:?}"
        );
    }
    let graph = capture.end().expect("the capture is still valid");
    run_graph(graph, &stream, 1);
    assert_eq!(counter.load(Ordering::SeqCst), 0, "a refused launch ran");
}

#[test]
fn the_legacy_stream_is_refused_while_a_blocking_stream_captures() {
    let _alone = capture_lock();
    let context = context();
    let blocking = Stream::new(&context, StreamFlags::Blocking).expect("stream");
    let legacy = Stream::legacy(&context);
    let nodes_run = Arc::new(AtomicUsize::new(0));
    let capture = Capture::begin(
        blocking.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
    );

    let tally = Tally::new();
    let probe = tally.probe();
    let error = host_launch(&legacy, move || probe.ran()).unwrap_err();
    assert_eq!(
        error,
        Error::StreamCapturing {
            status: CaptureState::Implicit
        }
    );
    assert_eq!((tally.runs(), tally.drops()), (0, 1));
    assert_eq!(
        is_capturing(blocking.as_raw()),
        (
            CUresult::CUDA_SUCCESS,
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
        ),
        "the check must not disturb the capture"
    );

    let driver = context.driver();
    let counter = Arc::as_ptr(&nodes_run).cast_mut().cast::<c_void>();
    // SAFETY: the counter outlives the graph run below.
    let result = unsafe { driver.cuLaunchHostFunc(blocking.as_raw(), Some(add_one), counter) };
    driver.check("cuLaunchHostFunc", result).unwrap();
    let graph = capture.end().expect("the capture is still valid");
    run_graph(graph, &blocking, 3);
    assert_eq!(nodes_run.load(Ordering::SeqCst), 3);
}

#[test]
fn an_invalidated_capture_is_refused_until_it_ends() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let capture = Capture::begin(
        stream.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
    );
    // Synchronizing a capturing stream is illegal and invalidates the capture.
    let driver = context.driver();
    // SAFETY: a valid stream.
    let result = unsafe { driver.cuStreamSynchronize(stream.as_raw()) };
    assert_ne!(result, CUresult::CUDA_SUCCESS);
    assert_eq!(
        is_capturing(stream.as_raw()),
        (
            CUresult::CUDA_SUCCESS,
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED
        )
    );
    let error = host_launch(&stream, || {}).unwrap_err();
    assert_eq!(
        error,
        Error::StreamCapturing {
            status: CaptureState::Invalidated
        }
    );
    assert_eq!(
        capture.end().err().map(|(result, _)| result),
        Some(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
    );
    // Once ended, the stream takes host functions again.
    let tally = Tally::new();
    let probe = tally.probe();
    host_launch(&stream, move || probe.ran()).expect("launch after the capture ended");
    stream.synchronize().expect("synchronize");
    assert_eq!((tally.runs(), tally.drops()), (1, 1));
}

/// Device memory freed in its `Drop`, which keeps what `cuMemFree_v2` answered: a captured
/// value whose drop would invalidate a global-mode capture if it ran during one.
struct DeviceBuffer {
    pointer: cuda_host_sys::CUdeviceptr,
    frees: Arc<Mutex<Vec<CUresult>>>,
}

impl DeviceBuffer {
    fn new(context: &Context, frees: &Arc<Mutex<Vec<CUresult>>>) -> DeviceBuffer {
        context.bind_to_thread().expect("the context binds");
        let mut pointer = 0;
        // SAFETY: a valid out-pointer; the context is current.
        suite::ok("cuMemAlloc_v2", unsafe {
            context.driver().cuMemAlloc_v2(&mut pointer, 256)
        });
        DeviceBuffer {
            pointer,
            frees: Arc::clone(frees),
        }
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by `new`, freed once.
        let result = unsafe { suite::test_driver().driver.cuMemFree_v2(self.pointer) };
        self.frees.lock().unwrap().push(result);
    }
}

/// Launches a host function holding a [`DeviceBuffer`] on `stream` and waits until the stream
/// is done with it: its record then waits in this thread's inbox for a drain.
fn finished_record_holding_device_memory(
    context: &Context,
    stream: &Stream,
) -> Arc<Mutex<Vec<CUresult>>> {
    let frees = Arc::default();
    let buffer = DeviceBuffer::new(context, &frees);
    let tally = Tally::new();
    let probe = tally.probe();
    host_launch(stream, move || {
        let _ = &buffer;
        probe.ran();
    })
    .expect("launch");
    suite::wait_until_done(stream);
    assert_eq!(tally.runs(), 1);
    frees
}

#[test]
fn no_drain_runs_on_a_thread_that_is_capturing() {
    // Alone in a process, so that the finished record waits for this thread's drain.
    suite::alone_in_child!(no_drain_runs_on_a_thread_that_is_capturing);
    let _alone = capture_lock();
    let context = context();
    let (stream, captured) = (new_stream(&context), new_stream(&context));
    let frees = finished_record_holding_device_memory(&context, &stream);
    let builder = GraphBuilder::begin(&captured, CaptureMode::Global).expect("capture begins");
    builder
        .callback(|| {})
        .expect("the capture takes a callback");
    assert!(
        frees.lock().unwrap().is_empty(),
        "a value was dropped on a thread that is capturing"
    );
    let graph = builder.end().expect("the capture was not invalidated");
    drop(graph);
    cuda_host::reclaim();
    assert_eq!(*frees.lock().unwrap(), [CUresult::CUDA_SUCCESS]);
}

#[test]
fn no_drain_runs_while_another_threads_global_capture_is_open() {
    suite::alone_in_child!(no_drain_runs_while_another_threads_global_capture_is_open);
    let _alone = capture_lock();
    let context = context();
    let (stream, captured) = (new_stream(&context), new_stream(&context));
    let frees = finished_record_holding_device_memory(&context, &stream);
    let began = std::sync::Barrier::new(2);
    let drained = std::sync::Barrier::new(2);
    std::thread::scope(|scope| {
        let capturing = scope.spawn(|| {
            let builder =
                GraphBuilder::begin(&captured, CaptureMode::Global).expect("capture begins");
            began.wait();
            drained.wait();
            builder.end().map(drop)
        });
        began.wait();
        // Any cuda-host call drains; a launch on another stream is allowed during the capture.
        let launched = host_launch(&stream, || {});
        cuda_host::reclaim();
        let dropped_during_capture = frees.lock().unwrap().clone();
        drained.wait();
        let ended = capturing.join().unwrap();
        launched.expect("launch");
        assert_eq!(
            dropped_during_capture,
            [],
            "a value was dropped while a global-mode capture is open"
        );
        ended.expect("the other thread's capture was not invalidated");
    });
    stream.synchronize().expect("synchronize");
    assert_eq!(*frees.lock().unwrap(), [CUresult::CUDA_SUCCESS]);
}

/// The software driver's controls, for holding a launch inside the driver; `None` (and a skip
/// note for `test`) on the real driver.
fn controls_to_hold_a_launch(test: &str) -> Option<&'static Controls> {
    let controls = suite::software::controls();
    if controls.is_none() {
        suite::skip(
            test,
            "holding a launch inside the driver is a software-driver control",
        );
    }
    controls
}

/// Makes `launch` on another thread, whose `cuLaunchHostFunc` (past its capture check) the
/// driver holds for `hold`, and runs `meanwhile` on this thread 50 ms into that hold. Answers
/// what `launch` and `meanwhile` answered.
fn hold_a_launch_in_the_driver<L: Send, T>(
    controls: &Controls,
    hold: Duration,
    launch: impl FnOnce() -> L + Send,
    meanwhile: impl FnOnce() -> T,
) -> (L, T) {
    controls.delay_next_calls(c"cuLaunchHostFunc", 1, hold);
    std::thread::scope(|scope| {
        let launcher = scope.spawn(launch);
        std::thread::sleep(Duration::from_millis(50));
        let during = meanwhile();
        (launcher.join().unwrap(), during)
    })
}

/// [`hold_a_launch_in_the_driver`] for 300 ms of a counted closure on `stream`; answers the
/// launch's result and thread too.
fn launch_held_in_the_driver<T>(
    controls: &Controls,
    stream: &Stream,
    tally: &Arc<Tally>,
    meanwhile: impl FnOnce() -> T,
) -> ((cuda_host::Result<()>, ThreadId), T) {
    let launch = || {
        let probe = tally.probe();
        let launched = host_launch(stream, move || probe.ran());
        (launched, std::thread::current().id())
    };
    hold_a_launch_in_the_driver(controls, Duration::from_millis(300), launch, meanwhile)
}

#[test]
fn a_capture_begun_while_a_launch_is_in_flight_never_captures_the_run_once_record() {
    let Some(controls) = controls_to_hold_a_launch(
        "a_capture_begun_while_a_launch_is_in_flight_never_captures_the_run_once_record",
    ) else {
        return;
    };
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    // The capture begins while the launch, past its capture check, is held inside the driver.
    let ((launched, _), builder) = launch_held_in_the_driver(controls, &stream, &tally, || {
        GraphBuilder::begin(&stream, CaptureMode::Relaxed).expect("capture begins")
    });
    let graph = builder.end().expect("capture ends");
    let nodes = graph.host_nodes().expect("nodes").len();
    stream.synchronize().expect("synchronize");
    cuda_host::reclaim();
    match launched {
        Ok(()) => {
            assert_eq!(nodes, 0, "the run-once record became a node of the graph");
            assert_eq!((tally.runs(), tally.drops()), (1, 1));
        }
        Err(error) => {
            assert!(matches!(error, Error::StreamCapturing { .. }), "{error}");
            assert_eq!((tally.runs(), tally.drops()), (0, 1));
        }
    }
}

#[test]
fn a_launch_captured_by_a_capture_other_code_began_is_refused_and_its_closure_dropped() {
    let Some(controls) = controls_to_hold_a_launch(
        "a_launch_captured_by_a_capture_other_code_began_is_refused_and_its_closure_dropped",
    ) else {
        return;
    };
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    // Other code captures the stream with the driver's own call: cuda-host cannot hold it.
    let ((launched, launcher), capture) =
        launch_held_in_the_driver(controls, &stream, &tally, || {
            Capture::begin(
                stream.as_raw(),
                CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            )
        });
    let graph = capture.end().expect("the capture ends");
    assert_eq!(
        launched,
        Err(Error::StreamCapturing {
            status: CaptureState::Active
        }),
        "a launch that became a graph node was reported as enqueued"
    );
    assert_eq!(
        tally.drop_threads(),
        [launcher],
        "dropped at once, on the launching thread"
    );
    // The node it left in the other code's graph does nothing, however often the graph runs.
    run_graph(graph, &stream, 3);
    assert_eq!(tally.runs(), 0);
}

/// A pass-through launch that a capture other code began at the driver's launch call took is a
/// node of that graph, which calls the function on each of its launches, and never at once:
/// cuda-host has no record to abandon, but reports it captured, as a run-once launch.
#[test]
fn a_pass_through_launch_other_codes_capture_took_is_reported_captured() {
    let test = "a_pass_through_launch_other_codes_capture_took_is_reported_captured";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "a capture begun at a given call is a control of the software driver",
        );
    };
    // Alone in a process: the capture begins at the next launch call of any thread.
    suite::alone_in_child!(a_pass_through_launch_other_codes_capture_took_is_reported_captured);
    let context = context();
    let stream = new_stream(&context);
    let counter = AtomicUsize::new(0);
    let pointer = (&raw const counter).cast_mut().cast::<c_void>();
    controls.begin_capture_at_next_call(
        c"cuLaunchHostFunc",
        &stream,
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
    );
    // SAFETY: `add_one` gets a pointer to the counter, which outlives the graph's runs below.
    let launched = unsafe { host_launch_raw(&stream, add_one, UserData::PassThrough(pointer)) };
    let mut captured = std::ptr::null_mut();
    // SAFETY: a live stream and a valid out-pointer.
    let ended = unsafe {
        context
            .driver()
            .cuStreamEndCapture(stream.as_raw(), &mut captured)
    };
    assert_eq!(ended, CUresult::CUDA_SUCCESS, "the capture was invalidated");
    assert_eq!(
        launched,
        Err(Error::StreamCapturing {
            status: CaptureState::Active
        }),
        "a launch that became a graph node was reported as enqueued"
    );
    stream.synchronize().expect("synchronize");
    assert_eq!(counter.load(Ordering::SeqCst), 0, "ran outside the graph");
    run_graph(Graph(captured), &stream, 2);
    assert_eq!(
        counter.load(Ordering::SeqCst),
        2,
        "the node calls the function on each launch of the graph"
    );
}

#[test]
fn a_failed_end_leaves_the_stream_usable() {
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            "a_failed_end_leaves_the_stream_usable",
            "failing cuStreamEndCapture is a software-driver control",
        );
    };
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let builder = GraphBuilder::begin(&stream, CaptureMode::Global).expect("capture begins");
    controls.fail_next_calls(c"cuStreamEndCapture", 1, CUresult::CUDA_ERROR_UNKNOWN);
    let error = builder.end().unwrap_err();
    assert_eq!(error.driver_result(), Some(CUresult::CUDA_ERROR_UNKNOWN));
    assert_eq!(
        is_capturing(stream.as_raw()),
        (
            CUresult::CUDA_SUCCESS,
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
        ),
        "the stream was left capturing"
    );
    let tally = Tally::new();
    let probe = tally.probe();
    host_launch(&stream, move || probe.ran()).expect("the stream takes host functions again");
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), 1);
}

#[test]
fn a_capture_begins_without_waiting_for_a_launch_the_driver_holds() {
    // A launch the driver holds (an enqueue blocked behind a stream wait that perhaps only the
    // capturing thread would release) must not hold up a capture of its stream: the capture
    // would wait for it forever.
    let Some(controls) =
        controls_to_hold_a_launch("a_capture_begins_without_waiting_for_a_launch_the_driver_holds")
    else {
        return;
    };
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let launch = || {
        let probe = tally.probe();
        host_launch(&stream, move || probe.ran())
    };
    let (launched, (builder, began_after)) =
        hold_a_launch_in_the_driver(controls, Duration::from_secs(3), launch, || {
            let began = std::time::Instant::now();
            let builder =
                GraphBuilder::begin(&stream, CaptureMode::Global).expect("capture begins");
            (builder, began.elapsed())
        });
    assert!(
        began_after < Duration::from_secs(1),
        "the capture waited {began_after:?} for a launch the driver held"
    );
    // The capture took the held launch: refused, its node does nothing, the capture intact.
    assert!(
        matches!(launched, Err(Error::StreamCapturing { .. })),
        "{launched:?}"
    );
    let graph = builder.end().expect("the capture ends in a graph");
    let exec = graph.instantiate().expect("the graph instantiates");
    exec.launch(&stream).expect("the graph launches");
    stream.synchronize().expect("synchronize");
    cuda_host::reclaim();
    assert_eq!((tally.runs(), tally.drops()), (0, 1));
}

#[test]
fn a_capture_waits_for_a_pass_through_launch_the_driver_holds_so_its_graph_never_calls_it() {
    // A pass-through launch has no record to abandon: a capture that took it would call the
    // caller's function with its pointer on every launch of the graph.
    let Some(controls) = controls_to_hold_a_launch(
        "a_capture_waits_for_a_pass_through_launch_the_driver_holds_so_its_graph_never_calls_it",
    ) else {
        return;
    };
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let counter = AtomicUsize::new(0);
    let launch = || {
        let pointer = (&raw const counter).cast_mut().cast::<c_void>();
        // SAFETY: `counter` outlives the stream's work and the graph's launches.
        unsafe { host_launch_raw(&stream, add_one, UserData::PassThrough(pointer)) }
    };
    let (launched, builder) =
        hold_a_launch_in_the_driver(controls, Duration::from_millis(300), launch, || {
            GraphBuilder::begin(&stream, CaptureMode::Global).expect("capture begins")
        });
    launched.expect("the pass-through launch went through before the capture");
    let graph = builder.end().expect("the capture ends in a graph");
    assert_eq!(
        graph.host_nodes().expect("nodes").len(),
        0,
        "the capture took the pass-through launch"
    );
    let exec = graph.instantiate().expect("the graph instantiates");
    for _ in 0..2 {
        exec.launch(&stream).expect("the graph launches");
    }
    stream.synchronize().expect("synchronize");
    assert_eq!(
        counter.load(Ordering::SeqCst),
        1,
        "the function ran once, outside the graph"
    );
}

#[test]
fn a_held_launch_the_capture_took_is_refused_though_a_node_followed_it_before_the_look() {
    // The look after a launch refuses it only where its node is among the capture's last nodes
    // (capture_check.rs `captured_by_other_code`). The capture's own thread may add a node after
    // the taken launch and before the look: the launch then returns Ok, and its run-once record
    // is a node of the graph, run when the graph runs (docs/GUIDE.md: "never captured").
    let Some(controls) = controls_to_hold_a_launch(
        "a_held_launch_the_capture_took_is_refused_though_a_node_followed_it_before_the_look",
    ) else {
        return;
    };
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    // Static: it outlives every run of the graph.
    static NODES_RUN: AtomicUsize = AtomicUsize::new(0);
    let nodes_run = &NODES_RUN;
    let counter = (&raw const NODES_RUN).cast_mut().cast::<c_void>();
    let driver = context.driver();
    let launches_before = controls.call_count(c"cuLaunchHostFunc");
    let launch = || {
        let probe = tally.probe();
        host_launch(&stream, move || probe.ran())
    };
    let (launched, builder) =
        hold_a_launch_in_the_driver(controls, Duration::from_millis(300), launch, || {
            let builder =
                GraphBuilder::begin(&stream, CaptureMode::Relaxed).expect("capture begins");
            // The launch's look is the next to ask for the capture's last nodes: held 1 s.
            controls.delay_next_calls(c"cuStreamGetCaptureInfo_v3", 1, Duration::from_secs(1));
            // Counted once its delay is over: the held launch goes on into the capture now.
            suite::wait_until("the held launch to go on", || {
                controls.call_count(c"cuLaunchHostFunc") > launches_before
            });
            std::thread::sleep(Duration::from_millis(200));
            // SAFETY: the counter is static: it outlives every run of the graph.
            let result =
                unsafe { driver.cuLaunchHostFunc(stream.as_raw(), Some(add_one), counter) };
            driver.check("cuLaunchHostFunc", result).unwrap();
            builder
        });
    let graph = builder.end().expect("capture ends");
    let exec = graph.instantiate().expect("the graph instantiates");
    for _ in 0..2 {
        exec.launch(&stream).expect("the graph launches");
    }
    stream.synchronize().expect("synchronize");
    cuda_host::reclaim();
    assert_eq!(nodes_run.load(Ordering::SeqCst), 2, "the node after it ran");
    assert_eq!(
        (launched.is_err(), tally.runs()),
        (true, 0),
        "the launch returned {launched:?} and its run-once record ran {} times as a node of the \
         graph",
        tally.runs()
    );
}

#[test]
fn a_legacy_launch_the_driver_holds_past_a_blocking_capture_begin_leaves_the_capture_intact() {
    // GraphBuilder::begin waits for launches of the legacy stream too, since a blocking stream's
    // capture draws the legacy stream in, however long: a legacy-stream launch the driver held
    // past the beginning would reach the capture, and the driver would refuse it and invalidate
    // the capture (docs/GUIDE.md: refused, "the capture is left intact").
    let Some(controls) = controls_to_hold_a_launch(
        "a_legacy_launch_the_driver_holds_past_a_blocking_capture_begin_leaves_the_capture_intact",
    ) else {
        return;
    };
    let _alone = capture_lock();
    let context = context();
    let capturing = Stream::new(&context, StreamFlags::Blocking).expect("stream");
    let legacy = Stream::legacy(&context);
    let tally = Tally::new();
    let launch = || {
        let probe = tally.probe();
        host_launch(&legacy, move || probe.ran())
    };
    let (launched, builder) =
        hold_a_launch_in_the_driver(controls, Duration::from_millis(300), launch, || {
            GraphBuilder::begin(&capturing, CaptureMode::Relaxed).expect("capture begins")
        });
    // Ended once the held launch returned.
    let ended = builder.end().map(drop);
    legacy.synchronize().expect("synchronize");
    cuda_host::reclaim();
    assert!(
        ended.is_ok(),
        "the capture was broken by a launch begun before it: {ended:?} (the launch: {launched:?})"
    );
}

/// Streams enough that, whatever stream a capture begins on, some of them share its hash group,
/// and the legacy stream's, as one stream in 64 does (`capture_check.rs` hashes streams into 64
/// groups): 640 streams miss a given group with odds of 4 in 100,000.
const STREAMS_ENOUGH_TO_SHARE_A_GROUP: usize = 640;

/// How long the driver holds the launches of the tests that hold one on each of many streams:
/// longer than starting those launches takes, and than the bound their captures are held to.
const HOLD_OF_MANY: Duration = Duration::from_secs(4);

/// Makes `launch` on each of `streams`, each on a thread of its own and held by the driver past
/// its capture check for [`HOLD_OF_MANY`], and runs `meanwhile` once every launch is held.
fn hold_a_launch_on_each<T>(
    controls: &Controls,
    streams: &[Stream],
    launch: impl Fn(&Stream) -> cuda_host::Result<()> + Sync,
    meanwhile: impl FnOnce() -> T,
) -> T {
    let count = u32::try_from(streams.len()).expect("a count of streams");
    let checks_before = controls.call_count(c"cuStreamIsCapturing");
    controls.delay_next_calls(c"cuLaunchHostFunc", count, HOLD_OF_MANY);
    std::thread::scope(|scope| {
        let launchers: Vec<_> = streams
            .iter()
            .map(|stream| scope.spawn(|| launch(stream)))
            .collect();
        // Each launch's capture check is made inside its window, which it holds until the
        // driver answers its held `cuLaunchHostFunc`; a delayed call leaves the armed count as
        // it begins its delay.
        suite::wait_until("every launch past its capture check", || {
            controls.call_count(c"cuStreamIsCapturing") >= checks_before + u64::from(count)
        });
        suite::wait_until("every launch held in the driver", || {
            controls.armed_delays(c"cuLaunchHostFunc") == 0
        });
        let during = meanwhile();
        for launcher in launchers {
            launcher
                .join()
                .unwrap()
                .expect("a launch on a stream not capturing");
        }
        during
    })
}

/// How long beginning a capture of `stream` took, in relaxed mode (its end is not timed).
fn time_a_capture_begin(stream: &Stream) -> Duration {
    let began = std::time::Instant::now();
    let builder = GraphBuilder::begin(stream, CaptureMode::Relaxed).expect("capture begins");
    let waited = began.elapsed();
    builder.end().expect("the capture ends");
    waited
}

#[test]
fn a_capture_begins_within_the_bound_whatever_other_streams_the_driver_holds_launches_of() {
    // A capture waits for launches of the special streams however long (a blocking stream's
    // capture draws the legacy stream in, where a launch would invalidate it rather than join
    // it), and for those of its own stream at most 10 ms. A launch the driver holds on any other
    // stream, whatever its handle, must not hold a capture longer: perhaps only the capturing
    // thread would release it.
    let Some(controls) = controls_to_hold_a_launch(
        "a_capture_begins_within_the_bound_whatever_other_streams_the_driver_holds_launches_of",
    ) else {
        return;
    };
    let _alone = capture_lock();
    let context = context();
    let capturing = new_stream(&context);
    let others: Vec<Stream> = (0..STREAMS_ENOUGH_TO_SHARE_A_GROUP)
        .map(|_| new_stream(&context))
        .collect();
    let tally = Tally::new();
    let launch = |stream: &Stream| {
        let probe = tally.probe();
        host_launch(stream, move || probe.ran())
    };
    let waited = hold_a_launch_on_each(controls, &others, launch, || {
        time_a_capture_begin(&capturing)
    });
    assert!(
        waited < Duration::from_secs(1),
        "the capture waited {waited:?} for launches the driver held on other streams"
    );
    others
        .iter()
        .for_each(|stream| stream.synchronize().unwrap());
    assert_eq!(tally.runs(), STREAMS_ENOUGH_TO_SHARE_A_GROUP);
}

#[test]
fn a_capture_begins_within_the_bound_whatever_other_streams_the_driver_holds_pass_throughs_of() {
    // A capture waits for a pass-through launch of its own stream however long: with no record
    // to abandon, a graph that took it would call the caller's function on every launch. One on
    // another stream, whatever its handle, must not hold the capture past the bound.
    let Some(controls) = controls_to_hold_a_launch(
        "a_capture_begins_within_the_bound_whatever_other_streams_the_driver_holds_pass_throughs_of",
    ) else {
        return;
    };
    let _alone = capture_lock();
    let context = context();
    let capturing = new_stream(&context);
    let others: Vec<Stream> = (0..STREAMS_ENOUGH_TO_SHARE_A_GROUP)
        .map(|_| new_stream(&context))
        .collect();
    let counter = AtomicUsize::new(0);
    let launch = |stream: &Stream| {
        let pointer = (&raw const counter).cast_mut().cast::<c_void>();
        // SAFETY: `counter` outlives the streams' work, which is synchronized below.
        unsafe { host_launch_raw(stream, add_one, UserData::PassThrough(pointer)) }
    };
    let waited = hold_a_launch_on_each(controls, &others, launch, || {
        time_a_capture_begin(&capturing)
    });
    others
        .iter()
        .for_each(|stream| stream.synchronize().unwrap());
    assert!(
        waited < Duration::from_secs(1),
        "the capture waited {waited:?} for pass-through launches the driver held on other \
         streams"
    );
    assert_eq!(
        counter.load(Ordering::SeqCst),
        STREAMS_ENOUGH_TO_SHARE_A_GROUP
    );
}

#[test]
fn a_launch_does_not_wait_for_a_capture_of_another_stream_held_by_a_legacy_launch() {
    // A capture that begins keeps launches of its own stream (and of the special streams) out
    // until it began, and waits for a launch of the legacy stream however long. A launch on any
    // other stream, whatever its handle, must not wait for it: perhaps it is what would release
    // the held launch.
    let Some(controls) = controls_to_hold_a_launch(
        "a_launch_does_not_wait_for_a_capture_of_another_stream_held_by_a_legacy_launch",
    ) else {
        return;
    };
    let _alone = capture_lock();
    let context = context();
    let capturing = Stream::new(&context, StreamFlags::Blocking).expect("stream");
    let legacy = Stream::legacy(&context);
    let others: Vec<Stream> = (0..STREAMS_ENOUGH_TO_SHARE_A_GROUP)
        .map(|_| new_stream(&context))
        .collect();
    let tally = Tally::new();
    // The scenario holds only if the legacy launch was held in the driver across the capture's
    // begin: another thread's call (one of cuda-host's own) may take the armed delay. Such a try
    // shows nothing either way and is made again.
    for _ in 0..5 {
        let held = std::sync::Mutex::new(None);
        let began_at = std::sync::Mutex::new(None);
        let (slowest, began_after) = hold_a_launch_on_each(
            controls,
            std::slice::from_ref(&legacy),
            |legacy| {
                let probe = tally.probe();
                let launched = std::time::Instant::now();
                let answer = host_launch(legacy, move || probe.ran());
                *held.lock().unwrap() = Some((launched, std::time::Instant::now()));
                answer
            },
            || {
                std::thread::scope(|scope| {
                    *began_at.lock().unwrap() = Some(std::time::Instant::now());
                    let beginning = scope.spawn(|| time_a_capture_begin(&capturing));
                    // Launches on every other stream, round after round, until the capture
                    // began: the later rounds run while it waits for the held launch. A round
                    // begins once the one before the last ran: unpaced, the rounds outrun the
                    // driver's threads where threads run one at a time (valgrind), and the
                    // queued work grows without bound. (`made` counts the tally's earlier runs.)
                    let mut slowest = Duration::ZERO;
                    let mut made = tally.runs();
                    while !beginning.is_finished() {
                        for stream in &others {
                            let probe = tally.probe();
                            let launched = std::time::Instant::now();
                            host_launch(stream, move || probe.ran()).expect("launched");
                            slowest = slowest.max(launched.elapsed());
                        }
                        made += others.len();
                        while tally.runs() + others.len() < made && !beginning.is_finished() {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                    (slowest, beginning.join().unwrap())
                })
            },
        );
        let (launched, returned) = held.into_inner().unwrap().expect("the legacy launch ran");
        let began = began_at.into_inner().unwrap().expect("the capture began");
        let held_across_the_begin = launched < began && returned > began + Duration::from_secs(1);
        if !held_across_the_begin {
            continue;
        }
        assert!(
            began_after > Duration::from_secs(1),
            "the capture began after {began_after:?}, without waiting for the held legacy launch"
        );
        assert!(
            slowest < Duration::from_secs(1),
            "a launch on another stream waited {slowest:?} for the capture to begin"
        );
        legacy.synchronize().unwrap();
        others
            .iter()
            .for_each(|stream| stream.synchronize().unwrap());
        return;
    }
    panic!("in 5 tries, the legacy launch was never held in the driver across the capture's begin");
}

#[test]
fn a_launch_whose_look_at_the_capture_that_took_it_fails_counts_as_taken_and_its_node_does_nothing()
{
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            "a_launch_whose_look_at_the_capture_that_took_it_fails_counts_as_taken_and_its_node_does_nothing",
            "beginning a capture inside a call and failing the look are software-driver controls",
        );
    };
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    // Other code begins capturing the stream inside the launch's cuLaunchHostFunc, past its
    // check; the look afterwards at that capture's nodes fails.
    controls.begin_capture_at_next_call(
        c"cuLaunchHostFunc",
        &stream,
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
    );
    controls.fail_next_calls(
        c"cuStreamGetCaptureInfo_v3",
        1,
        CUresult::CUDA_ERROR_UNKNOWN,
    );
    let probe = tally.probe();
    let launched = host_launch(&stream, move || probe.ran());
    let mut raw = std::ptr::null_mut();
    // SAFETY: a live stream and a valid out-pointer.
    let ended = unsafe {
        context
            .driver()
            .cuStreamEndCapture(stream.as_raw(), &mut raw)
    };
    assert_eq!(ended, CUresult::CUDA_SUCCESS, "the capture ends");
    assert!(
        launched.is_err(),
        "a launch the look could not clear was reported as enqueued"
    );
    assert_eq!(
        (tally.runs(), tally.drops()),
        (0, 1),
        "its closure is dropped at once, unrun"
    );
    // The node it left in the other code's graph does nothing, however often the graph runs.
    run_graph(Graph(raw), &stream, 3);
    assert_eq!(tally.runs(), 0);
}

/// Other code begins capturing the stream after the launch went to the driver and before
/// cuda-host looks whether the capture took it: the capture's graph is empty, and listing its
/// nodes must not fail (the 13.0 driver refuses an array with room for none), or the look
/// would count the live launch as taken and refuse it.
#[test]
fn a_launch_a_capture_begun_just_after_it_left_empty_handed_runs_and_is_accepted() {
    let Some(controls) = controls_to_hold_a_launch(
        "a_launch_a_capture_begun_just_after_it_left_empty_handed_runs_and_is_accepted",
    ) else {
        return;
    };
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let probe = tally.probe();
    // Held, so that the function has not run by the time of the look.
    let gate = suite::Gate::new(&context);
    gate.hold(&stream);
    let armed = std::sync::atomic::AtomicBool::new(false);
    let (launched, capture) = std::thread::scope(|scope| {
        let launcher = scope.spawn(|| {
            // The capture check before the launch, then the look after it: each held.
            controls.delay_next_calls(c"cuStreamIsCapturing", 2, Duration::from_millis(300));
            armed.store(true, Ordering::SeqCst);
            host_launch(&stream, move || probe.ran())
        });
        suite::wait_until("the look after the launch held in the driver", || {
            armed.load(Ordering::SeqCst) && controls.armed_delays(c"cuStreamIsCapturing") == 0
        });
        let capture = Capture::begin(
            stream.as_raw(),
            CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        );
        (launcher.join().unwrap(), capture)
    });
    let graph = capture.end();
    assert_eq!(
        launched,
        Ok(()),
        "a live launch was refused as if the capture had taken it"
    );
    assert!(graph.is_ok(), "the capture was invalidated");
    gate.open();
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), 1, "the launch ran live, once");
    tally.reclaim_until_dropped(1, "the closure to be dropped after it ran");
}

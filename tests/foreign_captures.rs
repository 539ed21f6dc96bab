//! Host functions that may run many times (`host_launch_replayable`), in captures other code
//! began (and in its recaptures of their graphs): each becomes a node of the graph being
//! captured, runs on every launch of every executable made from it, and is dropped once, on the
//! calling thread, after the last graph, clone and executable are gone; the capture stays valid.
//! Captures take turns ([`suite::capture_lock`]); global-mode ones run alone in a child process.

use cuda_host::{
    Context, Error, Event, EventFlags, Stream, StreamFlags, UserData, graph::CaptureMode,
    graph::GraphBuilder, graph::host_launch_replayable, graph::host_launch_replayable_raw,
    host_launch, metrics, options::HostEngine,
};
use cuda_host_sys::{CUresult, CUstreamCaptureMode, CUstreamCaptureStatus};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use suite::capture::{Capture, is_capturing};
use suite::{Tally, capture_lock, context};

const MODES: [CUstreamCaptureMode; 3] = [
    CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
    CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
];

fn new_stream(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking).expect("stream")
}

/// Adds a counted callable to `stream`'s capture, or runs it once if it is not capturing.
fn replayable(stream: &Stream, tally: &Arc<Tally>) -> cuda_host::Result<()> {
    let probe = tally.probe();
    // SAFETY: no other thread ends a capture of the stream during the call.
    unsafe { host_launch_replayable(stream, move || probe.ran()) }
}

/// Gives a wrongly early drop a chance to show, then checks that nothing was dropped.
fn assert_still_held(tally: &Tally, what: &str) {
    std::thread::sleep(Duration::from_millis(20));
    cuda_host::reclaim();
    assert_eq!(tally.drops(), 0, "{what}");
}

/// The software driver's count of live user objects; `None` on the real driver.
fn live_user_objects() -> Option<u64> {
    suite::software::controls().map(|controls| controls.user_object_stats().1)
}

/// A capture in `mode` other code begins with the driver's own call, a counted callable added
/// to it: the graph, launched 1,000 times, runs it 1,000 times, and it is dropped once, on this
/// thread, only after the graph and its executable are gone.
fn a_replayable_callable_in_a_raw_capture_runs_on_every_launch(mode: CUstreamCaptureMode) {
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let objects = live_user_objects();
    let capture = Capture::begin(stream.as_raw(), mode);
    replayable(&stream, &tally).expect("added to the capture");
    assert_eq!(tally.runs(), 0, "ran while captured");
    assert_eq!(
        is_capturing(stream.as_raw()),
        (
            CUresult::CUDA_SUCCESS,
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
        ),
        "the capture was disturbed"
    );
    let graph = capture.end().expect("the capture is still valid");
    let executable = graph.instantiate();
    executable.run(&stream, 1_000);
    assert_eq!(tally.runs(), 1_000, "{mode:?}");
    drop(graph);
    assert_still_held(&tally, "dropped while an executable exists");
    drop(executable);
    tally.reclaim_until_dropped(1, "the callable to be dropped after the executable");
    assert_eq!(tally.drop_threads(), [std::thread::current().id()]);
    assert!(
        !tally.run_threads().contains(&std::thread::current().id()),
        "ran on the calling thread"
    );
    // The driver counts a user object gone once its destructor returned, which may be after the
    // callable it handed over was dropped here.
    suite::wait_until("the graph's user objects to go", || {
        live_user_objects() == objects
    });
}

#[test]
fn a_replayable_callable_in_a_global_capture_other_code_began_runs_on_every_launch() {
    suite::alone_in_child!(
        a_replayable_callable_in_a_global_capture_other_code_began_runs_on_every_launch
    );
    a_replayable_callable_in_a_raw_capture_runs_on_every_launch(MODES[0]);
}

#[test]
fn a_replayable_callable_in_a_thread_local_capture_other_code_began_runs_on_every_launch() {
    let _alone = capture_lock();
    a_replayable_callable_in_a_raw_capture_runs_on_every_launch(MODES[1]);
}

#[test]
fn a_replayable_callable_in_a_relaxed_capture_other_code_began_runs_on_every_launch() {
    let _alone = capture_lock();
    a_replayable_callable_in_a_raw_capture_runs_on_every_launch(MODES[2]);
}

#[test]
fn on_a_stream_that_is_not_capturing_a_replayable_callable_runs_once_in_stream_order() {
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (first, second) = (Arc::clone(&order), Arc::clone(&order));
    host_launch(&stream, move || first.lock().unwrap().push("before")).expect("launch");
    replayable(&stream, &tally).expect("launch");
    host_launch(&stream, move || second.lock().unwrap().push("after")).expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), 1);
    assert_eq!(*order.lock().unwrap(), ["before", "after"]);
    tally.reclaim_until_dropped(1, "the callable to be dropped once it ran");
    assert_eq!(tally.drop_threads(), [std::thread::current().id()]);
}

#[test]
fn a_clone_of_the_captured_graph_keeps_the_callable_after_the_original_is_gone() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let capture = Capture::begin(
        stream.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    );
    replayable(&stream, &tally).expect("added to the capture");
    let graph = capture.end().expect("the capture is still valid");
    let clone = graph.clone_graph();
    drop(graph);
    assert_still_held(&tally, "dropped while a clone exists");
    let executable = clone.instantiate();
    drop(clone);
    executable.run(&stream, 3);
    assert_eq!(tally.runs(), 3);
    assert_still_held(&tally, "dropped while the clone's executable exists");
    drop(executable);
    tally.reclaim_until_dropped(1, "the callable to be dropped after the clone's executable");
}

#[test]
fn a_graph_builders_capture_takes_the_same_path() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let builder = GraphBuilder::begin(&stream, CaptureMode::ThreadLocal).expect("capture");
    replayable(builder.stream(), &tally).expect("added to the builder's capture");
    let graph = builder.end().expect("the capture ends");
    assert_eq!(graph.host_nodes().expect("nodes").len(), 1);
    let executable = graph.instantiate().expect("instantiates");
    drop(graph);
    executable.launch(&stream).expect("launch");
    executable.launch(&stream).expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), 2);
    drop(executable);
    tally.reclaim_until_dropped(1, "the callable to be dropped after the executable");
}

#[test]
fn another_thread_adds_to_a_graph_builders_capture_while_it_ends() {
    // The builder's end waits for a node being added, so that the graph's handle the adding
    // thread uses is never that of an ended capture: every round's graph either has the node
    // and runs it on every launch, or the call ran it once, live, after the end.
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    for round in 0..50 {
        let tally = Tally::new();
        let builder = GraphBuilder::begin(&stream, CaptureMode::Relaxed).expect("capture");
        let (graph, added) = std::thread::scope(|scope| {
            let adding = scope.spawn(|| replayable(&stream, &tally));
            if round % 2 == 0 {
                std::thread::yield_now();
            }
            let graph = builder.end().expect("the capture ends");
            (graph, adding.join().expect("the adding thread"))
        });
        added.expect("added or run");
        let nodes = graph.host_nodes().expect("nodes").len();
        let executable = graph.instantiate().expect("instantiates");
        executable.launch(&stream).expect("launch");
        executable.launch(&stream).expect("launch");
        stream.synchronize().expect("synchronize");
        match nodes {
            1 => assert_eq!(tally.runs(), 2, "round {round}: a node that did not run"),
            0 => assert_eq!(
                tally.runs(),
                1,
                "round {round}: a live launch that did not run"
            ),
            _ => panic!("round {round}: {nodes} nodes"),
        }
        drop((graph, executable));
        tally.reclaim_until_dropped(1, "the callable to be dropped");
    }
}

#[test]
fn host_launch_keeps_refusing_a_capturing_stream() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let capture = Capture::begin(
        stream.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
    );
    assert!(matches!(
        host_launch(&stream, || {}),
        Err(Error::StreamCapturing { .. })
    ));
    let tally = Tally::new();
    replayable(&stream, &tally).expect("added to the capture");
    let graph = capture.end().expect("the capture is still valid");
    graph.instantiate().run(&stream, 1);
    assert_eq!(tally.runs(), 1, "only the replayable callable is a node");
}

#[test]
fn an_invalidated_capture_is_refused_and_nothing_is_attached() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let objects = live_user_objects();
    let capture = Capture::begin(
        stream.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
    );
    // A stream synchronize is illegal during a capture and invalidates it.
    let driver = context.driver();
    // SAFETY: a valid stream.
    let answer = unsafe { driver.cuStreamSynchronize(stream.as_raw()) };
    assert_ne!(answer, CUresult::CUDA_SUCCESS);
    let tally = Tally::new();
    assert_eq!(
        replayable(&stream, &tally),
        Err(Error::CaptureNotActive { invalidated: true })
    );
    tally.reclaim_until_dropped(1, "the refused callable to be dropped");
    assert_eq!(tally.runs(), 0);
    assert!(
        capture.end().is_err(),
        "an invalidated capture yields no graph"
    );
    assert_eq!(
        live_user_objects(),
        objects,
        "a user object stayed attached"
    );
}

#[test]
fn a_capture_begun_between_the_look_and_the_live_launch_gets_the_node() {
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            "a_capture_begun_between_the_look_and_the_live_launch_gets_the_node",
            "holding a launch inside the driver is a software-driver control",
        );
    };
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    // The live launch, past its look and its capture check, is held in the driver while other
    // code begins a capture: the capture takes the launch, which is refused and never runs, and
    // the call adds the node to that capture instead.
    controls.delay_next_calls(c"cuLaunchHostFunc", 1, Duration::from_millis(300));
    let (added, capture) = std::thread::scope(|scope| {
        let adding = scope.spawn(|| replayable(&stream, &tally));
        std::thread::sleep(Duration::from_millis(50));
        let capture = Capture::begin(
            stream.as_raw(),
            CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        );
        (adding.join().expect("the adding thread"), capture)
    });
    added.expect("added to the capture that took the live launch");
    let graph = capture.end().expect("the capture is still valid");
    let executable = graph.instantiate();
    executable.run(&stream, 3);
    assert_eq!(
        tally.runs(),
        3,
        "once per launch: the taken live launch does nothing"
    );
    drop((graph, executable));
    tally.reclaim_until_dropped(1, "the callable to be dropped after the graph");
}

#[test]
fn on_the_polled_engine_a_capture_gets_the_drivers_host_node_and_a_live_launch_the_engine() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context)
        .with_host_engine(HostEngine::Polled)
        .expect("the polled engine");
    let live = Tally::new();
    replayable(&stream, &live).expect("live launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(live.runs(), 1);
    let tally = Tally::new();
    let capture = Capture::begin(
        stream.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    );
    replayable(&stream, &tally).expect("added to the capture");
    let graph = capture.end().expect("the capture is still valid");
    let executable = graph.instantiate();
    executable.run(&stream, 10);
    assert_eq!(tally.runs(), 10);
    drop((graph, executable));
    tally.reclaim_until_dropped(1, "the callable to be dropped after the graph");
}

unsafe extern "C" fn add_copied(data: *mut c_void) {
    // SAFETY: the copy of a `[usize; 2]`: the address of a live counter and an amount.
    let [counter, amount] = unsafe { data.cast::<[usize; 2]>().read() };
    // SAFETY: the counter outlives every run (the test waits for them).
    unsafe { &*(counter as *const AtomicUsize) }.fetch_add(amount, Ordering::SeqCst);
}

#[test]
fn the_raw_form_copies_its_user_data_into_a_record_the_graph_owns() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let counter = AtomicUsize::new(0);
    let objects = live_user_objects();
    let capture = Capture::begin(
        stream.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    );
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&(&raw const counter as usize).to_ne_bytes());
    bytes[8..].copy_from_slice(&5usize.to_ne_bytes());
    // SAFETY: `add_copied` reads the copy only during its call; the counter outlives the runs.
    unsafe { host_launch_replayable_raw(&stream, add_copied, UserData::Copied(&bytes)) }
        .expect("added to the capture");
    bytes.fill(0xff);
    let graph = capture.end().expect("the capture is still valid");
    let executable = graph.instantiate();
    drop(graph);
    executable.run(&stream, 4);
    assert_eq!(
        counter.load(Ordering::SeqCst),
        20,
        "the graph's copy, on every launch"
    );
    if let Some(objects) = objects {
        assert_eq!(
            live_user_objects(),
            Some(objects + 1),
            "the executable holds the copy"
        );
    }
    drop(executable);
    suite::wait_until("the copy's user object to go", || {
        cuda_host::reclaim();
        live_user_objects() == objects
    });

    // Not capturing: it runs once, with its copy.
    bytes[..8].copy_from_slice(&(&raw const counter as usize).to_ne_bytes());
    bytes[8..].copy_from_slice(&1usize.to_ne_bytes());
    // SAFETY: as above.
    unsafe { host_launch_replayable_raw(&stream, add_copied, UserData::Copied(&bytes)) }
        .expect("launched");
    bytes.fill(0xff);
    stream.synchronize().expect("synchronize");
    assert_eq!(counter.load(Ordering::SeqCst), 21);
}

#[test]
fn ten_thousand_capture_instantiate_launch_destroy_cycles_leave_nothing_alive() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let objects = live_user_objects();
    for _ in 0..10_000 {
        let capture = Capture::begin(
            stream.as_raw(),
            CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        );
        replayable(&stream, &tally).expect("added to the capture");
        let graph = capture.end().expect("the capture is still valid");
        let executable = graph.instantiate();
        executable.launch(stream.as_raw());
        drop((graph, executable));
    }
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), 10_000);
    tally.reclaim_until_dropped(10_000, "every callable to be dropped");
    assert_eq!(tally.drops(), 10_000, "a callable dropped twice");
    // As in `a_replayable_callable_in_a_raw_capture_runs_on_every_launch`.
    suite::wait_until("the graphs' user objects to go", || {
        live_user_objects() == objects
    });
    let slots = metrics().launch_slots();
    assert_eq!((slots.in_flight, slots.finished), (0, 0), "records left");
}

#[test]
fn a_panicking_replayable_callable_is_reported_on_every_launch_and_the_graph_goes_on() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let reports = Arc::new(std::sync::Mutex::new(0usize));
    let hook_reports = Arc::clone(&reports);
    cuda_host::panics::set_host_panic_hook(
        move |panic: &cuda_host::panics::HostFunctionPanic<'_>| {
            if panic.message.starts_with("deliberate replayable") {
                *hook_reports.lock().unwrap() += 1;
            }
        },
    );
    let panicking = || panic!("deliberate replayable panic");
    // SAFETY: not capturing.
    unsafe { host_launch_replayable(&stream, panicking) }.expect("live launch");
    let tally = Tally::new();
    replayable(&stream, &tally).expect("live launch");
    stream.synchronize().expect("the stream goes on");
    assert_eq!((*reports.lock().unwrap(), tally.runs()), (1, 1));

    let capture = Capture::begin(
        stream.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    );
    // SAFETY: this thread ends the capture, after the call.
    unsafe { host_launch_replayable(&stream, panicking) }.expect("added to the capture");
    replayable(&stream, &tally).expect("added to the capture");
    let graph = capture.end().expect("the capture is still valid");
    // The stream goes on.
    graph.instantiate().run(&stream, 2);
    cuda_host::panics::clear_host_panic_hook();
    assert_eq!(
        (*reports.lock().unwrap(), tally.runs()),
        (3, 3),
        "a panic on each launch, and the node after it ran"
    );
}

#[test]
fn on_a_failed_context_a_replayable_launch_is_refused_and_its_callable_dropped() {
    suite::alone_in_child!(
        on_a_failed_context_a_replayable_launch_is_refused_and_its_callable_dropped
    );
    let context = context();
    let stream = new_stream(&context);
    let fault = suite::kernels::Fault::load(context.driver());
    fault.fail(&stream);
    let tally = Tally::new();
    let error = replayable(&stream, &tally).unwrap_err();
    assert_eq!(
        error.driver_result(),
        Some(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS),
        "{error}"
    );
    assert_eq!(tally.drop_threads(), [std::thread::current().id()]);
    assert_eq!(tally.runs(), 0);
}

/// A value whose `Drop` asks whether its work finished (`cuEventQuery`), as a pool recycling a
/// buffer does: a call a capture of the dropping thread forbids.
struct QueriesOnDrop {
    event: Event,
    answered: Arc<Mutex<Option<bool>>>,
}

impl Drop for QueriesOnDrop {
    fn drop(&mut self) {
        *self.answered.lock().unwrap() = Some(self.event.is_complete().is_ok());
    }
}

/// The calling thread's capture other code began, in thread-local mode, and a host function
/// this thread launched before it that has finished: its record waits in this thread's inbox.
/// Adding a replayable callable to the capture must not drop that record then (its `Drop` is
/// user code, which the capture may forbid): the capture must stay valid.
#[test]
fn a_replayable_launch_into_a_foreign_capture_drops_nothing_that_could_invalidate_it() {
    let _alone = capture_lock();
    let context = context();
    let other = new_stream(&context);
    let stream = new_stream(&context);
    let event = Event::new(&context, EventFlags::DisableTiming).expect("event");
    event.record(&other).expect("record");
    other.synchronize().expect("synchronize");
    let answered = Arc::new(Mutex::new(None));
    let value = QueriesOnDrop {
        event,
        answered: Arc::clone(&answered),
    };
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    host_launch(&other, move || {
        let _held = &value;
        flag.store(true, Ordering::SeqCst);
    })
    .expect("launch");
    // Waited for without a cuda-host call, which would drop the record before the capture.
    suite::wait_until("the host function to run", || ran.load(Ordering::SeqCst));
    std::thread::sleep(Duration::from_millis(20));

    let capture = Capture::begin(
        stream.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    );
    let tally = Tally::new();
    let probe = tally.probe();
    // SAFETY: this thread ends the capture, after the call.
    unsafe { cuda_host::graph::host_launch_replayable(&stream, move || probe.ran()) }
        .expect("added to the capture");
    let dropped_during_capture = answered.lock().unwrap().is_some();
    let ended = capture.end();
    assert!(
        ended.is_ok(),
        "the capture was invalidated (a record dropped during it: {dropped_during_capture}): {:?}",
        ended.err()
    );
    drop(ended);
    cuda_host::reclaim();
    assert_eq!(
        *answered.lock().unwrap(),
        Some(true),
        "dropped after the capture"
    );
}

/// With the `nvtx` feature, the first graph record a process makes attaches the profiler, and
/// without one logs that none is set: user code (the logger, a profiler's initializers). A
/// replayable launch made that record while it held the lock that a builder's end takes for
/// writing, so a logger ending a capture through cuda-host waited for itself.
#[cfg(feature = "nvtx")]
#[test]
fn a_logger_run_by_a_replayable_launch_may_end_a_capture_through_cuda_host() {
    suite::alone_in_child!(a_logger_run_by_a_replayable_launch_may_end_a_capture_through_cuda_host);
    static STREAM: std::sync::OnceLock<Stream> = std::sync::OnceLock::new();
    static ENDED: AtomicBool = AtomicBool::new(false);
    struct CapturingLogger;
    impl log::Log for CapturingLogger {
        fn enabled(&self, _: &log::Metadata<'_>) -> bool {
            true
        }
        fn log(&self, record: &log::Record<'_>) {
            if !record.args().to_string().contains("NVTX_INJECTION64_PATH") {
                return;
            }
            let stream = STREAM.get().expect("the logger's stream");
            let builder = cuda_host::graph::GraphBuilder::begin(
                stream,
                cuda_host::graph::CaptureMode::Relaxed,
            )
            .expect("the logger's capture");
            drop(builder.end().expect("the logger's capture ends"));
            ENDED.store(true, Ordering::SeqCst);
        }
        fn flush(&self) {}
    }
    let context = context();
    STREAM.set(new_stream(&context)).expect("set once");
    log::set_logger(&CapturingLogger).expect("the only logger");
    log::set_max_level(log::LevelFilter::Trace);
    let stream = new_stream(&context);
    let capture = Capture::begin(
        stream.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
    );
    let added = Arc::new(AtomicBool::new(false));
    let done = Arc::clone(&added);
    let adding = std::thread::spawn(move || {
        // SAFETY: the capture ends only after the call.
        let result = unsafe { cuda_host::graph::host_launch_replayable(&stream, || {}) };
        done.store(true, Ordering::SeqCst);
        (result, stream)
    });
    suite::wait_until(
        "the replayable launch to return (not wait for its own logger)",
        || added.load(Ordering::SeqCst),
    );
    let (result, _stream) = adding.join().expect("the adding thread");
    result.expect("added");
    assert!(ENDED.load(Ordering::SeqCst), "the logger ran");
    drop(capture.end().expect("the capture is still valid"));
}

// ---- Recaptures by other code (`cuStreamBeginRecaptureToGraph`, CUDA 13.3) -------------------
//
// A recapture lets go of the graph's user objects as it begins (as documented), so the callable
// of the graph's first capture lives on only through what else holds its user object: the
// executables made before, and their launches in flight. The recaptured node takes the new
// callable, whose user object the recaptured graph holds.

/// Whether the driver lacks `cuStreamBeginRecaptureToGraph` (a real driver before CUDA 13.3):
/// then `test` is skipped.
fn lacks_recapture(context: &Context, test: &str) -> bool {
    let availability = context
        .driver()
        .availability("cuStreamBeginRecaptureToGraph");
    if availability == Some(cuda_host_sys::Availability::Available) {
        return false;
    }
    suite::skip(test, "the driver has no cuStreamBeginRecaptureToGraph");
    true
}

/// Counts the nodes a recapture's callback is told of, and lets each take its new parameters.
unsafe extern "C" fn count_changed(
    data: *mut c_void,
    _node: cuda_host_sys::CUgraphNode,
    _original: *const cuda_host_sys::CUgraphNodeParams,
    _recaptured: *const cuda_host_sys::CUgraphNodeParams,
    _status: cuda_host_sys::CUgraphRecaptureStatus,
) -> CUresult {
    // SAFETY: begun with a counter that outlives the recapture.
    unsafe { &*data.cast::<AtomicUsize>() }.fetch_add(1, Ordering::SeqCst);
    CUresult::CUDA_SUCCESS
}

/// Other code recaptures `graph` on `stream` in `mode` (`cuStreamBeginRecaptureToGraph`, which
/// must succeed), runs `during`, and ends the recapture, which must end in that graph. Answers
/// how many nodes the recapture's callback was told of.
fn recapture(
    stream: &Stream,
    mode: CUstreamCaptureMode,
    graph: &suite::capture::Graph,
    during: impl FnOnce(),
) -> usize {
    let driver = stream.context().driver();
    // The callback runs only while the recapture lasts, within this call.
    let changed = AtomicUsize::new(0);
    // SAFETY: a live stream, not capturing, and a live graph; the callback only counts, into
    // `changed`, which outlives the recapture.
    let began = unsafe {
        driver.cuStreamBeginRecaptureToGraph(
            stream.as_raw(),
            mode,
            graph.0,
            Some(count_changed),
            std::ptr::from_ref(&changed).cast_mut().cast(),
        )
    };
    suite::ok("cuStreamBeginRecaptureToGraph", began);
    during();
    let mut ended = std::ptr::null_mut();
    // SAFETY: the recapture begun above, on this thread; a valid out-pointer.
    let result = unsafe { driver.cuStreamEndCapture(stream.as_raw(), &mut ended) };
    assert_eq!(
        (result, ended),
        (CUresult::CUDA_SUCCESS, graph.0),
        "the recapture ends in the graph it was given"
    );
    changed.load(Ordering::SeqCst)
}

/// Adds to `stream`'s capture a counted callable that also notes, when it is dropped, how many
/// runs its tally had counted by then.
fn replayable_noting_runs_at_drop(
    stream: &Stream,
    tally: &Arc<Tally>,
    runs_at_drop: &Arc<Mutex<Vec<usize>>>,
) -> cuda_host::Result<()> {
    struct NotesRuns(Arc<Tally>, Arc<Mutex<Vec<usize>>>);
    impl Drop for NotesRuns {
        fn drop(&mut self) {
            self.1.lock().unwrap().push(self.0.runs());
        }
    }
    let probe = tally.probe();
    let notes = NotesRuns(Arc::clone(tally), Arc::clone(runs_at_drop));
    // SAFETY: no other thread ends a capture of the stream during the call.
    unsafe {
        host_launch_replayable(stream, move || {
            let _notes = &notes;
            probe.ran();
        })
    }
}

#[test]
fn after_other_codes_recapture_a_held_launch_of_an_earlier_executable_runs_the_first_callable_which_is_dropped_after_it()
 {
    const TEST: &str = "after_other_codes_recapture_a_held_launch_of_an_earlier_executable_runs_the_first_callable_which_is_dropped_after_it";
    let _alone = capture_lock();
    let context = context();
    if lacks_recapture(&context, TEST) {
        return;
    }
    let stream = new_stream(&context);
    let (first, second) = (Tally::new(), Tally::new());
    let runs_at_drop = Arc::new(Mutex::new(Vec::new()));
    let objects = live_user_objects();
    let capture = Capture::begin(stream.as_raw(), MODES[1]);
    replayable_noting_runs_at_drop(&stream, &first, &runs_at_drop).expect("added to the capture");
    let graph = capture.end().expect("the capture is still valid");
    let made_before = graph.instantiate();

    let changed = recapture(&stream, MODES[1], &graph, || {
        replayable(&stream, &second).expect("added to the recapture");
    });
    assert_eq!(changed, 1, "the recaptured node's callable changed");
    assert_still_held(
        &first,
        "the first callable was dropped while an executable made before the recapture exists",
    );

    let gate = suite::Gate::new(&context);
    gate.hold(&stream);
    made_before.launch(stream.as_raw());
    // The held launch is all that can still run the first callable.
    drop(made_before);
    assert_still_held(
        &first,
        "the first callable was dropped while a held launch can run it",
    );
    assert_eq!(first.runs(), 0, "the held launch ran");
    gate.open();
    stream.synchronize().expect("synchronize");
    assert_eq!(first.runs(), 1, "the held launch ran the first callable");
    first.reclaim_until_dropped(1, "the first callable to be dropped after its last launch");
    assert_eq!(
        *runs_at_drop.lock().unwrap(),
        [1],
        "dropped once, after it ran"
    );
    assert_eq!(first.drop_threads(), [std::thread::current().id()]);
    assert!(
        !first.run_threads().contains(&std::thread::current().id()),
        "ran on the calling thread"
    );

    let made_after = graph.instantiate();
    made_after.run(&stream, 2);
    assert_eq!(
        (first.runs(), second.runs()),
        (1, 2),
        "the recaptured graph runs the second callable"
    );
    drop(graph);
    assert_still_held(
        &second,
        "the second callable was dropped while an executable of the recaptured graph exists",
    );
    drop(made_after);
    second.reclaim_until_dropped(1, "the second callable to be dropped after its executable");
    assert_eq!(second.drop_threads(), [std::thread::current().id()]);
    // As in `a_replayable_callable_in_a_raw_capture_runs_on_every_launch`.
    suite::wait_until("the graph's user objects to go", || {
        live_user_objects() == objects
    });
}

#[test]
fn after_other_codes_recapture_an_update_of_the_earlier_executable_and_the_graphs_end_drop_each_callable_once()
 {
    const TEST: &str = "after_other_codes_recapture_an_update_of_the_earlier_executable_and_the_graphs_end_drop_each_callable_once";
    let _alone = capture_lock();
    let context = context();
    if lacks_recapture(&context, TEST) {
        return;
    }
    let stream = new_stream(&context);
    let (first, second) = (Tally::new(), Tally::new());
    let objects = live_user_objects();
    let capture = Capture::begin(stream.as_raw(), MODES[1]);
    replayable(&stream, &first).expect("added to the capture");
    let graph = capture.end().expect("the capture is still valid");
    let made_before = graph.instantiate();
    made_before.run(&stream, 1);

    recapture(&stream, MODES[1], &graph, || {
        replayable(&stream, &second).expect("added to the recapture");
    });
    let made_after = graph.instantiate();
    made_after.run(&stream, 1);
    assert_eq!((first.runs(), second.runs()), (1, 1));
    assert_still_held(
        &first,
        "the first callable was dropped while an executable made before the recapture exists",
    );

    let mut info = cuda_host_sys::CUgraphExecUpdateResultInfo {
        result: cuda_host_sys::CUgraphExecUpdateResult(77),
        errorNode: std::ptr::null_mut(),
        errorFromNode: std::ptr::null_mut(),
    };
    // SAFETY: a live executable, a live graph of the same topology, a valid out-pointer.
    let updated = unsafe {
        context
            .driver()
            .cuGraphExecUpdate_v2(made_before.0, graph.0, &mut info)
    };
    assert_eq!(updated, CUresult::CUDA_SUCCESS, "{:?}", info.result);
    first.reclaim_until_dropped(
        1,
        "the first callable to be dropped once the update let go of the last executable's hold",
    );
    made_before.run(&stream, 1);
    assert_eq!(
        (first.runs(), second.runs()),
        (1, 2),
        "the updated executable runs the second callable"
    );

    drop(graph);
    drop(made_before);
    assert_still_held(
        &second,
        "the second callable was dropped while an executable of the recaptured graph exists",
    );
    drop(made_after);
    second.reclaim_until_dropped(
        1,
        "the second callable to be dropped after the last executable",
    );
    let here = [std::thread::current().id()];
    assert_eq!(
        (first.drop_threads(), second.drop_threads()),
        (here.to_vec(), here.to_vec())
    );
    suite::wait_until("the graph's user objects to go", || {
        live_user_objects() == objects
    });
}

#[test]
fn a_callable_other_codes_global_recapture_lets_go_of_is_dropped_on_its_thread_after_the_recapture()
{
    suite::alone_in_child!(
        a_callable_other_codes_global_recapture_lets_go_of_is_dropped_on_its_thread_after_the_recapture
    );
    const TEST: &str = "a_callable_other_codes_global_recapture_lets_go_of_is_dropped_on_its_thread_after_the_recapture";
    let context = context();
    if lacks_recapture(&context, TEST) {
        return;
    }
    let stream = new_stream(&context);
    let (first, second) = (Tally::new(), Tally::new());
    let capture = Capture::begin(stream.as_raw(), MODES[0]);
    replayable(&stream, &first).expect("added to the capture");
    let graph = capture.end().expect("the capture is still valid");

    // No executable: the recapture's release is the first callable's last reference. The
    // driver's destructor only hands it home; nothing drops it inside the recapture, where a
    // `Drop` of this thread's could invalidate other code's capture.
    recapture(&stream, MODES[0], &graph, || {
        assert_eq!(
            first.drops(),
            0,
            "dropped inside cuStreamBeginRecaptureToGraph"
        );
        replayable(&stream, &second).expect("added to the recapture");
        assert_eq!(first.drops(), 0, "dropped during other code's recapture");
    });
    first.reclaim_until_dropped(1, "the first callable to be dropped after the recapture");
    assert_eq!(first.drop_threads(), [std::thread::current().id()]);
    assert_eq!(first.runs(), 0);

    graph.instantiate().run(&stream, 1);
    assert_eq!(second.runs(), 1);
    drop(graph);
    second.reclaim_until_dropped(1, "the second callable to be dropped after the graph");
    assert_eq!(second.drop_threads(), [std::thread::current().id()]);
}

#[test]
fn a_replayable_launch_that_fails_other_codes_recapture_is_dropped_once_and_leaves_nothing_attached()
 {
    const TEST: &str = "a_replayable_launch_that_fails_other_codes_recapture_is_dropped_once_and_leaves_nothing_attached";
    let _alone = capture_lock();
    let context = context();
    if lacks_recapture(&context, TEST) {
        return;
    }
    let driver = context.driver();
    let stream = new_stream(&context);
    let (first, second, third) = (Tally::new(), Tally::new(), Tally::new());
    let objects = live_user_objects();
    let capture = Capture::begin(stream.as_raw(), MODES[1]);
    replayable(&stream, &first).expect("added to the capture");
    let graph = capture.end().expect("the capture is still valid");

    // SAFETY: a live stream, not capturing, and a live graph; no callback.
    let began = unsafe {
        driver.cuStreamBeginRecaptureToGraph(
            stream.as_raw(),
            MODES[1],
            graph.0,
            None,
            std::ptr::null_mut(),
        )
    };
    suite::ok("cuStreamBeginRecaptureToGraph", began);
    replayable(&stream, &second).expect("added to the recapture");
    // A node more than the graph had: the recapture fails at the node's launch.
    let refused = replayable(&stream, &third).expect_err("the recapture refuses a node more");
    assert_eq!(
        refused.driver_result(),
        Some(CUresult::CUDA_ERROR_GRAPH_RECAPTURE_FAILURE),
        "{refused}"
    );
    let mut ended = std::ptr::null_mut();
    // SAFETY: the recapture begun above, on this thread; a valid out-pointer.
    let result = unsafe { driver.cuStreamEndCapture(stream.as_raw(), &mut ended) };
    assert_eq!(
        (result, ended),
        (
            CUresult::CUDA_ERROR_GRAPH_RECAPTURE_FAILURE,
            std::ptr::null_mut()
        )
    );
    third.reclaim_until_dropped(1, "the refused callable to be dropped");
    first.reclaim_until_dropped(1, "the callable the recapture let go of to be dropped");
    assert_still_held(
        &second,
        "a callable the failed recapture's graph holds was dropped",
    );
    // The failed recapture's graph is undefined: it is only destroyed.
    drop(graph);
    second.reclaim_until_dropped(1, "the recaptured callable to be dropped with the graph");
    let here = vec![std::thread::current().id()];
    for tally in [&first, &second, &third] {
        assert_eq!((tally.runs(), tally.drop_threads()), (0, here.clone()));
    }
    suite::wait_until("the graph's user objects to go", || {
        live_user_objects() == objects
    });
}

/// What a recapture's callback got from cuda-host: the result of a replayable launch it made.
static CALLBACKS_LAUNCH: Mutex<Vec<Result<(), String>>> = Mutex::new(Vec::new());

/// A recapture's callback that makes a replayable launch on the stream its data names (not
/// capturing), notes the answer and lets the node take its new parameters.
unsafe extern "C" fn launches_on_another_stream(
    data: *mut c_void,
    _node: cuda_host_sys::CUgraphNode,
    _original: *const cuda_host_sys::CUgraphNodeParams,
    _recaptured: *const cuda_host_sys::CUgraphNodeParams,
    _status: cuda_host_sys::CUgraphRecaptureStatus,
) -> CUresult {
    // SAFETY: begun with a (stream, tally) that outlives the recapture.
    let (other, tally) = unsafe { &*data.cast::<(Stream, Arc<Tally>)>() };
    let launched = replayable(other, tally).map_err(|error| format!("{error:?}"));
    CALLBACKS_LAUNCH.lock().unwrap().push(launched);
    CUresult::CUDA_SUCCESS
}

#[test]
fn a_replayable_launch_from_a_recaptures_callback_is_refused_rather_than_waiting_for_itself() {
    // Alone in a process: the capture lock is process-wide.
    suite::alone_in_child!(
        a_replayable_launch_from_a_recaptures_callback_is_refused_rather_than_waiting_for_itself
    );
    const TEST: &str =
        "a_replayable_launch_from_a_recaptures_callback_is_refused_rather_than_waiting_for_itself";
    let context = context();
    if lacks_recapture(&context, TEST) {
        return;
    }
    let third = Tally::new();
    let in_callback = Arc::clone(&third);
    // The callback runs inside the driver's call that captures the changed node: under the lock
    // cuda-host's replayable launch holds while it adds the node.
    let returned = suite::wait::returns_within(Duration::from_secs(10), move || {
        let context = suite::context();
        let driver = context.driver();
        let stream = new_stream(&context);
        let (first, second) = (Tally::new(), Tally::new());
        let capture = Capture::begin(
            stream.as_raw(),
            CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        );
        replayable(&stream, &first).expect("added to the capture");
        let graph = capture.end().expect("a graph");
        // The callback runs only while the recapture lasts, within this closure.
        let data = (new_stream(&context), in_callback);
        // SAFETY: a live stream, not capturing, and a live graph; the callback's data outlives
        // the recapture.
        suite::ok("cuStreamBeginRecaptureToGraph", unsafe {
            driver.cuStreamBeginRecaptureToGraph(
                stream.as_raw(),
                CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                graph.0,
                Some(launches_on_another_stream),
                std::ptr::from_ref(&data).cast_mut().cast(),
            )
        });
        replayable(&stream, &second).expect("added to the recapture");
        let mut ended = std::ptr::null_mut();
        // SAFETY: the recapture begun above, on this thread; a valid out-pointer.
        let result = unsafe { driver.cuStreamEndCapture(stream.as_raw(), &mut ended) };
        data.0.synchronize().expect("synchronize");
        drop(graph);
        cuda_host::reclaim();
        result
    });
    assert_eq!(
        returned,
        Some(CUresult::CUDA_SUCCESS),
        "the recapture with a callback that calls cuda-host never ended"
    );
    let answers = CALLBACKS_LAUNCH.lock().unwrap().clone();
    assert_eq!(
        answers.len(),
        1,
        "the callback was called once: {answers:?}"
    );
    assert!(
        answers[0]
            .as_ref()
            .is_err_and(|error| error.contains("Reentered")),
        "the callback's launch was not refused as a reentry: {answers:?}"
    );
    assert_eq!(third.runs(), 0, "the refused launch ran");
    third.reclaim_until_dropped(1, "the refused launch's callable to be dropped");
}

//! Graphs own their host functions: the builder's callback, explicit host nodes, executables,
//! clones and replacements keep a callable alive exactly as long as something can run it, and
//! release it on a caller's thread. Every test holds [`suite::capture_lock`]: captures and
//! graph calls must not overlap a global-mode capture of another test.

use cuda_host::{
    Context, Error, Stream, StreamFlags, UserData, graph::CaptureMode, graph::Graph,
    graph::GraphBuilder, graph::HostCallable, host_launch, panics::HostFunctionPanic,
};
use cuda_host_sys::CUresult;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use suite::{Tally, capture_lock, context, hold_and_release, wait_until};

fn new_stream(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking).expect("stream")
}

/// A graph with one host node that counts its runs in `tally`.
fn counting_graph(context: &Context, tally: &Arc<Tally>) -> Graph {
    let graph = Graph::new(context).expect("graph");
    let probe = tally.probe();
    graph
        .add_host_node(&[], move || probe.ran())
        .expect("host node");
    graph
}

/// Gives a wrongly early release a chance to show, then checks that nothing was released.
fn assert_still_held(tally: &Tally, what: &str) {
    std::thread::sleep(Duration::from_millis(20));
    cuda_host::reclaim();
    assert_eq!(tally.drops(), 0, "{what}");
}

#[test]
fn a_captured_callback_runs_on_every_launch_and_is_dropped_after_the_last_executable() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let builder = GraphBuilder::begin(&stream, CaptureMode::Global).expect("capture begins");
    let probe = tally.probe();
    builder.callback(move || probe.ran()).expect("callback");
    let graph = builder.end().expect("capture ends");
    let executable = graph.instantiate().expect("instantiates");
    drop(graph);
    for _ in 0..5 {
        executable.launch(&stream).expect("launch");
    }
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), 5);
    assert_still_held(&tally, "released while an executable exists");

    drop(executable);
    tally.reclaim_until_dropped(1, "the callable to be released after the executable");
    let (ran_on, dropped_on) = (tally.run_threads()[0], tally.drop_threads()[0]);
    assert_ne!(
        dropped_on, ran_on,
        "dropped on the driver's host-function thread"
    );
    assert_eq!(dropped_on, std::thread::current().id());
}

#[test]
fn host_launch_on_a_builder_adds_a_callback_the_graph_owns() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let runs = Arc::new(AtomicUsize::new(0));
    let builder = GraphBuilder::begin(&stream, CaptureMode::ThreadLocal).expect("capture begins");
    let counter = Arc::clone(&runs);
    host_launch(&builder, move || {
        counter.fetch_add(1, Ordering::SeqCst);
    })
    .expect("forwarded to the builder");
    // The stream itself still refuses run-once host functions while it captures.
    assert!(matches!(
        host_launch(&stream, || {}),
        Err(Error::StreamCapturing { .. })
    ));
    let graph = builder.end().expect("capture ends");
    let executable = graph.instantiate().expect("instantiates");
    executable.launch(&stream).expect("launch");
    executable.launch(&stream).expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[test]
fn the_graph_dropped_during_a_long_host_function_frees_nothing_until_it_returns() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let (started, release) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let graph = Graph::new(&context).expect("graph");
    let (probe, node_started, node_release) =
        (tally.probe(), Arc::clone(&started), Arc::clone(&release));
    let data = vec![7u8; 4096];
    graph
        .add_host_node(&[], move || {
            node_started.store(true, Ordering::SeqCst);
            let deadline = std::time::Instant::now() + suite::TIMEOUT;
            while !node_release.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
                std::thread::yield_now();
            }
            // Still reading what it captured: nothing may have been freed.
            assert!(data.iter().all(|&byte| byte == 7));
            probe.ran();
        })
        .expect("host node");
    let executable = graph.instantiate().expect("instantiates");
    executable.launch(&stream).expect("launch");
    wait_until("the host function to start", || {
        started.load(Ordering::SeqCst)
    });

    drop(graph);
    drop(executable);
    assert_still_held(&tally, "freed while its host function was running");

    release.store(true, Ordering::SeqCst);
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), 1);
    tally.reclaim_until_dropped(1, "the callable to be released after it returned");
}

#[test]
fn two_executables_keep_the_callable_until_both_are_gone() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let graph = counting_graph(&context, &tally);
    let (first, second) = (graph.instantiate().unwrap(), graph.instantiate().unwrap());
    drop(graph);
    first.launch(&stream).unwrap();
    second.launch(&stream).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(tally.runs(), 2);

    drop(first);
    assert_still_held(&tally, "released while the second executable exists");
    second.launch(&stream).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(tally.runs(), 3);
    drop(second);
    tally.reclaim_until_dropped(1, "the callable to be released after both executables");
}

#[test]
fn a_clone_keeps_the_callable_after_the_original_is_gone() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let graph = counting_graph(&context, &tally);
    let clone = graph.try_clone().expect("clone");
    drop(graph);
    assert_still_held(&tally, "released while a clone exists");
    let executable = clone.instantiate().expect("the clone instantiates");
    executable.launch(&stream).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(tally.runs(), 1);
    drop((clone, executable));
    tally.reclaim_until_dropped(1, "the callable to be released after the clone");
}

#[test]
fn dependencies_order_host_nodes_on_every_launch() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let log = Arc::new(Mutex::new(Vec::new()));
    let graph = Graph::new(&context).expect("graph");
    let entry = |name: &'static str| {
        let log = Arc::clone(&log);
        move || log.lock().unwrap().push(name)
    };
    let first = graph.add_host_node(&[], entry("first")).unwrap();
    let second = graph.add_host_node(&[&first], entry("second")).unwrap();
    graph.add_host_node(&[&second], entry("third")).unwrap();
    let executable = graph.instantiate().unwrap();
    for _ in 0..3 {
        executable.launch(&stream).unwrap();
    }
    stream.synchronize().unwrap();
    assert_eq!(*log.lock().unwrap(), ["first", "second", "third"].repeat(3));
}

#[test]
fn a_callable_replaced_in_an_executable_runs_from_the_next_launch_and_the_old_one_is_released_when_unreachable()
 {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let (old, new) = (Tally::new(), Tally::new());
    let graph = Graph::new(&context).expect("graph");
    let probe = old.probe();
    let node = graph.add_host_node(&[], move || probe.ran()).unwrap();
    let executable = graph.instantiate().unwrap();
    executable.launch(&stream).unwrap();
    stream.synchronize().unwrap();
    assert_eq!((old.runs(), new.runs()), (1, 0));

    let probe = new.probe();
    executable
        .set_host_node_callable(&node, move || probe.ran())
        .expect("replaced in the executable");
    executable.launch(&stream).unwrap();
    executable.launch(&stream).unwrap();
    stream.synchronize().unwrap();
    assert_eq!((old.runs(), new.runs()), (1, 2));
    // The graph still runs the old one in new executables, so it must stay.
    let from_graph = graph.instantiate().unwrap();
    from_graph.launch(&stream).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(old.runs(), 2);
    drop((graph, from_graph));
    assert_still_held(
        &old,
        "the old callable released while the executable holds it",
    );

    drop(executable);
    old.reclaim_until_dropped(1, "the old callable to be released");
    new.reclaim_until_dropped(1, "the new callable to be released with the executable");
}

#[test]
fn a_callable_replaced_in_the_graph_is_read_back_and_new_executables_run_it() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let (old, new) = (Tally::new(), Tally::new());
    let graph = Graph::new(&context).expect("graph");
    let probe = old.probe();
    let node = graph.add_host_node(&[], move || probe.ran()).unwrap();
    let before = graph.instantiate().unwrap();

    let probe = new.probe();
    let replacement: HostCallable = Arc::new(move || probe.ran());
    node.set_callable_shared(Arc::clone(&replacement)).unwrap();
    let read_back = node.callable().unwrap().expect("a cuda-host callable");
    assert!(Arc::ptr_eq(&read_back, &replacement));
    drop((read_back, replacement));

    let after = graph.instantiate().unwrap();
    before.launch(&stream).unwrap();
    after.launch(&stream).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(
        (old.runs(), new.runs()),
        (1, 1),
        "each executable runs its own"
    );
    drop(before);
    old.reclaim_until_dropped(1, "the old callable, once no graph or executable has it");
    assert_eq!(new.drops(), 0);
    drop((graph, after));
    new.reclaim_until_dropped(1, "the new callable with the graph and its executable");
}

#[test]
fn a_panic_in_a_graph_host_node_is_reported_and_the_launch_goes_on() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let reports = Arc::new(Mutex::new(Vec::new()));
    let hook_reports = Arc::clone(&reports);
    cuda_host::panics::set_host_panic_hook(move |panic: &HostFunctionPanic<'_>| {
        if panic.message.starts_with("deliberate graph") {
            hook_reports
                .lock()
                .unwrap()
                .push((panic.message.to_owned(), panic.stream.is_none()));
        }
    });
    let tally = Tally::new();
    let graph = Graph::new(&context).unwrap();
    let panicking = graph
        .add_host_node(&[], || panic!("deliberate graph node panic"))
        .unwrap();
    let probe = tally.probe();
    graph
        .add_host_node(&[&panicking], move || probe.ran())
        .unwrap();
    let executable = graph.instantiate().unwrap();
    executable.launch(&stream).unwrap();
    executable.launch(&stream).unwrap();
    stream.synchronize().expect("the stream goes on");
    cuda_host::panics::clear_host_panic_hook();
    assert_eq!(tally.runs(), 2);
    assert_eq!(
        *reports.lock().unwrap(),
        vec![("deliberate graph node panic".to_owned(), true); 2]
    );
}

static COPIED_SUM: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn sum_32_bytes(data: *mut c_void) {
    // SAFETY: the node was added with 32 copied bytes.
    let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), 32) };
    let sum: usize = bytes.iter().map(|&byte| usize::from(byte)).sum();
    COPIED_SUM.fetch_add(sum, Ordering::SeqCst);
}

#[test]
fn copied_bytes_live_with_the_graph_for_every_launch() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let mut bytes = vec![1u8; 32];
    let builder = GraphBuilder::begin(&stream, CaptureMode::Global).unwrap();
    // SAFETY: the function reads exactly the 32 bytes it is given and keeps no pointer.
    unsafe { builder.callback_raw(sum_32_bytes, UserData::Copied(&bytes)) }.unwrap();
    bytes.fill(100);
    drop(bytes);
    let graph = builder.end().unwrap();
    let executable = graph.instantiate().unwrap();
    drop(graph);
    for _ in 0..4 {
        executable.launch(&stream).unwrap();
    }
    stream.synchronize().unwrap();
    assert_eq!(COPIED_SUM.load(Ordering::SeqCst), 4 * 32);
}

#[test]
fn an_abandoned_builder_ends_the_capture_and_releases_its_callables() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    {
        let builder = GraphBuilder::begin(&stream, CaptureMode::Global).unwrap();
        let probe = tally.probe();
        builder.callback(move || probe.ran()).unwrap();
    }
    tally.reclaim_until_dropped(1, "the discarded graph's callable to be released");
    assert_eq!(stream.capture_state().unwrap(), None, "the capture ended");
    let after = tally.probe();
    host_launch(&stream, move || after.ran()).expect("the stream works again");
    stream.synchronize().unwrap();
    assert_eq!(tally.runs(), 1, "the captured callback never ran");
}

#[test]
fn a_callback_on_an_invalidated_capture_is_refused() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let builder = GraphBuilder::begin(&stream, CaptureMode::Global).unwrap();
    // Synchronizing a capturing stream invalidates the capture.
    let driver = context.driver();
    // SAFETY: a valid stream.
    let result = unsafe { driver.cuStreamSynchronize(stream.as_raw()) };
    assert_ne!(result, CUresult::CUDA_SUCCESS);
    let tally = Tally::new();
    let probe = tally.probe();
    let error = builder.callback(move || probe.ran()).unwrap_err();
    assert_eq!(error, Error::CaptureNotActive { invalidated: true });
    // Not dropped on a thread capturing through a builder: a `Drop` that freed memory would
    // break its capture.
    assert_eq!(tally.drops(), 0, "dropped on the capturing thread");
    let ended = builder.end().unwrap_err();
    assert_eq!(
        ended.driver_result(),
        Some(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
    );
    tally.reclaim_until_dropped(
        1,
        "the refused callable to be dropped once the capture ended",
    );
}

#[test]
fn failures_while_attaching_a_callable_leave_no_leak_and_nothing_attached() {
    let _alone = capture_lock();
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            "failures_while_attaching_a_callable_leave_no_leak_and_nothing_attached",
            "fault injection needs the software driver",
        );
    };
    let context = context();
    let stream = new_stream(&context);
    let (_, alive_before) = controls.user_object_stats();
    let builder = GraphBuilder::begin(&stream, CaptureMode::ThreadLocal).unwrap();
    let mut refused = Vec::new();
    for (entry, failing) in [
        (c"cuUserObjectCreate", "creating the user object"),
        (c"cuGraphRetainUserObject", "moving it into the graph"),
        (c"cuLaunchHostFunc", "adding the node"),
    ] {
        let tally = Tally::new();
        let probe = tally.probe();
        controls.fail_next_calls(entry, 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        let error = builder.callback(move || probe.ran()).unwrap_err();
        assert_eq!(
            error.driver_result(),
            Some(CUresult::CUDA_ERROR_OUT_OF_MEMORY),
            "{failing}"
        );
        // Not dropped on a thread that is capturing: a Drop could invalidate the capture.
        assert_eq!(tally.drops(), 0, "{failing}: dropped during the capture");
        refused.push((tally, failing));
    }
    let graph = builder.end().unwrap();
    for (tally, failing) in refused {
        tally.reclaim_until_dropped(1, failing);
        assert_eq!(tally.runs(), 0);
    }
    assert!(graph.host_nodes().unwrap().is_empty(), "no node was added");
    drop(graph);
    wait_until("no user object to stay alive", || {
        cuda_host::reclaim();
        controls.user_object_stats().1 <= alive_before
    });
}

#[test]
fn a_held_launch_keeps_the_callable_of_a_destroyed_executable() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let graph = counting_graph(&context, &tally);
    let executable = graph.instantiate().unwrap();
    drop(graph);
    hold_and_release(
        &stream,
        || {
            executable.launch(&stream).unwrap();
            drop(executable);
        },
        || assert_still_held(&tally, "released while a launch was in flight"),
        Stream::synchronize,
    )
    .unwrap();
    assert_eq!(tally.runs(), 1);
    tally.reclaim_until_dropped(1, "the callable to be released after the launch");
}

#[test]
fn replacing_an_executables_callable_before_every_launch_keeps_a_bounded_number_alive() {
    const ITERATIONS: usize = 50;
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let graph = Graph::new(&context).expect("graph");
    let node = graph.add_host_node(&[], || {}).expect("host node");
    let executable = graph.instantiate().expect("instantiates");
    let tally = Tally::new();
    for iteration in 0..ITERATIONS {
        let probe = tally.probe();
        executable
            .set_host_node_callable(&node, move || probe.ran())
            .expect("replaced");
        executable.launch(&stream).expect("launch");
        stream.synchronize().expect("synchronize");
        cuda_host::reclaim();
        let alive = iteration + 1 - tally.drops();
        assert!(
            alive <= 2,
            "{alive} replaced callables alive after {} replacements",
            iteration + 1
        );
    }
    assert_eq!(tally.runs(), ITERATIONS);
    drop((executable, graph));
    tally.reclaim_until_dropped(ITERATIONS, "every replacement to be released");
}

#[test]
fn a_graph_callable_whose_drop_panics_is_reported_on_a_callers_thread_and_the_drain_goes_on() {
    // Alone in a process: the hook is process-wide. The user object's destructor, which the
    // driver calls on its own thread, only hands the callable on; its Drop runs in a drain.
    suite::alone_in_child!(
        a_graph_callable_whose_drop_panics_is_reported_on_a_callers_thread_and_the_drain_goes_on
    );
    struct PanicsOnDrop;
    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            panic!("deliberate panic in a graph callable's Drop");
        }
    }
    let reports: Arc<Mutex<Vec<(String, std::thread::ThreadId)>>> = Arc::default();
    let hook_reports = Arc::clone(&reports);
    cuda_host::panics::set_host_panic_hook(move |panic: &HostFunctionPanic<'_>| {
        hook_reports
            .lock()
            .unwrap()
            .push((panic.message.to_owned(), std::thread::current().id()));
    });
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let graph = Graph::new(&context).expect("graph");
    let (probe, value) = (tally.probe(), PanicsOnDrop);
    graph
        .add_host_node(&[], move || {
            let _ = &value;
            probe.ran();
        })
        .expect("host node");
    let executable = graph.instantiate().expect("instantiates");
    executable.launch(&stream).expect("launch");
    stream.synchronize().expect("synchronize");
    drop((graph, executable));
    wait_until("the callable's panicking Drop to be reported", || {
        let reclaimed = std::panic::catch_unwind(cuda_host::reclaim);
        assert!(reclaimed.is_ok(), "reclaim unwound");
        !reports.lock().unwrap().is_empty()
    });
    assert_eq!(tally.runs(), 1);
    assert_eq!(
        tally.drops(),
        1,
        "the callable's other values were still dropped"
    );
    let reports = reports.lock().unwrap();
    assert_eq!(reports[0].0, "deliberate panic in a graph callable's Drop");
    assert_eq!(
        reports[0].1,
        std::thread::current().id(),
        "reported off this thread"
    );
    // The stream goes on.
    let after = Tally::new();
    let probe = after.probe();
    host_launch(&stream, move || probe.ran()).expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(after.runs(), 1);
}

/// Adding a callback's node holds the capture lock; when the node cannot be added and the
/// graph's reference to the callable cannot be released either, cuda-host logs that under the
/// lock. The logger is user code: one that ends a capture through cuda-host (a builder's end
/// takes the same lock) waits for itself.
#[test]
fn a_logger_run_when_a_callbacks_node_cannot_be_added_may_end_a_capture_through_cuda_host() {
    let test =
        "a_logger_run_when_a_callbacks_node_cannot_be_added_may_end_a_capture_through_cuda_host";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "failing driver calls is a control of the software driver",
        );
    };
    // Alone in a process: a logger is set once per process.
    suite::alone_in_child!(
        a_logger_run_when_a_callbacks_node_cannot_be_added_may_end_a_capture_through_cuda_host
    );
    static STREAM: OnceLock<Stream> = OnceLock::new();
    static ENDED: AtomicBool = AtomicBool::new(false);
    struct CapturingLogger;
    impl log::Log for CapturingLogger {
        fn enabled(&self, _: &log::Metadata<'_>) -> bool {
            true
        }
        fn log(&self, record: &log::Record<'_>) {
            if !record.args().to_string().contains("could not be released") {
                return;
            }
            let stream = STREAM.get().expect("the logger's stream");
            let builder =
                GraphBuilder::begin(stream, CaptureMode::Relaxed).expect("the logger's capture");
            drop(builder.end().expect("the logger's capture ends"));
            ENDED.store(true, Ordering::SeqCst);
        }
        fn flush(&self) {}
    }
    let context = context();
    STREAM.set(new_stream(&context)).expect("set once");
    log::set_logger(&CapturingLogger).expect("the only logger");
    log::set_max_level(log::LevelFilter::Trace);
    let returned = Arc::new(AtomicBool::new(false));
    let done = Arc::clone(&returned);
    let adding = std::thread::spawn(move || {
        let stream = new_stream(&context);
        let builder = GraphBuilder::begin(&stream, CaptureMode::Relaxed).expect("capture");
        // The node cannot be added, and the graph cannot let go of the callable's user object.
        controls.fail_next_calls(c"cuLaunchHostFunc", 1, CUresult::CUDA_ERROR_INVALID_VALUE);
        controls.fail_next_calls(
            c"cuGraphReleaseUserObject",
            1,
            CUresult::CUDA_ERROR_INVALID_VALUE,
        );
        let result = builder.callback(|| {});
        done.store(true, Ordering::SeqCst);
        drop(builder);
        result
    });
    wait_until(
        "the callback to return (not wait for its own logger)",
        || returned.load(Ordering::SeqCst),
    );
    let result = adding.join().expect("the adding thread");
    assert!(result.is_err(), "the node was added: {result:?}");
    assert!(ENDED.load(Ordering::SeqCst), "the logger ran");
}

/// A thread of other code capturing a stream of `context` in global mode until the result is
/// dropped; [`OtherCapture::end`] tells whether the capture stayed valid.
struct OtherCapture {
    end: std::sync::mpsc::Sender<()>,
    ended: std::thread::JoinHandle<Result<(), CUresult>>,
}

impl OtherCapture {
    fn begin(context: &Context) -> OtherCapture {
        let (begun_tx, begun) = std::sync::mpsc::channel();
        let (end, end_rx) = std::sync::mpsc::channel::<()>();
        let context = context.clone();
        let ended = std::thread::spawn(move || {
            let stream = new_stream(&context);
            let capture = suite::capture::Capture::begin(
                stream.as_raw(),
                cuda_host_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            );
            begun_tx.send(()).unwrap();
            let _ = end_rx.recv();
            capture.end().map(drop).map_err(|(result, _)| result)
        });
        begun.recv().expect("the other thread begins its capture");
        OtherCapture { end, ended }
    }

    /// Ends the capture: `Err` with the driver's answer when it was invalidated.
    fn end(self) -> Result<(), CUresult> {
        self.end.send(()).unwrap();
        self.ended.join().expect("the capturing thread")
    }
}

#[test]
fn a_replaced_callable_lives_while_its_pending_launch_can_run_it_though_another_thread_captures() {
    // Alone in a process: another test's allocation would invalidate the global capture.
    suite::alone_in_child!(
        a_replaced_callable_lives_while_its_pending_launch_can_run_it_though_another_thread_captures
    );
    let context = context();
    let stream = new_stream(&context);
    let graph = Graph::new(&context).expect("graph");
    let node = graph.add_host_node(&[], || {}).expect("host node");
    let executable = graph.instantiate().expect("instantiates");
    let pending = Tally::new();
    let probe = pending.probe();
    executable
        .set_host_node_callable(&node, move || probe.ran())
        .expect("set");
    let gate = suite::Gate::new(&context);
    gate.hold(&stream);
    executable.launch(&stream).expect("launch");
    // Replaced while the launch that runs it waits at the gate: it waits for that launch's fence.
    executable
        .set_host_node_callable(&node, || {})
        .expect("replaced");
    // Other code captures in global mode: a fence query in the default capture interaction mode
    // would be refused (and would invalidate that capture).
    let other = OtherCapture::begin(&context);
    executable
        .set_host_node_callable(&node, || {})
        .expect("replaced again");
    executable
        .launch(&new_stream(&context))
        .expect("launch on another stream");
    cuda_host::reclaim();
    assert_eq!(
        pending.drops(),
        0,
        "the callable a pending launch runs was released while it waits"
    );
    assert_eq!(
        other.end(),
        Ok(()),
        "the executable's calls invalidated another thread's global capture"
    );
    gate.open();
    stream.synchronize().expect("synchronize");
    assert_eq!(
        pending.runs(),
        1,
        "the pending launch ran the callable it was launched with"
    );
    // The next call of the executable sees that launch finished.
    executable.launch(&stream).expect("launch");
    pending.reclaim_until_dropped(
        1,
        "the replaced callable to be released once its launch ran",
    );
    drop((executable, graph));
}

#[test]
fn replacing_and_launching_leave_another_threads_global_capture_intact() {
    // Alone in a process: another test's allocation would invalidate the global capture.
    suite::alone_in_child!(replacing_and_launching_leave_another_threads_global_capture_intact);
    let context = context();
    let stream = new_stream(&context);
    let graph = Graph::new(&context).expect("graph");
    let node = graph.add_host_node(&[], || {}).expect("host node");
    let executable = graph.instantiate().expect("instantiates");
    let tally = Tally::new();
    let probe = tally.probe();
    executable
        .set_host_node_callable(&node, move || probe.ran())
        .expect("set");
    executable.launch(&stream).expect("launch");
    stream.synchronize().expect("synchronize");
    let other = OtherCapture::begin(&context);
    // Each looks at the fences of the launches before: none may break the capture.
    let probe = tally.probe();
    executable
        .set_host_node_callable(&node, move || probe.ran())
        .expect("replaced");
    executable.launch(&stream).expect("launch");
    executable
        .set_host_node_callable(&node, || {})
        .expect("replaced again");
    assert_eq!(
        other.end(),
        Ok(()),
        "the executable's calls invalidated another thread's global capture"
    );
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), 2);
    // The next call of the executable sees the launches before the replacements finished.
    executable.launch(&stream).expect("launch");
    tally.reclaim_until_dropped(2, "both replaced callables to be released");
    drop((executable, graph));
}

#[test]
fn a_replaced_callable_lives_while_a_launch_queued_before_its_context_failed_can_run_it() {
    let test =
        "a_replaced_callable_lives_while_a_launch_queued_before_its_context_failed_can_run_it";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "a sticky error on demand is a control of the software driver",
        );
    };
    let context =
        controls.fresh_context(&cuda_host::Device::get(&suite::test_driver().driver, 0).unwrap());
    let stream = new_stream(&context);
    let graph = Graph::new(&context).expect("graph");
    let node = graph.add_host_node(&[], || {}).expect("host node");
    let executable = graph.instantiate().expect("instantiates");
    let pending = Tally::new();
    let probe = pending.probe();
    executable
        .set_host_node_callable(&node, move || probe.ran())
        .expect("set");
    let gate = suite::Gate::new(&context);
    gate.hold(&stream);
    executable.launch(&stream).expect("launch");
    executable
        .set_host_node_callable(&node, || {})
        .expect("replaced");
    // The context fails while the launch waits: the driver still calls the host nodes queued
    // before the failure, and a fence query answers the failure.
    controls.set_sticky_error(&context, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    let _ = executable.set_host_node_callable(&node, || {});
    let _ = executable.launch(&stream);
    cuda_host::reclaim();
    assert_eq!(
        pending.drops(),
        0,
        "the callable a pending launch runs was released when its fence's query failed"
    );
    gate.open();
    let _ = stream.synchronize();
    wait_until("the pending launch to be called", || {
        controls.live_objects().pending_host_functions == 0
    });
    assert_eq!(pending.drops(), 0, "released while the executable lives");
    drop((executable, graph));
    pending.reclaim_until_dropped(
        1,
        "the replaced callable to be released with the executable",
    );
}

#[test]
fn a_fence_other_codes_capture_took_is_never_queried() {
    let test = "a_fence_other_codes_capture_took_is_never_queried";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "a capture begun at a given call is a control of the software driver",
        );
    };
    // Alone in a process: another test's allocation would invalidate the global capture.
    suite::alone_in_child!(a_fence_other_codes_capture_took_is_never_queried);
    let context = context();
    let stream = new_stream(&context);
    let graph = Graph::new(&context).expect("graph");
    let node = graph.add_host_node(&[], || {}).expect("host node");
    let executable = graph.instantiate().expect("instantiates");
    let tally = Tally::new();
    let probe = tally.probe();
    executable
        .set_host_node_callable(&node, move || probe.ran())
        .expect("set");
    // Other code begins capturing the stream between the launch and its fence's record.
    controls.begin_capture_at_next_call(
        c"cuEventRecord",
        &stream,
        cuda_host_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
    );
    executable
        .launch(&stream)
        .expect("launched before the capture began");
    assert_eq!(
        suite::capture::is_capturing(stream.as_raw()).1,
        cuda_host_sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE,
        "the capture began at the fence's record"
    );
    // A replacement looks at the fences: querying the one the capture took would invalidate it.
    executable
        .set_host_node_callable(&node, || {})
        .expect("replaced");
    let mut captured = std::ptr::null_mut();
    // SAFETY: a live stream and a valid out-pointer.
    let ended = unsafe {
        suite::test_driver()
            .driver
            .cuStreamEndCapture(stream.as_raw(), &mut captured)
    };
    assert_eq!(ended, CUresult::CUDA_SUCCESS, "the capture was invalidated");
    drop(suite::capture::Graph(captured));
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), 1);
    assert_still_held(
        &tally,
        "a callable whose launch's fence a capture took was released",
    );
    drop((executable, graph));
    tally.reclaim_until_dropped(1, "the callable to be released with the executable");
}

#[test]
fn a_replaced_callable_is_dropped_on_the_thread_that_set_it() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let graph = Graph::new(&context).expect("graph");
    graph.add_host_node(&[], || {}).expect("host node");
    let executable = graph.instantiate().expect("instantiates");
    let tally = Tally::new();
    let (set_tx, set) = std::sync::mpsc::channel();
    let (reclaim_tx, reclaim_rx) = std::sync::mpsc::channel::<()>();
    let probe = tally.probe();
    let setter = std::thread::spawn(move || {
        let node = graph.host_nodes().expect("host nodes")[0];
        executable
            .set_host_node_callable(&node, move || probe.ran())
            .expect("set on another thread");
        set_tx.send((graph, executable)).unwrap();
        reclaim_rx.recv().unwrap();
        cuda_host::reclaim();
    });
    let (graph, executable) = set.recv().unwrap();
    let node = graph.host_nodes().expect("host nodes")[0];
    executable.launch(&stream).expect("launch");
    stream.synchronize().expect("synchronize");
    // Replaced here once its launch finished: its Drop is the setting thread's, which lives.
    executable
        .set_host_node_callable(&node, || {})
        .expect("replaced");
    executable.launch(&stream).expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), 1);
    assert_still_held(&tally, "dropped on a thread that did not set it");
    let setter_id = setter.thread().id();
    reclaim_tx.send(()).unwrap();
    setter.join().expect("the setting thread");
    assert_eq!(tally.drops(), 1, "the setting thread's reclaim dropped it");
    assert_eq!(tally.drop_threads(), vec![setter_id]);
    drop((executable, graph));
}

#[test]
fn a_callable_replaced_while_its_thread_captures_through_a_builder_is_dropped_after_the_capture() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let graph = Graph::new(&context).expect("graph");
    let node = graph.add_host_node(&[], || {}).expect("host node");
    let executable = graph.instantiate().expect("instantiates");
    let tally = Tally::new();
    let probe = tally.probe();
    executable
        .set_host_node_callable(&node, move || probe.ran())
        .expect("set");
    executable.launch(&stream).expect("launch");
    stream.synchronize().expect("synchronize");
    let captured = new_stream(&context);
    let builder = GraphBuilder::begin(&captured, CaptureMode::Relaxed).expect("capture begins");
    // Its launch finished: the replaced callable is unreachable at once, but a Drop that frees
    // memory would invalidate this thread's capture.
    executable
        .set_host_node_callable(&node, || {})
        .expect("replaced");
    executable.launch(&stream).expect("launch");
    assert_eq!(tally.drops(), 0, "dropped while its thread captures");
    builder.end().expect("the capture ends in a graph");
    tally.reclaim_until_dropped(1, "the replaced callable to be dropped after the capture");
    drop((executable, graph));
}

#[test]
fn a_replaced_callable_another_threads_launch_finds_unreachable_is_dropped_on_the_thread_that_set_it()
 {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let graph = Graph::new(&context).expect("graph");
    let node = graph.add_host_node(&[], || {}).expect("host node");
    let executable = graph.instantiate().expect("instantiates");
    let probe = tally.probe();
    executable
        .set_host_node_callable(&node, move || probe.ran())
        .expect("replaced in the executable");
    executable.launch(&stream).expect("launch");
    // Replaced while the launch before may run it: it waits for that launch's fence.
    executable
        .set_host_node_callable(&node, || {})
        .expect("replaced again");
    drop(graph);
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                stream.synchronize().expect("synchronize");
                // This launch finds the replaced callable unreachable and lets it go.
                executable.launch(&stream).expect("launch");
                stream.synchronize().expect("synchronize");
                drop(executable);
                cuda_host::reclaim();
            })
            .join()
            .expect("the other thread");
    });
    assert_eq!(tally.runs(), 1);
    tally.reclaim_until_dropped(1, "the replaced callable");
    assert_eq!(
        tally.drop_threads(),
        [std::thread::current().id()],
        "the replaced callable was dropped off the thread that set it"
    );
}

#[test]
fn callables_set_on_an_executable_whose_drops_panic_are_each_reported_when_it_goes() {
    // Alone in a process: the hook is process-wide, and a panic during another's unwinding
    // aborts the process.
    suite::alone_in_child!(
        callables_set_on_an_executable_whose_drops_panic_are_each_reported_when_it_goes
    );
    struct PanicsOnDrop;
    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            panic!("deliberate panic in an executable's callable's Drop");
        }
    }
    let reports = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&reports);
    cuda_host::panics::set_host_panic_hook(move |panic: &HostFunctionPanic<'_>| {
        if panic.message == "deliberate panic in an executable's callable's Drop" {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    let context = context();
    let tally = Tally::new();
    let graph = Graph::new(&context).expect("graph");
    let nodes = [
        graph.add_host_node(&[], || {}).expect("host node"),
        graph.add_host_node(&[], || {}).expect("host node"),
    ];
    let executable = graph.instantiate().expect("instantiates");
    for node in &nodes {
        let (probe, value) = (tally.probe(), PanicsOnDrop);
        executable
            .set_host_node_callable(node, move || {
                let _ = &value;
                probe.ran();
            })
            .expect("the executable's callable");
    }
    drop((executable, graph));
    // The executable's callables are held side by side: a drop that unwound through the others'
    // would panic again during the unwinding, and abort.
    wait_until("both callables' panicking Drops to be reported", || {
        let reclaimed = std::panic::catch_unwind(cuda_host::reclaim);
        assert!(reclaimed.is_ok(), "reclaim unwound");
        reports.load(Ordering::SeqCst) == 2
    });
    tally.reclaim_until_dropped(2, "the callables' other values");
}

#[test]
fn an_executable_launched_on_the_legacy_stream_while_a_blocking_stream_captures_is_refused_and_the_capture_kept()
 {
    let _alone = capture_lock();
    let context = context();
    let blocking = Stream::new(&context, StreamFlags::Blocking).expect("stream");
    let tally = Tally::new();
    let graph = counting_graph(&context, &tally);
    let executable = graph.instantiate().expect("instantiates");
    let builder = GraphBuilder::begin(&blocking, CaptureMode::Global).expect("capture begins");
    // The driver would answer CUDA_ERROR_STREAM_CAPTURE_IMPLICIT and invalidate the capture.
    let refused = executable
        .launch(&Stream::legacy(&context))
        .expect_err("refused while a blocking stream of its context captures");
    assert_eq!(
        refused,
        Error::StreamCapturing {
            status: cuda_host::graph::CaptureState::Implicit
        }
    );
    builder.end().expect("the capture ends in a graph");
    executable
        .launch(&Stream::legacy(&context))
        .expect("launches once the capture ended");
    Stream::legacy(&context).synchronize().expect("synchronize");
    assert_eq!(tally.runs(), 1);
}

#[test]
fn a_callable_set_on_an_updated_executable_lives_while_its_launch_pends_after_the_executable_went()
{
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let (a, b) = (Tally::new(), Tally::new());
    let graph_a = counting_graph(&context, &a);
    let graph_b = counting_graph(&context, &b);
    let executable = graph_a.instantiate().expect("instantiates");
    executable
        .update(&graph_b)
        .expect("updated from a graph of the same shape");
    drop(graph_b);
    executable.launch(&stream).expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(
        (a.runs(), b.runs()),
        (0, 1),
        "the updated executable runs the other graph's callable"
    );
    // Set after the update: only the executable's own user object keeps it for its launches.
    let set = Tally::new();
    let probe = set.probe();
    let node = graph_a.host_nodes().expect("nodes").remove(0);
    executable
        .set_host_node_callable(&node, move || probe.ran())
        .expect("set");
    let gate = suite::Gate::new(&context);
    gate.hold(&stream);
    executable.launch(&stream).expect("launch");
    drop(executable);
    assert_still_held(
        &set,
        "the callable a pending launch runs went with the executable",
    );
    gate.open();
    stream.synchronize().expect("synchronize");
    assert_eq!(
        set.runs(),
        1,
        "the pending launch ran the callable set on it"
    );
    set.reclaim_until_dropped(1, "the callable to be released once its launch ran");
    drop(graph_a);
    b.reclaim_until_dropped(1, "the other graph's callable to go with the executable");
}

#[test]
fn an_update_refuses_engine_nodes_another_context_and_another_shape_and_changes_nothing() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let a = Tally::new();
    let graph = counting_graph(&context, &a);
    let executable = graph.instantiate().expect("instantiates");

    let engine = Graph::new(&context).expect("graph");
    engine
        .add_engine_host_node(&[], || {})
        .expect("engine node");
    assert!(matches!(
        executable.update(&engine),
        Err(Error::InvalidArgument { .. })
    ));
    let two = Graph::new(&context).expect("graph");
    let first = two.add_host_node(&[], || {}).expect("host node");
    two.add_host_node(&[&first], || {}).expect("host node");
    match executable.update(&two) {
        Err(Error::Driver(error)) => assert_eq!(
            error.result(),
            CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,
            "{error}"
        ),
        other => panic!("an update from another shape answered {other:?}"),
    }
    if let Some(controls) = suite::software::controls() {
        let device = cuda_host::Device::get(context.driver(), 0).expect("device");
        let fresh = controls.fresh_context(&device);
        let elsewhere = counting_graph(&fresh, &Tally::new());
        assert!(matches!(
            executable.update(&elsewhere),
            Err(Error::InvalidArgument { .. })
        ));
    }
    executable.launch(&stream).expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(
        a.runs(),
        1,
        "the refused updates left the executable as it was"
    );

    let engine_executable = engine.instantiate().expect("instantiates");
    assert!(matches!(
        engine_executable.update(&graph),
        Err(Error::InvalidArgument { .. })
    ));
}

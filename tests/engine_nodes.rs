//! The polled engine's host nodes in graphs (`Graph::add_engine_host_node`,
//! `GraphBuilder::begin_with_engine`): on every launch of an executable made through cuda-host
//! the engine runs the node's callable in graph order, with the work around it; executables of
//! one graph run at once on their own words; an executable outlives its graph; callables are
//! replaced per graph and per executable for later launches only; a failure lets pending launches
//! go; an executable the driver made from the raw graph never waits at the node; nothing is
//! dropped on the engine's thread. Every test holds [`suite::capture_lock`]: captures and graph
//! calls must not overlap a global-mode capture of another test.

use cuda_host::{
    Error, Stream, graph::CaptureMode, graph::Graph, graph::GraphBuilder, graph::GraphExec,
    metrics, options::HostEngine, panics::HostFunctionPanic, reclaim,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use suite::engine_graphs::{counting_graph, launch_taken_by_a_capture, new_stream};
use suite::{Gate, MappedWords, Tally, capture_lock, context, wait_until};

/// Enqueues on `stream` (capturing) a device write of `value` to the word at `index`: a memory
/// operation, which a graph replays as it was captured.
fn write_value(words: &MappedWords, stream: &Stream, index: usize, value: u32) {
    let driver = stream.context().driver();
    // SAFETY: the address is pinned, device-mapped memory of the stream's context.
    let written = unsafe {
        driver.cuStreamWriteValue32_v2(stream.as_raw(), words.device_address(index), value, 0)
    };
    driver
        .check("cuStreamWriteValue32_v2", written)
        .expect("write enqueued");
}

#[test]
fn a_thousand_replays_run_the_node_a_thousand_times_in_order_with_the_work_around_it() {
    const REPLAYS: usize = 1_000;
    // Words the graph sets before the node and after it, which the node clears.
    const BEFORE: usize = 0;
    const AFTER: usize = 1;
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let kernels = (suite::test_driver().kind == suite::DriverKind::Real).then(|| {
        context.bind_to_thread().expect("context binds");
        suite::kernels::Kernels::load(context.driver()).expect("PTX loads")
    });
    let kernel = |stream: &Stream| {
        if let Some(kernels) = &kernels {
            // SAFETY: `empty_kernel` takes no parameters.
            unsafe { kernels.launch(kernels.empty_kernel, 1, 1, stream.as_raw(), &mut []) }
                .expect("kernel enqueued");
        }
    };
    let words = Arc::new(MappedWords::new(&context, 2));
    let (runs, disorder) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let builder = GraphBuilder::begin_with_engine(&stream, CaptureMode::Global, HostEngine::Polled)
        .expect("capture begins");
    kernel(builder.stream());
    write_value(&words, builder.stream(), BEFORE, 1);
    let (seen, counter, out_of_order) =
        (Arc::clone(&words), Arc::clone(&runs), Arc::clone(&disorder));
    builder
        .callback(move || {
            let run = counter.fetch_add(1, Ordering::SeqCst);
            // The write before the node ran in this launch, the write after it in the last one.
            if seen.get(BEFORE) != 1 || (run > 0 && seen.get(AFTER) != 1) {
                out_of_order.fetch_add(1, Ordering::SeqCst);
            }
            seen.set(BEFORE, 0);
            seen.set(AFTER, 0);
        })
        .expect("engine callback");
    write_value(&words, builder.stream(), AFTER, 1);
    kernel(builder.stream());
    let graph = builder.end().expect("capture ends");
    let nodes = graph.host_nodes().expect("host nodes");
    assert_eq!(nodes.len(), 1);
    assert!(
        nodes[0].runs_on_engine(),
        "the captured node is the engine's"
    );
    let executable = graph.instantiate().expect("instantiates");
    for _ in 0..REPLAYS {
        executable.launch(&stream).expect("launch");
    }
    stream.synchronize().expect("synchronize");
    assert_eq!(runs.load(Ordering::SeqCst), REPLAYS, "runs");
    assert_eq!(words.get(AFTER), 1, "the last write ran after the last run");
    assert_eq!(
        disorder.load(Ordering::SeqCst),
        0,
        "runs out of graph order"
    );
}

#[test]
fn two_executables_of_one_graph_replayed_at_once_on_two_streams_each_run_their_own_node() {
    const REPLAYS: usize = 300;
    let _alone = capture_lock();
    let context = context();
    let graph = Graph::new(&context).expect("graph");
    let node = graph.add_engine_host_node(&[], || {}).expect("engine node");
    let tallies = [Tally::new(), Tally::new()];
    let executables: Vec<GraphExec> = tallies
        .iter()
        .map(|tally| {
            let executable = graph.instantiate().expect("instantiates");
            let probe = tally.probe();
            executable
                .set_host_node_callable(&node, move || probe.ran())
                .expect("its own callable");
            executable
        })
        .collect();
    std::thread::scope(|scope| {
        for executable in executables {
            let context = &context;
            scope.spawn(move || {
                let stream = new_stream(context);
                for _ in 0..REPLAYS {
                    executable.launch(&stream).expect("launch");
                }
                stream.synchronize().expect("synchronize");
            });
        }
    });
    for tally in &tallies {
        assert_eq!(tally.runs(), REPLAYS, "each executable ran its own node");
    }
}

#[test]
fn an_executable_replayed_after_its_graph_was_dropped_runs_the_node_and_drops_it_here() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let executable = counting_graph(&context, &tally)
        .instantiate()
        .expect("instantiates");
    for _ in 0..10 {
        executable.launch(&stream).expect("launch");
    }
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), 10);
    reclaim();
    assert_eq!(tally.drops(), 0, "dropped while the executable lives");
    drop(executable);
    tally.reclaim_until_dropped(1, "the callable after its executable");
    let ran_on = tally.run_threads()[0];
    assert_ne!(ran_on, std::thread::current().id(), "ran on the caller");
    assert_eq!(
        tally.drop_threads(),
        [std::thread::current().id()],
        "dropped on the engine's thread"
    );
}

#[test]
fn a_callable_replaced_in_the_graph_or_an_executable_runs_from_the_next_launch_on() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let (first, second, third) = (Tally::new(), Tally::new(), Tally::new());
    let graph = counting_graph(&context, &first);
    let node = graph.host_nodes().expect("nodes")[0];
    let before = graph.instantiate().expect("instantiates");
    let probe = second.probe();
    node.set_callable(move || probe.ran())
        .expect("replaced in the graph");
    let after = graph.instantiate().expect("instantiates");
    before.launch(&stream).expect("launch");
    after.launch(&stream).expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!((first.runs(), second.runs()), (1, 1), "each its own");

    // A launch queued before the executable's replacement runs the callable it queued.
    let gate = Gate::new(&context);
    gate.hold(&stream);
    after.launch(&stream).expect("launch");
    let probe = third.probe();
    after
        .set_host_node_callable(&node, move || probe.ran())
        .expect("replaced in the executable");
    after.launch(&stream).expect("launch");
    gate.open();
    stream.synchronize().expect("synchronize");
    assert_eq!((second.runs(), third.runs()), (2, 1));
    // The graph keeps its own; the first executable its graph's first.
    let callable = node.callable().expect("callable").expect("cuda-host's");
    callable();
    assert_eq!(second.runs(), 3, "the graph's callable is the second");
    drop(callable);
    drop((before, after, graph));
    for tally in [&first, &second, &third] {
        tally.reclaim_until_dropped(1, "every callable once nothing holds it");
    }
}

#[test]
fn a_clone_runs_its_own_engine_node() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let graph = counting_graph(&context, &tally);
    let clone = graph.try_clone().expect("clone");
    drop(graph);
    let nodes = clone.host_nodes().expect("nodes");
    assert!(nodes.len() == 1 && nodes[0].runs_on_engine());
    let executable = clone.instantiate().expect("instantiates");
    executable.launch(&stream).expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), 1);
}

#[test]
fn an_executable_the_driver_made_from_the_raw_graph_never_waits_at_the_node() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let graph = counting_graph(&context, &tally);
    let driver = context.driver();
    let mut raw = std::ptr::null_mut();
    context.bind_to_thread().expect("context binds");
    // SAFETY: a live graph and a valid out-pointer.
    let made = unsafe { driver.cuGraphInstantiateWithFlags(&mut raw, graph.as_raw(), 0) };
    driver
        .check("cuGraphInstantiateWithFlags", made)
        .expect("instantiates");
    // SAFETY: a live executable and stream.
    let launched = unsafe { driver.cuGraphLaunch(raw, stream.as_raw()) };
    driver.check("cuGraphLaunch", launched).expect("launch");
    stream
        .synchronize()
        .expect("the node completes without the engine");
    assert_eq!(tally.runs(), 0, "ran without cuda-host's executable");
    // SAFETY: made above, destroyed once, after its launch finished.
    let destroyed = unsafe { driver.cuGraphExecDestroy(raw) };
    driver
        .check("cuGraphExecDestroy", destroyed)
        .expect("destroyed");
}

#[test]
fn a_panicking_engine_node_is_reported_and_later_replays_still_run() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let reports = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&reports);
    cuda_host::panics::set_host_panic_hook(move |panic: &HostFunctionPanic<'_>| {
        if panic
            .message
            .starts_with("deliberate panic in an engine node")
        {
            sink.lock().unwrap().push(panic.message.to_owned());
        }
    });
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let graph = Graph::new(&context).expect("graph");
    graph
        .add_engine_host_node(&[], move || {
            if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!("deliberate panic in an engine node");
            }
        })
        .expect("engine node");
    let executable = graph.instantiate().expect("instantiates");
    for _ in 0..3 {
        executable.launch(&stream).expect("launch");
    }
    stream.synchronize().expect("the stream went on");
    cuda_host::panics::clear_host_panic_hook();
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    let reports = reports.lock().unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert!(reports[0].contains("deliberate panic in an engine node"));
}

#[test]
fn a_launch_with_engine_nodes_on_a_capturing_stream_is_refused_and_the_capture_kept() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let executable = counting_graph(&context, &tally)
        .instantiate()
        .expect("instantiates");
    let builder = GraphBuilder::begin(&stream, CaptureMode::ThreadLocal).expect("capture");
    let refused = executable.launch(&stream).expect_err("refused");
    assert!(
        matches!(refused, Error::StreamCapturing { .. }),
        "{refused}"
    );
    builder.end().expect("the capture is intact");
    executable.launch(&stream).expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), 1);
}

#[test]
fn engine_callbacks_beyond_the_free_words_are_refused_during_the_capture_and_it_stays_intact() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let builder = GraphBuilder::begin_with_engine(&stream, CaptureMode::Global, HostEngine::Polled)
        .expect("capture begins");
    let mut added = 0;
    let refused = loop {
        let probe = tally.probe();
        match builder.callback(move || probe.ran()) {
            Ok(()) => added += 1,
            Err(error) => break error,
        }
        assert!(added <= 100_000, "no end to the free words");
    };
    assert!(
        matches!(refused, Error::AllocationInCapture { .. }),
        "{refused}"
    );
    assert!(
        added >= GraphBuilder::ENGINE_WORDS_RESERVED,
        "{added} callbacks"
    );
    let graph = builder.end().expect("the capture is intact");
    let executable = graph.instantiate().expect("instantiates");
    executable.launch(&stream).expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), added);
}

#[test]
fn pending_replays_of_a_failed_context_are_let_go_and_the_engine_parks() {
    // A sticky error fails the primary context for the rest of the process.
    suite::alone_in_child!(pending_replays_of_a_failed_context_are_let_go_and_the_engine_parks);
    const PENDING: usize = 20;
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    let fault = suite::kernels::Fault::load(context.driver());
    let tally = Tally::new();
    let executable = counting_graph(&context, &tally)
        .instantiate()
        .expect("instantiates");
    gate.hold(&stream);
    fault.launch(&stream);
    for _ in 0..PENDING {
        executable.launch(&stream).expect("launch");
    }
    gate.open();
    assert!(stream.synchronize().is_err(), "the fault is answered");
    assert_eq!(tally.runs(), 0, "ran after the fault");
    wait_until("the engine to let the failed launches go and park", || {
        reclaim();
        let counts = metrics().polled_engine();
        counts.serving == 0 && counts.parked
    });
    drop(executable);
    tally.reclaim_until_dropped(1, "the callable of the failed context's executable");
}

#[test]
fn a_launch_other_codes_capture_took_is_refused_and_neither_it_nor_the_captured_graph_runs_the_node()
 {
    let Some(controls) = suite::software::controls() else {
        suite::skip(
            "a_launch_other_codes_capture_took_is_refused_and_neither_it_nor_the_captured_graph_runs_the_node",
            "beginning a capture inside a driver call is a software-driver control",
        );
        return;
    };
    // Alone in a process: the retired node is served for the life of the process.
    suite::alone_in_child!(
        a_launch_other_codes_capture_took_is_refused_and_neither_it_nor_the_captured_graph_runs_the_node
    );
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    // Kept: a node takes a fresh word only while its graph lives.
    let graph = counting_graph(&context, &tally);
    let executable = graph.instantiate().expect("instantiates");
    executable.launch(&stream).expect("a launch before");
    let taken = launch_taken_by_a_capture(controls, &executable, &stream);
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), 1, "the launch before ran its node");
    assert_eq!(metrics().polled_engine().retired_graph_nodes, 1);
    // The capture's graph runs the node's old word: it completes, running nothing.
    let taken_exec = taken.instantiate();
    for _ in 0..3 {
        taken_exec.launch(stream.as_raw());
    }
    stream
        .synchronize()
        .expect("the captured graph never waits");
    assert_eq!(tally.runs(), 1, "the captured graph ran the callable");
    // The executable goes on with a fresh word.
    for _ in 0..3 {
        executable.launch(&stream).expect("a launch after");
    }
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), 4);
}

#[test]
fn an_executable_with_engine_nodes_is_refused_when_the_engines_thread_cannot_start() {
    // No thread of the child can start: its stack size is impossible (libtest then runs the
    // test on its main thread).
    suite::alone_in_child!(
        an_executable_with_engine_nodes_is_refused_when_the_engines_thread_cannot_start,
        &[("RUST_MIN_STACK", "1125899906842624")]
    );
    assert!(
        std::thread::Builder::new().spawn(|| {}).is_err(),
        "a thread started though RUST_MIN_STACK is impossible"
    );
    let context = context();
    let tally = Tally::new();
    let graph = counting_graph(&context, &tally);
    let refused = graph.instantiate().expect_err("no server to run the node");
    assert!(
        matches!(
            refused,
            Error::ThreadStart {
                thread: "cuda-host-poll",
                ..
            }
        ),
        "{refused}"
    );
    drop(graph);
    tally.reclaim_until_dropped(1, "the callable with its graph");
    assert_eq!(tally.runs(), 0);
}

/// Queues a launch of an executable of a one-engine-node graph behind `gate` on `stream`, with a
/// callable this thread set on the executable and then replaced, so that the launch's queue
/// holds the callable's last reference: the engine lets go of it once it served the launch (or
/// abandoned it). Answers the executable (and its graph, which it needs to keep its node).
fn launch_holding_the_last_reference(
    context: &cuda_host::Context,
    stream: &Stream,
    gate: &Gate,
    tally: &Arc<Tally>,
    before: impl FnOnce(),
) -> (Graph, GraphExec) {
    let graph = Graph::new(context).expect("graph");
    let node = graph.add_engine_host_node(&[], || {}).expect("engine node");
    let executable = graph.instantiate().expect("instantiates");
    let probe = tally.probe();
    executable
        .set_host_node_callable(&node, move || probe.ran())
        .expect("its own callable");
    gate.hold(stream);
    before();
    executable.launch(stream).expect("launch");
    executable
        .set_host_node_callable(&node, || {})
        .expect("replaced: the pending launch keeps the callable it queued");
    reclaim();
    assert_eq!(tally.drops(), 0, "dropped while a launch holds it");
    (graph, executable)
}

/// Has another thread, which lives on, drain once (`reclaim`), then reclaims on this thread until
/// `tally`'s probe was dropped: it must be dropped here, by this thread, which made it.
#[track_caller]
fn assert_dropped_here_not_by_another_threads_drain(tally: &Tally) {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                reclaim();
            })
            .join()
            .expect("the other thread's drain");
    });
    tally.reclaim_until_dropped(1, "the callable");
    assert_eq!(
        tally.drop_threads(),
        [std::thread::current().id()],
        "the callable was dropped off the thread that made it"
    );
}

#[test]
fn a_callable_the_engine_lets_go_of_after_its_last_run_is_dropped_on_the_thread_that_made_it() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    let tally = Tally::new();
    let (_graph, executable) =
        launch_holding_the_last_reference(&context, &stream, &gate, &tally, || {});
    let served = metrics().polled_engine().functions;
    gate.open();
    // The engine keeps the callable until the node's next request, which the next launch makes
    // once the first finished; the server counts a request once it ran it.
    executable.launch(&stream).expect("the next launch");
    wait_until(
        "the engine to serve both launches and let go of the first's callable",
        || tally.runs() == 1 && metrics().polled_engine().functions > served + 1,
    );
    assert_dropped_here_not_by_another_threads_drain(&tally);
}

#[test]
fn a_callable_the_engine_lets_go_of_unrun_after_a_failure_is_dropped_on_the_thread_that_made_it() {
    // A sticky error fails the primary context for the rest of the process.
    suite::alone_in_child!(
        a_callable_the_engine_lets_go_of_unrun_after_a_failure_is_dropped_on_the_thread_that_made_it
    );
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    let fault = suite::kernels::Fault::load(context.driver());
    let tally = Tally::new();
    let (_graph, _executable) =
        launch_holding_the_last_reference(&context, &stream, &gate, &tally, || {
            fault.launch(&stream);
        });
    let let_go = metrics().polled_engine().functions;
    gate.open();
    assert!(stream.synchronize().is_err(), "the fault is answered");
    // The server counts the launches it let go of unrun once it let go of their callables.
    wait_until("the engine to let the failed launch go", || {
        metrics().polled_engine().functions > let_go
    });
    assert_eq!(tally.runs(), 0, "ran after the fault");
    assert_dropped_here_not_by_another_threads_drain(&tally);
}

#[test]
fn callables_another_thread_set_on_an_executable_are_dropped_on_that_thread_when_it_goes() {
    let _alone = capture_lock();
    let context = context();
    let (here, there) = (Tally::new(), Tally::new());
    let graph = Graph::new(&context).expect("graph");
    graph.add_engine_host_node(&[], || {}).expect("engine node");
    graph.add_host_node(&[], || {}).expect("driver host node");
    graph.add_host_node(&[], || {}).expect("driver host node");
    let executable = graph.instantiate().expect("instantiates");
    // This thread sets the second driver node's callable; the other thread the engine node's
    // and the first driver node's.
    let drivers = |graph: &Graph| -> Vec<usize> {
        let nodes = graph.host_nodes().expect("host nodes");
        (0..nodes.len())
            .filter(|&index| !nodes[index].runs_on_engine())
            .collect()
    };
    {
        let nodes = graph.host_nodes().expect("host nodes");
        let probe = here.probe();
        executable
            .set_host_node_callable(&nodes[drivers(&graph)[1]], move || probe.ran())
            .expect("this thread's callable");
    }
    let (to_here, from_there) = std::sync::mpsc::channel();
    let (to_there, from_here) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let there = &there;
        let other = scope.spawn(move || {
            {
                let nodes = graph.host_nodes().expect("host nodes");
                let first_driver = drivers(&graph)[0];
                let engine = nodes
                    .iter()
                    .position(|node| node.runs_on_engine())
                    .expect("the engine node");
                for node in [&nodes[engine], &nodes[first_driver]] {
                    let probe = there.probe();
                    executable
                        .set_host_node_callable(node, move || probe.ran())
                        .expect("the other thread's callable");
                }
            }
            to_here.send((graph, executable)).expect("handed back");
            // Lives on until this thread let go of the executable's callables.
            from_here.recv().expect("told to drain");
            there.reclaim_until_dropped(2, "the other thread's callables, on that thread");
            std::thread::current().id()
        });
        let (graph, executable) = from_there.recv().expect("handed back");
        drop((executable, graph));
        // The executable's own callables go with it, on the thread that made it: this one.
        here.reclaim_until_dropped(1, "this thread's callable");
        let dropped_here = there.drops();
        to_there.send(()).expect("the other thread waits");
        let other = other.join().expect("the other thread");
        assert_eq!(
            dropped_here, 0,
            "the other thread's callables were dropped by this thread"
        );
        assert_eq!(there.drop_threads(), [other, other]);
    });
}

#[test]
fn a_callable_the_engine_ran_is_kept_until_the_launch_that_ran_it_finished() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    // The engine node, then a driver host node that holds the launch until it is let through.
    let graph = Graph::new(&context).expect("graph");
    let node = graph.add_engine_host_node(&[], || {}).expect("engine node");
    let through = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let waiting = Arc::clone(&through);
    graph
        .add_host_node(&[&node], move || {
            while !waiting.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
        })
        .expect("holding node");
    let executable = graph.instantiate().expect("instantiates");
    let probe = tally.probe();
    executable
        .set_host_node_callable(&node, move || probe.ran())
        .expect("its own callable");
    // Counted before the launch: the engine may serve it before this thread looks again.
    let served = metrics().polled_engine().functions;
    executable.launch(&stream).expect("launch");
    // Replaced: the pending launch holds the callable's last reference.
    executable
        .set_host_node_callable(&node, || {})
        .expect("replaced");
    wait_until("the engine to run the callable", || {
        tally.runs() == 1 && metrics().polled_engine().functions > served
    });
    // The launch has not finished: its callable stays, however often this thread drains.
    for _ in 0..100 {
        reclaim();
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    assert_eq!(
        tally.drops(),
        0,
        "dropped while the launch that ran it was in flight"
    );
    through.store(true, Ordering::SeqCst);
    stream.synchronize().expect("synchronize");
    drop((executable, graph));
    tally.reclaim_until_dropped(1, "the callable once its executable went");
}

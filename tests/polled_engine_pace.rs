//! The polled engine's pace (`cuda_host::polled::set_polled_engine_pace`): how its servers wait
//! while functions are queued behind work their streams have not finished, and that a stream
//! handed to a sleeping server wakes it. Each test runs alone in a process: the pace is
//! process-wide.

use cuda_host::graph::Graph;
use cuda_host::polled::{EnginePace, set_polled_engine_pace, set_polled_engine_threads};
use cuda_host::{Context, Stream, StreamFlags, host_launch, metrics, options::HostEngine, reclaim};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use suite::engine_graphs::{counting_graph, launch_taken_by_a_capture, new_stream};
use suite::{Gate, Tally, context, wait_until};

fn polled_stream(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking)
        .expect("stream")
        .with_host_engine(HostEngine::Polled)
        .expect("a polled stream")
}

fn sleeps() -> u64 {
    metrics().polled_engine().sleeps
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

/// When each run of a graph's engine node began.
type Times = Arc<Mutex<Vec<Instant>>>;

/// A graph of one engine node whose callable records when it ran.
fn timing_graph(context: &Context) -> (Graph, Times) {
    let times: Times = Arc::default();
    let graph = Graph::new(context).expect("graph");
    let recorded = Arc::clone(&times);
    graph
        .add_engine_host_node(&[], move || recorded.lock().unwrap().push(Instant::now()))
        .expect("engine node");
    (graph, times)
}

#[test]
fn a_spinning_engine_never_sleeps_while_a_function_waits_and_the_balanced_one_does() {
    suite::alone_in_child!(
        a_spinning_engine_never_sleeps_while_a_function_waits_and_the_balanced_one_does
    );
    set_polled_engine_pace(EnginePace::Spinning);
    let context = context();
    let stream = polled_stream(&context);
    let gate = Gate::new(&context);
    gate.hold(&stream);
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&ran);
    host_launch(&stream, move || {
        counted.fetch_add(1, Ordering::SeqCst);
    })
    .expect("launch");
    // Long past the spin after the launch, where the balanced engine sleeps.
    std::thread::sleep(Duration::from_millis(20));
    let before = sleeps();
    std::thread::sleep(Duration::from_millis(100));
    let spinning = sleeps() - before;
    set_polled_engine_pace(EnginePace::Balanced);
    let before = sleeps();
    wait_until("the balanced engine to sleep between looks", || {
        sleeps() > before + 10
    });
    suite::figure(&format!(
        "engine sleeps over 100 ms with one function waiting: {spinning} spinning"
    ));
    assert_eq!(
        spinning, 0,
        "the spinning engine slept while a function waited"
    );
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "ran before its stream reached it"
    );
    gate.open();
    stream.synchronize().expect("synchronize");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[test]
fn a_spinning_engine_never_sleeps_while_launches_wait_at_a_node_a_capture_retired() {
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            "a_spinning_engine_never_sleeps_while_launches_wait_at_a_node_a_capture_retired",
            "a capture that takes a launch is a control of the software driver",
        );
    };
    suite::alone_in_child!(
        a_spinning_engine_never_sleeps_while_launches_wait_at_a_node_a_capture_retired
    );
    set_polled_engine_threads(1).expect("one server");
    set_polled_engine_pace(EnginePace::Spinning);
    let context = context();
    let stream = new_stream(&context);
    let other = new_stream(&context);
    const LAUNCHES: usize = 15;
    let (graph, times) = timing_graph(&context);
    let executable = graph.instantiate().expect("instantiates");
    let gates: Vec<Gate> = (0..LAUNCHES)
        .map(|_| {
            let gate = Gate::new(&context);
            gate.hold(&stream);
            executable.launch(&stream).expect("launch");
            gate
        })
        .collect();
    // A retired slot still serves the launches queued before it retired.
    let _taken = launch_taken_by_a_capture(controls, &executable, &other);
    assert_eq!(metrics().polled_engine().retired_graph_nodes, 1);
    std::thread::sleep(Duration::from_millis(20));
    let before = sleeps();
    std::thread::sleep(Duration::from_millis(100));
    let slept = sleeps() - before;
    assert_eq!(
        times.lock().unwrap().len(),
        0,
        "ran before its stream reached it"
    );
    for gate in &gates {
        gate.open();
    }
    stream.synchronize().expect("synchronize");
    assert_eq!(times.lock().unwrap().len(), LAUNCHES);
    assert_eq!(
        slept, 0,
        "the spinning engine slept while launches waited at a retired node"
    );
}

#[test]
fn a_stream_handed_to_a_server_that_serves_retired_nodes_alone_wakes_it() {
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            "a_stream_handed_to_a_server_that_serves_retired_nodes_alone_wakes_it",
            "a capture that takes a launch is a control of the software driver",
        );
    };
    suite::alone_in_child!(a_stream_handed_to_a_server_that_serves_retired_nodes_alone_wakes_it);
    set_polled_engine_threads(1).expect("one server");
    set_polled_engine_pace(EnginePace::Spinning);
    let context = context();
    let stream = polled_stream(&context);
    const LAUNCHES: usize = 30;
    // From a launch on the idle stream to its run: the lane is let go 2 ms after its last
    // function, so each is handed over afresh.
    let measure = || {
        let mut out = Vec::new();
        for _ in 0..LAUNCHES {
            std::thread::sleep(Duration::from_millis(6));
            let ran: Arc<Mutex<Option<Instant>>> = Arc::default();
            let recorded = Arc::clone(&ran);
            let start = Instant::now();
            host_launch(&stream, move || {
                *recorded.lock().unwrap() = Some(Instant::now());
            })
            .expect("launch");
            stream.synchronize().expect("synchronize");
            let ran = ran.lock().unwrap().expect("ran");
            out.push(ran - start);
        }
        out
    };
    let parked = median(measure());
    // A retired node: its server serves it for the life of the process, resting between looks.
    let node_stream = new_stream(&context);
    let tally = Tally::new();
    let graph = counting_graph(&context, &tally);
    let executable = graph.instantiate().expect("instantiates");
    executable.launch(&node_stream).expect("launch");
    node_stream.synchronize().expect("synchronize");
    let _taken = launch_taken_by_a_capture(controls, &executable, &node_stream);
    assert_eq!(metrics().polled_engine().retired_graph_nodes, 1);
    std::thread::sleep(Duration::from_millis(10));
    let resting = median(measure());
    suite::figure(&format!(
        "launch to run on an idle polled stream, medians: the server parked {parked:?}, resting \
         beside a retired node {resting:?}"
    ));
    // Unwoken, a hand-over waits out a rest of 200 µs: about 100 µs more at the median.
    assert!(
        resting < parked + Duration::from_micros(60),
        "a stream handed to a resting server waited out its rest: {resting:?} against {parked:?}"
    );
}

#[test]
fn an_engine_that_served_nothing_counts_no_sleeps() {
    suite::alone_in_child!(an_engine_that_served_nothing_counts_no_sleeps);
    set_polled_engine_pace(EnginePace::Spinning);
    let context = context();
    let _stream = polled_stream(&context);
    wait_until("the pool to park", || {
        reclaim();
        metrics().polled_engine().parked
    });
    let counts = metrics().polled_engine();
    assert_eq!(counts.serving, 0, "served nothing");
    assert_eq!(
        counts.sleeps, 0,
        "an engine that served nothing counted sleeps"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn the_engines_timer_slack_follows_its_pace_whichever_thread_started_it() {
    suite::alone_in_child!(the_engines_timer_slack_follows_its_pace_whichever_thread_started_it);
    // One server: each reads its pace as its rounds begin, and a parked one makes none.
    set_polled_engine_threads(1).expect("one server");
    let context = context();
    // A thread that saves power with a coarse slack starts the pool, which inherits it.
    suite::set_own_timer_slack(20_000_000);
    let stream = polled_stream(&context);
    suite::set_own_timer_slack(50_000);
    let gate = Gate::new(&context);
    gate.hold(&stream);
    host_launch(&stream, || {}).expect("launch");
    let slack = || suite::thread_timer_slack("cuda-host-poll");
    wait_until("the balanced engine's least slack", || slack() == Some(1));
    set_polled_engine_pace(EnginePace::Frugal);
    wait_until("the frugal engine's slack", || slack() != Some(1));
    let frugal = slack();
    set_polled_engine_pace(EnginePace::Balanced);
    wait_until("the balanced engine's least slack again", || {
        slack() == Some(1)
    });
    gate.open();
    stream.synchronize().expect("synchronize");
    assert_eq!(
        frugal,
        Some(50_000),
        "the frugal engine's slack is not Linux's default of 50 µs"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn a_parked_server_takes_the_pace_set_while_it_was_parked() {
    suite::alone_in_child!(a_parked_server_takes_the_pace_set_while_it_was_parked);
    set_polled_engine_threads(1).expect("one server");
    let context = context();
    let stream = polled_stream(&context);
    host_launch(&stream, || {}).expect("launch");
    stream.synchronize().expect("synchronize");
    wait_until("the pool to park", || metrics().polled_engine().parked);
    let slack = || suite::thread_timer_slack("cuda-host-poll");
    assert_eq!(slack(), Some(1));
    set_polled_engine_pace(EnginePace::Frugal);
    let gate = Gate::new(&context);
    gate.hold(&stream);
    host_launch(&stream, || {}).expect("launch");
    wait_until("the frugal slack", || slack() == Some(50_000));
    let before = sleeps();
    wait_until("the frugal engine to sleep", || sleeps() > before + 5);
    set_polled_engine_pace(EnginePace::Spinning);
    std::thread::sleep(Duration::from_millis(5));
    let before = sleeps();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        sleeps(),
        before,
        "spinning took no effect on a sleeping server"
    );
    assert_eq!(slack(), Some(1));
    gate.open();
    stream.synchronize().expect("synchronize");
}

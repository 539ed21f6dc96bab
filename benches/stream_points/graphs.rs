//! Graph replays: a graph of kernel + host node + kernel, captured once and replayed (`--quick`:
//! 2,000 replays a round, else 20,000), with the driver's host node and with the polled engine's
//! (`GraphBuilder::begin_with_engine`), against the graph of the two kernels alone: µs per
//! replay, from the first launch until the stream drained. Rounds rotate the order of the three;
//! the medians over the rounds, the worst round beside them, and each host node's cost over the
//! kernels alone; the target for the engine's node is 3 µs. Beside them, the engine's graph as
//! the driver instantiates it from the raw graph, where the node is its bare batch (a write and
//! a wait the write satisfies, served by no one): what a batch node in a graph costs by itself.
//! And what users do without host nodes: the kernels with a third between them that adds 1 to
//! a counter in pinned, mapped host memory, which a thread of the host polls (spinning a core),
//! running the host work once for each step it sees; timed until the stream drained and the
//! poller saw every replay.
//! Then what the launching thread takes alone: launches of each form timed one by one on the
//! idle stream (so that no launch waits for the device), in rounds rotating the forms; the
//! engine's launch over the bare batch's is what cuda-host adds on that thread, and the rest of
//! the engine node's cost over the bare batch node is the stream's.
//! Run alone: `cargo bench --bench stream_points -- --graphs`. On the software driver the kernels
//! are stand-ins: the empty ones do nothing, the counter's adds 1.

use crate::{Bench, median};
use cuda_host::sys::{CUdeviceptr, CUgraphExec};
use cuda_host::{
    Stream, graph::CaptureMode, graph::Graph, graph::GraphBuilder, graph::GraphExec,
    options::HostEngine,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

static RUNS: AtomicU64 = AtomicU64::new(0);

/// The graph's host node.
fn host_work() {
    RUNS.fetch_add(1, Ordering::Relaxed);
}

/// Which host node a graph holds.
#[derive(Clone, Copy)]
enum Node {
    None,
    Driver,
    Engine,
    /// The engine's graph as the driver instantiates it: its node waits for nothing.
    BareBatch,
    /// No host node: a kernel bumps a counter that a thread of the host polls.
    Counter,
}

impl Node {
    fn name(self) -> &'static str {
        match self {
            Node::None => "kernel + kernel graph",
            Node::Driver => "kernel + driver host node + kernel graph",
            Node::Engine => "kernel + engine host node + kernel graph",
            Node::BareBatch => "kernel + bare batch node + kernel graph",
            Node::Counter => "kernel + counter kernel + kernel, host polls",
        }
    }
}

/// An executable of one of the forms: cuda-host's, or the driver's own of the raw graph.
enum Executable {
    Ours(GraphExec),
    Raw(CUgraphExec, Graph),
}

/// Enqueues the empty kernel on `stream`, if the driver runs kernels.
fn kernel(bench: &Bench<'_>, stream: &Stream) -> Result<(), String> {
    if let Some(kernels) = &bench.kernels {
        // SAFETY: `empty_kernel` takes no parameters.
        unsafe { kernels.launch(kernels.empty_kernel, 1, 1, stream.as_raw(), &mut []) }
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The executable of kernel + `node` + kernel, captured from the bench's stream; the counter's
/// kernel bumps the word at `counter`.
fn executable(bench: &Bench<'_>, node: Node, counter: CUdeviceptr) -> Result<Executable, String> {
    let engine = match node {
        Node::Engine | Node::BareBatch => HostEngine::Polled,
        _ => HostEngine::Driver,
    };
    let builder = GraphBuilder::begin_with_engine(&bench.stream, CaptureMode::Global, engine)
        .map_err(|e| e.to_string())?;
    kernel(bench, builder.stream())?;
    match node {
        Node::None => {}
        Node::Counter => {
            let kernels = bench.kernels.as_ref().ok_or("the counter needs kernels")?;
            let mut address = counter;
            // SAFETY: `bump_counter` takes the word's address, which outlives every replay (the
            // bench's pool is never freed).
            unsafe {
                kernels.launch(
                    kernels.bump_counter,
                    1,
                    1,
                    builder.stream().as_raw(),
                    &mut [(&raw mut address).cast()],
                )
            }
            .map_err(|e| e.to_string())?;
        }
        _ => builder.callback(host_work).map_err(|e| e.to_string())?,
    }
    kernel(bench, builder.stream())?;
    let graph = builder.end().map_err(|e| e.to_string())?;
    if !matches!(node, Node::BareBatch) {
        return graph
            .instantiate()
            .map(Executable::Ours)
            .map_err(|e| e.to_string());
    }
    let mut raw = std::ptr::null_mut();
    // SAFETY: a live graph and a valid out-pointer; the bench's context is current.
    let made = unsafe {
        bench
            .driver
            .cuGraphInstantiateWithFlags(&mut raw, graph.as_raw(), 0)
    };
    bench
        .driver
        .check("cuGraphInstantiateWithFlags", made)
        .map_err(|e| e.to_string())?;
    Ok(Executable::Raw(raw, graph))
}

/// µs per replay of `executable`, `replays` times on the bench's stream: until the stream
/// drained, and until the last launch returned (what the launching thread took). With
/// `counter`, until a thread of the host also saw the counter's word step `replays` times.
fn per_replay(
    bench: &Bench<'_>,
    executable: &Executable,
    replays: usize,
    counter: Option<&suite::MappedWords>,
) -> Result<(f64, f64), String> {
    let failed = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let poller = counter.map(|counter| {
            let from = counter.get(0);
            let failed = &failed;
            scope.spawn(move || poll(counter, from, replays, failed))
        });
        let timed = launches(bench, executable, replays);
        failed.store(timed.is_err(), Ordering::Relaxed);
        let polled = poller.map(|poller| poller.join().expect("the poller does not panic"));
        let (enqueued, drained) = timed?;
        let per = |time: std::time::Duration| time.as_secs_f64() * 1e6 / replays as f64;
        let done = polled.map_or(drained, |seen| seen.max(drained));
        Ok((per(done), per(enqueued)))
    })
}

/// Spins on the counter's word until it stepped `replays` times from `from` (or the launches
/// `failed`), running the host's work once a step: the instant it saw the last, from its start.
fn poll(
    counter: &suite::MappedWords,
    from: u32,
    replays: usize,
    failed: &AtomicBool,
) -> std::time::Duration {
    let start = Instant::now();
    let mut seen = from;
    let target = from.wrapping_add(replays as u32);
    while seen != target && !failed.load(Ordering::Relaxed) {
        let now = counter.get(0);
        while seen != now {
            host_work();
            seen = seen.wrapping_add(1);
        }
        std::hint::spin_loop();
    }
    start.elapsed()
}

/// Launches `executable` `replays` times: the time the launches took, and until the stream
/// drained.
fn launches(
    bench: &Bench<'_>,
    executable: &Executable,
    replays: usize,
) -> Result<(std::time::Duration, std::time::Duration), String> {
    let start = Instant::now();
    let enqueued = launches_only(bench, executable, replays)?;
    bench.stream.synchronize().map_err(|e| e.to_string())?;
    Ok((enqueued, start.elapsed()))
}

/// µs per launch of `executable`, `launches` launches each timed alone on the idle stream, which
/// then drains before the next: what the launching thread takes while no launch waits for the
/// device. (A stream held at a gate would not do: the driver blocks a launch of an executable
/// with host or memory-operation nodes once a few of its launches wait unstarted.)
fn launch_alone(
    bench: &Bench<'_>,
    executable: &Executable,
    launches: usize,
) -> Result<Vec<f64>, String> {
    let mut times = Vec::with_capacity(launches);
    for _ in 0..launches {
        let start = Instant::now();
        launch(bench, executable)?;
        times.push(start.elapsed().as_secs_f64() * 1e6);
        bench.stream.synchronize().map_err(|e| e.to_string())?;
    }
    Ok(times)
}

/// Launches `executable` `launches` times: the time the launches took.
fn launches_only(
    bench: &Bench<'_>,
    executable: &Executable,
    launches: usize,
) -> Result<std::time::Duration, String> {
    let start = Instant::now();
    for _ in 0..launches {
        launch(bench, executable)?;
    }
    Ok(start.elapsed())
}

/// One launch of `executable` on the bench's stream.
fn launch(bench: &Bench<'_>, executable: &Executable) -> Result<(), String> {
    match executable {
        Executable::Ours(executable) => executable.launch(&bench.stream).map_err(|e| e.to_string()),
        Executable::Raw(raw, _) => {
            // SAFETY: a live executable and stream.
            let launched = unsafe { bench.driver.cuGraphLaunch(*raw, bench.stream.as_raw()) };
            bench
                .driver
                .check("cuGraphLaunch", launched)
                .map_err(|e| e.to_string())
        }
    }
}

/// How many launches of each form return while the stream is held at a gate: up to 256, the
/// gate opened by another thread after 500 ms if the launches stop returning before (the
/// driver blocks a launch once too many of the executable's wait unstarted).
fn held_launches(
    bench: &Bench<'_>,
    nodes: &[Node],
    executables: &[Executable],
) -> Result<(), String> {
    const MOST: usize = 256;
    let gate = suite::MappedWords::new(bench.stream.context(), 1);
    println!("launches returned while the stream was held (of {MOST}):");
    for (node, executable) in nodes.iter().zip(executables) {
        let number = gate.get(0).wrapping_add(1);
        gate.wait_in_stream(&bench.stream, 0, number);
        let opened = AtomicBool::new(false);
        let done = AtomicBool::new(false);
        let returned = std::thread::scope(|scope| {
            scope.spawn(|| {
                let start = Instant::now();
                while !done.load(Ordering::Acquire) && start.elapsed().as_millis() < 500 {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                opened.store(true, Ordering::Release);
                gate.set(0, number);
            });
            let mut returned = 0;
            let mut result = Ok(());
            while returned < MOST && result.is_ok() && !opened.load(Ordering::Acquire) {
                result = launch(bench, executable);
                returned += 1;
            }
            done.store(true, Ordering::Release);
            result.map(|()| returned)
        })?;
        bench.stream.synchronize().map_err(|e| e.to_string())?;
        let verdict = if opened.load(Ordering::Acquire) && returned < MOST {
            "the last returned once the gate opened"
        } else {
            "none blocked"
        };
        println!("{:<50} {returned:>4} ({verdict})", node.name());
    }
    Ok(())
}

/// The launching thread's share: each form's launches timed alone, `rounds` rounds of 32
/// rotating the forms; medians and p90s over all, and cuda-host's own over the driver's for the
/// engine's node.
fn launching_thread(
    bench: &Bench<'_>,
    nodes: &[Node],
    executables: &[Executable],
    rounds: usize,
) -> Result<(), String> {
    const LAUNCHES: usize = 32;
    let mut times = vec![Vec::with_capacity(rounds * LAUNCHES); nodes.len()];
    for round in 0..rounds {
        for offset in 0..nodes.len() {
            let index = (round + offset) % nodes.len();
            times[index].extend(launch_alone(bench, &executables[index], LAUNCHES)?);
        }
    }
    println!(
        "the launching thread's share: {} launches of each, each timed alone on the idle stream:",
        rounds * LAUNCHES
    );
    let mut medians = Vec::with_capacity(nodes.len());
    for (index, node) in nodes.iter().enumerate() {
        let times = &mut times[index];
        let middle = median(times);
        let p90 = times[times.len() * 9 / 10];
        println!(
            "{:<50} {middle:>8.3} µs a launch (p90 {p90:.3})",
            node.name()
        );
        medians.push(middle);
    }
    println!(
        "the engine's launch over the bare batch's (cuda-host's own part): {:.3} µs",
        medians[2] - medians[3]
    );
    Ok(())
}

pub fn run(bench: &Bench<'_>, quick: bool) -> Result<(), String> {
    let (replays, rounds) = if quick { (2_000, 3) } else { (20_000, 7) };
    let mut nodes = vec![Node::None, Node::Driver, Node::Engine, Node::BareBatch];
    if bench.kernels.is_some() {
        nodes.push(Node::Counter);
    }
    let counter = suite::MappedWords::new(bench.stream.context(), 1);
    let executables = nodes
        .iter()
        .map(|&node| executable(bench, node, counter.device_address(0)))
        .collect::<Result<Vec<_>, _>>()?;
    let polled = |node: Node| matches!(node, Node::Counter).then_some(&counter);
    println!("\ngraph replays: {replays} replays a round, {rounds} rounds");
    // Warm: the first replays of an executable upload it.
    for (node, executable) in nodes.iter().zip(&executables) {
        per_replay(bench, executable, 100, polled(*node))?;
    }
    RUNS.store(0, Ordering::Relaxed);
    let mut times = vec![Vec::with_capacity(rounds); nodes.len()];
    let mut enqueues = vec![Vec::with_capacity(rounds); nodes.len()];
    for round in 0..rounds {
        for offset in 0..nodes.len() {
            let index = (round + offset) % nodes.len();
            let (time, enqueue) =
                per_replay(bench, &executables[index], replays, polled(nodes[index]))?;
            times[index].push(time);
            enqueues[index].push(enqueue);
        }
    }
    let hosts = nodes.len() as u64 - 2;
    let expected = hosts * (replays * rounds) as u64;
    let ran = RUNS.load(Ordering::Relaxed);
    if ran != expected {
        return Err(format!("graph host nodes ran {ran} times, not {expected}"));
    }
    let medians: Vec<f64> = times.iter_mut().map(|round| median(round)).collect();
    for (index, node) in nodes.iter().enumerate() {
        let worst = times[index].iter().copied().fold(f64::MIN, f64::max);
        let enqueue = median(&mut enqueues[index]);
        println!(
            "{:<50} {:>8.3} µs a replay (worst round {worst:.3}; the launches {enqueue:.3})",
            node.name(),
            medians[index]
        );
    }
    let driver = medians[1] - medians[0];
    let engine = medians[2] - medians[0];
    let bare = medians[3] - medians[0];
    let verdict = if engine <= 3.0 { "met" } else { "missed" };
    println!(
        "host node over the kernels alone: driver {driver:.3} µs, engine {engine:.3} µs \
         (target <= 3: {verdict}), driver / engine {:.1}x; the bare batch node {bare:.3} µs, \
         the engine's node / the bare batch node {:.2}x",
        driver / engine,
        engine / bare
    );
    if nodes.len() > 4 {
        let counter = medians[4] - medians[0];
        println!(
            "the counter kernel, polled by a spinning thread, over the kernels alone: \
             {counter:.3} µs; the engine's node / the counter {:.2}x",
            engine / counter
        );
    }
    launching_thread(bench, &nodes, &executables, if quick { 10 } else { 50 })?;
    held_launches(bench, &nodes, &executables)?;
    for executable in executables {
        if let Executable::Raw(raw, graph) = executable {
            // SAFETY: made above, destroyed once; the stream drained.
            let destroyed = unsafe { bench.driver.cuGraphExecDestroy(raw) };
            bench
                .driver
                .check("cuGraphExecDestroy", destroyed)
                .map_err(|e| e.to_string())?;
            drop(graph);
        }
    }
    Ok(())
}

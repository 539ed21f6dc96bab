//! Graph replays: a graph of kernel + host node + kernel, captured once and replayed (`--quick`:
//! 2,000 replays a round, else 20,000), with the driver's host node and with the polled engine's
//! (`GraphBuilder::begin_with_engine`), against the graph of the two kernels alone: µs per
//! replay, from the first launch until the stream drained. Rounds rotate the order of the three;
//! the medians over the rounds, the worst round beside them, and each host node's cost over the
//! kernels alone; the target for the engine's node is 3 µs. Beside them, the engine's graph as
//! the driver instantiates it from the raw graph, where the node is its bare batch (a write and
//! a wait the write satisfies, served by no one): what a batch node in a graph costs by itself.
//! Run alone: `cargo bench --bench stream_points -- --graphs`. Without kernels (the software
//! driver) the graphs hold the host node alone.

use crate::{Bench, median};
use cuda_host::sys::CUgraphExec;
use cuda_host::{
    Stream, graph::CaptureMode, graph::Graph, graph::GraphBuilder, graph::GraphExec,
    options::HostEngine,
};
use std::sync::atomic::{AtomicU64, Ordering};
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
}

impl Node {
    fn name(self) -> &'static str {
        match self {
            Node::None => "kernel + kernel graph",
            Node::Driver => "kernel + driver host node + kernel graph",
            Node::Engine => "kernel + engine host node + kernel graph",
            Node::BareBatch => "kernel + bare batch node + kernel graph",
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

/// The executable of kernel + `node` + kernel, captured from the bench's stream.
fn executable(bench: &Bench<'_>, node: Node) -> Result<Executable, String> {
    let engine = match node {
        Node::Engine | Node::BareBatch => HostEngine::Polled,
        _ => HostEngine::Driver,
    };
    let builder = GraphBuilder::begin_with_engine(&bench.stream, CaptureMode::Global, engine)
        .map_err(|e| e.to_string())?;
    kernel(bench, builder.stream())?;
    if !matches!(node, Node::None) {
        builder.callback(host_work).map_err(|e| e.to_string())?;
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
/// drained, and until the last launch returned (what the launching thread took).
fn per_replay(
    bench: &Bench<'_>,
    executable: &Executable,
    replays: usize,
) -> Result<(f64, f64), String> {
    let start = Instant::now();
    for _ in 0..replays {
        match executable {
            Executable::Ours(executable) => executable
                .launch(&bench.stream)
                .map_err(|e| e.to_string())?,
            Executable::Raw(raw, _) => {
                // SAFETY: a live executable and stream.
                let launched = unsafe { bench.driver.cuGraphLaunch(*raw, bench.stream.as_raw()) };
                bench
                    .driver
                    .check("cuGraphLaunch", launched)
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    let enqueued = start.elapsed();
    bench.stream.synchronize().map_err(|e| e.to_string())?;
    let per = |time: std::time::Duration| time.as_secs_f64() * 1e6 / replays as f64;
    Ok((per(start.elapsed()), per(enqueued)))
}

pub fn run(bench: &Bench<'_>, quick: bool) -> Result<(), String> {
    let (replays, rounds) = if quick { (2_000, 3) } else { (20_000, 7) };
    let nodes = [Node::None, Node::Driver, Node::Engine, Node::BareBatch];
    let executables = nodes
        .iter()
        .map(|&node| executable(bench, node))
        .collect::<Result<Vec<_>, _>>()?;
    println!("\ngraph replays: {replays} replays a round, {rounds} rounds");
    // Warm: the first replays of an executable upload it.
    for executable in &executables {
        per_replay(bench, executable, 100)?;
    }
    RUNS.store(0, Ordering::Relaxed);
    let mut times = vec![Vec::with_capacity(rounds); nodes.len()];
    let mut enqueues = vec![Vec::with_capacity(rounds); nodes.len()];
    for round in 0..rounds {
        for offset in 0..nodes.len() {
            let index = (round + offset) % nodes.len();
            let (time, enqueue) = per_replay(bench, &executables[index], replays)?;
            times[index].push(time);
            enqueues[index].push(enqueue);
        }
    }
    let expected = (2 * replays * rounds) as u64;
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

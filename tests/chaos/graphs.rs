//! The graph family: graphs users keep (built by hand with the driver's and the polled engine's
//! host nodes, or ended from a worker's builder), executables instantiated from them and
//! launched on any stream (held behind a gate, special, captured by other code), callables
//! replaced in a graph and in an executable (also while launches that run the old one wait),
//! executables updated from another graph, clones, node listings, and drops of graphs,
//! executables and builders in every order, on any worker.
//!
//! Every callable is a witness homed on the worker that handed it over. A launch accepted on a
//! stream that did not fail adds, to every callable the executable may run, a marker its stream
//! writes after the launch: the callable must not be dropped before its stream passed it.

use crate::execute::{Env, Handed};
use crate::witness::{self, Passed, Witness, violated};
use crate::workers::Local;
use crate::world::{ContextEntry, Operation, StreamEntry, StreamKind};
use cuda_host::{Error, graph::Graph, graph::GraphExec};
use cuda_host_sys::{CUresult, CUstreamCaptureMode};
use proptest::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// An operation on graphs and executables. Indexes are taken modulo what exists when it runs.
#[derive(Debug, Clone)]
pub enum GraphOp {
    /// A graph of one to three host nodes in a chain, each the driver's or the engine's (bit `i`
    /// of `engines` for node `i`); with `instantiate`, an executable of it too.
    New {
        context: u8,
        nodes: u8,
        engines: u8,
        panic_in_run: bool,
        instantiate: bool,
    },
    /// Ends a builder capture of this worker and keeps its graph.
    EndKeep {
        builder: u8,
    },
    /// Drops a builder capture of this worker without ending it.
    DropBuilder {
        builder: u8,
    },
    Instantiate {
        graph: u8,
    },
    /// With `behind_gate`, the stream is held first, until a later step opens its gate; with
    /// `then_drop`, the executable is dropped right after, its launch pending.
    Launch {
        exec: u8,
        stream: u8,
        behind_gate: bool,
        then_drop: bool,
    },
    /// `HostNode::set_callable` in a graph.
    SetGraphCallable {
        graph: u8,
        node: u8,
        panic_in_run: bool,
    },
    /// `GraphExec::set_host_node_callable`; with `fences_fail`, the queries of the fences of
    /// the executable's launches this call makes fail (`cuEventQuery`, on this thread).
    SetExecCallable {
        exec: u8,
        node: u8,
        panic_in_run: bool,
        fences_fail: bool,
    },
    /// `GraphExec::update` from a graph (of the same shape, or not: refused).
    Update {
        exec: u8,
        graph: u8,
    },
    /// An update from the executable's own graph, a callable set on one of its nodes, a launch
    /// behind a gate, then the executable dropped: the callable set after the update must live
    /// until the launch that may run it passed (the update keeps the executable's own callables).
    UpdateThenLaunch {
        exec: u8,
        node: u8,
        stream: u8,
    },
    /// A callable set on a node of an executable, a launch that will run it behind a gate, and
    /// another callable set there while the launch waits (with `fences_fail`, the fence queries
    /// of that set fail): the first must live until the launch ran it. The gate stays closed
    /// until a later step opens it.
    ReplaceWhileHeld {
        exec: u8,
        node: u8,
        stream: u8,
        fences_fail: bool,
    },
    /// A capture through cuda-host of a blocking stream of the executable's context, a launch of
    /// the executable on that context's legacy stream meanwhile (refused before the driver is
    /// called, which would invalidate the capture), then the capture's end.
    LegacyBesideCapture {
        exec: u8,
        stream: u8,
    },
    /// A callable set on a node of an executable, a launch that runs it, the stream let finish,
    /// another callable set there, a launch a capture other code begins at `cuGraphLaunch` takes,
    /// a third callable set (the capture's graph, which the runner launches, may still call the
    /// second), a launch after it, then the executable dropped: the first callable, which the
    /// node ran last before the taken launch gave it up (an engine node's word retired), must
    /// still be dropped, once.
    TakenAfterReplace {
        exec: u8,
        node: u8,
        stream: u8,
    },
    /// An engine node's callable set, a launch while the device sees host writes late (its
    /// stream reads the node's word every 2 ms), the run awaited, then another callable set and
    /// this worker's drain: the first must live until its launch finished, not only until the
    /// engine ran it.
    EngineRunThenReplace {
        exec: u8,
        stream: u8,
    },
    /// The latest graph of other code's capture that took launches of executables, instantiated
    /// and launched (on a stream as `stream` picks), then its executable dropped: it calls what
    /// the taken launches' nodes held, which must all still live.
    RunCaptured {
        stream: u8,
    },
    /// Other code captures a replayable launch on an ordinary stream in `mode`, keeps the
    /// graph, makes an executable of it and launches that behind a gate, then recaptures the
    /// graph (CUDA 13.3, which lets go of the graph's user objects first) with another
    /// replayable launch; with `update`, the executable is updated from the recaptured graph.
    /// The executable is then dropped, its launch pending: the first callable must live until
    /// that launch ran it, and each must be dropped once, on its thread.
    ForeignRecapture {
        stream: u8,
        mode: crate::plan::Mode,
        update: bool,
    },
    Clone {
        graph: u8,
    },
    HostNodes {
        graph: u8,
    },
    DropGraph {
        graph: u8,
    },
    DropExec {
        exec: u8,
    },
    /// The device sees host writes late: stream memory waits read their word once every `micros`
    /// µs (`None`: the driver's backoff), as on a time-sliced device. Holds open the window
    /// between the engine's answer to a node's request and its stream's seeing it, where the
    /// launch is still in flight.
    SlowDevice {
        micros: Option<u16>,
    },
}

impl GraphOp {
    /// Whether the step may run beside the next: not a launch that closes a gate first (as
    /// `Op::Hold`, whose gate a synchronize beside it would wait for).
    pub fn may_run_beside(&self) -> bool {
        !matches!(
            self,
            GraphOp::Launch {
                behind_gate: true,
                ..
            } | GraphOp::UpdateThenLaunch { .. }
                | GraphOp::ReplaceWhileHeld { .. }
                | GraphOp::LegacyBesideCapture { .. }
                | GraphOp::EngineRunThenReplace { .. }
                | GraphOp::TakenAfterReplace { .. }
                | GraphOp::ForeignRecapture { .. }
        )
    }

    /// Whether the step makes a callable that panics when it runs.
    pub fn asks_for_a_panic(&self) -> bool {
        match *self {
            GraphOp::New { panic_in_run, .. }
            | GraphOp::SetGraphCallable { panic_in_run, .. }
            | GraphOp::SetExecCallable { panic_in_run, .. } => panic_in_run,
            _ => false,
        }
    }
}

fn rarely() -> impl Strategy<Value = bool> {
    prop::bool::weighted(0.1)
}

/// Any graph operation, weighted towards launches.
pub fn op() -> impl Strategy<Value = GraphOp> {
    let index = any::<u8>;
    prop_oneof![
        3 => (index(), index(), index(), rarely(), any::<bool>()).prop_map(
            |(context, nodes, engines, panic_in_run, instantiate)| GraphOp::New {
                context,
                nodes,
                engines,
                panic_in_run,
                instantiate,
            }
        ),
        2 => index().prop_map(|builder| GraphOp::EndKeep { builder }),
        1 => index().prop_map(|builder| GraphOp::DropBuilder { builder }),
        3 => index().prop_map(|graph| GraphOp::Instantiate { graph }),
        10 => (index(), index(), prop::bool::weighted(0.3), prop::bool::weighted(0.15)).prop_map(
            |(exec, stream, behind_gate, then_drop)| GraphOp::Launch {
                exec,
                stream,
                behind_gate,
                then_drop,
            }
        ),
        2 => (index(), index(), rarely()).prop_map(|(graph, node, panic_in_run)| {
            GraphOp::SetGraphCallable { graph, node, panic_in_run }
        }),
        6 => (index(), index(), rarely(), prop::bool::weighted(0.4)).prop_map(
            |(exec, node, panic_in_run, fences_fail)| GraphOp::SetExecCallable {
                exec,
                node,
                panic_in_run,
                fences_fail,
            }
        ),
        2 => (index(), index()).prop_map(|(exec, graph)| GraphOp::Update { exec, graph }),
        1 => (index(), index(), index())
            .prop_map(|(exec, node, stream)| GraphOp::UpdateThenLaunch { exec, node, stream }),
        1 => (index(), index(), index(), any::<bool>()).prop_map(
            |(exec, node, stream, fences_fail)| GraphOp::ReplaceWhileHeld {
                exec,
                node,
                stream,
                fences_fail,
            }
        ),
        1 => (index(), index())
            .prop_map(|(exec, stream)| GraphOp::LegacyBesideCapture { exec, stream }),
        1 => (index(), index(), index())
            .prop_map(|(exec, node, stream)| GraphOp::TakenAfterReplace { exec, node, stream }),
        2 => index().prop_map(|stream| GraphOp::RunCaptured { stream }),
        1 => (index(), crate::plan::mode(), any::<bool>()).prop_map(|(stream, mode, update)| {
            GraphOp::ForeignRecapture {
                stream,
                mode,
                update,
            }
        }),
        1 => (index(), index())
            .prop_map(|(exec, stream)| GraphOp::EngineRunThenReplace { exec, stream }),
        1 => index().prop_map(|graph| GraphOp::Clone { graph }),
        1 => index().prop_map(|graph| GraphOp::HostNodes { graph }),
        1 => index().prop_map(|graph| GraphOp::DropGraph { graph }),
        1 => index().prop_map(|exec| GraphOp::DropExec { exec }),
        1 => prop::option::of(100..3000u16).prop_map(|micros| GraphOp::SlowDevice { micros }),
    ]
}

/// A host node as the harness knows it: who serves it, and the callable it runs.
#[derive(Clone)]
struct Node {
    engine: bool,
    callable: Option<Arc<Witness>>,
}

struct GraphEntry {
    id: u64,
    name: String,
    graph: Graph,
    context: Arc<ContextEntry>,
    /// Its host nodes in the order `host_nodes` lists them; `None` when the harness cannot tell
    /// them (a builder's capture holding a node it does not know of).
    nodes: Option<Vec<Node>>,
    /// Every callable it ever held but those a recapture let go, for an executable of a graph
    /// whose nodes are unknown.
    every: Vec<Arc<Witness>>,
    /// For the graph of a capture that took launches of executables: those executables, whose
    /// callables it runs, kept alive while it and its executables live (past that, its runs
    /// are outside cuda-host's promises).
    keeps: Vec<Shared<ExecEntry>>,
}

struct ExecEntry {
    name: String,
    exec: GraphExec,
    /// The graph it was instantiated from (which names its nodes while it lives).
    graph: u64,
    context: Arc<ContextEntry>,
    /// Its nodes as its graph's were at the instantiation, or `None` (see [`GraphEntry`]).
    nodes: Option<Vec<Node>>,
    /// Where its nodes are unknown, what a launch of it may run: its graph's at the
    /// instantiation or at its latest update.
    every: Vec<Arc<Witness>>,
    /// The stream of its latest launch: the driver orders each launch behind the one before, on
    /// whichever stream.
    last_stream: Option<Arc<StreamEntry>>,
    /// As [`GraphEntry::keeps`], from its graph and those it was updated from.
    keeps: Vec<Shared<ExecEntry>>,
}

impl ExecEntry {
    /// What a launch of it now may run.
    /// What the graph of a capture that took a launch of this executable may run: the driver
    /// host nodes' callables. An engine node's slot retires with the taken launch, and a retired
    /// word is answered without running (`launch_with_engine` in `cuda-host/src/graph/exec.rs`).
    fn may_run_if_taken(&self) -> Vec<Arc<Witness>> {
        match &self.nodes {
            Some(nodes) => nodes
                .iter()
                .filter(|node| !node.engine)
                .filter_map(|node| node.callable.clone())
                .collect(),
            None => self.every.clone(),
        }
    }

    fn may_run(&self) -> Vec<Arc<Witness>> {
        match &self.nodes {
            Some(nodes) => nodes
                .iter()
                .filter_map(|node| node.callable.clone())
                .collect(),
            None => self.every.clone(),
        }
    }
}

type Shared<T> = Arc<Mutex<T>>;

static GRAPHS: Mutex<Vec<Shared<GraphEntry>>> = Mutex::new(Vec::new());
static EXECS: Mutex<Vec<Shared<ExecEntry>>> = Mutex::new(Vec::new());
static NUMBER: AtomicU64 = AtomicU64::new(1);

/// Graph steps that took effect, by operation, for the figures at the end.
static TOOK_EFFECT: Mutex<Vec<(&'static str, u64)>> = Mutex::new(Vec::new());

fn took_effect(what: &'static str) {
    let mut counts = lock(&TOOK_EFFECT);
    match counts.iter_mut().find(|(name, _)| *name == what) {
        Some((_, count)) => *count += 1,
        None => counts.push((what, 1)),
    }
}

/// The graph steps that took effect, by operation (`Launch 12, ...`).
pub fn figures() -> String {
    let mut counts = lock(&TOOK_EFFECT).clone();
    counts.sort();
    let counts: Vec<String> = counts
        .iter()
        .map(|(what, count)| format!("{what} {count}"))
        .collect();
    counts.join(", ")
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn pick<T>(list: &Mutex<Vec<Shared<T>>>, index: u8) -> Option<Shared<T>> {
    let list = lock(list);
    (!list.is_empty()).then(|| Arc::clone(&list[usize::from(index) % list.len()]))
}

fn take<T>(list: &Mutex<Vec<Shared<T>>>, index: u8) -> Option<Shared<T>> {
    let mut list = lock(list);
    if list.is_empty() {
        return None;
    }
    let at = usize::from(index) % list.len();
    Some(list.remove(at))
}

fn graph_by_id(id: u64) -> Option<Shared<GraphEntry>> {
    lock(&GRAPHS)
        .iter()
        .find(|entry| lock(entry).id == id)
        .cloned()
}

/// Notes a callable handed over in `context`: a failure of that context excuses what it may
/// then leave unrun or drop before its stream passed it.
fn note(env: &Env, context: &ContextEntry, witness: &Arc<Witness>) {
    env.handed.lock().unwrap().push(Handed {
        stream: 0,
        context: context.id,
        witness: Arc::clone(witness),
        for_synchronize: false,
    });
}

fn callable(env: &Env, context: &ContextEntry, what: String, panic_in_run: bool) -> Arc<Witness> {
    let witness = Witness::new(what, panic_in_run, false, false);
    note(env, context, &witness);
    witness
}

/// The next marker on `stream` where markers mean something (not on a per-thread stream, a
/// different stream on each worker).
fn mark(stream: &StreamEntry) -> Option<u32> {
    if stream.kind == StreamKind::PerThread {
        return None;
    }
    stream.progress.mark(&stream.stream)
}

/// Runs `op` on the calling worker: its outcome, for the operation log.
pub fn execute(env: &Env, local: &mut Local, op: &GraphOp) -> String {
    match *op {
        GraphOp::New {
            context,
            nodes,
            engines,
            panic_in_run,
            instantiate: and_instantiate,
        } => {
            let made = new_graph(env, context, nodes, engines, panic_in_run);
            if !and_instantiate {
                return made;
            }
            // The graph just kept is the last.
            let last = lock(&GRAPHS).len().saturating_sub(1);
            format!("{made}; {}", instantiate(env, last as u8))
        }
        GraphOp::EndKeep { builder } => end_keep(env, local, builder),
        GraphOp::DropBuilder { builder } => drop_builder(env, local, builder),
        GraphOp::Instantiate { graph } => instantiate(env, graph),
        GraphOp::Launch {
            exec,
            stream,
            behind_gate,
            then_drop,
        } => {
            let launched = launch(env, exec, stream, behind_gate);
            if !then_drop {
                return launched;
            }
            match drop_exec(exec, "DropExec (after a launch)") {
                Some(name) => format!("{launched}; then {name} dropped"),
                None => launched,
            }
        }
        GraphOp::SetGraphCallable {
            graph,
            node,
            panic_in_run,
        } => set_graph_callable(env, graph, node, panic_in_run),
        GraphOp::SetExecCallable {
            exec,
            node,
            panic_in_run,
            fences_fail,
        } => set_exec_callable(env, exec, node, panic_in_run, fences_fail),
        GraphOp::Update { exec, graph } => update(env, exec, graph),
        GraphOp::UpdateThenLaunch { exec, node, stream } => {
            // An even graph index: the executable's own graph. No step runs beside this one, so
            // `exec` names one executable throughout.
            let updated = update(env, exec, 0);
            let set = set_exec_callable(env, exec, node, false, false);
            let launched = launch(env, exec, stream, true);
            let dropped = drop_exec(exec, "DropExec (after an update and a launch)")
                .map_or_else(String::new, |name| format!("; then {name} dropped"));
            format!("{updated}; {set}; {launched}{dropped}")
        }
        GraphOp::ReplaceWhileHeld {
            exec,
            node,
            stream,
            fences_fail,
        } => {
            // No step runs beside this one, so `exec` names one executable throughout.
            let made = an_executable(env, exec, node);
            let first = set_exec_callable(env, exec, node, false, false);
            let launched = launch(env, exec, stream, true);
            let second = set_exec_callable(env, exec, node, false, fences_fail);
            if second.starts_with("node ") && launched.contains(" launched on ") {
                took_effect("ReplaceWhileHeld");
            }
            format!("{made}{first}; {launched}; {second}")
        }
        GraphOp::LegacyBesideCapture { exec, stream } => {
            let made = an_executable(env, exec, 0);
            format!("{made}{}", legacy_beside_capture(env, local, exec, stream))
        }
        GraphOp::TakenAfterReplace { exec, node, stream } => {
            taken_after_replace(env, exec, node, stream)
        }
        GraphOp::RunCaptured { stream } => run_captured(env, stream),
        GraphOp::ForeignRecapture {
            stream,
            mode,
            update,
        } => foreign_recapture(env, local, stream, mode, update),
        GraphOp::EngineRunThenReplace { exec, stream } => {
            engine_run_then_replace(env, exec, stream)
        }
        GraphOp::Clone { graph } => clone(env, graph),
        GraphOp::HostNodes { graph } => host_nodes(env, graph),
        GraphOp::DropGraph { graph } => match take(&GRAPHS, graph) {
            Some(entry) => {
                let name = lock(&entry).name.clone();
                drop(entry);
                took_effect("DropGraph");
                format!("dropped {name}")
            }
            None => "no graph".to_owned(),
        },
        GraphOp::SlowDevice { micros } => {
            let interval = micros.map(|micros| std::time::Duration::from_micros(micros.into()));
            env.controls.set_wait_poll_interval(interval);
            format!("stream memory waits read their word every {interval:?}")
        }
        GraphOp::DropExec { exec } => match drop_exec(exec, "DropExec") {
            Some(name) => format!("dropped {name}"),
            None => "no executable".to_owned(),
        },
    }
}

fn keep(entry: GraphEntry) -> String {
    let name = entry.name.clone();
    lock(&GRAPHS).push(Arc::new(Mutex::new(entry)));
    name
}

fn new_graph(env: &Env, context: u8, nodes: u8, engines: u8, panic_in_run: bool) -> String {
    let world = &env.world;
    let context = world.context(context);
    let graph = match Graph::new(&context.context) {
        Ok(graph) => graph,
        Err(error) => {
            env.check_refusal_in("Graph::new", Some(&context), &error);
            return format!("Graph::new refused: {error}");
        }
    };
    let id = NUMBER.fetch_add(1, Ordering::SeqCst);
    let name = format!("graph {id} of {}", context.name);
    let mut known = Vec::new();
    let mut refused = Vec::new();
    {
        let mut previous = None;
        for index in 0..1 + nodes % 3 {
            let engine = engines >> index & 1 == 1;
            let witness = callable(
                env,
                &context,
                format!(
                    "{} node {index} of {name}",
                    if engine { "engine" } else { "host" }
                ),
                panic_in_run && index == 0,
            );
            let probe = witness.probe();
            let run = move || probe.ran();
            let dependencies: Vec<_> = previous.iter().collect();
            let added = if engine {
                graph.add_engine_host_node(&dependencies, run)
            } else {
                graph.add_host_node(&dependencies, run)
            };
            match added {
                Ok(node) => {
                    previous = Some(node);
                    known.push(Node {
                        engine,
                        callable: Some(witness),
                    });
                }
                Err(error) => {
                    env.check_refusal_in("Graph::add_host_node", Some(&context), &error);
                    refused.push(error.to_string());
                }
            }
        }
    }
    let every = known
        .iter()
        .filter_map(|node| node.callable.clone())
        .collect();
    let shape: Vec<_> = known.iter().map(|node| node.engine).collect();
    took_effect("New");
    let name = keep(GraphEntry {
        id,
        name,
        graph,
        context,
        nodes: Some(known),
        every,
        keeps: Vec::new(),
    });
    format!("{name} made, engine nodes {shape:?}; refused: {refused:?}")
}

/// Ends a builder capture of this worker (as `BuilderEnd` does) and keeps its graph.
fn end_keep(env: &Env, local: &mut Local, builder: u8) -> String {
    let world = &env.world;
    let Some(crate::execute::EndedBuilder {
        captured,
        callbacks,
        ended,
    }) = crate::execute::end_builder(world, local, builder)
    else {
        return "no builder on this worker".to_owned();
    };
    let graph = match ended {
        Ok(graph) => graph,
        Err(error) => {
            env.check_refusal("GraphBuilder::end", Some(&captured), &error);
            return format!("the capture of {} ended with {error}", captured.name);
        }
    };
    // The callbacks are its nodes in order, unless the capture holds one the harness does not
    // know of (a run-once launch it took, whose node does nothing).
    let nodes = match graph.host_nodes() {
        Ok(listed) if listed.len() == callbacks.len() => Some(
            listed
                .iter()
                .zip(&callbacks)
                .map(|(node, witness)| Node {
                    engine: node.runs_on_engine(),
                    callable: Some(Arc::clone(witness)),
                })
                .collect(),
        ),
        _ => None,
    };
    took_effect("EndKeep");
    let id = NUMBER.fetch_add(1, Ordering::SeqCst);
    let name = keep(GraphEntry {
        id,
        name: format!("graph {id} (the capture of {})", captured.name),
        graph,
        context: Arc::clone(&captured.context),
        nodes,
        every: callbacks,
        keeps: Vec::new(),
    });
    format!("{name} kept")
}

/// Drops a builder capture of this worker without ending it.
fn drop_builder(env: &Env, local: &mut Local, builder: u8) -> String {
    if local.builders.is_empty() {
        return "no builder on this worker".to_owned();
    }
    let at = usize::from(builder) % local.builders.len();
    let open = local.builders.remove(at);
    witness::building(false, open.global);
    let captured = Arc::clone(&open.stream);
    let global = open.global;
    drop(open);
    captured.captures.fetch_sub(1, Ordering::SeqCst);
    env.world.capture_opens(false);
    if global {
        witness::global_span(false);
    }
    took_effect("DropBuilder");
    format!("the capture of {} dropped unended", captured.name)
}

fn instantiate(env: &Env, graph: u8) -> String {
    let Some(entry) = pick(&GRAPHS, graph) else {
        return "no graph".to_owned();
    };
    let entry = lock(&entry);
    match entry.graph.instantiate() {
        Ok(exec) => {
            let number = NUMBER.fetch_add(1, Ordering::SeqCst);
            let name = format!("executable {number} of {}", entry.name);
            lock(&EXECS).push(Arc::new(Mutex::new(ExecEntry {
                name: name.clone(),
                exec,
                graph: entry.id,
                context: Arc::clone(&entry.context),
                nodes: entry.nodes.clone(),
                every: entry.every.clone(),
                last_stream: None,
                keeps: entry.keeps.clone(),
            })));
            took_effect("Instantiate");
            format!("{name} made")
        }
        Err(error) => {
            env.check_refusal_in("Graph::instantiate", Some(&entry.context), &error);
            format!("{} instantiate refused: {error}", entry.name)
        }
    }
}

/// Drops the `exec`-th executable, counted as `what` took effect: its name, or `None` when there
/// is none.
fn drop_exec(exec: u8, what: &'static str) -> Option<String> {
    let entry = take(&EXECS, exec)?;
    let name = lock(&entry).name.clone();
    drop(entry);
    took_effect(what);
    Some(name)
}

/// [`GraphOp::TakenAfterReplace`]; no step runs beside it, so `exec` names one executable
/// throughout.
fn engine_run_then_replace(env: &Env, exec: u8, stream: u8) -> String {
    // Every node of a graph made here is the engine's.
    let made = an_executable(env, exec, u8::MAX);
    let Some(shared) = pick(&EXECS, exec) else {
        return format!("{made}no executable");
    };
    let engine_node = lock(&shared)
        .nodes
        .as_ref()
        .and_then(|nodes| nodes.iter().position(|node| node.engine));
    let Some(node) = engine_node.and_then(|node| u8::try_from(node).ok()) else {
        return format!("{made}no engine node the harness knows");
    };
    env.controls
        .set_wait_poll_interval(Some(std::time::Duration::from_millis(2)));
    let first = set_exec_callable(env, exec, node, false, false);
    let set = lock(&shared).nodes.as_ref().and_then(|nodes| {
        nodes
            .get(usize::from(node))
            .and_then(|known| known.callable.clone())
    });
    let launched = launch(env, exec, stream, false);
    let Some(witness) = set.filter(|_| launched.contains(" launched on ")) else {
        return format!("{made}{first}; {launched}");
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while witness.runs() == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
    if witness.runs() == 0 {
        return format!("{made}{first}; {launched}; not run within 1 s");
    }
    let second = set_exec_callable(env, exec, node, false, false);
    cuda_host::reclaim();
    took_effect("EngineRunThenReplace");
    format!("{made}{first}; {launched}; ran; {second}; reclaimed")
}

fn run_captured(env: &Env, stream: u8) -> String {
    let latest = lock(&GRAPHS)
        .iter()
        .rposition(|graph| !lock(graph).keeps.is_empty());
    let Some(at) = latest.filter(|&at| at < 256) else {
        return "no graph of a capture that took launches".to_owned();
    };
    let context = Arc::clone(&lock(&lock(&GRAPHS)[at]).context);
    let on = stream_from(&env.world, stream, |entry| {
        matches!(entry.kind, StreamKind::NonBlocking | StreamKind::Blocking)
            && entry.context.context.as_raw() == context.context.as_raw()
    });
    let Some(on) = on else {
        return "no ordinary stream of the captured graph's context".to_owned();
    };
    let made = instantiate(env, at as u8);
    let exec = lock(&EXECS).len().saturating_sub(1);
    if !made.ends_with(" made") || exec >= 256 {
        return made;
    }
    let launched = launch(env, exec as u8, on as u8, false);
    if launched.contains(" launched on ") {
        took_effect("RunCaptured");
    }
    let dropped = drop_exec(exec as u8, "DropExec (after a captured graph's launch)")
        .map_or_else(String::new, |name| format!("; then {name} dropped"));
    format!("{made}; {launched}{dropped}")
}

/// [`GraphOp::ForeignRecapture`]; no step runs beside it.
fn foreign_recapture(
    env: &Env,
    local: &mut Local,
    stream: u8,
    mode: crate::plan::Mode,
    update: bool,
) -> String {
    let world = &env.world;
    let at = stream_from(world, stream, |entry| {
        matches!(entry.kind, StreamKind::NonBlocking | StreamKind::Blocking)
            && matches!(entry.stream.capture_state(), Ok(None))
            && !entry.context.failed.load(Ordering::SeqCst)
    });
    let Some(at) = at else {
        return "no ordinary stream that is not capturing".to_owned();
    };
    let on = Arc::clone(&world.streams.lock().unwrap()[at]);
    let Some((first, graph)) = replayable_in_foreign_capture(env, local, &on, mode, None, "first")
    else {
        return format!("other code's capture of {} made no graph", on.name);
    };
    let Some(raw) = graph else {
        return first.0;
    };
    // SAFETY: the capture's graph, of the stream's context, owned from here on by the `Graph`.
    let graph = unsafe { Graph::from_raw(&on.context.context, raw) };
    let id = NUMBER.fetch_add(1, Ordering::SeqCst);
    let kept = keep(GraphEntry {
        id,
        name: format!("graph {id} (other code's capture of {})", on.name),
        graph,
        context: Arc::clone(&on.context),
        nodes: None,
        every: first.1.iter().cloned().collect(),
        keeps: Vec::new(),
    });
    let Some(index) = lock(&GRAPHS)
        .iter()
        .position(|entry| lock(entry).id == id)
        .filter(|&index| index < 256)
    else {
        return format!("{}; {kept} kept", first.0);
    };
    let made = instantiate(env, index as u8);
    let exec = lock(&EXECS).len().saturating_sub(1);
    let launched = if made.ends_with(" made") && exec < 256 {
        launch(env, exec as u8, at as u8, true)
    } else {
        String::new()
    };
    // The graph's entry stays locked through the recapture: no other step uses the graph while
    // a capture builds it.
    let shared = Arc::clone(&lock(&GRAPHS)[index]);
    let recaptured = {
        let mut entry = lock(&shared);
        let raw = entry.graph.as_raw();
        match replayable_in_foreign_capture(env, local, &on, mode, Some(raw), "second") {
            Some(((what, witness), graph)) => {
                // What the graph holds now: the recapture let go of the first callable, which
                // lives on only in the executable made before.
                entry.every = witness.into_iter().collect();
                Some((what, graph.is_some()))
            }
            None => None,
        }
    };
    let Some((second, recaptured)) = recaptured else {
        return format!("{}; {made}; {launched}; no recapture", first.0);
    };
    if !recaptured {
        // A failed recapture leaves the graph undefined: dropped now, before any step could
        // instantiate or launch it.
        let _ = take_by_id(id);
        let dropped = drop_exec(exec as u8, "DropExec (after a failed recapture)");
        return format!(
            "{}; {made}; {launched}; {second}; dropped {dropped:?}",
            first.0
        );
    }
    took_effect("ForeignRecapture");
    let updated = if update && made.ends_with(" made") {
        // An even graph index: the executable's own graph, the one recaptured.
        format!("; {}", self::update(env, exec as u8, 0))
    } else {
        String::new()
    };
    let dropped = drop_exec(exec as u8, "DropExec (after a recapture)")
        .map_or_else(String::new, |name| format!("; then {name} dropped"));
    format!(
        "{}; {made}; {launched}; {second}{updated}{dropped}",
        first.0
    )
}

/// Other code captures `on` in `mode` (with `recapture`, recaptures that graph), a replayable
/// launch into it, and ends it: what happened and the callable's witness, if one was handed
/// over, with the graph it ended in, if it did (the caller's to own). `None` when no capture
/// began.
#[allow(clippy::type_complexity)]
fn replayable_in_foreign_capture(
    env: &Env,
    local: &mut Local,
    on: &Arc<StreamEntry>,
    mode: crate::plan::Mode,
    recapture: Option<cuda_host_sys::CUgraph>,
    which: &str,
) -> Option<(
    (String, Option<Arc<Witness>>),
    Option<cuda_host_sys::CUgraph>,
)> {
    let begun = crate::execute::foreign_begin_on(env, local, Arc::clone(on), mode, recapture);
    let at = local
        .foreign
        .iter()
        .rposition(|capture| Arc::ptr_eq(&capture.stream, on))?;
    let capture = local.foreign.remove(at);
    let witness = callable(
        env,
        &on.context,
        format!("{which} replayable of other code's capture of {}", on.name),
        false,
    );
    let probe = witness.probe();
    // SAFETY: this worker began the capture and ends it below; no step runs beside this one.
    let launched =
        unsafe { cuda_host::graph::host_launch_replayable(&on.stream, move || probe.ran()) };
    let (launched, witness) = match launched {
        Ok(()) => ("a replayable launch captured".to_owned(), Some(witness)),
        Err(error) => {
            env.check_refusal("host_launch_replayable", Some(on), &error);
            (format!("a replayable launch refused: {error}"), None)
        }
    };
    let (ended, graph) = crate::execute::end_foreign_keeping(env, capture);
    let graph = graph.filter(|graph| !graph.is_null());
    Some(((format!("{begun}; {launched}; {ended}"), witness), graph))
}

/// Takes the graph of id `id` out of the list, if it is there.
fn take_by_id(id: u64) -> Option<Shared<GraphEntry>> {
    let mut graphs = lock(&GRAPHS);
    let at = graphs.iter().position(|entry| lock(entry).id == id)?;
    Some(graphs.remove(at))
}

/// The index, in the world's list, of the first stream from index `from` on that `keep` takes,
/// among the first 256 (an index a step can name).
fn stream_from(
    world: &crate::world::World,
    from: u8,
    keep: impl Fn(&StreamEntry) -> bool,
) -> Option<usize> {
    let streams = world.streams.lock().unwrap();
    let count = streams.len().min(256);
    (0..count)
        .map(|offset| (usize::from(from) + offset) % count)
        .find(|&at| keep(&streams[at]))
}

/// Where there is no executable, one of a new graph (of the context at `index`, its engine nodes
/// as `engines` says): what was made, for the operation log. Any index then names it.
fn an_executable(env: &Env, index: u8, engines: u8) -> String {
    if !lock(&EXECS).is_empty() {
        return String::new();
    }
    let made = new_graph(env, index, index, engines, false);
    let last = lock(&GRAPHS).len().saturating_sub(1);
    format!("{made}; {}; ", instantiate(env, last as u8))
}

fn legacy_beside_capture(env: &Env, local: &mut Local, exec: u8, stream: u8) -> String {
    let Some(context) = pick(&EXECS, exec).map(|entry| Arc::clone(&lock(&entry).context)) else {
        return "no executable".to_owned();
    };
    let world = &env.world;
    let of_context = |entry: &StreamEntry, kind| {
        entry.kind == kind && entry.context.context.as_raw() == context.context.as_raw()
    };
    let found = stream_from(world, stream, |entry| {
        of_context(entry, StreamKind::Blocking)
    });
    let Some(at) = found else {
        return "no blocking stream of the executable's context".to_owned();
    };
    let has_legacy = world
        .streams
        .lock()
        .unwrap()
        .iter()
        .any(|entry| of_context(entry, StreamKind::Legacy));
    if !has_legacy {
        let legacy = cuda_host::Stream::legacy(&context.context);
        world.add_stream(legacy, &context, StreamKind::Legacy, false);
    }
    let Some(blocking) = world.stream(at as u8) else {
        return "no stream".to_owned();
    };
    let begun = crate::execute::builder_begin(env, local, at as u8, crate::plan::Mode::Relaxed);
    let Some(at) = local
        .builders
        .iter()
        .position(|open| Arc::ptr_eq(&open.stream, &blocking))
    else {
        return begun;
    };
    // An index of 1 modulo 3, odd: the legacy stream beside the blocking capture, not a stream
    // a capture is armed on.
    let launched = launch(env, exec, 1, false);
    if launched.contains("(Legacy)") && launched.contains(" refused: ") {
        took_effect("LegacyBesideCapture");
    }
    let ended = crate::execute::builder_end(env, local, at as u8, None);
    format!("{begun}; {launched}; {ended}")
}

fn taken_after_replace(env: &Env, exec: u8, node: u8, stream: u8) -> String {
    let world = &env.world;
    let first = set_exec_callable(env, exec, node, false, false);
    // An odd index: not the stream a capture is armed on (none is yet, in this step).
    let launched = launch(env, exec, stream | 1, false);
    let Some(on) = pick(&EXECS, exec).and_then(|entry| lock(&entry).last_stream.clone()) else {
        return format!("{first}; {launched}");
    };
    if on.held(world)
        || crate::timelines::holds(&on)
        || !matches!(on.kind, StreamKind::NonBlocking | StreamKind::Blocking)
        || !matches!(on.stream.capture_state(), Ok(None))
        || world.armed.lock().unwrap().is_some()
        || !finishes_soon(&on)
    {
        return format!("{first}; {launched}; {} not let finish or armed", on.name);
    }
    let second = set_exec_callable(env, exec, node, false, false);
    world.arm_capture_at_call(
        env.controls,
        c"cuGraphLaunch",
        0,
        &on,
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
    );
    // An even index: the stream the capture is armed on.
    let taken = launch(env, exec, stream & !1, false);
    // Replaced while the capture's graph, which the runner ends and launches, may still call
    // the callable the taken launch held.
    let third = set_exec_callable(env, exec, node, false, false);
    // The next launch gives the nodes fresh words, and the taken launch's word retires with the
    // callable it ran: on another stream, as far as the index goes.
    let next = launch(env, exec, stream.wrapping_add(2) | 1, false);
    let dropped = drop_exec(exec, "DropExec (after a taken launch)")
        .map_or_else(String::new, |name| format!("; then {name} dropped"));
    format!(
        "{first}; {launched}; {} finished; {second}; {taken}; {third}; {next}{dropped}",
        on.name
    )
}

/// Whether `stream` finished its work within 100 ms (a wait on a timeline may hold it for
/// longer, which a synchronize would wait for).
fn finishes_soon(stream: &StreamEntry) -> bool {
    let driver = stream.stream.context().driver();
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(100);
    loop {
        // SAFETY: a live stream (not a special one: the caller checked).
        match unsafe { driver.cuStreamQuery(stream.stream.as_raw()) } {
            CUresult::CUDA_SUCCESS => return true,
            CUresult::CUDA_ERROR_NOT_READY if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
            _ => return false,
        }
    }
}

fn launch(env: &Env, exec: u8, stream: u8, behind_gate: bool) -> String {
    let world = &env.world;
    let Some(shared) = pick(&EXECS, exec) else {
        return "no executable".to_owned();
    };
    let mut entry = lock(&shared);
    // Half the time on the stream a capture is armed on, if any of its context: the capture
    // may take it.
    let armed = world.armed.lock().unwrap().clone();
    let Some(stream) = armed
        .filter(|armed| {
            stream.is_multiple_of(2)
                && armed.context.context.as_raw() == entry.context.context.as_raw()
        })
        .or_else(|| {
            // A third of the time on the legacy stream while a blocking stream of its context
            // captures, where the launch must be refused before the driver is called.
            (stream % 3 == 1)
                .then(|| legacy_beside_a_blocking_capture(world, &entry.context))
                .flatten()
        })
        .or_else(|| world.stream(stream))
    else {
        return "no stream".to_owned();
    };
    if stream.context.context.as_raw() != entry.context.context.as_raw() {
        return format!("{} is of another context than {}", stream.name, entry.name);
    }
    // A launch on another stream would wait for the one behind the gate or a timeline's wait,
    // and a synchronize or a host copy's scope on that stream for a step after it.
    if let Some(last) = &entry.last_stream
        && !Arc::ptr_eq(last, &stream)
        && (last.held(world) || crate::timelines::holds(last))
    {
        return format!(
            "{}'s latest launch waits behind a gate or a timeline's wait on {}: not launched on {}",
            entry.name, last.name, stream.name
        );
    }
    if behind_gate && matches!(stream.stream.capture_state(), Ok(None)) {
        // Until a later step opens the gate (`Op::Open`), or the sequence ends.
        let _ = world.hold(&stream);
    }
    // On the legacy stream while a blocking stream of its context captures (and no capture
    // begins or ends meanwhile), the launch must be refused with `StreamCapturing` before the
    // driver is called, which would refuse it too, and invalidate that capture.
    let changes = world.capture_changes.load(Ordering::SeqCst);
    let blocking_capture = (stream.kind == StreamKind::Legacy)
        .then(|| blocking_capture_of(world, &stream))
        .flatten();
    let armed_here = world.armed_on(&stream);
    let operation = Operation::next_on(&stream);
    let launched = entry.exec.launch(&stream.stream);
    if armed_here
        && matches!(
            launched,
            Ok(()) | Err(cuda_host::Error::StreamCapturing { .. })
        )
        && !matches!(stream.stream.capture_state(), Ok(None))
    {
        // Perhaps the capture armed at `cuGraphLaunch` took it (accepted, or refused after the
        // driver was called): its graph then runs what this launch would have.
        lock(&TAKEN).push(Taken {
            stream: stream.stream.as_raw().addr(),
            exec: Arc::clone(&shared),
            may_run: entry.may_run_if_taken(),
        });
    }
    let refused_first = matches!(launched, Err(cuda_host::Error::StreamCapturing { .. }));
    if !refused_first
        && let Some(capturing) = blocking_capture
        && world.capture_changes.load(Ordering::SeqCst) == changes
        && !world.faults_armed.load(Ordering::SeqCst)
    {
        violated(format!(
            "{} on {} while {} captured was not refused before the driver was called: {:?}",
            entry.name, stream.name, capturing, launched
        ));
    }
    match launched {
        Ok(()) => {
            entry.last_stream = Some(Arc::clone(&stream));
            took_effect(if stream.held(world) {
                "Launch (behind a gate)"
            } else {
                "Launch"
            });
            if !stream.context_failed()
                && !entry.context.failed.load(Ordering::SeqCst)
                && let Some(marker) = mark(&stream)
            {
                for witness in entry.may_run() {
                    witness.not_before(Passed {
                        progress: Arc::clone(&stream.progress),
                        marker,
                        operation,
                    });
                }
            }
            format!("{} launched on {}", entry.name, stream.name)
        }
        Err(error) => {
            env.check_refusal("GraphExec::launch", Some(&stream), &error);
            format!("{} launch on {} refused: {error}", entry.name, stream.name)
        }
    }
}

/// A launch refused as a capture's: perhaps a capture of its stream took it.
struct Taken {
    stream: usize,
    exec: Shared<ExecEntry>,
    may_run: Vec<Arc<Witness>>,
}

static TAKEN: Mutex<Vec<Taken>> = Mutex::new(Vec::new());

/// The graph of a capture armed at a driver call, just ended on `stream`: kept as a graph of the
/// family when it took launches of executables (it runs their callables), else destroyed.
pub fn captured(stream: &Arc<StreamEntry>, raw: cuda_host_sys::CUgraph) -> String {
    let taken: Vec<Taken> = {
        let mut all = lock(&TAKEN);
        let (here, others) = std::mem::take(&mut *all)
            .into_iter()
            .partition(|taken| taken.stream == stream.stream.as_raw().addr());
        *all = others;
        here
    };
    if taken.is_empty() {
        // SAFETY: the capture's graph, destroyed once.
        let _ = unsafe { stream.stream.context().driver().cuGraphDestroy(raw) };
        return "its graph destroyed".to_owned();
    }
    // SAFETY: the capture's graph, of the stream's context, owned from here on by the `Graph`.
    let graph = unsafe { Graph::from_raw(&stream.context.context, raw) };
    let id = NUMBER.fetch_add(1, Ordering::SeqCst);
    took_effect("Captured");
    keep(GraphEntry {
        id,
        name: format!(
            "graph {id} (other code's capture of {}, with launches)",
            stream.name
        ),
        graph,
        context: Arc::clone(&stream.context),
        nodes: None,
        every: taken
            .iter()
            .flat_map(|taken| taken.may_run.clone())
            .collect(),
        keeps: taken.into_iter().map(|taken| taken.exec).collect(),
    })
}

/// The legacy stream of `context`, if the sequence has made it, while a blocking stream of that
/// context captures.
fn legacy_beside_a_blocking_capture(
    world: &crate::world::World,
    context: &ContextEntry,
) -> Option<Arc<StreamEntry>> {
    let legacy = world
        .streams
        .lock()
        .unwrap()
        .iter()
        .find(|stream| {
            stream.kind == StreamKind::Legacy
                && stream.context.context.as_raw() == context.context.as_raw()
        })
        .cloned()?;
    blocking_capture_of(world, &legacy).map(|_| legacy)
}

/// A blocking stream of `legacy`'s context that a worker's capture holds, by name.
fn blocking_capture_of(world: &crate::world::World, legacy: &StreamEntry) -> Option<String> {
    let raw = legacy.context.context.as_raw();
    world
        .streams
        .lock()
        .unwrap()
        .iter()
        .find(|stream| {
            stream.kind == StreamKind::Blocking
                && stream.context.context.as_raw() == raw
                && stream.captures.load(Ordering::SeqCst) != 0
                && matches!(
                    suite::capture::is_capturing(stream.stream.as_raw()),
                    (
                        CUresult::CUDA_SUCCESS,
                        cuda_host_sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
                    )
                )
        })
        .map(|stream| stream.name.clone())
}

fn set_graph_callable(env: &Env, graph: u8, node: u8, panic_in_run: bool) -> String {
    let Some(entry) = pick(&GRAPHS, graph) else {
        return "no graph".to_owned();
    };
    let mut entry = lock(&entry);
    let entry = &mut *entry;
    let Some(known) = entry.nodes.as_mut().filter(|nodes| !nodes.is_empty()) else {
        return format!("{}: no node the harness knows", entry.name);
    };
    let listed = match entry.graph.host_nodes() {
        Ok(listed) => listed,
        Err(error) => {
            env.check_refusal_in("Graph::host_nodes", Some(&entry.context), &error);
            return format!("{} host_nodes refused: {error}", entry.name);
        }
    };
    if listed.len() != known.len() {
        violated(format!(
            "{} lists {} host nodes, where it has {}",
            entry.name,
            listed.len(),
            known.len()
        ));
        return "node count changed".to_owned();
    }
    let at = usize::from(node) % known.len();
    let number = NUMBER.fetch_add(1, Ordering::SeqCst);
    let witness = callable(
        env,
        &entry.context,
        format!("callable {number} set on node {at} of {}", entry.name),
        panic_in_run,
    );
    let probe = witness.probe();
    match listed[at].set_callable(move || probe.ran()) {
        Ok(()) => {
            took_effect("SetGraphCallable");
            known[at].callable = Some(Arc::clone(&witness));
            entry.every.push(witness);
            format!("node {at} of {} runs callable {number}", entry.name)
        }
        Err(error) => {
            env.check_refusal_in("HostNode::set_callable", Some(&entry.context), &error);
            format!("node {at} of {} refused a callable: {error}", entry.name)
        }
    }
}

fn set_exec_callable(
    env: &Env,
    exec: u8,
    node: u8,
    panic_in_run: bool,
    fences_fail: bool,
) -> String {
    let Some(exec) = pick(&EXECS, exec) else {
        return "no executable".to_owned();
    };
    let graph_id = lock(&exec).graph;
    let Some(graph) = graph_by_id(graph_id) else {
        return format!("{}: its graph is gone", lock(&exec).name);
    };
    // Graph before executable, always.
    let graph = lock(&graph);
    let mut exec = lock(&exec);
    let exec = &mut *exec;
    let Some(known) = exec.nodes.as_mut().filter(|nodes| !nodes.is_empty()) else {
        return format!("{}: no node the harness knows", exec.name);
    };
    let listed = match graph.graph.host_nodes() {
        Ok(listed) => listed,
        Err(error) => {
            env.check_refusal_in("Graph::host_nodes", Some(&graph.context), &error);
            return format!("{} host_nodes refused: {error}", graph.name);
        }
    };
    if listed.len() != known.len() {
        return format!("{}: its graph lists other nodes", exec.name);
    }
    let at = usize::from(node) % known.len();
    let number = NUMBER.fetch_add(1, Ordering::SeqCst);
    let witness = callable(
        env,
        &exec.context,
        format!("callable {number} set on node {at} of {}", exec.name),
        panic_in_run,
    );
    let probe = witness.probe();
    if fences_fail {
        env.world.faults_armed.store(true, Ordering::SeqCst);
        env.controls
            .fail_next_calls(c"cuEventQuery", 64, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    }
    let set = exec
        .exec
        .set_host_node_callable(&listed[at], move || probe.ran());
    if fences_fail {
        env.controls
            .fail_next_calls(c"cuEventQuery", 0, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    }
    match set {
        Ok(()) => {
            took_effect(match (known[at].engine, fences_fail) {
                (true, _) => "SetExecCallable (engine)",
                (false, true) => "SetExecCallable (fences fail)",
                (false, false) => "SetExecCallable",
            });
            known[at].callable = Some(Arc::clone(&witness));
            exec.every.push(witness);
            format!("node {at} of {} runs callable {number}", exec.name)
        }
        Err(error) => {
            env.check_refusal_in(
                "GraphExec::set_host_node_callable",
                Some(&exec.context),
                &error,
            );
            format!("node {at} of {} refused a callable: {error}", exec.name)
        }
    }
}

fn update(env: &Env, exec: u8, graph: u8) -> String {
    let Some(shared) = pick(&EXECS, exec) else {
        return "no executable".to_owned();
    };
    // Half the time from the graph it was made from, whose shape is its own (after callables
    // were replaced in either): an update that takes effect. Otherwise from any graph.
    // The executable's lock is let go before any graph's is taken: graph before executable,
    // always.
    let own_graph = lock(&shared).graph;
    let own = graph
        .is_multiple_of(2)
        .then(|| graph_by_id(own_graph))
        .flatten();
    let Some(graph) = own.or_else(|| pick(&GRAPHS, graph)) else {
        return "no graph".to_owned();
    };
    let graph = lock(&graph);
    let mut exec = lock(&shared);
    let shape = |nodes: &Option<Vec<Node>>| {
        nodes
            .as_ref()
            .map(|nodes| nodes.iter().map(|node| node.engine).collect::<Vec<_>>())
    };
    let (to, from) = (shape(&graph.nodes), shape(&exec.nodes));
    let elsewhere = graph.context.context.as_raw() != exec.context.context.as_raw();
    let engine = [&to, &from]
        .iter()
        .any(|nodes| nodes.iter().flatten().any(|&engine| engine));
    let answer = exec.exec.update(&graph.graph);
    // What refuses before the driver is asked, whatever else happens.
    if elsewhere || engine {
        return match answer {
            Err(Error::InvalidArgument { what }) => {
                format!(
                    "{} refused an update from {}: {what}",
                    exec.name, graph.name
                )
            }
            Err(error) => {
                env.check_refusal_in("GraphExec::update", Some(&exec.context), &error);
                format!("{} update from {} refused: {error}", exec.name, graph.name)
            }
            Ok(()) => {
                violated(format!(
                    "{} was updated from {}, though {}",
                    exec.name,
                    graph.name,
                    if elsewhere {
                        "of another context"
                    } else {
                        "one has engine nodes"
                    }
                ));
                "updated".to_owned()
            }
        };
    }
    if let Err(error) = answer {
        // The harness knows the nodes, not their edges: another shape is the driver's to tell.
        let update_failed = matches!(&error, Error::Driver(driver)
            if driver.result() == CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
        if !update_failed {
            env.check_refusal_in("GraphExec::update", Some(&exec.context), &error);
        }
        return format!("{} update from {} refused: {error}", exec.name, graph.name);
    }
    if let (Some(to), Some(from)) = (&to, &from)
        && to != from
    {
        violated(format!(
            "{} was updated from {}, of another shape ({from:?} to {to:?})",
            exec.name, graph.name
        ));
    }
    // The nodes run the graph's callables from now on: what a later launch may run. Those it
    // ran before stay for its launches in flight, which noted them when they were made.
    took_effect("Update");
    exec.every = match &graph.nodes {
        Some(nodes) => nodes
            .iter()
            .filter_map(|node| node.callable.clone())
            .collect(),
        None => graph.every.clone(),
    };
    // Never itself, nor one that keeps it: a cycle of `Arc`s no drop would break.
    let kept = graph
        .keeps
        .iter()
        .filter(|kept| !keeps_alive(kept, &shared));
    exec.keeps.extend(kept.cloned());
    exec.nodes = from.and(graph.nodes.clone());
    format!("{} updated from {}", exec.name, graph.name)
}

/// Whether `from` is `target` or keeps it alive through the executables it keeps. One that
/// another worker holds locked is taken to: the caller then keeps nothing that could close a
/// cycle. An executable left out this way may be dropped first, which only ends the harness's
/// own bookkeeping of it: the driver's user objects keep what its nodes run.
fn keeps_alive(from: &Shared<ExecEntry>, target: &Shared<ExecEntry>) -> bool {
    if Arc::ptr_eq(from, target) {
        return true;
    }
    let entry = match from.try_lock() {
        Ok(entry) => entry,
        Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return true,
    };
    entry.keeps.iter().any(|kept| keeps_alive(kept, target))
}

fn clone(env: &Env, graph: u8) -> String {
    let Some(entry) = pick(&GRAPHS, graph) else {
        return "no graph".to_owned();
    };
    let entry = lock(&entry);
    match entry.graph.try_clone() {
        Ok(copy) => {
            let id = NUMBER.fetch_add(1, Ordering::SeqCst);
            let made = GraphEntry {
                id,
                name: format!("graph {id} (a clone of {})", entry.name),
                graph: copy,
                context: Arc::clone(&entry.context),
                nodes: entry.nodes.clone(),
                every: entry.nodes.as_ref().map_or_else(
                    || entry.every.clone(),
                    |nodes| {
                        nodes
                            .iter()
                            .filter_map(|node| node.callable.clone())
                            .collect()
                    },
                ),
                keeps: entry.keeps.clone(),
            };
            drop(entry);
            took_effect("Clone");
            format!("{} made", keep(made))
        }
        Err(error) => {
            env.check_refusal_in("Graph::try_clone", Some(&entry.context), &error);
            format!("{} clone refused: {error}", entry.name)
        }
    }
}

fn host_nodes(env: &Env, graph: u8) -> String {
    let Some(entry) = pick(&GRAPHS, graph) else {
        return "no graph".to_owned();
    };
    let entry = lock(&entry);
    let listed = match entry.graph.host_nodes() {
        Ok(listed) => listed,
        Err(error) => {
            env.check_refusal_in("Graph::host_nodes", Some(&entry.context), &error);
            return format!("{} host_nodes refused: {error}", entry.name);
        }
    };
    if let Some(known) = &entry.nodes {
        let engines: Vec<_> = listed.iter().map(|node| node.runs_on_engine()).collect();
        let expected: Vec<_> = known.iter().map(|node| node.engine).collect();
        if engines != expected {
            violated(format!(
                "{} lists host nodes {engines:?} (engine or not), where it has {expected:?}",
                entry.name
            ));
        }
        for (at, node) in listed.iter().enumerate() {
            match node.callable() {
                // A clone of the callable's handle: the graph keeps the callable.
                Ok(Some(callable)) => drop(callable),
                Ok(None) => violated(format!(
                    "node {at} of {} has no callable of cuda-host's",
                    entry.name
                )),
                Err(error) => {
                    env.check_refusal_in("HostNode::callable", Some(&entry.context), &error)
                }
            }
        }
    }
    took_effect("HostNodes");
    format!("{} has {} host nodes", entry.name, listed.len())
}

/// At the end of a sequence: every executable, then every graph, dropped on the calling worker;
/// the device as fast as ever.
pub fn drop_all(controls: &suite::software::Controls) -> String {
    controls.set_wait_poll_interval(None);
    lock(&TAKEN).clear();
    let execs = std::mem::take(&mut *lock(&EXECS));
    let graphs = std::mem::take(&mut *lock(&GRAPHS));
    let counts = (execs.len(), graphs.len());
    // What keeps executables alive for captures' graphs may run in a circle (an executable
    // updated from such a graph): let go first.
    let kept: Vec<_> = execs
        .iter()
        .flat_map(|exec| std::mem::take(&mut lock(exec).keeps))
        .chain(
            graphs
                .iter()
                .flat_map(|graph| std::mem::take(&mut lock(graph).keeps)),
        )
        .collect();
    for exec in &kept {
        drop(std::mem::take(&mut lock(exec).keeps));
    }
    drop(kept);
    drop(execs);
    drop(graphs);
    format!("{} executables and {} graphs dropped", counts.0, counts.1)
}

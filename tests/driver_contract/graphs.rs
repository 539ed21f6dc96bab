//! Explicit host-node graphs, clones, parameter updates.

use crate::harness::*;
use suite::capture::Graph;
use suite::host_function::host_params;
use suite::ok;

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

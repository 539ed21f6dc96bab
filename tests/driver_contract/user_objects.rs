//! User objects: who keeps them alive, where and when their destructor runs.

use crate::harness::*;
use cuda_host::Stream;
use suite::capture::{Exec, Graph};
use suite::{hold_and_release, ok, wait_until};

/// A graph with a host node, owning (moved into it) the one reference of a user object that
/// `probe` watches, and an executable of it, launched once on `stream` and finished.
fn launched_graph_owning(probe: &'static DestructorProbe, stream: &Stream) -> (Graph, Exec) {
    let graph = Graph::new();
    graph.add_host_node(&[], probe.node());
    graph_retain(&graph, user_object(probe, 1), MOVE);
    let exec = graph.instantiate();
    exec.launch(stream.as_raw());
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    (graph, exec)
}

#[test]
fn a_moved_user_object_is_destroyed_only_after_its_graph_its_executable_and_its_last_launch() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let probe = DestructorProbe::new();
    let (graph, exec) = launched_graph_owning(probe, &stream);

    probe.release("graph destroyed");
    drop(graph);
    exec.launch(stream.as_raw());
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    destructor_round_trip();
    assert_eq!(probe.runs(), 0, "destroyed while its executable exists");

    let synchronized = hold_and_release(
        &stream,
        || {
            exec.launch(stream.as_raw());
            probe.release("executable destroyed, launch held");
            let (exec, destroy_context) = (SendHandle(exec), context.clone());
            returns_while_held("cuGraphExecDestroy with its launch held", move || {
                destroy_context.bind_to_thread().expect("the context binds");
                drop(exec.into_inner());
            });
        },
        || {
            destructor_round_trip();
            assert_eq!(probe.runs(), 0, "destroyed while a launch is in flight");
            assert_eq!(count(&probe.node_runs), 2, "the held launch ran early");
        },
        |stream| {
            wait_until("the user object's destructor", || probe.runs() == 1);
            synchronize(stream.as_raw())
        },
    );
    ok("cuStreamSynchronize", synchronized);

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
    let (graph, exec) = launched_graph_owning(probe, &stream);

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
    let releasing_thread = on_another_thread(user_object(elsewhere, 1), move |object| {
        release(object, 1);
        (elsewhere.runs(), std::thread::current().id())
    });
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

#[test]
fn a_graph_releasing_the_last_reference_runs_the_destructor_inside_that_call() {
    let _shared = shared();
    let _context = current_context();
    let probe = DestructorProbe::new();
    let object = user_object(probe, 1);
    let graph = Graph::new();
    graph_retain(&graph, object, MOVE);
    probe.release("released by the graph");
    // SAFETY: a live graph that holds the one reference it releases.
    ok("cuGraphReleaseUserObject", unsafe {
        driver().cuGraphReleaseUserObject(graph.0, object, 1)
    });
    assert_eq!(probe.runs(), 1, "cuGraphReleaseUserObject returned first");
    assert_eq!(probe.thread(), std::thread::current().id());
    assert_eq!(
        probe.seen().map(|(step, _)| step),
        Some("released by the graph")
    );
}

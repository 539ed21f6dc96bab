//! Explicit host-node graphs, their nodes, clones, parameter updates, uploads.

use crate::harness::*;
use cuda_host::{Event, EventFlags};
use cuda_host_sys::{CUDA_HOST_NODE_PARAMS, CUresult};
use std::ptr;
use suite::capture::Graph;
use suite::host_function::host_params;
use suite::{hold_and_release, ok};

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

#[test]
fn a_graph_lists_its_nodes_by_count_then_in_an_array_whose_spare_entries_it_clears() {
    let _shared = shared();
    let _context = current_context();
    let log = Log::default();
    let graph = Graph::new();
    let mut added = [
        graph.add_host_node(&[], log.marker("a")),
        graph.add_host_node(&[], log.marker("b")),
    ];
    let mut count = 0;
    // SAFETY: a live graph; no array, so only the count is written.
    ok("cuGraphGetNodes", unsafe {
        driver().cuGraphGetNodes(graph.0, ptr::null_mut(), &mut count)
    });
    assert_eq!(count, 2);

    let sentinel = added[0];
    let (mut listed, mut room) = ([sentinel; 3], 3);
    // SAFETY: a live graph and an array of `room` nodes.
    ok("cuGraphGetNodes", unsafe {
        driver().cuGraphGetNodes(graph.0, listed.as_mut_ptr(), &mut room)
    });
    assert_eq!(room, 2, "the nodes written");
    assert!(listed[2].is_null(), "the spare entry is cleared");
    let mut listed = [listed[0], listed[1]];
    listed.sort();
    added.sort();
    assert_eq!(listed, added, "in any order");
}

#[test]
fn a_host_node_reads_back_the_parameters_last_set() {
    let _shared = shared();
    let _context = current_context();
    let log = Log::default();
    let graph = Graph::new();
    let node = graph.add_host_node(&[], log.marker("original"));
    let params = host_params(log.marker("updated"));
    // SAFETY: a node of a live graph, and parameters living for the process.
    ok("cuGraphHostNodeSetParams", unsafe {
        driver().cuGraphHostNodeSetParams(node, &params)
    });
    let mut read = CUDA_HOST_NODE_PARAMS {
        fn_: None,
        userData: ptr::null_mut(),
    };
    // SAFETY: a node of a live graph and a valid out-pointer.
    ok("cuGraphHostNodeGetParams", unsafe {
        driver().cuGraphHostNodeGetParams(node, &mut read)
    });
    assert_eq!(read.userData, params.userData);
    let function = read.fn_.expect("the host function");
    // SAFETY: the parameters set above: `run_closure` with its leaked closure.
    unsafe { function(read.userData) };
    assert_eq!(
        log.entries(),
        ["updated"],
        "the function read back is the one set"
    );
}

#[test]
fn an_upload_is_ordered_behind_the_streams_work_and_the_graph_still_launches() {
    let _shared = shared();
    let context = current_context();
    let (stream, witness) = (non_blocking(&context), non_blocking(&context));
    let log = Log::default();
    let graph = chain(&log);
    let exec = graph.instantiate();
    let upload_done = Event::new(&context, EventFlags::DisableTiming).expect("event");
    let synchronized = hold_and_release(
        &stream,
        || {
            // SAFETY: a live executable and a live stream of the current context.
            ok("cuGraphUpload", unsafe {
                driver().cuGraphUpload(exec.0, stream.as_raw())
            });
            record(&upload_done, stream.as_raw());
        },
        || {
            let_free_work_run(&witness);
            assert_eq!(
                event_query(upload_done.as_raw()),
                CUresult::CUDA_ERROR_NOT_READY,
                "the upload went ahead of the held work"
            );
            assert!(log.entries().is_empty(), "an upload ran the graph");
        },
        |stream| {
            exec.launch(stream.as_raw());
            synchronize(stream.as_raw())
        },
    );
    ok("cuStreamSynchronize", synchronized);
    assert_eq!(log.entries(), ["first", "middle", "last"]);
}

#[test]
fn listing_an_empty_graphs_nodes_into_an_array_with_room_for_none_is_refused() {
    let _shared = shared();
    let _context = current_context();
    let graph = Graph::new();
    let mut count = 7;
    // SAFETY: a live graph; a null array asks for the count only.
    let counted = unsafe { driver().cuGraphGetNodes(graph.0, ptr::null_mut(), &mut count) };
    assert_eq!((counted, count), (CUresult::CUDA_SUCCESS, 0));
    let mut room = [ptr::null_mut(); 1];
    let mut none = 0;
    // SAFETY: a live graph; the array has room for one node, of which the call may use none.
    let listed = unsafe { driver().cuGraphGetNodes(graph.0, room.as_mut_ptr(), &mut none) };
    assert_eq!(listed, CUresult::CUDA_ERROR_INVALID_VALUE);
}

//! Whole-graph updates of an executable (`cuGraphExecUpdate_v2`): from a graph of the same
//! topology its nodes take that graph's parameters, and it holds that graph's user objects
//! instead of its own graph's; from any other graph it is refused, with the reason, and the
//! executable is left as it was.

use crate::harness::*;
use cuda_host_sys::{
    CUdeviceptr, CUgraphExecUpdateResult, CUgraphExecUpdateResultInfo, CUgraphNode, CUresult,
    CUstreamBatchMemOpType,
};
use std::ptr;
use suite::capture::{Capture, Exec, Graph};
use suite::{MappedWords, hold_and_release, ok, wait_until};

const UPDATE_FAILURE: CUresult = CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
const TOPOLOGY_CHANGED: CUgraphExecUpdateResult =
    CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;

/// `cuGraphExecUpdate_v2(exec, graph)`: the driver's answer and the result information it wrote.
pub(crate) fn update(exec: &Exec, graph: &Graph) -> (CUresult, CUgraphExecUpdateResultInfo) {
    let mut info = CUgraphExecUpdateResultInfo {
        // Values the driver never writes, so that unwritten fields show.
        result: CUgraphExecUpdateResult(77),
        errorNode: ptr::dangling_mut(),
        errorFromNode: ptr::dangling_mut(),
    };
    // SAFETY: a live executable, a live graph and a valid out-pointer.
    let result = unsafe { driver().cuGraphExecUpdate_v2(exec.0, graph.0, &mut info) };
    (result, info)
}

/// The answer and result information of an update refused for `result`, naming `node` and `from`.
fn refused(
    result: CUgraphExecUpdateResult,
    node: CUgraphNode,
    from: CUgraphNode,
) -> (CUresult, CUgraphExecUpdateResult, CUgraphNode, CUgraphNode) {
    (UPDATE_FAILURE, result, node, from)
}

fn fields(
    (answer, info): (CUresult, CUgraphExecUpdateResultInfo),
) -> (CUresult, CUgraphExecUpdateResult, CUgraphNode, CUgraphNode) {
    (answer, info.result, info.errorNode, info.errorFromNode)
}

/// A graph `first → middle → last` whose host nodes log `names`, created last-first (as
/// `graphs::chain`), so that an update pairs nodes by the edges, not only by creation order.
fn chain(log: &Log, names: [&'static str; 3]) -> Graph {
    let graph = Graph::new();
    let last = graph.add_host_node(&[], log.marker(names[2]));
    let first = graph.add_host_node(&[], log.marker(names[0]));
    let middle = graph.add_host_node(&[first], log.marker(names[1]));
    graph.add_dependency(middle, last);
    graph
}

/// Launches `exec` once on `stream` and waits for it.
fn launch_and_wait(exec: &Exec, stream: &cuda_host::Stream) {
    exec.launch(stream.as_raw());
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
}

#[test]
fn an_update_from_a_graph_of_the_same_topology_changes_what_the_next_launches_run() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let log = Log::default();
    let original = chain(&log, ["a first", "a middle", "a last"]);
    let exec = original.instantiate();
    launch_and_wait(&exec, &stream);

    let replacement = chain(&log, ["b first", "b middle", "b last"]);
    assert_eq!(
        fields(update(&exec, &replacement)),
        (
            SUCCESS,
            CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS,
            ptr::null_mut(),
            ptr::null_mut()
        )
    );
    drop(replacement);
    launch_and_wait(&exec, &stream);
    launch_and_wait(&exec, &stream);
    let fresh = original.instantiate();
    launch_and_wait(&fresh, &stream);
    assert_eq!(
        log.entries(),
        [
            ["a first", "a middle", "a last"],
            ["b first", "b middle", "b last"],
            ["b first", "b middle", "b last"],
            ["a first", "a middle", "a last"],
        ]
        .concat(),
        "before the update, the updated executable twice, its original graph's new executable"
    );
}

#[test]
fn an_update_from_a_graph_with_another_node_count_is_refused_naming_no_node() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let log = Log::default();
    let original = Graph::new();
    original.add_host_node(&[], log.marker("original"));
    let exec = original.instantiate();

    let larger = Graph::new();
    let first = larger.add_host_node(&[], log.marker("larger first"));
    larger.add_host_node(&[first], log.marker("larger second"));
    assert_eq!(
        fields(update(&exec, &larger)),
        refused(TOPOLOGY_CHANGED, ptr::null_mut(), ptr::null_mut())
    );
    launch_and_wait(&exec, &stream);
    assert_eq!(log.entries(), ["original"], "the executable was changed");
}

#[test]
fn an_update_from_a_graph_whose_node_has_other_dependencies_is_refused_naming_that_node() {
    // Both graphs have one exit node, `last`, which pairs with the other's: the original's
    // depends on one node, the new one's on two.
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let log = Log::default();
    let original = chain(&log, ["first", "middle", "last"]);
    let exec = original.instantiate();

    let other = Graph::new();
    let a = other.add_host_node(&[], log.marker("other a"));
    let b = other.add_host_node(&[], log.marker("other b"));
    let last = other.add_host_node(&[a, b], log.marker("other last"));
    assert_eq!(
        fields(update(&exec, &other)),
        refused(TOPOLOGY_CHANGED, last, ptr::null_mut())
    );
    launch_and_wait(&exec, &stream);
    assert_eq!(log.entries(), ["first", "middle", "last"]);
}

#[test]
fn an_update_from_a_graph_with_more_exit_nodes_is_refused_naming_one_of_them() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let log = Log::default();
    let original = Graph::new();
    let first = original.add_host_node(&[], log.marker("first"));
    original.add_host_node(&[first], log.marker("second"));
    let exec = original.instantiate();

    let apart = Graph::new();
    let exits = [
        apart.add_host_node(&[], log.marker("apart a")),
        apart.add_host_node(&[], log.marker("apart b")),
    ];
    let (answer, info) = update(&exec, &apart);
    assert_eq!(
        (answer, info.result, info.errorFromNode),
        (UPDATE_FAILURE, TOPOLOGY_CHANGED, ptr::null_mut())
    );
    assert!(
        exits.contains(&info.errorNode),
        "the error node is not an exit node of the new graph: {:?}",
        info.errorNode
    );
    launch_and_wait(&exec, &stream);
    assert_eq!(log.entries(), ["first", "second"]);
}

#[test]
fn an_update_that_changes_a_nodes_type_is_refused_naming_that_node() {
    let _alone = alone(); // a capture, and device memory
    let context = current_context();
    let stream = non_blocking(&context);
    let memory = DeviceMemory::new(16);
    let capture = Capture::begin(stream.as_raw(), RELAXED);
    // SAFETY: 16 bytes of a live allocation, on a live stream being captured.
    ok("cuMemsetD8Async", unsafe {
        driver().cuMemsetD8Async(memory.0, 0x5a, 16, stream.as_raw())
    });
    let captured = capture.end().expect("the capture ends in a graph");
    let exec = captured.instantiate();

    let log = Log::default();
    let hosted = Graph::new();
    let host = hosted.add_host_node(&[], log.marker("host"));
    assert_eq!(
        fields(update(&exec, &hosted)),
        refused(
            CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED,
            host,
            ptr::null_mut()
        )
    );
    launch_and_wait(&exec, &stream);
    assert!(log.entries().is_empty(), "the executable runs a host node");
    assert_eq!(
        memory.words(),
        [0x5a5a_5a5a; 4],
        "the executable's memset ran"
    );
}

/// A graph with a host node counted by `probe`, owning (moved into it) the one reference of a
/// user object that `probe` watches.
fn graph_owning(probe: &'static DestructorProbe) -> Graph {
    let graph = Graph::new();
    graph.add_host_node(&[], probe.node());
    graph_retain(&graph, user_object(probe, 1), MOVE);
    graph
}

#[test]
fn an_updated_executable_holds_the_new_graphs_user_objects_and_lets_its_old_ones_go() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let (old, new) = (DestructorProbe::new(), DestructorProbe::new());
    let (old_graph, new_graph) = (graph_owning(old), graph_owning(new));
    let exec = old_graph.instantiate();
    launch_and_wait(&exec, &stream);

    let synchronized = hold_and_release(
        &stream,
        || {
            exec.launch(stream.as_raw());
            let (exec, graph, update_context) =
                (SendHandle(exec.0), SendHandle(new_graph.0), context.clone());
            let answer = returns_while_held("cuGraphExecUpdate_v2 with a launch held", move || {
                update_context.bind_to_thread().expect("the context binds");
                let mut info = CUgraphExecUpdateResultInfo::default();
                // SAFETY: a live executable, a live graph and a valid out-pointer.
                let answer =
                    unsafe { driver().cuGraphExecUpdate_v2(exec.get(), graph.get(), &mut info) };
                (answer, info.result)
            });
            assert_eq!(
                answer,
                (
                    SUCCESS,
                    CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS
                )
            );
            old.release("old graph destroyed, launch held");
            drop(old_graph);
        },
        || {
            destructor_round_trip();
            assert_eq!(old.runs(), 0, "destroyed while a launch is in flight");
            assert_eq!(count(&old.node_runs), 1, "the held launch ran early");
        },
        |stream| {
            wait_until("the old user object's destructor", || old.runs() == 1);
            synchronize(stream.as_raw())
        },
    );
    ok("cuStreamSynchronize", synchronized);
    assert_eq!(
        old.seen(),
        Some(("old graph destroyed, launch held", 2)),
        "the old user object goes after its graph and the launch in flight, not with the update"
    );

    new.release("new graph destroyed");
    drop(new_graph);
    launch_and_wait(&exec, &stream);
    destructor_round_trip();
    assert_eq!(
        new.runs(),
        0,
        "destroyed while the updated executable exists"
    );
    assert_eq!(
        count(&new.node_runs),
        1,
        "the updated executable runs the new node"
    );

    new.release("executable destroyed");
    drop(exec);
    wait_until("the new user object's destructor", || new.runs() == 1);
    assert_eq!(new.seen(), Some(("executable destroyed", 1)));
    assert_eq!(
        (old.runs(), count(&old.node_runs)),
        (1, 2),
        "the updated executable ran the old node"
    );
}

#[test]
fn a_refused_update_keeps_the_executables_user_objects() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let (kept, offered) = (DestructorProbe::new(), DestructorProbe::new());
    let graph = graph_owning(kept);
    let exec = graph.instantiate();
    drop(graph);

    let larger = graph_owning(offered);
    larger.add_host_node(&[], offered.node());
    assert_eq!(update(&exec, &larger).0, UPDATE_FAILURE);
    offered.release("larger graph destroyed");
    drop(larger);
    wait_until("the refused graph's user object's destructor", || {
        offered.runs() == 1
    });
    launch_and_wait(&exec, &stream);
    destructor_round_trip();
    assert_eq!(kept.runs(), 0, "destroyed while its executable exists");
    assert_eq!(
        count(&kept.node_runs),
        1,
        "the executable runs its own node"
    );
    kept.release("executable destroyed");
    drop(exec);
    wait_until("the user object's destructor", || kept.runs() == 1);
    assert_eq!(
        kept.seen().map(|(step, _)| step),
        Some("executable destroyed")
    );
}

/// A graph of one batch node writing `value` to `address`, and that node.
fn writing(address: CUdeviceptr, value: u32) -> (Graph, CUgraphNode) {
    let graph = Graph::new();
    let write = CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_32;
    let node = add_batch_node(&graph, &[], &mut [batched(write, address, value, 0)]);
    (graph, node)
}

#[test]
fn an_update_gives_a_batch_node_the_operations_of_its_pair() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let words = MappedWords::new(&context, 2);
    let (original, _) = writing(words.device_address(0), 5);
    let exec = original.instantiate();
    let (replacement, _) = writing(words.device_address(1), 6);
    assert_eq!(update(&exec, &replacement).0, SUCCESS);
    drop(replacement);
    launch_and_wait(&exec, &stream);
    assert_eq!(
        (words.get(0), words.get(1)),
        (0, 6),
        "the updated executable"
    );
    launch_and_wait(&original.instantiate(), &stream);
    assert_eq!(
        (words.get(0), words.get(1)),
        (5, 6),
        "its graph's new executable"
    );
}

#[test]
fn an_update_that_changes_a_batch_nodes_op_count_is_refused_naming_that_node() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let words = MappedWords::new(&context, 2);
    let (original, _) = writing(words.device_address(0), 5);
    let exec = original.instantiate();
    let write = CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_32;
    let longer = Graph::new();
    let node = add_batch_node(
        &longer,
        &[],
        &mut [
            batched(write, words.device_address(0), 7, 0),
            batched(write, words.device_address(1), 8, 0),
        ],
    );
    assert_eq!(
        fields(update(&exec, &longer)),
        refused(
            CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED,
            node,
            ptr::null_mut()
        )
    );
    launch_and_wait(&exec, &stream);
    assert_eq!(
        (words.get(0), words.get(1)),
        (5, 0),
        "the executable was changed"
    );
}

//! Batch memory-operation nodes (`CU_GRAPH_NODE_TYPE_BATCH_MEM_OP`): stream memory operations
//! as one graph node, made by `cuGraphAddBatchMemOpNode` or by capturing
//! `cuStreamBatchMemOp_v2`, whose operations run in order on each launch; their parameters in a
//! graph, in its clones and in each executable.

use crate::harness::*;
use cuda_host_sys::{
    CUDA_BATCH_MEM_OP_NODE_PARAMS, CUcontext, CUgraphExec, CUgraphNode, CUgraphNodeType, CUresult,
    CUstream, CUstreamBatchMemOpParams, CUstreamBatchMemOpType, CUstreamCaptureStatus,
    CUstreamWaitValue_flags,
};
use std::ptr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use suite::capture::{Capture, Graph};
use suite::{MappedWords, hold_and_release, ok, wait_until};

const WRITE_32: CUstreamBatchMemOpType = CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_32;
const WAIT_32: CUstreamBatchMemOpType = CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WAIT_VALUE_32;
const WRITE_64: CUstreamBatchMemOpType = CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_64;
const WAIT_64: CUstreamBatchMemOpType = CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WAIT_VALUE_64;
const GEQ: u32 = CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ.0;
const EQ: u32 = CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_EQ.0;
const BATCH_MEM_OP: CUgraphNodeType = CUgraphNodeType::CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;

/// What `cuGraphBatchMemOpNodeGetParams` reads back of a node: its context, its flags, and its
/// operations, copied out of the memory the node owns.
fn read_back(node: CUgraphNode) -> (CUcontext, u32, Vec<CUstreamBatchMemOpParams>) {
    let mut params = CUDA_BATCH_MEM_OP_NODE_PARAMS {
        ctx: ptr::null_mut(),
        count: 0,
        paramArray: ptr::null_mut(),
        flags: 77,
    };
    // SAFETY: a batch node of a live graph and a valid out-pointer.
    ok("cuGraphBatchMemOpNodeGetParams", unsafe {
        driver().cuGraphBatchMemOpNodeGetParams(node, &mut params)
    });
    assert!(!params.paramArray.is_null(), "no operations read back");
    let count = usize::try_from(params.count).expect("a count");
    // SAFETY: the driver points to `count` operations the node owns, valid until its parameters
    // change or it is destroyed; they are copied out at once.
    let ops = unsafe { std::slice::from_raw_parts(params.paramArray, count) }.to_vec();
    (params.ctx, params.flags, ops)
}

/// Each operation as [`described`] tells it.
fn described_all(ops: &[CUstreamBatchMemOpParams]) -> Vec<(CUstreamBatchMemOpType, u64, u64, u32)> {
    ops.iter().map(described).collect()
}

/// `cuGraphNodeGetType` of `node`, which must succeed.
fn node_type(node: CUgraphNode) -> CUgraphNodeType {
    let mut kind = CUgraphNodeType(77);
    // SAFETY: a node of a live graph and a valid out-pointer.
    ok("cuGraphNodeGetType", unsafe {
        driver().cuGraphNodeGetType(node, &mut kind)
    });
    kind
}

/// The nodes of `graph` (`cuGraphGetNodes`), in the order the driver lists them.
pub(crate) fn nodes_of(graph: &Graph) -> Vec<CUgraphNode> {
    let mut count = 0;
    // SAFETY: a live graph; no array, so only the count is written.
    ok("cuGraphGetNodes", unsafe {
        driver().cuGraphGetNodes(graph.0, ptr::null_mut(), &mut count)
    });
    let mut nodes = vec![ptr::null_mut(); count];
    // SAFETY: a live graph and an array of `count` nodes.
    ok("cuGraphGetNodes", unsafe {
        driver().cuGraphGetNodes(graph.0, nodes.as_mut_ptr(), &mut count)
    });
    nodes.truncate(count);
    nodes
}

/// `cuGraphBatchMemOpNodeSetParams(node, ops)`, which must succeed.
#[track_caller]
fn set_node_ops(node: CUgraphNode, ops: &mut [CUstreamBatchMemOpParams]) {
    let params = batch_params(ops);
    // SAFETY: a batch node of a live graph; the operations name mapped memory of the context.
    ok("cuGraphBatchMemOpNodeSetParams", unsafe {
        driver().cuGraphBatchMemOpNodeSetParams(node, &params)
    });
}

/// `cuGraphExecBatchMemOpNodeSetParams(exec, node, ops)`: the driver's answer.
fn set_exec_ops(
    exec: CUgraphExec,
    node: CUgraphNode,
    ops: &mut [CUstreamBatchMemOpParams],
) -> CUresult {
    let params = batch_params(ops);
    // SAFETY: a live executable, a node of the graph it was made from, and operations that name
    // mapped memory of the context.
    unsafe { driver().cuGraphExecBatchMemOpNodeSetParams(exec, node, &params) }
}

/// The dependencies a capturing stream's next work would get (`cuStreamGetCaptureInfo_v3`).
fn capture_dependencies(stream: CUstream) -> Vec<CUgraphNode> {
    let mut status = CUstreamCaptureStatus(77);
    let (mut dependencies, mut count) = (ptr::null(), usize::MAX);
    // SAFETY: a live stream and valid out-pointers; no id, graph or edge data asked for.
    ok("cuStreamGetCaptureInfo_v3", unsafe {
        driver().cuStreamGetCaptureInfo_v3(
            stream,
            &mut status,
            ptr::null_mut(),
            ptr::null_mut(),
            &mut dependencies,
            ptr::null_mut(),
            &mut count,
        )
    });
    assert_eq!(status, ACTIVE);
    if count == 0 {
        return Vec::new();
    }
    // SAFETY: the driver reported an array of `count` nodes, valid until the stream's next call.
    unsafe { std::slice::from_raw_parts(dependencies, count) }.to_vec()
}

/// Writes the 64-bit word of `words` when dropped: a test's batch waits for that value, so that
/// a failed assertion leaves no stream waiting for ever.
struct Satisfied<'a>(&'a MemOpWords, u64);

impl Drop for Satisfied<'_> {
    fn drop(&mut self) {
        self.0.set_wide(self.1);
    }
}

#[test]
fn a_batch_node_writes_then_waits_and_its_launch_completes_only_once_the_wait_is_satisfied() {
    let _shared = shared();
    let context = current_context();
    let (stream, witness) = (non_blocking(&context), non_blocking(&context));
    let words = MemOpWords::new(&context);
    let _released = Satisfied(&words, 2);
    let graph = Graph::new();
    add_batch_node(
        &graph,
        &[],
        &mut [
            batched_wide(WRITE_64, words.wide_address(), 1, 0),
            batched_wide(WAIT_64, words.wide_address(), 2, EQ),
        ],
    );
    let exec = graph.instantiate();
    let runs = Arc::new(AtomicUsize::new(0));
    exec.launch(stream.as_raw());
    launch(stream.as_raw(), counting(&runs));
    wait_until("the batch node's write", || words.wide() == 1);
    let_free_work_run(&witness);
    assert_eq!(
        count(&runs),
        0,
        "the stream went past the batch node's wait"
    );
    assert_eq!(
        query(stream.as_raw()),
        CUresult::CUDA_ERROR_NOT_READY,
        "the launch completed before its wait was satisfied"
    );
    words.set_wide(2);
    wait_until("the work after the batch node", || count(&runs) == 1);
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
}

#[test]
fn a_batch_node_copies_its_operations_and_reads_back_those_last_set() {
    let _shared = shared();
    let context = current_context();
    let words = MappedWords::new(&context, 2);
    let (a, b) = (words.device_address(0), words.device_address(1));
    let graph = Graph::new();
    let mut ops = [batched(WRITE_32, a, 5, 0), batched(WAIT_32, a, 5, GEQ)];
    let node = add_batch_node(&graph, &[], &mut ops);
    // The caller's array may change once the call has returned: the driver copied it.
    ops.fill(batched(WRITE_32, b, 9, 0));
    assert_eq!(node_type(node), BATCH_MEM_OP);
    let (ctx, flags, read) = read_back(node);
    assert_eq!((ctx, flags), (context.as_raw(), 0));
    assert_eq!(
        described_all(&read),
        [(WRITE_32, a, 5, 0), (WAIT_32, a, 5, GEQ)]
    );

    set_node_ops(node, &mut [batched(WRITE_32, b, 6, 0)]);
    let (_, _, read) = read_back(node);
    assert_eq!(described_all(&read), [(WRITE_32, b, 6, 0)]);
}

#[test]
fn an_executables_set_params_moves_its_batch_node_to_another_word_for_that_executable_only() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let words = MappedWords::new(&context, 2);
    let (a, b) = (words.device_address(0), words.device_address(1));
    let graph = Graph::new();
    let node = add_batch_node(&graph, &[], &mut [batched(WRITE_32, a, 5, 0)]);
    let (moved, kept) = (graph.instantiate(), graph.instantiate());
    let mut elsewhere = [batched(WRITE_32, b, 6, 0)];
    ok(
        "cuGraphExecBatchMemOpNodeSetParams",
        set_exec_ops(moved.0, node, &mut elsewhere),
    );
    // The caller's array may change once the call has returned: the driver copied it.
    elsewhere.fill(batched(WRITE_32, b, 7, 0));

    moved.run(&stream, 1);
    assert_eq!(
        (words.get(0), words.get(1)),
        (0, 6),
        "the executable whose node was set"
    );
    kept.run(&stream, 1);
    assert_eq!((words.get(0), words.get(1)), (5, 6), "another executable");
    words.set(0, 0);
    graph.instantiate().run(&stream, 1);
    assert_eq!(
        (words.get(0), words.get(1)),
        (5, 6),
        "a new executable of the graph"
    );
    let (_, _, read) = read_back(node);
    assert_eq!(
        described_all(&read),
        [(WRITE_32, a, 5, 0)],
        "the graph's node"
    );
}

#[test]
fn a_launch_keeps_the_batch_it_was_launched_with_when_the_executable_is_set_later() {
    let _shared = shared();
    let context = current_context();
    let (stream, witness) = (non_blocking(&context), non_blocking(&context));
    let words = MappedWords::new(&context, 2);
    let (a, b) = (words.device_address(0), words.device_address(1));
    let graph = Graph::new();
    let node = add_batch_node(&graph, &[], &mut [batched(WRITE_32, a, 5, 0)]);
    let exec = graph.instantiate();
    let synchronized = hold_and_release(
        &stream,
        || exec.launch(stream.as_raw()),
        || {
            let answer = set_exec_ops(exec.0, node, &mut [batched(WRITE_32, b, 6, 0)]);
            ok("cuGraphExecBatchMemOpNodeSetParams", answer);
            let_free_work_run(&witness);
            assert_eq!((words.get(0), words.get(1)), (0, 0), "ran while held");
        },
        |stream| synchronize(stream.as_raw()),
    );
    ok("cuStreamSynchronize", synchronized);
    assert_eq!(
        (words.get(0), words.get(1)),
        (5, 0),
        "the launch enqueued before the change"
    );
    exec.run(&stream, 1);
    assert_eq!((words.get(0), words.get(1)), (5, 6), "the next launch");
}

#[test]
fn an_executables_batch_node_may_not_change_its_op_count_or_types() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    // The first word is 8-byte aligned, so the third is too.
    let words = MappedWords::new(&context, 4);
    let (a, b, wide) = (
        words.device_address(0),
        words.device_address(1),
        words.device_address(2),
    );
    let graph = Graph::new();
    let node = add_batch_node(&graph, &[], &mut [batched(WRITE_32, a, 5, 0)]);
    let exec = graph.instantiate();
    let invalid = CUresult::CUDA_ERROR_INVALID_VALUE;
    let mut two = [batched(WRITE_32, b, 6, 0), batched(WRITE_32, b, 7, 0)];
    assert_eq!(
        set_exec_ops(exec.0, node, &mut two),
        invalid,
        "another count"
    );
    let mut wider = [batched_wide(WRITE_64, wide, 8, 0)];
    assert_eq!(
        set_exec_ops(exec.0, node, &mut wider),
        invalid,
        "a 64-bit write"
    );
    let mut waiting = [batched(WAIT_32, b, 0, GEQ)];
    assert_eq!(set_exec_ops(exec.0, node, &mut waiting), invalid, "a wait");
    exec.run(&stream, 1);
    assert_eq!(
        (words.get(0), words.get(1), words.get(2)),
        (5, 0, 0),
        "the executable's batch changed"
    );
}

#[test]
fn an_executables_batch_wait_may_change_its_comparison() {
    let _shared = shared();
    let context = current_context();
    let (stream, witness) = (non_blocking(&context), non_blocking(&context));
    let words = MemOpWords::new(&context);
    let _released = Satisfied(&words, 3);
    let address = words.wide_address();
    let graph = Graph::new();
    // At least 0: satisfied at once, with the word at 0.
    let node = add_batch_node(&graph, &[], &mut [batched_wide(WAIT_64, address, 0, GEQ)]);
    let exec = graph.instantiate();
    let mut equal = [batched_wide(WAIT_64, address, 3, EQ)];
    ok(
        "cuGraphExecBatchMemOpNodeSetParams",
        set_exec_ops(exec.0, node, &mut equal),
    );
    let runs = Arc::new(AtomicUsize::new(0));
    exec.launch(stream.as_raw());
    launch(stream.as_raw(), counting(&runs));
    let_free_work_run(&witness);
    assert_eq!(count(&runs), 0, "ran past a wait for the word to equal 3");
    words.set_wide(3);
    wait_until("the work after the changed wait", || count(&runs) == 1);
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
}

#[test]
fn a_clone_runs_its_own_copy_of_a_batch_node() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let words = MappedWords::new(&context, 2);
    let (a, b) = (words.device_address(0), words.device_address(1));
    let graph = Graph::new();
    let node = add_batch_node(&graph, &[], &mut [batched(WRITE_32, a, 5, 0)]);
    let clone = graph.clone_graph();
    set_node_ops(node, &mut [batched(WRITE_32, b, 6, 0)]);

    let cloned = nodes_of(&clone);
    assert_eq!(cloned.len(), 1);
    assert_eq!(node_type(cloned[0]), BATCH_MEM_OP);
    let (_, _, read) = read_back(cloned[0]);
    assert_eq!(described_all(&read), [(WRITE_32, a, 5, 0)]);
    drop(graph);
    clone.instantiate().run(&stream, 1);
    assert_eq!((words.get(0), words.get(1)), (5, 0), "the clone's launch");
}

#[test]
fn a_captured_batch_mem_op_is_one_batch_node_after_the_captures_dependencies() {
    let _alone = alone(); // a capture
    let context = current_context();
    let stream = non_blocking(&context);
    let words = leak(MappedWords::new(&context, 1));
    let seen: Arc<Mutex<Vec<(&'static str, u32)>>> = Arc::default();
    let sees = |what: &'static str| {
        let seen = Arc::clone(&seen);
        move || lock(&seen).push((what, words.get(0)))
    };
    let word = words.device_address(0);
    let mut ops = [batched(WRITE_32, word, 1, 0), batched(WAIT_32, word, 1, EQ)];

    let capture = Capture::begin(stream.as_raw(), RELAXED);
    launch(stream.as_raw(), sees("before"));
    let before = capture_dependencies(stream.as_raw());
    // SAFETY: a live stream being captured; mapped host memory of its context, aligned, which
    // outlives the graph's launches; two operations.
    ok("cuStreamBatchMemOp_v2", unsafe {
        driver().cuStreamBatchMemOp_v2(stream.as_raw(), 2, ops.as_mut_ptr(), 0)
    });
    let after = capture_dependencies(stream.as_raw());
    launch(stream.as_raw(), sees("after"));
    let graph = capture.end().expect("the capture ends in a graph");

    assert_eq!(
        (before.len(), after.len()),
        (1, 1),
        "the stream's dependencies"
    );
    let batch = after[0];
    assert_ne!(batch, before[0], "the batch is a node of its own");
    assert_eq!(node_type(batch), BATCH_MEM_OP);
    let listed = nodes_of(&graph);
    assert!(listed.contains(&before[0]) && listed.contains(&batch));
    let mut types: Vec<_> = listed.into_iter().map(|node| node_type(node).0).collect();
    types.sort_unstable();
    let host = CUgraphNodeType::CU_GRAPH_NODE_TYPE_HOST.0;
    assert_eq!(
        types,
        [host, host, BATCH_MEM_OP.0],
        "one node for the two operations"
    );
    let (ctx, flags, read) = read_back(batch);
    assert_eq!((ctx, flags), (context.as_raw(), 0));
    assert_eq!(
        described_all(&read),
        [(WRITE_32, word, 1, 0), (WAIT_32, word, 1, EQ)]
    );

    graph.instantiate().run(&stream, 1);
    assert_eq!(*lock(&seen), [("before", 0), ("after", 1)]);
}

//! The polled engine's graph host nodes (`Graph::add_engine_host_node`,
//! `GraphBuilder::begin_with_engine`, `GraphExec::launch`) under adversity: a callback refused
//! during its capture, an executable updated through its raw handle, another thread taking words
//! while a capture is open, a launch a capture took after the graph went, a child graph node
//! embedding the graph after it went, callables an executable replaced after a capture took its
//! launch, and the callable a retired word ran. Every test holds
//! [`suite::capture_lock`] or runs alone in a child process: captures and graph calls must not
//! overlap a global-mode capture of another test.

use cuda_host::{
    Context, Error, graph::CaptureMode, graph::Graph, graph::GraphBuilder, graph::HostNode,
    metrics, options::HostEngine, reclaim,
};
use cuda_host_sys::{CUdeviceptr, CUgraphExecUpdateResultInfo, CUresult};
use std::sync::Arc;
use suite::engine_graphs::{counting_graph, launch_taken_by_a_capture, new_stream};
use suite::{Tally, capture_lock, context, wait_until, wait_until_done};

/// A callback of a `HostEngine::Polled` capture refused for want of a free word
/// (`Error::AllocationInCapture`) drops its callable at once, on the capturing thread, under the
/// lock that adding a node holds (`engine_node::Template::new` makes the callable's record before
/// it looks for a word, and lets it go with `?`). A driver callback refused the same way is
/// dropped only at a drain after the capture (`GraphRecord::drop_soon`): a `Drop` run during the
/// capture may free memory and invalidate it, or call cuda-host and wait for that lock.
#[test]
fn an_engine_callback_refused_for_want_of_words_is_not_dropped_during_the_capture() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let builder = GraphBuilder::begin_with_engine(&stream, CaptureMode::Global, HostEngine::Polled)
        .expect("capture begins");
    let mut added = 0;
    let refused = loop {
        let tally = Tally::new();
        let probe = tally.probe();
        match builder.callback(move || probe.ran()) {
            Ok(()) => added += 1,
            Err(error) => break (tally, error),
        }
        assert!(added <= 100_000, "no end to the free words");
    };
    let (tally, error) = refused;
    assert!(
        matches!(error, Error::AllocationInCapture { .. }),
        "{error}"
    );
    let dropped_during_capture = tally.drops();
    let graph = builder.end().expect("the capture is intact");
    drop(graph);
    tally.reclaim_until_dropped(1, "the refused callable after the capture");
    assert_eq!(
        dropped_during_capture, 0,
        "the refused callable was dropped on the capturing thread, during the capture"
    );
}

/// An executable made through cuda-host and then updated (`cuGraphExecUpdate_v2`) from its own
/// graph takes back the graph's batch, which waits for nothing (`engine_node`'s module
/// documentation names an update among the executables that keep it). Its launches still queue
/// their callables on the engine (`ExecNode::launched`), but no request ever takes them: they pile
/// up for the life of the slot, the server never lets the slot go, the engine never parks, and
/// the callable is never released, not even once the executable and graph are gone.
#[test]
fn launches_of_an_updated_executable_queue_nothing_that_keeps_the_engine_awake() {
    // Alone in a process: the engine's servers are process-wide.
    suite::alone_in_child!(
        launches_of_an_updated_executable_queue_nothing_that_keeps_the_engine_awake
    );
    const LAUNCHES: usize = 10;
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let graph = counting_graph(&context, &tally);
    let executable = graph.instantiate().expect("instantiates");
    let mut info = CUgraphExecUpdateResultInfo::default();
    // SAFETY: a live executable, the live graph it was made from and a valid out-pointer.
    let updated = unsafe {
        context
            .driver()
            .cuGraphExecUpdate_v2(executable.as_raw(), graph.as_raw(), &mut info)
    };
    assert_eq!(updated, CUresult::CUDA_SUCCESS, "{:?}", info.result);
    for _ in 0..LAUNCHES {
        executable.launch(&stream).expect("launch");
    }
    wait_until_done(&stream);
    drop((executable, graph));
    wait_until(
        "the engine to let the updated executable's launches go and park",
        || {
            reclaim();
            let counts = metrics().polled_engine();
            counts.serving == 0 && counts.parked
        },
    );
    tally.reclaim_until_dropped(1, "the callable once its executable and graph are gone");
}

/// `GraphBuilder::ENGINE_WORDS_RESERVED` promises a `HostEngine::Polled` capture at least that
/// many engine callbacks, its words reserved before the capture began. But the reserve is the
/// context's free list, which every engine node takes from first (`engine_node::allocate_word`
/// pops a free word before it asks to allocate): another thread that adds engine nodes to a graph
/// of its own while the capture is open, not capturing at all, takes the reserved words, and the
/// capture's first callback is refused with `Error::AllocationInCapture`.
#[test]
fn an_engine_capture_keeps_its_reserved_words_while_another_thread_builds_engine_graphs() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let builder = GraphBuilder::begin_with_engine(&stream, CaptureMode::Global, HostEngine::Polled)
        .expect("capture begins");
    let taken = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let graph = Graph::new(&context).expect("graph");
                let mut taken = 0;
                // Until the free words are gone (the capture forbids allocating more).
                while graph.add_engine_host_node(&[], || {}).is_ok() {
                    taken += 1;
                    assert!(taken <= 100_000, "no end to the free words");
                }
                drop(graph);
                taken
            })
            .join()
            .expect("the other thread")
    });
    let mut added = 0;
    while added < GraphBuilder::ENGINE_WORDS_RESERVED {
        match builder.callback(|| {}) {
            Ok(()) => added += 1,
            Err(error) => {
                assert!(
                    matches!(error, Error::AllocationInCapture { .. }),
                    "{error}"
                );
                break;
            }
        }
    }
    drop(builder.end().expect("the capture is intact"));
    reclaim();
    assert_eq!(
        added,
        GraphBuilder::ENGINE_WORDS_RESERVED,
        "engine callbacks the capture could add, once another thread took {taken} words"
    );
}

/// An executable outlives its graph, as documented. But when a capture took one of its launches,
/// its next launch gives each engine node a fresh word through
/// `cuGraphExecBatchMemOpNodeSetParams(exec, node, ..)` (`ExecNode::refresh`), naming the node
/// by the handle it kept from the graph, which may be destroyed by then. NVIDIA's reference
/// requires the node to remain in the graph the executable was made from ("hNode must not have
/// been removed from the original graph"): the real driver may read freed memory there. The
/// software driver matches node handles by number, so the test asks whether the graph still
/// lived when the call was made.
#[test]
fn a_launch_never_names_a_node_of_a_destroyed_graph() {
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            "a_launch_never_names_a_node_of_a_destroyed_graph",
            "a capture begun inside a driver call is a software-driver control, and a look at a \
             destroyed graph's handle is safe only there",
        );
    };
    // Alone in a process: the retired node is served for the life of the process, and the
    // driver's call counts are process-wide.
    suite::alone_in_child!(a_launch_never_names_a_node_of_a_destroyed_graph);
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let graph = counting_graph(&context, &tally);
    let executable = graph.instantiate().expect("instantiates");
    let raw_graph = graph.as_raw();
    drop(graph);
    let _taken = launch_taken_by_a_capture(controls, &executable, &stream);
    let set_params = c"cuGraphExecBatchMemOpNodeSetParams";
    let calls = controls.call_count(set_params);
    executable.launch(&stream).expect("a launch after");
    wait_until_done(&stream);
    // The node keeps its retired word, which is answered without running (`GraphExec::launch`).
    assert_eq!(tally.runs(), 0);
    if controls.call_count(set_params) > calls {
        let mut count = 0;
        // SAFETY: the software driver answers a destroyed graph's handle with an error (its
        // handles are never reused).
        let graph_lives = unsafe {
            context
                .driver()
                .cuGraphGetNodes(raw_graph, std::ptr::null_mut(), &mut count)
        } == CUresult::CUDA_SUCCESS;
        assert!(
            graph_lives,
            "cuGraphExecBatchMemOpNodeSetParams named a node of the destroyed graph"
        );
    }
}

/// Pinned host memory freed when dropped, as a buffer a callable owns frees its memory; the
/// driver's answer to the free is kept in `freed`.
struct FreedOnDrop {
    context: Context,
    host: usize,
    freed: Arc<std::sync::Mutex<Option<CUresult>>>,
}

impl FreedOnDrop {
    fn new(context: &Context, freed: &Arc<std::sync::Mutex<Option<CUresult>>>) -> FreedOnDrop {
        context.bind_to_thread().expect("context binds");
        let mut host = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the context is current.
        let allocated = unsafe {
            context
                .driver()
                .cuMemHostAlloc(&mut host, 64, cuda_host_sys::CU_MEMHOSTALLOC_PORTABLE)
        };
        assert_eq!(allocated, CUresult::CUDA_SUCCESS);
        FreedOnDrop {
            context: context.clone(),
            host: host.expose_provenance(),
            freed: Arc::clone(freed),
        }
    }
}

impl Drop for FreedOnDrop {
    fn drop(&mut self) {
        self.context.bind_to_thread().expect("context binds");
        let host = std::ptr::with_exposed_provenance_mut::<std::ffi::c_void>(self.host);
        // SAFETY: allocated by `new`, freed once.
        let freed = unsafe { self.context.driver().cuMemFreeHost(host) };
        *self.freed.lock().unwrap() = Some(freed);
    }
}

/// The consequence of the drop above: the refused callable owns a buffer, whose `Drop` frees
/// pinned memory on the capturing thread in the middle of the global-mode capture. The driver
/// refuses the free and invalidates the capture, which the adversity matrix's row for
/// `Graph::add_engine_host_node` says stays intact: `end` fails, and every node added is lost.
#[test]
fn a_refused_engine_callback_that_owns_memory_leaves_its_capture_intact() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let freed = Arc::new(std::sync::Mutex::new(None));
    // Allocated before the capture, which forbids allocating; more than the free words.
    let mut buffers: Vec<FreedOnDrop> = (0..4_096)
        .map(|_| FreedOnDrop::new(&context, &freed))
        .collect();
    let builder = GraphBuilder::begin_with_engine(&stream, CaptureMode::Global, HostEngine::Polled)
        .expect("capture begins");
    let refused = loop {
        let buffer = buffers.pop().expect("fewer free words than buffers");
        // The whole buffer moves into the callable (a field alone would be captured apart).
        if let Err(error) = builder.callback(move || {
            let _owned = &buffer;
        }) {
            break error;
        }
    };
    assert!(
        matches!(refused, Error::AllocationInCapture { .. }),
        "{refused}"
    );
    let freed_during_capture = *freed.lock().unwrap();
    let ended = builder.end();
    drop(buffers);
    reclaim();
    assert!(
        ended.is_ok(),
        "the capture was invalidated ({:?}); the refused callable's free answered {:?}",
        ended.err(),
        freed_during_capture
    );
}

/// The word an engine node's batch writes and waits on, as the driver reads its parameters back.
fn word_of(node: &HostNode<'_>) -> CUdeviceptr {
    let mut params = cuda_host_sys::CUDA_BATCH_MEM_OP_NODE_PARAMS::default();
    // SAFETY: a node of a live graph; a valid out-pointer.
    suite::ok("cuGraphBatchMemOpNodeGetParams", unsafe {
        suite::test_driver()
            .driver
            .cuGraphBatchMemOpNodeGetParams(node.as_raw(), &mut params)
    });
    // SAFETY: an engine node's batch is two operations, the first a write to its word.
    unsafe { (*params.paramArray).writeValue.address }
}

/// Reclaims on this thread a few times (a record a drain lets go of is dropped by the next), after
/// giving a wrong early release a chance to show.
fn reclaim_a_while() {
    std::thread::sleep(std::time::Duration::from_millis(20));
    for _ in 0..3 {
        reclaim();
    }
}

/// A child graph node embeds a clone of its graph, whose batch keeps writing the engine node's
/// template word on every launch of an executable of the parent. NVIDIA's programming guide
/// ("CUDA User Objects") has the clone hold a copy of every user-object reference of the graph,
/// and an executable of the parent those of its child graphs: the template (its word and its
/// callable) is given back only once neither the parent graph nor its executable is left, so no
/// other use takes the word while a launch may still write it.
#[test]
fn a_child_graph_node_keeps_an_embedded_engine_nodes_word_until_nothing_embeds_it() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let graph = counting_graph(&context, &tally);
    let template = word_of(&graph.host_nodes().expect("host nodes")[0]);
    let parent = suite::capture::Graph::new();
    let mut child = std::ptr::null_mut();
    // SAFETY: two live graphs and a valid out-pointer; no dependencies.
    let added = unsafe {
        context.driver().cuGraphAddChildGraphNode(
            &mut child,
            parent.0,
            std::ptr::null(),
            0,
            graph.as_raw(),
        )
    };
    if added == CUresult::CUDA_ERROR_NOT_SUPPORTED {
        return suite::skip(
            "a_child_graph_node_keeps_an_embedded_engine_nodes_word_until_nothing_embeds_it",
            "the software driver does not model child graph nodes",
        );
    }
    suite::ok("cuGraphAddChildGraphNode", added);
    drop(graph);
    reclaim_a_while();
    assert_eq!(
        tally.drops(),
        0,
        "the template went while a child graph node embeds it"
    );
    let executable = parent.instantiate();
    drop(parent);
    reclaim_a_while();
    assert_eq!(
        tally.drops(),
        0,
        "the template went while an executable of the parent embeds it"
    );
    // Engine nodes made meanwhile take other words than the one the executable writes.
    let others: Vec<Graph> = (0..8)
        .map(|_| {
            let other = Graph::new(&context).expect("graph");
            other.add_engine_host_node(&[], || {}).expect("engine node");
            other
        })
        .collect();
    for other in &others {
        let word = word_of(&other.host_nodes().expect("host nodes")[0]);
        assert_ne!(
            word, template,
            "a new engine node took the embedded template's word"
        );
    }
    // The embedded batch writes its template word and waits for nothing; it runs nothing.
    executable.run(&stream, 3);
    assert_eq!(tally.runs(), 0);
    drop(executable);
    tally.reclaim_until_dropped(1, "the callable once nothing embeds the node");
}

/// An executable with an engine node and a driver host node whose callable it set: other code's
/// capture takes a launch (refused with `StreamCapturing`), and the capture's graph holds a node
/// that calls that callable's record. Replaced afterwards, the callable stays while the
/// executable lives: no fence tells when the capture's graph stops running it.
#[test]
fn a_callable_replaced_after_an_engine_launch_a_capture_took_stays_while_the_captures_graph_may_run_it()
 {
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            "a_callable_replaced_after_an_engine_launch_a_capture_took_stays_while_the_captures_graph_may_run_it",
            "a capture that takes a launch is a control of the software driver",
        );
    };
    suite::alone_in_child!(
        a_callable_replaced_after_an_engine_launch_a_capture_took_stays_while_the_captures_graph_may_run_it
    );
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let graph = Graph::new(&context).expect("graph");
    graph.add_engine_host_node(&[], || {}).expect("engine node");
    let plain = graph.add_host_node(&[], || {}).expect("driver host node");
    let executable = graph.instantiate().expect("instantiates");
    let probe = tally.probe();
    executable
        .set_host_node_callable(&plain, move || probe.ran())
        .expect("the executable's own callable");
    let taken = launch_taken_by_a_capture(controls, &executable, &stream);
    executable
        .set_host_node_callable(&plain, || {})
        .expect("replaced");
    for _ in 0..50 {
        reclaim();
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(
        tally.drops(),
        0,
        "the replaced callable was dropped while the capture's graph, which calls it, lives"
    );
    let exec = taken.instantiate();
    exec.launch(stream.as_raw());
    stream.synchronize().expect("synchronize");
    assert_eq!(
        tally.runs(),
        1,
        "the capture's graph ran the callable it holds"
    );
    drop((exec, taken, executable, graph));
    tally.reclaim_until_dropped(1, "the callable once the executable went");
}

/// A node whose slot a capture retired after a launch ran its callable, then given a fresh slot
/// by the next launch: the callable the retired slot ran last is let go when the executable
/// goes, as the fresh slot's is.
#[test]
fn a_callable_a_retired_slot_ran_is_dropped_after_the_node_took_a_fresh_slot() {
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            "a_callable_a_retired_slot_ran_is_dropped_after_the_node_took_a_fresh_slot",
            "a capture that takes a launch is a control of the software driver",
        );
    };
    suite::alone_in_child!(
        a_callable_a_retired_slot_ran_is_dropped_after_the_node_took_a_fresh_slot
    );
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let graph = counting_graph(&context, &tally);
    let executable = graph.instantiate().expect("instantiates");
    executable.launch(&stream).expect("a launch before");
    stream.synchronize().expect("synchronize");
    let taken = launch_taken_by_a_capture(controls, &executable, &stream);
    assert_eq!(metrics().polled_engine().retired_graph_nodes, 1);
    executable
        .launch(&stream)
        .expect("a launch on a fresh word");
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), 2);
    drop((taken, executable, graph));
    stream.synchronize().expect("synchronize");
    tally.reclaim_until_dropped(1, "the callable once the graph and its executables went");
}

//! Captures into an existing graph (`cuStreamBeginCaptureToGraph`, CUDA 12.3) and recaptures of
//! one (`cuStreamBeginRecaptureToGraph`, CUDA 13.3): where the nodes go, which graph the end
//! answers, what a recapture matches, changes and tells its callback, when it fails, and the user
//! objects it lets go of. Their lookups by version are here too.

use crate::batch_nodes::nodes_of;
use crate::exec_updates::update;
use crate::harness::*;
use cuda_host::{Event, EventFlags};
use cuda_host_sys::{
    Availability, CUDA_HOST_NODE_PARAMS, CUdeviceptr, CUdriverProcAddress_flags,
    CUdriverProcAddressQueryResult, CUevent, CUgraph, CUgraphExecUpdateResult, CUgraphNode,
    CUgraphNodeParams, CUgraphNodeType, CUgraphRecaptureStatus, CUresult, CUstream,
    CUstreamBatchMemOpType, CUstreamCaptureMode, Driver,
};
use std::ffi::{CStr, c_void};
use std::ptr;
use std::sync::Mutex;
use suite::capture::{Capture, Graph, is_capturing};
use suite::host_function::{launch_host, leak_closure, run_closure};
use suite::ok;

const RECAPTURE_FAILURE: CUresult = CUresult::CUDA_ERROR_GRAPH_RECAPTURE_FAILURE;
const HOST: CUgraphNodeType = CUgraphNodeType::CU_GRAPH_NODE_TYPE_HOST;
const WRITE_32: CUstreamBatchMemOpType = CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_32;

/// Whether the driver lacks `entry` (a real driver older than its CUDA version): then the test
/// `test` is skipped.
fn lacks(entry: &str, test: &str) -> bool {
    if driver().availability(entry) == Some(Availability::Available) {
        return false;
    }
    suite::skip(test, &format!("the driver has no {entry}"));
    true
}

/// Returns from the test `$test` (checked to name a function) where the driver lacks `$entry`.
macro_rules! needs {
    ($entry:literal, $test:ident) => {
        let _: fn() = $test;
        if lacks($entry, stringify!($test)) {
            return;
        }
    };
}

/// `cuStreamBeginCaptureToGraph(stream, graph, dependencies, no edge data, mode)`.
fn begin_to_graph(
    stream: CUstream,
    graph: &Graph,
    dependencies: &[CUgraphNode],
    mode: CUstreamCaptureMode,
) -> CUresult {
    // SAFETY: a live stream, a live graph and nodes of it; no edge data means default edges.
    unsafe {
        driver().cuStreamBeginCaptureToGraph(
            stream,
            graph.0,
            dependencies.as_ptr(),
            ptr::null(),
            dependencies.len(),
            mode,
        )
    }
}

/// `cuStreamBeginRecaptureToGraph(stream, mode, graph)`, with `probe` as its callback, or none.
fn begin_recapture(
    stream: CUstream,
    mode: CUstreamCaptureMode,
    graph: &Graph,
    probe: Option<&'static RecaptureProbe>,
) -> CUresult {
    let (callback, data) = match probe {
        Some(probe) => (
            Some(record_recapture as RecaptureCallback),
            ptr::from_ref(probe).cast_mut().cast(),
        ),
        None => (None, ptr::null_mut()),
    };
    // SAFETY: a live stream and graph; the callback only reads the leaked probe, and the
    // parameters it is given, during its call.
    unsafe { driver().cuStreamBeginRecaptureToGraph(stream, mode, graph.0, callback, data) }
}

/// `cuStreamEndCapture(stream)`: the answer and the graph written. A capture into an existing
/// graph ends in that graph, which the caller's [`Graph`] owns already, so this takes no owner.
fn end(stream: CUstream) -> (CUresult, CUgraph) {
    let mut graph = ptr::null_mut();
    // SAFETY: a live stream and a valid out-pointer.
    let result = unsafe { driver().cuStreamEndCapture(stream, &mut graph) };
    (result, graph)
}

/// Ends the capture of a stream on drop unless it was ended, so that a failing test leaves none
/// behind; the graph it answers is the caller's (an existing graph's capture).
struct Ending(CUstream);

impl Drop for Ending {
    fn drop(&mut self) {
        if is_capturing(self.0).1 != NONE {
            let _ = end(self.0);
        }
    }
}

/// `cuLaunchHostFunc(stream, run_closure, data)`: the driver's answer.
fn launch_data(stream: CUstream, data: *mut c_void) -> CUresult {
    // SAFETY: `data` comes from `leak_closure`, valid for the process on any thread.
    unsafe { driver().cuLaunchHostFunc(stream, Some(run_closure), data) }
}

/// A host node's parameters (`cuGraphHostNodeGetParams`), which must be read.
fn host_params_of(node: CUgraphNode) -> CUDA_HOST_NODE_PARAMS {
    let mut params = CUDA_HOST_NODE_PARAMS {
        fn_: None,
        userData: ptr::null_mut(),
    };
    // SAFETY: a host node of a live graph and a valid out-pointer.
    ok("cuGraphHostNodeGetParams", unsafe {
        driver().cuGraphHostNodeGetParams(node, &mut params)
    });
    params
}

/// A host node's parameters as the tests compare them: its function's address and its data.
fn host_fields(params: &CUDA_HOST_NODE_PARAMS) -> (usize, usize) {
    (params.fn_.map_or(0, |f| f as usize), params.userData.addr())
}

type RecaptureCallback = unsafe extern "C" fn(
    *mut c_void,
    CUgraphNode,
    *const CUgraphNodeParams,
    *const CUgraphNodeParams,
    CUgraphRecaptureStatus,
) -> CUresult;

/// What a recapture's callback was told of one node.
#[derive(Debug, Clone, Copy, PartialEq)]
struct RecaptureCall {
    node: CUgraphNode,
    /// The type, the host function's address and data, of the original parameters.
    original: (CUgraphNodeType, usize, usize),
    recaptured: (CUgraphNodeType, usize, usize),
    status: CUgraphRecaptureStatus,
    thread: std::thread::ThreadId,
}

/// Records the calls of a recapture's callback, which answers `answer`.
#[derive(Debug)]
struct RecaptureProbe {
    answer: CUresult,
    calls: Mutex<Vec<RecaptureCall>>,
}

impl RecaptureProbe {
    fn new(answer: CUresult) -> &'static RecaptureProbe {
        leak(RecaptureProbe {
            answer,
            calls: Mutex::new(Vec::new()),
        })
    }

    fn calls(&self) -> Vec<RecaptureCall> {
        lock(&self.calls).clone()
    }
}

/// The parts of node parameters the tests compare.
///
/// # Safety
/// `params` points to node parameters, valid for the call.
unsafe fn described_params(params: *const CUgraphNodeParams) -> (CUgraphNodeType, usize, usize) {
    // SAFETY: per the caller.
    let params = unsafe { &*params };
    if params.type_ != HOST {
        return (params.type_, 0, 0);
    }
    // SAFETY: a host node's parameters are the union's `host` member.
    let host = unsafe { params.__bindgen_anon_1.host };
    (
        params.type_,
        host.fn_.map_or(0, |f| f as usize),
        host.userData.addr(),
    )
}

unsafe extern "C" fn record_recapture(
    data: *mut c_void,
    node: CUgraphNode,
    original: *const CUgraphNodeParams,
    recaptured: *const CUgraphNodeParams,
    status: CUgraphRecaptureStatus,
) -> CUresult {
    // SAFETY: begun with a pointer to a leaked `RecaptureProbe`.
    let probe = unsafe { &*data.cast::<RecaptureProbe>() };
    let call = RecaptureCall {
        node,
        // SAFETY: the driver's parameters, valid during the callback.
        original: unsafe { described_params(original) },
        // SAFETY: as above.
        recaptured: unsafe { described_params(recaptured) },
        status,
        thread: std::thread::current().id(),
    };
    lock(&probe.calls).push(call);
    probe.answer
}

#[test]
fn a_capture_into_a_graph_adds_its_nodes_after_the_dependencies_given_and_ends_in_that_graph() {
    needs!(
        "cuStreamBeginCaptureToGraph",
        a_capture_into_a_graph_adds_its_nodes_after_the_dependencies_given_and_ends_in_that_graph
    );
    let _alone = alone();
    let context = current_context();
    let stream = non_blocking(&context);
    let words = MemOpWords::new(&context);
    let log = Log::default();
    // Two nodes without dependencies, of two types: the captured nodes go after the host node.
    let graph = Graph::new();
    let host = graph.add_host_node(&[], log.marker("host"));
    let mut write = [batched(WRITE_32, words.narrow_address(), 1, 0)];
    add_batch_node(&graph, &[], &mut write);

    ok(
        "cuStreamBeginCaptureToGraph",
        // Relaxed: the instantiation tried below is no unsafe call that invalidates it.
        begin_to_graph(stream.as_raw(), &graph, &[host], RELAXED),
    );
    let ending = Ending(stream.as_raw());
    let (mut status, mut captured_into) = (NONE, ptr::null_mut());
    let (mut dependencies, mut count) = (ptr::null(), usize::MAX);
    // SAFETY: a live stream and valid out-pointers; no edge data asked for.
    ok("cuStreamGetCaptureInfo_v3", unsafe {
        driver().cuStreamGetCaptureInfo_v3(
            stream.as_raw(),
            &mut status,
            ptr::null_mut(),
            &mut captured_into,
            &mut dependencies,
            ptr::null_mut(),
            &mut count,
        )
    });
    assert_eq!((status, captured_into, count), (ACTIVE, graph.0, 1));
    // SAFETY: the driver reported an array of one node, valid during the capture.
    let first_dependency = unsafe { *dependencies };
    assert_eq!(
        first_dependency, host,
        "the capture begins on the node given"
    );
    let mut exec = ptr::null_mut();
    // SAFETY: a live graph and a valid out-pointer; the context is current.
    let instantiated = unsafe { driver().cuGraphInstantiateWithFlags(&mut exec, graph.0, 0) };
    // cuStreamBeginCaptureToGraph's documentation says the graph "will not be instantiable" until
    // the capture ends; an H100 with driver 580 (CUDA 13.0) instantiates it, as
    // cuStreamGetCaptureInfo's ("all operations other than destroy and node removal").
    assert_eq!(
        instantiated, SUCCESS,
        "a graph being captured into is instantiated as any graph"
    );
    // SAFETY: the executable just made, destroyed once.
    ok("cuGraphExecDestroy", unsafe {
        driver().cuGraphExecDestroy(exec)
    });
    launch(stream.as_raw(), log.marker("captured first"));
    launch(stream.as_raw(), log.marker("captured second"));
    assert_eq!(
        end(stream.as_raw()),
        (SUCCESS, graph.0),
        "the end answers the graph given"
    );
    drop(ending);
    assert_eq!(
        nodes_of(&graph).len(),
        4,
        "the two nodes are added to the two"
    );

    // An executable of a graph made by hand with host → first → second beside the batch node
    // takes the captured graph: an update pairs exit nodes and follows their edges, so the first
    // captured node without its dependency (three exit nodes), or after the batch node (a host
    // node paired with a batch node), would be refused.
    let by_hand = Graph::new();
    let by_hand_host = by_hand.add_host_node(&[], log.marker("by hand host"));
    add_batch_node(&by_hand, &[], &mut write);
    let first = by_hand.add_host_node(&[by_hand_host], log.marker("by hand first"));
    by_hand.add_host_node(&[first], log.marker("by hand second"));
    let exec = by_hand.instantiate();
    let (answer, info) = update(&exec, &graph);
    assert_eq!(
        (answer, info.result),
        (
            SUCCESS,
            CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS
        ),
        "the captured nodes have other edges than host → first → second"
    );
    exec.launch(stream.as_raw());
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(log.entries(), ["host", "captured first", "captured second"]);
    assert_eq!(words.narrow(), 1, "the batch node ran");
}

#[test]
fn a_recapture_of_the_same_topology_gives_a_changed_host_node_its_new_parameters_and_tells_the_callback()
 {
    needs!(
        "cuStreamBeginRecaptureToGraph",
        a_recapture_of_the_same_topology_gives_a_changed_host_node_its_new_parameters_and_tells_the_callback
    );
    let _alone = alone();
    let context = current_context();
    let stream = non_blocking(&context);
    let log = Log::default();
    // The same function and data in both captures: a node without a parameter mismatch.
    let kept = leak_closure(log.marker("kept"));
    let capture = Capture::begin(stream.as_raw(), GLOBAL);
    ok("cuLaunchHostFunc", launch_data(stream.as_raw(), kept));
    launch(stream.as_raw(), log.marker("first"));
    let graph = capture.end().expect("the capture ends in a graph");
    let nodes = nodes_of(&graph);
    let [kept_node, changed_node] = nodes[..] else {
        panic!("two nodes: {nodes:?}")
    };
    let before = host_params_of(changed_node);
    let made_before = graph.instantiate();

    let probe = RecaptureProbe::new(SUCCESS);
    ok(
        "cuStreamBeginRecaptureToGraph",
        begin_recapture(stream.as_raw(), GLOBAL, &graph, Some(probe)),
    );
    let ending = Ending(stream.as_raw());
    assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, ACTIVE));
    ok("cuLaunchHostFunc", launch_data(stream.as_raw(), kept));
    launch(stream.as_raw(), log.marker("second"));
    assert_eq!(
        end(stream.as_raw()),
        (SUCCESS, graph.0),
        "the end answers the recaptured graph"
    );
    drop(ending);

    assert_eq!(nodes_of(&graph), nodes, "the same nodes, in the same order");
    let after = host_params_of(changed_node);
    assert_ne!(
        host_fields(&after),
        host_fields(&before),
        "the node took the recaptured parameters"
    );
    assert_eq!(
        host_fields(&host_params_of(kept_node)),
        (run_closure as *const () as usize, kept.addr())
    );
    let calls = probe.calls();
    assert_eq!(
        calls.len(),
        1,
        "once, for the node whose parameters changed: {calls:?}"
    );
    let (original, recaptured) = (host_fields(&before), host_fields(&after));
    assert_eq!(
        calls[0],
        RecaptureCall {
            node: changed_node,
            original: (HOST, original.0, original.1),
            recaptured: (HOST, recaptured.0, recaptured.1),
            // The real driver's status for a host node is not known: the double's is
            // cuGraphExecUpdate's verdict, which takes a host node's new parameters.
            status: CUgraphRecaptureStatus::CU_GRAPH_RECAPTURE_ELIGIBLE_FOR_UPDATE,
            thread: std::thread::current().id(),
        },
        "told on the capturing thread, during its call"
    );

    let made_after = graph.instantiate();
    made_before.launch(stream.as_raw());
    made_after.launch(stream.as_raw());
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(
        log.entries(),
        ["kept", "first", "kept", "second"],
        "an executable made before keeps the old parameters; one made after runs the new"
    );
}

/// What a case of a recapture records: on `stream`, the recaptured one, or `other`, a stream of
/// its context; `event` is an event of that context, and `word` mapped memory of it.
struct Recapturing<'a> {
    stream: CUstream,
    other: CUstream,
    event: CUevent,
    word: CUdeviceptr,
    log: &'a Log,
}

impl Recapturing<'_> {
    /// A host function that logs `name`, launched on `stream`: the driver's answer.
    fn host(&self, stream: CUstream, name: &'static str) -> CUresult {
        launch_host(stream, self.log.marker(name))
    }
}

/// A case of [`a_recapture_of_another_topology_fails_and_its_end_answers_no_graph`]: what the
/// recapture of a graph `a → b` records, the answer of the call that breaks the topology, and the
/// answer of the end.
type Case = (
    &'static str,
    fn(&Recapturing) -> CUresult,
    CUresult,
    CUresult,
);

#[test]
fn a_recapture_of_another_topology_fails_and_its_end_answers_no_graph() {
    needs!(
        "cuStreamBeginRecaptureToGraph",
        a_recapture_of_another_topology_fails_and_its_end_answers_no_graph
    );
    let _alone = alone();
    let context = current_context();
    let (stream, other) = (non_blocking(&context), non_blocking(&context));
    let event = Event::new(&context, EventFlags::DisableTiming).expect("an event");
    let words = MemOpWords::new(&context);
    let cases: [Case; 4] = [
        (
            "a node more",
            |on| {
                ["a", "b", "c"]
                    .into_iter()
                    .map(|name| on.host(on.stream, name))
                    .find(|&answer| answer != SUCCESS)
                    .unwrap_or(SUCCESS)
            },
            RECAPTURE_FAILURE,
            RECAPTURE_FAILURE,
        ),
        (
            "a node fewer",
            |on| on.host(on.stream, "a"),
            SUCCESS,
            RECAPTURE_FAILURE,
        ),
        (
            "a node of another type",
            |on| {
                assert_eq!(on.host(on.stream, "a"), SUCCESS);
                // SAFETY: mapped memory of the stream's context, which outlives the process.
                unsafe { driver().cuStreamWriteValue32_v2(on.stream, on.word, 1, 0) }
            },
            RECAPTURE_FAILURE,
            RECAPTURE_FAILURE,
        ),
        (
            "a node on other dependencies",
            |on| {
                // `b` forks onto the other stream from before `a`: it depends on nothing, where
                // the original `b` depends on `a`.
                // SAFETY: a live event and streams of its context.
                unsafe {
                    ok("cuEventRecord", driver().cuEventRecord(on.event, on.stream));
                    ok(
                        "cuStreamWaitEvent",
                        driver().cuStreamWaitEvent(on.other, on.event, 0),
                    );
                }
                assert_eq!(on.host(on.stream, "a"), SUCCESS);
                on.host(on.other, "b")
            },
            RECAPTURE_FAILURE,
            RECAPTURE_FAILURE,
        ),
    ];
    for (case, recapture, breaking, ended) in cases {
        let log = Log::default();
        let capture = Capture::begin(stream.as_raw(), GLOBAL);
        launch(stream.as_raw(), log.marker("original a"));
        launch(stream.as_raw(), log.marker("original b"));
        let graph = capture.end().expect("the capture ends in a graph");

        ok(
            "cuStreamBeginRecaptureToGraph",
            begin_recapture(stream.as_raw(), GLOBAL, &graph, None),
        );
        let ending = Ending(stream.as_raw());
        let on = Recapturing {
            stream: stream.as_raw(),
            other: other.as_raw(),
            event: event.as_raw(),
            word: words.narrow_address(),
            log: &log,
        };
        assert_eq!(recapture(&on), breaking, "{case}");
        if breaking != SUCCESS {
            assert_eq!(
                is_capturing(stream.as_raw()),
                (SUCCESS, INVALIDATED),
                "{case}: the recapture failed at once"
            );
            assert_eq!(
                on.host(on.stream, "after the failure"),
                RECAPTURE_FAILURE,
                "{case}"
            );
        }
        assert_eq!(
            end(stream.as_raw()),
            (ended, ptr::null_mut()),
            "{case}: the end answers no graph"
        );
        drop(ending);
        assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, NONE), "{case}");
        assert_eq!(is_capturing(other.as_raw()), (SUCCESS, NONE), "{case}");
        // The failed recapture's graph is undefined, but still the caller's to destroy.
        let raw = graph.0;
        std::mem::forget(graph);
        // SAFETY: the graph, which no capture builds any more, destroyed once.
        ok("cuGraphDestroy", unsafe { driver().cuGraphDestroy(raw) });
        ok("cuStreamSynchronize", synchronize(stream.as_raw()));
        ok("cuStreamSynchronize", synchronize(other.as_raw()));
        assert!(log.entries().is_empty(), "{case}: recaptured work ran");
        assert_eq!(words.narrow(), 0, "{case}: recaptured work ran");
    }
}

#[test]
fn a_callback_that_refuses_a_changed_node_fails_the_recapture() {
    needs!(
        "cuStreamBeginRecaptureToGraph",
        a_callback_that_refuses_a_changed_node_fails_the_recapture
    );
    let _alone = alone();
    let context = current_context();
    let stream = non_blocking(&context);
    let log = Log::default();
    let capture = Capture::begin(stream.as_raw(), GLOBAL);
    launch(stream.as_raw(), log.marker("original a"));
    launch(stream.as_raw(), log.marker("original b"));
    let graph = capture.end().expect("the capture ends in a graph");

    let probe = RecaptureProbe::new(CUresult::CUDA_ERROR_INVALID_VALUE);
    ok(
        "cuStreamBeginRecaptureToGraph",
        begin_recapture(stream.as_raw(), GLOBAL, &graph, Some(probe)),
    );
    let ending = Ending(stream.as_raw());
    // The callback, told during this call, refuses: the recapture has failed when it returns.
    let _ = launch_host(stream.as_raw(), log.marker("recaptured a"));
    assert_eq!(probe.calls().len(), 1, "told of the first node");
    assert_eq!(
        is_capturing(stream.as_raw()),
        (SUCCESS, INVALIDATED),
        "the recapture failed at once"
    );
    assert_eq!(
        launch_host(stream.as_raw(), log.marker("recaptured b")),
        RECAPTURE_FAILURE
    );
    assert_eq!(end(stream.as_raw()), (RECAPTURE_FAILURE, ptr::null_mut()));
    drop(ending);
    assert_eq!(
        probe.calls().len(),
        1,
        "nothing more recaptured after the failure"
    );
    assert!(log.entries().is_empty());
}

#[test]
fn a_recapture_releases_the_graphs_user_objects_as_it_begins_and_keeps_those_retained_during_it() {
    needs!(
        "cuStreamBeginRecaptureToGraph",
        a_recapture_releases_the_graphs_user_objects_as_it_begins_and_keeps_those_retained_during_it
    );
    let _alone = alone();
    let context = current_context();
    let stream = non_blocking(&context);
    let only_graph = DestructorProbe::new();
    let also_executable = DestructorProbe::new();
    let during = DestructorProbe::new();
    let capture = Capture::begin(stream.as_raw(), GLOBAL);
    launch(stream.as_raw(), only_graph.node());
    let graph = capture.end().expect("the capture ends in a graph");
    graph_retain(&graph, user_object(also_executable, 1), MOVE);
    let exec = graph.instantiate(); // takes a reference to `also_executable`
    graph_retain(&graph, user_object(only_graph, 1), MOVE);

    only_graph.release("recapture begun");
    ok(
        "cuStreamBeginRecaptureToGraph",
        begin_recapture(stream.as_raw(), GLOBAL, &graph, None),
    );
    let ending = Ending(stream.as_raw());
    assert_eq!(
        only_graph.runs(),
        1,
        "cuStreamBeginRecaptureToGraph returned before the destructor of the graph's only \
         reference ran"
    );
    assert_eq!(
        only_graph.thread(),
        std::thread::current().id(),
        "the destructor of a reference an API call dropped runs on the calling thread"
    );
    graph_retain(&graph, user_object(during, 1), MOVE);
    launch(stream.as_raw(), only_graph.node());
    assert_eq!(end(stream.as_raw()), (SUCCESS, graph.0));
    drop(ending);

    destructor_round_trip();
    assert_eq!(
        (also_executable.runs(), during.runs()),
        (0, 0),
        "destroyed while an executable or the recaptured graph holds it"
    );
    also_executable.release("executable destroyed");
    drop(exec);
    assert_eq!(
        also_executable.runs(),
        1,
        "the graph let go of its reference: the executable's, never launched, was the last"
    );
    assert_eq!(
        also_executable.seen().map(|(step, _)| step),
        Some("executable destroyed")
    );
    during.release("graph destroyed");
    drop(graph);
    assert_eq!(
        during.runs(),
        1,
        "a user object retained during the recapture stays"
    );
    assert_eq!(during.seen().map(|(step, _)| step), Some("graph destroyed"));
    assert_eq!(only_graph.runs(), 1, "destroyed once");
}

/// `cuGetProcAddress_v2(name, version, flags)` through `table`: the answer, the status, and the
/// address found.
fn look_up(
    table: &Driver,
    name: &CStr,
    version: i32,
    flags: CUdriverProcAddress_flags,
) -> (CUresult, CUdriverProcAddressQueryResult, *mut c_void) {
    let (mut address, mut status) = (ptr::null_mut(), CUdriverProcAddressQueryResult(77));
    // SAFETY: a NUL-terminated name and valid out-pointers.
    let result = unsafe {
        table.cuGetProcAddress_v2(
            name.as_ptr(),
            &mut address,
            version,
            u64::from(flags.0),
            &mut status,
        )
    };
    (result, status, address)
}

const FOUND: CUdriverProcAddressQueryResult =
    CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SUCCESS;
const TOO_OLD: CUdriverProcAddressQueryResult =
    CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
const LEGACY: CUdriverProcAddress_flags =
    CUdriverProcAddress_flags::CU_GET_PROC_ADDRESS_LEGACY_STREAM;
const PER_THREAD: CUdriverProcAddress_flags =
    CUdriverProcAddress_flags::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

#[test]
fn capture_into_a_graph_is_found_from_cuda_12_3_and_recapture_from_cuda_13_3() {
    needs!(
        "cuStreamBeginRecaptureToGraph",
        capture_into_a_graph_is_found_from_cuda_12_3_and_recapture_from_cuda_13_3
    );
    let _shared = shared();
    for (name, version) in [
        (c"cuStreamBeginCaptureToGraph", 12030),
        (c"cuStreamBeginRecaptureToGraph", 13030),
    ] {
        let (answer, status, legacy) = look_up(driver(), name, version, LEGACY);
        assert_eq!((answer, status), (SUCCESS, FOUND), "{name:?} at {version}");
        let (answer, status, per_thread) = look_up(driver(), name, version, PER_THREAD);
        assert_eq!((answer, status), (SUCCESS, FOUND), "{name:?} at {version}");
        assert!(!legacy.is_null() && !per_thread.is_null());
        assert_ne!(
            legacy, per_thread,
            "{name:?}: the per-thread form is its own"
        );
        let (answer, status, older) = look_up(driver(), name, version - 10, LEGACY);
        assert_eq!(
            (answer, status, older),
            (SUCCESS, TOO_OLD, ptr::null_mut()),
            "{name:?} before {version}"
        );
    }
}

#[test]
fn a_driver_reporting_cuda_13_2_hides_recapture_but_not_capture_into_a_graph() {
    let controls = controls_or_skip!(
        a_driver_reporting_cuda_13_2_hides_recapture_but_not_capture_into_a_graph
    );
    suite::alone_in_child!(
        a_driver_reporting_cuda_13_2_hides_recapture_but_not_capture_into_a_graph
    );
    controls.set_driver_version(13020);
    assert_eq!(
        look_up(driver(), c"cuStreamBeginRecaptureToGraph", 13020, LEGACY),
        (SUCCESS, TOO_OLD, ptr::null_mut())
    );
    assert_eq!(
        look_up(driver(), c"cuStreamBeginRecaptureToGraph", 13030, LEGACY).0,
        CUresult::CUDA_ERROR_INVALID_VALUE,
        "an ABI newer than the driver is an invalid value"
    );
    let (answer, status, found) = look_up(driver(), c"cuStreamBeginCaptureToGraph", 13020, LEGACY);
    assert_eq!((answer, status), (SUCCESS, FOUND));
    assert!(!found.is_null());
    // SAFETY: the software driver implements the driver API's signatures.
    let fresh = unsafe { Driver::open(cuda_host_testing::library_path()) }.expect("driver opens");
    assert_eq!(
        fresh.availability("cuStreamBeginRecaptureToGraph"),
        Some(Availability::NeedsNewerDriver { required: 13030 })
    );
    assert_eq!(
        fresh.availability("cuStreamBeginCaptureToGraph"),
        Some(Availability::Available)
    );
    controls.set_driver_version(0);
}

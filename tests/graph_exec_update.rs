//! An executable updated (`cuGraphExecUpdate_v2`) from another captured graph of the same shape
//! takes that graph's replayable callable (`host_launch_replayable`): it runs it on every launch
//! and keeps it alive while it lives, as the driver's user objects say, and lets its old graph's
//! callable go with that graph. Captures take turns ([`suite::capture_lock`]).

use cuda_host::{Context, Stream, StreamFlags, graph::host_launch_replayable};
use cuda_host_sys::{
    CUgraphExecUpdateResult, CUgraphExecUpdateResultInfo, CUresult, CUstreamCaptureMode,
};
use std::sync::Arc;
use suite::capture::{Capture, Exec, Graph};
use suite::{Tally, capture_lock, context};

const LAUNCHES: usize = 100;

/// A graph captured (thread-local mode, begun with the driver's own call) from `stream`, holding
/// one replayable callable that counts its runs and its drop in `tally`.
fn captured_graph(stream: &Stream, tally: &Arc<Tally>) -> Graph {
    let capture = Capture::begin(
        stream.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    );
    let probe = tally.probe();
    // SAFETY: no other thread ends the capture during the call.
    unsafe { host_launch_replayable(stream, move || probe.ran()) }.expect("added to the capture");
    capture.end().expect("the capture is still valid")
}

/// `cuGraphExecUpdate_v2(exec, graph)` through the context's driver: its answer and result.
fn update(context: &Context, exec: &Exec, graph: &Graph) -> (CUresult, CUgraphExecUpdateResult) {
    let mut info = CUgraphExecUpdateResultInfo::default();
    // SAFETY: a live executable, a live graph and a valid out-pointer.
    let answer = unsafe {
        context
            .driver()
            .cuGraphExecUpdate_v2(exec.0, graph.0, &mut info)
    };
    (answer, info.result)
}

/// Before a check that a callable was *not* dropped: a callable whose launched executable and
/// graph are destroyed now is dropped on this thread when this returns, so a user object's
/// destructor the driver had wrongly made due before has run too (on the software driver they
/// run in turn on one thread), and what it handed back has been reclaimed.
fn let_wrong_drops_show(stream: &Stream) {
    let sentinel = Tally::new();
    let graph = captured_graph(stream, &sentinel);
    let exec = graph.instantiate();
    exec.run(stream, 1);
    drop((graph, exec));
    sentinel.reclaim_until_dropped(1, "the sentinel callable to be dropped");
    cuda_host::reclaim();
}

#[test]
fn an_executable_updated_from_another_captured_graph_runs_and_keeps_that_graphs_callable() {
    let _alone = capture_lock();
    let context = context();
    let stream = Stream::new(&context, StreamFlags::NonBlocking).expect("stream");
    let (a, b) = (Tally::new(), Tally::new());
    let graph_a = captured_graph(&stream, &a);
    let exec = graph_a.instantiate();
    exec.run(&stream, 1);
    assert_eq!(a.runs(), 1);

    let graph_b = captured_graph(&stream, &b);
    assert_eq!(
        update(&context, &exec, &graph_b),
        (
            CUresult::CUDA_SUCCESS,
            CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS
        )
    );
    drop(graph_b);
    exec.run(&stream, LAUNCHES);
    assert_eq!(
        (a.runs(), b.runs()),
        (1, LAUNCHES),
        "the updated executable runs B on every launch, A no more"
    );

    drop(graph_a);
    a.reclaim_until_dropped(1, "A to be dropped once its graph is gone");
    let_wrong_drops_show(&stream);
    assert_eq!(b.drops(), 0, "B dropped while the updated executable lives");

    drop(exec);
    b.reclaim_until_dropped(1, "B to be dropped after the updated executable");
    let here = std::thread::current().id();
    assert_eq!(a.drop_threads(), [here]);
    assert_eq!(b.drop_threads(), [here]);
    assert_eq!(
        b.runs(),
        LAUNCHES,
        "B ran after the executable was destroyed"
    );
}

//! Streams, graphs and captures for the tests of the polled engine's graph host nodes
//! (`tests/engine_nodes.rs`, `tests/engine_node_adversity.rs`).

use crate::capture;
use crate::software::Controls;
use crate::tally::Tally;
use cuda_host::{Context, Error, Stream, StreamFlags, graph::Graph, graph::GraphExec};
use cuda_host_sys::{CUresult, CUstreamCaptureMode};
use std::sync::Arc;

/// A non-blocking stream of `context`.
///
/// # Panics
/// When the stream cannot be made.
#[track_caller]
pub fn new_stream(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking).expect("stream")
}

/// A graph of one engine node whose callable counts its runs in `tally`.
///
/// # Panics
/// When the graph or its node cannot be made, or the node does not run on the engine.
#[track_caller]
pub fn counting_graph(context: &Context, tally: &Arc<Tally>) -> Graph {
    let graph = Graph::new(context).expect("graph");
    let probe = tally.probe();
    let node = graph
        .add_engine_host_node(&[], move || probe.ran())
        .expect("engine node");
    assert!(node.runs_on_engine());
    graph
}

/// Has another code's capture take `executable`'s next launch on `stream`: the software driver
/// begins a relaxed capture of `stream` inside that launch's `cuGraphLaunch`, so the launch is
/// refused with `Error::StreamCapturing`. Ends the capture and answers its graph, which holds
/// what the launch enqueued.
///
/// # Panics
/// When the launch is not refused that way, or the capture does not end.
#[track_caller]
pub fn launch_taken_by_a_capture(
    controls: &Controls,
    executable: &GraphExec,
    stream: &Stream,
) -> capture::Graph {
    controls.begin_capture_at_next_call(
        c"cuGraphLaunch",
        stream,
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
    );
    let refused = executable.launch(stream).expect_err("taken by the capture");
    assert!(
        matches!(refused, Error::StreamCapturing { .. }),
        "{refused}"
    );
    let mut raw = std::ptr::null_mut();
    // SAFETY: a live stream and a valid out-pointer.
    let ended = unsafe {
        stream
            .context()
            .driver()
            .cuStreamEndCapture(stream.as_raw(), &mut raw)
    };
    assert_eq!(ended, CUresult::CUDA_SUCCESS);
    capture::Graph(raw)
}

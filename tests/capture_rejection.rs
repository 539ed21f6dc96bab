//! cuda-host refuses run-once host functions on streams under capture, and leaves the capture
//! intact. A global-mode capture forbids other threads' unsafe calls, so these tests run one at a
//! time ([`suite::capture_lock`]) in their own test binary.

use cuda_host::{CaptureState, Context, Error, Stream, StreamFlags, host_launch};
use cuda_host_sys::{CUresult, CUstreamCaptureMode, CUstreamCaptureStatus};
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use suite::capture::{Capture, Graph, is_capturing};
use suite::{Tally, capture_lock, context};

fn new_stream(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking).expect("stream")
}

unsafe extern "C" fn add_one(counter: *mut c_void) {
    // SAFETY: launched with a pointer to a live `AtomicUsize`.
    unsafe { &*counter.cast::<AtomicUsize>() }.fetch_add(1, Ordering::SeqCst);
}

/// Instantiates `graph`, launches it `times` times on `stream`, waits, and destroys both.
fn run_graph(graph: Graph, stream: &Stream, times: usize) {
    let exec = graph.instantiate();
    for _ in 0..times {
        exec.launch(stream.as_raw());
    }
    stream.synchronize().expect("synchronize");
}

#[test]
fn a_capturing_stream_is_refused_and_its_capture_still_yields_a_graph_that_runs() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let nodes_run = Arc::new(AtomicUsize::new(0));
    let capture = Capture::begin(
        stream.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
    );

    let probe = tally.probe();
    let error = host_launch(&stream, move || probe.ran()).unwrap_err();
    assert_eq!(
        error,
        Error::StreamCapturing {
            status: CaptureState::Active
        }
    );
    assert!(error.to_string().contains("GraphBuilder::callback"));
    assert_eq!(
        (tally.runs(), tally.drops()),
        (0, 1),
        "refused closures are dropped at once"
    );
    assert_eq!(
        is_capturing(stream.as_raw()),
        (
            CUresult::CUDA_SUCCESS,
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
        )
    );

    // A host node the graph owns the data of (`nodes_run` outlives the graph).
    let driver = context.driver();
    let counter = Arc::as_ptr(&nodes_run).cast_mut().cast::<c_void>();
    // SAFETY: the counter outlives the graph run below.
    let result = unsafe { driver.cuLaunchHostFunc(stream.as_raw(), Some(add_one), counter) };
    driver.check("cuLaunchHostFunc", result).unwrap();
    let graph = capture.end().expect("the capture is still valid");
    run_graph(graph, &stream, 2);
    assert_eq!(nodes_run.load(Ordering::SeqCst), 2);
    assert_eq!(tally.runs(), 0);
}

#[test]
fn the_legacy_stream_is_refused_while_a_blocking_stream_captures() {
    let _alone = capture_lock();
    let context = context();
    let blocking = Stream::new(&context, StreamFlags::Blocking).expect("stream");
    let legacy = Stream::legacy(&context);
    let nodes_run = Arc::new(AtomicUsize::new(0));
    let capture = Capture::begin(
        blocking.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
    );

    let tally = Tally::new();
    let probe = tally.probe();
    let error = host_launch(&legacy, move || probe.ran()).unwrap_err();
    assert_eq!(
        error,
        Error::StreamCapturing {
            status: CaptureState::Implicit
        }
    );
    assert_eq!((tally.runs(), tally.drops()), (0, 1));
    assert_eq!(
        is_capturing(blocking.as_raw()),
        (
            CUresult::CUDA_SUCCESS,
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
        ),
        "the check must not disturb the capture"
    );

    let driver = context.driver();
    let counter = Arc::as_ptr(&nodes_run).cast_mut().cast::<c_void>();
    // SAFETY: the counter outlives the graph run below.
    let result = unsafe { driver.cuLaunchHostFunc(blocking.as_raw(), Some(add_one), counter) };
    driver.check("cuLaunchHostFunc", result).unwrap();
    let graph = capture.end().expect("the capture is still valid");
    run_graph(graph, &blocking, 3);
    assert_eq!(nodes_run.load(Ordering::SeqCst), 3);
}

#[test]
fn an_invalidated_capture_is_refused_until_it_ends() {
    let _alone = capture_lock();
    let context = context();
    let stream = new_stream(&context);
    let capture = Capture::begin(
        stream.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
    );
    // Synchronizing a capturing stream is illegal and invalidates the capture.
    let driver = context.driver();
    // SAFETY: a valid stream.
    let result = unsafe { driver.cuStreamSynchronize(stream.as_raw()) };
    assert_ne!(result, CUresult::CUDA_SUCCESS);
    assert_eq!(
        is_capturing(stream.as_raw()),
        (
            CUresult::CUDA_SUCCESS,
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED
        )
    );
    let error = host_launch(&stream, || {}).unwrap_err();
    assert_eq!(
        error,
        Error::StreamCapturing {
            status: CaptureState::Invalidated
        }
    );
    assert_eq!(
        capture.end().err().map(|(result, _)| result),
        Some(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
    );
    // Once ended, the stream takes host functions again.
    let tally = Tally::new();
    let probe = tally.probe();
    host_launch(&stream, move || probe.ran()).expect("launch after the capture ended");
    stream.synchronize().expect("synchronize");
    assert_eq!((tally.runs(), tally.drops()), (1, 1));
}

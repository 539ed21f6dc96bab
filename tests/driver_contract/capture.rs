//! Stream capture: modes, capture state and info, the implicit legacy-stream rules, invalidation.

use crate::harness::*;
use cuda_host::{Event, EventFlags, Stream};
use cuda_host_sys::{
    CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, CUgraphNodeType, CUresult, CUstreamCaptureMode,
    CUstreamCaptureStatus,
};
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use suite::capture::{Capture, is_capturing};
use suite::host_function::launch_host;
use suite::{ok, wait_until};

#[test]
fn every_capture_mode_yields_a_graph_whose_captured_host_node_runs_on_each_launch() {
    let _alone = alone();
    let context = current_context();
    for mode in [
        GLOBAL,
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        RELAXED,
    ] {
        let stream = non_blocking(&context);
        let runs = Arc::new(AtomicUsize::new(0));
        let capture = Capture::begin(stream.as_raw(), mode);
        launch(stream.as_raw(), counting(&runs));
        let graph = capture
            .end()
            .unwrap_or_else(|(result, _)| panic!("{mode:?}: the capture ended with {result}"));
        assert_eq!(count(&runs), 0, "{mode:?}: a captured host function ran");
        let exec = graph.instantiate();
        exec.launch(stream.as_raw());
        exec.launch(stream.as_raw());
        ok("cuStreamSynchronize", synchronize(stream.as_raw()));
        assert_eq!(count(&runs), 2, "{mode:?}: once per launch");
    }
}

#[test]
fn is_capturing_answers_active_during_a_capture_and_none_after_it() {
    let _alone = alone();
    let context = current_context();
    let stream = non_blocking(&context);
    assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, NONE));
    let capture = Capture::begin(stream.as_raw(), GLOBAL);
    assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, ACTIVE));
    let graph = capture.end();
    assert!(graph.is_ok(), "an empty capture ends in a graph");
    assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, NONE));
}

#[test]
fn an_end_from_another_thread_is_refused_but_ends_a_global_or_thread_local_capture() {
    // Measured on the 13.0 driver: the other thread's end answers WRONG_THREAD, yet the capture
    // is over (its graph discarded), and the beginning thread's end answers ILLEGAL_STATE. A
    // relaxed capture ends on any thread, with its graph.
    let _alone = alone();
    let context = current_context();
    for mode in [
        GLOBAL,
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        RELAXED,
    ] {
        let stream = non_blocking(&context);
        // SAFETY: a live stream that is not capturing.
        ok("cuStreamBeginCapture_v2", unsafe {
            driver().cuStreamBeginCapture_v2(stream.as_raw(), mode)
        });
        let raw = stream.as_raw().expose_provenance();
        let (elsewhere, graph) = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    context.bind_to_thread().expect("bind");
                    let mut graph = ptr::null_mut();
                    // SAFETY: the live stream above; a valid out-pointer.
                    let result = unsafe {
                        driver()
                            .cuStreamEndCapture(ptr::with_exposed_provenance_mut(raw), &mut graph)
                    };
                    (result, graph.expose_provenance())
                })
                .join()
                .expect("the other thread")
        });
        assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, NONE), "{mode:?}");
        let mut own = ptr::null_mut();
        // SAFETY: as above.
        let ended = unsafe { driver().cuStreamEndCapture(stream.as_raw(), &mut own) };
        assert_eq!(ended, CUresult::CUDA_ERROR_ILLEGAL_STATE, "{mode:?}");
        if mode == RELAXED {
            assert_eq!(elsewhere, SUCCESS);
            assert_ne!(graph, 0, "a relaxed capture's graph");
            // SAFETY: the graph the other thread's end returned, owned here.
            ok("cuGraphDestroy", unsafe {
                driver().cuGraphDestroy(ptr::with_exposed_provenance_mut(graph))
            });
        } else {
            assert_eq!(
                elsewhere,
                CUresult::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
                "{mode:?}"
            );
            assert_eq!(graph, 0, "{mode:?}: a refused end returned a graph");
        }
    }
}

#[test]
fn capture_info_reports_an_active_capture_with_a_unique_id_its_graph_and_its_last_node() {
    let _alone = alone();
    let context = current_context();
    let stream = non_blocking(&context);
    let mut ids = Vec::new();
    for _ in 0..2 {
        let capture = Capture::begin(stream.as_raw(), GLOBAL);
        launch(stream.as_raw(), Log::default().marker("captured"));
        let mut status = CUstreamCaptureStatus(77);
        let (mut id, mut graph) = (0u64, ptr::null_mut());
        let (mut dependencies, mut count) = (ptr::null(), usize::MAX);
        // SAFETY: a live stream and valid out-pointers; no edge data asked for.
        ok("cuStreamGetCaptureInfo_v3", unsafe {
            driver().cuStreamGetCaptureInfo_v3(
                stream.as_raw(),
                &mut status,
                &mut id,
                &mut graph,
                &mut dependencies,
                ptr::null_mut(),
                &mut count,
            )
        });
        assert_eq!(status, ACTIVE);
        assert_ne!(id, 0, "a capture's id is not zero");
        assert!(!graph.is_null(), "the graph being built is reported");
        assert_eq!(count, 1, "the stream depends on its last captured node");
        // SAFETY: the driver reported an array of `count` nodes, valid during the capture.
        let node = unsafe { *dependencies };
        let mut kind = CUgraphNodeType(77);
        // SAFETY: a node of the capture's graph and a valid out-pointer.
        ok("cuGraphNodeGetType", unsafe {
            driver().cuGraphNodeGetType(node, &mut kind)
        });
        assert_eq!(kind, CUgraphNodeType::CU_GRAPH_NODE_TYPE_HOST);
        let ended = capture.end().expect("the capture ends in a graph");
        assert_eq!(
            ended.0, graph,
            "the reported graph is the one the capture ends in"
        );
        ids.push(id);
    }
    assert_ne!(ids[0], ids[1], "two captures have different ids");
}

#[test]
fn a_blocking_capture_makes_legacy_is_capturing_answer_implicit_and_stays_valid() {
    let _alone = alone();
    let context = current_context();
    for mode in [GLOBAL, RELAXED] {
        let stream = blocking(&context);
        let runs = Arc::new(AtomicUsize::new(0));
        let capture = Capture::begin(stream.as_raw(), mode);
        // Null is the legacy stream on a legacy table; on a per-thread one, this thread's own.
        let null_is_legacy = !suite::test_driver().driver.per_thread_default_stream();
        let legacy_handles = [CU_STREAM_LEGACY, ptr::null_mut()];
        for &legacy in &legacy_handles[..if null_is_legacy { 2 } else { 1 }] {
            assert_eq!(
                is_capturing(legacy).0,
                CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
                "{mode:?}: cuStreamIsCapturing({legacy:?})"
            );
        }
        assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, ACTIVE), "{mode:?}");
        launch(stream.as_raw(), counting(&runs));
        let graph = capture
            .end()
            .unwrap_or_else(|(result, _)| panic!("{mode:?}: the capture ended with {result}"));
        let exec = graph.instantiate();
        exec.launch(stream.as_raw());
        ok("cuStreamSynchronize", synchronize(stream.as_raw()));
        assert_eq!(count(&runs), 1, "{mode:?}: the captured node runs");
    }
}

#[test]
fn a_blocking_capture_leaves_the_per_thread_stream_not_capturing() {
    let _alone = alone();
    let context = current_context();
    let stream = blocking(&context);
    let capture = Capture::begin(stream.as_raw(), GLOBAL);
    assert_eq!(is_capturing(CU_STREAM_PER_THREAD), (SUCCESS, NONE));
    assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, ACTIVE));
    assert!(capture.end().is_ok(), "the capture stays valid");
}

#[test]
fn a_blocking_capture_refuses_a_legacy_launch_as_implicit_and_is_invalidated() {
    let _alone = alone();
    let context = current_context();
    let stream = blocking(&context);
    let runs = Arc::new(AtomicUsize::new(0));
    let capture = Capture::begin(stream.as_raw(), GLOBAL);
    assert_eq!(
        launch_host(CU_STREAM_LEGACY, counting(&runs)),
        CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
    );
    assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, INVALIDATED));
    let ended = capture.end();
    assert_eq!(
        ended.err(),
        Some((
            CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
            ptr::null_mut()
        ))
    );
    ok("cuStreamSynchronize", synchronize(CU_STREAM_LEGACY));
    assert_eq!(count(&runs), 0, "a refused launch enqueued nothing");
}

/// Synchronizing the legacy stream while `stream` captures in global mode answers `expected` and
/// invalidates the capture, which then ends without a graph.
fn assert_legacy_synchronize_invalidates(stream: &Stream, expected: CUresult) {
    let capture = Capture::begin(stream.as_raw(), GLOBAL);
    assert_eq!(synchronize(CU_STREAM_LEGACY), expected);
    assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, INVALIDATED));
    assert_eq!(
        capture.end().err().map(|(result, _)| result),
        Some(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
    );
    ok("cuStreamSynchronize", synchronize(CU_STREAM_LEGACY));
}

#[test]
fn a_blocking_capture_refuses_a_legacy_synchronize_as_implicit_and_is_invalidated() {
    let _alone = alone();
    let context = current_context();
    assert_legacy_synchronize_invalidates(
        &blocking(&context),
        CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
    );
}

#[test]
fn a_non_blocking_capture_leaves_the_legacy_stream_free_to_launch_and_run() {
    let _alone = alone();
    let context = current_context();
    let stream = non_blocking(&context);
    let (legacy_runs, node_runs) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let capture = Capture::begin(stream.as_raw(), GLOBAL);
    assert_eq!(
        is_capturing(CU_STREAM_LEGACY),
        (SUCCESS, NONE),
        "the legacy stream is not involved"
    );
    launch(CU_STREAM_LEGACY, counting(&legacy_runs));
    wait_until(
        "the legacy stream's host function to run during the capture",
        || count(&legacy_runs) == 1,
    );
    assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, ACTIVE));
    launch(stream.as_raw(), counting(&node_runs));
    let graph = capture.end().expect("the capture stays valid");
    ok("cuStreamSynchronize", synchronize(CU_STREAM_LEGACY));
    let exec = graph.instantiate();
    exec.launch(stream.as_raw());
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!((count(&legacy_runs), count(&node_runs)), (1, 1));
}

#[test]
fn a_non_blocking_global_capture_refuses_a_legacy_synchronize_as_unsupported_and_is_invalidated() {
    let _alone = alone();
    let context = current_context();
    assert_legacy_synchronize_invalidates(
        &non_blocking(&context),
        CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
    );
}

#[test]
fn an_invalidated_capture_reports_invalidated_refuses_launches_and_ends_without_a_graph() {
    let _alone = alone();
    let context = current_context();
    let stream = non_blocking(&context);
    let (refused, after) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let capture = Capture::begin(stream.as_raw(), GLOBAL);
    assert_ne!(
        synchronize(CU_STREAM_LEGACY),
        SUCCESS,
        "invalidates the capture"
    );

    assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, INVALIDATED));
    assert_eq!(
        launch_host(stream.as_raw(), counting(&refused)),
        CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    );
    assert_eq!(
        capture.end().err(),
        Some((
            CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
            ptr::null_mut()
        ))
    );
    assert_eq!(is_capturing(stream.as_raw()), (SUCCESS, NONE));
    launch(stream.as_raw(), counting(&after));
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    ok("cuStreamSynchronize", synchronize(CU_STREAM_LEGACY));
    assert_eq!((count(&refused), count(&after)), (0, 1));
}

const THREAD_LOCAL: CUstreamCaptureMode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;

/// Sets the calling thread's capture interaction mode; returns the one it had.
fn exchange_capture_mode(mode: CUstreamCaptureMode) -> CUstreamCaptureMode {
    let mut mode = mode;
    // SAFETY: a valid pointer to a mode.
    ok("cuThreadExchangeStreamCaptureMode", unsafe {
        driver().cuThreadExchangeStreamCaptureMode(&mut mode)
    });
    mode
}

#[test]
fn an_event_query_under_a_global_capture_is_refused_and_invalidates_it_unless_the_thread_may() {
    let _alone = alone();
    let context = current_context();
    let (captured, other) = (non_blocking(&context), non_blocking(&context));
    let event = Event::new(&context, EventFlags::DisableTiming).expect("an event");
    record(&event, other.as_raw());
    ok("cuStreamSynchronize", synchronize(other.as_raw()));
    let raw = event.as_raw().addr();
    // (on the capturing thread, the querying thread's own mode, answer)
    let cases = [
        (
            false,
            GLOBAL,
            CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
        ),
        (false, THREAD_LOCAL, SUCCESS),
        (false, RELAXED, SUCCESS),
        (
            true,
            GLOBAL,
            CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
        ),
        (
            true,
            THREAD_LOCAL,
            CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
        ),
        (true, RELAXED, SUCCESS),
    ];
    for (on_capturing_thread, own_mode, expected) in cases {
        let capture = Capture::begin(captured.as_raw(), GLOBAL);
        let query = move || {
            let previous = exchange_capture_mode(own_mode);
            let answer = event_query(std::ptr::with_exposed_provenance_mut(raw));
            assert_eq!(exchange_capture_mode(previous), own_mode);
            answer
        };
        let answer = if on_capturing_thread {
            query()
        } else {
            std::thread::scope(|scope| scope.spawn(query).join().expect("queried"))
        };
        let case = format!("on the capturing thread: {on_capturing_thread}, mode {own_mode:?}");
        assert_eq!(answer, expected, "{case}");
        let ended = capture.end().map(drop).map_err(|(result, _)| result);
        let invalidated = Err(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        assert_eq!(
            ended,
            if expected == SUCCESS {
                Ok(())
            } else {
                invalidated
            },
            "{case}"
        );
    }
}

#[test]
fn a_query_of_an_event_a_capture_took_answers_captured_event_and_invalidates_the_capture() {
    let _alone = alone();
    let context = current_context();
    let stream = non_blocking(&context);
    let event = Event::new(&context, EventFlags::DisableTiming).expect("an event");
    let capture = Capture::begin(stream.as_raw(), RELAXED);
    record(&event, stream.as_raw());
    assert_eq!(
        event_query(event.as_raw()),
        CUresult::CUDA_ERROR_CAPTURED_EVENT
    );
    assert_eq!(
        capture.end().map(drop).map_err(|(result, _)| result),
        Err(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
    );
}

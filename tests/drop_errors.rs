//! An error a `Drop` could not return (`Error::DropFailed`) is returned by the next call on the
//! same context: never taken by what cuda-host calls on its own account (another value's `Drop`,
//! an abandoned builder's end), where no caller would see it, nor does it keep that work from
//! being done.

use cuda_host::graph::{CaptureMode, GraphBuilder};
use cuda_host::{Context, Error, Stream, StreamFlags, host_launch};
use cuda_host_sys::CUresult;
use suite::context;

/// Leaves an error of a failed stream destroy for `context`'s next call.
fn leave_drop_error(controls: &suite::software::Controls, context: &Context) {
    let doomed = Stream::new(context, StreamFlags::NonBlocking).expect("stream");
    controls.fail_next_calls(c"cuStreamDestroy_v2", 1, CUresult::CUDA_ERROR_INVALID_VALUE);
    drop(doomed);
}

/// Whether the next call on `context` answers the drop error.
fn next_call_answers_drop_error(context: &Context) -> Result<(), String> {
    let next = Stream::new(context, StreamFlags::NonBlocking).map(drop);
    match next {
        Err(Error::DropFailed {
            object: "stream", ..
        }) => Ok(()),
        other => Err(format!(
            "the drop error was not left for the next call on the context: {other:?}"
        )),
    }
}

/// With nothing between, the next call answers the error.
#[test]
fn the_next_call_answers_a_drop_error() {
    let test = "the_next_call_answers_a_drop_error";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    suite::alone_in_child!(the_next_call_answers_a_drop_error);
    let context = context();
    leave_drop_error(controls, &context);
    next_call_answers_drop_error(&context).unwrap();
}

/// A launch on `stream`, then a drop error, then the value's drop: the next call on `context`
/// answers the error. (The drop of a launched special or borrowed value watches the stream for
/// its context's failure, in the stream's context.)
fn launched_value_leaves_the_error(
    controls: &suite::software::Controls,
    context: &Context,
    stream: Stream,
) -> Result<(), String> {
    host_launch(&stream, || {}).expect("launch");
    stream.synchronize().expect("synchronize");
    leave_drop_error(controls, context);
    drop(stream);
    next_call_answers_drop_error(context)
}

#[test]
fn a_launched_per_thread_streams_drop_leaves_a_drop_error_for_the_next_call() {
    let test = "a_launched_per_thread_streams_drop_leaves_a_drop_error_for_the_next_call";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    suite::alone_in_child!(
        a_launched_per_thread_streams_drop_leaves_a_drop_error_for_the_next_call
    );
    let context = context();
    launched_value_leaves_the_error(controls, &context, Stream::per_thread(&context)).unwrap();
}

#[test]
fn a_launched_legacy_streams_drop_leaves_a_drop_error_for_the_next_call() {
    let test = "a_launched_legacy_streams_drop_leaves_a_drop_error_for_the_next_call";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    suite::alone_in_child!(a_launched_legacy_streams_drop_leaves_a_drop_error_for_the_next_call);
    let context = context();
    launched_value_leaves_the_error(controls, &context, Stream::legacy(&context)).unwrap();
}

/// A borrowed value (`Stream::borrow_raw` of another value's handle).
#[test]
fn a_launched_borrowed_streams_drop_leaves_a_drop_error_for_the_next_call() {
    let test = "a_launched_borrowed_streams_drop_leaves_a_drop_error_for_the_next_call";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    suite::alone_in_child!(a_launched_borrowed_streams_drop_leaves_a_drop_error_for_the_next_call);
    let context = context();
    let owner = Stream::new(&context, StreamFlags::NonBlocking).expect("stream");
    // SAFETY: `owner`'s handle, a stream of `context`, outlives the borrowed value.
    let borrowed = unsafe { Stream::borrow_raw(&context, owner.as_raw()) };
    let answered = launched_value_leaves_the_error(controls, &context, borrowed);
    drop(owner);
    answered.unwrap();
}

/// A `GraphBuilder` dropped without `end` asks whether the stream still captures, leaving a
/// waiting drop error for the next call.
#[test]
fn an_abandoned_builders_drop_leaves_a_drop_error_for_the_next_call() {
    let test = "an_abandoned_builders_drop_leaves_a_drop_error_for_the_next_call";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    suite::alone_in_child!(an_abandoned_builders_drop_leaves_a_drop_error_for_the_next_call);
    let context = context();
    let stream = Stream::new(&context, StreamFlags::NonBlocking).expect("stream");
    let doomed = Stream::new(&context, StreamFlags::NonBlocking).expect("stream");
    let builder = GraphBuilder::begin(&stream, CaptureMode::Relaxed).expect("begin");
    controls.fail_next_calls(c"cuStreamDestroy_v2", 1, CUresult::CUDA_ERROR_INVALID_VALUE);
    drop(doomed);
    drop(builder);
    let answered = next_call_answers_drop_error(&context);
    let capturing = stream.capture_state();
    drop(stream);
    answered.unwrap_or_else(|message| {
        panic!("{message} (the stream's capture state after the builder's drop: {capturing:?})")
    });
}

/// Whether a host function behind a fault that fails the context, on a launched per-thread
/// stream value dropped meanwhile (with a drop error waiting, if `with_error`), stays unreclaimed
/// for 5 s: the value's watch of the stream must see the failure and reclaim it either way.
fn stranded_behind_a_failure(with_error: bool) -> bool {
    let controls = suite::software::expect_controls();
    let context = context();
    let per_thread = Stream::per_thread(&context);
    let gate = suite::Gate::new(&context);
    let fault = suite::kernels::Fault::load(context.driver());
    let tally = suite::Tally::new();
    gate.hold(&per_thread);
    fault.launch(&per_thread);
    // Behind the fault: never runs; only the watch of the dropped value sees the failure.
    tally.launch_counted(&per_thread, 1);
    if with_error {
        leave_drop_error(controls, &context);
    }
    drop(per_thread);
    gate.open();
    let reclaimed = suite::wait::holds_within(std::time::Duration::from_secs(5), || {
        cuda_host::reclaim();
        tally.drops() == 1
    });
    !reclaimed
}

#[test]
fn a_dropped_per_thread_streams_watch_reclaims_behind_a_failure() {
    let test = "a_dropped_per_thread_streams_watch_reclaims_behind_a_failure";
    if suite::software::controls().is_none() {
        return suite::skip(test, "failures are controls of the software driver");
    }
    suite::alone_in_child!(a_dropped_per_thread_streams_watch_reclaims_behind_a_failure);
    assert!(
        !stranded_behind_a_failure(false),
        "the record was not reclaimed within 5 s"
    );
}

#[test]
fn a_drop_error_waiting_does_not_keep_a_dropped_per_thread_stream_unwatched() {
    let test = "a_drop_error_waiting_does_not_keep_a_dropped_per_thread_stream_unwatched";
    if suite::software::controls().is_none() {
        return suite::skip(test, "failures are controls of the software driver");
    }
    suite::alone_in_child!(
        a_drop_error_waiting_does_not_keep_a_dropped_per_thread_stream_unwatched
    );
    assert!(
        !stranded_behind_a_failure(true),
        "the host function's record behind the context's failure was not reclaimed within 5 s: \
         the dropped per-thread stream was never watched"
    );
}

/// With two errors waiting, an abandoned builder's `Drop` still ends its capture, and leaves both
/// for later calls.
#[test]
fn an_abandoned_builders_drop_ends_its_capture_while_drop_errors_wait() {
    let test = "an_abandoned_builders_drop_ends_its_capture_while_drop_errors_wait";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    suite::alone_in_child!(an_abandoned_builders_drop_ends_its_capture_while_drop_errors_wait);
    let context = context();
    let stream = Stream::new(&context, StreamFlags::NonBlocking).expect("stream");
    let doomed = [
        Stream::new(&context, StreamFlags::NonBlocking).expect("stream"),
        Stream::new(&context, StreamFlags::NonBlocking).expect("stream"),
    ];
    let builder = GraphBuilder::begin(&stream, CaptureMode::Relaxed).expect("begin");
    controls.fail_next_calls(c"cuStreamDestroy_v2", 2, CUresult::CUDA_ERROR_INVALID_VALUE);
    drop(doomed);
    drop(builder);
    // Whatever errors are left, taken first, so that the look below is answered by the driver.
    let mut left = 0;
    while let Err(Error::DropFailed { .. }) =
        Stream::new(&context, StreamFlags::NonBlocking).map(drop)
    {
        left += 1;
    }
    let capturing = stream.capture_state();
    assert!(
        matches!(capturing, Ok(None)),
        "the stream still captures after its builder was dropped: {capturing:?} ({left} drop \
         errors were left for later calls)"
    );
    assert_eq!(left, 2, "drop errors left for later calls");
}

/// A builder's `end` with a drop error waiting ends the capture and returns its graph: the error
/// is no reason to lose the capture, and waits for the next call.
#[test]
fn a_builders_end_returns_its_graph_while_a_drop_error_waits() {
    let test = "a_builders_end_returns_its_graph_while_a_drop_error_waits";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    suite::alone_in_child!(a_builders_end_returns_its_graph_while_a_drop_error_waits);
    let context = context();
    let stream = Stream::new(&context, StreamFlags::NonBlocking).expect("stream");
    let builder = GraphBuilder::begin(&stream, CaptureMode::Relaxed).expect("begin");
    builder.callback(|| {}).expect("callback");
    leave_drop_error(controls, &context);
    let graph = builder.end();
    assert!(graph.is_ok(), "the end refused: {:?}", graph.err());
    next_call_answers_drop_error(&context).unwrap();
    assert!(matches!(stream.capture_state(), Ok(None)));
}

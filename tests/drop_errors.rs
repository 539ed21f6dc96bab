//! An error a `Drop` could not return (`Error::DropFailed`) is returned by the next call on the
//! same context: never taken by what cuda-host calls on its own account (another value's `Drop`,
//! an abandoned builder's end), where no caller would see it, nor does it keep that work from
//! being done.

use cuda_host::graph::{CaptureMode, GraphBuilder};
use cuda_host::{Context, Error, Event, EventFlags, Stream, StreamFlags, host_launch};
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

/// Whether the record of a host function behind the context's failure is reclaimed once
/// `answer` (given an event recorded behind it and its stream) answered that failure: straight
/// from the driver (`through_drop_error` false), or as the error a failed `cuEventDestroy` left
/// (true). The failure is set in the driver, unseen by cuda-host until a call answers it; the
/// stream is kept alive, so no watch of its drop reclaims.
fn reclaimed_after_a_call_answers_the_failure(
    controls: &suite::software::Controls,
    through_drop_error: bool,
    answer: impl FnOnce(&Event, &Stream) -> Result<(), Error>,
) -> Result<(), String> {
    let context = context();
    let stream = Stream::new(&context, StreamFlags::NonBlocking).expect("stream");
    let gate = suite::Gate::new(&context);
    let tally = suite::Tally::new();
    let doomed = Event::new(&context, EventFlags::DisableTiming).expect("event");
    let event = Event::new(&context, EventFlags::DisableTiming).expect("event");
    gate.hold(&stream);
    // Behind the gate: never runs once the context failed.
    tally.launch_counted(&stream, 1);
    event.record(&stream).expect("record");
    controls.set_sticky_error(&context, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    if through_drop_error {
        // cuEventDestroy answers the sticky error: kept as a drop error.
        drop(doomed);
    } else {
        std::mem::forget(doomed);
    }
    let answered = answer(&event, &stream);
    let failure = answered
        .as_ref()
        .err()
        .and_then(Error::driver_result)
        .is_some_and(|result| result == CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    let reclaimed = suite::wait::holds_within(std::time::Duration::from_secs(2), || {
        cuda_host::reclaim();
        tally.drops() == 1
    });
    std::mem::forget((event, stream, gate));
    match (failure, reclaimed) {
        (true, true) => Ok(()),
        (false, _) => Err(format!("the call answered {answered:?}, not the failure")),
        (true, false) => Err(format!(
            "the call answered the failure ({answered:?}), yet the record of a host function \
             behind it, which will never run, was not reclaimed within 2 s"
        )),
    }
}

#[test]
fn an_event_synchronize_answering_the_failure_reclaims_the_records_behind_it() {
    let test = "an_event_synchronize_answering_the_failure_reclaims_the_records_behind_it";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    suite::alone_in_child!(
        an_event_synchronize_answering_the_failure_reclaims_the_records_behind_it
    );
    reclaimed_after_a_call_answers_the_failure(controls, false, |event, _| event.synchronize())
        .unwrap();
}

#[test]
fn an_event_synchronize_answering_the_failure_as_a_drop_error_reclaims_the_records_behind_it() {
    let test =
        "an_event_synchronize_answering_the_failure_as_a_drop_error_reclaims_the_records_behind_it";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    suite::alone_in_child!(
        an_event_synchronize_answering_the_failure_as_a_drop_error_reclaims_the_records_behind_it
    );
    reclaimed_after_a_call_answers_the_failure(controls, true, |event, _| event.synchronize())
        .unwrap();
}

#[test]
fn a_launch_answering_the_failure_as_a_drop_error_reclaims_the_records_behind_it() {
    let test = "a_launch_answering_the_failure_as_a_drop_error_reclaims_the_records_behind_it";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    suite::alone_in_child!(
        a_launch_answering_the_failure_as_a_drop_error_reclaims_the_records_behind_it
    );
    reclaimed_after_a_call_answers_the_failure(controls, true, |_, stream| {
        host_launch(stream, || {})
    })
    .unwrap();
}

#[test]
fn a_stream_made_after_the_failure_answers_it_and_reclaims_the_records_behind_it() {
    let test = "a_stream_made_after_the_failure_answers_it_and_reclaims_the_records_behind_it";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    suite::alone_in_child!(
        a_stream_made_after_the_failure_answers_it_and_reclaims_the_records_behind_it
    );
    reclaimed_after_a_call_answers_the_failure(controls, false, |_, stream| {
        Stream::new(stream.context(), StreamFlags::NonBlocking).map(drop)
    })
    .unwrap();
}

/// Queries of what exists leave the error waiting, as `Error::DropFailed` says; the next call
/// that makes or enqueues answers it.
#[test]
fn an_event_query_leaves_a_drop_error_for_the_next_call_that_makes_a_stream() {
    let test = "an_event_query_leaves_a_drop_error_for_the_next_call_that_makes_a_stream";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    suite::alone_in_child!(
        an_event_query_leaves_a_drop_error_for_the_next_call_that_makes_a_stream
    );
    let context = context();
    let event = Event::new(&context, EventFlags::DisableTiming).expect("event");
    leave_drop_error(controls, &context);
    assert_eq!(
        event.is_complete(),
        Ok(true),
        "the query answers its own question"
    );
    next_call_answers_drop_error(&context).unwrap();
}

/// Errors left on one thread are answered on another, oldest first, once each; another value of
/// the same context (a second `Context::primary`) does not answer them.
#[test]
fn drop_errors_cross_threads_in_order_once_and_stay_with_their_value() {
    let test = "drop_errors_cross_threads_in_order_once_and_stay_with_their_value";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    suite::alone_in_child!(drop_errors_cross_threads_in_order_once_and_stay_with_their_value);
    let context = context();
    let other = Context::primary(&cuda_host::Device::get(context.driver(), 0).expect("device"))
        .expect("a second value");
    let codes = [
        CUresult::CUDA_ERROR_INVALID_VALUE,
        CUresult::CUDA_ERROR_INVALID_HANDLE,
    ];
    let leaver = context.clone();
    std::thread::spawn(move || {
        let doomed: Vec<_> = codes
            .iter()
            .map(|_| Stream::new(&leaver, StreamFlags::NonBlocking).expect("stream"))
            .collect();
        for (stream, code) in doomed.into_iter().zip(codes) {
            controls.fail_next_calls(c"cuStreamDestroy_v2", 1, code);
            drop(stream);
        }
    })
    .join()
    .expect("the leaving thread");
    assert!(Stream::new(&other, StreamFlags::NonBlocking).is_ok());
    let answered: Vec<_> = (0..3)
        .map(|_| {
            Stream::new(&context, StreamFlags::NonBlocking)
                .map(drop)
                .err()
                .and_then(|error| error.driver_result())
        })
        .collect();
    assert_eq!(answered, vec![Some(codes[0]), Some(codes[1]), None]);
}

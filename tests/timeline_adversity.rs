//! Timelines under adversity: loggers that call cuda-host back from inside its locks and drains,
//! other code's captures that take a track's word, a context's pinned words all taken, and a
//! failure answered mid-operation. Each test states a behaviour that holds; every wait is
//! bounded.

use cuda_host::{
    Context, Error, Stream, StreamFlags, graph::CaptureState, host_launch, metrics, reclaim,
    timeline::Timeline,
};
use cuda_host_sys::{CUresult, CUstreamCaptureMode};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use suite::wait::{holds_within, returns_within};
use suite::{Gate, calling_back_logger, context, wait_until};

fn new_stream(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking).expect("stream")
}

/// Ends the capture other code began on `stream` (raw `cuStreamEndCapture`) and destroys its
/// graph; the driver's answer.
fn end_raw_capture(stream: &Stream) -> CUresult {
    match suite::capture::end_capture(stream.as_raw()) {
        Ok(_graph) => CUresult::CUDA_SUCCESS,
        Err((result, graph)) => {
            if !graph.is_null() {
                drop(suite::capture::Graph(graph));
            }
            result
        }
    }
}

/// A drain's look logs (here a failed query) while the drain goes through the thread's held
/// records; a logger that enqueues a timeline operation there must still have the word held
/// until the stream passed the operation, or the word would go to another timeline while the
/// stream still writes it.
#[test]
fn a_timelines_word_is_not_reused_while_a_stream_may_still_write_it_when_a_logger_enqueues_in_a_drain()
 {
    let test = "a_timelines_word_is_not_reused_while_a_stream_may_still_write_it_when_a_logger_enqueues_in_a_drain";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "injected failures are a control of the software driver",
        );
    };
    // Alone in a process: a logger is set once per process, and the counts are process-wide.
    suite::alone_in_child!(
        a_timelines_word_is_not_reused_while_a_stream_may_still_write_it_when_a_logger_enqueues_in_a_drain
    );
    calling_back_logger::install();
    let context = context();
    let stream = Arc::new(new_stream(&context));
    let first_gate = Gate::new(&context);
    // For the logger's call back, which holds the stream at it; the test opens it.
    static SECOND_GATE: std::sync::OnceLock<Gate> = std::sync::OnceLock::new();
    let second_gate = SECOND_GATE.get_or_init(|| Gate::new(&context));
    first_gate.hold(&stream);
    let timeline = Timeline::new(&context, 0).expect("timeline");
    // Point 1, written, held back by the first gate: the thread holds the word until it passed.
    timeline
        .enqueue_signal(&stream, 1)
        .expect("signal enqueued");
    // The logger of the drain's look enqueues a second signal, behind the second gate.
    calling_back_logger::on_next_record({
        let (timeline, stream) = (timeline.clone(), Arc::clone(&stream));
        move || {
            second_gate.hold(&stream);
            timeline
                .enqueue_signal(&stream, 2)
                .expect("signal enqueued from the logger");
        }
    });
    // The drain's look at the track queries the probe for the pending written point; the query
    // fails, and the look logs once it ended, with the drain's queues still borrowed.
    controls.fail_next_calls(c"cuEventQuery", 1, CUresult::CUDA_ERROR_INVALID_VALUE);
    reclaim();
    let called_back = calling_back_logger::outcome();
    assert!(called_back.is_some(), "the look did not log");
    // The stream passes the first signal and its point, and stops at the second gate: the
    // second signal is still to be written into the word.
    first_gate.open();
    wait_until("the first signal", || timeline.value() == 1);
    // The hold of the first signal's point goes; the second's stays, behind the second gate.
    wait_until("the hold of point 1 to go", || {
        reclaim();
        metrics().stream_points().held == 1
    });
    drop(timeline);
    reclaim();
    let words_after_drop = metrics().timelines().words;
    // Another timeline of the context takes the word given back last, if it was given back.
    let other = Timeline::new(&context, 0).expect("timeline");
    second_gate.open();
    stream.synchronize().expect("synchronize");
    assert_eq!(
        (other.value(), words_after_drop),
        (0, 1),
        "the stream's second signal (enqueued by the logger, which saw {called_back:?}) landed in \
         another timeline's word: the word was given back while the stream still had to write it"
    );
}

/// A stream whose track has a written point a capture left unread: `first`'s signal, pending
/// behind `gate`, written into the track's word, whose next write a capture other code began
/// took with `second`'s wait (refused; its word kept for the life of the process).
struct UnreadPoint {
    _context: Context,
    stream: Stream,
    gate: Gate,
    first: Timeline,
    second: Timeline,
}

fn unread_point(controls: &suite::software::Controls) -> UnreadPoint {
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    gate.hold(&stream);
    let first = Timeline::new(&context, 0).expect("timeline");
    let second = Timeline::new(&context, 0).expect("timeline");
    first.enqueue_signal(&stream, 1).expect("signal enqueued");
    controls.begin_capture_at_next_call(
        c"cuStreamBatchMemOp",
        &stream,
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
    );
    assert_eq!(
        second.enqueue_wait(&stream, 1),
        Err(Error::TimelineInCapture {
            status: CaptureState::Active
        })
    );
    assert_eq!(end_raw_capture(&stream), CUresult::CUDA_SUCCESS);
    UnreadPoint {
        _context: context,
        stream,
        gate,
        first,
        second,
    }
}

/// Asserts that, within 3 s of drains, only the kept word of [`unread_point`]'s `second` is held:
/// `first`'s goes once a drain saw the stream pass its signal, which it did once `when`.
fn assert_only_the_taken_word_is_held(when: &str) {
    let let_go = holds_within(Duration::from_secs(3), || {
        reclaim();
        metrics().timelines().words == metrics().timelines().kept
            && metrics().stream_points().held == 0
    });
    assert!(
        let_go,
        "the first timeline's word is still held after {when}: {:?}, {:?}",
        metrics().timelines(),
        metrics().stream_points()
    );
}

/// Once a capture other code began takes a write of a track's word, the track's written points
/// still pending can no longer be read from it; a synchronize of the stream shows them passed
/// all the same, so the hold of the earlier timeline's word, and the context value it keeps, are
/// let go.
#[test]
fn written_points_a_taken_word_left_pending_are_seen_passed_once_the_stream_synchronized() {
    let test =
        "written_points_a_taken_word_left_pending_are_seen_passed_once_the_stream_synchronized";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "a capture begun at a given call is a control of the software driver",
        );
    };
    // Alone in a process: the counts are process-wide, and any thread's allocation would
    // invalidate a global-mode capture.
    suite::alone_in_child!(
        written_points_a_taken_word_left_pending_are_seen_passed_once_the_stream_synchronized
    );
    let UnreadPoint {
        stream,
        gate,
        first,
        second,
        ..
    } = unread_point(controls);
    gate.open();
    stream.synchronize().expect("synchronize");
    assert_eq!(first.value(), 1, "the stream passed the signal");
    drop(first);
    drop(second);
    assert_only_the_taken_word_is_held("the stream was synchronized");
}

/// The same with no synchronize: the stream is dropped instead, and marks a point after the
/// written points left unread, so that they are seen passed once the stream got there.
#[test]
fn written_points_a_taken_word_left_pending_are_seen_passed_once_their_stream_was_dropped() {
    let test =
        "written_points_a_taken_word_left_pending_are_seen_passed_once_their_stream_was_dropped";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "a capture begun at a given call is a control of the software driver",
        );
    };
    // Alone in a process: the counts are process-wide, and any thread's allocation would
    // invalidate a global-mode capture.
    suite::alone_in_child!(
        written_points_a_taken_word_left_pending_are_seen_passed_once_their_stream_was_dropped
    );
    let UnreadPoint {
        stream,
        gate,
        first,
        second,
        ..
    } = unread_point(controls);
    drop(stream);
    gate.open();
    wait_until("the first timeline's signal", || first.value() == 1);
    drop(first);
    drop(second);
    assert_only_the_taken_word_is_held("its stream passed its signal and went");
}

/// A track's first written point takes a word of the context's pinned pages; when none is free,
/// a fresh page would be a `cuMemHostAlloc`, a potentially unsafe call that invalidates another
/// thread's global-mode capture, begun by other code on another stream. A timeline operation on
/// a stream that is not capturing makes only calls that captures allow.
#[test]
fn a_timeline_operation_on_a_stream_not_capturing_leaves_another_threads_global_capture_intact() {
    let test = "a_timeline_operation_on_a_stream_not_capturing_leaves_another_threads_global_capture_intact";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "allocation counts are a control of the software driver",
        );
    };
    // Alone in a process: the context's pinned pages and the global capture.
    suite::alone_in_child!(
        a_timeline_operation_on_a_stream_not_capturing_leaves_another_threads_global_capture_intact
    );
    let context = context();
    let stream = new_stream(&context);
    let captured = new_stream(&context);
    // Timelines until the context's word pages have no word free: the one that took a fresh page
    // left 511 words of it, which the next 511 take.
    let allocations = || controls.live_objects().host_allocations;
    let mut timelines = Vec::new();
    let mut fresh_page = false;
    while !fresh_page {
        let before = allocations();
        timelines.push(Timeline::new(&context, 0).expect("timeline"));
        fresh_page = allocations() > before;
    }
    for _ in 0..511 {
        timelines.push(Timeline::new(&context, 0).expect("timeline"));
    }
    let (began, enqueued) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    let ended = std::thread::scope(|scope| {
        let capturing = scope.spawn(|| {
            let capture = suite::capture::Capture::begin(
                captured.as_raw(),
                CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            );
            began.wait();
            enqueued.wait();
            capture.end().map(drop).map_err(|(result, _)| result)
        });
        began.wait();
        let signalled = timelines[0].enqueue_signal(&stream, 1);
        enqueued.wait();
        let ended = capturing.join().expect("the capturing thread");
        signalled.expect("signal enqueued");
        ended
    });
    assert_eq!(
        ended,
        Ok(()),
        "another thread's global-mode capture was invalidated by a timeline's signal on a stream \
         that was not capturing"
    );
    stream.synchronize().expect("synchronize");
}

/// The track's lock and the timeline's are held across the batch's driver call; a failure it
/// answers marks the context failed, which logs (launches abandoned): a logger calling cuda-host
/// back to mark a point of the same stream must not wait for a lock its own thread holds.
#[test]
fn a_logger_called_when_a_timeline_operation_fails_may_mark_a_point_of_the_same_stream() {
    let test =
        "a_logger_called_when_a_timeline_operation_fails_may_mark_a_point_of_the_same_stream";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "injected failures and fresh contexts are controls of the software driver",
        );
    };
    // Alone in a process: a logger is set once per process.
    suite::alone_in_child!(
        a_logger_called_when_a_timeline_operation_fails_may_mark_a_point_of_the_same_stream
    );
    calling_back_logger::install();
    let primary = context();
    let device = cuda_host::Device::get(primary.driver(), 0).expect("device");
    // A context of its own: this test fails it.
    let fresh = controls.fresh_context(&device);
    let stream = Arc::new(new_stream(&fresh));
    let held = new_stream(&fresh);
    let gate = Gate::new(&primary);
    gate.hold(&held);
    // A host function launched and waiting: abandoned (and logged) when the context fails.
    host_launch(&held, || {}).expect("launched");
    let timeline = Timeline::new(&fresh, 0).expect("timeline");
    let other = Timeline::new(&fresh, 0).expect("timeline");
    // The stream's track gets its word before the failing call.
    timeline
        .enqueue_signal(&stream, 1)
        .expect("signal enqueued");
    stream.synchronize().expect("synchronize");
    calling_back_logger::on_next_record({
        let stream = Arc::clone(&stream);
        move || {
            let _ = other.enqueue_signal(&stream, 1);
        }
    });
    let returned = returns_within(Duration::from_secs(5), {
        let stream = Arc::clone(&stream);
        move || {
            controls.fail_next_calls(
                c"cuStreamBatchMemOp",
                1,
                CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
            );
            let _ = timeline.enqueue_signal(&stream, 2);
        }
    })
    .is_some();
    gate.open();
    assert!(
        returned,
        "the signal whose batch failed never returned: its logger's call back waits for a lock the \
         signal holds (called back: {:?})",
        calling_back_logger::outcome()
    );
}

/// An operation whose point's record fails gets a point nothing records after it, and logs a
/// warning once the timeline's and the track's locks and the stream's window are let go: a
/// logger may call cuda-host back to enqueue on the same timeline and stream. That signal's point
/// shows the first operation passed too, and the word goes once the stream passed both.
#[test]
fn a_logger_called_when_an_operations_point_cannot_be_marked_may_enqueue_on_the_same_stream() {
    let test =
        "a_logger_called_when_an_operations_point_cannot_be_marked_may_enqueue_on_the_same_stream";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "injected failures are a control of the software driver",
        );
    };
    // Alone in a process: a logger is set once per process, and the counts are process-wide.
    suite::alone_in_child!(
        a_logger_called_when_an_operations_point_cannot_be_marked_may_enqueue_on_the_same_stream
    );
    calling_back_logger::install();
    let context = context();
    let stream = Arc::new(new_stream(&context));
    let gate = Gate::new(&context);
    gate.hold(&stream);
    let timeline = Timeline::new(&context, 0).expect("timeline");
    calling_back_logger::on_next_record({
        let (timeline, stream) = (timeline.clone(), Arc::clone(&stream));
        move || {
            timeline
                .enqueue_signal(&stream, 2)
                .expect("the logger's signal enqueued");
        }
    });
    let returned = returns_within(Duration::from_secs(5), {
        let (timeline, stream) = (timeline.clone(), Arc::clone(&stream));
        move || {
            // The track cannot make its word's probe, so it offers no word: the point after the
            // signal is an event's record, which fails.
            controls.fail_next_calls(c"cuEventCreate", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
            controls.fail_next_calls(c"cuEventRecord", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
            timeline.enqueue_signal(&stream, 1)
        }
    });
    gate.open();
    assert_eq!(
        returned,
        Some(Ok(())),
        "the signal whose point could not be marked never returned, or failed (called back: \
         {:?})",
        calling_back_logger::outcome()
    );
    assert_eq!(calling_back_logger::outcome(), Some(Ok(())));
    assert_eq!(timeline.wait(2, suite::TIMEOUT), Ok(true));
    drop(timeline);
    wait_until(
        "the word to be let go once the stream passed both signals",
        || {
            reclaim();
            metrics().timelines().words == 0
        },
    );
    stream.synchronize().expect("synchronize");
}

/// A timeline operation on a stream with no track takes back a quiet track of another stream,
/// under the context's tracks' lock, after a look at that track, which may log (a failed query):
/// a logger calling cuda-host back to mark a point on a third stream must not wait for the lock
/// its own thread holds.
#[test]
fn a_logger_called_by_a_look_that_takes_a_track_back_may_mark_a_point_of_another_stream() {
    let test =
        "a_logger_called_by_a_look_that_takes_a_track_back_may_mark_a_point_of_another_stream";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "injected failures are a control of the software driver",
        );
    };
    // Alone in a process: a logger is set once per process.
    suite::alone_in_child!(
        a_logger_called_by_a_look_that_takes_a_track_back_may_mark_a_point_of_another_stream
    );
    calling_back_logger::install();
    let context = context();
    let (first, second, third) = (
        new_stream(&context),
        Arc::new(new_stream(&context)),
        Arc::new(new_stream(&context)),
    );
    let gate = Gate::new(&context);
    gate.hold(&first);
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let other = Timeline::new(&context, 0).expect("timeline");
    // The context's one track serves the first stream, with a written point pending.
    timeline.enqueue_signal(&first, 1).expect("signal enqueued");
    calling_back_logger::on_next_record({
        let third = Arc::clone(&third);
        move || {
            let _ = other.enqueue_signal(&third, 1);
        }
    });
    // On a thread that holds nothing, so that its drains look at no track: the look that fails
    // is the one taking the first stream's track back.
    let returned = returns_within(Duration::from_secs(5), {
        let (second, timeline) = (Arc::clone(&second), timeline.clone());
        move || {
            controls.fail_next_calls(c"cuEventQuery", 1, CUresult::CUDA_ERROR_INVALID_VALUE);
            let _ = timeline.enqueue_signal(&second, 2);
        }
    })
    .is_some();
    gate.open();
    assert!(
        returned,
        "the signal on the second stream never returned: the logger of the look taking the first \
         stream's track back waits for the context's tracks' lock (called back: {:?})",
        calling_back_logger::outcome()
    );
}

/// The timeline a [`SignallingOnClone`] waker's clone signals.
static CLONED_SIGNALS: Mutex<Option<Timeline>> = Mutex::new(None);

/// A waker whose `clone` signals a timeline (the executor's code, calling cuda-host).
fn signalling_on_clone() -> std::task::Waker {
    fn clone(_: *const ()) -> std::task::RawWaker {
        if let Some(timeline) = &*CLONED_SIGNALS.lock().expect("the timeline") {
            let _ = timeline.signal(1);
        }
        std::task::RawWaker::new(std::ptr::null(), &VTABLE)
    }
    fn noop(_: *const ()) {}
    static VTABLE: std::task::RawWakerVTable =
        std::task::RawWakerVTable::new(clone, noop, noop, noop);
    // SAFETY: the vtable's functions ignore the data pointer and may run on any thread.
    unsafe { std::task::Waker::from_raw(std::task::RawWaker::new(std::ptr::null(), &VTABLE)) }
}

/// A waker's clone is the executor's code, which cuda-host runs outside its locks: awaiting a
/// timeline with a waker whose clone signals that timeline (which wakes its waiters, under the
/// waiters' lock) returns.
#[test]
fn awaiting_a_timeline_with_a_waker_whose_clone_signals_it_returns() {
    // Alone in a process: a wedged poll would hold the timeline's waiters for good.
    suite::alone_in_child!(awaiting_a_timeline_with_a_waker_whose_clone_signals_it_returns);
    let context = context();
    let timeline = Timeline::new(&context, 0).expect("timeline");
    // A waiter already registered: a signal then takes the waiters' lock to wake it.
    let mut first = Box::pin(timeline.reached(5));
    assert!(
        first
            .as_mut()
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
            .is_pending()
    );
    *CLONED_SIGNALS.lock().expect("the timeline") = Some(timeline.clone());
    let (sender, done) = std::sync::mpsc::channel();
    std::thread::spawn({
        let timeline = timeline.clone();
        move || {
            let mut second = Box::pin(timeline.reached(3));
            let waker = signalling_on_clone();
            let pending = second
                .as_mut()
                .poll(&mut std::task::Context::from_waker(&waker))
                .is_pending();
            let _ = sender.send(pending);
        }
    });
    let polled = done.recv_timeout(Duration::from_secs(10));
    if polled.is_err() {
        std::mem::forget((timeline, first));
        panic!(
            "a poll never returned: its registration cloned the waker under the timeline's \
             waiters' lock, which the clone's signal takes"
        );
    }
    assert_eq!(polled, Ok(true));
    assert_eq!(timeline.value(), 1, "the clone signalled");
    *CLONED_SIGNALS.lock().expect("the timeline") = None;
}

/// A timeline operation on a stream with no track takes a quiet track back, after a look whose
/// log calls are made once the operation released the timeline's lock: a logger that calls
/// cuda-host back with an operation on the same timeline (another stream) does not wait for the
/// lock its own thread holds.
#[test]
fn a_logger_called_by_a_take_back_look_may_enqueue_on_the_same_timeline() {
    let test = "a_logger_called_by_a_take_back_look_may_enqueue_on_the_same_timeline";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "injected failures are a control of the software driver",
        );
    };
    suite::alone_in_child!(a_logger_called_by_a_take_back_look_may_enqueue_on_the_same_timeline);
    calling_back_logger::install();
    let context = context();
    let (first, second, third) = (
        new_stream(&context),
        Arc::new(new_stream(&context)),
        Arc::new(new_stream(&context)),
    );
    let gate = Gate::new(&context);
    gate.hold(&first);
    let timeline = Timeline::new(&context, 0).expect("timeline");
    // The context's one track serves the first stream, with a written point pending.
    timeline.enqueue_signal(&first, 1).expect("signal enqueued");
    // The logger enqueues a wait on the SAME timeline, on a third stream.
    calling_back_logger::on_next_record({
        let (third, timeline) = (Arc::clone(&third), timeline.clone());
        move || {
            let _ = timeline.enqueue_wait(&third, 1);
        }
    });
    let returned = returns_within(Duration::from_secs(5), {
        let (second, timeline) = (Arc::clone(&second), timeline.clone());
        move || {
            // The look taking the first stream's track back fails its query, and logs.
            controls.fail_next_calls(c"cuEventQuery", 1, CUresult::CUDA_ERROR_INVALID_VALUE);
            let _ = timeline.enqueue_signal(&second, 2);
        }
    })
    .is_some();
    gate.open();
    if !returned {
        // The wedged thread holds the timeline's lock for good.
        std::mem::forget(timeline);
    }
    assert!(
        returned,
        "the signal on the second stream never returned: the logger of the look taking the first \
         stream's track back ran inside the signal, under the timeline's lock, and its call back \
         on the same timeline waits for it (called back: {:?})",
        calling_back_logger::outcome()
    );
}

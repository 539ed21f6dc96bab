//! Timelines: the host signals and streams wait, streams signal and the host waits or awaits.
//! Ordering, monotonic values, many waiters, a timeline dropped while streams wait, context
//! failure, captures, and the watcher's adversity.

use cuda_host::{
    Context, Error, Event, EventFlags, Stream, StreamFlags, graph::CaptureState, host_launch,
    metrics, reclaim, timeline::Timeline,
};
use cuda_host_sys::{CUresult, CUstreamCaptureMode, CUstreamCaptureStatus};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use suite::{Gate, MappedWords, TIMEOUT, context, wait_until};

fn new_stream(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking).expect("stream")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("a tokio runtime")
}

/// Polls `future` once with `waker`.
fn poll_with<F: Future + Unpin>(future: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(future).poll(&mut TaskContext::from_waker(waker))
}

/// Counts its wakes.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Lets the stream's work run for a while: long enough for work not held back to happen.
fn let_work_run() {
    std::thread::sleep(Duration::from_millis(20));
}

#[test]
fn no_work_after_a_wait_runs_before_the_host_signals_its_value() {
    let context = context();
    let stream = new_stream(&context);
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let words = MappedWords::new(&context, 2);
    timeline.enqueue_wait(&stream, 2).expect("wait enqueued");
    words.write_in_stream(&stream, 0, 7);
    let_work_run();
    assert_eq!(words.get(0), 0, "ran before any signal");
    timeline.signal(1).expect("signal");
    let_work_run();
    assert_eq!(words.get(0), 0, "ran at 1, below the value waited for");
    assert_eq!(stream.is_complete(), Ok(false));
    timeline.signal(2).expect("signal");
    wait_until("the work after the wait", || words.get(0) == 7);
    stream.synchronize().expect("synchronize");
}

#[test]
fn on_a_device_without_64_bit_memory_operations_waits_and_signals_use_the_low_word() {
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            "on_a_device_without_64_bit_memory_operations_waits_and_signals_use_the_low_word",
            "playing an older device is a control of the software driver",
        );
    };
    // Alone in a process: the device's answer is process-wide.
    suite::alone_in_child!(
        on_a_device_without_64_bit_memory_operations_waits_and_signals_use_the_low_word
    );
    let attribute =
        cuda_host_sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS;
    controls.override_device_attribute(attribute, Some(0));
    let context = context();
    let (waiter, signaller) = (new_stream(&context), new_stream(&context));
    // Near a carry into the high word: the low word wraps between the values waited for.
    let start = (1u64 << 32) - 2;
    let timeline = Timeline::new(&context, start).expect("timeline");
    controls.override_device_attribute(attribute, None);
    assert!(!timeline.uses_64_bit_operations());
    let words = MappedWords::new(&context, 2);
    timeline
        .enqueue_wait(&waiter, start + 1)
        .expect("wait enqueued");
    words.write_in_stream(&waiter, 0, 1);
    timeline
        .enqueue_wait(&waiter, start + 3)
        .expect("wait enqueued");
    words.write_in_stream(&waiter, 1, 1);
    let_work_run();
    assert_eq!(
        (words.get(0), words.get(1)),
        (0, 0),
        "ran before any signal"
    );
    timeline.signal(start + 1).expect("signal");
    wait_until("the work after the first wait", || words.get(0) == 1);
    let_work_run();
    assert_eq!(
        words.get(1),
        0,
        "ran before the value crossed into the high word"
    );
    // A stream's signal across the carry: both halves land.
    timeline
        .enqueue_signal(&signaller, start + 3)
        .expect("signal enqueued");
    wait_until("the work after the second wait", || words.get(1) == 1);
    assert!(
        timeline.wait(start + 3, TIMEOUT).expect("wait"),
        "the host sees the stream's signal"
    );
    assert_eq!(timeline.value(), start + 3);
    waiter.synchronize().expect("synchronize");
}

/// A timeline whose streams compare only the low 32 bits, as on a device without 64-bit stream
/// memory operations (the attribute is overridden while it is made; it is read then).
fn narrow_timeline(
    controls: &suite::software::Controls,
    context: &Context,
    initial: u64,
) -> Timeline {
    let attribute =
        cuda_host_sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS;
    controls.override_device_attribute(attribute, Some(0));
    let timeline = Timeline::new(context, initial).expect("timeline");
    controls.override_device_attribute(attribute, None);
    assert!(!timeline.uses_64_bit_operations());
    timeline
}

/// A 32-bit wait compares cyclically: a value more than 2^31 above the timeline's counts as one
/// below it, and the stream would go on at once. Such a wait is refused, naming the window; the
/// highest value within it holds the stream until it is reached.
#[test]
fn on_a_narrow_device_a_wait_beyond_the_32_bit_window_is_refused() {
    let test = "on_a_narrow_device_a_wait_beyond_the_32_bit_window_is_refused";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "playing an older device is a control of the software driver",
        );
    };
    // Alone in a process: the device's answer is process-wide.
    suite::alone_in_child!(on_a_narrow_device_a_wait_beyond_the_32_bit_window_is_refused);
    let context = context();
    let stream = new_stream(&context);
    let words = MappedWords::new(&context, 1);
    let reached = 5;
    let timeline = narrow_timeline(controls, &context, reached);
    let highest = reached + (1 << 31);
    let refused = timeline.enqueue_wait(&stream, highest + 1);
    if refused.is_ok() {
        words.write_in_stream(&stream, 0, 1);
        let_work_run();
    }
    assert_eq!(
        refused,
        Err(Error::OutsideNarrowWindow {
            value: highest + 1,
            reached
        }),
        "a wait 2^31 + 1 above the value was accepted; the work after it ran before any \
         signal: {}",
        words.get(0) == 1
    );
    timeline
        .enqueue_wait(&stream, highest)
        .expect("the highest wait within the window");
    words.write_in_stream(&stream, 0, 2);
    let_work_run();
    assert_eq!(words.get(0), 0, "ran before the value was reached");
    timeline.signal(highest - 1).expect("signal");
    let_work_run();
    assert_eq!(words.get(0), 0, "ran one below the value waited for");
    timeline.signal(highest).expect("signal");
    wait_until("the work after the wait", || words.get(0) == 2);
    stream.synchronize().expect("synchronize");
}

/// A wait for a value the timeline passed 2^31 or more ago compares, in 32 bits, as one above
/// it: it would hold the stream until the value wraps. It holds nothing, as a wait for a value
/// reached does on any device.
#[test]
fn on_a_narrow_device_a_wait_for_a_value_passed_long_ago_holds_nothing() {
    let test = "on_a_narrow_device_a_wait_for_a_value_passed_long_ago_holds_nothing";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "playing an older device is a control of the software driver",
        );
    };
    // Alone in a process: the device's answer is process-wide.
    suite::alone_in_child!(on_a_narrow_device_a_wait_for_a_value_passed_long_ago_holds_nothing);
    let context = context();
    let stream = new_stream(&context);
    let words = MappedWords::new(&context, 1);
    let timeline = narrow_timeline(controls, &context, 0);
    timeline.signal((1 << 31) + 10).expect("signal");
    timeline.enqueue_wait(&stream, 5).expect("wait enqueued");
    words.write_in_stream(&stream, 0, 1);
    wait_until("the work after a wait for a value long passed", || {
        words.get(0) == 1
    });
    stream.synchronize().expect("synchronize");
}

/// Two streams wait on a narrow timeline: the first for 10, held back by a gate while the host
/// raises the value to 2^31 - 1 past it (still within its window), the second for a value
/// 2^31 - 1 above that. No value releases both: one that releases the second is 2^31 or more
/// past the first. The last handle's drop must not raise the value past the first while its
/// stream has yet to pass its wait; once it did, the second is released too.
#[test]
fn on_a_narrow_device_the_last_handles_drop_strands_no_pending_wait() {
    let test = "on_a_narrow_device_the_last_handles_drop_strands_no_pending_wait";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "playing an older device is a control of the software driver",
        );
    };
    // Alone in a process: the device's answer is process-wide.
    suite::alone_in_child!(on_a_narrow_device_the_last_handles_drop_strands_no_pending_wait);
    let context = context();
    let (first, second) = (new_stream(&context), new_stream(&context));
    let words = MappedWords::new(&context, 2);
    let gate = Gate::new(&context);
    let timeline = narrow_timeline(controls, &context, 0);
    gate.hold(&first);
    timeline.enqueue_wait(&first, 10).expect("wait enqueued");
    words.write_in_stream(&first, 0, 1);
    let reached = 10 + (1 << 31) - 1;
    timeline.signal(reached).expect("signal");
    timeline
        .enqueue_wait(&second, reached + (1 << 31) - 1)
        .expect("wait enqueued");
    words.write_in_stream(&second, 1, 1);
    let_work_run();
    assert_eq!(words.get(1), 0, "the second stream passed its wait early");
    drop(timeline);
    gate.open();
    wait_until(
        "the first stream, whose wait the value had reached before the drop",
        || words.get(0) == 1,
    );
    wait_until("the second stream", || words.get(1) == 1);
    first.synchronize().expect("synchronize");
    second.synchronize().expect("synchronize");
}

/// One stream waits on a narrow timeline for the next value behind a gate, the host raises the
/// value past it, and the stream then waits 2^31 above that: no value releases both, so the last
/// handle's drop releases the first, then the second. Here a capture other code began takes a
/// later operation on the stream, with the write of its track's word: the points after both
/// waits are read no more, and nothing shows the first passed while the second holds the stream.
/// Both are released all the same.
#[test]
fn on_a_narrow_device_the_last_handles_drop_releases_waits_across_the_window_seen_passed_or_not() {
    let test = "on_a_narrow_device_the_last_handles_drop_releases_waits_across_the_window_seen_passed_or_not";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "playing an older device is a control of the software driver",
        );
    };
    // Alone in a process: the device's answer is process-wide.
    suite::alone_in_child!(
        on_a_narrow_device_the_last_handles_drop_releases_waits_across_the_window_seen_passed_or_not
    );
    let context = context();
    let stream = new_stream(&context);
    let words = MappedWords::new(&context, 1);
    let gate = Gate::new(&context);
    let timeline = narrow_timeline(controls, &context, 0);
    let other = Timeline::new(&context, 0).expect("timeline");
    gate.hold(&stream);
    timeline.enqueue_wait(&stream, 1).expect("wait enqueued");
    timeline.signal(2).expect("signal");
    timeline
        .enqueue_wait(&stream, 2 + (1 << 31))
        .expect("a wait 2^31 above the value is within the window");
    words.write_in_stream(&stream, 0, 1);
    controls.begin_capture_at_next_call(
        c"cuStreamBatchMemOp",
        &stream,
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
    );
    assert_eq!(
        other.enqueue_wait(&stream, 1),
        Err(Error::TimelineInCapture {
            status: CaptureState::Active
        })
    );
    suite::capture::end_capture(stream.as_raw()).expect("the capture ends in a graph");
    drop(timeline);
    gate.open();
    wait_until("the stream past both waits", || words.get(0) == 1);
    stream.synchronize().expect("synchronize");
}

#[test]
fn a_wait_for_a_value_already_reached_holds_nothing() {
    let context = context();
    let stream = new_stream(&context);
    let timeline = Timeline::new(&context, 5).expect("timeline");
    let words = MappedWords::new(&context, 1);
    timeline.enqueue_wait(&stream, 3).expect("wait enqueued");
    timeline.enqueue_wait(&stream, 5).expect("wait enqueued");
    words.write_in_stream(&stream, 0, 1);
    stream.synchronize().expect("synchronize");
    assert_eq!(words.get(0), 1);
}

#[test]
fn host_signals_never_lower_the_value_and_values_stop_at_the_maximum() {
    let context = context();
    let timeline = Timeline::new(&context, 3).expect("timeline");
    assert_eq!(timeline.value(), 3);
    timeline.signal(10).expect("signal");
    timeline.signal(4).expect("a lower signal is no error");
    assert_eq!(timeline.value(), 10, "lowered");
    let clone = timeline.clone();
    std::thread::scope(|scope| {
        for thread in 0..4u64 {
            let clone = &clone;
            scope.spawn(move || {
                for step in 0..1000 {
                    clone.signal(10 + thread * 1000 + step).expect("signal");
                }
            });
        }
    });
    assert_eq!(timeline.value(), 10 + 3 * 1000 + 999);
    timeline.signal(Timeline::MAX).expect("the maximum");
    assert_eq!(clone.value(), Timeline::MAX);
    assert!(matches!(
        timeline.signal(Timeline::MAX + 1),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        Timeline::new(&context, u64::MAX),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn a_stream_signal_completes_a_blocking_wait_and_a_future_once_the_stream_gets_there() {
    let context = context();
    let stream = new_stream(&context);
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let gate = Gate::new(&context);
    gate.hold(&stream);
    timeline
        .enqueue_signal(&stream, 4)
        .expect("signal enqueued");
    let woken = Arc::new(CountingWaker::default());
    let waker = Waker::from(Arc::clone(&woken));
    let mut reached = timeline.reached(4);
    assert!(poll_with(&mut reached, &waker).is_pending());
    assert_eq!(timeline.wait(1, Duration::from_millis(20)), Ok(false));
    assert_eq!(woken.0.load(Ordering::SeqCst), 0, "woken before the signal");
    assert_eq!(timeline.value(), 0, "signalled before the stream got there");
    gate.open();
    assert_eq!(timeline.wait(4, TIMEOUT), Ok(true));
    wait_until("the watcher to wake the future", || {
        woken.0.load(Ordering::SeqCst) > 0
    });
    assert_eq!(poll_with(&mut reached, &waker), Poll::Ready(Ok(())));
    stream.synchronize().expect("synchronize");
}

#[test]
fn a_stream_signal_must_be_above_the_value_and_every_signal_enqueued_before() {
    let context = context();
    let stream = new_stream(&context);
    let timeline = Timeline::new(&context, 2).expect("timeline");
    let refused = |value| {
        matches!(
            timeline.enqueue_signal(&stream, value),
            Err(Error::InvalidArgument { .. })
        )
    };
    assert!(refused(2), "not above the value");
    let gate = Gate::new(&context);
    gate.hold(&stream);
    timeline
        .enqueue_signal(&stream, 5)
        .expect("signal enqueued");
    assert!(refused(5), "not above the signal enqueued before");
    assert!(refused(3), "below the signal enqueued before");
    assert!(refused(Timeline::MAX + 1));
    timeline
        .enqueue_signal(&stream, 6)
        .expect("signal enqueued");
    gate.open();
    assert_eq!(timeline.wait(6, TIMEOUT), Ok(true));
    stream.synchronize().expect("synchronize");
    assert_eq!(timeline.value(), 6);
}

#[test]
fn a_stream_waits_on_another_streams_signal() {
    let context = context();
    let (producer, consumer) = (new_stream(&context), new_stream(&context));
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let words = MappedWords::new(&context, 1);
    let gate = Gate::new(&context);
    gate.hold(&producer);
    timeline
        .enqueue_signal(&producer, 1)
        .expect("signal enqueued");
    timeline.enqueue_wait(&consumer, 1).expect("wait enqueued");
    words.write_in_stream(&consumer, 0, 9);
    let_work_run();
    assert_eq!(
        words.get(0),
        0,
        "the consumer ran before the producer signalled"
    );
    gate.open();
    consumer.synchronize().expect("synchronize");
    assert_eq!(words.get(0), 9);
}

#[test]
fn many_threads_and_futures_each_complete_once_the_value_reaches_theirs() {
    const WAITERS: u64 = 8;
    let context = context();
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let runtime = runtime();
    let tasks: Vec<_> = (1..=WAITERS)
        .map(|value| {
            let reached = timeline.reached(value);
            let timeline = timeline.clone();
            runtime.spawn(async move {
                reached.await.expect("reached");
                timeline.value() >= value
            })
        })
        .collect();
    let seen = std::thread::scope(|scope| {
        let threads: Vec<_> = (1..=WAITERS)
            .map(|value| {
                let timeline = &timeline;
                scope.spawn(move || {
                    let reached = timeline.wait(value, TIMEOUT).expect("waits");
                    reached && timeline.value() >= value
                })
            })
            .collect();
        for value in 1..=WAITERS {
            std::thread::sleep(Duration::from_millis(2));
            timeline.signal(value).expect("signal");
        }
        threads
            .into_iter()
            .map(|thread| thread.join().expect("a waiting thread"))
            .collect::<Vec<_>>()
    });
    assert!(
        seen.iter().all(|&early| early),
        "a thread woke early: {seen:?}"
    );
    for task in tasks {
        let in_time = runtime.block_on(async { tokio::time::timeout(TIMEOUT, task).await });
        assert!(
            in_time.expect("completed").expect("the task"),
            "a future completed early"
        );
    }
}

#[test]
fn a_dropped_future_takes_its_registration_back() {
    let context = context();
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let woken = Arc::new(CountingWaker::default());
    let waker = Waker::from(Arc::clone(&woken));
    let mut reached = timeline.reached(1);
    assert!(poll_with(&mut reached, &waker).is_pending());
    drop(reached);
    timeline.signal(1).expect("signal");
    let_work_run();
    assert_eq!(
        woken.0.load(Ordering::SeqCst),
        0,
        "a dropped future was woken"
    );
}

#[test]
fn dropping_the_last_handle_releases_the_streams_waiting_on_it_and_frees_it_after() {
    // Alone in a process: the counts are process-wide.
    suite::alone_in_child!(
        dropping_the_last_handle_releases_the_streams_waiting_on_it_and_frees_it_after
    );
    let context = context();
    let (first, second) = (new_stream(&context), new_stream(&context));
    let words = MappedWords::new(&context, 2);
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let gate = Gate::new(&context);
    gate.hold(&second);
    timeline.enqueue_wait(&first, 5).expect("wait enqueued");
    words.write_in_stream(&first, 0, 1);
    // The second stream reaches its wait only after the drop.
    timeline
        .enqueue_wait(&second, Timeline::MAX)
        .expect("wait enqueued");
    words.write_in_stream(&second, 1, 1);
    assert_eq!(metrics().timelines().words, 1);
    drop(timeline);
    wait_until("the first stream to be released", || words.get(0) == 1);
    first.synchronize().expect("synchronize");
    assert_eq!(
        metrics().timelines().words,
        1,
        "freed while a stream may read it"
    );
    gate.open();
    wait_until("the second stream to be released", || words.get(1) == 1);
    second.synchronize().expect("synchronize");
    reclaim();
    assert_eq!(
        metrics().timelines().words,
        0,
        "not freed once no stream reads it"
    );
}

#[test]
fn timelines_made_and_dropped_one_after_another_reuse_one_word_of_pinned_memory() {
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            "timelines_made_and_dropped_one_after_another_reuse_one_word_of_pinned_memory",
            "counting host allocations needs the software driver",
        );
    };
    // Alone in a process: the count of host allocations is process-wide.
    suite::alone_in_child!(
        timelines_made_and_dropped_one_after_another_reuse_one_word_of_pinned_memory
    );
    let context = context();
    let stream = new_stream(&context);
    let allocations = || controls.live_objects().host_allocations;
    let first = Timeline::new(&context, 0).expect("timeline");
    let before = allocations();
    drop(first);
    for round in 1..=1_000 {
        let timeline = Timeline::new(&context, round).expect("timeline");
        assert_eq!(timeline.value(), round, "a reused word holds its new value");
        timeline
            .enqueue_wait(&stream, round)
            .expect("wait enqueued");
        timeline
            .enqueue_signal(&stream, round + 1)
            .expect("signal enqueued");
        drop(timeline);
        stream.synchronize().expect("synchronize");
    }
    reclaim();
    assert_eq!(
        allocations(),
        before,
        "a timeline allocated or freed memory"
    );
    assert_eq!(metrics().timelines().words, 0);
}

#[test]
fn a_timelines_last_handle_dropped_during_a_global_capture_leaves_the_capture_intact() {
    // Alone in a process: any thread's allocation would invalidate a global-mode capture.
    suite::alone_in_child!(
        a_timelines_last_handle_dropped_during_a_global_capture_leaves_the_capture_intact
    );
    let context = context();
    let captured = new_stream(&context);
    let timeline = Timeline::new(&context, 0).expect("timeline");
    // Its word is given back, not freed: a free would invalidate the other thread's capture.
    suite::capture::during_a_global_capture(&captured, || drop(timeline));
}

#[test]
fn a_timeline_holding_its_contexts_last_value_frees_nothing_during_a_global_capture() {
    let test = "a_timeline_holding_its_contexts_last_value_frees_nothing_during_a_global_capture";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "counting host allocations needs the software driver");
    };
    // Alone in a process: the count of host allocations is process-wide, and any thread's
    // allocation would invalidate a global-mode capture.
    suite::alone_in_child!(
        a_timeline_holding_its_contexts_last_value_frees_nothing_during_a_global_capture
    );
    let primary = context();
    let captured = new_stream(&primary);
    let allocations = || controls.live_objects().host_allocations;
    let before = allocations();
    let device = cuda_host::Device::get(primary.driver(), 0).expect("device");
    let fresh = controls.fresh_context(&device);
    let timeline = Timeline::new(&fresh, 0).expect("timeline");
    // The timeline now holds the context's last value: its drop lets the context go.
    drop(fresh);
    assert_eq!(allocations(), before + 1, "a page of words");
    let during = suite::capture::during_a_global_capture(&captured, || {
        drop(timeline);
        allocations()
    });
    assert_eq!(
        during,
        before + 1,
        "the context's pages were freed during the capture"
    );
    wait_until("the context's pages to be freed after the capture", || {
        reclaim();
        allocations() == before
    });
}

#[test]
fn a_stream_signal_landing_after_the_drop_does_not_hold_a_wait() {
    let context = context();
    let (signaller, waiter) = (new_stream(&context), new_stream(&context));
    let words = MappedWords::new(&context, 1);
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let (first, second) = (Gate::new(&context), Gate::new(&context));
    first.hold(&signaller);
    timeline
        .enqueue_signal(&signaller, 1)
        .expect("signal enqueued");
    second.hold(&waiter);
    timeline.enqueue_wait(&waiter, 2).expect("wait enqueued");
    words.write_in_stream(&waiter, 0, 1);
    drop(timeline);
    // The signal of 1 lands after the drop raised the value; the wait for 2 comes after it.
    first.open();
    signaller.synchronize().expect("synchronize");
    second.open();
    wait_until("the waiting stream to be released", || words.get(0) == 1);
    waiter.synchronize().expect("synchronize");
}

#[test]
fn host_waits_behind_a_failed_context_complete_with_an_error() {
    // Alone in a process: the failure stays with it.
    suite::alone_in_child!(host_waits_behind_a_failed_context_complete_with_an_error);
    let context = context();
    let stream = new_stream(&context);
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let gate = Gate::new(&context);
    let fault = suite::kernels::Fault::load(context.driver());
    gate.hold(&stream);
    fault.launch(&stream);
    timeline
        .enqueue_signal(&stream, 1)
        .expect("signal enqueued");
    let runtime = runtime();
    let task = runtime.spawn(timeline.reached(1));
    let blocked = {
        let timeline = timeline.clone();
        std::thread::spawn(move || timeline.wait(1, TIMEOUT))
    };
    gate.open();
    // Nobody else calls cuda-host: the watcher's look at the stream's point sees the failure.
    let outcome = runtime.block_on(async { tokio::time::timeout(TIMEOUT, task).await });
    assert_eq!(
        outcome.expect("completed").expect("the task"),
        Err(Error::ContextFailed)
    );
    assert_eq!(
        blocked.join().expect("the waiting thread"),
        Err(Error::ContextFailed)
    );
    assert_eq!(timeline.wait(1, TIMEOUT), Err(Error::ContextFailed));
    assert_eq!(timeline.value(), 0);
}

#[test]
fn a_wait_or_signal_on_a_capturing_stream_is_refused_and_the_capture_still_ends_in_a_graph() {
    // Alone in a process: any thread's allocation would invalidate a global-mode capture.
    suite::alone_in_child!(
        a_wait_or_signal_on_a_capturing_stream_is_refused_and_the_capture_still_ends_in_a_graph
    );
    let context = context();
    let stream = new_stream(&context);
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let capture = suite::capture::Capture::begin(
        stream.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
    );
    let refused = Err(Error::TimelineInCapture {
        status: CaptureState::Active,
    });
    assert_eq!(timeline.enqueue_wait(&stream, 1), refused);
    assert_eq!(timeline.enqueue_signal(&stream, 1), refused);
    assert_eq!(
        suite::capture::is_capturing(stream.as_raw()),
        (
            CUresult::CUDA_SUCCESS,
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
        )
    );
    let graph = capture.end().expect("the capture is still valid");
    let exec = graph.instantiate();
    exec.launch(stream.as_raw());
    stream.synchronize().expect("the graph ran");
    assert_eq!(timeline.value(), 0);
}

#[test]
fn an_operation_a_capture_other_code_began_took_is_refused_and_its_word_kept() {
    let test = "an_operation_a_capture_other_code_began_took_is_refused_and_its_word_kept";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "a capture begun at a given call is a control of the software driver",
        );
    };
    // Alone in a process: the counts are process-wide, and any thread's allocation would
    // invalidate a global-mode capture.
    suite::alone_in_child!(
        an_operation_a_capture_other_code_began_took_is_refused_and_its_word_kept
    );
    let context = context();
    let stream = new_stream(&context);
    // The operation and its point are one batch; once a capture took a write of the stream's
    // track's word, the track offers none, and the point is an event's record after the batch.
    // A capture that takes that record leaves the operation on the stream, outside the graph: its
    // word is held, not kept, until the stream passed it.
    for (kept, words, entry) in [
        (1, 1, c"cuStreamBatchMemOp"),
        (2, 2, c"cuStreamBatchMemOp"),
        (2, 3, c"cuEventRecord"),
    ] {
        let timeline = Timeline::new(&context, 0).expect("timeline");
        controls.begin_capture_at_next_call(
            entry,
            &stream,
            CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
        );
        let taken = if kept != 2 {
            timeline.enqueue_wait(&stream, 1)
        } else {
            timeline.enqueue_signal(&stream, 1)
        };
        assert_eq!(
            taken,
            Err(Error::TimelineInCapture {
                status: CaptureState::Active
            }),
            "{entry:?}"
        );
        let graph =
            suite::capture::end_capture(stream.as_raw()).expect("the capture was not invalidated");
        // The graph reads or writes the word whenever it runs: the word outlives the timeline.
        drop(timeline);
        reclaim();
        assert_eq!(metrics().timelines().kept, kept, "{entry:?}");
        assert_eq!(metrics().timelines().words, words, "{entry:?}");
        drop(graph);
    }
    stream.synchronize().expect("synchronize");
    assert_eq!(
        (metrics().timelines().kept, metrics().timelines().words),
        (2, 2),
        "the word of the operation whose point a capture took is held once the stream passed it"
    );
}

#[test]
fn a_timeline_is_refused_with_a_thread_start_error_when_the_watcher_cannot_start() {
    // Alone in a process where every thread spawn fails: no stack that large can be mapped.
    suite::alone_in_child!(
        a_timeline_is_refused_with_a_thread_start_error_when_the_watcher_cannot_start,
        &[("RUST_MIN_STACK", "1125899906842624")]
    );
    assert!(
        std::thread::Builder::new().spawn(|| {}).is_err(),
        "threads start in this process"
    );
    let context = context();
    match Timeline::new(&context, 0) {
        Err(Error::ThreadStart { thread, .. }) => assert_eq!(thread, "cuda-host-watch"),
        Err(other) => panic!("refused with {other}"),
        Ok(_) => panic!("a timeline with no watcher thread to wake its waiters was made"),
    }
}

#[test]
fn a_stream_of_another_context_waits_on_the_timeline_and_signals_it() {
    let test = "a_stream_of_another_context_waits_on_the_timeline_and_signals_it";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "fresh contexts are a control of the software driver");
    };
    let context = context();
    let device = cuda_host::Device::get(context.driver(), 0).expect("device");
    let other = controls.fresh_context(&device);
    let (stream, elsewhere) = (new_stream(&context), new_stream(&other));
    let (timeline, done) = (
        Timeline::new(&context, 0).expect("timeline"),
        Timeline::new(&context, 0).expect("timeline"),
    );
    let words = suite::MappedWords::new(&other, 1);
    // The other context's stream waits for the host, writes a word, and signals `done`, which
    // this context's stream waits for.
    timeline
        .enqueue_wait(&elsewhere, 1)
        .expect("a wait in another context");
    words.write_in_stream(&elsewhere, 0, 7);
    done.enqueue_signal(&elsewhere, 1)
        .expect("a signal in another context");
    done.enqueue_wait(&stream, 1)
        .expect("a wait in its own context");
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        words.get(0),
        0,
        "the other context's stream passed its wait early"
    );
    assert!(
        !stream.is_complete().expect("query"),
        "went on before the signal"
    );
    timeline.signal(1).expect("signal");
    assert!(
        done.wait(1, suite::TIMEOUT).expect("wait"),
        "never signalled"
    );
    stream.synchronize().expect("synchronize");
    assert_eq!(words.get(0), 7);
}

#[test]
fn host_waits_take_their_time_from_the_signal_not_from_the_timeout() {
    let context = context();
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let signaller = {
        let timeline = timeline.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            timeline.signal(1).expect("signal");
        })
    };
    let start = Instant::now();
    assert_eq!(timeline.wait(1, TIMEOUT), Ok(true));
    assert!(start.elapsed() < TIMEOUT / 2, "woken only by the timeout");
    signaller.join().expect("the signalling thread");
}

/// Panics when woken.
struct PanickingWaker;

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        panic!("deliberate panic of a waker");
    }
}

#[test]
fn a_panicking_waker_is_caught_by_the_signal_and_the_watcher_and_the_others_are_woken() {
    suite::quiet::quiet_deliberate_panics();
    let context = context();
    let stream = new_stream(&context);
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let panicking = Waker::from(Arc::new(PanickingWaker));
    let woken = Arc::new(CountingWaker::default());
    let counting = Waker::from(Arc::clone(&woken));
    // Woken by the host's signal on this thread, or by the watcher if its look at the word came
    // first: either way the panic is caught and the other waker woken, once.
    let (mut first, mut second) = (timeline.reached(1), timeline.reached(1));
    assert!(poll_with(&mut first, &panicking).is_pending());
    assert!(poll_with(&mut second, &counting).is_pending());
    timeline.signal(1).expect("a signal never panics");
    wait_until("the other waker to be woken", || {
        woken.0.load(Ordering::SeqCst) == 1
    });
    assert_eq!(poll_with(&mut second, &counting), Poll::Ready(Ok(())));
    // Woken by the watcher, after a stream's signal.
    let gate = Gate::new(&context);
    gate.hold(&stream);
    timeline
        .enqueue_signal(&stream, 2)
        .expect("signal enqueued");
    let (mut third, mut fourth) = (timeline.reached(2), timeline.reached(2));
    assert!(poll_with(&mut third, &panicking).is_pending());
    assert!(poll_with(&mut fourth, &counting).is_pending());
    gate.open();
    wait_until("the watcher to wake the other waker", || {
        woken.0.load(Ordering::SeqCst) == 2
    });
    assert_eq!(poll_with(&mut fourth, &counting), Poll::Ready(Ok(())));
    stream.synchronize().expect("synchronize");
}

#[test]
fn a_timeline_whose_context_failed_frees_its_word_once_the_failure_is_seen() {
    // Alone in a process: the failure stays with it, and the counts are process-wide.
    suite::alone_in_child!(a_timeline_whose_context_failed_frees_its_word_once_the_failure_is_seen);
    let context = context();
    let stream = new_stream(&context);
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let fault = suite::kernels::Fault::load(context.driver());
    let gate = Gate::new(&context);
    gate.hold(&stream);
    fault.launch(&stream);
    timeline.enqueue_wait(&stream, 1).expect("wait enqueued");
    timeline
        .enqueue_signal(&stream, 2)
        .expect("signal enqueued");
    drop(timeline);
    gate.open();
    assert!(stream.synchronize().is_err(), "the fault is reported");
    reclaim();
    assert_eq!(
        metrics().timelines().words,
        0,
        "kept after the failure was seen"
    );
}

mod panicking_logger {
    //! A logger that panics, in a child process of its own (a logger is set once per process).

    use super::*;

    #[test]
    fn a_timeline_dropped_while_streams_wait_logs_to_a_panicking_logger_and_releases_them() {
        suite::alone_in_child!(
            a_timeline_dropped_while_streams_wait_logs_to_a_panicking_logger_and_releases_them
        );
        suite::panicking_logger::install();
        let context = context();
        let (signaller, waiter) = (new_stream(&context), new_stream(&context));
        let words = MappedWords::new(&context, 1);
        let timeline = Timeline::new(&context, 0).expect("timeline");
        let (first, second) = (Gate::new(&context), Gate::new(&context));
        first.hold(&signaller);
        timeline
            .enqueue_signal(&signaller, 1)
            .expect("signal enqueued");
        second.hold(&waiter);
        timeline.enqueue_wait(&waiter, 2).expect("wait enqueued");
        words.write_in_stream(&waiter, 0, 1);
        suite::panicking_logger::arm(true);
        // The drop warns on this thread; the watcher warns when it raises the value again.
        drop(timeline);
        assert!(
            suite::panicking_logger::panics() > 0,
            "the drop logged nothing"
        );
        let before = suite::panicking_logger::panics();
        first.open();
        wait_until("the watcher to raise the value again and log it", || {
            suite::panicking_logger::panics() > before
        });
        second.open();
        wait_until("the waiting stream to be released", || words.get(0) == 1);
        suite::panicking_logger::arm(false);
        waiter.synchronize().expect("synchronize");
        signaller.synchronize().expect("synchronize");
    }
}

#[test]
fn a_synchronize_of_a_stream_waiting_on_a_timeline_returns_only_once_it_is_signalled() {
    // The hazard the documentation names: a thread that synchronizes before it signals never
    // returns. Here another thread signals.
    let context = context();
    let stream = new_stream(&context);
    let timeline = Timeline::new(&context, 0).expect("timeline");
    timeline.enqueue_wait(&stream, 1).expect("wait enqueued");
    let returned = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            stream.synchronize().expect("synchronize");
            returned.store(true, Ordering::SeqCst);
        });
        let_work_run();
        assert!(
            !returned.load(Ordering::SeqCst),
            "the synchronize returned while the stream waited"
        );
        timeline.signal(1).expect("signal");
        wait_until("the synchronize to return", || {
            returned.load(Ordering::SeqCst)
        });
    });
}

#[test]
fn a_wait_left_on_a_stream_without_its_stream_point_is_released_when_the_last_handle_goes() {
    let test =
        "a_wait_left_on_a_stream_without_its_stream_point_is_released_when_the_last_handle_goes";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "a failed event record and a capture begun at it are controls of the software driver",
        );
    };
    // Alone in a process: a global-mode capture of other code refuses any thread's allocation.
    suite::alone_in_child!(
        a_wait_left_on_a_stream_without_its_stream_point_is_released_when_the_last_handle_goes
    );
    let context = context();
    let stream = new_stream(&context);
    let words = MappedWords::new(&context, 2);
    // The track cannot make its word's probe, so it offers no word: the point after the wait is
    // an event's record, which fails: the wait is on the stream, and enqueued.
    let timeline = Timeline::new(&context, 0).expect("timeline");
    controls.fail_next_calls(c"cuEventCreate", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    controls.fail_next_calls(c"cuEventRecord", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    timeline
        .enqueue_wait(&stream, 1)
        .expect("the wait is enqueued without its point");
    words.write_in_stream(&stream, 0, 1);
    drop(timeline);
    wait_until("the stream to be released by the drop", || {
        words.get(0) == 1
    });
    stream.synchronize().expect("synchronize");
    // Other code begins a capture after the wait, before its point: the wait is on the stream,
    // outside the capture, and the operation refused.
    let timeline = Timeline::new(&context, 0).expect("timeline");
    controls.fail_next_calls(c"cuEventCreate", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    controls.begin_capture_at_next_call(
        c"cuEventRecord",
        &stream,
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
    );
    assert_eq!(
        timeline.enqueue_wait(&stream, 1),
        Err(Error::TimelineInCapture {
            status: CaptureState::Active
        })
    );
    drop(suite::capture::end_capture(stream.as_raw()).expect("the capture was not invalidated"));
    words.write_in_stream(&stream, 1, 1);
    drop(timeline);
    wait_until("the stream to be released by the drop", || {
        words.get(1) == 1
    });
    stream.synchronize().expect("synchronize");
}

#[test]
fn dropping_one_of_two_values_of_a_primary_context_waits_for_none_of_the_others_streams() {
    let context = context();
    let stream = new_stream(&context);
    let timeline = Timeline::new(&context, 0).expect("timeline");
    timeline.enqueue_wait(&stream, 1).expect("wait enqueued");
    // Another value of the same primary context, as a second library would retain it, with
    // pinned memory of its own (a timeline's word).
    let other = cuda_host::Device::get(context.driver(), 0)
        .and_then(|device| device.primary_context())
        .expect("the primary context again");
    assert_eq!(other.as_raw(), context.as_raw());
    drop(Timeline::new(&other, 0).expect("timeline"));
    let dropped = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            drop(other);
            reclaim();
            dropped.store(true, Ordering::SeqCst);
        });
        let deadline = Instant::now() + TIMEOUT / 6;
        while !dropped.load(Ordering::SeqCst) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let returned = dropped.load(Ordering::SeqCst);
        // Signalled in any case, so that a drop that waits for the stream returns.
        timeline.signal(1).expect("signal");
        assert!(
            returned,
            "the drop waited for a stream of the other value, which waits for this thread"
        );
    });
    stream.synchronize().expect("synchronize");
}

#[test]
fn a_fresh_word_page_whose_mapping_fails_is_not_freed_while_a_stream_of_its_context_waits() {
    let test =
        "a_fresh_word_page_whose_mapping_fails_is_not_freed_while_a_stream_of_its_context_waits";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "failing a mapping is a control of the software driver",
        );
    };
    let primary = context();
    let device = cuda_host::Device::get(primary.driver(), 0).expect("device");
    // A context of its own, with no page yet: the timeline's word needs a fresh one.
    let fresh = controls.fresh_context(&device);
    let stream = new_stream(&fresh);
    // Of the primary context (portable memory, which the fresh context's stream reads too): the
    // suite's words live in the first context that asks for them, and a fresh context takes its
    // memory with it.
    let gate = Gate::new(&primary);
    // A stream of the context busy until the host lets it go: as one whose host function waits
    // for the thread that makes the timeline. A free of pinned memory waits for it (`pinned`'s
    // documentation: pages are freed only at the context's release for that reason).
    gate.hold(&stream);
    let (answered, answer) = std::sync::mpsc::channel();
    let maker = std::thread::spawn({
        let fresh = fresh.clone();
        move || {
            controls.fail_next_calls(
                c"cuMemHostGetDevicePointer_v2",
                1,
                CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            );
            let made = Timeline::new(&fresh, 0).map(drop);
            answered.send(made).expect("the test waits");
        }
    });
    // Long enough for the call alone under valgrind; before the gate opens, so a call that waits
    // for the stream cannot answer.
    let made = answer.recv_timeout(Duration::from_secs(10));
    gate.open();
    maker.join().expect("the maker");
    stream.synchronize().expect("synchronize");
    let made = made.expect(
        "Timeline::new answered its mapping's failure only once the context's stream was let go: \
         the page was freed at once, waiting for the device",
    );
    assert!(made.is_err(), "the mapping failed: {made:?}");
}

#[test]
fn a_streams_operations_and_their_points_are_one_call_each_and_hold_the_word_once() {
    let test = "a_streams_operations_and_their_points_are_one_call_each_and_hold_the_word_once";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "call counts are a control of the software driver");
    };
    // Alone in a process: the call counts and the words are process-wide.
    suite::alone_in_child!(
        a_streams_operations_and_their_points_are_one_call_each_and_hold_the_word_once
    );
    let context = context();
    let stream = new_stream(&context);
    let words = MappedWords::new(&context, 1);
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let gate = Gate::new(&context);
    gate.hold(&stream);
    let (records, batches) = (
        controls.call_count(c"cuEventRecord"),
        controls.call_count(c"cuStreamBatchMemOp"),
    );
    const ROUNDS: u64 = 100;
    for value in 1..=ROUNDS {
        timeline
            .enqueue_signal(&stream, value)
            .expect("signal enqueued");
        timeline
            .enqueue_wait(&stream, value)
            .expect("wait enqueued");
    }
    words.write_in_stream(&stream, 0, 1);
    // One hold of the word, lasting until the stream passed the last operation.
    assert_eq!(cuda_host::metrics().stream_points().held, 1);
    gate.open();
    assert_eq!(
        controls.call_count(c"cuEventRecord"),
        records,
        "no event's record"
    );
    assert_eq!(
        controls.call_count(c"cuStreamBatchMemOp") - batches,
        2 * ROUNDS,
        "one batch an operation"
    );
    wait_until("the stream to pass its operations", || words.get(0) == 1);
    assert_eq!(timeline.value(), ROUNDS);
    drop(timeline);
    // The word goes once a look saw the stream pass its last operation on it: the drains look.
    wait_until("the word to be freed", || {
        reclaim();
        metrics().timelines().words == 0
    });
}

/// A context value per request (as a library that retains the primary context per call makes
/// them), over a context that outlives them all: each request makes a timeline and signals it
/// from a stream of its value, whose track takes a word of the context's pinned pages for its
/// points. Once the stream passed its signal and the value went, that word goes back to the
/// pages, for the next value's timeline or track: the pages do not grow with the values.
#[test]
fn context_values_made_per_request_give_their_streams_point_words_back() {
    let test = "context_values_made_per_request_give_their_streams_point_words_back";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "counting host allocations needs the software driver");
    };
    // Alone in a process: the count of host allocations is process-wide.
    suite::alone_in_child!(context_values_made_per_request_give_their_streams_point_words_back);
    let owner = context();
    let allocations = || controls.live_objects().host_allocations;
    let request = |round: usize| {
        let gone = suite::Tally::new();
        // SAFETY: the suite's context stays retained for the life of the process.
        let value =
            unsafe { Context::borrow_raw_with_owner(owner.driver(), owner.as_raw(), gone.probe()) }
                .expect("a context value");
        let stream = new_stream(&value);
        let timeline = Timeline::new(&value, 0).expect("timeline");
        timeline
            .enqueue_signal(&stream, 1)
            .expect("signal enqueued");
        stream.synchronize().expect("synchronize");
        drop((timeline, stream, value));
        gone.reclaim_until_dropped(1, &format!("the context value of request {round}"));
    };
    request(0);
    let before = allocations();
    // A page holds 512 words: more requests than that would each leave one behind.
    for round in 1..=600 {
        request(round);
    }
    assert_eq!(
        allocations(),
        before,
        "the context's pinned pages grew with context values that went"
    );
    assert_eq!(metrics().timelines().words, 0);
}

/// A timeline that outlives many context values, each running an operation on it from a stream
/// of its own, notes each stream as perhaps still reading its word; once the stream passed the
/// operation and its value went, nothing is left of it in the timeline.
#[test]
fn a_long_lived_timeline_forgets_the_streams_of_context_values_that_went() {
    // Alone in a process: the counts are process-wide.
    suite::alone_in_child!(a_long_lived_timeline_forgets_the_streams_of_context_values_that_went);
    let owner = context();
    let timeline = Timeline::new(&owner, 0).expect("timeline");
    const VALUES: u64 = 200;
    for round in 1..=VALUES {
        let gone = suite::Tally::new();
        // SAFETY: the suite's context stays retained for the life of the process.
        let value =
            unsafe { Context::borrow_raw_with_owner(owner.driver(), owner.as_raw(), gone.probe()) }
                .expect("a context value");
        let stream = new_stream(&value);
        timeline
            .enqueue_signal(&stream, round)
            .expect("signal enqueued");
        stream.synchronize().expect("synchronize");
        drop((stream, value));
        gone.reclaim_until_dropped(1, &format!("context value {round}"));
    }
    let noted = metrics().timelines().streams;
    assert!(
        noted <= 1,
        "the timeline still notes {noted} streams of {VALUES} context values that went"
    );
    assert_eq!(timeline.value(), VALUES);
}

/// A stream signal whose stream point could not be marked (the track offers no word, and the
/// event's record fails), behind a gate, and a wait likewise on another stream: the last
/// handle's drop raises the value, and the signal, landing after it, lowers it again under the
/// wait. The watcher must raise it again, as it does after a signal whose point was marked.
#[test]
fn a_signal_left_without_its_stream_point_landing_after_the_drop_does_not_hold_a_wait() {
    let test = "a_signal_left_without_its_stream_point_landing_after_the_drop_does_not_hold_a_wait";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "a failed event record is a control of the software driver",
        );
    };
    // Alone in a process: the counts are process-wide.
    suite::alone_in_child!(
        a_signal_left_without_its_stream_point_landing_after_the_drop_does_not_hold_a_wait
    );
    let context = context();
    let (signaller, waiter) = (new_stream(&context), new_stream(&context));
    let words = MappedWords::new(&context, 1);
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let (first, second) = (Gate::new(&context), Gate::new(&context));
    // Each stream's track cannot make its word's probe, so it offers no word: the point after
    // the operation is an event's record, which fails.
    let fail_the_point = || {
        controls.fail_next_calls(c"cuEventCreate", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        controls.fail_next_calls(c"cuEventRecord", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    };
    first.hold(&signaller);
    fail_the_point();
    timeline
        .enqueue_signal(&signaller, 1)
        .expect("the signal is enqueued without its point");
    second.hold(&waiter);
    fail_the_point();
    timeline
        .enqueue_wait(&waiter, 2)
        .expect("the wait is enqueued without its point");
    words.write_in_stream(&waiter, 0, 1);
    drop(timeline);
    // The signal of 1 lands after the drop raised the value; the wait for 2 comes after it.
    first.open();
    signaller.synchronize().expect("synchronize");
    second.open();
    wait_until("the waiting stream to be released", || words.get(0) == 1);
    waiter.synchronize().expect("synchronize");
    wait_until("the word to be let go once both streams passed", || {
        reclaim();
        metrics().timelines().words == 0
    });
}

/// A timeline's signal on a thread's per-thread stream, the point after it not marked (the
/// track offers no word and the event's record fails), and the thread exits without marking
/// another point there or synchronizing it; the `Stream` value goes to another thread, whose
/// drop of it names that thread's own per-thread stream. Only the exited thread could name its
/// stream, so nothing else can show the signal passed: it marks a point as it exits, and the
/// word is let go once the stream passed it, rather than held with a value of the context for
/// the life of the process.
#[test]
fn a_point_nothing_records_on_a_per_thread_stream_passes_once_its_thread_exited() {
    let test = "a_point_nothing_records_on_a_per_thread_stream_passes_once_its_thread_exited";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "a failed event record is a control of the software driver",
        );
    };
    // Alone in a process: the counts are process-wide.
    suite::alone_in_child!(
        a_point_nothing_records_on_a_per_thread_stream_passes_once_its_thread_exited
    );
    let context = context();
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let stream = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let stream = Stream::per_thread(&context);
                controls.fail_next_calls(c"cuEventCreate", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
                controls.fail_next_calls(c"cuEventRecord", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
                timeline
                    .enqueue_signal(&stream, 1)
                    .expect("the signal is enqueued without its point");
                stream
            })
            .join()
            .expect("the thread ran")
    });
    drop(stream);
    drop(timeline);
    wait_until(
        "the word to be let go once the stream passed the signal",
        || {
            reclaim();
            metrics().timelines().words == 0
        },
    );
}

/// What a thread marks as it exits (a point after one nothing records on its per-thread stream,
/// `a_point_nothing_records_on_a_per_thread_stream_passes_once_its_thread_exited`) rests on the
/// driver: the thread's per-thread stream still takes a record from the thread's thread-local
/// destructors, and orders it after the work enqueued there before. Shown with an event
/// recorded from such a destructor, the stream still busy with a host function.
#[test]
fn a_threads_per_thread_stream_still_takes_work_from_its_thread_local_destructors() {
    struct RecordAtExit {
        context: Context,
        event: Arc<Event>,
        recorded: Arc<Mutex<Option<Result<(), Error>>>>,
    }
    impl Drop for RecordAtExit {
        fn drop(&mut self) {
            let recorded = self.event.record(&Stream::per_thread(&self.context));
            *self.recorded.lock().unwrap() = Some(recorded);
        }
    }
    thread_local! {
        static AT_EXIT: std::cell::RefCell<Option<RecordAtExit>> =
            const { std::cell::RefCell::new(None) };
    }
    let context = context();
    let event = Arc::new(Event::new(&context, EventFlags::DisableTiming).expect("event"));
    let recorded = Arc::new(Mutex::new(None));
    let ran = Arc::new(AtomicUsize::new(0));
    std::thread::scope(|scope| {
        // Joined: the scope's own end waits for the closure, not for the thread-local
        // destructors after it.
        let worker = scope.spawn(|| {
            let stream = Stream::per_thread(&context);
            let ran = Arc::clone(&ran);
            host_launch(&stream, move || {
                std::thread::sleep(Duration::from_millis(50));
                ran.fetch_add(1, Ordering::SeqCst);
            })
            .expect("launched");
            // Registered after the thread's first driver calls, as cuda-host's note is.
            AT_EXIT.with(|at_exit| {
                *at_exit.borrow_mut() = Some(RecordAtExit {
                    context: context.clone(),
                    event: Arc::clone(&event),
                    recorded: Arc::clone(&recorded),
                })
            });
        });
        worker.join().expect("the thread ran");
    });
    let recorded = recorded.lock().unwrap().take();
    assert!(
        matches!(recorded, Some(Ok(()))),
        "the record from the exiting thread's destructor: {recorded:?}"
    );
    event.synchronize().expect("the event completes");
    assert_eq!(
        ran.load(Ordering::SeqCst),
        1,
        "the event completed before the host function enqueued before it ran"
    );
}

/// Other code begins capturing a stream just after cuda-host's batch put a narrow wait on it,
/// before cuda-host asks again whether the stream captures (the window `enqueue.rs` names: "an
/// operation that a capture other code began in between took is refused ... and its word is
/// kept"). The capture did not take the wait: it is live on the stream, which a gate holds.
/// cuda-host cannot tell, refuses it, keeps the word, and notes no wait. The stream then waits
/// 2^31 above the value (within the window), and the last handle goes.
///
/// `Timeline` promises "Never leaves a stream waiting", and `Shared`'s drop says "A kept word
/// may be read by an operation no look sees passed (a graph's, or one no point could follow at
/// all): released too"; `docs/RELIABILITY.md`: "the drop raises the value at most 2^31 − 1 past
/// a wait a stream may have yet to pass". The turns of `raise_abandoned` take only the noted
/// waits: the value goes to the second wait's window, 2^31 + 1 past the first, which then holds
/// the stream for ever. (On a wide timeline the release to `MAX` frees both.)
#[test]
fn on_a_narrow_device_a_wait_refused_after_it_reached_the_stream_is_not_stranded_by_the_drop() {
    let test =
        "on_a_narrow_device_a_wait_refused_after_it_reached_the_stream_is_not_stranded_by_the_drop";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "playing an older device and captures at a call are controls of the software driver",
        );
    };
    suite::alone_in_child!(
        on_a_narrow_device_a_wait_refused_after_it_reached_the_stream_is_not_stranded_by_the_drop
    );
    let context = context();
    let stream = new_stream(&context);
    let words = MappedWords::new(&context, 1);
    let gate = Gate::new(&context);
    let timeline = narrow_timeline(controls, &context, 0);
    gate.hold(&stream);
    refuse_a_wait_after_it_reached(controls, &timeline, &stream, 1);
    timeline.signal(2).expect("signal");
    timeline
        .enqueue_wait(&stream, 2 + (1 << 31))
        .expect("a wait 2^31 above the value is within the window");
    words.write_in_stream(&stream, 0, 1);
    drop(timeline);
    gate.open();
    let passed = suite::wait::holds_within(Duration::from_secs(10), || words.get(0) == 1);
    if !passed {
        // The stream waits for ever: its drop, and the gate's, would wait with it.
        std::mem::forget((stream, gate, words));
        panic!(
            "the stream is still held 10 s after the last handle went: the wait for 1 that \
             reached the stream before the capture began was stranded when the value was raised \
             to 2 + 2^31 for the noted wait"
        );
    }
}

/// Enqueues a wait for `value` on `stream` and has other code begin capturing the stream right
/// after the wait reached it, at cuda-host's next question (the batch is held back meanwhile):
/// the wait is refused as the capture's, though the stream has it. The capture is ended.
fn refuse_a_wait_after_it_reached(
    controls: &suite::software::Controls,
    timeline: &Timeline,
    stream: &Stream,
    value: u64,
) {
    controls.delay_next_calls(c"cuStreamBatchMemOp", 1, Duration::from_millis(50));
    let refused = std::thread::scope(|scope| {
        scope.spawn(|| {
            // The delay is taken as the batch's call enters: it is under way.
            wait_until("the batch to be held back", || {
                controls.armed_delays(c"cuStreamBatchMemOp") == 0
            });
            controls.begin_capture_at_next_call(
                c"cuStreamIsCapturing",
                stream,
                cuda_host_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            );
        });
        timeline.enqueue_wait(stream, value)
    });
    assert!(
        matches!(refused, Err(cuda_host::Error::TimelineInCapture { .. })),
        "the wait is refused as taken by the capture: {refused:?}"
    );
    let graph = suite::capture::end_capture(stream.as_raw());
    assert!(graph.is_ok(), "the capture ends: {graph:?}");
}

/// A wait refused after it reached its stream, which then passed it, and the timeline dropped
/// while the stream lives on idle, never synchronized (a pooled stream): nothing shows that the
/// stream passed the refused wait, so the dropped timeline stays listed with the watcher for as
/// long as the stream lives, keeping its value where a signal the stream might still land would
/// hold no wait. Nothing waits and no turns are needed: the watcher rests between its looks at
/// it (counted parked) instead of looking every 50 µs, which cost 16% of a core for the stream's
/// whole life. Narrow and wide timelines alike, and narrow waits 2^31 apart, which take turns
/// for as long as their streams live: the watcher rests until each turn's end.
#[test]
fn a_timeline_dropped_after_its_refused_wait_passed_lets_the_watcher_rest() {
    let test = "a_timeline_dropped_after_its_refused_wait_passed_lets_the_watcher_rest";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "playing an older device and captures at a call are controls of the software driver",
        );
    };
    suite::alone_in_child!(a_timeline_dropped_after_its_refused_wait_passed_lets_the_watcher_rest);
    let context = context();
    for (narrow, turns) in [(true, false), (false, false), (true, true)] {
        let stream = new_stream(&context);
        let far = new_stream(&context);
        let words = MappedWords::new(&context, 2);
        let timeline = if narrow {
            narrow_timeline(controls, &context, 0)
        } else {
            Timeline::new(&context, 0).expect("timeline")
        };
        refuse_a_wait_after_it_reached(controls, &timeline, &stream, 1);
        words.write_in_stream(&stream, 0, 1);
        timeline.signal(2).expect("signal");
        wait_until("the stream to pass the refused wait", || words.get(0) == 1);
        if turns {
            // A second refused wait, 2^31 past the first: it passes in its turn once the
            // timeline went.
            refuse_a_wait_after_it_reached(controls, &timeline, &far, 2 + (1 << 31));
        }
        words.write_in_stream(&far, 1, 1);
        drop(timeline);
        wait_until("the far stream to pass its wait", || words.get(1) == 1);
        assert!(
            cuda_host::metrics().timelines().streams > 0,
            "the idle stream stays noted: the dropped timeline is still watched"
        );
        assert!(
            suite::wait::holds_within(Duration::from_secs(5), || {
                cuda_host::metrics().stream_points().watcher_parked
            }),
            "narrow: {narrow}, turns: {turns}: the watcher still looks 5 s after the timeline \
             went, for idle streams' refused waits"
        );
        let from = suite::started_thread_cpu_time("cuda-host-watch");
        std::thread::sleep(Duration::from_secs(1));
        let used = suite::started_thread_cpu_time("cuda-host-watch") - from;
        suite::figure(&format!(
            "narrow: {narrow}, turns: {turns}: watcher CPU time over 1 s with a dropped timeline \
             kept for idle streams: {used:?}"
        ));
        assert!(
            used <= Duration::from_millis(50),
            "narrow: {narrow}, turns: {turns}: the watcher used {used:?} of CPU in 1 s with \
             nothing waiting"
        );
        drop((stream, far));
    }
}

/// A thousand timelines, each dropped right after a signal went to a stream that works on (held
/// here by a gate): nothing waits on the host, and each stays listed with the watcher until the
/// stream passed its signal. Their looks fall due together (at multiples of the pause), so the
/// watcher wakes about 50 times a second for all of them, not once per timeline per pause (376
/// wakes and 173 ms of CPU a second in a debug build, where each kept its own due time), and
/// after the longest pause a look at each only keeps its value, looking at its streams one time
/// in five. Prints the watcher's CPU time and wakes.
#[test]
fn a_thousand_dropped_timelines_of_a_working_stream_let_the_watcher_rest() {
    suite::alone_in_child!(a_thousand_dropped_timelines_of_a_working_stream_let_the_watcher_rest);
    const TIMELINES: u32 = 1000;
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    gate.hold(&stream);
    for _ in 0..TIMELINES {
        let timeline = Timeline::new(&context, 0).expect("timeline");
        timeline
            .enqueue_signal(&stream, 1)
            .expect("signal enqueued");
        drop(timeline);
        // Dropped over one longest pause: each at its own time.
        let spread = Instant::now();
        while spread.elapsed() < Duration::from_micros(20_000 / u64::from(TIMELINES)) {
            std::hint::spin_loop();
        }
    }
    assert!(cuda_host::metrics().timelines().streams >= u64::from(TIMELINES));
    assert!(
        suite::wait::holds_within(Duration::from_secs(5), || {
            cuda_host::metrics().stream_points().watcher_parked
        }),
        "the watcher rests"
    );
    // The pauses grow to their longest.
    std::thread::sleep(Duration::from_millis(200));
    let (cpu, wakes) = watcher_use_over(Duration::from_secs(1));
    suite::figure(&format!(
        "{TIMELINES} timelines dropped while their stream works: the watcher used {cpu:?} of CPU \
         over 1 s, waking {wakes} times"
    ));
    gate.open();
    stream.synchronize().expect("synchronize");
    assert!(
        wakes <= 120,
        "the watcher woke {wakes} times in 1 s for {TIMELINES} dropped timelines"
    );
    assert!(
        cpu <= Duration::from_millis(120),
        "the watcher used {cpu:?} of CPU in 1 s for {TIMELINES} dropped timelines"
    );
    wait_until("the dropped timelines to let their stream go", || {
        cuda_host::metrics().timelines().streams == 0
    });
}

/// The watcher's CPU time and wakes over `span`.
fn watcher_use_over(span: Duration) -> (Duration, u64) {
    const WATCHER: &str = "cuda-host-watch";
    let (cpu, sleeps) = (
        suite::started_thread_cpu_time(WATCHER),
        suite::thread_sleeps(WATCHER).expect("the watcher's sleeps"),
    );
    std::thread::sleep(span);
    (
        suite::started_thread_cpu_time(WATCHER) - cpu,
        suite::thread_sleeps(WATCHER).expect("the watcher's sleeps") - sleeps,
    )
}

/// A hundred narrow timelines, each dropped while two gated streams have yet to pass its waits
/// 2^31 apart, so that each takes turns until the gates open; nothing waits on the host. The
/// turns end on the grid the pauses fall due on, so the watcher wakes for them all at once, not
/// once per timeline per turn (328 to 1,616 wakes a second, counted parked, while each turn
/// ended its own turn's length after it began). Prints the watcher's CPU time and wakes.
#[test]
fn dropped_narrow_timelines_taking_turns_let_the_watcher_rest() {
    let test = "dropped_narrow_timelines_taking_turns_let_the_watcher_rest";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "narrow devices are a control of the software driver");
    };
    suite::alone_in_child!(dropped_narrow_timelines_taking_turns_let_the_watcher_rest);
    const TIMELINES: u32 = 100;
    let context = context();
    let (first, second) = (new_stream(&context), new_stream(&context));
    let (first_gate, second_gate) = (Gate::new(&context), Gate::new(&context));
    first_gate.hold(&first);
    second_gate.hold(&second);
    for _ in 0..TIMELINES {
        let timeline = narrow_timeline(controls, &context, 0);
        timeline.enqueue_wait(&first, 1).expect("wait enqueued");
        timeline.signal(2).expect("signal");
        timeline
            .enqueue_wait(&second, 2 + (1 << 31))
            .expect("a wait 2^31 above the value is within the window");
        drop(timeline);
        // Dropped over one longest pause: each at its own time.
        let spread = Instant::now();
        while spread.elapsed() < Duration::from_micros(20_000 / u64::from(TIMELINES)) {
            std::hint::spin_loop();
        }
    }
    assert!(
        suite::wait::holds_within(Duration::from_secs(5), || {
            cuda_host::metrics().stream_points().watcher_parked
        }),
        "the watcher rests"
    );
    // The pauses, and so the turns, grow to their longest.
    std::thread::sleep(Duration::from_millis(200));
    let rests = || cuda_host::metrics().stream_points().watcher_rests;
    let before = rests();
    let (cpu, wakes) = watcher_use_over(Duration::from_secs(1));
    let rested = rests() - before;
    suite::figure(&format!(
        "{TIMELINES} dropped narrow timelines taking turns: the watcher used {cpu:?} of CPU over \
         1 s, waking {wakes} times, {rested} of them at a rest's end"
    ));
    assert!(
        (1..=wakes).contains(&rested),
        "{rested} rests counted, {wakes} wakes"
    );
    first_gate.open();
    second_gate.open();
    first.synchronize().expect("synchronize");
    second.synchronize().expect("synchronize");
    assert!(
        wakes <= 120,
        "the watcher woke {wakes} times in 1 s for {TIMELINES} dropped narrow timelines taking \
         turns"
    );
}

/// A narrow timeline dropped with a wait on a gated stream and another 2^31 above it on a stream
/// gated for good: the waits take turns. Each trial opens the first gate at another point of the
/// turns, once the pauses grew to their longest, and times the stream past its wait: within its
/// window's next turn, as documented (a turn lasts at most 23.04 ms; the software driver reads a
/// waited word at least every millisecond). Prints the 32 times.
#[test]
fn on_a_narrow_device_a_wait_reached_in_the_other_windows_turn_passes_within_a_turn() {
    let test = "on_a_narrow_device_a_wait_reached_in_the_other_windows_turn_passes_within_a_turn";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "narrow devices are a control of the software driver");
    };
    suite::alone_in_child!(
        on_a_narrow_device_a_wait_reached_in_the_other_windows_turn_passes_within_a_turn
    );
    const TRIALS: u32 = 32;
    let context = context();
    let far = new_stream(&context);
    let far_gate = Gate::new(&context);
    far_gate.hold(&far);
    let mut waited = Vec::new();
    for trial in 0..TRIALS {
        let stream = new_stream(&context);
        let gate = Gate::new(&context);
        let words = MappedWords::new(&context, 1);
        let timeline = narrow_timeline(controls, &context, 0);
        gate.hold(&stream);
        timeline.enqueue_wait(&stream, 1).expect("wait enqueued");
        words.write_in_stream(&stream, 0, 1);
        timeline.signal(2).expect("signal");
        timeline
            .enqueue_wait(&far, 2 + (1 << 31))
            .expect("a wait 2^31 above the value is within the window");
        drop(timeline);
        std::thread::sleep(Duration::from_millis(120) + Duration::from_micros(640) * trial);
        gate.open();
        // Polled every 20 µs: `wait_until`'s growing pauses would round the time up.
        let opened = Instant::now();
        while words.get(0) != 1 {
            assert!(
                opened.elapsed() < TIMEOUT,
                "the stream never passed its wait"
            );
            std::thread::sleep(Duration::from_micros(20));
        }
        waited.push(opened.elapsed());
        stream.synchronize().expect("synchronize");
    }
    far_gate.open();
    far.synchronize().expect("synchronize");
    waited.sort();
    suite::figure(&format!(
        "a narrow wait reached in the other window's turn passed after: {waited:?}"
    ));
    let slowest = waited[waited.len() - 1];
    assert!(
        slowest <= Duration::from_millis(40),
        "a stream waited {slowest:?} for its window's turn (at most 23.04 ms, and a read of the \
         word); the {TRIALS} trials: {waited:?}"
    );
}

/// While the watcher rests between its looks at a dropped timeline kept for an idle stream, a
/// future of a stream point registers: the registration wakes it as from a park, so that the
/// point is seen passed at the watcher's pace, not at the rest's end (up to 20 ms later). Prints
/// the wakes' median and worst.
#[test]
fn a_future_registered_while_the_watcher_rests_wakes_it_at_once() {
    let test = "a_future_registered_while_the_watcher_rests_wakes_it_at_once";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "captures at a call are controls of the software driver",
        );
    };
    suite::alone_in_child!(a_future_registered_while_the_watcher_rests_wakes_it_at_once);
    let context = context();
    let idle = new_stream(&context);
    let words = MappedWords::new(&context, 1);
    let timeline = Timeline::new(&context, 0).expect("timeline");
    refuse_a_wait_after_it_reached(controls, &timeline, &idle, 1);
    words.write_in_stream(&idle, 0, 1);
    timeline.signal(2).expect("signal");
    wait_until("the stream to pass the refused wait", || words.get(0) == 1);
    drop(timeline);
    let runtime = runtime();
    let stream = new_stream(&context);
    let mut wakes = Vec::new();
    for _ in 0..50 {
        assert!(
            suite::wait::holds_within(Duration::from_secs(5), || {
                cuda_host::metrics().stream_points().watcher_parked
            }),
            "the watcher rests"
        );
        // Well into the rests, grown to their longest.
        std::thread::sleep(Duration::from_millis(30));
        let gate = Gate::new(&context);
        gate.hold(&stream);
        let task = runtime.spawn(cuda_host::points::stream_point(&stream).expect("a point"));
        wait_until("the future to register", || {
            cuda_host::metrics().stream_points().waiting == 1
        });
        let opened = Instant::now();
        gate.open();
        runtime
            .block_on(task)
            .expect("the task")
            .expect("the point was passed");
        wakes.push(opened.elapsed());
    }
    wakes.sort();
    let (median, worst) = (wakes[wakes.len() / 2], wakes[wakes.len() - 1]);
    suite::figure(&format!(
        "a future registered while the watcher rests: woken {median:?} after its gate opened \
         (median of 50), {worst:?} at worst"
    ));
    // A rest that the registration did not end would put the median near 10 ms (half a rest).
    assert!(
        median < Duration::from_millis(4),
        "futures registered while the watcher rested were woken {median:?} after their points \
         (median), {worst:?} at worst"
    );
    drop(idle);
}

/// As above, with the far wait on a second stream, which no gate holds. The refused wait has no
/// point whose passing a hold waits for, so the second stream's hold is the word's last: once that
/// stream passed its wait (in its turn) and a drain let go of its hold, the word's value went. The
/// memory is kept (a capture took an operation on it), but the turns stopped with the word: the
/// value stayed wherever the last turn left it, the second wait's window, 2^31 + 1 past the first,
/// and the first stream waited for ever once its gate opened (the chaos harness, seed
/// 17446710689817960701, 1 of 60 replays under load). Several rounds: which turn the value is in
/// when the word goes is the watcher's timing.
#[test]
fn on_a_narrow_device_the_turns_go_on_for_a_refused_wait_after_the_other_streams_hold_went() {
    let test =
        "on_a_narrow_device_the_turns_go_on_for_a_refused_wait_after_the_other_streams_hold_went";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "playing an older device and captures at a call are controls of the software driver",
        );
    };
    suite::alone_in_child!(
        on_a_narrow_device_the_turns_go_on_for_a_refused_wait_after_the_other_streams_hold_went
    );
    let context = context();
    for round in 0..20 {
        let gated = new_stream(&context);
        let far = new_stream(&context);
        let words = MappedWords::new(&context, 1);
        let gate = Gate::new(&context);
        let timeline = narrow_timeline(controls, &context, 0);
        gate.hold(&gated);
        refuse_a_wait_after_it_reached(controls, &timeline, &gated, 1);
        timeline.signal(2).expect("signal");
        timeline
            .enqueue_wait(&far, 2 + (1 << 31))
            .expect("a wait 2^31 above the value is within the window");
        words.write_in_stream(&gated, 0, 1);
        drop(timeline);
        // The far stream passes in its turn; the drain right after lets go of its hold, the
        // word's last.
        far.synchronize()
            .expect("the far stream passes its wait in its turn");
        cuda_host::reclaim();
        gate.open();
        let passed = suite::wait::holds_within(Duration::from_secs(10), || words.get(0) == 1);
        if !passed {
            std::mem::forget((gated, far, gate, words));
            panic!(
                "round {round}: the gated stream is still held 10 s after its gate opened: the \
                 turns stopped when the far stream's hold, the word's last, went"
            );
        }
    }
}

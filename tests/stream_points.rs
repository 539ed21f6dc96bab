//! Stream points: values released in stream order, and futures that complete when a stream
//! passes a point. Their timing, threads, leaks, failures, captures and the watcher's idling.

use cuda_host::{
    Context, Error, Event, EventFlags, Stream, StreamFlags, graph::CaptureMode,
    graph::CaptureState, graph::GraphBuilder, host_launch, metrics, points::StreamPoint,
    points::WatcherPace, points::release_in_stream_order, points::set_watcher_pace,
    points::stream_point, reclaim,
};
use cuda_host_sys::CUresult;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::thread::ThreadId;
use std::time::{Duration, Instant};
use suite::{Gate, MappedWords, TIMEOUT, Tally, context, figure, wait_until};

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

/// Polls `future` once with a waker that does nothing.
fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    Pin::new(future).poll(&mut TaskContext::from_waker(Waker::noop()))
}

/// Remembers, when dropped, whether an event had completed and on which thread.
struct Observer {
    event: Arc<Event>,
    seen: Arc<Mutex<Option<(bool, ThreadId)>>>,
}

impl Drop for Observer {
    fn drop(&mut self) {
        let complete = self.event.is_complete().unwrap_or(false);
        *self.seen.lock().unwrap() = Some((complete, std::thread::current().id()));
    }
}

#[test]
fn a_released_value_is_dropped_after_the_work_before_it_finished_on_the_releasing_thread() {
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    let event = Arc::new(Event::new(&context, EventFlags::DisableTiming).expect("event"));
    let seen = Arc::new(Mutex::new(None));
    gate.hold(&stream);
    // Completes only once the stream got past the gate: the work before the point.
    event.record(&stream).expect("record");
    let observer = Observer {
        event: Arc::clone(&event),
        seen: Arc::clone(&seen),
    };
    release_in_stream_order(&stream, observer).expect("released");
    for _ in 0..20 {
        reclaim();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        seen.lock().unwrap().is_none(),
        "dropped before the stream passed the point"
    );
    assert!(!event.is_complete().expect("query"));
    gate.open();
    wait_until("the released value to be dropped", || {
        reclaim();
        seen.lock().unwrap().is_some()
    });
    assert_eq!(
        *seen.lock().unwrap(),
        Some((true, std::thread::current().id())),
        "dropped after the work before it finished, on the releasing thread"
    );
}

#[test]
fn a_released_value_outlives_the_last_stream_and_context_value_it_was_released_through() {
    let owner = context();
    let gate = Gate::new(&owner);
    let event = Arc::new(Event::new(&owner, EventFlags::DisableTiming).expect("event"));
    let seen = Arc::new(Mutex::new(None));
    {
        // A context value of its own, over a context that outlives it: its last clone goes
        // with the stream, while the value still waits for the stream.
        // SAFETY: `owner` keeps the context retained for the whole test, past every use.
        let borrowed =
            unsafe { Context::borrow_raw(owner.driver(), owner.as_raw()) }.expect("borrowed");
        let stream = new_stream(&borrowed);
        gate.hold(&stream);
        event.record(&stream).expect("record");
        let observer = Observer {
            event: Arc::clone(&event),
            seen: Arc::clone(&seen),
        };
        release_in_stream_order(&stream, observer).expect("released");
    }
    for _ in 0..20 {
        reclaim();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        seen.lock().unwrap().is_none(),
        "dropped before the stream passed the point, once its stream and context values went"
    );
    gate.open();
    wait_until("the released value to be dropped", || {
        reclaim();
        seen.lock().unwrap().is_some()
    });
    assert_eq!(
        *seen.lock().unwrap(),
        Some((true, std::thread::current().id())),
        "dropped after the work before it finished, on the releasing thread"
    );
}

#[test]
fn after_synchronize_the_values_this_thread_released_on_the_stream_are_dropped() {
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    for _ in 0..10 {
        release_in_stream_order(&stream, tally.probe()).expect("released");
    }
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.drops(), 10);
    assert!(
        tally
            .drop_threads()
            .iter()
            .all(|thread| *thread == std::thread::current().id())
    );
}

#[test]
fn another_threads_drains_never_drop_a_released_value() {
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    release_in_stream_order(&stream, tally.probe()).expect("released");
    std::thread::scope(|scope| {
        scope.spawn(|| {
            // The point is passed after this synchronize; this thread's drains are not the
            // value's.
            stream.synchronize().expect("synchronize");
            for _ in 0..10 {
                reclaim();
            }
        });
    });
    assert_eq!(tally.drops(), 0, "dropped by another thread");
    reclaim();
    assert_eq!(tally.drops(), 1);
    assert_eq!(tally.drop_threads(), [std::thread::current().id()]);
}

#[test]
fn values_a_thread_released_before_it_exited_are_dropped_by_any_thread() {
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    let tally = Tally::new();
    gate.hold(&stream);
    let exited = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                release_in_stream_order(&stream, tally.probe()).expect("released");
                std::thread::current().id()
            })
            .join()
            .expect("the releasing thread")
    });
    gate.open();
    wait_until("the exited thread's value to be dropped", || {
        reclaim();
        tally.drops() == 1
    });
    assert_ne!(tally.drop_threads(), [exited]);
}

#[test]
fn a_hundred_thousand_releases_leak_nothing() {
    // Alone in a process: the counts checked are process-wide.
    suite::alone_in_child!(a_hundred_thousand_releases_leak_nothing);
    const RELEASES: usize = 100_000;
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let start = Instant::now();
    for _ in 0..RELEASES {
        release_in_stream_order(&stream, tally.probe()).expect("released");
    }
    let enqueued = start.elapsed();
    stream.synchronize().expect("synchronize");
    figure(&format!(
        "{RELEASES} releases: {:.2} µs each to enqueue, all dropped {:?} after the first",
        enqueued.as_secs_f64() * 1e6 / RELEASES as f64,
        start.elapsed()
    ));
    assert_eq!((tally.probes(), tally.drops()), (RELEASES, RELEASES));
    assert!(
        tally
            .drop_threads()
            .iter()
            .all(|thread| *thread == std::thread::current().id())
    );
    assert_eq!(
        metrics().stream_points().held,
        0,
        "{:?}",
        metrics().stream_points()
    );
}

#[test]
fn values_released_around_a_context_failure_are_all_dropped_once_it_is_seen() {
    // Alone in a process: the failure stays with it.
    suite::alone_in_child!(
        values_released_around_a_context_failure_are_all_dropped_once_it_is_seen
    );
    const EACH: usize = 50;
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    let fault = suite::kernels::Fault::load(context.driver());
    let (before, after) = (Tally::new(), Tally::new());
    gate.hold(&stream);
    for _ in 0..EACH {
        release_in_stream_order(&stream, before.probe()).expect("released");
    }
    fault.launch(&stream);
    for _ in 0..EACH {
        release_in_stream_order(&stream, after.probe()).expect("released");
    }
    gate.open();
    let error = stream.synchronize().expect_err("the fault is reported");
    assert_eq!(
        error.driver_result(),
        Some(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS)
    );
    reclaim();
    for tally in [&before, &after] {
        assert_eq!(tally.drops(), EACH, "each value dropped exactly once");
        assert!(
            tally
                .drop_threads()
                .iter()
                .all(|thread| *thread == std::thread::current().id())
        );
    }
    assert_eq!(metrics().stream_points().held, 0);
}

#[test]
fn values_released_on_a_failed_context_are_dropped_once_a_look_at_their_points_sees_it() {
    // Nothing but the looks at the points' events sees the failure. Alone in a process: it
    // stays with it.
    suite::alone_in_child!(
        values_released_on_a_failed_context_are_dropped_once_a_look_at_their_points_sees_it
    );
    const EACH: usize = 50;
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    let fault = suite::kernels::Fault::load(context.driver());
    let tally = Tally::new();
    gate.hold(&stream);
    fault.launch(&stream);
    for _ in 0..EACH {
        release_in_stream_order(&stream, tally.probe()).expect("released");
    }
    reclaim();
    assert_eq!(tally.drops(), 0, "the stream has not reached the fault");
    gate.open();
    // The stream never passes the points: their events answer the context's failure instead.
    wait_until("the values of the failed context to be dropped", || {
        reclaim();
        tally.drops() == EACH
    });
    let here = std::thread::current().id();
    assert!(tally.drop_threads().iter().all(|thread| *thread == here));
    drop(stream);
}

#[test]
fn a_capturing_stream_refuses_points_hands_the_value_back_and_its_capture_still_works() {
    let _capture = suite::capture_lock();
    let context = context();
    let stream = new_stream(&context);
    // The stream has its track before the capture, so the refusal below is the capture's.
    release_in_stream_order(&stream, ()).expect("released");
    let tally = Tally::new();
    let builder = GraphBuilder::begin(&stream, CaptureMode::ThreadLocal).expect("capture");
    let refused = release_in_stream_order(&stream, tally.probe()).expect_err("a point captured");
    assert_eq!(
        refused.error,
        Error::PointInCapture {
            status: CaptureState::Active
        }
    );
    assert!(refused.to_string().contains("capturing"), "{refused}");
    assert_eq!(tally.drops(), 0, "the value was handed back, not dropped");
    let probe = refused.into_value();
    let error = stream_point(&stream).expect_err("a point captured");
    assert!(matches!(error, Error::PointInCapture { .. }), "{error}");
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&ran);
    builder
        .callback(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        })
        .expect("callback");
    let graph = builder.end().expect("the capture ends in a graph");
    let executable = graph.instantiate().expect("instantiate");
    executable.launch(&stream).expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(ran.load(Ordering::SeqCst), 1, "the graph runs");
    drop(probe);
    assert_eq!(tally.drops(), 1);
}

#[test]
fn a_release_inside_a_host_function_is_refused_and_the_value_handed_back() {
    let context = context();
    let stream = Arc::new(new_stream(&context));
    let tally = Tally::new();
    let kept = Arc::new(Mutex::new(None));
    let (inner, probe, keep) = (Arc::clone(&stream), tally.probe(), Arc::clone(&kept));
    let mut probe = Some(probe);
    host_launch(&stream, move || {
        if let Some(probe) = probe.take() {
            let refused = release_in_stream_order(&inner, probe).expect_err("released there");
            let error = refused.error.clone();
            // Kept, to be dropped on the test's thread rather than here.
            *keep.lock().unwrap() = Some((error, refused.into_value()));
        }
    })
    .expect("launch");
    stream.synchronize().expect("synchronize");
    let (error, value) = kept.lock().unwrap().take().expect("the host function ran");
    assert!(matches!(error, Error::InHostFunction { .. }), "{error}");
    assert_eq!(tally.drops(), 0);
    drop(value);
    assert_eq!(tally.drop_threads(), [std::thread::current().id()]);
}

#[test]
fn a_future_looked_at_inside_a_host_function_reaches_no_driver_call() {
    let test = "a_future_looked_at_inside_a_host_function_reaches_no_driver_call";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "injected failures are a control of the software driver",
        );
    };
    let context = context();
    let (stream, other) = (new_stream(&context), Arc::new(new_stream(&context)));
    let gate = Gate::new(&context);
    gate.hold(&stream);
    let point = Arc::new(Mutex::new(Some(stream_point(&stream).expect("a point"))));
    let seen = Arc::new(Mutex::new(None));
    let (inner, report) = (Arc::clone(&point), Arc::clone(&seen));
    host_launch(&other, move || {
        let mut point = inner.lock().unwrap();
        let point = point.as_mut().expect("the point");
        // Every look enters the relaxed capture mode first: a call armed to fail here, on the
        // driver's thread, that is still armed afterwards was never made.
        let mode = c"cuThreadExchangeStreamCaptureMode";
        let queried = c"cuEventQuery";
        controls.fail_next_calls(mode, 4, CUresult::CUDA_ERROR_INVALID_VALUE);
        controls.fail_next_calls(queried, 4, CUresult::CUDA_ERROR_INVALID_VALUE);
        let passed = point.is_passed();
        let polled = poll_once(point);
        let armed = (
            controls.armed_failures(mode),
            controls.armed_failures(queried),
        );
        controls.fail_next_calls(mode, 0, CUresult::CUDA_SUCCESS);
        controls.fail_next_calls(queried, 0, CUresult::CUDA_SUCCESS);
        *report.lock().unwrap() = Some((passed, polled, armed));
    })
    .expect("launch");
    other.synchronize().expect("synchronize");
    let (passed, polled, armed) = seen.lock().unwrap().take().expect("the host function ran");
    assert_eq!(
        armed,
        (4, 4),
        "a look inside a host function reached the driver"
    );
    assert!(
        matches!(passed, Err(Error::InHostFunction { .. })),
        "{passed:?}"
    );
    assert_eq!(polled, Poll::Pending, "nothing passed");
    gate.open();
    let point = point.lock().unwrap().take().expect("the point");
    assert_eq!(
        suite::wait::block_on(point),
        Ok(()),
        "the watcher still wakes it"
    );
}

#[test]
fn a_first_poll_while_the_watcher_looks_at_the_stream_reaches_no_driver_call() {
    let test = "a_first_poll_while_the_watcher_looks_at_the_stream_reaches_no_driver_call";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "injected failures are a control of the software driver",
        );
    };
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    gate.hold(&stream);
    let mut first = stream_point(&stream).expect("a point");
    assert_eq!(poll_once(&mut first), Poll::Pending, "nothing passed");
    // Past the watcher's spin: it sleeps between its looks, which come less often than a paced
    // look would look again.
    std::thread::sleep(Duration::from_millis(20));
    let mut second = stream_point(&stream).expect("a point");
    // Armed on this thread only: a call armed to fail that is still armed afterwards was never
    // made here (every look enters the relaxed capture mode first).
    let (mode, queried) = (c"cuThreadExchangeStreamCaptureMode", c"cuEventQuery");
    controls.fail_next_calls(mode, 1, CUresult::CUDA_ERROR_INVALID_VALUE);
    controls.fail_next_calls(queried, 1, CUresult::CUDA_ERROR_INVALID_VALUE);
    let polled = poll_once(&mut second);
    let armed = (
        controls.armed_failures(mode),
        controls.armed_failures(queried),
    );
    controls.fail_next_calls(mode, 0, CUresult::CUDA_SUCCESS);
    controls.fail_next_calls(queried, 0, CUresult::CUDA_SUCCESS);
    assert_eq!(
        armed,
        (1, 1),
        "the first poll looked while the watcher looks at the stream"
    );
    assert_eq!(polled, Poll::Pending, "nothing passed");
    gate.open();
    assert_eq!(
        suite::wait::block_on(second),
        Ok(()),
        "the watcher wakes it"
    );
    assert_eq!(suite::wait::block_on(first), Ok(()));
}

#[test]
fn a_point_is_an_event_record_not_a_host_function() {
    let test = "a_point_is_an_event_record_not_a_host_function";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "call counts are a control of the software driver");
    };
    // Alone in a process: the counts are process-wide.
    if !suite::in_child_process() {
        return suite::run_in_child(module_path!(), test, &[]);
    }
    let context = context();
    let stream = new_stream(&context);
    release_in_stream_order(&stream, ()).expect("released");
    stream.synchronize().expect("synchronize");
    let count = |entry: &std::ffi::CStr| controls.call_count(entry);
    let before = [
        count(c"cuEventRecord"),
        count(c"cuLaunchHostFunc"),
        count(c"cuStreamAddCallback"),
        count(c"cuStreamWriteValue32"),
    ];
    release_in_stream_order(&stream, vec![0u8; 64]).expect("released");
    let point = stream_point(&stream).expect("a point");
    stream.synchronize().expect("synchronize");
    assert_eq!(poll_once(&mut { point }), Poll::Ready(Ok(())));
    let after = [
        count(c"cuEventRecord"),
        count(c"cuLaunchHostFunc"),
        count(c"cuStreamAddCallback"),
        count(c"cuStreamWriteValue32"),
    ];
    assert_eq!(after, [before[0] + 2, before[1], before[2], before[3]]);
}

#[test]
fn a_future_completes_after_its_stream_point_and_never_before() {
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    let words = Arc::new(MappedWords::new(&context, 1));
    gate.hold(&stream);
    words.write_in_stream(&stream, 0, 7);
    let mut point = stream_point(&stream).expect("a point");
    let runtime = runtime();
    for _ in 0..5 {
        let waited = runtime
            .block_on(async { tokio::time::timeout(Duration::from_millis(10), &mut point).await });
        assert!(waited.is_err(), "completed before the stream reached it");
        assert_eq!(point.is_passed(), Ok(false));
    }
    gate.open();
    let seen = runtime.block_on(async {
        let outcome = tokio::time::timeout(TIMEOUT, &mut point).await;
        (outcome, words.get(0))
    });
    assert!(matches!(seen.0, Ok(Ok(()))), "{:?}", seen.0);
    assert_eq!(
        seen.1, 7,
        "completed before the work ahead of the point was done"
    );
    assert_eq!(point.is_passed(), Ok(true));
}

#[test]
fn ten_thousand_futures_on_four_streams_all_complete() {
    const FUTURES: usize = 10_000;
    // Only the first points wait behind the gate: the real driver blocks an enqueue once a
    // stream's queue is full, and a stream held by a wait never empties it.
    const BEHIND_THE_GATE: usize = 256;
    let context = context();
    let streams: Vec<Stream> = (0..4).map(|_| new_stream(&context)).collect();
    let gate = Gate::new(&context);
    for stream in &streams {
        gate.hold(stream);
    }
    let runtime = runtime();
    let completed = Arc::new(AtomicUsize::new(0));
    let spawn = |index: usize| {
        let point = stream_point(&streams[index % 4]).expect("a point");
        let completed = Arc::clone(&completed);
        runtime.spawn(async move {
            let outcome = point.await;
            completed.fetch_add(1, Ordering::SeqCst);
            outcome
        })
    };
    let mut tasks: Vec<_> = (0..BEHIND_THE_GATE).map(spawn).collect();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        completed.load(Ordering::SeqCst),
        0,
        "completed behind a gate"
    );
    let start = Instant::now();
    gate.open();
    tasks.extend((BEHIND_THE_GATE..FUTURES).map(spawn));
    let outcomes = runtime.block_on(async {
        tokio::time::timeout(TIMEOUT, async {
            let mut outcomes = Vec::with_capacity(FUTURES);
            for task in tasks {
                outcomes.push(task.await.expect("the task"));
            }
            outcomes
        })
        .await
        .expect("every future completes")
    });
    figure(&format!(
        "{FUTURES} futures on 4 streams ({BEHIND_THE_GATE} of them made behind a gate) completed \
         {:?} after the gate opened",
        start.elapsed()
    ));
    assert!(outcomes.iter().all(Result::is_ok));
    assert_eq!(completed.load(Ordering::SeqCst), FUTURES);
}

/// A waker that counts its wakes; its `Arc`'s count shows the clones still held.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn dropped_futures_leak_nothing() {
    // Alone in a process: the counts are process-wide.
    suite::alone_in_child!(dropped_futures_leak_nothing);
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    gate.hold(&stream);
    let counting = Arc::new(CountingWaker::default());
    let waker = Waker::from(Arc::clone(&counting));
    let mut points: Vec<StreamPoint> = (0..1000)
        .map(|_| stream_point(&stream).expect("a point"))
        .collect();
    for point in &mut points {
        let polled = Pin::new(point).poll(&mut TaskContext::from_waker(&waker));
        assert!(polled.is_pending());
    }
    assert_eq!(metrics().stream_points().waiting, 1000);
    assert!(!metrics().stream_points().watcher_parked);
    // Dropped while waiting, and one never polled.
    drop(points);
    drop(stream_point(&stream).expect("a point"));
    assert_eq!(metrics().stream_points().waiting, 0);
    assert_eq!(
        Arc::strong_count(&counting),
        2,
        "a waker clone is still held"
    );
    drop(waker);
    gate.open();
    stream.synchronize().expect("synchronize");
    wait_until("the watcher to park", || {
        metrics().stream_points().watcher_parked
    });
    assert_eq!(Arc::strong_count(&counting), 1);
    assert_eq!(
        counting.0.load(Ordering::SeqCst),
        0,
        "a dropped future was woken"
    );
}

#[test]
fn the_watcher_parks_when_nothing_is_pending_and_then_uses_no_cpu() {
    // Alone in a process: no other test's futures keep the watcher busy.
    suite::alone_in_child!(the_watcher_parks_when_nothing_is_pending_and_then_uses_no_cpu);
    let context = context();
    let (stream, runtime, gate, task) = a_future_waiting_behind_a_gate(&context);
    std::thread::sleep(Duration::from_millis(50));
    let busy = suite::started_thread_cpu_time("cuda-host-watch");
    gate.open();
    runtime
        .block_on(task)
        .expect("the task")
        .expect("the point was passed");
    wait_until("the watcher to park", || {
        metrics().stream_points().watcher_parked
    });
    let parks = metrics().stream_points().watcher_parks;
    let idle_from = suite::started_thread_cpu_time("cuda-host-watch");
    std::thread::sleep(Duration::from_millis(500));
    let idle_to = suite::started_thread_cpu_time("cuda-host-watch");
    figure(&format!(
        "watcher CPU time: {busy:?} after 50 ms with one future waiting; {:?} over 500 ms \
         parked with none",
        idle_to - idle_from
    ));
    assert!(
        idle_to - idle_from <= Duration::from_millis(20),
        "the parked watcher used {:?} of CPU in 500 ms",
        idle_to - idle_from
    );
    assert_eq!(
        metrics().stream_points().watcher_parks,
        parks,
        "woke without a future"
    );
    // A new future unparks it, and it parks again once that one completed.
    let point = stream_point(&stream).expect("a point");
    runtime.block_on(point).expect("passed");
    wait_until("the watcher to park again", || {
        metrics().stream_points().watcher_parked
    });
}

#[test]
fn the_watcher_sleeps_between_looks_while_a_future_waits_long() {
    // Alone in a process: no other test's points pass meanwhile and keep the watcher spinning.
    suite::alone_in_child!(the_watcher_sleeps_between_looks_while_a_future_waits_long);
    let context = context();
    let (_stream, runtime, gate, task) = a_future_waiting_behind_a_gate(&context);
    // Past the spin after the registration: long GPU work, as the watcher sees it.
    std::thread::sleep(Duration::from_millis(20));
    let from = suite::started_thread_cpu_time("cuda-host-watch");
    let sleeps_from = metrics().stream_points().watcher_sleeps;
    std::thread::sleep(Duration::from_millis(300));
    let used = suite::started_thread_cpu_time("cuda-host-watch") - from;
    let sleeps = metrics().stream_points().watcher_sleeps - sleeps_from;
    figure(&format!(
        "watcher CPU time: {used:?} and {sleeps} sleeps over 300 ms with one future waiting on a \
         held stream"
    ));
    // A spinning watcher sleeps never and uses the whole 300 ms; one that sleeps between looks
    // sleeps in pauses of 50 µs (thousands in 300 ms) and uses the share a look and a timer sleep
    // cost against them: about a quarter on the software driver, more under ThreadSanitizer's
    // instrumentation.
    assert!(
        sleeps >= 100,
        "the watcher slept {sleeps} times in 300 ms while one future waited: it spins"
    );
    assert!(
        used <= Duration::from_millis(240),
        "the watcher used {used:?} of CPU in 300 ms while one future waited: it spins"
    );
    gate.open();
    runtime
        .block_on(task)
        .expect("the task")
        .expect("the point was passed");
}

#[test]
fn a_spinning_watcher_never_sleeps_while_a_future_waits_and_the_balanced_one_does() {
    // Alone in a process: the pace is process-wide, and no other test's points may pass.
    suite::alone_in_child!(
        a_spinning_watcher_never_sleeps_while_a_future_waits_and_the_balanced_one_does
    );
    set_watcher_pace(WatcherPace::Spinning);
    let context = context();
    let (_stream, runtime, gate, task) = a_future_waiting_behind_a_gate(&context);
    // Long past the spin after the registration, where the balanced watcher sleeps.
    std::thread::sleep(Duration::from_millis(20));
    let before = metrics().stream_points().watcher_sleeps;
    std::thread::sleep(Duration::from_millis(100));
    let spinning = metrics().stream_points().watcher_sleeps - before;
    set_watcher_pace(WatcherPace::Balanced);
    let before = metrics().stream_points().watcher_sleeps;
    wait_until("the balanced watcher to sleep between looks", || {
        metrics().stream_points().watcher_sleeps > before + 10
    });
    figure(&format!(
        "watcher sleeps over 100 ms with one future waiting: {spinning} spinning"
    ));
    assert_eq!(
        spinning, 0,
        "the spinning watcher slept while a future waited"
    );
    gate.open();
    runtime
        .block_on(task)
        .expect("the task")
        .expect("the point was passed");
}

#[cfg(target_os = "linux")]
#[test]
fn the_watchers_timer_slack_follows_its_pace_whichever_thread_started_it() {
    // Alone in a process: the pace is process-wide, and this thread must start the watcher.
    suite::alone_in_child!(the_watchers_timer_slack_follows_its_pace_whichever_thread_started_it);
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    gate.hold(&stream);
    // A thread that saves power with a coarse slack starts the watcher, which inherits it.
    suite::set_own_timer_slack(20_000_000);
    let mut point = stream_point(&stream).expect("a point");
    assert!(poll_once(&mut point).is_pending(), "the point passed");
    suite::set_own_timer_slack(50_000);
    // `None` until the thread named itself, as it does once it runs.
    let slack = || suite::thread_timer_slack("cuda-host-watch");
    wait_until("the balanced watcher's least slack", || slack() == Some(1));
    set_watcher_pace(WatcherPace::Frugal);
    wait_until("the frugal watcher's slack, Linux's default", || {
        slack() != Some(1)
    });
    let frugal = slack();
    set_watcher_pace(WatcherPace::Balanced);
    wait_until("the balanced watcher's least slack again", || {
        slack() == Some(1)
    });
    gate.open();
    runtime().block_on(point).expect("the point passed");
    assert_eq!(
        frugal,
        Some(50_000),
        "the frugal watcher's slack is not Linux's default of 50 µs"
    );
}

/// A stream held by a gate, a tokio runtime, and a task awaiting a point of the stream, which
/// waits with the watcher: the one future of the process (the callers run alone in a child).
fn a_future_waiting_behind_a_gate(
    context: &Context,
) -> (
    Stream,
    tokio::runtime::Runtime,
    Gate,
    tokio::task::JoinHandle<cuda_host::Result<()>>,
) {
    let stream = new_stream(context);
    let runtime = runtime();
    let gate = Gate::new(context);
    gate.hold(&stream);
    let point = stream_point(&stream).expect("a point");
    let task = runtime.spawn(point);
    wait_until("the future to wait with the watcher", || {
        metrics().stream_points().waiting == 1
    });
    (stream, runtime, gate, task)
}

/// The smallest executor: polls on this thread, parks it between wakes.

#[test]
fn a_future_completes_with_any_executor() {
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    gate.hold(&stream);
    let point = stream_point(&stream).expect("a point");
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        gate.open();
    });
    assert_eq!(suite::wait::block_on(point), Ok(()));
    opener.join().expect("the opener");
}

/// A logger that asks cuda-host what stream points hold whenever cuda-host logs: user code that
/// calls back into the library, on whatever thread logs (the watcher's, too).
struct CountingLogger;

impl log::Log for CountingLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, _: &log::Record<'_>) {
        let _ = metrics().stream_points();
    }

    fn flush(&self) {}
}

#[test]
fn the_watcher_goes_on_when_the_logger_of_a_failed_look_asks_for_the_counts() {
    let test = "the_watcher_goes_on_when_the_logger_of_a_failed_look_asks_for_the_counts";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "injected failures are a control of the software driver",
        );
    };
    // Alone in a process: a logger is set once per process.
    suite::alone_in_child!(
        the_watcher_goes_on_when_the_logger_of_a_failed_look_asks_for_the_counts
    );
    log::set_logger(&CountingLogger).expect("the only logger of this process");
    log::set_max_level(log::LevelFilter::Trace);
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    gate.hold(&stream);
    let mut point = stream_point(&stream).expect("a point");
    assert_eq!(poll_once(&mut point), Poll::Pending, "registered");
    // The watcher's next query fails, and its look logs that.
    controls.fail_next_calls_any_thread(c"cuEventQuery", 1, CUresult::CUDA_ERROR_INVALID_VALUE);
    wait_until("the watcher's query failed", || {
        controls.armed_failures(c"cuEventQuery") == 0
    });
    gate.open();
    let (sender, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || sender.send(suite::wait::block_on(point)));
    assert_eq!(
        done.recv_timeout(TIMEOUT)
            .expect("the watcher never woke the future"),
        Ok(())
    );
}

/// A logger that drains whenever cuda-host logs: user code that calls [`reclaim`] back, on the
/// thread that logs.
struct ReclaimingLogger;

impl log::Log for ReclaimingLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, _: &log::Record<'_>) {
        reclaim();
    }

    fn flush(&self) {}
}

/// Leaves a value released on `stream` (held back by its gate) by a thread that exited, so that
/// every drain looks at `stream`'s track.
fn release_on_an_exited_thread(stream: &Stream, tally: &Arc<Tally>) {
    std::thread::scope(|scope| {
        scope.spawn(|| release_in_stream_order(stream, tally.probe()).expect("released"));
    });
}

/// Runs `call` on a thread of its own whose next `cuEventQuery` fails; panics unless it returns
/// within [`TIMEOUT`].
fn with_a_failed_query<T: Send + 'static>(what: &str, call: impl FnOnce() -> T + Send + 'static) {
    let controls = suite::software::controls().expect("the software driver");
    let (sender, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        controls.fail_next_calls(c"cuEventQuery", 1, CUresult::CUDA_ERROR_INVALID_VALUE);
        let _ = call();
        sender.send(()).expect("the test waits");
    });
    done.recv_timeout(TIMEOUT)
        .unwrap_or_else(|_| panic!("{what} never returned"));
}

/// [`ReclaimingLogger`] installed as this process's logger, a new stream of the suite's context
/// held by a gate, and a tally for the values released on it.
fn a_reclaiming_logger_and_a_held_stream() -> (Context, Stream, Gate, Arc<Tally>) {
    log::set_logger(&ReclaimingLogger).expect("the only logger of this process");
    log::set_max_level(log::LevelFilter::Trace);
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    let tally = Tally::new();
    gate.hold(&stream);
    (context, stream, gate, tally)
}

/// Waits, reclaiming, until the one value `tally` counts was dropped.
fn wait_until_dropped(tally: &Tally) {
    wait_until("the exited thread's value to be dropped", || {
        reclaim();
        tally.drops() == 1
    });
}

#[test]
fn a_look_whose_query_failed_returns_when_its_logger_reclaims() {
    let test = "a_look_whose_query_failed_returns_when_its_logger_reclaims";
    if suite::software::controls().is_none() {
        return suite::skip(
            test,
            "injected failures are a control of the software driver",
        );
    }
    // Alone in a process: a logger is set once per process.
    suite::alone_in_child!(a_look_whose_query_failed_returns_when_its_logger_reclaims);
    let (_context, stream, gate, tally) = a_reclaiming_logger_and_a_held_stream();
    // The logger's drain looks at the same track, for the exited thread's value.
    release_on_an_exited_thread(&stream, &tally);
    let point = stream_point(&stream).expect("a point");
    // The look fails and logs; the logger's drain starts a look of the same track.
    with_a_failed_query("the look of a failed query", move || point.is_passed());
    gate.open();
    wait_until_dropped(&tally);
}

#[test]
fn a_drain_of_exited_threads_values_returns_when_its_logger_reclaims() {
    let test = "a_drain_of_exited_threads_values_returns_when_its_logger_reclaims";
    if suite::software::controls().is_none() {
        return suite::skip(
            test,
            "injected failures are a control of the software driver",
        );
    }
    // Alone in a process: a logger is set once per process.
    suite::alone_in_child!(a_drain_of_exited_threads_values_returns_when_its_logger_reclaims);
    let (_context, stream, gate, tally) = a_reclaiming_logger_and_a_held_stream();
    release_on_an_exited_thread(&stream, &tally);
    // The drain's look at the exited thread's queue fails and logs; the logger drains again.
    with_a_failed_query("the drain of a failed query", reclaim);
    gate.open();
    wait_until_dropped(&tally);
}

#[test]
fn a_future_behind_a_failed_context_completes_with_an_error() {
    // Alone in a process: the failure stays with it.
    suite::alone_in_child!(a_future_behind_a_failed_context_completes_with_an_error);
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    let fault = suite::kernels::Fault::load(context.driver());
    gate.hold(&stream);
    fault.launch(&stream);
    let point = stream_point(&stream).expect("a point");
    let runtime = runtime();
    let task = runtime.spawn(point);
    gate.open();
    // The synchronize sees the failure; the watcher then wakes the future.
    assert!(stream.synchronize().is_err(), "the fault is reported");
    let outcome = runtime.block_on(async { tokio::time::timeout(TIMEOUT, task).await });
    assert_eq!(
        outcome.expect("completed").expect("the task"),
        Err(Error::ContextFailed)
    );
}

#[test]
fn looks_at_points_never_invalidate_a_global_capture_other_code_began() {
    // Alone in a process: any thread's allocation would invalidate a global-mode capture.
    suite::alone_in_child!(looks_at_points_never_invalidate_a_global_capture_other_code_began);
    let context = context();
    let (captured, released) = (new_stream(&context), new_stream(&context));
    let gate = Gate::new(&context);
    let tally = Tally::new();
    // A point the watcher waits on, and released values the drains look at, all pending.
    gate.hold(&released);
    let mut point = stream_point(&released).expect("a point");
    assert_eq!(poll_once(&mut point), Poll::Pending);
    release_in_stream_order(&released, tally.probe()).expect("released");
    // Other code captures in global mode (the driver's default) meanwhile: an event query
    // made in that mode by any thread would invalidate the capture.
    let capture = suite::capture::Capture::begin(
        captured.as_raw(),
        cuda_host_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
    );
    std::thread::scope(|scope| {
        scope.spawn(|| {
            release_in_stream_order(&released, tally.probe()).expect("released");
            assert_eq!(reclaim(), 0, "nothing passed yet");
        });
    });
    assert_eq!(point.is_passed(), Ok(false));
    assert_eq!(reclaim(), 0);
    gate.open();
    wait_until("the point to be seen passed", || {
        poll_once(&mut point) == Poll::Ready(Ok(()))
    });
    wait_until("this thread's value to be dropped", || {
        reclaim();
        tally.drops() >= 1
    });
    if let Err((result, _)) = capture.end() {
        panic!("the capture was invalidated: it ended with {result}");
    }
    wait_until("the other thread's value to be dropped", || {
        reclaim();
        tally.drops() == 2
    });
}

/// Ends the capture `stream` is in (`cuStreamEndCapture`), on the thread that began it.
fn end_capture(stream: &Stream) -> Result<suite::capture::Graph, CUresult> {
    suite::capture::end_capture(stream.as_raw()).map_err(|(result, _)| result)
}

#[test]
fn a_point_whose_record_other_codes_capture_took_is_refused_and_looks_never_query_it() {
    let test = "a_point_whose_record_other_codes_capture_took_is_refused_and_looks_never_query_it";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "a capture begun at a given call is a control of the software driver",
        );
    };
    // Alone in a process: any thread's allocation would invalidate a global-mode capture.
    suite::alone_in_child!(
        a_point_whose_record_other_codes_capture_took_is_refused_and_looks_never_query_it
    );
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    let tally = Tally::new();
    gate.hold(&stream);
    // Earlier points, pending: the drains, the looks now and the watcher look at the track.
    release_in_stream_order(&stream, tally.probe()).expect("released");
    let mut point = stream_point(&stream).expect("a point");
    assert_eq!(poll_once(&mut point), Poll::Pending);
    // Other code begins a global-mode capture of the stream between cuda-host's capture check
    // and its record, which the capture takes.
    controls.begin_capture_at_next_call(
        c"cuEventRecord",
        &stream,
        cuda_host_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
    );
    let taken = release_in_stream_order(&stream, tally.probe());
    assert_eq!(
        suite::capture::is_capturing(stream.as_raw()).1,
        cuda_host_sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE,
        "the capture began at the record"
    );
    // cuda-host looks at the track meanwhile, from this thread and from the watcher.
    assert_eq!(point.is_passed(), Ok(false));
    reclaim();
    std::thread::scope(|scope| {
        scope.spawn(reclaim);
    });
    let watcher_looks = Instant::now();
    while watcher_looks.elapsed() < Duration::from_millis(20) {
        assert_eq!(poll_once(&mut point), Poll::Pending);
        std::thread::sleep(Duration::from_millis(1));
    }
    let graph = end_capture(&stream).unwrap_or_else(|result| {
        panic!("cuda-host's looks invalidated the capture: it ended with {result}")
    });
    drop(graph.instantiate());
    let refused = taken.expect_err("a point the capture took is refused");
    assert_eq!(
        refused.error,
        Error::PointInCapture {
            status: CaptureState::Active
        }
    );
    let handed_back = refused.into_value();
    gate.open();
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.drops(), 1, "the value released before the capture");
    wait_until("the future to complete", || {
        poll_once(&mut point) == Poll::Ready(Ok(()))
    });
    // The stream's points go on.
    let later = Tally::new();
    release_in_stream_order(&stream, later.probe()).expect("released");
    stream.synchronize().expect("synchronize");
    assert_eq!(later.drops(), 1);
    drop(handed_back);
}

#[test]
fn a_value_released_at_a_point_other_codes_capture_took_is_never_dropped_before_its_stream_passed_it()
 {
    let test = "a_value_released_at_a_point_other_codes_capture_took_is_never_dropped_before_its_stream_passed_it";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "a capture begun at a given call is a control of the software driver",
        );
    };
    suite::alone_in_child!(
        a_value_released_at_a_point_other_codes_capture_took_is_never_dropped_before_its_stream_passed_it
    );
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    let tally = Tally::new();
    release_in_stream_order(&stream, ()).expect("released");
    gate.hold(&stream);
    // The capture takes the record and ends before cuda-host's next look: the event then
    // stands for nothing of the stream's.
    controls.begin_capture_at_next_call(
        c"cuEventRecord",
        &stream,
        cuda_host_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
    );
    let taken = release_in_stream_order(&stream, tally.probe());
    drop(end_capture(&stream).expect("the capture ends in a graph"));
    reclaim();
    assert_eq!(
        tally.drops(),
        0,
        "dropped while the stream had not passed the work before it"
    );
    let value = taken
        .expect_err("a point the capture took is refused")
        .into_value();
    gate.open();
    stream.synchronize().expect("synchronize");
    drop(value);
    assert_eq!(tally.drops(), 1);
}

#[test]
fn a_stream_point_is_refused_with_a_thread_start_error_when_the_watcher_cannot_start() {
    // Alone in a process where every thread spawn fails: no stack that large can be mapped.
    suite::alone_in_child!(
        a_stream_point_is_refused_with_a_thread_start_error_when_the_watcher_cannot_start,
        &[("RUST_MIN_STACK", "1125899906842624")]
    );
    assert!(
        std::thread::Builder::new().spawn(|| {}).is_err(),
        "threads start in this process"
    );
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    gate.hold(&stream);
    match stream_point(&stream) {
        Err(Error::ThreadStart { thread, .. }) => assert_eq!(thread, "cuda-host-watch"),
        Err(other) => panic!("refused with {other}"),
        Ok(mut point) => {
            let polled = poll_once(&mut point);
            panic!("a point with no watcher thread to wake it was accepted; its poll: {polled:?}")
        }
    }
    // A release needs no watcher.
    let tally = Tally::new();
    release_in_stream_order(&stream, tally.probe()).expect("released");
    gate.open();
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.drops(), 1);
}

#[test]
fn a_future_point_whose_record_a_thread_local_capture_took_is_refused_and_the_capture_kept() {
    let test =
        "a_future_point_whose_record_a_thread_local_capture_took_is_refused_and_the_capture_kept";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "a capture begun at a given call is a control of the software driver",
        );
    };
    suite::alone_in_child!(
        a_future_point_whose_record_a_thread_local_capture_took_is_refused_and_the_capture_kept
    );
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    gate.hold(&stream);
    let mut earlier = stream_point(&stream).expect("a point");
    assert_eq!(poll_once(&mut earlier), Poll::Pending);
    controls.begin_capture_at_next_call(
        c"cuEventRecord",
        &stream,
        cuda_host_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    );
    let error = stream_point(&stream).expect_err("a point the capture took is refused");
    assert!(matches!(error, Error::PointInCapture { .. }), "{error}");
    assert_eq!(earlier.is_passed(), Ok(false));
    drop(
        end_capture(&stream)
            .unwrap_or_else(|result| panic!("the capture was invalidated: {result}"))
            .instantiate(),
    );
    gate.open();
    wait_until("the earlier point to pass", || {
        poll_once(&mut earlier) == Poll::Ready(Ok(()))
    });
    // The stream's later points, on events of their own, all pass.
    let points: Vec<StreamPoint> = (0..130)
        .map(|_| stream_point(&stream).expect("a point"))
        .collect();
    stream.synchronize().expect("synchronize");
    for point in &points {
        assert_eq!(point.is_passed(), Ok(true));
    }
}

#[test]
fn a_released_value_whose_drop_panics_is_reported_and_the_drain_goes_on() {
    // Alone in a process: the hook is process-wide.
    suite::alone_in_child!(a_released_value_whose_drop_panics_is_reported_and_the_drain_goes_on);
    struct PanicsOnDrop;
    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            panic!("deliberate panic in a released value's Drop");
        }
    }
    let reports: Arc<Mutex<Vec<(String, cuda_host::panics::PanicOrigin)>>> = Arc::default();
    let hook_reports = Arc::clone(&reports);
    cuda_host::panics::set_host_panic_hook(
        move |panic: &cuda_host::panics::HostFunctionPanic<'_>| {
            hook_reports
                .lock()
                .unwrap()
                .push((panic.message.to_owned(), panic.origin));
        },
    );
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    release_in_stream_order(&stream, PanicsOnDrop).expect("released");
    release_in_stream_order(&stream, tally.probe()).expect("released");
    let synchronized =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| stream.synchronize()));
    assert!(
        matches!(synchronized, Ok(Ok(()))),
        "the synchronize that dropped did not go on"
    );
    assert_eq!(
        tally.drops(),
        1,
        "the value released after it was not dropped"
    );
    let reports = reports.lock().unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].0, "deliberate panic in a released value's Drop");
    assert_eq!(reports[0].1, cuda_host::panics::PanicOrigin::Drop);
}

#[test]
fn points_before_a_refused_one_are_seen_passed_without_a_later_point() {
    // Points 1 to 64, then a 65th that is refused because other code's capture took its record
    // (its event retired): the stream passes the 64, and point 1 is seen passed with no point
    // marked after the refusal. (With a ring of 64 events, point 65's retired event was point
    // 1's, which was then never seen passed.)
    let test = "points_before_a_refused_one_are_seen_passed_without_a_later_point";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "a capture begun at a given call is a control of the software driver",
        );
    };
    suite::alone_in_child!(points_before_a_refused_one_are_seen_passed_without_a_later_point);
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    gate.hold(&stream);
    let mut first = stream_point(&stream).expect("a point");
    let _later: Vec<StreamPoint> = (0..63)
        .map(|_| stream_point(&stream).expect("a point"))
        .collect();
    controls.begin_capture_at_next_call(
        c"cuEventRecord",
        &stream,
        cuda_host_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    );
    let error = stream_point(&stream).expect_err("a point the capture took is refused");
    assert!(matches!(error, Error::PointInCapture { .. }), "{error}");
    drop(
        end_capture(&stream)
            .unwrap_or_else(|result| panic!("the capture was invalidated: {result}"))
            .instantiate(),
    );
    gate.open();
    // Through the driver alone: the stream passed every point (nothing of cuda-host's looks).
    suite::wait_until_done(&stream);
    wait_until("the first point to be seen passed", || {
        first.is_passed() == Ok(true)
    });
    wait_until("the first point's future to complete", || {
        poll_once(&mut first) == Poll::Ready(Ok(()))
    });
}

#[test]
fn the_watcher_wakes_the_first_and_the_last_of_the_points_before_a_refused_one() {
    // As above, 64 points then a refused one. The watcher looks at a track for the first point
    // waiting on it, and wakes the futures up to what that look saw: point 1's future and point
    // 64's are both woken once the stream passed them.
    let test = "the_watcher_wakes_the_first_and_the_last_of_the_points_before_a_refused_one";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "a capture begun at a given call is a control of the software driver",
        );
    };
    suite::alone_in_child!(
        the_watcher_wakes_the_first_and_the_last_of_the_points_before_a_refused_one
    );
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    gate.hold(&stream);
    let mut points: Vec<StreamPoint> = (0..64)
        .map(|_| stream_point(&stream).expect("a point"))
        .collect();
    let mut last = points.pop().expect("point 64");
    let mut first = points.swap_remove(0);
    controls.begin_capture_at_next_call(
        c"cuEventRecord",
        &stream,
        cuda_host_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    );
    let error = stream_point(&stream).expect_err("a point the capture took is refused");
    assert!(matches!(error, Error::PointInCapture { .. }), "{error}");
    drop(
        end_capture(&stream)
            .unwrap_or_else(|result| panic!("the capture was invalidated: {result}"))
            .instantiate(),
    );
    // Both futures wait with the watcher.
    let first_wakes = Arc::new(CountingWaker::default());
    let last_wakes = Arc::new(CountingWaker::default());
    let first_waker = Waker::from(Arc::clone(&first_wakes));
    let last_waker = Waker::from(Arc::clone(&last_wakes));
    assert!(
        Pin::new(&mut first)
            .poll(&mut TaskContext::from_waker(&first_waker))
            .is_pending()
    );
    assert!(
        Pin::new(&mut last)
            .poll(&mut TaskContext::from_waker(&last_waker))
            .is_pending()
    );
    gate.open();
    suite::wait_until_done(&stream);
    wait_until("the watcher to wake point 64's future", || {
        last_wakes.0.load(Ordering::SeqCst) > 0
    });
    wait_until("the watcher to wake point 1's future", || {
        first_wakes.0.load(Ordering::SeqCst) > 0
    });
    drop((first, last, points));
}

/// How long an enqueue behind a closed gate may take before [`enqueued_in_time`] opens it.
const ENQUEUE_BOUND: Duration = Duration::from_secs(10);

/// Runs `enqueue`, which enqueues work behind a closed gate, and calls `open` if it has not
/// returned within [`ENQUEUE_BOUND`]: the real driver blocks an enqueue once a stream's queue is
/// full, and a held stream never empties it, so the test then fails or skips instead of hanging.
/// Returns `enqueue`'s output, and whether it returned before the bound.
fn enqueued_in_time<T>(open: impl FnOnce() + Send, enqueue: impl FnOnce() -> T) -> (T, bool) {
    let done = (Mutex::new(false), std::sync::Condvar::new());
    std::thread::scope(|scope| {
        let watched = &done;
        let watchdog = scope.spawn(move || {
            let (finished, signal) = watched;
            let finished = finished.lock().unwrap();
            let (finished, _) = signal
                .wait_timeout_while(finished, ENQUEUE_BOUND, |finished| !*finished)
                .unwrap();
            let in_time = *finished;
            drop(finished);
            if !in_time {
                open();
            }
            in_time
        });
        let output = enqueue();
        *done.0.lock().unwrap() = true;
        done.1.notify_all();
        (output, watchdog.join().expect("the watchdog"))
    })
}

/// A future polled once with a waker of its own, which counts the watcher's wakes.
struct Watched {
    point: StreamPoint,
    wakes: Arc<CountingWaker>,
}

impl Watched {
    fn new(point: StreamPoint) -> Watched {
        let mut watched = Watched {
            point,
            wakes: Arc::default(),
        };
        let waker = Waker::from(Arc::clone(&watched.wakes));
        let polled = Pin::new(&mut watched.point).poll(&mut TaskContext::from_waker(&waker));
        assert!(
            polled.is_pending(),
            "passed before the stream could reach it"
        );
        watched
    }

    fn woken(&self) -> bool {
        self.wakes.0.load(Ordering::SeqCst) > 0
    }
}

#[test]
fn a_point_is_seen_passed_once_its_stream_passed_it_however_many_points_follow() {
    // 300 points, each behind a stream wait for a host-written word to reach its number: with
    // the word at 1, the stream passes the first point and no other.
    const POINTS: u32 = 300;
    let context = context();
    let stream = new_stream(&context);
    let word = MappedWords::new(&context, 1);
    let (futures, in_time) = enqueued_in_time(
        || word.set(0, POINTS),
        || {
            (1..=POINTS)
                .map(|step| {
                    word.wait_in_stream(&stream, 0, step);
                    Watched::new(stream_point(&stream).expect("a point"))
                })
                .collect::<Vec<_>>()
        },
    );
    if !in_time {
        stream.synchronize().expect("synchronize");
        return suite::skip(
            "a_point_is_seen_passed_once_its_stream_passed_it_however_many_points_follow",
            "this driver blocks an enqueue behind 300 held stream waits",
        );
    }
    word.set(0, 1);
    wait_until("the first point's future to be woken", || {
        futures[0].woken()
    });
    assert_eq!(futures[0].point.is_passed(), Ok(true));
    assert_eq!(futures[1].point.is_passed(), Ok(false), "seen passed early");
    assert!(futures[1..].iter().all(|future| !future.woken()));
    word.set(0, POINTS);
    stream.synchronize().expect("synchronize");
    wait_until("every future to be woken", || {
        futures.iter().all(Watched::woken)
    });
}

#[test]
fn a_thousand_points_behind_a_word_raised_step_by_step_are_seen_passed_at_their_step_never_before()
{
    // Point k (a future for even k, a released value for odd k) waits behind a stream wait for
    // the word to reach k. The word is raised in steps of growing size; at each step every point
    // up to it is seen passed (the future woken by the watcher, the value dropped by this
    // thread's drains) and none after it, with no synchronize. Up to `AHEAD` points wait beyond
    // the word at a time, far more than a ring of 64 events would tell apart, and few enough
    // that the real driver, which blocks an enqueue once a held stream's queue is full, takes
    // them.
    const POINTS: u32 = 1000;
    const AHEAD: u32 = 250;
    let context = context();
    let stream = new_stream(&context);
    let word = MappedWords::new(&context, 1);
    let tally = Tally::new();
    let mut futures: Vec<Watched> = Vec::new();
    let mut made = 0;
    let mut make_up_to = |last: u32, futures: &mut Vec<Watched>| {
        let ((), in_time) = enqueued_in_time(
            || word.set(0, POINTS),
            || {
                while made < last {
                    made += 1;
                    word.wait_in_stream(&stream, 0, made);
                    if made % 2 == 0 {
                        futures.push(Watched::new(stream_point(&stream).expect("a point")));
                    } else {
                        release_in_stream_order(&stream, tally.probe()).expect("released");
                    }
                }
            },
        );
        assert!(in_time, "the driver blocked the enqueue behind the waits");
    };
    make_up_to(AHEAD, &mut futures);
    let (mut step, mut size) = (0, 1);
    while step < POINTS {
        step = (step + size).min(POINTS);
        size = (size + 1 + size / 4).min(AHEAD);
        word.set(0, step);
        let futures_passed = (step / 2) as usize;
        let values_passed = step.div_ceil(2) as usize;
        wait_until("the points up to the step to be seen passed", || {
            reclaim();
            tally.drops() >= values_passed && futures[..futures_passed].iter().all(Watched::woken)
        });
        assert_eq!(tally.drops(), values_passed, "at step {step}");
        let later = &futures[futures_passed..];
        assert!(
            later.iter().all(|future| !future.woken()),
            "a future after step {step} was woken"
        );
        if let Some(next) = later.first() {
            assert_eq!(next.point.is_passed(), Ok(false), "at step {step}");
        }
        assert!(
            futures[..futures_passed]
                .iter()
                .all(|future| future.point.is_passed() == Ok(true))
        );
        make_up_to((step + AHEAD).min(POINTS), &mut futures);
    }
    assert_eq!(futures.len(), (POINTS / 2) as usize);
    assert!(
        tally
            .drop_threads()
            .iter()
            .all(|thread| *thread == std::thread::current().id())
    );
}

#[test]
fn a_hundred_thousand_points_in_flight_on_one_stream_are_each_seen_passed_by_the_streams_progress()
{
    // Alone in a process: the call counts are process-wide.
    suite::alone_in_child!(
        a_hundred_thousand_points_in_flight_on_one_stream_are_each_seen_passed_by_the_streams_progress
    );
    const POINTS: usize = 100_000;
    const FUTURE_EVERY: usize = 100;
    let context = context();
    let stream = new_stream(&context);
    let (first, second) = (Gate::new(&context), Gate::new(&context));
    let (before, after) = (Tally::new(), Tally::new());
    let count = |entry: &std::ffi::CStr| {
        suite::software::controls().map(|controls| controls.call_count(entry))
    };
    let host_functions = || (count(c"cuLaunchHostFunc"), count(c"cuStreamAddCallback"));
    let host_functions_before = host_functions();
    // Half the points behind the first gate, half behind the second: a future every hundredth,
    // released values between them.
    let mark = |tally: &Arc<Tally>, futures: &mut Vec<Watched>| {
        for index in 0..POINTS / 2 {
            if index % FUTURE_EVERY == 0 {
                futures.push(Watched::new(stream_point(&stream).expect("a point")));
            } else {
                release_in_stream_order(&stream, tally.probe()).expect("released");
            }
        }
    };
    let ((early, late), in_time) = enqueued_in_time(
        || {
            first.open();
            second.open();
        },
        || {
            let (mut early, mut late) = (Vec::new(), Vec::new());
            first.hold(&stream);
            mark(&before, &mut early);
            second.hold(&stream);
            mark(&after, &mut late);
            (early, late)
        },
    );
    if !in_time {
        stream.synchronize().expect("synchronize");
        return suite::skip(
            "a_hundred_thousand_points_in_flight_on_one_stream_are_each_seen_passed_by_the_streams_progress",
            "this driver blocks an enqueue behind a held stream before 100,000 points",
        );
    }
    assert_eq!(metrics().stream_points().waiting, early.len() + late.len());
    first.open();
    let values = POINTS / 2 - early.len();
    wait_until("the points behind the first gate to be seen passed", || {
        reclaim();
        before.drops() == values && early.iter().all(Watched::woken)
    });
    assert_eq!(after.drops(), 0, "dropped behind the second gate");
    assert!(
        late.iter().all(|future| !future.woken()),
        "woken behind the second gate"
    );
    assert_eq!(late[0].point.is_passed(), Ok(false));
    second.open();
    wait_until(
        "the points behind the second gate to be seen passed",
        || {
            reclaim();
            after.drops() == values && late.iter().all(Watched::woken)
        },
    );
    assert_eq!(
        host_functions(),
        host_functions_before,
        "a point fell back to a host function"
    );
    assert_eq!(metrics().stream_points().held, 0);
    assert_eq!(metrics().stream_points().waiting, 0);
}

/// Sleeps or spins for about `micros` microseconds: short pauses are spun, as a sleep would
/// take far longer than asked.
fn pause(micros: u64) {
    let pause = Duration::from_micros(micros);
    if micros >= 100 {
        std::thread::sleep(pause);
    } else {
        let start = Instant::now();
        while start.elapsed() < pause {
            std::hint::spin_loop();
        }
    }
}

#[test]
fn thousands_of_awaits_released_by_another_thread_after_random_pauses_never_stay_pending() {
    // A lost wakeup would leave an await pending for ever: each point waits behind a stream wait
    // that another thread releases after a pause of 0 to 400 µs, before, during or after the
    // future's first poll and its registration with the watcher; `block_on` parks this thread
    // between polls and fails after its bound. Alone in a process: the count of waiting futures
    // checked at the end is process-wide.
    suite::alone_in_child!(
        thousands_of_awaits_released_by_another_thread_after_random_pauses_never_stay_pending
    );
    const AWAITS: u32 = 3000;
    let context = context();
    let stream = new_stream(&context);
    let word = Arc::new(MappedWords::new(&context, 1));
    let (to_release, releases) = std::sync::mpsc::channel::<(u32, u64)>();
    let releaser = {
        let word = Arc::clone(&word);
        std::thread::spawn(move || {
            for (step, micros) in releases {
                pause(micros);
                word.set(0, step);
            }
        })
    };
    let mut random = 0x2545_f491_4f6c_dd1d_u64;
    for step in 1..=AWAITS {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        // Half of the pauses under 10 µs, where the poll and the release race most.
        let micros = if random.is_multiple_of(2) {
            random % 10
        } else {
            random % 400
        };
        word.wait_in_stream(&stream, 0, step);
        let point = stream_point(&stream).expect("a point");
        to_release.send((step, micros)).expect("the releaser");
        assert_eq!(suite::wait::block_on(point), Ok(()), "await {step}");
    }
    drop(to_release);
    releaser.join().expect("the releaser");
    assert_eq!(metrics().stream_points().waiting, 0);
}

#[test]
fn a_value_is_dropped_by_its_threads_later_releases_while_another_streams_values_stay_held() {
    // Only the drains of the thread's releases look at its values: no synchronize, no
    // `reclaim`, no future. The values on the held stream stay held throughout, so the thread
    // has two streams' values to look at in every drain.
    let context = context();
    let (passing, held) = (new_stream(&context), new_stream(&context));
    let gate = Gate::new(&context);
    gate.hold(&held);
    let tally = Tally::new();
    let dropped = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                release_in_stream_order(&held, ()).expect("released");
                release_in_stream_order(&passing, tally.probe()).expect("released");
                suite::wait_until_done(&passing);
                // A few hundred points behind the gate at most: the real driver blocks an
                // enqueue once a held stream's queue is full.
                for _ in 0..200 {
                    release_in_stream_order(&held, ()).expect("released");
                    if tally.drops() == 1 {
                        return true;
                    }
                    std::thread::sleep(Duration::from_micros(250));
                }
                false
            })
            .join()
            .expect("the releasing thread")
    });
    gate.open();
    held.synchronize().expect("synchronize");
    assert!(
        dropped,
        "the value stayed held for 200 releases over 50 ms though its stream had passed it"
    );
}

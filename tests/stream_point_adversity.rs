//! Stream points under adversity: loggers, wakers and other threads' looks that call cuda-host
//! back or get in the way. Each test names a behaviour the documentation promises. Every wait is
//! bounded; a test that finds cuda-host wedged forgets what it holds (whose drop would wait on
//! the wedge) and fails.

use cuda_host::{
    Context, Error, Stream, StreamFlags, host_launch, metrics, points::StreamPoint,
    points::release_in_stream_order, points::stream_point, reclaim,
};
use cuda_host_sys::CUresult;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, mpsc};
use std::time::Duration;
use suite::wait::returns_within;
use suite::{Gate, Tally, calling_back_logger, context, wait_until};

/// How long a test waits for a call that returns in microseconds when nothing is wedged.
const WEDGED_AFTER: Duration = Duration::from_secs(10);

fn new_stream(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking).expect("stream")
}

/// A value an exited thread released on `stream`: every drain of every thread looks at the
/// stream's track for it, until the stream passes its point.
fn release_on_an_exited_thread(stream: &Stream, tally: &Arc<Tally>) {
    std::thread::scope(|scope| {
        scope.spawn(|| release_in_stream_order(stream, tally.probe()).expect("released"));
    });
}

// ---- a context failure first seen by a look ------------------------------------------------

/// A logger that drains (the suite's `ReclaimingLogger` of `tests/stream_points.rs` does just
/// this) does not wedge the watcher. A look whose query is the first to answer a context's
/// sticky error records the failure, which abandons the context's pending host functions and
/// logs that count; were that logged while the look still held the track, the logger's drain on
/// the watcher's thread, looking at the same track for an exited thread's value, would wait for
/// that look for ever.
#[test]
fn the_watcher_wakes_futures_of_a_failed_context_when_its_logger_reclaims() {
    let test = "the_watcher_wakes_futures_of_a_failed_context_when_its_logger_reclaims";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "sticky errors are a control of the software driver");
    };
    // Alone in a process: a logger is set once per process, and the failure stays with it.
    suite::alone_in_child!(the_watcher_wakes_futures_of_a_failed_context_when_its_logger_reclaims);
    calling_back_logger::install();
    let call_back = || {
        reclaim();
    };
    calling_back_logger::on_every_record(call_back);
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    gate.hold(&stream);
    // Launched and not run: the failure abandons it, and says so in a log record.
    host_launch(&stream, || {}).expect("launched");
    let tally = Tally::new();
    release_on_an_exited_thread(&stream, &tally);
    let point = stream_point(&stream).expect("a point");
    let (sender, done) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(suite::wait::block_on(point));
    });
    wait_until("the future to wait with the watcher", || {
        metrics().stream_points().waiting == 1
    });
    // Nothing but the watcher's looks makes a call now: its query is the first to see it.
    controls.set_sticky_error(&context, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    let outcome = done.recv_timeout(WEDGED_AFTER);
    if outcome.is_err() {
        // Their drops would wait for the wedged watcher.
        std::mem::forget((stream, gate, tally));
        panic!(
            "the future of a failed context was not woken within {WEDGED_AFTER:?}: the \
             watcher is wedged in a look its own logger's drain began"
        );
    }
    assert_eq!(outcome.expect("completed"), Err(Error::ContextFailed));
}

/// The same on a caller's thread: [`StreamPoint::is_passed`] returns when its look is the first
/// to see the failure and the logger drains.
#[test]
fn is_passed_returns_when_its_look_first_sees_a_failure_and_the_logger_reclaims() {
    let test = "is_passed_returns_when_its_look_first_sees_a_failure_and_the_logger_reclaims";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "sticky errors are a control of the software driver");
    };
    suite::alone_in_child!(
        is_passed_returns_when_its_look_first_sees_a_failure_and_the_logger_reclaims
    );
    calling_back_logger::install();
    let call_back = || {
        reclaim();
    };
    calling_back_logger::on_every_record(call_back);
    let context = context();
    let stream = Arc::new(new_stream(&context));
    let gate = Gate::new(&context);
    gate.hold(&stream);
    host_launch(&*stream, || {}).expect("launched");
    // Never polled: the watcher does not look at the track.
    let point: StreamPoint = stream_point(&stream).expect("a point");
    let seen = Arc::new(AtomicUsize::new(0));
    let outcome = returns_within(WEDGED_AFTER, {
        let stream = Arc::clone(&stream);
        let seen = Arc::clone(&seen);
        move || {
            // This thread's own value on the track: its drains look at the track.
            release_in_stream_order(&stream, ()).expect("released");
            controls.set_sticky_error(stream.context(), CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
            seen.fetch_add(1, Ordering::SeqCst);
            point.is_passed()
        }
    });
    if outcome.is_none() {
        std::mem::forget((stream, gate));
        panic!(
            "is_passed never returned (it was called: {}): its look records the failure and \
             logs while it holds the track, and the logger's drain waits for that look",
            seen.load(Ordering::SeqCst)
        );
    }
    assert_eq!(outcome.expect("returned"), Err(Error::ContextFailed));
}

// ---- a value released while a drain looks --------------------------------------------------

static SECOND: OnceLock<Stream> = OnceLock::new();
static LOGGED_RELEASE: OnceLock<Arc<Tally>> = OnceLock::new();
static LOGGER_RELEASED: AtomicUsize = AtomicUsize::new(0);

/// A logger that releases a value in stream order, called by a drain's look (here, a query that
/// failed) while the drain goes through the thread's held values: the value is held as any, and
/// dropped once its point passed.
#[test]
fn a_value_released_by_a_logger_while_a_drain_looks_is_dropped_once_its_point_passed() {
    let test = "a_value_released_by_a_logger_while_a_drain_looks_is_dropped_once_its_point_passed";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "injected failures are a control of the software driver",
        );
    };
    suite::alone_in_child!(
        a_value_released_by_a_logger_while_a_drain_looks_is_dropped_once_its_point_passed
    );
    calling_back_logger::install();
    let call_back = || {
        let (Some(stream), Some(tally)) = (SECOND.get(), LOGGED_RELEASE.get()) else {
            return;
        };
        if LOGGER_RELEASED.load(Ordering::SeqCst) == 0 {
            LOGGER_RELEASED.store(1, Ordering::SeqCst);
            release_in_stream_order(stream, tally.probe()).expect("released");
            LOGGER_RELEASED.store(2, Ordering::SeqCst);
        }
    };
    let context = context();
    let held = new_stream(&context);
    let gate = Gate::new(&context);
    let tally = Tally::new();
    let second = SECOND.get_or_init(|| new_stream(&context));
    let logged_tally = LOGGED_RELEASE.get_or_init(Tally::new);
    gate.hold(&held);
    release_in_stream_order(&held, tally.probe()).expect("released");
    calling_back_logger::on_every_record(call_back);
    // The drain's look at `held`'s track fails its query and logs, the queues still borrowed.
    controls.fail_next_calls(c"cuEventQuery", 1, CUresult::CUDA_ERROR_INVALID_VALUE);
    reclaim();
    calling_back_logger::stop();
    controls.fail_next_calls(c"cuEventQuery", 0, CUresult::CUDA_SUCCESS);
    assert_ne!(
        LOGGER_RELEASED.load(Ordering::SeqCst),
        0,
        "the logger was called"
    );
    gate.open();
    held.synchronize().expect("synchronized");
    second.synchronize().expect("synchronized");
    for _ in 0..100 {
        reclaim();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(tally.drops(), 1, "the value the test released");
    assert_eq!(
        (
            LOGGER_RELEASED.load(Ordering::SeqCst),
            logged_tally.drops(),
            metrics().stream_points().held
        ),
        (2, 1, 0),
        "the logger's release (2: returned), its value's drops, the values held"
    );
}

// ---- a track taken back after a look that logs -------------------------------------------

static THIRD: OnceLock<Stream> = OnceLock::new();

/// When every track of a context is lent, marking a point on a new stream looks at each lent
/// track to take back a quiet one, under the context's table lock and the track's own. That look
/// may log (here a query that failed); a logger that synchronizes a stream of the same context
/// (one of the calls `docs/RELIABILITY.md` allows a logger) must not wait for the lock its own
/// thread holds.
#[test]
fn marking_a_point_returns_when_a_lent_tracks_look_logs_and_the_logger_synchronizes() {
    let test = "marking_a_point_returns_when_a_lent_tracks_look_logs_and_the_logger_synchronizes";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "injected failures are a control of the software driver",
        );
    };
    suite::alone_in_child!(
        marking_a_point_returns_when_a_lent_tracks_look_logs_and_the_logger_synchronizes
    );
    calling_back_logger::install();
    let call_back = || {
        if let Some(stream) = THIRD.get() {
            let _ = stream.synchronize();
        }
    };
    let context = context();
    let first = new_stream(&context);
    let second = Arc::new(new_stream(&context));
    THIRD.get_or_init(|| new_stream(&context));
    let gate = Gate::new(&context);
    gate.hold(&first);
    // The context's one track, lent to `first`, with a point pending: never polled, so the
    // watcher does not look at it.
    let pending = stream_point(&first).expect("a point");
    calling_back_logger::on_every_record(call_back);
    let marked = returns_within(WEDGED_AFTER, {
        let second = Arc::clone(&second);
        move || {
            // `second` has no track: the lent one is looked at, and its query fails and logs.
            controls.fail_next_calls(c"cuEventQuery", 1, CUresult::CUDA_ERROR_INVALID_VALUE);
            let marked = stream_point(&second).map(drop);
            controls.fail_next_calls(c"cuEventQuery", 0, CUresult::CUDA_SUCCESS);
            marked
        }
    });
    if marked.is_none() {
        std::mem::forget((first, second, gate, pending));
        panic!(
            "stream_point on a new stream never returned: the take-back look at a lent track \
             logged under the context's track locks, and the logger's synchronize waits for them"
        );
    }
    assert_eq!(marked.expect("returned"), Ok(()));
}

// ---- looks for a later point and the paced looks of a releasing thread's drains ----------

/// A stream held at `first`, then a value released on it (its point passes once `first` opens),
/// an event recorded after it, then held again at `gate`, and a point after that; and `other`,
/// held for good, with a track of its own: marking on it never takes a track back (which would
/// look at the held stream's track afresh).
struct Starved {
    stream: Stream,
    other: Stream,
    first: Gate,
    gate: Gate,
    other_gate: Gate,
    passed: cuda_host::Event,
    tally: Arc<Tally>,
    later: Option<StreamPoint>,
}

fn starved() -> Starved {
    let context = context();
    let (stream, other) = (new_stream(&context), new_stream(&context));
    let (first, gate, other_gate) = (
        Gate::new(&context),
        Gate::new(&context),
        Gate::new(&context),
    );
    let tally = Tally::new();
    first.hold(&stream);
    other_gate.hold(&other);
    release_in_stream_order(&stream, tally.probe()).expect("released");
    let passed =
        cuda_host::Event::new(&context, cuda_host::EventFlags::DisableTiming).expect("event");
    passed.record(&stream).expect("recorded");
    gate.hold(&stream);
    let later = stream_point(&stream).expect("a point");
    // `other`'s track, made while every point of `stream` is pending: no track is quiet.
    release_in_stream_order(&other, ()).expect("released");
    Starved {
        stream,
        other,
        first,
        gate,
        other_gate,
        passed,
        tally,
        later: Some(later),
    }
}

impl Starved {
    /// Lets the stream pass the value's point, and waits (through the driver alone: a
    /// cuda-host query would drain) until it did.
    fn pass_the_values_point(&self) {
        self.first.open();
        wait_until("the stream to pass the released value's point", || {
            // SAFETY: a live event of the test's.
            let answer = unsafe {
                suite::test_driver()
                    .driver
                    .cuEventQuery(self.passed.as_raw())
            };
            answer == CUresult::CUDA_SUCCESS
        });
    }

    /// This thread goes on working, as an application does: a release on `other` every 100 µs,
    /// each a paced drain, for at most `bound`; how long until the value was dropped, if it was.
    fn work_until_dropped(&self, bound: Duration) -> Option<Duration> {
        let start = std::time::Instant::now();
        while start.elapsed() < bound {
            if self.tally.drops() == 1 {
                return Some(start.elapsed());
            }
            release_in_stream_order(&self.other, ()).expect("released");
            std::thread::sleep(Duration::from_micros(100));
        }
        None
    }

    fn finish(self, dropped: Option<Duration>, bound: Duration) {
        self.gate.open();
        self.other_gate.open();
        drop(self.later);
        self.stream.synchronize().expect("synchronized");
        self.other.synchronize().expect("synchronized");
        assert!(
            dropped.is_some(),
            "the value whose point the stream passed was still held after {bound:?} of this \
             thread's releases (paced drains)"
        );
    }
}

/// "released values by their thread's drains: ... by the drains of its launches, releases and
/// points at most every 50 µs" (`docs/RELIABILITY.md`). A paced look queries only when nobody
/// asked after the same points for 50 µs: a look for a later point that found it pending (here
/// [`StreamPoint::is_passed`] asked in a loop on another thread) says nothing of the value's.
#[test]
fn a_launching_thread_drops_a_passed_value_while_another_thread_asks_after_a_later_point() {
    // Alone in a process: another test's first point on a new stream of the shared context
    // looks afresh at every lent track (to take a quiet one back), which would see the value's.
    suite::alone_in_child!(
        a_launching_thread_drops_a_passed_value_while_another_thread_asks_after_a_later_point
    );
    const BOUND: Duration = Duration::from_millis(50);
    let mut starved = starved();
    let stop = Arc::new(AtomicBool::new(false));
    let asked = Arc::new(AtomicBool::new(false));
    let later = Arc::new(starved.later.take().expect("the later point"));
    let asker = std::thread::spawn({
        let (stop, asked, later) = (Arc::clone(&stop), Arc::clone(&asked), Arc::clone(&later));
        move || {
            while !stop.load(Ordering::SeqCst) {
                assert_eq!(later.is_passed(), Ok(false), "behind the gate");
                asked.store(true, Ordering::SeqCst);
            }
        }
    });
    wait_until("the asker to ask", || asked.load(Ordering::SeqCst));
    starved.pass_the_values_point();
    let dropped = starved.work_until_dropped(BOUND);
    stop.store(true, Ordering::SeqCst);
    asker.join().expect("the asker");
    drop(later);
    starved.finish(dropped, BOUND);
}

/// The same with the watcher as the looker: a future waits on the later point, and another
/// stream's futures, each behind 20 µs of work and woken one after the other, keep the watcher
/// spinning, so it looks at the track every 5 µs, each time for the future's point alone.
#[test]
fn a_launching_thread_drops_a_passed_value_while_a_future_waits_on_a_later_point() {
    const BOUND: Duration = Duration::from_millis(50);
    let test = "a_launching_thread_drops_a_passed_value_while_a_future_waits_on_a_later_point";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "a stand-in for short kernels is a control of the software driver",
        );
    };
    // Alone in a process, as the test before.
    suite::alone_in_child!(
        a_launching_thread_drops_a_passed_value_while_a_future_waits_on_a_later_point
    );
    let mut starved = starved();
    let busy = Arc::new(new_stream(&context()));
    assert!(
        std::pin::Pin::new(starved.later.as_mut().expect("the later point"))
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
            .is_pending()
    );
    let stop = Arc::new(AtomicBool::new(false));
    let worker = std::thread::spawn({
        let (busy, stop) = (Arc::clone(&busy), Arc::clone(&stop));
        move || {
            while !stop.load(Ordering::SeqCst) {
                controls.launch_sleep(&busy, Duration::from_micros(20));
                let _ = suite::wait::block_on(stream_point(&busy).expect("a point"));
            }
        }
    });
    std::thread::sleep(Duration::from_millis(5));
    starved.pass_the_values_point();
    let dropped = starved.work_until_dropped(BOUND);
    if let Some(after) = dropped {
        suite::figure(&format!("watcher variant: dropped after {after:?}"));
    }
    stop.store(true, Ordering::SeqCst);
    worker.join().expect("the worker");
    starved.finish(dropped, BOUND);
}

// ---- a waker's clone that calls cuda-host -------------------------------------------------

/// A waker whose `clone` asks cuda-host for its counts (a metrics hook, say).
struct CountingOnClone;

static CLONE_COUNTS: AtomicUsize = AtomicUsize::new(0);

fn counting_clone(_: *const ()) -> std::task::RawWaker {
    let _ = metrics().stream_points();
    CLONE_COUNTS.fetch_add(1, Ordering::SeqCst);
    std::task::RawWaker::new(std::ptr::null(), &COUNTING_VTABLE)
}
fn counting_noop(_: *const ()) {}
static COUNTING_VTABLE: std::task::RawWakerVTable =
    std::task::RawWakerVTable::new(counting_clone, counting_noop, counting_noop, counting_noop);

impl CountingOnClone {
    fn waker() -> std::task::Waker {
        // SAFETY: the vtable's functions ignore the data pointer and are thread-safe.
        unsafe {
            std::task::Waker::from_raw(std::task::RawWaker::new(std::ptr::null(), &COUNTING_VTABLE))
        }
    }
}

/// A waker's clone, as its drop and its wake, is the executor's code, which cuda-host runs
/// outside its locks: a clone that calls cuda-host (here `stream_point_counts`, which locks
/// every listed track's waiters) returns.
#[test]
fn polling_with_a_waker_whose_clone_asks_for_the_counts_returns() {
    // Alone in a process: the wedged poll holds the watcher's list, which every test's futures
    // need.
    suite::alone_in_child!(polling_with_a_waker_whose_clone_asks_for_the_counts_returns);
    let context = context();
    let stream = Arc::new(new_stream(&context));
    let gate = Gate::new(&context);
    gate.hold(&stream);
    // The track listed with the watcher.
    let mut first = Box::pin(stream_point(&stream).expect("a point"));
    assert!(
        first
            .as_mut()
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
            .is_pending()
    );
    let polled = returns_within(WEDGED_AFTER, {
        let stream = Arc::clone(&stream);
        move || {
            let mut second = Box::pin(stream_point(&stream).expect("a point"));
            let waker = CountingOnClone::waker();
            let pending = second
                .as_mut()
                .poll(&mut std::task::Context::from_waker(&waker))
                .is_pending();
            drop(second);
            pending
        }
    });
    if polled.is_none() {
        std::mem::forget((stream, gate, first));
        panic!(
            "a poll never returned: its registration clones the waker under the track's waiters \
             lock, and the clone's call to stream_point_counts waits for that lock"
        );
    }
    assert_eq!(polled, Some(true));
    gate.open();
}

/// A release on the legacy stream holds the special streams' launch group while it marks its
/// point, and may take a quiet track back after a look that logs: the log calls are made once the
/// group is let go, so a logger that begins a capture through cuda-host (which waits for the
/// special streams' launches) does not wait for the release its own thread is making.
#[test]
fn a_logger_called_by_a_take_back_look_in_a_release_on_the_legacy_stream_may_begin_a_capture() {
    let test =
        "a_logger_called_by_a_take_back_look_in_a_release_on_the_legacy_stream_may_begin_a_capture";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "injected failures are a control of the software driver",
        );
    };
    suite::alone_in_child!(
        a_logger_called_by_a_take_back_look_in_a_release_on_the_legacy_stream_may_begin_a_capture
    );
    calling_back_logger::install();
    let context = context();
    let first = new_stream(&context);
    let third = Arc::new(new_stream(&context));
    let gate = Gate::new(&context);
    gate.hold(&first);
    // The context's one track serves the first stream, with a point pending behind the gate.
    let _pending = stream_point(&first).expect("point");
    calling_back_logger::on_next_record_capture(&third);
    let returned = returns_within(Duration::from_secs(5), {
        let context = context.clone();
        move || {
            let legacy = Stream::legacy(&context);
            // The look taking the first stream's track back fails its query, and logs.
            controls.fail_next_calls(c"cuEventQuery", 1, CUresult::CUDA_ERROR_INVALID_VALUE);
            let _ = cuda_host::points::release_in_stream_order(&legacy, vec![0_u8; 8]);
        }
    })
    .is_some();
    gate.open();
    assert!(
        returned,
        "the release on the legacy stream never returned: the logger of the look taking the first \
         stream's track back ran inside the release, which holds the legacy stream's launch \
         group, and the capture its call back begins waits for that group (called back: {:?})",
        calling_back_logger::outcome()
    );
}

// ---- a synchronize when the capture mode cannot be exchanged --------------------------------

/// A synchronize that returned passed every point marked before it began: it needs no query,
/// so no relaxed capture interaction mode either. Where the driver refuses the mode's exchange,
/// the values the synchronize passed are still dropped by it, as documented.
#[test]
fn a_synchronize_drops_the_values_it_passed_though_the_capture_mode_cannot_be_exchanged() {
    let test =
        "a_synchronize_drops_the_values_it_passed_though_the_capture_mode_cannot_be_exchanged";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "failing a call on demand is a control of the software driver",
        );
    };
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    gate.hold(&stream);
    let tally = Tally::new();
    release_in_stream_order(&stream, tally.probe()).expect("released");
    gate.open();
    // This thread's next exchanges of the capture mode fail: a look's and the synchronize's.
    controls.fail_next_calls(
        c"cuThreadExchangeStreamCaptureMode",
        4,
        CUresult::CUDA_ERROR_OUT_OF_MEMORY,
    );
    stream.synchronize().expect("synchronize");
    let left = controls.armed_failures(c"cuThreadExchangeStreamCaptureMode");
    controls.fail_next_calls(
        c"cuThreadExchangeStreamCaptureMode",
        0,
        CUresult::CUDA_SUCCESS,
    );
    assert!(left < 4, "no exchange was tried");
    assert_eq!(
        tally.drops(),
        1,
        "the value the synchronize passed was not dropped by it"
    );
}

//! A logger that panics: cuda-host logs on the driver's thread, on the watcher's, in drains and in
//! calls documented never to panic, and a logger is user code. Each test installs a logger that
//! panics on every record while armed (`suite::panicking_logger`), in a child process of its own (a logger is
//! set once per process), then drives one place that logs.

use cuda_host::{
    Context, Stream, StreamFlags, points::release_in_stream_order, points::stream_point, reclaim,
};
use cuda_host_sys::{CUresult, CUstreamCaptureMode};
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::Duration;
use suite::{Gate, Tally, context, panicking_logger, wait_until};

fn new_stream(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking).expect("stream")
}

/// Counts its wakes.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Panics when woken.
struct PanickingWaker;

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        panic!("deliberate panic of a waker");
    }
}

fn poll_with<F: Future + Unpin>(future: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(future).poll(&mut TaskContext::from_waker(waker))
}

/// The calling thread's capture interaction mode, read by exchanging it for itself.
fn capture_mode() -> CUstreamCaptureMode {
    let driver = &suite::test_driver().driver;
    let mut mode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL;
    // SAFETY: a valid pointer to a mode.
    suite::ok("cuThreadExchangeStreamCaptureMode", unsafe {
        driver.cuThreadExchangeStreamCaptureMode(&mut mode)
    });
    let mut back = mode;
    // SAFETY: as above; gives the thread its mode back.
    suite::ok("cuThreadExchangeStreamCaptureMode", unsafe {
        driver.cuThreadExchangeStreamCaptureMode(&mut back)
    });
    mode
}

/// Runs `call` on a thread of its own and waits for it within the harness's bound, so that a
/// wedged call fails the test with `what` instead of hanging it.
fn returns_in_time(what: &str, call: impl FnOnce() + Send + 'static) {
    let done = Arc::new(AtomicBool::new(false));
    let finished = Arc::clone(&done);
    let thread = std::thread::spawn(move || {
        call();
        finished.store(true, Ordering::SeqCst);
    });
    wait_until(what, || done.load(Ordering::SeqCst) || thread.is_finished());
    thread.join().expect("the call returned without panicking");
}

#[test]
fn a_dropped_streams_failure_watch_survives_a_panicking_logger() {
    // Alone in a process: the logger and the context's failure stay with it.
    suite::alone_in_child!(a_dropped_streams_failure_watch_survives_a_panicking_logger);
    panicking_logger::install();
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    let fault = suite::kernels::Fault::load(context.driver());
    let tally = Tally::new();
    gate.hold(&stream);
    fault.launch(&stream);
    // Behind the fault: never runs, and only the watch of the dropped stream sees the failure,
    // on the driver's thread, where it logs that this function will never run.
    tally.launch_counted(&stream, 1);
    panicking_logger::arm(true);
    drop(stream);
    gate.open();
    wait_until("the watch to abandon the host function", || {
        reclaim();
        tally.drops() == 1
    });
    // The watch logs after it abandoned the function: the process must outlive its return.
    wait_until("the watch to log", || panicking_logger::panics() > 0);
    match suite::software::controls() {
        Some(controls) => wait_until("the watch to return", || {
            controls.live_objects().pending_host_functions == 0
        }),
        None => std::thread::sleep(Duration::from_millis(100)),
    }
    panicking_logger::arm(false);
    assert_eq!(tally.runs(), 0);
}

#[test]
fn a_look_that_logs_under_a_panicking_logger_neither_panics_nor_wedges_its_track() {
    let test = "a_look_that_logs_under_a_panicking_logger_neither_panics_nor_wedges_its_track";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "a failing event query is a control of the software driver",
        );
    };
    suite::alone_in_child!(
        a_look_that_logs_under_a_panicking_logger_neither_panics_nor_wedges_its_track
    );
    panicking_logger::install();
    let context = context();
    let stream = Arc::new(new_stream(&context));
    let gate = Gate::new(&context);
    let tally = Tally::new();
    gate.hold(&stream);
    release_in_stream_order(&stream, tally.probe()).expect("released");
    assert_eq!(
        capture_mode(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL
    );
    // The look's query fails (an ordinary error), and the look warns.
    controls.fail_next_calls(c"cuEventQuery", 1, CUresult::CUDA_ERROR_INVALID_VALUE);
    panicking_logger::arm(true);
    let reclaimed = catch_unwind(reclaim);
    assert_eq!(
        controls.armed_failures(c"cuEventQuery"),
        0,
        "the look queried"
    );
    assert!(panicking_logger::panics() > 0, "the look logged");
    assert!(reclaimed.is_ok(), "reclaim() panicked");
    assert_eq!(
        capture_mode(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
        "the look left the thread in another capture interaction mode"
    );
    // The same for a look whose change of mode the driver refuses.
    controls.fail_next_calls(
        c"cuThreadExchangeStreamCaptureMode",
        1,
        CUresult::CUDA_ERROR_INVALID_VALUE,
    );
    let panics = panicking_logger::panics();
    assert!(catch_unwind(reclaim).is_ok(), "reclaim() panicked");
    assert!(panicking_logger::panics() > panics, "the look logged");
    gate.open();
    // The track was left free: a synchronize, another point of the stream and of another
    // stream of the context, and the stream's drop all return.
    let synchronized = Arc::clone(&stream);
    returns_in_time("a synchronize after the look", move || {
        synchronized.synchronize().expect("synchronize");
    });
    stream.synchronize().expect("synchronize");
    assert_eq!(
        tally.drops(),
        1,
        "synchronize dropped the value released before"
    );
    let marked = Arc::clone(&stream);
    returns_in_time("a point after the look", move || {
        release_in_stream_order(&marked, ()).expect("released");
        marked.synchronize().expect("synchronize");
    });
    let other = new_stream(&context);
    returns_in_time("a point on another stream", move || {
        release_in_stream_order(&other, ()).expect("released");
        drop(other);
    });
    returns_in_time("the stream's drop", move || {
        drop(Arc::into_inner(stream).expect("the last reference"));
    });
    panicking_logger::arm(false);
}

#[test]
fn the_watcher_wakes_futures_after_a_look_of_its_logged_under_a_panicking_logger() {
    let test = "the_watcher_wakes_futures_after_a_look_of_its_logged_under_a_panicking_logger";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "a failing event query is a control of the software driver",
        );
    };
    suite::alone_in_child!(
        the_watcher_wakes_futures_after_a_look_of_its_logged_under_a_panicking_logger
    );
    panicking_logger::install();
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    gate.hold(&stream);
    let mut first = stream_point(&stream).expect("a point");
    let woken = Arc::new(CountingWaker::default());
    let waker = Waker::from(Arc::clone(&woken));
    assert!(poll_with(&mut first, &waker).is_pending());
    // The watcher's next query fails, and it warns, to a logger that panics.
    panicking_logger::arm(true);
    controls.fail_next_calls_any_thread(c"cuEventQuery", 1, CUresult::CUDA_ERROR_INVALID_VALUE);
    wait_until("the watcher to look", || {
        controls.armed_failures(c"cuEventQuery") == 0
    });
    wait_until("the watcher to log", || panicking_logger::panics() > 0);
    gate.open();
    wait_until("the watcher to wake the future", || {
        woken.0.load(Ordering::SeqCst) > 0
    });
    assert_eq!(poll_with(&mut first, &waker), Poll::Ready(Ok(())));
    // And a later future too.
    let gate = Gate::new(&context);
    gate.hold(&stream);
    let mut second = stream_point(&stream).expect("a point");
    let later = Arc::new(CountingWaker::default());
    let waker = Waker::from(Arc::clone(&later));
    assert!(poll_with(&mut second, &waker).is_pending());
    gate.open();
    wait_until("the watcher to wake a later future", || {
        later.0.load(Ordering::SeqCst) > 0
    });
    panicking_logger::arm(false);
}

#[test]
fn the_watcher_survives_a_panicking_waker_under_a_panicking_logger() {
    suite::alone_in_child!(the_watcher_survives_a_panicking_waker_under_a_panicking_logger);
    panicking_logger::install();
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    gate.hold(&stream);
    let mut first = stream_point(&stream).expect("a point");
    assert!(poll_with(&mut first, &Waker::from(Arc::new(PanickingWaker))).is_pending());
    // The watcher wakes it, the waker panics, and the watcher logs that, to a logger that panics.
    panicking_logger::arm(true);
    gate.open();
    wait_until("the watcher to log the waker's panic", || {
        panicking_logger::panics() > 0
    });
    let gate = Gate::new(&context);
    gate.hold(&stream);
    let mut second = stream_point(&stream).expect("a point");
    let woken = Arc::new(CountingWaker::default());
    let waker = Waker::from(Arc::clone(&woken));
    assert!(poll_with(&mut second, &waker).is_pending());
    gate.open();
    wait_until("the watcher to wake a later future", || {
        woken.0.load(Ordering::SeqCst) > 0
    });
    panicking_logger::arm(false);
    drop(first);
}

#[test]
fn dropping_a_capturing_stream_that_launched_under_a_panicking_logger_does_not_panic() {
    // Alone in a process: the logger stays with it.
    suite::alone_in_child!(
        dropping_a_capturing_stream_that_launched_under_a_panicking_logger_does_not_panic
    );
    panicking_logger::install();
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    tally.launch_counted(&stream, 1);
    stream.synchronize().expect("synchronize");
    // Other code captures the stream when it is dropped: it is not watched, and that is logged.
    let capture = suite::capture::Capture::begin(
        stream.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
    );
    panicking_logger::arm(true);
    let dropped = catch_unwind(AssertUnwindSafe(|| drop(stream)));
    panicking_logger::arm(false);
    std::mem::forget(capture); // its stream is gone, and the capture with it
    assert!(dropped.is_ok(), "the stream's drop panicked");
    assert!(panicking_logger::panics() > 0, "the drop logged");
    assert_eq!((tally.runs(), tally.drops()), (1, 1));
}

#[test]
fn host_copy_fn_handed_overlapping_buffers_under_a_panicking_logger_neither_unwinds_nor_copies() {
    suite::alone_in_child!(
        host_copy_fn_handed_overlapping_buffers_under_a_panicking_logger_neither_unwinds_nor_copies
    );
    panicking_logger::install();
    let mut buffer: Vec<u8> = (0..64).collect();
    let base = buffer.as_mut_ptr();
    let copy = cuda_host::host_copy::HostCopy {
        source: base.cast_const().cast(),
        // SAFETY: 16 bytes into a 64-byte buffer.
        destination: unsafe { base.add(16) }.cast(),
        length: 32,
    };
    panicking_logger::arm(true);
    let called = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: a valid description of memory this test owns; the function refuses the
        // overlap and copies nothing.
        unsafe { cuda_host::host_copy::host_copy_fn(std::ptr::from_ref(&copy).cast_mut().cast()) }
    }));
    panicking_logger::arm(false);
    assert!(called.is_ok(), "host_copy_fn unwound");
    assert!(panicking_logger::panics() >= 1, "the logger was not called");
    assert_eq!(
        buffer,
        (0..64).collect::<Vec<u8>>(),
        "the overlapping copy wrote"
    );
}

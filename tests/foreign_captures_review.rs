//! What `host_launch_replayable` must keep in captures other code began, where it did not: the
//! capture stays valid whatever else the calling thread had to drop, and a capture begun through
//! a `GraphBuilder` that another library's safe API ends is no longer the builder's to guard.
//! Captures take turns ([`suite::capture_lock`]).

use cuda_host::{Context, Event, EventFlags, Stream, StreamFlags, host_launch};
use cuda_host_sys::CUstreamCaptureMode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use suite::capture::Capture;
use suite::{Tally, capture_lock, context};

fn new_stream(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking).expect("stream")
}

/// A value whose `Drop` asks whether its work finished (`cuEventQuery`), as a pool recycling a
/// buffer does: a call a capture of the dropping thread forbids.
struct QueriesOnDrop {
    event: Event,
    answered: Arc<Mutex<Option<bool>>>,
}

impl Drop for QueriesOnDrop {
    fn drop(&mut self) {
        *self.answered.lock().unwrap() = Some(self.event.is_complete().is_ok());
    }
}

/// The calling thread's capture other code began, in thread-local mode, and a host function
/// this thread launched before it that has finished: its record waits in this thread's inbox.
/// Adding a replayable callable to the capture must not drop that record then (its `Drop` is
/// user code, which the capture may forbid): the capture must stay valid.
#[test]
fn a_replayable_launch_into_a_foreign_capture_drops_nothing_that_could_invalidate_it() {
    let _alone = capture_lock();
    let context = context();
    let other = new_stream(&context);
    let stream = new_stream(&context);
    let event = Event::new(&context, EventFlags::DisableTiming).expect("event");
    event.record(&other).expect("record");
    other.synchronize().expect("synchronize");
    let answered = Arc::new(Mutex::new(None));
    let value = QueriesOnDrop {
        event,
        answered: Arc::clone(&answered),
    };
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    host_launch(&other, move || {
        let _held = &value;
        flag.store(true, Ordering::SeqCst);
    })
    .expect("launch");
    // Waited for without a cuda-host call, which would drop the record before the capture.
    suite::wait_until("the host function to run", || ran.load(Ordering::SeqCst));
    std::thread::sleep(Duration::from_millis(20));

    let capture = Capture::begin(
        stream.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    );
    let tally = Tally::new();
    let probe = tally.probe();
    // SAFETY: this thread ends the capture, after the call.
    unsafe { cuda_host::host_launch_replayable(&stream, move || probe.ran()) }
        .expect("added to the capture");
    let dropped_during_capture = answered.lock().unwrap().is_some();
    let ended = capture.end();
    assert!(
        ended.is_ok(),
        "the capture was invalidated (a record dropped during it: {dropped_during_capture}): {:?}",
        ended.err()
    );
    drop(ended);
    cuda_host::reclaim();
    assert_eq!(
        *answered.lock().unwrap(),
        Some(true),
        "dropped after the capture"
    );
}

/// A `GraphBuilder`'s capture, in relaxed mode, of a stream cudarc made: cudarc's safe
/// `end_capture` may end it from another thread, and the graph it then owns goes with its
/// `CudaGraph`. The builder's own end waits for a node being added (`capture::ending`), but
/// cudarc's does not, so the builder's safe `callback`, held between its look at the capture
/// and its use of the graph's handle, uses the handle of a graph destroyed meanwhile (a use
/// after free on the real driver; the software driver counts it).
#[test]
fn a_builders_capture_that_cudarc_ends_meanwhile_is_not_used_after_its_graph_is_gone() {
    let test = "a_builders_capture_that_cudarc_ends_meanwhile_is_not_used_after_its_graph_is_gone";
    if !suite::runs_here_with_libcuda(module_path!(), test, false, &[]) {
        return;
    }
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "holding a call inside the driver is a software-driver control",
        );
    };
    let _alone = capture_lock();
    let cudarc_context = cudarc::driver::CudaContext::new(0).expect("cudarc's context");
    let context = Context::from_cudarc(&suite::test_driver().driver, &cudarc_context)
        .expect("a Context from cudarc's");
    let cudarc_stream = cudarc_context.new_stream().expect("cudarc's stream");
    let stream = Stream::from_cudarc(&context, &cudarc_stream).expect("a Stream from cudarc's");
    let stale_before = controls.stale_handle_uses();
    let builder = cuda_host::GraphBuilder::begin(&stream, cuda_host::CaptureMode::Relaxed)
        .expect("the builder's capture");
    // The builder's callback is held inside the driver between its look and the graph's use.
    controls.delay_next_calls(c"cuUserObjectCreate", 1, Duration::from_millis(300));
    let added = std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            let graph = cudarc_stream
                .end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0))
                .expect("cudarc ends the capture");
            drop(graph);
        });
        builder.callback(|| {})
    });
    drop(builder);
    let stale = controls.stale_handle_uses() - stale_before;
    assert_eq!(
        stale, 0,
        "the builder used the graph of a capture cudarc ended and destroyed ({added:?})"
    );
}

/// With the `nvtx` feature, the first graph record a process makes attaches the profiler, and
/// without one logs that none is set: user code (the logger, a profiler's initializers). A
/// replayable launch made that record while it held the lock that a builder's end takes for
/// writing, so a logger ending a capture through cuda-host waited for itself.
#[cfg(feature = "nvtx")]
#[test]
fn a_logger_run_by_a_replayable_launch_may_end_a_capture_through_cuda_host() {
    suite::alone_in_child!(a_logger_run_by_a_replayable_launch_may_end_a_capture_through_cuda_host);
    static STREAM: std::sync::OnceLock<Stream> = std::sync::OnceLock::new();
    static ENDED: AtomicBool = AtomicBool::new(false);
    struct CapturingLogger;
    impl log::Log for CapturingLogger {
        fn enabled(&self, _: &log::Metadata<'_>) -> bool {
            true
        }
        fn log(&self, record: &log::Record<'_>) {
            if !record.args().to_string().contains("NVTX_INJECTION64_PATH") {
                return;
            }
            let stream = STREAM.get().expect("the logger's stream");
            let builder = cuda_host::GraphBuilder::begin(stream, cuda_host::CaptureMode::Relaxed)
                .expect("the logger's capture");
            drop(builder.end().expect("the logger's capture ends"));
            ENDED.store(true, Ordering::SeqCst);
        }
        fn flush(&self) {}
    }
    let context = context();
    STREAM.set(new_stream(&context)).expect("set once");
    log::set_logger(&CapturingLogger).expect("the only logger");
    log::set_max_level(log::LevelFilter::Trace);
    let stream = new_stream(&context);
    let capture = Capture::begin(
        stream.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
    );
    let added = Arc::new(AtomicBool::new(false));
    let done = Arc::clone(&added);
    let adding = std::thread::spawn(move || {
        // SAFETY: the capture ends only after the call.
        let result = unsafe { cuda_host::host_launch_replayable(&stream, || {}) };
        done.store(true, Ordering::SeqCst);
        (result, stream)
    });
    suite::wait_until(
        "the replayable launch to return (not wait for its own logger)",
        || added.load(Ordering::SeqCst),
    );
    let (result, _stream) = adding.join().expect("the adding thread");
    result.expect("added");
    assert!(ENDED.load(Ordering::SeqCst), "the logger ran");
    drop(capture.end().expect("the capture is still valid"));
}

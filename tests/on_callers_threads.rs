//! Work cuda-host does on a caller's thread that the driver's thread could do too: the probe a
//! context's last value makes (whether the context failed, for records no watch covers), and
//! `host_copy_fn` called directly rather than by the driver. Tests that set a logger or fail a
//! context run alone in a child process. Every wait is bounded.

use cuda_host::{
    Stream, StreamFlags, graph::CaptureMode, graph::GraphBuilder, host_copy::HostCopy, host_launch,
};
use cuda_host_sys::CUresult;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use suite::recording_logger::{self as logger, Pick};
use suite::{Gate, Tally};

/// How long a test waits for what the library promises before it calls it broken: far more than
/// any of these take when they work (milliseconds).
const BOUND: Duration = Duration::from_secs(5);

fn device() -> cuda_host::Device {
    cuda_host::Device::get(&suite::test_driver().driver, 0).expect("device 0")
}

// ---- the last value's probe -------------------------------------------------------------------

/// The reference test's order (failure first, then the last value's drop); with `inject`, the
/// probe's `cuEventCreate` answers a transient error (out of memory). Whether the record stayed
/// stranded past [`BOUND`].
fn reference_order_strands(inject: bool) -> bool {
    let controls = suite::software::expect_controls();
    let device = device();
    // The suite's value of the primary context, which lives as long as the process.
    let first = suite::context();
    let second = device.primary_context().expect("second value");
    let gate = Gate::new(&first);
    let tally = Tally::new();
    let mut stranded = false;
    std::thread::scope(|scope| {
        let (stream, launcher) =
            suite::per_thread::Launcher::spawn(scope, second.clone(), &gate, &tally);
        let launcher_drops = || {
            launcher.reclaim();
            tally.drops()
        };
        second.bind_to_thread().expect("the context binds");
        drop(stream);
        let driver = first.driver();
        // SAFETY: this thread's per-thread stream of its current context.
        let passed = unsafe { driver.cuStreamSynchronize(cuda_host_sys::CU_STREAM_PER_THREAD) };
        assert_eq!(passed, CUresult::CUDA_SUCCESS);
        controls.set_sticky_error(&first, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
        gate.open();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(launcher_drops(), 0, "nothing answered the failure yet");
        if inject {
            // The probe's event cannot be made this once.
            controls.fail_next_calls(c"cuEventCreate", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        }
        drop(second);
        stranded = !suite::wait::holds_within(BOUND, || launcher_drops() == 1);
        launcher.finish();
    });
    stranded
}

/// The reference order with the probe's `cuEventCreate` answering a transient error (out of
/// memory): the probe cannot tell, so the record waits for a call that answers the failure, and
/// the last value says so in a warning.
#[test]
fn a_last_value_that_cannot_ask_whether_its_context_failed_says_so() {
    let test = "a_last_value_that_cannot_ask_whether_its_context_failed_says_so";
    if suite::software::controls().is_none() {
        return suite::skip(test, "fault injection is a control of the software driver");
    }
    suite::alone_in_child!(a_last_value_that_cannot_ask_whether_its_context_failed_says_so);
    logger::install();
    logger::pick(Pick::Containing("cannot ask whether a context failed"));
    assert!(
        reference_order_strands(true),
        "the probe could not ask, yet the record went"
    );
    let seen = logger::seen();
    assert_eq!(seen.len(), 1, "one warning: {seen:?}");
}

/// The reference order: a failed context's last value finds the failure and reclaims the record
/// of a per-thread stream whose value another thread dropped.
#[test]
fn the_last_value_of_a_failed_context_reclaims_a_record_no_watch_covers() {
    let test = "the_last_value_of_a_failed_context_reclaims_a_record_no_watch_covers";
    if suite::software::controls().is_none() {
        return suite::skip(test, "sticky errors are a control of the software driver");
    }
    suite::alone_in_child!(the_last_value_of_a_failed_context_reclaims_a_record_no_watch_covers);
    assert!(!reference_order_strands(false), "the probe reclaims it");
}

/// The probe runs while another thread captures in global mode through a `GraphBuilder`, for a
/// failed context other than the captured one: the capture must stay intact, the abandoned record
/// is reclaimed after the capture, and the thread's current context is left as it was.
#[test]
fn the_last_values_probe_leaves_another_threads_global_builder_capture_intact() {
    let test = "the_last_values_probe_leaves_another_threads_global_builder_capture_intact";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "sticky errors are a control of the software driver");
    };
    suite::alone_in_child!(
        the_last_values_probe_leaves_another_threads_global_builder_capture_intact
    );
    let captured_context = suite::context();
    let captured = Stream::new(&captured_context, StreamFlags::NonBlocking).expect("stream");
    // The gate's words come from the suite's pool, allocated in a context that outlives them.
    let gate = Gate::new(&captured_context);
    let fresh = controls.fresh_context(&device());
    let tally = Tally::new();
    {
        let stream = Stream::new(&fresh, StreamFlags::NonBlocking).expect("stream");
        gate.hold(&stream);
        tally.launch_counted(&stream, 1);
        // Dropped: its watch waits behind the gate too.
    }
    controls.set_sticky_error(&fresh, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    let driver = &suite::test_driver().driver;
    let mut current_before = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    suite::ok("cuCtxGetCurrent", unsafe {
        driver.cuCtxGetCurrent(&mut current_before)
    });
    let (begun_tx, begun_rx) = std::sync::mpsc::channel();
    let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
    let ended = std::thread::scope(|scope| {
        let captured = &captured;
        let capturer = scope.spawn(move || {
            let builder = GraphBuilder::begin(captured, CaptureMode::Global).expect("begun");
            begun_tx.send(()).expect("the test waits");
            end_rx.recv_timeout(BOUND).expect("told to end");
            builder.end().map(|_| ()).map_err(|e| format!("{e:?}"))
        });
        begun_rx.recv_timeout(BOUND).expect("the capture began");
        drop(fresh); // the last value: its probe answers the failure
        let drops_during = tally.drops();
        end_tx.send(()).expect("the capturer waits");
        let ended = capturer.join().expect("the capturer");
        (ended, drops_during)
    });
    let mut current_after = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    suite::ok("cuCtxGetCurrent", unsafe {
        driver.cuCtxGetCurrent(&mut current_after)
    });
    assert_eq!(ended.1, 0, "nothing was dropped during the global capture");
    assert_eq!(ended.0, Ok(()), "the global capture ended in a graph");
    assert_eq!(
        current_after, current_before,
        "the current context is as it was"
    );
    assert!(
        suite::wait::holds_within(BOUND, || {
            cuda_host::reclaim();
            tally.drops() == 1
        }),
        "the record the probe abandoned is dropped after the capture"
    );
    assert_eq!(tally.runs(), 0);
}

/// Many short-lived context values, each dropped while a record of it is still queued: every
/// probe leaves no event behind, allocates no pinned memory, and leaves the thread's current
/// context (another context) as it was.
#[test]
fn short_lived_context_values_leave_no_probe_event_pinned_memory_or_changed_current_context() {
    let test =
        "short_lived_context_values_leave_no_probe_event_pinned_memory_or_changed_current_context";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "live counts are a control of the software driver");
    };
    suite::alone_in_child!(
        short_lived_context_values_leave_no_probe_event_pinned_memory_or_changed_current_context
    );
    let device = device();
    let current = controls.fresh_context(&device);
    current.bind_to_thread().expect("binds");
    let gate = Gate::new(&current);
    let tally = Tally::new();
    let before = controls.inner().live_objects().expect("live");
    let driver = &suite::test_driver().driver;
    let base = device.primary_context().expect("primary");
    let mut kept_streams = Vec::new();
    for _ in 0..50 {
        // The stream belongs to `base`; a short-lived value launches through a wrapper of it,
        // and both go while the record is queued: only the record keeps the value's state.
        let owned = Stream::new(&base, StreamFlags::NonBlocking).expect("stream");
        let value = device.primary_context().expect("a value");
        // SAFETY: `owned` outlives the wrapper (kept until the end of the test).
        let wrapper = unsafe { Stream::borrow_raw(&value, owned.as_raw()) };
        gate.hold(&wrapper);
        tally.launch_counted(&wrapper, 1);
        drop(wrapper);
        kept_streams.push(owned);
        drop(value);
        let mut now = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        suite::ok("cuCtxGetCurrent", unsafe {
            driver.cuCtxGetCurrent(&mut now)
        });
        assert_eq!(now, current.as_raw(), "the current context is as it was");
    }
    let after = controls.inner().live_objects().expect("live");
    assert_eq!(after.events, before.events, "no probe event left behind");
    assert_eq!(
        after.host_allocations, before.host_allocations,
        "no pinned memory allocated by the probes"
    );
    gate.open();
    assert!(
        suite::wait::holds_within(BOUND, || {
            cuda_host::reclaim();
            tally.drops() == 50
        }),
        "every record ran and was dropped"
    );
    assert_eq!(tally.runs(), 50);
}

// ---- host_copy_fn called directly --------------------------------------------------------------

/// An overlapping copy description, as C code would hand `host_copy_fn`.
fn overlapping_copy(buffer: &mut [u8; 16]) -> HostCopy {
    let base = buffer.as_mut_ptr();
    HostCopy {
        source: base.cast::<c_void>().cast_const(),
        // SAFETY: in bounds of the buffer.
        destination: unsafe { base.add(4) }.cast(),
        length: 8,
    }
}

/// `host_copy_fn` called directly on a caller's thread (a C library's own executor, a CPU
/// fallback) with overlapping buffers logs there as that thread's own code: the logger's panic
/// payload is dropped there when the call returns, not handed to another thread.
#[test]
fn host_copy_fn_called_on_a_callers_thread_drops_its_loggers_payload_there() {
    suite::alone_in_child!(host_copy_fn_called_on_a_callers_thread_drops_its_loggers_payload_there);
    let _ = suite::context();
    logger::install();
    logger::pick(Pick::Containing("host_copy_fn copied nothing"));
    logger::panic_on_picked(true);
    let caller = std::thread::spawn(|| {
        let mut buffer = [7u8; 16];
        let mut copy = overlapping_copy(&mut buffer);
        // SAFETY: a valid description of readable and writable memory nothing else touches.
        unsafe { cuda_host::host_copy::host_copy_fn((&raw mut copy).cast()) };
        let dropped_here = logger::payloads_dropped_on();
        (std::thread::current().id(), dropped_here)
    });
    let (caller_id, dropped_by_return) = caller.join().expect("the caller");
    assert_eq!(logger::payloads_made(), 1, "the logger panicked once");
    // Another thread drains.
    logger::wait_for_a_dropped_payload();
    let dropped_on = logger::payloads_dropped_on();
    let seen = logger::seen();
    assert_eq!(
        dropped_by_return,
        vec![caller_id],
        "the payload of the logger's panic on the calling user thread {caller_id:?} was not \
         dropped there when host_copy_fn returned; it was dropped later on {dropped_on:?} (this \
         test's main thread is {:?}); the logger saw (message, thread, in_host_function()): \
         {seen:?}",
        std::thread::current().id()
    );
}

/// As above: a logger that launches a host function from `host_copy_fn`'s log call on a
/// caller's thread is not refused as if inside a host function.
#[test]
fn host_copy_fn_called_on_a_callers_thread_lets_its_logger_launch() {
    suite::alone_in_child!(host_copy_fn_called_on_a_callers_thread_lets_its_logger_launch);
    let context = suite::context();
    let stream = Arc::new(Stream::new(&context, StreamFlags::NonBlocking).expect("stream"));
    logger::install();
    logger::pick(Pick::Containing("host_copy_fn copied nothing"));
    let tally = Tally::new();
    let outcome: Arc<Mutex<Option<Result<(), String>>>> = Arc::new(Mutex::new(None));
    logger::call_back_once({
        let (stream, tally, outcome) = (
            Arc::clone(&stream),
            Arc::clone(&tally),
            Arc::clone(&outcome),
        );
        move || {
            let probe = tally.probe();
            let launched = host_launch(&stream, move || probe.ran());
            *outcome.lock().unwrap() = Some(launched.map_err(|e| format!("{e:?}")));
        }
    });
    let caller = std::thread::spawn({
        let (stream, tally) = (Arc::clone(&stream), Arc::clone(&tally));
        move || {
            let mut buffer = [7u8; 16];
            let mut copy = overlapping_copy(&mut buffer);
            // SAFETY: a valid description of readable and writable memory nothing else touches.
            unsafe { cuda_host::host_copy::host_copy_fn((&raw mut copy).cast()) };
            // The launch's closure is this thread's to drop, while it lives.
            stream.synchronize().expect("synchronize");
            suite::wait::holds_within(BOUND, || {
                cuda_host::reclaim();
                tally.drops() == 1
            });
            std::thread::current().id()
        }
    });
    let caller_id = caller.join().expect("the caller");
    let launched = outcome.lock().unwrap().clone();
    let drop_threads = tally.drop_threads();
    let seen = logger::seen();
    assert!(
        matches!(launched, Some(Ok(()))) && drop_threads == vec![caller_id],
        "a logger on a user thread ({caller_id:?}) that called host_copy_fn directly: its \
         host_launch answered {launched:?}, and the closure's value was dropped on \
         {drop_threads:?} (main thread {:?}); the logger saw (message, thread, \
         in_host_function()): {seen:?}",
        std::thread::current().id()
    );
}

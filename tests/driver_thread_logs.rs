//! cuda-host's own log calls on the driver's thread (a stale ticket's, a function of a failed
//! context not run, a dropped stream's failure watch) are made with the thread marked, as the
//! functions it runs are: a logger's panic payload goes to a caller's thread, and a logger's
//! call back into cuda-host is refused rather than reaching the driver from its own thread.
//!
//! Each test runs alone in a child process: a logger is set once per process, and a sticky
//! error stays with it. Every wait is bounded.

use cuda_host::{Context, Stream, StreamFlags, host_launch};
use cuda_host_sys::CUresult;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::ThreadId;
use std::time::Duration;
use suite::recording_logger::{self as logger, Pick};
use suite::software::Controls;
use suite::{Gate, context};

/// A fresh context (its failure stays its own) with a stream whose work waits behind a gate,
/// and the driver's host-function thread, learnt from a host function on the stream before the
/// gate was set.
/// Destructure it with `fresh` first: bindings drop in reverse, so the gate (whose word may be
/// memory of the fresh context) and the stream go before the context does.
struct Held {
    stream: Stream,
    gate: Gate,
    driver: ThreadId,
    fresh: Context,
}

fn hold_a_fresh_stream(controls: &Controls) -> Held {
    let device = cuda_host::Device::get(context().driver(), 0).expect("device");
    let fresh = controls.fresh_context(&device);
    let stream = Stream::new(&fresh, StreamFlags::NonBlocking).expect("stream");
    let (sender, told) = mpsc::channel();
    host_launch(&stream, move || {
        let _ = sender.send(std::thread::current().id());
    })
    .expect("launched");
    let driver = told
        .recv_timeout(suite::TIMEOUT)
        .expect("the host function ran");
    stream.synchronize().expect("synchronize");
    let gate = Gate::new(&fresh);
    gate.hold(&stream);
    Held {
        stream,
        gate,
        driver,
        fresh,
    }
}

/// Checks that no payload of the logger's panics was dropped on the driver's thread.
fn assert_no_payload_dropped_on(driver: ThreadId) {
    let dropped_on = logger::payloads_dropped_on();
    let seen = logger::seen();
    assert!(
        !dropped_on.contains(&driver),
        "a logger's panic payload was dropped on the driver's thread ({driver:?}); the records \
         the logger saw there: {seen:?}"
    );
}

// ---- the log calls -----------------------------------------------------------------------------

/// `run_once_host_fn` logs on the driver's thread when the driver calls a launch cuda-host
/// abandoned after it saw the context fail (its ticket is stale). The logger is user code: its
/// panic is caught, and by `docs/RELIABILITY.md` (the `run_once_host_fn` row: "a payload is
/// dropped on a caller's thread") and `enqueue.rs` ("No user value is dropped there") the
/// payload must not be dropped on the driver's thread. The log call is made outside
/// `run_marked`, with the thread unmarked, so `contain::dispose` drops it there at once.
#[test]
fn a_logger_payload_from_the_trampolines_stale_ticket_log_is_not_dropped_on_the_drivers_thread() {
    let test = "a_logger_payload_from_the_trampolines_stale_ticket_log_is_not_dropped_on_the_drivers_thread";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "fault injection is a control of the software driver");
    };
    suite::alone_in_child!(
        a_logger_payload_from_the_trampolines_stale_ticket_log_is_not_dropped_on_the_drivers_thread
    );
    logger::install();
    logger::panic_on_picked(true);
    let Held {
        fresh: _fresh,
        stream,
        gate,
        driver,
    } = hold_a_fresh_stream(controls);
    let ran = std::sync::Arc::new(AtomicBool::new(false));
    host_launch(&stream, {
        let ran = std::sync::Arc::clone(&ran);
        move || ran.store(true, Ordering::SeqCst)
    })
    .expect("launched");
    // cuda-host sees the context fail (a call answers a sticky error) and abandons the launch;
    // the driver itself still runs the function, whose ticket is now stale.
    controls.fail_next_calls(c"cuStreamQuery", 1, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    let answered = stream.is_complete();
    assert_eq!(
        answered.map_err(|error| error.driver_result()),
        Err(Some(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS)),
        "the injected failure"
    );
    logger::pick(Pick::OnThread(driver));
    gate.open();
    logger::wait_for_a_dropped_payload();
    assert!(!ran.load(Ordering::SeqCst), "the abandoned function ran");
    assert_no_payload_dropped_on(driver);
}

/// As above, with a logger that calls cuda-host back (`docs/RELIABILITY.md`, "Loggers that call
/// cuda-host": one that synchronizes must go on; "When nothing is dropped": on the driver's
/// thread "cuda-host calls return `Error::InHostFunction`"). The stale-ticket log call runs on the
/// driver's thread with no mark, so the logger's `Stream::synchronize` reaches
/// `cuStreamSynchronize` from the driver's own host-function thread, and waits for the very host
/// function that thread is running.
#[test]
fn a_logger_that_synchronizes_from_the_trampolines_stale_ticket_log_does_not_deadlock() {
    let test = "a_logger_that_synchronizes_from_the_trampolines_stale_ticket_log_does_not_deadlock";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "fault injection is a control of the software driver");
    };
    suite::alone_in_child!(
        a_logger_that_synchronizes_from_the_trampolines_stale_ticket_log_does_not_deadlock
    );
    logger::install();
    let Held {
        fresh,
        stream,
        gate,
        driver,
    } = hold_a_fresh_stream(controls);
    let stream = std::sync::Arc::new(stream);
    host_launch(&*stream, || {}).expect("launched");
    let (sender, answered) = mpsc::channel();
    logger::call_back_once({
        let stream = std::sync::Arc::clone(&stream);
        move || {
            let outcome = stream.synchronize();
            let _ = sender.send(outcome);
        }
    });
    controls.fail_next_calls(c"cuStreamQuery", 1, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    assert!(stream.is_complete().is_err(), "the injected failure");
    logger::pick(Pick::OnThread(driver));
    gate.open();
    let outcome = answered.recv_timeout(Duration::from_secs(10));
    let seen = logger::seen();
    match outcome {
        Ok(Err(cuda_host::Error::InHostFunction { .. })) => {}
        Ok(other) => panic!(
            "a logger's call back on the driver's thread reached the driver ({other:?}); \
             records seen there: {seen:?}"
        ),
        Err(_) => {
            // Their drops would wait on the wedged driver thread.
            std::mem::forget((stream, gate, fresh));
            panic!(
                "a logger's Stream::synchronize, called back from the log call of a stale \
                 ticket on the driver's thread, did not return within 10 s: the driver's thread \
                 waits for itself; records seen there: {seen:?}"
            );
        }
    }
}

/// The failure watch of a dropped stream (`context_failure::failure_watch`, a stream callback on
/// the driver's thread) learns the context failed and logs how many host functions will never
/// run. Its logger's panic payload must not be dropped there either (the module's own comment:
/// "a caught panic's payload is dropped later on a caller's thread"; `docs/RELIABILITY.md`: "Never
/// on the driver's thread"). A real sticky error, no injected call failure.
#[test]
fn a_logger_payload_from_a_dropped_streams_failure_watch_is_not_dropped_on_the_drivers_thread() {
    let test = "a_logger_payload_from_a_dropped_streams_failure_watch_is_not_dropped_on_the_drivers_thread";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "sticky errors are a control of the software driver");
    };
    suite::alone_in_child!(
        a_logger_payload_from_a_dropped_streams_failure_watch_is_not_dropped_on_the_drivers_thread
    );
    logger::install();
    logger::panic_on_picked(true);
    let Held {
        fresh,
        stream,
        gate,
        driver,
    } = hold_a_fresh_stream(controls);
    host_launch(&stream, || {}).expect("launched");
    logger::pick(Pick::OnThread(driver));
    // The dropped stream is watched for its context's failure: a callback after its work.
    drop(stream);
    controls.set_sticky_error(&fresh, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    logger::wait_for_a_dropped_payload();
    drop(gate);
    assert_no_payload_dropped_on(driver);
}

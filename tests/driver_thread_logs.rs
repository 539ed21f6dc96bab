//! cuda-host's own log calls on the driver's thread (a stale ticket's, a function of a failed
//! context not run, a dropped stream's failure watch) are made with the thread marked, as the
//! functions it runs are: a logger's panic payload goes to a caller's thread, and a logger's
//! call back into cuda-host is refused rather than reaching the driver from its own thread.
//!
//! Each test runs alone in a child process: a logger is set once per process, and a sticky
//! error stays with it. Every wait is bounded.

use cuda_host::{Context, Stream, StreamFlags, host_launch};
use cuda_host_sys::CUresult;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::thread::ThreadId;
use std::time::Duration;
use suite::{Gate, context, wait_until};

fn new_stream(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking).expect("stream")
}

// ---- a logger that acts on the driver's thread ---------------------------------------------

/// The thread the driver runs host functions and stream callbacks on, once a host function
/// told it.
static DRIVER_THREAD: OnceLock<ThreadId> = OnceLock::new();
/// Whether the logger acts on the driver's thread.
static ARMED: AtomicBool = AtomicBool::new(false);
/// Records the logger saw on the driver's thread, with whether cuda-host said the thread was
/// inside a host function then.
static SEEN_ON_DRIVER: Mutex<Vec<(String, bool)>> = Mutex::new(Vec::new());
/// The threads payloads of the logger's panics were dropped on.
static PAYLOADS_DROPPED_ON: Mutex<Vec<ThreadId>> = Mutex::new(Vec::new());
/// How many payloads the logger panicked with.
static PAYLOADS_MADE: AtomicUsize = AtomicUsize::new(0);

/// What the logger does on the driver's thread while armed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OnDriver {
    /// Panics with a [`Payload`].
    Panic,
    /// Calls the hook set in [`CALL_BACK`].
    CallBack,
}

static ON_DRIVER: Mutex<Option<OnDriver>> = Mutex::new(None);
#[allow(clippy::type_complexity)]
static CALL_BACK: Mutex<Option<Box<dyn Fn() + Send>>> = Mutex::new(None);

/// A panic payload: a user's value whose `Drop` notes the thread it runs on.
struct Payload;

impl Drop for Payload {
    fn drop(&mut self) {
        PAYLOADS_DROPPED_ON
            .lock()
            .expect("the record")
            .push(std::thread::current().id());
    }
}

struct ReviewLogger;

impl log::Log for ReviewLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        if !ARMED.load(Ordering::SeqCst) {
            return;
        }
        if DRIVER_THREAD.get() != Some(&std::thread::current().id()) {
            return;
        }
        SEEN_ON_DRIVER
            .lock()
            .expect("the record")
            .push((record.args().to_string(), cuda_host::in_host_function()));
        let on_driver = *ON_DRIVER.lock().expect("the mode");
        match on_driver {
            Some(OnDriver::Panic) => {
                PAYLOADS_MADE.fetch_add(1, Ordering::SeqCst);
                std::panic::panic_any(Payload);
            }
            Some(OnDriver::CallBack) => {
                let call = CALL_BACK.lock().expect("the call").take();
                if let Some(call) = call {
                    call();
                }
            }
            None => {}
        }
    }

    fn flush(&self) {}
}

/// Installs the review logger for every level, keeping the payload panics quiet.
fn install_logger(on_driver: OnDriver) {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<Payload>().is_none()
            && !suite::quiet::is_deliberate(info.payload())
        {
            report(info);
        }
    }));
    log::set_logger(&ReviewLogger).expect("the only logger of this process");
    log::set_max_level(log::LevelFilter::Trace);
    *ON_DRIVER.lock().expect("the mode") = Some(on_driver);
}

/// Learns the driver's host-function thread from a host function on `stream`.
fn learn_driver_thread(stream: &Stream) -> ThreadId {
    let (sender, told) = mpsc::channel();
    host_launch(stream, move || {
        let _ = sender.send(std::thread::current().id());
    })
    .expect("launched");
    let driver = told
        .recv_timeout(suite::TIMEOUT)
        .expect("the host function ran");
    stream.synchronize().expect("synchronize");
    let _ = DRIVER_THREAD.set(driver);
    driver
}

// ---- the log calls -----------------------------------------------------------------------------

/// `run_once_host_fn` logs on the driver's thread when the driver calls a launch cuda-host
/// abandoned after it saw the context fail (its ticket is stale). The logger is user code: its
/// panic is caught, and by `docs/RELIABILITY.md` (the `run_once_host_fn` row: "a payload is
/// dropped on a caller's thread") and `trampoline.rs` ("No user value is dropped here") the
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
    install_logger(OnDriver::Panic);
    let device = cuda_host::Device::get(context().driver(), 0).expect("device");
    let fresh = controls.fresh_context(&device);
    let stream = new_stream(&fresh);
    let driver = learn_driver_thread(&stream);
    let gate = Gate::new(&fresh);
    gate.hold(&stream);
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
    ARMED.store(true, Ordering::SeqCst);
    gate.open();
    wait_until("the logger to panic on the driver's thread", || {
        PAYLOADS_MADE.load(Ordering::SeqCst) > 0
    });
    // Whatever is handed to a caller's thread goes with its drains.
    wait_until("the payload to be dropped", || {
        cuda_host::reclaim();
        !PAYLOADS_DROPPED_ON.lock().expect("the record").is_empty()
    });
    ARMED.store(false, Ordering::SeqCst);
    assert!(!ran.load(Ordering::SeqCst), "the abandoned function ran");
    let seen = SEEN_ON_DRIVER.lock().expect("the record").clone();
    let dropped_on = PAYLOADS_DROPPED_ON.lock().expect("the record").clone();
    assert!(
        !dropped_on.contains(&driver),
        "a logger's panic payload was dropped on the driver's thread ({driver:?}); the records \
         the logger saw there (message, in_host_function()): {seen:?}"
    );
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
    install_logger(OnDriver::CallBack);
    let device = cuda_host::Device::get(context().driver(), 0).expect("device");
    let fresh = controls.fresh_context(&device);
    let stream = std::sync::Arc::new(new_stream(&fresh));
    learn_driver_thread(&stream);
    let gate = Gate::new(&fresh);
    gate.hold(&stream);
    host_launch(&*stream, || {}).expect("launched");
    let (sender, answered) = mpsc::channel();
    *CALL_BACK.lock().expect("the call") = Some(Box::new({
        let stream = std::sync::Arc::clone(&stream);
        move || {
            let outcome = stream.synchronize();
            let _ = sender.send(outcome);
        }
    }));
    controls.fail_next_calls(c"cuStreamQuery", 1, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    assert!(stream.is_complete().is_err(), "the injected failure");
    ARMED.store(true, Ordering::SeqCst);
    gate.open();
    let outcome = answered.recv_timeout(Duration::from_secs(10));
    let seen = SEEN_ON_DRIVER.lock().expect("the record").clone();
    match outcome {
        Ok(Err(cuda_host::Error::InHostFunction { .. })) => {}
        Ok(other) => panic!(
            "a logger's call back on the driver's thread reached the driver ({other:?}); \
             records seen there (message, in_host_function()): {seen:?}"
        ),
        Err(_) => {
            // Their drops would wait on the wedged driver thread.
            std::mem::forget((stream, gate, fresh));
            panic!(
                "a logger's Stream::synchronize, called back from the log call of a stale \
                 ticket on the driver's thread, did not return within 10 s: the driver's thread \
                 waits for itself; records seen there (message, in_host_function()): {seen:?}"
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
    install_logger(OnDriver::Panic);
    let device = cuda_host::Device::get(context().driver(), 0).expect("device");
    let fresh = controls.fresh_context(&device);
    let stream = new_stream(&fresh);
    let driver = learn_driver_thread(&stream);
    let gate = Gate::new(&fresh);
    gate.hold(&stream);
    host_launch(&stream, || {}).expect("launched");
    ARMED.store(true, Ordering::SeqCst);
    // The dropped stream is watched for its context's failure: a callback after its work.
    drop(stream);
    controls.set_sticky_error(&fresh, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    wait_until("the logger to panic on the driver's thread", || {
        PAYLOADS_MADE.load(Ordering::SeqCst) > 0
    });
    wait_until("the payload to be dropped", || {
        cuda_host::reclaim();
        !PAYLOADS_DROPPED_ON.lock().expect("the record").is_empty()
    });
    ARMED.store(false, Ordering::SeqCst);
    drop(gate);
    let seen = SEEN_ON_DRIVER.lock().expect("the record").clone();
    let dropped_on = PAYLOADS_DROPPED_ON.lock().expect("the record").clone();
    assert!(
        !dropped_on.contains(&driver),
        "a logger's panic payload was dropped on the driver's thread ({driver:?}); the records \
         the logger saw there (message, in_host_function()): {seen:?}"
    );
}

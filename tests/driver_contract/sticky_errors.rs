//! Sticky errors: what runs, what is called back and what is answered once a context has
//! failed, by the software driver's controls or by a faulting launch.

use crate::harness::*;
use cuda_host::{Event, EventFlags};
use cuda_host_sys::CUresult;
use std::ptr;
use suite::hold_and_release;
use suite::host_function::launch_host;

#[test]
fn set_sticky_error_skips_pending_host_functions_calls_back_once_with_it_and_answers_it() {
    let controls = controls_or_skip!(
        set_sticky_error_skips_pending_host_functions_calls_back_once_with_it_and_answers_it
    );
    suite::alone_in_child!(
        set_sticky_error_skips_pending_host_functions_calls_back_once_with_it_and_answers_it
    );
    let code = CUresult::CUDA_ERROR_HARDWARE_STACK_ERROR;
    let context = current_context();
    let stream = non_blocking(&context);
    let (log, callback) = (Log::default(), leak(CallbackProbe::default()));
    let synchronized = hold_and_release(
        &stream,
        || {
            launch(stream.as_raw(), log.marker("pending"));
            add_callback(stream.as_raw(), callback);
        },
        || controls.set_sticky_error(&context, code),
        |stream| synchronize(stream.as_raw()),
    );
    assert_eq!(callback.statuses_once_called(), [code]);
    assert_eq!(synchronized, code);
    assert!(log.entries().is_empty(), "a pending host function ran");
    assert_eq!(launch_host(stream.as_raw(), log.marker("after")), code);
    let mut raw = ptr::null_mut();
    // SAFETY: a valid out-pointer and device 0.
    let retained = unsafe { driver().cuDevicePrimaryCtxRetain(&mut raw, context.device()) };
    assert_eq!(retained, code, "the error stays with the process");
}

#[test]
fn launch_fault_fails_the_context_with_its_code_when_the_stream_reaches_it() {
    let controls =
        controls_or_skip!(launch_fault_fails_the_context_with_its_code_when_the_stream_reaches_it);
    suite::alone_in_child!(launch_fault_fails_the_context_with_its_code_when_the_stream_reaches_it);
    let code = CUresult::CUDA_ERROR_LAUNCH_FAILED;
    let context = current_context();
    let stream = non_blocking(&context);
    let log = Log::default();
    let synchronized = hold_and_release(
        &stream,
        || {
            controls.launch_fault(&stream, code);
            launch(stream.as_raw(), log.marker("after"));
        },
        || {
            assert_eq!(
                query(stream.as_raw()),
                CUresult::CUDA_ERROR_NOT_READY,
                "the context failed before the stream reached the fault"
            );
        },
        |stream| synchronize(stream.as_raw()),
    );
    assert_eq!(synchronized, code);
    assert!(log.entries().is_empty(), "work after the fault ran");
    assert_eq!(launch_host(stream.as_raw(), log.marker("later")), code);
}

#[test]
fn after_a_fault_only_earlier_host_functions_run_and_a_later_callback_gets_the_error_once() {
    // Alone in a process: the sticky error stays with it.
    suite::alone_in_child!(
        after_a_fault_only_earlier_host_functions_run_and_a_later_callback_gets_the_error_once
    );
    let context = current_context();
    let stream = non_blocking(&context);
    let fault = suite::kernels::Fault::load(driver());
    let (log, callback) = (Log::default(), leak(CallbackProbe::default()));

    let synchronized = hold_and_release(
        &stream,
        || {
            launch(stream.as_raw(), log.marker("before"));
            fault.launch(&stream);
            launch(stream.as_raw(), log.marker("after"));
            add_callback(stream.as_raw(), callback);
        },
        || assert!(log.entries().is_empty(), "ran with the stream held"),
        |stream| synchronize(stream.as_raw()),
    );
    let illegal_address = CUresult::CUDA_ERROR_ILLEGAL_ADDRESS;
    assert_eq!(synchronized, illegal_address);
    assert_eq!(
        callback.statuses_once_called(),
        [illegal_address],
        "called once, with the error"
    );
    assert_eq!(log.entries(), ["before"]);
    assert_eq!(
        launch_host(stream.as_raw(), log.marker("later")),
        illegal_address
    );
}

#[test]
fn after_a_fault_a_query_of_an_event_never_recorded_answers_the_error() {
    // Alone in a process: the sticky error stays with it.
    suite::alone_in_child!(after_a_fault_a_query_of_an_event_never_recorded_answers_the_error);
    let context = current_context();
    let stream = non_blocking(&context);
    let never = Event::new(&context, EventFlags::DisableTiming).expect("event");
    assert_eq!(event_query(never.as_raw()), CUresult::CUDA_SUCCESS);
    let fault = suite::kernels::Fault::load(driver());
    fault.launch(&stream);
    let illegal_address = CUresult::CUDA_ERROR_ILLEGAL_ADDRESS;
    assert_eq!(synchronize(stream.as_raw()), illegal_address);
    assert_eq!(
        event_query(never.as_raw()),
        illegal_address,
        "what tracks query to learn a failure for points written into a word"
    );
}

#[test]
fn a_capture_of_a_failed_context_forbids_no_call_of_another_context() {
    let controls =
        controls_or_skip!(a_capture_of_a_failed_context_forbids_no_call_of_another_context);
    suite::alone_in_child!(a_capture_of_a_failed_context_forbids_no_call_of_another_context);
    let device = cuda_host::Device::get(&suite::test_driver().driver, 0).expect("device 0");
    let failing = controls.fresh_context(&device);
    let captured = non_blocking(&failing);
    failing.bind_to_thread().expect("binds");
    let thread_local = cuda_host_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    // SAFETY: a live stream that is not capturing.
    suite::ok("cuStreamBeginCapture_v2", unsafe {
        driver().cuStreamBeginCapture_v2(captured.as_raw(), thread_local)
    });
    controls.set_sticky_error(&failing, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    let mut graph = ptr::null_mut();
    // SAFETY: a live stream and a valid out-pointer.
    let ended = unsafe { driver().cuStreamEndCapture(captured.as_raw(), &mut graph) };
    assert_eq!(
        ended,
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
        "the end answers the failure"
    );
    // A call the capture would forbid on this thread, in another context: the context's
    // synchronize.
    let other = current_context();
    other.bind_to_thread().expect("binds");
    // SAFETY: no arguments; the context is current.
    let synchronized = unsafe { driver().cuCtxSynchronize() };
    assert_eq!(synchronized, CUresult::CUDA_SUCCESS);
}

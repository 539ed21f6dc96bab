//! The crate's host functions, on the driver cuda-host-testing's selector picks: the GPU's when
//! there is one, else the software driver (`CUDA_TEST_DRIVER=real`, `software` or `auto`
//! overrides). Ordinary tests and fault tests share this binary and run in parallel: each fault
//! test fails a fresh context of its own (`Controls::fresh_context`), never the primary context
//! the ordinary tests use. On a GPU the fault tests, which need the software driver's controls,
//! say that they are skipped.

use cuda_host::sys::CUresult;
use cuda_host::{Context, Device, Error, Stream, StreamFlags};
use cuda_host_testing::{Controls, SelectedDriver};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use user_crate::{finished, mark_done_in_stream_order};

/// The driver this binary runs on, chosen once.
fn selected() -> &'static SelectedDriver {
    // SAFETY: NVIDIA's driver is opened as cuda_host::driver() opens it; the software driver is
    // the library cuda-host-testing built. Nothing in this binary loads another driver first.
    unsafe { cuda_host_testing::select_driver() }.expect("a CUDA driver")
}

fn device() -> Device {
    Device::get(selected().driver(), 0).expect("device 0")
}

/// The primary context, which the ordinary tests share.
fn primary_context() -> Context {
    device().primary_context().expect("the primary context")
}

fn stream(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking).expect("a stream")
}

/// The software driver's controls; `None` on a GPU.
fn software_controls() -> Option<&'static Controls> {
    if !selected().is_software() {
        return None;
    }
    // SAFETY: as in `selected`.
    Some(unsafe { cuda_host_testing::controls() }.expect("the software driver's controls"))
}

/// The software driver's controls for `test`; `None`, and a note that it is skipped, on a GPU.
fn controls(test: &str) -> Option<&'static Controls> {
    let controls = software_controls();
    if controls.is_none() {
        eprintln!("skipped {test}: it needs the software driver's controls");
    }
    controls
}

// ---- Ordinary tests, on the primary context -----------------------------------------------------

#[test]
fn the_host_function_runs_in_stream_order() {
    let stream = stream(&primary_context());
    let done = Arc::new(AtomicBool::new(false));
    if let Some(controls) = software_controls() {
        // A stand-in for a long kernel before it (on a GPU, nothing: the point is the order).
        controls
            .launch_sleep(&stream, Duration::from_millis(20))
            .expect("enqueued");
    }
    mark_done_in_stream_order(&stream, &done).expect("launched");
    assert_eq!(finished(&stream, &done), Ok(true));
}

#[test]
fn many_host_functions_run_in_order_beside_the_fault_tests() {
    let stream = stream(&primary_context());
    for _ in 0..200 {
        let done = Arc::new(AtomicBool::new(false));
        mark_done_in_stream_order(&stream, &done).expect("launched");
        assert_eq!(finished(&stream, &done), Ok(true));
    }
}

#[test]
fn a_launch_the_driver_refuses_is_a_typed_error_and_runs_nothing() {
    let Some(controls) = controls("a_launch_the_driver_refuses_is_a_typed_error_and_runs_nothing")
    else {
        return;
    };
    let stream = stream(&primary_context());
    let done = Arc::new(AtomicBool::new(false));
    // An ordinary error, for this thread's next call only: other tests go on.
    controls
        .fail_next_calls(c"cuLaunchHostFunc", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY)
        .expect("armed");
    let error = mark_done_in_stream_order(&stream, &done).unwrap_err();
    assert!(matches!(error, Error::Driver(_)), "{error}");
    assert_eq!(
        error.driver_result(),
        Some(CUresult::CUDA_ERROR_OUT_OF_MEMORY)
    );
    assert_eq!(finished(&stream, &done), Ok(false));
    // The refused closure was dropped: only this test's reference is left.
    assert_eq!(Arc::strong_count(&done), 1);
}

// ---- Fault tests, each on a fresh context of its own --------------------------------------------

#[test]
fn after_a_faulting_kernel_the_host_function_never_runs_and_is_released() {
    let Some(controls) =
        controls("after_a_faulting_kernel_the_host_function_never_runs_and_is_released")
    else {
        return;
    };
    let context = controls.fresh_context(&device()).expect("a fresh context");
    let stream = stream(&context);
    let done = Arc::new(AtomicBool::new(false));
    // A stand-in for a kernel that stores to a bad address.
    controls
        .launch_fault(&stream, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS)
        .expect("enqueued");
    // Accepted or refused, depending on whether the stream has reached the fault yet.
    let _ = mark_done_in_stream_order(&stream, &done);
    let error = finished(&stream, &done).unwrap_err();
    assert_eq!(
        error.driver_result(),
        Some(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS)
    );
    assert!(!done.load(Ordering::Acquire));
    // cuda-host releases what the closure captured, though it never runs.
    drop(stream);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while Arc::strong_count(&done) > 1 {
        assert!(std::time::Instant::now() < deadline, "the closure leaked");
        cuda_host::reclaim();
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn on_a_failed_context_a_launch_is_refused_with_the_failure() {
    let Some(controls) = controls("on_a_failed_context_a_launch_is_refused_with_the_failure")
    else {
        return;
    };
    let context = controls.fresh_context(&device()).expect("a fresh context");
    let failing = stream(&context);
    controls
        .set_sticky_error(&context, CUresult::CUDA_ERROR_LAUNCH_FAILED)
        .expect("failed");
    let done = Arc::new(AtomicBool::new(false));
    let error = mark_done_in_stream_order(&failing, &done).unwrap_err();
    assert_eq!(
        error.driver_result(),
        Some(CUresult::CUDA_ERROR_LAUNCH_FAILED)
    );
    assert_eq!(
        Arc::strong_count(&done),
        1,
        "the refused closure was dropped"
    );
    // The primary context, which the ordinary tests use, did not fail.
    let on_primary = stream(&primary_context());
    mark_done_in_stream_order(&on_primary, &done).expect("launched");
    assert_eq!(finished(&on_primary, &done), Ok(true));
}

//! The crate's host functions on cuda-host-testing's software driver: no GPU needed.

use cuda_host::cuda_host_sys::CUresult;
use cuda_host::{Context, Error, Stream, StreamFlags};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use user_crate::mark_done_in_stream_order;

/// A stream on device 0 of the software driver, which this installs as cuda-host's driver.
fn stream() -> Stream {
    // SAFETY: the library is cuda-host-testing's software driver; nothing in this test binary
    // loads another driver first.
    let driver = unsafe { cuda_host_testing::install() }.expect("the software driver installs");
    let context: Context = cuda_host::Device::get(driver, 0)
        .and_then(|device| device.primary_context())
        .expect("a primary context");
    Stream::new(&context, StreamFlags::NonBlocking).expect("a stream")
}

fn controls() -> &'static cuda_host_testing::Controls {
    // SAFETY: as in `stream`.
    unsafe { cuda_host_testing::controls() }.expect("the software driver's controls")
}

#[test]
fn the_host_function_runs_in_stream_order() {
    let stream = stream();
    let done = Arc::new(AtomicBool::new(false));
    // A stand-in for a long kernel before it.
    controls()
        .launch_sleep(&stream, Duration::from_millis(20))
        .expect("enqueued");
    mark_done_in_stream_order(&stream, &done).expect("launched");
    stream.synchronize().expect("synchronized");
    assert!(done.load(Ordering::Acquire));
}

#[test]
fn a_launch_the_driver_refuses_is_a_typed_error_and_runs_nothing() {
    let stream = stream();
    let done = Arc::new(AtomicBool::new(false));
    // An ordinary error: a sticky one (CUDA_ERROR_LAUNCH_FAILED) would fail the primary context
    // the other tests share, as a faulting kernel does.
    controls()
        .fail_next_calls(c"cuLaunchHostFunc", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY)
        .expect("armed");
    let error = mark_done_in_stream_order(&stream, &done).unwrap_err();
    assert!(matches!(error, Error::Driver(_)), "{error}");
    assert_eq!(
        error.driver_result(),
        Some(CUresult::CUDA_ERROR_OUT_OF_MEMORY)
    );
    stream.synchronize().expect("synchronized");
    assert!(!done.load(Ordering::Acquire));
    // The refused closure was dropped: only this test's reference is left.
    assert_eq!(Arc::strong_count(&done), 1);
}

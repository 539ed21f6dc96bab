//! Fresh contexts (`Controls::fresh_context`) as cuda-host sees them: a fault test breaks only its
//! own context, while the other tests of the binary go on on the primary context; the context
//! lives as long as cuda-host uses it, then goes.

use cuda_host::sys::{CUcontext, CUresult, CUstream, Driver};
use cuda_host::{Context, Device, Stream, StreamFlags, host_launch};
use cuda_host_testing::{Controls, Error, Variant};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn driver() -> &'static Arc<Driver> {
    // SAFETY: the library is this package's software driver.
    unsafe { cuda_host_testing::install() }.expect("the software driver installs")
}

fn controls() -> &'static Controls {
    driver();
    // SAFETY: as above.
    unsafe { cuda_host_testing::controls() }.expect("the software driver's controls")
}

fn device() -> Device {
    Device::get(driver(), 0).expect("device 0")
}

fn fresh_context() -> Context {
    controls()
        .fresh_context(&device())
        .expect("a fresh context")
}

fn stream(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking).expect("a stream")
}

/// Waits until `done` holds, for at most 10 s.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: timed out"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// What the driver answers when `context` is made current on this thread (then unbound).
fn made_current(context: CUcontext) -> CUresult {
    // SAFETY: any handle may be passed: the software driver looks it up in its registry.
    let result = unsafe { driver().cuCtxSetCurrent(context) };
    // SAFETY: null unbinds.
    unsafe { driver().cuCtxSetCurrent(std::ptr::null_mut()) };
    result
}

/// What the driver answers for a query of `stream`.
fn queried(stream: CUstream) -> CUresult {
    // SAFETY: any handle may be passed: the software driver looks it up in its registry.
    unsafe { driver().cuStreamQuery(stream) }
}

#[test]
fn a_fault_on_a_fresh_context_fails_only_it_and_its_host_functions_are_reclaimed() {
    let primary = device().primary_context().expect("the primary context");
    let primary_stream = stream(&primary);
    let context = fresh_context();
    assert_ne!(context.as_raw(), primary.as_raw());
    assert_eq!(context.device(), primary.device());
    let faulting = stream(&context);
    controls()
        .launch_fault(&faulting, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS)
        .expect("enqueued");
    let ran = Arc::new(AtomicBool::new(false));
    let after_fault = Arc::clone(&ran);
    // Enqueued behind the fault, before or after the stream reaches it: it never runs.
    let _ = host_launch(&faulting, move || {
        after_fault.store(true, Ordering::Release)
    });
    let error = faulting.synchronize().expect_err("the context failed");
    assert_eq!(
        error.driver_result(),
        Some(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS)
    );
    assert!(!ran.load(Ordering::Acquire));
    // cuda-host reclaimed the closure that will never run.
    wait_until("the closure is dropped", || {
        cuda_host::reclaim();
        Arc::strong_count(&ran) == 1
    });
    // The primary context, on which the binary's other tests run, did not fail.
    let primary_ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&primary_ran);
    host_launch(&primary_stream, move || flag.store(true, Ordering::Release)).expect("launched");
    primary_stream
        .synchronize()
        .expect("the primary context works");
    assert!(primary_ran.load(Ordering::Acquire));
    // Nor does another fresh context.
    let other = fresh_context();
    stream(&other)
        .synchronize()
        .expect("another fresh context works");
}

#[test]
fn a_fresh_context_lives_until_its_last_stream_and_launch_are_gone() {
    let context = fresh_context();
    let raw = context.as_raw();
    let stream = stream(&context);
    let raw_stream = stream.as_raw();
    // A host function that holds the stream until released.
    let release = Arc::new(AtomicBool::new(false));
    let ran = Arc::new(AtomicBool::new(false));
    let (held, flag) = (Arc::clone(&release), Arc::clone(&ran));
    host_launch(&stream, move || {
        while !held.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        flag.store(true, Ordering::Release);
    })
    .expect("launched");
    drop(context);
    drop(stream);
    // The launch record still holds the context: it is alive, its host function in flight.
    assert_eq!(made_current(raw), CUresult::CUDA_SUCCESS);
    release.store(true, Ordering::Release);
    wait_until("the host function ran", || ran.load(Ordering::Acquire));
    // Reclaiming the record lets go of the context's last use, and so destroys it.
    wait_until("the context is destroyed", || {
        cuda_host::reclaim();
        made_current(raw) == CUresult::CUDA_ERROR_INVALID_CONTEXT
    });
    assert_eq!(queried(raw_stream), CUresult::CUDA_ERROR_INVALID_HANDLE);
}

#[test]
fn a_fresh_context_bound_to_the_thread_that_drops_it_is_unbound() {
    let context = fresh_context();
    context.bind_to_thread().expect("bound");
    drop(context);
    let mut current = std::ptr::NonNull::<std::ffi::c_void>::dangling()
        .as_ptr()
        .cast();
    // SAFETY: a valid out-pointer.
    let result = unsafe { driver().cuCtxGetCurrent(&mut current) };
    assert_eq!(result, CUresult::CUDA_SUCCESS);
    assert!(current.is_null(), "a destroyed context is left current");
}

#[test]
fn a_device_of_another_driver_gets_no_fresh_context() {
    // Another library of the same sources: its own state, its own controls.
    let path = cuda_host_testing::variant_path(Variant::NoProcAddress);
    // Kept loaded for the process, as a driver library is: unloading it would lose what its
    // cuInit allocated.
    static OTHER: std::sync::OnceLock<Arc<Driver>> = std::sync::OnceLock::new();
    let other = OTHER.get_or_init(|| {
        // SAFETY: this package's library without cuGetProcAddress: a driver library.
        Arc::new(unsafe { Driver::open(&path) }.expect("the variant loads"))
    });
    let device = Device::get(other, 0).expect("its device 0");
    let error = controls().fresh_context(&device).unwrap_err();
    assert_eq!(
        error,
        Error::OtherDriver {
            library: path.to_string_lossy().into_owned()
        }
    );
}

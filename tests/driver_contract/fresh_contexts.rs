//! Fresh contexts (software driver only: controls of its own, `cuswFreshContextCreate` and
//! `cuswFreshContextDestroy`): a context of a device beside its primary context, which fails on
//! its own, and what its destroy does to its streams, events, memory and host functions in flight.

use crate::harness::*;
use cuda_host_sys::{
    CUcontext, CUdevice, CUdeviceptr, CUevent, CUresult, CUstream, CUstream_flags,
};
use std::ffi::{CStr, c_void};
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use suite::{ok, wait_until};

/// `cuswFreshContextCreate` and `cuswFreshContextDestroy`, as `cudasw.h` declares them.
type CreateFn = unsafe extern "C" fn(*mut CUcontext, CUdevice) -> CUresult;
type DestroyFn = unsafe extern "C" fn(CUcontext) -> CUresult;

/// A control resolved by name through `cuGetProcAddress_v2`, where the controls are found too.
fn control(name: &CStr) -> *mut c_void {
    let mut address = ptr::null_mut();
    let mut status = cuda_host_sys::CUdriverProcAddressQueryResult(77);
    // SAFETY: a NUL-terminated name and valid out-pointers.
    ok("cuGetProcAddress_v2", unsafe {
        driver().cuGetProcAddress_v2(name.as_ptr(), &mut address, 10000, 0, &mut status)
    });
    assert!(!address.is_null(), "{name:?} resolves");
    address
}

/// What creating a fresh context of device 0 answers, and the context.
fn create() -> (CUresult, CUcontext) {
    // SAFETY: the software driver's control has this C signature (cudasw.h).
    let create =
        unsafe { std::mem::transmute::<*mut c_void, CreateFn>(control(c"cuswFreshContextCreate")) };
    let mut context = ptr::null_mut();
    // SAFETY: a valid out-pointer and device 0.
    let result = unsafe { create(&mut context, 0) };
    (result, context)
}

fn created() -> CUcontext {
    let (result, context) = create();
    ok("cuswFreshContextCreate", result);
    context
}

/// What destroying `context` answers.
fn destroy(context: CUcontext) -> CUresult {
    // SAFETY: the software driver's control has this C signature (cudasw.h).
    let destroy = unsafe {
        std::mem::transmute::<*mut c_void, DestroyFn>(control(c"cuswFreshContextDestroy"))
    };
    // SAFETY: any handle may be passed: the driver looks it up in its registry.
    unsafe { destroy(context) }
}

fn bind(context: CUcontext) -> CUresult {
    // SAFETY: any handle may be passed: the driver looks it up in its registry.
    unsafe { driver().cuCtxSetCurrent(context) }
}

/// The context of `stream`, as the driver answers it.
fn context_of(stream: CUstream) -> CUcontext {
    let mut context = ptr::null_mut();
    // SAFETY: a valid out-pointer; the per-thread handle names the current context's.
    ok("cuStreamGetCtx", unsafe {
        driver().cuStreamGetCtx(stream, &mut context)
    });
    context
}

/// A non-blocking stream of the current context.
fn new_stream() -> CUstream {
    let mut stream = ptr::null_mut();
    // SAFETY: a valid out-pointer; a context is current.
    ok("cuStreamCreate", unsafe {
        driver().cuStreamCreate(&mut stream, CUstream_flags::CU_STREAM_NON_BLOCKING.0)
    });
    stream
}

#[test]
fn a_fresh_context_fails_alone_and_once_destroyed_its_handles_answer_invalid() {
    controls_or_skip!(a_fresh_context_fails_alone_and_once_destroyed_its_handles_answer_invalid);
    // Per-thread streams are used (of a fresh context only, but the rule is the rule).
    let _alone = alone();
    let primary = current_context();
    let fresh = created();
    assert_ne!(fresh, primary.as_raw());
    ok("cuCtxSetCurrent", bind(fresh));
    let mut device = -1;
    // SAFETY: a valid out-pointer; the fresh context is current.
    ok("cuCtxGetDevice", unsafe {
        driver().cuCtxGetDevice(&mut device)
    });
    assert_eq!(device, 0);
    // Its streams, its per-thread stream, its events and its memory are its own.
    let stream = new_stream();
    assert_eq!(context_of(stream), fresh);
    assert_eq!(context_of(cuda_host_sys::CU_STREAM_PER_THREAD), fresh);
    let mut event: CUevent = ptr::null_mut();
    // SAFETY: a valid out-pointer; the fresh context is current.
    ok("cuEventCreate", unsafe {
        driver().cuEventCreate(&mut event, 0)
    });
    let mut memory: CUdeviceptr = 0;
    // SAFETY: a valid out-pointer; the fresh context is current.
    ok("cuMemAlloc_v2", unsafe {
        driver().cuMemAlloc_v2(&mut memory, 64)
    });
    ok("cuCtxSetCurrent", bind(primary.as_raw()));
    assert_eq!(
        context_of(cuda_host_sys::CU_STREAM_PER_THREAD),
        primary.as_raw(),
        "each context has its own per-thread stream"
    );

    // Its failure is its own.
    let code = CUresult::CUDA_ERROR_ILLEGAL_ADDRESS;
    // SAFETY: the software driver's control has this C signature (cudasw.h).
    let set_sticky_error = unsafe {
        std::mem::transmute::<*mut c_void, unsafe extern "C" fn(CUcontext, CUresult) -> CUresult>(
            control(c"cuswSetStickyError"),
        )
    };
    // SAFETY: a live context's handle.
    ok("cuswSetStickyError", unsafe {
        set_sticky_error(fresh, code)
    });
    assert_eq!(synchronize(stream), code);
    round_trip(&non_blocking(&primary));

    // Destroyed (while current on this thread), its handles are invalid at once.
    ok("cuCtxSetCurrent", bind(fresh));
    ok("cuswFreshContextDestroy", destroy(fresh));
    // SAFETY: no arguments; the current context is the destroyed one.
    let synchronized = unsafe { driver().cuCtxSynchronize() };
    assert_eq!(synchronized, CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED);
    assert_eq!(bind(fresh), CUresult::CUDA_ERROR_INVALID_CONTEXT);
    ok("cuCtxSetCurrent", bind(primary.as_raw()));
    assert_eq!(query(stream), CUresult::CUDA_ERROR_INVALID_HANDLE);
    assert_eq!(event_query(event), CUresult::CUDA_ERROR_INVALID_HANDLE);
    // SAFETY: the address was an allocation of the destroyed context; the driver checks it.
    let freed = unsafe { driver().cuMemFree_v2(memory) };
    assert_eq!(
        freed,
        CUresult::CUDA_ERROR_INVALID_VALUE,
        "its memory was freed"
    );
    assert_eq!(destroy(fresh), CUresult::CUDA_ERROR_INVALID_CONTEXT);
    // A primary context is released, never destroyed.
    assert_eq!(
        destroy(primary.as_raw()),
        CUresult::CUDA_ERROR_INVALID_CONTEXT
    );
    round_trip(&non_blocking(&primary));
}

#[test]
fn destroying_a_fresh_context_returns_once_its_host_function_in_flight_has() {
    controls_or_skip!(destroying_a_fresh_context_returns_once_its_host_function_in_flight_has);
    let _shared = shared();
    let _initialised = current_context();
    let fresh = created();
    ok("cuCtxSetCurrent", bind(fresh));
    let stream = new_stream();
    ok("cuCtxSetCurrent", bind(ptr::null_mut()));
    let (release, finished) = (leak(AtomicBool::new(false)), leak(AtomicBool::new(false)));
    let started = leak(AtomicBool::new(false));
    launch(stream, move || {
        started.store(true, Ordering::SeqCst);
        while !release.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        finished.store(true, Ordering::SeqCst);
    });
    wait_until("the host function started", || {
        started.load(Ordering::SeqCst)
    });
    let destroyed = Arc::new(AtomicBool::new(false));
    let returned = Arc::clone(&destroyed);
    let handle = SendContext(fresh);
    let destroyer = std::thread::spawn(move || {
        let result = destroy(handle.get());
        returned.store(true, Ordering::SeqCst);
        (result, finished.load(Ordering::SeqCst))
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !destroyed.load(Ordering::SeqCst),
        "the destroy returned while a host function of the context ran"
    );
    release.store(true, Ordering::SeqCst);
    let (result, host_function_finished) = destroyer.join().expect("the destroying thread");
    assert_eq!(result, CUresult::CUDA_SUCCESS);
    assert!(host_function_finished, "the destroy returned first");
    assert_eq!(query(stream), CUresult::CUDA_ERROR_INVALID_HANDLE);
}

/// A context handle sent to another thread (driver handles are valid on every thread).
struct SendContext(CUcontext);
// SAFETY: a driver handle, valid on every thread.
unsafe impl Send for SendContext {}

impl SendContext {
    /// The handle (a method, so that a closure captures the whole value, not its field).
    fn get(self) -> CUcontext {
        self.0
    }
}

#[test]
fn at_most_sixty_four_fresh_contexts_live_at_once_and_a_destroyed_ones_place_is_taken_again() {
    controls_or_skip!(
        at_most_sixty_four_fresh_contexts_live_at_once_and_a_destroyed_ones_place_is_taken_again
    );
    // No other test of the binary holds one meanwhile.
    let _alone = alone();
    let _initialised = current_context();
    let contexts: Vec<CUcontext> = (0..64).map(|_| created()).collect();
    assert_eq!(create().0, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    ok("cuswFreshContextDestroy", destroy(contexts[10]));
    let again = created();
    assert!(
        !contexts.contains(&again),
        "a handle is never reused, its place is"
    );
    for (index, context) in contexts.into_iter().enumerate() {
        if index != 10 {
            ok("cuswFreshContextDestroy", destroy(context));
        }
    }
    ok("cuswFreshContextDestroy", destroy(again));
}

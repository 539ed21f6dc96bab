//! The calling thread's stack of current contexts (`cuCtxPushCurrent_v2`, `cuCtxPopCurrent_v2`,
//! `cuCtxSetCurrent`), contexts made and destroyed (`cuCtxCreate_v4`, `cuCtxDestroy_v2`), a
//! context's flags, limits and cache preference, the profiler's start and stop, and the stream
//! priorities a context offers, with what a stream tells of its priority and flags.

use crate::harness::*;
use cuda_host_sys::{
    CUcontext, CUctx_flags, CUdevice, CUdriverProcAddressQueryResult, CUfunc_cache, CUlimit,
    CUresult, CUstream, CUstream_flags,
};
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc;
use suite::ok;

const SCHED_MASK: u32 = CUctx_flags::CU_CTX_SCHED_MASK.0;
const NON_BLOCKING: u32 = CUstream_flags::CU_STREAM_NON_BLOCKING.0;

fn current() -> CUcontext {
    let mut context = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    ok("cuCtxGetCurrent", unsafe {
        driver().cuCtxGetCurrent(&mut context)
    });
    context
}

fn push(context: CUcontext) -> CUresult {
    // SAFETY: a live context.
    unsafe { driver().cuCtxPushCurrent_v2(context) }
}

/// `cuCtxPopCurrent_v2`'s answer and the context it popped.
fn pop() -> (CUresult, CUcontext) {
    let mut popped = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    let result = unsafe { driver().cuCtxPopCurrent_v2(&mut popped) };
    (result, popped)
}

fn set_current(context: CUcontext) -> CUresult {
    // SAFETY: a live context, or null.
    unsafe { driver().cuCtxSetCurrent(context) }
}

#[test]
fn a_pushed_context_is_current_until_popped_and_then_the_one_below_it_is_current_again() {
    let _shared = shared();
    let context = suite::context();
    on_another_thread(context.as_raw(), |context| {
        assert!(current().is_null(), "a new thread has no context current");
        ok("cuCtxPushCurrent_v2", push(context));
        assert_eq!(current(), context);
        ok("cuCtxPushCurrent_v2", push(context));
        assert_eq!(pop(), (SUCCESS, context));
        assert_eq!(current(), context, "the one below is current again");
        assert_eq!(pop(), (SUCCESS, context));
        assert!(current().is_null(), "nothing was below");
    });
}

#[test]
fn popping_with_no_context_current_answers_invalid_context() {
    let _shared = shared();
    let _context = suite::context();
    let result = on_another_thread((), |()| pop().0);
    assert_eq!(result, CUresult::CUDA_ERROR_INVALID_CONTEXT);
}

#[test]
fn set_current_binds_a_context_and_null_pops_the_top_of_the_stack() {
    let _shared = shared();
    let context = suite::context();
    on_another_thread(context.as_raw(), |context| {
        ok("cuCtxSetCurrent", set_current(context));
        assert_eq!(current(), context);
        ok("cuCtxPushCurrent_v2", push(context));
        ok("cuCtxSetCurrent", set_current(ptr::null_mut()));
        assert_eq!(current(), context, "only the top was popped");
        ok("cuCtxSetCurrent", set_current(ptr::null_mut()));
        assert!(current().is_null());
        assert_eq!(
            pop().0,
            CUresult::CUDA_ERROR_INVALID_CONTEXT,
            "the stack is empty"
        );
    });
}

/// A new context of `device`, made on the calling thread (`cuCtxCreate_v4`).
fn create(device: CUdevice) -> CUcontext {
    let mut created = ptr::null_mut();
    // SAFETY: a valid out-pointer, no parameters, a device of the driver.
    ok("cuCtxCreate_v4", unsafe {
        driver().cuCtxCreate_v4(&mut created, ptr::null_mut(), 0, device)
    });
    created
}

fn destroy(context: CUcontext) -> CUresult {
    // SAFETY: a context made by cuCtxCreate_v4, destroyed once.
    unsafe { driver().cuCtxDestroy_v2(context) }
}

#[test]
fn a_created_context_is_current_with_streams_of_its_own_until_destroyed() {
    let _shared = shared();
    let context = suite::context();
    let device = context.device();
    on_another_thread(context.as_raw(), move |primary| {
        ok("cuCtxPushCurrent_v2", push(primary));
        let created = create(device);
        assert_ne!(created, primary);
        assert_eq!(current(), created, "pushed as it was made");
        let mut stream = ptr::null_mut();
        let mut owner = ptr::null_mut();
        // SAFETY: valid out-pointers; the created context is current.
        unsafe {
            ok(
                "cuStreamCreate",
                driver().cuStreamCreate(&mut stream, NON_BLOCKING),
            );
            ok(
                "cuStreamGetCtx",
                driver().cuStreamGetCtx(stream, &mut owner),
            );
        }
        assert_eq!(owner, created);
        let ran = Arc::new(AtomicUsize::new(0));
        launch(stream, counting(&ran));
        ok("cuStreamSynchronize", synchronize(stream));
        assert_eq!(count(&ran), 1);
        // SAFETY: the stream made above, destroyed once.
        ok("cuStreamDestroy_v2", unsafe {
            driver().cuStreamDestroy_v2(stream)
        });
        ok("cuCtxDestroy_v2", destroy(created));
        assert_eq!(current(), primary, "popped as it was destroyed");
        assert_eq!(pop(), (SUCCESS, primary));
    });
}

#[test]
fn a_context_destroyed_while_current_to_another_thread_is_an_error_to_use_there() {
    let _shared = shared();
    let device = suite::context().device();
    // Made on a thread of its own, so that it is current to none of this test's.
    let created = on_another_thread(device, |device| SendHandle(create(device))).into_inner();
    let to_use = SendHandle(created);
    let (bound, wait_for_bound) = mpsc::channel();
    let (destroyed, wait_for_destroyed) = mpsc::channel();
    let user = std::thread::spawn(move || {
        ok("cuCtxSetCurrent", set_current(to_use.get()));
        bound.send(()).expect("the destroying thread");
        wait_for_destroyed.recv().expect("the destruction");
        // SAFETY: no arguments: the current context, destroyed meanwhile.
        let used = unsafe { driver().cuCtxSynchronize() };
        (used, current() == to_use.get())
    });
    wait_for_bound.recv().expect("the using thread");
    ok("cuCtxDestroy_v2", destroy(created));
    destroyed.send(()).expect("the using thread");
    let (used, still_current) = user.join().expect("the using thread");
    assert_eq!(used, CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED);
    assert!(still_current, "it stays current to the thread");
}

fn flags() -> u32 {
    let mut flags = u32::MAX;
    // SAFETY: a valid out-pointer; the context is current.
    ok("cuCtxGetFlags", unsafe {
        driver().cuCtxGetFlags(&mut flags)
    });
    flags
}

fn set_flags(flags: u32) {
    // SAFETY: flags of cuCtxCreate; the context is current.
    ok("cuCtxSetFlags", unsafe { driver().cuCtxSetFlags(flags) });
}

#[test]
fn set_flags_sets_the_scheduling_policy_that_get_flags_tells() {
    let _shared = shared();
    let _context = current_context();
    let before = flags();
    let blocking_sync = CUctx_flags::CU_CTX_SCHED_BLOCKING_SYNC.0;
    set_flags(before & !SCHED_MASK | blocking_sync);
    assert_eq!(flags() & SCHED_MASK, blocking_sync);
    set_flags(before);
    assert_eq!(flags() & SCHED_MASK, before & SCHED_MASK);
}

/// `cuCtxGetStreamPriorityRange`: (least, greatest).
fn priority_range() -> (i32, i32) {
    let (mut least, mut greatest) = (i32::MIN, i32::MAX);
    // SAFETY: valid out-pointers; the context is current.
    ok("cuCtxGetStreamPriorityRange", unsafe {
        driver().cuCtxGetStreamPriorityRange(&mut least, &mut greatest)
    });
    (least, greatest)
}

/// A stream made by a raw call, destroyed on drop.
struct RawStream(CUstream);

impl RawStream {
    fn with_priority(flags: u32, priority: i32) -> RawStream {
        let mut stream = ptr::null_mut();
        // SAFETY: a valid out-pointer; the context is current.
        ok("cuStreamCreateWithPriority", unsafe {
            driver().cuStreamCreateWithPriority(&mut stream, flags, priority)
        });
        RawStream(stream)
    }

    fn new(flags: u32) -> RawStream {
        let mut stream = ptr::null_mut();
        // SAFETY: a valid out-pointer; the context is current.
        ok("cuStreamCreate", unsafe {
            driver().cuStreamCreate(&mut stream, flags)
        });
        RawStream(stream)
    }
}

impl Drop for RawStream {
    fn drop(&mut self) {
        // SAFETY: made above, destroyed once, here.
        let _ = unsafe { driver().cuStreamDestroy_v2(self.0) };
    }
}

pub(crate) fn stream_priority(table: &cuda_host_sys::Driver, stream: CUstream) -> i32 {
    let mut priority = i32::MIN;
    // SAFETY: a live stream or a special handle of the current context; a valid out-pointer.
    ok("cuStreamGetPriority", unsafe {
        table.cuStreamGetPriority(stream, &mut priority)
    });
    priority
}

pub(crate) fn stream_flags(table: &cuda_host_sys::Driver, stream: CUstream) -> u32 {
    let mut flags = u32::MAX;
    // SAFETY: as above.
    ok("cuStreamGetFlags", unsafe {
        table.cuStreamGetFlags(stream, &mut flags)
    });
    flags
}

#[test]
fn stream_priorities_are_those_asked_for_clamped_to_the_contexts_range() {
    let _shared = shared();
    let _context = current_context();
    let (least, greatest) = priority_range();
    assert!(greatest <= least, "lower numbers are greater priorities");
    let (mut least_only, mut greatest_only) = (i32::MIN, i32::MAX);
    // SAFETY: a valid out-pointer and null for the value not wanted, both allowed.
    unsafe {
        ok(
            "cuCtxGetStreamPriorityRange",
            driver().cuCtxGetStreamPriorityRange(&mut least_only, ptr::null_mut()),
        );
        ok(
            "cuCtxGetStreamPriorityRange",
            driver().cuCtxGetStreamPriorityRange(ptr::null_mut(), &mut greatest_only),
        );
    }
    assert_eq!((least_only, greatest_only), (least, greatest));
    for (asked, given) in [
        (least, least),
        (greatest, greatest),
        (least + 1, least),
        (greatest - 1, greatest),
    ] {
        let stream = RawStream::with_priority(NON_BLOCKING, asked);
        assert_eq!(
            stream_priority(driver(), stream.0),
            given,
            "asked for {asked} in [{greatest}, {least}]"
        );
    }
}

#[test]
fn a_stream_made_without_a_priority_has_the_default_priority_0() {
    let _shared = shared();
    let _context = current_context();
    let stream = RawStream::new(NON_BLOCKING);
    assert_eq!(stream_priority(driver(), stream.0), 0);
}

#[test]
fn a_stream_tells_whether_it_was_made_non_blocking() {
    let _alone = alone(); // a blocking stream
    let context = current_context();
    assert_eq!(
        stream_flags(driver(), non_blocking(&context).as_raw()) & NON_BLOCKING,
        NON_BLOCKING
    );
    assert_eq!(
        stream_flags(driver(), blocking(&context).as_raw()) & NON_BLOCKING,
        0
    );
    let with_priority = RawStream::with_priority(NON_BLOCKING, 0);
    assert_eq!(
        stream_flags(driver(), with_priority.0) & NON_BLOCKING,
        NON_BLOCKING
    );
}

/// `cuCtxGetLimit` of the current context.
fn limit(which: CUlimit) -> (CUresult, usize) {
    let mut value = usize::MAX;
    // SAFETY: a valid out-pointer; the context is current.
    let result = unsafe { driver().cuCtxGetLimit(&mut value, which) };
    (result, value)
}

#[test]
fn a_context_limit_set_is_read_back_and_a_value_no_limit_has_is_refused() {
    let _shared = shared();
    let _context = current_context();
    let stack = CUlimit::CU_LIMIT_STACK_SIZE;
    let (result, before) = limit(stack);
    assert_eq!(result, SUCCESS);
    assert!(before > 0, "a thread has a stack");
    for value in [4096, before] {
        // SAFETY: the context is current.
        ok("cuCtxSetLimit", unsafe {
            driver().cuCtxSetLimit(stack, value)
        });
        assert_eq!(limit(stack), (SUCCESS, value));
    }
    for which in [
        CUlimit::CU_LIMIT_PRINTF_FIFO_SIZE,
        CUlimit::CU_LIMIT_MALLOC_HEAP_SIZE,
    ] {
        let (result, value) = limit(which);
        assert_eq!(result, SUCCESS, "{which:?}");
        assert!(value > 0, "{which:?} is {value}");
    }
    let (result, _) = limit(CUlimit(0x1000));
    assert_ne!(result, SUCCESS, "a value that is no limit");
}

#[test]
fn a_cache_preference_set_is_read_back() {
    let _shared = shared();
    let _context = current_context();
    let get = || {
        let mut config = CUfunc_cache(77);
        // SAFETY: a valid out-pointer; the context is current.
        ok("cuCtxGetCacheConfig", unsafe {
            driver().cuCtxGetCacheConfig(&mut config)
        });
        config
    };
    let before = get();
    for config in [CUfunc_cache::CU_FUNC_CACHE_PREFER_L1, before] {
        // SAFETY: the context is current.
        ok("cuCtxSetCacheConfig", unsafe {
            driver().cuCtxSetCacheConfig(config)
        });
        assert_eq!(get(), config);
    }
}

/// `cuProfilerStart` or `cuProfilerStop`, which `cudaProfiler.h` declares (not `cuda.h`, so not
/// cuda-host-sys's table): found by `cuGetProcAddress_v2` at CUDA 4.0, as cudaProfilerTypedefs.h
/// lists them.
fn profiler_call(name: &std::ffi::CStr) -> unsafe extern "C" fn() -> CUresult {
    let (mut address, mut status) = (ptr::null_mut(), CUdriverProcAddressQueryResult(77));
    // SAFETY: a NUL-terminated name and valid out-pointers.
    ok("cuGetProcAddress_v2", unsafe {
        driver().cuGetProcAddress_v2(name.as_ptr(), &mut address, 4000, 0, &mut status)
    });
    assert_eq!(
        status,
        CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SUCCESS,
        "{name:?}"
    );
    assert!(!address.is_null(), "{name:?}");
    // SAFETY: both take no argument (PFN_cuProfilerStart_v4000, PFN_cuProfilerStop_v4000).
    unsafe {
        std::mem::transmute::<*mut std::ffi::c_void, unsafe extern "C" fn() -> CUresult>(address)
    }
}

#[test]
fn the_profiler_starts_and_stops_with_a_context_current_also_twice() {
    let _shared = shared();
    let _context = current_context();
    for name in [
        c"cuProfilerStart",
        c"cuProfilerStart",
        c"cuProfilerStop",
        c"cuProfilerStop",
    ] {
        let call = profiler_call(name);
        // SAFETY: no arguments; the context is current.
        assert_eq!(unsafe { call() }, SUCCESS, "{name:?}");
    }
}

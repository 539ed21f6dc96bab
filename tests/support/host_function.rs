//! Closures as raw host functions, for tests that call `cuLaunchHostFunc` or add host nodes
//! directly: the closure is leaked, so that a host function the driver still runs after a failed
//! assertion never reads freed memory. Streams are raw handles taken by safe functions, as in
//! [`capture`](crate::capture).

#![expect(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "stream handles go only to the driver; callers pass live or special handles"
)]

use crate::test_driver;
use cuda_host_sys::{CUDA_HOST_NODE_PARAMS, CUresult, CUstream, Driver};
use std::ffi::c_void;

type HostClosure = Box<dyn Fn() + Send + Sync>;

/// User data for [`run_closure`]: the closure, leaked.
pub fn leak_closure(closure: impl Fn() + Send + Sync + 'static) -> *mut c_void {
    Box::into_raw(Box::new(Box::new(closure) as HostClosure)).cast()
}

/// The host function that runs a closure given as user data.
///
/// # Safety
/// `data` comes from [`leak_closure`].
pub unsafe extern "C" fn run_closure(data: *mut c_void) {
    // SAFETY: `data` comes from `leak_closure`, whose box is never freed.
    let closure = unsafe { &*data.cast::<HostClosure>() };
    closure();
}

/// Raw `cuLaunchHostFunc` of `closure` on `stream`: the driver's answer.
pub fn launch_host(stream: CUstream, closure: impl Fn() + Send + Sync + 'static) -> CUresult {
    launch_host_through(&test_driver().driver, stream, closure)
}

/// [`launch_host`] through another table of the driver (one loaded for the per-thread default
/// stream, say).
pub fn launch_host_through(
    driver: &Driver,
    stream: CUstream,
    closure: impl Fn() + Send + Sync + 'static,
) -> CUresult {
    let data = leak_closure(closure);
    // SAFETY: `run_closure` accepts `data` on any thread, any number of times, for the process's
    // lifetime.
    unsafe { driver.cuLaunchHostFunc(stream, Some(run_closure), data) }
}

/// Host node parameters that run `closure`.
pub fn host_params(closure: impl Fn() + Send + Sync + 'static) -> CUDA_HOST_NODE_PARAMS {
    CUDA_HOST_NODE_PARAMS {
        fn_: Some(run_closure),
        userData: leak_closure(closure),
    }
}

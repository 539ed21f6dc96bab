//! Small Rust fakes of the driver for unit tests: a driver table of a few entry points written
//! in Rust (through cuda-host-sys's resolver seam), and a context on it.

use crate::launch::ContextShared;
use cuda_host_sys::{CUcontext, CUresult, Driver};
use std::ffi::{CStr, c_void};
use std::sync::Arc;

/// The context handle the fakes answer with.
pub(crate) const CONTEXT: CUcontext = 0x5000_usize as CUcontext;

unsafe extern "C" fn current_context(current: *mut CUcontext) -> CUresult {
    // SAFETY: the caller passes a valid out-pointer.
    unsafe { current.write(CONTEXT) };
    CUresult::CUDA_SUCCESS
}

unsafe extern "C" fn release_primary_context(_device: i32) -> CUresult {
    CUresult::CUDA_SUCCESS
}

/// A driver with the entry points given (name, function cast to a pointer) and, unless given,
/// a `cuCtxGetCurrent` answering [`CONTEXT`] and a `cuDevicePrimaryCtxRelease_v2` that succeeds.
///
/// # Safety
/// Each function must have the C signature `cuda.h` declares for its name.
pub(crate) unsafe fn driver(entries: &[(&CStr, *mut c_void)]) -> Arc<Driver> {
    let defaults = [
        (c"cuCtxGetCurrent", current_context as *mut c_void),
        (
            c"cuDevicePrimaryCtxRelease_v2",
            release_primary_context as *mut c_void,
        ),
    ];
    let table: Vec<(&CStr, *mut c_void)> = entries.iter().copied().chain(defaults).collect();
    // SAFETY: per the caller; the defaults above have their entry points' signatures, and all
    // are functions of this program.
    Arc::new(unsafe {
        Driver::from_resolver("fake driver", 13_000, |entry| {
            table
                .iter()
                .find(|(name, _)| *name == entry.symbol)
                .map_or(std::ptr::null_mut(), |(_, function)| *function)
        })
    })
}

/// The shared state of a context of `driver`, whose handle is [`CONTEXT`] (current already, as
/// the fake `cuCtxGetCurrent` answers).
pub(crate) fn context(driver: &Arc<Driver>) -> Arc<ContextShared> {
    Arc::new(ContextShared::retained_primary(
        Arc::clone(driver),
        0,
        CONTEXT,
    ))
}

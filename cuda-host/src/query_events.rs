//! Events cuda-host makes for itself, only to record, query and wait on (timing disabled): a
//! stream point's, a graph executable's fence, a context's failure probe.

use crate::checked::checked;
use crate::error::Result;
use cuda_host_sys::{CUevent, CUevent_flags, Driver};

/// A new event of the current context.
pub(crate) fn create(driver: &Driver) -> Result<CUevent> {
    let mut event = std::ptr::null_mut();
    let flags = CUevent_flags::CU_EVENT_DISABLE_TIMING.0;
    // SAFETY: a valid out-pointer; the context is current (the caller's).
    unsafe { checked!(driver, cuEventCreate(&mut event, flags)) }?;
    Ok(event)
}

/// Destroys an event; the driver lets one still pending go once it completed.
///
/// # Safety
/// `event` was made by [`create`], nothing uses it after, and it is destroyed once.
pub(crate) unsafe fn destroy(
    driver: &Driver,
    event: CUevent,
) -> std::result::Result<(), cuda_host_sys::Error> {
    // SAFETY: the caller's promise.
    unsafe { checked!(driver, cuEventDestroy_v2(event)) }
}

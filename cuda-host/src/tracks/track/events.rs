//! Making and destroying the events of a track's points.

use crate::checked::checked;
use crate::contain::logged;
use crate::error::Result;
use cuda_host_sys::{CUevent, CUevent_flags, Driver};

/// An event for a point. The context is current.
pub(super) fn create_event(driver: &Driver) -> Result<CUevent> {
    let mut event = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the context is current (the caller's).
    unsafe {
        checked!(
            driver,
            cuEventCreate(&mut event, CUevent_flags::CU_EVENT_DISABLE_TIMING.0)
        )
    }?;
    Ok(event)
}

/// Destroys an event; the driver lets one still pending go once it completed.
///
/// # Safety
/// `event` is an event of this module's that nobody uses after, destroyed once.
pub(super) unsafe fn destroy_event(
    driver: &Driver,
    event: CUevent,
) -> std::result::Result<(), cuda_host_sys::Error> {
    // SAFETY: the caller's promise.
    unsafe { checked!(driver, cuEventDestroy_v2(event)) }
}

/// Destroys events, logging what failed.
///
/// # Safety
/// As [`destroy_event`], for each of `events`.
pub(super) unsafe fn destroy_events(driver: &Driver, events: impl Iterator<Item = CUevent>) {
    for event in events {
        // SAFETY: the caller's promise.
        if let Err(error) = unsafe { destroy_event(driver, event) } {
            logged!(error!(
                "cannot destroy an event of the stream points: {error}"
            ));
        }
    }
}

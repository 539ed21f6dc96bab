//! Destroying the events of a track's points.

use crate::contain::logged;
use crate::query_events;
use cuda_host_sys::{CUevent, Driver};

/// Destroys events, logging what failed.
///
/// # Safety
/// As [`query_events::destroy`], for each of `events`.
pub(super) unsafe fn destroy_events(driver: &Driver, events: impl Iterator<Item = CUevent>) {
    for event in events {
        // SAFETY: the caller's promise.
        if let Err(error) = unsafe { query_events::destroy(driver, event) } {
            logged!(error!(
                "cannot destroy an event of the stream points: {error}"
            ));
        }
    }
}

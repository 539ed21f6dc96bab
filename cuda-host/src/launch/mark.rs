//! The mark that tells cuda-host it is running inside a host function, on the driver's thread:
//! its calls then refuse to reach the driver, and no user value is dropped.

use crate::error::{Error, Result};
use std::cell::Cell;

thread_local! {
    static IN_HOST_FUNCTION: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is running a host function launched through cuda-host (or the
/// panic hook, which runs there too).
pub fn in_host_function() -> bool {
    IN_HOST_FUNCTION.try_with(Cell::get).unwrap_or(false)
}

/// `Err` when called from inside a host function: cuda-host then does not reach the driver.
pub(crate) fn ensure_outside_host_function(call: &'static str) -> Result<()> {
    if in_host_function() {
        Err(Error::InHostFunction { call })
    } else {
        Ok(())
    }
}

/// Marks the thread as inside a host function while it lives.
pub(crate) struct InHostFunction {
    previous: bool,
}

impl InHostFunction {
    pub(crate) fn enter() -> Self {
        InHostFunction {
            previous: IN_HOST_FUNCTION.with(|mark| mark.replace(true)),
        }
    }
}

impl Drop for InHostFunction {
    fn drop(&mut self) {
        IN_HOST_FUNCTION.with(|mark| mark.set(self.previous));
    }
}

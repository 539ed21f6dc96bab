//! The mark that a thread runs user code for the driver or cuda-host (a host function, on the
//! driver's thread or the polled engine's): cuda-host's calls then refuse to reach the driver,
//! and no user value is dropped there. The mark carries its runner's way to hand a value off the
//! thread (`super::dispose`).

use crate::error::{Error, Result};
use std::any::Any;
use std::cell::Cell;

/// How the runner of a marked thread hands a value off it, to a thread that may drop it: the
/// launch machinery's, which gives it to the inbox of the record running there.
pub(crate) type HandOff = fn(Box<dyn Any + Send>);

thread_local! {
    /// The mark: the hand-off of the runner, while marked.
    static IN_HOST_FUNCTION: Cell<Option<HandOff>> = const { Cell::new(None) };
    /// Whether the thread was ever marked: the driver's host-function thread once it ran one of
    /// cuda-host's functions (or the polled engine's).
    static EVER_MARKED: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread ran a host function of cuda-host's before (or runs one now): how
/// a function the driver may call, or user code directly ([`host_copy_fn`](
/// crate::host_copy::host_copy_fn)), tells the driver's thread from a caller's.
pub(crate) fn ran_host_functions() -> bool {
    EVER_MARKED.try_with(Cell::get).unwrap_or(false)
}

/// Whether the calling thread is running a host function launched through cuda-host (or the
/// panic hook, which runs there too).
pub fn in_host_function() -> bool {
    hand_off().is_some()
}

/// The marked thread's hand-off; `None` on a thread not marked.
pub(crate) fn hand_off() -> Option<HandOff> {
    IN_HOST_FUNCTION.try_with(Cell::get).ok().flatten()
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
    previous: Option<HandOff>,
}

impl InHostFunction {
    /// Marks the thread, whose values go through `hand_off` until the mark is dropped.
    pub(crate) fn enter(hand_off: HandOff) -> Self {
        let _ = EVER_MARKED.try_with(|ever| ever.set(true));
        InHostFunction {
            previous: IN_HOST_FUNCTION.with(|mark| mark.replace(Some(hand_off))),
        }
    }
}

impl Drop for InHostFunction {
    fn drop(&mut self) {
        IN_HOST_FUNCTION.with(|mark| mark.set(self.previous));
    }
}

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

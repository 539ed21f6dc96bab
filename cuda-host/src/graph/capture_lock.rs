//! The one process-wide lock that looking up a capture and adding a node to it, and ending a
//! builder capture, take (`capture` says why); what is logged while it is held
//! is logged once it is released.

use crate::contain::LogHold;
use crate::error::{Error, Result};
use crate::sync::lock;
use std::cell::Cell;
use std::sync::{Mutex, MutexGuard};

/// Held by a thread looking up a stream's capture and adding a node to it, and by a thread
/// ending a builder capture. No user code of cuda-host's own running runs while it is held: a
/// `Drop` or a logger that looked up a capture, added a node or ended a capture there would
/// wait for itself. The log calls made meanwhile (a context that cannot be made current again
/// after the look-up of a special stream's capture, a user object that cannot be released) are
/// held until it is released (`contain::holding_logs`). Code the driver runs inside a call made
/// under it (other code's recapture callback, CUDA 13.3) is refused it: [`Error::Reentered`].
static CAPTURE_NODES: Mutex<()> = Mutex::new(());

thread_local! {
    /// Whether this thread holds [`CAPTURE_NODES`].
    static HOLDING: Cell<bool> = const { Cell::new(false) };
}

/// [`CAPTURE_NODES`], held, with the thread's log calls; on drop released, then the calls made.
pub(crate) struct Held {
    // Dropped in this order: the lock is released before the held calls are made.
    _holding: Holding,
    _guard: MutexGuard<'static, ()>,
    _logs: LogHold,
}

/// This thread's [`HOLDING`], set until dropped.
struct Holding;

impl Drop for Holding {
    fn drop(&mut self) {
        let _ = HOLDING.try_with(|holding| holding.set(false));
    }
}

/// The lock, for `call`; refused on a thread that holds it already (during its teardown, when
/// the flag is gone, taken as not held).
fn hold(call: &'static str) -> Result<Held> {
    if HOLDING.try_with(Cell::get).unwrap_or(false) {
        return Err(Error::Reentered { call });
    }
    let logs = LogHold::begin();
    let guard = lock(&CAPTURE_NODES);
    let _ = HOLDING.try_with(|holding| holding.set(true));
    Ok(Held {
        _holding: Holding,
        _guard: guard,
        _logs: logs,
    })
}

/// Held while a capture is looked up and a node added to it, for `call`: builder captures do
/// not end meanwhile, and no other node is added to any capture.
///
/// # Errors
/// [`Error::Reentered`] on a thread that holds it already.
pub(crate) fn adding(call: &'static str) -> Result<Held> {
    hold(call)
}

/// Held while a builder capture ends: no node is being added to it.
///
/// # Errors
/// [`Error::Reentered`] on a thread that holds it already.
pub(crate) fn ending(call: &'static str) -> Result<Held> {
    hold(call)
}

//! The one process-wide lock that looking up a capture and adding a node to it, and ending a
//! builder capture, take (`capture` says why); what is logged while it is held
//! is logged once it is released.

use crate::contain::LogHold;
use crate::sync::lock;
use std::sync::{Mutex, MutexGuard};

/// Held by a thread looking up a stream's capture and adding a node to it, and by a thread
/// ending a builder capture. No user code runs while it is held: a `Drop` or a
/// logger that looked up a capture, added a node or ended a capture there would wait for
/// itself. The log calls made meanwhile (a context that cannot be made current again after the
/// look-up of a special stream's capture, a user object that cannot be released) are held
/// until it is released (`contain::holding_logs`).
static CAPTURE_NODES: Mutex<()> = Mutex::new(());

/// [`CAPTURE_NODES`], held, with the thread's log calls; on drop released, then the calls made.
pub(crate) struct Held {
    // Dropped in this order: the lock is released before the held calls are made.
    _guard: MutexGuard<'static, ()>,
    _logs: LogHold,
}

fn hold() -> Held {
    let logs = LogHold::begin();
    Held {
        _guard: lock(&CAPTURE_NODES),
        _logs: logs,
    }
}

/// Held while a capture is looked up and a node added to it: builder captures
/// do not end meanwhile, and no other node is added to any capture.
pub(crate) fn adding() -> Held {
    hold()
}

/// Held while a builder capture ends: no node is being added to it.
pub(crate) fn ending() -> Held {
    hold()
}

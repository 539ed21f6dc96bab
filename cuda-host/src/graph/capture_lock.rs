//! The one process-wide lock that adding a node to a capture and ending a capture begun through
//! cuda-host take (`capture` says why), and the errors logged while it is held, which wait until
//! it is released.

use crate::launch::logged;
use crate::sync::lock;
use std::cell::RefCell;
use std::sync::{Mutex, MutexGuard};

/// Held by a thread adding a node to a capture, and by a thread ending a capture begun through
/// cuda-host. No user code runs while it is held (a `Drop` or a logger that ended a capture there
/// would wait for itself): what is logged meanwhile waits in [`DEFERRED`] until it is released.
static CAPTURE_NODES: Mutex<()> = Mutex::new(());

thread_local! {
    /// The errors this thread logged while it held [`CAPTURE_NODES`]: `Some` while it does.
    static DEFERRED: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

/// [`CAPTURE_NODES`], held; on drop released, then what was logged under it logged.
pub(crate) struct Held {
    guard: Option<MutexGuard<'static, ()>>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let deferred = DEFERRED.with(|deferred| deferred.borrow_mut().take());
        drop(self.guard.take());
        for message in deferred.into_iter().flatten() {
            logged!(error!("{message}"));
        }
    }
}

fn hold() -> Held {
    let guard = lock(&CAPTURE_NODES);
    DEFERRED.with(|deferred| *deferred.borrow_mut() = Some(Vec::new()));
    Held { guard: Some(guard) }
}

/// Held while a node is added to a capture: captures begun through cuda-host do not end
/// meanwhile, and no other node is added to any capture.
pub(crate) fn adding() -> Held {
    hold()
}

/// Held while a capture begun through cuda-host ends: no node is being added to it.
pub(crate) fn ending() -> Held {
    hold()
}

/// Logs an error, once [`CAPTURE_NODES`] is released if this thread holds it: a logger is user
/// code, which may end a capture through cuda-host, or panic.
pub(crate) fn log_error(message: std::fmt::Arguments<'_>) {
    let deferred = DEFERRED.with(|deferred| match deferred.borrow_mut().as_mut() {
        Some(messages) => {
            messages.push(message.to_string());
            true
        }
        None => false,
    });
    if !deferred {
        logged!(error!("{message}"));
    }
}

//! Reporting panics caught in host functions and in the `Drop`s of their values: always to `log`
//! at error level, and to a hook the application may install.
//!
//! Reporting never unwinds: a panicking logger or hook is caught. The hook is called through a
//! clone taken under the lock and called with no lock held, so a hook may replace or clear
//! itself; a replaced hook is dropped with no lock held too, and never on the driver's thread.

use crate::contain::{dispose, drop_or_hand_off, logged};
use crate::launch::hook_cell::HookCell;
use cuda_host_sys::CUstream;
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// A panic caught in a host function, or in the `Drop` of a value a host function captured.
#[derive(Debug)]
#[non_exhaustive]
pub struct HostFunctionPanic<'a> {
    /// The panic's message (`&str` or `String` payloads; a placeholder for others).
    pub message: &'a str,
    /// The stream the host function was launched on; `None` for a graph's host node, and for a
    /// `Drop`.
    pub stream: Option<CUstream>,
    /// Where the panic happened.
    pub origin: PanicOrigin,
}

/// Where a reported panic happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PanicOrigin {
    /// In a host function, on the driver's thread; the hook runs there, marked as inside a host
    /// function.
    HostFunction,
    /// In the `Drop` of a value a host function (or graph node) owned, on the thread that
    /// dropped it; the drain it happened in went on.
    Drop,
}

type Hook = Box<dyn Fn(&HostFunctionPanic<'_>) + Send + Sync>;

static HOOK: HookCell<Hook> = HookCell::new();

/// Installs `hook`, called for every panic caught in a host function or in the `Drop` of a value
/// a host function captured (after it is logged), replacing any earlier hook.
///
/// For a host function's panic, the hook runs on the driver's host-function thread, marked as
/// inside a host function: like a host function, it must not call CUDA or wait for stream work
/// (cuda-host's own calls return [`Error::InHostFunction`](crate::Error::InHostFunction) there).
/// For a `Drop`'s panic it runs on the thread that dropped the value. A panic in the hook is
/// caught and logged. The hook may replace or clear itself.
pub fn set_host_panic_hook(hook: impl Fn(&HostFunctionPanic<'_>) + Send + Sync + 'static) {
    let hook: Hook = Box::new(hook);
    drop_or_hand_off(HOOK.replace(Some(Arc::new(hook))));
}

/// Removes the installed hook, if any.
pub fn clear_host_panic_hook() {
    drop_or_hand_off(HOOK.replace(None));
}

fn message_of(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic with a non-string payload")
}

/// Reports a panic caught in a host function (on the driver's thread, which is marked), then
/// hands its payload to a caller's thread to drop.
pub(crate) fn report_host_function_panic(payload: Box<dyn Any + Send>, stream: Option<CUstream>) {
    report(&*payload, stream, PanicOrigin::HostFunction);
    dispose(payload);
}

/// Reports a panic caught in a `Drop` during a drain, then drops its payload (leaking it if its
/// own `Drop` panics).
pub(crate) fn report_drop_panic(payload: Box<dyn Any + Send>) {
    report(&*payload, None, PanicOrigin::Drop);
    dispose(payload);
}

fn report(payload: &(dyn Any + Send), stream: Option<CUstream>, origin: PanicOrigin) {
    let message = message_of(payload);
    let logged = catch_unwind(|| match (origin, stream) {
        (PanicOrigin::Drop, _) => {
            log::error!("the Drop of a value a host function captured panicked: {message}");
        }
        (_, Some(stream)) => log::error!("host function on stream {stream:p} panicked: {message}"),
        (_, None) => log::error!("graph host node panicked: {message}"),
    });
    if let Err(panicked) = logged {
        dispose(panicked);
    }
    let Some(hook) = HOOK.get() else {
        return;
    };
    let panic = HostFunctionPanic {
        message,
        stream,
        origin,
    };
    if let Err(panicked) = catch_unwind(AssertUnwindSafe(|| hook(&panic))) {
        dispose(panicked);
        logged!(error!("the host-function panic hook panicked"));
    }
    // If the hook was replaced meanwhile, this clone may be its last reference: a user's value,
    // never dropped on the driver's thread.
    if let Some(last) = Arc::into_inner(hook) {
        drop_or_hand_off(last);
    }
}

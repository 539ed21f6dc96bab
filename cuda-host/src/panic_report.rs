//! Reporting a panic caught in a host function: always to `log` at error level, and to a hook the
//! application may install.

use cuda_host_sys::CUstream;
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::RwLock;

/// A panic caught in a host function.
#[derive(Debug)]
#[non_exhaustive]
pub struct HostFunctionPanic<'a> {
    /// The panic's message (`&str` or `String` payloads; a placeholder for others).
    pub message: &'a str,
    /// The stream the host function was launched on; `None` for a graph's host node.
    pub stream: Option<CUstream>,
}

type Hook = Box<dyn Fn(&HostFunctionPanic<'_>) + Send + Sync>;

static HOOK: RwLock<Option<Hook>> = RwLock::new(None);

/// Installs `hook`, called for every panic caught in a host function (after it is logged),
/// replacing any earlier hook.
///
/// The hook runs on the driver's host-function thread: like a host function, it must not call
/// CUDA or wait for stream work. A panic in the hook is caught and logged.
pub fn set_host_panic_hook(hook: impl Fn(&HostFunctionPanic<'_>) + Send + Sync + 'static) {
    *HOOK
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Box::new(hook));
}

/// Removes the installed hook, if any.
pub fn clear_host_panic_hook() {
    *HOOK
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
}

pub(crate) fn report(payload: &(dyn Any + Send), stream: Option<CUstream>) {
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic with a non-string payload");
    match stream {
        Some(stream) => log::error!("host function on stream {stream:p} panicked: {message}"),
        None => log::error!("graph host node panicked: {message}"),
    }
    let hook = HOOK.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(hook) = hook.as_ref() {
        let panic = HostFunctionPanic { message, stream };
        if catch_unwind(AssertUnwindSafe(|| hook(&panic))).is_err() {
            log::error!("the host-function panic hook panicked");
        }
    }
}

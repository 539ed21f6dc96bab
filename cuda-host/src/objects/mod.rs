//! The few objects host functions need: devices and their primary contexts, streams, events.

mod context;
#[cfg(feature = "cudarc")]
mod cudarc;
mod event;
mod host_engine;
mod keep_alive;
mod stream;

pub use context::{Context, Device};
pub use event::{Event, EventFlags};
pub use host_engine::{HostEngine, HostEngineRefused};
pub use stream::{Stream, StreamFlags};

use crate::handle::SendHandle;
use crate::launch::{ContextShared, call_outside_host_function};
use std::sync::Arc;

/// What the `Drop` of an object owning a driver handle does: destroys it now, or later on a
/// caller's thread when dropped inside a host function; a failure is recorded and returned by
/// the next call on the context.
pub(crate) fn destroy_later<T: 'static>(
    context: &Arc<ContextShared>,
    object: &'static str,
    handle: *mut T,
    destroy: impl FnOnce(&ContextShared, *mut T) -> Result<(), cuda_host_sys::Error> + Send + 'static,
) {
    let context = Arc::clone(context);
    let handle = SendHandle::new(handle);
    call_outside_host_function(move || {
        if let Err(error) = destroy(&context, handle.get()) {
            context.record_drop_error(object, error);
        }
    });
}

//! What happens to a panic in code cuda-host runs for you: it is caught where it happens (a host
//! function, a graph's host node, a logger, the `Drop` of a captured value), logged, and handed to
//! the hook you set here; nothing unwinds into the driver, and the stream goes on.
//!
//! ```no_run
//! use cuda_host::panics::{PanicOrigin, set_host_panic_hook};
//! use cuda_host::{Device, Stream, StreamFlags, host_launch};
//!
//! set_host_panic_hook(|panic| {
//!     if panic.origin == PanicOrigin::HostFunction {
//!         eprintln!("a host function panicked: {}", panic.message);
//!     }
//! });
//! let context = Device::get(cuda_host::driver()?, 0)?.primary_context()?;
//! let stream = Stream::new(&context, StreamFlags::NonBlocking)?;
//! host_launch(&stream, || panic!("caught on the driver's thread, reported to the hook"))?;
//! stream.synchronize()?; // the stream went on
//! # Ok::<(), cuda_host::Error>(())
//! ```

pub use crate::launch::{
    HostFunctionPanic, PanicOrigin, clear_host_panic_hook, set_host_panic_hook,
};

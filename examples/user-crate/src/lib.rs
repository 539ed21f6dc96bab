//! A user's library: work that runs on a stream, then a host function that records it is done.
//!
//! Its tests (`tests/host_functions.rs`) run on the driver cuda-host-testing's selector picks: a
//! GPU's, else the software driver, where ordinary tests and fault tests share one binary.

use cuda_host::{Error, Stream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Marks `done` from the stream, in stream order, once the work enqueued before has run.
///
/// # Errors
/// cuda-host's error when the launch is refused.
pub fn mark_done_in_stream_order(stream: &Stream, done: &Arc<AtomicBool>) -> Result<(), Error> {
    let done = Arc::clone(done);
    cuda_host::host_launch(stream, move || done.store(true, Ordering::Release))
}

/// Waits for the stream, then answers whether `done` was marked.
///
/// # Errors
/// cuda-host's error from the synchronize: the driver's, when the stream's context failed
/// (a kernel's illegal address), and then nothing marked after the failure ran.
pub fn finished(stream: &Stream, done: &AtomicBool) -> Result<bool, Error> {
    stream.synchronize()?;
    Ok(done.load(Ordering::Acquire))
}

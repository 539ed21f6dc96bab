//! A user's library: work that runs on a stream, then a host function that records it is done.

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

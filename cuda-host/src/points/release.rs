//! Releasing a value in stream order: dropped once the stream has passed the point where it was
//! handed over, without a host function and without a blocking synchronize.

use crate::contain::in_host_function;
use crate::error::Error;
use crate::launch::{hold_until, reclaim_on_launch};
use crate::objects::Stream;
use crate::observe::Points;
use crate::points::{mark, progress};
use std::fmt;

/// Hands `value` to `stream`: it is dropped once the stream has passed this point, that is,
/// after all work enqueued on the stream before this call finished.
///
/// NVIDIA's reference: [`cuEventRecord`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html).
///
/// Marking the point costs the stream one event record (`cuEventRecord`), not a host function:
/// the stream never waits for the host. The value is dropped on **the thread that released
/// it**, by its first cuda-host call (a launch, a release, a synchronize,
/// [`reclaim`](crate::reclaim)) that sees the point passed, by the rule of host functions'
/// captured values: never on the driver's thread, never while this thread captures, nor while a
/// global-mode builder capture is open; once the thread has exited, by any
/// thread. A launch or a release looks at a stream's points at most every 50 µs; a
/// synchronize and [`reclaim`](crate::reclaim) look at once; a thread that makes no cuda-host
/// call keeps a passed value until its next one, or its exit. After [`Stream::synchronize`]
/// returns `Ok` on this thread, the values it released on that stream before the call have been
/// dropped.
///
/// Typical values: a pinned staging buffer an async copy reads, an `Arc` keeping device memory
/// alive until the kernels using it finished.
///
/// If the stream's context fails (a kernel's illegal address) before the point, the stream never
/// passes it: the value is dropped once cuda-host has seen the failure (a call or a look at the
/// point answering it, at the latest the stream's drop), when nothing will touch what it owns
/// any more.
///
/// # Errors
/// The value is handed back in [`Unreleased`], never dropped here, since the stream may still be
/// using it:
/// - [`Error::PointInCapture`] when the stream is being captured (the point would belong to the
///   graph); nothing is enqueued and the capture is left intact. Also when a capture other code
///   began between cuda-host's check and the point's record took that record: the capture keeps
///   it, intact (cuda-host never queries that event);
/// - [`Error::InHostFunction`] inside a host function;
/// - the driver's error when it refuses the record, or the stream's events cannot be made.
///
/// ```no_run
/// # fn demo(stream: &cuda_host::Stream, staging: Vec<u8>) -> cuda_host::Result<()> {
/// // ... enqueue an async copy that reads `staging` on `stream` ...
/// if let Err(refused) = cuda_host::points::release_in_stream_order(stream, staging) {
///     stream.synchronize()?; // the copy finished: now the buffer may go
///     drop(refused.value);
///     return Err(refused.error);
/// }
/// // no synchronize: `staging` is dropped by a later call on this thread once the copy finished
/// # Ok(()) }
/// ```
#[doc(alias = "cuEventRecord")]
pub fn release_in_stream_order<T: Send + 'static>(
    stream: &Stream,
    value: T,
) -> Result<(), Unreleased<T>> {
    if in_host_function() {
        return Err(Unreleased {
            error: Error::InHostFunction {
                call: "release_in_stream_order",
            },
            value,
        });
    }
    reclaim_on_launch();
    // A stream that marked points is watched for its context's failure when dropped.
    stream.note_launch();
    match mark(stream, Points::Release, std::any::type_name::<T>()) {
        Ok(mark) => {
            // The value keeps its context, whose tracks hold the events its drains look at,
            // however long it outlives the caller's stream and context values.
            let shared = std::sync::Arc::clone(mark.context.shared());
            hold_until(
                progress(&mark.track),
                shared,
                mark.point,
                (value, mark.context),
            );
            Ok(())
        }
        Err(error) => Err(Unreleased { error, value }),
    }
}

/// A value [`release_in_stream_order`] could not hand to the stream, with why: the caller gets
/// it back, since the stream may still be using it.
#[non_exhaustive]
pub struct Unreleased<T> {
    /// Why the stream did not take the value.
    pub error: Error,
    /// The value, still the caller's.
    pub value: T,
}

impl<T> Unreleased<T> {
    /// The value, still the caller's.
    pub fn into_value(self) -> T {
        self.value
    }
}

impl<T> fmt::Debug for Unreleased<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Unreleased")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Display for Unreleased<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the value was not released in stream order: {}",
            self.error
        )
    }
}

impl<T> std::error::Error for Unreleased<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

//! `host_launch`: enqueue host code in stream order.

use crate::capture_check::ensure_not_capturing;
use crate::error::Result;
use crate::reclaim;
use crate::record::{self, RecordHeader};
use crate::stream::Stream;
use crate::trampoline::{self, ensure_outside_host_function};
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

/// A target [`host_launch`] can enqueue `F` on: a [`Stream`] runs it once; a graph builder adds
/// it to the graph, which runs it on every launch.
pub trait HostLaunch<F>: sealed::Sealed {
    /// Enqueues `function`; see [`host_launch`].
    ///
    /// # Errors
    /// As [`host_launch`].
    fn host_launch(&self, function: F) -> Result<()>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::Stream {}
    impl Sealed for crate::GraphBuilder<'_> {}
    impl<T: Sealed + ?Sized> Sealed for &T {}
    impl<T: Sealed + ?Sized> Sealed for std::sync::Arc<T> {}
}

impl<T: HostLaunch<F> + ?Sized, F> HostLaunch<F> for &T {
    fn host_launch(&self, function: F) -> Result<()> {
        (**self).host_launch(function)
    }
}

impl<T: HostLaunch<F> + ?Sized, F> HostLaunch<F> for Arc<T> {
    fn host_launch(&self, function: F) -> Result<()> {
        (**self).host_launch(function)
    }
}

/// Enqueues `function` on `target`, to run after all work enqueued there before it and before
/// all work enqueued after it.
///
/// On a [`GraphBuilder`](crate::GraphBuilder), `function` is `Fn() + Send + Sync + 'static` and
/// becomes a host node of the graph, which runs it on every launch (see
/// [`GraphBuilder::callback`](crate::GraphBuilder::callback)).
///
/// On a [`Stream`], `function` is `FnMut() + Send + 'static` and runs exactly once, on the
/// driver's host-function thread. It is called through a reference, so the values it captures
/// stay in its launch record, which cuda-host drops later on a thread that calls into cuda-host
/// (the next launch, a synchronize, [`reclaim`](crate::reclaim); see
/// [`set_launch_reclaim_interval`](crate::set_launch_reclaim_interval)): a captured buffer may free
/// device memory in its `Drop`, which is forbidden on the driver's thread. (A `FnOnce` would drop
/// its captures at the end of its call, there.) After [`Stream::synchronize`] returns, the
/// values captured by host functions launched before it on that stream have been dropped.
///
/// Inside `function`, CUDA calls are forbidden: cuda-host's own return
/// [`Error::InHostFunction`](crate::Error::InHostFunction). A panic is caught, logged, passed to
/// the hook of [`set_host_panic_hook`](crate::set_host_panic_hook), and the stream goes on.
/// Whatever `function` waits for must not depend on work ordered after it, or on a lock held by a
/// thread that waits for the stream: both never finish.
///
/// If the stream's context fails (a kernel's illegal address), the driver never runs `function`;
/// its record is still handed back and reclaimed.
///
/// # Errors
/// - [`Error::StreamCapturing`](crate::Error::StreamCapturing) when the stream is being captured
///   (or is the legacy stream while a blocking stream captures): nothing is enqueued and the
///   capture is left intact.
/// - [`Error::InHostFunction`](crate::Error::InHostFunction) inside a host function.
/// - The driver's error when it refuses the launch; `function` is then dropped at once, on this
///   thread, without running.
///
/// ```no_run
/// # fn demo(stream: &cuda_host::Stream) -> cuda_host::Result<()> {
/// let results = vec![0u32; 1024];
/// cuda_host::host_launch(stream, move || println!("{} results ready", results.len()))?;
/// stream.synchronize()?; // `results` has been dropped here, on this thread
/// # Ok(()) }
/// ```
#[doc(alias = "cuLaunchHostFunc")]
#[doc(alias = "cuStreamAddCallback")]
pub fn host_launch<T, F>(target: &T, function: F) -> Result<()>
where
    T: HostLaunch<F> + ?Sized,
{
    target.host_launch(function)
}

impl<F> HostLaunch<F> for Stream
where
    F: FnMut() + Send + 'static,
{
    fn host_launch(&self, function: F) -> Result<()> {
        let context = self.prepare_launch()?;
        enqueue_run_once(self, record::new_run_once(context, function))
    }
}

/// The user data of [`host_launch_raw`].
#[derive(Debug, Clone, Copy)]
pub enum UserData<'a> {
    /// The function is called with a null pointer.
    None,
    /// The pointer is passed as is; nothing is allocated.
    PassThrough(*mut c_void),
    /// The bytes are copied into the launch record; the function gets a pointer to the copy
    /// (16-byte aligned), valid during its call. The caller may change or free its buffer at once.
    Copied(&'a [u8]),
}

/// Enqueues a C host function on `stream`, like `cuLaunchHostFunc`, with the same capture check
/// as [`host_launch`].
///
/// With [`UserData::None`] or [`UserData::PassThrough`] this is one `cuLaunchHostFunc` call and no
/// allocation. With [`UserData::Copied`], one launch record holds the copy until the function
/// has run (or until the driver hands it back unrun after a context failure).
///
/// # Safety
/// 1. `function` must be safe to call on the driver's host-function thread with the pointer it
///    receives, and must not call CUDA.
/// 2. With [`UserData::PassThrough`], the pointer must stay valid for what `function` does with
///    it until `function` has run.
/// 3. With [`UserData::Copied`], `function` must not keep the pointer after it returns.
///
/// # Errors
/// As [`host_launch`]; a refused launch frees the copied bytes at once.
#[doc(alias = "cuLaunchHostFunc")]
pub unsafe fn host_launch_raw(
    stream: &Stream,
    function: unsafe extern "C" fn(*mut c_void),
    user_data: UserData<'_>,
) -> Result<()> {
    let context = stream.prepare_launch()?;
    let pointer = match user_data {
        UserData::None => std::ptr::null_mut(),
        UserData::PassThrough(pointer) => pointer,
        UserData::Copied(bytes) => {
            return enqueue_run_once(stream, record::new_with_bytes(context, function, bytes));
        }
    };
    let driver = stream.context().driver();
    // SAFETY: the stream handle is valid while `stream` exists; the caller vouches for `function`
    // and `pointer`.
    let result = unsafe { driver.cuLaunchHostFunc(stream.as_raw(), Some(function), pointer) };
    Ok(driver.check("cuLaunchHostFunc", result)?)
}

impl Stream {
    /// The checks before any launch; returns the context reference for the launch record.
    #[inline]
    fn prepare_launch(&self) -> Result<Arc<crate::context::ContextShared>> {
        ensure_outside_host_function("host_launch")?;
        // Launches drain: the list stays bounded, and memory freed here is reused at once.
        reclaim::reclaim_on_launch();
        self.prepare()?;
        ensure_not_capturing(self.context().driver(), self.as_raw())?;
        Ok(Arc::clone(&self.context().shared))
    }
}

/// Hands a run-once record to the driver. `cuStreamAddCallback` is used rather than
/// `cuLaunchHostFunc` because it hands every record back exactly once, with an error status when
/// the context has failed, where `cuLaunchHostFunc` would silently never run it and leak it.
fn enqueue_run_once(stream: &Stream, record: NonNull<RecordHeader>) -> Result<()> {
    let driver = stream.context().driver();
    // SAFETY: the stream handle is valid while `stream` exists; the callback takes ownership of
    // the record when the driver calls it, which it does exactly once if this call succeeds.
    let result = unsafe {
        driver.cuStreamAddCallback(
            stream.as_raw(),
            Some(trampoline::run_once_callback),
            record.as_ptr().cast(),
            0,
        )
    };
    if let Err(error) = driver.check("cuStreamAddCallback", result) {
        // SAFETY: the driver refused the record, so it is still exclusively ours.
        unsafe { RecordHeader::drop(record.as_ptr()) };
        return Err(error.into());
    }
    Ok(())
}

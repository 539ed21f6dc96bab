//! `host_launch`: enqueue host code in stream order.
//!
//! The launches are free functions taking `&Stream`, not its methods: they are this feature's,
//! and a reader of `Stream` finds its methods in `objects/stream.rs`.

use crate::contain::ensure_outside_host_function;
use crate::error::Result;
use crate::launch::{
    self, CopiedBytes, HostFuncEntry, RunOnce, RunOnceClosure, drop_when_allowed,
    outside_host_function, reclaim_on_launch,
};
use crate::objects::Stream;
use crate::observe::Named;
use std::ffi::c_void;
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

/// Only cuda-host's targets take host functions: a stream here, a graph builder (`graph`).
pub(crate) mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::objects::Stream {}
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
/// NVIDIA's reference: [`cuLaunchHostFunc`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html).
///
/// NVIDIA's reference: [`cuStreamAddCallback`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html).
///
/// On a [`GraphBuilder`](crate::graph::GraphBuilder), `function` is `Fn() + Send + Sync + 'static` and
/// becomes a host node of the graph, which runs it on every launch (see
/// [`GraphBuilder::callback`](crate::graph::GraphBuilder::callback)).
///
/// On a [`Stream`], `function` is `FnMut() + Send + 'static` and runs exactly once, on the
/// driver's host-function thread. It is called through a reference, so the values it captures
/// stay in its launch record, which is dropped later on **the thread that launched it**, at its
/// next cuda-host call (the next launch, a synchronize, [`reclaim`](crate::reclaim); see
/// [`set_launch_reclaim_interval`](crate::options::set_launch_reclaim_interval)), or, once that thread has
/// exited, by any thread: a captured buffer may free device memory in its `Drop`, which is
/// forbidden on the driver's thread. (A `FnOnce` would drop its captures at the end of its call,
/// there.) After [`Stream::synchronize`] returns, the values captured by the host functions this
/// thread launched before it on that stream have been dropped, unless this thread is capturing a
/// stream or a global-mode builder capture is open (drops then wait for the
/// next call that may make them; see [`reclaim`](crate::reclaim)).
///
/// Inside `function`, CUDA calls are forbidden: cuda-host's own return
/// [`Error::InHostFunction`](crate::Error::InHostFunction). A panic is caught, logged, passed to
/// the hook of [`set_host_panic_hook`](crate::panics::set_host_panic_hook), and the stream goes on; so is
/// a panic in the `Drop` of a captured value, and the call that dropped it goes on.
/// Whatever `function` waits for must not depend on work ordered after it, or on a lock held by a
/// thread that waits for the stream: both never finish.
///
/// If the stream's context fails (a kernel's illegal address), the driver never runs `function`;
/// its record is reclaimed when cuda-host sees the failure (a synchronize or launch answering
/// it), at the latest when the stream is dropped.
///
/// A closure of up to 64 bytes is stored in a reused launch slot: once as many slots exist as
/// launches are in flight, a launch allocates nothing.
///
/// # Errors
/// - [`Error::StreamCapturing`](crate::Error::StreamCapturing) when the stream is being captured
///   (or is the legacy stream while a blocking stream captures): nothing is enqueued and the
///   capture is left intact. A builder capture waits for launches in flight on
///   its stream, so a launch either runs once or is refused, never captured. A capture other
///   code begins between the check and the launch can capture it; where the driver shows that
///   (the launch is the capture's last node), the launch is refused too, and the node left in
///   that graph does nothing.
/// - [`Error::InHostFunction`](crate::Error::InHostFunction) inside a host function; `function`
///   is then dropped later on the thread whose host function is running, never on the driver's.
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
///
/// The function runs on another thread, so what it captures must be `Send`:
///
/// ```compile_fail
/// # fn demo(stream: &cuda_host::Stream) {
/// let not_send = std::rc::Rc::new(1);
/// let _ = cuda_host::host_launch(stream, move || println!("{not_send}"));
/// # }
/// ```
#[doc(alias = "cuLaunchHostFunc")]
#[doc(alias = "cuStreamAddCallback")]
#[doc(alias = "launch_host_func")]
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
        let function = outside_host_function("host_launch", function)?;
        reclaim_on_launch();
        launch_run_once(self, RunOnceClosure(function), self.host_func_entry(), None)
    }
}

/// A named function: profilers show its run by the name given ([`named`](crate::options::named)).
impl<F> HostLaunch<Named<F>> for Stream
where
    F: FnMut() + Send + 'static,
{
    fn host_launch(&self, function: Named<F>) -> Result<()> {
        let Named { name, function } = function;
        let function = outside_host_function("host_launch", function)?;
        reclaim_on_launch();
        // The name goes to the launch's stamp, beside the closure: without the observing
        // features, nowhere.
        launch_run_once(
            self,
            RunOnceClosure(function),
            self.host_func_entry(),
            Some(name),
        )
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
/// NVIDIA's reference: [`cuLaunchHostFunc`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html).
///
/// With [`UserData::None`] or [`UserData::PassThrough`] this is one `cuLaunchHostFunc` call and no
/// allocation. With [`UserData::Copied`], a launch record holds the copy until the function has
/// run (or, if the context fails first, until cuda-host reclaims it unrun); up to 48 bytes are
/// copied into a reused launch slot without allocating.
///
/// # Safety
/// 1. `function` must be safe to call on the driver's host-function thread with the pointer it
///    receives, and must not call CUDA.
/// 2. With [`UserData::PassThrough`], the pointer must stay valid for what `function` does with
///    it until `function` has run. The driver calls such a function directly, with no record of
///    cuda-host's between: after a context failure it may still call one queued before the
///    failure, also once a synchronize answered the failure (the real driver does), so keep the
///    pointer valid until the stream is destroyed, or use [`UserData::Copied`], whose record does
///    not run once cuda-host has seen the failure. A capture other code begins between the
///    capture check and the launch takes the launch: where the driver shows that (the launch is
///    the capture's last node) the call answers [`Error::StreamCapturing`](crate::Error), and
///    where the look at the capture fails, that failure; but with no record to abandon, the
///    node calls `function` with the pointer on each launch of that graph (or, the launch not
///    taken, the stream once), so keep it valid while the graph may run.
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
    ensure_outside_host_function("host_launch_raw")?;
    // SAFETY: per the caller.
    unsafe { launch_raw(stream, function, user_data, stream.host_func_entry()) }
}

/// `host_launch_raw` through `entry`.
///
/// # Safety
/// As [`host_launch_raw`].
pub(crate) unsafe fn launch_raw(
    stream: &Stream,
    function: unsafe extern "C" fn(*mut c_void),
    user_data: UserData<'_>,
    entry: HostFuncEntry<'_>,
) -> Result<()> {
    reclaim_on_launch();
    let pointer = match user_data {
        UserData::None => std::ptr::null_mut(),
        UserData::PassThrough(pointer) => pointer,
        UserData::Copied(bytes) => {
            return match CopiedBytes::new(function, bytes) {
                CopiedBytes::Inline(payload) => launch_run_once(stream, payload, entry, None),
                CopiedBytes::Boxed(payload) => launch_run_once(stream, payload, entry, None),
            };
        }
    };
    stream.with_stream_context(|| {
        // SAFETY: the stream handle is valid while `stream` exists; the caller vouches for
        // `function` and `pointer`.
        unsafe {
            launch::pass_through(
                stream.shared_context(),
                stream.as_raw(),
                function,
                pointer,
                entry,
            )
        }
    })
}

/// Launches a run-once record of `payload` on `stream` through `entry`, with what the stream
/// needs for it: the context's deferred errors first, and the special streams' context current
/// during the launch. Profilers show its run as `named` when the caller named it.
pub(crate) fn launch_run_once<P: RunOnce>(
    stream: &Stream,
    payload: P,
    entry: HostFuncEntry<'_>,
    named: Option<&'static str>,
) -> Result<()> {
    stream.note_launch();
    let mut payload = Some(payload);
    let launched = stream.with_stream_context(|| {
        let payload = payload.take().expect("launched once");
        launch::run_once(
            stream.shared_context(),
            stream.as_raw(),
            payload,
            entry,
            named,
        )
    });
    if let Some(refused) = payload {
        // Refused before the launch was tried: dropped as the reclaim rule allows.
        drop_when_allowed(refused);
    }
    launched
}

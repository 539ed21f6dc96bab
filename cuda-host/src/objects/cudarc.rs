//! cudarc's contexts and streams as cuda-host's (the `cudarc` feature, cudarc 0.19), in safe code.
//!
//! cudarc opens libcuda by itself, so its handles mean something to cuda-host's [`Driver`] only
//! when both opened the same library. Both constructors check it: cudarc makes its context
//! current through its own library (as each cudarc call does first), and cuda-host's driver must
//! then see that context current on the thread. Two libraries keep separate current contexts.
//!
//! The cuda-host objects hold cudarc's `Arc`s and let go of them as rules 1 and 2 of
//! `crate::launch` allow (dropping the last one destroys the stream or releases the context),
//! leaving the thread's current context as it was, which cudarc's `Drop`s change.
//!
//! The two constructors live here, not beside their types: they exist only with the feature.

use super::keep_alive::KeepAlive;
use super::{Context, Stream};
use crate::checked::checked;
use crate::contain::{ensure_outside_host_function, logged};
use crate::error::{Error, Result};
use cuda_host_sys::{CUcontext, CUresult, CUstream, Driver};
use cudarc::driver::{CudaContext, CudaStream, DriverError};
use std::mem::ManuallyDrop;
use std::ptr;
use std::sync::Arc;

impl Context {
    /// A `Context` for cudarc's context, primary or not. It holds cudarc's `Arc` until the last
    /// clone, stream, event and launch record of it is gone, then drops it on a caller's thread;
    /// cuda-host never releases the context itself.
    ///
    /// `driver` must be the driver library cudarc opened. [`crate::driver`] opens `libcuda.so.1`;
    /// cudarc tries `libcuda.so` first, then other names down to `libcuda.so.1`. Where the driver
    /// is installed both names lead to the same library; where they lead to two, the check
    /// refuses cudarc's context.
    ///
    /// ```no_run
    /// use cuda_host::{Context, Stream, host_launch};
    /// use cudarc::driver::CudaContext;
    ///
    /// let cudarc_context = CudaContext::new(0).expect("a CUDA device");
    /// let context = Context::from_cudarc(cuda_host::driver()?, &cudarc_context)?;
    /// let cudarc_stream = cudarc_context.new_stream().expect("a stream");
    /// let stream = Stream::from_cudarc(&context, &cudarc_stream)?;
    /// host_launch(&stream, || println!("in the order of cudarc's work on the stream"))?;
    /// stream.synchronize()?;
    /// # Ok::<(), cuda_host::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DriverMismatch`] when cudarc opened another driver library than `driver`;
    /// [`Error::InHostFunction`]; the driver's error from `cuCtxGetCurrent`, `cuCtxSetCurrent` or
    /// `cuCtxGetDevice`; cudarc's error from making its context current (named
    /// `CudaContext::bind_to_thread`), which may be one cudarc recorded earlier for its next call.
    pub fn from_cudarc(driver: &Arc<Driver>, context: &Arc<CudaContext>) -> Result<Context> {
        ensure_outside_host_function("Context::from_cudarc")?;
        let raw = ensure_same_driver(driver, context)?;
        let held = Box::new(Held::new(driver, raw, Arc::clone(context)));
        // SAFETY: `raw` is a context of `driver` (checked above), and cudarc's `Arc`, which the
        // returned value holds until it and everything made from it are gone, keeps it alive.
        unsafe { Context::borrowed(driver, raw, Some(held)) }
    }
}

impl Stream {
    /// A `Stream` for cudarc's stream (one it created, its default stream or its per-thread
    /// stream), so that [`host_launch`](fn@crate::host_launch) runs in its order. It holds cudarc's
    /// `Arc` until it is dropped, then drops it on a caller's thread, after its own last use of
    /// the handle; cuda-host never destroys the stream: cudarc does, when its last `Arc` goes.
    ///
    /// It takes the `Context` the stream belongs to, as [`Stream::new`] does, rather than making
    /// one, so that the streams of a context share one `Context` (and its errors recorded by
    /// `Drop`s); that pairing is checked. Make the `Context` with [`Context::from_cudarc`] from
    /// `stream.context()`, or use any other `Context` of the same context and driver.
    ///
    /// # Errors
    /// [`Error::ContextMismatch`] when the stream belongs to another context than `context`;
    /// [`Error::DriverMismatch`] when cudarc opened another driver library than `context`'s;
    /// [`Error::InHostFunction`]; the driver's error from `cuCtxGetCurrent` or
    /// `cuCtxSetCurrent`; cudarc's error from making its context current, as for
    /// [`Context::from_cudarc`].
    pub fn from_cudarc(context: &Context, stream: &Arc<CudaStream>) -> Result<Stream> {
        ensure_outside_host_function("Stream::from_cudarc")?;
        let stream_context = ensure_same_driver(context.driver(), stream.context())?;
        if stream_context != context.as_raw() {
            return Err(Error::ContextMismatch {
                context: context.as_raw().addr(),
                stream_context: stream_context.addr(),
            });
        }
        let raw: CUstream = stream.cu_stream().cast();
        // SAFETY: 1. the stream belongs to cudarc's context, which is `context`'s: the same
        // handle, of the same driver library (checked above). cudarc's default and per-thread
        // streams are the null handle and `CU_STREAM_PER_THREAD`. 2. cudarc destroys a stream it
        // created only when the last `Arc` of it goes, and the returned value holds one until its
        // drop no longer uses the handle (a stream cudarc wrapped is alive as long, by the
        // obligation of its `wrap_borrowed_stream`).
        let mut borrowed = unsafe { Stream::borrow_raw(context, raw) };
        borrowed.keep_alive = Some(KeepAlive::new(Held::new(
            context.driver(),
            stream_context,
            Arc::clone(stream),
        )));
        Ok(borrowed)
    }
}

/// cudarc's context's handle, once `driver` has seen cudarc make it current; what was current
/// for `driver` before is current again after.
fn ensure_same_driver(driver: &Driver, context: &CudaContext) -> Result<CUcontext> {
    let mismatch = || Error::DriverMismatch {
        library: "cudarc",
        driver: driver.library_name().to_owned(),
    };
    let raw: CUcontext = context.cu_ctx().cast();
    let previous = match current(driver) {
        // cudarc initialised its library to make the context: this one is another.
        Err(error) if error.driver_result() == Some(CUresult::CUDA_ERROR_NOT_INITIALIZED) => {
            return Err(mismatch());
        }
        answer => answer?,
    };
    // The binding cudarc does before each of its own calls.
    if let Err(error) = context.bind_to_thread() {
        return Err(cudarc_error(driver, "CudaContext::bind_to_thread", error));
    }
    let seen = current(driver)?;
    if seen != previous {
        // SAFETY: `previous` was current on this thread a moment ago (or null, for none).
        unsafe { checked!(driver, cuCtxSetCurrent(previous)) }?;
    }
    if seen != raw {
        return Err(mismatch());
    }
    Ok(raw)
}

/// The calling thread's current context, as `driver` sees it (null for none).
fn current(driver: &Driver) -> Result<CUcontext> {
    let mut current = ptr::null_mut();
    // SAFETY: `current` is a valid out-pointer.
    unsafe { checked!(driver, cuCtxGetCurrent(&mut current)) }?;
    Ok(current)
}

/// cudarc's error as cuda-host's, naming the cudarc call: the codes are the driver's.
fn cudarc_error(driver: &Driver, call: &'static str, error: DriverError) -> Error {
    let result = CUresult(error.0 as u32);
    Error::Driver(cuda_host_sys::Error::Driver {
        call,
        result,
        description: driver.error_description(result),
    })
}

/// A cudarc `Arc`, dropped so that the thread's current context stays as it was: cudarc's
/// `Drop`s make their context current (to destroy a stream or release a context) and leave it so.
struct Held<T> {
    value: ManuallyDrop<T>,
    driver: Arc<Driver>,
    /// The address of the handle of the context `value` belongs to.
    context: usize,
}

impl<T> Held<T> {
    fn new(driver: &Arc<Driver>, context: CUcontext, value: T) -> Held<T> {
        Held {
            value: ManuallyDrop::new(value),
            driver: Arc::clone(driver),
            context: context.addr(),
        }
    }
}

impl<T> Drop for Held<T> {
    fn drop(&mut self) {
        let previous = current(&self.driver);
        // SAFETY: dropped once, here, and not used after.
        unsafe { ManuallyDrop::drop(&mut self.value) };
        match previous {
            // That context itself (cudarc binds it again, and a destroyed one is no longer
            // current): nothing to make current again.
            Ok(previous) if previous.addr() == self.context => {}
            Ok(previous) => {
                // SAFETY: `previous` was current on this thread a moment ago (or null, for none);
                // the drop could only destroy `self.context`, which it is not.
                let restored = unsafe { checked!(&self.driver, cuCtxSetCurrent(previous)) };
                if let Err(error) = restored {
                    logged!(error!(
                        "cannot make the previous context current again: {error}"
                    ));
                }
            }
            Err(error) => {
                logged!(error!(
                    "cannot tell which context to make current again: {error}"
                ));
            }
        }
    }
}

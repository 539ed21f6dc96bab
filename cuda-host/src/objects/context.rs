//! Devices, their primary contexts, and contexts borrowed from other code.

use crate::checked::checked;
use crate::contain::{ensure_outside_host_function, in_host_function};
use crate::error::{Error, Result};
use crate::launch::{
    ContextShared, abandon_if_failed_then_wait, drop_when_allowed, look_for_failure,
    outside_host_function, reclaim, unless_capture_forbids,
};
use crate::polled::ContextLanes;
use crate::tracks::{ContextTracks, Synchronizing};
use cuda_host_sys::{CUcontext, CUdevice, CUstream, Driver};
use std::ffi::{CStr, c_char};
use std::mem::ManuallyDrop;
use std::ptr;
use std::sync::{Arc, OnceLock};

/// A CUDA device of a loaded driver.
#[derive(Debug, Clone)]
pub struct Device {
    driver: Arc<Driver>,
    handle: CUdevice,
    ordinal: usize,
}

impl Device {
    /// How many devices the driver has. Initialises the driver (`cuInit`).
    ///
    /// NVIDIA's reference: [`cuDeviceGetCount`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html).
    ///
    /// # Errors
    /// The driver's error from `cuInit` or `cuDeviceGetCount`.
    #[doc(alias = "cuDeviceGetCount")]
    pub fn count(driver: &Arc<Driver>) -> Result<usize> {
        ensure_outside_host_function("Device::count")?;
        initialise(driver)?;
        let mut count = 0;
        // SAFETY: `count` is a valid out-pointer.
        unsafe { checked!(driver, cuDeviceGetCount(&mut count)) }?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    /// The device with this ordinal. Initialises the driver (`cuInit`).
    ///
    /// NVIDIA's reference: [`cuDeviceGet`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html).
    ///
    /// # Errors
    /// The driver's error, e.g. `CUDA_ERROR_INVALID_DEVICE` for an ordinal out of range.
    #[doc(alias = "cuDeviceGet")]
    pub fn get(driver: &Arc<Driver>, ordinal: usize) -> Result<Device> {
        ensure_outside_host_function("Device::get")?;
        initialise(driver)?;
        let index = i32::try_from(ordinal).map_err(|_| Error::InvalidArgument {
            what: format!("device ordinal {ordinal} is out of range"),
        })?;
        let mut handle = 0;
        // SAFETY: `handle` is a valid out-pointer.
        unsafe { checked!(driver, cuDeviceGet(&mut handle, index)) }?;
        Ok(Device {
            driver: Arc::clone(driver),
            handle,
            ordinal,
        })
    }

    /// The device's name, e.g. `"NVIDIA H200"`.
    ///
    /// NVIDIA's reference: [`cuDeviceGetName`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html).
    ///
    /// # Errors
    /// The driver's error from `cuDeviceGetName`.
    #[doc(alias = "cuDeviceGetName")]
    pub fn name(&self) -> Result<String> {
        ensure_outside_host_function("Device::name")?;
        let mut name = [0 as c_char; 256];
        // SAFETY: the buffer holds `name.len()` bytes, the length passed.
        unsafe {
            checked!(
                &self.driver,
                cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, self.handle)
            )
        }?;
        // SAFETY: the driver wrote a NUL-terminated string into the buffer.
        let name = unsafe { CStr::from_ptr(name.as_ptr()) };
        Ok(name.to_string_lossy().into_owned())
    }

    /// The ordinal it was opened with.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The driver's handle.
    pub fn as_raw(&self) -> CUdevice {
        self.handle
    }

    /// The driver it belongs to.
    pub fn driver(&self) -> &Arc<Driver> {
        &self.driver
    }

    /// Retains the device's primary context (the one the CUDA runtime and most libraries share).
    ///
    /// NVIDIA's reference: [`cuDevicePrimaryCtxRetain`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PRIMARY__CTX.html).
    ///
    /// # Errors
    /// The driver's error from `cuDevicePrimaryCtxRetain`.
    #[doc(alias = "cuDevicePrimaryCtxRetain")]
    pub fn primary_context(&self) -> Result<Context> {
        Context::primary(self)
    }
}

fn initialise(driver: &Driver) -> Result<()> {
    // SAFETY: no pointer arguments; `cuInit` may be called any number of times.
    Ok(unsafe { checked!(driver, cuInit(0)) }?)
}

/// A CUDA context: a primary context cuda-host retained ([`Context::primary`]), released when the
/// last clone, stream, event and launch record of it is gone, or one another library made
/// ([`Context::borrow_raw`], `Context::from_cudarc`), which cuda-host never releases (it may hold
/// what keeps it alive: [`Context::borrow_raw_with_owner`]). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Context {
    /// Read by `objects::stream` directly on a launch's path.
    pub(super) state: Arc<ContextState>,
}

/// What the clones of one context share: the launch machinery's part ([`ContextShared`]), which
/// its launch records keep too, and each feature's per-context state, made on first use and
/// dropped before that part may let the context go (they hold its events and name its pinned
/// memory).
///
/// Aligned so that the `Arc`'s reference counts lie in cache lines of their own: every stream
/// point clones the context, and threads marking points at once would otherwise each miss on
/// the fields every call reads (`shared`, `tracks`) after another thread's clone wrote the line.
#[repr(align(128))]
pub(super) struct ContextState {
    pub(super) shared: ManuallyDrop<Arc<ContextShared>>,
    /// Stream points: each stream's track of points (`crate::points`).
    tracks: OnceLock<ContextTracks>,
    /// The polled engine: each stream's lane (`crate::polled`).
    lanes: OnceLock<ContextLanes>,
}

impl std::fmt::Debug for ContextState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self.shared, f)
    }
}

impl ContextState {
    fn new(shared: Arc<ContextShared>) -> ContextState {
        ContextState {
            shared: ManuallyDrop::new(shared),
            tracks: OnceLock::new(),
            lanes: OnceLock::new(),
        }
    }
}

impl Drop for ContextState {
    fn drop(&mut self) {
        drop(self.tracks.take());
        drop(self.lanes.take());
        // SAFETY: taken once, here; the field is not used again.
        let shared = unsafe { ManuallyDrop::take(&mut self.shared) };
        if Arc::strong_count(&shared) > 1 {
            // Records (or objects) outlive the last value: reclaimed if the context failed.
            look_for_failure(&shared);
        }
        // Letting go of the last reference frees the context's pinned memory and releases it,
        // which a builder capture forbids (`launch::context_shared`); a host
        // function never gets here (`Context`'s `Drop`).
        let mut shared = Some(shared);
        if unless_capture_forbids(|| drop(shared.take())).is_none() {
            drop_when_allowed(shared);
        }
    }
}

impl Context {
    /// Retains `device`'s primary context.
    ///
    /// NVIDIA's reference: [`cuDevicePrimaryCtxRetain`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PRIMARY__CTX.html).
    ///
    /// # Errors
    /// The driver's error from `cuDevicePrimaryCtxRetain`.
    #[doc(alias = "cuDevicePrimaryCtxRetain")]
    pub fn primary(device: &Device) -> Result<Context> {
        ensure_outside_host_function("Context::primary")?;
        let driver = &device.driver;
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the device handle came from the driver.
        unsafe { checked!(driver, cuDevicePrimaryCtxRetain(&mut raw, device.handle)) }?;
        let shared = ContextShared::retained_primary(Arc::clone(driver), device.handle, raw);
        Ok(Context {
            state: Arc::new(ContextState::new(Arc::new(shared))),
        })
    }

    /// Wraps a context made by other code (the CUDA runtime, cudarc, a C library), primary or
    /// not, without retaining it: dropping the last clone releases nothing. Its device is the one
    /// the driver reports for it (`cuCtxGetDevice`, asked with the context made current for the
    /// call, and what was current made current again).
    ///
    /// NVIDIA's reference: [`cuCtxGetDevice`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a null handle, [`Error::InHostFunction`], or the driver's
    /// error from `cuCtxGetCurrent`, `cuCtxSetCurrent` or `cuCtxGetDevice`.
    ///
    /// # Safety
    /// 1. `raw` must be a context of `driver`: made through the same loaded driver library, and
    ///    not destroyed.
    /// 2. It must stay alive (not destroyed; for a primary context, still retained by its owner)
    ///    while the returned `Context`, a clone of it, or anything made from it exists (streams,
    ///    events, graphs, executables), and until the work enqueued through them has finished:
    ///    cuda-host uses the handle until then, and the driver never runs the host functions of
    ///    a destroyed context.
    #[doc(alias = "cuCtxGetDevice")]
    pub unsafe fn borrow_raw(driver: &Arc<Driver>, raw: CUcontext) -> Result<Context> {
        ensure_outside_host_function("Context::borrow_raw")?;
        // SAFETY: the caller's obligations are those of `borrowed`, with nothing held.
        unsafe { Context::borrowed(driver, raw, None) }
    }

    /// As [`Context::borrow_raw`], holding `owner` until the last clone of the returned context,
    /// and the last stream, event, graph and launch record made from it, is gone; `owner` is then
    /// dropped on a caller's thread, never inside a host function. So `owner` may be what keeps
    /// `raw` alive, and its `Drop` may destroy the context (a driver call), once cuda-host is done
    /// with it. When this answers an error, `owner` is dropped before it returns (inside a host
    /// function: later, on a caller's thread).
    ///
    /// NVIDIA's reference: [`cuCtxGetDevice`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html).
    ///
    /// # Errors
    /// As [`Context::borrow_raw`].
    ///
    /// # Safety
    /// 1. `raw` must be a context of `driver`: made through the same loaded driver library, and
    ///    not destroyed.
    /// 2. It must stay alive while `owner` is, or as long as [`Context::borrow_raw`] requires.
    #[doc(alias = "cuCtxGetDevice")]
    pub unsafe fn borrow_raw_with_owner(
        driver: &Arc<Driver>,
        raw: CUcontext,
        owner: impl Send + Sync + 'static,
    ) -> Result<Context> {
        let owner = outside_host_function("Context::borrow_raw_with_owner", owner)?;
        // SAFETY: the caller's obligations are those of `borrowed`, with `owner` what keeps
        // `raw` alive.
        unsafe { Context::borrowed(driver, raw, Some(Box::new(owner))) }
    }

    /// A context that is not cuda-host's to release, kept alive by `keep_alive` if given, which
    /// is dropped after the last reference of the context.
    ///
    /// # Safety
    /// As [`Context::borrow_raw`], where `keep_alive` may be what keeps `raw` alive.
    pub(crate) unsafe fn borrowed(
        driver: &Arc<Driver>,
        raw: CUcontext,
        keep_alive: Option<Box<dyn std::any::Any + Send + Sync>>,
    ) -> Result<Context> {
        if raw.is_null() {
            return Err(Error::InvalidArgument {
                what: "a null CUcontext is no context".to_owned(),
            });
        }
        // SAFETY: per the caller.
        let shared = unsafe { ContextShared::borrowed(Arc::clone(driver), raw, keep_alive) }?;
        Ok(Context {
            state: Arc::new(ContextState::new(Arc::new(shared))),
        })
    }

    /// A context of this shared state, for tests against a fake driver.
    #[cfg(test)]
    pub(crate) fn of_shared(shared: Arc<ContextShared>) -> Context {
        Context {
            state: Arc::new(ContextState::new(shared)),
        }
    }

    /// What the context shares with its launch records.
    pub(crate) fn shared(&self) -> &Arc<ContextShared> {
        &self.state.shared
    }

    /// The stream points of the context, made on first use.
    pub(crate) fn tracks(&self) -> &ContextTracks {
        self.state
            .tracks
            .get_or_init(|| ContextTracks::new(self.shared()))
    }

    /// The polled engine's lanes of the context, made on first use.
    pub(crate) fn lanes(&self) -> &ContextLanes {
        self.state.lanes.get_or_init(ContextLanes::default)
    }

    /// What a synchronize of `stream` (of the whole context, with `None`) that begins now will
    /// have passed of the context's stream points, if it has any: told when it returned.
    pub(crate) fn synchronizing(&self, stream: Option<CUstream>) -> Option<Synchronizing> {
        self.state
            .tracks
            .get()
            .map(|tracks| tracks.synchronizing(stream))
    }

    /// The context's stream points, if any were marked.
    pub(crate) fn tracks_if_made(&self) -> Option<&ContextTracks> {
        self.state.tracks.get()
    }

    /// The driver's handle.
    pub fn as_raw(&self) -> CUcontext {
        self.shared().raw()
    }

    /// The driver it belongs to.
    pub fn driver(&self) -> &Arc<Driver> {
        self.shared().driver_arc()
    }

    /// The device's handle.
    pub fn device(&self) -> CUdevice {
        self.shared().device()
    }

    /// Makes this context current on the calling thread, for raw driver calls that use the
    /// current context. cuda-host's own calls leave the current context as they found it.
    ///
    /// NVIDIA's reference: [`cuCtxSetCurrent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html).
    ///
    /// # Errors
    /// [`Error::InHostFunction`], or the driver's error from `cuCtxGetCurrent`/`cuCtxSetCurrent`.
    #[doc(alias = "cuCtxSetCurrent")]
    pub fn bind_to_thread(&self) -> Result<()> {
        ensure_outside_host_function("Context::bind_to_thread")?;
        self.shared().bind_to_thread()
    }

    /// Waits until all work of the context has finished, then reclaims finished launch records.
    ///
    /// NVIDIA's reference: [`cuCtxSynchronize`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html).
    ///
    /// # Errors
    /// An error recorded by an earlier `Drop`, or the driver's error from `cuCtxSynchronize`
    /// (which also reports an earlier asynchronous failure, such as a kernel's illegal address).
    #[doc(alias = "cuCtxSynchronize")]
    pub fn synchronize(&self) -> Result<()> {
        ensure_outside_host_function("Context::synchronize")?;
        let driver = self.shared().driver();
        // A drop error stored earlier may be the failure itself: answered here, it waits too.
        let synchronizing = self.synchronizing(None);
        let synchronized = self.shared().take_drop_error().and_then(|()| {
            self.shared()
                .with_current(|| {
                    // SAFETY: no arguments; the context is current.
                    Ok(unsafe { checked!(driver, cuCtxSynchronize()) })
                })
                .and_then(|answer| answer.map_err(Error::from))
        });
        match synchronized.as_ref().err().and_then(Error::driver_result) {
            None if synchronized.is_ok() => {
                synchronizing.into_iter().for_each(Synchronizing::returned)
            }
            Some(result) => abandon_if_failed_then_wait(self.shared(), result, None),
            None => {}
        }
        reclaim();
        synchronized
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // Releasing the context is a driver call, never made on the driver's thread: from there
        // the reference goes to a caller's thread (`launch::context_shared` says why this is the
        // one place that needs it).
        if in_host_function() {
            drop_when_allowed(Arc::clone(&self.state));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_driver;
    use cuda_host_sys::CUresult;
    use std::ffi::c_void;
    use std::sync::atomic::{AtomicBool, Ordering};

    unsafe extern "C" fn device_three(device: *mut CUdevice) -> CUresult {
        // SAFETY: the caller passes a valid out-pointer.
        unsafe { device.write(3) };
        CUresult::CUDA_SUCCESS
    }

    unsafe extern "C" fn no_device(_device: *mut CUdevice) -> CUresult {
        CUresult::CUDA_ERROR_INVALID_CONTEXT
    }

    /// Sets its flag when dropped.
    struct Owner(Arc<AtomicBool>);

    impl Drop for Owner {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_borrowed_contexts_owner_is_dropped_with_its_last_clone_or_at_once_on_an_error() {
        // SAFETY: the fake has its entry point's signature.
        let driver =
            unsafe { fake_driver::driver(&[(c"cuCtxGetDevice", device_three as *mut c_void)]) };
        let dropped = Arc::new(AtomicBool::new(false));
        // SAFETY: the fake driver answers for its one context, which nothing destroys.
        let context = unsafe {
            Context::borrow_raw_with_owner(
                &driver,
                fake_driver::CONTEXT,
                Owner(Arc::clone(&dropped)),
            )
        }
        .expect("borrowed");
        assert_eq!(context.device(), 3);
        let clone = context.clone();
        drop(context);
        assert!(!dropped.load(Ordering::SeqCst), "a clone still uses it");
        drop(clone);
        assert!(dropped.load(Ordering::SeqCst), "the last clone is gone");

        // SAFETY: as above.
        let driver =
            unsafe { fake_driver::driver(&[(c"cuCtxGetDevice", no_device as *mut c_void)]) };
        let dropped = Arc::new(AtomicBool::new(false));
        // SAFETY: as above.
        let refused = unsafe {
            Context::borrow_raw_with_owner(
                &driver,
                fake_driver::CONTEXT,
                Owner(Arc::clone(&dropped)),
            )
        };
        assert!(refused.is_err());
        assert!(
            dropped.load(Ordering::SeqCst),
            "dropped before the error returned"
        );
    }
}

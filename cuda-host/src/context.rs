//! Devices, their primary contexts, and contexts borrowed from other code.

use crate::context_failure;
use crate::error::{Error, Result};
use crate::keep_alive::KeepAlive;
use crate::reclaim;
use crate::trampoline::ensure_outside_host_function;
use cuda_host_sys::{CUcontext, CUdevice, Driver};
use std::ffi::{CStr, c_char};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

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
    /// # Errors
    /// The driver's error from `cuInit` or `cuDeviceGetCount`.
    #[doc(alias = "cuDeviceGetCount")]
    pub fn count(driver: &Arc<Driver>) -> Result<usize> {
        ensure_outside_host_function("Device::count")?;
        initialise(driver)?;
        let mut count = 0;
        // SAFETY: `count` is a valid out-pointer.
        let result = unsafe { driver.cuDeviceGetCount(&mut count) };
        driver.check("cuDeviceGetCount", result)?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    /// The device with this ordinal. Initialises the driver (`cuInit`).
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
        let result = unsafe { driver.cuDeviceGet(&mut handle, index) };
        driver.check("cuDeviceGet", result)?;
        Ok(Device {
            driver: Arc::clone(driver),
            handle,
            ordinal,
        })
    }

    /// The device's name, e.g. `"NVIDIA H200"`.
    ///
    /// # Errors
    /// The driver's error from `cuDeviceGetName`.
    #[doc(alias = "cuDeviceGetName")]
    pub fn name(&self) -> Result<String> {
        ensure_outside_host_function("Device::name")?;
        let mut name = [0 as c_char; 256];
        // SAFETY: the buffer holds `name.len()` bytes, the length passed.
        let result = unsafe {
            self.driver
                .cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, self.handle)
        };
        self.driver.check("cuDeviceGetName", result)?;
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
    /// # Errors
    /// The driver's error from `cuDevicePrimaryCtxRetain`.
    #[doc(alias = "cuDevicePrimaryCtxRetain")]
    pub fn primary_context(&self) -> Result<Context> {
        Context::primary(self)
    }
}

fn initialise(driver: &Driver) -> Result<()> {
    // SAFETY: no pointer arguments; `cuInit` may be called any number of times.
    let result = unsafe { driver.cuInit(0) };
    Ok(driver.check("cuInit", result)?)
}

/// A CUDA context: a primary context cuda-host retained ([`Context::primary`]), released when the
/// last clone, stream, event and launch record of it is gone, or one another library made
/// ([`Context::borrow_raw`], `Context::from_cudarc`), which cuda-host never releases. Cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct Context {
    pub(crate) shared: Arc<ContextShared>,
}

/// What a context's streams, events and launch records share.
pub(crate) struct ContextShared {
    driver: Arc<Driver>,
    device: CUdevice,
    raw: CUcontext,
    /// Whether this value retained a primary context, which its drop releases. A borrowed
    /// context is its owner's to release.
    retained: bool,
    /// What keeps a borrowed context alive, if cuda-host holds it (cudarc's `Arc`); let go of,
    /// as the reclaim rules allow, once nothing of the context is left.
    _keep_alive: Option<KeepAlive>,
    has_drop_errors: AtomicBool,
    drop_errors: Mutex<Vec<Error>>,
}

// SAFETY: `raw` is a driver handle, valid on any thread; the driver API is thread-safe.
unsafe impl Send for ContextShared {}
// SAFETY: as above; the mutable state is behind an atomic and a mutex.
unsafe impl Sync for ContextShared {}

impl std::fmt::Debug for ContextShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("raw", &self.raw)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// Retains `device`'s primary context.
    ///
    /// # Errors
    /// The driver's error from `cuDevicePrimaryCtxRetain`.
    #[doc(alias = "cuDevicePrimaryCtxRetain")]
    pub fn primary(device: &Device) -> Result<Context> {
        ensure_outside_host_function("Context::primary")?;
        let driver = &device.driver;
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the device handle came from the driver.
        let result = unsafe { driver.cuDevicePrimaryCtxRetain(&mut raw, device.handle) };
        driver.check("cuDevicePrimaryCtxRetain", result)?;
        Ok(Context {
            shared: Arc::new(ContextShared {
                driver: Arc::clone(driver),
                device: device.handle,
                raw,
                retained: true,
                _keep_alive: None,
                has_drop_errors: AtomicBool::new(false),
                drop_errors: Mutex::new(Vec::new()),
            }),
        })
    }

    /// Wraps a context made by other code (the CUDA runtime, cudarc, a C library), primary or
    /// not, without retaining it: dropping the last clone releases nothing. Its device is the one
    /// the driver reports for it (`cuCtxGetDevice`, asked with the context made current for the
    /// call, and what was current made current again).
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

    /// A context that is not cuda-host's to release, kept alive by `keep_alive` if given, which
    /// is dropped after the last reference of the context.
    ///
    /// # Safety
    /// As [`Context::borrow_raw`], where `keep_alive` may be what keeps `raw` alive.
    pub(crate) unsafe fn borrowed(
        driver: &Arc<Driver>,
        raw: CUcontext,
        keep_alive: Option<KeepAlive>,
    ) -> Result<Context> {
        if raw.is_null() {
            return Err(Error::InvalidArgument {
                what: "a null CUcontext is no context".to_owned(),
            });
        }
        let mut shared = ContextShared {
            driver: Arc::clone(driver),
            device: 0,
            raw,
            retained: false,
            _keep_alive: keep_alive,
            has_drop_errors: AtomicBool::new(false),
            drop_errors: Mutex::new(Vec::new()),
        };
        shared.device = shared.with_current(|| {
            let mut device = 0;
            // SAFETY: `device` is a valid out-pointer; the context is current (the caller
            // guarantees it is a live context of this driver).
            let result = unsafe { driver.cuCtxGetDevice(&mut device) };
            driver.check("cuCtxGetDevice", result)?;
            Ok(device)
        })?;
        Ok(Context {
            shared: Arc::new(shared),
        })
    }

    /// The driver's handle.
    pub fn as_raw(&self) -> CUcontext {
        self.shared.raw
    }

    /// The driver it belongs to.
    pub fn driver(&self) -> &Arc<Driver> {
        &self.shared.driver
    }

    /// The device's handle.
    pub fn device(&self) -> CUdevice {
        self.shared.device
    }

    /// Makes this context current on the calling thread, for raw driver calls that use the
    /// current context. cuda-host's own calls do this where they need it.
    ///
    /// # Errors
    /// [`Error::InHostFunction`], or the driver's error from `cuCtxGetCurrent`/`cuCtxSetCurrent`.
    #[doc(alias = "cuCtxSetCurrent")]
    pub fn bind_to_thread(&self) -> Result<()> {
        ensure_outside_host_function("Context::bind_to_thread")?;
        self.shared.bind_to_thread()
    }

    /// Waits until all work of the context has finished, then reclaims finished launch records.
    ///
    /// # Errors
    /// An error recorded by an earlier `Drop`, or the driver's error from `cuCtxSynchronize`
    /// (which also reports an earlier asynchronous failure, such as a kernel's illegal address).
    #[doc(alias = "cuCtxSynchronize")]
    pub fn synchronize(&self) -> Result<()> {
        ensure_outside_host_function("Context::synchronize")?;
        self.shared.take_drop_error()?;
        let driver = &self.shared.driver;
        // SAFETY: no arguments; the context is current.
        let result = self
            .shared
            .with_current(|| Ok(unsafe { driver.cuCtxSynchronize() }))?;
        context_failure::note(&self.shared, result);
        reclaim::reclaim();
        Ok(driver.check("cuCtxSynchronize", result)?)
    }
}

impl ContextShared {
    pub(crate) fn driver(&self) -> &Driver {
        &self.driver
    }

    pub(crate) fn raw(&self) -> CUcontext {
        self.raw
    }

    /// Runs `call` with this context current on the calling thread, then makes what was current
    /// before current again: cuda-host leaves the thread's current context as it found it.
    pub(crate) fn with_current<T>(&self, call: impl FnOnce() -> Result<T>) -> Result<T> {
        let mut previous = ptr::null_mut();
        // SAFETY: `previous` is a valid out-pointer.
        let result = unsafe { self.driver.cuCtxGetCurrent(&mut previous) };
        self.driver.check("cuCtxGetCurrent", result)?;
        if previous == self.raw {
            return call();
        }
        // SAFETY: `raw` is live while this value exists: retained by it, or kept alive by its
        // owner (`Context::borrow_raw`).
        let result = unsafe { self.driver.cuCtxSetCurrent(self.raw) };
        self.driver.check("cuCtxSetCurrent", result)?;
        let outcome = call();
        // SAFETY: `previous` was current on this thread a moment ago (or null, for none).
        let result = unsafe { self.driver.cuCtxSetCurrent(previous) };
        if let Err(error) = self.driver.check("cuCtxSetCurrent", result) {
            // The call's own outcome matters more to the caller: what it did happened.
            log::error!("cannot make the previous context current again: {error}");
        }
        outcome
    }

    pub(crate) fn bind_to_thread(&self) -> Result<()> {
        let mut current = ptr::null_mut();
        // SAFETY: `current` is a valid out-pointer.
        let result = unsafe { self.driver.cuCtxGetCurrent(&mut current) };
        self.driver.check("cuCtxGetCurrent", result)?;
        if current != self.raw {
            // SAFETY: `raw` is live while this value exists: retained by it, or kept alive by its
            // owner (`Context::borrow_raw`).
            let result = unsafe { self.driver.cuCtxSetCurrent(self.raw) };
            self.driver.check("cuCtxSetCurrent", result)?;
        }
        Ok(())
    }

    /// Keeps an error a `Drop` could not return, for the next call on this context.
    pub(crate) fn record_drop_error(&self, object: &'static str, error: cuda_host_sys::Error) {
        log::error!("destroying the {object} failed: {error}");
        let mut errors = self
            .drop_errors
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        errors.push(Error::DropFailed {
            object,
            source: error,
        });
        self.has_drop_errors.store(true, Ordering::Release);
    }

    /// The oldest error recorded by a `Drop`, if any, as this call's error.
    #[inline]
    pub(crate) fn take_drop_error(&self) -> Result<()> {
        if !self.has_drop_errors.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut errors = self
            .drop_errors
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let oldest = if errors.is_empty() {
            None
        } else {
            Some(errors.remove(0))
        };
        self.has_drop_errors
            .store(!errors.is_empty(), Ordering::Release);
        oldest.map_or(Ok(()), Err)
    }
}

impl Drop for ContextShared {
    fn drop(&mut self) {
        if !self.retained {
            // Another library's context; what keeps it alive, if held, goes with `_keep_alive`.
            return;
        }
        let driver = Arc::clone(&self.driver);
        let device = self.device;
        let release = move || {
            // SAFETY: this value retained the primary context once; it is released once.
            let result = unsafe { driver.cuDevicePrimaryCtxRelease_v2(device) };
            if let Err(error) = driver.check("cuDevicePrimaryCtxRelease_v2", result) {
                // The context is gone: nobody is left to return the error to.
                log::error!("releasing the primary context failed: {error}");
            }
        };
        reclaim::call_outside_host_function(release);
    }
}

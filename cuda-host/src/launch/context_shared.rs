//! What a context's objects (streams, events, graphs), its features' state and its launch
//! records share: the driver, the context handle, the pinned memory cuda-host allocated in it
//! (`pinned`, one pool for every value of the handle, freed with the last), and the errors
//! `Drop`s could not return. Each feature's own per-context state (stream points' tracks, the
//! polled engine's lanes) lives with the public context (`objects`), above this layer, which
//! names no feature.
//!
//! A launch record holds the context (an `Arc` of this) so that no record outlives it (rule 4),
//! and the context is released when the last object and record let go. That release, and the
//! free of the pinned pages before it, are driver calls, which must never run on the driver's
//! own thread (rule 1) nor during a builder capture, which a free would
//! invalidate (rule 2). So only two kinds of holder may let go of the last reference: a drain,
//! which runs only where both rules allow (records, and what threads cuda-host runs hand to
//! callers' threads); and the public context's state (`objects::context`), whose `Drop` defers
//! itself to a drain when it runs inside a host function or a capture. This type's own `Drop`
//! then frees and releases directly, and drops directly what keeps another library's context
//! alive (a borrowed context is not released: it is its owner's).

use crate::checked::checked;
use crate::contain::logged;
use crate::error::{Error, Result};
use crate::launch::context_failure::abandon_if_failed;
use crate::launch::pinned::{PinnedPage, PinnedPages, PinnedWord, pages_of};
use crate::sync::lock;
use cuda_host_sys::{CUcontext, CUdevice, Driver};
use std::any::Any;
use std::mem::ManuallyDrop;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What a context's streams, events, graphs and launch records share.
pub(crate) struct ContextShared {
    driver: Arc<Driver>,
    device: CUdevice,
    raw: CUcontext,
    /// Whether this value retained a primary context, which its drop releases. A borrowed
    /// context is its owner's to release.
    retained: bool,
    /// What keeps a borrowed context alive, if cuda-host holds it (cudarc's `Arc`): dropped
    /// with this value, never on the driver's thread (see the module documentation).
    _keep_alive: Option<Box<dyn Any + Send + Sync>>,
    has_drop_errors: AtomicBool,
    drop_errors: Mutex<Vec<Error>>,
    /// The pinned pages allocated in the context, shared with every other value of it; freed
    /// before the last of them releases it.
    pinned: ManuallyDrop<Arc<PinnedPages>>,
    /// The whole pages this value took from them, given back when it goes.
    pages: Mutex<Vec<PinnedPage>>,
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

impl ContextShared {
    /// The shared state of the primary context `raw` of `device`, which the caller retained
    /// once; it is released when this is dropped.
    pub(crate) fn retained_primary(driver: Arc<Driver>, device: CUdevice, raw: CUcontext) -> Self {
        ContextShared {
            pinned: ManuallyDrop::new(pages_of(&driver, raw)),
            pages: Mutex::new(Vec::new()),
            driver,
            device,
            raw,
            retained: true,
            _keep_alive: None,
            has_drop_errors: AtomicBool::new(false),
            drop_errors: Mutex::new(Vec::new()),
        }
    }

    /// The shared state of a context other code made, which this value never releases; its
    /// device is the one the driver reports for it (`cuCtxGetDevice`, asked with the context
    /// made current for the call). `keep_alive`, if given, is dropped with this value.
    ///
    /// # Safety
    /// `raw` must be a live context of `driver` for as long as this value and the work made
    /// through it live (`Context::borrow_raw` says it for its callers).
    pub(crate) unsafe fn borrowed(
        driver: Arc<Driver>,
        raw: CUcontext,
        keep_alive: Option<Box<dyn Any + Send + Sync>>,
    ) -> Result<Self> {
        let mut shared = ContextShared {
            pinned: ManuallyDrop::new(pages_of(&driver, raw)),
            pages: Mutex::new(Vec::new()),
            driver,
            device: 0,
            raw,
            retained: false,
            _keep_alive: keep_alive,
            has_drop_errors: AtomicBool::new(false),
            drop_errors: Mutex::new(Vec::new()),
        };
        shared.device = shared.with_current(|| {
            let mut device = 0;
            // SAFETY: `device` is a valid out-pointer; the context is current (a live context
            // of this driver, per the caller).
            unsafe { checked!(shared.driver(), cuCtxGetDevice(&mut device)) }?;
            Ok(device)
        })?;
        Ok(shared)
    }

    pub(crate) fn driver(&self) -> &Driver {
        &self.driver
    }

    pub(crate) fn driver_arc(&self) -> &Arc<Driver> {
        &self.driver
    }

    pub(crate) fn raw(&self) -> CUcontext {
        self.raw
    }

    pub(crate) fn device(&self) -> CUdevice {
        self.device
    }

    /// Runs `call` with this context current on the calling thread, then makes what was current
    /// before current again: cuda-host leaves the thread's current context as it found it.
    /// A call that meets the context's failure answers it: what the context will never run is
    /// reclaimed (`context_failure`), whichever call it was.
    pub(crate) fn with_current<T>(&self, call: impl FnOnce() -> Result<T>) -> Result<T> {
        // SAFETY: `raw` is live while this value exists: retained by it, or kept alive by its
        // owner (`Context::borrow_raw`).
        let answer = unsafe { with_context_current(self.driver(), self.raw, call) };
        if let Some(result) = answer.as_ref().err().and_then(Error::driver_result) {
            abandon_if_failed(self, result);
        }
        answer
    }

    /// Makes this context current on the calling thread, and leaves it so.
    pub(crate) fn bind_to_thread(&self) -> Result<()> {
        let driver = self.driver();
        let mut current = ptr::null_mut();
        // SAFETY: `current` is a valid out-pointer.
        unsafe { checked!(driver, cuCtxGetCurrent(&mut current)) }?;
        if current != self.raw {
            // SAFETY: `raw` is live while this value exists (as above).
            unsafe { checked!(driver, cuCtxSetCurrent(self.raw)) }?;
        }
        Ok(())
    }

    /// A page of pinned, device-mapped memory of this context, fresh and zeroed or given back by
    /// another value of it as that value left it (`pinned`); given back when this value goes,
    /// freed only when the last value releases the context (`pinned`). Made current for the
    /// call; the caller makes sure no builder capture forbids the allocation.
    ///
    /// # Errors
    /// The driver's error from `cuMemHostAlloc` or `cuMemHostGetDevicePointer`.
    pub(crate) fn allocate_pinned_page(&self) -> Result<PinnedPage> {
        let page = self.with_current(|| Ok(self.pinned.allocate(self.driver())?))?;
        lock(&self.pages).push(page);
        Ok(page)
    }

    /// A 64-bit word of pinned, device-mapped memory of this context, from one given back or a
    /// fresh page (`pinned`). Made current for the call; the caller makes sure no builder capture
    ///  forbids an allocation.
    ///
    /// # Errors
    /// The driver's error from `cuMemHostAlloc` or `cuMemHostGetDevicePointer`.
    pub(crate) fn allocate_pinned_word(&self) -> Result<PinnedWord> {
        self.with_current(|| Ok(self.pinned.allocate_word(self.driver())?))
    }

    /// A word as [`allocate_pinned_word`](Self::allocate_pinned_word) allocates one, leaving at
    /// least one more free for [`take_free_pinned_word`](Self::take_free_pinned_word).
    ///
    /// # Errors
    /// As [`allocate_pinned_word`](Self::allocate_pinned_word).
    pub(crate) fn allocate_pinned_word_with_spare(&self) -> Result<PinnedWord> {
        self.with_current(|| Ok(self.pinned.allocate_word_with_spare(self.driver())?))
    }

    /// A word of this context given back, if any, taken without a driver call: for what may
    /// run while other code captures, where an allocation would break the capture.
    pub(crate) fn take_free_pinned_word(&self) -> Option<PinnedWord> {
        self.pinned.take_free_word()
    }

    /// `count` words, as [`allocate_pinned_word`](Self::allocate_pinned_word) allocates one.
    ///
    /// # Errors
    /// As [`allocate_pinned_word`](Self::allocate_pinned_word); no word is taken then.
    pub(crate) fn allocate_pinned_words(&self, count: usize) -> Result<Vec<PinnedWord>> {
        self.with_current(|| Ok(self.pinned.allocate_words(self.driver(), count)?))
    }

    /// Gives `word` of this context back for reuse: nothing uses it any more.
    pub(crate) fn release_pinned_word(&self, word: PinnedWord) {
        self.pinned.release_word(word);
    }

    /// Keeps `word` of this context, and its page, for the life of the process.
    pub(crate) fn keep_pinned_word(&self, word: PinnedWord) {
        self.pinned.keep_word(word);
    }

    /// Keeps `page` of this context for the life of the process (a graph may write into it);
    /// whether it was not kept already.
    pub(crate) fn keep_pinned_page(&self, page: PinnedPage) -> bool {
        self.pinned.keep(page)
    }

    /// Keeps an error a `Drop` could not return, for the next call on this context.
    pub(crate) fn record_drop_error(&self, object: &'static str, error: cuda_host_sys::Error) {
        logged!(error!("destroying the {object} failed: {error}"));
        // The context's failure, which the destroy is the first to answer: what it launched
        // will never run, and is reclaimed now rather than when a later call meets the failure.
        abandon_if_failed(self, error.result());
        lock(&self.drop_errors).push(Error::DropFailed {
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
        let mut errors = lock(&self.drop_errors);
        let oldest = (!errors.is_empty()).then(|| errors.remove(0));
        self.has_drop_errors
            .store(!errors.is_empty(), Ordering::Release);
        oldest.map_or(Ok(()), Err)
    }
}

/// Runs `call` with `context` current on the calling thread, then makes what was current before
/// current again ([`ContextShared::with_current`], for those holding only the handle).
///
/// # Safety
/// `context` must be a live context of `driver`.
pub(crate) unsafe fn with_context_current<T>(
    driver: &Driver,
    context: CUcontext,
    call: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let mut previous = ptr::null_mut();
    // SAFETY: `previous` is a valid out-pointer.
    unsafe { checked!(driver, cuCtxGetCurrent(&mut previous)) }?;
    if previous == context {
        return call();
    }
    // SAFETY: a live context of this driver (the caller's promise).
    unsafe { checked!(driver, cuCtxSetCurrent(context)) }?;
    let outcome = call();
    // SAFETY: `previous` was current on this thread a moment ago (or null, for none).
    if let Err(error) = unsafe { checked!(driver, cuCtxSetCurrent(previous)) } {
        // The call's own outcome matters more to the caller: what it did happened.
        logged!(error!(
            "cannot make the previous context current again: {error}"
        ));
    }
    outcome
}

impl Drop for ContextShared {
    fn drop(&mut self) {
        // SAFETY: taken once, here; the field is not used again.
        let pinned = unsafe { ManuallyDrop::take(&mut self.pinned) };
        // No record or object of this value is left, so no host thread uses its pages any
        // more; a stream may still read a lane's last acknowledgement, which their next user
        // keeps.
        pinned.release_pages(std::mem::take(
            self.pages
                .get_mut()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        ));
        // Only where rules 1 and 2 allow (see the module's documentation), and by the last value
        // of the context (`pinned`): no stream uses the pages any more, and the context is still
        // retained.
        if let Some(mut pinned) = Arc::into_inner(pinned)
            && pinned.any_to_free()
        {
            let (driver, pinned) = (&*self.driver, &mut pinned);
            // SAFETY: the context is live: retained by this value, or kept alive by its owner.
            let freed = unsafe {
                with_context_current(driver, self.raw, || {
                    pinned.free_all(driver);
                    Ok(())
                })
            };
            if let Err(error) = freed {
                logged!(error!(
                    "cannot make a context current to free its pinned memory: {error}"
                ));
            }
        }
        if self.retained {
            release_primary(&self.driver, self.device);
        }
        // Another library's context is not released; what keeps it alive, if held, goes with
        // `_keep_alive`.
    }
}

/// Releases the primary context of `device`, which the caller retained once.
fn release_primary(driver: &Driver, device: CUdevice) {
    // SAFETY: the caller retained the primary context once; it is released once.
    let released = unsafe { checked!(driver, cuDevicePrimaryCtxRelease_v2(device)) };
    if let Err(error) = released {
        // The context is gone: nobody is left to return the error to.
        logged!(error!("releasing the primary context failed: {error}"));
    }
}

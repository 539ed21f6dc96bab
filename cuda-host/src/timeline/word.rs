//! A timeline's word: 8 bytes of pinned, device-mapped host memory of its context, which the
//! host reads and raises atomically and streams read and write through its device address.
//!
//! Whoever may still touch the word holds an `Arc` of it: every handle of the timeline, and, for
//! each stream operation on it, a record held in stream order until the stream passed the
//! operation (`crate::launch::hold_until`). So it is freed once no handle is left and every
//! stream that waited on it or signalled it got past that; never early. The watcher reads it
//! through `Waits` (`super::waits`), which this value closes before the memory goes.
//! Where a capture may have taken an operation on it, it is kept for the life of the process
//! ([`Word::keep`]): a graph may read or write it whenever it runs.

use crate::checked::checked;
use crate::contained_log::logged;
use crate::error::{Error, Result};
use crate::launch::{ContextShared, is_sticky, unless_capture_forbids, with_context_current};
use crate::timeline::waits::Waits;
use cuda_host_sys::{CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE, CUdeviceptr};
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Words kept for the life of the process because a capture may have taken an operation on
/// them (see the module's documentation).
pub(super) static KEPT_WORDS: AtomicU64 = AtomicU64::new(0);
/// Words allocated and neither freed nor gone with their failed context, kept ones included.
pub(super) static LIVE_WORDS: AtomicU64 = AtomicU64::new(0);

/// A timeline's word.
pub(super) struct Word {
    /// The pinned allocation, holding one `AtomicU64`.
    host: *mut c_void,
    /// Its address for the context's streams.
    device: CUdeviceptr,
    /// Its context, retained while the word lives.
    context: Arc<ContextShared>,
    /// What the watcher reads the word through; closed before the memory goes.
    waits: Arc<Waits>,
    /// Whether a capture may have taken an operation on it: never freed.
    kept: AtomicBool,
}

// SAFETY: pinned memory, which any thread may access atomically; the context's handle.
unsafe impl Send for Word {}
// SAFETY: as above.
unsafe impl Sync for Word {}

impl Word {
    /// A word of `context` holding `initial`, with the watcher's view of it.
    ///
    /// # Errors
    /// [`Error::AllocationInCapture`] while a capture begun through cuda-host forbids the
    /// allocation; the driver's error from `cuMemHostAlloc` or `cuMemHostGetDevicePointer`.
    pub(super) fn new(context: &Arc<ContextShared>, initial: u64) -> Result<Word> {
        let driver = context.driver();
        let allocate = || {
            context.with_current(|| {
                let mut host: *mut c_void = std::ptr::null_mut();
                // SAFETY: a valid out-pointer; the context is current.
                unsafe {
                    checked!(
                        driver,
                        cuMemHostAlloc(
                            &mut host,
                            size_of::<AtomicU64>(),
                            CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE
                        )
                    )
                }?;
                let mut device: CUdeviceptr = 0;
                // SAFETY: allocated with DEVICEMAP just above; a valid out-pointer.
                let mapped =
                    unsafe { checked!(driver, cuMemHostGetDevicePointer_v2(&mut device, host, 0)) };
                if let Err(error) = mapped {
                    // SAFETY: allocated above, never handed out.
                    if let Err(freed) = unsafe { checked!(driver, cuMemFreeHost(host)) } {
                        logged!(error!("cannot free a timeline's word: {freed}"));
                    }
                    return Err(Error::from(error));
                }
                Ok((host, device))
            })
        };
        let (host, device) =
            unless_capture_forbids(allocate).ok_or(Error::AllocationInCapture {
                what: "a timeline's word",
            })??;
        // SAFETY: a fresh pinned allocation, page-aligned and large enough; nobody else has it.
        unsafe { host.cast::<AtomicU64>().write(AtomicU64::new(initial)) };
        LIVE_WORDS.fetch_add(1, Ordering::Relaxed);
        Ok(Word {
            host,
            device,
            context: Arc::clone(context),
            waits: Arc::new(Waits::new(context.raw().addr(), host.cast())),
            kept: AtomicBool::new(false),
        })
    }

    /// The counter.
    pub(super) fn atomic(&self) -> &AtomicU64 {
        // SAFETY: the allocation lives as long as `self`; written once as an `AtomicU64`.
        unsafe { &*self.host.cast::<AtomicU64>() }
    }

    /// The address streams use.
    pub(super) fn device(&self) -> CUdeviceptr {
        self.device
    }

    /// Its context.
    pub(super) fn context(&self) -> &Arc<ContextShared> {
        &self.context
    }

    /// The watcher's view of it.
    pub(super) fn waits(&self) -> &Arc<Waits> {
        &self.waits
    }

    /// Keeps the memory for the life of the process: a capture may have taken an operation on
    /// it.
    pub(super) fn keep(&self) {
        if !self.kept.swap(true, Ordering::Relaxed) {
            KEPT_WORDS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Word {
    fn drop(&mut self) {
        // No look of the watcher reads the memory after this.
        self.waits.close();
        if self.kept.load(Ordering::Relaxed) {
            return;
        }
        let driver = self.context.driver();
        let host = self.host;
        let free = || {
            // SAFETY: allocated by `Word::new`, freed once; no handle is left and every stream
            // that used it passed its operations (the module's documentation).
            Ok(unsafe { checked!(driver, cuMemFreeHost(host)) }?)
        };
        // SAFETY: this context is retained by `self.context`.
        let freed = unsafe { with_context_current(driver, self.context.raw(), free) };
        match freed {
            Ok(()) => {
                LIVE_WORDS.fetch_sub(1, Ordering::Relaxed);
            }
            // A failed context answers every call with its error: its memory goes only with the
            // context (a reset, or the process's end), and nothing can use it any more.
            Err(error) if error.driver_result().is_some_and(is_sticky) => {
                LIVE_WORDS.fetch_sub(1, Ordering::Relaxed);
                logged!(debug!(
                    "a timeline's word goes with its failed context: {error}"
                ));
            }
            Err(error) => logged!(error!("cannot free a timeline's word: {error}")),
        }
    }
}

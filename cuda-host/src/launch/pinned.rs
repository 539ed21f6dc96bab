//! The pinned, device-mapped host memory cuda-host allocates in a context for words its streams
//! read and write (the polled engine's lanes): whole pages, freed only when the context is
//! released (`context_shared`).
//!
//! **Why at the release.** Freeing pinned memory (`cuMemFreeHost`) waits for the device, so a
//! free made at an arbitrary moment (a drain inside a caller's call) would wait for work that
//! waits for that caller: a host function blocking until the caller's next step. The context's
//! release comes only once its last object and record are gone, when no cuda-host work of the
//! context is pending. A page a graph may still write into is *kept* instead: never freed.

use crate::checked::checked;
use crate::contained_log::logged;
use crate::sync::lock;
use cuda_host_sys::{CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE, CUdeviceptr, Driver};
use std::ffi::c_void;
use std::sync::Mutex;

/// Bytes of a page.
pub(crate) const PAGE_BYTES: usize = 4096;

/// A page of pinned memory, zeroed: its host address and the address its context's streams see.
#[derive(Clone, Copy)]
pub(crate) struct PinnedPage {
    pub(crate) host: *mut c_void,
    pub(crate) device: CUdeviceptr,
}

struct Allocated {
    host: *mut c_void,
    /// Never freed: a graph may write into it whenever it runs.
    kept: bool,
}

/// The pages of one context.
#[derive(Default)]
pub(crate) struct PinnedPages {
    pages: Mutex<Vec<Allocated>>,
}

// SAFETY: the pages are pinned allocations, valid on any thread; the list is behind the mutex.
unsafe impl Send for PinnedPages {}
// SAFETY: as above.
unsafe impl Sync for PinnedPages {}

impl PinnedPages {
    /// A fresh zeroed page. The context must be current, and no capture begun through cuda-host
    /// may forbid the allocation (the caller asks, `reclaim::unless_capture_forbids`).
    pub(crate) fn allocate(&self, driver: &Driver) -> Result<PinnedPage, cuda_host_sys::Error> {
        let mut host: *mut c_void = std::ptr::null_mut();
        // SAFETY: `host` is a valid out-pointer; the context is current (the caller's).
        unsafe {
            checked!(
                driver,
                cuMemHostAlloc(
                    &mut host,
                    PAGE_BYTES,
                    CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE
                )
            )
        }?;
        let mut device: CUdeviceptr = 0;
        // SAFETY: `host` was allocated with DEVICEMAP just above; a valid out-pointer.
        let mapped =
            unsafe { checked!(driver, cuMemHostGetDevicePointer_v2(&mut device, host, 0)) };
        if let Err(error) = mapped {
            free(driver, host);
            return Err(error);
        }
        // SAFETY: `PAGE_BYTES` writable bytes, just allocated, touched by nothing else yet.
        unsafe { host.cast::<u8>().write_bytes(0, PAGE_BYTES) };
        lock(&self.pages).push(Allocated { host, kept: false });
        Ok(PinnedPage { host, device })
    }

    /// Keeps `page` for the life of the process: a graph may write into it whenever it runs.
    /// Whether it was not kept already.
    pub(crate) fn keep(&self, page: PinnedPage) -> bool {
        let mut pages = lock(&self.pages);
        match pages
            .iter_mut()
            .find(|allocated| allocated.host == page.host)
        {
            Some(allocated) if !allocated.kept => {
                allocated.kept = true;
                true
            }
            _ => false,
        }
    }

    /// Frees every page not kept. The context must be current, and no stream may use the pages
    /// any more: its last object and record are gone.
    pub(crate) fn free_all(&mut self, driver: &Driver) {
        let pages = std::mem::take(
            self.pages
                .get_mut()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for page in pages.into_iter().filter(|page| !page.kept) {
            free(driver, page.host);
        }
    }

    /// Whether any page was allocated and not kept.
    pub(crate) fn any_to_free(&mut self) -> bool {
        let pages = self
            .pages
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        pages.iter().any(|page| !page.kept)
    }
}

fn free(driver: &Driver, host: *mut c_void) {
    // SAFETY: allocated by `allocate`, freed once (the callers' promise).
    if let Err(error) = unsafe { checked!(driver, cuMemFreeHost(host)) } {
        logged!(error!("cannot free a page of pinned memory: {error}"));
    }
}

//! The pinned, device-mapped host memory cuda-host allocates in a context for words its streams
//! read and write: whole pages (the polled engine's lanes), and single 64-bit words carved out of
//! pages of their own (timelines), given back for reuse: a word once nothing uses it, a page of
//! lanes once the value that took it went, as it was left (a stream of that value may still read
//! a lane's last acknowledgement, `polled::lanes`). Pages are freed only when the context is
//! released (`context_shared`).
//!
//! **Why at the release.** Freeing pinned memory (`cuMemFreeHost`) waits for the device, so a
//! free made at an arbitrary moment (a drain inside a caller's call) would wait for work that
//! waits for that caller: a host function blocking until the caller's next step. The context's
//! release comes only once its last object and record are gone, when no cuda-host work of the
//! context is pending. A page a graph may still write into is *kept* instead: never freed.
//!
//! **One pool per context handle.** Every value cuda-host holds for one `CUcontext` of one
//! driver (two retains of a primary context, as two libraries make them, or a borrowed context
//! beside them) shares one [`PinnedPages`] ([`pages_of`]), freed with the last of them: a free at
//! the release of one would drain the context, waiting for the streams of the others, which may
//! wait for the releasing thread. The pages a value took whole (lanes) go back to the pool when
//! it goes, for the next value's use.

use crate::checked::checked;
use crate::contain::logged;
use crate::sync::lock;
use cuda_host_sys::{
    CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE, CUcontext, CUdeviceptr, Driver,
};
use std::ffi::c_void;
use std::sync::{Arc, Mutex, Weak};

/// Bytes of a page.
pub(crate) const PAGE_BYTES: usize = 4096;

/// A page of pinned memory: its host address and the address its context's streams see.
#[derive(Clone, Copy)]
pub(crate) struct PinnedPage {
    pub(crate) host: *mut c_void,
    pub(crate) device: CUdeviceptr,
}

/// A 64-bit word of pinned memory: its host address and the address its context's streams see.
#[derive(Clone, Copy)]
pub(crate) struct PinnedWord {
    pub(crate) host: *mut c_void,
    pub(crate) device: CUdeviceptr,
}

// SAFETY: an address of pinned memory, valid on any thread.
unsafe impl Send for PinnedWord {}

struct Allocated {
    host: *mut c_void,
    /// Never freed: a graph may write into it whenever it runs.
    kept: bool,
}

/// The pages of one context.
#[derive(Default)]
pub(crate) struct PinnedPages {
    pages: Mutex<Vec<Allocated>>,
    /// Words of word pages that nothing uses.
    free_words: Mutex<Vec<PinnedWord>>,
    /// Whole pages given back by a value of the context that went, for another's use.
    free_pages: Mutex<Vec<PinnedPage>>,
}

// SAFETY: the pages are pinned allocations, valid on any thread; the list is behind the mutex.
unsafe impl Send for PinnedPages {}
// SAFETY: as above.
unsafe impl Sync for PinnedPages {}

impl PinnedPages {
    /// A page given back, as the value that gave it back left it, or a fresh one, zeroed. A
    /// given-back page is not cleared: a stream of the value gone may still have to read a word
    /// of it (a wait that has yet to see its lane's last acknowledgement), so its next user goes
    /// on from what the words hold (`polled::lanes`). For a fresh one the context must be current,
    /// and no builder capture may forbid the allocation (the caller asks,
    /// `reclaim::unless_capture_forbids`).
    pub(crate) fn allocate(&self, driver: &Driver) -> Result<PinnedPage, cuda_host_sys::Error> {
        let given_back = lock(&self.free_pages).pop();
        given_back.map_or_else(|| self.fresh(driver), Ok)
    }

    /// A fresh zeroed page (as [`PinnedPages::allocate`]).
    fn fresh(&self, driver: &Driver) -> Result<PinnedPage, cuda_host_sys::Error> {
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
        // Listed at once, so that a page whose mapping fails is freed with the others at the
        // context's release: a free here would wait for the device (the module's documentation).
        lock(&self.pages).push(Allocated { host, kept: false });
        let mut device: CUdeviceptr = 0;
        // SAFETY: `host` was allocated with DEVICEMAP just above; a valid out-pointer.
        unsafe { checked!(driver, cuMemHostGetDevicePointer_v2(&mut device, host, 0)) }?;
        // SAFETY: `PAGE_BYTES` writable bytes, just allocated, touched by nothing else yet.
        unsafe { host.cast::<u8>().write_bytes(0, PAGE_BYTES) };
        Ok(PinnedPage { host, device })
    }

    /// A 64-bit word, 8-byte aligned, from a word given back or a fresh page; what it holds is
    /// the caller's to set. As [`PinnedPages::allocate`] for a fresh page.
    pub(crate) fn allocate_word(
        &self,
        driver: &Driver,
    ) -> Result<PinnedWord, cuda_host_sys::Error> {
        if let Some(word) = lock(&self.free_words).pop() {
            return Ok(word);
        }
        let mut words = self.fresh_words(driver)?;
        let first = words.pop().expect("a page holds words");
        lock(&self.free_words).extend(words);
        Ok(first)
    }

    /// A word given back, if any: no driver call, so none a capture could forbid.
    pub(crate) fn take_free_word(&self) -> Option<PinnedWord> {
        lock(&self.free_words).pop()
    }

    /// A word, as [`PinnedPages::allocate_word`], leaving at least one more given back for
    /// [`PinnedPages::take_free_word`]: a fresh page comes now, at a call that may allocate,
    /// rather than never.
    pub(crate) fn allocate_word_with_spare(
        &self,
        driver: &Driver,
    ) -> Result<PinnedWord, cuda_host_sys::Error> {
        let mut words = self.allocate_words(driver, 2)?;
        let word = words.pop().expect("two words");
        self.release_word(words.pop().expect("two words"));
        Ok(word)
    }

    /// The words of a fresh page (as [`PinnedPages::allocate`]).
    fn fresh_words(&self, driver: &Driver) -> Result<Vec<PinnedWord>, cuda_host_sys::Error> {
        let page = self.fresh(driver)?;
        Ok((0..PAGE_BYTES / size_of::<u64>())
            .rev()
            .map(|index| {
                let offset = index * size_of::<u64>();
                PinnedWord {
                    // SAFETY: within the page.
                    host: unsafe { page.host.cast::<u8>().add(offset) }.cast(),
                    device: page.device + offset as CUdeviceptr,
                }
            })
            .collect())
    }

    /// `count` words, from those given back and fresh pages (as [`PinnedPages::allocate`] for a
    /// fresh page); what they hold is the caller's to set. On error those taken go back.
    pub(crate) fn allocate_words(
        &self,
        driver: &Driver,
        count: usize,
    ) -> Result<Vec<PinnedWord>, cuda_host_sys::Error> {
        let mut taken = Vec::with_capacity(count);
        loop {
            {
                let mut free = lock(&self.free_words);
                let wanted = (count - taken.len()).min(free.len());
                let start = free.len() - wanted;
                taken.extend(free.drain(start..));
            }
            if taken.len() == count {
                return Ok(taken);
            }
            match self.fresh_words(driver) {
                Ok(words) => lock(&self.free_words).extend(words),
                Err(error) => {
                    lock(&self.free_words).extend(taken);
                    return Err(error);
                }
            }
        }
    }

    /// Gives `word` back for reuse: no stream and no host thread uses it any more.
    pub(crate) fn release_word(&self, word: PinnedWord) {
        lock(&self.free_words).push(word);
    }

    /// Gives `pages` (of [`PinnedPages::allocate`]) back for reuse, those not kept: no host thread
    /// uses them any more, but a stream may still read a word of them (its last
    /// acknowledgement), so the next user takes them as they are (`polled::lanes`).
    pub(crate) fn release_pages(&self, pages: Vec<PinnedPage>) {
        let allocated = lock(&self.pages);
        let kept = |page: &PinnedPage| {
            allocated
                .iter()
                .any(|allocated| allocated.host == page.host && allocated.kept)
        };
        let pages: Vec<PinnedPage> = pages.into_iter().filter(|page| !kept(page)).collect();
        drop(allocated);
        lock(&self.free_pages).extend(pages);
    }

    /// Keeps `word`, and so its page, for the life of the process: a graph may read or write
    /// it whenever it runs.
    pub(crate) fn keep_word(&self, word: PinnedWord) {
        let mut pages = lock(&self.pages);
        let within = |page: &Allocated| {
            let start = page.host.addr();
            (start..start + PAGE_BYTES).contains(&word.host.addr())
        };
        if let Some(page) = pages.iter_mut().find(|page| within(page)) {
            page.kept = true;
        }
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

/// The pools in use: the driver's and the context's addresses, and the pool.
type Pools = Vec<(usize, usize, Weak<PinnedPages>)>;

static POOLS: Mutex<Pools> = Mutex::new(Vec::new());

/// The pages of the context `context` of `driver`: the pool another value of that context holds,
/// or a new one. The caller holds the context (retained, or kept alive by its owner) before it
/// asks, so a pool found here belongs to the context as it is now, never to one released
/// before.
pub(crate) fn pages_of(driver: &Arc<Driver>, context: CUcontext) -> Arc<PinnedPages> {
    let key = (Arc::as_ptr(driver).addr(), context.addr());
    let mut pools = lock(&POOLS);
    pools.retain(|(_, _, pool)| pool.strong_count() != 0);
    let found = pools
        .iter()
        .filter(|(driver, context, _)| (*driver, *context) == key)
        .find_map(|(_, _, pool)| pool.upgrade());
    found.unwrap_or_else(|| {
        let pool = Arc::new(PinnedPages::default());
        pools.push((key.0, key.1, Arc::downgrade(&pool)));
        pool
    })
}

fn free(driver: &Driver, host: *mut c_void) {
    // SAFETY: allocated by `fresh`, freed once (the callers' promise).
    if let Err(error) = unsafe { checked!(driver, cuMemFreeHost(host)) } {
        logged!(error!("cannot free a page of pinned memory: {error}"));
    }
}

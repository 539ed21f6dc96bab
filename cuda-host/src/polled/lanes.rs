//! The lanes of the polled engine: per stream in use, two 32-bit words of pinned, device-mapped
//! host memory, the number the stream writes when it reaches a host function (`sequence`) and
//! the number of the last host function the engine ran (`acknowledged`), which the stream waits
//! for; and the queue of the host functions enqueued, in the order of their numbers.
//!
//! A lane serves one stream at a time, told apart by `cuStreamGetId`. When every lane of the
//! context is taken, the lanes whose queue is empty and whose stream waits for nothing are taken
//! back; their numbers go on where they were. Numbers are 32-bit; the stream's wait compares them
//! cyclically (`(int32_t)(word - value) >= 0`, measured on the 13.0 driver), the server only for
//! equality with the first number queued: a stream writes a number only once the one before was
//! acknowledged, so any other value in the word was not written by the lane's stream.
//!
//! **Retired lanes.** A batch a capture took (other code began it between the launch's check and
//! its enqueue) writes its number into its lane's word each time the graph runs, and waits for
//! it. Its lane is retired: no number is issued on it again and the stream is lent a fresh lane,
//! so that no later function of the stream depends on a word a graph writes; the server serves
//! the numbers queued before and then acknowledges the taken one, so that the graph's wait, and
//! the stream's own if the capture began just after the batch after all, passes. A retired lane
//! is never lent again, and its page is never freed (a graph may run any time): 4 KiB of pinned
//! memory kept for the life of the process per page holding one, counted in
//! [`PolledEngineCounts`](super::PolledEngineCounts).

use crate::checked::checked;
use crate::contained_log::logged;
use crate::error::{Error, Result};
use crate::launch::{ContextShared, unless_capture_forbids, with_context_current};
use crate::stream_leases::{StreamLease, StreamLeases};
use crate::sync::lock;
use cuda_host_sys::{
    CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE, CUcontext, CUdeviceptr, Driver,
};
use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Lanes retired, process-wide (see the module's documentation).
pub(super) static RETIRED_LANES: AtomicU64 = AtomicU64::new(0);
/// Pages kept for the life of the process, because they hold a retired lane.
pub(super) static KEPT_PAGES: AtomicU64 = AtomicU64::new(0);

/// Bytes of pinned memory per page: 512 lanes of two words.
const PAGE_BYTES: usize = 4096;
const LANES_PER_PAGE: usize = PAGE_BYTES / (2 * size_of::<u32>());

/// A host function waiting in a lane: its number and what to call: nothing for a number a
/// capture took, which is only acknowledged.
pub(super) struct Waiting {
    pub(super) number: u32,
    pub(super) call: Option<(unsafe extern "C" fn(*mut c_void), *mut c_void)>,
}

// SAFETY: the data is the launch's: a ticket or a pointer the caller vouched for on whatever
// thread runs the function.
unsafe impl Send for Waiting {}

/// A lane's two words in pinned memory, as the host sees them, valid while the context's shared
/// state lives (whoever holds a copy holds that state). Copied by the server into its own list,
/// so that its polling reads only its own memory and the pinned page, never a line an enqueue
/// writes.
#[derive(Clone, Copy)]
pub(super) struct Words {
    /// The word the stream writes.
    sequence: *const AtomicU32,
    /// The word the stream waits on.
    acknowledged: *const AtomicU32,
}

// SAFETY: pinned memory that any thread may access atomically.
unsafe impl Send for Words {}
// SAFETY: as above.
unsafe impl Sync for Words {}

impl Words {
    /// The last number the stream wrote.
    pub(super) fn sequence(&self) -> u32 {
        // SAFETY: the page lives while the context's shared state does, which whoever reads
        // holds (an enqueuer, or the server for a lane it serves).
        unsafe { (*self.sequence).load(Ordering::Acquire) }
    }

    /// Lets the stream go past every host function up to `number`.
    pub(super) fn acknowledge(&self, number: u32) {
        // SAFETY: as for `sequence`.
        unsafe { (*self.acknowledged).store(number, Ordering::Release) }
    }

    /// The last number acknowledged.
    pub(super) fn acknowledged(&self) -> u32 {
        // SAFETY: as for `sequence`.
        unsafe { (*self.acknowledged).load(Ordering::Acquire) }
    }
}

/// One stream's lane.
pub(crate) struct Lane {
    words: Words,
    /// The stream's address of the sequence word; the acknowledged word follows it.
    device: CUdeviceptr,
    pub(super) state: Mutex<LaneState>,
    pub(super) queue: Mutex<VecDeque<Waiting>>,
    /// Whether the server has the lane on its list.
    pub(super) served: AtomicBool,
    /// The index of its page in its context's list.
    page: usize,
    /// Whether it is retired, as its state says: read by the server without the lock.
    retired: AtomicBool,
}

pub(super) struct LaneState {
    /// The id of the stream the lane serves, if any.
    pub(super) owner: Option<u64>,
    /// The last number enqueued.
    pub(super) issued: u32,
    /// Whether a capture took one of its batches: no number is issued on it again.
    pub(super) retired: bool,
}

impl Lane {
    /// The stream's address of the sequence word.
    pub(super) fn sequence_device(&self) -> CUdeviceptr {
        self.device
    }

    /// The stream's address of the acknowledged word.
    pub(super) fn acknowledged_device(&self) -> CUdeviceptr {
        self.device + size_of::<u32>() as CUdeviceptr
    }

    /// The lane's words.
    pub(super) fn words(&self) -> Words {
        self.words
    }

    /// Retires the lane, whose state (`state`, locked) issued the number a capture took, and
    /// turns that number's queued function into a number only to acknowledge; whether it was
    /// still queued (else the stream wrote it and the server took it: the capture began after
    /// the batch, which ran live, and the lane goes on).
    pub(super) fn retire(&self, state: &mut LaneState, number: u32) -> bool {
        let mut queue = lock(&self.queue);
        let Some(waiting) = queue.back_mut().filter(|waiting| waiting.number == number) else {
            return false;
        };
        waiting.call = None;
        state.retired = true;
        self.retired.store(true, Ordering::Release);
        true
    }

    /// Whether the lane is retired (see [`Lane::retire`]).
    pub(super) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }
}

struct Page {
    host: *mut c_void,
    /// Whether one of its lanes is retired: the page is never freed.
    kept: bool,
}

/// The lanes of one context.
pub(crate) struct ContextLanes {
    driver: Arc<Driver>,
    context: CUcontext,
    state: Mutex<State>,
}

// SAFETY: the raw pointers are the context's handle and pinned allocations, valid on any thread.
unsafe impl Send for ContextLanes {}
// SAFETY: as above; the mutable state is behind the mutex.
unsafe impl Sync for ContextLanes {}

#[derive(Default)]
struct State {
    pages: Vec<Page>,
    leases: StreamLeases<Lane>,
}

// SAFETY: pages are pinned allocations, valid on any thread.
unsafe impl Send for State {}

impl ContextLanes {
    pub(crate) fn new(context: &ContextShared) -> ContextLanes {
        ContextLanes {
            driver: Arc::clone(context.driver_arc()),
            context: context.raw(),
            state: Mutex::new(State::default()),
        }
    }

    /// The lane of the stream `stream_id`, given one if it has none.
    ///
    /// # Errors
    /// [`Error::AllocationInCapture`] when a new page is needed while a capture begun through
    /// cuda-host forbids the allocation; the driver's error from allocating it.
    pub(super) fn lane_of(&self, shared: &ContextShared, stream_id: u64) -> Result<Arc<Lane>> {
        let state = &mut *lock(&self.state);
        let pages = &mut state.pages;
        state.leases.of(stream_id, || {
            let index = pages.len();
            let allocated =
                unless_capture_forbids(|| shared.with_current(|| self.allocate_page(index)))
                    .ok_or(Error::AllocationInCapture {
                        what: "a page of the polled engine's lanes",
                    })?;
            let (page, lanes) = allocated?;
            pages.push(page);
            Ok(lanes)
        })
    }

    /// Retires `lane`, whose stream `stream_id` a capture took a batch of (see the module's
    /// documentation): the stream gets another lane at its next launch, and the lane's page is
    /// kept for the life of the process. The lane's state says it is retired already.
    pub(super) fn retire(&self, stream_id: u64, lane: &Arc<Lane>) {
        let state = &mut *lock(&self.state);
        if state.leases.forget(stream_id, lane) {
            state.pages[lane.page].kept = true;
            RETIRED_LANES.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A page of lanes, all words zero, the `page_index`-th of the context. The context is current.
    fn allocate_page(&self, page_index: usize) -> Result<(Page, Vec<Arc<Lane>>)> {
        let driver = &*self.driver;
        let mut host: *mut c_void = std::ptr::null_mut();
        // SAFETY: `host` is a valid out-pointer; the context is current.
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
            // SAFETY: allocated above, never handed out.
            if let Err(freed) = unsafe { checked!(driver, cuMemFreeHost(host)) } {
                logged!(error!(
                    "cannot free a page of the polled engine's lanes: {freed}"
                ));
            }
            return Err(error.into());
        }
        let lanes = (0..LANES_PER_PAGE)
            .map(|index| {
                // SAFETY: in bounds of the page; pinned allocations are page-aligned, so each
                // word is 4-byte aligned.
                let sequence = unsafe { host.cast::<AtomicU32>().add(2 * index) };
                // SAFETY: as above, the word after it.
                let acknowledged = unsafe { sequence.add(1) };
                // SAFETY: as above; nothing else touches the fresh page yet.
                unsafe {
                    sequence.write(AtomicU32::new(0));
                    acknowledged.write(AtomicU32::new(0));
                }
                Arc::new(Lane {
                    words: Words {
                        sequence,
                        acknowledged,
                    },
                    device: device + (2 * index * size_of::<u32>()) as CUdeviceptr,
                    state: Mutex::new(LaneState {
                        owner: None,
                        issued: 0,
                        retired: false,
                    }),
                    queue: Mutex::new(VecDeque::new()),
                    served: AtomicBool::new(false),
                    page: page_index,
                    retired: AtomicBool::new(false),
                })
            })
            .collect();
        Ok((Page { host, kept: false }, lanes))
    }
}

impl StreamLease for Lane {
    fn lend(&self, stream_id: u64) {
        lock(&self.state).owner = Some(stream_id);
    }

    /// Quiet: nothing queued, its stream waits for nothing, and no thread is enqueuing on it.
    fn take_back_if_quiet(&self) -> bool {
        let Ok(mut state) = self.state.try_lock() else {
            return false;
        };
        if state.retired
            || !lock(&self.queue).is_empty()
            || self.words.acknowledged() != state.issued
        {
            return false;
        }
        state.owner = None;
        true
    }
}

impl Drop for ContextLanes {
    fn drop(&mut self) {
        // No lane is served now: the server holds the context while it serves one. A retired
        // lane's page is kept: a graph may write into it whenever it runs.
        let (kept, pages): (Vec<Page>, Vec<Page>) = std::mem::take(&mut lock(&self.state).pages)
            .into_iter()
            .partition(|page| page.kept);
        KEPT_PAGES.fetch_add(kept.len() as u64, Ordering::Relaxed);
        if pages.is_empty() {
            return;
        }
        let driver = &*self.driver;
        let free_pages = || {
            for page in pages {
                // SAFETY: allocated by `allocate_page`, freed once; no stream waits on it any
                // more (every number enqueued was acknowledged before the server let the context
                // go). The context is current.
                if let Err(error) = unsafe { checked!(driver, cuMemFreeHost(page.host)) } {
                    logged!(error!(
                        "cannot free a page of the polled engine's lanes: {error}"
                    ));
                }
            }
            Ok(())
        };
        // SAFETY: this context is still retained by the shared state being dropped.
        let current = unsafe { with_context_current(driver, self.context, free_pages) };
        if let Err(error) = current {
            logged!(error!(
                "cannot free the polled engine's lanes of a context: {error}"
            ));
        }
    }
}

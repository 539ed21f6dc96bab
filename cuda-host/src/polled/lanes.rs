//! The lanes of the polled engine: per stream in use, two 32-bit words of pinned, device-mapped
//! host memory, the number the stream writes when it reaches a host function (`sequence`) and
//! the number of the last host function the engine ran (`acknowledged`), which the stream waits
//! for; and the queue of the host functions enqueued, in the order of their numbers.
//!
//! A lane serves one stream at a time, told apart by `cuStreamGetId`. When every lane of the
//! context is taken, the lanes whose queue is empty and whose last number was acknowledged are
//! taken back (their stream may have yet to see that acknowledgement: the later numbers of the
//! lane's next stream only let it go sooner); their numbers go on where they were. Numbers are
//! 32-bit; the stream's wait compares them cyclically (`(int32_t)(word - value) >= 0`, measured
//! on the 13.0 driver), the server only for equality with the first number queued: a stream
//! writes a number only once the one before was acknowledged, so any other value in the word was
//! not written by the lane's stream.
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
//!
//! **Pages.** The words live in pages of the context's pinned memory (`launch::pinned`), freed
//! only when the context is released, once no record of it is left: a page freed earlier could
//! wait for the device while a host function of the context waits for the freeing thread. A page
//! a context value gave back when it went is taken by the next value as it was: a stream of the
//! value gone may have yet to read its last acknowledgement (its host function ran, the record
//! went, and nothing else keeps the value while a device slow to see host memory reads the word
//! late), and a page cleared would make it wait for ever. Every number of a page given back was
//! acknowledged (nothing is queued: the value's records are all gone, and a retired lane's page is
//! never given back), so each lane goes on from the number in its acknowledged word, as a lane
//! taken back does: the late wait sees that number or a later one, and the stream word holds no
//! number above it, so the server never takes an old write for a new function.

use crate::contain::holding_logs;
use crate::error::{Error, Result};
use crate::launch::{ContextShared, PAGE_BYTES, PinnedPage, unless_capture_forbids};
use crate::stream_leases::{StreamLease, StreamLeases};
use crate::sync::lock;
use cuda_host_sys::CUdeviceptr;
use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Lanes retired, process-wide (see the module's documentation).
pub(super) static RETIRED_LANES: AtomicU64 = AtomicU64::new(0);
/// Pages kept for the life of the process, because they hold a retired lane.
pub(super) static KEPT_PAGES: AtomicU64 = AtomicU64::new(0);

/// Lanes per page of pinned memory: 512 of two words.
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
/// state lives (whoever holds a copy holds that state: its pages are freed with it). Copied by
/// the server into its own list, so that its polling reads only its own memory and the pinned
/// page, never a line an enqueue writes.
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

/// The lanes of one context: a stream's state of the engine, found through its context's state
/// (`objects::context`).
#[derive(Default)]
pub(crate) struct ContextLanes {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The context's pages that hold its lanes, in the order lanes name them.
    pages: Vec<PinnedPage>,
    leases: StreamLeases<Lane>,
}

// SAFETY: the pages are pinned allocations, valid on any thread.
unsafe impl Send for State {}

impl ContextLanes {
    /// The lane of the stream `stream_id`, given one if it has none.
    ///
    /// # Errors
    /// [`Error::AllocationInCapture`] when a new page is needed while a builder capture
    ///  forbids the allocation; the driver's error from allocating it.
    pub(super) fn lane_of(&self, shared: &ContextShared, stream_id: u64) -> Result<Arc<Lane>> {
        // The allocation may log (a context it cannot make current again) under the table's
        // lock, which a logger's polled launch would take.
        holding_logs(|| {
            let state = &mut *lock(&self.state);
            let pages = &mut state.pages;
            state.leases.of(stream_id, || {
                let index = pages.len();
                let page = unless_capture_forbids(|| shared.allocate_pinned_page()).ok_or(
                    Error::AllocationInCapture {
                        what: "a page of the polled engine's lanes",
                    },
                )??;
                pages.push(page);
                Ok(lanes_of_page(page, index))
            })
        })
    }

    /// Retires `lane`, whose stream `stream_id` a capture took a batch of (see the module's
    /// documentation): the stream gets another lane at its next launch, and the lane's page is
    /// kept for the life of the process. The lane's state says it is retired already.
    pub(super) fn retire(&self, shared: &ContextShared, stream_id: u64, lane: &Arc<Lane>) {
        let state = &mut *lock(&self.state);
        if state.leases.forget(stream_id, lane) {
            RETIRED_LANES.fetch_add(1, Ordering::Relaxed);
            if shared.keep_pinned_page(state.pages[lane.page]) {
                KEPT_PAGES.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The lanes of `page`, the `page_index`-th of the context, fresh (all zero) or given back (each
/// lane's last number acknowledged, see the module's documentation): each goes on from the number
/// its acknowledged word holds.
fn lanes_of_page(page: PinnedPage, page_index: usize) -> Vec<Arc<Lane>> {
    (0..LANES_PER_PAGE)
        .map(|index| {
            // SAFETY: in bounds of the page; pinned allocations are page-aligned, so each word
            // is 4-byte aligned; any bit pattern is a valid `AtomicU32`.
            let sequence = unsafe { page.host.cast::<AtomicU32>().add(2 * index) };
            // SAFETY: as above, the word after it.
            let acknowledged = unsafe { sequence.add(1) };
            let words = Words {
                sequence,
                acknowledged,
            };
            Arc::new(Lane {
                words,
                device: page.device + (2 * index * size_of::<u32>()) as CUdeviceptr,
                state: Mutex::new(LaneState {
                    owner: None,
                    issued: words.acknowledged(),
                    retired: false,
                }),
                queue: Mutex::new(VecDeque::new()),
                served: AtomicBool::new(false),
                page: page_index,
                retired: AtomicBool::new(false),
            })
        })
        .collect()
}

impl StreamLease for Lane {
    fn lend(&self, stream_id: u64) {
        lock(&self.state).owner = Some(stream_id);
    }

    /// Quiet: nothing queued, its last number acknowledged (see the module's documentation), and
    /// no thread is enqueuing on it.
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

//! The slots: one slot's memory, the table of every slot, the pool of the free ones no thread
//! holds, and each thread's cache of free ones.
//!
//! **A slot's memory**, two cache lines: where a run-once record's header, state, stream,
//! context and payload lie. Nothing else knows it: a payload asks [`fits_inline`], is written by
//! [`LaunchSlot::write`](super::ownership::LaunchSlot::write) and found by [`payload_of`]. The record header
//! comes first, so a slot's address is its record's and the reclaim lists treat slot records
//! like any other. What the host function touches (header, state, stream, the payload's start)
//! shares the first line; what only launching and abandoning need is at the end. With the
//! `nvtx` or `tracing` feature, a third line holds the launch's stamp (a caller's name, the time
//! for its queue delay: `crate::observe`); without them the stamp has no size.
//!
//! **The table** holds every slot, in segments that double in size, and the pool of free slots
//! makes segments and frees them. The first [`RESERVE_SEGMENTS`] are the reserve, never given
//! back (threads cache their slots, below). Slots beyond the reserve serve bursts: a segment
//! whose slots all came back to the pool is freed, and one made again starts above every
//! generation it had issued, so a generation never repeats. A slot that can never come back
//! (retired) pins its segment. Freeing a segment races only with a host function presenting a
//! stale ticket of it (after other code's graph captured a launch): every claim announces
//! itself in [`CLAIMERS`] before it reads the table ([`announced`]), and the freer unpublishes
//! the segment, then waits for claims in progress.
//!
//! **Each thread's cache** of free slots: reserve slots cached most recently freed first, so that
//! a launching thread that also drops its records reuses slots still in its cache; and its freed
//! slots beyond the reserve, which go back to the pool in batches so that their segments empty
//! out.

use crate::launch::record::RecordHeader;
use crate::launch::slot_state::SlotState;
use crate::observe::Stamp;
use cuda_host_sys::CUstream;
use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::cell::{Cell, RefCell, UnsafeCell};
use std::mem::{MaybeUninit, offset_of};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Slots in the first segment; segment `k` holds `FIRST_SEGMENT << k` slots, so 26 segments
/// cover every `u32` index.
pub(super) const FIRST_SEGMENT: usize = 64;
const SEGMENTS: usize = 26;
/// Segments never given back: 16,320 slots, about 2 MiB.
const RESERVE_SEGMENTS: usize = 8;
/// Slots in the reserve.
pub(super) const RESERVE_SLOTS: usize = FIRST_SEGMENT * ((1 << RESERVE_SEGMENTS) - 1);

static TABLE: [AtomicPtr<Slot>; SEGMENTS] = [const { AtomicPtr::new(ptr::null_mut()) }; SEGMENTS];
/// Claims in progress (see the module documentation).
static CLAIMERS: AtomicUsize = AtomicUsize::new(0);

static POOL: Mutex<Pool> = Mutex::new(Pool {
    free: [const { Vec::new() }; SEGMENTS],
    retired: [0; SEGMENTS],
    first_generation: [1; SEGMENTS],
    allocated: 0,
    peak: 0,
});

/// Free slots no thread holds, per segment, and what the segments' lives need.
pub(super) struct Pool {
    free: [Vec<u32>; SEGMENTS],
    /// Slots that never come back, per segment.
    retired: [u32; SEGMENTS],
    /// The first generation of a segment's next incarnation: above every generation it issued.
    first_generation: [u32; SEGMENTS],
    allocated: usize,
    peak: usize,
}

fn segment_len(segment: usize) -> usize {
    FIRST_SEGMENT << segment
}

fn segment_start(segment: usize) -> usize {
    FIRST_SEGMENT * ((1 << segment) - 1)
}

/// The segment and the offset in it of `index`.
fn locate(index: u32) -> (usize, usize) {
    let biased = index as usize + FIRST_SEGMENT;
    let segment = (biased.ilog2() - FIRST_SEGMENT.ilog2()) as usize;
    (segment, biased - (FIRST_SEGMENT << segment))
}

/// The slot with this index, if its segment exists.
///
/// A slot of a segment beyond the reserve may only be used by its owner (a slot in use is never
/// freed), by the pool's lock holder ([`Pool::slots`]), or during a claim ([`announced`]).
pub(super) fn slot(index: u32) -> Option<&'static Slot> {
    let (segment, offset) = locate(index);
    let base = TABLE.get(segment)?.load(Ordering::SeqCst);
    if base.is_null() {
        return None;
    }
    // SAFETY: segment `segment` holds `segment_len(segment)` initialised slots; `offset` is below
    // that, and the caller keeps the segment from being freed (see above).
    Some(unsafe { &*base.add(offset) })
}

/// Runs `claim` with the slot with this index, if its segment exists, announced as a claim in
/// progress: its segment is not freed before `claim` returns.
pub(super) fn announced<R>(index: u32, claim: impl FnOnce(Option<&Slot>) -> R) -> R {
    CLAIMERS.fetch_add(1, Ordering::SeqCst);
    let claimed = claim(slot(index));
    CLAIMERS.fetch_sub(1, Ordering::Release);
    claimed
}

pub(super) fn pool() -> MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether `index` is a slot of the reserve, which is never freed.
pub(super) fn is_reserve(index: u32) -> bool {
    (index as usize) < RESERVE_SLOTS
}

impl Pool {
    /// Makes the lowest missing segment, its slots free in the pool.
    pub(super) fn grow(&mut self) {
        let segment = (0..SEGMENTS)
            .find(|&segment| TABLE[segment].load(Ordering::Relaxed).is_null())
            .expect("more than 2^32 launches in flight");
        let len = segment_len(segment);
        let layout = Layout::array::<Slot>(len).expect("a segment fits the address space");
        // SAFETY: the layout has a non-zero size.
        let base = unsafe { alloc(layout) }.cast::<Slot>();
        if base.is_null() {
            handle_alloc_error(layout);
        }
        let first = segment_start(segment);
        for offset in 0..len {
            let slot = Slot::new((first + offset) as u32, self.first_generation[segment]);
            // SAFETY: `offset` is inside the fresh allocation, not yet visible to anyone.
            unsafe { base.add(offset).write(slot) };
        }
        TABLE[segment].store(base, Ordering::SeqCst);
        self.free[segment] = (first..first + len)
            .rev()
            .map(|index| index as u32)
            .collect();
        self.allocated += len;
        self.peak = self.peak.max(self.allocated);
    }

    /// A free slot beyond the reserve, the lowest segment first, so that the highest empty out.
    pub(super) fn take_overflow(&mut self) -> Option<u32> {
        self.free[RESERVE_SEGMENTS..].iter_mut().find_map(Vec::pop)
    }

    /// Takes up to `want` free reserve slots.
    pub(super) fn take_reserve(&mut self, want: usize, mut take: impl FnMut(u32)) -> usize {
        let mut taken = 0;
        for free in &mut self.free[..RESERVE_SEGMENTS] {
            while taken < want
                && let Some(index) = free.pop()
            {
                take(index);
                taken += 1;
            }
        }
        taken
    }

    /// Takes back freed slots; frees every segment beyond the reserve whose slots are all back.
    pub(super) fn give_back(&mut self, indices: impl IntoIterator<Item = u32>) {
        let mut touched = [false; SEGMENTS];
        for index in indices {
            let (segment, _) = locate(index);
            self.free[segment].push(index);
            touched[segment] = true;
        }
        for (segment, _) in touched
            .iter()
            .enumerate()
            .skip(RESERVE_SEGMENTS)
            .filter(|(_, touched)| **touched)
        {
            if self.retired[segment] == 0 && self.free[segment].len() == segment_len(segment) {
                self.free_segment(segment);
            }
        }
    }

    /// Counts the slot at `index` as never coming back: its segment stays.
    pub(super) fn retire(&mut self, index: u32) {
        let (segment, _) = locate(index);
        self.retired[segment] += 1;
    }

    /// Frees a segment whose slots are all free in the pool.
    fn free_segment(&mut self, segment: usize) {
        let base = TABLE[segment].swap(ptr::null_mut(), Ordering::SeqCst);
        // A claim that read the segment's address before it was unpublished is announced in
        // CLAIMERS (sequentially consistent on both sides): wait for it to end.
        while CLAIMERS.load(Ordering::SeqCst) != 0 {
            std::hint::spin_loop();
        }
        let len = segment_len(segment);
        let mut last = 0;
        for offset in 0..len {
            // SAFETY: the segment is still allocated and nobody else can reach it now.
            let (_, generation) = unsafe { &*base.add(offset) }.state.load(Ordering::Relaxed);
            last = last.max(generation);
        }
        // Free slots never hold the last generation (it retires them), so this does not wrap.
        self.first_generation[segment] = last + 1;
        self.free[segment] = Vec::new();
        self.allocated -= len;
        let layout = Layout::array::<Slot>(len).expect("a segment fits the address space");
        // SAFETY: allocated by `grow` with this layout; no slot of it is in use or reachable.
        unsafe { dealloc(base.cast(), layout) };
    }

    /// Every slot that exists: their segments are not freed while the pool is locked.
    pub(super) fn slots(&self) -> impl Iterator<Item = &Slot> {
        TABLE.iter().enumerate().flat_map(|(segment, base)| {
            let base = base.load(Ordering::SeqCst);
            let len = if base.is_null() {
                0
            } else {
                segment_len(segment)
            };
            // SAFETY: the segment exists, and cannot be freed while the pool, borrowed for as
            // long as the slots are, is locked.
            (0..len).map(move |offset| unsafe { &*base.add(offset) })
        })
    }

    /// Slots that exist.
    pub(super) fn allocated(&self) -> usize {
        self.allocated
    }

    /// The most slots that existed at once.
    pub(super) fn peak(&self) -> usize {
        self.peak
    }

    /// Slots that are never used again.
    pub(super) fn retired(&self) -> usize {
        self.retired.iter().map(|&retired| retired as usize).sum()
    }
}

/// The bytes of payload a slot holds inline; a larger payload is boxed.
pub(crate) const INLINE_BYTES: usize = 64;
/// The alignment inline payloads get.
const INLINE_ALIGN: usize = 16;

/// Whether a payload of type `P` lives inside a slot; else the slot holds a box of it.
pub(crate) const fn fits_inline<P>() -> bool {
    size_of::<P>() <= INLINE_BYTES && align_of::<P>() <= INLINE_ALIGN
}

/// `next_free` of a slot on no free list, and the end of a list.
pub(super) const NO_SLOT: u32 = u32::MAX;

/// One launch record's memory.
#[cfg_attr(not(any(feature = "nvtx", feature = "tracing")), repr(C, align(128)))]
#[cfg_attr(any(feature = "nvtx", feature = "tracing"), repr(C, align(64)))]
pub(super) struct Slot {
    record: UnsafeCell<MaybeUninit<RecordHeader>>,
    pub(super) state: SlotState,
    /// The stream launched on, for panic reports. Written before the launch is published.
    pub(super) stream: UnsafeCell<CUstream>,
    payload: UnsafeCell<InlinePayload>,
    /// The launch's context (the driver's `CUcontext`, as an address), for abandoning.
    pub(super) context: AtomicUsize,
    /// This slot's index in the table.
    pub(super) index: u32,
    /// The next free slot while this one is on a thread's free list (owned by that list).
    pub(super) next_free: UnsafeCell<u32>,
    /// What is observed of the launch (`crate::observe`). Written before it is published.
    pub(super) launched: UnsafeCell<Stamp>,
}

#[repr(C, align(16))]
struct InlinePayload([MaybeUninit<u8>; INLINE_BYTES]);

const _: () = assert!(
    size_of::<Slot>()
        == if cfg!(any(feature = "nvtx", feature = "tracing")) {
            192
        } else {
            128
        }
        && offset_of!(Slot, record) == 0
);
const _: () = assert!(offset_of!(Slot, payload) == 48);
const _: () = assert!(align_of::<InlinePayload>() == INLINE_ALIGN);

// SAFETY: the plain fields are written only by the slot's current owner, and ownership passes
// between threads through `state` (release/acquire), the reclaim lists (release/acquire) or the
// pool's mutex.
unsafe impl Sync for Slot {}

impl Slot {
    /// A free slot at `index`, whose next launch gets generation `first_generation`.
    pub(super) fn new(index: u32, first_generation: u32) -> Slot {
        Slot {
            record: UnsafeCell::new(MaybeUninit::uninit()),
            state: SlotState::new(first_generation),
            stream: UnsafeCell::new(ptr::null_mut()),
            payload: UnsafeCell::new(InlinePayload([MaybeUninit::uninit(); INLINE_BYTES])),
            context: AtomicUsize::new(0),
            index,
            next_free: UnsafeCell::new(NO_SLOT),
            launched: UnsafeCell::new(Stamp::default()),
        }
    }

    /// The slot of a slot record.
    ///
    /// # Safety
    /// `record` must be a slot record whose segment the caller keeps from being freed (it owns
    /// the slot, or the claim it is part of).
    pub(super) unsafe fn of_record(record: NonNull<RecordHeader>) -> &'static Slot {
        // SAFETY: slot records are slots, the header at offset 0 (per the caller), and the
        // segment stays (per the caller).
        unsafe { &*record.cast::<Slot>().as_ptr() }
    }

    /// The record this slot holds: its header is the slot's start.
    pub(super) fn record(&self) -> NonNull<RecordHeader> {
        NonNull::from(self).cast()
    }

    /// Writes a record into the slot: its header, and `payload` inline.
    ///
    /// # Panics
    /// When `payload` does not fit inline ([`fits_inline`]).
    ///
    /// # Safety
    /// The caller owns the slot, which is not yet published to a claimer; a record written into
    /// it before is forgotten, not dropped.
    pub(super) unsafe fn write<P>(&self, header: RecordHeader, payload: P) {
        assert!(fits_inline::<P>(), "an inline payload fits its slot");
        // SAFETY: the slot is the caller's alone; its payload memory holds a `P` (checked above).
        unsafe {
            self.record.get().cast::<RecordHeader>().write(header);
            self.payload.get().cast::<P>().write(payload);
        }
    }
}

/// The payload of a slot record, of the type it was written with.
///
/// # Safety
/// `record` must be a slot record claimed by the caller, whose payload is a `P` written by
/// [`LaunchSlot::write`](super::ownership::LaunchSlot::write).
pub(crate) unsafe fn payload_of<P>(record: NonNull<RecordHeader>) -> *mut P {
    // SAFETY: slot records are slots, and a claimed slot's segment is not freed (per the caller).
    unsafe { Slot::of_record(record) }.payload.get().cast()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn indices_map_to_doubling_segments() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(63), (0, 63));
        assert_eq!(locate(64), (1, 0));
        assert_eq!(locate(191), (1, 127));
        assert_eq!(locate(192), (2, 0));
        assert_eq!(segment_start(2), 192);
        let last = u32::MAX - FIRST_SEGMENT as u32;
        assert_eq!(
            locate(last),
            (SEGMENTS - 1, (FIRST_SEGMENT << (SEGMENTS - 1)) - 1)
        );
        assert!(slot(u32::MAX).is_none(), "beyond the last segment");
        assert_eq!(RESERVE_SLOTS, segment_start(RESERVE_SEGMENTS));
    }
}

/// How many reserve slots a thread takes from the pool at once.
const REFILL: usize = 32;
/// A thread keeps at most this many free reserve slots; beyond, half go back to the pool.
const LOCAL_LIMIT: u32 = 512;
/// Freed slots beyond the reserve go back to the pool in batches of this many (and at the end
/// of every drain).
const RETURN_BATCH: usize = 64;

/// A thread's free reserve slots, linked through `next_free`.
struct LocalFree {
    head: Cell<u32>,
    len: Cell<u32>,
}

impl LocalFree {
    fn pop(&self) -> Option<&'static Slot> {
        let index = self.head.get();
        if index == NO_SLOT {
            return None;
        }
        let slot = slot(index).expect("reserve slots exist");
        // SAFETY: the slot is on this thread's list, which owns its `next_free`.
        self.head.set(unsafe { *slot.next_free.get() });
        self.len.set(self.len.get() - 1);
        Some(slot)
    }

    fn push(&self, slot: &'static Slot) {
        // SAFETY: the slot is free and owned by the caller, now by this list.
        unsafe { *slot.next_free.get() = self.head.get() };
        self.head.set(slot.index);
        self.len.set(self.len.get() + 1);
    }

    /// Moves all but the `keep` most recently freed slots to the pool.
    fn keep_only(&self, keep: u32) {
        if self.len.get() <= keep {
            return;
        }
        // The list runs from the most recently freed; cut it after `keep` slots.
        let mut rest = self.head.get();
        let mut last_kept = None;
        for _ in 0..keep {
            let slot = slot(rest).expect("reserve slots exist");
            last_kept = Some(slot);
            // SAFETY: the slot is on this thread's list, which owns its `next_free`.
            rest = unsafe { *slot.next_free.get() };
        }
        match last_kept {
            // SAFETY: as above.
            Some(slot) => unsafe { *slot.next_free.get() = NO_SLOT },
            None => self.head.set(NO_SLOT),
        }
        self.len.set(keep);
        pool().give_back(std::iter::from_fn(|| {
            if rest == NO_SLOT {
                return None;
            }
            let index = rest;
            let slot = slot(index).expect("reserve slots exist");
            // SAFETY: as above; the slot passes to the pool after its link was read.
            rest = unsafe { *slot.next_free.get() };
            Some(index)
        }));
    }
}

impl Drop for LocalFree {
    fn drop(&mut self) {
        self.keep_only(0);
    }
}

/// A thread's freed slots beyond the reserve, waiting to go back to the pool.
struct Returning(RefCell<Vec<u32>>);

impl Returning {
    fn flush(&self) {
        let Ok(mut indices) = self.0.try_borrow_mut() else {
            return;
        };
        if !indices.is_empty() {
            pool().give_back(indices.drain(..));
        }
    }
}

impl Drop for Returning {
    fn drop(&mut self) {
        self.flush();
    }
}

thread_local! {
    static LOCAL_FREE: LocalFree = const {
        LocalFree { head: Cell::new(NO_SLOT), len: Cell::new(0) }
    };
    static RETURNING: Returning = const { Returning(RefCell::new(Vec::new())) };
}

/// A free slot for the calling thread: from its cache, else from the pool (refilling the cache),
/// else from a new segment.
pub(super) fn acquire_free() -> &'static Slot {
    if let Ok(Some(slot)) = LOCAL_FREE.try_with(LocalFree::pop) {
        return slot;
    }
    let mut pool = pool();
    loop {
        let mut first = None;
        let refilled = LOCAL_FREE.try_with(|local| {
            pool.take_reserve(REFILL, |index| match first {
                None => first = Some(index),
                Some(_) => local.push(slot(index).expect("pooled slots exist")),
            })
        });
        if refilled.is_err() {
            // This thread's list is gone (the thread is exiting): take one reserve slot.
            pool.take_reserve(1, |index| first = Some(index));
        }
        if let Some(index) = first.or_else(|| pool.take_overflow()) {
            return slot(index).expect("pooled slots exist");
        }
        pool.grow();
    }
}

/// Frees `slot`, which the caller owns: into the thread's cache (a reserve slot), or towards the
/// pool.
pub(super) fn release_free(slot: &'static Slot) {
    if is_reserve(slot.index) {
        let kept = LOCAL_FREE.try_with(|local| {
            local.push(slot);
            if local.len.get() > LOCAL_LIMIT {
                local.keep_only(LOCAL_LIMIT / 2);
            }
        });
        if kept.is_err() {
            pool().give_back([slot.index]);
        }
        return;
    }
    let batched = RETURNING.try_with(|returning| {
        let Ok(mut indices) = returning.0.try_borrow_mut() else {
            return false;
        };
        indices.push(slot.index);
        if indices.len() >= RETURN_BATCH {
            pool().give_back(indices.drain(..));
        }
        true
    });
    if batched != Ok(true) {
        pool().give_back([slot.index]);
    }
}

/// Gives the slots beyond the reserve that this thread freed back to the pool, so that segments
/// empty out: called at the end of every drain.
pub(crate) fn return_released() {
    let _ = RETURNING.try_with(Returning::flush);
}

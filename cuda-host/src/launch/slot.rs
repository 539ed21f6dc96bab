//! Launch slots: the memory of run-once launch records, and the tickets the driver holds for them.
//!
//! Run-once host functions are enqueued with `cuLaunchHostFunc`, which never calls a function
//! once its context has failed (a sticky error such as a kernel's illegal address). cuda-host must
//! then reclaim the record itself, at a time when nothing proves the driver will not still call
//! it. So the driver never holds a record's address: it holds a *ticket*, a slot index and a
//! generation. Each slot's state (`slot_state`) names the generation of the launch it holds, and
//! whoever moves a slot out of launched with a compare-and-swap owns its record: the host
//! function about to run it, or cuda-host abandoning it. A late or repeated call with a stale
//! ticket finds another generation, or a claimed, abandoned or missing slot, and does nothing.
//! Generations never repeat: a slot out of generations is retired, and a segment given back and
//! made again starts above every generation it had issued.
//!
//! A payload of up to [`INLINE_BYTES`] lives inside the slot, so once the table has grown to the
//! launches in flight a launch allocates nothing. The table is made of segments that double in
//! size. The first [`RESERVE_SEGMENTS`] are the reserve, never given back, and are cached per
//! thread (most recently freed first: a launching thread that also drops its records reuses
//! slots still in its cache). Slots beyond the reserve serve bursts: they are taken from the
//! pool one at a time, go back to it in batches, and a segment whose slots all came back is
//! freed. A slot that can never come back (retired) pins its segment.
//!
//! Freeing a segment races only with a host function presenting a stale ticket of it (after
//! other code's graph captured a launch): every claim announces itself in [`CLAIMERS`] before
//! it reads the table, and the freer unpublishes the segment, then waits for claims in progress.

use crate::launch::record::RecordHeader;
use crate::launch::slot_state::{Phase, Released, SlotState};
use cuda_host_sys::CUstream;
use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::cell::{Cell, RefCell, UnsafeCell};
use std::ffi::c_void;
use std::mem::{MaybeUninit, offset_of};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

#[cfg(not(target_pointer_width = "64"))]
compile_error!("launch tickets pack a slot index and a generation into a 64-bit pointer");

/// The bytes of payload a slot holds inline; a larger payload is boxed.
pub(crate) const INLINE_BYTES: usize = 64;
/// The alignment inline payloads get.
pub(crate) const INLINE_ALIGN: usize = 16;

/// One launch record's memory, two cache lines. The record header comes first, so a slot's
/// address is its record's and the reclaim lists treat slot records like any other. What the
/// host function touches (header, state, stream, the payload's start) shares the first line;
/// what only launching and abandoning need is at the end.
#[repr(C, align(128))]
pub(crate) struct Slot {
    record: UnsafeCell<MaybeUninit<RecordHeader>>,
    state: SlotState,
    /// The stream launched on, for panic reports. Written before the launch is published.
    stream: UnsafeCell<CUstream>,
    payload: UnsafeCell<InlinePayload>,
    /// The launch's context (the driver's `CUcontext`, as an address), for abandoning.
    context: AtomicUsize,
    /// This slot's index in the table.
    index: u32,
    /// The next free slot while this one is on a thread's free list (owned by that list).
    next_free: UnsafeCell<u32>,
}

#[repr(C, align(16))]
struct InlinePayload([MaybeUninit<u8>; INLINE_BYTES]);

const _: () = assert!(size_of::<Slot>() == 128 && offset_of!(Slot, record) == 0);
const _: () = assert!(offset_of!(Slot, payload) == 48);
const _: () = assert!(align_of::<InlinePayload>() == INLINE_ALIGN);

// SAFETY: the plain fields are written only by the slot's current owner, and ownership passes
// between threads through `state` (release/acquire), the reclaim lists (release/acquire) or the
// pool's mutex.
unsafe impl Sync for Slot {}

/// What the driver holds for a launch: the slot index in the low 32 bits, its generation (never
/// zero, so a ticket is never null) in the high 32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket(usize);

impl Ticket {
    fn new(index: u32, generation: u32) -> Ticket {
        Ticket((generation as usize) << 32 | index as usize)
    }

    fn index(self) -> u32 {
        self.0 as u32
    }

    fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// The ticket as the driver's `void *userData`. Not an address: never dereferenced.
    pub(crate) fn into_user_data(self) -> *mut c_void {
        ptr::without_provenance_mut(self.0)
    }

    pub(crate) fn from_user_data(data: *mut c_void) -> Ticket {
        Ticket(data.addr())
    }
}

// ---- The table ---------------------------------------------------------------------------------

/// Slots in the first segment; segment `k` holds `FIRST_SEGMENT << k` slots, so 26 segments
/// cover every `u32` index.
const FIRST_SEGMENT: usize = 64;
const SEGMENTS: usize = 26;
/// Segments never given back: 16,320 slots, about 2 MiB.
pub(crate) const RESERVE_SEGMENTS: usize = 8;
/// Slots in the reserve.
pub(crate) const RESERVE_SLOTS: usize = FIRST_SEGMENT * ((1 << RESERVE_SEGMENTS) - 1);

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
struct Pool {
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
/// freed), by the pool's lock holder, or between a claim's announcement and its end.
fn slot(index: u32) -> Option<&'static Slot> {
    let (segment, offset) = locate(index);
    let base = TABLE.get(segment)?.load(Ordering::SeqCst);
    if base.is_null() {
        return None;
    }
    // SAFETY: segment `segment` holds `segment_len(segment)` initialised slots; `offset` is below
    // that, and the caller keeps the segment from being freed (see above).
    Some(unsafe { &*base.add(offset) })
}

fn pool() -> MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(PoisonError::into_inner)
}

fn is_reserve(index: u32) -> bool {
    (index as usize) < RESERVE_SLOTS
}

impl Pool {
    /// Makes the lowest missing segment, its slots free in the pool.
    fn grow(&mut self) {
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
            // SAFETY: `offset` is inside the fresh allocation, not yet visible to anyone.
            unsafe {
                base.add(offset).write(Slot {
                    record: UnsafeCell::new(MaybeUninit::uninit()),
                    state: SlotState::new(self.first_generation[segment]),
                    stream: UnsafeCell::new(ptr::null_mut()),
                    payload: UnsafeCell::new(InlinePayload([MaybeUninit::uninit(); INLINE_BYTES])),
                    context: AtomicUsize::new(0),
                    index: (first + offset) as u32,
                    next_free: UnsafeCell::new(NO_SLOT),
                });
            }
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
    fn take_overflow(&mut self) -> Option<u32> {
        self.free[RESERVE_SEGMENTS..].iter_mut().find_map(Vec::pop)
    }

    /// Takes up to `want` free reserve slots.
    fn take_reserve(&mut self, want: usize, mut take: impl FnMut(u32)) -> usize {
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
    fn give_back(&mut self, indices: impl IntoIterator<Item = u32>) {
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
}

// ---- Per-thread free lists ---------------------------------------------------------------------

const NO_SLOT: u32 = u32::MAX;
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

fn acquire_free() -> &'static Slot {
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

fn release_free(slot: &'static Slot) {
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

// ---- Launching, claiming, abandoning -----------------------------------------------------------

/// A free slot owned by a launching thread, its record not yet handed to the driver.
pub(crate) struct LaunchSlot {
    slot: &'static Slot,
}

impl LaunchSlot {
    /// Takes a free slot.
    pub(crate) fn acquire() -> LaunchSlot {
        LaunchSlot {
            slot: acquire_free(),
        }
    }

    /// Where the record header goes: the slot's address.
    pub(crate) fn record(&self) -> NonNull<RecordHeader> {
        NonNull::from(self.slot).cast()
    }

    /// Where an inline payload goes: [`INLINE_BYTES`] bytes, aligned to [`INLINE_ALIGN`].
    pub(crate) fn payload(&self) -> *mut u8 {
        self.slot.payload.get().cast()
    }

    /// Publishes the written record for a launch on `stream` of the context at `context`, and
    /// returns the ticket to give the driver. Until [`mark_launched`] or [`take_refused`], nothing but the
    /// host function can claim it.
    pub(crate) fn begin_launch(self, context: usize, stream: CUstream) -> Ticket {
        let slot = self.slot;
        slot.context.store(context, Ordering::Relaxed);
        // SAFETY: the slot is free and owned by this thread until `begin` publishes it.
        unsafe { *slot.stream.get() = stream };
        // Release: the record and the fields above are visible to whoever claims the slot.
        let generation = slot.state.begin();
        Ticket::new(slot.index, generation)
    }
}

/// The slot of a ticket whose launch the caller is making: its segment cannot be freed.
fn own_slot(ticket: Ticket) -> &'static Slot {
    slot(ticket.index()).expect("tickets of launches being made name existing slots")
}

/// Marks the launch of `ticket` launched: the driver accepted it, and from now on abandoning
/// may claim it too (see the handshake in `failed_contexts`).
pub(crate) fn mark_launched(ticket: Ticket) {
    // Fails when the host function already claimed the slot, which is fine.
    let _ = own_slot(ticket).state.mark_launched(ticket.generation());
}

/// Takes back the record of a launch the driver refused, for the caller to drop. `None` if the
/// driver called the function of a launch it refused (then whoever claimed it owns it).
pub(crate) fn take_refused(ticket: Ticket) -> Option<NonNull<RecordHeader>> {
    let slot = own_slot(ticket);
    slot.state
        .refuse(ticket.generation())
        .then(|| NonNull::from(slot).cast())
}

/// Claims the record of `ticket` for running it: `None` when the ticket is stale (its launch was
/// abandoned, or the slot holds another launch now, or its segment is gone) or was already
/// claimed.
pub(crate) fn claim(ticket: Ticket) -> Option<(NonNull<RecordHeader>, CUstream)> {
    CLAIMERS.fetch_add(1, Ordering::SeqCst);
    let claimed = slot(ticket.index())
        .filter(|slot| slot.state.claim(ticket.generation()))
        // SAFETY: claimed: the slot and its fields are this thread's now.
        .map(|slot| (NonNull::from(slot).cast(), unsafe { *slot.stream.get() }));
    CLAIMERS.fetch_sub(1, Ordering::Release);
    claimed
}

/// Claims every launched, unclaimed record of the context at `context` and passes each to
/// `abandoned`: the context failed, so the driver will never run them. Walks the whole table;
/// only called after a failure.
pub(crate) fn abandon_launched(context: usize, mut abandoned: impl FnMut(NonNull<RecordHeader>)) {
    let _pool = pool();
    for (segment, base) in TABLE.iter().enumerate() {
        let base = base.load(Ordering::SeqCst);
        if base.is_null() {
            continue;
        }
        for offset in 0..segment_len(segment) {
            // SAFETY: the segment exists, and cannot be freed while the pool is locked here.
            let slot = unsafe { &*base.add(offset) };
            let (phase, generation) = slot.state.load(Ordering::Acquire);
            // The same generation still launched means the same launch: `context` was its own.
            if phase == Phase::Launched
                && slot.context.load(Ordering::Relaxed) == context
                && slot.state.abandon(generation)
            {
                abandoned(NonNull::from(slot).cast());
            }
        }
    }
}

/// Abandons the launch of `ticket` if it is still launched and unclaimed: its context failed,
/// or other code's capture took it.
pub(crate) fn abandon_ticket(ticket: Ticket) -> Option<NonNull<RecordHeader>> {
    let slot = own_slot(ticket);
    slot.state
        .abandon(ticket.generation())
        .then(|| NonNull::from(slot).cast())
}

/// Frees the slot of a claimed record whose header and payload have been dropped, or retires it.
///
/// # Safety
/// `record` must be a slot record claimed by the caller, with nothing left in it to drop.
pub(crate) unsafe fn release(record: NonNull<RecordHeader>) {
    // SAFETY: slot records are slots (the header is at offset 0), and a claimed slot's segment
    // is not freed.
    let slot: &'static Slot = unsafe { &*record.cast::<Slot>().as_ptr() };
    match slot.state.release() {
        Released::Reusable => release_free(slot),
        Released::Retired => {
            let (segment, _) = locate(slot.index);
            pool().retired[segment] += 1;
        }
    }
}

/// The payload of a slot record.
///
/// # Safety
/// `record` must be a slot record.
pub(crate) unsafe fn payload_of(record: NonNull<RecordHeader>) -> *mut u8 {
    // SAFETY: slot records are slots (per the caller).
    unsafe { (*record.cast::<Slot>().as_ptr()).payload.get().cast() }
}

// ---- Diagnostics -------------------------------------------------------------------------------

/// What the launch-slot table holds, for diagnostics: see [`launch_slot_counts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LaunchSlotCounts {
    /// Slots that exist (128 bytes each).
    pub allocated: usize,
    /// The most slots that existed at once.
    pub peak: usize,
    /// Slots never given back once made: the first 16,320 (about 2 MiB).
    pub reserve: usize,
    /// Launches the driver holds (or is being handed) whose host function has not run.
    pub in_flight: usize,
    /// Records whose host function ran, or whose context failed, waiting to be dropped (or
    /// running now).
    pub finished: usize,
    /// Slots that are never used again: their launch was abandoned, or they ran out of
    /// generations.
    pub retired: usize,
}

/// Counts the launch-slot table's slots by what they hold. It walks the whole table under the
/// pool's lock: a diagnostic, not for hot paths.
///
/// A closure of up to 64 bytes lives in a slot from its launch until its record is dropped; a
/// burst of launches grows the table, and after the burst drained, slots beyond the reserve go
/// back to the allocator.
pub fn launch_slot_counts() -> LaunchSlotCounts {
    let pool = pool();
    let mut counts = LaunchSlotCounts {
        allocated: pool.allocated,
        peak: pool.peak,
        reserve: RESERVE_SLOTS,
        retired: pool.retired.iter().map(|&retired| retired as usize).sum(),
        ..LaunchSlotCounts::default()
    };
    let mut abandoned_or_claimed = 0;
    for (segment, base) in TABLE.iter().enumerate() {
        let base = base.load(Ordering::SeqCst);
        if base.is_null() {
            continue;
        }
        for offset in 0..segment_len(segment) {
            // SAFETY: the segment exists, and cannot be freed while the pool is locked here.
            let (phase, _) = unsafe { &*base.add(offset) }.state.load(Ordering::Relaxed);
            match phase {
                Phase::Launching | Phase::Launched => counts.in_flight += 1,
                Phase::Claimed | Phase::Abandoned => abandoned_or_claimed += 1,
                Phase::Free => {}
            }
        }
    }
    counts.finished = abandoned_or_claimed - counts.retired.min(abandoned_or_claimed);
    counts
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

    #[test]
    fn tickets_are_never_null_and_round_trip() {
        let ticket = Ticket::new(0, 1);
        assert!(!ticket.into_user_data().is_null());
        let back = Ticket::from_user_data(ticket.into_user_data());
        assert_eq!((back.index(), back.generation()), (0, 1));
        let high = Ticket::new(u32::MAX - 1, u32::MAX);
        assert_eq!((high.index(), high.generation()), (u32::MAX - 1, u32::MAX));
    }

    /// Launches an empty record on a fresh slot, as `host_launch` does around the driver call.
    fn launch(context: usize) -> Ticket {
        let ticket = LaunchSlot::acquire().begin_launch(context, ptr::null_mut());
        mark_launched(ticket);
        ticket
    }

    fn finish(record: NonNull<RecordHeader>) {
        // SAFETY: the tests' records hold nothing to drop.
        unsafe { release(record) };
    }

    #[test]
    fn a_ticket_is_claimed_once_and_is_stale_after_its_slot_is_reused() {
        let ticket = launch(1);
        let (record, _) = claim(ticket).expect("the first claim wins");
        assert!(claim(ticket).is_none(), "a second call finds it claimed");
        finish(record);
        assert!(claim(ticket).is_none(), "a freed slot is not claimable");
        let again = launch(1);
        // A reserve slot goes back to this thread's cache and is reused first; a slot beyond the
        // reserve (while other tests hold the reserve) goes back to the pool in a batch.
        if is_reserve(ticket.index()) {
            assert_eq!(
                again.index(),
                ticket.index(),
                "the freed slot is reused first"
            );
            assert_ne!(again.generation(), ticket.generation());
        }
        assert!(claim(ticket).is_none(), "the old ticket is stale");
        let (record, _) = claim(again).expect("the new ticket is live");
        finish(record);
    }

    #[test]
    fn abandoning_claims_only_launched_records_of_that_context() {
        const CONTEXT: usize = 0x1000_0000;
        let mine = launch(CONTEXT);
        let other = launch(CONTEXT + 8);
        let launching = LaunchSlot::acquire().begin_launch(CONTEXT, ptr::null_mut());
        let mut abandoned = Vec::new();
        abandon_launched(CONTEXT, |record| abandoned.push(record));
        assert_eq!(abandoned.len(), 1);
        assert!(claim(mine).is_none(), "an abandoned record never runs");
        for record in abandoned {
            finish(record);
        }
        let next = launch(CONTEXT);
        assert_ne!(next.index(), mine.index(), "an abandoned slot is retired");
        finish(claim(next).expect("live").0);
        let (record, _) = claim(other).expect("another context's record is untouched");
        finish(record);
        finish(take_refused(launching).expect("a launching slot is refused"));
    }

    #[test]
    fn a_burst_beyond_the_reserve_is_given_back_and_its_stale_tickets_stay_stale() {
        // More launches in flight at once than the reserve holds: the table grows past it.
        let tickets: Vec<Ticket> = (0..RESERVE_SLOTS + 3 * FIRST_SEGMENT)
            .map(|_| launch(7))
            .collect();
        let beyond: Vec<Ticket> = tickets
            .iter()
            .copied()
            .filter(|ticket| !is_reserve(ticket.index()))
            .collect();
        assert!(!beyond.is_empty());
        for &ticket in &tickets {
            let (record, _) = claim(ticket).expect("live");
            finish(record);
        }
        return_released();
        // Other tests of this binary may hold slots beyond the reserve at the same time, so the
        // segment of these may stay; a ticket of a freed or reused slot is stale either way.
        for ticket in beyond {
            assert!(claim(ticket).is_none(), "a stale ticket claimed a slot");
        }
    }
}

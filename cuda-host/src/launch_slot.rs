//! Launch slots: the memory of run-once launch records, and the tickets the driver holds for them.
//!
//! Run-once host functions are enqueued with `cuLaunchHostFunc`, which never calls a function
//! once its context has failed (a sticky error such as a kernel's illegal address). cuda-host must
//! then reclaim the record itself, at a time when nothing proves the driver will not still call
//! it. So the driver never holds a record's address: it holds a *ticket*, a slot index and a
//! generation. Slots live in a table that is never freed, and each slot's state names the
//! generation of the launch it holds. Whoever moves a slot out of launched with a
//! compare-and-swap owns its record: the host function about to run it, or cuda-host abandoning
//! it after its context failed. A late or repeated call with a stale ticket finds another
//! generation, or a claimed or abandoned slot, and does nothing.
//!
//! A payload of up to [`INLINE_BYTES`] lives inside the slot, so once the table has grown to the
//! launches in flight a launch allocates nothing. Free slots are kept per thread, most recently
//! freed first: a launching thread that also reclaims reuses slots still in its cache.
//!
//! A slot's life: free → launching (the record is written; the driver is being asked) → launched
//! (the driver accepted it) → claimed (by the host function, or by the launching thread when the
//! driver refused) → free again once its record was dropped, on a caller's thread, through the
//! reclaim list. A launched record can instead be abandoned after its context failed; its slot
//! is then retired, never reused, since the driver may still hold its ticket.

use crate::record::RecordHeader;
use cuda_host_sys::CUstream;
use std::alloc::{Layout, alloc_zeroed, handle_alloc_error};
use std::cell::{Cell, UnsafeCell};
use std::ffi::c_void;
use std::mem::{MaybeUninit, offset_of};
use std::ptr::{self, NonNull};
use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

#[cfg(not(target_pointer_width = "64"))]
compile_error!("launch tickets pack a slot index and a generation into a 64-bit pointer");

/// The bytes of payload a slot holds inline; a larger payload is boxed.
pub(crate) const INLINE_BYTES: usize = 64;
/// The alignment inline payloads get.
pub(crate) const INLINE_ALIGN: usize = 16;

/// One launch record's memory, two cache lines. The record header comes first, so a slot's
/// address is its record's and the reclaim list treats slot records like any other. What the
/// host function touches (header, state, and a payload of up to 32 bytes) shares the first line
/// with it; what only launching and abandoning need is at the end.
#[repr(C, align(128))]
pub(crate) struct Slot {
    record: UnsafeCell<MaybeUninit<RecordHeader>>,
    /// `generation << 3 | phase`.
    state: AtomicU64,
    payload: UnsafeCell<InlinePayload>,
    /// The launch's context (the driver's `CUcontext`, as an address), for abandoning.
    context: AtomicUsize,
    /// The stream launched on, for panic reports. Written before the launch is published.
    stream: UnsafeCell<CUstream>,
    /// This slot's index in the table.
    index: u32,
    /// The next free slot while this one is on a free list (owned by that list).
    next_free: UnsafeCell<u32>,
}

#[repr(C, align(16))]
struct InlinePayload([MaybeUninit<u8>; INLINE_BYTES]);

const _: () = assert!(size_of::<Slot>() == 128 && offset_of!(Slot, record) == 0);
const _: () = assert!(offset_of!(Slot, payload) == 32);
const _: () = assert!(align_of::<InlinePayload>() == INLINE_ALIGN);

// SAFETY: the plain fields are written only by the slot's current owner, and ownership passes
// between threads through `state` (release/acquire), the reclaim list (release/acquire) or the
// pool's mutex.
unsafe impl Sync for Slot {}

const FREE: u64 = 0;
const LAUNCHING: u64 = 1;
const LAUNCHED: u64 = 2;
const CLAIMED: u64 = 3;
/// Claimed by abandoning: the driver may still hold the ticket, so the slot is never reused.
const ABANDONED: u64 = 4;
const PHASE_BITS: u32 = 3;

fn state(generation: u32, phase: u64) -> u64 {
    (u64::from(generation) << PHASE_BITS) | phase
}

fn phase(state: u64) -> u64 {
    state & ((1 << PHASE_BITS) - 1)
}

fn generation(state: u64) -> u32 {
    (state >> PHASE_BITS) as u32
}

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

static TABLE: [AtomicPtr<Slot>; SEGMENTS] = [const { AtomicPtr::new(ptr::null_mut()) }; SEGMENTS];

/// Free slots no thread holds, and how many segments exist.
static POOL: Mutex<Pool> = Mutex::new(Pool {
    free: Vec::new(),
    segments: 0,
});

struct Pool {
    free: Vec<u32>,
    segments: usize,
}

/// The segment and the offset in it of `index`.
fn locate(index: u32) -> (usize, usize) {
    let biased = index as usize + FIRST_SEGMENT;
    let segment = (biased.ilog2() - FIRST_SEGMENT.ilog2()) as usize;
    (segment, biased - (FIRST_SEGMENT << segment))
}

/// The slot with this index, if its segment exists. Slots are never freed.
fn slot(index: u32) -> Option<&'static Slot> {
    let (segment, offset) = locate(index);
    let base = TABLE.get(segment)?.load(Ordering::Acquire);
    if base.is_null() {
        return None;
    }
    // SAFETY: segment `segment` holds `FIRST_SEGMENT << segment` initialised slots and is never
    // freed; `offset` is below that.
    Some(unsafe { &*base.add(offset) })
}

impl Pool {
    /// Adds a segment and puts its slots on the free list.
    fn grow(&mut self) {
        let segment = self.segments;
        assert!(segment < SEGMENTS, "more than 2^32 launches in flight");
        let len = FIRST_SEGMENT << segment;
        let layout = Layout::array::<Slot>(len).expect("a segment fits the address space");
        // SAFETY: the layout has a non-zero size.
        let base = unsafe { alloc_zeroed(layout) }.cast::<Slot>();
        if base.is_null() {
            handle_alloc_error(layout);
        }
        let first = FIRST_SEGMENT * ((1 << segment) - 1);
        for offset in 0..len {
            let index = (first + offset) as u32;
            // SAFETY: `offset` is inside the fresh allocation, not yet visible to anyone; all-zero
            // bytes are a valid free slot of generation 0 apart from its index, set here.
            unsafe { ptr::addr_of_mut!((*base.add(offset)).index).write(index) };
        }
        TABLE[segment].store(base, Ordering::Release);
        self.segments += 1;
        self.free
            .extend((first..first + len).rev().map(|index| index as u32));
    }
}

fn pool() -> std::sync::MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

// ---- Per-thread free lists ---------------------------------------------------------------------

const NO_SLOT: u32 = u32::MAX;
/// How many slots a thread takes from the pool at once.
const REFILL: usize = 32;
/// A thread keeps at most this many free slots; beyond, half go back to the pool.
const LOCAL_LIMIT: u32 = 512;

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
        let slot = slot(index).expect("free slots exist");
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
            let slot = slot(rest).expect("free slots exist");
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
        let mut pool = pool();
        while rest != NO_SLOT {
            let slot = slot(rest).expect("free slots exist");
            pool.free.push(rest);
            // SAFETY: as above; the slot passes to the pool after its link was read.
            rest = unsafe { *slot.next_free.get() };
        }
    }

    fn refill(&self) {
        let mut pool = pool();
        if pool.free.is_empty() {
            pool.grow();
        }
        let keep = pool.free.len().saturating_sub(REFILL);
        for index in pool.free.drain(keep..) {
            self.push(slot(index).expect("pooled slots exist"));
        }
    }
}

impl Drop for LocalFree {
    fn drop(&mut self) {
        self.keep_only(0);
    }
}

thread_local! {
    static LOCAL_FREE: LocalFree = const {
        LocalFree { head: Cell::new(NO_SLOT), len: Cell::new(0) }
    };
}

fn acquire_free() -> &'static Slot {
    LOCAL_FREE
        .try_with(|local| {
            local.pop().unwrap_or_else(|| {
                local.refill();
                local.pop().expect("a refill yields a slot")
            })
        })
        .unwrap_or_else(|_| {
            // This thread's list is gone (the thread is exiting): use the pool directly.
            let mut pool = pool();
            if pool.free.is_empty() {
                pool.grow();
            }
            let index = pool.free.pop().expect("the pool has grown");
            slot(index).expect("pooled slots exist")
        })
}

fn release_free(slot: &'static Slot) {
    let kept = LOCAL_FREE.try_with(|local| {
        local.push(slot);
        if local.len.get() > LOCAL_LIMIT {
            local.keep_only(LOCAL_LIMIT / 2);
        }
    });
    if kept.is_err() {
        pool().free.push(slot.index);
    }
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
    /// returns the ticket to give the driver. Until [`launched`] or [`refused`], nothing but the
    /// host function can claim it.
    pub(crate) fn begin_launch(self, context: usize, stream: CUstream) -> Ticket {
        let slot = self.slot;
        let current = slot.state.load(Ordering::Relaxed);
        debug_assert_eq!(phase(current), FREE);
        let generation = generation(current).wrapping_add(1).max(1);
        slot.context.store(context, Ordering::Relaxed);
        // SAFETY: the slot is free and owned by this thread until the store below publishes it.
        unsafe { *slot.stream.get() = stream };
        // Release: the record and the fields above are visible to whoever claims the slot.
        slot.state
            .store(state(generation, LAUNCHING), Ordering::Release);
        Ticket::new(slot.index, generation)
    }
}

/// The driver accepted the launch: from now on, abandoning may claim it too.
///
/// Sequentially consistent, like the failure flag that abandoning sets before it scans and that
/// the launcher reads after this (see `context_failure`): either the scan sees this launch
/// launched, or the launcher sees the failure.
pub(crate) fn launched(ticket: Ticket) {
    let slot = slot(ticket.index()).expect("tickets name existing slots");
    // Fails when the host function already claimed the slot, which is fine.
    let _ = slot.state.compare_exchange(
        state(ticket.generation(), LAUNCHING),
        state(ticket.generation(), LAUNCHED),
        Ordering::SeqCst,
        Ordering::Relaxed,
    );
}

/// The driver refused the launch: the record is the caller's again, to drop. `None` if the
/// driver called the function of a launch it refused (then whoever claimed it owns it).
pub(crate) fn refused(ticket: Ticket) -> Option<NonNull<RecordHeader>> {
    let slot = slot(ticket.index()).expect("tickets name existing slots");
    // Nothing else claims a launching slot: the host function of a refused launch never runs.
    slot.state
        .compare_exchange(
            state(ticket.generation(), LAUNCHING),
            state(ticket.generation(), CLAIMED),
            Ordering::Acquire,
            Ordering::Relaxed,
        )
        .ok()
        .map(|_| NonNull::from(slot).cast())
}

/// Claims the record of `ticket` for running it: `None` when the ticket is stale (its launch was
/// abandoned, or the slot holds another launch now) or was already claimed.
pub(crate) fn claim(ticket: Ticket) -> Option<(NonNull<RecordHeader>, CUstream)> {
    let slot = slot(ticket.index())?;
    let mut current = slot.state.load(Ordering::Relaxed);
    loop {
        if generation(current) != ticket.generation()
            || !matches!(phase(current), LAUNCHING | LAUNCHED)
        {
            return None;
        }
        // Acquire: pairs with the launch's release; the record is visible.
        match slot.state.compare_exchange_weak(
            current,
            state(ticket.generation(), CLAIMED),
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            // SAFETY: claimed: the slot and its fields are this thread's now.
            Ok(_) => return Some((NonNull::from(slot).cast(), unsafe { *slot.stream.get() })),
            Err(actual) => current = actual,
        }
    }
}

/// Claims every launched, unclaimed record of the context at `context` and passes each to
/// `abandoned`: the context failed, so the driver will never run them. Walks the whole table;
/// only called after a failure.
pub(crate) fn abandon_launched(context: usize, mut abandoned: impl FnMut(NonNull<RecordHeader>)) {
    let segments = pool().segments;
    for (segment, base) in TABLE.iter().enumerate().take(segments) {
        let base = base.load(Ordering::Acquire);
        for offset in 0..FIRST_SEGMENT << segment {
            // SAFETY: segments below `segments` exist and are never freed.
            let slot = unsafe { &*base.add(offset) };
            let current = slot.state.load(Ordering::SeqCst);
            if phase(current) == LAUNCHED && slot.context.load(Ordering::Relaxed) == context {
                // The same generation still launched means the same launch: `context` was its
                // own.
                if let Some(record) = abandon(slot, current) {
                    abandoned(record);
                }
            }
        }
    }
}

fn abandon(slot: &'static Slot, launched: u64) -> Option<NonNull<RecordHeader>> {
    slot.state
        .compare_exchange(
            launched,
            state(generation(launched), ABANDONED),
            Ordering::Acquire,
            Ordering::Relaxed,
        )
        .ok()
        .map(|_| NonNull::from(slot).cast())
}

/// Abandons the launch of `ticket` if it is still launched and unclaimed: its context failed.
pub(crate) fn abandon_ticket(ticket: Ticket) -> Option<NonNull<RecordHeader>> {
    let slot = slot(ticket.index()).expect("tickets name existing slots");
    abandon(slot, state(ticket.generation(), LAUNCHED))
}

/// Frees the slot of a claimed record whose header and payload have been dropped.
///
/// # Safety
/// `record` must be a slot record claimed by the caller, with nothing left in it to drop.
pub(crate) unsafe fn release(record: NonNull<RecordHeader>) {
    // SAFETY: slot records are slots (the header is at offset 0); slots are never freed.
    let slot: &'static Slot = unsafe { &*record.cast::<Slot>().as_ptr() };
    let current = slot.state.load(Ordering::Relaxed);
    debug_assert!(matches!(phase(current), CLAIMED | ABANDONED));
    if phase(current) == ABANDONED {
        // The driver may still hold the ticket, and a reused slot could make it live again
        // (once its generation wrapped around): an abandoned slot is retired. Abandoning
        // happens only after a context failed, so few are.
        return;
    }
    slot.state
        .store(state(generation(current), FREE), Ordering::Release);
    release_free(slot);
}

/// The payload of a slot record.
///
/// # Safety
/// `record` must be a slot record.
pub(crate) unsafe fn payload_of(record: NonNull<RecordHeader>) -> *mut u8 {
    // SAFETY: slot records are slots (per the caller).
    unsafe { (*record.cast::<Slot>().as_ptr()).payload.get().cast() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_map_to_doubling_segments() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(63), (0, 63));
        assert_eq!(locate(64), (1, 0));
        assert_eq!(locate(191), (1, 127));
        assert_eq!(locate(192), (2, 0));
        let last = u32::MAX - FIRST_SEGMENT as u32;
        assert_eq!(
            locate(last),
            (SEGMENTS - 1, (FIRST_SEGMENT << (SEGMENTS - 1)) - 1)
        );
        assert!(slot(u32::MAX).is_none(), "beyond the last segment");
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
        let slot = LaunchSlot::acquire();
        let ticket = slot.begin_launch(context, ptr::null_mut());
        launched(ticket);
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
        assert_eq!(
            again.index(),
            ticket.index(),
            "the freed slot is reused first"
        );
        assert_ne!(again.generation(), ticket.generation());
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
        finish(refused(launching).expect("a launching slot is refused"));
    }

    #[test]
    fn the_table_grows_past_its_first_segment_and_slots_come_back() {
        let tickets: Vec<Ticket> = (0..3 * FIRST_SEGMENT).map(|_| launch(7)).collect();
        let highest = tickets.iter().map(|ticket| ticket.index()).max().unwrap();
        assert!(highest as usize >= FIRST_SEGMENT);
        for ticket in tickets {
            let (record, _) = claim(ticket).expect("live");
            finish(record);
        }
    }
}

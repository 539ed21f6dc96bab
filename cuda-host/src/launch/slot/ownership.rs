//! A run-once record in its slot: what it carries, who owns it, and the calls that pass it on.
//!
//! **Payloads.** A run-once payload runs once on the driver's thread and is dropped later on a
//! caller's: a Rust closure, or a C function with its own copy of its user data. Its record
//! lives in a slot, with the payload inside the slot when it fits ([`fits_inline`]), else boxed.
//!
//! **Ownership.** A launching thread acquires a free slot, writes the record and begins the
//! launch; the driver accepts it (launched) or refuses it (taken back); the host function claims
//! it, or abandoning does; whoever claimed it releases the slot once the record was dropped. The
//! steps are those of a record's life in [`crate::launch`]; the state machine under them is
//! `slot_state`.

use super::table::{
    self, INLINE_BYTES, Slot, acquire_free, fits_inline, payload_of, pool, release_free, slot,
};
use crate::launch::context_shared::ContextShared;
use crate::launch::record::{self, RecordHeader, RecordOperations};
use crate::launch::slot_state::{Phase, Released, Ticket};
use crate::observe::Stamp;
use cuda_host_sys::CUstream;
use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::sync::atomic::Ordering;

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

    /// Writes the record: its `header`, and `payload` inside the slot.
    ///
    /// # Panics
    /// When `payload` does not fit inside a slot ([`fits_inline`]).
    pub(crate) fn write<P>(&mut self, header: RecordHeader, payload: P) {
        // SAFETY: the slot is free and this thread's until `begin_launch` publishes it.
        unsafe { self.slot.write(header, payload) };
    }

    /// Stamps the launch with what is observed of it (`crate::observe`: its caller's name, when
    /// it was made), before it is published.
    pub(crate) fn stamp(&mut self, launched: Stamp) {
        // SAFETY: the slot is free and this thread's until `begin_launch` publishes it.
        unsafe { *self.slot.launched.get() = launched };
    }

    /// Publishes the written record for a launch on `stream` of the context at `context`, and
    /// returns the ticket to give the driver. Until [`mark_launched`] or [`take_refused`],
    /// nothing but the host function can claim it.
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
/// may claim it too (see the handshake in `running`).
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
        .then(|| slot.record())
}

/// Claims the record of `ticket` for running it: `None` when the ticket is stale (its launch was
/// abandoned, or the slot holds another launch now, or its segment is gone) or was already
/// claimed.
pub(crate) fn claim(ticket: Ticket) -> Option<(NonNull<RecordHeader>, CUstream)> {
    table::announced(ticket.index(), |slot| {
        slot.filter(|slot| slot.state.claim(ticket.generation()))
            // SAFETY: claimed: the slot and its fields are this thread's now.
            .map(|slot| (slot.record(), unsafe { *slot.stream.get() }))
    })
}

/// The stamp of a slot record's launch.
///
/// # Safety
/// `record` must be a slot record claimed by the caller.
pub(crate) unsafe fn launched_at(record: NonNull<RecordHeader>) -> Stamp {
    // SAFETY: a claimed slot record (per the caller): its fields are the caller's.
    unsafe { *Slot::of_record(record).launched.get() }
}

/// Claims every launched, unclaimed record of the context at `context` and passes each to
/// `abandoned`: the context failed, so the driver will never run them. Walks the whole table;
/// only called after a failure.
pub(crate) fn abandon_launched(context: usize, mut abandoned: impl FnMut(NonNull<RecordHeader>)) {
    let pool = pool();
    for slot in pool.slots() {
        let (phase, generation) = slot.state.load(Ordering::Acquire);
        // The same generation still launched means the same launch: `context` was its own.
        if phase == Phase::Launched
            && slot.context.load(Ordering::Relaxed) == context
            && slot.state.abandon(generation)
        {
            abandoned(slot.record());
        }
    }
}

/// Abandons the launch of `ticket` if it is still launched and unclaimed: its context failed,
/// or other code's capture took it.
pub(crate) fn abandon_ticket(ticket: Ticket) -> Option<NonNull<RecordHeader>> {
    let slot = own_slot(ticket);
    slot.state
        .abandon(ticket.generation())
        .then(|| slot.record())
}

/// Frees the slot of a claimed record whose header and payload have been dropped, or retires it.
///
/// # Safety
/// `record` must be a slot record claimed by the caller, with nothing left in it to drop.
pub(crate) unsafe fn release(record: NonNull<RecordHeader>) {
    // SAFETY: a slot record, claimed by the caller: its segment is not freed.
    let slot = unsafe { Slot::of_record(record) };
    match slot.state.release() {
        Released::Reusable => release_free(slot),
        Released::Retired => pool().retire(slot.index),
    }
}

/// What a run-once record holds: run once on the driver's thread, dropped on a caller's.
pub(crate) trait RunOnce: Send + 'static {
    fn run(&mut self);

    /// The name profilers show for its run (`crate::observe`; with its features).
    #[cfg(any(feature = "nvtx", feature = "tracing"))]
    fn name(&self) -> &'static str {
        std::any::type_name::<Self>()
    }
}

/// A run-once closure: `FnMut` so that it is called through a reference, leaving its captured
/// values in the record to be dropped on a caller's thread.
pub(crate) struct RunOnceClosure<F>(pub(crate) F);

impl<F: FnMut() + Send + 'static> RunOnce for RunOnceClosure<F> {
    fn run(&mut self) {
        (self.0)()
    }

    #[cfg(any(feature = "nvtx", feature = "tracing"))]
    fn name(&self) -> &'static str {
        std::any::type_name::<F>()
    }
}

impl<P: RunOnce> RunOnce for Box<P> {
    fn run(&mut self) {
        (**self).run();
    }

    #[cfg(any(feature = "nvtx", feature = "tracing"))]
    fn name(&self) -> &'static str {
        (**self).name()
    }
}

/// A C function with up to [`SMALL_BYTES`] copied bytes, filling a slot's inline payload.
#[repr(C, align(16))]
pub(crate) struct SmallBytes {
    function: unsafe extern "C" fn(*mut c_void),
    len: usize,
    bytes: [MaybeUninit<u8>; SMALL_BYTES],
}

const SMALL_BYTES: usize =
    INLINE_BYTES - size_of::<unsafe extern "C" fn(*mut c_void)>() - size_of::<usize>();
const _: () = assert!(fits_inline::<SmallBytes>());
const _: () = assert!(size_of::<SmallBytes>() == INLINE_BYTES);

impl RunOnce for SmallBytes {
    #[cfg(any(feature = "nvtx", feature = "tracing"))]
    fn name(&self) -> &'static str {
        "C host function (copied user data)"
    }

    fn run(&mut self) {
        debug_assert!(self.len <= SMALL_BYTES);
        // SAFETY: the caller of `host_launch_raw` vouched for the function with a pointer to its
        // copied bytes, valid during the call.
        unsafe { (self.function)(self.bytes.as_mut_ptr().cast()) }
    }
}

/// A C function with more copied bytes, in a 16-byte-aligned box.
pub(crate) struct LargeBytes {
    function: unsafe extern "C" fn(*mut c_void),
    bytes: Box<[MaybeUninit<u128>]>,
}

impl RunOnce for LargeBytes {
    #[cfg(any(feature = "nvtx", feature = "tracing"))]
    fn name(&self) -> &'static str {
        "C host function (copied user data)"
    }

    fn run(&mut self) {
        // SAFETY: as for `SmallBytes`.
        unsafe { (self.function)(self.bytes.as_mut_ptr().cast()) }
    }
}

/// A C function with its own copy of its user data, as a run-once payload: inside the slot
/// when the bytes fit it, else in a box.
pub(crate) enum CopiedBytes {
    Inline(SmallBytes),
    Boxed(LargeBytes),
}

impl CopiedBytes {
    pub(crate) fn new(function: unsafe extern "C" fn(*mut c_void), bytes: &[u8]) -> CopiedBytes {
        if bytes.len() <= SMALL_BYTES {
            let mut small = SmallBytes {
                function,
                len: bytes.len(),
                bytes: [MaybeUninit::uninit(); SMALL_BYTES],
            };
            // SAFETY: `bytes.len()` fits the array; `[MaybeUninit<u8>]` accepts any bytes.
            unsafe {
                ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    small.bytes.as_mut_ptr().cast(),
                    bytes.len(),
                );
            }
            CopiedBytes::Inline(small)
        } else {
            let mut copy = Box::new_uninit_slice(bytes.len().div_ceil(size_of::<u128>()));
            // SAFETY: the box holds at least `bytes.len()` bytes.
            unsafe {
                ptr::copy_nonoverlapping(bytes.as_ptr(), copy.as_mut_ptr().cast(), bytes.len());
            }
            CopiedBytes::Boxed(LargeBytes {
                function,
                bytes: copy,
            })
        }
    }
}

/// A run-once record of `payload` in a launch slot, inline when it fits, else boxed; its home is
/// the calling thread.
pub(crate) fn in_slot<P: RunOnce>(context: Arc<ContextShared>, payload: P) -> LaunchSlot {
    if fits_inline::<P>() {
        write_in_slot(context, payload)
    } else {
        write_in_slot(context, Box::new(payload))
    }
}

fn write_in_slot<P: RunOnce>(context: Arc<ContextShared>, payload: P) -> LaunchSlot {
    struct Operations<P>(P);
    impl<P: RunOnce> Operations<P> {
        const TABLE: RecordOperations = RecordOperations {
            run: run_in_slot::<P>,
            drop: drop_in_slot::<P>,
            #[cfg(any(feature = "nvtx", feature = "tracing"))]
            name: name_in_slot::<P>,
        };
    }
    let mut slot = LaunchSlot::acquire();
    let header = RecordHeader::new(&Operations::<P>::TABLE, Some(context), record::home());
    slot.write(header, payload);
    slot
}

unsafe fn run_in_slot<P: RunOnce>(record: NonNull<RecordHeader>) {
    // SAFETY: written by `write_in_slot::<P>`; a run-once record runs once, by its claimer, so
    // this is the only reference to the payload.
    unsafe { (*payload_of::<P>(record)).run() }
}

#[cfg(any(feature = "nvtx", feature = "tracing"))]
unsafe fn name_in_slot<P: RunOnce>(record: NonNull<RecordHeader>) -> &'static str {
    // SAFETY: written by `write_in_slot::<P>`; the name is read by the claimer before the run,
    // or by the owner.
    unsafe { (*payload_of::<P>(record)).name() }
}

unsafe fn drop_in_slot<P>(record: NonNull<RecordHeader>) {
    /// Drops the header and frees the slot, also when the payload's `Drop` panics.
    struct Finish(NonNull<RecordHeader>);
    impl Drop for Finish {
        fn drop(&mut self) {
            // SAFETY: the header is dropped once, after the payload; then nothing is left in the
            // slot, which its claimer (the caller of `drop_in_slot`) frees.
            unsafe {
                ptr::drop_in_place(self.0.as_ptr());
                release(self.0);
            }
        }
    }
    let _finish = Finish(record);
    // SAFETY: written by `write_in_slot::<P>` and claimed by the caller: the payload is dropped
    // once.
    unsafe { ptr::drop_in_place(payload_of::<P>(record)) };
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::launch::slot::table::return_released;
    use crate::launch::slot::table::{FIRST_SEGMENT, RESERVE_SLOTS, is_reserve};
    use std::ptr;

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

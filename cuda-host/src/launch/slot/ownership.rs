//! Who owns a slot's record, and the calls that pass it on: a launching thread acquires a free
//! slot, writes the record and begins the launch; the driver accepts it (launched) or refuses it
//! (taken back); the host function claims it, or abandoning does; whoever claimed it releases
//! the slot once the record was dropped. The steps are those of a record's life in
//! [`crate::launch`]; the state machine under them is `slot_state`.

use super::layout::Slot;
use super::table::{self, pool, slot};
use super::thread_cache::{acquire_free, release_free};
use super::ticket::Ticket;
use crate::launch::record::RecordHeader;
use crate::launch::slot_state::{Phase, Released};
use crate::observe::Stamp;
use cuda_host_sys::CUstream;
use std::ptr::NonNull;
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
    /// When `payload` does not fit inside a slot ([`fits_inline`](super::fits_inline)).
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::launch::slot::table::{FIRST_SEGMENT, RESERVE_SLOTS, is_reserve};
    use crate::launch::slot::thread_cache::return_released;
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

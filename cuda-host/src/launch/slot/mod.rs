//! Launch slots: the memory of run-once launch records, and the tickets the driver holds for
//! them.
//!
//! `cuLaunchHostFunc` never calls a function once its context has failed, so cuda-host reclaims
//! such records itself, at a time when nothing proves the driver will not still call them: the
//! driver holds a ticket, never an address, and whoever moves a slot out of launched owns its
//! record (rule 3 of [`crate::launch`]; the states are `slot_state`'s). A payload that fits lives
//! inside its slot, so once the table has grown to the launches in flight a launch allocates
//! nothing.
//!
//! The folder, from the bottom up (the state of a slot and the ticket naming it are
//! `crate::launch::slot_state`'s, a lock-free core):
//! - `table`: one slot's memory, where a record's header and payload lie (nothing else knows);
//!   every slot, in segments that double in size; the pool of free ones, which makes segments and
//!   frees them, racing only with claims of stale tickets; and each thread's cache of free slots,
//!   taken from and given back to the pool in batches.
//! - `ownership`: the payloads a run-once record carries, and the calls that pass a record on,
//!   from acquiring a slot to releasing it, and abandoning.
//! - `counts`: what the table holds, for diagnostics.

mod counts;
mod ownership;
mod table;

pub(crate) use crate::launch::slot_state::Ticket;
pub use counts::{LaunchSlotCounts, launch_slot_counts};
pub(crate) use ownership::{
    CopiedBytes, RunOnce, RunOnceClosure, abandon_launched, abandon_ticket, claim, in_slot,
    launched_at, mark_launched, take_refused,
};
#[cfg(test)]
pub(crate) use ownership::{LaunchSlot, release};
pub(crate) use table::return_released;

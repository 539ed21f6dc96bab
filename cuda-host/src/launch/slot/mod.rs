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
//! The folder, from the bottom up:
//! - `layout`: one slot's memory, where a record's header and payload lie; nothing else knows.
//! - `ticket`: what the driver holds for a launch, a slot index and a generation.
//! - `table`: every slot, in segments that double in size, and the pool of free ones, which
//!   makes segments and frees them, racing only with claims of stale tickets.
//! - `thread_cache`: each thread's free slots, taken from and given back to the pool in batches.
//! - `ownership`: the calls that pass a record on, from acquiring a slot to releasing it, and
//!   abandoning.
//! - `counts`: what the table holds, for diagnostics.

mod counts;
mod layout;
mod ownership;
mod table;
mod thread_cache;
mod ticket;

pub use counts::{LaunchSlotCounts, launch_slot_counts};
pub(crate) use layout::{INLINE_BYTES, fits_inline, payload_of};
pub(crate) use ownership::{
    LaunchSlot, abandon_launched, abandon_ticket, claim, launched_at, mark_launched, release,
    take_refused,
};
pub(crate) use thread_cache::return_released;
pub(crate) use ticket::Ticket;

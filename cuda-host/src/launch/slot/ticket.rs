//! What the driver holds for a launch: a slot's index and the generation of the launch, never an
//! address (rule 3 of [`crate::launch`]).

use std::ffi::c_void;
use std::ptr;

#[cfg(not(target_pointer_width = "64"))]
compile_error!("launch tickets pack a slot index and a generation into a 64-bit pointer");

/// A launch's ticket: the slot index in the low 32 bits, its generation (never zero, so a ticket
/// is never null) in the high 32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket(usize);

impl Ticket {
    pub(super) fn new(index: u32, generation: u32) -> Ticket {
        Ticket((generation as usize) << 32 | index as usize)
    }

    pub(super) fn index(self) -> u32 {
        self.0 as u32
    }

    pub(super) fn generation(self) -> u32 {
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn tickets_are_never_null_and_round_trip() {
        let ticket = Ticket::new(0, 1);
        assert!(!ticket.into_user_data().is_null());
        let back = Ticket::from_user_data(ticket.into_user_data());
        assert_eq!((back.index(), back.generation()), (0, 1));
        let high = Ticket::new(u32::MAX - 1, u32::MAX);
        assert_eq!((high.index(), high.generation()), (u32::MAX - 1, u32::MAX));
    }
}

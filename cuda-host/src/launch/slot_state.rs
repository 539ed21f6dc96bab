//! The state machine of a launch slot: which launch it holds, and who owns its record.
//!
//! A state is a generation and a phase in one atomic word. A slot's life: free → launching (its
//! record is written; the driver is being asked) → launched (the driver accepted it) → claimed
//! (by the host function about to run it, or by the launching thread when the driver refused)
//! → free again, one generation on, once its record was dropped. A launched record can instead
//! be abandoned (its context failed, or other code's capture took the launch): the driver may
//! still hold its ticket, so such a slot is retired, never reused. A slot whose generation
//! reached the last value is retired too, so that a generation never repeats and a stale ticket
//! can never name a later launch.
//!
//! Every transition out of launching or launched is a compare-and-swap naming the generation:
//! exactly one party wins a launch's record.
//!
//! **The ticket**, what the driver holds for a launch: a slot's index and the generation of the
//! launch, never an address (rule 3 of [`crate::launch`]).

use crate::sync::AtomicU64;
use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::Ordering;

const FREE: u64 = 0;
const LAUNCHING: u64 = 1;
const LAUNCHED: u64 = 2;
const CLAIMED: u64 = 3;
const ABANDONED: u64 = 4;
const PHASE_BITS: u32 = 3;

/// The last generation a slot may hold; then it is retired.
pub(crate) const LAST_GENERATION: u32 = u32::MAX;

/// Where a slot is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Free, or retired after its last generation.
    Free,
    /// Being handed to the driver.
    Launching,
    /// Held by the driver.
    Launched,
    /// Owned by whoever claimed it: running, or finished and waiting to be dropped.
    Claimed,
    /// Claimed by abandoning: never reused.
    Abandoned,
}

fn pack(generation: u32, phase: u64) -> u64 {
    (u64::from(generation) << PHASE_BITS) | phase
}

fn generation_of(state: u64) -> u32 {
    (state >> PHASE_BITS) as u32
}

fn phase_of(state: u64) -> u64 {
    state & ((1 << PHASE_BITS) - 1)
}

/// What became of a slot whose record was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// Free for another launch.
    Reusable,
    /// Never to be used again: abandoned, or out of generations.
    Retired,
}

/// A slot's state.
pub(crate) struct SlotState(AtomicU64);

impl SlotState {
    /// A free slot whose next launch gets generation `first`, which must be at least 1.
    pub(crate) fn new(first: u32) -> SlotState {
        debug_assert!(first >= 1);
        SlotState(AtomicU64::new(pack(first - 1, FREE)))
    }

    /// The phase and generation now.
    pub(crate) fn load(&self, order: Ordering) -> (Phase, u32) {
        let state = self.0.load(order);
        let phase = match phase_of(state) {
            FREE => Phase::Free,
            LAUNCHING => Phase::Launching,
            LAUNCHED => Phase::Launched,
            CLAIMED => Phase::Claimed,
            _ => Phase::Abandoned,
        };
        (phase, generation_of(state))
    }

    /// Free → launching, one generation on: the record was written and is published with this
    /// store (Release). The caller owns the free slot.
    pub(crate) fn begin(&self) -> u32 {
        let current = self.0.load(Ordering::Relaxed);
        debug_assert_eq!(phase_of(current), FREE);
        debug_assert!(
            generation_of(current) < LAST_GENERATION,
            "a retired slot was reused"
        );
        let generation = generation_of(current) + 1;
        self.0.store(pack(generation, LAUNCHING), Ordering::Release);
        generation
    }

    /// Launching → launched: the driver accepted the launch. `false` when the host function
    /// already claimed it. The failure handshake (`running`) follows it with a fence.
    pub(crate) fn mark_launched(&self, generation: u32) -> bool {
        self.0
            .compare_exchange(
                pack(generation, LAUNCHING),
                pack(generation, LAUNCHED),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Launching → claimed by the launching thread: the driver refused the launch. `false` when
    /// something else claimed it (the driver ran a function it refused).
    pub(crate) fn refuse(&self, generation: u32) -> bool {
        self.0
            .compare_exchange(
                pack(generation, LAUNCHING),
                pack(generation, CLAIMED),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Launching or launched → claimed, for running the record: `false` when the generation is
    /// stale or the record was claimed or abandoned already.
    pub(crate) fn claim(&self, generation: u32) -> bool {
        let mut current = self.0.load(Ordering::Relaxed);
        loop {
            if generation_of(current) != generation
                || !matches!(phase_of(current), LAUNCHING | LAUNCHED)
            {
                return false;
            }
            // Acquire: pairs with `begin`'s Release; the record is visible.
            match self.0.compare_exchange_weak(
                current,
                pack(generation, CLAIMED),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => current = actual,
            }
        }
    }

    /// Launched → abandoned: the driver will never run it (or other code's graph may, many
    /// times). `false` when it was claimed first.
    pub(crate) fn abandon(&self, generation: u32) -> bool {
        self.0
            .compare_exchange(
                pack(generation, LAUNCHED),
                pack(generation, ABANDONED),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// The claimed record was dropped: frees the slot (Release, so that the next owner sees the
    /// slot's memory unused), or retires it.
    pub(crate) fn release(&self) -> Released {
        let current = self.0.load(Ordering::Relaxed);
        match phase_of(current) {
            CLAIMED if generation_of(current) < LAST_GENERATION => {
                self.0
                    .store(pack(generation_of(current), FREE), Ordering::Release);
                Released::Reusable
            }
            CLAIMED => {
                // Out of generations: stays claimed forever, so no ticket can match it again.
                Released::Retired
            }
            phase => {
                debug_assert_eq!(phase, ABANDONED, "released a slot nobody claimed");
                Released::Retired
            }
        }
    }
}

#[cfg(not(target_pointer_width = "64"))]
compile_error!("launch tickets pack a slot index and a generation into a 64-bit pointer");

/// A launch's ticket: the slot index in the low 32 bits, its generation (never zero, so a ticket
/// is never null) in the high 32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket(usize);

impl Ticket {
    pub(crate) fn new(index: u32, generation: u32) -> Ticket {
        Ticket((generation as usize) << 32 | index as usize)
    }

    pub(crate) fn index(self) -> u32 {
        self.0 as u32
    }

    pub(crate) fn generation(self) -> u32 {
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
    fn a_launch_is_claimed_once_and_its_generation_goes_stale() {
        let state = SlotState::new(1);
        let generation = state.begin();
        assert_eq!(generation, 1);
        assert!(state.mark_launched(generation));
        assert!(state.claim(generation));
        assert!(!state.claim(generation), "claimed twice");
        assert!(!state.abandon(generation), "abandoned after it was claimed");
        assert_eq!(state.release(), Released::Reusable);
        let next = state.begin();
        assert_eq!(next, 2);
        assert!(
            !state.claim(generation),
            "a stale ticket claimed a later launch"
        );
        assert!(state.claim(next));
        assert_eq!(state.release(), Released::Reusable);
    }

    #[test]
    fn the_host_function_may_claim_before_the_launch_is_marked_launched() {
        let state = SlotState::new(7);
        let generation = state.begin();
        assert!(state.claim(generation));
        assert!(!state.mark_launched(generation));
        assert!(!state.refuse(generation));
        assert_eq!(state.release(), Released::Reusable);
    }

    #[test]
    fn an_abandoned_slot_is_retired() {
        let state = SlotState::new(1);
        let generation = state.begin();
        assert!(state.mark_launched(generation));
        assert!(state.abandon(generation));
        assert!(!state.claim(generation), "an abandoned record ran");
        assert_eq!(state.release(), Released::Retired);
        assert_eq!(
            state.load(Ordering::Relaxed),
            (Phase::Abandoned, generation)
        );
    }

    #[test]
    fn a_slot_out_of_generations_is_retired_so_no_generation_repeats() {
        let state = SlotState::new(LAST_GENERATION);
        let generation = state.begin();
        assert_eq!(generation, LAST_GENERATION);
        assert!(state.refuse(generation));
        assert_eq!(state.release(), Released::Retired);
        assert!(!state.claim(generation));
        assert!(!state.claim(1), "a wrapped generation matched");
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
}

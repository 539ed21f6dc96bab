//! One slot's memory, two cache lines: where a run-once record's header, state, stream, context
//! and payload lie. Nothing else knows it: a payload asks [`fits_inline`], is written by
//! [`LaunchSlot::write`](super::LaunchSlot::write) and found by [`payload_of`].
//!
//! The record header comes first, so a slot's address is its record's and the reclaim lists
//! treat slot records like any other. What the host function touches (header, state, stream,
//! the payload's start) shares the first line; what only launching and abandoning need is at
//! the end. With the `nvtx` or `tracing` feature, a third line holds the launch's stamp (a
//! caller's name, the time for its queue delay: `crate::observe`); without them the stamp has no
//! size.

use crate::launch::record::RecordHeader;
use crate::launch::slot_state::SlotState;
use crate::observe::Stamp;
use cuda_host_sys::CUstream;
use std::cell::UnsafeCell;
use std::mem::{MaybeUninit, offset_of};
use std::ptr::{self, NonNull};
use std::sync::atomic::AtomicUsize;

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
/// [`LaunchSlot::write`](super::LaunchSlot::write).
pub(crate) unsafe fn payload_of<P>(record: NonNull<RecordHeader>) -> *mut P {
    // SAFETY: slot records are slots, and a claimed slot's segment is not freed (per the caller).
    unsafe { Slot::of_record(record) }.payload.get().cast()
}

//! What a run-once launch carries, and its record in a launch slot.
//!
//! A run-once payload runs once on the driver's thread and is dropped later on a caller's: a
//! Rust closure, or a C function with its own copy of its user data. Its record lives in a launch
//! slot (`slot`), with the payload inside the slot when it fits ([`slot::fits_inline`]), else
//! boxed.

use crate::launch::context_shared::ContextShared;
use crate::launch::inboxes;
use crate::launch::record::{RecordHeader, RecordOperations};
use crate::launch::slot::{self, INLINE_BYTES, LaunchSlot};
use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};
use std::sync::Arc;

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
const _: () = assert!(slot::fits_inline::<SmallBytes>());
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
    if slot::fits_inline::<P>() {
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
    let header = RecordHeader::new(&Operations::<P>::TABLE, Some(context), inboxes::home());
    slot.write(header, payload);
    slot
}

unsafe fn run_in_slot<P: RunOnce>(record: NonNull<RecordHeader>) {
    // SAFETY: written by `write_in_slot::<P>`; a run-once record runs once, by its claimer, so
    // this is the only reference to the payload.
    unsafe { (*slot::payload_of::<P>(record)).run() }
}

#[cfg(any(feature = "nvtx", feature = "tracing"))]
unsafe fn name_in_slot<P: RunOnce>(record: NonNull<RecordHeader>) -> &'static str {
    // SAFETY: written by `write_in_slot::<P>`; the name is read by the claimer before the run,
    // or by the owner.
    unsafe { (*slot::payload_of::<P>(record)).name() }
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
                slot::release(self.0);
            }
        }
    }
    let _finish = Finish(record);
    // SAFETY: written by `write_in_slot::<P>` and claimed by the caller: the payload is dropped
    // once.
    unsafe { ptr::drop_in_place(slot::payload_of::<P>(record)) };
}

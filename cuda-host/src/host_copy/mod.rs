//! A native host copy: a function with the `CUhostFn` signature that copies bytes between two
//! host buffers in stream order.
//!
//! From C (or any code that launches host functions itself) it is [`host_copy_fn`] with a
//! [`HostCopy`] as user data (`struct { const void *source; void *destination; size_t length; }`).
//! From Rust, [`host_copy_scope`] borrows the buffers for a scope that ends only once no copy
//! launched in it can still run, as `std::thread::scope` does for threads; [`host_copy_raw`]
//! launches one copy with its description copied into the launch record. Overlapping buffers are
//! refused before anything is enqueued ([`Error::OverlappingCopy`]); [`host_copy_fn`] itself,
//! which cannot return an error, logs and copies nothing when handed overlapping buffers.
//!
//! ```no_run
//! use cuda_host::host_copy::host_copy_scope;
//! use cuda_host::{Device, Stream, StreamFlags};
//!
//! let context = Device::get(cuda_host::driver()?, 0)?.primary_context()?;
//! let stream = Stream::new(&context, StreamFlags::NonBlocking)?;
//! let source = vec![7u8; 4096];
//! let mut destination = vec![0u8; 4096];
//! host_copy_scope(&stream, |scope| scope.copy(&source, &mut destination))??;
//! assert_eq!(destination, source); // the scope ended once the copy had run
//! # Ok::<(), cuda_host::Error>(())
//! ```
//!
//! What a scope promises, exactly, is written at [`HostCopyScope`] (`scope`); the copy function
//! and its description are here.

use crate::contain::{InHostFunction, logged, ran_host_functions};
use crate::error::{Error, Result};
use crate::host_launch::{UserData, host_launch_raw};
use crate::launch::defer_value;
use crate::objects::Stream;
use std::ffi::c_void;

mod scope;

pub use scope::{HostCopyScope, HostCopyScopeError, host_copy_scope};

/// What [`host_copy_fn`] copies: `length` bytes from `source` to `destination`. Laid out as the
/// C struct `{ const void *source; void *destination; size_t length; }`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostCopy {
    /// Where the bytes are read.
    pub source: *const c_void,
    /// Where they are written.
    pub destination: *mut c_void,
    /// How many.
    pub length: usize,
}

// SAFETY: a description of a copy (two addresses and a length); whoever launches it vouches for
// the memory.
unsafe impl Send for HostCopy {}
// SAFETY: as above.
unsafe impl Sync for HostCopy {}

impl HostCopy {
    /// Describes a copy of `length` bytes from `source` to `destination`.
    ///
    /// # Errors
    /// [`Error::OverlappingCopy`] when the two ranges overlap (an empty copy never does), or
    /// [`Error::InvalidArgument`] when a range wraps around the address space.
    pub fn new(source: *const c_void, destination: *mut c_void, length: usize) -> Result<Self> {
        let copy = HostCopy {
            source,
            destination,
            length,
        };
        copy.check()?;
        Ok(copy)
    }

    /// The description as bytes, for [`UserData::Copied`].
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `HostCopy` is `repr(C)` of two pointers and a `usize`, without padding; any
        // initialised value of it is readable as bytes.
        unsafe {
            std::slice::from_raw_parts(std::ptr::from_ref(self).cast::<u8>(), size_of::<HostCopy>())
        }
    }

    fn ranges(&self) -> Option<(std::ops::Range<usize>, std::ops::Range<usize>)> {
        let from = self.source.addr();
        let to = self.destination.addr();
        Some((
            from..from.checked_add(self.length)?,
            to..to.checked_add(self.length)?,
        ))
    }

    fn check(&self) -> Result<()> {
        let Some((from, to)) = self.ranges() else {
            return Err(Error::InvalidArgument {
                what: format!(
                    "a host copy of {} bytes at {:p} or {:p} runs past the address space",
                    self.length, self.source, self.destination
                ),
            });
        };
        if self.length != 0 && from.start < to.end && to.start < from.end {
            return Err(Error::OverlappingCopy { from, to });
        }
        Ok(())
    }
}

const _: () = assert!(size_of::<HostCopy>() == 3 * size_of::<usize>());

/// A host function (`CUhostFn`) that copies the bytes its user data, a [`HostCopy`], describes.
///
/// Launch it with any host-function API: `host_launch_raw(stream, host_copy_fn,
/// UserData::Copied(copy.as_bytes()))`, or from C as `cuLaunchHostFunc(stream, fn, &copy)`. It
/// never unwinds; handed overlapping buffers, it logs an error and copies nothing.
///
/// # Safety
/// 1. `user_data` must point to a valid [`HostCopy`] during the call.
/// 2. Its `source` must be readable and its `destination` writable for `length` bytes, and no
///    other code may write either while it runs.
pub unsafe extern "C" fn host_copy_fn(user_data: *mut c_void) {
    // SAFETY: per the caller; the description may be unaligned in memory C code owns.
    let copy = unsafe { user_data.cast::<HostCopy>().read_unaligned() };
    if copy.length == 0 {
        return;
    }
    if let Err(error) = copy.check() {
        // A panicking logger must not unwind into the driver. On the driver's thread (one that
        // ran cuda-host's host functions) its payload, and its calls back into cuda-host, are a
        // host function's; called directly on a caller's thread, they are that thread's own.
        let _marked = ran_host_functions().then(|| InHostFunction::enter(defer_value));
        logged!(error!("host_copy_fn copied nothing: {error}"));
        return;
    }
    // SAFETY: per the caller; the ranges were checked not to overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(
            copy.source.cast::<u8>(),
            copy.destination.cast::<u8>(),
            copy.length,
        );
    }
}

/// Launches [`host_copy_fn`] on `stream` with `copy` copied into the launch record: the copy
/// happens in stream order, after the work enqueued before it.
///
/// # Safety
/// `copy.source` must stay readable and `copy.destination` writable for `copy.length` bytes
/// until the copy has run (a [`synchronize`](Stream::synchronize) of the stream, or a stream
/// point after it, tells), and nothing else may write either meanwhile.
///
/// # Errors
/// [`Error::OverlappingCopy`] when the buffers overlap (nothing is enqueued), or as
/// [`host_launch_raw`].
pub unsafe fn host_copy_raw(stream: &Stream, copy: HostCopy) -> Result<()> {
    copy.check()?;
    // SAFETY: `host_copy_fn` reads its description from the copied bytes during its call; the
    // caller vouches for the buffers.
    unsafe { host_launch_raw(stream, host_copy_fn, UserData::Copied(copy.as_bytes())) }
}

//! A native host copy: a function with the `CUhostFn` signature that copies bytes between two
//! host buffers in stream order.
//!
//! From C (or any code that launches host functions itself) it is [`host_copy_fn`] with a
//! [`HostCopy`] as user data (`struct { const void *source; void *destination; size_t length; }`).
//! From Rust, [`host_copy_scope`] borrows the buffers for a scope that ends only once every copy
//! launched in it has run, as `std::thread::scope` does for threads; [`host_copy_raw`] launches
//! one copy with its description copied into the launch record. Overlapping buffers are refused
//! before anything is enqueued ([`Error::OverlappingCopy`]); [`host_copy_fn`] itself, which
//! cannot return an error, logs and copies nothing when handed overlapping buffers.

use crate::error::{Error, Result};
use crate::host_launch::{UserData, host_launch, host_launch_raw};
use crate::launch::{ensure_outside_host_function, is_sticky};
use crate::objects::Stream;
use std::cell::Cell;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

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
        // A panicking logger must not unwind into the driver.
        let _ = catch_unwind(AssertUnwindSafe(|| {
            log::error!("host_copy_fn copied nothing: {error}");
        }));
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

/// Copies launched in a [`host_copy_scope`]: their borrows last as long as the scope.
pub struct HostCopyScope<'env> {
    stream: &'env Stream,
    launched: Cell<usize>,
    ran: Arc<AtomicUsize>,
    /// Invariant in `'env`, so that the body cannot hand in borrows that end before the scope
    /// (as `std::thread::Scope`).
    _env: PhantomData<&'env mut &'env ()>,
}

/// A copy in flight: raw addresses, sent to the driver's thread.
struct InFlight {
    copy: HostCopy,
    ran: Arc<AtomicUsize>,
}

impl<'env> HostCopyScope<'env> {
    /// Copies `source` into `destination` in stream order, after the work enqueued on the
    /// scope's stream before; both stay borrowed until the scope has waited for the copy.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the lengths differ; otherwise as
    /// [`host_launch`](crate::host_launch) (nothing is then enqueued).
    pub fn copy(&self, source: &'env [u8], destination: &'env mut [u8]) -> Result<()> {
        if source.len() != destination.len() {
            return Err(Error::InvalidArgument {
                what: format!(
                    "a host copy of {} bytes into a buffer of {}",
                    source.len(),
                    destination.len()
                ),
            });
        }
        // Distinct borrows never overlap, so the check cannot fail here.
        let copy = HostCopy::new(
            source.as_ptr().cast(),
            destination.as_mut_ptr().cast(),
            source.len(),
        )?;
        let in_flight = InFlight {
            copy,
            ran: Arc::clone(&self.ran),
        };
        host_launch(self.stream, move || {
            let InFlight { copy, ran } = &in_flight;
            // SAFETY: the buffers are borrowed until the scope saw every copy run (or never to
            // run); the description is this closure's own.
            unsafe { host_copy_fn(std::ptr::from_ref(copy).cast_mut().cast()) };
            ran.fetch_add(1, Ordering::Release);
        })?;
        self.launched.set(self.launched.get() + 1);
        Ok(())
    }
}

/// Runs `body` with a scope in which host copies on `stream` borrow their buffers, and returns
/// once every copy launched in it has run: the borrows end only then. Like
/// `std::thread::scope`, with a [`synchronize`](Stream::synchronize) of the stream as the join.
///
/// If the stream's context fails, the copies after the failure never run, and the scope returns
/// the failure once cuda-host has abandoned them (so that none can run later).
///
/// # Errors
/// [`Error::InHostFunction`] inside a host function (`body` is not called); the error of the
/// stream's synchronize when it reports the context's failure. An error of a copy is `body`'s
/// to return.
///
/// ```no_run
/// # fn demo(stream: &cuda_host::Stream) -> cuda_host::Result<()> {
/// let source = vec![7u8; 4096];
/// let mut destination = vec![0u8; 4096];
/// cuda_host::host_copy_scope(stream, |scope| scope.copy(&source, &mut destination))??;
/// assert_eq!(source, destination);
/// # Ok(()) }
/// ```
///
/// The destination stays borrowed until the scope ends:
///
/// ```compile_fail
/// # fn demo(stream: &cuda_host::Stream) {
/// let source = vec![7u8; 16];
/// let mut destination = vec![0u8; 16];
/// let _ = cuda_host::host_copy_scope(stream, |scope| {
///     scope.copy(&source, &mut destination).unwrap();
///     destination[0] // read while the copy may run
/// });
/// # }
/// ```
///
/// And a buffer must outlive the scope:
///
/// ```compile_fail
/// # fn demo(stream: &cuda_host::Stream) {
/// let source = vec![7u8; 16];
/// let _ = cuda_host::host_copy_scope(stream, |scope| {
///     let mut local = vec![0u8; 16];
///     scope.copy(&source, &mut local).unwrap(); // `local` is gone before the copy ran
/// });
/// # }
/// ```
#[doc(alias = "CUhostFn")]
pub fn host_copy_scope<'env, T>(
    stream: &'env Stream,
    body: impl FnOnce(&HostCopyScope<'env>) -> T,
) -> Result<T> {
    ensure_outside_host_function("host_copy_scope")?;
    let scope = HostCopyScope {
        stream,
        launched: Cell::new(0),
        ran: Arc::new(AtomicUsize::new(0)),
        _env: PhantomData,
    };
    let output = body(&scope);
    wait_for_copies(&scope)?;
    Ok(output)
}

/// Waits until every copy of `scope` ran, or can never run (its context failed and cuda-host
/// abandoned it).
fn wait_for_copies(scope: &HostCopyScope<'_>) -> Result<()> {
    let mut pause = std::time::Duration::from_micros(50);
    loop {
        match scope.stream.synchronize() {
            Ok(()) => return Ok(()),
            // The synchronize that answered the failure abandoned every record of the
            // context, so no copy can run any more.
            Err(error) if error.driver_result().is_some_and(is_sticky) => return Err(error),
            Err(error) => {
                if scope.ran.load(Ordering::Acquire) == scope.launched.get() {
                    return Err(error);
                }
                // The borrows must outlive the copies: wait and ask again.
                log::warn!("a host-copy scope waits for its copies: {error}");
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(10));
            }
        }
    }
}

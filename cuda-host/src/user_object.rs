//! Graphs own their callables through CUDA user objects.
//!
//! A graph runs its host nodes on every launch of every executable made from it, so a callable
//! must live as long as any graph, executable or launch in flight can run it. The driver tracks
//! exactly that for user objects: the graph owns references, each executable takes its own at
//! instantiation, launches in flight keep them, and the destructor runs after the last goes away.
//! The destructor runs on a driver thread, so it only pushes the record onto the reclaim list;
//! the record is dropped on a caller's thread.

use crate::error::Result;
use crate::reclaim;
use crate::record::{self, RecordHeader};
use cuda_host_sys::{CUgraph, CUuserObject, CUuserObject_flags, CUuserObjectRetain_flags, Driver};
use std::ffi::c_void;
use std::ptr::{self, NonNull};

/// The user objects' destructor: only hands the record to the reclaim list.
unsafe extern "C" fn release_record(data: *mut c_void) {
    if let Some(record) = NonNull::new(data.cast()) {
        // SAFETY: the user object owned the record and is gone, so the record is finished and
        // ours; ownership passes to its home's list.
        unsafe { reclaim::finish(record) };
    }
}

/// Creates a user object owning `record` with one reference, held by the caller.
///
/// # Errors
/// The driver's error; `record` is then dropped as soon as the reclaim rule allows.
///
/// # Safety
/// `record` must be live and exclusively owned by the caller; ownership passes to the user object
/// (or is dropped on failure).
pub(crate) unsafe fn create(
    driver: &Driver,
    record: NonNull<RecordHeader>,
) -> Result<CUuserObject> {
    let mut object = ptr::null_mut();
    // SAFETY: `object` is a valid out-pointer; the destructor only pushes the record.
    let result = unsafe {
        driver.cuUserObjectCreate(
            &mut object,
            record.as_ptr().cast(),
            Some(release_record),
            1,
            CUuserObject_flags::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC.0,
        )
    };
    if let Err(error) = driver.check("cuUserObjectCreate", result) {
        // SAFETY: the driver did not take the record; it is still exclusively ours.
        unsafe { reclaim::drop_soon(record) };
        return Err(error.into());
    }
    Ok(object)
}

/// Moves the caller's reference to `object` into `graph`.
///
/// # Errors
/// The driver's error; the caller's reference is then released (the record goes to the reclaim
/// list).
///
/// # Safety
/// `graph` must be a live graph not used concurrently; `object` a user object the caller holds
/// one reference to, which passes to the graph or is released.
pub(crate) unsafe fn move_into_graph(
    driver: &Driver,
    graph: CUgraph,
    object: CUuserObject,
) -> Result<()> {
    // SAFETY: per the caller.
    let result = unsafe {
        driver.cuGraphRetainUserObject(
            graph,
            object,
            1,
            CUuserObjectRetain_flags::CU_GRAPH_USER_OBJECT_MOVE.0,
        )
    };
    if let Err(error) = driver.check("cuGraphRetainUserObject", result) {
        // SAFETY: the reference is still the caller's; releasing it runs the destructor.
        unsafe { release(driver, object) };
        return Err(error.into());
    }
    Ok(())
}

/// Drops the graph's reference to `object` (executables keep their own).
///
/// # Safety
/// `graph` must be a live graph holding a reference to `object`, not used concurrently.
pub(crate) unsafe fn release_from_graph(driver: &Driver, graph: CUgraph, object: CUuserObject) {
    // SAFETY: per the caller.
    let result = unsafe { driver.cuGraphReleaseUserObject(graph, object, 1) };
    if let Err(error) = driver.check("cuGraphReleaseUserObject", result) {
        log::error!("a graph's reference to a host callable could not be released: {error}");
    }
}

/// Releases one reference the caller holds.
///
/// # Safety
/// The caller must hold a reference to `object`.
unsafe fn release(driver: &Driver, object: CUuserObject) {
    // SAFETY: per the caller.
    let result = unsafe { driver.cuUserObjectRelease(object, 1) };
    if let Err(error) = driver.check("cuUserObjectRelease", result) {
        log::error!("a user object could not be released: {error}");
    }
}

/// Gives `graph` a user object owning `record`: after this, the graph (and executables made from
/// it) keep the record alive. Fallible steps come first; on failure nothing stays attached and
/// the record is reclaimed.
///
/// # Errors
/// The driver's error from creating or retaining the user object.
///
/// # Safety
/// As [`create`] and [`move_into_graph`].
pub(crate) unsafe fn attach(
    driver: &Driver,
    graph: CUgraph,
    record: NonNull<RecordHeader>,
) -> Result<CUuserObject> {
    // SAFETY: per the caller.
    let object = unsafe { create(driver, record)? };
    // SAFETY: the record is live until the user object's destructor runs, which it cannot yet.
    if let Some(callable) = unsafe { record::as_graph_callable(record) } {
        callable.set_user_object(object);
    }
    // SAFETY: per the caller; the fresh reference is ours.
    unsafe { move_into_graph(driver, graph, object)? };
    Ok(object)
}

/// [`attach`]es `record` to `graph`, then runs `add`, which adds the node that uses the record;
/// if `add` fails, the graph lets go of the record again and nothing stays attached.
///
/// # Errors
/// The error of attaching or of `add`.
///
/// # Safety
/// As [`attach`].
pub(crate) unsafe fn attach_for<T>(
    driver: &Driver,
    graph: CUgraph,
    record: NonNull<RecordHeader>,
    add: impl FnOnce() -> Result<T>,
) -> Result<T> {
    // SAFETY: per the caller.
    let object = unsafe { attach(driver, graph, record)? };
    let added = add();
    if added.is_err() {
        // SAFETY: the graph holds the reference `attach` gave it.
        unsafe { release_from_graph(driver, graph, object) };
    }
    added
}

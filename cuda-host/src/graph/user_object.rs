//! Graphs own their callables through CUDA user objects.
//!
//! A graph runs its host nodes on every launch of every executable made from it, so a callable
//! must live as long as any graph, executable or launch in flight can run it. The driver tracks
//! exactly that for user objects: the graph owns references, each executable takes its own at
//! instantiation, launches in flight keep them, and the destructor runs after the last goes away.
//! The destructor runs on a driver thread, so it only hands the record to its home thread's
//! inbox; the record is dropped on that thread.

use crate::checked::checked;
use crate::contain::logged;
use crate::error::Result;
use crate::launch::{GraphCallable, GraphRecord};
use cuda_host_sys::{CUgraph, CUuserObject, CUuserObject_flags, CUuserObjectRetain_flags, Driver};
use std::ffi::c_void;
use std::ptr;

/// The user objects' destructor: only hands the record on.
unsafe extern "C" fn release_record(data: *mut c_void) {
    // SAFETY: the user object owned the record (given by `create`) and is gone.
    unsafe { GraphRecord::released(data) };
}

/// Creates a user object owning `record` with one reference, held by the caller.
///
/// # Errors
/// The driver's error; `record` then goes to its home thread's inbox, dropped at its next
/// drain.
pub(crate) fn create(driver: &Driver, record: GraphRecord) -> Result<CUuserObject> {
    let mut object = ptr::null_mut();
    let data = record.into_user_data();
    // SAFETY: `object` is a valid out-pointer; the destructor only hands the record on.
    let created = unsafe {
        checked!(
            driver,
            cuUserObjectCreate(
                &mut object,
                data,
                Some(release_record),
                1,
                CUuserObject_flags::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC.0,
            )
        )
    };
    if let Err(error) = created {
        // SAFETY: the driver did not take the record: it is ours again, and goes to its home
        // thread's inbox as a user object's destructor would hand it (not dropped here, where
        // the caller may hold `capture_lock::adding`).
        unsafe { GraphRecord::released(data) };
        return Err(error.into());
    }
    Ok(object)
}

/// Moves the caller's reference to `object` into `graph`.
///
/// # Errors
/// The driver's error; the caller's reference is then released (the record goes to its home).
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
    let moved = unsafe {
        checked!(
            driver,
            cuGraphRetainUserObject(
                graph,
                object,
                1,
                CUuserObjectRetain_flags::CU_GRAPH_USER_OBJECT_MOVE.0,
            )
        )
    };
    if let Err(error) = moved {
        // SAFETY: the reference is still the caller's; releasing it runs the destructor.
        if let Err(error) = unsafe { checked!(driver, cuUserObjectRelease(object, 1)) } {
            // Held until the capture-node lock is released, where the caller holds it.
            logged!(error!("a user object could not be released: {error}"));
        }
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
    if let Err(error) = unsafe { checked!(driver, cuGraphReleaseUserObject(graph, object, 1)) } {
        // Held until the capture-node lock is released, where the caller holds it.
        logged!(error!(
            "a graph's reference to a host callable could not be released: {error}"
        ));
    }
}

/// Gives `graph` a user object owning `record`, then runs `add`, which adds the node that runs
/// the record (given its user data); if `add` fails, the graph lets go of the record again and
/// nothing stays attached. Fallible steps come first: after this, the graph (and executables
/// made from it) keep the record alive.
///
/// # Errors
/// The driver's error from creating or retaining the user object, or the error of `add`.
///
/// # Safety
/// As [`move_into_graph`].
pub(crate) unsafe fn attach_for<T>(
    driver: &Driver,
    graph: CUgraph,
    record: GraphRecord,
    add: impl FnOnce(*mut c_void) -> Result<T>,
) -> Result<T> {
    let data = record.user_data();
    let callable: Option<*const GraphCallable> = record.as_callable().map(ptr::from_ref);
    let object = create(driver, record)?;
    if let Some(callable) = callable {
        // SAFETY: the record is live until the user object's destructor runs, which it cannot
        // before the graph lets go of it below or later.
        unsafe { (*callable).set_user_object(object) };
    }
    // SAFETY: per the caller; the fresh reference is ours.
    unsafe { move_into_graph(driver, graph, object)? };
    let added = add(data);
    if added.is_err() {
        // SAFETY: the graph holds the reference moved to it above.
        unsafe { release_from_graph(driver, graph, object) };
    }
    added
}

//! The records graphs run: a graph's host node runs its record on every launch of every
//! executable made from the graph, so the record is owned by the graph (through a CUDA user
//! object, `graph::user_object`) or by an executable, not by a launch. Once released, it goes to
//! the inbox of the thread that made it, like a run-once record, whoever releases it: a user
//! object's destructor, or the Rust value that owns it (an executable's callables, the polled
//! engine's queue of a node's pending launches) on whichever thread lets go of that (rule 5).

use crate::launch::context_shared::ContextShared;
use crate::launch::enqueue;
use crate::launch::reclaim;
use crate::launch::record::{self, RecordHeader, RecordOperations};
use cuda_host_sys::{CUuserObject, CUuserObject_st};
use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::ffi::c_void;
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, Ordering};

/// A callable shared by a graph's host nodes, through a type-erased, reference-counted handle.
pub type HostCallable = Arc<dyn Fn() + Send + Sync + 'static>;

/// The payload of a graph's callable: the callable, and the user object that owns the record.
pub(crate) struct GraphCallable {
    pub(crate) callable: HostCallable,
    /// The name profilers show for its runs (`crate::observe`; with its features).
    #[cfg(any(feature = "nvtx", feature = "tracing"))]
    name: &'static str,
    user_object: AtomicPtr<CUuserObject_st>,
}

impl GraphCallable {
    /// The user object owning this record (null until it is created).
    pub(crate) fn user_object(&self) -> CUuserObject {
        self.user_object.load(Ordering::Acquire)
    }

    pub(crate) fn set_user_object(&self, object: CUuserObject) {
        self.user_object.store(object, Ordering::Release);
    }
}

static GRAPH_CALLABLE: RecordOperations = RecordOperations {
    run: run_graph_callable,
    drop: record::drop_boxed::<GraphCallable>,
    #[cfg(any(feature = "nvtx", feature = "tracing"))]
    name: graph_callable_name,
};

#[cfg(any(feature = "nvtx", feature = "tracing"))]
unsafe fn graph_callable_name(record: NonNull<RecordHeader>) -> &'static str {
    // SAFETY: made by `GraphRecord::callable`.
    unsafe { record::boxed_value::<GraphCallable>(record) }.name
}

unsafe fn run_graph_callable(record: NonNull<RecordHeader>) {
    // SAFETY: made by `GraphRecord::callable`; concurrent runs only share `&GraphCallable`, and
    // the callable is `Sync`.
    let callable = unsafe { record::boxed_value::<GraphCallable>(record) };
    (callable.callable)();
}

/// A graph's record, owned by whoever holds this (a user object takes it over with
/// [`into_user_data`](Self::into_user_data)). Letting go of it hands the record to its home
/// thread, which drops it by the reclaim rule (`crate::launch`'s rules 1, 2 and 5): whoever lets go
/// (an executable replacing a callable, a drain dropping the executable's own state, the engine
/// after a node's last launch) never runs the callable's `Drop` itself.
pub(crate) struct GraphRecord(NonNull<RecordHeader>);

// SAFETY: records own only `Send` payloads, and a `GraphRecord` is their only owner.
unsafe impl Send for GraphRecord {}

impl std::fmt::Debug for GraphRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GraphRecord")
    }
}

impl GraphRecord {
    /// A record running `callable`, which may run many times, on any thread the driver runs
    /// host nodes on; profilers show its runs as `name`.
    pub(crate) fn callable(
        context: Arc<ContextShared>,
        callable: HostCallable,
        name: &'static str,
    ) -> Self {
        crate::observe::prepare();
        let _ = name;
        let header = RecordHeader::new(&GRAPH_CALLABLE, Some(context), record::home());
        let payload = GraphCallable {
            callable,
            #[cfg(any(feature = "nvtx", feature = "tracing"))]
            name,
            user_object: AtomicPtr::new(ptr::null_mut()),
        };
        GraphRecord(record::boxed(header, payload))
    }

    /// A record calling `function` with a pointer to its own copy of `bytes`, on every run.
    pub(crate) fn copied_bytes(
        context: Arc<ContextShared>,
        function: unsafe extern "C" fn(*mut c_void),
        bytes: &[u8],
    ) -> Self {
        GraphRecord(BytesRecord::make(context, function, bytes))
    }

    /// A record that only owns `value` (what an executable keeps of its own).
    pub(crate) fn holding<T: Send + 'static>(value: T) -> Self {
        GraphRecord(record::holding(value, None, record::home()))
    }

    /// The host function of graph nodes that run a record.
    pub(crate) fn host_fn() -> unsafe extern "C" fn(*mut c_void) {
        enqueue::graph_host_fn
    }

    /// What a node running this record passes its host function (the record's address).
    pub(crate) fn user_data(&self) -> *mut c_void {
        self.0.as_ptr().cast()
    }

    /// The callable, when this is a callable's record.
    pub(crate) fn as_callable(&self) -> Option<&GraphCallable> {
        // SAFETY: owned, so live while borrowed.
        unsafe { callable_at(self.0) }
    }

    /// Gives the record up to a user object, whose destructor hands it back through
    /// [`released`](Self::released).
    pub(crate) fn into_user_data(self) -> *mut c_void {
        let data = self.user_data();
        std::mem::forget(self);
        data
    }

    /// A user object's destructor: the record is finished and goes to its home thread.
    ///
    /// # Safety
    /// `data` must come from [`into_user_data`](Self::into_user_data), and the caller must own it
    /// again (the user object was never made, or is gone); called from any thread.
    pub(crate) unsafe fn released(data: *mut c_void) {
        if let Some(record) = NonNull::new(data.cast()) {
            // SAFETY: owned here (per the caller); ownership passes to its home's list.
            unsafe { record::finish(record) };
        }
    }

    /// Drops the record as soon as the reclaim rule allows (attaching it failed).
    pub(crate) fn drop_soon(self) {
        let record = self.0;
        std::mem::forget(self);
        // SAFETY: owned here; ownership passes on.
        unsafe { reclaim::drop_soon(record) };
    }
}

impl Drop for GraphRecord {
    fn drop(&mut self) {
        // Its values are its home thread's to drop (rule 5), whoever lets go of it: another
        // thread's drain of the value that held it, a launch of an executable sent to another
        // thread, the polled engine's server (rule 1). Handing it on is one push, right on any
        // thread, and each record is then dropped on its own in a drain, so one `Drop` that
        // panics does not unwind through the drops of the records held beside it.
        // SAFETY: owned exclusively; ownership passes to its home's list.
        unsafe { record::finish(self.0) };
    }
}

/// The callable of the record a node of cuda-host's runs, or `None` for another node (a raw C
/// function, copied bytes).
///
/// # Safety
/// Where `function` is cuda-host's graph host function, `data` must be a record kept alive for
/// `'a` (by the graph holding the node).
pub(crate) unsafe fn callable_of_node<'a>(
    function: Option<unsafe extern "C" fn(*mut c_void)>,
    data: *mut c_void,
) -> Option<&'a GraphCallable> {
    let ours = function.is_some_and(|function| ptr::fn_addr_eq(function, GraphRecord::host_fn()));
    let record = NonNull::new(data.cast::<RecordHeader>()).filter(|_| ours)?;
    // SAFETY: per the caller.
    unsafe { callable_at(record) }
}

/// # Safety
/// `record` must be live for `'a`.
unsafe fn callable_at<'a>(record: NonNull<RecordHeader>) -> Option<&'a GraphCallable> {
    // SAFETY: the record is live (caller).
    let header = unsafe { record.as_ref() };
    if !ptr::eq(header.operations(), &GRAPH_CALLABLE) {
        return None;
    }
    // SAFETY: the operations table identifies a boxed `GraphCallable`.
    Some(unsafe { record::boxed_value::<GraphCallable>(record) })
}

/// The header of a record holding a C host function and a copy of its user data, which follows
/// the header in the same allocation, aligned to 16 bytes.
#[repr(C, align(16))]
struct BytesRecord {
    header: RecordHeader,
    function: unsafe extern "C" fn(*mut c_void),
    len: usize,
}

impl BytesRecord {
    const OPERATIONS: RecordOperations = RecordOperations {
        run: BytesRecord::run,
        drop: BytesRecord::drop,
        #[cfg(any(feature = "nvtx", feature = "tracing"))]
        name: BytesRecord::name,
    };

    fn layout(len: usize) -> Layout {
        let bytes = Layout::array::<u8>(len).expect("user data size fits the address space");
        Layout::new::<BytesRecord>()
            .extend(bytes)
            .expect("user data size fits the address space")
            .0
            .pad_to_align()
    }

    /// A record of its own copy of `bytes`, for `function`.
    fn make(
        context: Arc<ContextShared>,
        function: unsafe extern "C" fn(*mut c_void),
        bytes: &[u8],
    ) -> NonNull<RecordHeader> {
        let layout = BytesRecord::layout(bytes.len());
        // SAFETY: the layout has a non-zero size (it holds the header).
        let memory = unsafe { alloc(layout) }.cast::<BytesRecord>();
        let Some(record) = NonNull::new(memory) else {
            handle_alloc_error(layout)
        };
        let header = RecordHeader::new(&BytesRecord::OPERATIONS, Some(context), record::home());
        // SAFETY: `memory` is a fresh allocation of `layout`: room for the header, then
        // `bytes.len()` bytes at the header's end (`BytesRecord` is 16-aligned, so the bytes are
        // too).
        unsafe {
            record.as_ptr().write(BytesRecord {
                header,
                function,
                len: bytes.len(),
            });
            ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                record.as_ptr().add(1).cast::<u8>(),
                bytes.len(),
            );
        }
        record.cast()
    }

    #[cfg(any(feature = "nvtx", feature = "tracing"))]
    unsafe fn name(_record: NonNull<RecordHeader>) -> &'static str {
        "C host function (copied user data)"
    }

    unsafe fn run(record: NonNull<RecordHeader>) {
        let record = record.cast::<BytesRecord>().as_ptr();
        // SAFETY: made by `BytesRecord::make`: the copied bytes follow the header.
        unsafe {
            let data = record.add(1).cast::<c_void>();
            ((*record).function)(data);
        }
    }

    unsafe fn drop(record: NonNull<RecordHeader>) {
        let record = record.cast::<BytesRecord>().as_ptr();
        // SAFETY: made by `BytesRecord::make` with `layout(len)`; the caller owns it exclusively,
        // so its header is dropped and its memory freed exactly once.
        unsafe {
            let layout = BytesRecord::layout((*record).len);
            ptr::drop_in_place(record);
            dealloc(record.cast(), layout);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_observing_features_records_keep_no_name() {
        // A name is for profilers alone: without the features neither a record's operations nor
        // a graph's callable holds one, and a run looks none up.
        let names = usize::from(cfg!(any(feature = "nvtx", feature = "tracing")));
        assert_eq!(
            size_of::<RecordOperations>(),
            (2 + names) * size_of::<usize>()
        );
        assert_eq!(
            size_of::<GraphCallable>(),
            size_of::<HostCallable>() + size_of::<usize>() + names * size_of::<&str>()
        );
    }
}

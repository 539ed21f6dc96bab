//! Launch records: one heap allocation per launch that owns what the host function needs (a
//! closure, or a copy of C user data) until it has run and been reclaimed.
//!
//! Every record starts with a [`RecordHeader`], so the driver's `void *userData` can point at any
//! kind of record and the trampoline and the reclaim list treat them alike through the header's
//! table of two functions: run the payload, and drop the whole record.

use crate::context::ContextShared;
use cuda_host_sys::{CUuserObject, CUuserObject_st};
use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::ffi::c_void;
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, Ordering};

/// The common start of every record.
#[repr(C)]
pub(crate) struct RecordHeader {
    /// The reclaim list's link; only the list touches it.
    pub(crate) next: *mut RecordHeader,
    operations: &'static RecordOperations,
    /// Keeps the context retained while the driver may still call into the record, so that no
    /// record outlives its context. `None` for records not tied to one.
    _context: Option<Arc<ContextShared>>,
}

struct RecordOperations {
    /// Runs the payload.
    run: unsafe fn(NonNull<RecordHeader>),
    /// Drops the whole record and frees its memory.
    drop: unsafe fn(NonNull<RecordHeader>),
}

impl RecordHeader {
    fn new(operations: &'static RecordOperations, context: Option<Arc<ContextShared>>) -> Self {
        RecordHeader {
            next: ptr::null_mut(),
            operations,
            _context: context,
        }
    }

    /// Runs the record's payload.
    ///
    /// # Safety
    /// `record` must be live; a run-once record must be owned by the caller and not have run
    /// before. (A graph's callable and copied bytes may run many times.)
    pub(crate) unsafe fn run(record: NonNull<RecordHeader>) {
        // SAFETY: the record is live (caller); `run` matches the record's concrete type.
        unsafe { ((*record.as_ptr()).operations.run)(record) }
    }

    /// Drops the record: its payload, its context reference and its memory.
    ///
    /// # Safety
    /// `record` must be live and exclusively owned by the caller; it is gone afterwards.
    pub(crate) unsafe fn drop(record: *mut RecordHeader) {
        // SAFETY: the record is live and owned (caller); `drop` matches its concrete type.
        unsafe {
            let record = NonNull::new_unchecked(record);
            ((*record.as_ptr()).operations.drop)(record)
        }
    }
}

/// A record owning a Rust callable.
#[repr(C)]
struct CallableRecord<F> {
    header: RecordHeader,
    callable: F,
}

/// A run-once host function: `FnMut` so that it is called through a reference, leaving its
/// captured values in the record to be dropped on a caller's thread.
pub(crate) fn new_run_once<F>(context: Arc<ContextShared>, callable: F) -> NonNull<RecordHeader>
where
    F: FnMut() + Send + 'static,
{
    struct Operations<F>(F);
    impl<F: FnMut() + Send + 'static> Operations<F> {
        const TABLE: RecordOperations = RecordOperations {
            run: run_mut::<F>,
            drop: drop_callable::<F>,
        };
    }
    new_callable(&Operations::<F>::TABLE, Some(context), callable)
}

/// A callable shared by a graph's host nodes, through a type-erased, reference-counted handle.
pub type HostCallable = Arc<dyn Fn() + Send + Sync + 'static>;

/// The payload of a graph's callable: the callable, and the user object that owns the record.
pub(crate) struct GraphCallable {
    pub(crate) callable: HostCallable,
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
    drop: drop_callable::<GraphCallable>,
};

/// A graph's callable: it may run many times, on any thread the driver runs host nodes on.
pub(crate) fn new_graph_callable(
    context: Arc<ContextShared>,
    callable: HostCallable,
) -> NonNull<RecordHeader> {
    let payload = GraphCallable {
        callable,
        user_object: AtomicPtr::new(ptr::null_mut()),
    };
    new_callable(&GRAPH_CALLABLE, Some(context), payload)
}

/// The graph callable in `record`, or `None` for another kind of record.
///
/// # Safety
/// `record` must be live for `'a`.
pub(crate) unsafe fn as_graph_callable<'a>(
    record: NonNull<RecordHeader>,
) -> Option<&'a GraphCallable> {
    // SAFETY: the record is live (caller); its header is its first field.
    let header = unsafe { record.as_ref() };
    if !ptr::eq(header.operations, &GRAPH_CALLABLE) {
        return None;
    }
    // SAFETY: the operations table identifies a `CallableRecord<GraphCallable>`.
    Some(unsafe { &(*record.cast::<CallableRecord<GraphCallable>>().as_ptr()).callable })
}

unsafe fn run_graph_callable(record: NonNull<RecordHeader>) {
    // SAFETY: created by `new_graph_callable`; concurrent runs only share `&GraphCallable`, and
    // the callable is `Sync`.
    let record = unsafe { &*record.cast::<CallableRecord<GraphCallable>>().as_ptr() };
    (record.callable.callable)();
}

/// Owns a record and drops it when dropped: how an executable keeps the callables set on it.
pub(crate) struct OwnedRecord(NonNull<RecordHeader>);

// SAFETY: records own only `Send` payloads.
unsafe impl Send for OwnedRecord {}

impl OwnedRecord {
    /// # Safety
    /// `record` must be live and exclusively owned by the caller; ownership passes to the result.
    pub(crate) unsafe fn new(record: NonNull<RecordHeader>) -> Self {
        OwnedRecord(record)
    }
}

impl Drop for OwnedRecord {
    fn drop(&mut self) {
        // SAFETY: owned exclusively (see `new`), dropped once.
        unsafe { RecordHeader::drop(self.0.as_ptr()) };
    }
}

/// A record that only owns `value`, to be dropped on a caller's thread.
pub(crate) fn new_deferred_drop<T: Send + 'static>(value: T) -> NonNull<RecordHeader> {
    struct Operations<T>(T);
    impl<T: Send + 'static> Operations<T> {
        const TABLE: RecordOperations = RecordOperations {
            run: run_nothing,
            drop: drop_callable::<T>,
        };
    }
    new_callable(&Operations::<T>::TABLE, None, value)
}

fn new_callable<F>(
    operations: &'static RecordOperations,
    context: Option<Arc<ContextShared>>,
    callable: F,
) -> NonNull<RecordHeader> {
    let record = Box::new(CallableRecord {
        header: RecordHeader::new(operations, context),
        callable,
    });
    // `header` is the first field of a `repr(C)` struct: the record's address is the header's.
    NonNull::from(Box::leak(record)).cast()
}

unsafe fn run_mut<F: FnMut()>(record: NonNull<RecordHeader>) {
    // SAFETY: created by `new_run_once::<F>`; a run-once record runs once, so this is the only
    // reference to the callable.
    let record = unsafe { &mut *record.cast::<CallableRecord<F>>().as_ptr() };
    (record.callable)();
}

unsafe fn run_nothing(_record: NonNull<RecordHeader>) {}

unsafe fn drop_callable<F>(record: NonNull<RecordHeader>) {
    // SAFETY: created by `new_callable::<F>` from a `Box`; the caller owns it exclusively.
    drop(unsafe { Box::from_raw(record.cast::<CallableRecord<F>>().as_ptr()) });
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
    };

    fn layout(len: usize) -> Layout {
        let bytes = Layout::array::<u8>(len).expect("user data size fits the address space");
        Layout::new::<BytesRecord>()
            .extend(bytes)
            .expect("user data size fits the address space")
            .0
            .pad_to_align()
    }

    unsafe fn run(record: NonNull<RecordHeader>) {
        let record = record.cast::<BytesRecord>().as_ptr();
        // SAFETY: created by `new_with_bytes`: the copied bytes follow the header.
        unsafe {
            let data = record.add(1).cast::<c_void>();
            ((*record).function)(data);
        }
    }

    unsafe fn drop(record: NonNull<RecordHeader>) {
        let record = record.cast::<BytesRecord>().as_ptr();
        // SAFETY: created by `new_with_bytes` with `layout(len)`; the caller owns it exclusively,
        // so its header is dropped and its memory freed exactly once.
        unsafe {
            let layout = BytesRecord::layout((*record).len);
            ptr::drop_in_place(record);
            dealloc(record.cast(), layout);
        }
    }
}

/// A record that calls `function` with a pointer to its own copy of `bytes`.
pub(crate) fn new_with_bytes(
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
    // SAFETY: `memory` is a fresh allocation of `layout`: room for the header, then `bytes.len()`
    // bytes at the header's end (`BytesRecord` is 16-aligned, so the bytes are too).
    unsafe {
        record.as_ptr().write(BytesRecord {
            header: RecordHeader::new(&BytesRecord::OPERATIONS, Some(context)),
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

/// A record that makes `call` when it is dropped, on a caller's thread.
pub(crate) fn new_deferred_call(call: impl FnOnce() + Send + 'static) -> NonNull<RecordHeader> {
    struct CallOnDrop<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for CallOnDrop<F> {
        fn drop(&mut self) {
            if let Some(call) = self.0.take() {
                call();
            }
        }
    }
    new_deferred_drop(CallOnDrop(Some(call)))
}

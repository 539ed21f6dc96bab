//! Launch records: the memory per launch that owns what the host function needs (a
//! closure, or a copy of C user data) until it has run and been reclaimed.
//!
//! Every record starts with a [`RecordHeader`], so the trampolines and the reclaim list treat all
//! kinds of record alike through the header's table of two functions: run the payload, and drop
//! the whole record. Run-once records live in launch slots (`launch_slot`), with their payload
//! inline when it is small; graph callables, copied bytes of graph nodes and deferred drops are
//! boxed.

use crate::context::ContextShared;
use crate::launch_slot::{self, INLINE_ALIGN, INLINE_BYTES, LaunchSlot};
use crate::reclaim::{self, Inbox};
use crate::record_list::Linked;
use cuda_host_sys::{CUuserObject, CUuserObject_st};
use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::ffi::c_void;
use std::mem::MaybeUninit;
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
    context: Option<Arc<ContextShared>>,
    /// The inbox of the thread that made the record, which drops it once it is finished
    /// (`reclaim`); `None` for records that go to the shared list.
    home: Option<Arc<Inbox>>,
}

// SAFETY: `next` is the reclaim lists' link, touched only by the list that owns the record.
unsafe impl Linked for RecordHeader {
    fn next(node: *mut Self) -> *mut *mut Self {
        // SAFETY: only the address of the field is taken; the caller owns the node.
        unsafe { &raw mut (*node).next }
    }
}

struct RecordOperations {
    /// Runs the payload.
    run: unsafe fn(NonNull<RecordHeader>),
    /// Drops the whole record and frees its memory.
    drop: unsafe fn(NonNull<RecordHeader>),
}

impl RecordHeader {
    /// A header for a record made on a caller's thread, which becomes its home.
    fn new(operations: &'static RecordOperations, context: Option<Arc<ContextShared>>) -> Self {
        RecordHeader {
            next: ptr::null_mut(),
            operations,
            context,
            home: reclaim::home(),
        }
    }

    /// A header for a record with no home thread: it goes where it is put.
    fn homeless(operations: &'static RecordOperations) -> Self {
        RecordHeader {
            next: ptr::null_mut(),
            operations,
            context: None,
            home: None,
        }
    }

    /// The inbox of the thread that made the record.
    pub(crate) fn home(&self) -> Option<&Inbox> {
        self.home.as_deref()
    }

    /// The home inbox's address, or null: what the trampoline marks as the running record's home.
    pub(crate) fn home_address(&self) -> *const Inbox {
        self.home.as_ref().map_or(ptr::null(), Arc::as_ptr)
    }

    /// The record's context (the driver's `CUcontext`, as an address); 0 when it has none.
    pub(crate) fn context_handle(&self) -> usize {
        self.context
            .as_ref()
            .map_or(0, |context| context.raw().addr())
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

/// What a run-once record holds: run once on the driver's thread, dropped on a caller's.
pub(crate) trait RunOnce: Send + 'static {
    fn run(&mut self);
}

/// A run-once closure: `FnMut` so that it is called through a reference, leaving its captured
/// values in the record to be dropped on a caller's thread.
pub(crate) struct Closure<F>(pub(crate) F);

impl<F: FnMut() + Send + 'static> RunOnce for Closure<F> {
    fn run(&mut self) {
        (self.0)()
    }
}

impl<P: RunOnce> RunOnce for Box<P> {
    fn run(&mut self) {
        (**self).run();
    }
}

/// A C function with up to [`SMALL_BYTES`] copied bytes, inside the slot.
#[repr(C, align(16))]
pub(crate) struct SmallBytes {
    function: unsafe extern "C" fn(*mut c_void),
    len: usize,
    bytes: [MaybeUninit<u8>; SMALL_BYTES],
}

const SMALL_BYTES: usize = INLINE_BYTES - 16;
const _: () = assert!(size_of::<SmallBytes>() == INLINE_BYTES);

impl RunOnce for SmallBytes {
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

/// A run-once record in a launch slot: `payload` inline when it fits, else boxed.
pub(crate) fn new_run_once<P: RunOnce>(context: Arc<ContextShared>, payload: P) -> LaunchSlot {
    if size_of::<P>() <= INLINE_BYTES && align_of::<P>() <= INLINE_ALIGN {
        new_in_slot(context, payload)
    } else {
        new_in_slot(context, Box::new(payload))
    }
}

fn new_in_slot<P: RunOnce>(context: Arc<ContextShared>, payload: P) -> LaunchSlot {
    struct Operations<P>(P);
    impl<P: RunOnce> Operations<P> {
        const TABLE: RecordOperations = RecordOperations {
            run: run_in_slot::<P>,
            drop: drop_in_slot::<P>,
        };
    }
    let slot = LaunchSlot::acquire();
    debug_assert!(size_of::<P>() <= INLINE_BYTES && align_of::<P>() <= INLINE_ALIGN);
    // SAFETY: the slot is free and this thread's: its header and payload memory are unused, and
    // the payload memory fits `P` (checked by the caller).
    unsafe {
        slot.record()
            .write(RecordHeader::new(&Operations::<P>::TABLE, Some(context)));
        slot.payload().cast::<P>().write(payload);
    }
    slot
}

unsafe fn run_in_slot<P: RunOnce>(record: NonNull<RecordHeader>) {
    // SAFETY: created by `new_in_slot::<P>`; a run-once record runs once, by its claimer, so
    // this is the only reference to the payload.
    unsafe { (*launch_slot::payload_of(record).cast::<P>()).run() }
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
                launch_slot::release(self.0);
            }
        }
    }
    let _finish = Finish(record);
    // SAFETY: created by `new_in_slot::<P>` and claimed by the caller: the payload is dropped
    // once.
    unsafe { ptr::drop_in_place(launch_slot::payload_of(record).cast::<P>()) };
}

/// A record that only holds `context`, for watching a stream for its context's failure.
pub(crate) fn new_failure_watch(context: Arc<ContextShared>) -> NonNull<RecordHeader> {
    static OPERATIONS: RecordOperations = RecordOperations {
        run: run_nothing,
        drop: drop_callable::<()>,
    };
    new_callable(&OPERATIONS, Some(context), ())
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

/// A record that only owns `value`, to be dropped on a caller's thread. It has no home: whoever
/// makes it puts it on a list (it may be made on the driver's thread).
pub(crate) fn new_deferred_drop<T: Send + 'static>(value: T) -> NonNull<RecordHeader> {
    struct Operations<T>(T);
    impl<T: Send + 'static> Operations<T> {
        const TABLE: RecordOperations = RecordOperations {
            run: run_nothing,
            drop: drop_callable::<T>,
        };
    }
    boxed(RecordHeader::homeless(&Operations::<T>::TABLE), value)
}

fn new_callable<F>(
    operations: &'static RecordOperations,
    context: Option<Arc<ContextShared>>,
    callable: F,
) -> NonNull<RecordHeader> {
    boxed(RecordHeader::new(operations, context), callable)
}

fn boxed<F>(header: RecordHeader, callable: F) -> NonNull<RecordHeader> {
    let record = Box::new(CallableRecord { header, callable });
    // `header` is the first field of a `repr(C)` struct: the record's address is the header's.
    NonNull::from(Box::leak(record)).cast()
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

/// A graph node's record that calls `function` with a pointer to its own copy of `bytes`, on
/// every run.
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

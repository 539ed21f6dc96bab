//! Launch records: the memory that owns what a host function needs (a closure, a callable, a
//! copy of C user data) until it has run and been dropped on a caller's thread.
//!
//! Every record starts with a [`RecordHeader`], so the trampolines and the reclaim lists treat all
//! kinds of record alike through the header's table of two functions: run the payload, and drop
//! the whole record. Run-once records live in launch slots (`payload`, `slot`); graphs' records
//! (`graph_record`) and values deferred to a caller's thread are boxed here.
//!
//! A record holds its context (`ContextShared`), so no record outlives the context the driver may
//! still run it in, and its home: the inbox of the thread that made it (`inboxes`).

use crate::launch::context_shared::ContextShared;
use crate::launch::record_list::{Inbox, Linked};
use std::ptr::{self, NonNull};
use std::sync::Arc;

/// A thread's reclaim list, as records name it.
pub(crate) type Home = Arc<Inbox<RecordHeader>>;

/// The common start of every record.
#[repr(C)]
pub(crate) struct RecordHeader {
    /// The reclaim lists' link; only the list that owns the record touches it.
    next: *mut RecordHeader,
    operations: &'static RecordOperations,
    /// Keeps the context retained while the driver may still call into the record. `None` for
    /// records not tied to one.
    context: Option<Arc<ContextShared>>,
    /// The inbox of the thread that made the record, which drops it once it is finished; `None`
    /// for records that go where they are put.
    home: Option<Home>,
}

// SAFETY: `next` is the reclaim lists' link, touched only by the list that owns the record.
unsafe impl Linked for RecordHeader {
    fn next(node: *mut Self) -> *mut *mut Self {
        // SAFETY: only the address of the field is taken; the caller owns the node.
        unsafe { &raw mut (*node).next }
    }
}

/// What a kind of record does: its two functions.
pub(crate) struct RecordOperations {
    /// Runs the payload.
    pub(crate) run: unsafe fn(NonNull<RecordHeader>),
    /// Drops the whole record and frees its memory.
    pub(crate) drop: unsafe fn(NonNull<RecordHeader>),
    /// The name profilers show for the payload's runs (`crate::observe`; with its features).
    #[cfg(any(feature = "nvtx", feature = "tracing"))]
    pub(crate) name: unsafe fn(NonNull<RecordHeader>) -> &'static str,
}

impl RecordHeader {
    /// A header for a record of the kind `operations`, tied to `context`, going to `home` when
    /// it is finished.
    pub(crate) fn new(
        operations: &'static RecordOperations,
        context: Option<Arc<ContextShared>>,
        home: Option<Home>,
    ) -> Self {
        RecordHeader {
            next: ptr::null_mut(),
            operations,
            context,
            home,
        }
    }

    /// The inbox of the thread that made the record.
    pub(crate) fn home(&self) -> Option<&Home> {
        self.home.as_ref()
    }

    /// The record's kind.
    pub(crate) fn operations(&self) -> &'static RecordOperations {
        self.operations
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

    /// The name profilers show for the record's runs; without the observing features, none
    /// (nothing is looked up).
    ///
    /// # Safety
    /// `record` must be live.
    #[inline]
    pub(crate) unsafe fn name(record: NonNull<RecordHeader>) -> &'static str {
        #[cfg(any(feature = "nvtx", feature = "tracing"))]
        // SAFETY: the record is live (caller); `name` matches its concrete type.
        return unsafe { ((*record.as_ptr()).operations.name)(record) };
        #[cfg(not(any(feature = "nvtx", feature = "tracing")))]
        {
            let _ = record;
            ""
        }
    }

    /// Drops the record: its payload, its context reference and its memory.
    ///
    /// # Safety
    /// `record` must be live and exclusively owned by the caller; it is gone afterwards.
    pub(crate) unsafe fn drop(record: NonNull<RecordHeader>) {
        // SAFETY: the record is live and owned (caller); `drop` matches its concrete type.
        unsafe { ((*record.as_ptr()).operations.drop)(record) }
    }
}

/// A record holding a value of its own in a box.
#[repr(C)]
pub(crate) struct BoxedRecord<T> {
    header: RecordHeader,
    pub(crate) value: T,
}

/// A boxed record of `value` with `header`.
pub(crate) fn boxed<T>(header: RecordHeader, value: T) -> NonNull<RecordHeader> {
    let record = Box::new(BoxedRecord { header, value });
    // `header` is the first field of a `repr(C)` struct: the record's address is the header's.
    NonNull::from(Box::leak(record)).cast()
}

/// The value of a boxed record.
///
/// # Safety
/// `record` must be a live `BoxedRecord<T>`, for `'a`.
pub(crate) unsafe fn boxed_value<'a, T>(record: NonNull<RecordHeader>) -> &'a T {
    // SAFETY: per the caller.
    unsafe { &(*record.cast::<BoxedRecord<T>>().as_ptr()).value }
}

/// The `drop` of boxed records of `T`.
///
/// # Safety
/// As [`RecordOperations::drop`], for a record made by [`boxed`] with a `T`.
pub(crate) unsafe fn drop_boxed<T>(record: NonNull<RecordHeader>) {
    // SAFETY: made by `boxed::<T>` from a `Box`; the caller owns it exclusively.
    drop(unsafe { Box::from_raw(record.cast::<BoxedRecord<T>>().as_ptr()) });
}

/// The `run` of records that only own something.
///
/// # Safety
/// None: it does nothing.
pub(crate) unsafe fn run_nothing(_record: NonNull<RecordHeader>) {}

/// The `name` of records of type `T`, whatever they hold.
///
/// # Safety
/// None: it reads nothing.
#[cfg(any(feature = "nvtx", feature = "tracing"))]
pub(crate) unsafe fn type_name<T>(_record: NonNull<RecordHeader>) -> &'static str {
    std::any::type_name::<T>()
}

/// A record that only owns `value`, to be dropped on a caller's thread, going to `home` when
/// handed on (or where it is put: it may be made on the driver's thread, which is no home).
pub(crate) fn holding<T: Send + 'static>(
    value: T,
    context: Option<Arc<ContextShared>>,
    home: Option<Home>,
) -> NonNull<RecordHeader> {
    struct Operations<T>(T);
    impl<T: Send + 'static> Operations<T> {
        const TABLE: RecordOperations = RecordOperations {
            run: run_nothing,
            drop: drop_boxed::<T>,
            #[cfg(any(feature = "nvtx", feature = "tracing"))]
            name: type_name::<T>,
        };
    }
    boxed(
        RecordHeader::new(&Operations::<T>::TABLE, context, home),
        value,
    )
}

/// A record that makes `call` when it is dropped, on a caller's thread.
pub(crate) fn calling(call: impl FnOnce() + Send + 'static) -> NonNull<RecordHeader> {
    struct CallOnDrop<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for CallOnDrop<F> {
        fn drop(&mut self) {
            if let Some(call) = self.0.take() {
                call();
            }
        }
    }
    holding(CallOnDrop(Some(call)), None, None)
}

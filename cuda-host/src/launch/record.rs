//! Launch records: the memory that owns what a host function needs (a closure, a callable, a
//! copy of C user data) until it has run and been dropped on a caller's thread.
//!
//! Every record starts with a [`RecordHeader`], so the trampolines and the reclaim lists treat all
//! kinds of record alike through the header's table of two functions: run the payload, and drop
//! the whole record. Run-once records live in launch slots (`payload`, `slot`); graphs' records
//! (`graph_record`) and values deferred to a caller's thread are boxed here.
//!
//! A record holds its context (`ContextShared`), so no record outlives the context the driver may
//! still run it in, and its home: the inbox of the thread that made it.
//!
//! **Inboxes.** Where finished records go: the inbox of the thread that made each (its home), or
//! the shared list once that thread has exited. Only pushes happen here, so every function is
//! right on any thread, the driver's too; `reclaim` drops what the lists hold.

use crate::launch::context_shared::ContextShared;
use crate::launch::record_list::{Inbox, Linked, RecordList, last_of};
use crate::sync::lock;
use std::any::Any;
use std::cell::{Cell, OnceCell};
use std::ptr::{self, NonNull};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

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

/// Records held in stream order (`crate::launch::held`) by any thread, exited ones included,
/// until their points passed: a drain looks at the held queues only while there are any, so
/// that one with none crosses nothing but the inboxes.
pub(crate) static HELD_RECORDS: AtomicUsize = AtomicUsize::new(0);

/// Records whose home thread exited, and records with no home.
pub(crate) static SHARED: RecordList<RecordHeader> = RecordList::new();
/// Every live thread's inbox, for a global-mode capture to wait for drains in progress.
static INBOXES: Mutex<Vec<Home>> = Mutex::new(Vec::new());

/// What cuda-host keeps per thread about reclaiming.
pub(crate) struct ThreadState {
    inbox: OnceCell<Home>,
    /// Nesting of drains (a `Drop` may call into cuda-host and drain again).
    pub(crate) drain_depth: Cell<u32>,
    /// Captures this thread began through cuda-host and has not ended.
    pub(crate) capturing: Cell<u32>,
    pub(crate) launches_since_reclaim: Cell<u32>,
}

impl ThreadState {
    /// The thread's inbox, made (and registered) on first use.
    pub(crate) fn inbox(&self) -> &Home {
        self.inbox.get_or_init(|| {
            let inbox = Arc::new(Inbox::new());
            lock(&INBOXES).push(Arc::clone(&inbox));
            inbox
        })
    }

    /// The thread's inbox, if it has one yet.
    pub(crate) fn existing_inbox(&self) -> Option<&Home> {
        self.inbox.get()
    }
}

impl Drop for ThreadState {
    fn drop(&mut self) {
        let Some(inbox) = self.inbox.get() else {
            return;
        };
        lock(&INBOXES).retain(|other| !Arc::ptr_eq(other, inbox));
        let first = inbox.list.close();
        if !first.is_null() {
            // SAFETY: the closed list handed its chain over; it passes to the shared list,
            // which is never closed.
            let _ = unsafe { SHARED.push_chain(first, last_of(first)) };
        }
    }
}

thread_local! {
    static THREAD: ThreadState = const {
        ThreadState {
            inbox: OnceCell::new(),
            drain_depth: Cell::new(0),
            capturing: Cell::new(0),
            launches_since_reclaim: Cell::new(0),
        }
    };
    /// The home of the record running on this thread (a host function's), where values
    /// deferred from the driver's thread go.
    static RUNNING_HOME: Cell<*const Inbox<RecordHeader>> = const { Cell::new(ptr::null()) };
}

/// Runs `work` with the calling thread's state; `None` while the thread is being torn down.
pub(crate) fn with_thread<T>(work: impl FnOnce(&ThreadState) -> T) -> Option<T> {
    THREAD.try_with(work).ok()
}

/// The calling thread's inbox, the home of the records it makes; `None` while the thread is
/// being torn down (its records then go to the shared list).
pub(crate) fn home() -> Option<Home> {
    with_thread(|thread| Arc::clone(thread.inbox()))
}

/// The inboxes of every live thread.
pub(crate) fn every_inbox() -> Vec<Home> {
    lock(&INBOXES).clone()
}

/// Hands a finished record to its home inbox, or to the shared list when its home thread
/// exited or it has none.
///
/// # Safety
/// `record` must be live and owned by the caller; ownership passes to a list.
pub(crate) unsafe fn finish(record: NonNull<RecordHeader>) {
    // SAFETY: the record is live (caller).
    let home = unsafe { record.as_ref() }.home();
    // SAFETY: as below.
    unsafe { push_to(home.map(|home| &**home), record) };
}

/// Hands `record` to the inbox of the record running on this thread (inside a host function),
/// or to the shared list: how values are deferred from the driver's thread.
///
/// # Safety
/// As [`finish`].
pub(crate) unsafe fn defer(record: NonNull<RecordHeader>) {
    let running = RUNNING_HOME.try_with(Cell::get).unwrap_or(ptr::null());
    // SAFETY: set by `RunningHome` from the record being run, which holds a reference to its
    // home while it runs; what is deferred is pushed during that time.
    let running = unsafe { running.as_ref() };
    // SAFETY: per the caller.
    unsafe { push_to(running, record) };
}

/// Hands `value` off a marked thread (the mark's hand-off, `crate::contain`): in a record of
/// its own, as [`defer`] does.
pub(crate) fn defer_value(value: Box<dyn Any + Send>) {
    // SAFETY: a fresh record, owned here; ownership passes to a list.
    unsafe { defer(holding(value, None, None)) };
}

/// Hands `record` to the calling thread's own inbox.
///
/// # Safety
/// As [`finish`].
pub(crate) unsafe fn keep_here(record: NonNull<RecordHeader>) {
    let own = home();
    // SAFETY: per the caller.
    unsafe { push_to(own.as_deref(), record) };
}

/// # Safety
/// As [`finish`].
unsafe fn push_to(inbox: Option<&Inbox<RecordHeader>>, record: NonNull<RecordHeader>) {
    let refused = match inbox {
        // SAFETY: the record is the caller's; ownership passes to the list.
        Some(inbox) => unsafe { inbox.list.push(record.as_ptr()) },
        None => Err(record.as_ptr()),
    };
    if let Err(record) = refused {
        // SAFETY: as above; the shared list is never closed.
        let _ = unsafe { SHARED.push(record) };
    }
}

/// Marks `record`'s home as the running one while it lives: the trampoline holds one while it
/// runs the record.
pub(crate) struct RunningHome {
    previous: *const Inbox<RecordHeader>,
}

impl RunningHome {
    /// # Safety
    /// `record` must stay live while the result lives.
    pub(crate) unsafe fn enter(record: NonNull<RecordHeader>) -> Self {
        // SAFETY: live (caller).
        let home = unsafe { record.as_ref() }
            .home()
            .map_or(ptr::null(), Arc::as_ptr);
        RunningHome {
            previous: RUNNING_HOME.with(|running| running.replace(home)),
        }
    }
}

impl Drop for RunningHome {
    fn drop(&mut self) {
        RUNNING_HOME.with(|running| running.set(self.previous));
    }
}

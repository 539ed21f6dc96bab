//! Where finished records go: the inbox of the thread that made each (its home), or the shared
//! list once that thread has exited. Only pushes happen here, so every function is right on any
//! thread, the driver's too; `reclaim` drops what the lists hold.

use crate::launch::record::{self, Home, RecordHeader};
use crate::launch::record_list::{Inbox, RecordList, last_of};
use crate::sync::lock;
use std::any::Any;
use std::cell::{Cell, OnceCell};
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex};

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
    unsafe { defer(record::holding(value, None, None)) };
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

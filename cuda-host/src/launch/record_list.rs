//! An intrusive, lock-free list of records: what the reclaim lists are made of.
//!
//! Pushes may come from any thread (the driver's host-function thread among them) and are one
//! compare-and-swap. Taking empties the whole list with one swap, so there is no ABA hazard and
//! no lock. A list can be closed, once: pushes onto a closed list are refused and go elsewhere
//! (the records of a thread that exited pass to the shared list).

use crate::sync::{AtomicBool, AtomicPtr};
use std::ptr;
use std::sync::atomic::Ordering;

/// A node of a [`RecordList`]: it carries its own link.
///
/// # Safety
/// `next` must return the address of a link field that only the list owning the node reads or
/// writes.
pub(crate) unsafe trait Linked {
    /// The node's link to the next node.
    fn next(node: *mut Self) -> *mut *mut Self;
}

/// A lock-free stack of nodes.
pub(crate) struct RecordList<T> {
    head: AtomicPtr<T>,
}

/// The head of a closed list: an address no node has.
fn closed<T>() -> *mut T {
    ptr::without_provenance_mut(usize::MAX)
}

impl<T: Linked> RecordList<T> {
    /// An empty, open list.
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        RecordList {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// An empty, open list.
    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        RecordList {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Pushes `node`; hands it back when the list is closed.
    ///
    /// # Safety
    /// `node` must be live and owned by the caller; on `Ok`, ownership passes to the list.
    pub(crate) unsafe fn push(&self, node: *mut T) -> Result<(), *mut T> {
        // SAFETY: a one-node chain, owned by the caller.
        unsafe { self.push_chain(node, node) }
    }

    /// Pushes the chain from `first` to `last` (linked through their links); hands `first` back
    /// when the list is closed.
    ///
    /// # Safety
    /// The chain must be live and owned by the caller, `last` reachable from `first`; on `Ok`,
    /// ownership passes to the list.
    pub(crate) unsafe fn push_chain(&self, first: *mut T, last: *mut T) -> Result<(), *mut T> {
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            if head == closed() {
                return Err(first);
            }
            // SAFETY: the chain is the caller's; nobody else reads the link until it is published.
            unsafe { *T::next(last) = head };
            // Release: the nodes' contents are visible to whoever takes them.
            match self
                .head
                .compare_exchange_weak(head, first, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(current) => head = current,
            }
        }
    }

    /// Whether the list holds nothing now (a closed list holds nothing).
    pub(crate) fn is_empty(&self) -> bool {
        let head = self.head.load(Ordering::Relaxed);
        head.is_null() || head == closed()
    }

    /// Takes every node: the first of a chain ending in null, or null. The caller owns them.
    ///
    /// Must not race with [`close`](Self::close): a list is taken from and closed by its owner.
    pub(crate) fn take(&self) -> *mut T {
        if self.is_empty() {
            return ptr::null_mut();
        }
        // Acquire pairs with the pushes' Release.
        let head = self.head.swap(ptr::null_mut(), Ordering::Acquire);
        debug_assert!(head != closed(), "taken from while closed");
        head
    }

    /// Closes the list and returns what it held (as [`take`](Self::take) does); later pushes are
    /// refused.
    pub(crate) fn close(&self) -> *mut T {
        let head = self.head.swap(closed(), Ordering::Acquire);
        if head == closed() {
            ptr::null_mut()
        } else {
            head
        }
    }
}

/// The last node of the chain starting at `first`.
///
/// # Safety
/// The chain must be owned by the caller and end in null; `first` must not be null.
pub(crate) unsafe fn last_of<T: Linked>(first: *mut T) -> *mut T {
    let mut last = first;
    loop {
        // SAFETY: per the caller, every node of the chain is live and owned.
        let next = unsafe { *T::next(last) };
        if next.is_null() {
            return last;
        }
        last = next;
    }
}

/// A thread's reclaim list: its records, and whether the thread is dropping some right now (a
/// global-mode capture waits until it is not; see `reclaim`).
pub(crate) struct Inbox<T> {
    pub(crate) list: RecordList<T>,
    pub(crate) draining: AtomicBool,
}

impl<T: Linked> Inbox<T> {
    /// An empty, open inbox.
    pub(crate) fn new() -> Self {
        Inbox {
            list: RecordList::new(),
            draining: AtomicBool::new(false),
        }
    }
}

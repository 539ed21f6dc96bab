//! Each thread's free slots: reserve slots cached most recently freed first, so that a launching
//! thread that also drops its records reuses slots still in its cache; and its freed slots beyond
//! the reserve, which go back to the pool in batches so that their segments empty out.

use super::layout::{NO_SLOT, Slot};
use super::table::{is_reserve, pool, slot};
use std::cell::{Cell, RefCell};

/// How many reserve slots a thread takes from the pool at once.
const REFILL: usize = 32;
/// A thread keeps at most this many free reserve slots; beyond, half go back to the pool.
const LOCAL_LIMIT: u32 = 512;
/// Freed slots beyond the reserve go back to the pool in batches of this many (and at the end
/// of every drain).
const RETURN_BATCH: usize = 64;

/// A thread's free reserve slots, linked through `next_free`.
struct LocalFree {
    head: Cell<u32>,
    len: Cell<u32>,
}

impl LocalFree {
    fn pop(&self) -> Option<&'static Slot> {
        let index = self.head.get();
        if index == NO_SLOT {
            return None;
        }
        let slot = slot(index).expect("reserve slots exist");
        // SAFETY: the slot is on this thread's list, which owns its `next_free`.
        self.head.set(unsafe { *slot.next_free.get() });
        self.len.set(self.len.get() - 1);
        Some(slot)
    }

    fn push(&self, slot: &'static Slot) {
        // SAFETY: the slot is free and owned by the caller, now by this list.
        unsafe { *slot.next_free.get() = self.head.get() };
        self.head.set(slot.index);
        self.len.set(self.len.get() + 1);
    }

    /// Moves all but the `keep` most recently freed slots to the pool.
    fn keep_only(&self, keep: u32) {
        if self.len.get() <= keep {
            return;
        }
        // The list runs from the most recently freed; cut it after `keep` slots.
        let mut rest = self.head.get();
        let mut last_kept = None;
        for _ in 0..keep {
            let slot = slot(rest).expect("reserve slots exist");
            last_kept = Some(slot);
            // SAFETY: the slot is on this thread's list, which owns its `next_free`.
            rest = unsafe { *slot.next_free.get() };
        }
        match last_kept {
            // SAFETY: as above.
            Some(slot) => unsafe { *slot.next_free.get() = NO_SLOT },
            None => self.head.set(NO_SLOT),
        }
        self.len.set(keep);
        pool().give_back(std::iter::from_fn(|| {
            if rest == NO_SLOT {
                return None;
            }
            let index = rest;
            let slot = slot(index).expect("reserve slots exist");
            // SAFETY: as above; the slot passes to the pool after its link was read.
            rest = unsafe { *slot.next_free.get() };
            Some(index)
        }));
    }
}

impl Drop for LocalFree {
    fn drop(&mut self) {
        self.keep_only(0);
    }
}

/// A thread's freed slots beyond the reserve, waiting to go back to the pool.
struct Returning(RefCell<Vec<u32>>);

impl Returning {
    fn flush(&self) {
        let Ok(mut indices) = self.0.try_borrow_mut() else {
            return;
        };
        if !indices.is_empty() {
            pool().give_back(indices.drain(..));
        }
    }
}

impl Drop for Returning {
    fn drop(&mut self) {
        self.flush();
    }
}

thread_local! {
    static LOCAL_FREE: LocalFree = const {
        LocalFree { head: Cell::new(NO_SLOT), len: Cell::new(0) }
    };
    static RETURNING: Returning = const { Returning(RefCell::new(Vec::new())) };
}

/// A free slot for the calling thread: from its cache, else from the pool (refilling the cache),
/// else from a new segment.
pub(super) fn acquire_free() -> &'static Slot {
    if let Ok(Some(slot)) = LOCAL_FREE.try_with(LocalFree::pop) {
        return slot;
    }
    let mut pool = pool();
    loop {
        let mut first = None;
        let refilled = LOCAL_FREE.try_with(|local| {
            pool.take_reserve(REFILL, |index| match first {
                None => first = Some(index),
                Some(_) => local.push(slot(index).expect("pooled slots exist")),
            })
        });
        if refilled.is_err() {
            // This thread's list is gone (the thread is exiting): take one reserve slot.
            pool.take_reserve(1, |index| first = Some(index));
        }
        if let Some(index) = first.or_else(|| pool.take_overflow()) {
            return slot(index).expect("pooled slots exist");
        }
        pool.grow();
    }
}

/// Frees `slot`, which the caller owns: into the thread's cache (a reserve slot), or towards the
/// pool.
pub(super) fn release_free(slot: &'static Slot) {
    if is_reserve(slot.index) {
        let kept = LOCAL_FREE.try_with(|local| {
            local.push(slot);
            if local.len.get() > LOCAL_LIMIT {
                local.keep_only(LOCAL_LIMIT / 2);
            }
        });
        if kept.is_err() {
            pool().give_back([slot.index]);
        }
        return;
    }
    let batched = RETURNING.try_with(|returning| {
        let Ok(mut indices) = returning.0.try_borrow_mut() else {
            return false;
        };
        indices.push(slot.index);
        if indices.len() >= RETURN_BATCH {
            pool().give_back(indices.drain(..));
        }
        true
    });
    if batched != Ok(true) {
        pool().give_back([slot.index]);
    }
}

/// Gives the slots beyond the reserve that this thread freed back to the pool, so that segments
/// empty out: called at the end of every drain.
pub(crate) fn return_released() {
    let _ = RETURNING.try_with(Returning::flush);
}

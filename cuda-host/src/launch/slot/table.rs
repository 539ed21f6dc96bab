//! The table of every slot, in segments that double in size, and the pool of the free slots no
//! thread holds, which makes segments and frees them.
//!
//! The first [`RESERVE_SEGMENTS`] are the reserve, never given back (threads cache their slots:
//! `thread_cache`). Slots beyond the reserve serve bursts: a segment whose slots all came back to
//! the pool is freed, and one made again starts above every generation it had issued, so a
//! generation never repeats. A slot that can never come back (retired) pins its segment.
//!
//! Freeing a segment races only with a host function presenting a stale ticket of it (after
//! other code's graph captured a launch): every claim announces itself in [`CLAIMERS`] before
//! it reads the table ([`announced`]), and the freer unpublishes the segment, then waits for
//! claims in progress.

use super::layout::Slot;
use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Slots in the first segment; segment `k` holds `FIRST_SEGMENT << k` slots, so 26 segments
/// cover every `u32` index.
pub(super) const FIRST_SEGMENT: usize = 64;
const SEGMENTS: usize = 26;
/// Segments never given back: 16,320 slots, about 2 MiB.
const RESERVE_SEGMENTS: usize = 8;
/// Slots in the reserve.
pub(super) const RESERVE_SLOTS: usize = FIRST_SEGMENT * ((1 << RESERVE_SEGMENTS) - 1);

static TABLE: [AtomicPtr<Slot>; SEGMENTS] = [const { AtomicPtr::new(ptr::null_mut()) }; SEGMENTS];
/// Claims in progress (see the module documentation).
static CLAIMERS: AtomicUsize = AtomicUsize::new(0);

static POOL: Mutex<Pool> = Mutex::new(Pool {
    free: [const { Vec::new() }; SEGMENTS],
    retired: [0; SEGMENTS],
    first_generation: [1; SEGMENTS],
    allocated: 0,
    peak: 0,
});

/// Free slots no thread holds, per segment, and what the segments' lives need.
pub(super) struct Pool {
    free: [Vec<u32>; SEGMENTS],
    /// Slots that never come back, per segment.
    retired: [u32; SEGMENTS],
    /// The first generation of a segment's next incarnation: above every generation it issued.
    first_generation: [u32; SEGMENTS],
    allocated: usize,
    peak: usize,
}

fn segment_len(segment: usize) -> usize {
    FIRST_SEGMENT << segment
}

fn segment_start(segment: usize) -> usize {
    FIRST_SEGMENT * ((1 << segment) - 1)
}

/// The segment and the offset in it of `index`.
fn locate(index: u32) -> (usize, usize) {
    let biased = index as usize + FIRST_SEGMENT;
    let segment = (biased.ilog2() - FIRST_SEGMENT.ilog2()) as usize;
    (segment, biased - (FIRST_SEGMENT << segment))
}

/// The slot with this index, if its segment exists.
///
/// A slot of a segment beyond the reserve may only be used by its owner (a slot in use is never
/// freed), by the pool's lock holder ([`Pool::slots`]), or during a claim ([`announced`]).
pub(super) fn slot(index: u32) -> Option<&'static Slot> {
    let (segment, offset) = locate(index);
    let base = TABLE.get(segment)?.load(Ordering::SeqCst);
    if base.is_null() {
        return None;
    }
    // SAFETY: segment `segment` holds `segment_len(segment)` initialised slots; `offset` is below
    // that, and the caller keeps the segment from being freed (see above).
    Some(unsafe { &*base.add(offset) })
}

/// Runs `claim` with the slot with this index, if its segment exists, announced as a claim in
/// progress: its segment is not freed before `claim` returns.
pub(super) fn announced<R>(index: u32, claim: impl FnOnce(Option<&Slot>) -> R) -> R {
    CLAIMERS.fetch_add(1, Ordering::SeqCst);
    let claimed = claim(slot(index));
    CLAIMERS.fetch_sub(1, Ordering::Release);
    claimed
}

pub(super) fn pool() -> MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether `index` is a slot of the reserve, which is never freed.
pub(super) fn is_reserve(index: u32) -> bool {
    (index as usize) < RESERVE_SLOTS
}

impl Pool {
    /// Makes the lowest missing segment, its slots free in the pool.
    pub(super) fn grow(&mut self) {
        let segment = (0..SEGMENTS)
            .find(|&segment| TABLE[segment].load(Ordering::Relaxed).is_null())
            .expect("more than 2^32 launches in flight");
        let len = segment_len(segment);
        let layout = Layout::array::<Slot>(len).expect("a segment fits the address space");
        // SAFETY: the layout has a non-zero size.
        let base = unsafe { alloc(layout) }.cast::<Slot>();
        if base.is_null() {
            handle_alloc_error(layout);
        }
        let first = segment_start(segment);
        for offset in 0..len {
            let slot = Slot::new((first + offset) as u32, self.first_generation[segment]);
            // SAFETY: `offset` is inside the fresh allocation, not yet visible to anyone.
            unsafe { base.add(offset).write(slot) };
        }
        TABLE[segment].store(base, Ordering::SeqCst);
        self.free[segment] = (first..first + len)
            .rev()
            .map(|index| index as u32)
            .collect();
        self.allocated += len;
        self.peak = self.peak.max(self.allocated);
    }

    /// A free slot beyond the reserve, the lowest segment first, so that the highest empty out.
    pub(super) fn take_overflow(&mut self) -> Option<u32> {
        self.free[RESERVE_SEGMENTS..].iter_mut().find_map(Vec::pop)
    }

    /// Takes up to `want` free reserve slots.
    pub(super) fn take_reserve(&mut self, want: usize, mut take: impl FnMut(u32)) -> usize {
        let mut taken = 0;
        for free in &mut self.free[..RESERVE_SEGMENTS] {
            while taken < want
                && let Some(index) = free.pop()
            {
                take(index);
                taken += 1;
            }
        }
        taken
    }

    /// Takes back freed slots; frees every segment beyond the reserve whose slots are all back.
    pub(super) fn give_back(&mut self, indices: impl IntoIterator<Item = u32>) {
        let mut touched = [false; SEGMENTS];
        for index in indices {
            let (segment, _) = locate(index);
            self.free[segment].push(index);
            touched[segment] = true;
        }
        for (segment, _) in touched
            .iter()
            .enumerate()
            .skip(RESERVE_SEGMENTS)
            .filter(|(_, touched)| **touched)
        {
            if self.retired[segment] == 0 && self.free[segment].len() == segment_len(segment) {
                self.free_segment(segment);
            }
        }
    }

    /// Counts the slot at `index` as never coming back: its segment stays.
    pub(super) fn retire(&mut self, index: u32) {
        let (segment, _) = locate(index);
        self.retired[segment] += 1;
    }

    /// Frees a segment whose slots are all free in the pool.
    fn free_segment(&mut self, segment: usize) {
        let base = TABLE[segment].swap(ptr::null_mut(), Ordering::SeqCst);
        // A claim that read the segment's address before it was unpublished is announced in
        // CLAIMERS (sequentially consistent on both sides): wait for it to end.
        while CLAIMERS.load(Ordering::SeqCst) != 0 {
            std::hint::spin_loop();
        }
        let len = segment_len(segment);
        let mut last = 0;
        for offset in 0..len {
            // SAFETY: the segment is still allocated and nobody else can reach it now.
            let (_, generation) = unsafe { &*base.add(offset) }.state.load(Ordering::Relaxed);
            last = last.max(generation);
        }
        // Free slots never hold the last generation (it retires them), so this does not wrap.
        self.first_generation[segment] = last + 1;
        self.free[segment] = Vec::new();
        self.allocated -= len;
        let layout = Layout::array::<Slot>(len).expect("a segment fits the address space");
        // SAFETY: allocated by `grow` with this layout; no slot of it is in use or reachable.
        unsafe { dealloc(base.cast(), layout) };
    }

    /// Every slot that exists: their segments are not freed while the pool is locked.
    pub(super) fn slots(&self) -> impl Iterator<Item = &Slot> {
        TABLE.iter().enumerate().flat_map(|(segment, base)| {
            let base = base.load(Ordering::SeqCst);
            let len = if base.is_null() {
                0
            } else {
                segment_len(segment)
            };
            // SAFETY: the segment exists, and cannot be freed while the pool, borrowed for as
            // long as the slots are, is locked.
            (0..len).map(move |offset| unsafe { &*base.add(offset) })
        })
    }

    /// Slots that exist.
    pub(super) fn allocated(&self) -> usize {
        self.allocated
    }

    /// The most slots that existed at once.
    pub(super) fn peak(&self) -> usize {
        self.peak
    }

    /// Slots that are never used again.
    pub(super) fn retired(&self) -> usize {
        self.retired.iter().map(|&retired| retired as usize).sum()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn indices_map_to_doubling_segments() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(63), (0, 63));
        assert_eq!(locate(64), (1, 0));
        assert_eq!(locate(191), (1, 127));
        assert_eq!(locate(192), (2, 0));
        assert_eq!(segment_start(2), 192);
        let last = u32::MAX - FIRST_SEGMENT as u32;
        assert_eq!(
            locate(last),
            (SEGMENTS - 1, (FIRST_SEGMENT << (SEGMENTS - 1)) - 1)
        );
        assert!(slot(u32::MAX).is_none(), "beyond the last segment");
        assert_eq!(RESERVE_SLOTS, segment_start(RESERVE_SEGMENTS));
    }
}

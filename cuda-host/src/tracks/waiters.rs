//! The futures waiting on one track: their wakers, in the order of their points. Each track
//! holds its own (`Track::waiters`), so that futures of different streams register without
//! meeting; the watcher (`watcher`) takes out those whose point was passed.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::task::Waker;

/// The futures waiting on one track.
#[derive(Default)]
pub(crate) struct Waiters {
    /// (point, registration id), earliest point first; entries of forgotten ids are skipped.
    order: BinaryHeap<Reverse<(u64, u64)>>,
    /// Registration id to its point and waker.
    wakers: HashMap<u64, (u64, Waker), BuildHasherDefault<IdHasher>>,
    next_id: u64,
    /// Whether the watcher has the track on its list: set by the registration that finds it
    /// off, cleared by the watcher when it takes the track off, both under this value's lock.
    pub(crate) listed: bool,
}

/// Hashes registration ids, which are distinct counts: a multiply spreads them well enough, at a
/// fraction of the default hasher's cost (a registration is on the path of every poll).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(byte)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

impl Waiters {
    /// Registers `waker` for `point`; returns the registration's id.
    pub(crate) fn insert(&mut self, point: u64, waker: Waker) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.order.push(Reverse((point, id)));
        self.wakers.insert(id, (point, waker));
        id
    }

    /// Gives the registration `id` the waker `waker`: `None` when `id` is not registered (it was
    /// woken), else the waker it replaced, if it did not wake the same task.
    pub(crate) fn update(&mut self, id: u64, waker: &Waker) -> Option<Option<Waker>> {
        let (_, registered) = self.wakers.get_mut(&id)?;
        Some((!registered.will_wake(waker)).then(|| std::mem::replace(registered, waker.clone())))
    }

    /// Takes the registration `id` back, if it was not woken yet.
    pub(crate) fn remove(&mut self, id: u64) -> Option<Waker> {
        let (_, waker) = self.wakers.remove(&id)?;
        self.compact();
        Some(waker)
    }

    /// The earliest point waited for.
    pub(crate) fn first(&mut self) -> Option<u64> {
        while let Some(&Reverse((point, id))) = self.order.peek() {
            if self.wakers.contains_key(&id) {
                return Some(point);
            }
            self.order.pop();
        }
        None
    }

    /// Moves the wakers of every point up to `passed` (all of them, with `all`) to `woken`.
    pub(crate) fn take_up_to(&mut self, passed: u64, all: bool, woken: &mut Vec<Waker>) {
        while let Some(&Reverse((point, id))) = self.order.peek() {
            if point > passed && !all {
                break;
            }
            self.order.pop();
            if let Some((_, waker)) = self.wakers.remove(&id) {
                woken.push(waker);
            }
        }
    }

    /// How many wait.
    pub(crate) fn len(&self) -> usize {
        self.wakers.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.wakers.is_empty()
    }

    /// Drops the order's entries of forgotten registrations once they outnumber the live ones.
    fn compact(&mut self) {
        if self.order.len() > 2 * self.wakers.len() + 64 {
            self.order = self
                .wakers
                .iter()
                .map(|(&id, &(point, _))| Reverse((point, id)))
                .collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Task;

    impl std::task::Wake for Task {
        fn wake(self: std::sync::Arc<Self>) {}
    }

    #[test]
    fn wakers_are_taken_in_the_order_of_their_points_and_forgotten_ones_never() {
        let mut waiters = Waiters::default();
        let ids: Vec<u64> = [5, 1, 3, 3, 9]
            .into_iter()
            .map(|point| waiters.insert(point, Waker::noop().clone()))
            .collect();
        assert!(waiters.remove(ids[1]).is_some(), "point 1's registration");
        assert_eq!(waiters.first(), Some(3), "point 1's was taken back");
        let mut woken = Vec::new();
        waiters.take_up_to(4, false, &mut woken);
        assert_eq!(woken.len(), 2, "both of point 3");
        assert_eq!((waiters.len(), waiters.first()), (2, Some(5)));
        assert!(waiters.update(ids[2], Waker::noop()).is_none(), "woken");
        // Another task's waker replaces the registered one, which is handed back; the same
        // task's replaces nothing.
        let task = Waker::from(std::sync::Arc::new(Task));
        assert!(matches!(waiters.update(ids[0], &task), Some(Some(_))));
        assert!(matches!(waiters.update(ids[0], &task.clone()), Some(None)));
        waiters.take_up_to(0, true, &mut woken);
        assert_eq!(woken.len(), 4);
        assert!(waiters.is_empty());
        assert_eq!(waiters.first(), None);
    }
}

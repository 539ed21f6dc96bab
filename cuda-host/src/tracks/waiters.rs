//! The futures waiting on one track: their wakers, in the order of their points. Each track
//! holds its own (`Track::waiters`), so that futures of different streams register without
//! meeting; the watcher (`watcher`) takes out those whose point was passed.
//!
//! Futures are mostly polled first in the order their points were made, so registrations come
//! in the order of their points: those are appended to a queue kept in that order, which the
//! watcher takes from the front, with no hashing and no heap (a registration is on the path of
//! every first poll). A registration for an earlier point than the queue's last goes to an
//! ordered map beside it. A registration is found again by its point and number.

use std::collections::{BTreeMap, VecDeque};
use std::task::Waker;
use std::time::Instant;

/// A registration with [`Waiters`]: its point and its number among the registrations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Registration {
    point: u64,
    id: u64,
}

impl Registration {
    fn key(self) -> (u64, u64) {
        (self.point, self.id)
    }
}

/// The futures waiting on one track.
#[derive(Default)]
pub(crate) struct Waiters {
    /// Registrations in the order of (point, id), earliest first; a taken-back one leaves its
    /// entry empty until the queue is compacted. Neither end is ever an empty entry.
    queue: VecDeque<(Registration, Option<Waker>)>,
    /// The queue's entries that hold a waker.
    queued: usize,
    /// Registrations for an earlier point than the queue's last when they were made.
    scattered: BTreeMap<(u64, u64), Waker>,
    next_id: u64,
    /// Whether the watcher has the track on its list: set by the registration that finds it
    /// off, cleared by the watcher when it takes the track off, both under this value's lock.
    pub(crate) listed: bool,
    /// Since when the watcher found no future waiting while the track is listed; cleared by a
    /// registration (`watcher`).
    pub(crate) empty_since: Option<Instant>,
}

impl Waiters {
    /// Registers `waker` for `point`.
    pub(crate) fn insert(&mut self, point: u64, waker: Waker) -> Registration {
        let registration = Registration {
            point,
            id: self.next_id,
        };
        self.next_id += 1;
        let in_order = self
            .queue
            .back()
            .is_none_or(|(last, _)| last.point <= point);
        if in_order {
            self.queue.push_back((registration, Some(waker)));
            self.queued += 1;
        } else {
            self.scattered.insert(registration.key(), waker);
        }
        registration
    }

    /// The waker of `registration`, if it is still registered.
    fn waker_mut(&mut self, registration: Registration) -> Option<&mut Waker> {
        if let Ok(index) = self.index_of(registration) {
            return self.queue[index].1.as_mut();
        }
        self.scattered.get_mut(&registration.key())
    }

    fn index_of(&self, registration: Registration) -> Result<usize, usize> {
        self.queue
            .binary_search_by_key(&registration.key(), |(queued, _)| queued.key())
    }

    /// Gives `registration` the waker `waker`, unless its own wakes the same task: `Err(waker)`
    /// when it is not registered (it was woken), else the waker let go (the one replaced, or
    /// `waker`), for the caller to drop outside the lock.
    pub(crate) fn update(
        &mut self,
        registration: Registration,
        waker: Waker,
    ) -> Result<Waker, Waker> {
        let Some(registered) = self.waker_mut(registration) else {
            return Err(waker);
        };
        Ok(if registered.will_wake(&waker) {
            waker
        } else {
            std::mem::replace(registered, waker)
        })
    }

    /// Takes `registration` back, if it was not woken yet.
    pub(crate) fn remove(&mut self, registration: Registration) -> Option<Waker> {
        let Ok(index) = self.index_of(registration) else {
            return self.scattered.remove(&registration.key());
        };
        let waker = self.queue[index].1.take()?;
        self.queued -= 1;
        self.trim();
        if self.queue.len() > 2 * self.queued + 64 {
            self.queue.retain(|(_, waker)| waker.is_some());
        }
        Some(waker)
    }

    /// Drops the empty entries at both ends of the queue.
    fn trim(&mut self) {
        while self.queue.front().is_some_and(|(_, waker)| waker.is_none()) {
            self.queue.pop_front();
        }
        while self.queue.back().is_some_and(|(_, waker)| waker.is_none()) {
            self.queue.pop_back();
        }
    }

    /// The earliest point waited for.
    pub(crate) fn first(&self) -> Option<u64> {
        let queued = self
            .queue
            .front()
            .map(|(registration, _)| registration.point);
        let scattered = self
            .scattered
            .first_key_value()
            .map(|(&(point, _), _)| point);
        match (queued, scattered) {
            (Some(queued), Some(scattered)) => Some(queued.min(scattered)),
            (queued, scattered) => queued.or(scattered),
        }
    }

    /// Moves the wakers of every point up to `passed` (all of them, with `all`) to `woken`.
    pub(crate) fn take_up_to(&mut self, passed: u64, all: bool, woken: &mut Vec<Waker>) {
        while let Some((registration, _)) = self.queue.front() {
            if registration.point > passed && !all {
                break;
            }
            if let Some((_, Some(waker))) = self.queue.pop_front() {
                self.queued -= 1;
                woken.push(waker);
            }
        }
        self.trim();
        while let Some(entry) = self.scattered.first_entry() {
            if entry.key().0 > passed && !all {
                break;
            }
            woken.push(entry.remove());
        }
    }

    /// How many wait.
    pub(crate) fn len(&self) -> usize {
        self.queued + self.scattered.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
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
        let ids: Vec<Registration> = [5, 1, 3, 3, 9]
            .into_iter()
            .map(|point| waiters.insert(point, Waker::noop().clone()))
            .collect();
        assert!(waiters.remove(ids[1]).is_some(), "point 1's registration");
        assert!(waiters.remove(ids[1]).is_none(), "taken back already");
        assert_eq!(waiters.first(), Some(3), "point 1's was taken back");
        let mut woken = Vec::new();
        waiters.take_up_to(4, false, &mut woken);
        assert_eq!(woken.len(), 2, "both of point 3");
        assert_eq!((waiters.len(), waiters.first()), (2, Some(5)));
        assert!(
            waiters.update(ids[2], Waker::noop().clone()).is_err(),
            "woken"
        );
        // Another task's waker replaces the registered one, which is handed back; the same
        // task's replaces nothing, and is handed back itself. (Told apart by their data: Miri
        // gives one vtable several addresses, which `will_wake` compares.)
        let task = Waker::from(std::sync::Arc::new(Task));
        let let_go = waiters.update(ids[0], task.clone()).expect("registered");
        assert_ne!(let_go.data(), task.data(), "the one replaced");
        let let_go = waiters.update(ids[0], task.clone()).expect("registered");
        assert_eq!(let_go.data(), task.data(), "a waker of the same task");
        waiters.take_up_to(0, true, &mut woken);
        assert_eq!(woken.len(), 4);
        assert!(waiters.is_empty());
        assert_eq!(waiters.first(), None);
    }

    #[test]
    fn registrations_in_and_out_of_order_are_woken_in_the_order_of_their_points() {
        // Fewer under Miri, which runs each step a thousand times slower.
        const POINTS: u64 = if cfg!(miri) { 300 } else { 3_000 };
        let mut waiters = Waiters::default();
        let mut registrations = Vec::new();
        // In order, then every third taken back, then earlier points in reverse.
        for point in POINTS / 2..POINTS {
            registrations.push(waiters.insert(point, Waker::noop().clone()));
        }
        let mut taken_back = 0;
        for registration in registrations.iter().step_by(3) {
            assert!(waiters.remove(*registration).is_some());
            taken_back += 1;
        }
        for point in (0..POINTS / 2).rev() {
            registrations.push(waiters.insert(point, Waker::noop().clone()));
        }
        assert_eq!(waiters.len() as u64, POINTS - taken_back);
        let mut expected: Vec<u64> = (0..POINTS)
            .filter(|&point| point < POINTS / 2 || !(point - POINTS / 2).is_multiple_of(3))
            .collect();
        assert_eq!(waiters.first(), Some(0));
        // Each registration is found again, in the queue or beside it.
        for registration in &registrations {
            let registered = waiters.update(*registration, Waker::noop().clone()).is_ok();
            let point = registration.point;
            assert_eq!(registered, expected.contains(&point), "point {point}");
        }
        let mut woken = Vec::new();
        let mut seen = 0;
        for passed in (0..POINTS).step_by(7) {
            waiters.take_up_to(passed, false, &mut woken);
            let due = expected
                .iter()
                .take_while(|&&point| point <= passed)
                .count();
            assert_eq!(woken.len(), due, "up to {passed}");
            seen = due;
            assert_eq!(
                waiters.first(),
                expected.get(seen).copied(),
                "after {passed}"
            );
        }
        expected.drain(..seen);
        waiters.take_up_to(POINTS, false, &mut woken);
        assert_eq!(woken.len(), seen + expected.len());
        assert!(waiters.is_empty());
        assert_eq!((waiters.queue.len(), waiters.scattered.len()), (0, 0));
    }

    #[test]
    fn taken_back_registrations_leave_no_more_entries_than_twice_the_live_ones() {
        let mut waiters = Waiters::default();
        let registrations: Vec<Registration> = (0..1_000)
            .map(|point| waiters.insert(point, Waker::noop().clone()))
            .collect();
        // All but every hundredth, from the middle: the ends stay live.
        for (index, registration) in registrations.iter().enumerate() {
            if index % 100 != 0 && index != 999 {
                assert!(waiters.remove(*registration).is_some());
            }
        }
        assert_eq!(waiters.len(), 11);
        assert!(
            waiters.queue.len() <= 2 * 11 + 64,
            "{}",
            waiters.queue.len()
        );
        let mut woken = Vec::new();
        waiters.take_up_to(500, false, &mut woken);
        assert_eq!(woken.len(), 6);
        assert_eq!(waiters.first(), Some(600));
    }
}

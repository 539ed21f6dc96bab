//! Records held until a stream passes a point: what a release in stream order leaves behind.
//!
//! A held record waits in a queue of the thread that made it, one queue per sequence of points
//! (a stream's track, `crate::points`). Each drain of that thread (`reclaim`) first looks how
//! far each of its sequences has come and hands every record whose point was passed to the
//! thread's inbox, where the same drain drops it: so held records follow the rule of launch
//! records (dropped on the thread that made them, never on the driver's thread, never during a
//! capture through cuda-host). A record whose context failed is handed on too: the stream will
//! never pass its point. When a thread exits, its queues pass to a shared list that every
//! drain looks at, and their records go to the shared list of records when passed.
//!
//! Looking costs a drain nothing while the thread holds nothing and no exited thread left
//! anything; otherwise a paced drain looks once in `PACED_DRAINS` of the thread's, and a drain
//! that looks makes, per sequence, a look at its progress, which queries the driver only now and
//! then ([`Look`]), and, per queue, the failure check. Which drain looks is counted per drain,
//! not per sequence, so that every sequence is looked at by the same drains. Moving records to
//! the inbox runs no `Drop`, so it is done before the drain decides whether it may drop
//! anything.

use crate::launch::context_failure;
use crate::launch::context_shared::ContextShared;
use crate::launch::record::{self, HELD_RECORDS, RecordHeader};
use crate::observe::{self, Points};
use crate::sync::lock;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::mem::take;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A sequence of points a stream passes in order: how far it has come.
pub(crate) trait Progress: Send + Sync {
    /// The highest point known passed so far (points are numbered from 1), after looking at the
    /// stream as `look` says.
    fn passed(&self, look: Look) -> u64;
}

/// How a look at a sequence of points queries the driver: the one word for it, of the held
/// records' drains here and of every other look at stream points (`crate::points`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Look {
    /// Now, after any look going on, so that it sees what the stream finished before it: a
    /// synchronize, a drain asked for ([`reclaim`](crate::reclaim)),
    /// [`StreamPoint::is_passed`](crate::points::StreamPoint::is_passed), the watcher of futures (which
    /// paces itself).
    Fresh,
    /// Only if no look asked after the same points for a while (at most every 50 µs): the
    /// drain of a launch and the poll of a future, which must stay cheap.
    Paced,
}

/// The records of one thread held for one sequence, in the order of their points.
struct Queue {
    progress: Arc<dyn Progress>,
    /// The context (`CUcontext` address) the sequence's stream belongs to.
    context: usize,
    records: VecDeque<(u64, NonNull<RecordHeader>)>,
    /// The key the record at the back was held with ([`hold_or_extend`]), 0 for none.
    last_key: usize,
}

// SAFETY: the queue owns its records, which are `Send` (their payloads are); `progress` is
// `Send + Sync`.
unsafe impl Send for Queue {}

impl Queue {
    /// Hands every record whose point was passed (all of them, if the context failed) to its
    /// home; returns how many.
    fn release_passed(&mut self, look: Look) -> usize {
        let passed = self.progress.passed(look);
        let failed = self
            .records
            .front()
            .is_some_and(|&(point, _)| point > passed)
            && context_failure::has_failed(self.context);
        let mut count = 0;
        while let Some(&(point, record)) = self.records.front() {
            if point > passed && !failed {
                break;
            }
            self.records.pop_front();
            if self.records.is_empty() {
                self.last_key = 0;
            }
            // SAFETY: the queue owned the record; ownership passes to its home's list.
            unsafe { record::finish(record) };
            count += 1;
        }
        count
    }

    fn is_for(&self, progress: &Arc<dyn Progress>) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.progress), Arc::as_ptr(progress))
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // Only the shared list's queues are ever dropped with records (they never are: they are
        // kept until released); a record is never dropped here, where its thread may be wrong.
        for (_, record) in self.records.drain(..) {
            // SAFETY: owned by the queue; ownership passes to the shared list.
            unsafe { record::finish(record) };
        }
    }
}

/// A thread's queues.
struct Held {
    queues: RefCell<Vec<Queue>>,
    count: Cell<usize>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let queues = std::mem::take(self.queues.get_mut());
        if !queues.is_empty() {
            ORPHANED.fetch_add(self.count.get(), Ordering::SeqCst);
            lock(&ORPHANS).extend(queues);
        }
    }
}

thread_local! {
    static HELD: Held = const { Held { queues: RefCell::new(Vec::new()), count: Cell::new(0) } };
}

/// Queues of threads that exited.
static ORPHANS: Mutex<Vec<Queue>> = Mutex::new(Vec::new());
/// Records in `ORPHANS`.
static ORPHANED: AtomicUsize = AtomicUsize::new(0);

/// Holds `value` in a record of `context`, homed on the calling thread, until `progress` passes
/// `point` or the context fails; the thread's drains then drop it.
pub(crate) fn hold_until<T: Send + 'static>(
    progress: Arc<dyn Progress>,
    context: Arc<ContextShared>,
    point: u64,
    value: T,
) {
    hold_keyed(progress, context, point, 0, value);
}

/// Holds what `value` makes until `progress` passes `point`, as [`hold_until`], unless the
/// calling thread's newest record for `progress` was held with the same `key` (not 0): that
/// record is then held until `point` instead, and `value` is not called. For what a stream's
/// operations keep alive one after another (a timeline's word): holding it until the later
/// point holds it as long as both records would, with one record. `key` must name what the
/// record keeps (an address it holds alive, so that no other value has it meanwhile).
pub(crate) fn hold_or_extend<T: Send + 'static>(
    progress: &Arc<dyn Progress>,
    context: &Arc<ContextShared>,
    point: u64,
    key: usize,
    value: impl FnOnce() -> T,
) {
    let extended = key != 0
        && HELD
            .try_with(|held| {
                let mut queues = held.queues.borrow_mut();
                let Some(queue) = queues.iter_mut().find(|queue| queue.is_for(progress)) else {
                    return false;
                };
                match queue.records.back_mut() {
                    Some((last, _)) if queue.last_key == key && *last <= point => {
                        *last = point;
                        true
                    }
                    _ => false,
                }
            })
            .unwrap_or(false);
    if !extended {
        hold_keyed(
            Arc::clone(progress),
            Arc::clone(context),
            point,
            key,
            value(),
        );
    }
}

fn hold_keyed<T: Send + 'static>(
    progress: Arc<dyn Progress>,
    context: Arc<ContextShared>,
    point: u64,
    key: usize,
    value: T,
) {
    let context_handle = context.raw().addr();
    let record = record::holding(value, Some(context), record::home());
    HELD_RECORDS.fetch_add(1, Ordering::Relaxed);
    let mut queue = Some(Queue {
        progress,
        context: context_handle,
        records: VecDeque::new(),
        last_key: 0,
    });
    let held = HELD.try_with(|held| {
        let mut queues = held.queues.borrow_mut();
        let queue = match queues
            .iter()
            .position(|q| q.is_for(&queue.as_ref().expect("one").progress))
        {
            Some(index) => &mut queues[index],
            None => {
                queues.push(queue.take().expect("one"));
                queues.last_mut().expect("just pushed")
            }
        };
        insert(queue, point, key, record);
        held.count.set(held.count.get() + 1);
    });
    if held.is_err() {
        // The thread is being torn down: the record waits with those of exited threads.
        let mut queue = queue.take().expect("not placed");
        insert(&mut queue, point, key, record);
        ORPHANED.fetch_add(1, Ordering::SeqCst);
        lock(&ORPHANS).push(queue);
    }
}

/// Puts `record` in `queue` in the order of the points (a thread's points of one sequence come
/// in order, so this is a push at the back).
fn insert(queue: &mut Queue, point: u64, key: usize, record: NonNull<RecordHeader>) {
    let at = queue
        .records
        .iter()
        .rposition(|&(earlier, _)| earlier <= point)
        .map_or(0, |index| index + 1);
    if at == queue.records.len() {
        queue.last_key = key;
    }
    queue.records.insert(at, (point, record));
}

/// How many paced drains of a thread pass before one looks at its held records: a look reads
/// the clock, which costs as much as the rest of a drain that finds nothing due (40 ns on the
/// H200's host).
const PACED_DRAINS: u32 = 8;

/// Whether this drain looks: every fresh one, and every `PACED_DRAINS`th paced one of the
/// calling thread.
fn looks_now(look: Look) -> bool {
    thread_local! {
        static PACED: Cell<u32> = const { Cell::new(0) };
    }
    look == Look::Fresh
        || PACED
            .try_with(|paced| {
                let count = paced.get().wrapping_add(1);
                paced.set(count);
                count % PACED_DRAINS == 0
            })
            .unwrap_or(true)
}

/// Hands the calling thread's held records whose points were passed (or whose context failed)
/// to its inbox, and those of exited threads to the shared list; returns how many. Only pushes:
/// the caller's drain drops them.
pub(crate) fn release_passed(look: Look) -> usize {
    if !looks_now(look) {
        return 0;
    }
    let mut released = HELD
        .try_with(|held| {
            if held.count.get() == 0 {
                return 0;
            }
            // Taken out for the looks, which may log: a logger may call cuda-host back and hold
            // records on this thread meanwhile (a release, a timeline's operation), which then
            // go to the queues left in their place.
            let Ok(queues) = held
                .queues
                .try_borrow_mut()
                .map(|mut queues| take(&mut *queues))
            else {
                return 0;
            };
            let queues = TakenOut::new(queues, |queues, released| {
                merge(&mut held.queues.borrow_mut(), queues);
                held.count.set(held.count.get() - released);
                HELD_RECORDS.fetch_sub(released, Ordering::Relaxed);
            });
            queues.release(look)
        })
        .unwrap_or(0);
    if ORPHANED.load(Ordering::SeqCst) != 0
        && let Some(_draining) = DrainingOrphans::begin()
    {
        // Taken out too: the looks hold no lock a thread that exits meanwhile takes.
        let orphans = TakenOut::new(take(&mut *lock(&ORPHANS)), |orphans, released| {
            merge(&mut lock(&ORPHANS), orphans);
            ORPHANED.fetch_sub(released, Ordering::SeqCst);
            HELD_RECORDS.fetch_sub(released, Ordering::Relaxed);
        });
        released += orphans.release(look);
    }
    // Observed with nothing held: the held queues are neither borrowed nor locked.
    observe::points_passed(Points::Release, released);
    released
}

/// Queues a drain took out of their place, put back when dropped, with the count of the records
/// it handed on, also should the drain unwind: a queue dropped would hand its records on before
/// their points passed, and a count left as it was would hold them for ever.
struct TakenOut<P: FnMut(Vec<Queue>, usize)> {
    queues: Vec<Queue>,
    /// The records handed on so far.
    released: usize,
    put_back: P,
}

impl<P: FnMut(Vec<Queue>, usize)> TakenOut<P> {
    fn new(queues: Vec<Queue>, put_back: P) -> Self {
        TakenOut {
            queues,
            released: 0,
            put_back,
        }
    }

    /// Hands the records whose points were passed to their homes, dropping the queues left
    /// empty, and puts the rest back; returns how many it handed on.
    fn release(mut self, look: Look) -> usize {
        for queue in &mut self.queues {
            self.released += queue.release_passed(look);
        }
        self.queues.retain(|queue| !queue.records.is_empty());
        self.released
    }
}

impl<P: FnMut(Vec<Queue>, usize)> Drop for TakenOut<P> {
    fn drop(&mut self) {
        (self.put_back)(take(&mut self.queues), self.released);
    }
}

/// Puts `taken`, queues a drain took out of `queues`, back, with the records held meanwhile
/// (in `queues` now) in their points' order.
fn merge(queues: &mut Vec<Queue>, taken: Vec<Queue>) {
    let added = std::mem::replace(queues, taken);
    for mut queue in added {
        let Some(into) = queues.iter_mut().find(|into| into.is_for(&queue.progress)) else {
            queues.push(queue);
            continue;
        };
        let last = queue.records.len();
        for (index, (point, record)) in queue.records.drain(..).enumerate() {
            let key = if index + 1 == last { queue.last_key } else { 0 };
            insert(into, point, key, record);
        }
    }
}

/// The calling thread's drain of the exited threads' queues: a drain it leads to on the same
/// thread (a logger calling [`reclaim`](crate::reclaim) back) leaves them to it. Ends when
/// dropped, also on unwind.
struct DrainingOrphans;

thread_local! {
    static DRAINING_ORPHANS: Cell<bool> = const { Cell::new(false) };
}

impl DrainingOrphans {
    /// The drain, unless this thread is draining them already (a thread being torn down drains
    /// them unguarded).
    fn begin() -> Option<Self> {
        DRAINING_ORPHANS
            .try_with(|draining| !draining.replace(true))
            .unwrap_or(true)
            // Lazily: a guard made and dropped on refusal would end the drain under way.
            .then(|| DrainingOrphans)
    }
}

impl Drop for DrainingOrphans {
    fn drop(&mut self) {
        let _ = DRAINING_ORPHANS.try_with(|draining| draining.set(false));
    }
}

/// Whether the calling thread, or an exited one, holds records.
#[cfg(test)]
fn anything_held() -> bool {
    HELD.try_with(|held| held.count.get() != 0).unwrap_or(false)
        || ORPHANED.load(Ordering::Relaxed) != 0
}

/// Records held by every thread, waiting for their points.
pub(crate) fn held_count() -> usize {
    HELD_RECORDS.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_driver;
    use std::sync::atomic::{AtomicBool, AtomicU64};

    struct Counter(AtomicU64);

    impl Progress for Counter {
        fn passed(&self, _: Look) -> u64 {
            self.0.load(Ordering::SeqCst)
        }
    }

    struct Dropped(Arc<AtomicUsize>, std::thread::ThreadId);

    impl Drop for Dropped {
        fn drop(&mut self) {
            assert_eq!(
                std::thread::current().id(),
                self.1,
                "dropped on another thread"
            );
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_refused_drain_of_the_orphans_leaves_the_drain_under_way_in_force() {
        let draining = DrainingOrphans::begin().expect("no drain under way");
        assert!(DrainingOrphans::begin().is_none(), "one drain at a time");
        assert!(
            DrainingOrphans::begin().is_none(),
            "the refusal did not end the drain under way"
        );
        drop(draining);
        assert!(DrainingOrphans::begin().is_some(), "the drain ended");
    }

    #[test]
    fn held_values_are_dropped_by_a_drain_of_their_thread_once_their_point_is_passed() {
        // SAFETY: no entry points beyond the fakes' defaults.
        let driver = unsafe { fake_driver::driver(&[]) };
        let context = fake_driver::context(&driver);
        let counter = Arc::new(Counter(AtomicU64::new(0)));
        let drops = Arc::new(AtomicUsize::new(0));
        let here = std::thread::current().id();
        for point in 1..=3 {
            let progress: Arc<dyn Progress> = counter.clone();
            hold_until(
                progress,
                Arc::clone(&context),
                point,
                Dropped(Arc::clone(&drops), here),
            );
        }
        crate::launch::reclaim();
        assert_eq!(drops.load(Ordering::SeqCst), 0, "no point passed yet");
        counter.0.store(2, Ordering::SeqCst);
        // Another thread's drain leaves them alone.
        std::thread::scope(|scope| {
            scope.spawn(crate::launch::reclaim);
        });
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        crate::launch::reclaim();
        assert_eq!(
            drops.load(Ordering::SeqCst),
            2,
            "the first two points were passed"
        );
        counter.0.store(3, Ordering::SeqCst);
        crate::launch::reclaim();
        assert_eq!(drops.load(Ordering::SeqCst), 3);
        assert!(!anything_held());
    }

    /// A sequence whose first look panics, then answers as a [`Counter`].
    struct PanicsOnce(AtomicBool, Counter);

    impl Progress for PanicsOnce {
        fn passed(&self, look: Look) -> u64 {
            if !self.0.swap(true, Ordering::SeqCst) {
                panic!("deliberate panic of a look");
            }
            self.1.passed(look)
        }
    }

    #[test]
    fn a_drain_that_unwinds_in_a_look_puts_the_held_records_back() {
        // SAFETY: no entry points beyond the fakes' defaults.
        let driver = unsafe { fake_driver::driver(&[]) };
        let context = fake_driver::context(&driver);
        let progress = Arc::new(PanicsOnce(
            AtomicBool::new(false),
            Counter(AtomicU64::new(0)),
        ));
        let drops = Arc::new(AtomicUsize::new(0));
        let here = std::thread::current().id();
        hold_until(
            Arc::clone(&progress) as Arc<dyn Progress>,
            Arc::clone(&context),
            1,
            Dropped(Arc::clone(&drops), here),
        );
        let unwound = std::panic::catch_unwind(|| release_passed(Look::Fresh));
        assert!(unwound.is_err(), "the look panicked");
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "not dropped before its point"
        );
        crate::launch::reclaim();
        assert_eq!(drops.load(Ordering::SeqCst), 0, "still held");
        assert!(anything_held());
        progress.1.0.store(1, Ordering::SeqCst);
        crate::launch::reclaim();
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "dropped once its point passed"
        );
        assert!(!anything_held());
    }

    /// A drain whose look at one sequence unwinds after it handed another sequence's passed
    /// records on: the records it handed on are no longer held, and the thread's count (and the
    /// process's) says so, so that once the rest passed the thread holds nothing.
    #[test]
    fn a_drain_that_unwinds_after_handing_records_on_counts_them_released() {
        // SAFETY: no entry points beyond the fakes' defaults.
        let driver = unsafe { fake_driver::driver(&[]) };
        let context = fake_driver::context(&driver);
        let passed = Arc::new(Counter(AtomicU64::new(1)));
        let panics = Arc::new(PanicsOnce(
            AtomicBool::new(false),
            Counter(AtomicU64::new(0)),
        ));
        let drops = Arc::new(AtomicUsize::new(0));
        let here = std::thread::current().id();
        // The first queue's record is passed already; the second queue's look panics.
        hold_until(
            Arc::clone(&passed) as Arc<dyn Progress>,
            Arc::clone(&context),
            1,
            Dropped(Arc::clone(&drops), here),
        );
        hold_until(
            Arc::clone(&panics) as Arc<dyn Progress>,
            Arc::clone(&context),
            1,
            Dropped(Arc::clone(&drops), here),
        );
        let unwound = std::panic::catch_unwind(|| release_passed(Look::Fresh));
        assert!(unwound.is_err(), "the second look panicked");
        panics.1.0.store(1, Ordering::SeqCst);
        crate::launch::reclaim();
        assert_eq!(drops.load(Ordering::SeqCst), 2, "both dropped");
        assert_eq!(
            HELD.with(|held| held.count.get()),
            0,
            "the thread's count of held records after both were dropped"
        );
        assert!(!anything_held(), "nothing held once both were dropped");
    }

    #[test]
    fn a_keyed_hold_extends_the_newest_record_of_its_key_and_no_other() {
        // SAFETY: no entry points beyond the fakes' defaults.
        let driver = unsafe { fake_driver::driver(&[]) };
        let context = fake_driver::context(&driver);
        let counter = Arc::new(Counter(AtomicU64::new(0)));
        let progress: Arc<dyn Progress> = counter.clone();
        let drops = Arc::new(AtomicUsize::new(0));
        let here = std::thread::current().id();
        let made = AtomicUsize::new(0);
        let hold = |point, key| {
            hold_or_extend(&progress, &context, point, key, || {
                made.fetch_add(1, Ordering::SeqCst);
                Dropped(Arc::clone(&drops), here)
            })
        };
        hold(1, 7);
        hold(2, 7);
        assert_eq!(
            made.load(Ordering::SeqCst),
            1,
            "the record of point 1 now lasts to 2"
        );
        hold_until(
            Arc::clone(&progress),
            Arc::clone(&context),
            3,
            Dropped(Arc::clone(&drops), here),
        );
        hold(4, 7);
        assert_eq!(
            made.load(Ordering::SeqCst),
            2,
            "another record came between"
        );
        hold(5, 8);
        assert_eq!(made.load(Ordering::SeqCst), 3, "another key");
        counter.0.store(1, Ordering::SeqCst);
        crate::launch::reclaim();
        assert_eq!(drops.load(Ordering::SeqCst), 0, "held until point 2");
        counter.0.store(3, Ordering::SeqCst);
        crate::launch::reclaim();
        assert_eq!(drops.load(Ordering::SeqCst), 2);
        counter.0.store(5, Ordering::SeqCst);
        crate::launch::reclaim();
        assert_eq!(drops.load(Ordering::SeqCst), 4);
        assert!(!anything_held());
    }
}

//! The watcher: one process-wide thread that wakes the futures of stream points.
//!
//! Futures that are not ready register their waker here, grouped by track, ordered by point.
//! The thread looks at each track that futures wait on (one query, of the event of the earliest
//! point waited for, often answers for many futures of that stream), wakes those whose point was
//! passed (or whose context failed), and forgets them. Its pace: it looks every `WATCH_LOOK`
//! (50 µs) while there was progress (a wake or a registration) in the last millisecond, then in
//! growing sleeps (up to a millisecond) while futures still wait, and parks once none has waited
//! for `LINGER`. It sleeps between looks rather than spin: a spinning thread slowed the threads
//! enqueuing work. A registration unparks it only when it finds it parked (the idle-to-active
//! transition); others just ask it, through a flag, to look often again. Wakers are called on
//! this thread, outside the lock, each under `catch_unwind`; its log calls catch a panicking
//! logger, and each of its rounds runs under `catch_unwind` too, so that nothing ends the thread:
//! a round that panicked leaves the registry as it was at each step (a waker taken from it is
//! counted off at once, and woken by the next round).
//!
//! The thread looks at a track only under the lock, while a future of it is registered: that
//! future holds the context, which keeps the track's events, and cannot take its registration
//! back (`forget`) meanwhile. The thread never holds a context itself, so no context is
//! released here.

use crate::contained_log::logged;
use crate::error::Result;
use crate::launch::{dispose_panic, has_failed};
use crate::own_thread::OwnThread;
use crate::points::tracks::{Pace, Track, WATCH_LOOK};
use crate::sync::lock;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::{Duration, Instant};

/// The futures waiting on one track.
struct Waiting {
    track: Arc<Track>,
    /// Its context (`CUcontext` address), for the failure check.
    context: usize,
    /// (point, registration id), earliest point first; entries of forgotten ids are skipped.
    order: BinaryHeap<Reverse<(u64, u64)>>,
    /// Registration id to its point and waker.
    wakers: HashMap<u64, (u64, Waker), BuildHasherDefault<IdHasher>>,
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

impl Waiting {
    /// Moves the wakers whose point was passed (all, if the context failed) to `woken`, counting
    /// each off `live` as it goes.
    fn take_passed(&mut self, woken: &mut Vec<Waker>, live: &mut usize) {
        let Some(&Reverse((first, _))) = self.order.peek() else {
            return;
        };
        let passed = self.track.look_for(first, Pace::Watcher);
        let mut failed = None;
        while let Some(&Reverse((point, id))) = self.order.peek() {
            if point > passed && !*failed.get_or_insert_with(|| has_failed(self.context)) {
                break;
            }
            self.order.pop();
            if let Some((_, waker)) = self.wakers.remove(&id) {
                woken.push(waker);
                *live -= 1;
            }
        }
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

#[derive(Default)]
struct Registry {
    waiting: Vec<Waiting>,
    next_id: u64,
    /// Registered wakers, over all tracks.
    live: usize,
    /// Set by the thread, under the lock, just before it parks for lack of work.
    parked: bool,
}

struct Watcher {
    registry: Mutex<Registry>,
    /// Asks the thread to look often again: a future just registered.
    fresh: AtomicBool,
    parks: AtomicU64,
}

static WATCHER: Watcher = Watcher {
    registry: Mutex::new(Registry {
        waiting: Vec::new(),
        next_id: 0,
        live: 0,
        parked: false,
    }),
    fresh: AtomicBool::new(false),
    parks: AtomicU64::new(0),
};

/// The thread, started by the first registration.
static THREAD: OwnThread = OwnThread::new("cuda-host-watch", run);

/// Starts the watcher thread unless it runs.
///
/// # Errors
/// [`Error::ThreadStart`](crate::Error::ThreadStart) when it cannot be started.
pub(super) fn ensure_running() -> Result<()> {
    THREAD.get().map(|_| ())
}

/// Registers `waker` for the point `point` of `track` (of the context `context`), or, with
/// `id` still registered, updates its waker. Returns the registration's id.
///
/// # Errors
/// [`Error::ThreadStart`](crate::Error::ThreadStart) when the watcher thread cannot be started:
/// nothing would wake the future.
pub(super) fn register(
    track: &Arc<Track>,
    context: usize,
    point: u64,
    waker: &Waker,
    id: Option<u64>,
) -> Result<u64> {
    let thread = THREAD.get()?;
    let mut registry = lock(&WATCHER.registry);
    let index = match registry
        .waiting
        .iter()
        .position(|waiting| Arc::ptr_eq(&waiting.track, track))
    {
        Some(index) => index,
        None => {
            registry.waiting.push(Waiting {
                track: Arc::clone(track),
                context,
                order: BinaryHeap::new(),
                wakers: HashMap::default(),
            });
            registry.waiting.len() - 1
        }
    };
    if let Some(id) = id
        && let Some((_, registered)) = registry.waiting[index].wakers.get_mut(&id)
    {
        let replaced =
            (!registered.will_wake(waker)).then(|| std::mem::replace(registered, waker.clone()));
        drop(registry);
        drop(replaced); // a waker's drop is the executor's code: not under the lock
        return Ok(id);
    }
    let id = registry.next_id;
    registry.next_id += 1;
    let waiting = &mut registry.waiting[index];
    waiting.order.push(Reverse((point, id)));
    waiting.wakers.insert(id, (point, waker.clone()));
    registry.live += 1;
    if registry.parked {
        registry.parked = false;
        drop(registry);
        thread.unpark();
    } else {
        drop(registry);
        WATCHER.fresh.store(true, Ordering::Relaxed);
    }
    Ok(id)
}

/// Takes back the registration `id` of `track`, if the watcher has not woken it yet.
pub(super) fn forget(track: &Arc<Track>, id: u64) {
    let mut registry = lock(&WATCHER.registry);
    let Some(index) = registry
        .waiting
        .iter()
        .position(|waiting| Arc::ptr_eq(&waiting.track, track))
    else {
        return;
    };
    let waiting = &mut registry.waiting[index];
    let Some((_, waker)) = waiting.wakers.remove(&id) else {
        return;
    };
    if waiting.wakers.is_empty() {
        registry.waiting.swap_remove(index);
    } else {
        waiting.compact();
    }
    registry.live -= 1;
    drop(registry);
    drop(waker);
}

/// Registered futures, whether the thread is parked, and how often it parked.
pub(super) fn counts() -> (usize, bool, u64) {
    let registry = lock(&WATCHER.registry);
    (
        registry.live,
        registry.parked,
        WATCHER.parks.load(Ordering::Relaxed),
    )
}

/// How long after the last progress (a wake or a registration) the thread looks every
/// `WATCH_LOOK`; after that it sleeps in growing steps, up to `LONGEST_SLEEP`.
const BUSY: Duration = Duration::from_millis(1);
const LONGEST_SLEEP: Duration = Duration::from_millis(1);
/// How long the thread stays up with nothing registered before it parks. Parking at once would
/// make a caller that makes a future every few microseconds (each passed before the next) pay
/// an unpark, a system call and a context switch, for each of them.
const LINGER: Duration = Duration::from_millis(2);

fn run() {
    let mut woken = Vec::new();
    let mut active_since = Instant::now();
    loop {
        let round = catch_unwind(AssertUnwindSafe(|| {
            look_and_wake(&mut woken, &mut active_since)
        }));
        if let Err(payload) = round {
            dispose_panic(payload);
            logged!(error!(
                "a round of the stream-point watcher panicked; the watcher goes on"
            ));
            // A round that panics again at once must not spin.
            std::thread::park_timeout(WATCH_LOOK);
        }
    }
}

/// One round of the watcher: a look at every track futures wait on, the wakes, then a park or a
/// sleep. Wakers taken from the registry wait in `woken` (they are counted off already) until
/// woken, by this round or, if it panicked, the next.
fn look_and_wake(woken: &mut Vec<Waker>, active_since: &mut Instant) {
    let quiet = active_since.elapsed();
    let parking = {
        let registry = &mut *lock(&WATCHER.registry);
        for waiting in &mut registry.waiting {
            waiting.take_passed(woken, &mut registry.live);
        }
        registry
            .waiting
            .retain(|waiting| !waiting.wakers.is_empty());
        // Set under the lock, as `register` reads it: a registration after this look either
        // finds the thread parked and unparks it, or is seen by the next look.
        registry.parked = registry.live == 0 && woken.is_empty() && quiet >= LINGER;
        if registry.parked {
            WATCHER.parks.fetch_add(1, Ordering::Relaxed);
        }
        registry.parked
    };
    let progressed = !woken.is_empty();
    for waker in woken.drain(..) {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| waker.wake())) {
            dispose_panic(payload);
            logged!(error!(
                "a waker of a stream point panicked; the watcher goes on"
            ));
        }
    }
    if parking {
        std::thread::park();
        *active_since = Instant::now();
        return;
    }
    if progressed || WATCHER.fresh.swap(false, Ordering::Relaxed) {
        *active_since = Instant::now();
    }
    // Sleeping, not spinning, between looks: while the watcher spun, a future point cost the
    // stream 0.6 µs more than a release point; a look more often than `WATCH_LOOK` would
    // query nothing anyway.
    let quiet = active_since.elapsed();
    std::thread::park_timeout(if quiet < BUSY {
        WATCH_LOOK
    } else {
        (quiet / 8).min(LONGEST_SLEEP)
    });
}

//! The watcher: one process-wide thread that wakes the futures of stream points, and the host
//! waiters of timelines (`crate::timeline`), which it looks at through [`Watched`].
//!
//! A future that is not ready registers its waker with its track (`Track::waiters`, ordered by
//! point), so that futures of different streams register without meeting. The first registration
//! on a track off the list puts the track on the watcher's list; the watcher takes it off once
//! no future has waited on it for `LINGER`, so that a stream whose futures are each woken soon
//! after they were made does not take the list's lock, shared by every stream and the thread,
//! for each of them. Each round, the thread looks at every listed track for the earliest
//! point waited for (one query while the stream has not got there; see `tracks` for what a look
//! that finds it passed queries), and wakes the futures whose point was passed (all of them, if
//! the context failed).
//!
//! **Pace.** While futures wait and points pass, the thread spins: a round every `LOOK_EVERY`
//! (5 µs), yielding the core between rounds, so that a point is seen passed within a few
//! microseconds of the stream passing it (a short sleep with Linux's default timer slack takes
//! 100 µs). The price is a core's worth of the thread's time, and the queries it makes (one per
//! track with waiters per round, where a thread querying events nonstop slowed the enqueuing
//! thread by 1–2 µs an iteration on an H200): `benches/stream_points.rs` measures both. Once no
//! point passed for `SPIN_FOR` (1 ms) while futures wait (long GPU work), it sleeps between
//! rounds, in pauses of `LONGEST_PAUSE` (50 µs), with its timer slack at the least the OS allows
//! (a sleep of 50 µs with Linux's default slack, 50 µs, lasts about 100), and is seen passed
//! within about a pause, which lengthens where a look and a sleep's wake cost it more than a ninth
//! of that (a host whose wakes cost more, many tracks to look at), up to 1 ms (`crate::pause`):
//! a long wait costs about a tenth of a core, unless a look at hundreds of streams costs over a
//! ninth of 1 ms. [`WatcherPace`] lets the
//! user choose spinning instead (a core while futures wait, the soonest wakes) or the OS's
//! default slack (half the wakes, twice the latency). Once no future has
//! waited for `LINGER` (1 ms), it parks and uses nothing (or, with only dropped timelines listed
//! that streams may still read, rests until the next look one needs: `Due`); a registration
//! that puts a track on the list finds it parked and unparks it (the idle-to-active transition
//! only: other registrations touch nothing shared beyond their track, but for the pace's hint
//! `REFILLED`, which the first of them in a round sets).
//!
//! **Threads.** Wakers are called on this thread, outside every lock, each under
//! `catch_unwind`; its log calls catch a panicking logger, and each of its rounds runs under
//! `catch_unwind` too, so that nothing ends the thread: a round that panicked leaves the list
//! and each track's waiters as they were at each step (a waker taken from its track is woken by
//! that round or, if it panicked, the next).
//!
//! The thread looks at a track without holding the lock of its waiters or the list, so that
//! registrations do not wait for its queries, and a logger its look calls may call cuda-host
//! (a logger is user code). It holds no context: a context's tracks, when dropped,
//! wait for a look under way and keep later ones from querying their events (`tracks`), so no
//! context is released here and no event is queried after its destruction.

use crate::contain::{dispose, logged};
use crate::error::Result;
use crate::launch::{Look, seen_failed};
use crate::observe::{self, Points};
use crate::own_thread::OwnThread;
use crate::pause::{Slack, SleepCost, set_timer_slack};
use crate::sync::lock;
use crate::tracks::track::Track;
use crate::tracks::waiters::Registration;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::{Duration, Instant};

/// How often the thread looks while futures wait.
const LOOK_EVERY: Duration = Duration::from_micros(5);
/// How often it looks while futures wait at [`WatcherPace::Spinning`]: the user chose a core
/// for the soonest wakes, and pays for the queries too.
const LOOK_EVERY_SPINNING: Duration = Duration::from_micros(1);
/// How long the thread goes on spinning once no future waits, before it parks: parking at once
/// would make a caller that awaits a future every few microseconds (each passed soon after it
/// was made) pay an unpark, a system call and a context switch, for each of them.
const LINGER: Duration = Duration::from_millis(1);
/// How long the thread spins while futures wait and no point passed, before it sleeps between
/// rounds.
const SPIN_FOR: Duration = Duration::from_millis(1);
/// The sleep between two rounds while futures wait, where a round and a sleep's wake cost the
/// thread at most a ninth of it (about 5 µs of CPU on an H100's host; longer where they cost
/// more: `crate::pause`).
const LONGEST_PAUSE: Duration = Duration::from_micros(50);

/// How the watcher waits while futures (and timelines' host waiters) wait for points that have
/// not passed, set with [`set_watcher_pace`](crate::points::set_watcher_pace). Whatever the
/// pace, the watcher spins while points pass and parks once nothing waits; measured costs are in
/// `docs/PERFORMANCE.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum WatcherPace {
    /// Once no point passed for 1 ms, sleeps between looks, in pauses of 50 µs, with the
    /// thread's timer slack at its least, or longer where a look and a sleep's wake cost the
    /// thread more than a ninth of that (up to 1 ms): about a tenth of a core while futures
    /// wait (more where a look takes over 110 µs, at hundreds of streams waited on), a wake
    /// within about a pause of the point's passing.
    #[default]
    Balanced,
    /// Looks every microsecond while anything waits, however long: a core's worth of the
    /// thread's time (yielding between looks) and its queries (one per stream waited on per
    /// look, which slow threads enqueuing on those streams), for the soonest wakes after short
    /// and long waits alike.
    Spinning,
    /// As [`Balanced`](WatcherPace::Balanced), with Linux's default timer slack (50 µs, whichever
    /// thread started the watcher), which lengthens each pause by up to that much: about half the CPU time, twice the wake
    /// latency after a long wait.
    Frugal,
}

/// The pace, as its discriminant.
static PACE: AtomicU8 = AtomicU8::new(WatcherPace::Balanced as u8);

/// Sets the watcher's pace (`crate::points::set_watcher_pace` documents it).
pub(crate) fn set_pace(pace: WatcherPace) {
    PACE.store(pace as u8, Ordering::Relaxed);
}

/// The watcher's pace now.
pub(crate) fn pace() -> WatcherPace {
    match PACE.load(Ordering::Relaxed) {
        value if value == WatcherPace::Spinning as u8 => WatcherPace::Spinning,
        value if value == WatcherPace::Frugal as u8 => WatcherPace::Frugal,
        _ => WatcherPace::Balanced,
    }
}

struct Watcher {
    listed: Mutex<Listed>,
    parks: AtomicU64,
    /// Rests between looks at dropped timelines, each ended by a look (or a registration).
    rests: AtomicU64,
    /// Sleeps between looks while something waits.
    sleeps: AtomicU64,
}

/// The tracks futures wait on, and the thread's state.
struct Listed {
    tracks: Vec<Arc<Track>>,
    /// What else waits: timelines with host waiters, or streams still reading an abandoned one.
    others: Vec<Arc<dyn Watched>>,
    /// Set by the thread, under the lock, just before it parks for lack of work; cleared by the
    /// registration that unparks it.
    parked: bool,
    /// Set by a registration that put a track on the list: the thread spins again, since that
    /// stream's point may be close.
    fresh: bool,
}

/// Set, as `Listed::fresh`, by a registration on a listed track that no future waited on: one
/// that takes no lock of the list.
static REFILLED: AtomicBool = AtomicBool::new(false);

static WATCHER: Watcher = Watcher {
    listed: Mutex::new(Listed {
        tracks: Vec::new(),
        others: Vec::new(),
        parked: false,
        fresh: false,
    }),
    parks: AtomicU64::new(0),
    rests: AtomicU64::new(0),
    sleeps: AtomicU64::new(0),
};

/// The thread, started by the first registration.
static THREAD: OwnThread = OwnThread::new("cuda-host-watch", run);

/// Starts the watcher thread unless it runs.
///
/// # Errors
/// [`Error::ThreadStart`](crate::Error::ThreadStart) when it cannot be started.
pub(crate) fn ensure_running() -> Result<()> {
    THREAD.get().map(|_| ())
}

/// Something besides a track that the watcher looks at each round while it is listed: a
/// timeline (`crate::timeline`). It keeps its own waiters and its own "listed" flag under its own
/// lock, as a track does: the registration that finds it unlisted sets the flag and calls
/// [`watch`]; [`Watched::unlist_if_idle`], called under the list's lock, clears it.
pub(crate) trait Watched: Send + Sync {
    /// Looks (without the list's lock), moving the wakers now due to `woken`, and says when it
    /// needs the next look. May log: never under a lock of its own a logger's call back into
    /// cuda-host would take.
    fn look(&self, woken: &mut Vec<Waker>) -> Due;
    /// Whether it needs no more looks, in which case it counts as unlisted from now on (a later
    /// registration lists it again). Called under the list's lock.
    fn unlist_if_idle(&self) -> bool;
    /// How many wait on it.
    fn waiting(&self) -> usize;
}

/// When something the watcher looks at ([`Watched`]) needs its next look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Due {
    /// At the watcher's pace: something waits on it.
    Soon,
    /// Within this long: nothing waits on it, but it keeps a value a stream may still change.
    /// With nothing else to do, the thread rests this long (counted parked), and a registration
    /// wakes it as from a park.
    Within(Duration),
}

/// Puts `watched`, which was unlisted and now set its flag, on the list, and wakes the thread if
/// it parked.
///
/// # Errors
/// [`Error::ThreadStart`](crate::Error::ThreadStart) when the watcher thread cannot be started.
pub(crate) fn watch(watched: Arc<dyn Watched>) -> Result<()> {
    let thread = THREAD.get()?;
    let mut listed = lock(&WATCHER.listed);
    listed.others.push(watched);
    listed.fresh = true;
    if std::mem::replace(&mut listed.parked, false) {
        drop(listed);
        thread.unpark();
    }
    Ok(())
}

/// Registers `waker` for the point `point` of `track`, or, with `registration` still
/// registered, updates its waker. Returns the registration.
///
/// # Errors
/// [`Error::ThreadStart`](crate::Error::ThreadStart) when the watcher thread cannot be started:
/// nothing would wake the future.
pub(crate) fn register(
    track: &Arc<Track>,
    point: u64,
    waker: &Waker,
    registration: Option<Registration>,
) -> Result<Registration> {
    let thread = THREAD.get()?;
    // A waker's clone and its drop are the executor's code, which may call cuda-host: neither
    // under the lock.
    let mut waker = waker.clone();
    let mut waiters = lock(&track.waiters);
    if let Some(registration) = registration {
        match waiters.update(registration, waker) {
            Ok(let_go) => {
                drop(waiters);
                drop(let_go);
                return Ok(registration);
            }
            Err(unused) => waker = unused,
        }
    }
    let refilled = waiters.is_empty() && waiters.listed;
    let registration = waiters.insert(point, waker);
    waiters.empty_since = None;
    let unlisted = !std::mem::replace(&mut waiters.listed, true);
    if unlisted {
        track.set_watched(true);
    }
    drop(waiters);
    // A hint for the thread's pace: read first, so that registrations write the line only
    // once a round.
    if refilled && !REFILLED.load(Ordering::Relaxed) {
        REFILLED.store(true, Ordering::Relaxed);
    }
    if unlisted {
        let mut listed = lock(&WATCHER.listed);
        listed.tracks.push(Arc::clone(track));
        listed.fresh = true;
        if std::mem::replace(&mut listed.parked, false) {
            drop(listed);
            thread.unpark();
        }
    }
    Ok(registration)
}

/// Takes back `registration` of `track`, if the watcher has not woken it yet.
pub(crate) fn forget(track: &Track, registration: Registration) {
    let waker = lock(&track.waiters).remove(registration);
    drop(waker);
}

/// Registered futures, whether the thread is parked, and how often it parked and rested.
pub(crate) fn counts() -> Counts {
    let listed = lock(&WATCHER.listed);
    let waiting = listed
        .tracks
        .iter()
        .map(|track| lock(&track.waiters).len())
        .chain(listed.others.iter().map(|other| other.waiting()))
        .sum();
    Counts {
        waiting,
        parked: listed.parked,
        parks: WATCHER.parks.load(Ordering::Relaxed),
        rests: WATCHER.rests.load(Ordering::Relaxed),
        sleeps: WATCHER.sleeps.load(Ordering::Relaxed),
    }
}

/// The watcher's counts (`crate::points::StreamPointCounts` says what each is).
pub(crate) struct Counts {
    pub(crate) waiting: usize,
    pub(crate) parked: bool,
    pub(crate) parks: u64,
    pub(crate) rests: u64,
    pub(crate) sleeps: u64,
}

/// What the thread does after a round.
enum Next {
    /// Looks again after this pause: spinning (yielding the core) up to `LOOK_EVERY`, sleeping
    /// beyond.
    Look(Duration),
    /// Parks until a registration unparks it.
    Park,
    /// Parks until a registration unparks it or this long passed, whichever is first.
    Rest(Duration),
}

fn run() {
    let mut looked = Vec::new();
    let mut others = Vec::new();
    let mut woken = Vec::new();
    let mut active = Instant::now();
    let mut progress = Instant::now();
    let mut slack = None;
    let mut sleep_cost = SleepCost::default();
    loop {
        let pace = pace();
        if slack != Some(pace) {
            set_timer_slack(if pace == WatcherPace::Frugal {
                Slack::Default
            } else {
                Slack::Least
            });
            slack = Some(pace);
        }
        let round_began = Instant::now();
        let round = || {
            look_and_wake(
                &mut looked,
                &mut others,
                &mut woken,
                &mut active,
                &mut progress,
            )
        };
        let next = catch_unwind(AssertUnwindSafe(round));
        if !matches!(next, Ok(Next::Look(pause)) if pause > LOOK_EVERY) {
            sleep_cost.interrupted();
        }
        match next {
            Ok(Next::Look(pause)) if pause <= LOOK_EVERY => {
                while round_began.elapsed() < pause {
                    std::thread::yield_now();
                }
            }
            Ok(Next::Look(pause)) => {
                WATCHER.sleeps.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(sleep_cost.pause(pause));
            }
            Ok(Next::Park) => std::thread::park(),
            Ok(Next::Rest(pause)) => std::thread::park_timeout(pause),
            Err(payload) => {
                dispose(payload);
                logged!(error!(
                    "a round of the stream-point watcher panicked; the watcher goes on"
                ));
                // A round that panics again at once must not spin.
                std::thread::park_timeout(LOOK_EVERY);
            }
        }
    }
}

/// One round of the watcher: a look at every listed track, the wakes, and whether to park.
/// The looks are made on `looked`, a copy of the list, without holding it: a look may log, and a
/// logger may call cuda-host (`stream_point_counts`, a registration) on this thread. Wakers taken from their tracks wait in `woken` until woken, by this round or,
/// if it panicked, the next. `active` is when a future last waited, `progress` when a point
/// was last seen passed.
fn look_and_wake(
    looked: &mut Vec<Arc<Track>>,
    others: &mut Vec<Arc<dyn Watched>>,
    woken: &mut Vec<Waker>,
    active: &mut Instant,
    progress: &mut Instant,
) -> Next {
    {
        let listed = lock(&WATCHER.listed);
        looked.extend(listed.tracks.iter().cloned());
        others.extend(listed.others.iter().cloned());
    }
    for track in looked.drain(..) {
        take_passed(&track, woken);
    }
    // The earliest look a listed value needs, if none needs one soon.
    let mut rest: Option<Duration> = None;
    let mut soon = false;
    for other in others.drain(..) {
        match other.look(woken) {
            Due::Soon => soon = true,
            Due::Within(pause) => rest = Some(rest.map_or(pause, |rest| rest.min(pause))),
        }
    }
    let next = {
        let listed = &mut *lock(&WATCHER.listed);
        let now = Instant::now();
        let mut waiting = false;
        listed.tracks.retain(|track| {
            let mut waiters = lock(&track.waiters);
            if !waiters.is_empty() {
                waiting = true;
                return true;
            }
            let since = *waiters.empty_since.get_or_insert(now);
            if now.duration_since(since) < LINGER {
                return true;
            }
            // Under both locks: a registration after this finds the track off the list and
            // puts it back on.
            waiters.listed = false;
            waiters.empty_since = None;
            track.set_watched(false);
            false
        });
        listed.others.retain(|other| !other.unlist_if_idle());
        let refilled = REFILLED.load(Ordering::Relaxed);
        if refilled {
            REFILLED.store(false, Ordering::Relaxed);
        }
        // A value listed since the looks began has not been looked at: it counts as due soon.
        let fresh = std::mem::take(&mut listed.fresh);
        if !woken.is_empty() || fresh || refilled {
            *progress = now;
        }
        // Every value left listed was looked at (a fresh one makes `soon`): `rest` is set when
        // any is, unless one needs a look soon.
        let soon = soon || fresh;
        let rest = rest.filter(|_| !soon && !listed.others.is_empty());
        let next = if waiting || soon || !woken.is_empty() {
            *active = now;
            let quiet = now.duration_since(*progress);
            Next::Look(if pace() == WatcherPace::Spinning {
                LOOK_EVERY_SPINNING
            } else if quiet < SPIN_FOR {
                LOOK_EVERY
            } else {
                (quiet / 16).clamp(LOOK_EVERY * 2, LONGEST_PAUSE)
            })
        } else if active.elapsed() < LINGER || !listed.tracks.is_empty() {
            // Tracks no future waits on stay listed for `LINGER`, and the thread parks only
            // with none listed: a registration on a listed track does not unpark it.
            Next::Look(LOOK_EVERY)
        } else {
            // Set under the lock, as `register` reads it: a registration after this look
            // either finds the thread parked and unparks it, or is seen by the next look.
            if !std::mem::replace(&mut listed.parked, true) {
                WATCHER.parks.fetch_add(1, Ordering::Relaxed);
            }
            match rest {
                Some(pause) => {
                    WATCHER.rests.fetch_add(1, Ordering::Relaxed);
                    Next::Rest(pause)
                }
                None => Next::Park,
            }
        };
        if let Next::Look(_) = next {
            // Woken by a rest's end (or spuriously), not by a registration.
            listed.parked = false;
        }
        next
    };
    observe::points_passed(Points::Future, woken.len());
    for waker in woken.drain(..) {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| waker.wake())) {
            dispose(payload);
            logged!(error!(
                "a waker of a stream point panicked; the watcher goes on"
            ));
        }
    }
    next
}

/// Moves the wakers of `track`'s futures whose point was passed (all, if the context failed) to
/// `woken`. The look holds no lock of the track's waiters, so that registrations on the track
/// do not wait for its queries; a look at a track whose context is gone queries nothing
/// (`tracks`).
fn take_passed(track: &Track, woken: &mut Vec<Waker>) {
    let Some(first) = lock(&track.waiters).first() else {
        return;
    };
    let passed = track.look_for(first, Look::Fresh);
    // A future woken for its context's failure looks again itself (`Mark::outcome`).
    let failed = first > passed && seen_failed(track.context());
    lock(&track.waiters).take_up_to(passed, failed, woken);
}

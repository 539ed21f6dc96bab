//! What the watcher looks at for a timeline (`crate::points`' watcher, through [`Watched`]): its
//! host waiters, ordered by the value they wait for, and, once the last handle is gone, the
//! streams that may still read the word.
//!
//! **Host waiters.** A future ([`Reached`](super::Reached)) that finds the value short registers
//! its waker here; the first registration lists the timeline with the watcher, which each round
//! reads the word and wakes the waiters whose value it reached, and all of them once cuda-host
//! saw the context fail. A host [`signal`](super::Timeline::signal) wakes those it satisfied
//! itself, on its own thread, without waiting for a round.
//!
//! **Learning a failure.** A stream whose context failed never signals again. Each stream
//! operation on the timeline marks a stream point after it (`super::enqueue`); while host
//! waiters wait, the watcher looks at the last of these on each stream (paced, at most every
//! 50 µs), and a look whose query answers the context's sticky error records the failure, as
//! any look at stream points does.
//!
//! **Abandoned.** Once the last handle is gone, the value was raised to its release value
//! (`super::Shared`'s drop), but a stream's signal enqueued earlier is a store, not a maximum: it
//! may land later and lower it again, under a wait that no handle can release any more. So the
//! timeline stays listed, and each look raises the value back to the release value, until every
//! stream passed its last operation on it (or that stream's own context failed: a failure of the
//! timeline's context stops none of another context's streams). On a narrow timeline (32-bit
//! waits, which compare cyclically) no value may release every wait a stream has yet to pass:
//! one 2^31 or more past a wait holds it again. The waits then take turns
//! (`State::raise_abandoned`), each of at least `TURN` (2.56 ms), ending on the same grid as the
//! pauses below. Nothing waits on the host, and a stream may stay alive, idle, for
//! long after an operation no look sees passed (one refused after it reached the stream): the
//! watcher looks at an abandoned timeline after pauses that grow to `LONGEST_PAUSE` (20.48 ms)
//! while its value stays where it was set, and rests between (`Due::Within`), rather than looking
//! at its own pace for the stream's whole life.
//!
//! **Streams noted.** Each stream operation notes its stream's track and the point marked after
//! it; a stream seen past its last operation (by the drain that let go of the word's hold, a
//! synchronize, the watcher) is forgotten at the next note, so that a timeline that outlives
//! streams, and the context values whose tracks served them, holds only those that may still
//! read it (counted in `metrics().timelines()`).
//!
//! The word's memory belongs to [`Word`](super::word::Word), which closes this value before it
//! frees it: the watcher reads the word only under this value's lock, and never after the close.
//! A kept word, never freed, is not closed while streams may still read it: an operation refused
//! after it reached its stream leaves no hold on the word, and its stream may need the turns
//! after the last hold went.
//! Nothing here owns driver objects, so the watcher may drop its references to this value.

use crate::contain::{dispose, logged};
use crate::launch::{Look, has_failed, seen_failed};
use crate::sync::lock;
use crate::timeline::NARROW_WINDOW;
use crate::tracks::{Due, Registration, Track, Waiters, Watched, watch};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Waker;
use std::time::{Duration, Instant};

/// A stream's last operation on the timeline: its track, the point marked after it, and the
/// stream's context (`CUcontext` address), which may be another than the timeline's.
pub(super) type StreamUse = (Arc<Track>, u64, usize);

/// A wait of a narrow timeline's stream not seen passed: as [`StreamUse`], with the value its
/// 32 bits compare.
struct NarrowWait {
    track: Arc<Track>,
    point: u64,
    context: usize,
    value: u64,
}

/// What the last handle's drop left the watcher to keep.
struct Abandoned {
    /// The value the word is kept at: [`MAX`](super::MAX), or, on a narrow timeline, the highest
    /// a wait was enqueued for.
    release: u64,
    /// The value the word was last set to (the highest, while it only rises): found lower, a
    /// stream's signal lowered it.
    set: u64,
    /// While the waits take turns: the turn under way.
    turn: Option<Turn>,
    /// How long the watcher may wait between two looks ([`FIRST_PAUSE`]), and when the next is
    /// due.
    pause: Duration,
    due: Instant,
    /// Looks after the longest pause, counted for [`State::streams_due`].
    quiet_looks: u32,
}

/// How long each group of a narrow timeline's waits holds the word while they take turns, at
/// least: longer than a device takes to read a word it waits on (the software driver reads it
/// at least every millisecond). A turn ends on the epoch's grid ([`due_after`]) of this or of
/// the watcher's pause if that is longer (2^6 times the first pause, so that every grid nests
/// in the finer ones): the turns of timelines dropped at different times end together, and a
/// turn lasts at most this plus the longest pause (23.04 ms).
const TURN: Duration = Duration::from_micros(40 << 6);

/// A turn of one window of a narrow timeline's waits (`State::raise_abandoned`).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Turn {
    /// The window's lowest wait when its turn began, which the next turn goes up from.
    low: u64,
    /// The value the word takes for it: the window's top, or the release value if lower.
    target: u64,
    ends: Instant,
}

/// The windows of `waits` (ascending), each told by its lowest wait: from the lowest, a window
/// holds every wait below its lowest plus 2^31, which one value releases.
fn windows_of(waits: &[u64]) -> Vec<u64> {
    let mut windows: Vec<u64> = Vec::new();
    for &wait in waits {
        if windows
            .last()
            .is_none_or(|&low| wait >= low + NARROW_WINDOW)
        {
            windows.push(wait);
        }
    }
    windows
}

/// Whether a narrow device, comparing the low 32 bits cyclically, releases a wait for `wait`
/// at `value`.
fn releases(value: u64, wait: u64) -> bool {
    // Truncated on purpose: the device compares the low words.
    (value as u32).wrapping_sub(wait as u32) < 1 << 31
}

/// The turn after `turn` at `now`, of the pending `waits` and their `windows` ([`windows_of`]),
/// whose values `top` gives. The turn under way goes on while it lasts and its value still
/// releases a pending wait: waits seen passed leave the list, which may regroup the windows and
/// change their values, but never stops the value of the turn releasing the waits it released.
/// A look that found a stream's signal `lowered` the value (set one that holds a wait the turn
/// released) gives that turn its time again, from now. Else the next window up from the turn's with a wait it did not release has
/// its turn (waits it released, regrouped into a window of their own, have had theirs), round
/// from the lowest. A turn lasts [`TURN`] at least and ends on the epoch's grid of `pause` or of
/// [`TURN`], the longer (of [`TURN`] after a lowering, which starts the pauses again), so that
/// the turns of timelines dropped at different times end together.
fn next_turn(
    turn: Option<Turn>,
    waits: &[u64],
    windows: &[u64],
    top: impl Fn(u64) -> u64,
    now: Instant,
    pause: Duration,
    lowered: bool,
) -> Turn {
    let grid = if lowered { TURN } else { pause.max(TURN) };
    let goes_on = turn.filter(|turn| {
        (now < turn.ends || lowered) && waits.iter().any(|&wait| releases(turn.target, wait))
    });
    if let Some(turn) = goes_on {
        return if lowered {
            Turn {
                ends: due_after(now + TURN, grid),
                ..turn
            }
        } else {
            turn
        };
    }
    let low = match turn {
        Some(turn) => {
            let unreleased = |at: usize| {
                let end = windows.get(at + 1).copied().unwrap_or(u64::MAX);
                waits
                    .iter()
                    .any(|&wait| (windows[at]..end).contains(&wait) && !releases(turn.target, wait))
            };
            (0..windows.len())
                .find(|&at| windows[at] > turn.low && unreleased(at))
                .or_else(|| (0..windows.len()).find(|&at| unreleased(at)))
                .map_or(windows[0], |at| windows[at])
        }
        None => windows[0],
    };
    Turn {
        low,
        target: top(low),
        ends: due_after(now + TURN, grid),
    }
}

/// The watcher's first pause between two looks at an abandoned timeline (and after each look that
/// found its value lowered), doubled after each look that found it where it was set, up to
/// [`LONGEST_PAUSE`]: a stream that stays alive, idle, after an operation no look sees passed
/// (refused after it reached the stream) keeps the timeline listed for the stream's whole life,
/// and looks at the watcher's pace would cost a share of a core all that while.
const FIRST_PAUSE: Duration = Duration::from_micros(40);
/// The longest pause between two such looks (2^9 times the first, 20.48 ms): how long a wait may
/// stay held by a stream's signal that landed after the last handle went, before the value is
/// raised again (while waits take turns, until the turn under way ends: [`TURN`] more at most,
/// and the lowered window has its turn again); and, with [`TURN`], how long a turn may last.
const LONGEST_PAUSE: Duration = Duration::from_micros(40 << 9);

/// After the longest pause, one look in this many looks at the streams too (about every 100 ms).
const STREAMS_EVERY: u32 = 5;

/// Where the looks' times are counted from: a look after a pause is due at a multiple of the
/// pause since, so that the looks at timelines dropped at different times, their pauses grown
/// alike, fall due together and the watcher wakes once for them all.
static EPOCH: OnceLock<Instant> = OnceLock::new();

/// The first multiple of `pause` since [`EPOCH`] after `now`.
fn due_after(now: Instant, pause: Duration) -> Instant {
    let epoch = *EPOCH.get_or_init(Instant::now);
    let pause_nanos = pause.as_nanos().max(1);
    let pauses = now.saturating_duration_since(epoch).as_nanos() / pause_nanos + 1;
    epoch + Duration::from_nanos(u64::try_from(pauses * pause_nanos).unwrap_or(u64::MAX))
}

/// Streams noted over every timeline (`State::streams`), for [`timeline_counts`](
/// super::timeline_counts).
pub(super) static NOTED_STREAMS: AtomicU64 = AtomicU64::new(0);

pub(super) struct Waits {
    /// The context (`CUcontext` address).
    context: usize,
    state: Mutex<State>,
    /// How many host waiters are registered, read by signals without the lock.
    waiting: AtomicUsize,
}

struct State {
    waiters: Waiters,
    /// The word, until the memory goes (then null).
    word: *const AtomicU64,
    /// Each stream's last operation on the timeline, as far as not seen passed.
    streams: Vec<StreamUse>,
    /// The waits of a narrow timeline not seen passed (none on a wide one).
    narrow_waits: Vec<NarrowWait>,
    /// Once the last handle is gone, while streams may read the word: what it is kept at.
    abandoned: Option<Abandoned>,
}

// SAFETY: the word is pinned memory any thread may access atomically, read only under the lock
// while the memory lives (`close`).
unsafe impl Send for State {}

impl State {
    /// Forgets the streams seen past their last operation on the word, or whose context failed,
    /// without looking: what looks at their tracks saw (a drain's, which lets go of the word's
    /// hold, a synchronize's, the watcher's).
    fn forget_streams_done(&mut self) {
        let noted = self.streams.len();
        self.streams
            .retain(|(track, point, context)| !is_done(track, *point, *context));
        NOTED_STREAMS.fetch_sub((noted - self.streams.len()) as u64, Ordering::Relaxed);
        self.narrow_waits
            .retain(|wait| !is_done(&wait.track, wait.point, wait.context));
    }

    /// Keeps the word of an abandoned timeline where it releases the waits streams may still
    /// read. On a wide timeline, and while the narrow waits not seen passed fit in one window
    /// (from the lowest, `v`, to `v + 2^31 − 1`, which the value has not left behind already), it
    /// raises the word to the release value, or to the window's top if that is lower. Waits
    /// spread wider than a window take turns: they fall into windows, and for a turn each the
    /// word takes the top of one, which releases every wait in it and none of another's. A stream
    /// passes its wait during that wait's turn, whether or not anything shows that it did (a
    /// capture other code began may have taken the track's word, after which no look sees its
    /// points pass while a wait holds the stream), so no order between the waits, nor any
    /// knowledge of which passed, is needed. Returns the value before, if a stream's signal had
    /// lowered it under the value last set. Nothing once the memory went.
    fn raise_abandoned(&mut self) -> Option<u64> {
        let abandoned = self.abandoned.as_mut()?;
        if self.word.is_null() {
            return None;
        }
        // SAFETY: the memory lives until `close`, which takes the lock the caller holds.
        let word = unsafe { &*self.word };
        let value = word.load(Ordering::Acquire);
        let mut waits: Vec<u64> = self.narrow_waits.iter().map(|wait| wait.value).collect();
        waits.sort_unstable();
        let windows = windows_of(&waits);
        let top = |low: u64| abandoned.release.min(low + NARROW_WINDOW - 1);
        let rise = match windows[..] {
            [] => Some(abandoned.release),
            [low] if value < low + NARROW_WINDOW => Some(top(low)),
            _ => None,
        };
        // While waits take turns, a stream's signal that landed late, lower or higher than the
        // value set, holds a wait the value released if its low word does.
        let held = value != abandoned.set
            && waits
                .iter()
                .any(|&wait| releases(abandoned.set, wait) && !releases(value, wait));
        let (before, set) = match rise {
            Some(target) => {
                abandoned.turn = None;
                let before = word.fetch_max(target, Ordering::AcqRel);
                (before, before.max(target))
            }
            None => {
                let turn = next_turn(
                    abandoned.turn,
                    &waits,
                    &windows,
                    top,
                    Instant::now(),
                    abandoned.pause,
                    held,
                );
                abandoned.turn = Some(turn);
                (word.swap(turn.target, Ordering::AcqRel), turn.target)
            }
        };
        let lowered = if rise.is_some() {
            before < abandoned.set
        } else {
            held
        };
        abandoned.set = set;
        lowered.then_some(before)
    }
}

impl State {
    /// How long the watcher may wait yet before it looks again at an abandoned timeline: `None`
    /// when the look is due (or host waiters wait, which an abandoned timeline has none of).
    fn resting(&self) -> Option<Duration> {
        let abandoned = self.abandoned.as_ref()?;
        if !self.waiters.is_empty() {
            return None;
        }
        let left = abandoned.due.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }

    /// Whether a look at an abandoned timeline looks at its streams too (to forget those that
    /// passed, and let the timeline go once none is left), or only keeps its value: the streams
    /// are looked at on every look until the pause reached its longest, then on one in
    /// [`STREAMS_EVERY`], so that timelines dropped while their streams work (or kept for idle
    /// ones) each cost the watcher an atomic read a look.
    fn streams_due(&mut self) -> bool {
        let Some(abandoned) = self.abandoned.as_mut() else {
            return true;
        };
        if abandoned.pause < LONGEST_PAUSE || abandoned.turn.is_some() {
            return true;
        }
        abandoned.quiet_looks = abandoned.quiet_looks.wrapping_add(1);
        abandoned.quiet_looks % STREAMS_EVERY == 0
    }

    /// When the watcher looks next, after a look: soon while host waiters wait; abandoned, after
    /// a pause that doubles with each look that found the value where it was set, from
    /// [`FIRST_PAUSE`] after one that found it `lowered`, or at the end of the turn while the
    /// waits take turns.
    fn next_look(&mut self, lowered: bool) -> Due {
        let Some(abandoned) = self.abandoned.as_mut() else {
            return Due::Soon;
        };
        if !self.waiters.is_empty() {
            return Due::Soon;
        }
        abandoned.pause = if lowered {
            FIRST_PAUSE
        } else {
            (abandoned.pause * 2).min(LONGEST_PAUSE)
        };
        let now = Instant::now();
        abandoned.due = match abandoned.turn {
            Some(turn) => turn.ends.max(now),
            None => due_after(now, abandoned.pause),
        };
        Due::Within(abandoned.due - now)
    }
}

/// Whether the stream of `track` is done with the word, as far as seen: past `point`, its last
/// operation on it, or its context (`CUcontext` address) failed. Without the fence of
/// `has_failed`: every operation asks, and a failure not seen yet is seen at a later look.
fn is_done(track: &Track, point: u64, context: usize) -> bool {
    track.seen_passed() >= point || seen_failed(context)
}

impl Drop for State {
    fn drop(&mut self) {
        NOTED_STREAMS.fetch_sub(self.streams.len() as u64, Ordering::Relaxed);
    }
}

impl Waits {
    pub(super) fn new(context: usize, word: *const AtomicU64) -> Waits {
        Waits {
            context,
            state: Mutex::new(State {
                waiters: Waiters::default(),
                word,
                streams: Vec::new(),
                narrow_waits: Vec::new(),
                abandoned: None,
            }),
            waiting: AtomicUsize::new(0),
        }
    }

    /// The context (`CUcontext` address).
    pub(super) fn context(&self) -> usize {
        self.context
    }

    /// Registers `waker` for `value` (or, with `registration` still registered, updates its
    /// waker), listing the timeline with the watcher if it was not. Returns the registration.
    ///
    /// # Errors
    /// [`Error::ThreadStart`](crate::Error::ThreadStart) when the watcher cannot start (the
    /// timeline's making started it, so only if it could not).
    pub(super) fn register(
        self: &Arc<Self>,
        value: u64,
        waker: &Waker,
        registration: Option<Registration>,
    ) -> crate::error::Result<Registration> {
        // A waker's clone and its drop are the executor's code, which may call cuda-host:
        // neither under the lock.
        let mut waker = waker.clone();
        let mut state = lock(&self.state);
        if let Some(registration) = registration {
            match state.waiters.update(registration, waker) {
                Ok(let_go) => {
                    drop(state);
                    drop(let_go);
                    return Ok(registration);
                }
                Err(unused) => waker = unused,
            }
        }
        let registration = state.waiters.insert(value, waker);
        // Sequentially consistent with a signal's raise and its read of the count: either the
        // signal sees this waiter, or the caller's look after this sees the signal's value.
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let unlisted = !std::mem::replace(&mut state.waiters.listed, true);
        drop(state);
        if unlisted {
            watch(Arc::clone(self) as Arc<dyn Watched>)?;
        }
        Ok(registration)
    }

    /// Takes back `registration`, if it was not woken yet.
    pub(super) fn forget(&self, registration: Registration) {
        let mut state = lock(&self.state);
        let waker = state.waiters.remove(registration);
        if waker.is_some() {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
        }
        drop(state);
        drop(waker);
    }

    /// Wakes the waiters of values up to `value`, on the calling thread: for a host signal. A
    /// waker that panics is reported, and the others are woken.
    pub(super) fn wake_up_to(&self, value: u64) {
        if self.waiting.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut woken = Vec::new();
        {
            let mut state = lock(&self.state);
            let before = state.waiters.len();
            state.waiters.take_up_to(value, false, &mut woken);
            self.waiting
                .fetch_sub(before - state.waiters.len(), Ordering::SeqCst);
        }
        wake_all(woken);
    }

    /// Notes the last operation of a stream of `context` (`CUcontext` address): its track and
    /// the point after it; for the abandoned timeline and for learning a failure. Streams seen
    /// done with the word since they were noted are forgotten first: a timeline that outlives
    /// streams, and context values whose tracks serve them, would otherwise note each for ever.
    /// `narrow_wait`: the value a narrow timeline's wait compares, for a wait.
    pub(super) fn note_stream(
        &self,
        track: Arc<Track>,
        point: u64,
        context: usize,
        narrow_wait: Option<u64>,
    ) {
        let mut state = lock(&self.state);
        state.forget_streams_done();
        if let Some(value) = narrow_wait {
            state.narrow_waits.push(NarrowWait {
                track: Arc::clone(&track),
                point,
                context,
                value,
            });
        }
        match state
            .streams
            .iter_mut()
            .find(|(known, _, _)| Arc::ptr_eq(known, &track))
        {
            Some(known) => known.1 = known.1.max(point),
            None => {
                state.streams.push((track, point, context));
                NOTED_STREAMS.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Whether any stream used the timeline and may not have passed its last operation yet (as
    /// far as seen).
    pub(super) fn streams_may_read(&self) -> bool {
        let mut state = lock(&self.state);
        state.forget_streams_done();
        !state.streams.is_empty()
    }

    /// The last handle is gone: keeps the word at `release` while streams may read it, set now
    /// as `State::raise_abandoned` does. Returns the value before and the value set, or `None`
    /// for it where the waits take turns.
    pub(super) fn abandon(self: &Arc<Self>, release: u64) -> (u64, Option<u64>) {
        let mut state = lock(&self.state);
        state.forget_streams_done();
        // SAFETY: the memory lives until `close`, which takes this lock.
        let before = unsafe { &*state.word }.load(Ordering::Acquire);
        state.abandoned = Some(Abandoned {
            release,
            // What the handles set last: a look finding another value, a stream's signal set it.
            set: before,
            turn: None,
            pause: FIRST_PAUSE,
            due: Instant::now(),
            quiet_looks: 0,
        });
        state.raise_abandoned();
        let set = state
            .abandoned
            .as_ref()
            .filter(|abandoned| abandoned.turn.is_none())
            .map(|abandoned| abandoned.set);
        let unlisted = !std::mem::replace(&mut state.waiters.listed, true);
        drop(state);
        if unlisted && let Err(error) = watch(Arc::clone(self) as Arc<dyn Watched>) {
            logged!(error!(
                "an abandoned timeline cannot be watched; a stream signal landing late may hold \
                 a wait on it: {error}"
            ));
        }
        (before, set)
    }

    /// The memory goes: no look reads the word after this.
    pub(super) fn close(&self) {
        lock(&self.state).word = std::ptr::null();
    }
}

impl Watched for Waits {
    fn look(&self, woken: &mut Vec<Waker>) -> Due {
        let (value, streams, raised) = {
            let mut state = lock(&self.state);
            if state.word.is_null() {
                return Due::Soon;
            }
            if let Some(pause) = state.resting() {
                return Due::Within(pause);
            }
            let raised = state.raise_abandoned();
            // SAFETY: the memory lives until `close`, which takes this lock.
            let value = unsafe { &*state.word }.load(Ordering::Acquire);
            let before = state.waiters.len();
            state.waiters.take_up_to(value, false, woken);
            self.waiting
                .fetch_sub(before - state.waiters.len(), Ordering::SeqCst);
            if state.waiters.is_empty() && !state.streams_due() {
                // Raised, the streams left for a later look.
                let due = state.next_look(raised.is_some());
                drop(state);
                warn_if_lowered(raised);
                return due;
            }
            let looks = !state.waiters.is_empty() || state.abandoned.is_some();
            (value, looks.then(|| state.streams.clone()), raised)
        };
        warn_if_lowered(raised);
        let Some(streams) = streams else {
            return Due::Soon;
        };
        // Looked at without the lock: a look may log, and a logger may call cuda-host back.
        // A stream is done with the word once it passed its operation or its own context failed
        // (that of another device's stream may be the timeline's, or not). The failure is asked
        // after the look too: the look itself may be what found it.
        let passed: Vec<bool> = streams
            .iter()
            .map(|(track, point, context)| {
                has_failed(*context) || track.look(Look::Paced) >= *point || has_failed(*context)
            })
            .collect();
        let failed = has_failed(self.context);
        let mut state = lock(&self.state);
        let noted = state.streams.len();
        state.streams.retain(|(track, point, _)| {
            let index = streams
                .iter()
                .position(|(known, _, _)| Arc::ptr_eq(known, track));
            // Passed, unless another operation was noted on the stream since.
            !index.is_some_and(|index| passed[index] && streams[index].1 >= *point)
        });
        NOTED_STREAMS.fetch_sub((noted - state.streams.len()) as u64, Ordering::Relaxed);
        // The looks moved the tracks on: the waits of a narrow timeline they saw passed hold the
        // raise back no longer, and the last raise comes before the watcher lets it go.
        state
            .narrow_waits
            .retain(|wait| !is_done(&wait.track, wait.point, wait.context));
        let lowered = raised.is_some();
        let raised = state.raise_abandoned();
        if failed {
            let before = state.waiters.len();
            state.waiters.take_up_to(value, true, woken);
            self.waiting
                .fetch_sub(before - state.waiters.len(), Ordering::SeqCst);
        }
        let due = state.next_look(lowered || raised.is_some());
        drop(state);
        warn_if_lowered(raised);
        due
    }

    fn unlist_if_idle(&self) -> bool {
        let mut state = lock(&self.state);
        let idle = state.word.is_null()
            || state.waiters.is_empty() && (state.abandoned.is_none() || state.streams.is_empty());
        if idle {
            state.waiters.listed = false;
        }
        idle
    }

    fn waiting(&self) -> usize {
        lock(&self.state).waiters.len()
    }
}

/// Warns that a stream's signal landed on an abandoned timeline and set `before`, where that
/// held a wait (lower than the value set, or while the waits take turns, one that holds a wait
/// the value set released)
/// (`State::raise_abandoned`).
fn warn_if_lowered(before: Option<u64>) {
    if let Some(before) = before {
        logged!(warn!(
            "a stream's signal set an abandoned timeline's value to {before}; set again so that no \
             stream waits on it"
        ));
    }
}

/// Wakes each of `woken`, catching and reporting a waker's panic.
pub(super) fn wake_all(woken: Vec<Waker>) {
    for waker in woken {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| waker.wake())) {
            dispose(payload);
            logged!(error!(
                "a waker of a timeline panicked; the others are woken"
            ));
        }
    }
}

#[cfg(test)]
mod tests;

//! The tracks stream points are made of: per stream in use, its points in order, each recorded
//! on an event of its own or written into the track's word, and the events its passed points
//! gave back.
//!
//! **One event a point, reused once seen passed.** Point `n` of a track is recorded on an event
//! no pending point holds: one its track's pool got back from a point seen passed, or a new one.
//! An event therefore holds one point from its record until a look saw that point passed, and a
//! completed query of it proves exactly its point passed: no point waits for a later one to be
//! seen, however many follow it, and the pool holds as many events as points were once in
//! flight, with no cap. A look gives the events of the points it saw passed back to the pool
//! (beyond `KEPT_EVENTS` of them, a few at a time to the driver). The points pending are
//! numbered without gaps: point `first + i` holds the `i`th event of `Events::pending`.
//!
//! **Written points.** Where a caller enqueues a stream memory operation anyway (a timeline's
//! wait or signal), its point rides in the same `cuStreamBatchMemOp`: a 32-bit write of the
//! point's number into the track's word, pinned, device-mapped memory of the context
//! (`ContextTracks::mark_written`). The stream writes a track's numbers in order, so the word
//! holding `n` proves every point up to `n` passed, and a look reads it before it queries
//! anything: a written point costs no query, and the stream no call of its own. A written point
//! holds no event (null in `Events::pending`); a look that finds the word short of it queries the
//! track's probe instead, an event never recorded, which answers only the context's sticky
//! error, so that the failure is learnt as for other points. The word holds 32 bits: a look
//! takes them as the newest number not after the last written point (`written_passed`), so a word
//! older than the points seen passed since says nothing, however many passed. The word is one
//! the context had free (a timeline leaves one), never allocated for the track: an allocation
//! would break another thread's global capture. It goes back to the context's pinned pages, for
//! a timeline or a track of another value of the context, when this value's tracks go, if the
//! stream passed the last point written into it (`ContextTracks`' drop): every value of a
//! context shares one pool, which a value made per request would otherwise drain by a word each.
//! A write a capture may have taken would write an old number whenever the graph runs: the word
//! is then taken from the track, never read again, and its written points are *unread*: they
//! pass with a later point recorded on an event, with a synchronize of the stream
//! (`Synchronizing`), or with the point the stream marks when dropped
//! (`ContextTracks::mark_after_unread`). So does a point nothing records or writes, which stands
//! after an operation whose own point could not be marked (`ContextTracks::mark_unread`); the
//! track reads its word no more from then on, as after a capture took a write of it, but the
//! word stays the track's, to go back with the tracks.
//!
//! **Looks.** Events, not memory writes (see `crate::points`): recording an event costs the
//! enqueuing thread 0.13 µs on an H200, a 32-bit stream memory write 0.8 µs; a look costs a
//! `cuEventQuery` (0.1–0.3 µs) per event it queries. A look for a point queries that point's
//! event; when it completed, the newest point's, which answers for every point when the stream
//! caught up; else it gallops from the point towards the newest, then bisects: about twice the
//! logarithm of how far the stream got since the last look, and one query when it got nowhere.
//! After a look that found the stream caught up, the next queries the newest point's event
//! first: one query while the stream keeps up. A look [`Look::Fresh`] always queries (a
//! synchronize, [`reclaim`](crate::reclaim),
//! [`StreamPoint::is_passed`](crate::StreamPoint::is_passed), the watcher, which paces itself);
//! a look [`Look::Paced`] (a launch's drain, when its thread's drains look at all,
//! `crate::launch::held`; a future's poll while the watcher does not have its track on its
//! list) only when no look was made for `PACED_LOOK` (50 µs), and for the track's first pending
//! point only when no look asked after that point: a look for a later point that finds it
//! pending says nothing of the points before. One thread
//! looks at a track at a time (`Track::looking`); only looks take a point's event out of the
//! pending ones, so a look's query never meets an event that is recorded again; and the
//! context's tracks, when dropped, wait for a look under way and close their tracks to later
//! ones, so no look queries a destroyed event. Every look runs in the relaxed capture
//! interaction mode (`Track::look_for`), and every log call in it, its own or one of what it
//! calls (a failure it is the first to see), is made once it ended, so that a logger may call
//! cuda-host back, even to look at the same track (`AfterLook`, `holding_logs`).
//!
//! **Records a capture took.** A point's number and event join the pending ones only once its
//! record returned and the stream was asked again whether it is capturing (`ContextTracks::mark`),
//! so no look ever queries an event whose record may be a capture's. Such an event is retired:
//! never recorded or queried again, destroyed with the context's tracks; the point is refused and
//! its number goes to the next point.
//!
//! A track's sequence only grows: a point is the next number, recorded under the track's lock,
//! so the stream records the numbers in order, and a point is passed once the track has seen it
//! or a later one complete (`high`).
//!
//! Streams are told apart by `cuStreamGetId`, which is unique for the life of the process (a
//! destroyed stream's handle may come back; its id does not) and resolves the per-thread default
//! stream to the calling thread's. A track serves one stream at a time. When every track of the
//! context is taken, the tracks whose stream has passed all its points are taken back (their
//! sequence goes on where it was, so no point of the old stream can be mistaken for one of the
//! new); only when none is free is another track made. Each thread remembers the track it last
//! marked a point on (`LAST_TRACK`), so that threads marking on streams of one context do not
//! meet in the context's table.
//!
//! The events belong to the context's tracks, which the context's state keeps (`objects::context`)
//! and every holder of a point keeps with it (a future, a released value); they are destroyed
//! before the context is released, and the driver lets an event still pending go once it
//! completed.

use crate::checked::checked;
use crate::error::{Error, Result};
use crate::launch::{
    ContextShared, Look, PinnedWord, Progress, RelaxedCaptureMode, abandon_context_if_failed,
    capture_state, holding_logs, logged,
};
use crate::stream_leases::{StreamLease, StreamLeases};
use crate::sync::lock;
use crate::tracks::waiters::Waiters;
use cuda_host_sys::{CUcontext, CUdeviceptr, CUevent, CUevent_flags, CUresult, CUstream, Driver};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// How often a [`Look::Paced`] queries a track's events, at most.
const PACED_LOOK: Duration = Duration::from_micros(50);
/// Events a track keeps for its next points beyond those pending; more go back to the driver.
const KEPT_EVENTS: usize = 1024;
/// Events a look gives back to the driver at most, so that no look takes long.
const DESTROYED_PER_LOOK: usize = 32;

/// One stream's sequence of points.
pub(crate) struct Track {
    driver: Arc<Driver>,
    /// Its context (`CUcontext` address), for failures its queries answer.
    context: usize,
    /// Held while a point is marked: one at a time, in the order of their numbers.
    state: Mutex<TrackState>,
    events: Mutex<Events>,
    /// The last point recorded: stored once its event joined the pending ones.
    issued: AtomicU64,
    /// The last written point recorded (0 for none): the word never holds a later number, which
    /// is how a look reads its 32 bits (`written_passed`).
    last_written: AtomicU64,
    /// The highest point seen passed.
    high: AtomicU64,
    /// When a look last asked after the track's first pending point, in nanoseconds since
    /// `epoch()`: what paces looks for that point.
    looked: AtomicU64,
    /// When any look was last made: what paces looks for later points.
    looked_any: AtomicU64,
    /// Whether a thread queries the track's events now (one at a time), or the events are gone
    /// (`IDLE`, `LOOKING`, `CLOSED`).
    looking: AtomicU8,
    /// Whether the last look that queried found the newest point passed: the next one queries
    /// the newest point's event first, which then answers for all (`search`).
    caught_up: AtomicBool,
    /// Whether the watcher has the track on its list (`Waiters::listed`, which it mirrors, for
    /// a future's poll to read without the lock).
    watched: AtomicBool,
    /// Whether a query's unexpected error was logged (once per track).
    logged: AtomicBool,
    /// The host address of the track's word, which its written points raise
    /// ([`ContextTracks::mark_written`]): null while it has none, and once a capture may have
    /// taken a write of it.
    written: AtomicPtr<AtomicU32>,
    /// The futures waiting on the track's points (`watcher`).
    pub(super) waiters: Mutex<Waiters>,
}

struct TrackState {
    /// The id of the stream the track serves, if any.
    owner: Option<u64>,
    /// Events retired because a capture took their last record: never queried or recorded
    /// again, destroyed with the context's tracks.
    retired: Vec<CUevent>,
    /// The track's word, once a written point asked for one; read no more once withdrawn.
    word: Option<PinnedWord>,
    /// Whether the track offers no word any more, and reads none: a capture may have taken a
    /// write of its word ([`Track::take_word`]), or a point nothing writes is among its points
    /// ([`ContextTracks::mark_unread`]).
    word_withdrawn: bool,
}

/// The events of a track.
struct Events {
    /// The events of the points not seen passed, in order: `pending[i]` holds point `first + i`;
    /// null for a written point, or an unread one, which have none.
    pending: VecDeque<CUevent>,
    /// The point of `pending[0]`: the one after `high`.
    first: u64,
    /// Events whose point was seen passed, for the next points.
    free: Vec<CUevent>,
    /// An event never recorded, made with the track's word: a query of it answers the context's
    /// sticky error, as every query does, and success otherwise. What a look queries for a
    /// written point the word says is pending, so that it learns a failure as for other points.
    probe: CUevent,
}

// SAFETY: the events are driver handles, usable from any thread; the rest is atomics and
// mutexes.
unsafe impl Send for Track {}
// SAFETY: as above.
unsafe impl Sync for Track {}

impl Progress for Track {
    fn passed(&self, look: Look) -> u64 {
        self.look(look)
    }
}

/// `Track::looking`: no look under way.
const IDLE: u8 = 0;
/// `Track::looking`: a thread is looking.
const LOOKING: u8 = 1;
/// `Track::looking`: the track's events were destroyed with its context's tracks; nobody looks
/// any more.
const CLOSED: u8 = 2;

/// A thread's look at a track; ends when dropped, also on unwind.
struct Looking<'track>(&'track AtomicU8);

impl<'track> Looking<'track> {
    /// The look, unless another is under way (or the track closed).
    fn try_begin(state: &'track AtomicU8) -> Option<Self> {
        state
            .compare_exchange(IDLE, LOOKING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            // Lazily: a guard made and dropped on failure would end the look under way.
            .then(|| Looking(state))
    }

    /// The look, once another under way ended (a few queries); `None` if the track closed.
    fn begin(state: &'track AtomicU8) -> Option<Self> {
        loop {
            match state.compare_exchange(IDLE, LOOKING, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Some(Looking(state)),
                Err(CLOSED) => return None,
                Err(_) => std::thread::yield_now(),
            }
        }
    }
}

impl Drop for Looking<'_> {
    fn drop(&mut self) {
        self.0.store(IDLE, Ordering::Release);
    }
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// What a look leaves for after it ended: what may call a logger, which may call cuda-host back
/// and look at the same track again.
#[derive(Default)]
struct AfterLook {
    /// A query's unexpected error, to log.
    failed_query: Option<cuda_host_sys::Error>,
    /// Events given back beyond `KEPT_EVENTS`, to destroy before the look ends.
    destroyed: Vec<CUevent>,
}

/// Whether the part of a look that holds a track queries events (and so needs the relaxed
/// capture interaction mode, in which a query breaks no capture).
#[derive(Clone, Copy)]
enum Queries {
    Yes,
    No,
}

/// What a query of a pending point's event answered.
enum Answer {
    Passed,
    Pending,
    /// The query failed (logged; a sticky error marks the context failed): the look stops.
    Failed,
}

impl Track {
    fn new(driver: &Arc<Driver>, context: CUcontext) -> Track {
        Track {
            driver: Arc::clone(driver),
            context: context.addr(),
            state: Mutex::new(TrackState {
                owner: None,
                retired: Vec::new(),
                word: None,
                word_withdrawn: false,
            }),
            events: Mutex::new(Events {
                pending: VecDeque::new(),
                first: 1,
                free: Vec::new(),
                probe: std::ptr::null_mut(),
            }),
            issued: AtomicU64::new(0),
            last_written: AtomicU64::new(0),
            high: AtomicU64::new(0),
            looked: AtomicU64::new(0),
            looked_any: AtomicU64::new(0),
            looking: AtomicU8::new(IDLE),
            caught_up: AtomicBool::new(false),
            watched: AtomicBool::new(false),
            logged: AtomicBool::new(false),
            written: AtomicPtr::new(std::ptr::null_mut()),
            waiters: Mutex::new(Waiters::default()),
        }
    }

    /// The highest point seen passed, after looking at the events if there are points not seen
    /// passed and `look` says so. A look [`Look::Fresh`] is this call's own (it waits for another
    /// thread's look to end), so it sees what the stream finished before it.
    pub(crate) fn look(&self, look: Look) -> u64 {
        self.look_for(self.high.load(Ordering::Acquire) + 1, look)
    }

    /// [`look`](Self::look) for someone who needs `point` only: nothing is queried once it is
    /// known passed, and a look that finds it pending queries nothing else.
    pub(crate) fn look_for(&self, point: u64, look: Look) -> u64 {
        let high = self.high.load(Ordering::Acquire);
        if high >= point.min(self.issued.load(Ordering::Acquire)) {
            return high;
        }
        let now = epoch().elapsed().as_nanos() as u64;
        // A look for a later point that finds it pending says nothing of the points before it:
        // a look for the first pending point is paced by looks for that point alone, one for a
        // later point by any look.
        let first = point <= high + 1;
        let paced_by = if first {
            &self.looked
        } else {
            &self.looked_any
        };
        let looking = match look {
            Look::Fresh => Looking::begin(&self.looking),
            // 0: no look yet (a stamp is never 0 but at the epoch's first instant).
            Look::Paced => {
                let stamp = paced_by.load(Ordering::Relaxed);
                if stamp != 0 && now.saturating_sub(stamp) < PACED_LOOK.as_nanos() as u64 {
                    None
                } else {
                    Looking::try_begin(&self.looking)
                }
            }
        };
        let Some(looking) = looking else {
            return high;
        };
        self.looked_any.store(now, Ordering::Relaxed);
        if first {
            self.looked.store(now, Ordering::Relaxed);
        }
        // Every log call of the look, its own and those of what it calls (a failure its query
        // is the first to see, which logs as it abandons the context's launches), is made once
        // it ended: a logger may call cuda-host back, even to look at this track.
        holding_logs(|| self.holding(looking, Queries::Yes, |after| self.search(point, after)))
    }

    /// Records that the stream passed every point up to `point`, without a query: a synchronize
    /// of the stream that began after `point` was issued returned (`Synchronizing`). Unlike a
    /// look, it sees written points a capture left unread pass too.
    fn synchronized_up_to(&self, point: u64) {
        if self.high.load(Ordering::Acquire) >= point {
            return;
        }
        let Some(looking) = Looking::begin(&self.looking) else {
            return;
        };
        holding_logs(|| self.holding(looking, Queries::No, |after| self.pass(point, after)));
    }

    /// Runs `body`, the part of a look that holds the track (`looking`), in the relaxed capture
    /// interaction mode, then ends the look, then makes its log calls; `body`'s answer, the
    /// highest point seen passed. Where the mode cannot be entered, a body that `queries` waits
    /// for the next look; one that does not (a synchronize's pass) runs, and the events it gives
    /// back are kept rather than destroyed.
    fn holding(
        &self,
        looking: Looking<'_>,
        queries: Queries,
        body: impl FnOnce(&mut AfterLook) -> u64,
    ) -> u64 {
        // In the relaxed capture interaction mode, cuda-host's looks never break a capture, its
        // own or other code's, as long as the events they query hold no capture's record
        // (`ContextTracks::mark`).
        let relaxed = RelaxedCaptureMode::enter(&self.driver);
        let mut after = AfterLook::default();
        let seen = match (&relaxed, queries) {
            (Ok(_), _) | (Err(_), Queries::No) => body(&mut after),
            (Err(_), Queries::Yes) => self.high.load(Ordering::Acquire),
        };
        if relaxed.is_err() {
            lock(&self.events).free.append(&mut after.destroyed);
        }
        // Destroyed while the look holds the track, so before the context's tracks can be
        // dropped (which waits for it), and in the relaxed capture interaction mode, in which
        // destroying an event breaks no capture.
        let failed_destroys: Vec<_> = after
            .destroyed
            .into_iter()
            // SAFETY: events of this track the look took from its pool, used by nobody after.
            .filter_map(|event| unsafe { destroy_event(&self.driver, event) }.err())
            .collect();
        // What may log ends the look first, and gives the thread its capture interaction mode
        // back: a logger may call cuda-host back, which may look at this track again on this
        // thread, and runs in the mode its thread chose.
        drop(looking);
        let relaxed = relaxed.map(drop);
        for error in failed_destroys {
            logged!(error!(
                "cannot destroy an event of the stream points: {error}"
            ));
        }
        if let Err(error) = relaxed {
            logged!(warn!(
                "a look at stream points waits for the next one: {error}"
            ));
        }
        if let Some(error) = after.failed_query {
            logged!(warn!("cuEventQuery of a stream point failed: {error}"));
        }
        seen
    }

    /// The highest point seen passed so far, without looking.
    pub(crate) fn seen_passed(&self) -> u64 {
        self.high.load(Ordering::Acquire)
    }

    /// Whether the watcher has the track on its list, so that it looks at the track's points
    /// futures wait for within its pace; a hint, read without the waiters' lock.
    pub(crate) fn is_watched(&self) -> bool {
        self.watched.load(Ordering::Relaxed)
    }

    /// Mirrors `Waiters::listed`; called under the waiters' lock.
    pub(super) fn set_watched(&self, watched: bool) {
        self.watched.store(watched, Ordering::Relaxed);
    }

    /// Its context (`CUcontext` address).
    pub(crate) fn context(&self) -> usize {
        self.context
    }

    /// The last point recorded.
    pub(crate) fn issued(&self) -> u64 {
        self.issued.load(Ordering::Acquire)
    }

    /// The device address of the track's word, taken on first use (under the track's lock,
    /// `state`) from the context's free words, never allocated: an allocation would invalidate
    /// another thread's global-mode capture, which a memory operation on a stream that is not
    /// capturing leaves intact (a timeline leaves a word free for it, `crate::timeline`).
    /// `None` where the track has none to offer (see [`ContextTracks::mark_written`]).
    fn word_for(&self, shared: &ContextShared, state: &mut TrackState) -> Option<CUdeviceptr> {
        if state.word_withdrawn {
            return None;
        }
        if let Some(word) = &state.word {
            return Some(word.device);
        }
        let word = shared.take_free_pinned_word()?;
        let probe = match shared.with_current(|| create_event(&self.driver)) {
            Ok(probe) => probe,
            Err(_) => {
                shared.release_pinned_word(word);
                return None;
            }
        };
        let host = word.host.cast::<AtomicU32>();
        // The number of the point seen passed last, which says nothing (`written_passed`); the
        // value only grows from there, as the stream passes the track's written points.
        let seen = self.high.load(Ordering::Acquire) as u32;
        // SAFETY: a word of the context's pinned memory, 8-byte aligned, which nothing else uses.
        unsafe { host.write(AtomicU32::new(seen)) };
        lock(&self.events).probe = probe;
        self.written.store(host, Ordering::Release);
        let device = word.device;
        state.word = Some(word);
        Some(device)
    }

    /// Whether the stream passed the last point written into `word`, the track's, so that it
    /// never writes it again: seen passed, or the word holds its number (it holds the low 32 bits
    /// of a number of the track's not after it, and fewer than 2^32 are pending). The caller is
    /// the one look, or the track is closed: nobody reads the word meanwhile but the caller.
    fn passed_its_last_write(&self, word: PinnedWord) -> bool {
        let last = self.last_written.load(Ordering::Acquire);
        if self.high.load(Ordering::Acquire) >= last {
            return true;
        }
        // SAFETY: the track's word, pinned memory of the context, which lives while the context's
        // tracks do (the caller's).
        let value = unsafe { &*word.host.cast::<AtomicU32>() }.load(Ordering::Acquire);
        value == last as u32
    }

    /// Takes the track's word away for good: a capture may have taken a write of it (see
    /// [`ContextTracks::mark_written`]).
    fn take_word(&self, shared: &ContextShared, state: &mut TrackState) {
        self.withdraw_word(state);
        if let Some(word) = state.word.take() {
            shared.keep_pinned_word(word);
        }
    }

    /// Reads the track's word no more, and offers none from now on: its written points are
    /// *unread* (see the module's documentation). A word it has stays its, for the context's
    /// tracks' drop to give back once the stream passed the last point written into it.
    fn withdraw_word(&self, state: &mut TrackState) {
        self.written.store(std::ptr::null_mut(), Ordering::Release);
        state.word_withdrawn = true;
    }

    /// Queries the events, the caller being the one look: `wanted`'s (or the first pending
    /// one's, if that is later), then, if it passed, the newest, then from `wanted` by galloping
    /// and bisection the last passed; gives the passed points' events back. Returns the highest
    /// point seen passed. When the last look found the stream past its newest point, the newest
    /// is queried first: a stream that keeps up with its points (as while the watcher wakes
    /// futures made one after the other) then costs one query a look, not two; a query made
    /// while another thread records points slows that thread (`docs/PERFORMANCE.md`).
    fn search(&self, wanted: u64, after: &mut AfterLook) -> u64 {
        let issued = self.issued.load(Ordering::Acquire);
        let mut high = self.high.load(Ordering::Acquire);
        if high >= issued {
            return high;
        }
        if let Some(written) = self.written_passed(high, issued) {
            high = self.pass(written, after);
            if high >= wanted.min(issued) {
                return high;
            }
        }
        let Some(wanted) = self.readable_from(wanted.clamp(high + 1, issued)) else {
            // Only written points a capture left unread: nothing tells when the stream passed
            // them but a later point or a synchronize. The probe still answers a failure.
            let _ = self.answer(issued, after);
            return high;
        };
        let newest_pending = if wanted < issued && self.caught_up.load(Ordering::Relaxed) {
            match self.answer(issued, after) {
                Answer::Passed => return self.pass(issued, after),
                Answer::Pending => true,
                Answer::Failed => return high,
            }
        } else {
            false
        };
        match self.answer(wanted, after) {
            Answer::Passed => {}
            Answer::Pending => {
                self.caught_up.store(false, Ordering::Relaxed);
                return high;
            }
            Answer::Failed => return high,
        }
        if wanted == issued {
            return self.pass(issued, after);
        }
        if !newest_pending {
            match self.answer(issued, after) {
                Answer::Passed => return self.pass(issued, after),
                Answer::Pending => {}
                Answer::Failed => return self.pass(wanted, after),
            }
        }
        // `passed` is known passed, `pending` not.
        let (mut passed, mut pending) = (wanted, issued);
        let mut step = 1;
        while passed + step < pending {
            match self.answer(passed + step, after) {
                Answer::Passed => {
                    passed += step;
                    step *= 2;
                }
                Answer::Pending => {
                    pending = passed + step;
                    break;
                }
                Answer::Failed => return self.pass(passed, after),
            }
        }
        while pending - passed > 1 {
            let middle = passed + (pending - passed) / 2;
            match self.answer(middle, after) {
                Answer::Passed => passed = middle,
                Answer::Pending => pending = middle,
                Answer::Failed => break,
            }
        }
        self.pass(passed, after)
    }

    /// The newest point the track's word says passed, when it says more than `high`: the word
    /// holds the low 32 bits of the last written point the stream passed, taken as the newest
    /// number with those bits not after the last written point recorded (`last_written`, read
    /// first; fewer than 2^32 points are ever pending). A number at or below `high` (a written
    /// point older than an event's point seen since, however many such points passed) says
    /// nothing; so does a write recorded after `last_written` was read, which names a number
    /// 2^32 before its own. A point the word names beyond `issued` was written after `issued`
    /// was read, so all up to it passed.
    fn written_passed(&self, high: u64, issued: u64) -> Option<u64> {
        let word = self.written.load(Ordering::Acquire);
        if word.is_null() {
            return None;
        }
        let last = self.last_written.load(Ordering::Acquire);
        // SAFETY: a word of the context's pinned memory, which is freed only after the context's
        // tracks closed every track, and the caller's look keeps this one open (`Looking`).
        let value = unsafe { &*word }.load(Ordering::Acquire);
        let behind = (last as u32).wrapping_sub(value);
        let named = last.checked_sub(u64::from(behind))?;
        (named > high).then(|| named.min(issued))
    }

    /// The first pending point from `point` on that a look can read: `point` itself, unless it
    /// is a written point of a word taken from the track ([`ContextTracks::mark_written`]),
    /// which only a later point's passing shows passed; then the first later point recorded on
    /// an event, if any.
    fn readable_from(&self, point: u64) -> Option<u64> {
        if !self.written.load(Ordering::Acquire).is_null() {
            return Some(point);
        }
        let events = lock(&self.events);
        let Some(index) = point.checked_sub(events.first) else {
            return Some(point);
        };
        events
            .pending
            .iter()
            .skip(index as usize)
            .position(|event| !event.is_null())
            .map(|later| point + later as u64)
    }

    /// Whether the track has written points a capture left unread (see
    /// [`readable_from`](Self::readable_from)) and no later point recorded on an event.
    fn unread_at_the_end(&self) -> bool {
        self.written.load(Ordering::Acquire).is_null()
            && lock(&self.events)
                .pending
                .back()
                .is_some_and(|event| event.is_null())
    }

    /// Whether the pending point `point` was passed: a query of its event, or, for a written
    /// point, a read of the track's word, then a query of the track's probe, which answers only
    /// a failure. The caller is the one look, so the event stays `point`'s meanwhile.
    fn answer(&self, point: u64, after: &mut AfterLook) -> Answer {
        let (event, probe) = {
            let events = lock(&self.events);
            let index = point.checked_sub(events.first).map(|index| index as usize);
            // Always there while a holder of the context looks; nothing, after its drop.
            match index.and_then(|index| events.pending.get(index)) {
                Some(&event) => (event, events.probe),
                None => return Answer::Failed,
            }
        };
        let written = event.is_null();
        if written {
            let high = self.high.load(Ordering::Acquire);
            let issued = self.issued.load(Ordering::Acquire);
            if self
                .written_passed(high, issued)
                .is_some_and(|passed| passed >= point)
            {
                return Answer::Passed;
            }
            if probe.is_null() {
                return Answer::Pending;
            }
        }
        // SAFETY: the event lives while the context's tracks do, which whoever looks keeps
        // (see the module's comment); it holds `point`'s record, which was not a capture's, or
        // it is the track's probe, never recorded.
        let result = unsafe {
            self.driver
                .cuEventQuery(if written { probe } else { event })
        };
        match result {
            CUresult::CUDA_SUCCESS if written => Answer::Pending,
            CUresult::CUDA_SUCCESS => Answer::Passed,
            CUresult::CUDA_ERROR_NOT_READY => Answer::Pending,
            error => {
                abandon_context_if_failed(self.context, error);
                if !self.logged.swap(true, Ordering::Relaxed) {
                    after.failed_query = self.driver.check("cuEventQuery", error).err();
                }
                Answer::Failed
            }
        }
    }

    /// Records that every point up to `point` passed, and gives their events back (the caller
    /// is the one look); returns the highest point seen passed.
    fn pass(&self, point: u64, after: &mut AfterLook) -> u64 {
        {
            let mut events = lock(&self.events);
            let events = &mut *events;
            if point < events.first {
                return self.high.load(Ordering::Acquire);
            }
            let count = (point - events.first + 1) as usize;
            let passed = events.pending.drain(..count);
            events.free.extend(passed.filter(|event| !event.is_null()));
            events.first = point + 1;
            self.high.store(point, Ordering::Release);
            self.caught_up
                .store(events.pending.is_empty(), Ordering::Relaxed);
            let beyond = events.free.len().saturating_sub(KEPT_EVENTS);
            let at = events.free.len() - beyond.min(DESTROYED_PER_LOOK);
            // Destroyed at the end of the look, which then logs what failed.
            after.destroyed.extend(events.free.drain(at..));
        }
        point
    }

    /// How many events the track holds now: pending, and kept for its next points (for tests).
    #[cfg(test)]
    fn event_counts(&self) -> (usize, usize) {
        let events = lock(&self.events);
        (events.pending.len(), events.free.len())
    }
}

/// The stream points of one context: its tracks.
pub(crate) struct ContextTracks {
    driver: Arc<Driver>,
    context: CUcontext,
    /// The context's shared state, whose pinned pages the tracks' words go back to when these
    /// are dropped (the public context's state holds it until after).
    shared: Weak<ContextShared>,
    state: Mutex<State>,
}

// SAFETY: the raw pointer is the context's handle, valid on any thread.
unsafe impl Send for ContextTracks {}
// SAFETY: as above; the mutable state is behind the mutex.
unsafe impl Sync for ContextTracks {}

#[derive(Default)]
struct State {
    /// Every track made, lent or not: their events are destroyed with the context's state.
    tracks: Vec<Arc<Track>>,
    leases: StreamLeases<Track>,
}

/// A write of a point's number that [`ContextTracks::mark_written`] asks its caller to enqueue:
/// a 32-bit `CU_STREAM_MEM_OP_WRITE_VALUE_32` of `value` to `address`, with the default flags (a
/// memory barrier before it, so the stream's earlier work is visible once the host reads it).
pub(crate) struct PointWrite {
    pub(crate) address: CUdeviceptr,
    pub(crate) value: u32,
}

/// What marking a point on a stream gives: its track and number.
pub(crate) struct Marked {
    pub(crate) track: Arc<Track>,
    pub(crate) point: u64,
}

/// The track a thread last marked a point on: its context's shared state (held weakly, which
/// keeps the allocation and so its address from being reused), its stream's id, the track.
type LastTrack = Option<(Weak<ContextShared>, u64, Arc<Track>)>;

thread_local! {
    static LAST_TRACK: RefCell<LastTrack> = const { RefCell::new(None) };
}

impl ContextTracks {
    pub(crate) fn new(context: &Arc<ContextShared>) -> ContextTracks {
        ContextTracks {
            driver: Arc::clone(context.driver_arc()),
            context: context.raw(),
            shared: Arc::downgrade(context),
            state: Mutex::new(State::default()),
        }
    }

    /// Records on `stream` (whose id is `stream_id`, of the context `shared`, whose points these
    /// are) its track's next point. The context must be current where the driver resolves a
    /// special stream against it.
    ///
    /// Other code may begin capturing the stream between the caller's capture check and the
    /// record, and the capture then takes the record: the event stands for a point of the graph,
    /// and a query of it would invalidate the capture. So the stream is asked again once the
    /// record returned: if it is capturing (or cannot tell), the event is retired (never queried
    /// or recorded again) and the point refused. Looks never see the event before this answer:
    /// it joins the pending ones after it. A capture that begins and ends between the record and
    /// that question is not seen, and the event may then answer "complete" before the stream
    /// passed the point (the software driver's does).
    ///
    /// # Errors
    /// [`Error::PointInCapture`] when the stream was found capturing after the record; the
    /// driver's error of `cuEventRecord`, `cuStreamIsCapturing`, or `cuEventCreate` when the
    /// track has no event free.
    pub(crate) fn mark(
        &self,
        shared: &Arc<ContextShared>,
        stream: CUstream,
        stream_id: u64,
    ) -> Result<Marked> {
        let (track, point) = self.on_track(shared, stream_id, |track, state, point| {
            self.record(shared, track, state, point, stream)?;
            Ok(point)
        })?;
        Ok(Marked { track, point })
    }

    /// Marks the next point of `stream` (as [`mark`](Self::mark)) as a write of its number into
    /// the track's word, which `enqueue` enqueues after its own stream memory operations, in the
    /// one call it makes (a `cuStreamBatchMemOp`): the point costs the stream no call of its
    /// own, and a look reads the word instead of querying an event. `None` where the track has
    /// no word to offer (the context had no pinned word free for it, its probe event could not
    /// be made, or a capture took a write of it): `enqueue` is then given `None`,
    /// enqueues its operations alone, and no point is marked. `enqueue` runs under the track's
    /// lock; it must enqueue all or nothing.
    ///
    /// Other code may begin capturing the stream between the caller's check and the call, as
    /// for [`mark`](Self::mark): then the graph holds a write of the word, which writes an old
    /// number whenever it runs. So the stream is asked again after the call, and if it is
    /// capturing (or cannot tell) the word is taken from the track, never read or written again
    /// and kept for the life of the process (the graph may run after the context is gone), and
    /// the point refused. The track's written points before it then pass when a later point of
    /// the stream is seen passed.
    ///
    /// # Errors
    /// [`Error::PointInCapture`] when the stream was found capturing after the call (the
    /// operations `enqueue` enqueued went with it); `enqueue`'s error, or the driver's error of
    /// `cuStreamIsCapturing`.
    pub(crate) fn mark_written(
        &self,
        shared: &Arc<ContextShared>,
        stream: CUstream,
        stream_id: u64,
        enqueue: impl FnOnce(Option<PointWrite>) -> Result<()>,
    ) -> Result<Option<Marked>> {
        let (track, point) = self.on_track(shared, stream_id, |track, state, point| {
            let Some(address) = track.word_for(shared, state) else {
                enqueue(None)?;
                return Ok(None);
            };
            enqueue(Some(PointWrite {
                address,
                value: point as u32,
            }))?;
            let refusal = match capture_state(&self.driver, stream) {
                Ok(None) => None,
                Ok(Some(status)) => Some(Error::PointInCapture { status }),
                Err(error) => Some(error),
            };
            if let Some(error) = refusal {
                track.take_word(shared, state);
                return Err(error);
            }
            lock(&track.events).pending.push_back(std::ptr::null_mut());
            track.last_written.store(point, Ordering::Release);
            track.issued.store(point, Ordering::Release);
            Ok(Some(point))
        })?;
        Ok(point.map(|point| Marked { track, point }))
    }

    /// Marks the next point of the stream `stream_id` as one nothing records or writes: for an
    /// operation the stream got with no point after it (the point's record failed, or a capture
    /// other code began took it), so that what the operation keeps (a timeline's word) is held
    /// until the stream passed it rather than for ever. Such a point is *unread*, as the written
    /// points of a word a capture took: it passes with a later point recorded on an event, a
    /// synchronize of the stream, or the point the stream marks when dropped
    /// ([`mark_after_unread`](Self::mark_after_unread)), and keeps the track from being taken
    /// back meanwhile. The track reads its word no more from then on (else a look would take the
    /// point for a written one, which the word shows passed only once a later write lands): its
    /// written points pass the same way. No driver call; the caller holds the stream's window,
    /// as for [`mark`](Self::mark), and the operation was enqueued after every point marked on
    /// the stream before this one.
    ///
    /// # Errors
    /// None in practice: as [`mark`](Self::mark) where the stream needs a track.
    pub(crate) fn mark_unread(
        &self,
        shared: &Arc<ContextShared>,
        stream_id: u64,
    ) -> Result<Marked> {
        let (track, point) = self.on_track(shared, stream_id, |track, state, point| {
            track.withdraw_word(state);
            lock(&track.events).pending.push_back(std::ptr::null_mut());
            track.issued.store(point, Ordering::Release);
            Ok(point)
        })?;
        Ok(Marked { track, point })
    }

    /// Runs `mark` under the lock of the track of `stream_id` (given one if it has none) with the
    /// number of its next point; the track is remembered as this thread's last.
    fn on_track<T>(
        &self,
        shared: &Arc<ContextShared>,
        stream_id: u64,
        mark: impl FnOnce(&Track, &mut TrackState, u64) -> Result<T>,
    ) -> Result<(Arc<Track>, T)> {
        let mut mark = Some(mark);
        let mut cached = last_track(shared, stream_id);
        loop {
            let track = match cached.take() {
                Some(track) => track,
                None => self.track_of(shared, stream_id)?,
            };
            let marked = {
                let mut state = lock(&track.state);
                if state.owner != Some(stream_id) {
                    // Taken back since the look-up: look again.
                    continue;
                }
                let point = track.issued.load(Ordering::Relaxed) + 1;
                let mark = mark.take().expect("marks once: the loop returns after it");
                mark(&track, &mut state, point)?
            };
            remember_track(shared, stream_id, &track);
            return Ok((track, marked));
        }
    }

    /// Records `point` of `track` on `stream`, under the track's lock (`state`): see
    /// [`mark`](Self::mark).
    fn record(
        &self,
        shared: &ContextShared,
        track: &Track,
        state: &mut TrackState,
        point: u64,
        stream: CUstream,
    ) -> Result<()> {
        let free = lock(&track.events).free.pop();
        let event = match free {
            Some(event) => event,
            None => shared.with_current(|| create_event(&self.driver))?,
        };
        // SAFETY: a valid stream (the caller's) and an event of its context, which no pending
        // point holds.
        if let Err(error) = unsafe { checked!(&self.driver, cuEventRecord(event, stream)) } {
            lock(&track.events).free.push(event);
            return Err(error.into());
        }
        let refusal = match capture_state(&self.driver, stream) {
            Ok(None) => None,
            Ok(Some(status)) => Some(Error::PointInCapture { status }),
            Err(error) => Some(error),
        };
        if let Some(error) = refusal {
            // The record may be a capture's.
            state.retired.push(event);
            return Err(error);
        }
        lock(&track.events).pending.push_back(event);
        track.issued.store(point, Ordering::Release);
        Ok(())
    }

    /// The track of the stream `stream_id`, given one if it has none. A track is taken back
    /// after a look (`take_back_if_quiet`), whose log calls wait until the table's lock is
    /// released: a logger may call cuda-host back to mark a point on another stream.
    fn track_of(&self, shared: &ContextShared, stream_id: u64) -> Result<Arc<Track>> {
        holding_logs(|| {
            let state = &mut *lock(&self.state);
            let tracks = &mut state.tracks;
            state.leases.of(stream_id, || {
                let track = Arc::new(Track::new(shared.driver_arc(), self.context));
                tracks.push(Arc::clone(&track));
                Ok(vec![track])
            })
        })
    }

    /// A synchronize of `stream` (of the whole context, with `None`) begins: what it will have
    /// passed once it returned, every point marked on it so far.
    pub(crate) fn synchronizing(&self, stream: Option<CUstream>) -> Synchronizing {
        let id = match stream {
            None => None,
            Some(stream) => {
                let mut id = 0;
                // SAFETY: a live stream of the caller's; a valid out-pointer.
                if unsafe { checked!(&self.driver, cuStreamGetId(stream, &mut id)) }.is_err() {
                    return Synchronizing(Vec::new());
                }
                Some(id)
            }
        };
        // Read under the table's lock, while each track is lent to a stream the synchronize
        // waits for: a track taken back and lent to another stream marks that stream's points
        // only after.
        let state = lock(&self.state);
        let with_issued = |track: &Arc<Track>| (Arc::clone(track), track.issued());
        Synchronizing(match id {
            None => state.leases.lent().map(with_issued).collect(),
            Some(id) => state
                .leases
                .lent_to(id)
                .map(with_issued)
                .into_iter()
                .collect(),
        })
    }

    /// Marks a point on `stream` (whose id is `stream_id`, of `shared`) after written points a
    /// capture left unread, when nothing follows them on its track: only a later point's passing
    /// shows them passed (or a synchronize), and the stream, about to go, would give none. The
    /// caller holds the stream's window, as for [`mark`](Self::mark); the context must be
    /// current where the driver resolves a special stream against it.
    ///
    /// # Errors
    /// As [`mark`](Self::mark).
    pub(crate) fn mark_after_unread(
        &self,
        shared: &Arc<ContextShared>,
        stream: CUstream,
        stream_id: u64,
    ) -> Result<()> {
        let track = lock(&self.state).leases.lent_to(stream_id).cloned();
        if !track.is_some_and(|track| track.unread_at_the_end()) {
            return Ok(());
        }
        self.mark(shared, stream, stream_id).map(drop)
    }

    /// How many tracks serve a stream now, and how many exist (for tests).
    #[cfg(test)]
    fn sizes(&self) -> (usize, usize) {
        let state = lock(&self.state);
        (state.leases.lent().count(), state.tracks.len())
    }
}

/// What a synchronize under way will have passed: each track of the streams it waits for, with
/// the last point marked on it before it began ([`ContextTracks::synchronizing`]).
pub(crate) struct Synchronizing(Vec<(Arc<Track>, u64)>);

impl Synchronizing {
    /// The synchronize returned: every point marked before it began is passed, written points a
    /// capture left unread among them, which the tracks see now rather than at a later look.
    pub(crate) fn returned(self) {
        for (track, issued) in self.0 {
            track.synchronized_up_to(issued);
        }
    }
}

/// The track the calling thread last marked a point of the stream `stream_id` of `shared` on,
/// if that is where it last marked one.
fn last_track(shared: &Arc<ContextShared>, stream_id: u64) -> Option<Arc<Track>> {
    LAST_TRACK
        .try_with(|last| match &*last.borrow() {
            Some((context, id, track))
                if *id == stream_id && std::ptr::eq(context.as_ptr(), Arc::as_ptr(shared)) =>
            {
                Some(Arc::clone(track))
            }
            _ => None,
        })
        .ok()
        .flatten()
}

fn remember_track(shared: &Arc<ContextShared>, stream_id: u64, track: &Arc<Track>) {
    let _ = LAST_TRACK.try_with(|last| {
        let mut last = last.borrow_mut();
        let same = last.as_ref().is_some_and(|(context, id, known)| {
            *id == stream_id
                && std::ptr::eq(context.as_ptr(), Arc::as_ptr(shared))
                && Arc::ptr_eq(known, track)
        });
        if !same {
            // The one replaced is dropped after the borrow: a track's drop runs no user code.
            *last = Some((Arc::downgrade(shared), stream_id, Arc::clone(track)));
        }
    });
}

impl StreamLease for Track {
    fn lend(&self, stream_id: u64) {
        lock(&self.state).owner = Some(stream_id);
    }

    /// Quiet: its stream passed every point it was given, and no thread is marking one.
    fn take_back_if_quiet(&self) -> bool {
        let Ok(mut state) = self.state.try_lock() else {
            return false;
        };
        if self.look(Look::Fresh) < self.issued() {
            return false;
        }
        state.owner = None;
        true
    }
}

/// An event for a point. The context is current.
fn create_event(driver: &Driver) -> Result<CUevent> {
    let mut event = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the context is current (the caller's).
    unsafe {
        checked!(
            driver,
            cuEventCreate(&mut event, CUevent_flags::CU_EVENT_DISABLE_TIMING.0)
        )
    }?;
    Ok(event)
}

/// Destroys an event; the driver lets one still pending go once it completed.
///
/// # Safety
/// `event` is an event of this module's that nobody uses after, destroyed once.
unsafe fn destroy_event(
    driver: &Driver,
    event: CUevent,
) -> std::result::Result<(), cuda_host_sys::Error> {
    // SAFETY: the caller's promise.
    unsafe { checked!(driver, cuEventDestroy_v2(event)) }
}

/// Destroys events, logging what failed.
///
/// # Safety
/// As [`destroy_event`], for each of `events`.
unsafe fn destroy_events(driver: &Driver, events: impl Iterator<Item = CUevent>) {
    for event in events {
        // SAFETY: the caller's promise.
        if let Err(error) = unsafe { destroy_event(driver, event) } {
            logged!(error!(
                "cannot destroy an event of the stream points: {error}"
            ));
        }
    }
}

impl Drop for ContextTracks {
    fn drop(&mut self) {
        let tracks = std::mem::take(&mut lock(&self.state).tracks);
        // Held by the public context's state until after this drop: never the last reference.
        let shared = self.shared.upgrade();
        for track in tracks {
            // Waits for a look under way (the watcher's may be), and keeps later ones out.
            while track
                .looking
                .compare_exchange(IDLE, CLOSED, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                std::thread::yield_now();
            }
            let retired = std::mem::take(&mut lock(&track.state).retired);
            let Events {
                pending,
                free,
                probe,
                ..
            } = std::mem::replace(
                &mut *lock(&track.events),
                Events {
                    pending: VecDeque::new(),
                    first: 0,
                    free: Vec::new(),
                    probe: std::ptr::null_mut(),
                },
            );
            track.written.store(std::ptr::null_mut(), Ordering::Release);
            // Given back to the context's pinned pages once the stream passed the last point
            // written into it, for a timeline or a track of another value of the context; else
            // it goes with the pages, as the stream may still write it.
            if let Some(word) = lock(&track.state).word.take() {
                match &shared {
                    Some(shared) if track.passed_its_last_write(word) => {
                        shared.release_pinned_word(word);
                    }
                    _ => {}
                }
            }
            let events = pending
                .into_iter()
                .chain(free)
                .chain(retired)
                .chain([probe]);
            // SAFETY: the track is closed, so no look uses its events again; they were taken
            // from it, so nobody else destroys them. Null ones (written points', a missing
            // probe) are no events.
            unsafe { destroy_events(&self.driver, events.filter(|event| !event.is_null())) };
        }
    }
}

#[cfg(test)]
mod tests;

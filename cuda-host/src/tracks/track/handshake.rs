//! The lock-free core of a track: the handshake between the thread marking its points and the
//! threads looking at them, free of driver calls (what a look asks the stream goes through
//! [`Queries`]), so that loom can check it (`models`, beside it).
//!
//! - **Who may look**: one thread at a time ([`Looking`]), never after [`close`](Handshake::close);
//!   a [`Pace::Paced`] look only when no look asked after the same points for a while.
//! - **The highest point seen passed** (`high`) only grows, and only a look raises it, from a
//!   query that completed, the word, or a synchronize that returned.
//! - **Events**: a point's event joins the pending ones once its record is known not to be a
//!   capture's ([`push_recorded`](Handshake::push_recorded)); only a look takes it out, into
//!   the free ones, beyond `kept` of them to be given back to the driver.
//! - **The word** of written points: adopted once, read by looks until withdrawn, given back
//!   only once the stream wrote it for the last time
//!   ([`passed_last_write`](Handshake::passed_last_write)).
//!
//! Marks are made one at a time (the caller holds its track's lock), looks at any time.

use crate::sync::{AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, Mutex, lock};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;

#[cfg(loom)]
use loom::thread::yield_now;
#[cfg(not(loom))]
use std::thread::yield_now;

/// `Handshake::looking`: no look under way.
pub(crate) const IDLE: u8 = 0;
/// `Handshake::looking`: a thread is looking.
pub(crate) const LOOKING: u8 = 1;
/// `Handshake::looking`: the events were taken away ([`Handshake::close`]); nobody looks any
/// more.
pub(crate) const CLOSED: u8 = 2;

/// What a query of an event, or of the probe, answered.
pub(crate) enum Queried {
    /// The stream passed the event's record (the probe: the context has no sticky error).
    Complete,
    /// Not yet.
    NotReady,
    /// The query failed: the look stops where it got.
    Failed,
}

/// What a look asks the stream: the driver's event queries, or a model's.
pub(crate) trait Queries {
    /// An event: a driver handle, or a model's stand-in.
    type Event: Copy;

    /// Queries `event`, which holds the record of `point` (the caller is the one look: it stays
    /// that point's meanwhile).
    fn query(&mut self, point: u64, event: Self::Event) -> Queried;

    /// Queries the probe, an event never recorded, which answers only a failure.
    fn query_probe(&mut self, probe: Self::Event) -> Queried;
}

/// Whether a look queries now or only when no look asked after its points for a while.
#[derive(Clone, Copy)]
pub(crate) enum Pace {
    /// Now, after any look under way.
    Fresh,
    /// Only if no look asked after the same points for this many nanoseconds, and not while
    /// another look is under way.
    Paced(u64),
}

/// What a look is for.
#[derive(Clone, Copy)]
pub(crate) enum Wanted {
    /// The newest point the stream passed: a look that reads the word goes on to the points
    /// marked after the one it names.
    Newest,
    /// Whether this point passed: nothing more is queried once it is known passed.
    Point(u64),
}

impl Wanted {
    /// The first point the look asks after, `high` being the highest seen passed.
    fn point(self, high: u64) -> u64 {
        match self {
            Wanted::Newest => high + 1,
            Wanted::Point(point) => point,
        }
    }
}

/// What a query of a pending point answered.
enum Answer {
    Passed,
    Pending,
    Failed,
}

/// The events of a track.
pub(crate) struct Events<E> {
    /// The events of the points not seen passed, in order: `pending[i]` holds point `first + i`;
    /// `None` for a written point, or an unread one, which have none.
    pub(crate) pending: VecDeque<Option<E>>,
    /// The point of `pending[0]`: the one after `high`.
    first: u64,
    /// Events whose point was seen passed, for the next points.
    pub(crate) free: Vec<E>,
    /// An event never recorded, made with the word: what a look queries for a written point the
    /// word says is pending, so that it learns a failure as for other points.
    pub(crate) probe: Option<E>,
}

impl<E> Events<E> {
    fn new(first: u64) -> Self {
        Events {
            pending: VecDeque::new(),
            first,
            free: Vec::new(),
            probe: None,
        }
    }
}

/// One track's points, events, word and looks.
pub(crate) struct Handshake<E> {
    events: Mutex<Events<E>>,
    /// Free events kept for the next points; more go back to the driver, a few a look.
    kept: usize,
    /// Free events a look gives back at most.
    given_back_per_look: usize,
    /// The last point marked: stored once its event joined the pending ones.
    issued: AtomicU64,
    /// The last written point marked (0 for none): the word never holds a later number, which
    /// is how a look reads its 32 bits (`written_passed`).
    last_written: AtomicU64,
    /// The highest point seen passed.
    high: AtomicU64,
    /// When a look last asked after the first pending point: what paces looks for that point.
    looked: AtomicU64,
    /// When any look was last made: what paces looks for later points.
    looked_any: AtomicU64,
    /// `IDLE`, `LOOKING` or `CLOSED`.
    looking: AtomicU8,
    /// Whether the last look that queried found the newest point passed: the next one queries
    /// the newest point's event first, which then answers for all (`search`).
    caught_up: AtomicBool,
    /// The word written points raise: null while there is none, and once withdrawn.
    written: AtomicPtr<AtomicU32>,
}

/// A thread's look; ends when dropped, also on unwind.
pub(crate) struct Looking<'state>(&'state AtomicU8);

impl<'state> Looking<'state> {
    /// The look, unless another is under way (or the track closed).
    pub(crate) fn try_begin(state: &'state AtomicU8) -> Option<Self> {
        state
            .compare_exchange(IDLE, LOOKING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            // Lazily: a guard made and dropped on failure would end the look under way.
            .then(|| Looking(state))
    }

    /// The look, once another under way ended (a few queries); `None` if the track closed.
    pub(crate) fn begin(state: &'state AtomicU8) -> Option<Self> {
        loop {
            match state.compare_exchange(IDLE, LOOKING, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Some(Looking(state)),
                Err(CLOSED) => return None,
                Err(_) => yield_now(),
            }
        }
    }
}

impl Drop for Looking<'_> {
    fn drop(&mut self) {
        self.0.store(IDLE, Ordering::Release);
    }
}

impl<E: Copy> Handshake<E> {
    /// A track with no point yet, keeping `kept` free events and giving back at most
    /// `given_back_per_look` a look.
    pub(crate) fn new(kept: usize, given_back_per_look: usize) -> Self {
        Handshake {
            events: Mutex::new(Events::new(1)),
            kept,
            given_back_per_look,
            issued: AtomicU64::new(0),
            last_written: AtomicU64::new(0),
            high: AtomicU64::new(0),
            looked: AtomicU64::new(0),
            looked_any: AtomicU64::new(0),
            looking: AtomicU8::new(IDLE),
            caught_up: AtomicBool::new(false),
            written: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The last point marked.
    pub(crate) fn issued(&self) -> u64 {
        self.issued.load(Ordering::Acquire)
    }

    /// The highest point seen passed so far, without looking.
    pub(crate) fn high(&self) -> u64 {
        self.high.load(Ordering::Acquire)
    }

    /// The number the next point gets; the caller marks points one at a time.
    pub(crate) fn next_point(&self) -> u64 {
        self.issued.load(Ordering::Relaxed) + 1
    }

    /// An event whose point was seen passed, for the next point.
    pub(crate) fn take_free(&self) -> Option<E> {
        lock(&self.events).free.pop()
    }

    /// Keeps `events` for the next points (their record failed, or they were not given back).
    pub(crate) fn keep_free(&self, events: impl IntoIterator<Item = E>) {
        lock(&self.events).free.extend(events);
    }

    /// Marks `point`, the next, on `event`, whose record returned and was not a capture's.
    pub(crate) fn push_recorded(&self, point: u64, event: E) {
        lock(&self.events).pending.push_back(Some(event));
        self.issued.store(point, Ordering::Release);
    }

    /// Marks `point`, the next, as written into the word, whose write was enqueued and not
    /// taken by a capture.
    pub(crate) fn push_written(&self, point: u64) {
        lock(&self.events).pending.push_back(None);
        self.last_written.store(point, Ordering::Release);
        self.issued.store(point, Ordering::Release);
    }

    /// Marks `point`, the next, as one nothing records or writes (an unread point): it passes
    /// with a later point, a synchronize or close.
    pub(crate) fn push_unread(&self, point: u64) {
        lock(&self.events).pending.push_back(None);
        self.issued.store(point, Ordering::Release);
    }

    /// Makes `word` the word written points raise, with `probe` to query for a failure while
    /// it says a point is pending. It starts at the point seen passed last, which says nothing.
    ///
    /// # Safety
    /// 1. `word` is valid for writes of an `AtomicU32`, aligned, used by nothing else but the
    ///    stream's writes of this track's points;
    /// 2. it stays valid until [`close`](Self::close) returned;
    /// 3. the caller marks points (one at a time), and no word was adopted before.
    pub(crate) unsafe fn adopt_word(&self, word: *mut AtomicU32, probe: E) {
        let seen = self.high.load(Ordering::Acquire) as u32;
        // SAFETY: the caller's promise 1.
        unsafe { word.write(AtomicU32::new(seen)) };
        lock(&self.events).probe = Some(probe);
        self.written.store(word, Ordering::Release);
    }

    /// Reads the word no more: its written points are *unread* from now on.
    pub(crate) fn withdraw_word(&self) {
        self.written.store(std::ptr::null_mut(), Ordering::Release);
    }

    /// Whether the stream passed the last point written into `word`, this track's, so that it
    /// never writes it again: seen passed, or the word holds its number (it holds the low 32 bits
    /// of a number not after it, and fewer than 2^32 are pending). The caller is the one look,
    /// or the track is closed and no point is marked any more.
    pub(crate) fn passed_last_write(&self, word: &AtomicU32) -> bool {
        let last = self.last_written.load(Ordering::Acquire);
        if self.high.load(Ordering::Acquire) >= last {
            return true;
        }
        word.load(Ordering::Acquire) == last as u32
    }

    /// Whether written points left unread are pending, with no later point recorded on an
    /// event.
    pub(crate) fn unread_at_the_end(&self) -> bool {
        self.written.load(Ordering::Acquire).is_null()
            && lock(&self.events)
                .pending
                .back()
                .is_some_and(|event| event.is_none())
    }

    /// A look for what is `wanted` as `pace` says, at `now` (nanoseconds on the caller's clock,
    /// never 0 after the first instant): `Err` with the highest point seen passed where nothing
    /// is to be queried (the point wanted known passed, nothing pending, paced out, another look
    /// under way, the track closed).
    pub(crate) fn begin_look(
        &self,
        wanted: Wanted,
        pace: Pace,
        now: u64,
    ) -> Result<Looking<'_>, u64> {
        let high = self.high.load(Ordering::Acquire);
        let point = wanted.point(high);
        if high >= point.min(self.issued.load(Ordering::Acquire)) {
            return Err(high);
        }
        // A look for a later point that finds it pending says nothing of the points before it:
        // a look for the first pending point is paced by looks for that point alone, one for a
        // later point by any look.
        let first = point <= high + 1;
        let paced_by = if first {
            &self.looked
        } else {
            &self.looked_any
        };
        let looking = match pace {
            Pace::Fresh => Looking::begin(&self.looking),
            Pace::Paced(interval) => {
                // 0: no look yet.
                let stamp = paced_by.load(Ordering::Relaxed);
                if stamp != 0 && now.saturating_sub(stamp) < interval {
                    None
                } else {
                    Looking::try_begin(&self.looking)
                }
            }
        };
        let looking = looking.ok_or(high)?;
        self.looked_any.store(now, Ordering::Relaxed);
        if first {
            self.looked.store(now, Ordering::Relaxed);
        }
        Ok(looking)
    }

    /// The one look, once any other ended; `None` once closed.
    pub(crate) fn begin(&self) -> Option<Looking<'_>> {
        Looking::begin(&self.looking)
    }

    /// Takes the events away once no look is under way, and keeps later looks out: what the
    /// caller then gives back to the driver. The word is read no more.
    pub(crate) fn close(&self) -> Events<E> {
        while self
            .looking
            .compare_exchange(IDLE, CLOSED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            yield_now();
        }
        let events = std::mem::replace(&mut *lock(&self.events), Events::new(0));
        self.written.store(std::ptr::null_mut(), Ordering::Release);
        events
    }

    /// Reads the word, then queries the events, the caller being the one look: unless the word
    /// showed the point `wanted` passed (for a [`Wanted::Point`]), that point's (or the first
    /// pending one's, if that is later; for [`Wanted::Newest`], the one after the word's), then,
    /// if it passed, the newest, then from there by galloping and bisection the last passed;
    /// gives the passed points' events back (beyond `kept`, into `surplus`). Returns the highest
    /// point seen passed. When the last look found the stream past its newest point, the newest
    /// is queried first: a stream that keeps up with its points then costs one query a look,
    /// not two.
    pub(crate) fn search(
        &self,
        _looking: &Looking<'_>,
        wanted: Wanted,
        queries: &mut impl Queries<Event = E>,
        surplus: &mut Vec<E>,
    ) -> u64 {
        let issued = self.issued.load(Ordering::Acquire);
        let mut high = self.high.load(Ordering::Acquire);
        if high >= issued {
            return high;
        }
        if let Some(written) = self.written_passed(high, issued) {
            high = self.pass_up_to(written, surplus);
        }
        // A look for the newest goes on from the point after the one the word names: points
        // marked on events after it may have passed too.
        let wanted = wanted.point(high);
        if high >= wanted.min(issued) {
            return high;
        }
        let Some(wanted) = self.readable_from(wanted.clamp(high + 1, issued)) else {
            // Only written points left unread: nothing tells when the stream passed them but a
            // later point or a synchronize. The probe still answers a failure.
            let _ = self.answer(issued, queries);
            return high;
        };
        let newest_pending = if wanted < issued && self.caught_up.load(Ordering::Relaxed) {
            match self.answer(issued, queries) {
                Answer::Passed => return self.pass_up_to(issued, surplus),
                Answer::Pending => true,
                Answer::Failed => return high,
            }
        } else {
            false
        };
        match self.answer(wanted, queries) {
            Answer::Passed => {}
            Answer::Pending => {
                self.caught_up.store(false, Ordering::Relaxed);
                return high;
            }
            Answer::Failed => return high,
        }
        if wanted == issued {
            return self.pass_up_to(issued, surplus);
        }
        if !newest_pending {
            match self.answer(issued, queries) {
                Answer::Passed => return self.pass_up_to(issued, surplus),
                Answer::Pending => {}
                Answer::Failed => return self.pass_up_to(wanted, surplus),
            }
        }
        // `passed` is known passed, `pending` not.
        let (mut passed, mut pending) = (wanted, issued);
        let mut step = 1;
        while passed + step < pending {
            match self.answer(passed + step, queries) {
                Answer::Passed => {
                    passed += step;
                    step *= 2;
                }
                Answer::Pending => {
                    pending = passed + step;
                    break;
                }
                Answer::Failed => return self.pass_up_to(passed, surplus),
            }
        }
        while pending - passed > 1 {
            let middle = passed + (pending - passed) / 2;
            match self.answer(middle, queries) {
                Answer::Passed => passed = middle,
                Answer::Pending => pending = middle,
                Answer::Failed => break,
            }
        }
        self.pass_up_to(passed, surplus)
    }

    /// Records that every point up to `point` passed, without a query (a synchronize that
    /// began after it was marked returned), the caller being the one look; returns the highest
    /// point seen passed.
    pub(crate) fn pass(&self, _looking: &Looking<'_>, point: u64, surplus: &mut Vec<E>) -> u64 {
        self.pass_up_to(point, surplus)
    }

    /// The newest point the word says passed, when it says more than `high`: the word holds the
    /// low 32 bits of the last written point the stream passed, taken as the newest number with
    /// those bits not after the last written point marked (`last_written`, read first; fewer
    /// than 2^32 points are ever pending). A number at or below `high` (a written point older
    /// than an event's point seen since) says nothing; so does a write marked after
    /// `last_written` was read, which names a number 2^32 before its own. A point the word names
    /// beyond `issued` was written after `issued` was read, so all up to it passed.
    fn written_passed(&self, high: u64, issued: u64) -> Option<u64> {
        let word = self.written.load(Ordering::Acquire);
        if word.is_null() {
            return None;
        }
        let last = self.last_written.load(Ordering::Acquire);
        // SAFETY: the adopted word, valid until `close` (`adopt_word`'s promise 2), which waits
        // for the caller's look.
        let value = unsafe { &*word }.load(Ordering::Acquire);
        let behind = (last as u32).wrapping_sub(value);
        let named = last.checked_sub(u64::from(behind))?;
        (named > high).then(|| named.min(issued))
    }

    /// The first pending point from `point` on that a look can read: `point` itself, unless it
    /// is a written point left unread (the word withdrawn), which only a later point's passing
    /// shows passed; then the first later point recorded on an event, if any.
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
            .position(Option::is_some)
            .map(|later| point + later as u64)
    }

    /// Whether the pending point `point` was passed: a query of its event, or, for a written
    /// point, a read of the word, then a query of the probe, which answers only a failure. The
    /// caller is the one look, so the event stays `point`'s meanwhile.
    fn answer(&self, point: u64, queries: &mut impl Queries<Event = E>) -> Answer {
        let (event, probe) = {
            let events = lock(&self.events);
            let index = point.checked_sub(events.first).map(|index| index as usize);
            // Always there while the track is open; nothing, once closed.
            match index.and_then(|index| events.pending.get(index)) {
                Some(&event) => (event, events.probe),
                None => return Answer::Failed,
            }
        };
        let queried = match event {
            Some(event) => queries.query(point, event),
            None => {
                let high = self.high.load(Ordering::Acquire);
                let issued = self.issued.load(Ordering::Acquire);
                if self
                    .written_passed(high, issued)
                    .is_some_and(|passed| passed >= point)
                {
                    return Answer::Passed;
                }
                let Some(probe) = probe else {
                    return Answer::Pending;
                };
                match queries.query_probe(probe) {
                    Queried::Complete | Queried::NotReady => return Answer::Pending,
                    Queried::Failed => return Answer::Failed,
                }
            }
        };
        match queried {
            Queried::Complete => Answer::Passed,
            Queried::NotReady => Answer::Pending,
            Queried::Failed => Answer::Failed,
        }
    }

    /// Records that every point up to `point` passed, and gives their events back (the caller
    /// is the one look); returns the highest point seen passed.
    fn pass_up_to(&self, point: u64, surplus: &mut Vec<E>) -> u64 {
        let mut events = lock(&self.events);
        let events = &mut *events;
        if point < events.first {
            return self.high.load(Ordering::Acquire);
        }
        let count = (point - events.first + 1) as usize;
        let passed = events.pending.drain(..count);
        events.free.extend(passed.flatten());
        events.first = point + 1;
        self.high.store(point, Ordering::Release);
        self.caught_up
            .store(events.pending.is_empty(), Ordering::Relaxed);
        let beyond = events.free.len().saturating_sub(self.kept);
        let at = events.free.len() - beyond.min(self.given_back_per_look);
        surplus.extend(events.free.drain(at..));
        point
    }

    /// How many events the track holds now: pending, and kept for its next points.
    #[cfg(test)]
    pub(crate) fn event_counts(&self) -> (usize, usize) {
        let events = lock(&self.events);
        (events.pending.len(), events.free.len())
    }

    /// The probe, if there is one.
    #[cfg(test)]
    pub(crate) fn probe(&self) -> Option<E> {
        lock(&self.events).probe
    }

    /// The word, if it is read.
    #[cfg(test)]
    pub(crate) fn word(&self) -> *mut AtomicU32 {
        self.written.load(Ordering::Acquire)
    }

    /// As if `point` points had been marked and seen passed, with none pending.
    #[cfg(test)]
    pub(crate) fn start_after(&self, point: u64) {
        let mut events = lock(&self.events);
        assert!(events.pending.is_empty(), "no point pending");
        events.first = point + 1;
        self.issued.store(point, Ordering::Release);
        self.high.store(point, Ordering::Release);
    }
}

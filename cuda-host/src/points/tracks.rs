//! The tracks stream points are made of: per stream in use, a ring of events the stream records
//! in turn, and the numbers of the points they were recorded for.
//!
//! **Events, not memory writes** (see `crate::points`): recording an event costs the enqueuing
//! thread 0.13 µs on an H200, a 32-bit stream memory write 0.8 µs. What the write saves is the
//! look: one read of memory against a `cuEventQuery` of 0.1–0.3 µs, which, made by another
//! thread, also slows the enqueuing thread (by about 0.4 µs a query: the bench's "queried
//! elsewhere" form). So looks are rare: a drain of a launch or a release looks at a track at
//! most every `DRAIN_LOOK` (50 µs), reading the clock only every `CLOCK_EVERY`th time; the
//! watcher at most every `WATCH_LOOK` (50 µs); a synchronize, [`reclaim`](crate::reclaim) and
//! [`StreamPoint::is_passed`](crate::StreamPoint::is_passed) look at once ([`Pace`]). A look
//! queries one event when it is after one point, else the newest, then bisects; every look runs
//! in the relaxed capture interaction mode (`in_relaxed_capture_mode`).
//!
//! **The ring.** Point `n` of a track is recorded on event `n % RING`. An event records only its
//! last point: when it is re-recorded before anyone saw its earlier point passed, that point is
//! seen passed with a later one (the stream passes points in order), later, never early. The
//! last `RING` points each have their own event, completed ones first: a look queries the
//! newest, then bisects them (at most 7 queries). A
//! point's number is published (`Slot::point`) only after its record returned and before it
//! counts as issued, so a look that reads the number and then queries the event sees that record
//! or a later one of the same event: a completed query proves the number read, or more. An event
//! whose record a capture other code began may have taken is retired (`ContextTracks::mark`):
//! its slot's number goes to 0, which proves nothing, and the slot's next point makes it a new
//! event.
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
//! new); only when none is free is another track made, with its ring of events.
//!
//! The events belong to the context's shared state and are destroyed before the context is
//! released; the driver lets an event still pending go once it completed.

use crate::checked::checked;
use crate::contained_log::logged;
use crate::error::{Error, Result};
use crate::launch::{
    ContextShared, Look, Progress, RelaxedCaptureMode, StreamPointsOfContext,
    abandon_context_if_failed, capture_state,
};
use crate::stream_slots::{StreamSlot, StreamSlots};
use crate::sync::lock;
use cuda_host_sys::{CUcontext, CUevent, CUevent_flags, CUevent_st, CUresult, CUstream, Driver};
use std::any::Any;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Events per track: how many points may wait unseen before one is seen only with a later one.
const RING: usize = 64;
/// How often a thread's drains look at a track, at most.
const DRAIN_LOOK: Duration = Duration::from_micros(50);
/// How often the watcher looks at a track, at most.
pub(super) const WATCH_LOOK: Duration = Duration::from_micros(50);

/// When a look queries a track's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pace {
    /// Now, after any look going on: a synchronize, `reclaim`, `is_passed`.
    Now,
    /// If nobody did for `WATCH_LOOK`: the watcher, which paces itself.
    Watcher,
    /// If nobody did for `DRAIN_LOOK`, reading the clock only every `CLOCK_EVERY`th time: the
    /// drains of launches and the polls of futures, which must stay cheap.
    Drain,
}

/// One event of a track's ring.
struct Slot {
    /// Null once retired (its last record was a capture's) until its next point makes another.
    /// Changed only by a record, while no query uses it (`users`).
    event: AtomicPtr<CUevent_st>,
    /// The last point recorded on the event (0: none, or none of the stream's), published after
    /// its record returned and the stream was seen not capturing.
    point: AtomicU64,
    /// The queries using the event now, and `RECORDING` while a point is recorded on it: a record
    /// waits for the queries to end and none begins meanwhile, so that no query ever reaches an
    /// event whose last record may be a live capture's (`ContextTracks::mark`).
    users: AtomicU64,
}

/// `Slot::users`' flag of a record under way.
const RECORDING: u64 = 1 << 63;

impl Slot {
    fn new(event: CUevent) -> Slot {
        Slot {
            event: AtomicPtr::new(event),
            point: AtomicU64::new(0),
            users: AtomicU64::new(0),
        }
    }

    /// Lets a query use the event, unless a record is under way (`None`); the query ends when
    /// the guard is dropped, also on unwind.
    fn query_use(&self) -> Option<SlotUse<'_>> {
        if self.users.fetch_add(1, Ordering::AcqRel) & RECORDING != 0 {
            self.users.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(SlotUse(self))
    }

    /// Holds queries off for a record, after those under way ended (a query takes a fraction of
    /// a microsecond); released when the guard is dropped, also on unwind.
    fn record_use(&self) -> SlotRecord<'_> {
        self.users.fetch_or(RECORDING, Ordering::AcqRel);
        while self.users.load(Ordering::Acquire) != RECORDING {
            std::hint::spin_loop();
        }
        SlotRecord(self)
    }
}

/// A query's use of a slot's event.
struct SlotUse<'slot>(&'slot Slot);

impl Drop for SlotUse<'_> {
    fn drop(&mut self) {
        self.0.users.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A record's hold on a slot's event.
struct SlotRecord<'slot>(&'slot Slot);

impl Drop for SlotRecord<'_> {
    fn drop(&mut self) {
        self.0.users.fetch_and(!RECORDING, Ordering::AcqRel);
    }
}

/// Clears a flag when dropped, also on unwind.
struct Lowered<'flag>(&'flag AtomicBool);

impl Drop for Lowered<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// One stream's sequence of points.
pub(crate) struct Track {
    driver: Arc<Driver>,
    /// Its context (`CUcontext` address), for failures its queries answer.
    context: usize,
    slots: Box<[Slot]>,
    state: Mutex<TrackState>,
    /// The last point recorded: stored under `state`'s lock once its record returned.
    issued: AtomicU64,
    /// The highest point seen passed.
    high: AtomicU64,
    /// When the track was last looked at, in nanoseconds since `epoch()`.
    looked: AtomicU64,
    /// Held while a thread queries the track's events: one at a time is enough.
    looking: AtomicBool,
    /// Whether a query's unexpected error was logged (once per track).
    logged: AtomicBool,
}

struct TrackState {
    /// The id of the stream the track serves, if any.
    owner: Option<u64>,
    /// Events retired because a capture took their last record: never queried or recorded
    /// again, destroyed with the context's tracks.
    retired: Vec<CUevent>,
}

// SAFETY: the events are driver handles, usable from any thread; the rest is atomics and a
// mutex.
unsafe impl Send for Track {}
// SAFETY: as above.
unsafe impl Sync for Track {}

impl Progress for Track {
    fn passed(&self, look: Look) -> u64 {
        self.look(match look {
            Look::Fresh => Pace::Now,
            Look::Paced => Pace::Drain,
        })
    }
}

/// How many paced looks of a thread skip the clock before one reads it: reading it costs as
/// much as the rest of a look that finds nothing due (40 ns on the H200's host).
const CLOCK_EVERY: u32 = 8;

/// Whether this paced look of the calling thread reads the clock.
fn clock_due() -> bool {
    thread_local! {
        static LOOKS: Cell<u32> = const { Cell::new(0) };
    }
    LOOKS
        .try_with(|looks| {
            let count = looks.get().wrapping_add(1);
            looks.set(count);
            count % CLOCK_EVERY == 0
        })
        .unwrap_or(true)
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl Track {
    /// The highest point seen passed, after looking at the events if there are points not seen
    /// passed and `pace` says so. A look `Now` is this call's own (it waits for another thread's
    /// look to end), so it sees what the stream finished before it.
    pub(super) fn look(&self, pace: Pace) -> u64 {
        self.look_with(self.issued.load(Ordering::Acquire), pace, || self.query())
    }

    /// [`look`](Self::look) for someone who needs `point` only: one query, of that point's
    /// event, while the event still holds it.
    pub(super) fn look_for(&self, point: u64, pace: Pace) -> u64 {
        self.look_with(point, pace, || {
            let issued = self.issued.load(Ordering::Acquire);
            // A retired slot (its last record was a capture's) answers for no point: the
            // newest, or the bisection, does.
            if issued - point >= RING as u64 || self.retired(point) {
                return self.query();
            }
            match self.completed(point) {
                Some(passed) => self.raise(passed),
                None => self.high.load(Ordering::Acquire),
            }
        })
    }

    /// Looks with `query` unless `wanted` is known passed, or `pace` says not now.
    fn look_with(&self, wanted: u64, pace: Pace, query: impl FnOnce() -> u64) -> u64 {
        let high = self.high.load(Ordering::Acquire);
        if high >= wanted {
            return high;
        }
        let every = match pace {
            Pace::Now => Duration::ZERO,
            Pace::Watcher => WATCH_LOOK,
            Pace::Drain if clock_due() => DRAIN_LOOK,
            Pace::Drain => return high,
        };
        let now = epoch().elapsed().as_nanos() as u64;
        if pace == Pace::Now {
            // Another look takes a few queries at most.
            while self.looking.swap(true, Ordering::Acquire) {
                std::thread::yield_now();
            }
        } else if now.saturating_sub(self.looked.load(Ordering::Relaxed)) < every.as_nanos() as u64
            || self.looking.swap(true, Ordering::Acquire)
        {
            return high;
        }
        let _looked = Lowered(&self.looking);
        self.looked.store(now, Ordering::Relaxed);
        in_relaxed_capture_mode(&self.driver, query).unwrap_or(high)
    }

    /// The last point recorded.
    pub(super) fn issued(&self) -> u64 {
        self.issued.load(Ordering::Acquire)
    }

    /// Queries the events: the newest first, which answers for every point when the stream
    /// caught up; else, by bisection, the last completed of the points whose events still hold
    /// them (the last `RING`), where the completed ones come first.
    fn query(&self) -> u64 {
        let issued = self.issued.load(Ordering::Acquire);
        let high = self.high.load(Ordering::Acquire);
        if high >= issued {
            return high;
        }
        if let Some(point) = self.completed(issued) {
            return self.raise(point);
        }
        // `passed` is known passed (or is where the events' window begins), `pending` not.
        let (mut passed, mut pending) = (high.max(issued.saturating_sub(RING as u64)), issued);
        while pending - passed > 1 {
            let mut middle = passed + (pending - passed) / 2;
            // A retired slot says nothing of its point: ask the next that holds one.
            while self.retired(middle) && middle + 1 < pending {
                middle += 1;
            }
            if self.retired(middle) {
                break;
            }
            match self.completed(middle) {
                Some(point) => {
                    self.raise(point);
                    passed = middle;
                }
                None => pending = middle,
            }
        }
        self.high.load(Ordering::Acquire)
    }

    /// The point the event of `point`'s slot was last recorded for (`point` or a later one),
    /// if that record completed. `None` while a point is being recorded on the event, and when
    /// the event no longer holds `point` (retired).
    fn completed(&self, point: u64) -> Option<u64> {
        let slot = &self.slots[(point % RING as u64) as usize];
        let _use = slot.query_use()?;
        // Read before the query: the query then sees this record or a later one of the event.
        let recorded = slot.point.load(Ordering::Acquire);
        let event = slot.event.load(Ordering::Acquire);
        if recorded < point || event.is_null() {
            return None;
        }
        // SAFETY: the event lives while the context's shared state does, which whoever looks
        // keeps (see the module's comment); it is not being recorded (`_use`).
        let result = unsafe { self.driver.cuEventQuery(event) };
        match result {
            CUresult::CUDA_SUCCESS => Some(recorded),
            CUresult::CUDA_ERROR_NOT_READY => None,
            error => {
                abandon_context_if_failed(self.context, error);
                if !self.logged.swap(true, Ordering::Relaxed) {
                    let error = self.driver.check("cuEventQuery", error).unwrap_err();
                    logged!(warn!("cuEventQuery of a stream point failed: {error}"));
                }
                None
            }
        }
    }

    /// Whether `point`'s slot is retired: its event's last record was a capture's, and no later
    /// point made it another.
    fn retired(&self, point: u64) -> bool {
        let slot = &self.slots[(point % RING as u64) as usize];
        slot.event.load(Ordering::Acquire).is_null()
    }

    fn raise(&self, point: u64) -> u64 {
        self.high.fetch_max(point, Ordering::AcqRel).max(point)
    }
}

/// Runs `query` with the calling thread in the relaxed capture interaction mode
/// ([`RelaxedCaptureMode`]), then in its own again; `None`, logged, when the driver refused to
/// change the mode. So cuda-host's looks never break a capture, its own or other code's, as long
/// as the events they query hold no capture's record (`ContextTracks::mark`).
fn in_relaxed_capture_mode<T>(driver: &Driver, query: impl FnOnce() -> T) -> Option<T> {
    match RelaxedCaptureMode::enter(driver) {
        Ok(_relaxed) => Some(query()),
        Err(error) => {
            logged!(warn!(
                "a look at stream points waits for the next one: {error}"
            ));
            None
        }
    }
}

/// The tracks of one context.
pub(crate) struct ContextTracks {
    driver: Arc<Driver>,
    context: CUcontext,
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
    slots: StreamSlots<Track>,
}

/// What marking a point on a stream gives: its track and number.
pub(crate) struct Marked {
    pub(crate) track: Arc<Track>,
    pub(crate) point: u64,
}

impl ContextTracks {
    pub(crate) fn new(context: &ContextShared) -> ContextTracks {
        ContextTracks {
            driver: Arc::clone(context.driver_arc()),
            context: context.raw(),
            state: Mutex::new(State::default()),
        }
    }

    /// Records on `stream` (whose id is `stream_id`) its track's next point. The context must
    /// be current where the driver resolves a special stream against it.
    ///
    /// Other code may begin capturing the stream between the caller's capture check and the
    /// record, and the capture then takes the record: the event stands for a point of the graph,
    /// and a query of it would invalidate the capture. So the stream is asked again once the
    /// record returned: if it is capturing (or cannot tell), the event is retired (never queried
    /// or recorded again) and the point refused. Queries wait for neither: none uses the event
    /// from before the record until this answer (`Slot::users`). A capture that begins and ends
    /// between the record and that question is not seen, and the event may then answer
    /// "complete" before the stream passed the point (the software driver's does).
    ///
    /// # Errors
    /// [`Error::PointInCapture`] when the stream was found capturing after the record; the
    /// driver's error of `cuEventRecord`, `cuStreamIsCapturing`, or `cuEventCreate` for a
    /// retired event's successor.
    pub(crate) fn mark(
        &self,
        shared: &ContextShared,
        stream: CUstream,
        stream_id: u64,
    ) -> Result<Marked> {
        loop {
            let track = self.track_of(shared, stream_id)?;
            let point = {
                let mut state = lock(&track.state);
                if state.owner != Some(stream_id) {
                    // Taken back between the look-up and the lock: look again.
                    continue;
                }
                let point = track.issued.load(Ordering::Relaxed) + 1;
                self.record(shared, &track, &mut state, point, stream)?;
                point
            };
            return Ok(Marked { track, point });
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
        let slot = &track.slots[(point % RING as u64) as usize];
        let _recording = slot.record_use();
        let mut event = slot.event.load(Ordering::Acquire);
        if event.is_null() {
            event = shared.with_current(|| create_event(&self.driver))?;
            slot.event.store(event, Ordering::Release);
        }
        // SAFETY: a valid stream (the caller's) and an event of its context.
        unsafe { checked!(&self.driver, cuEventRecord(event, stream)) }?;
        let refusal = match capture_state(&self.driver, stream) {
            Ok(None) => None,
            Ok(Some(status)) => Some(Error::PointInCapture { status }),
            Err(error) => Some(error),
        };
        if let Some(error) = refusal {
            // The record may be a capture's: the event's earlier point goes with it, and is
            // seen passed with a later one.
            slot.point.store(0, Ordering::Release);
            slot.event.store(std::ptr::null_mut(), Ordering::Release);
            state.retired.push(event);
            return Err(error);
        }
        slot.point.store(point, Ordering::Release);
        track.issued.store(point, Ordering::Release);
        Ok(())
    }

    /// The track of the stream `stream_id`, given one if it has none.
    fn track_of(&self, shared: &ContextShared, stream_id: u64) -> Result<Arc<Track>> {
        let state = &mut *lock(&self.state);
        let tracks = &mut state.tracks;
        state.slots.of(stream_id, || {
            let track = shared.with_current(|| self.make_track())?;
            tracks.push(Arc::clone(&track));
            Ok(vec![track])
        })
    }

    /// A track with its ring of events. The context is current.
    fn make_track(&self) -> Result<Arc<Track>> {
        let mut events = Vec::with_capacity(RING);
        for _ in 0..RING {
            match create_event(&self.driver) {
                Ok(event) => events.push(event),
                Err(error) => {
                    destroy_events(&self.driver, events.into_iter());
                    return Err(error);
                }
            }
        }
        Ok(Arc::new(Track {
            driver: Arc::clone(&self.driver),
            context: self.context.addr(),
            slots: events.into_iter().map(Slot::new).collect(),
            state: Mutex::new(TrackState {
                owner: None,
                retired: Vec::new(),
            }),
            issued: AtomicU64::new(0),
            high: AtomicU64::new(0),
            looked: AtomicU64::new(0),
            looking: AtomicBool::new(false),
            logged: AtomicBool::new(false),
        }))
    }

    /// How many tracks serve a stream now, and how many exist (for tests).
    #[cfg(test)]
    fn sizes(&self) -> (usize, usize) {
        let state = lock(&self.state);
        (state.slots.lent().count(), state.tracks.len())
    }
}

impl StreamSlot for Track {
    fn lend(&self, stream_id: u64) {
        lock(&self.state).owner = Some(stream_id);
    }

    /// Quiet: its stream passed every point it was given, and no thread is marking one.
    fn take_back_if_quiet(&self) -> bool {
        let Ok(mut state) = self.state.try_lock() else {
            return false;
        };
        if self.look(Pace::Now) < self.issued() {
            return false;
        }
        state.owner = None;
        true
    }
}

impl StreamPointsOfContext for ContextTracks {
    fn synchronized(&self, stream: Option<CUstream>) {
        let tracks: Vec<Arc<Track>> = match stream {
            None => lock(&self.state).slots.lent().cloned().collect(),
            Some(stream) => {
                let mut id = 0;
                // SAFETY: a live stream of the caller's; a valid out-pointer.
                if unsafe { checked!(&self.driver, cuStreamGetId(stream, &mut id)) }.is_err() {
                    return;
                }
                lock(&self.state)
                    .slots
                    .lent_to(id)
                    .cloned()
                    .into_iter()
                    .collect()
            }
        };
        for track in tracks {
            track.look(Pace::Now);
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// An event for a track's ring. The context is current.
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

/// Destroys events; the driver lets those still pending go once they completed.
fn destroy_events(driver: &Driver, events: impl Iterator<Item = CUevent>) {
    for event in events {
        // SAFETY: an event of this module's, destroyed once, never used after.
        if let Err(error) = unsafe { checked!(driver, cuEventDestroy_v2(event)) } {
            logged!(error!(
                "cannot destroy an event of the stream points: {error}"
            ));
        }
    }
}

impl Drop for ContextTracks {
    fn drop(&mut self) {
        let tracks = std::mem::take(&mut lock(&self.state).tracks);
        for track in tracks {
            let retired = std::mem::take(&mut lock(&track.state).retired);
            let ring = track
                .slots
                .iter()
                .map(|slot| slot.event.load(Ordering::Acquire));
            destroy_events(
                &self.driver,
                ring.filter(|event| !event.is_null()).chain(retired),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_driver;
    use cuda_host_sys::CUstreamCaptureMode;
    use std::collections::HashMap;
    use std::ffi::{c_uint, c_void};
    use std::sync::atomic::AtomicUsize;

    /// A fake stream, shared by the tests: events recorded in order, of which the first
    /// `completed` ran. Tests tell their events apart by the stream handle they record on.
    #[derive(Default)]
    struct FakeStreams {
        /// Event to (stream, index of its last record on that stream).
        last_record: HashMap<usize, (usize, usize)>,
        /// Stream to (records so far, records completed).
        streams: HashMap<usize, (usize, usize)>,
        /// Stream to the queries of its events.
        queries: HashMap<usize, usize>,
        next_event: usize,
    }

    static STREAMS: Mutex<Option<FakeStreams>> = Mutex::new(None);
    static DESTROYED: AtomicUsize = AtomicUsize::new(0);

    fn with_streams<T>(call: impl FnOnce(&mut FakeStreams) -> T) -> T {
        call(lock(&STREAMS).get_or_insert_with(FakeStreams::default))
    }

    /// Lets the stream `stream` run its first `records` records.
    fn complete(stream: usize, records: usize) {
        with_streams(|fake| fake.streams.entry(stream).or_default().1 = records);
    }

    unsafe extern "C" fn create(event: *mut CUevent, _flags: c_uint) -> CUresult {
        let id = with_streams(|fake| {
            fake.next_event += 1;
            fake.next_event
        });
        // SAFETY: a valid out-pointer.
        unsafe { event.write(std::ptr::without_provenance_mut(id)) };
        CUresult::CUDA_SUCCESS
    }

    unsafe extern "C" fn record(event: CUevent, stream: CUstream) -> CUresult {
        with_streams(|fake| {
            let (records, _) = fake.streams.entry(stream.addr()).or_default();
            fake.last_record
                .insert(event.addr(), (stream.addr(), *records));
            *records += 1;
        });
        CUresult::CUDA_SUCCESS
    }

    /// The queries of the events recorded on `stream` so far.
    fn queries(stream: usize) -> usize {
        with_streams(|fake| fake.queries.get(&stream).copied().unwrap_or(0))
    }

    unsafe extern "C" fn query(event: CUevent) -> CUresult {
        with_streams(|fake| match fake.last_record.get(&event.addr()) {
            Some(&(stream, index)) => {
                *fake.queries.entry(stream).or_default() += 1;
                if index < fake.streams[&stream].1 {
                    CUresult::CUDA_SUCCESS
                } else {
                    CUresult::CUDA_ERROR_NOT_READY
                }
            }
            None => CUresult::CUDA_SUCCESS,
        })
    }

    unsafe extern "C" fn destroy(_event: CUevent) -> CUresult {
        DESTROYED.fetch_add(1, Ordering::SeqCst);
        CUresult::CUDA_SUCCESS
    }

    unsafe extern "C" fn set_current(_context: CUcontext) -> CUresult {
        CUresult::CUDA_SUCCESS
    }

    unsafe extern "C" fn exchange_mode(_mode: *mut CUstreamCaptureMode) -> CUresult {
        CUresult::CUDA_SUCCESS
    }

    unsafe extern "C" fn not_capturing(
        _stream: CUstream,
        status: *mut cuda_host_sys::CUstreamCaptureStatus,
    ) -> CUresult {
        // SAFETY: a valid out-pointer.
        unsafe {
            status.write(cuda_host_sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
        };
        CUresult::CUDA_SUCCESS
    }

    fn fakes() -> Arc<Driver> {
        // SAFETY: each fake has its entry point's signature.
        unsafe {
            fake_driver::driver(&[
                (c"cuEventCreate", create as *mut c_void),
                (c"cuEventRecord", record as *mut c_void),
                (c"cuEventQuery", query as *mut c_void),
                (c"cuEventDestroy_v2", destroy as *mut c_void),
                (c"cuCtxSetCurrent", set_current as *mut c_void),
                (c"cuStreamIsCapturing", not_capturing as *mut c_void),
                (
                    c"cuThreadExchangeStreamCaptureMode",
                    exchange_mode as *mut c_void,
                ),
            ])
        }
    }

    #[test]
    fn points_count_up_and_quiet_tracks_are_reused_before_a_new_one() {
        let driver = fakes();
        let shared = fake_driver::context(&driver);
        let tracks = ContextTracks::new(&shared);
        let stream = 0x71_usize as CUstream;
        let first = tracks.mark(&shared, stream, 1).expect("marked");
        let second = tracks.mark(&shared, stream, 1).expect("marked");
        assert!(Arc::ptr_eq(&first.track, &second.track));
        assert_eq!((first.point, second.point), (1, 2));
        assert_eq!(second.track.look(Pace::Now), 0, "nothing ran yet");
        complete(0x71, 2);
        assert_eq!(second.track.look(Pace::Now), 2);
        // Another stream finds the first one's track quiet and takes it over, its numbers going
        // on from where they were.
        let other = tracks.mark(&shared, stream, 2).expect("marked");
        assert!(Arc::ptr_eq(&other.track, &first.track));
        assert_eq!(other.point, 3);
        assert_eq!(tracks.sizes(), (1, 1));
        // While that point is pending, a third stream needs a track of its own.
        tracks.mark(&shared, stream, 3).expect("marked");
        assert_eq!(tracks.sizes(), (2, 2));
        let before = DESTROYED.load(Ordering::SeqCst);
        drop(tracks);
        assert_eq!(DESTROYED.load(Ordering::SeqCst) - before, 2 * RING);
    }

    #[test]
    fn a_point_whose_event_was_recorded_again_passes_with_the_later_point_never_early() {
        let driver = fakes();
        let shared = fake_driver::context(&driver);
        let tracks = ContextTracks::new(&shared);
        let stream = 0x72_usize as CUstream;
        let points = (0..RING + 3)
            .map(|_| tracks.mark(&shared, stream, 7).expect("marked").point)
            .collect::<Vec<_>>();
        let track = tracks.mark(&shared, stream, 7).expect("marked").track;
        let last = *points.last().expect("points") + 1;
        // Points 1 to 4 share their events with points RING + 1 to RING + 4: while those are
        // pending, the first ones cannot be told passed, and are not.
        complete(0x72, 4);
        assert_eq!(track.look(Pace::Now), 0, "never early");
        // The stream reached point RING: the events of 5 to RING answer, and so for 1 to 4.
        complete(0x72, RING);
        assert_eq!(track.look(Pace::Now), RING as u64);
        complete(0x72, RING + 1);
        assert_eq!(track.look(Pace::Now), RING as u64 + 1);
        complete(0x72, RING + 2);
        assert_eq!(track.look(Pace::Now), RING as u64 + 2);
        complete(0x72, last as usize);
        assert_eq!(track.look(Pace::Now), last, "the newest answers for all");
    }

    #[test]
    fn paced_looks_query_the_events_at_most_once_in_so_many_looks_and_not_when_all_passed() {
        let driver = fakes();
        let shared = fake_driver::context(&driver);
        let tracks = ContextTracks::new(&shared);
        let stream = 0x73_usize as CUstream;
        let track = tracks.mark(&shared, stream, 9).expect("marked").track;
        assert_eq!(track.look(Pace::Now), 0);
        // Pending: at most one look in `CLOCK_EVERY` reads the clock, and only that one may
        // query (whether it does depends on the time since the last look).
        let before = queries(0x73);
        for _ in 0..CLOCK_EVERY {
            assert_eq!(track.look(Pace::Drain), 0, "nothing ran");
        }
        assert!(
            queries(0x73) - before <= 1,
            "{} queries",
            queries(0x73) - before
        );
        complete(0x73, 1);
        assert_eq!(track.look(Pace::Now), 1, "a look now always queries");
        let before = queries(0x73);
        for _ in 0..2 * CLOCK_EVERY {
            assert_eq!(track.look(Pace::Drain), 1);
        }
        assert_eq!(track.look(Pace::Now), 1);
        assert_eq!(queries(0x73), before, "nothing pending: no query");
    }

    #[test]
    fn a_look_for_one_point_queries_its_event_alone() {
        let driver = fakes();
        let shared = fake_driver::context(&driver);
        let tracks = ContextTracks::new(&shared);
        let stream = 0x74_usize as CUstream;
        for _ in 0..9 {
            tracks.mark(&shared, stream, 11).expect("marked");
        }
        let track = tracks.mark(&shared, stream, 11).expect("marked").track;
        complete(0x74, 3);
        assert_eq!(track.look_for(2, Pace::Now), 2, "point 2's event answers");
        assert_eq!(queries(0x74), 1);
        assert_eq!(track.look_for(2, Pace::Now), 2, "known: no query");
        assert_eq!(track.look_for(4, Pace::Now), 2, "pending");
        assert_eq!(queries(0x74), 2);
    }
}

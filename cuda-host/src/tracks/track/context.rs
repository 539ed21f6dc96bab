//! A context's tracks: lent to its streams, marking their points, seeing synchronizes return,
//! and closed with the context, which gives their events and words back.

use super::events::destroy_events;
use super::look::{Track, TrackState};
use super::word::PointWrite;
use crate::checked::checked;
use crate::contain::holding_logs;
use crate::error::{CaptureState, Error, Result};
use crate::launch::{ContextShared, Look, refuse_capture};
use crate::query_events;
use crate::stream_leases::{StreamLease, StreamLeases};
use crate::sync::lock;
use cuda_host_sys::{CUcontext, CUstream, Driver};
use std::cell::RefCell;
use std::sync::{Arc, Mutex, Weak};

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
            if let Err(error) = refuse_capture(&self.driver, stream, point_in_capture) {
                track.take_word(shared, state);
                return Err(error);
            }
            track.core.push_written(point);
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
            track.core.push_unread(point);
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
                let point = track.core.next_point();
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
        let free = track.core.take_free();
        let event = match free {
            Some(event) => event,
            None => shared.with_current(|| query_events::create(&self.driver))?,
        };
        // SAFETY: a valid stream (the caller's) and an event of its context, which no pending
        // point holds.
        if let Err(error) = unsafe { checked!(&self.driver, cuEventRecord(event, stream)) } {
            track.core.keep_free([event]);
            return Err(error.into());
        }
        if let Err(error) = refuse_capture(&self.driver, stream, point_in_capture) {
            // The record may be a capture's.
            state.retired.push(event);
            return Err(error);
        }
        track.core.push_recorded(point, event);
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
        if !self.unread_at_the_end(stream_id) {
            return Ok(());
        }
        self.mark(shared, stream, stream_id).map(drop)
    }

    /// Whether the track of the stream `stream_id` ends in points nothing records or reads
    /// (which [`mark_after_unread`](Self::mark_after_unread) marks a point after). No driver
    /// call.
    pub(crate) fn unread_at_the_end(&self, stream_id: u64) -> bool {
        let track = lock(&self.state).leases.lent_to(stream_id).cloned();
        track.is_some_and(|track| track.core.unread_at_the_end())
    }

    /// How many tracks serve a stream now, and how many exist (for tests).
    #[cfg(test)]
    pub(super) fn sizes(&self) -> (usize, usize) {
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

impl Drop for ContextTracks {
    fn drop(&mut self) {
        let tracks = std::mem::take(&mut lock(&self.state).tracks);
        // Held by the public context's state until after this drop: never the last reference.
        let shared = self.shared.upgrade();
        for track in tracks {
            // Waits for a look under way (the watcher's may be), and keeps later ones out.
            let closed = track.core.close();
            let retired = std::mem::take(&mut lock(&track.state).retired);
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
            let events = (closed.pending.into_iter().flatten())
                .chain(closed.free)
                .chain(retired)
                .chain(closed.probe);
            // SAFETY: the track is closed, so no look uses its events again; they were taken
            // from it, so nobody else destroys them.
            unsafe { destroy_events(&self.driver, events) };
        }
    }
}

/// The refusal of a point asked of a capturing stream.
fn point_in_capture(status: CaptureState) -> Error {
    Error::PointInCapture { status }
}

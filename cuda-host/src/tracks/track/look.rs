//! A track, and its looks: when a look may query (`Pace`), the relaxed capture interaction mode
//! it queries in, the driver's answers, and the log calls made once it ended.

use super::handshake::{Handshake, Looking, Pace, Queried, Queries, Wanted};
use crate::contain::{holding_logs, logged};
use crate::launch::{Look, PinnedWord, Progress, RelaxedCaptureMode, abandon_context_if_failed};
use crate::query_events;
use crate::tracks::waiters::Waiters;
use cuda_host_sys::{CUcontext, CUevent, CUresult, Driver};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How often a [`Look::Paced`] queries a track's events, at most.
pub(super) const PACED_LOOK: Duration = Duration::from_micros(50);
/// Events a track keeps for its next points beyond those pending; more go back to the driver.
pub(super) const KEPT_EVENTS: usize = 1024;
/// Events a look gives back to the driver at most, so that no look takes long.
pub(super) const DESTROYED_PER_LOOK: usize = 32;

/// One stream's sequence of points.
pub(crate) struct Track {
    pub(super) driver: Arc<Driver>,
    /// Its context (`CUcontext` address), for failures its queries answer.
    context: usize,
    /// Held while a point is marked: one at a time, in the order of their numbers.
    pub(super) state: Mutex<TrackState>,
    /// The points, their events and word, and who looks at them.
    pub(super) core: Handshake<CUevent>,
    /// Whether the watcher has the track on its list (`Waiters::listed`, which it mirrors, for
    /// a future's poll to read without the lock).
    watched: AtomicBool,
    /// Whether a query's unexpected error was logged (once per track).
    logged: AtomicBool,
    /// The futures waiting on the track's points (`watcher`).
    pub(in crate::tracks) waiters: Mutex<Waiters>,
}

/// What marking a point holds: the track's lock.
pub(super) struct TrackState {
    /// The id of the stream the track serves, if any.
    pub(super) owner: Option<u64>,
    /// Events retired because a capture took their last record: never queried or recorded
    /// again, destroyed with the context's tracks.
    pub(super) retired: Vec<CUevent>,
    /// The track's word, once a written point asked for one; read no more once withdrawn.
    pub(super) word: Option<PinnedWord>,
    /// Whether the track offers no word any more, and reads none: a capture may have taken a
    /// write of its word (`Track::take_word`), or a point nothing writes is among its points
    /// (`ContextTracks::mark_unread`).
    pub(super) word_withdrawn: bool,
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
enum Body {
    Queries,
    Passes,
}

/// The driver's answers to a look's queries, with what they leave to log.
struct DriverQueries<'look> {
    track: &'look Track,
    failed_query: &'look mut Option<cuda_host_sys::Error>,
}

impl DriverQueries<'_> {
    fn query_event(&mut self, event: CUevent) -> Queried {
        // SAFETY: the event lives while the context's tracks do, which whoever looks keeps
        // (see the module's comment); it holds a pending point's record, which was not a
        // capture's, or it is the track's probe, never recorded.
        match unsafe { self.track.driver.cuEventQuery(event) } {
            CUresult::CUDA_SUCCESS => Queried::Complete,
            CUresult::CUDA_ERROR_NOT_READY => Queried::NotReady,
            error => {
                abandon_context_if_failed(self.track.context, error);
                if !self.track.logged.swap(true, Ordering::Relaxed) {
                    *self.failed_query = self.track.driver.check("cuEventQuery", error).err();
                }
                Queried::Failed
            }
        }
    }
}

impl Queries for DriverQueries<'_> {
    type Event = CUevent;

    fn query(&mut self, _point: u64, event: CUevent) -> Queried {
        self.query_event(event)
    }

    fn query_probe(&mut self, probe: CUevent) -> Queried {
        self.query_event(probe)
    }
}

impl Track {
    pub(super) fn new(driver: &Arc<Driver>, context: CUcontext) -> Track {
        Track {
            driver: Arc::clone(driver),
            context: context.addr(),
            state: Mutex::new(TrackState {
                owner: None,
                retired: Vec::new(),
                word: None,
                word_withdrawn: false,
            }),
            core: Handshake::new(KEPT_EVENTS, DESTROYED_PER_LOOK),
            watched: AtomicBool::new(false),
            logged: AtomicBool::new(false),
            waiters: Mutex::new(Waiters::default()),
        }
    }

    /// The highest point seen passed, after looking at the events if there are points not seen
    /// passed and `look` says so. A look [`Look::Fresh`] is this call's own (it waits for another
    /// thread's look to end), so it sees what the stream finished before it.
    pub(crate) fn look(&self, look: Look) -> u64 {
        self.look_at(Wanted::Newest, look)
    }

    /// [`look`](Self::look) for someone who needs `point` only: nothing is queried once it is
    /// known passed, and a look that finds it pending queries nothing else.
    pub(crate) fn look_for(&self, point: u64, look: Look) -> u64 {
        self.look_at(Wanted::Point(point), look)
    }

    fn look_at(&self, wanted: Wanted, look: Look) -> u64 {
        let now = epoch().elapsed().as_nanos() as u64;
        let pace = match look {
            Look::Fresh => Pace::Fresh,
            Look::Paced => Pace::Paced(PACED_LOOK.as_nanos() as u64),
        };
        let looking = match self.core.begin_look(wanted, pace, now) {
            Ok(looking) => looking,
            Err(high) => return high,
        };
        // Every log call of the look, its own and those of what it calls (a failure its query
        // is the first to see, which logs as it abandons the context's launches), is made once
        // it ended: a logger may call cuda-host back, even to look at this track.
        holding_logs(|| {
            self.holding(looking, Body::Queries, |looking, after| {
                let mut queries = DriverQueries {
                    track: self,
                    failed_query: &mut after.failed_query,
                };
                self.core
                    .search(looking, wanted, &mut queries, &mut after.destroyed)
            })
        })
    }

    /// Records that the stream passed every point up to `point`, without a query: a synchronize
    /// of the stream that began after `point` was issued returned (`Synchronizing`). Unlike a
    /// look, it sees written points a capture left unread pass too.
    pub(super) fn synchronized_up_to(&self, point: u64) {
        if self.core.high() >= point {
            return;
        }
        let Some(looking) = self.core.begin() else {
            return;
        };
        holding_logs(|| {
            self.holding(looking, Body::Passes, |looking, after| {
                self.core.pass(looking, point, &mut after.destroyed)
            })
        });
    }

    /// Runs `body`, the part of a look that holds the track (`looking`), in the relaxed capture
    /// interaction mode, then ends the look, then makes its log calls; `body`'s answer, the
    /// highest point seen passed. Where the mode cannot be entered, a body that queries waits
    /// for the next look; one that passes (a synchronize's) runs, and the events it gives back
    /// are kept rather than destroyed.
    fn holding(
        &self,
        looking: Looking<'_>,
        kind: Body,
        body: impl FnOnce(&Looking<'_>, &mut AfterLook) -> u64,
    ) -> u64 {
        // In the relaxed capture interaction mode, cuda-host's looks never break a capture, its
        // own or other code's, as long as the events they query hold no capture's record
        // (`ContextTracks::mark`).
        let relaxed = RelaxedCaptureMode::enter(&self.driver);
        let mut after = AfterLook::default();
        let seen = match (&relaxed, kind) {
            (Ok(_), _) | (Err(_), Body::Passes) => body(&looking, &mut after),
            (Err(_), Body::Queries) => self.core.high(),
        };
        if relaxed.is_err() {
            self.core.keep_free(after.destroyed.drain(..));
        }
        // Destroyed while the look holds the track, so before the context's tracks can be
        // dropped (which waits for it), and in the relaxed capture interaction mode, in which
        // destroying an event breaks no capture.
        let failed_destroys: Vec<_> = after
            .destroyed
            .into_iter()
            // SAFETY: events of this track the look took from its pool, used by nobody after.
            .filter_map(|event| unsafe { query_events::destroy(&self.driver, event) }.err())
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
        self.core.high()
    }

    /// Whether the watcher has the track on its list, so that it looks at the track's points
    /// futures wait for within its pace; a hint, read without the waiters' lock.
    pub(crate) fn is_watched(&self) -> bool {
        self.watched.load(Ordering::Relaxed)
    }

    /// Mirrors `Waiters::listed`; called under the waiters' lock.
    pub(in crate::tracks) fn set_watched(&self, watched: bool) {
        self.watched.store(watched, Ordering::Relaxed);
    }

    /// Its context (`CUcontext` address).
    pub(crate) fn context(&self) -> usize {
        self.context
    }

    /// The last point recorded.
    pub(crate) fn issued(&self) -> u64 {
        self.core.issued()
    }
}

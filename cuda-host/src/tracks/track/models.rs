//! loom models of a track's look/mark handshake (`handshake`): a thread marking points on events
//! and in the word, a stream passing them, looks fresh and paced, and the close. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p cuda-host --lib --release`.

use super::handshake::{Events, Handshake, Pace, Queried, Queries, Wanted};
use crate::sync::{Arc, AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
use loom::thread;
use std::mem::MaybeUninit;
use std::sync::atomic::Ordering;

/// The probe's stand-in: no event of the model has this id.
const PROBE: usize = usize::MAX;

/// What a model marks: a point recorded on an event, written into the word, or neither (an
/// unread point, which withdraws the word).
#[derive(Clone, Copy, PartialEq)]
enum Point {
    Recorded,
    Written,
    Unread,
}

/// A stream and its events as the driver shows them to a look, with what the checks need.
struct Stream {
    /// The points to mark, in order: `points[n - 1]` is point `n`.
    points: &'static [Point],
    /// The last point the stream reached: an event recorded at or before it completed.
    reached: AtomicU64,
    /// The last point the stream passed, its write of the word included.
    passed: AtomicU64,
    /// Per event, the point its last record holds.
    records: Vec<AtomicU64>,
    /// Events made so far.
    made: AtomicUsize,
    /// The track's word.
    word: *mut AtomicU32,
    /// Whether the word was given back: the stream must not write it any more.
    given_back: AtomicBool,
    /// Threads in a look now.
    lookers: AtomicUsize,
}

// SAFETY: `word` is written through atomics only, once adopted, and freed when the stream goes.
unsafe impl Send for Stream {}
// SAFETY: as above.
unsafe impl Sync for Stream {}

impl Stream {
    fn new(points: &'static [Point]) -> Arc<Stream> {
        let word = Box::into_raw(Box::new(MaybeUninit::<AtomicU32>::uninit())).cast();
        Arc::new(Stream {
            points,
            reached: AtomicU64::new(0),
            passed: AtomicU64::new(0),
            records: (0..points.len()).map(|_| AtomicU64::new(0)).collect(),
            made: AtomicUsize::new(0),
            word,
            given_back: AtomicBool::new(false),
            lookers: AtomicUsize::new(0),
        })
    }

    /// A track for the stream's points, its word adopted (as the first written point does),
    /// keeping `kept` free events and giving back one a look.
    fn track(&self, kept: usize) -> Arc<Handshake<usize>> {
        let core = Handshake::new(kept, 1);
        // SAFETY: the stream's word, valid until it goes, after the model's close; only the
        // stream writes it; no word was adopted before.
        unsafe { core.adopt_word(self.word, PROBE) };
        Arc::new(core)
    }

    /// Marks the points from `from` on `core`, one after the other, as `ContextTracks` does: an
    /// event recorded (a free one, or a new one), or a write of the word.
    fn mark_from(&self, from: usize, core: &Handshake<usize>) {
        for (index, &kind) in self.points.iter().enumerate().skip(from) {
            let point = core.next_point();
            assert_eq!(point, index as u64 + 1);
            match kind {
                Point::Recorded => {
                    let event = core
                        .take_free()
                        .unwrap_or_else(|| self.made.fetch_add(1, Ordering::Relaxed));
                    self.records[event].store(point, Ordering::Release);
                    core.push_recorded(point, event);
                }
                Point::Written => core.push_written(point),
                Point::Unread => {
                    core.withdraw_word();
                    core.push_unread(point);
                }
            }
        }
    }

    /// The stream's own thread: passes the points in order. It may get ahead of the marks: an
    /// event recorded after the stream got there completes at once, and a write lands before the
    /// track counts its point marked, as a write enqueued does before its call returned.
    fn run(&self) {
        for (index, &kind) in self.points.iter().enumerate() {
            let point = index as u64 + 1;
            self.reached.store(point, Ordering::Release);
            if kind == Point::Written {
                assert!(
                    !self.given_back.load(Ordering::Acquire),
                    "the word was given back before the stream's last write of it"
                );
                // SAFETY: adopted before the stream ran.
                unsafe { &*self.word }.store(point as u32, Ordering::Release);
            }
            self.passed.store(point, Ordering::Release);
        }
    }

    /// A look at `core` as `pace` says, checked: one looker at a time; never ahead of the
    /// stream; a fresh look sees every point the stream passed before it that was marked.
    /// Returns what it saw, and the events it gave back beyond those kept.
    fn look(&self, core: &Handshake<usize>, pace: Pace, now: u64) -> (u64, Vec<usize>) {
        let passed = self.passed.load(Ordering::Acquire);
        let issued = core.issued();
        let mut surplus = Vec::new();
        let seen = match core.begin_look(Wanted::Newest, pace, now) {
            Err(high) => high,
            Ok(looking) => {
                assert_eq!(
                    self.lookers.fetch_add(1, Ordering::Relaxed),
                    0,
                    "two lookers at once"
                );
                let seen = core.search(&looking, Wanted::Newest, &mut Looker(self), &mut surplus);
                self.lookers.fetch_sub(1, Ordering::Relaxed);
                drop(looking);
                let unread = self.points.contains(&Point::Unread);
                if let (Pace::Fresh, false) = (pace, unread) {
                    assert!(
                        seen >= passed.min(issued),
                        "a fresh look saw {seen}, the stream had passed {passed} of {issued}"
                    );
                }
                seen
            }
        };
        let reached = self.reached.load(Ordering::Acquire);
        assert!(seen <= reached, "saw {seen}, the stream reached {reached}");
        (seen, surplus)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, as a `MaybeUninit`, which needs no drop.
        drop(unsafe { Box::from_raw(self.word.cast::<MaybeUninit<AtomicU32>>()) });
    }
}

/// A look's queries of the model's events.
struct Looker<'stream>(&'stream Stream);

impl Queries for Looker<'_> {
    type Event = usize;

    fn query(&mut self, point: u64, event: usize) -> Queried {
        assert_eq!(
            self.0.records[event].load(Ordering::Acquire),
            point,
            "a look queried an event recorded again"
        );
        if self.0.reached.load(Ordering::Acquire) >= point {
            Queried::Complete
        } else {
            Queried::NotReady
        }
    }

    fn query_probe(&mut self, probe: usize) -> Queried {
        assert_eq!(probe, PROBE);
        Queried::Complete
    }
}

/// A model checker bounded to `bound` preemptions per execution: unbounded, models of four
/// threads with spin loops take hours.
fn bounded(bound: usize) -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(bound);
    builder
}

/// Closes `core` and checks that every event made is held exactly once: pending, free, or given
/// back by a look (`surplus`).
fn close_and_count(stream: &Stream, core: &Handshake<usize>, surplus: Vec<usize>) {
    count_events(stream, core.close(), surplus);
}

/// Checks that every event made is held exactly once: pending or free when the track `closed`,
/// or given back by a look (`surplus`).
fn count_events(stream: &Stream, closed: Events<usize>, surplus: Vec<usize>) {
    let mut events: Vec<usize> = closed.pending.into_iter().flatten().collect();
    events.extend(closed.free);
    events.extend(surplus);
    events.sort_unstable();
    let made = stream.made.load(Ordering::Relaxed);
    assert_eq!(
        events,
        (0..made).collect::<Vec<_>>(),
        "an event lost or held twice"
    );
}

/// `points` marked while the stream passes them and a thread looks: the point seen never goes
/// backwards nor ahead of the stream, a fresh look sees what the stream passed before it, an
/// event is queried only for its own point, and each is held once.
fn marks_looks_and_the_stream_agree(points: &'static [Point]) {
    bounded(2).check(move || {
        let stream = Stream::new(points);
        let core = stream.track(1);
        let runner = {
            let stream = Arc::clone(&stream);
            thread::spawn(move || stream.run())
        };
        let looker = {
            let (stream, core) = (Arc::clone(&stream), Arc::clone(&core));
            thread::spawn(move || stream.look(&core, Pace::Fresh, 1).1)
        };
        stream.mark_from(0, &core);
        let mut surplus = looker.join().unwrap();
        runner.join().unwrap();
        let (seen, given_back) = stream.look(&core, Pace::Fresh, 2);
        surplus.extend(given_back);
        assert_eq!(
            seen,
            points.len() as u64,
            "a look after the stream passed every point"
        );
        close_and_count(&stream, &core, surplus);
    });
}

/// A look that reads the word goes on to the point recorded after the one it names.
#[test]
fn a_written_then_a_recorded_point_are_seen_as_the_stream_passes_them() {
    marks_looks_and_the_stream_agree(&[Point::Written, Point::Recorded]);
}

/// A look that finds the recorded point passed goes on to the written one after it.
#[test]
fn a_recorded_then_a_written_point_are_seen_as_the_stream_passes_them() {
    marks_looks_and_the_stream_agree(&[Point::Recorded, Point::Written]);
}

/// Two recorded points: the second reuses the first's event once a look saw it passed, and no
/// look queries it for the first point after.
#[test]
fn an_event_reused_for_a_later_point_is_never_queried_for_the_earlier() {
    marks_looks_and_the_stream_agree(&[Point::Recorded, Point::Recorded]);
}

/// Looks, fresh and paced, racing the stream and the close: never two lookers at once, no look
/// after the close, every event given back once (none is kept), and the word given back only
/// once the stream wrote it for the last time.
#[test]
fn the_close_waits_for_the_look_and_gives_the_word_back_after_its_last_write() {
    bounded(2).check(|| {
        let stream = Stream::new(&[Point::Recorded, Point::Written]);
        let core = stream.track(0);
        stream.mark_from(0, &core);
        let runner = {
            let stream = Arc::clone(&stream);
            thread::spawn(move || stream.run())
        };
        let paced = {
            let (stream, core) = (Arc::clone(&stream), Arc::clone(&core));
            thread::spawn(move || stream.look(&core, Pace::Paced(10), 5).1)
        };
        let (_, mut surplus) = stream.look(&core, Pace::Fresh, 1);
        let closed = core.close();
        // SAFETY: adopted when the track was made; the stream lives.
        if core.passed_last_write(unsafe { &*stream.word }) {
            stream.given_back.store(true, Ordering::Release);
        }
        assert!(
            core.begin_look(Wanted::Newest, Pace::Fresh, 2).is_err(),
            "a look after the close"
        );
        surplus.extend(paced.join().unwrap());
        runner.join().unwrap();
        count_events(&stream, closed, surplus);
    });
}

/// A written point, then one nothing writes (which withdraws the word), then one recorded on an
/// event: the first two pass only with the third, never before the stream passed them.
#[test]
fn unread_points_pass_with_the_next_recorded_point_and_never_early() {
    bounded(2).check(|| {
        let stream = Stream::new(&[Point::Written, Point::Unread, Point::Recorded]);
        let core = stream.track(1);
        let runner = {
            let stream = Arc::clone(&stream);
            thread::spawn(move || stream.run())
        };
        let looker = {
            let (stream, core) = (Arc::clone(&stream), Arc::clone(&core));
            thread::spawn(move || stream.look(&core, Pace::Fresh, 1).1)
        };
        stream.mark_from(0, &core);
        let mut surplus = looker.join().unwrap();
        runner.join().unwrap();
        let (seen, given_back) = stream.look(&core, Pace::Fresh, 2);
        surplus.extend(given_back);
        assert_eq!(seen, 3, "a look after the stream passed every point");
        close_and_count(&stream, &core, surplus);
    });
}

/// A synchronize that returned passes every point marked before it began, unread ones too,
/// while a look may be under way: the two never hold the track at once, and the point seen
/// never goes back.
#[test]
fn a_synchronize_passes_unread_points_while_a_look_runs() {
    bounded(2).check(|| {
        let stream = Stream::new(&[Point::Recorded, Point::Unread]);
        let core = stream.track(1);
        stream.mark_from(0, &core);
        let before = core.issued();
        let runner = {
            let stream = Arc::clone(&stream);
            thread::spawn(move || stream.run())
        };
        let looker = {
            let (stream, core) = (Arc::clone(&stream), Arc::clone(&core));
            thread::spawn(move || stream.look(&core, Pace::Fresh, 1).1)
        };
        // The synchronize returns once the stream passed every point.
        runner.join().unwrap();
        let mut surplus = Vec::new();
        if let Some(looking) = core.begin() {
            assert_eq!(
                stream.lookers.fetch_add(1, Ordering::Relaxed),
                0,
                "a synchronize's pass while a look holds the track"
            );
            core.pass(&looking, before, &mut surplus);
            stream.lookers.fetch_sub(1, Ordering::Relaxed);
        }
        assert_eq!(core.high(), 2, "the synchronize passed the unread point");
        surplus.extend(looker.join().unwrap());
        assert_eq!(core.high(), 2, "a look after never takes it back");
        close_and_count(&stream, &core, surplus);
    });
}

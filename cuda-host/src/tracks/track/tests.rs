//! The tracks' unit tests, on fakes of the event, capture and pinned-memory calls: a fake
//! stream completes its records, and the word writes among them, in order, when told to.

use super::context::Marked;
use super::handshake::{CLOSED, IDLE, LOOKING, Looking};
use super::look::{DESTROYED_PER_LOOK, KEPT_EVENTS, PACED_LOOK};
use super::*;
use crate::error::{Error, Result};
use crate::fake_driver;
use crate::launch::{ContextShared, Look};
use crate::sync::lock;
use cuda_host_sys::{CUcontext, CUdeviceptr, CUevent, CUresult, CUstream, Driver};
use cuda_host_sys::{CUstreamCaptureMode, CUstreamCaptureStatus};
use std::collections::HashMap;
use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Fake streams, shared by the tests: events recorded in order, of which the first
/// `completed` ran. Tests tell their events apart by the stream handle they record on.
#[derive(Default)]
struct FakeStreams {
    /// Event to (stream, index of its last record on that stream).
    last_record: HashMap<usize, (usize, usize)>,
    /// Stream to (records so far, records completed).
    streams: HashMap<usize, (usize, usize)>,
    /// Stream to the queries of its events.
    queries: HashMap<usize, usize>,
    /// Streams whose next `cuStreamIsCapturing` answers that they capture.
    capturing_once: Vec<usize>,
    /// Stream to the events destroyed that were last recorded on it.
    destroyed: HashMap<usize, usize>,
    next_event: usize,
    /// Per stream, the word writes enqueued: the record index, the address, the value.
    writes: HashMap<usize, Vec<(usize, usize, u32)>>,
    /// Queries of events never recorded (a track's probe), by event.
    probe_queries: HashMap<usize, usize>,
    /// Pinned allocations not freed, by address (held here, so that a page kept for the
    /// life of the process is reachable, not leaked).
    allocations: HashMap<usize, Allocation>,
}

struct Allocation(*mut u8, usize);

// SAFETY: an allocation's address and size, used under the fake's lock.
unsafe impl Send for Allocation {}

static STREAMS: Mutex<Option<FakeStreams>> = Mutex::new(None);

fn with_streams<T>(call: impl FnOnce(&mut FakeStreams) -> T) -> T {
    call(lock(&STREAMS).get_or_insert_with(FakeStreams::default))
}

/// Lets the stream `stream` run its first `records` records.
fn complete(stream: usize, records: usize) {
    with_streams(|fake| {
        fake.streams.entry(stream).or_default().1 = records;
        for &(index, address, value) in fake.writes.get(&stream).into_iter().flatten() {
            if index < records {
                let word = std::ptr::with_exposed_provenance::<AtomicU32>(address);
                // SAFETY: a track's word, pinned memory of the fake context that lives
                // until the context's last value goes, after the test's tracks.
                unsafe { &*word }.store(value, Ordering::Release);
            }
        }
    });
}

/// What `ContextTracks::mark_written` is given to enqueue on `stream`: the write of the
/// point, a record of the stream like an event's, if there is one.
fn enqueue_on(stream: usize) -> impl FnOnce(Option<PointWrite>) -> Result<()> {
    move |point| {
        with_streams(|fake| {
            let (records, _) = fake.streams.entry(stream).or_default();
            let index = *records;
            *records += 1;
            if let Some(point) = point {
                let writes = fake.writes.entry(stream).or_default();
                writes.push((index, point.address as usize, point.value));
            }
        });
        Ok(())
    }
}

/// The queries of `track`'s probe (tests run at once: each counts its own).
fn probe_queries(track: &Track) -> usize {
    let probe = track.core.probe().map_or(0, <*mut _>::addr);
    with_streams(|fake| fake.probe_queries.get(&probe).copied().unwrap_or(0))
}

/// The queries of the events recorded on `stream` so far.
fn queries(stream: usize) -> usize {
    with_streams(|fake| fake.queries.get(&stream).copied().unwrap_or(0))
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
        None => {
            *fake.probe_queries.entry(event.addr()).or_default() += 1;
            CUresult::CUDA_SUCCESS
        }
    })
}

unsafe extern "C" fn host_alloc(host: *mut *mut c_void, bytes: usize, _flags: c_uint) -> CUresult {
    let layout = std::alloc::Layout::from_size_align(bytes, 4096).expect("a page's layout");
    // SAFETY: a layout of non-zero size.
    let memory = unsafe { std::alloc::alloc_zeroed(layout) };
    with_streams(|fake| {
        let address = memory.expose_provenance();
        fake.allocations.insert(address, Allocation(memory, bytes))
    });
    // SAFETY: the caller's out-pointer.
    unsafe { host.write(memory.cast()) };
    CUresult::CUDA_SUCCESS
}

unsafe extern "C" fn device_pointer(
    device: *mut CUdeviceptr,
    host: *mut c_void,
    _flags: c_uint,
) -> CUresult {
    // The fake device address is the host address.
    // SAFETY: the caller's out-pointer.
    unsafe { device.write(host.expose_provenance() as CUdeviceptr) };
    CUresult::CUDA_SUCCESS
}

unsafe extern "C" fn host_free(host: *mut c_void) -> CUresult {
    let allocation = with_streams(|fake| fake.allocations.remove(&host.addr()));
    let Allocation(memory, bytes) = allocation.expect("allocated");
    let layout = std::alloc::Layout::from_size_align(bytes, 4096).expect("a page's layout");
    // SAFETY: allocated by `host_alloc` with this layout, freed once.
    unsafe { std::alloc::dealloc(memory, layout) };
    CUresult::CUDA_SUCCESS
}

unsafe extern "C" fn destroy(event: CUevent) -> CUresult {
    with_streams(|fake| {
        if let Some(&(stream, _)) = fake.last_record.get(&event.addr()) {
            *fake.destroyed.entry(stream).or_default() += 1;
        }
    });
    CUresult::CUDA_SUCCESS
}

/// The events destroyed whose last record was on `stream`.
fn destroyed(stream: usize) -> usize {
    with_streams(|fake| fake.destroyed.get(&stream).copied().unwrap_or(0))
}

unsafe extern "C" fn set_current(_context: CUcontext) -> CUresult {
    CUresult::CUDA_SUCCESS
}

unsafe extern "C" fn exchange_mode(_mode: *mut CUstreamCaptureMode) -> CUresult {
    CUresult::CUDA_SUCCESS
}

unsafe extern "C" fn is_capturing(
    stream: CUstream,
    status: *mut CUstreamCaptureStatus,
) -> CUresult {
    let capturing = with_streams(|fake| {
        let found = fake.capturing_once.iter().position(|&s| s == stream.addr());
        found.map(|index| fake.capturing_once.swap_remove(index))
    });
    let answer = if capturing.is_some() {
        CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
    } else {
        CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
    };
    // SAFETY: a valid out-pointer.
    unsafe { status.write(answer) };
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
            (c"cuStreamIsCapturing", is_capturing as *mut c_void),
            (c"cuMemHostAlloc", host_alloc as *mut c_void),
            (
                c"cuMemHostGetDevicePointer_v2",
                device_pointer as *mut c_void,
            ),
            (c"cuMemFreeHost", host_free as *mut c_void),
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
    assert_eq!(second.track.look(Look::Fresh), 0, "nothing ran yet");
    complete(0x71, 2);
    assert_eq!(second.track.look(Look::Fresh), 2);
    // Another stream finds the first one's track quiet and takes it over, its numbers going
    // on from where they were.
    let other = tracks.mark(&shared, stream, 2).expect("marked");
    assert!(Arc::ptr_eq(&other.track, &first.track));
    assert_eq!(other.point, 3);
    assert_eq!(tracks.sizes(), (1, 1));
    // While that point is pending, a third stream needs a track of its own.
    tracks.mark(&shared, stream, 3).expect("marked");
    assert_eq!(tracks.sizes(), (2, 2));
    drop(tracks);
    // The first track's two events (one pending, one free), the second's one.
    assert_eq!(destroyed(0x71), 3);
}

#[test]
fn a_point_is_seen_passed_once_the_stream_passed_it_however_many_points_follow_it() {
    let driver = fakes();
    let shared = fake_driver::context(&driver);
    let tracks = ContextTracks::new(&shared);
    let stream = 0x72_usize as CUstream;
    let track = tracks.mark(&shared, stream, 7).expect("marked").track;
    for _ in 1..1000 {
        tracks.mark(&shared, stream, 7).expect("marked");
    }
    assert_eq!(track.look(Look::Fresh), 0, "never early");
    for passed in [1, 2, 3, 64, 65, 300, 999, 1000] {
        complete(0x72, passed);
        assert_eq!(
            track.look(Look::Fresh),
            passed as u64,
            "never late, never early"
        );
    }
}

#[test]
fn a_look_finds_how_far_the_stream_got_in_a_few_queries_and_one_while_it_got_nowhere() {
    // Fewer points under Miri, which runs each mark a thousand times slower.
    const POINTS: usize = if cfg!(miri) { 1_000 } else { 100_000 };
    let (most, later) = (POINTS * 7 / 10, POINTS * 8 / 10);
    let driver = fakes();
    let shared = fake_driver::context(&driver);
    let tracks = ContextTracks::new(&shared);
    let stream = 0x73_usize as CUstream;
    let track = tracks.mark(&shared, stream, 9).expect("marked").track;
    for _ in 1..POINTS {
        tracks.mark(&shared, stream, 9).expect("marked");
    }
    assert_eq!(track.look(Look::Fresh), 0);
    assert_eq!(queries(0x73), 1, "the first pending point's event alone");
    complete(0x73, most);
    assert_eq!(track.look(Look::Fresh), most as u64);
    // The first point's, the newest's, then galloping and bisection.
    let bound = 2 + 2 * (usize::BITS - most.leading_zeros()) as usize;
    assert!(queries(0x73) - 1 <= bound, "{} queries", queries(0x73) - 1);
    let before = queries(0x73);
    complete(0x73, most + 3);
    assert_eq!(track.look(Look::Fresh), most as u64 + 3);
    assert!(
        queries(0x73) - before <= 6,
        "{} queries",
        queries(0x73) - before
    );
    // A look for a later point that is pending queries its event only.
    let before = queries(0x73);
    assert_eq!(track.look_for(later as u64, Look::Fresh), most as u64 + 3);
    assert_eq!(queries(0x73) - before, 1);
    complete(0x73, POINTS);
    assert_eq!(
        track.look_for(later as u64, Look::Fresh),
        POINTS as u64,
        "the newest answers"
    );
    let before = queries(0x73);
    assert_eq!(track.look(Look::Fresh), POINTS as u64);
    assert_eq!(queries(0x73), before, "nothing pending: no query");
}

#[test]
fn while_the_stream_keeps_up_with_its_points_a_look_queries_the_newest_alone() {
    let driver = fakes();
    let shared = fake_driver::context(&driver);
    let tracks = ContextTracks::new(&shared);
    let stream = 0x78_usize as CUstream;
    let track = tracks.mark(&shared, stream, 19).expect("marked").track;
    complete(0x78, 1);
    assert_eq!(track.look(Look::Fresh), 1, "caught up");
    // Points made and passed between two looks: the newest answers for all of them.
    for round in 1..=5 {
        for _ in 0..3 {
            tracks.mark(&shared, stream, 19).expect("marked");
        }
        complete(0x78, 1 + 3 * round);
        let before = queries(0x78);
        assert_eq!(track.look(Look::Fresh), 1 + 3 * round as u64);
        assert_eq!(queries(0x78) - before, 1, "round {round}");
    }
    // Behind: the newest, then the one looked for; the next look goes back to the first
    // pending point alone.
    for _ in 0..3 {
        tracks.mark(&shared, stream, 19).expect("marked");
    }
    let before = queries(0x78);
    assert_eq!(track.look(Look::Fresh), 16, "nothing ran");
    assert_eq!(queries(0x78) - before, 2);
    let before = queries(0x78);
    assert_eq!(track.look(Look::Fresh), 16);
    assert_eq!(queries(0x78) - before, 1);
    // Part of the way: never early, never late, however the search began.
    complete(0x78, 18);
    assert_eq!(track.look(Look::Fresh), 18);
    complete(0x78, 19);
    assert_eq!(track.look(Look::Fresh), 19);
}

#[test]
fn paced_looks_query_the_events_at_most_once_a_while_and_not_when_all_passed() {
    let driver = fakes();
    let shared = fake_driver::context(&driver);
    let tracks = ContextTracks::new(&shared);
    let stream = 0x74_usize as CUstream;
    let track = tracks.mark(&shared, stream, 11).expect("marked").track;
    assert_eq!(track.look(Look::Fresh), 0);
    // Pending: within `PACED_LOOK` of a look, paced looks query nothing.
    let before = queries(0x74);
    let start = Instant::now();
    let mut paced = 0;
    while start.elapsed() < PACED_LOOK / 2 {
        assert_eq!(track.look(Look::Paced), 0, "nothing ran");
        paced += 1;
    }
    assert!(
        queries(0x74) - before <= 1,
        "{} queries in {paced} paced looks",
        queries(0x74) - before
    );
    // One after `PACED_LOOK` does.
    std::thread::sleep(PACED_LOOK);
    let before = queries(0x74);
    assert_eq!(track.look(Look::Paced), 0);
    assert_eq!(queries(0x74) - before, 1);
    complete(0x74, 1);
    assert_eq!(track.look(Look::Fresh), 1, "a fresh look always queries");
    let before = queries(0x74);
    for _ in 0..16 {
        assert_eq!(track.look(Look::Paced), 1);
    }
    assert_eq!(track.look(Look::Fresh), 1);
    assert_eq!(queries(0x74), before, "nothing pending: no query");
}

#[test]
fn a_look_for_a_later_point_paces_later_looks_but_not_those_for_the_first_pending_point() {
    let driver = fakes();
    let shared = fake_driver::context(&driver);
    let tracks = ContextTracks::new(&shared);
    // Each attempt on a stream of its own; one whose steps took longer than the pace tells
    // nothing of the pace, and another is made (under Miri, a thousand times slower, none fits:
    // a few check what needs no clock).
    let attempts = if cfg!(miri) { 3 } else { 100 };
    for attempt in 0..attempts {
        let stream = 0x100 + attempt;
        let id = 100 + attempt as u64;
        for point in 1..=3 {
            let marked = tracks
                .mark(&shared, stream as CUstream, id)
                .expect("marked");
            assert_eq!(marked.point, point);
        }
        let track = tracks
            .mark(&shared, stream as CUstream, id)
            .expect("marked")
            .track;
        // A look for point 3 (not the first pending) finds it pending, and learns nothing of 1.
        assert_eq!(track.look_for(3, Look::Fresh), 0);
        let start = Instant::now();
        let before = queries(stream);
        // Within `PACED_LOOK` of it, a paced look for a later point queries nothing...
        assert_eq!(track.look_for(4, Look::Paced), 0);
        let later = queries(stream) - before;
        // ...but one for the first pending point does, whenever it comes.
        assert_eq!(track.look(Look::Paced), 0);
        assert!(
            queries(stream) > before + later,
            "the first pending point's paced look queried"
        );
        if start.elapsed() < PACED_LOOK / 2 {
            assert_eq!(later, 0, "a later point's paced look after a look");
            return;
        }
    }
}

#[test]
fn events_of_passed_points_are_reused_and_those_beyond_the_kept_ones_given_back() {
    let driver = fakes();
    let shared = fake_driver::context(&driver);
    let tracks = ContextTracks::new(&shared);
    let stream = 0x75_usize as CUstream;
    let track = tracks.mark(&shared, stream, 13).expect("marked").track;
    for _ in 1..KEPT_EVENTS + 100 {
        tracks.mark(&shared, stream, 13).expect("marked");
    }
    assert_eq!(track.core.event_counts(), (KEPT_EVENTS + 100, 0));
    complete(0x75, KEPT_EVENTS + 100);
    assert_eq!(track.look(Look::Fresh), (KEPT_EVENTS + 100) as u64);
    // A look gives back at most so many, whatever the number beyond those kept.
    let kept = KEPT_EVENTS + 100 - DESTROYED_PER_LOOK;
    assert_eq!(track.core.event_counts(), (0, kept));
    // The next points take the events kept.
    for _ in 0..10 {
        tracks.mark(&shared, stream, 13).expect("marked");
    }
    assert_eq!(track.core.event_counts(), (10, kept - 10));
    // Once they passed, the next look gives back so many more.
    complete(0x75, KEPT_EVENTS + 110);
    assert_eq!(track.look(Look::Fresh), (KEPT_EVENTS + 110) as u64);
    assert_eq!(track.core.event_counts(), (0, kept - DESTROYED_PER_LOOK));
}

#[test]
fn a_track_outliving_its_contexts_tracks_is_never_looked_at_again() {
    let driver = fakes();
    let shared = fake_driver::context(&driver);
    let tracks = ContextTracks::new(&shared);
    let stream = 0x77_usize as CUstream;
    let track = tracks.mark(&shared, stream, 17).expect("marked").track;
    drop(tracks);
    let before = queries(0x77);
    complete(0x77, 1);
    assert_eq!(track.look(Look::Fresh), 0, "its events are gone");
    assert_eq!(track.look(Look::Paced), 0);
    assert_eq!(queries(0x77), before, "a destroyed event was queried");
}

#[test]
fn a_point_whose_record_a_capture_may_have_taken_is_refused_and_its_event_never_queried() {
    let driver = fakes();
    let shared = fake_driver::context(&driver);
    let tracks = ContextTracks::new(&shared);
    let stream = 0x76_usize as CUstream;
    let track = tracks.mark(&shared, stream, 15).expect("marked").track;
    // The check before the record is the caller's: the one after it answers "capturing".
    with_streams(|fake| fake.capturing_once.push(0x76));
    let refused = tracks.mark(&shared, stream, 15).err();
    assert!(
        matches!(refused, Some(Error::PointInCapture { .. })),
        "{refused:?}"
    );
    // The refused number goes to the next point, on another event.
    let next = tracks.mark(&shared, stream, 15).expect("marked");
    assert_eq!(next.point, 2);
    assert_eq!(track.core.event_counts(), (2, 0));
    // The stream ran the three records (the refused one second): the looks see both points
    // passed by querying their own events, never the retired one's.
    complete(0x76, 3);
    assert_eq!(track.look(Look::Fresh), 2);
    drop(tracks);
    assert_eq!(destroyed(0x76), 3, "the retired one too");
}

/// Gives the context a pinned word free for a track, as a timeline's leaves it one.
fn leave_a_word_free(shared: &ContextShared) {
    let word = shared.allocate_pinned_word().expect("a pinned word");
    shared.release_pinned_word(word);
}

fn written(tracks: &ContextTracks, shared: &Arc<ContextShared>, stream: usize, id: u64) -> Marked {
    leave_a_word_free(shared);
    tracks
        .mark_written(shared, stream as CUstream, id, enqueue_on(stream))
        .expect("marked")
        .expect("the track offers its word")
}

#[test]
fn written_points_are_seen_passed_from_the_word_without_a_query_and_mix_with_events() {
    let driver = fakes();
    let shared = fake_driver::context(&driver);
    let tracks = ContextTracks::new(&shared);
    let stream = 0x79_usize;
    let first = written(&tracks, &shared, stream, 21);
    let track = Arc::clone(&first.track);
    assert_eq!(first.point, 1);
    assert_eq!(written(&tracks, &shared, stream, 21).point, 2);
    assert_eq!(
        tracks
            .mark(&shared, stream as CUstream, 21)
            .expect("marked")
            .point,
        3
    );
    assert_eq!(written(&tracks, &shared, stream, 21).point, 4);
    assert_eq!(
        track.core.event_counts(),
        (4, 0),
        "written points hold no event"
    );
    assert_eq!(track.look(Look::Fresh), 0, "never early");
    for passed in [1, 2, 3, 4] {
        let before = queries(stream);
        complete(stream, passed);
        assert_eq!(track.look(Look::Fresh), passed as u64, "never late");
        // The word answers for the written points; a look goes on to query the point recorded
        // after the last one it names, which may have passed too.
        let queried = if matches!(passed, 1 | 4) { 0 } else { 1 };
        assert_eq!(queries(stream) - before, queried, "the word answered");
    }
    assert_eq!(
        track.core.event_counts(),
        (0, 1),
        "the event's point's event is free"
    );
}

#[test]
fn a_look_that_reads_the_word_goes_on_to_the_points_recorded_after_it() {
    let driver = fakes();
    let shared = fake_driver::context(&driver);
    let tracks = ContextTracks::new(&shared);
    let stream = 0x82_usize;
    let track = written(&tracks, &shared, stream, 41).track;
    let recorded = tracks
        .mark(&shared, stream as CUstream, 41)
        .expect("marked")
        .point;
    assert_eq!(recorded, 2);
    complete(stream, 2);
    assert_eq!(
        track.look(Look::Fresh),
        2,
        "the written point and the one recorded after it both passed"
    );
}

#[test]
fn a_written_point_the_word_says_pending_queries_the_probe_which_answers_failures() {
    let driver = fakes();
    let shared = fake_driver::context(&driver);
    let tracks = ContextTracks::new(&shared);
    let stream = 0x7a_usize;
    let track = written(&tracks, &shared, stream, 23).track;
    let before = probe_queries(&track);
    assert_eq!(track.look(Look::Fresh), 0);
    assert_eq!(probe_queries(&track) - before, 1, "the probe, once");
    complete(stream, 1);
    let before = probe_queries(&track);
    assert_eq!(track.look(Look::Fresh), 1);
    assert_eq!(probe_queries(&track), before, "nothing pending: no query");
}

#[test]
fn written_points_are_exact_across_the_words_32_bit_wrap() {
    let driver = fakes();
    let shared = fake_driver::context(&driver);
    let tracks = ContextTracks::new(&shared);
    let stream = 0x7b_usize;
    let track = tracks
        .mark(&shared, stream as CUstream, 25)
        .expect("marked")
        .track;
    complete(stream, 1);
    assert_eq!(track.look(Look::Fresh), 1);
    // As if the track had marked up to just below 2^32.
    let start = (1u64 << 32) - 2;
    track.core.start_after(start);
    let points: Vec<u64> = (0..5)
        .map(|_| written(&tracks, &shared, stream, 25).point)
        .collect();
    assert_eq!(points, (start + 1..=start + 5).collect::<Vec<_>>());
    assert_eq!(track.look(Look::Fresh), start, "never early");
    for passed in 1..=5 {
        complete(stream, 1 + passed);
        assert_eq!(track.look(Look::Fresh), start + passed as u64);
    }
}

#[test]
fn a_word_a_capture_may_have_written_is_never_read_again_and_later_points_carry_on() {
    let driver = fakes();
    let shared = fake_driver::context(&driver);
    let tracks = ContextTracks::new(&shared);
    let stream = 0x7c_usize;
    let track = written(&tracks, &shared, stream, 27).track;
    let word = track.core.word().expose_provenance();
    with_streams(|fake| fake.capturing_once.push(stream));
    let refused = tracks
        .mark_written(&shared, stream as CUstream, 27, enqueue_on(stream))
        .err();
    assert!(
        matches!(refused, Some(Error::PointInCapture { .. })),
        "{refused:?}"
    );
    // The graph writes the refused number whenever it runs: nothing is read from the word.
    let word = std::ptr::with_exposed_provenance::<AtomicU32>(word);
    // SAFETY: the track's old word, kept with the context's pinned memory.
    unsafe { &*word }.store(2, Ordering::Release);
    assert_eq!(track.look(Look::Fresh), 0, "point 1 did not pass");
    // The track offers no word any more: the caller enqueues alone and marks an event.
    let mut offered = None;
    let marked = tracks
        .mark_written(&shared, stream as CUstream, 27, |point| {
            offered = Some(point.is_some());
            enqueue_on(stream)(point)
        })
        .expect("enqueued");
    assert!(marked.is_none());
    assert_eq!(offered, Some(false));
    let next = tracks
        .mark(&shared, stream as CUstream, 27)
        .expect("marked");
    assert_eq!(next.point, 2, "the refused number goes to the next point");
    complete(stream, 1);
    assert_eq!(
        track.look(Look::Fresh),
        0,
        "the written point 1 waits for a later point"
    );
    complete(stream, 4);
    assert_eq!(track.look(Look::Fresh), 2);
}

// The word holds the low 32 bits of the last written point the stream passed. Points recorded on
// events (releases, futures of the same stream, or of any stream the track serves later) move
// `high` on without touching the word; however far, the stale number must never read as a
// point ahead of `high`.
#[test]
fn a_stale_word_never_passes_a_point_after_two_to_the_31_points_recorded_on_events() {
    let driver = fakes();
    let shared = fake_driver::context(&driver);
    let tracks = ContextTracks::new(&shared);
    let stream = 0x7d_usize;
    let track = written(&tracks, &shared, stream, 29).track;
    complete(stream, 1);
    assert_eq!(track.look(Look::Fresh), 1, "the written point passed");
    // As if 2^31 + 10 points recorded on events had passed since: the word still holds 1.
    let high = 1 + (1u64 << 31) + 10;
    track.core.start_after(high);
    let next = tracks
        .mark(&shared, stream as CUstream, 29)
        .expect("marked");
    assert_eq!(next.point, high + 1);
    assert_eq!(
        track.look(Look::Fresh),
        high,
        "never early: the stream did not run the point's record"
    );
}

#[test]
fn a_track_takes_no_word_but_a_free_one_and_allocates_none() {
    let driver = fakes();
    let shared = fake_driver::context(&driver);
    let tracks = ContextTracks::new(&shared);
    let stream = 0x7e_usize;
    // The context has no word free: an allocation would be the only way to a word.
    let mut offered = None;
    let marked = tracks
        .mark_written(&shared, stream as CUstream, 31, |point| {
            offered = Some(point.is_some());
            enqueue_on(stream)(point)
        })
        .expect("enqueued");
    assert!(marked.is_none(), "no word free: no point written");
    assert_eq!(offered, Some(false), "the operation enqueued alone");
    assert!(
        shared.take_free_pinned_word().is_none(),
        "no page allocated"
    );
    let marked = written(&tracks, &shared, stream, 31);
    assert_eq!(marked.point, 1, "a word given back is taken");
}

#[test]
fn points_after_written_points_left_unread_are_seen_passed_without_the_newest() {
    let driver = fakes();
    let shared = fake_driver::context(&driver);
    let tracks = ContextTracks::new(&shared);
    let stream = 0x7f_usize;
    // Written point 1 (record 0); a capture takes the next batch (record 1) and the word.
    let track = written(&tracks, &shared, stream, 33).track;
    with_streams(|fake| fake.capturing_once.push(stream));
    assert!(
        tracks
            .mark_written(&shared, stream as CUstream, 33, enqueue_on(stream))
            .is_err()
    );
    // Points 2 and 3 on events (records 2 and 3).
    for point in [2, 3] {
        let marked = tracks
            .mark(&shared, stream as CUstream, 33)
            .expect("marked");
        assert_eq!(marked.point, point);
    }
    // The stream ran point 2's record, not point 3's: the unread point 1 passed with point 2,
    // whatever the newest says.
    complete(stream, 3);
    assert_eq!(track.look(Look::Fresh), 2);
    complete(stream, 4);
    assert_eq!(track.look(Look::Fresh), 3);
}

/// The host addresses of the context's free pinned words, taken.
fn take_free_words(shared: &ContextShared) -> Vec<usize> {
    std::iter::from_fn(|| shared.take_free_pinned_word())
        .map(|word| word.host.addr())
        .collect()
}

#[test]
fn a_tracks_word_goes_back_with_its_contexts_tracks_once_the_stream_passed_its_last_write() {
    let driver = fakes();
    let shared = fake_driver::context(&driver);
    let stream = 0x80_usize;
    // Three values of the context in turn, each with a written point on its stream's track: the
    // first's stream has yet to pass it when the value goes, the second's passed it with no
    // look since, the third's was seen passed.
    let mut given_back = Vec::new();
    for (id, ran, looked) in [(35, false, false), (36, true, false), (37, true, true)] {
        let tracks = ContextTracks::new(&shared);
        let track = written(&tracks, &shared, stream, id).track;
        let word = track.core.word().addr();
        take_free_words(&shared);
        if ran {
            complete(stream, with_streams(|fake| fake.streams[&stream].0));
        }
        if looked {
            assert_eq!(track.look(Look::Fresh), 1);
        }
        drop(tracks);
        given_back.push(take_free_words(&shared) == [word]);
    }
    assert_eq!(
        given_back,
        [false, true, true],
        "given back while the stream may still write it, or never once it passed"
    );
}

#[test]
fn a_point_nothing_records_passes_with_a_later_point_and_the_track_reads_its_word_no_more() {
    let driver = fakes();
    let shared = fake_driver::context(&driver);
    let tracks = ContextTracks::new(&shared);
    let stream = 0x81_usize;
    // Written point 1 (record 0), then an operation whose point could not be marked: point 2,
    // which nothing records.
    let track = written(&tracks, &shared, stream, 39).track;
    let word = track.core.word().addr();
    let unread = tracks.mark_unread(&shared, 39).expect("marked");
    assert!(Arc::ptr_eq(&unread.track, &track));
    assert_eq!(unread.point, 2);
    // The stream writes point 1: the word is read no more, and tells nothing of point 2.
    complete(stream, 1);
    assert_eq!(track.look(Look::Fresh), 0, "read the withdrawn word");
    let mut offered = None;
    let marked = tracks
        .mark_written(&shared, stream as CUstream, 39, |point| {
            offered = Some(point.is_some());
            enqueue_on(stream)(point)
        })
        .expect("enqueued");
    assert!(marked.is_none());
    assert_eq!(offered, Some(false), "the track offers its word again");
    // Point 3 on an event (record 2, after the operation of record 1).
    let next = tracks
        .mark(&shared, stream as CUstream, 39)
        .expect("marked");
    assert_eq!(next.point, 3);
    assert_eq!(track.look(Look::Fresh), 0);
    complete(stream, 3);
    assert_eq!(
        track.look(Look::Fresh),
        3,
        "points 1 and 2 passed with point 3"
    );
    take_free_words(&shared);
    drop(tracks);
    assert_eq!(
        take_free_words(&shared),
        [word],
        "the withdrawn word, whose last write passed, is given back with the tracks"
    );
}

#[test]
fn a_look_refused_while_another_is_under_way_leaves_that_look_in_force() {
    let state = AtomicU8::new(IDLE);
    let looking = Looking::try_begin(&state).expect("no look under way");
    assert!(Looking::try_begin(&state).is_none(), "one look at a time");
    assert_eq!(
        state.load(Ordering::Relaxed),
        LOOKING,
        "the refused look did not end the one under way"
    );
    drop(looking);
    state.store(CLOSED, Ordering::Relaxed);
    assert!(Looking::try_begin(&state).is_none(), "a closed track");
    assert_eq!(state.load(Ordering::Relaxed), CLOSED, "stays closed");
}

//! Written points and the track's word: read, withdrawn, given back.

use super::*;

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

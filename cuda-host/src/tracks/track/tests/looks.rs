//! Looks at points recorded on events: how far they see, what they query, how they are paced,
//! what they give back.

use super::*;

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
        // The clock starts before the look's own: a pause between the two cannot hide in it.
        let start = Instant::now();
        // A look for point 3 (not the first pending) finds it pending, and learns nothing of 1.
        assert_eq!(track.look_for(3, Look::Fresh), 0);
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

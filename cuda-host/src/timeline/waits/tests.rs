//! The turns of a dropped narrow timeline's waits: `next_turn`, and `raise_abandoned` over a
//! word the tests set as a stream's late signal would.

use super::*;

const WINDOW: u64 = NARROW_WINDOW;

/// The next turn of `waits` (ascending), whose release value is the highest.
fn next(turn: Option<Turn>, waits: &[u64], now: Instant, lowered: bool) -> Turn {
    let release = *waits.last().expect("a wait");
    let top = |low: u64| release.min(low + WINDOW - 1);
    next_turn(
        turn,
        waits,
        &windows_of(waits),
        top,
        now,
        LONGEST_PAUSE,
        lowered,
    )
}

/// Nanoseconds from the epoch to `at`.
fn since_epoch(at: Instant) -> u128 {
    at.duration_since(*EPOCH.get().expect("a turn set the epoch"))
        .as_nanos()
}

#[test]
fn a_turn_lasts_at_least_turn_and_ends_on_the_grid_of_the_pause_or_of_turn() {
    let now = Instant::now();
    let waits = [1, 1 + WINDOW];
    let top = |low: u64| low + WINDOW - 1;
    for doublings in 0..=9 {
        let pause = FIRST_PAUSE * (1 << doublings);
        let turn = next_turn(None, &waits, &windows_of(&waits), top, now, pause, false);
        assert_eq!(turn.target, top(1));
        let grid = pause.max(TURN);
        assert!(turn.ends >= now + TURN, "shorter than TURN");
        assert!(
            turn.ends <= now + TURN + grid,
            "longer than TURN and a pause"
        );
        assert_eq!(since_epoch(turn.ends) % grid.as_nanos(), 0, "off the grid");
    }
}

#[test]
fn each_window_has_its_turn_in_order_up_and_round() {
    // Two windows: each in turn. Three: the highest's value, 2^32 above the lowest's waits,
    // releases them too (a device compares the low words), so the round goes on from the
    // middle one.
    let three = [1, 1 + WINDOW, 1 + 2 * WINDOW];
    let rounds: [(&[u64], [u64; 4]); 2] = [
        (&[1, 1 + WINDOW], [1 + WINDOW, 1, 1 + WINDOW, 1]),
        (
            &three,
            [1 + WINDOW, 1 + 2 * WINDOW, 1 + WINDOW, 1 + 2 * WINDOW],
        ),
    ];
    for (waits, lows) in rounds {
        let mut turn = next(None, waits, Instant::now(), false);
        assert_eq!(turn.low, 1);
        for low in lows {
            let after = next(Some(turn), waits, turn.ends, false);
            assert_eq!(after.low, low, "{waits:?}");
            assert!(after.ends >= turn.ends + TURN);
            turn = after;
        }
    }
}

#[test]
fn a_turn_keeps_its_value_when_waits_seen_passed_regroup_the_windows() {
    // Waits A = 1 and B = W (a window), C = 1 + W and D = 2W (a window), E = 1 + 2W. A look at
    // the end of the first turn gives C and D theirs; A was seen passed meanwhile and leaves:
    // the windows regroup to [B, C] and [D, E], neither with the turn's value. The look's
    // second raise, 5 us later, must leave C and D their turn.
    let w = WINDOW;
    let waits = [1, w, 1 + w, 2 * w, 1 + 2 * w];
    let first = next(None, &waits, Instant::now(), false);
    let begun = next(Some(first), &waits, first.ends, false);
    assert_eq!(begun.low, 1 + w, "C and D's turn");
    let at = first.ends + Duration::from_micros(5);
    for lowered in [false, true] {
        let kept = next(Some(begun), &waits[1..], at, lowered);
        assert_eq!(kept.target, begun.target, "the turn moved to another value");
        assert!(releases(kept.target, 1 + w) && releases(kept.target, 2 * w));
        if !lowered {
            assert_eq!(kept, begun);
        }
    }
    // Then the next window up from C and D's, and round.
    let then = next(Some(begun), &waits[1..], begun.ends, false);
    assert_eq!(then.low, 2 * w);
    let round = next(Some(then), &waits[1..], then.ends, false);
    assert_eq!(round.low, w);
}

#[test]
fn a_window_whose_value_a_stream_lowered_has_its_turn_again_from_then() {
    let waits = [1, 1 + WINDOW];
    let turn = next(None, &waits, Instant::now(), false);
    // Found lowered at a look during the turn, or at its end: the same value again, for
    // TURN at least, on TURN's grid, as the pauses start again.
    for at in [turn.ends - Duration::from_micros(10), turn.ends] {
        let again = next(Some(turn), &waits, at, true);
        assert_eq!(
            again.target, turn.target,
            "the lowered window lost its turn"
        );
        assert!(again.ends >= at + TURN && again.ends <= at + 2 * TURN);
        assert_eq!(since_epoch(again.ends) % TURN.as_nanos(), 0);
        // A wait seen passed meanwhile leaves it that turn.
        let kept = next(
            Some(again),
            &waits[..1],
            at + Duration::from_micros(5),
            false,
        );
        assert_eq!(kept, again);
    }
}

/// An abandoned narrow timeline's state over `word`, with pending waits for `values` (each
/// the wait of a stream point nothing records, so never seen passed) and `release`.
fn abandoned_state(word: &AtomicU64, values: &[u64], release: u64) -> State {
    use crate::tracks::ContextTracks;
    // SAFETY: no entry points beyond the fake driver's defaults.
    let driver = unsafe { crate::fake_driver::driver(&[]) };
    let shared = crate::fake_driver::context(&driver);
    let tracks = ContextTracks::new(&shared);
    let narrow_waits = values
        .iter()
        .enumerate()
        .map(|(stream, &value)| {
            let marked = tracks
                .mark_unread(&shared, 0x9000 + stream as u64)
                .expect("marked");
            NarrowWait {
                track: marked.track,
                point: marked.point,
                context: crate::fake_driver::CONTEXT.addr(),
                value,
            }
        })
        .collect();
    // The fakes' context and tracks live for the test process: dropping them would ask the
    // driver for more than the fakes answer.
    std::mem::forget(tracks);
    std::mem::forget(shared);
    State {
        waiters: Waiters::default(),
        word: std::ptr::from_ref(word),
        streams: Vec::new(),
        narrow_waits,
        abandoned: Some(Abandoned {
            release,
            set: word.load(Ordering::Acquire),
            turn: None,
            pause: LONGEST_PAUSE,
            due: Instant::now(),
            quiet_looks: 0,
        }),
    }
}

fn turn_of(state: &State) -> Turn {
    state
        .abandoned
        .as_ref()
        .and_then(|a| a.turn)
        .expect("a turn")
}

/// Waits A = 1 and B = 2^31 + 1 (real: A enqueued at value 0, the host signals 2^31, B
/// enqueued; both streams held behind other work), release B. A stream's signal enqueued
/// before the drop, 2^32 + 2^31 + 100 (above every value then), lands during A's turn: a
/// store 64-bit above the value set, whose low word holds A (it releases B). As with a
/// signal that lowered the value, A's turn must have its time again at the next look.
#[test]
fn a_late_signal_above_the_turns_value_that_holds_its_window_gives_it_its_time_again() {
    let (a, b) = (1, WINDOW + 1);
    let word = AtomicU64::new(WINDOW);
    let mut state = abandoned_state(&word, &[a, b], b);
    assert_eq!(state.raise_abandoned(), None);
    let first = turn_of(&state);
    assert_eq!(first.low, a, "A's turn first");
    assert!(releases(word.load(Ordering::Acquire), a));
    // The late signal lands just after the turn began.
    let late = (1 << 32) + WINDOW + 100;
    word.store(late, Ordering::Release);
    let landed = Instant::now();
    assert!(
        !releases(late, a) && releases(late, b),
        "it holds A, releases B"
    );
    // The watcher looks next at the turn's end (`next_look`): A was held all its turn.
    while Instant::now() < first.ends {
        std::thread::sleep(Duration::from_micros(200));
    }
    let found = state.raise_abandoned();
    let value = word.load(Ordering::Acquire);
    assert!(
        releases(value, a),
        "A held by the late signal for the last {:?} of its turn, then the turn passed to B: \
         value {value} (turn {:?}), look reported {found:?}",
        first.ends - landed,
        turn_of(&state)
    );
}

/// Steps between the values of the sweeps' wait sets, near multiples of 2^32 and of a window.
const PICKS: [u64; 7] = [
    0,
    1,
    WINDOW - 1,
    WINDOW,
    WINDOW + 1,
    2 * WINDOW - 1,
    2 * WINDOW,
];

/// A generator of the sweeps' numbers (xorshift), the same from the same seed.
fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

/// Sweeps wait sets a narrow timeline can hold (each wait at most 2^31 above a rising value,
/// near multiples of 2^32, far apart by multiples of 2^32), dropping waits as they pass:
/// every wait is released by a turn within a round of the first windows plus one turn per
/// regrouping, every turn lasts TURN, none releases nothing, none panics.
#[test]
fn every_wait_has_a_turn_within_a_round_of_the_windows_and_a_turn_per_regrouping() {
    let mut random = xorshift(0x2545_f491_4f6c_dd1d);
    let picks = PICKS;
    for _ in 0..3000 {
        let mut value = (random() % 4) << 32;
        let mut waits = Vec::new();
        for _ in 0..(2 + random() % 6) {
            let step = match random() % 4 {
                0 => picks[(random() % picks.len() as u64) as usize],
                1 => (random() % 3) << 32,
                _ => random() % (2 * WINDOW),
            };
            value += step;
            let wait = value + random() % (WINDOW + 1);
            waits.push(wait.max(value));
        }
        waits.sort_unstable();
        let release = *waits.last().unwrap();
        let top = |low: u64| release.min(low + WINDOW - 1);
        let mut pending = waits.clone();
        let mut now = Instant::now();
        let mut turn: Option<Turn> = None;
        let mut turns_without = vec![0usize; pending.len()];
        let rounds = windows_of(&pending).len();
        let mut regroups = 0;
        let mut last_windows = windows_of(&pending);
        for _ in 0..200 {
            if windows_of(&pending).len() < 2 {
                break;
            }
            let windows = windows_of(&pending);
            if windows != last_windows {
                regroups += 1;
                last_windows.clone_from(&windows);
            }
            let next = next_turn(turn, &pending, &windows, top, now, LONGEST_PAUSE, false);
            if turn.is_none_or(|t| t != next) {
                assert!(next.ends >= now + TURN, "shorter than TURN");
            }
            let released: Vec<bool> = pending.iter().map(|&w| releases(next.target, w)).collect();
            assert!(
                released.iter().any(|&r| r),
                "a turn releasing nothing: {next:?}"
            );
            for (count, &r) in turns_without.iter_mut().zip(&released) {
                *count = if r { 0 } else { *count + 1 };
                assert!(
                    *count <= rounds + regroups,
                    "{waits:?}: a wait skipped a round"
                );
            }
            // Some released waits are seen passed, at random.
            let mut keep = Vec::new();
            let mut counts = Vec::new();
            for ((&w, &r), &c) in pending.iter().zip(&released).zip(&turns_without) {
                if !(r && random().is_multiple_of(2)) {
                    keep.push(w);
                    counts.push(c);
                }
            }
            pending = keep;
            turns_without = counts;
            turn = Some(next);
            now = next.ends;
        }
    }
}

/// Waits A = 0, B = W + 10 and C = W + 20 (one window), D = 2W + 25 (real: D enqueued once
/// the value reached W + 25, the others' streams held behind other work). After A's turn and
/// B and C's, A and B are seen passed, C (released, its stream not there yet) not: the
/// windows regroup to [C] and [D], and the next turn up from B goes to C, which the turn just
/// ended released, for a whole turn more while D, whose window had the third turn of the
/// round, waits a fourth.
#[test]
fn after_a_regrouping_the_next_turn_goes_to_waits_the_turn_did_not_release() {
    let w = WINDOW;
    let (a, b, c, d) = (0, w + 10, w + 20, 2 * w + 25);
    let waits = [a, b, c, d];
    assert_eq!(windows_of(&waits), [a, b, d]);
    let first = next(None, &waits, Instant::now(), false);
    let second = next(Some(first), &waits, first.ends, false);
    assert!(releases(second.target, b) && releases(second.target, c));
    let third = next(Some(second), &[c, d], second.ends, false);
    assert!(
        releases(third.target, d),
        "the third turn of the round released only {:?} of the pending [C, D] (turn {third:?}): \
         D held a fourth turn, {:?} more",
        [c, d].map(|v| releases(third.target, v)),
        third.ends - second.ends
    );
}

/// Waits A = 1 and B = 2^31 + 1 (as above), release B. A stream enqueued, before the drop,
/// a run of work each followed by a signal (2^33 + 1, 2^33 + 2, ...: each above the one
/// before, as enqueue requires); they land one per millisecond or so after the drop. Each
/// signal's low word releases A (held nothing of A's turn), yet each counts as landed: A's
/// turn has its time again at every look, and B, whose stream waits, never has a turn.
#[test]
fn late_signals_that_release_the_turns_waits_do_not_keep_its_turn() {
    let (a, b) = (1, WINDOW + 1);
    let word = AtomicU64::new(WINDOW);
    let mut state = abandoned_state(&word, &[a, b], b);
    assert_eq!(state.raise_abandoned(), None);
    let _ = state.next_look(false);
    assert_eq!(turn_of(&state).low, a, "A's turn first");
    let begun = Instant::now();
    let longest = TURN + LONGEST_PAUSE;
    let mut warned = 0;
    let mut looks = 0;
    let mut b_had_its_turn = false;
    for i in 0u64.. {
        let late = (1 << 33) + 1 + i;
        assert!(releases(late, a), "the signal holds none of A's waits");
        word.store(late, Ordering::Release);
        // The watcher looks next at the turn's end (`next_look`).
        while Instant::now() < turn_of(&state).ends {
            std::thread::sleep(Duration::from_micros(200));
        }
        let raised = state.raise_abandoned();
        warned += usize::from(raised.is_some());
        looks += 1;
        let _ = state.next_look(raised.is_some());
        if turn_of(&state).low == b {
            b_had_its_turn = true;
            break;
        }
        if begun.elapsed() > 3 * longest {
            break;
        }
    }
    assert!(
        b_had_its_turn,
        "A's turn lasted {:?} (longest promised {longest:?}) over {looks} looks, each \
         warning ({warned} warnings): B never had a turn",
        begun.elapsed()
    );
}

/// Waits A = 1, B = 2^31 + 1, C = 2^32 + 1 (real: A enqueued at value 0, the host signals
/// 2^31, B enqueued, the host signals 2^32, C enqueued; every stream held behind other work),
/// release C: three windows. C's turn (value 2^32 + 1) releases A too (same low word), not
/// B. The next turn must go to a window with a wait C's did not release (B), but it wraps
/// round to A's unchecked, and B waits a turn more.
#[test]
fn the_turn_round_to_the_lowest_goes_to_a_wait_the_turn_did_not_release() {
    let (a, b, c) = (1, WINDOW + 1, (1 << 32) + 1);
    let waits = [a, b, c];
    assert_eq!(windows_of(&waits), [a, b, c]);
    let first = next(None, &waits, Instant::now(), false);
    let second = next(Some(first), &waits, first.ends, false);
    let third = next(Some(second), &waits, second.ends, false);
    assert_eq!((first.low, second.low, third.low), (a, b, c));
    assert!(releases(third.target, a) && !releases(third.target, b));
    let fourth = next(Some(third), &waits, third.ends, false);
    assert!(
        releases(fourth.target, b),
        "after C's turn (which released A and C) the turn went to {:?}, releasing only \
         {:?} of [A, B, C] again: B held {:?} more",
        fourth.low,
        waits.map(|v| releases(fourth.target, v)),
        fourth.ends - third.ends
    );
}

/// Without passes, every wait a narrow timeline can hold (waits at most 2^31 above a rising
/// value, many near multiples of 2^32 so that windows alias) is released within as many
/// turns as there are windows, by the round from the lowest included.
#[test]
fn every_wait_is_released_within_a_round_of_the_windows_when_none_passes() {
    let mut random = xorshift(0x1234_5678_9abc_def1);
    let picks = PICKS;
    for _ in 0..20000 {
        let mut value = (random() % 4) << 32;
        let mut waits = Vec::new();
        for _ in 0..(2 + random() % 7) {
            value += match random() % 5 {
                0 => picks[(random() % picks.len() as u64) as usize],
                1 => (random() % 3) << 32,
                2 => (((random() % 3) << 32) + (random() % 4) * (WINDOW / 2))
                    .saturating_sub(random() % 3),
                _ => random() % (2 * WINDOW),
            };
            waits.push(value + [0, WINDOW, random() % (WINDOW + 1)][(random() % 3) as usize]);
        }
        waits.sort_unstable();
        let release = *waits.last().unwrap();
        let top = |low: u64| release.min(low + WINDOW - 1);
        let windows = windows_of(&waits);
        if windows.len() < 2 {
            continue;
        }
        let (mut turn, mut now) = (None, Instant::now());
        let mut without = vec![0usize; waits.len()];
        for _ in 0..4 * windows.len() {
            let next = next_turn(turn, &waits, &windows, top, now, LONGEST_PAUSE, false);
            for (count, &wait) in without.iter_mut().zip(&waits) {
                *count = if releases(next.target, wait) {
                    0
                } else {
                    *count + 1
                };
                assert!(
                    *count < windows.len(),
                    "{waits:x?}: {wait:x} waited a round"
                );
            }
            (turn, now) = (Some(next), next.ends);
        }
    }
}

/// One window [1, 100] (release 100), raised. A stream's signal enqueued before the drop,
/// 2^31 + 50, lands: above the value set, kept by `fetch_max` were it the rise, but its low
/// word holds wait 1. The look must set a value releasing both and report the landing.
#[test]
fn a_higher_late_signal_that_holds_a_wait_in_the_rise_is_set_again_and_reported() {
    let word = AtomicU64::new(0);
    let mut state = abandoned_state(&word, &[1, 100], 100);
    let _ = state.raise_abandoned();
    assert_eq!(word.load(Ordering::Acquire), 100);
    let late = WINDOW + 50;
    assert!(!releases(late, 1));
    word.store(late, Ordering::Release);
    let found = state.raise_abandoned();
    let value = word.load(Ordering::Acquire);
    assert!(releases(value, 1) && releases(value, 100), "value {value}");
    assert_eq!(found, Some(late));
}

/// Windows A = 1 and B = 2^31 + 1. During A's turn a late signal lands that releases A's
/// wait but holds B's (which A's value did not release either): not a landing that held
/// the turn's waits; at A's end B's turn overwrites it.
#[test]
fn a_late_signal_holding_only_the_next_windows_wait_leaves_it_its_turn() {
    let (a, b) = (1, WINDOW + 1);
    let word = AtomicU64::new(WINDOW);
    let mut state = abandoned_state(&word, &[a, b], b);
    let _ = state.raise_abandoned();
    let first = turn_of(&state);
    assert_eq!(first.low, a);
    let late = (1 << 32) + 5;
    assert!(releases(late, a) && !releases(late, b));
    word.store(late, Ordering::Release);
    while Instant::now() < first.ends {
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(state.raise_abandoned(), None);
    assert!(releases(word.load(Ordering::Acquire), b));
    assert_eq!(turn_of(&state).low, b);
}

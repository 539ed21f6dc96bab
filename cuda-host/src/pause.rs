//! How cuda-host's own threads (the stream-point watcher, the polled engine's servers) sleep
//! while they wait for the device: with their timer slack at the least the OS allows, so that a
//! short sleep lasts what it asks (Linux adds up to 50 µs to each sleep of a thread that keeps its
//! default), and in pauses long enough that their looks and wakes take about a tenth of a core.
//!
//! **A tenth of a core.** What a look and a sleep's wake cost a thread differs between hosts (about
//! 5 µs on an H100's, three times that on a small VM) and grows with what the thread looks at. So a
//! thread measures it, its CPU time from one sleep's start to the next's (a running mean over the
//! spell of sleeps, each spell measured afresh: a later one may look at other things), and sleeps
//! [`PAUSE_PER_ROUND_COST`] times that where its own pause is shorter, up to [`MOST_PAUSE`]: beyond
//! rounds of a ninth of that, it takes more.

use std::time::Duration;

/// A thread's timer slack.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Slack {
    /// The least Linux allows: 1 ns.
    Least,
    /// Linux's default, 50 µs, set as such (restoring it with 0 would give the slack of the thread
    /// that started this one, a user's thread, which may have raised its own).
    Default,
}

/// A pause that many times a round's cost holds the rounds to a tenth of a core.
const PAUSE_PER_ROUND_COST: u32 = 9;
/// The longest pause the CPU share may ask for, however costly a round: a wake comes within it,
/// and rounds costlier than a ninth of it take more than a tenth of a core.
pub(crate) const MOST_PAUSE: Duration = Duration::from_millis(1);

/// Sets the calling thread's timer slack: the least Linux allows (1 ns), or Linux's default
/// (50 µs).
#[cfg(target_os = "linux")]
pub(crate) fn set_timer_slack(slack: Slack) {
    use std::ffi::{c_int, c_ulong};
    unsafe extern "C" {
        fn prctl(option: c_int, ...) -> c_int;
    }
    const PR_SET_TIMERSLACK: c_int = 29;
    let nanoseconds: c_ulong = match slack {
        Slack::Least => 1,
        Slack::Default => 50_000,
    };
    // SAFETY: PR_SET_TIMERSLACK takes one unsigned long by value and changes only the calling
    // thread's timer slack; it reads and writes none of this process's memory.
    let _ = unsafe { prctl(PR_SET_TIMERSLACK, nanoseconds) };
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn set_timer_slack(_: Slack) {}

/// The CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`); `None` where it cannot
/// be read: Miri has no such clock, and only 64-bit Linux, where `struct timespec` is two 64-bit
/// integers on every architecture, is declared (32-bit ABIs differ: x32's `tv_nsec` is 64-bit,
/// riscv32's `time_t` too).
#[cfg(all(target_os = "linux", target_pointer_width = "64", not(miri)))]
fn thread_cpu_time() -> Option<Duration> {
    use std::ffi::c_int;
    /// `struct timespec` of 64-bit Linux: `time_t` and `long`, both 64-bit.
    #[repr(C)]
    struct Timespec {
        seconds: i64,
        nanoseconds: i64,
    }
    unsafe extern "C" {
        fn clock_gettime(clock: c_int, time: *mut Timespec) -> c_int;
    }
    const CLOCK_THREAD_CPUTIME_ID: c_int = 3;
    let mut time = Timespec {
        seconds: 0,
        nanoseconds: 0,
    };
    // SAFETY: `time` is a valid, writable `struct timespec` of this target (64-bit Linux: two
    // 64-bit integers); the call writes it alone.
    let read = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut time) };
    (read == 0).then(|| {
        Duration::new(
            u64::try_from(time.seconds).unwrap_or(0),
            u32::try_from(time.nanoseconds).unwrap_or(0),
        )
    })
}

#[cfg(not(all(target_os = "linux", target_pointer_width = "64", not(miri))))]
fn thread_cpu_time() -> Option<Duration> {
    None
}

/// What the thread's rounds cost it while it sleeps between them, so that the sleeps hold it
/// near a tenth of a core where a round and a wake cost more than the default pause allows (a
/// host with costlier wakes, many tracks to look at). Measured afresh in each spell of sleeps:
/// what a spell cost says nothing of a later one, which may look at other tracks.
#[derive(Default)]
pub(crate) struct SleepCost {
    /// The thread's CPU time when its last sleep began, while it goes on sleeping.
    last: Option<Duration>,
    /// A running mean, over this spell, of the CPU time from one sleep's start to the next's:
    /// the wake, the round.
    per_round: Option<Duration>,
}

impl SleepCost {
    /// The pause to sleep for, at least `least`, as a sleep begins now.
    pub(crate) fn pause(&mut self, least: Duration) -> Duration {
        let now = thread_cpu_time();
        if let (Some(last), Some(now)) = (self.last, now) {
            let spent = now.saturating_sub(last);
            self.per_round = Some(match self.per_round {
                Some(mean) => (mean * 3 + spent) / 4,
                None => spent,
            });
        }
        self.last = now;
        within_share(least, self.per_round)
    }

    /// The thread did something else than sleep: the spell ended, and the next begins at the
    /// pace's pause.
    pub(crate) fn interrupted(&mut self) {
        self.last = None;
        self.per_round = None;
    }
}

/// The pause after a round that costs `per_round` of CPU, where `least` is the pace's: long
/// enough that rounds take at most a tenth of a core, up to [`MOST_PAUSE`] (beyond rounds of
/// about 110 µs, they take more).
fn within_share(least: Duration, per_round: Option<Duration>) -> Duration {
    per_round.map_or(least, |cost| {
        (cost * PAUSE_PER_ROUND_COST).clamp(least, MOST_PAUSE.max(least))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A pace's own pause, as the watcher's and the servers' are.
    const PACE: Duration = Duration::from_micros(50);

    #[test]
    fn a_round_cheap_enough_keeps_the_paces_pause_and_a_costly_one_lengthens_it_to_a_tenth() {
        let micros = Duration::from_micros;
        assert_eq!(within_share(PACE, None), PACE, "unmeasured");
        assert_eq!(within_share(PACE, Some(micros(5))), PACE);
        // A round of 7 µs sleeps 63: 7 of 70, a tenth.
        assert_eq!(within_share(PACE, Some(micros(7))), micros(63));
        assert_eq!(
            within_share(PACE, Some(micros(500))),
            MOST_PAUSE,
            "a wake comes within the longest pause, whatever a round costs"
        );
        assert_eq!(
            within_share(micros(2_000), Some(micros(500))),
            micros(2_000)
        );
    }

    #[test]
    fn the_cost_of_rounds_between_sleeps_is_a_running_mean_and_only_sleeps_are_measured() {
        let mut cost = SleepCost::default();
        assert_eq!(cost.pause(PACE), PACE, "nothing measured yet");
        let measured = thread_cpu_time().is_some();
        // A round that spins 2 ms of this thread's CPU between two sleeps.
        let spin = |time: Duration| {
            let start = thread_cpu_time().unwrap_or_default();
            let began = Instant::now();
            while thread_cpu_time().unwrap_or_default() - start < time
                && began.elapsed() < time * 50
            {
                std::hint::spin_loop();
            }
        };
        spin(Duration::from_millis(2));
        let pause = cost.pause(PACE);
        if measured {
            assert_eq!(pause, MOST_PAUSE, "a costly round lengthens the pause");
            let mean = cost.per_round.expect("a round measured");
            assert!(mean >= Duration::from_millis(2), "{mean:?}");
            // Cheap rounds bring the mean down a quarter of the way each.
            cost.pause(PACE);
            let after = cost.per_round.expect("a round measured");
            assert!(after < mean && after > mean / 2, "{mean:?} then {after:?}");
        }
        // What happens between sleeps that are not one after another counts for nothing.
        cost.interrupted();
        spin(Duration::from_millis(2));
        assert_eq!(cost.pause(PACE), PACE, "an interrupted spell measured");
        assert_eq!(cost.per_round, None, "an interrupted spell measured");
    }

    #[test]
    fn a_spell_of_costly_rounds_leaves_the_pauses_of_later_spells_alone() {
        if thread_cpu_time().is_none() {
            return;
        }
        let mut cost = SleepCost::default();
        cost.pause(PACE);
        let start = thread_cpu_time().expect("measured");
        while thread_cpu_time().expect("measured") - start < Duration::from_millis(2) {
            std::hint::spin_loop();
        }
        assert_eq!(cost.pause(PACE), MOST_PAUSE, "a costly round");
        // The spell ends (a wake, then a park); later spells each sleep once, then end: waits
        // that end within their first pause.
        cost.interrupted();
        for spell in 0..10 {
            assert_eq!(cost.pause(PACE), PACE, "spell {spell}");
            cost.interrupted();
        }
    }
}

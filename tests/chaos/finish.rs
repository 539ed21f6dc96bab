//! The end of a sequence: every capture ended and every gate opened, every wait let finish, every
//! object dropped, every worker's values reclaimed; then the invariants that hold once nothing is
//! left: each value dropped exactly once, each run-once launch run once, each injected panic
//! reported once, and every count back at its baseline.

use crate::execute::{self, Env};
use crate::plan::ENTRIES;
use crate::witness::{self, violated};
use crate::workers::{Stuck, Workers};
use cuda_host_sys::CUresult;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What cuda-host and the software driver hold, for the comparison with the baseline.
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    in_flight: usize,
    finished: usize,
    held: usize,
    waiting: usize,
    timeline_words: u64,
    live: cuda_host_testing::LiveObjects,
}

impl Counts {
    pub fn now(controls: &suite::software::Controls) -> Counts {
        let slots = cuda_host::metrics().launch_slots();
        let points = cuda_host::metrics().stream_points();
        let timelines = cuda_host::metrics().timelines();
        Counts {
            in_flight: slots.in_flight,
            finished: slots.finished,
            held: points.held,
            waiting: points.waiting,
            timeline_words: timelines.words - timelines.kept,
            live: controls.live_objects(),
        }
    }
}

/// How long the end waits for what must finish once every gate is open.
const SETTLE: Duration = Duration::from_secs(20);

/// Ends the sequence and checks what must hold once nothing is left.
///
/// # Errors
/// [`Stuck`] when a worker does not finish its part within the bound.
pub fn finish(
    env: &Env,
    mut workers: Workers,
    baseline: &Counts,
    log: &mut Vec<String>,
) -> Result<(), Stuck> {
    let world = &env.world;
    // The last steps, if they ran beside each other, are done first: one may arm a failure.
    for (what, outcome) in workers.finish_pending()? {
        log.push(format!("{what} -> {outcome}"));
    }
    // No more injected failures, delays or captures; the logger and hook quiet.
    for entry in ENTRIES {
        env.controls
            .fail_next_calls_any_thread(entry, 0, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    }
    env.controls.disarm_capture_at_next_call();
    *world.armed.lock().unwrap() = None;
    world.arm_capture(false);
    crate::observers::set_logger(crate::plan::LoggerMode::Quiet);
    crate::observers::set_hook_panicking(false);
    let env_job = env.clone();
    let outcome = workers.run(
        0,
        "take the errors failed destroys left".to_owned(),
        Box::new(move |_| take_drop_errors(&env_job)),
    )?;
    log.push(format!("end: {outcome}"));
    // Each worker ends the captures it began.
    for index in 0..workers.len() {
        let env = env.clone();
        let outcome = workers.run(
            index,
            "end this worker's captures".to_owned(),
            Box::new(move |local| execute::end_local_captures(&env, local)),
        )?;
        log.push(format!("end: worker {index}: {outcome}"));
    }
    // A capture armed at a driver call that began after the runner's last look: ended here,
    // on the thread that ends it anyway (its end answers "wrong thread" then, and ends it).
    for stream in world.streams.lock().unwrap().iter() {
        let (answer, status) = suite::capture::is_capturing(stream.stream.as_raw());
        if answer == CUresult::CUDA_SUCCESS
            && status != cuda_host_sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
        {
            let mut graph = std::ptr::null_mut();
            let driver = stream.stream.context().driver();
            // SAFETY: a live stream, capturing; a valid out-pointer.
            let ended = unsafe { driver.cuStreamEndCapture(stream.stream.as_raw(), &mut graph) };
            if !graph.is_null() {
                // SAFETY: the capture's graph, destroyed once.
                let _ = unsafe { driver.cuGraphDestroy(graph) };
            }
            log.push(format!(
                "end: a capture of {} begun at a call ended: {ended}",
                stream.name
            ));
        }
    }
    // Every timeline goes while gates may still hold streams in front of their waits.
    let outcome = workers.run(
        0,
        "the timelines' futures reached, every handle dropped".to_owned(),
        Box::new(|_| crate::timelines::drop_handles()),
    )?;
    log.push(format!("end: {outcome}"));
    world.open_all();
    for (what, outcome) in workers.finish_pending()? {
        log.push(format!("end: `{what}` returned: {outcome}"));
    }
    let outcome = workers.run(
        0,
        "every stream's wait passed once the timelines went".to_owned(),
        Box::new(|_| crate::timelines::check_no_wait_stranded()),
    )?;
    log.push(format!("end: {outcome}"));
    log.push(format!("end: {}", check_watcher_rests()));
    let env_job = env.clone();
    let outcome = workers.run(
        0,
        "let every stream finish, every point complete, every object go".to_owned(),
        Box::new(move |_| settle(&env_job)),
    )?;
    log.push(format!("end: {outcome}"));
    log.push(format!("end: {}", crate::copies::check_raw_launches()));
    // Each worker drops what is its own, in rounds: a value one worker drops may hand another's
    // to its home (an executable's state holding callables other workers set), so a worker
    // whose own are all dropped may be handed more by a later worker's drain.
    let deadline = Instant::now() + SETTLE;
    loop {
        let mut outcomes = Vec::new();
        for index in 0..workers.len() {
            let id = workers.id(index);
            let outcome = workers.run(
                index,
                "reclaim this worker's values".to_owned(),
                Box::new(move |_| reclaim_own(id)),
            )?;
            outcomes.push(outcome);
        }
        let ids: Vec<usize> = (0..workers.len()).map(|index| workers.id(index)).collect();
        let left = witness::all()
            .iter()
            .filter(|witness| {
                (ids.contains(&witness.home) || witness::has_exited(witness.home))
                    && witness.drops() == 0
            })
            .count();
        if left == 0 || Instant::now() > deadline {
            for (index, outcome) in outcomes.iter().enumerate() {
                log.push(format!("end: worker {index}: {outcome}"));
            }
            break;
        }
    }
    workers.stop()?;
    check_witnesses();
    check_counts(env, baseline);
    Ok(())
}

/// How long nothing may wait, streams alive and idle, before the watcher must park (or rest).
const QUIET: Duration = Duration::from_secs(1);

/// Every gate open and every timeline's wait passed, the streams alive: once no future waits,
/// the watcher parks, or rests between its looks at dropped timelines that idle streams may
/// still read. It never goes on looking at its own pace with nothing waiting.
fn check_watcher_rests() -> String {
    let deadline = Instant::now() + SETTLE;
    let mut quiet_since = None;
    loop {
        let points = cuda_host::metrics().stream_points();
        if points.watcher_parked {
            return resting_pace();
        }
        let now = Instant::now();
        if points.waiting > 0 {
            // A future of a point nothing shows passed yet (a capture took its record) waits
            // until the streams' end: the watcher looks for it.
            quiet_since = None;
        } else if suite::thread_cpu_time("cuda-host-watch").is_none() {
            return "no watcher thread".to_owned();
        } else if now.duration_since(*quiet_since.get_or_insert(now)) > QUIET {
            violated(format!(
                "nothing waited for {QUIET:?}, and the watcher neither parked nor rested"
            ));
            return "the watcher did not park".to_owned();
        }
        if now > deadline {
            return format!("{} futures still wait: the watcher looks", points.waiting);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// How long the watcher's wakes are counted once it rests, and how many it may make meanwhile:
/// its pauses grow from 40 µs to 20 ms after a timeline's drop (about ten wakes in the first
/// 10 ms), where one that looked at its own pace would wake hundreds of times.
const WAKES_WITHIN: (Duration, u64) = (Duration::from_millis(10), 40);

/// The watcher counts as parked: with dropped timelines still listed (streams noted that may
/// read them), it rests between its looks, waking at most [`WAKES_WITHIN`]; with none, it is
/// parked and wakes for nothing.
fn resting_pace() -> String {
    if cuda_host::metrics().timelines().streams == 0 {
        return "the watcher parked".to_owned();
    }
    // Its rests, each ended by one wake: not the thread's sleeps, which count its waits for
    // locks too (the software driver's, under load: 41 in 10 ms once in an hour's run).
    let rests = || cuda_host::metrics().stream_points().watcher_rests;
    let before = rests();
    std::thread::sleep(WAKES_WITHIN.0);
    let wakes = rests() - before;
    if wakes > WAKES_WITHIN.1 {
        violated(format!(
            "the watcher, counted parked with dropped timelines listed, woke {wakes} times in \
             {:?}",
            WAKES_WITHIN.0
        ));
    }
    format!("the watcher rested: {wakes} wakes in {:?}", WAKES_WITHIN.0)
}

/// How many errors of failed destroys one context may hold at the end: more than the sequence
/// could have armed.
const DROP_ERRORS_AT_MOST: usize = 1024;

/// On a worker, once no destroy can fail any more: each context's errors its `Drop`s left, taken
/// by a call that waits for nothing (a stream made, then dropped), so that the end's own calls
/// meet none. Only a sequence that armed a failed destroy, or a failed context, may have any.
fn take_drop_errors(env: &Env) -> String {
    let world = &env.world;
    let armed = world.destroy_failures_armed.load(Ordering::SeqCst);
    let contexts: Vec<_> = world.contexts.lock().unwrap().clone();
    let mut taken = 0;
    for context in &contexts {
        let mut here = 0u64;
        for _ in 0..DROP_ERRORS_AT_MOST {
            match cuda_host::Stream::new(&context.context, cuda_host::StreamFlags::NonBlocking) {
                Err(cuda_host::Error::DropFailed { .. }) => here += 1,
                _ => break,
            }
        }
        // A failed context's destroys fail with its error.
        if here > 0 && !armed && !context.failed.load(Ordering::SeqCst) {
            violated(format!(
                "{here} errors of failed destroys in {}, where no destroy was armed to fail",
                context.name
            ));
        }
        taken += here;
    }
    execute::DROP_ERRORS.fetch_add(taken, Ordering::Relaxed);
    format!("{taken} errors of failed destroys taken")
}

/// On a worker: every stream synchronized, every point completed, then every object dropped.
fn settle(env: &Env) -> String {
    let world = &env.world;
    let streams: Vec<_> = world.streams.lock().unwrap().clone();
    if let Some(logger) = crate::observers::logger_stream()
        && let Err(error) = logger.synchronize()
    {
        violated(format!(
            "the logger's stream synchronize at the end: {error}"
        ));
    }
    let mut failed = 0;
    for stream in &streams {
        let result = stream.stream.synchronize();
        if let Err(error) = result {
            if !stream.context_failed() {
                violated(format!(
                    "{} synchronize at the end, with every gate open: {error}",
                    stream.name
                ));
            }
            failed += 1;
        }
    }
    let deadline = Instant::now() + SETTLE;
    let mut points = std::mem::take(&mut *world.points.lock().unwrap());
    while !points.is_empty() {
        points.retain_mut(|point| execute::poll_point(point).is_pending());
        if Instant::now() > deadline {
            for point in &points {
                violated(format!(
                    "{} never completed once its stream was synchronized",
                    point.name
                ));
            }
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    drop(points);
    // The streams no step names any more (dropped, or lent to another stream) and the special
    // ones of other threads: a synchronize of each context the run used covers them.
    let contexts: Vec<_> = world.contexts.lock().unwrap().clone();
    for context in &contexts {
        if let Err(error) = context.context.synchronize()
            && !context.failed.load(std::sync::atomic::Ordering::SeqCst)
        {
            violated(format!("{} synchronize at the end: {error}", context.name));
        }
    }
    drop(contexts);
    let graphs = crate::graphs::drop_all(env.controls);
    world.forget_gates();
    world.words.recycle();
    let streams_count = streams.len();
    drop(streams);
    world.streams.lock().unwrap().clear();
    world.contexts.lock().unwrap().truncate(1);
    format!(
        "{streams_count} streams synchronized ({failed} failed contexts'), points completed, \
         {graphs}"
    )
}

/// On a worker: reclaims for a while (a round of [`finish`]'s), until every witness homed here,
/// or homed on a worker that exited (whose records any thread drops), was dropped.
fn reclaim_own(id: usize) -> String {
    let deadline = Instant::now() + Duration::from_millis(20);
    loop {
        cuda_host::reclaim();
        let left = witness::all()
            .iter()
            .filter(|witness| {
                (witness.home == id || witness::has_exited(witness.home)) && witness.drops() == 0
            })
            .count();
        if left == 0 {
            return "every value of its own dropped".to_owned();
        }
        if Instant::now() > deadline {
            return format!("{left} values of its own never dropped");
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Once nothing is left: each value dropped exactly once; each accepted run-once launch of a
/// context that did not fail run exactly once; each injected panic reported exactly once.
fn check_witnesses() {
    let mut injected_runs = 0;
    let mut injected_drops = 0;
    for witness in witness::all() {
        let (runs, drops) = (witness.runs(), witness.drops());
        if drops != 1 {
            violated(format!("{} dropped {drops} times", witness.what));
        }
        if witness.must_run.load(Ordering::SeqCst) && runs != 1 {
            violated(format!(
                "{} ran {runs} times, where it had to run once",
                witness.what
            ));
        }
        if witness.panic_in_run {
            injected_runs += u64::from(runs);
        }
        if witness.panic_in_drop && drops == 1 && !witness.handed_back.load(Ordering::SeqCst) {
            injected_drops += 1;
        }
    }
    let reported_runs = crate::observers::REPORTED_RUN_PANICS.load(Ordering::SeqCst);
    let reported_drops = crate::observers::REPORTED_DROP_PANICS.load(Ordering::SeqCst);
    if reported_runs != injected_runs {
        violated(format!(
            "{injected_runs} panics in runs, {reported_runs} reported to the hook"
        ));
    }
    if reported_drops != injected_drops {
        violated(format!(
            "{injected_drops} panics in the Drops of handed values, {reported_drops} reported"
        ));
    }
}

/// Every count back at its baseline, once every value and object of the sequence is gone. The
/// workers exited: what they still held (a timeline's word behind a stream of theirs that passed
/// its point after their last drain, or after the point a worker marks on its per-thread stream
/// as it exits) passed to any thread, which drains it here, as a user's next call would.
///
/// A hold may stay where cuda-host warned that no point could follow a point nothing records,
/// in a sequence that armed failures any thread may meet or began captures of other code: then
/// every try of a thread's exit may have failed (a worker's own arming never fails them all).
fn check_counts(env: &Env, baseline: &Counts) {
    let deadline = Instant::now() + SETTLE;
    crate::timelines::count_unrecorded_on_exit();
    let unfollowed = crate::observers::take_unfollowed();
    let excused = env.world.faults_armed.load(Ordering::SeqCst)
        || env.world.capture_changes.load(Ordering::SeqCst) > 0;
    let stranded = if excused { unfollowed } else { 0 };
    UNFOLLOWED_EXCUSED.fetch_add(stranded, Ordering::Relaxed);
    loop {
        cuda_host::reclaim();
        let now = Counts::now(env.controls);
        let streams_kept = env.world.stream_destroy_failures.load(Ordering::SeqCst);
        let differences = differences(baseline, &now, stranded, streams_kept);
        if differences.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            violated(format!(
                "counts not back at their baseline: {}",
                differences.join(", ")
            ));
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Holds a warning excused over the run (see [`check_counts`]).
pub static UNFOLLOWED_EXCUSED: AtomicU64 = AtomicU64::new(0);

/// What differs from the baseline; `stranded` holds, each with a timeline's word, may stay, and
/// `streams_kept` streams whose destroy failed.
fn differences(baseline: &Counts, now: &Counts, stranded: u64, streams_kept: u64) -> Vec<String> {
    let mut differences = Vec::new();
    let mut compare = |what: &str, before: u64, after: u64| {
        if before != after {
            differences.push(format!("{what} {before} -> {after}"));
        }
    };
    compare("launches in flight", 0, now.in_flight as u64);
    compare("finished records not dropped", 0, now.finished as u64);
    // `now` as `base` where it exceeds it by at most `allowed`.
    let within_by = |base: u64, now: u64, allowed: u64| {
        if (base..=base + allowed).contains(&now) {
            base
        } else {
            now
        }
    };
    let within = |base: u64, now: u64| within_by(base, now, stranded);
    // Against the baseline: a hold an earlier sequence was excused stays for good.
    let held = baseline.held as u64;
    compare("released values held", held, within(held, now.held as u64));
    compare("futures waiting", 0, now.waiting as u64);
    compare(
        "timeline words",
        baseline.timeline_words,
        within(baseline.timeline_words, now.timeline_words),
    );
    let (before, after) = (&baseline.live, &now.live);
    compare(
        "streams",
        before.streams,
        within_by(before.streams, after.streams, streams_kept),
    );
    compare("graphs", before.graphs, after.graphs);
    compare("executables", before.graph_execs, after.graph_execs);
    compare("user objects", before.user_objects, after.user_objects);
    compare(
        "device allocations",
        before.device_allocations,
        after.device_allocations,
    );
    compare("host functions pending", 0, after.pending_host_functions);
    differences
}

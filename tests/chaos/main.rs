//! The chaos harness: seeded random sequences of cuda-host's operations over several threads on
//! the software driver, interleaved with driver failures and delays, sticky errors, captures
//! other code begins, panics everywhere user code runs and loggers that call cuda-host back;
//! after every step and at the end of each sequence, the documented promises are checked
//! (`docs/RELIABILITY.md`, "The chaos harness").
//!
//! - `plan`: the operations and the proptest strategies that make sequences of them;
//! - `world`: what a sequence made (contexts, streams and their progress words, gates, futures);
//! - `workers`: the threads steps run on, what only each may hold, the watchdog;
//! - `witness`: the values handed to cuda-host, which see their runs and drops;
//! - `execute`: each operation, with the answers it checks on the spot;
//! - `observers`: the logger and panic hook, whose behaviour steps change;
//! - `finish`: the end of a sequence and the invariants of "nothing left";
//! - `timelines`: the timeline family (its operations and checks);
//! - `copies`: host copies, raw launches and launches in a sync mode;
//! - `graphs`: the graph family (graphs, executables, their host nodes);
//! - `held_launches`: a capture begun beside launches the driver holds on many streams;
//! - `contended`: threads racing their looks at one stream's points.
//!
//! Environment: `CHAOS_SEED` replays one sequence (the seed a failure prints); `CHAOS_SECONDS`
//! (default 20) is the time budget, `CHAOS_STEPS` (default 48) the longest sequence,
//! `CHAOS_WORKERS` (default 3) the threads; `CHAOS_LOG=1` prints cuda-host's log records;
//! `CHAOS_PRINT_SEEDS=1` prints each sequence's seed before it runs, and each step as it starts
//! (a crash is then replayable and readable). `CHAOS_BASE_SEED` fixes the seed the budget's
//! sequences are drawn from, and `CHAOS_HUNT=1` stops at the first broken promise without
//! shrinking it (`cargo xtask mutations` uses both).

mod contended;
mod copies;
mod drop_errors;
mod execute;
mod finish;
mod graphs;
mod held_launches;
mod observers;
mod plan;
mod timelines;
mod witness;
mod workers;
mod world;

use execute::Env;
use plan::{Op, Step};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use workers::Workers;
use world::World;

/// Whether each step is printed as it starts (`CHAOS_PRINT_SEEDS`): a crash is then replayable
/// and readable.
static PRINT_STEPS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// How long one step may take before the watchdog stops the run.
const STEP_BOUND: Duration = Duration::from_secs(60);

struct Settings {
    seed: Option<u64>,
    seconds: f64,
    steps: usize,
    workers: usize,
    spawns_fail: bool,
    /// The seed the budget's sequences are drawn from, when fixed.
    base_seed: Option<u64>,
    /// Stop at the first broken promise, unshrunk, and skip the child process.
    hunt: bool,
    print_seeds: bool,
}

impl Settings {
    fn from_env() -> Settings {
        let number = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<f64>().ok());
        Settings {
            seed: std::env::var("CHAOS_SEED").ok().map(|seed| {
                seed.parse()
                    .unwrap_or_else(|_| panic!("CHAOS_SEED is a number, not {seed:?}"))
            }),
            seconds: number("CHAOS_SECONDS").unwrap_or(20.0),
            steps: number("CHAOS_STEPS").map_or(48, |steps| steps as usize),
            workers: number("CHAOS_WORKERS")
                .map_or(3, |workers| workers as usize)
                .max(1),
            spawns_fail: std::env::var_os("CHAOS_SPAWNS_FAIL").is_some(),
            base_seed: std::env::var("CHAOS_BASE_SEED").ok().map(|seed| {
                seed.parse()
                    .unwrap_or_else(|_| panic!("CHAOS_BASE_SEED is a number, not {seed:?}"))
            }),
            hunt: std::env::var_os("CHAOS_HUNT").is_some_and(|hunt| hunt == "1"),
            print_seeds: std::env::var_os("CHAOS_PRINT_SEEDS").is_some(),
        }
    }
}

/// What the runs did, for the figures printed at the end.
#[derive(Default)]
struct Figures {
    sequences: u64,
    steps: u64,
    by_op: BTreeMap<String, u64>,
    /// Steps that asked for a panic (in a run, a drop, the hook or the logger).
    panics: u64,
}

/// A sequence that broke a promise: the violations and its operation log.
struct Failure {
    violations: Vec<String>,
    log: Vec<String>,
}

fn main() {
    let settings = Settings::from_env();
    PRINT_STEPS.store(settings.print_seeds, Ordering::Relaxed);
    let driver = suite::test_driver();
    if !driver.is_software() {
        println!(
            "chaos: skipped: it injects faults through the software driver's controls \
             (CUDA_TEST_DRIVER=software runs it)"
        );
        return;
    }
    let base = suite::context();
    observers::install(&base);
    // The runner is a thread of the application too: what it lets go of may drain there.
    witness::become_worker(observers::RUNNER);
    let controls = suite::software::expect_controls();
    let started = Instant::now();
    let budget = Duration::from_secs_f64(settings.seconds);
    let base_seed = settings.seed.or(settings.base_seed).unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos() as u64)
    });
    println!(
        "chaos: seed {base_seed}, {} s, sequences of up to {} steps on {} workers{}",
        settings.seconds,
        settings.steps,
        settings.workers,
        if settings.spawns_fail {
            ", cuda-host's threads cannot start"
        } else {
            ""
        }
    );
    let mut figures = Figures::default();
    let mut case = 0u64;
    loop {
        let seed = match settings.seed {
            Some(seed) => seed,
            None => split_mix(base_seed.wrapping_add(case)),
        };
        if settings.print_seeds {
            // Before it runs: a sequence that crashes the process is named by the last line.
            println!("chaos: sequence {seed}");
        }
        let mut runner = TestRunner::new_with_rng(Config::default(), rng(seed));
        let mut tree = plan::sequence(settings.steps)
            .new_tree(&mut runner)
            .expect("a sequence");
        let steps = tree.current();
        if let Err(failure) = run_sequence(&settings, controls, &base, seed, &steps, &mut figures) {
            report(&settings, controls, &base, seed, &mut tree, failure);
        }
        case += 1;
        if settings.seed.is_some() || started.elapsed() > budget {
            break;
        }
    }
    println!(
        "chaos: {} sequences, {} steps in {:.1} s, 0 violations",
        figures.sequences,
        figures.steps,
        started.elapsed().as_secs_f64()
    );
    print_figures(&figures);
    if settings.seed.is_none() && !settings.spawns_fail && !settings.hunt {
        run_where_spawns_fail(&settings);
    }
}

/// The same harness in a child process where cuda-host's own threads cannot start (an
/// impossible `RUST_MIN_STACK`; the workers ask for their stack size themselves), for a sixth of
/// the budget: every operation that needs one is refused with a typed error, and nothing hangs.
fn run_where_spawns_fail(settings: &Settings) {
    let seconds = (settings.seconds / 6.0).max(1.0);
    println!(
        "chaos: {seconds:.0} s more in a child process where cuda-host's threads cannot start"
    );
    // The argument names the child for tools that trace children (valgrind skips it by it: its
    // threads fail to start there with another error).
    let status = std::process::Command::new(std::env::current_exe().expect("this executable"))
        .arg("--where-cuda-hosts-threads-cannot-start")
        .env("CHAOS_SPAWNS_FAIL", "1")
        .env("CHAOS_SECONDS", seconds.to_string())
        .env("RUST_MIN_STACK", "1125899906842624")
        .status()
        .expect("the child process starts");
    assert!(status.success(), "the child process failed: {status}");
}

fn print_figures(figures: &Figures) {
    let ops: Vec<String> = figures
        .by_op
        .iter()
        .map(|(op, count)| format!("{op} {count}"))
        .collect();
    println!("chaos: steps by operation: {}", ops.join(", "));
    println!("chaos: timelines: {}", timelines::figures());
    println!("chaos: copies and launch forms: {}", copies::figures());
    println!("chaos: graph steps that took effect: {}", graphs::figures());
    let faults: u64 = [
        "Fail",
        "FailNext",
        "DelayNext",
        "DropErrorKept",
        "ForeignBegin",
        "CaptureAtNextCall",
    ]
    .iter()
    .filter_map(|op| figures.by_op.get(*op))
    .sum();
    let panics = figures.panics;
    println!(
        "chaos: faults injected: {faults} (failed contexts, failed and delayed driver calls and \
         destroys, captures of other code); panics injected in runs, drops, hooks and loggers: {panics}; \
         drops that called reclaim back: {}; errors of failed destroys returned: {}",
        witness::RECLAIMS_IN_DROPS.load(std::sync::atomic::Ordering::Relaxed),
        execute::DROP_ERRORS.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// Shrinks a failing sequence as far as it keeps failing, prints it with its seed, and exits.
fn report(
    settings: &Settings,
    controls: &'static suite::software::Controls,
    base: &cuda_host::Context,
    seed: u64,
    tree: &mut impl ValueTree<Value = Vec<Step>>,
    mut failure: Failure,
) -> ! {
    if settings.hunt {
        println!("chaos: seed {seed} broke a promise (not shrunk: CHAOS_HUNT)");
        println!("chaos: violations:");
        for violation in &failure.violations {
            println!("  {violation}");
        }
        println!("chaos: operation log:");
        for line in &failure.log {
            println!("  {line}");
        }
        std::process::exit(1);
    }
    println!("chaos: seed {seed} broke a promise; shrinking");
    // Before shrinking, which replays smaller sequences: one of them may crash the process.
    for violation in &failure.violations {
        println!("chaos: broken: {violation}");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut scratch = Figures::default();
    let trace = std::env::var_os("CHAOS_SHRINK_TRACE").is_some();
    while Instant::now() < deadline && tree.simplify() {
        let candidate = tree.current();
        let outcome = run_sequence(settings, controls, base, seed, &candidate, &mut scratch);
        if trace {
            println!(
                "chaos: shrinking: {} steps: {}",
                candidate.len(),
                if outcome.is_err() { "fails" } else { "passes" }
            );
        }
        match outcome {
            Err(smaller) => failure = smaller,
            Ok(()) => {
                if !tree.complicate() {
                    break;
                }
            }
        }
    }
    println!("chaos: violations:");
    for violation in &failure.violations {
        println!("  {violation}");
    }
    println!("chaos: operation log of the smallest failing sequence found:");
    for line in &failure.log {
        println!("  {line}");
    }
    println!(
        "chaos: replay the whole sequence with CHAOS_SEED={seed} cargo test --test chaos \
         (CHAOS_STEPS={}, CHAOS_WORKERS={})",
        settings.steps, settings.workers
    );
    std::process::exit(1);
}

fn rng(seed: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    for (index, chunk) in bytes.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&split_mix(seed.wrapping_add(index as u64)).to_le_bytes());
    }
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

fn split_mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn op_name(op: &Op) -> String {
    let debug = format!("{op:?}");
    let mut words = debug.split([' ', '{', '(']);
    let name = words.next().unwrap_or("?").to_owned();
    // A family's operations by their own names.
    if let Op::Graph(_) | Op::Timeline(_) = op {
        return format!("{name}::{}", words.next().unwrap_or("?"));
    }
    name
}

/// Runs one sequence from a clean state, then ends it: `Err` with what it broke.
fn run_sequence(
    settings: &Settings,
    controls: &'static suite::software::Controls,
    base: &cuda_host::Context,
    seed: u64,
    steps: &[Step],
    figures: &mut Figures,
) -> Result<(), Failure> {
    witness::reset();
    observers::reset();
    let _ = witness::take_violations();
    let world = Arc::new(World::new(base));
    let env = Env {
        world: Arc::clone(&world),
        controls,
        spawns_fail: settings.spawns_fail,
        handed: Arc::new(Mutex::new(Vec::new())),
    };
    let mut workers = Workers::start(settings.workers, STEP_BOUND);
    // Everything before the first step is the baseline: what the process holds between
    // sequences (the base context and what it keeps).
    let baseline = finish::Counts::now(controls);
    let mut log = Vec::new();
    let outcome = run_steps(&env, &mut workers, steps, &mut log, figures);
    let stuck = match outcome {
        Ok(()) => finish::finish(&env, workers, &baseline, &mut log).err(),
        Err(stuck) => Some(stuck),
    };
    if let Some(stuck) = stuck {
        // A wedged thread cannot be given back: nothing after this can run.
        println!("chaos: a step never returned:\n{}", stuck.0);
        println!("chaos: the streams, as the driver answers a query of each now:");
        for stream in world.streams.lock().unwrap().iter() {
            println!(
                "  {}: complete {:?}, capturing {:?}, gates closed {:?}",
                stream.name,
                stream.stream.is_complete(),
                stream.stream.capture_state(),
                stream.gates.lock().unwrap()
            );
        }
        println!(
            "chaos: the driver's live objects: {:?}",
            controls.live_objects()
        );
        println!("chaos: operation log:");
        for line in &log {
            println!("  {line}");
        }
        println!("chaos: replay with CHAOS_SEED={seed} cargo test --test chaos");
        std::process::exit(1);
    }
    let violations: Vec<String> = witness::take_violations()
        .into_iter()
        .map(|violation| violation.0)
        .collect();
    figures.sequences += 1;
    if violations.is_empty() {
        Ok(())
    } else {
        Err(Failure { violations, log })
    }
}

fn run_steps(
    env: &Env,
    workers: &mut Workers,
    steps: &[Step],
    log: &mut Vec<String>,
    figures: &mut Figures,
) -> Result<(), workers::Stuck> {
    // The steps since the last that ran alone (what each is, its worker's id): a capture armed
    // at a driver call may have begun in any of them, and any may have broken another's.
    let mut together_at: Vec<(String, usize)> = Vec::new();
    let mut calls_before = breaking_calls(env.controls);
    // Streams the steps of the group used, taken early (below).
    let mut used_early = Vec::new();
    for (number, step) in steps.iter().enumerate() {
        let worker = usize::from(step.worker) % workers.len();
        figures.steps += 1;
        *figures.by_op.entry(op_name(&step.op)).or_default() += 1;
        figures.panics += u64::from(step.op.asks_for_a_panic());
        let what = format!(
            "{number}: worker {worker} (id {}){}: {:?}",
            workers.id(worker),
            if step.beside { ", beside the next" } else { "" },
            step.op
        );
        if PRINT_STEPS.load(Ordering::Relaxed) {
            println!("chaos: step {what}");
        }
        if matches!(step.op, Op::ForeignEnd { .. } | Op::Retire) && !together_at.is_empty() {
            // Steps started beside the ones before may still run, and break the capture this one
            // ends (a retiring worker ends its own): they finish, and their breaking calls are
            // noted, first.
            for (what, outcome) in workers.finish_pending()? {
                log.push(format!("{what} -> {outcome}"));
            }
            let used = env.world.take_used();
            note_breakers(env, &together_at, &used, calls_before);
            used_early.extend(used);
        }
        let outcome = match step.op {
            Op::Retire => {
                let env_job = env.clone();
                workers.run(
                    worker,
                    what.clone(),
                    Box::new(move |local| execute::end_local_captures(&env_job, local)),
                )?;
                workers.retire(worker)?;
                for (what, outcome) in workers.finish_pending()? {
                    log.push(format!("{what} -> {outcome}"));
                }
                "retired".to_owned()
            }
            _ => {
                let env_job = env.clone();
                let op = step.op.clone();
                let job: workers::Job =
                    Box::new(move |local| execute::execute(&env_job, local, &op));
                if step.beside {
                    workers.run_beside(worker, what.clone(), job);
                    "(started)".to_owned()
                } else {
                    let outcome = workers.run(worker, what.clone(), job)?;
                    for (what, outcome) in workers.finish_pending()? {
                        log.push(format!("{what} -> {outcome}"));
                    }
                    outcome
                }
            }
        };
        log.push(format!("{what} -> {outcome}"));
        together_at.push((what, workers.id(worker)));
        if step.beside {
            continue;
        }
        let mut used = env.world.take_used();
        used.append(&mut used_early);
        let broke = breaking_calls(env.controls) != calls_before;
        note_breakers(env, &together_at, &used, calls_before);
        end_triggered_capture(env, workers, worker, &used, broke, log)?;
        together_at.clear();
        calls_before = breaking_calls(env.controls);
        let violations = witness::take_violations();
        if !violations.is_empty() {
            // Put back for the runner, which ends the sequence on them.
            for violation in violations {
                witness::violated(violation.0);
            }
            return Ok(());
        }
    }
    // The last steps ran beside each other: done before their calls are counted.
    if !together_at.is_empty() {
        for (what, outcome) in workers.finish_pending()? {
            log.push(format!("{what} -> {outcome}"));
        }
        let mut used = env.world.take_used();
        used.append(&mut used_early);
        let broke = breaking_calls(env.controls) != calls_before;
        note_breakers(env, &together_at, &used, calls_before);
        let last = usize::from(steps[steps.len() - 1].worker) % workers.len();
        end_triggered_capture(env, workers, last, &used, broke, log)?;
    }
    Ok(())
}

/// The driver calls that documentedly break a capture other code began (an allocation or free
/// of memory, a context synchronize), counted process-wide.
pub fn breaking_calls(controls: &suite::software::Controls) -> u64 {
    [
        c"cuMemHostAlloc",
        c"cuMemFreeHost",
        c"cuMemAlloc",
        c"cuMemFree",
        c"cuMemAllocHost",
        c"cuMemAllocAsync",
        c"cuMemFreeAsync",
        c"cuMemAllocManaged",
        c"cuCtxSynchronize",
    ]
    .into_iter()
    // An entry the double does not have is never called.
    .map(|entry| controls.inner().call_count(entry).unwrap_or(0))
    .sum()
}

/// Notes the steps that ran together (each with its worker's id), which used `used`, as
/// breakers of the captures other code began that they may break, as documented: when a
/// breaking call was made while a global-mode one was open, or on the thread of a thread-local
/// one; or when they used the legacy stream of the context of a blocking stream's capture
/// ("Launches and captures": a capture begun between cuda-host's check and its enqueue there).
fn note_breakers(
    env: &Env,
    steps: &[(String, usize)],
    used: &[Arc<world::StreamEntry>],
    calls_before: u64,
) {
    use cuda_host_sys::CUstreamCaptureMode as Mode;
    for watch in env.world.foreign.lock().unwrap().iter() {
        let legacy = watch.stream.kind == world::StreamKind::Blocking
            && used.iter().any(|used| {
                used.kind == world::StreamKind::Legacy
                    && used.context.context.as_raw() == watch.stream.context.context.as_raw()
            });
        if legacy {
            let what = "a step used the legacy stream of its context".to_owned();
            watch.breakers.lock().unwrap().push(what);
        }
    }
    if breaking_calls(env.controls) == calls_before {
        return;
    }
    for watch in env.world.foreign.lock().unwrap().iter() {
        for (what, worker_id) in steps {
            let breaks = match watch.mode {
                Mode::CU_STREAM_CAPTURE_MODE_GLOBAL => true,
                Mode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL => watch.worker == *worker_id,
                _ => false,
            };
            if breaks {
                watch.breakers.lock().unwrap().push(what.clone());
            }
        }
    }
}

/// A capture armed at a driver call that began during the step: the worker that ran the step
/// (whose call began it) ends it, and it must end valid.
fn end_triggered_capture(
    env: &Env,
    workers: &mut Workers,
    worker: usize,
    used: &[Arc<world::StreamEntry>],
    broke: bool,
    log: &mut Vec<String>,
) -> Result<(), workers::Stuck> {
    let world = &env.world;
    let Some(stream) = world.armed.lock().unwrap().clone() else {
        return Ok(());
    };
    // An injected failure may answer this look too: then it tells nothing, and the next
    // step's look asks again.
    let (answer, status) = suite::capture::is_capturing(stream.stream.as_raw());
    if answer != cuda_host_sys::CUresult::CUDA_SUCCESS
        || status == cuda_host_sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
        || stream.captures.load(Ordering::SeqCst) != 0
    {
        // Not begun, or a worker's own capture (which began first: the armed one cannot).
        return Ok(());
    }
    *world.armed.lock().unwrap() = None;
    world.arm_capture(false);
    // A call that documentedly breaks a capture (an allocation, a free, a context synchronize)
    // may have broken it; and a blocking stream's capture begun between cuda-host's check of the
    // legacy stream and its enqueue there is broken by the enqueue ("Launches and captures").
    let documented = broke
        || stream.kind == world::StreamKind::Blocking
            && used.iter().any(|used| {
                used.kind == world::StreamKind::Legacy
                    && used.context.context.as_raw() == stream.context.context.as_raw()
            });
    let outcome = workers.run(
        worker,
        format!("end the capture of {} begun at a call", stream.name),
        Box::new(move |_| {
            let driver = stream.stream.context().driver();
            let mut graph = std::ptr::null_mut();
            // SAFETY: a live stream, capturing; a valid out-pointer.
            let ended = unsafe { driver.cuStreamEndCapture(stream.stream.as_raw(), &mut graph) };
            let kept = (!graph.is_null()).then(|| graphs::captured(&stream, graph));
            if ended == cuda_host_sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                && !documented
            {
                witness::violated(format!(
                    "a capture other code began at a driver call on {} was invalidated",
                    stream.name
                ));
            }
            format!(
                "the capture of {} begun at a call ended: {ended}; {}",
                stream.name,
                kept.as_deref().unwrap_or("no graph")
            )
        }),
    )?;
    log.push(format!("   {outcome}"));
    if outcome.contains("with launches") {
        // Launched at once, as the code that captured it would: its graph calls what the taken
        // launches' nodes held, whatever the step replaced after them.
        let env_job = env.clone();
        let op = Op::Graph(graphs::GraphOp::RunCaptured { stream: 0 });
        let launched = workers.run(
            worker,
            "launch the graph of the capture begun at a call".to_owned(),
            Box::new(move |local| execute::execute(&env_job, local, &op)),
        )?;
        log.push(format!("   {launched}"));
        // After the step's streams were taken: the ones this launch used would stay.
        drop(env.world.take_used());
    }
    Ok(())
}

//! What observing costs the same enqueue and run loop (features `nvtx` and `tracing`): inactive
//! (both compiled in, no profiler attached, no subscriber), with a `tracing` subscriber, and with
//! an NVTX injection library attached.
//!
//! Run: `cargo bench --features nvtx,tracing --bench observe` (add `-- --quick` for a short run).
//! The NVTX arm attaches the library `NVTX_INJECTION64_PATH` names when it is set (a profiler's),
//! else the suite's recorder (`tests/support/nvtx_recorder.c`, which formats and stores a line
//! per call: `NVTX_RECORDER_LIBRARY`, as the GPU bundle sets it, or where this build made it);
//! without either it is skipped.
//!
//! Each arm runs in a process of its own (cuda-host attaches a profiler once per process, and a
//! subscriber is global), one process per arm and round, the arms in turn, so that the machine's
//! drift falls on every arm alike. A round launches `launches` closures that bump a counter with
//! `host_launch` on one non-blocking stream, then synchronizes, and does the same with
//! `cuLaunchHostFunc` of a C-style function through the table (the floor of that process).
//! Enqueue cost is the time to enqueue all launches over their count, callbacks per second the
//! count over the time until the stream drained. Printed per arm: medians over the rounds, the
//! ratio to its process's floor, and the ratio to the inactive arm of the same round (paired: the
//! round's ratio to its floor over the inactive arm's), each a median with its 10th and 90th
//! percentiles over the rounds.
//!
//! Without the features (a build of cuda-host without them) nothing of observing is compiled:
//! that build's cost is `benches/host_functions.rs`'s "host_launch, closure" row, whose ratio to
//! its floor is comparable with the inactive arm's ratio to its own.

use cuda_host::sys::CUresult;
use cuda_host::{Stream, StreamFlags, host_launch};
use std::ffi::c_void;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

const ARM: &str = "--observe-arm";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Arm {
    Inactive,
    Tracing,
    Nvtx,
}

impl Arm {
    const ALL: [Arm; 3] = [Arm::Inactive, Arm::Tracing, Arm::Nvtx];

    fn name(self) -> &'static str {
        match self {
            Arm::Inactive => "inactive",
            Arm::Tracing => "tracing subscriber",
            Arm::Nvtx => "NVTX library attached",
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Arm::Inactive => "inactive",
            Arm::Tracing => "tracing",
            Arm::Nvtx => "nvtx",
        }
    }
}

/// One round of one arm, as its process measured it.
#[derive(Clone, Copy, Debug)]
struct Round {
    enqueue_ns: f64,
    callbacks_per_second: f64,
    floor_enqueue_ns: f64,
    floor_callbacks_per_second: f64,
}

fn main() {
    let arguments: Vec<String> = std::env::args().collect();
    if let Some(position) = arguments.iter().position(|argument| argument == ARM) {
        let arm = arguments[position + 1].clone();
        let launches = arguments[position + 2].parse().expect("a launch count");
        if let Err(reason) = measure_arm(&arm, launches) {
            eprintln!("observe: {reason}");
            std::process::exit(1);
        }
        return;
    }
    let quick = arguments.iter().any(|argument| argument == "--quick");
    let (launches, rounds) = if quick { (20_000, 5) } else { (100_000, 15) };
    if let Err(reason) = compare(launches, rounds) {
        eprintln!("observe: {reason}");
        std::process::exit(1);
    }
}

/// The injection library of the NVTX arm: a profiler's, else the recorder
/// (`NVTX_RECORDER_LIBRARY` at run time, as the GPU bundle sets it, else this build's).
fn injection_library() -> Option<String> {
    std::env::var("NVTX_INJECTION64_PATH").ok().or_else(|| {
        let recorder = std::env::var("NVTX_RECORDER_LIBRARY")
            .unwrap_or_else(|_| env!("NVTX_RECORDER_LIBRARY").to_owned());
        std::path::Path::new(&recorder).exists().then_some(recorder)
    })
}

fn compare(launches: u64, rounds: usize) -> Result<(), String> {
    let injection = injection_library();
    let arms: Vec<Arm> = Arm::ALL
        .into_iter()
        .filter(|arm| *arm != Arm::Nvtx || injection.is_some())
        .collect();
    println!(
        "{launches} host functions per round, {rounds} rounds, one process per arm and round; \
         NVTX library: {}",
        injection
            .as_deref()
            .unwrap_or("none (the NVTX arm is skipped)")
    );
    let mut measured: Vec<Vec<Round>> = vec![Vec::new(); arms.len()];
    for round in 0..=rounds {
        for (index, arm) in arms.iter().enumerate() {
            let outcome = run_arm(*arm, launches, injection.as_deref())?;
            // Round 0 warms up the machine (caches, frequency) and is not counted.
            if round > 0 {
                measured[index].push(outcome);
            }
        }
    }
    println!();
    println!(
        "{:<24} {:>10} {:>22} {:>22} {:>12} {:>22} {:>22}",
        "arm",
        "enqueue ns",
        "to floor (p10-p90)",
        "to inactive (p10-p90)",
        "callbacks/s",
        "to floor (p10-p90)",
        "to inactive (p10-p90)"
    );
    let inactive = &measured[0];
    for (arm, rounds) in arms.iter().zip(&measured) {
        let enqueue_to_floor: Vec<f64> = rounds
            .iter()
            .map(|r| r.enqueue_ns / r.floor_enqueue_ns)
            .collect();
        let rate_to_floor: Vec<f64> = rounds
            .iter()
            .map(|r| r.callbacks_per_second / r.floor_callbacks_per_second)
            .collect();
        let enqueue_to_inactive: Vec<f64> = rounds
            .iter()
            .zip(inactive)
            .map(|(r, i)| (r.enqueue_ns / r.floor_enqueue_ns) / (i.enqueue_ns / i.floor_enqueue_ns))
            .collect();
        let rate_to_inactive: Vec<f64> = rounds
            .iter()
            .zip(inactive)
            .map(|(r, i)| {
                (r.callbacks_per_second / r.floor_callbacks_per_second)
                    / (i.callbacks_per_second / i.floor_callbacks_per_second)
            })
            .collect();
        println!(
            "{:<24} {:>10.0} {:>22} {:>22} {:>12.0} {:>22} {:>22}",
            arm.name(),
            percentile(rounds.iter().map(|r| r.enqueue_ns).collect(), 0.5),
            spread(enqueue_to_floor),
            spread(enqueue_to_inactive),
            percentile(rounds.iter().map(|r| r.callbacks_per_second).collect(), 0.5),
            spread(rate_to_floor),
            spread(rate_to_inactive),
        );
    }
    println!(
        "(enqueue ns and callbacks/s: medians over the rounds; ratios: medians over the rounds, \
         with their 10th and 90th percentiles; the floor is cuLaunchHostFunc through the table in \
         the same process)"
    );
    Ok(())
}

fn percentile(mut values: Vec<f64>, at: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let index = ((values.len() - 1) as f64 * at).round() as usize;
    values[index]
}

fn spread(values: Vec<f64>) -> String {
    format!(
        "{:.3} ({:.3}-{:.3})",
        percentile(values.clone(), 0.5),
        percentile(values.clone(), 0.1),
        percentile(values, 0.9)
    )
}

/// Runs one round of `arm` in a process of its own.
fn run_arm(arm: Arm, launches: u64, injection: Option<&str>) -> Result<Round, String> {
    let executable = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut command = Command::new(executable);
    command.args([ARM, arm.flag(), &launches.to_string()]);
    command.env_remove("NVTX_INJECTION64_PATH");
    if let (Arm::Nvtx, Some(library)) = (arm, injection) {
        command.env("NVTX_INJECTION64_PATH", library);
    }
    let output = command.output().map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "the {} arm failed ({}): {}{}",
            arm.name(),
            output.status,
            stdout,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let values: Vec<f64> = stdout
        .lines()
        .last()
        .unwrap_or("")
        .split_whitespace()
        .map(|value| value.parse().map_err(|e| format!("{value}: {e}")))
        .collect::<Result<_, _>>()?;
    let [
        enqueue_ns,
        callbacks_per_second,
        floor_enqueue_ns,
        floor_callbacks_per_second,
    ] = values[..]
    else {
        return Err(format!("the {} arm printed {stdout}", arm.name()));
    };
    Ok(Round {
        enqueue_ns,
        callbacks_per_second,
        floor_enqueue_ns,
        floor_callbacks_per_second,
    })
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

unsafe extern "C" fn count_call(_data: *mut c_void) {
    COUNTER.fetch_add(1, Ordering::Relaxed);
}

/// Counts the spans it is asked to make: the least a subscriber does.
struct CountingSubscriber;

static SPANS: AtomicU64 = AtomicU64::new(0);

impl tracing::Subscriber for CountingSubscriber {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.target().starts_with("cuda_host")
    }

    fn new_span(&self, _attributes: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(SPANS.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn record(&self, _span: &tracing::span::Id, _values: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _span: &tracing::span::Id, _follows: &tracing::span::Id) {}

    fn event(&self, _event: &tracing::Event<'_>) {}

    fn enter(&self, _span: &tracing::span::Id) {}

    fn exit(&self, _span: &tracing::span::Id) {}
}

/// Measures one round of the arm in this process; prints enqueue ns, callbacks/s, and the same
/// for the floor.
fn measure_arm(arm: &str, launches: u64) -> Result<(), String> {
    if arm == "tracing" {
        tracing::subscriber::set_global_default(CountingSubscriber).map_err(|e| e.to_string())?;
    }
    let driver = cuda_host::driver().map_err(|e| e.to_string())?;
    let context = cuda_host::Device::get(driver, 0)
        .and_then(|device| device.primary_context())
        .map_err(|e| e.to_string())?;
    let stream = Stream::new(&context, StreamFlags::NonBlocking).map_err(|e| e.to_string())?;
    let launch_closures = |count: u64| {
        for _ in 0..count {
            host_launch(&stream, || {
                COUNTER.fetch_add(1, Ordering::Relaxed);
            })
            .expect("launch");
        }
    };
    let launch_floor = |count: u64| {
        for _ in 0..count {
            // SAFETY: a live stream; the function only bumps a static counter.
            let result = unsafe {
                driver.cuLaunchHostFunc(stream.as_raw(), Some(count_call), std::ptr::null_mut())
            };
            assert_eq!(result, CUresult::CUDA_SUCCESS);
        }
    };
    let timed = |enqueue: &dyn Fn(u64), count: u64| {
        let before = COUNTER.load(Ordering::SeqCst);
        let start = Instant::now();
        enqueue(count);
        let enqueued = start.elapsed();
        stream.synchronize().expect("synchronize");
        let drained = start.elapsed();
        cuda_host::reclaim();
        assert_eq!(
            COUNTER.load(Ordering::SeqCst) - before,
            count,
            "each ran once"
        );
        (
            enqueued.as_secs_f64() * 1e9 / count as f64,
            count as f64 / drained.as_secs_f64(),
        )
    };
    // Warm: slots, the driver's queues, the profiler's attachment (the first launch).
    timed(&launch_closures, launches / 10);
    timed(&launch_floor, launches / 10);
    let (enqueue_ns, rate) = timed(&launch_closures, launches);
    let (floor_ns, floor_rate) = timed(&launch_floor, launches);
    check_attached(arm, launches)?;
    println!("{enqueue_ns} {rate} {floor_ns} {floor_rate}");
    Ok(())
}

/// That the arm's profiler or subscriber saw the runs, where it can tell.
fn check_attached(arm: &str, launches: u64) -> Result<(), String> {
    if arm == "tracing" && SPANS.load(Ordering::Relaxed) < launches {
        return Err("the subscriber saw fewer spans than host functions ran".to_owned());
    }
    if arm == "nvtx"
        && let Some(path) = std::env::var_os("NVTX_INJECTION64_PATH")
    {
        // SAFETY: the library cuda-host opened already; opening it again runs nothing.
        let library = unsafe { libloading::Library::new(&path) }.map_err(|e| e.to_string())?;
        type Events = unsafe extern "C" fn(*mut std::ffi::c_char, usize) -> usize;
        // The suite's recorder tells how much it recorded; a profiler's library does not.
        // SAFETY: the recorder's function has this type.
        if let Ok(events) = unsafe { library.get::<Events>(b"nvtx_recorder_events\0") } {
            // SAFETY: no buffer: only the length is asked for.
            if unsafe { events(std::ptr::null_mut(), 0) } == 0 {
                return Err("the NVTX recorder recorded nothing".to_owned());
            }
        }
    }
    Ok(())
}

//! Parallel lanes: four streams, each with a host function of 100 µs (it spins that long) after
//! a kernel, enqueued in turn from one thread, 1,000 times each (`--quick`: 200): the time per
//! iteration (one function on each stream) through the driver, whose one host-function thread
//! runs the four streams' functions one after the other, on the polled engine with a pool of one
//! server thread (the same), and on a pool of four (one server per stream: the functions run at
//! the same time). What one iteration cannot go below is one function's 100 µs; the target for
//! the parallel engine is 130 µs. Rounds alternate the order of the three; medians over them, and
//! the CPU time the engine's threads used. Run alone: `cargo bench --bench stream_points --
//! --lanes`. Without kernels (the software driver) the streams carry the host functions alone.

use crate::Bench;
use cuda_host::{
    Stream, StreamFlags, host_launch, metrics, options::HostEngine, polled::polled_engine_threads,
    polled::set_polled_engine_threads,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const STREAMS: usize = 4;
const HOST_FUNCTION: Duration = Duration::from_micros(100);
/// The parallel engine's pool: one server per stream.
const PARALLEL: usize = STREAMS;

static RUNS: AtomicU64 = AtomicU64::new(0);

/// The host function: spins [`HOST_FUNCTION`], as work on the host would take it.
fn host_work() {
    let start = Instant::now();
    while start.elapsed() < HOST_FUNCTION {
        std::hint::spin_loop();
    }
    RUNS.fetch_add(1, Ordering::Relaxed);
}

/// Seconds per iteration of kernel + host function on each of `streams` in turn.
fn per_iteration(bench: &Bench<'_>, streams: &[Stream], iterations: usize) -> f64 {
    let start = Instant::now();
    for _ in 0..iterations {
        for stream in streams {
            if let Some(kernels) = &bench.kernels {
                // SAFETY: `empty_kernel` takes no parameters.
                unsafe { kernels.launch(kernels.empty_kernel, 1, 1, stream.as_raw(), &mut []) }
                    .expect("the kernel launches");
            }
            host_launch(stream, host_work).expect("launched");
        }
    }
    for stream in streams {
        stream.synchronize().expect("synchronize");
    }
    start.elapsed().as_secs_f64() / iterations as f64
}

/// The CPU time the engine's threads used so far.
fn engine_cpu_seconds() -> f64 {
    suite::thread_cpu_time("cuda-host-poll").map_or(0.0, |time| time.as_secs_f64())
}

/// Waits (bounded) until the engine served no lane, so that the next run hands its streams to
/// servers afresh, under the pool's new size.
fn until_no_lane_is_served() {
    let start = Instant::now();
    while metrics().polled_engine().serving != 0 && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

pub fn run(bench: &Bench<'_>, quick: bool) -> Result<(), String> {
    let (iterations, rounds) = if quick { (200, 2) } else { (1_000, 3) };
    let default_threads = polled_engine_threads();
    let context = bench.stream.context();
    let owned = (0..STREAMS)
        .map(|_| Stream::new(context, StreamFlags::NonBlocking))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let polled: Vec<Stream> = owned
        .iter()
        // SAFETY: the owned streams outlive these values, dropped first below.
        .map(|stream| unsafe { Stream::borrow_raw(context, stream.as_raw()) })
        .map(|stream| stream.with_host_engine(HostEngine::Polled))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    // A short warm-up of each, untimed.
    per_iteration(bench, &owned, iterations / 10);
    per_iteration(bench, &polled, iterations / 10);
    // Per engine: the times per iteration of the rounds, and the engine's CPU seconds over them.
    let engines: [(&str, Option<usize>); 3] = [
        ("driver", None),
        ("polled engine, 1 thread", Some(1)),
        ("polled engine, 4 threads", Some(PARALLEL)),
    ];
    let mut times = vec![Vec::new(); engines.len()];
    let mut cpu = vec![0.0; engines.len()];
    let mut busy = vec![0.0; engines.len()];
    for round in 0..rounds {
        for offset in 0..engines.len() {
            let index = (round + offset) % engines.len();
            let streams = match engines[index].1 {
                None => &owned,
                Some(threads) => {
                    set_polled_engine_threads(threads).map_err(|e| e.to_string())?;
                    until_no_lane_is_served();
                    &polled
                }
            };
            let cpu_before = engine_cpu_seconds();
            let time = per_iteration(bench, streams, iterations);
            cpu[index] += engine_cpu_seconds() - cpu_before;
            busy[index] += time * iterations as f64;
            times[index].push(time);
        }
    }
    set_polled_engine_threads(default_threads).map_err(|e| e.to_string())?;
    println!();
    println!(
        "parallel lanes: {STREAMS} streams, {}a host function spinning {} µs on each in turn \
         from one thread, {iterations} times each (medians over {rounds} rounds; the default \
         pool here: {default_threads} of {} cores):",
        if bench.kernels.is_some() {
            "kernel + "
        } else {
            ""
        },
        HOST_FUNCTION.as_micros(),
        std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
    );
    let medians: Vec<f64> = times.iter_mut().map(|times| super::median(times)).collect();
    for (index, (name, threads)) in engines.iter().enumerate() {
        let cores = match threads {
            None => String::new(),
            Some(_) => format!(
                ", the engine's threads used {:.1} cores",
                cpu[index] / busy[index]
            ),
        };
        println!(
            "  {name:<26} {:>8.1} µs per iteration, {:.2}x one function's time{cores}",
            medians[index] * 1e6,
            medians[index] / HOST_FUNCTION.as_secs_f64()
        );
    }
    let (driver, one, parallel) = (medians[0], medians[1], medians[2]);
    let verdict = match (&bench.kernels, parallel * 1e6 <= 130.0) {
        (None, _) => "no kernels ran: not the GPU's figure",
        (Some(_), true) => "met",
        (Some(_), false) => "missed",
    };
    println!(
        "  4 threads / driver: {:.2}x the time; 4 threads / 1 thread: {:.2}x; target <= 130 µs \
         per iteration: {verdict}",
        parallel / driver,
        parallel / one
    );
    let expected = (STREAMS * (iterations / 10) * 2 + STREAMS * iterations * rounds * 3) as u64;
    let ran = RUNS.load(Ordering::Relaxed);
    if ran != expected {
        return Err(format!("{ran} host functions ran of {expected}"));
    }
    drop(polled);
    Ok(())
}

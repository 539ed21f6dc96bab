//! What a stream point costs a stream, beside a host function, in one run.
//!
//! Run: `cargo bench --bench stream_points` on a machine with an NVIDIA GPU (add `-- --quick`
//! for a short run). On one non-blocking stream, each form enqueues 20,000 iterations of:
//! 1. an empty kernel + an empty kernel (the baseline);
//! 2. kernel + a bare `cuStreamWriteValue64`, a bare `cuStreamWriteValue32` (to pinned,
//!    device-mapped memory) or a bare `cuEventRecord` + kernel: what a point can be made of,
//!    with nothing around it; and a bare `cuEventRecord` (of a ring of 64 events) while a second
//!    thread queries the ring's events, nonstop, every 5 µs (the watcher's pace while futures
//!    wait) and every 20 µs: what looking from another thread costs, and how it falls with the
//!    pace; and a
//!    32-bit write with a wait on a word that already satisfies it, as two calls and as one
//!    `cuStreamBatchMemOp`: what a polled host-function engine would enqueue;
//! 3. kernel + a release point (`release_in_stream_order` of a small boxed value) + kernel;
//! 4. kernel + a future point (`stream_point`, polled once so that the watcher waits on it) +
//!    kernel;
//! 5. kernel + a host function (`host_launch` of a closure bumping a counter) + kernel, through
//!    the driver and through the polled engine (`HostEngine::Polled`);
//!
//! and times them from the first enqueue until the stream drained: the time per iteration is
//! what the stream takes, the enqueuing thread's share included (as the driver's primitives
//! were measured); the time until the last enqueue returned is printed beside it. Rounds
//! measure every form once, in an order that rotates; a form's cost is the median over the rounds
//! of its time per iteration minus the baseline's of the same round. On the software driver,
//! which runs no kernels, the forms run without them (`--quick` only makes sense there): what is
//! left is each point's own cost on the enqueuing thread.
//!
//! Then each X alone, 500 in a row on an idle stream, timed until the last enqueue returned:
//! what X costs the enqueuing thread, which is the stream's cost too while enqueuing is what
//! holds the stream back; the same for parts of a point; and single driver calls.
//!
//! Then how soon a point is seen passed (`stream_points/wake.rs`): the wake latency of futures
//! with 1, 100 and 10,000 pending and from a parked watcher, and the drop latency of released
//! values, beside a thread spinning on `cuEventQuery` and one in `cuEventSynchronize` of a
//! blocking-sync event recorded at the same place, with the watcher's CPU time; the same after
//! short and long waits and from parked threads for a future, a host function on the polled
//! engine and one through the driver, with what the watcher and the engine use of a core while
//! they wait long (`-- --idle` runs that alone); and (`stream_points/rates.rs`) registrations a second from 1 and 8 threads, and what a point costs
//! with 100,000 in flight on one stream; and (`stream_points/lanes.rs`) four streams with a 100 µs
//! host function each, through the driver and on the polled engine with one and four server
//! threads (`-- --lanes` runs that alone, in a few seconds); and (`stream_points/graphs.rs`) a
//! graph of kernel + host node + kernel replayed, with the driver's host node and the polled
//! engine's, against the kernels alone and a kernel bumping a counter the host polls (`-- --graphs`
//! runs that alone). The whole run takes under two minutes on an H200.

use cuda_host::sys::{
    CUdeviceptr, CUstreamBatchMemOpParams, CUstreamBatchMemOpType, CUstreamWaitValue_flags, Driver,
};
use cuda_host::{
    Device, Event, EventFlags, Stream, StreamFlags, host_launch, options::HostEngine,
    points::StreamPoint, points::release_in_stream_order, points::stream_point,
};
use std::ffi::c_void;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context as TaskContext, Waker};
use std::time::Instant;

#[path = "stream_points/graphs.rs"]
mod graphs;
#[allow(dead_code)] // the bench launches only `empty_kernel` and `spin_ns`
#[path = "../kernels/load.rs"]
mod kernels;
#[path = "stream_points/lanes.rs"]
mod lanes;
#[path = "stream_points/rates.rs"]
mod rates;
#[path = "stream_points/wake.rs"]
mod wake;

use kernels::Kernels;

fn main() {
    let quick = std::env::args().any(|argument| argument == "--quick");
    let lanes_alone = std::env::args().any(|argument| argument == "--lanes");
    let graphs_alone = std::env::args().any(|argument| argument == "--graphs");
    let idle_alone = std::env::args().any(|argument| argument == "--idle");
    if let Err(reason) = run(quick, lanes_alone, graphs_alone, idle_alone) {
        eprintln!("stream_points: {reason}");
        std::process::exit(1);
    }
}

struct Bench<'driver> {
    driver: &'driver Driver,
    /// The stream below as another value, whose host functions the polled engine runs; dropped
    /// first, as it borrows the handle.
    polled: Stream,
    stream: Stream,
    /// The kernels, when the driver runs kernels.
    kernels: Option<Kernels<'driver>>,
    /// Whether the forms launch their kernels (off to time what X alone costs the host).
    launch_kernels: bool,
    points: Vec<StreamPoint>,
    /// A word of pinned, device-mapped host memory, as the device addresses it: what a bare
    /// stream write writes.
    word: CUdeviceptr,
    /// A second word of the same memory, which stays 0: a wait for at least 0 on it is always
    /// satisfied, as a polled engine's wait for an acknowledgement that came.
    acknowledged: CUdeviceptr,
    writes: u64,
    event: Event,
    /// Events recorded in turn, which a second thread queries while a form asks for it.
    ring: Vec<Event>,
    recorded: usize,
}

/// How the querying thread queries the ring's events now: `QUERY_OFF`, 0 for nonstop, else the
/// microseconds between two queries.
static QUERY_PACE: AtomicU64 = AtomicU64::new(QUERY_OFF);
const QUERY_OFF: u64 = u64::MAX;
static QUERIES: AtomicU64 = AtomicU64::new(0);

static HOST_FUNCTION_RUNS: AtomicU64 = AtomicU64::new(0);

impl Bench<'_> {
    fn kernel(&self) {
        if !self.launch_kernels {
            return;
        }
        if let Some(kernels) = &self.kernels {
            // SAFETY: `empty_kernel` takes no parameters.
            unsafe { kernels.launch(kernels.empty_kernel, 1, 1, self.stream.as_raw(), &mut []) }
                .expect("the kernel launches");
        }
    }
}

struct Form {
    name: &'static str,
    iteration: fn(&mut Bench<'_>),
    /// Whether a second thread queries the ring's events meanwhile, and how often.
    querying: Querying,
}

/// How a second thread queries events while a form runs.
#[derive(Clone, Copy)]
enum Querying {
    No,
    /// The ring's events in turn, nonstop.
    Nonstop,
    /// One event every so many microseconds, spinning between (yielding the core), as the
    /// watcher of futures looks while they wait: what its pace costs the stream.
    Every(u64),
}

impl Querying {
    fn pace(self) -> u64 {
        match self {
            Querying::No => QUERY_OFF,
            Querying::Nonstop => 0,
            Querying::Every(micros) => micros,
        }
    }
}

const FORMS: [Form; 13] = [
    Form {
        name: "kernel + kernel",
        iteration: |bench| {
            bench.kernel();
            bench.kernel();
        },
        querying: Querying::No,
    },
    Form {
        name: "kernel + bare 64-bit write + kernel",
        iteration: |bench| {
            bench.kernel();
            bench.writes += 1;
            // SAFETY: the word is pinned, device-mapped and 8-byte aligned, and outlives the
            // stream's work (the bench synchronizes before freeing it).
            let result = unsafe {
                bench.driver.cuStreamWriteValue64_v2(
                    bench.stream.as_raw(),
                    bench.word,
                    bench.writes,
                    0,
                )
            };
            bench
                .driver
                .check("cuStreamWriteValue64_v2", result)
                .expect("the write is enqueued");
            bench.kernel();
        },
        querying: Querying::No,
    },
    Form {
        name: "kernel + bare 32-bit write + kernel",
        iteration: |bench| {
            bench.kernel();
            bench.writes += 1;
            // SAFETY: as for the 64-bit write; the low half of the same word.
            let result = unsafe {
                bench.driver.cuStreamWriteValue32_v2(
                    bench.stream.as_raw(),
                    bench.word,
                    bench.writes as u32,
                    0,
                )
            };
            bench
                .driver
                .check("cuStreamWriteValue32_v2", result)
                .expect("the write is enqueued");
            bench.kernel();
        },
        querying: Querying::No,
    },
    Form {
        name: "kernel + write + satisfied wait, two calls + kernel",
        iteration: |bench| {
            bench.kernel();
            bench.writes += 1;
            // SAFETY: as for the 32-bit write; the acknowledgement word is the same memory's.
            let (written, waited) = unsafe {
                (
                    bench.driver.cuStreamWriteValue32_v2(
                        bench.stream.as_raw(),
                        bench.word,
                        bench.writes as u32,
                        0,
                    ),
                    bench.driver.cuStreamWaitValue32_v2(
                        bench.stream.as_raw(),
                        bench.acknowledged,
                        0,
                        CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ.0,
                    ),
                )
            };
            let driver = bench.driver;
            driver
                .check("cuStreamWriteValue32_v2", written)
                .expect("written");
            driver
                .check("cuStreamWaitValue32_v2", waited)
                .expect("waited");
            bench.kernel();
        },
        querying: Querying::No,
    },
    Form {
        name: "kernel + write + satisfied wait, one batch + kernel",
        iteration: |bench| {
            bench.kernel();
            bench.writes += 1;
            let mut ops = [CUstreamBatchMemOpParams::default(); 2];
            ops[0].writeValue.operation = CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_32;
            ops[0].writeValue.address = bench.word;
            ops[0].writeValue.__bindgen_anon_1.value = bench.writes as u32;
            ops[1].waitValue.operation = CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WAIT_VALUE_32;
            ops[1].waitValue.address = bench.acknowledged;
            ops[1].waitValue.flags = CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ.0;
            // SAFETY: as for the two calls; two operations.
            let result = unsafe {
                bench
                    .driver
                    .cuStreamBatchMemOp_v2(bench.stream.as_raw(), 2, ops.as_mut_ptr(), 0)
            };
            let driver = bench.driver;
            driver
                .check("cuStreamBatchMemOp_v2", result)
                .expect("enqueued");
            bench.kernel();
        },
        querying: Querying::No,
    },
    Form {
        name: "kernel + bare event record + kernel",
        iteration: |bench| {
            bench.kernel();
            bench.event.record(&bench.stream).expect("recorded");
            bench.kernel();
        },
        querying: Querying::No,
    },
    Form {
        name: "kernel + event record, queried elsewhere + kernel",
        iteration: record_in_ring,
        querying: Querying::Nonstop,
    },
    Form {
        name: "kernel + event record, queried every 5 µs + kernel",
        iteration: record_in_ring,
        querying: Querying::Every(5),
    },
    Form {
        name: "kernel + event record, queried every 20 µs + kernel",
        iteration: record_in_ring,
        querying: Querying::Every(20),
    },
    Form {
        name: "kernel + release point + kernel",
        iteration: |bench| {
            bench.kernel();
            release_in_stream_order(&bench.stream, Box::new([0u8; 64]))
                .map_err(|refused| refused.error)
                .expect("released");
            bench.kernel();
        },
        querying: Querying::No,
    },
    Form {
        name: "kernel + future point + kernel",
        iteration: |bench| {
            bench.kernel();
            let mut point = stream_point(&bench.stream).expect("a point");
            // Polled once, so that the watcher waits on it as an executor's task would.
            let _ = Pin::new(&mut point).poll(&mut TaskContext::from_waker(Waker::noop()));
            bench.points.push(point);
            bench.kernel();
        },
        querying: Querying::No,
    },
    Form {
        name: "kernel + host function + kernel",
        iteration: |bench| {
            bench.kernel();
            host_launch(&bench.stream, || {
                HOST_FUNCTION_RUNS.fetch_add(1, Ordering::Relaxed);
            })
            .expect("launched");
            bench.kernel();
        },
        querying: Querying::No,
    },
    Form {
        name: "kernel + host function, polled engine + kernel",
        iteration: |bench| {
            bench.kernel();
            host_launch(&bench.polled, || {
                HOST_FUNCTION_RUNS.fetch_add(1, Ordering::Relaxed);
            })
            .expect("launched");
            bench.kernel();
        },
        querying: Querying::No,
    },
];

/// Kernel + the record of the ring's next event + kernel.
fn record_in_ring(bench: &mut Bench<'_>) {
    bench.kernel();
    let event = &bench.ring[bench.recorded % bench.ring.len()];
    event.record(&bench.stream).expect("recorded");
    bench.recorded += 1;
    bench.kernel();
}

/// What one iteration of a form took: until the enqueuing thread was done, and until the stream
/// drained.
#[derive(Clone, Copy)]
struct Timing {
    enqueue: f64,
    total: f64,
}

/// Seconds per iteration of `form`, from the first enqueue until the last one returned and until
/// the stream drained.
fn measure(bench: &mut Bench<'_>, form: &Form, iterations: usize) -> Timing {
    QUERY_PACE.store(form.querying.pace(), Ordering::SeqCst);
    let start = Instant::now();
    for _ in 0..iterations {
        (form.iteration)(bench);
    }
    let enqueued = start.elapsed().as_secs_f64();
    bench.stream.synchronize().expect("synchronize");
    let total = start.elapsed().as_secs_f64();
    QUERY_PACE.store(QUERY_OFF, Ordering::SeqCst);
    let unfinished = bench
        .points
        .drain(..)
        .filter(|point| point.is_passed() != Ok(true))
        .count();
    assert_eq!(
        unfinished, 0,
        "{}: points not passed after the drain",
        form.name
    );
    Timing {
        enqueue: enqueued / iterations as f64,
        total: total / iterations as f64,
    }
}

/// Kernel + host function on each of four streams in turn, from one thread, `iterations` times:
/// the driver's host-function thread against the polled engine (its default pool), in
/// alternating rounds, with the CPU time the engine's threads used.
fn four_streams(bench: &Bench<'_>, iterations: usize, rounds: usize) -> Result<(), String> {
    let Some(kernels) = &bench.kernels else {
        return Ok(());
    };
    let context = bench.stream.context();
    let owned = (0..4)
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
    let run = |streams: &[Stream]| {
        let start = Instant::now();
        for _ in 0..iterations {
            for stream in streams {
                // SAFETY: `empty_kernel` takes no parameters.
                unsafe { kernels.launch(kernels.empty_kernel, 1, 1, stream.as_raw(), &mut []) }
                    .expect("the kernel launches");
                host_launch(stream, || {
                    HOST_FUNCTION_RUNS.fetch_add(1, Ordering::Relaxed);
                })
                .expect("launched");
            }
        }
        for stream in streams {
            stream.synchronize().expect("synchronize");
        }
        start.elapsed().as_secs_f64()
    };
    // The CPU time the engine's threads used so far (0 before they started).
    let engine_cpu_seconds =
        || suite::thread_cpu_time("cuda-host-poll").map_or(0.0, |time| time.as_secs_f64());
    let (mut driver_times, mut polled_times, mut engine_cpu) = (Vec::new(), Vec::new(), 0.0);
    for round in 0..rounds {
        for polled_first in [round % 2 == 0, round % 2 != 0] {
            if polled_first {
                let cpu = engine_cpu_seconds();
                polled_times.push(run(&polled));
                engine_cpu += engine_cpu_seconds() - cpu;
            } else {
                driver_times.push(run(&owned));
            }
        }
    }
    let (driver_time, polled_time) = (median(&mut driver_times), median(&mut polled_times));
    let functions = (4 * iterations) as f64;
    println!();
    println!(
        "four streams, kernel + host function on each in turn from one thread, {iterations} \
         times each (medians over {rounds} rounds):"
    );
    for (name, time) in [("driver", driver_time), ("polled engine", polled_time)] {
        println!(
            "  {name:<14} {:>8.2} µs per kernel + host function, {:>9.0} host functions/s",
            time * 1e6 / functions,
            functions / time
        );
    }
    println!(
        "  polled engine / driver: {:.2}x the host functions per second; its threads used {:.0}% \
         of a core while serving",
        driver_time / polled_time,
        100.0 * engine_cpu / polled_times.iter().sum::<f64>()
    );
    drop(polled);
    Ok(())
}

/// Prints the polled engine's stall between kernels against the bare batch it is made of (a write
/// and a satisfied wait, one `cuStreamBatchMemOp`), each the median over the rounds of its time
/// over kernel + kernel in the same round: what the engine's server adds to the stream's wait for
/// its acknowledgement. (A ratio per round would divide by the batch's stall, under a
/// microsecond, which one round's noise can exceed.)
fn engine_against_batch(bench: &Bench<'_>, over_baseline: &[Vec<f64>]) {
    let median_of = |name| median_over_baseline(over_baseline, name);
    let engine = median_of("kernel + host function, polled engine + kernel");
    let batch = median_of("kernel + write + satisfied wait, one batch + kernel");
    let ratio = engine / batch;
    let verdict = match (&bench.kernels, ratio <= 1.3) {
        (None, _) => "no kernels ran: the enqueuing thread's cost, not the stream's",
        (Some(_), true) => "met",
        (Some(_), false) => "missed",
    };
    println!(
        "polled engine's stall / the bare batch's: {engine:.3} / {batch:.3} µs over kernel + \
         kernel, {ratio:.2}x (target <= 1.3: {verdict})"
    );
}

/// Prints what another thread's queries add to an event record between kernels, by their pace:
/// what the watcher's looks can cost a future point.
fn looks_against_record(over_baseline: &[Vec<f64>]) {
    let median_of = |name| median_over_baseline(over_baseline, name);
    let bare = median_of("kernel + bare event record + kernel");
    let paced = [
        (
            "nonstop",
            "kernel + event record, queried elsewhere + kernel",
        ),
        (
            "every 5 µs",
            "kernel + event record, queried every 5 µs + kernel",
        ),
        (
            "every 20 µs",
            "kernel + event record, queried every 20 µs + kernel",
        ),
    ]
    .map(|(pace, name)| format!("{pace} +{:.3}", median_of(name) - bare));
    println!(
        "an event record queried by another thread, µs over the bare record ({bare:.3} over \
         kernel + kernel): {}",
        paced.join(", ")
    );
}

/// The median over the rounds of the form named `name`'s time over kernel + kernel, in µs.
fn median_over_baseline(over_baseline: &[Vec<f64>], name: &str) -> f64 {
    let index = FORMS
        .iter()
        .position(|form| form.name == name)
        .expect("a form of the table");
    median(&mut over_baseline[index].clone()) * 1e6
}

/// Prints what one call of `call` costs the calling thread, over 200,000 calls.
fn time_calls<R>(name: &str, mut call: impl FnMut() -> R) {
    const CALLS: u32 = 200_000;
    let start = Instant::now();
    for _ in 0..CALLS {
        std::hint::black_box(call());
    }
    let nanoseconds = start.elapsed().as_secs_f64() * 1e9 / f64::from(CALLS);
    println!("{name:<50} {nanoseconds:>8.1} ns a call");
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn run(quick: bool, lanes_alone: bool, graphs_alone: bool, idle_alone: bool) -> Result<(), String> {
    let (iterations, rounds) = if quick { (2_000, 3) } else { (20_000, 7) };
    let driver = cuda_host::driver().map_err(|e| format!("no CUDA driver: {e}"))?;
    let device = Device::get(driver, 0).map_err(|e| format!("no CUDA device: {e}"))?;
    let context = device.primary_context().map_err(|e| e.to_string())?;
    let stream = Stream::new(&context, StreamFlags::NonBlocking).map_err(|e| e.to_string())?;
    // SAFETY: `stream` lives as long as the bench, and `polled` is dropped before it.
    let polled = unsafe { Stream::borrow_raw(&context, stream.as_raw()) }
        .with_host_engine(HostEngine::Polled)
        .map_err(|e| e.to_string())?;
    context.bind_to_thread().map_err(|e| e.to_string())?;
    // Before the module loads: its kernels find their stand-ins on the software driver (the
    // graphs' counter needs its own).
    suite::kernels::register_stand_ins();
    let kernels = Kernels::load(driver)
        .inspect_err(|reason| println!("no kernels: {reason}"))
        .ok();
    println!(
        "{} (CUDA {} driver): {iterations} iterations per form and round, {rounds} rounds",
        device.name().map_err(|e| e.to_string())?,
        cuda_host::sys::version_text(driver.version())
    );
    if kernels.is_none() {
        println!(
            "so the forms run without kernels and show each point's own cost on the enqueuing \
             thread (the software driver runs no kernels)"
        );
    }
    // From the suite's pool of pinned, device-mapped words (never freed); the first two form the
    // 64-bit word the bare 64-bit write writes.
    let words = suite::MappedWords::new(&context, 2);
    let mut bench = Bench {
        driver,
        event: Event::new(&context, EventFlags::DisableTiming).map_err(|e| e.to_string())?,
        stream,
        kernels,
        launch_kernels: true,
        polled,
        points: Vec::with_capacity(iterations),
        word: words.device_address(0),
        acknowledged: words.device_address(1),
        writes: 0,
        ring: (0..64)
            .map(|_| Event::new(&context, EventFlags::DisableTiming))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?,
        recorded: 0,
    };
    let ring: Vec<usize> = bench
        .ring
        .iter()
        .map(|event| event.as_raw().addr())
        .collect();
    if lanes_alone {
        return lanes::run(&bench, quick);
    }
    if graphs_alone {
        return graphs::run(&bench, quick);
    }
    if idle_alone {
        wake::idle(&bench, quick);
        return Ok(());
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| query_ring(driver, &ring, &stop));
        let result = measure_all(&mut bench, iterations, rounds);
        stop.store(true, Ordering::SeqCst);
        result
    })?;
    wake::run(&bench, quick);
    wake::idle(&bench, quick);
    rates::run(&bench, quick);
    lanes::run(&bench, quick)?;
    graphs::run(&bench, quick)?;
    let counts = cuda_host::metrics().stream_points();
    if counts.held != 0 || counts.waiting != 0 {
        return Err(format!("stream points left behind: {counts:?}"));
    }
    Ok(())
}

/// The second thread of the "queried elsewhere" forms: queries the ring's events in turn while
/// such a form runs, nonstop or at its pace.
fn query_ring(driver: &Driver, ring: &[usize], stop: &AtomicBool) {
    let mut next = 0;
    while !stop.load(Ordering::SeqCst) {
        let pace = QUERY_PACE.load(Ordering::SeqCst);
        if pace == QUERY_OFF {
            std::thread::sleep(std::time::Duration::from_micros(100));
            continue;
        }
        let began = Instant::now();
        let queried = if pace == 0 { ring.len() } else { 1 };
        for _ in 0..queried {
            let event = ring[next % ring.len()];
            next += 1;
            // SAFETY: the ring's events live until this thread was stopped.
            let _ = unsafe { driver.cuEventQuery(std::ptr::with_exposed_provenance_mut(event)) };
            QUERIES.fetch_add(1, Ordering::Relaxed);
        }
        let pace = std::time::Duration::from_micros(pace);
        while began.elapsed() < pace {
            std::thread::yield_now();
        }
    }
}

fn measure_all(bench: &mut Bench<'_>, iterations: usize, rounds: usize) -> Result<(), String> {
    let driver = bench.driver;
    for form in &FORMS {
        measure(bench, form, iterations / 10);
    }
    let mut times = vec![Vec::new(); FORMS.len()];
    let mut over_baseline = vec![Vec::new(); FORMS.len()];
    let mut enqueue_times = vec![Vec::new(); FORMS.len()];
    for round in 0..rounds {
        let mut this_round = [Timing {
            enqueue: 0.0,
            total: 0.0,
        }; FORMS.len()];
        for offset in 0..FORMS.len() {
            let index = (round + offset) % FORMS.len();
            this_round[index] = measure(bench, &FORMS[index], iterations);
        }
        for (index, timing) in this_round.iter().enumerate() {
            times[index].push(timing.total);
            over_baseline[index].push(timing.total - this_round[0].total);
            enqueue_times[index].push(timing.enqueue);
        }
    }
    println!();
    println!(
        "{:<50} {:>14} {:>22} {:>10}",
        "form", "µs/iteration", "µs over kernel+kernel", "enqueue µs"
    );
    for (index, form) in FORMS.iter().enumerate() {
        println!(
            "{:<50} {:>14.3} {:>22.3} {:>10.3}",
            form.name,
            median(&mut times[index]) * 1e6,
            median(&mut over_baseline[index]) * 1e6,
            median(&mut enqueue_times[index]) * 1e6
        );
    }
    println!(
        "(medians over {rounds} rounds; the last column pairs each form with the baseline of \
         its own round; {} host functions ran)",
        HOST_FUNCTION_RUNS.load(Ordering::Relaxed)
    );
    for (index, form) in FORMS.iter().enumerate() {
        if form.name.ends_with(" point + kernel") {
            let over = median(&mut over_baseline[index]) * 1e6;
            let verdict = match (&bench.kernels, over <= 1.0) {
                (None, _) => "no kernels ran: the enqueuing thread's cost, not the stream's",
                (Some(_), true) => "met",
                (Some(_), false) => "missed",
            };
            println!(
                "{}: {over:.3} µs over kernel + kernel (target <= 1 µs: {verdict}), {:.0} points \
                 a second between kernels",
                form.name
                    .trim_start_matches("kernel + ")
                    .trim_end_matches(" + kernel"),
                1.0 / median(&mut times[index])
            );
        }
    }
    engine_against_batch(bench, &over_baseline);
    looks_against_record(&over_baseline);
    // What X alone costs the enqueuing thread: runs short enough that the stream's queue never
    // fills, so that no enqueue waits for the device.
    const ALONE: usize = 500;
    bench.launch_kernels = false;
    let mut alone = vec![Vec::new(); FORMS.len()];
    for round in 0..rounds * 4 {
        for offset in 1..FORMS.len() {
            let index = 1 + (round + offset) % (FORMS.len() - 1);
            alone[index].push(measure(bench, &FORMS[index], ALONE).enqueue);
        }
    }
    bench.launch_kernels = true;
    println!();
    println!("X alone, {ALONE} in a row on an idle stream: what each costs the enqueuing thread");
    for (index, form) in FORMS.iter().enumerate().skip(1) {
        let name = form.name.trim_start_matches("kernel + ");
        let name = name.trim_end_matches(" + kernel");
        println!("{name:<50} {:>8.1} ns", median(&mut alone[index]) * 1e9);
    }
    four_streams(bench, iterations / 2, rounds)?;
    // The parts of a point, alone in the same way.
    type Part = fn(&mut Bench<'_>);
    let parts: [(&str, Part); 3] = [
        ("stream_point, not polled", |bench| {
            drop(stream_point(&bench.stream).expect("a point"));
        }),
        ("release_in_stream_order of ()", |bench| {
            release_in_stream_order(&bench.stream, ())
                .map_err(|refused| refused.error)
                .expect("released");
        }),
        ("reclaim, nothing held", |_| {
            cuda_host::reclaim();
        }),
    ];
    for (name, part) in parts {
        let mut times = Vec::new();
        for _ in 0..rounds * 4 {
            let start = Instant::now();
            for _ in 0..ALONE {
                part(bench);
            }
            times.push(start.elapsed().as_secs_f64() / ALONE as f64);
            bench.stream.synchronize().expect("synchronize");
        }
        println!("{name:<50} {:>8.1} ns", median(&mut times) * 1e9);
    }
    println!();
    println!(
        "({} queries of the ring's events by the second thread)",
        QUERIES.load(Ordering::Relaxed)
    );
    let stream = bench.stream.as_raw();
    let event = bench.event.as_raw();
    let (mut id, mut status) = (0, cuda_host::sys::CUstreamCaptureStatus(0));
    // SAFETY: a live event.
    time_calls("cuEventQuery of a completed event", || unsafe {
        driver.cuEventQuery(event)
    });
    if let Some(kernels) = &bench.kernels {
        let mut nanoseconds: u64 = 2_000_000_000;
        let mut arguments = [(&raw mut nanoseconds).cast::<c_void>()];
        // SAFETY: `spin_ns` takes one 64-bit count of nanoseconds.
        unsafe { kernels.launch(kernels.spin_ns, 1, 1, stream, &mut arguments) }
            .map_err(|e| e.to_string())?;
        bench
            .event
            .record(&bench.stream)
            .map_err(|e| e.to_string())?;
        // SAFETY: a live event.
        time_calls("cuEventQuery of a pending event", || unsafe {
            driver.cuEventQuery(event)
        });
        bench.stream.synchronize().map_err(|e| e.to_string())?;
    }
    // SAFETY: a live stream; a valid out-pointer.
    time_calls("cuStreamGetId", || unsafe {
        driver.cuStreamGetId(stream, &mut id)
    });
    // SAFETY: a live stream; a valid out-pointer.
    time_calls("cuStreamIsCapturing", || unsafe {
        driver.cuStreamIsCapturing(stream, &mut status)
    });
    time_calls("cuThreadExchangeStreamCaptureMode, there and back", || {
        let mut mode = cuda_host::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: a valid pointer to a mode; the second call restores the thread's own.
        unsafe {
            driver.cuThreadExchangeStreamCaptureMode(&mut mode);
            driver.cuThreadExchangeStreamCaptureMode(&mut mode)
        }
    });
    time_calls("Instant::now", Instant::now);
    Ok(())
}

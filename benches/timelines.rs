//! What a timeline costs and how fast it releases a stream, beside the hand-rolled alternative,
//! in one run.
//!
//! Run: `cargo bench --bench timelines` on a machine with an NVIDIA GPU (add `-- --quick` for a
//! short run; on the software driver, which runs no kernels, only `--quick` makes sense, and the
//! figures are the double's). Three parts:
//! 1. **Signal to resume.** The stream waits on a timeline for `k`, then writes `k` to a pinned,
//!    device-mapped word (`cuStreamWriteValue32`); the host, once the stream reached the wait,
//!    signals `k` and spins on the word. The time from the signal to seeing the word is a round
//!    trip: the signal's way to the GPU and the write's way back (so the resume alone is less).
//!    Beside it, the same round trip through the hand-rolled alternative: a host function
//!    (`host_launch`) blocking on a condition variable that the host notifies, then the write;
//!    and the floor: a bare `cuStreamWaitValue32` on a pinned word the host stores to, with
//!    nothing of cuda-host's, then the write. p50, p99, p99.9 of 10,000 (1,000 with `--quick`)
//!    of each, interleaved, and the timeline's over the floor.
//! 2. **A satisfied wait between two kernels**, against kernel + kernel: 20,000 iterations on
//!    one stream, timed until the stream drained, median of 7 rounds of the difference; the wait
//!    includes the stream point after it (a write in the same batch). Beside it, in the same
//!    rounds, the floor: a bare `cuStreamWaitValue32` on a word that already holds its value,
//!    which is what any stream memory wait costs before cuda-host adds anything; then what each
//!    costs the enqueuing thread alone, 500 in a row on an idle stream.
//! 3. **8 streams × 100,000 signals from 4 threads** (2,000 with `--quick`): each stream waits
//!    for each value of its timeline in turn and writes it after the wait; four threads signal,
//!    each for two streams, checking before each signal that the stream has not written that
//!    value yet (none early) and at the end that every value was written (all ran, in order).

use cuda_host::sys::{CUdeviceptr, Driver};
use cuda_host::{Context, Device, Stream, StreamFlags, host_launch, timeline::Timeline};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

#[allow(dead_code)] // the bench launches only `empty_kernel`
#[path = "../kernels/load.rs"]
mod kernels;

use kernels::Kernels;

fn main() {
    let quick = std::env::args().any(|argument| argument == "--quick");
    if let Err(reason) = run(quick) {
        eprintln!("timelines: {reason}");
        std::process::exit(1);
    }
}

fn run(quick: bool) -> Result<(), String> {
    let driver = cuda_host::driver().map_err(|e| format!("no CUDA driver: {e}"))?;
    let device = Device::get(driver, 0).map_err(|e| format!("no CUDA device: {e}"))?;
    let context = device.primary_context().map_err(|e| e.to_string())?;
    context.bind_to_thread().map_err(|e| e.to_string())?;
    let kernels = Kernels::load(driver)
        .inspect_err(|reason| println!("no kernels: {reason}"))
        .ok();
    println!(
        "{} (CUDA {} driver){}",
        device.name().map_err(|e| e.to_string())?,
        cuda_host::sys::version_text(driver.version()),
        if quick { ", quick" } else { "" }
    );
    round_trips(driver, &context, if quick { 1_000 } else { 10_000 })?;
    match &kernels {
        Some(kernels) => satisfied_wait(kernels, &context, if quick { 2_000 } else { 20_000 })?,
        None => println!("a satisfied wait between two kernels: no kernels on this driver"),
    }
    many_streams(driver, &context, if quick { 2_000 } else { 100_000 })
}

/// A pinned, device-mapped word the stream writes: its host view and device address.
struct Echo {
    words: suite::MappedWords,
}

impl Echo {
    fn new(context: &Context) -> Echo {
        Echo {
            words: suite::MappedWords::new(context, 1),
        }
    }

    fn address(&self) -> CUdeviceptr {
        self.words.device_address(0)
    }

    fn get(&self) -> u32 {
        self.words.get(0)
    }

    /// Enqueues a write of `value` on `stream`.
    fn write_in(&self, driver: &Driver, stream: &Stream, value: u32) -> Result<(), String> {
        // SAFETY: pinned, device-mapped memory of the stream's context (never freed), aligned.
        let result =
            unsafe { driver.cuStreamWriteValue32_v2(stream.as_raw(), self.address(), value, 0) };
        driver
            .check("cuStreamWriteValue32_v2", result)
            .map_err(|e| e.to_string())
    }

    /// Spins until the word is `value`; the time it took.
    fn spin_for(&self, value: u32, start: Instant) -> Result<Duration, String> {
        while self.get() != value {
            if start.elapsed() > Duration::from_secs(10) {
                return Err(format!("the stream never wrote {value}"));
            }
            std::hint::spin_loop();
        }
        Ok(start.elapsed())
    }
}

/// Lets the stream get to the wait enqueued last: it is waiting when the host signals.
fn let_the_stream_reach_its_wait() {
    let start = Instant::now();
    while start.elapsed() < Duration::from_micros(200) {
        std::hint::spin_loop();
    }
}

fn percentiles(name: &str, samples: &mut [Duration]) {
    samples.sort();
    let at = |fraction: f64| {
        let index = ((samples.len() as f64 * fraction) as usize).min(samples.len() - 1);
        samples[index].as_secs_f64() * 1e6
    };
    println!(
        "{name}: p50 {:.2} µs, p99 {:.2} µs, p99.9 {:.2} µs ({} samples)",
        at(0.5),
        at(0.99),
        at(0.999),
        samples.len()
    );
}

fn round_trips(driver: &Driver, context: &Context, iterations: u32) -> Result<(), String> {
    let stream = Stream::new(context, StreamFlags::NonBlocking).map_err(|e| e.to_string())?;
    let timeline = Timeline::new(context, 0).map_err(|e| e.to_string())?;
    let echo = Echo::new(context);
    // The hand-rolled alternative: a host function that blocks until the host notifies.
    let released = Arc::new((Mutex::new(0u32), Condvar::new()));
    // The floor: the driver's own wait on a word the host stores to.
    let gate = suite::MappedWords::new(context, 1);
    let (mut timelines, mut host_functions, mut bare) = (Vec::new(), Vec::new(), Vec::new());
    let mut echoed = 0;
    for k in 1..=iterations {
        // SAFETY: pinned, device-mapped memory of the stream's context (never freed), aligned.
        let result = unsafe {
            driver.cuStreamWaitValue32_v2(
                stream.as_raw(),
                gate.device_address(0),
                k,
                cuda_host::sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ.0,
            )
        };
        driver
            .check("cuStreamWaitValue32_v2", result)
            .map_err(|e| e.to_string())?;
        echoed += 1;
        echo.write_in(driver, &stream, echoed)?;
        let_the_stream_reach_its_wait();
        let start = Instant::now();
        gate.set(0, k);
        bare.push(echo.spin_for(echoed, start)?);

        timeline
            .enqueue_wait(&stream, u64::from(k))
            .map_err(|e| e.to_string())?;
        echoed += 1;
        echo.write_in(driver, &stream, echoed)?;
        let_the_stream_reach_its_wait();
        let start = Instant::now();
        timeline.signal(u64::from(k)).map_err(|e| e.to_string())?;
        timelines.push(echo.spin_for(echoed, start)?);

        let waiting = Arc::clone(&released);
        host_launch(&stream, move || {
            let (released, notified) = &*waiting;
            let mut value = released.lock().unwrap();
            while *value < k {
                value = notified.wait(value).unwrap();
            }
        })
        .map_err(|e| e.to_string())?;
        echoed += 1;
        echo.write_in(driver, &stream, echoed)?;
        let_the_stream_reach_its_wait();
        let start = Instant::now();
        *released.0.lock().unwrap() = k;
        released.1.notify_all();
        host_functions.push(echo.spin_for(echoed, start)?);
    }
    stream.synchronize().map_err(|e| e.to_string())?;
    println!("signal to resume, as a round trip (signal, the stream's write after the wait seen):");
    percentiles("  timeline (a stream memory wait)", &mut timelines);
    percentiles(
        "  a host function blocking on a condition variable",
        &mut host_functions,
    );
    percentiles(
        "  floor: a bare cuStreamWaitValue32 on a word the host stores to",
        &mut bare,
    );
    let median = |samples: &[Duration]| samples[samples.len() / 2].as_secs_f64() * 1e6;
    let p99 = |samples: &[Duration]| samples[samples.len() * 99 / 100].as_secs_f64() * 1e6;
    println!(
        "  timeline over the floor: p50 {:+.2} µs ({:.2}x), p99 {:+.2} µs",
        median(&timelines) - median(&bare),
        median(&timelines) / median(&bare),
        p99(&timelines) - p99(&bare),
    );
    Ok(())
}

fn satisfied_wait(kernels: &Kernels<'_>, context: &Context, iterations: u32) -> Result<(), String> {
    let stream = Stream::new(context, StreamFlags::NonBlocking).map_err(|e| e.to_string())?;
    let timeline = Timeline::new(context, 1).map_err(|e| e.to_string())?;
    let kernel = || {
        // SAFETY: `empty_kernel` takes no parameters.
        unsafe { kernels.launch(kernels.empty_kernel, 1, 1, stream.as_raw(), &mut []) }
            .map_err(|e| e.to_string())
    };
    // The floor's word holds 1 already: the bare wait for it is satisfied too.
    let floor = suite::MappedWords::new(context, 1);
    floor.set(0, 1);
    #[derive(Clone, Copy, PartialEq)]
    enum Between {
        Nothing,
        BareWait,
        TimelineWait,
    }
    let time = |between: Between| -> Result<f64, String> {
        let start = Instant::now();
        for _ in 0..iterations {
            kernel()?;
            match between {
                Between::Nothing => {}
                Between::BareWait => floor.wait_in_stream(&stream, 0, 1),
                Between::TimelineWait => timeline
                    .enqueue_wait(&stream, 1)
                    .map_err(|e| e.to_string())?,
            }
            kernel()?;
        }
        stream.synchronize().map_err(|e| e.to_string())?;
        Ok(start.elapsed().as_secs_f64() / f64::from(iterations) * 1e6)
    };
    let (mut baselines, mut bare, mut waited) = (Vec::new(), Vec::new(), Vec::new());
    let orders = [
        [Between::Nothing, Between::BareWait, Between::TimelineWait],
        [Between::TimelineWait, Between::BareWait, Between::Nothing],
        [Between::BareWait, Between::Nothing, Between::TimelineWait],
    ];
    for round in 0..7 {
        // The order changes from round to round.
        let mut times = [0.0; 3];
        for between in orders[round % orders.len()] {
            times[between as usize] = time(between)?;
        }
        baselines.push(times[0]);
        bare.push(times[1] - times[0]);
        waited.push(times[2] - times[0]);
    }
    for figures in [&mut baselines, &mut bare, &mut waited] {
        figures.sort_by(f64::total_cmp);
    }
    println!(
        "a satisfied wait between two kernels: +{:.2} µs per iteration over kernel + kernel \
         ({:.2} µs), median of 7 rounds of {iterations}; rounds from {:.2} to {:.2} µs",
        waited[3], baselines[3], waited[0], waited[6]
    );
    println!(
        "  the floor, a bare cuStreamWaitValue32 already satisfied: +{:.2} µs (rounds from {:.2} \
         to {:.2} µs); the timeline's wait over it: +{:.2} µs",
        bare[3],
        bare[0],
        bare[6],
        waited[3] - bare[3]
    );
    // What each costs the enqueuing thread alone, on a stream with nothing else to do.
    const ALONE: u32 = 500;
    let mut alone = [0.0; 2];
    for _ in 0..7 {
        for (index, between) in [Between::BareWait, Between::TimelineWait]
            .into_iter()
            .enumerate()
        {
            let start = Instant::now();
            for _ in 0..ALONE {
                match between {
                    Between::BareWait => floor.wait_in_stream(&stream, 0, 1),
                    _ => timeline
                        .enqueue_wait(&stream, 1)
                        .map_err(|e| e.to_string())?,
                }
            }
            let each = start.elapsed().as_secs_f64() / f64::from(ALONE) * 1e9;
            stream.synchronize().map_err(|e| e.to_string())?;
            alone[index] += each / 7.0;
        }
    }
    println!(
        "  the enqueuing thread's cost alone, {ALONE} in a row, mean of 7: the bare wait {:.0} ns, \
         the timeline's wait {:.0} ns",
        alone[0], alone[1]
    );
    Ok(())
}

fn many_streams(driver: &Driver, context: &Context, signals: u32) -> Result<(), String> {
    const STREAMS: usize = 8;
    const THREADS: usize = 4;
    /// How far the signals may run ahead of what a stream wrote: the enqueues stay ahead.
    const WINDOW: u32 = 256;
    let streams: Vec<Stream> = (0..STREAMS)
        .map(|_| Stream::new(context, StreamFlags::NonBlocking))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let timelines: Vec<Timeline> = (0..STREAMS)
        .map(|_| Timeline::new(context, 0))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let echoes: Vec<Echo> = (0..STREAMS).map(|_| Echo::new(context)).collect();
    let early = AtomicU32::new(0);
    let start = Instant::now();
    std::thread::scope(|scope| -> Result<(), String> {
        let enqueuers: Vec<_> = (0..STREAMS)
            .map(|s| {
                let (stream, timeline, echo) = (&streams[s], &timelines[s], &echoes[s]);
                scope.spawn(move || -> Result<(), String> {
                    context.bind_to_thread().map_err(|e| e.to_string())?;
                    for k in 1..=signals {
                        timeline
                            .enqueue_wait(stream, u64::from(k))
                            .map_err(|e| e.to_string())?;
                        echo.write_in(driver, stream, k)?;
                    }
                    Ok(())
                })
            })
            .collect();
        let signallers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (timelines, echoes, early) = (&timelines, &echoes, &early);
                scope.spawn(move || -> Result<(), String> {
                    let mine: Vec<usize> = (thread..STREAMS).step_by(THREADS).collect();
                    for k in 1..=signals {
                        for &s in &mine {
                            let waited = Instant::now();
                            while echoes[s].get() + WINDOW < k {
                                if waited.elapsed() > Duration::from_secs(60) {
                                    return Err(format!("stream {s} stalled before {k}"));
                                }
                                std::hint::spin_loop();
                            }
                            if echoes[s].get() >= k {
                                early.fetch_add(1, Ordering::Relaxed);
                            }
                            timelines[s]
                                .signal(u64::from(k))
                                .map_err(|e| e.to_string())?;
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for handle in enqueuers.into_iter().chain(signallers) {
            handle
                .join()
                .map_err(|_| "a thread panicked".to_owned())??;
        }
        Ok(())
    })?;
    for stream in &streams {
        stream.synchronize().map_err(|e| e.to_string())?;
    }
    let elapsed = start.elapsed();
    let complete = echoes.iter().filter(|echo| echo.get() == signals).count();
    println!(
        "{STREAMS} streams x {signals} signals from {THREADS} threads: {:.2} s, {:.0} signals/s; \
         streams that ran all their work: {complete} of {STREAMS}; work seen before its signal: \
         {}",
        elapsed.as_secs_f64(),
        f64::from(signals) * STREAMS as f64 / elapsed.as_secs_f64(),
        early.load(Ordering::Relaxed)
    );
    if complete != STREAMS || early.load(Ordering::Relaxed) != 0 {
        return Err("work ran early or not at all".to_owned());
    }
    Ok(())
}

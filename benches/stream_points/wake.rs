//! How soon a stream point is seen passed: the wake latency of futures and the drop latency of
//! released values, beside a thread waiting synchronously on an event recorded at the same place.
//!
//! One sample: the stream waits for a host-written word to reach the sample's number, then writes
//! that number to a second word with `cuStreamWriteValue32`, then comes what is measured (a
//! point, or an event for the synchronous waits). When the form is ready (a future polled once,
//! so that the watcher waits on it), a timer thread pauses a random 20–200 µs, raises the first
//! word, and spins reading the second: the moment it sees the number is the stream's completion
//! of the write just before the point, read from host memory the way the GPU wrote it, without a
//! driver call. The latency is from that moment to the waker's call (a future, on a park/unpark
//! executor of this thread), the value's `Drop` (a release, while this thread keeps making
//! cuda-host calls: releases of `()` on another stream), or the wait's return (the baselines).

use crate::Bench;
use cuda_host::sys::{CUevent, CUevent_flags, CUresult, CUstream, Driver};
use cuda_host::{
    Stream, StreamFlags, points::StreamPoint, points::release_in_stream_order, points::stream_point,
};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Wake, Waker};
use std::time::{Duration, Instant};

/// What a sample measures, at the place of the point.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    /// A future (`stream_point`), woken by the watcher.
    Future,
    /// A released value (`release_in_stream_order`), dropped by this thread's drains.
    Release,
    /// This thread spinning on `cuEventQuery` of an event recorded there.
    SpinQuery,
    /// This thread in `cuEventSynchronize` of a blocking-sync event recorded there.
    BlockingSync,
    /// A host function (`host_launch`) on the polled engine, which stamps the time it ran.
    Engine,
    /// A host function (`host_launch`) through the driver's host-function thread.
    DriverFunction,
}

/// Nanoseconds since `EPOCH`, as the timer thread and the wakers stamp them.
fn now() -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// When the measured thing happened (a waker's call, a value's drop), 0 until it did.
static HAPPENED: AtomicU64 = AtomicU64::new(0);

/// Wakes this thread and stamps the time of the first wake.
struct StampingWaker(std::thread::Thread);

impl Wake for StampingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let _ = HAPPENED.compare_exchange(0, now(), Ordering::SeqCst, Ordering::SeqCst);
        self.0.unpark();
    }
}

/// Stamps the time of its drop.
struct StampOnDrop;

impl Drop for StampOnDrop {
    fn drop(&mut self) {
        let _ = HAPPENED.compare_exchange(0, now(), Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// The timer's words: the gate the host raises (0), the number the stream writes (1).
const GATE: usize = 0;
const DONE: usize = 1;

/// The timer thread: for each job (sample number, pause), pauses, raises the gate and spins until
/// the stream wrote the number; sends back when it saw it.
fn timer(words: &suite::MappedWords, jobs: Receiver<(u32, u64)>, seen: Sender<u64>) {
    for (number, pause_ns) in jobs {
        let until = now() + pause_ns;
        while now() < until {
            std::hint::spin_loop();
        }
        words.set(GATE, number);
        // Yielding lets the stream's and the watcher's threads run where cores are few (the
        // software driver's machine); where they are not, it returns at once.
        while words.get(DONE) != number {
            std::thread::yield_now();
        }
        let _ = seen.send(now());
    }
}

/// Latencies in nanoseconds, and what they are of.
struct Figures {
    name: String,
    nanoseconds: Vec<u64>,
}

impl Figures {
    fn quantile(&self, q: f64) -> f64 {
        let mut sorted = self.nanoseconds.clone();
        sorted.sort_unstable();
        let index = ((sorted.len() as f64 * q) as usize).min(sorted.len() - 1);
        sorted[index] as f64 / 1e3
    }
}

/// The samples' state: streams, words, events and the timer.
struct Sampler<'driver> {
    driver: &'driver Driver,
    stream: &'driver Stream,
    /// The same stream, its host functions on the polled engine.
    polled: &'driver Stream,
    /// Where this thread's cuda-host calls go while it waits for a released value's drop.
    side: Stream,
    words: &'static suite::MappedWords,
    spin_event: CUevent,
    blocking_event: CUevent,
    number: u32,
    random: u64,
    jobs: Sender<(u32, u64)>,
    seen: Receiver<u64>,
}

impl Sampler<'_> {
    fn random(&mut self) -> u64 {
        self.random ^= self.random << 13;
        self.random ^= self.random >> 7;
        self.random ^= self.random << 17;
        self.random
    }

    /// A random 20-200 µs.
    fn pause_ns(&mut self) -> u64 {
        20_000 + self.random() % 180_000
    }

    /// A random 2-8 ms.
    fn long_pause_ns(&mut self) -> u64 {
        2_000_000 + self.random() % 6_000_000
    }

    /// One sample of `form`: the latency in nanoseconds from the stream's completion to what
    /// `form` measures; with `pause_ns`, the timer's pause instead of a random one.
    fn sample(&mut self, form: Form, pause_ns: Option<u64>) -> u64 {
        self.number += 1;
        let number = self.number;
        let stream = self.stream.as_raw();
        HAPPENED.store(0, Ordering::SeqCst);
        // SAFETY: both words are pinned, device-mapped memory that outlives the stream's work.
        unsafe {
            let waited = self.driver.cuStreamWaitValue32_v2(
                stream,
                self.words.device_address(GATE),
                number,
                cuda_host::sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ.0,
            );
            self.driver
                .check("cuStreamWaitValue32_v2", waited)
                .expect("the wait is enqueued");
            let written = self.driver.cuStreamWriteValue32_v2(
                stream,
                self.words.device_address(DONE),
                number,
                0,
            );
            self.driver
                .check("cuStreamWriteValue32_v2", written)
                .expect("the write is enqueued");
        }
        let pause = pause_ns.unwrap_or_else(|| self.pause_ns());
        let happened = match form {
            Form::Future => {
                let mut point = stream_point(self.stream).expect("a point");
                let waker = Waker::from(Arc::new(StampingWaker(std::thread::current())));
                let mut context = TaskContext::from_waker(&waker);
                let mut polled = Pin::new(&mut point).poll(&mut context);
                assert!(polled.is_pending(), "passed before the gate was raised");
                self.jobs.send((number, pause)).expect("the timer");
                while polled.is_pending() {
                    std::thread::park();
                    polled = Pin::new(&mut point).poll(&mut context);
                }
                HAPPENED.load(Ordering::SeqCst)
            }
            Form::Release => {
                release_in_stream_order(self.stream, StampOnDrop)
                    .map_err(|refused| refused.error)
                    .expect("released");
                self.jobs.send((number, pause)).expect("the timer");
                while HAPPENED.load(Ordering::SeqCst) == 0 {
                    release_in_stream_order(&self.side, ())
                        .map_err(|refused| refused.error)
                        .expect("released");
                    std::thread::yield_now();
                }
                HAPPENED.load(Ordering::SeqCst)
            }
            Form::SpinQuery => {
                record(self.driver, self.spin_event, stream);
                self.jobs.send((number, pause)).expect("the timer");
                // SAFETY: a live event of the bench's.
                while unsafe { self.driver.cuEventQuery(self.spin_event) }
                    == CUresult::CUDA_ERROR_NOT_READY
                {
                    std::thread::yield_now();
                }
                now()
            }
            Form::Engine | Form::DriverFunction => {
                let on = if form == Form::Engine {
                    self.polled
                } else {
                    self.stream
                };
                cuda_host::host_launch(on, || {
                    let _ = HAPPENED.compare_exchange(0, now(), Ordering::SeqCst, Ordering::SeqCst);
                })
                .expect("launched");
                self.jobs.send((number, pause)).expect("the timer");
                while HAPPENED.load(Ordering::SeqCst) == 0 {
                    std::thread::yield_now();
                }
                HAPPENED.load(Ordering::SeqCst)
            }
            Form::BlockingSync => {
                record(self.driver, self.blocking_event, stream);
                self.jobs.send((number, pause)).expect("the timer");
                // SAFETY: a live event of the bench's.
                let result = unsafe { self.driver.cuEventSynchronize(self.blocking_event) };
                self.driver
                    .check("cuEventSynchronize", result)
                    .expect("synchronized");
                now()
            }
        };
        let done = self.seen.recv().expect("the timer");
        happened.saturating_sub(done)
    }

    /// `count` samples of each of `forms`, in turn.
    fn figures(&mut self, forms: &[(Form, &str)], count: usize) -> Vec<Figures> {
        let mut figures: Vec<Figures> = forms
            .iter()
            .map(|&(_, name)| Figures {
                name: name.to_owned(),
                nanoseconds: Vec::with_capacity(count),
            })
            .collect();
        for _ in 0..count {
            for (index, &(form, _)) in forms.iter().enumerate() {
                let latency = self.sample(form, None);
                figures[index].nanoseconds.push(latency);
            }
        }
        figures
    }
}

fn record(driver: &Driver, event: CUevent, stream: CUstream) {
    // SAFETY: a live event and stream of the bench's.
    let result = unsafe { driver.cuEventRecord(event, stream) };
    driver.check("cuEventRecord", result).expect("recorded");
}

fn create_event(driver: &Driver, flags: u32) -> CUevent {
    let mut event = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the bench's context is current.
    let result = unsafe { driver.cuEventCreate(&mut event, flags) };
    driver.check("cuEventCreate", result).expect("an event");
    event
}

/// Futures kept waiting with the watcher on points behind a closed gate, so that the watcher has
/// `count` of them besides the one measured; `None` when the driver blocked the enqueue behind
/// the gate before that many (opened after 5 s, so that the bench goes on).
fn pending_futures(
    context: &cuda_host::Context,
    count: usize,
) -> Option<(Stream, suite::Gate, Vec<StreamPoint>)> {
    let stream = Stream::new(context, StreamFlags::NonBlocking).expect("a stream");
    let gate = suite::Gate::new(context);
    let blocked = AtomicBool::new(false);
    let finished = Mutex::new(false);
    let points = std::thread::scope(|scope| {
        scope.spawn(|| {
            let start = Instant::now();
            while !*finished.lock().unwrap() {
                if start.elapsed() > Duration::from_secs(5) {
                    blocked.store(true, Ordering::SeqCst);
                    gate.open();
                    return;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        gate.hold(&stream);
        let points: Vec<StreamPoint> = (0..count)
            .map(|_| {
                let mut point = stream_point(&stream).expect("a point");
                let _ = Pin::new(&mut point).poll(&mut TaskContext::from_waker(Waker::noop()));
                point
            })
            .collect();
        *finished.lock().unwrap() = true;
        points
    });
    if blocked.load(Ordering::SeqCst) {
        drop(points);
        stream.synchronize().expect("synchronize");
        return None;
    }
    Some((stream, gate, points))
}

fn print_header() {
    println!(
        "{:<58} {:>7} {:>7} {:>7} {:>7} {:>8} {:>8}",
        "µs from the stream's completion to", "p50", "p90", "p99", "p99.9", "max", "samples"
    );
}

fn print(figures: &Figures) {
    println!(
        "{:<58} {:>7.1} {:>7.1} {:>7.1} {:>7.1} {:>8.1} {:>8}",
        figures.name,
        figures.quantile(0.5),
        figures.quantile(0.9),
        figures.quantile(0.99),
        figures.quantile(0.999),
        figures.quantile(1.0),
        figures.nanoseconds.len()
    );
}

/// The CPU time the watcher thread used so far.
fn watcher_cpu() -> Duration {
    suite::thread_cpu_time("cuda-host-watch").unwrap_or_default()
}

/// Waits up to `bound` for the watcher to park; whether it did.
fn watcher_parks(bound: Duration) -> bool {
    let start = Instant::now();
    while !cuda_host::metrics().stream_points().watcher_parked {
        if start.elapsed() > bound {
            return false;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    true
}

/// The samples' state on the bench's stream, and its timer thread, started.
fn start_sampler<'bench>(
    bench: &'bench Bench<'_>,
) -> (Sampler<'bench>, std::thread::JoinHandle<()>) {
    let driver = bench.driver;
    let context = bench.stream.context();
    // Two words of the suite's pinned pool: the gate the host raises, the number the stream
    // writes.
    let words: &'static suite::MappedWords =
        Box::leak(Box::new(suite::MappedWords::new(context, 2)));
    let (jobs, job_queue) = channel();
    let (seen_sender, seen) = channel();
    let timer_thread = std::thread::Builder::new()
        .name("bench-timer".into())
        .spawn(move || timer(words, job_queue, seen_sender))
        .expect("the timer thread");
    let sampler = Sampler {
        driver,
        stream: &bench.stream,
        polled: &bench.polled,
        side: Stream::new(context, StreamFlags::NonBlocking).expect("a stream"),
        words,
        spin_event: create_event(driver, CUevent_flags::CU_EVENT_DISABLE_TIMING.0),
        blocking_event: create_event(
            driver,
            CUevent_flags::CU_EVENT_DISABLE_TIMING.0 | CUevent_flags::CU_EVENT_BLOCKING_SYNC.0,
        ),
        number: 0,
        random: 0x2545_f491_4f6c_dd1d,
        jobs,
        seen,
    };
    (sampler, timer_thread)
}

/// Measures and prints the wake and drop latencies.
pub(crate) fn run(bench: &Bench<'_>, quick: bool) {
    let context = bench.stream.context();
    let samples = if quick { 300 } else { 2000 };
    let (mut sampler, timer_thread) = start_sampler(bench);
    println!();
    println!(
        "Wake latency: the stream waits for a host-written word, writes a second word, then the \
         point; a timer thread raises the first word after 20-200 µs and spins on the second: \
         its completion. Latency from then to the waker's call (futures, on a park/unpark \
         executor), the value's drop (releases, while the releasing thread keeps making \
         cuda-host calls), or the synchronous wait's return, on an event recorded at the same \
         place. Targets on the H200: futures p50 <= 10 µs, p99 <= 50 µs; release drops p50 <= \
         50 µs."
    );
    // Warm up: the streams' tracks, the watcher, the pages.
    sampler.figures(
        &[
            (Form::Future, ""),
            (Form::Release, ""),
            (Form::SpinQuery, ""),
        ],
        20,
    );
    let cpu_before = watcher_cpu();
    let wall = Instant::now();
    let one = sampler.figures(
        &[
            (Form::Future, "a future's wake, 1 pending"),
            (Form::Release, "a released value's drop"),
            (
                Form::SpinQuery,
                "baseline: a thread spinning on cuEventQuery",
            ),
            (
                Form::BlockingSync,
                "baseline: cuEventSynchronize, blocking-sync event",
            ),
        ],
        samples,
    );
    let wall = wall.elapsed();
    let cpu = watcher_cpu().saturating_sub(cpu_before);
    let mut all = one;
    for pending in [100, 10_000] {
        let name = format!("a future's wake, {pending} pending");
        match pending_futures(context, pending - 1) {
            Some(kept) => {
                let figures = sampler.figures(&[(Form::Future, &name)], samples);
                all.extend(figures);
                let (stream, gate, points) = kept;
                drop(points);
                gate.open();
                stream.synchronize().expect("synchronize");
            }
            None => println!(
                "{name}: skipped, the driver blocked the enqueue of {} points behind a held stream",
                pending - 1
            ),
        }
    }
    // From a parked watcher: the future registers (and so unparks the watcher) a moment before
    // the stream passes its point.
    let mut parked = Figures {
        name: "a future's wake, the watcher parked before it".to_owned(),
        nanoseconds: Vec::new(),
    };
    for _ in 0..samples / 4 {
        if !watcher_parks(Duration::from_millis(50)) {
            break;
        }
        let pause = sampler.pause_ns() % 20_000;
        parked
            .nanoseconds
            .push(sampler.sample(Form::Future, Some(pause)));
    }
    if parked.nanoseconds.is_empty() {
        println!("{}: skipped, the watcher did not park", parked.name);
    } else {
        all.push(parked);
    }
    println!();
    print_header();
    for figures in &all {
        print(figures);
    }
    println!(
        "ratios to the baselines' p50 and p99 (n/a where the baseline's is under 0.5 µs, within \
         the timer's error):"
    );
    let ratio = |figures: &Figures, baseline: &Figures, q: f64| {
        let base = baseline.quantile(q);
        if base < 0.5 {
            "   n/a".to_owned()
        } else {
            format!("{:>6.2}", figures.quantile(q) / base)
        }
    };
    let (spin, blocking) = (&all[2], &all[3]);
    for figures in all
        .iter()
        .filter(|figures| !figures.name.starts_with("baseline"))
    {
        println!(
            "  {:<56} {} {} to spinning on cuEventQuery, {} {} to cuEventSynchronize",
            figures.name,
            ratio(figures, spin, 0.5),
            ratio(figures, spin, 0.99),
            ratio(figures, blocking, 0.5),
            ratio(figures, blocking, 0.99),
        );
    }
    println!(
        "the watcher's CPU time during the 1-pending samples: {:.0}% of a core ({cpu:?} over \
         {wall:?}, futures waiting part of that time)",
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64()
    );
    watcher_cost(context);
    drop(sampler);
    timer_thread.join().expect("the timer thread");
}

/// The watcher's CPU time while one future waits for 200 ms, and while parked for 200 ms.
fn watcher_cost(context: &cuda_host::Context) {
    let stream = Stream::new(context, StreamFlags::NonBlocking).expect("a stream");
    let gate = suite::Gate::new(context);
    gate.hold(&stream);
    let mut point = stream_point(&stream).expect("a point");
    let _ = Pin::new(&mut point).poll(&mut TaskContext::from_waker(Waker::noop()));
    std::thread::sleep(Duration::from_millis(5));
    let before = watcher_cpu();
    std::thread::sleep(Duration::from_millis(200));
    let waiting = watcher_cpu().saturating_sub(before);
    drop(point);
    gate.open();
    stream.synchronize().expect("synchronize");
    let parked = if watcher_parks(Duration::from_millis(500)) {
        let before = watcher_cpu();
        std::thread::sleep(Duration::from_millis(200));
        format!("{:?}", watcher_cpu().saturating_sub(before))
    } else {
        "(it did not park)".to_owned()
    };
    println!(
        "the watcher's CPU time over 200 ms with one future waiting: {waiting:?} ({:.0}% of a \
         core); over 200 ms parked: {parked}",
        100.0 * waiting.as_secs_f64() / 0.2
    );
}

/// Waits up to `bound` for every server of the polled engine to park; whether they did.
fn engine_parks(bound: Duration) -> bool {
    let start = Instant::now();
    while !cuda_host::metrics().polled_engine().parked {
        if start.elapsed() > bound {
            return false;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    true
}

/// The engine's servers' CPU time so far.
fn engine_cpu() -> Duration {
    suite::thread_cpu_time("cuda-host-poll").unwrap_or_default()
}

/// After idle, short and long waits: a future's wake and a host function's stall (on the polled
/// engine and through the driver) when the stream is let go 20-200 µs after they wait (the
/// watcher and the engine spinning), 2-8 ms after (both sleeping between looks, at their
/// paces), and a moment after they begin waiting on a watcher or an engine that parked (so a
/// registration or a launch unparks it); a thread spinning on `cuEventQuery` beside them. Then
/// what the watcher and the engine's servers used of a core over the long waits. Run alone:
/// `cargo bench --bench stream_points -- --idle`.
pub(crate) fn idle(bench: &Bench<'_>, quick: bool) {
    let (short_samples, long_samples) = if quick { (200, 40) } else { (1000, 200) };
    let (mut sampler, timer_thread) = start_sampler(bench);
    println!();
    println!(
        "After idle: the stream waits for a host-written word, writes a second, then the form \
         waits (a future polled once, a host function launched); a timer thread raises the first \
         word and spins on the second: the stream's completion. Latency from then to the \
         waker's call or the function's run."
    );
    let forms = [
        (Form::Future, "a future's wake"),
        (Form::Engine, "a host function on the polled engine"),
        (Form::DriverFunction, "a host function through the driver"),
        (
            Form::SpinQuery,
            "baseline: a thread spinning on cuEventQuery",
        ),
    ];
    // Warm up: the tracks, the watcher, the lane, the driver's thread.
    for &(form, _) in &forms {
        for _ in 0..20 {
            sampler.sample(form, None);
        }
    }
    let mut all = Vec::new();
    for &(form, name) in &forms {
        all.push(Figures {
            name: format!("{name}, after 20-200 µs"),
            nanoseconds: (0..short_samples)
                .map(|_| sampler.sample(form, None))
                .collect(),
        });
    }
    // What the watcher used over the futures' long waits, and the servers over the engine's.
    let mut used = Vec::new();
    for &(form, name) in &forms {
        let (watcher, engine) = (watcher_cpu(), engine_cpu());
        let wall = Instant::now();
        let nanoseconds = (0..long_samples)
            .map(|_| {
                let pause = sampler.long_pause_ns();
                sampler.sample(form, Some(pause))
            })
            .collect();
        let share = |cpu: Duration| 100.0 * cpu.as_secs_f64() / wall.elapsed().as_secs_f64();
        match form {
            Form::Future => used.push(format!(
                "the watcher {:.0}%",
                share(watcher_cpu().saturating_sub(watcher))
            )),
            Form::Engine => used.push(format!(
                "the engine's servers {:.0}%",
                share(engine_cpu().saturating_sub(engine))
            )),
            _ => {}
        }
        all.push(Figures {
            name: format!("{name}, after 2-8 ms"),
            nanoseconds,
        });
    }
    // From parked threads: the wait begins, and so unparks the watcher or a server, a moment
    // (0-20 µs) before the stream passes.
    for (form, name, parks) in [
        (
            Form::Future,
            "a future's wake, the watcher parked before",
            watcher_parks as fn(Duration) -> bool,
        ),
        (
            Form::Engine,
            "an engine function, its servers parked before",
            engine_parks,
        ),
    ] {
        let mut figures = Figures {
            name: name.to_owned(),
            nanoseconds: Vec::new(),
        };
        for _ in 0..long_samples {
            if !parks(Duration::from_millis(50)) {
                break;
            }
            let pause = sampler.pause_ns() % 20_000;
            figures.nanoseconds.push(sampler.sample(form, Some(pause)));
        }
        if figures.nanoseconds.is_empty() {
            println!("{name}: skipped, it did not park");
        } else {
            all.push(figures);
        }
    }
    println!();
    print_header();
    for figures in &all {
        print(figures);
    }
    println!(
        "of a core over their long waits (the stream let go 2-8 ms after each began): {}",
        used.join(", ")
    );
    drop(sampler);
    timer_thread.join().expect("the timer thread");
}

//! How many futures a second cuda-host registers, and what a point costs with 100,000 in flight
//! on one stream.

use crate::Bench;
use cuda_host::{
    Event, EventFlags, Stream, StreamFlags, points::StreamPoint, points::stream_point,
};
use std::ffi::c_void;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::task::{Context as TaskContext, Wake, Waker};
use std::time::{Duration, Instant};

/// Makes a point on `stream` and polls it once, so that it waits with the watcher.
fn register(stream: &Stream, waker: &Waker) -> StreamPoint {
    let mut point = stream_point(stream).expect("a point");
    let _ = Pin::new(&mut point).poll(&mut TaskContext::from_waker(waker));
    point
}

/// Calls of `call` per second from `threads` threads, each on a stream of its own (`call` gets the
/// thread's index and its stream), `each` calls a thread, what they return all kept until the last
/// call returned.
fn per_second<T: Send>(
    context: &cuda_host::Context,
    threads: usize,
    each: usize,
    call: impl Fn(usize, &Stream) -> T + Sync,
) -> f64 {
    let streams: Vec<Stream> = (0..threads)
        .map(|_| Stream::new(context, StreamFlags::NonBlocking).expect("a stream"))
        .collect();
    let barrier = Barrier::new(threads + 1);
    let (start, kept) = std::thread::scope(|scope| {
        let workers: Vec<_> = streams
            .iter()
            .enumerate()
            .map(|(index, stream)| {
                let (barrier, call) = (&barrier, &call);
                scope.spawn(move || {
                    let mut kept = Vec::with_capacity(each);
                    barrier.wait();
                    for _ in 0..each {
                        kept.push(call(index, stream));
                    }
                    kept
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let kept: Vec<Vec<T>> = workers
            .into_iter()
            .map(|worker| worker.join().expect("a calling thread"))
            .collect();
        (start.elapsed(), kept)
    });
    drop(kept);
    for stream in &streams {
        stream.synchronize().expect("synchronize");
    }
    (threads * each) as f64 / start.as_secs_f64()
}

/// Counts wakes.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// 100,000 futures made and polled once on one stream held back by a long kernel (behind a gate
/// on the software driver); prints what each tenth of them cost to make, and how long after the
/// stream was let go the last was woken.
fn hundred_thousand_in_flight(bench: &Bench<'_>, round: usize) {
    const POINTS: usize = 100_000;
    const TENTH: usize = POINTS / 10;
    let context = bench.stream.context();
    let stream = Stream::new(context, StreamFlags::NonBlocking).expect("a stream");
    let gate = suite::Gate::new(context);
    // On the GPU: a kernel that runs 300 ms; behind it the points are in flight unless the
    // driver blocks the enqueue, which the enqueue times then show.
    const KERNEL: Duration = Duration::from_millis(300);
    let launched = Instant::now();
    match &bench.kernels {
        Some(kernels) => {
            let mut nanoseconds = KERNEL.as_nanos() as u64;
            let mut arguments = [(&raw mut nanoseconds).cast::<c_void>()];
            // SAFETY: `spin_ns` takes one 64-bit count of nanoseconds.
            unsafe { kernels.launch(kernels.spin_ns, 1, 1, stream.as_raw(), &mut arguments) }
                .expect("the kernel launches");
        }
        None => gate.hold(&stream),
    }
    // Written once the stream got past what held it back: when it was let go.
    let words = suite::MappedWords::new(context, 1);
    // SAFETY: the word is pinned, device-mapped memory the suite's pool never frees.
    let written = unsafe {
        bench
            .driver
            .cuStreamWriteValue32_v2(stream.as_raw(), words.device_address(0), 1, 0)
    };
    bench
        .driver
        .check("cuStreamWriteValue32_v2", written)
        .expect("the write is enqueued");
    let counting = Arc::new(CountingWaker::default());
    let waker = Waker::from(Arc::clone(&counting));
    let mut tenths = Vec::with_capacity(10);
    let mut points = Vec::with_capacity(POINTS);
    for _ in 0..10 {
        let start = Instant::now();
        for _ in 0..TENTH {
            points.push(register(&stream, &waker));
        }
        tenths.push(start.elapsed().as_secs_f64() * 1e6 / TENTH as f64);
    }
    let enqueued = launched.elapsed();
    let pending = points
        .iter()
        .filter(|point| point.is_passed() != Ok(true))
        .count();
    gate.open();
    while words.get(0) != 1 {
        std::hint::spin_loop();
    }
    let released = Instant::now();
    let bound = Duration::from_secs(30);
    while counting.0.load(Ordering::SeqCst) < pending && released.elapsed() < bound {
        std::hint::spin_loop();
    }
    let woken_after = released.elapsed();
    let woken = counting.0.load(Ordering::SeqCst);
    stream.synchronize().expect("synchronize");
    let all_passed = points.iter().all(|point| point.is_passed() == Ok(true));
    let tenths: Vec<String> = tenths.iter().map(|micros| format!("{micros:.2}")).collect();
    println!(
        "round {round}: µs per future made and polled, each tenth of the 100,000: {} ({:.0} a \
         second)",
        tenths.join(" "),
        POINTS as f64 / enqueued.as_secs_f64()
    );
    let held_back = if bench.kernels.is_some() {
        format!("the {KERNEL:?} kernel")
    } else {
        "the gate".to_owned()
    };
    println!(
        "  made in {enqueued:?} from the launch of what held the stream back; {pending} still \
         pending then, {woken} of them woken, the last {woken_after:?} after {held_back} let the \
         stream go; all passed after a synchronize: {all_passed}"
    );
    if bench.kernels.is_some() && enqueued >= KERNEL {
        println!(
            "  (the enqueue outlasted the kernel: the driver blocked it, so fewer than 100,000 \
             were in flight at once)"
        );
    }
}

/// Prints registration rates and the cost of a point with 100,000 in flight.
pub(crate) fn run(bench: &Bench<'_>, quick: bool) {
    let context = bench.stream.context();
    let each = if quick { 20_000 } else { 100_000 };
    println!();
    println!(
        "Registrations (stream_point, then a first poll that leaves it waiting with the watcher), \
         each thread on a stream of its own, {each} a thread, all kept until the last was made, \
         median of 3 (target from 8 threads: >= 10 million a second):"
    );
    // The driver's own floor: a bare `cuEventRecord` of an event of the thread's own, which is
    // what a point costs the driver.
    let events: Vec<Event> = (0..8)
        .map(|_| Event::new(context, EventFlags::DisableTiming).expect("an event"))
        .collect();
    let record = |thread: usize, stream: &Stream| {
        // SAFETY: a live event and stream of the same context.
        let result = unsafe {
            bench
                .driver
                .cuEventRecord(events[thread].as_raw(), stream.as_raw())
        };
        bench
            .driver
            .check("cuEventRecord", result)
            .expect("recorded");
    };
    let median_of_three = |rate: &dyn Fn() -> f64| crate::median(&mut [rate(), rate(), rate()]);
    for threads in [1, 8] {
        let registrations = median_of_three(&|| {
            per_second(context, threads, each, |_, stream| {
                register(stream, Waker::noop())
            })
        });
        let records = median_of_three(&|| per_second(context, threads, each, record));
        println!(
            "  {threads} thread(s): {:.2} million registrations a second; the driver's bare \
             cuEventRecord {:.2} million a second ({:.2}x)",
            registrations / 1e6,
            records / 1e6,
            registrations / records
        );
    }
    println!();
    println!(
        "100,000 futures in flight on one stream (the second round reuses what the first made):"
    );
    for round in 1..=2 {
        hundred_thousand_in_flight(bench, round);
    }
}

//! The stress test: 8 threads launch host functions over 4 streams (two of them borrowed) while
//! another thread begins and ends captures on one of those streams; 1% of the functions panic, and
//! 1% of the values they capture panic in their `Drop`. It prints what happened and checks that
//! every launch ran once or was refused, every value was dropped once and never on the driver's
//! thread, every injected panic was reported, and the launch slots went back to the reserve.
//!
//! `CUDA_HOST_STRESS_LAUNCHES` sets the launches per thread (default 5,000; the GPU run uses
//! 125,000).

use cuda_host::{
    Stream, StreamFlags, graph::CaptureMode, graph::GraphBuilder, host_launch,
    panics::HostFunctionPanic, panics::PanicOrigin,
};
use std::cell::Cell;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const THREADS: usize = 8;
const STREAMS: usize = 4;
/// The stream that captures begin and end on, meanwhile.
const CAPTURED: usize = 3;

#[derive(Default)]
struct Counts {
    launched: AtomicUsize,
    refused: AtomicUsize,
    runs: AtomicUsize,
    drops: AtomicUsize,
    drops_on_driver_thread: AtomicUsize,
    out_of_order: AtomicUsize,
    injected_function_panics: AtomicUsize,
    injected_drop_panics: AtomicUsize,
    reported_function_panics: AtomicUsize,
    reported_drop_panics: AtomicUsize,
    captures: AtomicUsize,
}

thread_local! {
    /// Set on a thread once it ran a host function: the driver's thread.
    static RAN_A_HOST_FUNCTION: Cell<bool> = const { Cell::new(false) };
}

/// What each host function captures: counted when dropped, and panicking there when asked.
struct Captured {
    counts: Arc<Counts>,
    panic_in_drop: bool,
}

impl Drop for Captured {
    fn drop(&mut self) {
        self.counts.drops.fetch_add(1, Ordering::SeqCst);
        if RAN_A_HOST_FUNCTION.with(Cell::get) {
            self.counts
                .drops_on_driver_thread
                .fetch_add(1, Ordering::SeqCst);
        }
        if self.panic_in_drop {
            panic!("deliberate panic in a captured value's Drop");
        }
    }
}

unsafe extern "C" {
    /// glibc's: gives the heap's free memory back to the system.
    fn malloc_trim(pad: usize) -> std::ffi::c_int;
}

/// Resident memory of this process, from `/proc/self/statm`.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|pages| pages.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

#[test]
fn eight_threads_four_streams_captures_and_panics_lose_nothing_and_leak_nothing() {
    // Alone in a process: the panic hook and the slot table are process-wide.
    suite::alone_in_child!(
        eight_threads_four_streams_captures_and_panics_lose_nothing_and_leak_nothing
    );
    let per_thread: usize = std::env::var("CUDA_HOST_STRESS_LAUNCHES")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(5_000);
    let context = suite::context();
    let owners: Vec<Stream> = (0..2)
        .map(|_| Stream::new(&context, StreamFlags::NonBlocking).expect("stream"))
        .collect();
    let mut streams: Vec<Stream> = (0..2)
        .map(|_| Stream::new(&context, StreamFlags::NonBlocking).expect("stream"))
        .collect();
    for owner in &owners {
        // SAFETY: the owners outlive the wrappers (dropped at the end of the test).
        streams.push(unsafe { Stream::borrow_raw(&context, owner.as_raw()) });
    }
    // On the engine `CUDA_HOST_TEST_ENGINE` names: the driver's, or the polled engine.
    let streams: Vec<Stream> = streams
        .into_iter()
        .map(|stream| {
            stream
                .with_host_engine(suite::host_engine())
                .expect("an engine")
        })
        .collect();
    // A small round first, so that the resident memory measured before the real one holds what
    // any round needs (threads' heaps and stacks, the driver's own).
    stress_round(&streams, per_thread.min(500), false);
    stress_round(&streams, per_thread, true);
    drop(streams);
    drop(owners);
    cuda_host::panics::clear_host_panic_hook();
}

fn stress_round(streams: &[Stream], per_thread: usize, report: bool) {
    let counts = Arc::new(Counts::default());
    let hook_counts = Arc::clone(&counts);
    cuda_host::panics::set_host_panic_hook(move |panic: &HostFunctionPanic<'_>| {
        match panic.origin {
            PanicOrigin::HostFunction => &hook_counts.reported_function_panics,
            _ => &hook_counts.reported_drop_panics,
        }
        .fetch_add(1, Ordering::SeqCst);
    });
    // The last launch each thread made on each stream, to check their order.
    let last_seen: Arc<Vec<AtomicU64>> =
        Arc::new((0..THREADS * STREAMS).map(|_| AtomicU64::new(0)).collect());
    let resident_before = resident_bytes();
    let stop = AtomicBool::new(false);
    let (peak_backlog, peak_slots) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let started = Instant::now();
    std::thread::scope(|scope| {
        // Watches the backlog (finished, not yet dropped) and the slot table.
        scope.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                let slots = cuda_host::metrics().launch_slots();
                peak_backlog.fetch_max(slots.finished, Ordering::SeqCst);
                peak_slots.fetch_max(slots.allocated, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        // Begins and ends captures on one of the streams the launchers use, in every mode.
        scope.spawn(|| {
            let modes = [
                CaptureMode::Global,
                CaptureMode::ThreadLocal,
                CaptureMode::Relaxed,
            ];
            let mut round = 0;
            while !stop.load(Ordering::SeqCst) {
                let builder = GraphBuilder::begin(&streams[CAPTURED], modes[round % 3])
                    .expect("a capture begins");
                builder
                    .callback(|| {})
                    .expect("the capture takes a callback");
                std::thread::sleep(Duration::from_micros(200));
                drop(builder.end().expect("the capture ends"));
                counts.captures.fetch_add(1, Ordering::SeqCst);
                round += 1;
                std::thread::sleep(Duration::from_micros(300));
            }
        });
        let launchers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (counts, last_seen) = (&counts, &last_seen);
                scope.spawn(move || {
                    for launch in 0..per_thread {
                        let which = (thread + launch) % STREAMS;
                        let sequence = launch as u64 + 1;
                        let panic_in_function = launch % 100 == 7;
                        let captured = Captured {
                            counts: Arc::clone(counts),
                            panic_in_drop: launch % 100 == 57,
                        };
                        if captured.panic_in_drop {
                            counts.injected_drop_panics.fetch_add(1, Ordering::SeqCst);
                        }
                        let order = Arc::clone(last_seen);
                        let slot = thread * STREAMS + which;
                        let launched = host_launch(&streams[which], move || {
                            RAN_A_HOST_FUNCTION.with(|ran| ran.set(true));
                            captured.counts.runs.fetch_add(1, Ordering::SeqCst);
                            if order[slot].swap(sequence, Ordering::SeqCst) >= sequence {
                                captured.counts.out_of_order.fetch_add(1, Ordering::SeqCst);
                            }
                            if panic_in_function {
                                captured
                                    .counts
                                    .injected_function_panics
                                    .fetch_add(1, Ordering::SeqCst);
                                panic!("deliberate panic in a host function");
                            }
                        });
                        match launched {
                            Ok(()) => counts.launched.fetch_add(1, Ordering::SeqCst),
                            Err(cuda_host::Error::StreamCapturing { .. }) if which == CAPTURED => {
                                counts.refused.fetch_add(1, Ordering::SeqCst)
                            }
                            Err(error) => panic!("launch {launch} of thread {thread}: {error}"),
                        };
                    }
                })
            })
            .collect();
        for launcher in launchers {
            launcher.join().expect("a launching thread failed");
        }
        stop.store(true, Ordering::SeqCst);
    });
    let enqueued_in = started.elapsed();

    for stream in streams.iter() {
        stream.synchronize().expect("synchronize");
    }
    let total = THREADS * per_thread;
    suite::wait_until("every value to be dropped", || {
        cuda_host::reclaim();
        counts.drops.load(Ordering::SeqCst) >= total
    });
    let slots = cuda_host::metrics().launch_slots();
    let resident_after = resident_bytes();
    // SAFETY: glibc's `malloc_trim` only releases free heap memory.
    unsafe { malloc_trim(0) };
    let resident_trimmed = resident_bytes();
    let load = |counter: &AtomicUsize| counter.load(Ordering::SeqCst);
    let figures = format!(
        "[cuda-host stress] {THREADS} threads x {per_thread} launches over {STREAMS} streams (2 borrowed), \
         {} captures meanwhile, {:.2} s\n\
         [cuda-host stress] launches {}, refused while capturing {}, runs {}, drops {}, \
         drops on the driver's thread {}, out of order {}\n\
         [cuda-host stress] panics: in functions {} injected, {} reported; in Drop {} injected, {} reported\n\
         [cuda-host stress] peak backlog {} records, peak slots {} ({} KiB); after the drain: {} slots \
         (reserve {}), {} in flight, {} finished\n\
         [cuda-host stress] resident memory: {} MiB before, {} MiB after the drain, {} MiB once \
         the allocator gave its free memory back (malloc_trim)",
        load(&counts.captures),
        enqueued_in.as_secs_f64(),
        load(&counts.launched),
        load(&counts.refused),
        load(&counts.runs),
        load(&counts.drops),
        load(&counts.drops_on_driver_thread),
        load(&counts.out_of_order),
        load(&counts.injected_function_panics),
        load(&counts.reported_function_panics),
        load(&counts.injected_drop_panics),
        load(&counts.reported_drop_panics),
        load(&peak_backlog),
        load(&peak_slots),
        load(&peak_slots) * 128 / 1024,
        slots.allocated,
        slots.reserve,
        slots.in_flight,
        slots.finished,
        resident_before >> 20,
        resident_after >> 20,
        resident_trimmed >> 20,
    );
    if report {
        let _ = writeln!(std::io::stderr(), "{figures}");
    }

    assert_eq!(
        load(&counts.launched) + load(&counts.refused),
        total,
        "{figures}"
    );
    assert_eq!(
        load(&counts.runs),
        load(&counts.launched),
        "each launch ran exactly once"
    );
    assert_eq!(
        load(&counts.drops),
        total,
        "each value dropped exactly once"
    );
    assert_eq!(load(&counts.drops_on_driver_thread), 0);
    assert_eq!(load(&counts.out_of_order), 0);
    assert_eq!(
        load(&counts.reported_function_panics),
        load(&counts.injected_function_panics)
    );
    assert_eq!(
        load(&counts.reported_drop_panics),
        load(&counts.injected_drop_panics)
    );
    assert!(
        load(&counts.captures) > 0,
        "no capture overlapped the launches"
    );
    assert_eq!((slots.in_flight, slots.finished), (0, 0));
    // Slots beyond the reserve go back after the burst, except a segment that holds a retired
    // slot: one a capture took a launch of, when the capture stopped waiting for the launch's
    // window (its wait is bounded, and a loaded machine may hold a window longer).
    assert!(
        slots.allocated <= slots.reserve || slots.retired > 0,
        "{slots:?}"
    );
}

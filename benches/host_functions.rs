//! What a stream-ordered host function costs, against the driver's own floor, in one process.
//!
//! Run: `cargo bench --bench host_functions` (add `-- --quick` for a short run). Forms measured on
//! one non-blocking stream, in rounds that measure every form once (the order rotates); each
//! ratio is the median of the rounds' ratios to the floor of the same round:
//! 1. the floor: `cuLaunchHostFunc` called from C (`benches/floor.c`) with a C host function,
//!    through the pointer the platform loader gives;
//! 2. the same call from Rust through the cuda-host-sys table, alone and each after the capture
//!    check `host_launch` makes (`cuStreamIsCapturing`);
//! 3. `cuStreamAddCallback` through the table, the primitive that calls back even after a context
//!    failure, for comparison;
//! 4. `host_launch` with a closure capturing a small value, reclaiming on every launch (the
//!    default) and on every 32nd, and with a closure capturing a clone of an `Arc`;
//! 5. `host_launch_raw` with a pass-through pointer, and with copied bytes.
//!
//! Then a trivial entry point (`cuStreamIsCapturing`) through the table against the direct
//! pointer, and loading the driver (open + table ready, no `cuInit`) in fresh processes.
//!
//! Enqueue cost is the time to enqueue all launches over their count; callbacks per second is
//! the count over the time until the stream drained. Allocations are counted by a counting global
//! allocator over the enqueue, the drain and the reclaim.

use cuda_host::sys::{CUresult, CUstream, CUstreamCaptureStatus, Driver, LoadOptions};
use cuda_host::{Stream, StreamFlags, UserData, host_launch, host_launch_raw};
use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::c_void;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Counts the Rust heap allocations of the whole process.
struct CountingAllocator;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static ALLOCATED_BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(pointer, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

type LaunchHostFunc = unsafe extern "C" fn(
    CUstream,
    Option<unsafe extern "C" fn(*mut c_void)>,
    *mut c_void,
) -> CUresult;

#[link(name = "hostfn_floor", kind = "static")]
unsafe extern "C" {
    fn floor_count_call(counter: *mut c_void);
    fn floor_count_call_spinning(counter: *mut c_void);
    fn floor_launch_host_funcs_spinning(
        launch: LaunchHostFunc,
        stream: CUstream,
        counter: *mut u64,
        launches: u64,
        spin_ns: u64,
    ) -> CUresult;
    fn floor_launch_host_funcs(
        launch: LaunchHostFunc,
        stream: CUstream,
        counter: *mut u64,
        launches: u64,
    ) -> CUresult;
}

unsafe extern "C" fn count_call_with_status(
    _stream: CUstream,
    _status: CUresult,
    counter: *mut c_void,
) {
    // SAFETY: enqueued with the address of the bench's counter.
    unsafe { floor_count_call(counter) };
}

const LOAD_ONCE: &str = "--measure-load-once";

struct Settings {
    launches: u64,
    repetitions: usize,
    trivial_calls: usize,
    load_processes: usize,
}

fn main() {
    if std::env::args().any(|argument| argument == LOAD_ONCE) {
        measure_load_once();
        return;
    }
    let quick = std::env::args().any(|argument| argument == "--quick");
    let settings = if quick {
        Settings {
            launches: 20_000,
            repetitions: 5,
            trivial_calls: 1_000_000,
            load_processes: 5,
        }
    } else {
        Settings {
            launches: 100_000,
            repetitions: 15,
            trivial_calls: 10_000_000,
            load_processes: 21,
        }
    };
    if let Err(reason) = run(&settings) {
        eprintln!("host_functions: {reason}");
        std::process::exit(1);
    }
}

/// One measured form: enqueues `launches` host functions that bump `counter`.
struct Form {
    name: &'static str,
    enqueue: fn(&Bench, u64),
}

struct Bench {
    driver: &'static std::sync::Arc<Driver>,
    stream: Stream,
    direct_launch: LaunchHostFunc,
    counter: &'static AtomicU64,
}

impl Bench {
    fn counter_pointer(&self) -> *mut c_void {
        self.counter.as_ptr().cast()
    }
}

#[derive(Clone, Copy)]
struct Sample {
    enqueue_ns: f64,
    callbacks_per_second: f64,
    allocations: f64,
    bytes: f64,
}

fn forms() -> Vec<Form> {
    vec![
        Form {
            name: "floor: cuLaunchHostFunc from C",
            enqueue: |bench, launches| {
                // SAFETY: the pointer is the driver's cuLaunchHostFunc; the counter outlives the
                // launches (it is static).
                let result = unsafe {
                    floor_launch_host_funcs(
                        bench.direct_launch,
                        bench.stream.as_raw(),
                        bench.counter.as_ptr(),
                        launches,
                    )
                };
                assert_eq!(result, CUresult::CUDA_SUCCESS);
            },
        },
        Form {
            name: "calibration: +200 ns enqueuing",
            enqueue: |bench, launches| {
                // SAFETY: as for the floor.
                let result = unsafe {
                    floor_launch_host_funcs_spinning(
                        bench.direct_launch,
                        bench.stream.as_raw(),
                        bench.counter.as_ptr(),
                        launches,
                        200,
                    )
                };
                assert_eq!(result, CUresult::CUDA_SUCCESS);
            },
        },
        Form {
            name: "calibration: +200 ns in callback",
            enqueue: |bench, launches| {
                for _ in 0..launches {
                    // SAFETY: as for the floor; the function only spins and bumps the counter.
                    let result = unsafe {
                        (bench.direct_launch)(
                            bench.stream.as_raw(),
                            Some(floor_count_call_spinning),
                            bench.counter_pointer(),
                        )
                    };
                    assert_eq!(result, CUresult::CUDA_SUCCESS);
                }
            },
        },
        Form {
            name: "cuLaunchHostFunc via the table",
            enqueue: |bench, launches| {
                for _ in 0..launches {
                    // SAFETY: as above.
                    let result = unsafe {
                        bench.driver.cuLaunchHostFunc(
                            bench.stream.as_raw(),
                            Some(floor_count_call),
                            bench.counter_pointer(),
                        )
                    };
                    assert_eq!(result, CUresult::CUDA_SUCCESS);
                }
            },
        },
        Form {
            name: "cuLaunchHostFunc + capture check",
            enqueue: |bench, launches| {
                let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
                for _ in 0..launches {
                    // SAFETY: a live stream and a valid out-pointer; then as above.
                    let result = unsafe {
                        let result = bench
                            .driver
                            .cuStreamIsCapturing(bench.stream.as_raw(), &mut status);
                        assert_eq!(result, CUresult::CUDA_SUCCESS);
                        bench.driver.cuLaunchHostFunc(
                            bench.stream.as_raw(),
                            Some(floor_count_call),
                            bench.counter_pointer(),
                        )
                    };
                    assert_eq!(result, CUresult::CUDA_SUCCESS);
                }
            },
        },
        Form {
            name: "cuStreamAddCallback via the table",
            enqueue: |bench, launches| {
                for _ in 0..launches {
                    // SAFETY: as above.
                    let result = unsafe {
                        bench.driver.cuStreamAddCallback(
                            bench.stream.as_raw(),
                            Some(count_call_with_status),
                            bench.counter_pointer(),
                            0,
                        )
                    };
                    assert_eq!(result, CUresult::CUDA_SUCCESS);
                }
            },
        },
        Form {
            name: "host_launch, closure",
            enqueue: |bench, launches| {
                let counter = bench.counter;
                for launch in 0..launches {
                    host_launch(&bench.stream, move || {
                        counter.fetch_add(black_box(launch) & 1 | 1, Ordering::Relaxed);
                    })
                    .expect("launch");
                }
            },
        },
        Form {
            name: "host_launch, closure, reclaim/32",
            enqueue: |bench, launches| {
                let counter = bench.counter;
                cuda_host::options::set_launch_reclaim_interval(
                    NonZeroU32::new(32).expect("non-zero"),
                );
                for launch in 0..launches {
                    host_launch(&bench.stream, move || {
                        counter.fetch_add(black_box(launch) & 1 | 1, Ordering::Relaxed);
                    })
                    .expect("launch");
                }
                cuda_host::options::set_launch_reclaim_interval(NonZeroU32::MIN);
            },
        },
        Form {
            name: "host_launch, closure capturing an Arc",
            enqueue: |bench, launches| {
                // The common closure: a clone of an `Arc` per launch, dropped on this thread by
                // the reclaim rule while the driver's thread runs the next functions.
                let shared = std::sync::Arc::new(AtomicU64::new(0));
                let counter = bench.counter;
                for _ in 0..launches {
                    let shared = std::sync::Arc::clone(&shared);
                    host_launch(&bench.stream, move || {
                        shared.fetch_add(1, Ordering::Relaxed);
                        counter.fetch_add(1, Ordering::Relaxed);
                    })
                    .expect("launch");
                }
            },
        },
        Form {
            name: "host_launch_raw, pass-through",
            enqueue: |bench, launches| {
                for _ in 0..launches {
                    // SAFETY: the C function only bumps the static counter it is given.
                    unsafe {
                        host_launch_raw(
                            &bench.stream,
                            floor_count_call,
                            UserData::PassThrough(bench.counter_pointer()),
                        )
                    }
                    .expect("launch");
                }
            },
        },
        Form {
            name: "host_launch_raw, 8 copied bytes",
            enqueue: |bench, launches| {
                let address = (bench.counter_pointer() as usize).to_ne_bytes();
                for _ in 0..launches {
                    // SAFETY: the function reads the counter's address from the 8 copied bytes.
                    unsafe {
                        host_launch_raw(
                            &bench.stream,
                            count_call_through_bytes,
                            UserData::Copied(&address),
                        )
                    }
                    .expect("launch");
                }
            },
        },
    ]
}

unsafe extern "C" fn count_call_through_bytes(bytes: *mut c_void) {
    // SAFETY: launched with the 8 bytes of the counter's address.
    let address = unsafe { bytes.cast::<usize>().read() };
    // SAFETY: the address of the bench's static counter.
    unsafe { floor_count_call(std::ptr::with_exposed_provenance_mut(address)) };
}

fn measure(bench: &Bench, form: &Form, launches: u64) -> Sample {
    bench.stream.synchronize().expect("synchronize");
    let before = bench.counter.load(Ordering::SeqCst);
    let (allocations, bytes) = (
        ALLOCATIONS.load(Ordering::SeqCst),
        ALLOCATED_BYTES.load(Ordering::SeqCst),
    );
    let start = Instant::now();
    (form.enqueue)(bench, launches);
    let enqueued = start.elapsed();
    bench.stream.synchronize().expect("synchronize");
    let drained = start.elapsed();
    cuda_host::reclaim();
    let ran = bench.counter.load(Ordering::SeqCst) - before;
    assert_eq!(
        ran, launches,
        "{}: every host function runs once",
        form.name
    );
    Sample {
        enqueue_ns: enqueued.as_secs_f64() * 1e9 / launches as f64,
        callbacks_per_second: launches as f64 / drained.as_secs_f64(),
        allocations: (ALLOCATIONS.load(Ordering::SeqCst) - allocations) as f64 / launches as f64,
        bytes: (ALLOCATED_BYTES.load(Ordering::SeqCst) - bytes) as f64 / launches as f64,
    }
}

fn run(settings: &Settings) -> Result<(), String> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let driver = cuda_host::driver().map_err(|e| e.to_string())?;
    let device = cuda_host::Device::get(driver, 0).map_err(|e| e.to_string())?;
    let name = device.name().map_err(|e| e.to_string())?;
    let context = device.primary_context().map_err(|e| e.to_string())?;
    let stream = Stream::new(&context, StreamFlags::NonBlocking).map_err(|e| e.to_string())?;
    // SAFETY: reopening the loaded driver library.
    let library =
        unsafe { libloading::Library::new(driver.library_name()) }.map_err(|e| e.to_string())?;
    // SAFETY: `cuLaunchHostFunc` has this C signature.
    let direct_launch: LaunchHostFunc =
        *unsafe { library.get(c"cuLaunchHostFunc") }.map_err(|e| e.to_string())?;
    let bench = Bench {
        driver,
        stream,
        direct_launch,
        counter: &COUNTER,
    };
    println!(
        "{name}, CUDA {} driver ({}); {} host functions per form and round, {} rounds",
        cuda_host::sys::version_text(driver.version()),
        driver.library_name(),
        settings.launches,
        settings.repetitions
    );

    let forms = forms();
    for form in &forms {
        measure(&bench, form, settings.launches / 10);
    }
    // Each round measures every form once, in a rotated order so that no form always runs right
    // after another; a form's ratios are taken against the floor of the same round (paired), so
    // that the machine's drift between rounds cancels.
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); forms.len()];
    for round in 0..settings.repetitions {
        for offset in 0..forms.len() {
            let index = (round + offset) % forms.len();
            samples[index].push(measure(&bench, &forms[index], settings.launches));
        }
    }
    let floor = &samples[0];
    println!();
    println!(
        "{:<34} {:>10} {:>8} {:>13} {:>12} {:>8} {:>13} {:>7} {:>7}",
        "form",
        "enqueue ns",
        "ratio",
        "ratio range",
        "callbacks/s",
        "ratio",
        "ratio range",
        "allocs",
        "bytes"
    );
    for (form, samples) in forms.iter().zip(&samples) {
        let median_of = |value: fn(&Sample) -> f64| {
            let mut values: Vec<f64> = samples.iter().map(value).collect();
            median(&mut values)
        };
        let paired = |value: fn(&Sample) -> f64| {
            let mut ratios: Vec<f64> = samples
                .iter()
                .zip(floor)
                .map(|(sample, floor)| value(sample) / value(floor))
                .collect();
            let median = median(&mut ratios);
            (
                median,
                ratios[ratios.len() / 4],
                ratios[ratios.len() * 3 / 4],
            )
        };
        let (enqueue, enqueue_low, enqueue_high) = paired(|s| s.enqueue_ns);
        let (rate, rate_low, rate_high) = paired(|s| s.callbacks_per_second);
        println!(
            "{:<34} {:>10.0} {:>8.3} {:>13} {:>12.0} {:>8.3} {:>13} {:>7.2} {:>7.1}",
            form.name,
            median_of(|s| s.enqueue_ns),
            enqueue,
            format!("{enqueue_low:.3}-{enqueue_high:.3}"),
            median_of(|s| s.callbacks_per_second),
            rate,
            format!("{rate_low:.3}-{rate_high:.3}"),
            median_of(|s| s.allocations),
            median_of(|s| s.bytes),
        );
    }
    println!(
        "(absolute figures: medians of {} rounds; ratios: medians of each round's ratio to that \
         round's floor, with their interquartile range; allocations and bytes per launch, Rust heap)",
        settings.repetitions
    );

    trivial_call(&bench, &library, settings)?;
    load_cost(settings)?;
    Ok(())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn trivial_call(
    bench: &Bench,
    library: &libloading::Library,
    settings: &Settings,
) -> Result<(), String> {
    type IsCapturing = unsafe extern "C" fn(CUstream, *mut CUstreamCaptureStatus) -> CUresult;
    // SAFETY: `cuStreamIsCapturing` has this C signature.
    let direct: IsCapturing =
        *unsafe { library.get(c"cuStreamIsCapturing") }.map_err(|e| e.to_string())?;
    let stream = bench.stream.as_raw();
    let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let time = |call: &mut dyn FnMut()| {
        let start = Instant::now();
        for _ in 0..settings.trivial_calls {
            call();
        }
        start.elapsed().as_secs_f64() * 1e9 / settings.trivial_calls as f64
    };
    let (mut pointer, mut table) = (Vec::new(), Vec::new());
    for _ in 0..settings.repetitions {
        pointer.push(time(&mut || {
            // SAFETY: a live stream and a valid out-pointer.
            black_box(unsafe { black_box(direct)(black_box(stream), &mut status) });
        }));
        table.push(time(&mut || {
            // SAFETY: as above.
            black_box(unsafe {
                black_box(bench.driver).cuStreamIsCapturing(black_box(stream), &mut status)
            });
        }));
    }
    let (pointer, table) = (median(&mut pointer), median(&mut table));
    println!();
    println!(
        "cuStreamIsCapturing, median of {} runs of {} calls:",
        settings.repetitions, settings.trivial_calls
    );
    println!("  direct pointer (platform loader)  {pointer:8.2} ns");
    println!(
        "  through the table                 {table:8.2} ns  ({:+.2} ns)",
        table - pointer
    );
    Ok(())
}

/// In a fresh process: microseconds to open the library, then to resolve the table.
fn measure_load_once() {
    let name = std::env::var("HOST_FUNCTIONS_LIBRARY").expect("set by the parent");
    let start = Instant::now();
    // SAFETY: opening the driver library, as every CUDA program does.
    let library = unsafe { libloading::Library::new(&name) }.expect("the library opens");
    let opened = start.elapsed();
    // Opening again returns the loaded library: what remains is resolving the table.
    // SAFETY: `name` is the library the parent process loaded as its driver with the default
    // options (`load_cost`).
    let driver = unsafe { Driver::open(&name) }.expect("the driver loads");
    let ready = start.elapsed();
    println!("{} {}", opened.as_nanos(), (ready - opened).as_nanos());
    drop((driver, library));
}

fn load_cost(settings: &Settings) -> Result<(), String> {
    // SAFETY: the default options name the driver this process is configured with.
    let name = unsafe { Driver::load(&LoadOptions::default()) }
        .map_err(|e| e.to_string())?
        .library_name()
        .to_owned();
    let executable = std::env::current_exe().map_err(|e| e.to_string())?;
    let (mut open, mut table) = (Vec::new(), Vec::new());
    for _ in 0..settings.load_processes {
        let output = Command::new(&executable)
            .arg(LOAD_ONCE)
            .env("HOST_FUNCTIONS_LIBRARY", &name)
            .output()
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&output.stdout);
        let fields: Vec<f64> = text
            .split_whitespace()
            .filter_map(|field| field.parse().ok())
            .collect();
        let [opened, resolved] = fields[..] else {
            return Err(format!("a load-measuring process failed: {text}"));
        };
        open.push(opened);
        table.push(resolved);
    }
    let open = Duration::from_nanos(median(&mut open) as u64);
    let table = Duration::from_nanos(median(&mut table) as u64);
    println!();
    println!(
        "loading {name} without cuInit, each in a fresh process, median of {}:",
        settings.load_processes
    );
    println!(
        "  open the library                  {:8.3} ms",
        open.as_secs_f64() * 1e3
    );
    println!(
        "  then make the table ready         {:8.3} ms more",
        table.as_secs_f64() * 1e3
    );
    Ok(())
}

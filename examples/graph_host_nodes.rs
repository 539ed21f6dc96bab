//! A graph with two host nodes around a kernel, launched three times.
//!
//! The graph is built by capturing a stream: a callback counts launches, the kernel fills a
//! buffer, the buffer is copied to pinned memory, and a second callback checks it. The graph
//! owns both callbacks: they run on every launch and are dropped once the graph, its executable
//! and their launches are gone.
//!
//! Run: `cargo run --example graph_host_nodes`. On a machine without a GPU it runs on the
//! software driver of cuda-host-testing, with stand-ins for the kernels (`common`), and says so
//! on its first line; `CUDA_TEST_DRIVER=real` or `software` picks the driver.

mod common;

use common::{DeviceBuffer, PinnedBuffer, Work, copy_to_host};
use cuda_host::{Stream, StreamFlags, graph::CaptureMode, graph::GraphBuilder};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const N: u32 = 1 << 16;
const LAUNCHES: usize = 3;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            eprintln!("graph_host_nodes: {reason}");
            ExitCode::FAILURE
        }
    }
}

/// Counts, shared by the callbacks and `main`.
#[derive(Default)]
struct Counts {
    before_kernel: AtomicUsize,
    after_kernel: AtomicUsize,
    correct_results: AtomicUsize,
}

fn run() -> Result<(), String> {
    let (selected, device) = common::open("graph_host_nodes", true)?;
    let driver = selected.driver();
    let context = device.primary_context().map_err(|e| e.to_string())?;
    let stream = Stream::new(&context, StreamFlags::NonBlocking).map_err(|e| e.to_string())?;
    // The raw driver calls below (module, memory, kernel launches) use the calling thread's
    // current context; cuda-host's own calls leave it as they found it.
    context.bind_to_thread().map_err(|e| e.to_string())?;
    let work = Work::load(selected, driver)?;
    let data = DeviceBuffer::new(driver, N as usize * 4)?;
    let results = Arc::new(PinnedBuffer::new(driver, N as usize)?);
    let counts = Arc::new(Counts::default());
    let multiplier = 5u32;

    let builder = GraphBuilder::begin(&stream, CaptureMode::Global).map_err(|e| e.to_string())?;
    let before = Arc::clone(&counts);
    builder
        .callback(move || {
            before.before_kernel.fetch_add(1, Ordering::SeqCst);
        })
        .map_err(|e| e.to_string())?;
    // SAFETY: `data` holds N words and outlives every launch of the graph.
    unsafe { work.fill_iota(builder.stream(), &data, N, multiplier) }?;
    copy_to_host(driver, &results, &data, builder.stream())?;
    let (after, host_results) = (Arc::clone(&counts), Arc::clone(&results));
    builder
        .callback(move || {
            after.after_kernel.fetch_add(1, Ordering::SeqCst);
            if (0..N).all(|i| host_results.get(i) == i * multiplier) {
                after.correct_results.fetch_add(1, Ordering::SeqCst);
            }
        })
        .map_err(|e| e.to_string())?;
    let graph = builder.end().map_err(|e| e.to_string())?;
    let host_nodes = graph.host_nodes().map_err(|e| e.to_string())?.len();
    if selected.is_software() {
        // The kernel's stand-in is a host node too.
        println!(
            "captured a graph with {} host nodes around the kernel's stand-in",
            host_nodes - 1
        );
    } else {
        println!("captured a graph with {host_nodes} host nodes around the kernel");
    }

    let executable = graph.instantiate().map_err(|e| e.to_string())?;
    drop(graph); // the executable keeps the callbacks alive on its own
    for _ in 0..LAUNCHES {
        executable.launch(&stream).map_err(|e| e.to_string())?;
    }
    stream.synchronize().map_err(|e| e.to_string())?;
    let (before, after, correct) = (
        counts.before_kernel.load(Ordering::SeqCst),
        counts.after_kernel.load(Ordering::SeqCst),
        counts.correct_results.load(Ordering::SeqCst),
    );
    println!("launched {LAUNCHES} times: first host node ran {before} times, second {after} times");
    println!("the second host node saw the kernel's {N} results correct in {correct} launches");
    drop(executable);
    // The callbacks' captured values go once the executable is gone; a caller reclaims them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while Arc::strong_count(&counts) > 1 {
        if std::time::Instant::now() > deadline {
            return Err("the callbacks were not released after the executable".to_owned());
        }
        cuda_host::reclaim();
        std::thread::yield_now();
    }
    println!("both callbacks were released after the executable was dropped");
    if (before, after, correct) != (LAUNCHES, LAUNCHES, LAUNCHES) {
        return Err("the host nodes did not run once per launch".to_owned());
    }
    Ok(())
}

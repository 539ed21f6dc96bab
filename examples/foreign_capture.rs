//! A host function in a graph that other code captures: kernel + host function + kernel,
//! captured with the driver's own calls as another library would, then replayed.
//!
//! The capture is begun with `cuStreamBeginCapture` and ended with `cuStreamEndCapture`, outside
//! cuda-host. Between two kernels, `host_launch_replayable` adds a host function that checks the
//! first kernel's results: on the capturing stream it becomes a node of the graph being
//! captured, owned by that graph, so it runs on every replay and is dropped once the graph and
//! its executable are gone.
//!
//! Run: `cargo run --example foreign_capture`. On a machine without a GPU it runs on the
//! software driver of cuda-host-testing, with stand-ins for the kernels (`common`), and says so
//! on its first line; `CUDA_TEST_DRIVER=real` or `software` picks the driver.

mod common;

use common::{DeviceBuffer, PinnedBuffer, Work, copy_to_device, copy_to_host};
use cuda_host::sys::{CUgraphExec, CUstreamCaptureMode, Driver};
use cuda_host::{Stream, StreamFlags, graph::host_launch_replayable};
use std::process::ExitCode;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const N: u32 = 1 << 16;
const REPLAYS: usize = 100;
const MULTIPLIER: u32 = 3;
const ADDED: u32 = 7;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            eprintln!("foreign_capture: {reason}");
            ExitCode::FAILURE
        }
    }
}

fn check(
    driver: &Driver,
    call: &'static str,
    result: cuda_host::sys::CUresult,
) -> Result<(), String> {
    driver.check(call, result).map_err(|e| e.to_string())
}

fn run() -> Result<(), String> {
    let (selected, device) = common::open("foreign_capture", true)?;
    let driver = selected.driver();
    let context = device.primary_context().map_err(|e| e.to_string())?;
    let stream = Stream::new(&context, StreamFlags::NonBlocking).map_err(|e| e.to_string())?;
    // The raw driver calls below use the calling thread's current context.
    context.bind_to_thread().map_err(|e| e.to_string())?;
    let work = Work::load(selected, driver)?;
    let data = DeviceBuffer::new(driver, N as usize * 4)?;
    let scalar = DeviceBuffer::new(driver, 4)?;
    let first = Arc::new(PinnedBuffer::new(driver, N as usize)?);
    let last = PinnedBuffer::new(driver, N as usize)?;
    let added = PinnedBuffer::new(driver, 1)?;
    added.set(0, ADDED);
    copy_to_device(driver, &scalar, &added, &stream)?;
    stream.synchronize().map_err(|e| e.to_string())?;

    // Another library's capture: cuda-host neither begins nor ends it.
    // SAFETY: a valid stream, not capturing.
    let begun = unsafe {
        driver.cuStreamBeginCapture_v2(
            stream.as_raw(),
            CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
        )
    };
    check(driver, "cuStreamBeginCapture_v2", begun)?;
    // SAFETY: `data` holds N words and outlives every replay of the graph.
    unsafe { work.fill_iota(&stream, &data, N, MULTIPLIER) }?;
    copy_to_host(driver, &first, &data, &stream)?;
    let correct = Arc::new(AtomicUsize::new(0));
    let (checked, results) = (Arc::clone(&correct), Arc::clone(&first));
    // SAFETY: no other thread ends this capture during the call (this thread ends it below).
    unsafe {
        host_launch_replayable(&stream, move || {
            if (0..N).all(|i| results.get(i) == i * MULTIPLIER) {
                checked.fetch_add(1, Ordering::SeqCst);
            }
        })
    }
    .map_err(|e| e.to_string())?;
    // SAFETY: both buffers outlive every replay.
    unsafe { work.add_scalar(&stream, &data, &scalar, N) }?;
    copy_to_host(driver, &last, &data, &stream)?;
    let mut graph = ptr::null_mut();
    // SAFETY: the capture begun above, on this thread; a valid out-pointer.
    let ended = unsafe { driver.cuStreamEndCapture(stream.as_raw(), &mut graph) };
    check(driver, "cuStreamEndCapture", ended)?;
    println!("captured kernel + host function + kernel with the driver's own calls");

    let mut executable: CUgraphExec = ptr::null_mut();
    // SAFETY: a graph fresh from the capture; a valid out-pointer.
    let made = unsafe { driver.cuGraphInstantiateWithFlags(&mut executable, graph, 0) };
    check(driver, "cuGraphInstantiateWithFlags", made)?;
    for _ in 0..REPLAYS {
        // SAFETY: a live executable and stream.
        let launched = unsafe { driver.cuGraphLaunch(executable, stream.as_raw()) };
        check(driver, "cuGraphLaunch", launched)?;
    }
    stream.synchronize().map_err(|e| e.to_string())?;
    let replayed_correct = correct.load(Ordering::SeqCst);
    let last_correct = (0..N).all(|i| last.get(i) == i * MULTIPLIER + ADDED);
    println!(
        "replayed {REPLAYS} times: the host function saw the first kernel's {N} results correct \
         in {replayed_correct} replays; the second kernel's results are {}",
        if last_correct { "correct" } else { "wrong" }
    );

    // SAFETY: owned here, destroyed once; the stream ran every replay.
    unsafe {
        check(
            driver,
            "cuGraphExecDestroy",
            driver.cuGraphExecDestroy(executable),
        )?;
        check(driver, "cuGraphDestroy", driver.cuGraphDestroy(graph))?;
    }
    // The graph's user object let go of the host function: a caller's thread drops it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while Arc::strong_count(&correct) > 1 {
        if std::time::Instant::now() > deadline {
            return Err("the host function was not dropped after the graph".to_owned());
        }
        cuda_host::reclaim();
        std::thread::yield_now();
    }
    println!("the host function was dropped once the graph and its executable were destroyed");
    if replayed_correct != REPLAYS || !last_correct {
        return Err("the graph did not run kernel + host function + kernel in order".to_owned());
    }
    Ok(())
}

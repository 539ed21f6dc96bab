//! Awaiting a stream from async code, with tokio.
//!
//! A task enqueues a kernel that fills a device buffer and a copy of it to pinned host memory,
//! then awaits a stream point made after them: no thread blocks on the stream meanwhile (another
//! task keeps ticking on the same single-threaded runtime), and the point costs the stream one
//! event record, not a host function. When the future completes, the results are on the host.
//!
//! Run: `cargo run --example await_stream_point`. On a machine without a GPU it runs on the
//! software driver of cuda-host-testing, with stand-ins for the kernels (`common`), and says so
//! on its first line; `CUDA_TEST_DRIVER=real` or `software` picks the driver.

mod common;

use common::{DeviceBuffer, PinnedBuffer, Work, copy_to_host};
use cuda_host::{Stream, StreamFlags, points::stream_point};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

const N: u32 = 1 << 24;
const MULTIPLIER: u32 = 7;

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            eprintln!("await_stream_point: {reason}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), String> {
    let (selected, device) = common::open("await_stream_point", true)?;
    let driver = selected.driver();
    let context = device.primary_context().map_err(|e| e.to_string())?;
    let stream = Stream::new(&context, StreamFlags::NonBlocking).map_err(|e| e.to_string())?;
    context.bind_to_thread().map_err(|e| e.to_string())?;
    let work = Work::load(selected, driver)?;
    let data = DeviceBuffer::new(driver, N as usize * 4)?;
    let results = PinnedBuffer::new(driver, N as usize)?;

    // Another task on the same thread: it runs while the stream works.
    let ticks = Arc::new(AtomicU32::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let ticker = tokio::spawn({
        let (ticks, done) = (Arc::clone(&ticks), Arc::clone(&done));
        async move {
            while !done.load(Ordering::SeqCst) {
                ticks.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_micros(100)).await;
            }
        }
    });

    let start = Instant::now();
    for _ in 0..4 {
        // SAFETY: `data` holds N words and outlives the stream's work (the point below is
        // awaited first).
        unsafe { work.fill_iota(&stream, &data, N, MULTIPLIER) }?;
    }
    copy_to_host(driver, &results, &data, &stream)?;
    let point = stream_point(&stream).map_err(|e| e.to_string())?;
    let enqueued = start.elapsed();
    point.await.map_err(|e| e.to_string())?;
    let completed = start.elapsed();
    done.store(true, Ordering::SeqCst);
    ticker.await.map_err(|e| e.to_string())?;

    let correct = (0..N)
        .filter(|&i| results.get(i) == i.wrapping_mul(MULTIPLIER))
        .count();
    println!(
        "enqueued 4 kernels and a copy of {} MiB in {enqueued:?}; the stream point completed \
         after {completed:?}; meanwhile another task ticked {} times on the same thread",
        N / (1 << 18),
        ticks.load(Ordering::SeqCst)
    );
    println!("{correct} of {N} values were on the host when the future completed");
    if correct != N as usize {
        return Err("the future completed before the copy was done".to_owned());
    }
    Ok(())
}

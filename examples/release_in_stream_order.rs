//! Freeing staging memory in stream order, without a blocking synchronize.
//!
//! Each of 8 batches fills a fresh pinned staging buffer on the host, copies it to the device
//! with `cuMemcpyHtoDAsync`, and hands the buffer to the stream with `release_in_stream_order`
//! right away: the buffer is freed by this thread once the stream has passed the copy, by a
//! later cuda-host call, while the batches after it are still being enqueued. A kernel adds a
//! number to each batch's values and they are copied back. An event recorded after each copy
//! shows, at each buffer's drop, that its copy had finished. The kernels are PTX text
//! (`kernels/`), loaded with `cuModuleLoadData`.
//!
//! Run: `cargo run --example release_in_stream_order`. On a machine without a GPU it runs on the
//! software driver of cuda-host-testing, with stand-ins for the kernels (`common`), and says so
//! on its first line; `CUDA_TEST_DRIVER=real` or `software` picks the driver.

mod common;

use common::{DeviceBuffer, PinnedBuffer, Work, copy_to_device, copy_to_host};
use cuda_host::{Event, EventFlags, Stream, StreamFlags, points::release_in_stream_order};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

const N: u32 = 1 << 20;
const BATCHES: u32 = 8;
const ADDEND: u32 = 5;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            eprintln!("release_in_stream_order: {reason}");
            ExitCode::FAILURE
        }
    }
}

/// What each staging buffer saw when it was freed: whether its copy's event had completed, on
/// which thread, and after how many batches had been enqueued.
type Report = Arc<Mutex<Vec<(bool, ThreadId, u32)>>>;

/// A staging buffer handed to the stream, with what tells when it was freed.
struct Staging {
    /// Only owned: freed (cuMemFreeHost) when the stream has passed the copy that reads it.
    _buffer: PinnedBuffer,
    copied: Event,
    report: Report,
    enqueued: Arc<Mutex<u32>>,
}

impl Drop for Staging {
    fn drop(&mut self) {
        let complete = self.copied.is_complete().unwrap_or(false);
        let enqueued = *self.enqueued.lock().unwrap();
        self.report
            .lock()
            .unwrap()
            .push((complete, std::thread::current().id(), enqueued));
    }
}

fn run() -> Result<(), String> {
    let (selected, device) = common::open("release_in_stream_order", true)?;
    let driver = selected.driver();
    let context = device.primary_context().map_err(|e| e.to_string())?;
    let stream = Stream::new(&context, StreamFlags::NonBlocking).map_err(|e| e.to_string())?;
    context.bind_to_thread().map_err(|e| e.to_string())?;
    let work = Work::load(selected, driver)?;

    let report: Report = Arc::default();
    let enqueued = Arc::new(Mutex::new(0));
    let scalar_host = PinnedBuffer::new(driver, 1)?;
    scalar_host.set(0, ADDEND);
    let scalar = DeviceBuffer::new(driver, 4)?;
    copy_to_device(driver, &scalar, &scalar_host, &stream)?;
    let mut device_batches = Vec::new();
    let mut results = Vec::new();
    for batch in 0..BATCHES {
        let staging = PinnedBuffer::new(driver, N as usize)?;
        for index in 0..N {
            staging.set(index, batch * N + index);
        }
        let data = DeviceBuffer::new(driver, N as usize * 4)?;
        copy_to_device(driver, &data, &staging, &stream)?;
        let copied = Event::new(&context, EventFlags::DisableTiming).map_err(|e| e.to_string())?;
        copied.record(&stream).map_err(|e| e.to_string())?;
        let staging = Staging {
            _buffer: staging,
            copied,
            report: Arc::clone(&report),
            enqueued: Arc::clone(&enqueued),
        };
        // No synchronize: the buffer is freed once the stream has passed this point.
        if let Err(refused) = release_in_stream_order(&stream, staging) {
            stream.synchronize().map_err(|e| e.to_string())?;
            return Err(refused.error.to_string());
        }
        // SAFETY: `data` holds N words and `scalar` one; both are freed after the stream is
        // synchronized.
        unsafe { work.add_scalar(&stream, &data, &scalar, N) }?;
        let result = PinnedBuffer::new(driver, N as usize)?;
        copy_to_host(driver, &result, &data, &stream)?;
        device_batches.push(data);
        results.push(result);
        *enqueued.lock().unwrap() = batch + 1;
    }
    let freed_while_enqueueing = report.lock().unwrap().len();
    stream.synchronize().map_err(|e| e.to_string())?;

    let report = report.lock().unwrap().clone();
    let after_copy = report.iter().filter(|(complete, ..)| *complete).count();
    let here = std::thread::current().id();
    let on_this_thread = report
        .iter()
        .filter(|(_, thread, _)| *thread == here)
        .count();
    println!(
        "{BATCHES} staging buffers of {} MiB released without a synchronize: \
         {freed_while_enqueueing} freed while later batches were being enqueued, the rest by the \
         final synchronize",
        N / (1 << 18)
    );
    for (index, (_, _, enqueued)) in report.iter().enumerate() {
        println!("  staging buffer {index} freed once {enqueued} batches were enqueued");
    }
    println!(
        "{after_copy} of {BATCHES} were freed after their copy had finished (event complete at \
         the drop), {on_this_thread} on the releasing thread"
    );
    let correct = results
        .iter()
        .enumerate()
        .all(|(batch, result)| (0..N).all(|i| result.get(i) == batch as u32 * N + i + ADDEND));
    println!(
        "the kernel saw every copied value: {}",
        if correct { "yes" } else { "no" }
    );
    if report.len() != BATCHES as usize
        || after_copy != BATCHES as usize
        || on_this_thread != BATCHES as usize
        || !correct
    {
        return Err("a staging buffer was freed too early, elsewhere, or not at all".to_owned());
    }
    Ok(())
}

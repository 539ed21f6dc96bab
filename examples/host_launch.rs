//! A host function ordered between two kernels.
//!
//! Kernel 1 fills a device buffer; the buffer is copied to pinned host memory; a Rust closure,
//! launched with `host_launch`, checks those values in stream order and writes a number to
//! pinned memory; that number is copied to the device and kernel 2 adds it to every value. The
//! kernels are PTX text (`kernels/`), loaded with `cuModuleLoadData`: no nvcc needed.
//!
//! Run: `cargo run --example host_launch`. On a machine without a GPU it runs on the software
//! driver of cuda-host-testing, with stand-ins for the kernels (`common`), and says so on its
//! first line; `CUDA_TEST_DRIVER=real` or `software` picks the driver.

mod common;

use common::{DeviceBuffer, PinnedBuffer, Work, copy_to_device, copy_to_host};
use cuda_host::{Stream, StreamFlags, host_launch};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

const N: u32 = 1 << 20;
const MULTIPLIER: u32 = 3;
const ADDEND: u32 = 1000;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            eprintln!("host_launch: {reason}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let (selected, device) = common::open("host_launch", true)?;
    let driver = selected.driver();
    let context = device.primary_context().map_err(|e| e.to_string())?;
    let stream = Stream::new(&context, StreamFlags::NonBlocking).map_err(|e| e.to_string())?;
    // The raw driver calls below (module, memory, kernel launches) use the calling thread's
    // current context; cuda-host's own calls leave it as they found it.
    context.bind_to_thread().map_err(|e| e.to_string())?;
    let work = Work::load(selected, driver)?;

    let bytes = N as usize * 4;
    let data = DeviceBuffer::new(driver, bytes)?;
    let scalar = DeviceBuffer::new(driver, 4)?;
    let results = Arc::new(PinnedBuffer::new(driver, N as usize)?);
    let value_for_kernel_2 = Arc::new(PinnedBuffer::new(driver, 1)?);
    let report = Arc::new(Mutex::new(None));

    // Kernel 1: data[i] = i * MULTIPLIER, then copy the values to the host.
    // SAFETY: `data` holds N words and is freed after the stream is synchronized.
    unsafe { work.fill_iota(&stream, &data, N, MULTIPLIER) }?;
    copy_to_host(driver, &results, &data, &stream)?;

    // The host function: runs after the copy, before everything enqueued below.
    let (host_results, host_value, host_report) = (
        Arc::clone(&results),
        Arc::clone(&value_for_kernel_2),
        Arc::clone(&report),
    );
    host_launch(&stream, move || {
        let correct = (0..N)
            .filter(|&i| host_results.get(i) == i * MULTIPLIER)
            .count();
        host_value.set(0, ADDEND);
        *host_report.lock().unwrap() = Some((correct, std::thread::current().id()));
    })
    .map_err(|e| e.to_string())?;

    // Kernel 2 adds what the host function wrote: data[i] += value.
    copy_to_device(driver, &scalar, &value_for_kernel_2, &stream)?;
    // SAFETY: `data` holds N words and `scalar` one; both are freed after the stream is
    // synchronized.
    unsafe { work.add_scalar(&stream, &data, &scalar, N) }?;
    copy_to_host(driver, &results, &data, &stream)?;
    stream.synchronize().map_err(|e| e.to_string())?;

    let (correct, host_thread) = report
        .lock()
        .unwrap()
        .take()
        .ok_or("the host function did not run")?;
    println!(
        "kernel 1 filled {N} values; the host function (on driver thread {host_thread:?}) found \
         {correct} of them correct and wrote {ADDEND}"
    );
    let seen = (0..N)
        .filter(|&i| results.get(i) == i * MULTIPLIER + ADDEND)
        .count();
    println!("kernel 2 ran after it: {seen} of {N} values are i * {MULTIPLIER} + {ADDEND}");
    println!(
        "the closure's captured values were dropped by stream.synchronize() on {:?}",
        std::thread::current().id()
    );
    if correct != N as usize || seen != N as usize {
        return Err("the values are wrong: stream order was not kept".to_owned());
    }
    Ok(())
}

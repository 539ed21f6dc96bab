//! A CPU stage feeding a GPU stage through timelines, with no synchronize and no host function.
//!
//! All the GPU work is enqueued up front: for each batch, the stream waits until the timeline
//! `filled` reaches the batch's number, copies the batch's pinned input to the device, adds a
//! constant to it, copies it back to pinned output and raises the timeline `done` to the batch's
//! number. A producer thread then fills the input buffers one after the other and signals
//! `filled` after each; the host awaits `done` for each batch and checks its results. The stream
//! waits in the GPU's front end (a stream memory wait on pinned memory), not in a host function,
//! so no driver thread is blocked meanwhile.
//!
//! Run: `cargo run --example timeline`. On a machine without a GPU it runs on the software
//! driver of cuda-host-testing, with stand-ins for the kernels (`common`), and says so on its
//! first line; `CUDA_TEST_DRIVER=real` or `software` picks the driver.

mod common;

use common::{DeviceBuffer, PinnedBuffer, Work, copy_to_device, copy_to_host};
use cuda_host::{Stream, StreamFlags, timeline::Timeline};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

const BATCHES: u32 = 4;
const N: u32 = 1 << 20;
const ADDED: u32 = 1000;

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            eprintln!("timeline: {reason}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), String> {
    let (selected, device) = common::open("timeline", true)?;
    let driver = selected.driver();
    let context = device.primary_context().map_err(|e| e.to_string())?;
    let stream = Stream::new(&context, StreamFlags::NonBlocking).map_err(|e| e.to_string())?;
    context.bind_to_thread().map_err(|e| e.to_string())?;
    let work = Work::load(selected, driver)?;
    let filled = Timeline::new(&context, 0).map_err(|e| e.to_string())?;
    let done = Timeline::new(&context, 0).map_err(|e| e.to_string())?;

    let scalar = DeviceBuffer::new(driver, 4)?;
    let scalar_host = PinnedBuffer::new(driver, 1)?;
    scalar_host.set(0, ADDED);
    copy_to_device(driver, &scalar, &scalar_host, &stream)?;
    let mut inputs = Vec::new();
    let mut outputs = Vec::new();
    let mut buffers = Vec::new();
    for batch in 1..=BATCHES {
        let (input, output) = (
            PinnedBuffer::new(driver, N as usize)?,
            PinnedBuffer::new(driver, N as usize)?,
        );
        let data = DeviceBuffer::new(driver, N as usize * 4)?;
        let value = u64::from(batch);
        filled
            .enqueue_wait(&stream, value)
            .map_err(|e| e.to_string())?;
        copy_to_device(driver, &data, &input, &stream)?;
        // SAFETY: `data` holds N words and `scalar` one, both kept until `done` reached the
        // last batch, after all the stream's work.
        unsafe { work.add_scalar(&stream, &data, &scalar, N) }?;
        copy_to_host(driver, &output, &data, &stream)?;
        done.enqueue_signal(&stream, value)
            .map_err(|e| e.to_string())?;
        inputs.push(input);
        outputs.push(output);
        buffers.push(data);
    }
    println!("enqueued {BATCHES} batches, each behind a wait for its input");

    let start = Instant::now();
    let inputs = Arc::new(inputs);
    let producer = std::thread::spawn({
        let (inputs, filled) = (Arc::clone(&inputs), filled.clone());
        move || {
            for (batch, input) in (1..=BATCHES).zip(inputs.iter()) {
                for i in 0..N {
                    input.set(i, batch * N + i);
                }
                filled.signal(u64::from(batch))?;
            }
            Ok::<(), cuda_host::Error>(())
        }
    });

    let mut correct = 0;
    for (batch, output) in (1..=BATCHES).zip(&outputs) {
        let arrived = tokio::time::timeout(Duration::from_secs(60), done.reached(u64::from(batch)))
            .await
            .map_err(|_| format!("batch {batch} did not arrive within 60 s"))?;
        arrived.map_err(|e| e.to_string())?;
        let right = (0..N).all(|i| output.get(i) == batch * N + i + ADDED);
        correct += u32::from(right);
        println!(
            "batch {batch} arrived after {:?}: {}",
            start.elapsed(),
            if right { "correct" } else { "WRONG" }
        );
    }
    producer
        .join()
        .map_err(|_| "the producer panicked".to_owned())?
        .map_err(|e| e.to_string())?;
    if correct != BATCHES {
        return Err(format!("{correct} of {BATCHES} batches correct"));
    }
    println!("all {BATCHES} batches correct, with no synchronize and no host function of ours");
    Ok(())
}

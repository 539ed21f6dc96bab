//! cuda-host on cudarc's context and stream, in safe code: cudarc creates the stream and the
//! device work, and cuda-host runs a Rust closure in the stream's order (cuda-host's `cudarc`
//! feature).
//!
//! Run: `cargo run --example cudarc_interop --features cuda-host/cudarc` (this workspace's suite
//! turns the feature on by default). Without a CUDA driver and GPU it prints one line saying why
//! and exits with status 1.

use cuda_host::{Context, Device, Stream, host_launch};
use cudarc::driver::CudaContext;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            eprintln!("cudarc_interop: {reason}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    // cuda-host first: it reports a missing driver or device as a one-line error, where cudarc
    // panics.
    let driver = cuda_host::driver().map_err(|e| format!("no CUDA driver: {e}"))?;
    Device::get(driver, 0).map_err(|e| format!("no CUDA device: {e}"))?;

    let cudarc_context = CudaContext::new(0).map_err(cudarc_error)?;
    // Holds cudarc's context, after checking that cudarc opened the same driver library.
    let context = Context::from_cudarc(driver, &cudarc_context).map_err(|e| e.to_string())?;
    let cudarc_stream = cudarc_context.new_stream().map_err(cudarc_error)?;
    // Holds cudarc's stream, after checking that it belongs to `context`; dropping it leaves the
    // stream to cudarc.
    let stream = Stream::from_cudarc(&context, &cudarc_stream).map_err(|e| e.to_string())?;

    let values: Vec<u32> = (0..1024).collect();
    let on_device = cudarc_stream.clone_htod(&values).map_err(cudarc_error)?;
    let seen = Arc::new(Mutex::new(None));
    let host_seen = Arc::clone(&seen);
    host_launch(&stream, move || {
        *host_seen.lock().unwrap() = Some(std::thread::current().id());
    })
    .map_err(|e| e.to_string())?;
    let back = cudarc_stream.clone_dtoh(&on_device).map_err(cudarc_error)?;
    stream.synchronize().map_err(|e| e.to_string())?;

    let ran_on = seen
        .lock()
        .unwrap()
        .ok_or("the host function did not run")?;
    println!(
        "cudarc's stream {:p}: copied 1024 values up, ran a cuda-host closure (on {ran_on:?}), \
         copied them back: {}",
        stream.as_raw(),
        if back == values { "equal" } else { "different" }
    );
    if back != values {
        return Err("the values came back changed".to_owned());
    }
    Ok(())
}

fn cudarc_error(error: cudarc::driver::DriverError) -> String {
    format!("cudarc: {error:?}")
}

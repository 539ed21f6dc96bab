//! cuda-host on a stream made by another library: cudarc creates the stream and the device work,
//! cuda-host borrows the stream (without taking it over) to run a Rust closure in its order.
//!
//! Run: `cargo run --example cudarc_interop`. Without a CUDA driver and GPU it prints one line
//! saying why and exits with status 1.

use cuda_host::cuda_host_sys::CUstream;
use cuda_host::{Device, Stream, host_launch};
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
    // cuda-host first: it reports a missing driver as a one-line error, where cudarc panics.
    let driver = cuda_host::driver().map_err(|e| format!("no CUDA driver: {e}"))?;
    let context = Device::get(driver, 0)
        .and_then(|device| device.primary_context())
        .map_err(|e| format!("no CUDA device: {e}"))?;

    let cudarc_context = cudarc::driver::CudaContext::new(0).map_err(cudarc_error)?;
    if cudarc_context.cu_ctx().addr() != context.as_raw().addr() {
        return Err("cudarc and cuda-host see different primary contexts".to_owned());
    }
    let cudarc_stream = cudarc_context.new_stream().map_err(cudarc_error)?;
    // SAFETY: the handle is a stream of the same (primary) context, and `cudarc_stream` outlives
    // `stream`, which is declared after it and so dropped first; dropping `stream` leaves the
    // stream to cudarc.
    let stream = unsafe {
        Stream::borrow_raw(
            &context,
            cudarc_stream.cu_stream().cast::<std::ffi::c_void>() as CUstream,
        )
    };

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

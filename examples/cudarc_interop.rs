//! cuda-host on cudarc's context and stream, in safe code: cudarc creates the stream and the
//! device work, and cuda-host runs a Rust closure in the stream's order (cuda-host's `cudarc`
//! feature).
//!
//! Run: `cargo run --example cudarc_interop --features cuda-host/cudarc` (this workspace's suite
//! turns the feature on by default). On a machine without a GPU it runs on the software driver
//! of cuda-host-testing, and says so on its first line: in a child process whose
//! `LD_LIBRARY_PATH` leads to the software driver as `libcuda.so.1`, since cudarc opens libcuda
//! by name. `CUDA_TEST_DRIVER=real` or `software` picks the driver.

mod common;

use cuda_host::{Context, Stream, host_launch};
use cudarc::driver::CudaContext;
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

/// Set in the child process that runs on the software driver under libcuda's name.
const IN_CHILD: &str = "CUDARC_INTEROP_IN_CHILD";

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(reason) => {
            eprintln!("cudarc_interop: {reason}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<ExitCode, String> {
    // SAFETY: NVIDIA's driver is opened as cuda_host::driver() opens it; the software driver is
    // the library cuda-host-testing built.
    let selected = unsafe { cuda_host_testing::select_driver() }
        .map_err(|e| format!("no CUDA driver: {e}"))?;
    let installed_by_path =
        Path::new(selected.driver().library_name()) == cuda_host_testing::library_path();
    if selected.is_software() && installed_by_path && std::env::var_os(IN_CHILD).is_none() {
        // cudarc would not find it: run again where libcuda.so.1 is the software driver.
        let libcuda = cuda_host_testing::LibcudaDir::new().map_err(|e| e.to_string())?;
        let status =
            std::process::Command::new(std::env::current_exe().map_err(|e| e.to_string())?)
                .env(IN_CHILD, "1")
                .env("LD_LIBRARY_PATH", libcuda.ld_library_path())
                .status()
                .map_err(|e| format!("cannot run on the software driver as libcuda: {e}"))?;
        return Ok(if status.success() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    // cuda-host first: it reports a missing driver or device as a one-line error, where cudarc
    // panics.
    let (selected, _device) = common::open("cudarc_interop", false)?;
    let driver = selected.driver();

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
    Ok(ExitCode::SUCCESS)
}

fn cudarc_error(error: cudarc::driver::DriverError) -> String {
    format!("cudarc: {error:?}")
}

//! Prints what cuda-host-sys found: the driver library and version, the devices, where the
//! bindings came from and the header version, and which entry points the driver lacks.
//!
//! Run: `cargo run --example driver_info`. On a machine without a GPU it prints what it finds in
//! the software driver of cuda-host-testing, and says so on its first line;
//! `CUDA_TEST_DRIVER=real` or `software` picks the driver.

mod common;

use cuda_host_sys::{Availability, BINDINGS_ORIGIN, CUDA_VERSION, CUresult, Driver, version_text};
use std::ffi::{CStr, c_char};
use std::process::ExitCode;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            eprintln!("driver_info: {reason}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let (selected, _device) = common::open("driver_info", false)?;
    let driver = selected.driver();
    println!(
        "bindings: {BINDINGS_ORIGIN}, CUDA {} headers (CUDA_VERSION {CUDA_VERSION})",
        version_text(CUDA_VERSION as i32)
    );
    println!(
        "driver: {} reports CUDA {} ({})",
        driver.library_name(),
        version_text(driver.version()),
        driver.version()
    );
    let (mut available, mut newer, mut absent) = (0, Vec::new(), Vec::new());
    for (entry, availability, _) in driver.entry_points() {
        match availability {
            Availability::Available => available += 1,
            Availability::NeedsNewerDriver { .. } => newer.push(entry.name()),
            _ => absent.push(entry.name()),
        }
    }
    println!(
        "entry points: {available} available, {} need a newer driver, {} not in this driver",
        newer.len(),
        absent.len()
    );
    if !newer.is_empty() {
        println!("  newer than this driver: {}", newer.join(", "));
    }

    // SAFETY: no pointer arguments.
    check(driver, "cuInit", unsafe { driver.cuInit(0) })?;
    let mut count = 0;
    // SAFETY: `count` is a valid out-pointer.
    check(driver, "cuDeviceGetCount", unsafe {
        driver.cuDeviceGetCount(&mut count)
    })?;
    println!("devices: {count}");
    for ordinal in 0..count {
        let mut device = 0;
        // SAFETY: `device` is a valid out-pointer.
        check(driver, "cuDeviceGet", unsafe {
            driver.cuDeviceGet(&mut device, ordinal)
        })?;
        let mut name = [0 as c_char; 256];
        // SAFETY: the buffer holds the 256 bytes passed.
        let result = unsafe { driver.cuDeviceGetName(name.as_mut_ptr(), 256, device) };
        check(driver, "cuDeviceGetName", result)?;
        // SAFETY: the driver wrote a NUL-terminated name into the buffer.
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy();
        println!("  device {ordinal}: {name}");
    }
    if count == 0 {
        return Err("the driver loaded but has no device".to_owned());
    }
    Ok(())
}

fn check(driver: &Driver, call: &'static str, result: CUresult) -> Result<(), String> {
    driver.check(call, result).map_err(|e| e.to_string())
}

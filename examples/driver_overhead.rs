//! What the driver table costs: loading it (open `libcuda` and resolve every entry point, without
//! `cuInit`, each in a fresh process), and a call through it against a direct call through the
//! pointer the platform loader gives.
//!
//! Run: `cargo run --release --example driver_overhead`. It uses the library the process-wide
//! driver would (`CUDA_SYS_LIBCUDA`, then `libcuda.so.1`, `libcuda.so`).

use cuda_host_sys::{CUcontext, CUresult, Driver, LoadOptions};
use std::hint::black_box;
use std::process::{Command, ExitCode};
use std::time::Instant;

const CHILD_ARGUMENT: &str = "--measure-load-once";
const LOAD_PROCESSES: usize = 21;
const CALLS: usize = 10_000_000;
const REPETITIONS: usize = 7;

fn main() -> ExitCode {
    let result = if std::env::args().any(|argument| argument == CHILD_ARGUMENT) {
        measure_load_once()
    } else {
        measure_load().and_then(|()| measure_calls())
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            eprintln!("driver_overhead: {reason}");
            ExitCode::FAILURE
        }
    }
}

/// The library the process-wide driver would open first.
fn library_name() -> Result<String, String> {
    let driver = Driver::load(&LoadOptions::default()).map_err(|e| format!("no driver: {e}"))?;
    Ok(driver.library_name().to_owned())
}

/// In a fresh process: microseconds to open the library, then to resolve the table.
fn measure_load_once() -> Result<(), String> {
    let name = std::env::var("DRIVER_OVERHEAD_LIBRARY").map_err(|e| e.to_string())?;
    let start = Instant::now();
    // SAFETY: opening the driver library, as every CUDA program does.
    let library = unsafe { libloading::Library::new(&name) }.map_err(|e| e.to_string())?;
    let opened = Instant::now();
    // Opening again returns the loaded library; what is measured is the table's resolution.
    let driver = Driver::open(&name).map_err(|e| e.to_string())?;
    let ready = Instant::now();
    println!(
        "{:.1} {:.1}",
        (opened - start).as_secs_f64() * 1e6,
        (ready - opened).as_secs_f64() * 1e6
    );
    drop((driver, library));
    Ok(())
}

fn measure_load() -> Result<(), String> {
    let name = library_name()?;
    let executable = std::env::current_exe().map_err(|e| e.to_string())?;
    let (mut open, mut table) = (Vec::new(), Vec::new());
    for _ in 0..LOAD_PROCESSES {
        let output = Command::new(&executable)
            .arg(CHILD_ARGUMENT)
            .env("DRIVER_OVERHEAD_LIBRARY", &name)
            .output()
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&output.stdout);
        let mut fields = text.split_whitespace().map(str::parse::<f64>);
        match (fields.next(), fields.next()) {
            (Some(Ok(o)), Some(Ok(t))) => {
                open.push(o);
                table.push(t);
            }
            _ => return Err(format!("a measuring process failed: {text}")),
        }
    }
    println!("loading {name}, each in a fresh process, median of {LOAD_PROCESSES}:");
    println!(
        "  open the library:            {:8.3} ms",
        median(&mut open) / 1e3
    );
    println!(
        "  resolve the table, extra:    {:8.3} ms  (target: at most 0.300 ms)",
        median(&mut table) / 1e3
    );
    Ok(())
}

fn measure_calls() -> Result<(), String> {
    let driver = cuda_host_sys::driver().map_err(|e| e.to_string())?;
    // SAFETY: no pointer arguments.
    let result = unsafe { driver.cuInit(0) };
    driver.check("cuInit", result).map_err(|e| e.to_string())?;
    // SAFETY: reopening the loaded driver library.
    let library =
        unsafe { libloading::Library::new(driver.library_name()) }.map_err(|e| e.to_string())?;
    // SAFETY: `cuCtxGetCurrent` has this C signature.
    let direct: unsafe extern "C" fn(*mut CUcontext) -> CUresult =
        *unsafe { library.get(c"cuCtxGetCurrent") }.map_err(|e| e.to_string())?;

    let mut context: CUcontext = std::ptr::null_mut();
    let time = |call: &mut dyn FnMut()| {
        let start = Instant::now();
        for _ in 0..CALLS {
            call();
        }
        start.elapsed().as_secs_f64() * 1e9 / CALLS as f64
    };
    let (mut pointer, mut table, mut free) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..REPETITIONS {
        pointer.push(time(&mut || {
            // SAFETY: `context` is a valid out-pointer.
            black_box(unsafe { black_box(direct)(&mut context) });
        }));
        table.push(time(&mut || {
            // SAFETY: as above.
            black_box(unsafe { black_box(driver).cuCtxGetCurrent(&mut context) });
        }));
        free.push(time(&mut || {
            // SAFETY: as above.
            black_box(unsafe { cuda_host_sys::cuCtxGetCurrent(&mut context) });
        }));
    }
    let (pointer, table, free) = (median(&mut pointer), median(&mut table), median(&mut free));
    println!("cuCtxGetCurrent, median of {REPETITIONS} runs of {CALLS} calls:");
    println!("  direct pointer (dlsym):      {pointer:8.2} ns");
    println!(
        "  through the table:           {table:8.2} ns  ({:+.2} ns; target: at most +1 ns)",
        table - pointer
    );
    println!(
        "  free function (process-wide):{free:8.2} ns  ({:+.2} ns)",
        free - pointer
    );
    Ok(())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

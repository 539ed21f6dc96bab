//! A host function ordered between two kernels.
//!
//! Kernel 1 fills a device buffer; the buffer is copied to pinned host memory; a Rust closure,
//! launched with `host_launch`, checks those values in stream order and writes a number to
//! pinned memory; that number is copied to the device and kernel 2 adds it to every value. The
//! kernels are PTX text (`examples/kernels/`), loaded with `cuModuleLoadData`: no nvcc needed.
//!
//! Run: `cargo run --example host_launch`. Without a CUDA driver and GPU it prints one line saying
//! why and exits with status 1.

use cuda_host::cuda_host_sys::{CUdeviceptr, CUfunction, CUmodule, Driver};
use cuda_host::{Device, Stream, StreamFlags, host_launch};
use std::ffi::{CString, c_void};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

const PTX: &str = include_str!("kernels/kernels.ptx");
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
    let driver = cuda_host::driver().map_err(|e| format!("no CUDA driver: {e}"))?;
    let device = Device::get(driver, 0).map_err(|e| format!("no CUDA device: {e}"))?;
    let name = device.name().map_err(|e| e.to_string())?;
    println!(
        "device 0: {name} (CUDA {} driver)",
        cuda_host::cuda_host_sys::version_text(driver.version())
    );
    let context = device.primary_context().map_err(|e| e.to_string())?;
    let stream = Stream::new(&context, StreamFlags::NonBlocking).map_err(|e| e.to_string())?;
    let kernels = Kernels::load(driver).map_err(|e| format!("cannot load the kernels: {e}"))?;

    let bytes = N as usize * 4;
    let data = DeviceBuffer::new(driver, bytes)?;
    let scalar = DeviceBuffer::new(driver, 4)?;
    let results = Arc::new(PinnedBuffer::new(driver, N as usize)?);
    let value_for_kernel_2 = Arc::new(PinnedBuffer::new(driver, 1)?);
    let report = Arc::new(Mutex::new(None));

    // Kernel 1: data[i] = i * MULTIPLIER, then copy the values to the host.
    kernels.launch(
        kernels.fill_iota,
        &stream,
        &[argument(&data.address), argument(&N), argument(&MULTIPLIER)],
    )?;
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
    kernels.launch(
        kernels.add_scalar,
        &stream,
        &[
            argument(&data.address),
            argument(&scalar.address),
            argument(&N),
        ],
    )?;
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

struct Kernels<'driver> {
    driver: &'driver Driver,
    module: CUmodule,
    fill_iota: CUfunction,
    add_scalar: CUfunction,
}

impl<'driver> Kernels<'driver> {
    fn load(driver: &'driver Driver) -> Result<Self, String> {
        let ptx = CString::new(PTX).map_err(|e| e.to_string())?;
        let mut module = std::ptr::null_mut();
        // SAFETY: NUL-terminated PTX text; `module` is a valid out-pointer. The stream's context
        // was made current by `Stream::new`.
        let result = unsafe { driver.cuModuleLoadData(&mut module, ptx.as_ptr().cast()) };
        driver
            .check("cuModuleLoadData", result)
            .map_err(|e| e.to_string())?;
        let function = |name: &std::ffi::CStr| {
            let mut function = std::ptr::null_mut();
            // SAFETY: `module` is loaded; `function` is a valid out-pointer.
            let result =
                unsafe { driver.cuModuleGetFunction(&mut function, module, name.as_ptr()) };
            driver
                .check("cuModuleGetFunction", result)
                .map(|()| function)
                .map_err(|e| e.to_string())
        };
        Ok(Kernels {
            driver,
            module,
            fill_iota: function(c"fill_iota")?,
            add_scalar: function(c"add_scalar")?,
        })
    }

    /// Launches `function` over N threads. `arguments` must match the kernel's parameters.
    fn launch(
        &self,
        function: CUfunction,
        stream: &Stream,
        arguments: &[*mut c_void],
    ) -> Result<(), String> {
        let mut pointers = arguments.to_vec();
        // SAFETY: both kernels take (pointer, pointer or u32, u32) and the callers pass exactly
        // those; the device buffers outlive the stream's work (synchronized before they drop).
        let result = unsafe {
            self.driver.cuLaunchKernel(
                function,
                N.div_ceil(256),
                1,
                1,
                256,
                1,
                1,
                0,
                stream.as_raw(),
                pointers.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        self.driver
            .check("cuLaunchKernel", result)
            .map_err(|e| e.to_string())
    }
}

impl Drop for Kernels<'_> {
    fn drop(&mut self) {
        // SAFETY: loaded in `load`, unloaded once.
        let _ = unsafe { self.driver.cuModuleUnload(self.module) };
    }
}

/// A kernel argument as `cuLaunchKernel` takes it: the address of the value.
fn argument<T>(value: &T) -> *mut c_void {
    (value as *const T).cast_mut().cast()
}

struct DeviceBuffer<'driver> {
    driver: &'driver Driver,
    address: CUdeviceptr,
}

impl<'driver> DeviceBuffer<'driver> {
    fn new(driver: &'driver Driver, bytes: usize) -> Result<Self, String> {
        let mut address = 0;
        // SAFETY: `address` is a valid out-pointer; the context is current.
        let result = unsafe { driver.cuMemAlloc_v2(&mut address, bytes) };
        driver
            .check("cuMemAlloc_v2", result)
            .map_err(|e| e.to_string())?;
        Ok(DeviceBuffer { driver, address })
    }
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once, after the stream was synchronized.
        let _ = unsafe { self.driver.cuMemFree_v2(self.address) };
    }
}

/// Page-locked host memory of `u32`s, which copies can reach asynchronously.
struct PinnedBuffer {
    driver: Arc<Driver>,
    words: *mut u32,
    len: usize,
}

// SAFETY: plain memory; the host function and this thread touch it at different points of the
// stream's order, which the stream enforces.
unsafe impl Send for PinnedBuffer {}
// SAFETY: as above.
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    fn new(driver: &Arc<Driver>, len: usize) -> Result<Self, String> {
        let mut words = std::ptr::null_mut();
        // SAFETY: `words` is a valid out-pointer; the context is current.
        let result = unsafe { driver.cuMemAllocHost_v2(&mut words, len * 4) };
        driver
            .check("cuMemAllocHost_v2", result)
            .map_err(|e| e.to_string())?;
        Ok(PinnedBuffer {
            driver: Arc::clone(driver),
            words: words.cast(),
            len,
        })
    }

    fn get(&self, index: u32) -> u32 {
        assert!((index as usize) < self.len);
        // SAFETY: in bounds; the stream orders this read after the copy that wrote it.
        unsafe { self.words.add(index as usize).read_volatile() }
    }

    fn set(&self, index: u32, value: u32) {
        assert!((index as usize) < self.len);
        // SAFETY: in bounds; the stream orders the copy that reads it after this write.
        unsafe { self.words.add(index as usize).write_volatile(value) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once.
        let _ = unsafe { self.driver.cuMemFreeHost(self.words.cast()) };
    }
}

fn copy_to_host(
    driver: &Driver,
    host: &PinnedBuffer,
    device: &DeviceBuffer<'_>,
    stream: &Stream,
) -> Result<(), String> {
    // SAFETY: both buffers hold `host.len` words and outlive the stream's work.
    let result = unsafe {
        driver.cuMemcpyDtoHAsync_v2(
            host.words.cast(),
            device.address,
            host.len * 4,
            stream.as_raw(),
        )
    };
    driver
        .check("cuMemcpyDtoHAsync_v2", result)
        .map_err(|e| e.to_string())
}

fn copy_to_device(
    driver: &Driver,
    device: &DeviceBuffer<'_>,
    host: &PinnedBuffer,
    stream: &Stream,
) -> Result<(), String> {
    // SAFETY: both buffers hold `host.len` words and outlive the stream's work.
    let result = unsafe {
        driver.cuMemcpyHtoDAsync_v2(
            device.address,
            host.words.cast(),
            host.len * 4,
            stream.as_raw(),
        )
    };
    driver
        .check("cuMemcpyHtoDAsync_v2", result)
        .map_err(|e| e.to_string())
}

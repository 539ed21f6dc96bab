//! What the examples share: the PTX kernels (`kernels/` at the workspace root, which the tests
//! load too), device and pinned buffers, and copies between them, written with the raw driver API
//! (cuda-host only covers what host functions need).

#![allow(dead_code)] // each example uses a part

use cuda_host::Stream;
use cuda_host::cuda_host_sys::{CUdeviceptr, CUfunction, Driver};
use std::ffi::c_void;
use std::sync::Arc;

#[path = "../../kernels/load.rs"]
mod kernels;

pub use kernels::Kernels;

/// Launches `function` over `threads` threads, in blocks of 256.
///
/// # Safety
/// `arguments` must match the kernel's parameters, and the buffers they name must outlive the
/// stream's work.
pub unsafe fn launch(
    kernels: &Kernels<'_>,
    function: CUfunction,
    threads: u32,
    stream: &Stream,
    arguments: &[*mut c_void],
) -> Result<(), String> {
    let mut arguments = arguments.to_vec();
    // SAFETY: the caller passes the kernel's parameters, with buffers that outlive the work.
    unsafe {
        kernels.launch(
            function,
            threads.div_ceil(256),
            256,
            stream.as_raw(),
            &mut arguments,
        )
    }
    .map_err(|e| e.to_string())
}

/// A kernel argument as `cuLaunchKernel` takes it: the address of the value.
pub fn argument<T>(value: &T) -> *mut c_void {
    (value as *const T).cast_mut().cast()
}

pub struct DeviceBuffer<'driver> {
    driver: &'driver Driver,
    pub address: CUdeviceptr,
}

impl<'driver> DeviceBuffer<'driver> {
    pub fn new(driver: &'driver Driver, bytes: usize) -> Result<Self, String> {
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
pub struct PinnedBuffer {
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
    pub fn new(driver: &Arc<Driver>, len: usize) -> Result<Self, String> {
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

    pub fn get(&self, index: u32) -> u32 {
        assert!((index as usize) < self.len);
        // SAFETY: in bounds; the stream orders this read after the copy that wrote it.
        unsafe { self.words.add(index as usize).read_volatile() }
    }

    pub fn set(&self, index: u32, value: u32) {
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

pub fn copy_to_host(
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

pub fn copy_to_device(
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

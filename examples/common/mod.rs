//! What the examples share: the driver they run on (a GPU's, else cuda-host-testing's software
//! driver), the device work they enqueue (the PTX kernels of `kernels/` at the workspace root,
//! which the tests load too, or stand-ins for them on the software driver, which runs no
//! kernels), device and pinned buffers, and copies between them, written with the raw driver API
//! (cuda-host only covers what host functions need).

#![allow(dead_code)] // each example uses a part

use cuda_host::sys::{CUdeviceptr, CUfunction, CUresult, Driver};
use cuda_host::{Device, Stream};
use cuda_host_testing::SelectedDriver;
use std::ffi::c_void;
use std::sync::Arc;

#[path = "../../kernels/load.rs"]
mod kernels;

use kernels::Kernels;

/// The driver an example runs on: NVIDIA's when it has a device, else the software driver
/// (cuda-host-testing's selector, which `CUDA_TEST_DRIVER` overrides), and its device 0. Prints
/// the example's first line, which says which (and, for an example that `runs_kernels`, that
/// they are stand-ins on the software driver).
pub fn open(
    example: &str,
    runs_kernels: bool,
) -> Result<(&'static SelectedDriver, Device), String> {
    // SAFETY: NVIDIA's driver is opened as cuda_host::driver() opens it; the software driver is
    // the library cuda-host-testing built, whose initialisation only sets up its own state.
    let selected = unsafe { cuda_host_testing::select_driver() }
        .map_err(|e| format!("no CUDA driver: {e}"))?;
    let driver = selected.driver();
    let device = Device::get(driver, 0).map_err(|e| format!("no CUDA device: {e}"))?;
    let name = device.name().map_err(|e| e.to_string())?;
    let version = cuda_host::sys::version_text(driver.version());
    if selected.is_software() {
        let kernels = if runs_kernels {
            ": the kernels are stand-ins, run by the driver's host-function thread"
        } else {
            ""
        };
        println!(
            "{example} on the software driver of cuda-host-testing ({name}, CUDA {version}), \
             no GPU{kernels}"
        );
    } else {
        println!("{example} on device 0: {name} (CUDA {version} driver)");
    }
    Ok((selected, device))
}

/// The device work the examples enqueue: the kernels on a GPU, stand-ins for them on the
/// software driver, which runs no device code. A stand-in does what its kernel does, in stream
/// order, as a host function enqueued with the driver's `cuLaunchHostFunc` (so a capture takes it
/// as a node, as it takes a kernel), on device memory that the software driver keeps in host
/// memory.
pub enum Work<'driver> {
    /// The PTX kernels, loaded into the current context.
    Kernels(Kernels<'driver>),
    /// Their stand-ins.
    StandIns(&'driver Driver),
}

/// What a stand-in is given: a kernel's arguments.
#[derive(Clone, Copy)]
enum StandIn {
    FillIota {
        out: CUdeviceptr,
        n: u32,
        mul: u32,
    },
    AddScalar {
        data: CUdeviceptr,
        scalar: CUdeviceptr,
        n: u32,
    },
}

/// The host function of a stand-in.
///
/// # Safety
/// `arguments` is a live `StandIn` whose addresses are the software driver's device memory,
/// which is host memory, valid for what the kernel would do.
unsafe extern "C" fn stand_in(arguments: *mut c_void) {
    // SAFETY: per the contract above.
    match unsafe { *arguments.cast::<StandIn>() } {
        StandIn::FillIota { out, n, mul } => {
            let out = out as *mut u32;
            for i in 0..n {
                // SAFETY: `out` holds `n` words.
                unsafe { out.add(i as usize).write(i.wrapping_mul(mul)) };
            }
        }
        StandIn::AddScalar { data, scalar, n } => {
            let (data, scalar) = (data as *mut u32, scalar as *const u32);
            // SAFETY: `scalar` holds one word, `data` `n`.
            let addend = unsafe { scalar.read() };
            for i in 0..n {
                // SAFETY: as above.
                unsafe {
                    let word = data.add(i as usize);
                    word.write(word.read().wrapping_add(addend));
                }
            }
        }
    }
}

impl<'driver> Work<'driver> {
    /// The kernels, loaded into the calling thread's current context, on a GPU; the stand-ins on
    /// the software driver.
    pub fn load(selected: &SelectedDriver, driver: &'driver Driver) -> Result<Self, String> {
        if selected.is_software() {
            return Ok(Work::StandIns(driver));
        }
        Kernels::load(driver)
            .map(Work::Kernels)
            .map_err(|e| format!("cannot load the kernels: {e}"))
    }

    /// Enqueues `fill_iota`: `out[i] = i * mul` for the `n` words of `out`.
    ///
    /// # Safety
    /// `out` must hold `n` words until the stream has run the work.
    pub unsafe fn fill_iota(
        &self,
        stream: &Stream,
        out: &DeviceBuffer<'_>,
        n: u32,
        mul: u32,
    ) -> Result<(), String> {
        match self {
            // SAFETY: `fill_iota(unsigned *out, unsigned n, unsigned mul)`; the caller keeps
            // `out` alive.
            Work::Kernels(kernels) => unsafe {
                launch(
                    kernels,
                    kernels.fill_iota,
                    n,
                    stream,
                    &[argument(&out.address), argument(&n), argument(&mul)],
                )
            },
            Work::StandIns(driver) => launch_stand_in(
                driver,
                stream,
                StandIn::FillIota {
                    out: out.address,
                    n,
                    mul,
                },
            ),
        }
    }

    /// Enqueues `add_scalar`: `data[i] += *scalar` for the `n` words of `data`.
    ///
    /// # Safety
    /// `data` must hold `n` words and `scalar` one until the stream has run the work.
    pub unsafe fn add_scalar(
        &self,
        stream: &Stream,
        data: &DeviceBuffer<'_>,
        scalar: &DeviceBuffer<'_>,
        n: u32,
    ) -> Result<(), String> {
        match self {
            // SAFETY: `add_scalar(unsigned *data, const unsigned *scalar, unsigned n)`; the
            // caller keeps both buffers alive.
            Work::Kernels(kernels) => unsafe {
                launch(
                    kernels,
                    kernels.add_scalar,
                    n,
                    stream,
                    &[
                        argument(&data.address),
                        argument(&scalar.address),
                        argument(&n),
                    ],
                )
            },
            Work::StandIns(driver) => launch_stand_in(
                driver,
                stream,
                StandIn::AddScalar {
                    data: data.address,
                    scalar: scalar.address,
                    n,
                },
            ),
        }
    }
}

/// Enqueues the stand-in with `arguments`, which live as long as the process: a graph captured
/// with it may run it any number of times.
fn launch_stand_in(driver: &Driver, stream: &Stream, arguments: StandIn) -> Result<(), String> {
    let arguments: &'static StandIn = Box::leak(Box::new(arguments));
    let data = (arguments as *const StandIn).cast_mut().cast();
    // SAFETY: `stand_in` reads `arguments`, which are never freed, as its contract says; on the
    // software driver device addresses are host addresses.
    let result = unsafe { driver.cuLaunchHostFunc(stream.as_raw(), Some(stand_in), data) };
    check(driver, "cuLaunchHostFunc", result)
}

fn check(driver: &Driver, call: &'static str, result: CUresult) -> Result<(), String> {
    driver.check(call, result).map_err(|e| e.to_string())
}

/// Launches `function` over `threads` threads, in blocks of 256.
///
/// # Safety
/// `arguments` must match the kernel's parameters, and the buffers they name must outlive the
/// stream's work.
unsafe fn launch(
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
fn argument<T>(value: &T) -> *mut c_void {
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
        // SAFETY: `words` is a valid out-pointer; the context is current. Flags 0: what
        // `cuMemAllocHost` allocates (the software driver has only this form).
        let result = unsafe { driver.cuMemHostAlloc(&mut words, len * 4, 0) };
        check(driver, "cuMemHostAlloc", result)?;
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

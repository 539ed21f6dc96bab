//! The PTX kernels of `examples/kernels/`, for tests that run real device work.

use cuda_host_sys::{CUfunction, CUmodule, CUstream, Driver, Error};
use std::ffi::{CStr, CString, c_void};
use std::ptr;

/// The PTX text (see `examples/kernels/README.md` for how it was made).
pub const PTX: &str = include_str!("../../examples/kernels/kernels.ptx");

/// The kernels, loaded into the current context.
#[derive(Debug)]
pub struct Kernels<'driver> {
    driver: &'driver Driver,
    module: CUmodule,
    /// `fill_iota(unsigned *out, unsigned n, unsigned mul)`: `out[i] = i * mul`.
    pub fill_iota: CUfunction,
    /// `add_scalar(unsigned *data, const unsigned *scalar, unsigned n)`: `data[i] += *scalar`.
    pub add_scalar: CUfunction,
    /// `store_to_address(unsigned long long address, unsigned value)`: a store that faults when
    /// the address is invalid.
    pub store_to_address: CUfunction,
    /// `spin_ns(unsigned long long ns)`: keeps one thread busy for `ns` nanoseconds.
    pub spin_ns: CUfunction,
    /// `empty_kernel()`.
    pub empty_kernel: CUfunction,
}

impl<'driver> Kernels<'driver> {
    /// Loads the module into the calling thread's current context.
    ///
    /// # Errors
    /// The driver's error when the module or a function cannot be loaded.
    pub fn load(driver: &'driver Driver) -> Result<Kernels<'driver>, Error> {
        let ptx = CString::new(PTX).expect("PTX text has no NUL");
        let mut module = ptr::null_mut();
        // SAFETY: `module` is a valid out-pointer and the image is NUL-terminated PTX text.
        let result = unsafe { driver.cuModuleLoadData(&mut module, ptx.as_ptr().cast()) };
        driver.check("cuModuleLoadData", result)?;
        let function = |name: &CStr| -> Result<CUfunction, Error> {
            let mut function = ptr::null_mut();
            // SAFETY: `module` was just loaded; `function` is a valid out-pointer.
            let result =
                unsafe { driver.cuModuleGetFunction(&mut function, module, name.as_ptr()) };
            driver
                .check("cuModuleGetFunction", result)
                .map(|()| function)
        };
        Ok(Kernels {
            driver,
            module,
            fill_iota: function(c"fill_iota")?,
            add_scalar: function(c"add_scalar")?,
            store_to_address: function(c"store_to_address")?,
            spin_ns: function(c"spin_ns")?,
            empty_kernel: function(c"empty_kernel")?,
        })
    }

    /// Launches `function` with `blocks` blocks of `threads` threads on `stream`.
    ///
    /// # Safety
    /// `arguments` must point to values of the kernel's parameter types, in order, and any
    /// device pointers among them must be valid for what the kernel does with them.
    ///
    /// # Errors
    /// The driver's error for the launch.
    pub unsafe fn launch(
        &self,
        function: CUfunction,
        blocks: u32,
        threads: u32,
        stream: CUstream,
        arguments: &mut [*mut c_void],
    ) -> Result<(), Error> {
        // SAFETY: the caller guarantees the arguments match the kernel.
        let result = unsafe {
            self.driver.cuLaunchKernel(
                function,
                blocks,
                1,
                1,
                threads,
                1,
                1,
                0,
                stream,
                arguments.as_mut_ptr(),
                ptr::null_mut(),
            )
        };
        self.driver.check("cuLaunchKernel", result)
    }
}

impl Drop for Kernels<'_> {
    fn drop(&mut self) {
        // SAFETY: the module was loaded by `load` and is unloaded once.
        let result = unsafe { self.driver.cuModuleUnload(self.module) };
        if let Err(error) = self.driver.check("cuModuleUnload", result) {
            log::warn!("{error}");
        }
    }
}

/// What [`launch_fault`] needs on the test driver: the kernels, loaded into the current context,
/// on the real driver; nothing on the software driver, whose stand-in needs no module.
///
/// # Panics
/// When the real driver cannot load the PTX.
pub fn for_faults(driver: &Driver) -> Option<Kernels<'_>> {
    (crate::test_driver().kind == crate::DriverKind::Real).then(|| {
        // Modules load into the calling thread's current context.
        crate::context()
            .bind_to_thread()
            .expect("the context binds to this thread");
        Kernels::load(driver).expect("PTX loads")
    })
}

/// Fails the stream's context as a kernel storing to address 0x10 does: with that kernel on the
/// real driver (`kernels` given), with the software driver's stand-in otherwise.
///
/// # Panics
/// When the fault cannot be enqueued.
pub fn launch_fault(stream: &cuda_host::Stream, kernels: Option<&Kernels<'_>>) {
    match kernels {
        Some(kernels) => {
            let mut address = 0x10u64;
            let mut value = 7u32;
            let mut arguments = [(&raw mut address).cast::<c_void>(), (&raw mut value).cast()];
            // SAFETY: the arguments match `store_to_address`; the fault is the point.
            unsafe {
                kernels.launch(
                    kernels.store_to_address,
                    1,
                    1,
                    stream.as_raw(),
                    &mut arguments,
                )
            }
            .expect("the faulting kernel is enqueued");
        }
        None => crate::software::expect_controls()
            .launch_fault(stream, cuda_host_sys::CUresult::CUDA_ERROR_ILLEGAL_ADDRESS),
    }
}

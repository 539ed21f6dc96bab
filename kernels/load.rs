//! Loading and launching the kernels of `kernels.ptx` (made from `kernels.cu`; see `README.md`).
//! The examples (`examples/common/mod.rs`) and the tests (`tests/support/kernels.rs`) include
//! this file as a module of their own.

use cuda_host_sys::{CUfunction, CUmodule, CUstream, Driver, Error};
use std::ffi::{CStr, CString, c_void};
use std::ptr;

/// The PTX text, loaded at run time with `cuModuleLoadData`: no nvcc needed.
pub const PTX: &str = include_str!("kernels.ptx");

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
    /// `bump_counter(unsigned long long address)`: adds 1 to the 32-bit word at `address` (one
    /// thread; not atomic, so launches that may overlap must not share a word).
    pub bump_counter: CUfunction,
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
            bump_counter: function(c"bump_counter")?,
        })
    }

    /// Launches `function` with `blocks` blocks of `threads` threads on `stream`.
    ///
    /// # Safety
    /// `arguments` must point to values of the kernel's parameter types, in order, and any
    /// device pointers among them must be valid for what the kernel does with them until the
    /// stream has run it.
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

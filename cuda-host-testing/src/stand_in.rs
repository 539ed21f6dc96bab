//! Kernels' stand-ins: what runs for a kernel's launch on the software driver, which runs no device
//! code (`driver/stand_in.h` is the C side).
//!
//! A launch of a kernel of a module loaded from PTX runs, in its stream's order on the stream's
//! worker thread, the stand-in registered for the kernel's name, once for the whole grid, with the
//! launch's geometry and its arguments decoded by the kernel's PTX parameters. Device memory is
//! host memory on the software driver: a device pointer among the arguments is an address the
//! stand-in may read and write. A stand-in's error fails the launch's context, as a fault or a
//! failed assertion in the kernel would. A kernel without a stand-in does nothing: its launches
//! are counted ([`Controls::kernels_without_stand_in`](crate::Controls::kernels_without_stand_in))
//! and the first is named in the driver's log.
//!
//! Register stand-ins from Rust with
//! [`Controls::register_stand_in`](crate::Controls::register_stand_in), or from a shared library
//! the driver loads itself, named in [`STAND_INS_VARIABLE`], so that an unmodified program (Rust or
//! not) runs with them: the library exports `cusw_register_stand_ins`, which registers its
//! stand-ins through the function it is given (see `driver/stand_in.h`).

use cuda_host_sys::CUstream;
use std::ffi::{CStr, c_char, c_void};

/// The variable naming the stand-in libraries the software driver loads (paths separated by
/// colons), the first time a launch looks for a stand-in.
pub const STAND_INS_VARIABLE: &str = "CUSW_STAND_INS";

/// One argument of a launch, as the kernel's PTX declares its parameter (`cuswKernelParam`).
#[repr(C)]
#[derive(Debug)]
pub struct KernelParam {
    value: *const c_void,
    size: usize,
    align: usize,
    type_name: *const c_char,
}

/// A launch as its stand-in sees it, during the stand-in's call (`cuswKernelLaunch`).
#[repr(C)]
#[derive(Debug)]
pub struct KernelLaunch {
    size: usize,
    name: *const c_char,
    grid: [u32; 3],
    block: [u32; 3],
    shared_memory_bytes: u32,
    stream: CUstream,
    param_count: usize,
    params: *const KernelParam,
}

/// The types an argument is read as ([`KernelParam::get`]): those every bit pattern of their size
/// is a value of.
pub trait ArgumentValue: Copy + sealed::Sealed {}

mod sealed {
    pub trait Sealed {}
}

macro_rules! argument_values {
    ($($ty:ty),*) => {$(
        impl sealed::Sealed for $ty {}
        impl ArgumentValue for $ty {}
    )*};
}
argument_values!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize, f32, f64);

impl KernelParam {
    /// Its bytes, as the launch passed them.
    pub fn bytes(&self) -> &[u8] {
        if self.size == 0 {
            return &[];
        }
        // SAFETY: the driver hands `size` bytes at `value`, alive during the stand-in's call, which
        // `&self` does not outlive.
        unsafe { std::slice::from_raw_parts(self.value.cast(), self.size) }
    }

    /// Its PTX type, e.g. `.u64` (`.b8` for a struct passed by value).
    pub fn type_name(&self) -> &CStr {
        // SAFETY: the driver hands a NUL-terminated type, alive during the call.
        unsafe { CStr::from_ptr(self.type_name) }
    }

    /// Its alignment in the launch's parameter buffer.
    pub fn align(&self) -> usize {
        self.align
    }

    /// It as a `T` of its size, or `None` when the sizes differ.
    pub fn get<T: ArgumentValue>(&self) -> Option<T> {
        let bytes = self.bytes();
        (bytes.len() == size_of::<T>())
            // SAFETY: `bytes` holds size_of::<T>() bytes, and every bit pattern of them is a T
            // (ArgumentValue); the read does not rely on their alignment.
            .then(|| unsafe { bytes.as_ptr().cast::<T>().read_unaligned() })
    }

    /// It as a device pointer to `T`s: on the software driver, a host address. `None` unless it
    /// has a pointer's size.
    pub fn pointer<T>(&self) -> Option<*mut T> {
        self.get::<u64>().map(|address| address as usize as *mut T)
    }
}

impl KernelLaunch {
    /// The kernel's name, as its PTX names it.
    pub fn name(&self) -> &CStr {
        // SAFETY: the driver hands a NUL-terminated name, alive during the call.
        unsafe { CStr::from_ptr(self.name) }
    }

    /// Blocks of the grid in x, y and z.
    pub fn grid(&self) -> [u32; 3] {
        self.grid
    }

    /// Threads of a block in x, y and z.
    pub fn block(&self) -> [u32; 3] {
        self.block
    }

    /// Threads of the whole grid.
    pub fn threads(&self) -> u64 {
        self.grid
            .iter()
            .chain(&self.block)
            .map(|&n| u64::from(n))
            .product()
    }

    /// Dynamic shared memory of a block, in bytes.
    pub fn shared_memory_bytes(&self) -> u32 {
        self.shared_memory_bytes
    }

    /// The stream it was launched on.
    pub fn stream(&self) -> CUstream {
        self.stream
    }

    /// Its arguments, in the kernel's parameters' order.
    pub fn params(&self) -> &[KernelParam] {
        if self.param_count == 0 {
            return &[];
        }
        // SAFETY: the driver hands `param_count` parameters, alive during the call.
        unsafe { std::slice::from_raw_parts(self.params, self.param_count) }
    }
}

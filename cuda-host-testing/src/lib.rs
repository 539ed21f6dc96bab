//! A software CUDA driver for tests without a GPU: a test double of `libcuda` that exports every
//! entry point of the CUDA 13.5 driver API and models those cuda-host and cudarc's safe API call,
//! with real threads, stream ordering, events, stream capture, graphs, user objects, sticky
//! errors and fault injection, a device that reports itself as an H200, stream-ordered and managed
//! memory, and modules of PTX whose kernels run by stand-in ([`stand_in`]): it runs no device
//! code.
//!
//! Add it as a dev-dependency; its build script compiles the driver's C sources with the C
//! compiler `cc` finds. Then, in a test:
//!
//! ```no_run
//! use cuda_host::sys::CUresult;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // SAFETY: the library this package built is a driver library; no other driver was loaded.
//! let driver = unsafe { cuda_host_testing::install() }?;
//! let context = cuda_host::Device::get(driver, 0)?.primary_context()?;
//! let stream = cuda_host::Stream::new(&context, cuda_host::StreamFlags::NonBlocking)?;
//! cuda_host::host_launch(&stream, || println!("on the software driver"))?;
//! stream.synchronize()?;
//!
//! // SAFETY: as above.
//! let controls = unsafe { cuda_host_testing::controls() }?;
//! controls.fail_next_calls(c"cuLaunchHostFunc", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY)?;
//! let error = cuda_host::host_launch(&stream, || {}).unwrap_err();
//! assert_eq!(error.driver_result(), Some(CUresult::CUDA_ERROR_OUT_OF_MEMORY));
//! # Ok(())
//! # }
//! ```
//!
//! What it hands out:
//! - the library's path ([`library_path`], for `CUDA_SYS_LIBCUDA`), and those of its stub and
//!   pre-11.3 variants ([`variant_path`]);
//! - a [`Driver`] loaded on it ([`load`]), or made the process-wide driver
//!   that cuda-host uses ([`install`]);
//! - a folder holding it as `libcuda.so.1` and `libcuda.so` ([`LibcudaDir`]): a child process
//!   whose `LD_LIBRARY_PATH` starts with it runs on the software driver whatever loads libcuda by
//!   name (cudarc, C code);
//! - its test controls as a typed API ([`Controls`]): failures injected into the next calls of
//!   an entry point, sticky context errors, stand-ins for long or faulting kernels, the driver
//!   version it reports, and counts of calls and of live objects for leak checks;
//! - fresh contexts ([`Controls::fresh_context`]): a context of a device of its own, which a
//!   fault test fails on purpose while the other tests of the binary go on, in parallel, on the
//!   primary context.
//!
//! # Entry points
//!
//! [`ENTRY_POINTS`] lists what it models, generated from the list the driver is built from
//! (`driver/entries.def`); [`entry_points`] has the table. No symbol is missing: every other
//! function a CUDA 13.5 driver exports ([`UNMODELLED_ENTRY_POINTS`], generated from the headers)
//! is exported too, under every name, and found by `cuGetProcAddress_v2`; called, it answers
//! `CUDA_ERROR_NOT_SUPPORTED`, is counted ([`Controls::unmodelled_calls`]) and is named once in
//! the driver's log (standard error; `CUSW_LOG=FILE` appends to a file, `CUSW_LOG=off` silences
//! it). A name no driver has is answered as a real driver answers it: `cuGetProcAddress_v2`
//! answers success with a null pointer and `CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND`.
//!
//! # Where the libraries are
//!
//! In this package's build folder, whose path is compiled in: test executables run on the
//! machine that built them. For executables moved to another machine, copy the three libraries
//! and name their folder in `CUDA_SOFTWARE_DRIVER_DIR`.
//!
//! # Sanitizers
//!
//! Under `-Zsanitizer=address` or `thread` (nightly) the C code is instrumented too and leaves
//! the sanitizer runtime to the executable that loads it, which must export it: link test
//! executables with `-C link-arg=-Wl,--export-dynamic-symbol=__tsan_*` (`__asan_*`), or read
//! `DEP_CUDASW_SANITIZER_RUNTIME_SYMBOLS` in a build script of a package that has this one as a
//! normal dependency.
//!
//! # Crate features
//!
//! None.

mod controls;
pub mod entry_points;
mod error;
mod libcuda_dir;
mod selection;
pub mod stand_in;

pub use controls::{Controls, LiveCounts, LiveObjects, LiveObjectsFn};
pub use entry_points::{
    CONTROLS, DeviceAttribute, ENTRY_POINTS, EntryPoint, H200_ATTRIBUTES, UNMODELLED_ENTRY_POINTS,
};
pub use error::Error;
pub use libcuda_dir::LibcudaDir;
pub use selection::{
    DRIVER_CHOICE_VARIABLE, DriverChoice, DriverKind, SelectedDriver, select_driver,
};
pub use stand_in::{KernelLaunch, KernelParam, STAND_INS_VARIABLE};

use cuda_host_sys::{Driver, LoadOptions};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// The variable that overrides the folder holding the libraries (for executables moved to
/// another machine than the one that built them).
pub const DRIVER_DIR_VARIABLE: &str = "CUDA_SOFTWARE_DRIVER_DIR";

/// The variable, read when the software driver is loaded, that makes its devices answer other
/// attributes than an H200's ([`H200_ATTRIBUTES`]): `NAME=VALUE` pairs separated by commas, each
/// name a `CUdevice_attribute`'s with or without its `CU_DEVICE_ATTRIBUTE_` prefix (or its number),
/// e.g. `COMPUTE_CAPABILITY_MAJOR=8,COMPUTE_CAPABILITY_MINOR=0` for another compute capability,
/// `CAN_USE_64_BIT_STREAM_MEM_OPS=0` for a narrow device, `MEMORY_POOLS_SUPPORTED=0` for one
/// without memory pools. Where the driver models what an attribute says, it follows the value.
/// A pair it cannot read is named in its log and left out.
pub const DEVICE_ATTRIBUTES_VARIABLE: &str = "CUSW_DEVICE_ATTRIBUTES";

/// One of the three libraries built from the driver's sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Variant {
    /// `libcudasw.so`, the software driver.
    Driver,
    /// `libcudasw-stub.so`: every entry point answers `CUDA_ERROR_STUB_LIBRARY`, as the
    /// toolkit's link-time stub `libcuda.so` does.
    Stub,
    /// `libcudasw-noproc.so`: the driver without `cuGetProcAddress`, as drivers before CUDA
    /// 11.3, whose entry points are found by symbol name.
    NoProcAddress,
}

impl Variant {
    /// The library's file name.
    pub fn file_name(self) -> &'static str {
        match self {
            Variant::Driver => "libcudasw.so",
            Variant::Stub => "libcudasw-stub.so",
            Variant::NoProcAddress => "libcudasw-noproc.so",
        }
    }
}

/// The folder holding the libraries: `CUDA_SOFTWARE_DRIVER_DIR` when set, else this package's
/// build folder.
pub fn library_dir() -> PathBuf {
    std::env::var_os(DRIVER_DIR_VARIABLE)
        .filter(|dir| !dir.is_empty())
        .map_or_else(
            || PathBuf::from(env!("CUDA_SOFTWARE_DRIVER_DIR")),
            PathBuf::from,
        )
}

/// The software driver's path, `libcudasw.so` in [`library_dir`]: the value of
/// `CUDA_SYS_LIBCUDA` that makes cuda-host-sys's process-wide driver the software one.
pub fn library_path() -> PathBuf {
    variant_path(Variant::Driver)
}

/// The path of one of the three libraries, in [`library_dir`].
pub fn variant_path(variant: Variant) -> PathBuf {
    library_dir().join(variant.file_name())
}

/// A new [`Driver`] loaded on the software driver, beside any other (each is its own table; the
/// library is loaded once per process, so all share one software driver's state).
///
/// # Errors
/// [`Error::Load`] when the library cannot be loaded.
///
/// # Safety
/// The library at [`library_path`] must be this package's software driver, or another library
/// that implements the CUDA driver API with its C signatures and whose initialisation code is
/// sound to run: where `CUDA_SOFTWARE_DRIVER_DIR` is set, the folder it names must hold such
/// libraries.
pub unsafe fn load() -> Result<Driver, Error> {
    let path = library_path();
    // SAFETY: the caller's obligations for the library are those of `Driver::open`.
    unsafe { Driver::open(&path) }.map_err(|source| Error::Load { path, source })
}

/// Makes the software driver the process-wide driver of cuda-host-sys, the one
/// `cuda_host::driver()` and every cuda-host object without an explicit driver use, and returns
/// it. Calling it again returns the same driver. `CUDA_SYS_PER_THREAD_DEFAULT_STREAM` is read as
/// for the real driver.
///
/// # Errors
/// - [`Error::Load`] when the library cannot be loaded;
/// - [`Error::OtherDriverInstalled`] when the process-wide driver was loaded before, on another
///   library (a call of `cuda_host::driver()` before this one loads the real driver);
/// - [`Error::EarlierLoadFailed`] when it was loaded before and that load failed (a call of
///   `cuda_host::driver()` on a machine without a driver), with that load's error.
///
/// # Safety
/// As for [`load`].
pub unsafe fn install() -> Result<&'static Arc<Driver>, Error> {
    let path = library_path();
    let per_thread = LoadOptions::default().uses_per_thread_default_stream();
    // SAFETY: the caller's obligations for the library are those of `Driver::load`.
    let options = unsafe { LoadOptions::library(&path) }.per_thread_default_stream(per_thread);
    // SAFETY: as above.
    let driver = unsafe { cuda_host_sys::init_driver(&options) }.map_err(|source| {
        // The process-wide load happens once: the error is this load's only if it names this
        // library; otherwise an earlier load, with other options, failed first.
        let (path, source) = (path.clone(), source.clone());
        if source
            .libraries()
            .iter()
            .any(|tried| Path::new(tried) == path)
        {
            Error::Load { path, source }
        } else {
            Error::EarlierLoadFailed { path, source }
        }
    })?;
    if !same_file(Path::new(driver.library_name()), &path) {
        return Err(Error::OtherDriverInstalled {
            loaded: driver.library_name().to_owned(),
            path,
        });
    }
    log::debug!(
        "the process-wide CUDA driver is the software driver {}",
        path.display()
    );
    Ok(driver)
}

/// The software driver's controls ([`library_path`]'s), opened once per process.
///
/// # Errors
/// [`Error::Open`] or [`Error::MissingControl`] when the library cannot be opened or lacks a
/// control; the same error on every later call.
///
/// # Safety
/// As for [`load`]; the library must also export the controls `driver/cudasw.h` declares, with
/// those C signatures.
pub unsafe fn controls() -> Result<&'static Controls, Error> {
    static CONTROLS: OnceLock<Result<Controls, Error>> = OnceLock::new();
    CONTROLS
        // SAFETY: passed on from the caller.
        .get_or_init(|| unsafe { Controls::open(&library_path()) })
        .as_ref()
        .map_err(Clone::clone)
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

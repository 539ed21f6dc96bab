//! The package's error type.

use cuda_host_sys::{CUresult, LoadError};
use std::path::PathBuf;

/// Why the software driver, its controls or its `libcuda` folder could not be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// cuda-host-sys could not load the software driver.
    #[error("the software driver {} does not load: {source}", path.display())]
    Load {
        /// The library.
        path: PathBuf,
        /// cuda-host-sys's reason.
        source: LoadError,
    },
    /// The process-wide driver was loaded before, on another library.
    #[error(
        "the process-wide CUDA driver was loaded before, on {loaded}, not on the software driver \
         {}: install it before the first use of cuda-host",
        path.display()
    )]
    OtherDriverInstalled {
        /// The library the process-wide driver runs on.
        loaded: String,
        /// The software driver.
        path: PathBuf,
    },
    /// The process-wide driver was loaded before, with other options, and that load failed: a
    /// call of `cuda_host::driver()` came first, on a machine whose own driver does not load.
    #[error(
        "the process-wide CUDA driver was loaded before the software driver {} was installed, \
         and that load failed: {source}; install the software driver before the first use of \
         cuda-host",
        path.display()
    )]
    EarlierLoadFailed {
        /// The software driver.
        path: PathBuf,
        /// Why the earlier load failed.
        source: LoadError,
    },
    /// `CUDA_TEST_DRIVER` has a value [`select_driver`](crate::select_driver) does not know.
    #[error(
        "{variable}={value} is not one of {names} (unset or empty: auto)",
        variable = crate::DRIVER_CHOICE_VARIABLE,
        names = crate::DriverChoice::NAMES.join(", ")
    )]
    UnknownDriverChoice {
        /// The variable's value.
        value: String,
    },
    /// `CUDA_TEST_DRIVER=real`, but NVIDIA's driver cannot be used.
    #[error("{variable}=real, but the CUDA driver {reason}", variable = crate::DRIVER_CHOICE_VARIABLE)]
    RealDriverUnusable {
        /// Why not: it does not load, initialise or have a device (the driver's error).
        reason: String,
    },
    /// `CUDA_SYS_LIBCUDA` names a driver library that cannot be used, and `CUDA_TEST_DRIVER` is
    /// `auto`: a driver the user named is never silently replaced by the software driver.
    #[error(
        "{variable}={library}, but that driver {reason}; unset {variable} to run on the driver \
         found by name, or set {choice}=software for the software driver",
        variable = cuda_host_sys::LIBCUDA_VARIABLE,
        choice = crate::DRIVER_CHOICE_VARIABLE
    )]
    NamedDriverUnusable {
        /// The library `CUDA_SYS_LIBCUDA` names.
        library: String,
        /// Why not: it does not load, initialise or have a device (the driver's error).
        reason: String,
    },
    /// The platform loader could not open the library for its controls.
    #[error("the software driver {} does not open: {reason}", path.display())]
    Open {
        /// The library.
        path: PathBuf,
        /// The loader's message.
        reason: String,
    },
    /// The library lacks a control function.
    #[error("the software driver {} lacks the control {control}: {reason}", path.display())]
    MissingControl {
        /// The library.
        path: PathBuf,
        /// The control, e.g. `cuswFailNextCalls`.
        control: &'static str,
        /// The loader's message.
        reason: String,
    },
    /// A control answered an error: an entry name it does not know (`CUDA_ERROR_NOT_FOUND`), a
    /// destroyed handle, a value out of range.
    #[error("the software driver's {control} answered {}", result.name())]
    Control {
        /// The control, e.g. `cuswFailNextCalls`.
        control: &'static str,
        /// Its answer.
        result: CUresult,
    },
    /// A control was given an object of another driver than the one it acts on.
    #[error(
        "the object belongs to the driver {library}, not to the software driver these controls \
         act on"
    )]
    OtherDriver {
        /// The library of the object's driver.
        library: String,
    },
    /// cuda-host refused what a control made (a call inside a host function).
    #[error("cuda-host refused it: {source}")]
    Host {
        /// cuda-host's error.
        source: cuda_host::Error,
    },
    /// The driver filled fewer live-object counts than this package knows of (an older
    /// library).
    #[error("cuswLiveObjects filled {filled} bytes of {expected}: an older software driver")]
    LiveCountsUnfilled {
        /// The bytes the driver filled.
        filled: usize,
        /// The bytes this package asked for.
        expected: usize,
    },
    /// A delay or sleep too long for the control (over `u32::MAX` microseconds).
    #[error("a delay of {delay:?} is longer than the driver's limit of u32::MAX microseconds")]
    DelayTooLong {
        /// The delay asked for.
        delay: std::time::Duration,
    },
    /// A file system operation on the `libcuda` folder failed.
    #[error("{}: {reason}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The system's message (kept as text so that the error is `Clone`).
        reason: String,
    },
}

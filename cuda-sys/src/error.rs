//! Typed errors: why a driver could not be loaded, and why a call failed.

use crate::entry_point::Availability;
use crate::{CUresult, version_text};

/// Why the driver library could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// No candidate name could be opened by the platform loader.
    #[error(
        "the CUDA driver library could not be opened (tried {}): {message}",
        tried.join(", ")
    )]
    LibraryNotFound {
        /// The names and paths tried, in order.
        tried: Vec<String>,
        /// The platform loader's message for each attempt.
        message: String,
    },
    /// The library is the toolkit's link-time stub (`CUDA_ERROR_STUB_LIBRARY`), not a driver.
    #[error(
        "{library} is the CUDA toolkit's stub library, meant for linking only, not the driver; \
         install the NVIDIA driver, or point CUDA_SYS_LIBCUDA at its libcuda.so.1"
    )]
    StubLibrary {
        /// The library that answered as a stub.
        library: String,
    },
    /// The library lacks an entry point that loading cannot do without.
    #[error("{library} does not export {symbol}: it is not a CUDA driver library")]
    MissingBootstrap {
        /// The library opened.
        library: String,
        /// The missing symbol.
        symbol: &'static str,
    },
    /// `cuDriverGetVersion` failed.
    #[error("cuDriverGetVersion of {library} failed with {result}")]
    VersionQuery {
        /// The library opened.
        library: String,
        /// What the driver answered.
        result: CUresult,
    },
    /// The driver is older than the oldest this crate supports.
    #[error(
        "{library} is a CUDA {} driver; at least CUDA {} is needed",
        version_text(*found),
        version_text(*required)
    )]
    DriverTooOld {
        /// The library opened.
        library: String,
        /// The version the driver reported.
        found: i32,
        /// The oldest version supported.
        required: i32,
    },
}

impl LoadError {
    /// The `CUresult` the C-like free functions return while the driver cannot be loaded:
    /// `CUDA_ERROR_STUB_LIBRARY` for a stub, the driver's answer for a failed version query, else
    /// `CUDA_ERROR_NOT_FOUND` (no entry point can be found).
    pub fn result(&self) -> CUresult {
        match self {
            LoadError::StubLibrary { .. } => CUresult::CUDA_ERROR_STUB_LIBRARY,
            LoadError::VersionQuery { result, .. } => *result,
            LoadError::LibraryNotFound { .. }
            | LoadError::MissingBootstrap { .. }
            | LoadError::DriverTooOld { .. } => CUresult::CUDA_ERROR_NOT_FOUND,
        }
    }
}

/// Why a driver call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The driver answered an error.
    #[error("{call} failed: {} ({}): {description}", result.name(), result.0)]
    Driver {
        /// The entry point called, e.g. `cuStreamSynchronize`.
        call: &'static str,
        /// What the driver answered.
        result: CUresult,
        /// The driver's message for it (or the header's, when the driver has none).
        description: String,
    },
    /// The loaded driver does not have the entry point.
    #[error(
        "{entry_point} is unavailable in the loaded CUDA {} driver: {availability}",
        version_text(*driver_version)
    )]
    EntryPointUnavailable {
        /// The entry point, e.g. `cuLaunchHostFunc_v2`.
        entry_point: &'static str,
        /// The loaded driver's version.
        driver_version: i32,
        /// Why it is unavailable.
        availability: Availability,
    },
    /// The driver could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
}

impl Error {
    /// The driver's answer, where there was one (`CUDA_ERROR_NOT_FOUND` for an unavailable entry
    /// point, the load error's code for a load failure).
    pub fn result(&self) -> CUresult {
        match self {
            Error::Driver { result, .. } => *result,
            Error::EntryPointUnavailable { .. } => CUresult::CUDA_ERROR_NOT_FOUND,
            Error::Load(error) => error.result(),
        }
    }
}

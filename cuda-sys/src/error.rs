//! Typed errors: why a driver could not be loaded, and why a call failed.
//!
//! `Display` and `Error` are written by hand: a procedural-macro dependency would hold back the
//! start of this crate's compilation (`docs/PERFORMANCE.md`).

use crate::entry_point::Availability;
use crate::{CUresult, version_text};
use std::fmt;

/// Why the driver library could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoadError {
    /// No candidate name could be opened by the platform loader.
    LibraryNotFound {
        /// The names and paths tried, in order.
        tried: Vec<String>,
        /// The platform loader's message for each attempt.
        message: String,
    },
    /// The library named by an environment variable (`CUDA_SYS_LIBCUDA`) could not be opened.
    /// No other library is tried in its place: the variable asks for that driver.
    ConfiguredLibraryNotFound {
        /// The variable, `CUDA_SYS_LIBCUDA`.
        variable: &'static str,
        /// The library it names.
        library: String,
        /// The platform loader's message.
        message: String,
    },
    /// The library is the toolkit's link-time stub (`CUDA_ERROR_STUB_LIBRARY`), not a driver.
    StubLibrary {
        /// The library that answered as a stub.
        library: String,
    },
    /// The library lacks an entry point that loading cannot do without.
    MissingBootstrap {
        /// The library opened.
        library: String,
        /// The missing symbol.
        symbol: &'static str,
    },
    /// `cuDriverGetVersion` failed.
    VersionQuery {
        /// The library opened.
        library: String,
        /// What the driver answered.
        result: CUresult,
    },
    /// The driver is older than the oldest this crate supports.
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
            | LoadError::ConfiguredLibraryNotFound { .. }
            | LoadError::MissingBootstrap { .. }
            | LoadError::DriverTooOld { .. } => CUresult::CUDA_ERROR_NOT_FOUND,
        }
    }

    /// The libraries the failed load tried, as it names them: every name tried when none
    /// opened, else the one it opened. Tells whose load failed where several parts of a program
    /// may load the process-wide driver first.
    pub fn libraries(&self) -> Vec<&str> {
        match self {
            LoadError::LibraryNotFound { tried, .. } => tried.iter().map(String::as_str).collect(),
            LoadError::ConfiguredLibraryNotFound { library, .. }
            | LoadError::StubLibrary { library }
            | LoadError::MissingBootstrap { library, .. }
            | LoadError::VersionQuery { library, .. }
            | LoadError::DriverTooOld { library, .. } => vec![library.as_str()],
        }
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::LibraryNotFound { tried, message } => write!(
                f,
                "the CUDA driver library could not be opened (tried {}): {message}",
                tried.join(", ")
            ),
            LoadError::ConfiguredLibraryNotFound {
                variable,
                library,
                message,
            } => write!(
                f,
                "{variable} names {library} as the CUDA driver library, which could not be \
                 opened: {message}"
            ),
            LoadError::StubLibrary { library } => write!(
                f,
                "{library} is the CUDA toolkit's stub library, meant for linking only, not the \
                 driver; install the NVIDIA driver, or point CUDA_SYS_LIBCUDA at its libcuda.so.1"
            ),
            LoadError::MissingBootstrap { library, symbol } => write!(
                f,
                "{library} does not export {symbol}: it is not a CUDA driver library"
            ),
            LoadError::VersionQuery { library, result } => {
                write!(f, "cuDriverGetVersion of {library} failed with {result}")
            }
            LoadError::DriverTooOld {
                library,
                found,
                required,
            } => write!(
                f,
                "{library} is a CUDA {} driver; at least CUDA {} is needed",
                version_text(*found),
                version_text(*required)
            ),
        }
    }
}

// The loader's reasons are kept as text (a `libloading::Error` is neither `Clone` nor `Eq`), so no
// variant has a source.
impl std::error::Error for LoadError {}

/// Why a driver call failed.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// The driver answered an error.
    Driver {
        /// The entry point called, e.g. `cuStreamSynchronize`.
        call: &'static str,
        /// What the driver answered.
        result: CUresult,
        /// The driver's message for it (or the header's, when the driver has none).
        description: String,
    },
    /// The loaded driver does not have the entry point.
    EntryPointUnavailable {
        /// The entry point, e.g. `cuLaunchHostFunc_v2`.
        entry_point: &'static str,
        /// The loaded driver's version.
        driver_version: i32,
        /// Why it is unavailable.
        availability: Availability,
    },
    /// The driver could not be loaded.
    Load(LoadError),
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

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Driver {
                call,
                result,
                description,
            } => write!(
                f,
                "{call} failed: {} ({}): {description}",
                result.name(),
                result.0
            ),
            Error::EntryPointUnavailable {
                entry_point,
                driver_version,
                availability,
            } => write!(
                f,
                "{entry_point} is unavailable in the loaded CUDA {} driver: {availability}",
                version_text(*driver_version)
            ),
            Error::Load(error) => fmt::Display::fmt(error, f),
        }
    }
}

impl std::error::Error for Error {
    // A load failure is shown as the load error itself (the same text), so it is not also its
    // source: a report walking the chain would print the message twice.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Load(error) => std::error::Error::source(error),
            Error::Driver { .. } | Error::EntryPointUnavailable { .. } => None,
        }
    }
}

impl From<LoadError> for Error {
    fn from(error: LoadError) -> Self {
        Error::Load(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    fn library_not_found() -> LoadError {
        LoadError::LibraryNotFound {
            tried: vec!["libcuda.so.1".to_owned(), "libcuda.so".to_owned()],
            message: "libcuda.so.1: cannot open shared object file; libcuda.so: no such file"
                .to_owned(),
        }
    }

    #[test]
    fn library_not_found_names_every_library_tried_and_the_loaders_message() {
        assert_eq!(
            library_not_found().to_string(),
            "the CUDA driver library could not be opened (tried libcuda.so.1, libcuda.so): \
             libcuda.so.1: cannot open shared object file; libcuda.so: no such file"
        );
    }

    #[test]
    fn a_load_error_names_the_libraries_it_tried() {
        assert_eq!(
            library_not_found().libraries(),
            ["libcuda.so.1", "libcuda.so"]
        );
        let stub = LoadError::StubLibrary {
            library: "/usr/lib/stubs/libcuda.so".to_owned(),
        };
        assert_eq!(stub.libraries(), ["/usr/lib/stubs/libcuda.so"]);
    }

    #[test]
    fn a_configured_library_names_the_variable_the_library_and_the_loaders_message() {
        let error = LoadError::ConfiguredLibraryNotFound {
            variable: "CUDA_SYS_LIBCUDA",
            library: "/opt/driver/libcuda.so".to_owned(),
            message: "/opt/driver/libcuda.so: cannot open shared object file".to_owned(),
        };
        assert_eq!(
            error.to_string(),
            "CUDA_SYS_LIBCUDA names /opt/driver/libcuda.so as the CUDA driver library, which \
             could not be opened: /opt/driver/libcuda.so: cannot open shared object file"
        );
        assert_eq!(error.result(), CUresult::CUDA_ERROR_NOT_FOUND);
    }

    #[test]
    fn stub_library_says_it_is_the_toolkits_stub_and_what_to_do() {
        let error = LoadError::StubLibrary {
            library: "/usr/local/cuda/lib64/stubs/libcuda.so".to_owned(),
        };
        assert_eq!(
            error.to_string(),
            "/usr/local/cuda/lib64/stubs/libcuda.so is the CUDA toolkit's stub library, meant for \
             linking only, not the driver; install the NVIDIA driver, or point CUDA_SYS_LIBCUDA at \
             its libcuda.so.1"
        );
    }

    #[test]
    fn missing_bootstrap_names_the_library_and_the_symbol() {
        let error = LoadError::MissingBootstrap {
            library: "libm.so.6".to_owned(),
            symbol: "cuDriverGetVersion",
        };
        assert_eq!(
            error.to_string(),
            "libm.so.6 does not export cuDriverGetVersion: it is not a CUDA driver library"
        );
    }

    #[test]
    fn version_query_names_the_library_and_the_drivers_answer() {
        let error = LoadError::VersionQuery {
            library: "libcuda.so.1".to_owned(),
            result: CUresult::CUDA_ERROR_NOT_INITIALIZED,
        };
        assert_eq!(
            error.to_string(),
            "cuDriverGetVersion of libcuda.so.1 failed with CUDA_ERROR_NOT_INITIALIZED (3)"
        );
    }

    #[test]
    fn driver_too_old_gives_both_versions_as_text() {
        let error = LoadError::DriverTooOld {
            library: "libcuda.so.1".to_owned(),
            found: 9020,
            required: 10000,
        };
        assert_eq!(
            error.to_string(),
            "libcuda.so.1 is a CUDA 9.2 driver; at least CUDA 10.0 is needed"
        );
    }

    #[test]
    fn load_errors_have_no_source() {
        assert!(library_not_found().source().is_none());
    }

    #[test]
    fn a_driver_error_names_the_call_the_result_and_the_description() {
        let error = Error::Driver {
            call: "cuStreamSynchronize",
            result: CUresult::CUDA_ERROR_INVALID_HANDLE,
            description: "invalid resource handle".to_owned(),
        };
        assert_eq!(
            error.to_string(),
            "cuStreamSynchronize failed: CUDA_ERROR_INVALID_HANDLE (400): invalid resource handle"
        );
        assert!(error.source().is_none());
    }

    #[test]
    fn an_unavailable_entry_point_names_it_the_driver_version_and_why() {
        let error = Error::EntryPointUnavailable {
            entry_point: "cuLaunchHostFunc_v2",
            driver_version: 13000,
            availability: Availability::NeedsNewerDriver { required: 13010 },
        };
        assert_eq!(
            error.to_string(),
            "cuLaunchHostFunc_v2 is unavailable in the loaded CUDA 13.0 driver: needs a CUDA 13.1 \
             driver"
        );
        assert!(error.source().is_none());
    }

    #[test]
    fn a_load_failure_reads_as_the_load_error_itself() {
        let error = Error::from(library_not_found());
        assert_eq!(error, Error::Load(library_not_found()));
        assert_eq!(error.to_string(), library_not_found().to_string());
        assert!(error.source().is_none());
        assert_eq!(error.result(), CUresult::CUDA_ERROR_NOT_FOUND);
    }
}

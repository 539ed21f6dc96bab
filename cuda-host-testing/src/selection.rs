//! Which driver tests run on: NVIDIA's when it has a device, else the software driver, unless
//! `CUDA_TEST_DRIVER` says otherwise.

use crate::Error;
use cuda_host_sys::{Driver, LoadOptions};
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

/// The variable that picks the driver [`select_driver`] chooses: `auto` (the default, also when
/// unset or empty), `real` or `software` ([`DriverChoice`]).
pub const DRIVER_CHOICE_VARIABLE: &str = "CUDA_TEST_DRIVER";

/// What `CUDA_TEST_DRIVER` asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DriverChoice {
    /// `auto`: NVIDIA's driver when it loads, initialises and has a device, else the software
    /// driver.
    #[default]
    Auto,
    /// `real`: NVIDIA's driver, which must load, initialise and have a device.
    Real,
    /// `software`: this package's software driver.
    Software,
}

impl DriverChoice {
    /// The values `CUDA_TEST_DRIVER` may have, as [`DriverChoice::name`] spells them.
    pub const NAMES: [&'static str; 3] = ["auto", "real", "software"];

    /// The value of `CUDA_TEST_DRIVER` that asks for this choice.
    pub fn name(self) -> &'static str {
        match self {
            DriverChoice::Auto => "auto",
            DriverChoice::Real => "real",
            DriverChoice::Software => "software",
        }
    }

    /// The choice `CUDA_TEST_DRIVER` makes now: [`DriverChoice::Auto`] when it is unset or
    /// empty.
    ///
    /// # Errors
    /// [`Error::UnknownDriverChoice`] for any other value than [`DriverChoice::NAMES`].
    pub fn from_env() -> Result<DriverChoice, Error> {
        match std::env::var_os(DRIVER_CHOICE_VARIABLE) {
            None => Ok(DriverChoice::Auto),
            Some(value) => value.to_str().map_or_else(
                || {
                    Err(Error::UnknownDriverChoice {
                        value: value.to_string_lossy().into_owned(),
                    })
                },
                str::parse,
            ),
        }
    }
}

impl FromStr for DriverChoice {
    type Err = Error;

    /// One of [`DriverChoice::NAMES`], or the empty string for [`DriverChoice::Auto`].
    fn from_str(value: &str) -> Result<DriverChoice, Error> {
        match value {
            "" | "auto" => Ok(DriverChoice::Auto),
            "real" => Ok(DriverChoice::Real),
            "software" => Ok(DriverChoice::Software),
            other => Err(Error::UnknownDriverChoice {
                value: other.to_owned(),
            }),
        }
    }
}

/// Which kind of driver [`select_driver`] chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DriverKind {
    /// NVIDIA's driver, with a device.
    Real,
    /// This package's software driver: no kernels run, its [`Controls`](crate::Controls) work.
    Software,
}

/// The driver [`select_driver`] chose, which is also the process-wide driver of cuda-host.
#[derive(Debug, Clone)]
pub struct SelectedDriver {
    kind: DriverKind,
    driver: &'static Arc<Driver>,
}

impl SelectedDriver {
    /// Real or software.
    pub fn kind(&self) -> DriverKind {
        self.kind
    }

    /// Whether it is the software driver (where kernels cannot be loaded and the controls
    /// work).
    pub fn is_software(&self) -> bool {
        self.kind == DriverKind::Software
    }

    /// The driver: the one `cuda_host::driver()` answers too.
    pub fn driver(&self) -> &'static Arc<Driver> {
        self.driver
    }
}

/// Chooses, once per process, the driver tests run on, as `CUDA_TEST_DRIVER` asks
/// ([`DriverChoice`]): by default NVIDIA's driver when it loads, initialises and has a device,
/// else the software driver ([`install`](crate::install)ed). A library `CUDA_SYS_LIBCUDA` names
/// is what the user asked for: where it cannot be used, the answer is an error naming it, never
/// the software driver in its place (unless `CUDA_TEST_DRIVER=software` asks for that). The
/// chosen driver becomes the process-wide driver of cuda-host. Every call answers as the first
/// did, errors included.
///
/// A library found under the driver's own names (`libcuda.so.1` on `LD_LIBRARY_PATH`, or
/// `CUDA_SYS_LIBCUDA`) that is this package's software driver counts as the software driver:
/// a process started from a [`LibcudaDir`](crate::LibcudaDir) runs on it, whatever it asks.
///
/// # Errors
/// - [`Error::UnknownDriverChoice`] when `CUDA_TEST_DRIVER` has another value than
///   [`DriverChoice::NAMES`];
/// - [`Error::RealDriverUnusable`] for `real` when NVIDIA's driver does not load, initialise or
///   have a device, or when the library found is the software driver;
/// - [`Error::NamedDriverUnusable`] for `auto` when `CUDA_SYS_LIBCUDA` names a library that does
///   not load, initialise or have a device;
/// - the errors of [`install`](crate::install) when it installs the software driver.
///
/// # Safety
/// As for [`load`](crate::load). NVIDIA's driver is opened as `cuda_host::driver()` opens it.
pub unsafe fn select_driver() -> Result<&'static SelectedDriver, Error> {
    static SELECTED: OnceLock<Result<SelectedDriver, Error>> = OnceLock::new();
    SELECTED
        // SAFETY: passed on from the caller.
        .get_or_init(|| unsafe { select(DriverChoice::from_env()?) })
        .as_ref()
        .map_err(Clone::clone)
}

/// # Safety
/// As for [`select_driver`].
unsafe fn select(choice: DriverChoice) -> Result<SelectedDriver, Error> {
    let real = match choice {
        DriverChoice::Software => None,
        DriverChoice::Real => match real_driver_kind() {
            Ok((DriverKind::Real, _)) => Some(DriverKind::Real),
            Ok((_, library)) => {
                return Err(Error::RealDriverUnusable {
                    reason: format!("{library} is cuda-host-testing's software driver"),
                });
            }
            Err(reason) => return Err(Error::RealDriverUnusable { reason }),
        },
        DriverChoice::Auto => match real_driver_kind() {
            Ok((kind, _)) => Some(kind),
            Err(reason) => match named_library() {
                Some(library) => return Err(Error::NamedDriverUnusable { library, reason }),
                None => None,
            },
        },
    };
    let (kind, driver) = match real {
        Some(_) => {
            let driver = cuda_host_sys::driver().map_err(|source| Error::RealDriverUnusable {
                reason: format!("does not load as the process-wide driver: {source}"),
            })?;
            // The process-wide driver is whichever was set up first: this package's, if
            // `install` ran before, on any thread.
            if exports_the_controls(driver) {
                if choice == DriverChoice::Real {
                    return Err(Error::RealDriverUnusable {
                        reason: format!(
                            "the process-wide driver is already the software driver {}",
                            driver.library_name()
                        ),
                    });
                }
                (DriverKind::Software, driver)
            } else {
                (DriverKind::Real, driver)
            }
        }
        // SAFETY: passed on from the caller.
        None => (DriverKind::Software, unsafe { crate::install() }?),
    };
    log::debug!(
        "tests run on the {} driver {}",
        match kind {
            DriverKind::Real => "real",
            DriverKind::Software => "software",
        },
        driver.library_name()
    );
    Ok(SelectedDriver { kind, driver })
}

/// Whether the driver the default options open loads, initialises and has a device, and then
/// whether it is NVIDIA's or this package's under the driver's name, with the library's name;
/// why not otherwise.
fn real_driver_kind() -> Result<(DriverKind, String), String> {
    // SAFETY: the default options name the library `cuda_host::driver()` opens: the user's
    // configuration of this process, as `LD_LIBRARY_PATH` is.
    let driver = unsafe { Driver::load(&LoadOptions::default()) }
        .map_err(|error| format!("does not load: {error}"))?;
    // Kept for the process, never unloaded, as a driver library is not: what its cuInit set up
    // would be lost (the process-wide driver opens the same library again).
    static PROBED: OnceLock<Driver> = OnceLock::new();
    let driver = PROBED.get_or_init(|| driver);
    // SAFETY: no pointer arguments.
    let result = unsafe { driver.cuInit(0) };
    driver
        .check("cuInit", result)
        .map_err(|error| format!("does not initialise: {error}"))?;
    let mut count = 0;
    // SAFETY: `count` is a valid out-pointer.
    let result = unsafe { driver.cuDeviceGetCount(&mut count) };
    driver
        .check("cuDeviceGetCount", result)
        .map_err(|error| format!("cannot count its devices: {error}"))?;
    if count == 0 {
        return Err(format!("{} has no device", driver.library_name()));
    }
    let kind = if exports_the_controls(driver) {
        DriverKind::Software
    } else {
        DriverKind::Real
    };
    Ok((kind, driver.library_name().to_owned()))
}

/// The library `CUDA_SYS_LIBCUDA` names, when it is set and not empty.
fn named_library() -> Option<String> {
    std::env::var_os(cuda_host_sys::LIBCUDA_VARIABLE)
        .filter(|library| !library.is_empty())
        .map(|library| library.to_string_lossy().into_owned())
}

/// Whether the loaded library exports the software driver's controls: no NVIDIA driver does.
fn exports_the_controls(driver: &Driver) -> bool {
    // SAFETY: the library is loaded already (`driver` holds it), so opening it again runs no
    // initialisation code; the symbol's address is only compared, never called.
    unsafe { libloading::Library::new(driver.library_name()) }.is_ok_and(|library| {
        // SAFETY: as above.
        unsafe { library.get::<*mut std::ffi::c_void>(c"cuswLiveObjects") }.is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_name_parses_to_its_choice_and_the_empty_value_is_auto() {
        for name in DriverChoice::NAMES {
            let choice: DriverChoice = name.parse().expect("a known name");
            assert_eq!(choice.name(), name);
        }
        assert_eq!("".parse(), Ok(DriverChoice::Auto));
    }

    #[test]
    fn an_unknown_value_is_a_typed_error_naming_the_value_and_every_allowed_one() {
        let error = "bogus".parse::<DriverChoice>().unwrap_err();
        assert_eq!(
            error,
            Error::UnknownDriverChoice {
                value: "bogus".to_owned()
            }
        );
        assert_eq!(
            error.to_string(),
            "CUDA_TEST_DRIVER=bogus is not one of auto, real, software (unset or empty: auto)"
        );
        // Case matters, as it does for every other value of the variable.
        assert!("Real".parse::<DriverChoice>().is_err());
    }
}

//! Which driver a test binary runs on: cuda-host-testing's published selector
//! ([`cuda_host_testing::select_driver`]), which reads `CUDA_TEST_DRIVER`.

use cuda_host_sys::{CUresult, Driver};
use std::io::Write as _;
use std::sync::{Arc, OnceLock};

/// The variable that picks the driver: `auto` (the default), `real` or `software`.
pub const DRIVER_VARIABLE: &str = cuda_host_testing::DRIVER_CHOICE_VARIABLE;

/// Which kind of driver the tests run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverKind {
    /// NVIDIA's driver with a GPU.
    Real,
    /// The software driver of cuda-host-testing.
    Software,
}

/// The driver a test binary runs on.
#[derive(Debug)]
pub struct TestDriver {
    /// Real or software.
    pub kind: DriverKind,
    /// The loaded driver, also the process-wide one of `cuda-host-sys`.
    pub driver: Arc<Driver>,
}

impl TestDriver {
    /// Whether this is the software driver.
    pub fn is_software(&self) -> bool {
        self.kind == DriverKind::Software
    }
}

/// The driver this test binary runs on, chosen once (see the crate documentation).
///
/// When none can be chosen (`CUDA_TEST_DRIVER` has an unknown value, or names a driver that
/// cannot be used), the binary prints why, once, and exits with status 2: one clear error, not
/// one panic per test.
pub fn test_driver() -> &'static TestDriver {
    static SELECTED: OnceLock<TestDriver> = OnceLock::new();
    SELECTED.get_or_init(|| {
        crate::quiet::quiet_deliberate_panics();
        // SAFETY: NVIDIA's driver is opened as `cuda_host::driver()` opens it; the software
        // driver cuda-host-testing built implements the driver API's entry points with their C
        // signatures, and its initialisation only sets up its own state.
        let selected = unsafe { cuda_host_testing::select_driver() }.unwrap_or_else(|error| {
            // Written around the test harness's output capture, so that every run shows it.
            let _ = writeln!(std::io::stderr(), "[cuda-host tests] no driver: {error}");
            std::process::exit(2)
        });
        let kind = if selected.is_software() {
            DriverKind::Software
        } else {
            DriverKind::Real
        };
        let chosen = TestDriver {
            kind,
            driver: Arc::clone(selected.driver()),
        };
        let _ = writeln!(
            std::io::stderr(),
            "[cuda-host tests] {} driver: {} (CUDA {})",
            match kind {
                DriverKind::Real => "real",
                DriverKind::Software => "software",
            },
            chosen.driver.library_name(),
            cuda_host_sys::version_text(chosen.driver.version())
        );
        chosen
    })
}

/// Panics with the test driver's typed error, naming `call`, unless `result` is success: for tests
/// that call the driver directly.
///
/// # Panics
/// When `result` is not success.
#[track_caller]
pub fn ok(call: &'static str, result: CUresult) {
    if let Err(error) = test_driver().driver.check(call, result) {
        panic!("{error}");
    }
}

/// `true` (and a note on stderr) when the test needs the real driver and this is the software
/// one: the caller returns early.
pub fn skip_unless_real(test: &str, why: &str) -> bool {
    if test_driver().kind == DriverKind::Real {
        return false;
    }
    skip(test, &format!("on the software driver: {why}"));
    true
}

/// Says on stderr, around the output capture, that `test` did not run and why.
pub fn skip(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "[cuda-host tests] skipped {test}: {why}");
}

/// The primary context of device 0 of the test driver, retained once for the whole process: a
/// primary context released by its last user is destroyed, and with it the memory and modules
/// other tests still use.
///
/// # Panics
/// When the driver has no device 0 or cannot retain its primary context.
pub fn context() -> cuda_host::Context {
    static CONTEXT: OnceLock<cuda_host::Context> = OnceLock::new();
    CONTEXT
        .get_or_init(|| {
            let driver = &test_driver().driver;
            cuda_host::Device::get(driver, 0)
                .and_then(|device| device.primary_context())
                .unwrap_or_else(|e| panic!("no primary context on device 0: {e}"))
        })
        .clone()
}

/// The host-function engine `CUDA_HOST_TEST_ENGINE` names for the suites that run in both:
/// `driver` (the default) or `polled`. With `polled`, `CUDA_HOST_TEST_ENGINE_THREADS`, if set,
/// is the number of the polled engine's server threads (else the engine's default rule's).
///
/// # Panics
/// On any other value, or a number of threads the engine refuses.
pub fn host_engine() -> cuda_host::options::HostEngine {
    match std::env::var("CUDA_HOST_TEST_ENGINE").as_deref() {
        Err(_) | Ok("" | "driver") => cuda_host::options::HostEngine::Driver,
        Ok("polled") => {
            if let Ok(threads) = std::env::var("CUDA_HOST_TEST_ENGINE_THREADS") {
                let threads = threads.parse().unwrap_or_else(|_| {
                    panic!("CUDA_HOST_TEST_ENGINE_THREADS={threads}: expected a number")
                });
                cuda_host::polled::set_polled_engine_threads(threads)
                    .unwrap_or_else(|e| panic!("CUDA_HOST_TEST_ENGINE_THREADS={threads}: {e}"));
            }
            cuda_host::options::HostEngine::Polled
        }
        Ok(other) => panic!("CUDA_HOST_TEST_ENGINE={other}: expected driver or polled"),
    }
}

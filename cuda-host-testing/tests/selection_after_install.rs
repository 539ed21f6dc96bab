//! The selector after an earlier `install()`: the process-wide driver is then the software
//! driver, whatever else the machine has, and the selector says so (its own binary: it sets up
//! the process-wide driver). On a machine with a GPU the selector's probe finds NVIDIA's driver,
//! which it must not report while handing out the software one.

use cuda_host_testing::{DriverChoice, Error};
use std::sync::Arc;

#[test]
fn the_selector_reports_the_driver_it_hands_out_after_an_earlier_install() {
    let choice = DriverChoice::from_env().expect("a known CUDA_TEST_DRIVER");
    // SAFETY: this package's software driver.
    let installed = unsafe { cuda_host_testing::install() }.expect("installs");
    // SAFETY: NVIDIA's driver, if any, is opened as cuda_host::driver() opens it.
    let selected = unsafe { cuda_host_testing::select_driver() };
    match (choice, selected) {
        (DriverChoice::Real, Err(Error::RealDriverUnusable { .. })) => {}
        (DriverChoice::Real, answer) => {
            panic!("asked for the real driver after an install: {answer:?}")
        }
        (_, Ok(selected)) => {
            assert!(Arc::ptr_eq(selected.driver(), installed));
            assert!(selected.is_software(), "reported as {:?}", selected.kind());
        }
        (_, Err(error)) => panic!("no driver selected: {error}"),
    }
}

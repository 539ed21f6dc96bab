//! cudarc on cuda-host-testing's software driver: cudarc opens libcuda by name, so the test runs
//! again in a child process whose `LD_LIBRARY_PATH` leads to a folder holding the software
//! driver as `libcuda.so.1` (the loader reads the variable when a process starts).

use cudarc::driver::CudaContext;
use std::process::Command;

/// Set in the child process.
const IN_CHILD: &str = "USER_CRATE_IN_CHILD";

#[test]
fn cudarc_creates_a_stream_on_the_software_driver() {
    if std::env::var_os(IN_CHILD).is_none() {
        let libcuda = cuda_host_testing::LibcudaDir::new().expect("a libcuda folder");
        let status = Command::new(std::env::current_exe().expect("this test binary"))
            .args([
                "--exact",
                "cudarc_creates_a_stream_on_the_software_driver",
                "--nocapture",
            ])
            .env(IN_CHILD, "1")
            .env("LD_LIBRARY_PATH", libcuda.ld_library_path())
            .status()
            .expect("the child runs");
        assert!(status.success(), "the child failed: {status}");
        return;
    }
    let context = CudaContext::new(0).expect("cudarc's context of device 0");
    let stream = context.new_stream().expect("a stream");
    stream.synchronize().expect("synchronized");
    // The device is the software driver's, not a GPU's.
    let name = context.name().expect("the device's name");
    assert_eq!(name, "Software CUDA Device 0");
}

//! The PTX kernels of `kernels/` at the workspace root, for tests that run real device work,
//! and the faulting launch that fails a context on either driver.

#[path = "../../kernels/load.rs"]
mod load;

use cuda_host_sys::Driver;
pub use load::{Kernels, PTX};
use std::ffi::c_void;
use std::mem::ManuallyDrop;

/// The faulting launch that fails a stream's context as a kernel storing to address 0x10 does:
/// that kernel on the real driver, the software driver's stand-in (which needs no module)
/// otherwise.
///
/// Its module is never unloaded: unloading it from the failed context would answer the sticky
/// error too.
pub struct Fault<'driver> {
    kernels: ManuallyDrop<Option<Kernels<'driver>>>,
}

impl<'driver> Fault<'driver> {
    /// Loads what the fault needs into the tests' context on the real driver.
    ///
    /// # Panics
    /// When the real driver cannot load the PTX.
    pub fn load(driver: &'driver Driver) -> Fault<'driver> {
        let kernels = (crate::test_driver().kind == crate::DriverKind::Real).then(|| {
            // Modules load into the calling thread's current context.
            crate::context()
                .bind_to_thread()
                .expect("the context binds to this thread");
            Kernels::load(driver).expect("PTX loads")
        });
        Fault {
            kernels: ManuallyDrop::new(kernels),
        }
    }

    /// Enqueues the fault on `stream`.
    ///
    /// # Panics
    /// When the fault cannot be enqueued.
    pub fn launch(&self, stream: &cuda_host::Stream) {
        match self.kernels.as_ref() {
            Some(kernels) => {
                let mut address = 0x10u64;
                let mut value = 7u32;
                let mut arguments = [(&raw mut address).cast::<c_void>(), (&raw mut value).cast()];
                // SAFETY: the arguments match `store_to_address`; the fault is the point.
                unsafe {
                    kernels.launch(
                        kernels.store_to_address,
                        1,
                        1,
                        stream.as_raw(),
                        &mut arguments,
                    )
                }
                .expect("the faulting kernel is enqueued");
            }
            None => crate::software::expect_controls()
                .launch_fault(stream, cuda_host_sys::CUresult::CUDA_ERROR_ILLEGAL_ADDRESS),
        }
    }

    /// Fails `stream`'s context: enqueues the fault and waits until a synchronize answers it.
    ///
    /// # Panics
    /// When the fault cannot be enqueued, or the synchronize answers anything but the illegal
    /// address.
    #[track_caller]
    pub fn fail(&self, stream: &cuda_host::Stream) {
        self.launch(stream);
        let error = stream
            .synchronize()
            .expect_err("the synchronize answers the fault");
        assert_eq!(
            error.driver_result(),
            Some(cuda_host_sys::CUresult::CUDA_ERROR_ILLEGAL_ADDRESS)
        );
    }
}

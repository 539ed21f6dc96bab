//! The PTX kernels of `kernels/` at the workspace root, for tests that run real device work,
//! their stand-ins on the software driver ([`register_stand_ins`]), and the faulting launch that
//! fails a context on either driver.

#[path = "../../kernels/load.rs"]
mod load;

use cuda_host_sys::{CUresult, Driver};
use cuda_host_testing::{KernelLaunch, KernelParam};
pub use load::{Kernels, PTX};
use std::ffi::{CStr, c_void};
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

/// Registers, once per process on the software driver, stand-ins for the kernels of `kernels/`
/// (`kernels.cu` says what each does), so that launches of them do there what they do on a GPU;
/// does nothing on the real driver.
///
/// # Panics
/// When the software driver refuses a registration.
pub fn register_stand_ins() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    let Some(controls) = crate::software::controls() else {
        return;
    };
    REGISTERED.call_once(|| {
        let controls = controls.inner();
        let register = |name: &CStr, stand_in: StandIn| {
            controls
                .register_stand_in(name, stand_in)
                .unwrap_or_else(|e| panic!("{e}"));
        };
        register(c"fill_iota", fill_iota);
        register(c"add_scalar", add_scalar);
        register(c"store_to_address", store_to_address);
        register(c"spin_ns", spin_ns);
        register(c"empty_kernel", |_| Ok(()));
        register(c"bump_counter", bump_counter);
    });
}

type StandIn = fn(&KernelLaunch) -> Result<(), CUresult>;

/// The `index`th argument, as `T`: a launch the PTX declares otherwise is a failed launch.
fn argument<T: cuda_host_testing::stand_in::ArgumentValue>(
    launch: &KernelLaunch,
    index: usize,
) -> Result<T, CUresult> {
    launch
        .params()
        .get(index)
        .and_then(KernelParam::get)
        .ok_or(CUresult::CUDA_ERROR_LAUNCH_FAILED)
}

fn pointer<T>(launch: &KernelLaunch, index: usize) -> Result<*mut T, CUresult> {
    launch
        .params()
        .get(index)
        .and_then(KernelParam::pointer)
        .ok_or(CUresult::CUDA_ERROR_LAUNCH_FAILED)
}

/// `out[i] = i * mul` for each thread `i` below `n`.
fn fill_iota(launch: &KernelLaunch) -> Result<(), CUresult> {
    let (out, n, mul) = (
        pointer::<u32>(launch, 0)?,
        argument::<u32>(launch, 1)?,
        argument::<u32>(launch, 2)?,
    );
    for i in 0..launch.threads().min(u64::from(n)) {
        let i = i as u32;
        // SAFETY: the kernel's contract: `out` holds `n` words of device memory, which the
        // software driver keeps in host memory.
        unsafe { out.add(i as usize).write_volatile(i.wrapping_mul(mul)) };
    }
    Ok(())
}

/// `data[i] += *scalar` for each thread `i` below `n`.
fn add_scalar(launch: &KernelLaunch) -> Result<(), CUresult> {
    let (data, scalar, n) = (
        pointer::<u32>(launch, 0)?,
        pointer::<u32>(launch, 1)?,
        argument::<u32>(launch, 2)?,
    );
    // SAFETY: as in fill_iota: `scalar` is one word of device memory.
    let scalar = unsafe { scalar.read_volatile() };
    for i in 0..launch.threads().min(u64::from(n)) {
        // SAFETY: as in fill_iota: `data` holds `n` words.
        unsafe {
            let word = data.add(i as usize);
            word.write_volatile(word.read_volatile().wrapping_add(scalar));
        }
    }
    Ok(())
}

/// A store to an address: below 64 KiB, the fault a GPU's store to an unmapped address is.
fn store_to_address(launch: &KernelLaunch) -> Result<(), CUresult> {
    let (address, value) = (argument::<u64>(launch, 0)?, argument::<u32>(launch, 1)?);
    if address < 0x1_0000 {
        return Err(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    }
    // SAFETY: the kernel's contract: a valid, aligned word of device memory.
    unsafe { (address as usize as *mut u32).write_volatile(value) };
    Ok(())
}

/// Adds 1 to the word at an address.
fn bump_counter(launch: &KernelLaunch) -> Result<(), CUresult> {
    let address = argument::<u64>(launch, 0)?;
    if address < 0x1_0000 {
        return Err(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    }
    // SAFETY: the kernel's contract: a valid, aligned word of device memory, which the host may
    // read meanwhile (through atomics: `MappedWords`).
    unsafe { std::sync::atomic::AtomicU32::from_ptr(address as usize as *mut u32) }
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    Ok(())
}

/// Keeps the stream busy for `ns` nanoseconds.
fn spin_ns(launch: &KernelLaunch) -> Result<(), CUresult> {
    std::thread::sleep(std::time::Duration::from_nanos(argument::<u64>(launch, 0)?));
    Ok(())
}

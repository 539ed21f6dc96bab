//! Host memory both the host and the device can reach, and stream gates built on it: the tools
//! that order work in tests on either driver without kernels; and [`hold_and_release`], the
//! shape of a test of what waits behind a gate.

use cuda_host::{Context, Stream};
use cuda_host_sys::{
    CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE, CUdeviceptr, CUstreamWaitValue_flags,
    Driver,
};
use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// Page-locked host memory mapped into the device's address space, as `u32` words.
///
/// Taken from one pool allocated once per process and never freed: allocating or freeing pinned
/// memory synchronises with the device on the real driver, which could wait for a stream another
/// test holds at a gate (and fails inside another test's global-mode capture).
#[derive(Debug)]
pub struct MappedWords {
    driver: Arc<Driver>,
    host: *mut u32,
    device: CUdeviceptr,
    len: usize,
}

// SAFETY: the memory is plain shared memory; the host reaches it only through atomic accesses.
unsafe impl Send for MappedWords {}
// SAFETY: as above.
unsafe impl Sync for MappedWords {}

/// Words in the pool: 4 MiB.
const POOL_WORDS: usize = 1 << 20;

struct Pool {
    host: usize,
    device: CUdeviceptr,
    used: usize,
}

static POOL: Mutex<Option<Pool>> = Mutex::new(None);

impl MappedWords {
    /// Takes `len` words from the pool and zeroes them; the first is 8-byte aligned, so that a
    /// 64-bit stream operation may write it and the next as one.
    ///
    /// # Panics
    /// When the driver cannot allocate the pool, or the pool is used up.
    pub fn new(context: &Context, len: usize) -> MappedWords {
        let driver = Arc::clone(context.driver());
        let mut pool = POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let pool = pool.get_or_insert_with(|| allocate_pool(context));
        pool.used = pool.used.next_multiple_of(2);
        assert!(
            pool.used + len <= POOL_WORDS,
            "the pinned test pool is used up"
        );
        let words = MappedWords {
            driver,
            host: ptr::with_exposed_provenance_mut::<u32>(pool.host).wrapping_add(pool.used),
            device: pool.device + 4 * pool.used as CUdeviceptr,
            len,
        };
        pool.used += len;
        for index in 0..len {
            words.set(index, 0);
        }
        words
    }

    /// The word at `index` as an atomic: the driver's threads (or the device) read and write it
    /// concurrently, so plain or volatile host accesses would race with them.
    fn word(&self, index: usize) -> &AtomicU32 {
        assert!(index < self.len);
        // SAFETY: in bounds of the allocation, which lives as long as `self`, and aligned to 4
        // (pinned allocations are page-aligned); every host access to it is atomic.
        unsafe { AtomicU32::from_ptr(self.host.add(index)) }
    }

    /// The word at `index`, as the host sees it now.
    pub fn get(&self, index: usize) -> u32 {
        self.word(index).load(Ordering::SeqCst)
    }

    /// Writes the word at `index`.
    pub fn set(&self, index: usize, value: u32) {
        self.word(index).store(value, Ordering::SeqCst);
    }

    /// The host address of the word at `index`, for the driver calls that take host memory. What
    /// the driver's threads or the device write there is read through [`MappedWords::get`].
    pub fn host_address(&self, index: usize) -> *mut c_void {
        assert!(index < self.len);
        self.host.wrapping_add(index).cast()
    }

    /// The device address of the word at `index`.
    pub fn device_address(&self, index: usize) -> CUdeviceptr {
        assert!(index < self.len);
        self.device + 4 * index as CUdeviceptr
    }

    /// Enqueues on `stream` a device-side write of `value` to the word at `index`.
    pub fn write_in_stream(&self, stream: &Stream, index: usize, value: u32) {
        // SAFETY: the address is device-accessible memory of the stream's context.
        let result = unsafe {
            self.driver
                .cuMemsetD32Async(self.device_address(index), value, 1, stream.as_raw())
        };
        self.driver
            .check("cuMemsetD32Async", result)
            .expect("memset enqueued");
    }

    /// Enqueues on `stream` a device-side copy of the word at `from` to the word at `to`.
    ///
    /// A copy between host buffers: it returns only once the stream has reached and done it
    /// (`docs/REAL-DRIVER.md`), so never call it behind a gate that this thread opens later.
    pub fn copy_in_stream(&self, stream: &Stream, from: usize, to: usize) {
        // SAFETY: both addresses are device-accessible memory of the stream's context.
        let result = unsafe {
            self.driver.cuMemcpyDtoDAsync_v2(
                self.device_address(to),
                self.device_address(from),
                4,
                stream.as_raw(),
            )
        };
        self.driver
            .check("cuMemcpyDtoDAsync_v2", result)
            .expect("copy enqueued");
    }

    /// Enqueues on `stream` a wait until the word at `index` is at least `value`: later work of
    /// the stream is held back until the host (or other work) writes it.
    pub fn wait_in_stream(&self, stream: &Stream, index: usize, value: u32) {
        // SAFETY: the address is device-accessible memory of the stream's context.
        let result = unsafe {
            self.driver.cuStreamWaitValue32_v2(
                stream.as_raw(),
                self.device_address(index),
                value,
                CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ.0,
            )
        };
        self.driver
            .check("cuStreamWaitValue32_v2", result)
            .expect("wait enqueued");
    }
}

fn allocate_pool(context: &Context) -> Pool {
    context.bind_to_thread().expect("context binds");
    let driver = context.driver();
    let mut host: *mut c_void = ptr::null_mut();
    // SAFETY: `host` is a valid out-pointer; the context is current.
    let result = unsafe {
        driver.cuMemHostAlloc(
            &mut host,
            POOL_WORDS * 4,
            CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE,
        )
    };
    driver
        .check("cuMemHostAlloc", result)
        .expect("pinned memory");
    let mut device = 0;
    // SAFETY: `host` was allocated with DEVICEMAP just above.
    let result = unsafe { driver.cuMemHostGetDevicePointer_v2(&mut device, host, 0) };
    driver
        .check("cuMemHostGetDevicePointer_v2", result)
        .expect("device address of pinned memory");
    Pool {
        host: host.expose_provenance(),
        device,
        used: 0,
    }
}

/// A closed door in a stream: work enqueued after [`Gate::hold`] waits until [`Gate::open`].
/// Dropping it opens it, so that no stream waits forever when a test fails.
#[derive(Debug)]
pub struct Gate {
    flag: MappedWords,
}

impl Gate {
    /// A closed gate.
    pub fn new(context: &Context) -> Gate {
        Gate {
            flag: MappedWords::new(context, 1),
        }
    }

    /// Makes `stream` wait at this point until the gate opens.
    pub fn hold(&self, stream: &Stream) {
        self.flag.wait_in_stream(stream, 0, 1);
    }

    /// Lets every held stream go on.
    pub fn open(&self) {
        self.flag.set(0, 1);
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
    }
}

/// The shape of a test of what waits, in one call: holds `stream` at a fresh gate, runs `enqueue`
/// (work that queues behind the gate, on `stream` or on streams that wait for it), then
/// `while_held` (what the test checks, or does, while that work waits: mostly, that none of it
/// has run), opens the gate, and answers `synchronize(stream)`, which the caller picks:
/// cuda-host's [`Stream::synchronize`], a raw call, or a wait for another stream or an event.
///
/// # Panics
/// When a check panics (the gate opens as it unwinds).
#[track_caller]
pub fn hold_and_release<R>(
    stream: &Stream,
    enqueue: impl FnOnce(),
    while_held: impl FnOnce(),
    synchronize: impl FnOnce(&Stream) -> R,
) -> R {
    let gate = Gate::new(stream.context());
    gate.hold(stream);
    enqueue();
    while_held();
    gate.open();
    synchronize(stream)
}

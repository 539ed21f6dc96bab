//! The counters stream points are made of: 32-bit words of pinned, device-mapped host memory,
//! one per stream in use, written by the stream (`cuStreamWriteValue32`) and read by the host.
//!
//! **32 bits, not 64.** On an H200 a 32-bit stream write costs the stream 0.9 µs between two
//! kernels, a 64-bit one 1.3 µs (`benches/stream_points.rs`). Points are numbered in 64 bits on
//! the host and written as their low half; the host extends what it reads from the highest point
//! it knows passed (`high`). That is exact while fewer than 2^32 points of one counter are
//! outstanding, which the driver's queue depth guarantees by far (it blocks an enqueue long
//! before).
//!
//! A counter's sequence only grows: a point is the next number, enqueued as a write under the
//! counter's lock, so the stream writes the numbers in order, and a point is passed once the
//! word holds it or a later one. A value read that is no point between `high` and the last one
//! issued is a stale write arriving late (a graph replaying a write that other code's capture
//! took; a counter given to another stream while an old write was still on its way cannot be,
//! see below) and is ignored: it never makes a passed point look unpassed.
//!
//! Streams are told apart by `cuStreamGetId`, which is unique for the life of the process (a
//! destroyed stream's handle may come back; its id does not) and resolves the per-thread default
//! stream to the calling thread's. A counter serves one stream at a time. When every counter of
//! the context is taken, the counters whose stream has passed all its points are taken back
//! (their sequence goes on where it was, so no point of the old stream can be mistaken for one
//! of the new); only when none is free is another page of pinned memory allocated.
//!
//! The pages belong to the context's shared state and are freed before the context is released,
//! except a page a stream may still write to (a point nobody waits for any more), which is left
//! to the context's destruction rather than freed under the device's feet.

use crate::checked::checked;
use crate::error::Result;
use crate::launch::{ContextShared, Progress, has_failed};
use crate::sync::lock;
use cuda_host_sys::{
    CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE, CUcontext, CUdeviceptr, CUstream, Driver,
};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes of pinned memory per page: 1024 counters.
const PAGE_BYTES: usize = 4096;
const COUNTERS_PER_PAGE: usize = PAGE_BYTES / size_of::<u32>();

/// One stream's counter.
pub(crate) struct Counter {
    /// The word in pinned memory; valid while the context's shared state lives.
    host: *const AtomicU32,
    /// The same word as the device addresses it.
    device: CUdeviceptr,
    state: Mutex<CounterState>,
    /// The last point enqueued: written under `state`'s lock once its write was enqueued.
    issued: AtomicU64,
    /// The highest point the host has seen passed.
    high: AtomicU64,
}

struct CounterState {
    /// The id of the stream the counter serves, if any.
    owner: Option<u64>,
}

// SAFETY: `host` points to pinned memory that any thread may read atomically; the rest is
// atomics and a mutex.
unsafe impl Send for Counter {}
// SAFETY: as above.
unsafe impl Sync for Counter {}

impl Progress for Counter {
    fn passed(&self) -> u64 {
        // `issued` first: a point written but not yet counted as issued is ignored this time,
        // never taken for a stale write's wrapped value.
        let issued = self.issued.load(Ordering::Acquire);
        let high = self.high.load(Ordering::Acquire);
        // SAFETY: whoever asks holds the context's shared state (a point's holder does), which
        // keeps the page allocated; the stream writes the word, so every host access is atomic.
        let seen = unsafe { (*self.host).load(Ordering::Acquire) };
        let ahead = u64::from(seen.wrapping_sub(high as u32));
        if ahead == 0 || ahead > issued.saturating_sub(high) {
            return high;
        }
        let passed = high + ahead;
        self.high.fetch_max(passed, Ordering::AcqRel).max(passed)
    }
}

/// A page of counters.
struct Page {
    host: *mut c_void,
    counters: Vec<Arc<Counter>>,
}

/// The counters of one context.
pub(crate) struct ContextCounters {
    driver: Arc<Driver>,
    context: CUcontext,
    state: Mutex<State>,
}

// SAFETY: the raw pointers are the context's handle and pinned allocations, valid on any thread.
unsafe impl Send for ContextCounters {}
// SAFETY: as above; the mutable state is behind the mutex.
unsafe impl Sync for ContextCounters {}

#[derive(Default)]
struct State {
    pages: Vec<Page>,
    free: Vec<Arc<Counter>>,
    /// Stream id to its counter.
    streams: HashMap<u64, Arc<Counter>>,
}

// SAFETY: pages hold pinned allocations, valid on any thread.
unsafe impl Send for State {}

/// What marking a point on a stream gives: its counter and number.
pub(crate) struct Marked {
    pub(crate) counter: Arc<Counter>,
    pub(crate) point: u64,
}

impl ContextCounters {
    pub(crate) fn new(context: &ContextShared) -> ContextCounters {
        ContextCounters {
            driver: Arc::clone(context.driver_arc()),
            context: context.raw(),
            state: Mutex::new(State::default()),
        }
    }

    /// Enqueues on `stream` (whose id is `stream_id`) the write of its counter's next point.
    /// The context must be current where the driver resolves a special stream against it.
    pub(crate) fn mark(
        &self,
        shared: &ContextShared,
        stream: CUstream,
        stream_id: u64,
    ) -> Result<Marked> {
        loop {
            let counter = self.counter_of(shared, stream_id)?;
            let state = lock(&counter.state);
            if state.owner != Some(stream_id) {
                // Taken back between the look-up and the lock: look again.
                continue;
            }
            let point = counter.issued.load(Ordering::Relaxed) + 1;
            // SAFETY: a valid stream (the caller's); the address is the device's view of a word
            // of pinned memory of this context, 4-byte aligned. The low half of the point is
            // written (see the module's comment).
            unsafe {
                checked!(
                    &self.driver,
                    cuStreamWriteValue32_v2(stream, counter.device, point as u32, 0)
                )
            }?;
            counter.issued.store(point, Ordering::Release);
            drop(state);
            return Ok(Marked { counter, point });
        }
    }

    /// The counter of the stream `stream_id`, given one if it has none.
    fn counter_of(&self, shared: &ContextShared, stream_id: u64) -> Result<Arc<Counter>> {
        let mut state = lock(&self.state);
        if let Some(counter) = state.streams.get(&stream_id) {
            return Ok(Arc::clone(counter));
        }
        if state.free.is_empty() {
            state.take_back_quiet_counters();
        }
        if state.free.is_empty() {
            let page = shared.with_current(|| self.allocate_page())?;
            state.free.extend(page.counters.iter().rev().cloned());
            state.pages.push(page);
        }
        let counter = state.free.pop().expect("a free counter");
        lock(&counter.state).owner = Some(stream_id);
        state.streams.insert(stream_id, Arc::clone(&counter));
        Ok(counter)
    }

    /// A page of pinned, device-mapped counters, all zero. The context is current.
    fn allocate_page(&self) -> Result<Page> {
        let driver = &*self.driver;
        let mut host: *mut c_void = std::ptr::null_mut();
        // SAFETY: `host` is a valid out-pointer; the context is current.
        unsafe {
            checked!(
                driver,
                cuMemHostAlloc(
                    &mut host,
                    PAGE_BYTES,
                    CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE
                )
            )
        }?;
        let mut device: CUdeviceptr = 0;
        // SAFETY: `host` was allocated with DEVICEMAP just above; `device` is a valid
        // out-pointer.
        let mapped =
            unsafe { checked!(driver, cuMemHostGetDevicePointer_v2(&mut device, host, 0)) };
        if let Err(error) = mapped {
            // SAFETY: allocated above, never handed out.
            if let Err(freed) = unsafe { checked!(driver, cuMemFreeHost(host)) } {
                log::error!("cannot free a page of stream-point counters: {freed}");
            }
            return Err(error.into());
        }
        let counters = (0..COUNTERS_PER_PAGE)
            .map(|index| {
                // SAFETY: in bounds of the page; pinned allocations are page-aligned, so each
                // word is 4-byte aligned.
                let word = unsafe { host.cast::<AtomicU32>().add(index) };
                // SAFETY: as above; nothing else touches the fresh page yet.
                unsafe { word.write(AtomicU32::new(0)) };
                Arc::new(Counter {
                    host: word,
                    device: device + (index * size_of::<u32>()) as CUdeviceptr,
                    state: Mutex::new(CounterState { owner: None }),
                    issued: AtomicU64::new(0),
                    high: AtomicU64::new(0),
                })
            })
            .collect();
        Ok(Page { host, counters })
    }

    /// How many counters serve a stream now, and how many pages exist (for tests).
    #[cfg(test)]
    fn sizes(&self) -> (usize, usize) {
        let state = lock(&self.state);
        (state.streams.len(), state.pages.len())
    }
}

impl State {
    /// Takes back the counters whose stream has passed every point it was given, and which no
    /// thread is marking a point on.
    fn take_back_quiet_counters(&mut self) {
        let free = &mut self.free;
        self.streams.retain(|_, counter| {
            let Ok(mut state) = counter.state.try_lock() else {
                return true;
            };
            if counter.passed() < counter.issued.load(Ordering::Acquire) {
                return true;
            }
            state.owner = None;
            drop(state);
            free.push(Arc::clone(counter));
            false
        });
    }
}

impl Drop for ContextCounters {
    fn drop(&mut self) {
        let pages = std::mem::take(&mut lock(&self.state).pages);
        if pages.is_empty() {
            return;
        }
        let failed = has_failed(self.context.addr());
        let driver = &*self.driver;
        let mut previous = std::ptr::null_mut();
        // SAFETY: `previous` is a valid out-pointer.
        let current = unsafe { checked!(driver, cuCtxGetCurrent(&mut previous)) }
            // SAFETY: this context is still retained by the shared state being dropped.
            .and_then(|()| unsafe { checked!(driver, cuCtxSetCurrent(self.context)) });
        if let Err(error) = current {
            log::error!("cannot free the stream-point counters of a context: {error}");
            return;
        }
        for page in pages {
            let quiet = failed
                || page
                    .counters
                    .iter()
                    .all(|counter| counter.passed() >= counter.issued.load(Ordering::Acquire));
            if !quiet {
                // A write of a point nobody waits for may still arrive: the page goes with the
                // context's destruction instead.
                log::debug!("a page of stream-point counters still written to is left allocated");
                continue;
            }
            // SAFETY: allocated by `allocate_page`, freed once; no stream writes to it any more.
            if let Err(error) = unsafe { checked!(driver, cuMemFreeHost(page.host)) } {
                log::error!("cannot free a page of stream-point counters: {error}");
            }
        }
        // SAFETY: `previous` was current on this thread a moment ago (or null, for none).
        if let Err(error) = unsafe { checked!(driver, cuCtxSetCurrent(previous)) } {
            log::error!("cannot make the previous context current again: {error}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_driver;
    use cuda_host_sys::{CUresult, cuuint32_t};
    use std::ffi::c_uint;
    use std::sync::atomic::AtomicUsize;

    static FREED: AtomicUsize = AtomicUsize::new(0);

    unsafe extern "C" fn host_alloc(host: *mut *mut c_void, bytes: usize, _flags: c_uint) -> CUresult {
        let page = Box::leak(vec![0u64; bytes / 8].into_boxed_slice());
        // SAFETY: a valid out-pointer.
        unsafe { host.write(page.as_mut_ptr().cast()) };
        CUresult::CUDA_SUCCESS
    }

    unsafe extern "C" fn device_pointer(
        device: *mut CUdeviceptr,
        host: *mut c_void,
        _flags: c_uint,
    ) -> CUresult {
        // SAFETY: a valid out-pointer.
        unsafe { device.write(host.expose_provenance() as CUdeviceptr) };
        CUresult::CUDA_SUCCESS
    }

    unsafe extern "C" fn free_host(host: *mut c_void) -> CUresult {
        let page = std::ptr::slice_from_raw_parts_mut(host.cast::<u64>(), PAGE_BYTES / 8);
        // SAFETY: made by `host_alloc` as a boxed slice of a page's words, freed once.
        drop(unsafe { Box::from_raw(page) });
        FREED.fetch_add(1, Ordering::SeqCst);
        CUresult::CUDA_SUCCESS
    }

    /// The stream "writes" at once, as if it were idle.
    unsafe extern "C" fn write_value(
        _stream: CUstream,
        address: CUdeviceptr,
        value: cuuint32_t,
        _flags: c_uint,
    ) -> CUresult {
        let word = std::ptr::with_exposed_provenance_mut::<u32>(address as usize);
        // SAFETY: the fake device address is the exposed host address of a live counter word.
        unsafe { AtomicU32::from_ptr(word) }.store(value, Ordering::SeqCst);
        CUresult::CUDA_SUCCESS
    }

    unsafe extern "C" fn set_current(_context: CUcontext) -> CUresult {
        CUresult::CUDA_SUCCESS
    }

    fn fakes() -> Arc<Driver> {
        // SAFETY: each fake has its entry point's signature.
        unsafe {
            fake_driver::driver(&[
                (c"cuMemHostAlloc", host_alloc as *mut c_void),
                (c"cuMemHostGetDevicePointer_v2", device_pointer as *mut c_void),
                (c"cuMemFreeHost", free_host as *mut c_void),
                (c"cuStreamWriteValue32_v2", write_value as *mut c_void),
                (c"cuCtxSetCurrent", set_current as *mut c_void),
            ])
        }
    }

    #[test]
    fn points_of_a_stream_count_up_and_idle_counters_are_reused_before_a_new_page() {
        let driver = fakes();
        let shared = fake_driver::context(&driver);
        let counters = ContextCounters::new(&shared);
        let stream = 0x77_usize as CUstream;
        let first = counters.mark(&shared, stream, 1).expect("marked");
        let second = counters.mark(&shared, stream, 1).expect("marked");
        assert!(Arc::ptr_eq(&first.counter, &second.counter));
        assert_eq!((first.point, second.point), (1, 2));
        assert_eq!(second.counter.passed(), 2, "the fake stream wrote at once");
        // More streams than a page holds: the first page's streams passed all their points, so
        // their counters are taken back instead of allocating another page.
        for id in 2..=(COUNTERS_PER_PAGE as u64 + 10) {
            counters.mark(&shared, stream, id).expect("marked");
        }
        assert_eq!(counters.sizes().1, 1, "one page");
        // A counter given to another stream goes on from where it was.
        let reused = counters.mark(&shared, stream, 1).expect("marked");
        assert!(reused.point > 0);
        let before = FREED.load(Ordering::SeqCst);
        drop(counters);
        assert_eq!(FREED.load(Ordering::SeqCst), before + 1, "the page was freed");
    }

    /// A counter over `word` with `issued` points enqueued, of which `high` are known passed.
    fn counter_over(word: &AtomicU32, issued: u64, high: u64) -> Counter {
        Counter {
            host: word,
            device: 0,
            state: Mutex::new(CounterState { owner: Some(1) }),
            issued: AtomicU64::new(issued),
            high: AtomicU64::new(high),
        }
    }

    #[test]
    fn a_late_lower_write_never_makes_a_passed_point_look_unpassed() {
        let word = AtomicU32::new(0);
        let counter = counter_over(&word, 9, 0);
        word.store(9, Ordering::SeqCst);
        assert_eq!(counter.passed(), 9);
        word.store(4, Ordering::SeqCst);
        assert_eq!(counter.passed(), 9);
    }

    #[test]
    fn points_past_the_32_bit_wrap_are_passed_in_order_and_never_early() {
        let word = AtomicU32::new(0);
        let below_wrap = u64::from(u32::MAX) - 1;
        let counter = counter_over(&word, below_wrap + 5, below_wrap);
        word.store(below_wrap as u32, Ordering::SeqCst);
        assert_eq!(counter.passed(), below_wrap, "nothing new");
        word.store(u32::MAX, Ordering::SeqCst);
        assert_eq!(counter.passed(), below_wrap + 1);
        word.store(2, Ordering::SeqCst); // the low half of 2^32 + 2
        assert_eq!(counter.passed(), (1 << 32) + 2);
        // A value beyond the last point issued is not a point of this sequence (a write that
        // raced `issued`, or garbage): ignored, never taken for a point not yet enqueued.
        word.store(9, Ordering::SeqCst);
        assert_eq!(counter.passed(), (1 << 32) + 2);
        // A stale value from before the wrap is far behind: ignored too.
        word.store(u32::MAX - 7, Ordering::SeqCst);
        assert_eq!(counter.passed(), (1 << 32) + 2);
        word.store(3, Ordering::SeqCst);
        assert_eq!(counter.passed(), below_wrap + 5, "the last point issued");
    }
}

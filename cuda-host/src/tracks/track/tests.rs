//! The tracks' unit tests, on fakes of the event, capture and pinned-memory calls: a fake
//! stream completes its records, and the word writes among them, in order, when told to. The
//! looks' tests are in `looks`, the written points' and their word's in `words`.

// Test-only files, as the suite's source scans see them (`#[cfg(test)] mod`).
#[cfg(test)]
mod looks;
#[cfg(test)]
mod words;

use super::context::Marked;
use super::handshake::{CLOSED, IDLE, LOOKING, Looking};
use super::look::{DESTROYED_PER_LOOK, KEPT_EVENTS, PACED_LOOK};
use super::*;
use crate::error::{Error, Result};
use crate::fake_driver;
use crate::launch::{ContextShared, Look};
use crate::sync::lock;
use cuda_host_sys::{CUcontext, CUdeviceptr, CUevent, CUresult, CUstream, Driver};
use cuda_host_sys::{CUstreamCaptureMode, CUstreamCaptureStatus};
use std::collections::HashMap;
use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Fake streams, shared by the tests: events recorded in order, of which the first
/// `completed` ran. Tests tell their events apart by the stream handle they record on.
#[derive(Default)]
struct FakeStreams {
    /// Event to (stream, index of its last record on that stream).
    last_record: HashMap<usize, (usize, usize)>,
    /// Stream to (records so far, records completed).
    streams: HashMap<usize, (usize, usize)>,
    /// Stream to the queries of its events.
    queries: HashMap<usize, usize>,
    /// Streams whose next `cuStreamIsCapturing` answers that they capture.
    capturing_once: Vec<usize>,
    /// Stream to the events destroyed that were last recorded on it.
    destroyed: HashMap<usize, usize>,
    next_event: usize,
    /// Per stream, the word writes enqueued: the record index, the address, the value.
    writes: HashMap<usize, Vec<(usize, usize, u32)>>,
    /// Queries of events never recorded (a track's probe), by event.
    probe_queries: HashMap<usize, usize>,
    /// Pinned allocations not freed, by address (held here, so that a page kept for the
    /// life of the process is reachable, not leaked).
    allocations: HashMap<usize, Allocation>,
}

struct Allocation(*mut u8, usize);

// SAFETY: an allocation's address and size, used under the fake's lock.
unsafe impl Send for Allocation {}

static STREAMS: Mutex<Option<FakeStreams>> = Mutex::new(None);

fn with_streams<T>(call: impl FnOnce(&mut FakeStreams) -> T) -> T {
    call(lock(&STREAMS).get_or_insert_with(FakeStreams::default))
}

/// Lets the stream `stream` run its first `records` records.
fn complete(stream: usize, records: usize) {
    with_streams(|fake| {
        fake.streams.entry(stream).or_default().1 = records;
        for &(index, address, value) in fake.writes.get(&stream).into_iter().flatten() {
            if index < records {
                let word = std::ptr::with_exposed_provenance::<AtomicU32>(address);
                // SAFETY: a track's word, pinned memory of the fake context that lives
                // until the context's last value goes, after the test's tracks.
                unsafe { &*word }.store(value, Ordering::Release);
            }
        }
    });
}

/// What `ContextTracks::mark_written` is given to enqueue on `stream`: the write of the
/// point, a record of the stream like an event's, if there is one.
fn enqueue_on(stream: usize) -> impl FnOnce(Option<PointWrite>) -> Result<()> {
    move |point| {
        with_streams(|fake| {
            let (records, _) = fake.streams.entry(stream).or_default();
            let index = *records;
            *records += 1;
            if let Some(point) = point {
                let writes = fake.writes.entry(stream).or_default();
                writes.push((index, point.address as usize, point.value));
            }
        });
        Ok(())
    }
}

/// The queries of `track`'s probe (tests run at once: each counts its own).
fn probe_queries(track: &Track) -> usize {
    let probe = track.core.probe().map_or(0, <*mut _>::addr);
    with_streams(|fake| fake.probe_queries.get(&probe).copied().unwrap_or(0))
}

/// The queries of the events recorded on `stream` so far.
fn queries(stream: usize) -> usize {
    with_streams(|fake| fake.queries.get(&stream).copied().unwrap_or(0))
}

unsafe extern "C" fn create(event: *mut CUevent, _flags: c_uint) -> CUresult {
    let id = with_streams(|fake| {
        fake.next_event += 1;
        fake.next_event
    });
    // SAFETY: a valid out-pointer.
    unsafe { event.write(std::ptr::without_provenance_mut(id)) };
    CUresult::CUDA_SUCCESS
}

unsafe extern "C" fn record(event: CUevent, stream: CUstream) -> CUresult {
    with_streams(|fake| {
        let (records, _) = fake.streams.entry(stream.addr()).or_default();
        fake.last_record
            .insert(event.addr(), (stream.addr(), *records));
        *records += 1;
    });
    CUresult::CUDA_SUCCESS
}

unsafe extern "C" fn query(event: CUevent) -> CUresult {
    with_streams(|fake| match fake.last_record.get(&event.addr()) {
        Some(&(stream, index)) => {
            *fake.queries.entry(stream).or_default() += 1;
            if index < fake.streams[&stream].1 {
                CUresult::CUDA_SUCCESS
            } else {
                CUresult::CUDA_ERROR_NOT_READY
            }
        }
        None => {
            *fake.probe_queries.entry(event.addr()).or_default() += 1;
            CUresult::CUDA_SUCCESS
        }
    })
}

unsafe extern "C" fn host_alloc(host: *mut *mut c_void, bytes: usize, _flags: c_uint) -> CUresult {
    let layout = std::alloc::Layout::from_size_align(bytes, 4096).expect("a page's layout");
    // SAFETY: a layout of non-zero size.
    let memory = unsafe { std::alloc::alloc_zeroed(layout) };
    with_streams(|fake| {
        let address = memory.expose_provenance();
        fake.allocations.insert(address, Allocation(memory, bytes))
    });
    // SAFETY: the caller's out-pointer.
    unsafe { host.write(memory.cast()) };
    CUresult::CUDA_SUCCESS
}

unsafe extern "C" fn device_pointer(
    device: *mut CUdeviceptr,
    host: *mut c_void,
    _flags: c_uint,
) -> CUresult {
    // The fake device address is the host address.
    // SAFETY: the caller's out-pointer.
    unsafe { device.write(host.expose_provenance() as CUdeviceptr) };
    CUresult::CUDA_SUCCESS
}

unsafe extern "C" fn host_free(host: *mut c_void) -> CUresult {
    let allocation = with_streams(|fake| fake.allocations.remove(&host.addr()));
    let Allocation(memory, bytes) = allocation.expect("allocated");
    let layout = std::alloc::Layout::from_size_align(bytes, 4096).expect("a page's layout");
    // SAFETY: allocated by `host_alloc` with this layout, freed once.
    unsafe { std::alloc::dealloc(memory, layout) };
    CUresult::CUDA_SUCCESS
}

unsafe extern "C" fn destroy(event: CUevent) -> CUresult {
    with_streams(|fake| {
        if let Some(&(stream, _)) = fake.last_record.get(&event.addr()) {
            *fake.destroyed.entry(stream).or_default() += 1;
        }
    });
    CUresult::CUDA_SUCCESS
}

/// The events destroyed whose last record was on `stream`.
fn destroyed(stream: usize) -> usize {
    with_streams(|fake| fake.destroyed.get(&stream).copied().unwrap_or(0))
}

unsafe extern "C" fn set_current(_context: CUcontext) -> CUresult {
    CUresult::CUDA_SUCCESS
}

unsafe extern "C" fn exchange_mode(_mode: *mut CUstreamCaptureMode) -> CUresult {
    CUresult::CUDA_SUCCESS
}

unsafe extern "C" fn is_capturing(
    stream: CUstream,
    status: *mut CUstreamCaptureStatus,
) -> CUresult {
    let capturing = with_streams(|fake| {
        let found = fake.capturing_once.iter().position(|&s| s == stream.addr());
        found.map(|index| fake.capturing_once.swap_remove(index))
    });
    let answer = if capturing.is_some() {
        CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
    } else {
        CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
    };
    // SAFETY: a valid out-pointer.
    unsafe { status.write(answer) };
    CUresult::CUDA_SUCCESS
}

fn fakes() -> Arc<Driver> {
    // SAFETY: each fake has its entry point's signature.
    unsafe {
        fake_driver::driver(&[
            (c"cuEventCreate", create as *mut c_void),
            (c"cuEventRecord", record as *mut c_void),
            (c"cuEventQuery", query as *mut c_void),
            (c"cuEventDestroy_v2", destroy as *mut c_void),
            (c"cuCtxSetCurrent", set_current as *mut c_void),
            (c"cuStreamIsCapturing", is_capturing as *mut c_void),
            (c"cuMemHostAlloc", host_alloc as *mut c_void),
            (
                c"cuMemHostGetDevicePointer_v2",
                device_pointer as *mut c_void,
            ),
            (c"cuMemFreeHost", host_free as *mut c_void),
            (
                c"cuThreadExchangeStreamCaptureMode",
                exchange_mode as *mut c_void,
            ),
        ])
    }
}

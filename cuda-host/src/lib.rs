//! Stream-ordered host functions for the CUDA driver: run Rust code between GPU work, in stream
//! order, without use-after-free, leaks, panics across FFI or deadlocks.
//!
//! ```no_run
//! use cuda_host::{Device, Stream, StreamFlags, host_launch};
//!
//! let driver = cuda_host::driver()?;
//! let context = Device::get(driver, 0)?.primary_context()?;
//! let stream = Stream::new(&context, StreamFlags::NonBlocking)?;
//! host_launch(&stream, || println!("after the work enqueued before, before the work after"))?;
//! stream.synchronize()?;
//! # Ok::<(), cuda_host::Error>(())
//! ```
//!
//! # Testing without a GPU
//! [cuda-host-testing](https://docs.rs/cuda-host-testing), a dev-dependency, is a software
//! driver (a test double of `libcuda`) for your tests where there is no GPU: real streams,
//! host-function thread, events, captures and graphs; no kernels. Its `select_driver()` picks
//! NVIDIA's driver when it has a device and the software one otherwise (or what
//! `CUDA_TEST_DRIVER` asks) and makes it the driver [`driver`] answers; its controls inject
//! driver failures, sticky errors and stand-ins for long or faulting kernels, on contexts of
//! their own, so that a fault test does not fail the other tests of its binary.
//!
//! # Finding the driver calls
//! A method that wraps a driver call names it in a doc alias, so that searching these docs for
//! the C name (`cuStreamSynchronize`) finds the Rust one, and links NVIDIA's reference section
//! for it: the driver's own rules (what it synchronizes, which errors it may report from earlier
//! work) hold as they are written there.
//!
//! # Crate features
//! - `bindgen` (off by default): generate the driver bindings at build time from the `cuda.h`
//!   found on the building machine (cuda-host-sys's `bindgen` feature; needs libclang). Without
//!   it they come from cuda-host-sys's committed snapshot of the CUDA 13.5 headers, and bindgen is
//!   not compiled.
//! - `cudarc` (off by default): `Context::from_cudarc` and `Stream::from_cudarc` make cuda-host's
//!   objects from cudarc 0.19's `Arc<CudaContext>` and `Arc<CudaStream>`, holding them and
//!   checking that they belong together, so that [`host_launch`](fn@host_launch) runs on cudarc's streams in safe
//!   code. The CUDA version and the way libcuda is loaded stay those of your own cudarc
//!   dependency.
//! - `nvtx` (off by default): NVTX ranges for host functions on both engines and graph host
//!   nodes, and marks for stream points, named after the closure's type or the name given with
//!   [`named`](options::named), so that Nsight Systems shows which host function made a bubble between kernels.
//!   Nothing is linked: the profiler's injection library (`NVTX_INJECTION64_PATH`, which Nsight
//!   Systems sets) is opened at run time, on the first launch; absent, nothing happens.
//! - `tracing` (off by default): [`tracing`](https://docs.rs/tracing) spans for the same runs,
//!   entered on the thread that runs them, with the queue delay (launch to start of the run) and
//!   the run time as fields, and events for stream points (targets `cuda_host::host_function`,
//!   `cuda_host::graph_host_node`, `cuda_host::polled_engine`, `cuda_host::stream_points`, level
//!   TRACE).
//!
//!   Without these two features nothing of them is compiled; with them and no profiler or
//!   subscriber attached, an observation costs a load. A subscriber or an injection library runs
//!   on the driver's thread: its panics are caught there, and a cuda-host call it makes there is
//!   refused as any made inside a host function.
//!
//! # How it works
//! - [`host_launch`](fn@host_launch) puts the closure in a launch record (a reused slot; a closure of up to 64
//!   bytes needs no allocation) and enqueues an `extern "C"` trampoline with `cuLaunchHostFunc`.
//!   The trampoline claims the record, runs the closure under `catch_unwind` on the driver's
//!   thread, then hands the record to the inbox of the thread that launched it. That thread drops
//!   it at its next cuda-host call (or [`reclaim`]), never the driver's thread and never another
//!   thread; a thread's records pass to any thread once it exited. No drop runs while the thread
//!   captures, or while a global-mode builder capture is open: a `Drop` that
//!   frees memory would invalidate the capture.
//! - The driver never runs host functions of a context that failed (a kernel's illegal address):
//!   cuda-host then reclaims their records itself, when a call answers the failure, and at the
//!   latest when their stream (or, after the failure, the context value they were launched
//!   through) is dropped. The driver holds a ticket, not the record's address,
//!   and generations never repeat, so a call that came after all would find its ticket stale.
//! - A stream that is being captured into a graph is refused before anything is enqueued: a graph
//!   runs its host functions on every launch, or never, so graph builders own their callables. A
//!   builder capture waits for launches in flight on its stream. Callables that
//!   may run many times go through [`host_launch_replayable`](graph::host_launch_replayable): a node of the graph being
//!   captured, whoever began the capture, owned by that graph; a run-once launch otherwise.
//! - If the driver refuses a launch, the record is dropped at once on the calling thread.
//! - A panic in a host function, in the panic hook, in a logger, or in the `Drop` of a captured
//!   value is caught and reported; nothing unwinds into the driver.
//!
//! # Beyond the driver's primitive
//! - [`release_in_stream_order`](points::release_in_stream_order): hand a value to a stream; it is dropped on this thread once the
//!   stream passed that point. [`stream_point`](points::stream_point): a future that completes there. A point is one
//!   event record, not a host function.
//! - [`HostEngine::Polled`](options::HostEngine::Polled) ([`Stream::with_host_engine`]): host functions served by a small pool
//!   of cuda-host's threads ([`set_polled_engine_threads`](polled::set_polled_engine_threads)) through a stream memory write and
//!   wait, at a twentieth of the driver's cost to the stream between kernels, different streams'
//!   functions in parallel.
//! - [`host_copy_fn`](host_copy::host_copy_fn): a `CUhostFn` that copies between host buffers in stream order
//!   ([`host_copy_scope`](host_copy::host_copy_scope), [`host_copy_raw`](host_copy::host_copy_raw)).
//! - [`Timeline`](timeline::Timeline): a monotonic 64-bit counter the host signals and streams wait on (a stream
//!   memory wait), streams signal and the host waits on or awaits; no host function.
//! - [`host_launch_with`](options::host_launch_with): `cuLaunchHostFunc_v2`'s sync mode ([`HostTaskSyncMode`](options::HostTaskSyncMode)), or a typed
//!   error on drivers without it.
//!
//! `docs/RELIABILITY.md` in the repository states each rule and how it is tested.
//!
//! # The driver's rules for host functions
//! A host function must not call CUDA: the driver may fail such calls or deadlock. cuda-host
//! marks the thread while one of its host functions runs, and its own calls made there return
//! [`Error::InHostFunction`] instead of reaching the driver; a [`Stream`] or [`Event`] dropped
//! there is destroyed later on a caller's thread.
//!
//! A host function blocks its stream, and on the real driver all host functions of a process
//! share one thread. So a host function must not wait for anything that needs the stream to
//! advance, and a thread that waits for a stream (synchronize) must not hold a lock the host
//! function needs: neither ever wakes. Some enqueues wait too: on the real driver, an async copy
//! between two host buffers, or into pageable host memory, does not return until the stream has
//! reached it (`docs/REAL-DRIVER.md`), so the thread that would release what the stream waits
//! for must not be the one enqueueing such a copy.

// A loom build holds only the cores, which only its models use.
#![cfg_attr(loom, allow(dead_code))]

// The README's example compiles (a doctest of its own).
#[cfg(all(doctest, not(loom)))]
#[doc = include_str!("../README.md")]
struct ReadmeExample;

/// Items left out of builds for the loom models, which hold only the lock-free cores.
macro_rules! outside_loom_models {
    ($($item:item)*) => { $( #[cfg(not(loom))] $item )* };
}

mod launch;
#[cfg(all(test, loom))]
mod models;
mod sync;
mod tracks;

outside_loom_models! {
    mod checked;
    mod contain;
    #[cfg(test)]
    mod fake_driver;
    mod error;
    pub mod graph;
    mod handle;
    pub mod host_copy;
    mod host_launch;
    pub mod metrics;
    mod objects;
    mod observe;
    pub mod options;
    mod own_thread;
    mod pause;
    pub mod panics;
    pub mod points;
    pub mod polled;
    mod query_events;
    mod stream_leases;
    pub mod timeline;

    pub use contain::in_host_function;
    pub use cuda_host_sys as sys;
    pub use error::{Error, Result};
    pub use host_launch::{HostLaunch, UserData, host_launch, host_launch_raw};
    pub use launch::reclaim;
    pub use metrics::metrics;
    pub use objects::{Context, Device, Event, EventFlags, Stream, StreamFlags};

    use std::sync::Arc;

    /// The process-wide driver (`libcuda`, opened on first use; see [`cuda_host_sys::driver`]).
    ///
    /// # Errors
    /// [`Error::Driver`] with the load error when the driver cannot be loaded.
    pub fn driver() -> Result<&'static Arc<sys::Driver>> {
        cuda_host_sys::driver().map_err(|error| Error::Driver(error.clone().into()))
    }
}

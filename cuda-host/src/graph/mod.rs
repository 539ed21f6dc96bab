//! Graphs, and the host functions they own: a graph runs its host nodes on every launch of every
//! executable made from it, or never, so its callables are owned by the graph (through CUDA user
//! objects) and its executables, not by a launch.
//!
//! A [`GraphBuilder`] captures a stream into a graph (a *builder capture*); its
//! [`callback`](GraphBuilder::callback) adds a host node the graph owns. [`Graph`] and
//! [`GraphExec`] build and run graphs directly, and set a node's callable while an executable
//! may still run the old one. [`host_launch_replayable`] is for code that does not know whether
//! its stream is being captured by other code (a *foreign capture*): a node of that capture's
//! graph if it is, a run-once launch if not.
//!
//! ```no_run
//! use cuda_host::graph::{CaptureMode, GraphBuilder};
//! use cuda_host::{Device, Stream, StreamFlags};
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicUsize, Ordering};
//!
//! let context = Device::get(cuda_host::driver()?, 0)?.primary_context()?;
//! let stream = Stream::new(&context, StreamFlags::NonBlocking)?;
//! let replays = Arc::new(AtomicUsize::new(0));
//! let builder = GraphBuilder::begin(&stream, CaptureMode::ThreadLocal)?;
//! let counter = Arc::clone(&replays);
//! builder.callback(move || {
//!     counter.fetch_add(1, Ordering::Relaxed);
//! })?;
//! let exec = builder.end()?.instantiate()?;
//! for _ in 0..3 {
//!     exec.launch(&stream)?;
//! }
//! stream.synchronize()?;
//! assert_eq!(replays.load(Ordering::Relaxed), 3);
//! # Ok::<(), cuda_host::Error>(())
//! ```

mod builder;
mod capture;
mod capture_lock;
mod engine_node;
mod exec;
#[allow(clippy::module_inception)]
mod graph;
mod replayable;
mod user_object;

pub use crate::error::CaptureState;
pub use crate::launch::HostCallable;
pub use builder::{CaptureMode, GraphBuilder};
pub use exec::GraphExec;
pub use graph::{Graph, HostNode};
pub use replayable::{host_launch_replayable, host_launch_replayable_raw};

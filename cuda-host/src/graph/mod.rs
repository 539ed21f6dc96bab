//! Graphs, and the host functions they own: a graph runs its host nodes on every launch of every
//! executable made from it, or never, so its callables are owned by the graph (through CUDA user
//! objects) and its executables, not by a launch.

mod builder;
mod capture;
mod capture_lock;
mod engine_node;
mod exec;
#[allow(clippy::module_inception)]
mod graph;
mod replayable;
mod user_object;

pub use builder::{CaptureMode, GraphBuilder};
pub use exec::GraphExec;
pub use graph::{Graph, HostNode};
pub use replayable::{host_launch_replayable, host_launch_replayable_raw};

//! The driver contract: the CUDA driver behaviour the suite relies on, written as its
//! specification through raw driver calls, one module a topic. Every test runs on both drivers
//! unless it cannot (and then says why): here on the software driver
//! (`cuda-host-testing/driver/`), on a GPU machine with `CUDA_TEST_DRIVER=real`, where the real
//! driver is right wherever the two disagree (what was measured on it is in
//! `docs/REAL-DRIVER.md`).
//!
//! Tests that capture a stream, use the legacy or per-thread stream (which a blocking stream's
//! capture implicitly involves) or allocate device memory run alone ([`harness::alone`]); the
//! others share the process ([`harness::shared`]). Whatever a host function or a destructor reads
//! is leaked on purpose, so that one the driver still runs after a failed assertion never reads
//! freed memory.

mod batch_nodes;
mod capture;
mod capture_to_graph;
mod contexts;
mod controls;
mod copies;
mod coverage;
mod devices;
mod entry_points;
mod errors;
mod exec_updates;
mod fresh_contexts;
mod graphs;
mod harness;
mod memory;
mod modules;
mod ordering;
mod per_thread;
mod sticky_errors;
mod stream_memory;
mod streams;
mod user_objects;

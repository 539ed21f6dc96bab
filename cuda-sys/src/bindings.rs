//! The generated bindings: bindgen's types and constants for the driver API, the entry-point list,
//! the function table, a method per entry point on [`Driver`] and the C-like free functions.
//!
//! The file comes from the build script: generated from the `cuda.h` it found, or copied from
//! the committed snapshot (`cuda-sys/snapshot/bindings.rs`, written by `cargo xtask bindings`).

// bindgen keeps the C names and emits unsafe union and bitfield accessors without `SAFETY`
// comments; the hand-written generator's code documents its own unsafe blocks.
#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    missing_docs,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    clippy::missing_safety_doc,
    rustdoc::all
)]

use crate::driver::Driver;
use crate::entry_point::EntryPoint;

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

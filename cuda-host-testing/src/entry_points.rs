//! The entry points the software driver implements, from `driver/entries.def`, the list its C
//! prototypes and its `cuGetProcAddress_v2` table are made from.
//!
//! Besides these, it exports its test controls ([`CONTROLS`], the C side of
//! [`Controls`](crate::Controls)). Any other entry point is missing, as on a real driver that
//! lacks it.
#![doc = include_str!(concat!(env!("OUT_DIR"), "/entry_points.md"))]

/// One entry point of the software driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EntryPoint {
    /// The name a caller of `cuGetProcAddress_v2` asks for, e.g. `cuStreamDestroy`.
    pub base: &'static str,
    /// The CUDA version whose ABI it has (`cudaTypedefs.h`'s `PFN_<base>_v<N>`), e.g. 4000.
    pub abi_version: u32,
    /// The exported function, e.g. `cuStreamDestroy_v2`.
    pub exported: &'static str,
    /// Whether it also has the per-thread-default-stream form `<exported>_ptsz`.
    pub per_thread_twin: bool,
}

include!(concat!(env!("OUT_DIR"), "/entry_points.rs"));

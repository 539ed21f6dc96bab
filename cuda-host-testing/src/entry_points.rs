//! The entry points the software driver models ([`ENTRY_POINTS`], from `driver/entries.def`, the
//! list its C prototypes and its `cuGetProcAddress_v2` table are made from), and every other
//! function a CUDA 13.5 driver exports ([`UNMODELLED_ENTRY_POINTS`], `driver/exports.txt`, which
//! `cargo xtask bindings` generates from the headers, less those): exported too, and found by
//! `cuGetProcAddress_v2`, each answers `CUDA_ERROR_NOT_SUPPORTED`, is counted
//! ([`Controls::unmodelled_calls`](crate::Controls::unmodelled_calls)) and is named once in the
//! driver's log (standard error, or the file `CUSW_LOG` names; `off` silences it).
//!
//! Besides these, it exports its test controls ([`CONTROLS`], the C side of
//! [`Controls`](crate::Controls)).
//!
//! The entry points it models:
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
    /// Its per-thread-default-stream form, where it has one: `<exported>_ptsz`, or `_ptds` for a
    /// call that takes no stream (a synchronous copy or set).
    pub per_thread: Option<&'static str>,
}

use cuda_host_sys::CUdevice_attribute;

include!(concat!(env!("OUT_DIR"), "/entry_points.rs"));

/// What the software device answers for one `CUdevice_attribute` by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceAttribute {
    /// The attribute.
    pub attribute: CUdevice_attribute,
    /// Its name in `cuda.h`, without the `CU_DEVICE_ATTRIBUTE_` prefix.
    pub name: &'static str,
    /// An H200's value (device 0's, for the PCI bus and the board group, which go up with the
    /// device's ordinal).
    pub value: i64,
}

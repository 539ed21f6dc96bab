//! What the driver table knows about each entry point: where it is looked up, and whether the
//! loaded driver has it.

use std::ffi::CStr;
use std::fmt;

/// One driver entry point declared by the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryPoint {
    /// The exported symbol the header declares, e.g. `cuMemAlloc_v2`.
    pub symbol: &'static CStr,
    /// The name and ABI version to ask `cuGetProcAddress_v2` for, e.g. `("cuMemAlloc", 3020)`:
    /// the CUDA version in which the declared ABI appeared (from `cudaTypedefs.h`).
    pub proc_address: Option<(&'static CStr, u32)>,
    /// The version to ask `cuGetProcAddress_v2` for with the per-thread default stream, where it
    /// is not `proc_address`'s: the version of this ABI's per-thread form
    /// (`PFN_<base>_v<N>_ptsz` in `cudaTypedefs.h`). The per-thread forms of the oldest entry
    /// points came with CUDA 7.0 (`cuEventRecord` is 2000, its per-thread form 7000), and the
    /// driver finds none at an older version.
    pub per_thread_version: Option<u32>,
    /// The `_ptsz`/`_ptds` symbol used with the per-thread default stream when the driver has no
    /// `cuGetProcAddress_v2`.
    pub per_thread_symbol: Option<&'static CStr>,
}

impl EntryPoint {
    /// The symbol as text.
    pub fn name(&self) -> &'static str {
        // Generated from C identifiers, which are ASCII.
        self.symbol.to_str().unwrap_or("<non-UTF-8 symbol>")
    }

    /// The CUDA version whose driver first has this ABI, when the header says.
    pub fn abi_version(&self) -> Option<u32> {
        self.proc_address.map(|(_, version)| version)
    }

    /// The name and version to ask `cuGetProcAddress_v2` for, for a table of the legacy default
    /// stream or (`per_thread_default_stream`) of the per-thread one.
    pub fn proc_address_for(
        &self,
        per_thread_default_stream: bool,
    ) -> Option<(&'static CStr, u32)> {
        let (name, version) = self.proc_address?;
        match self.per_thread_version {
            Some(per_thread) if per_thread_default_stream => Some((name, per_thread)),
            _ => Some((name, version)),
        }
    }
}

/// Whether a loaded driver has an entry point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Availability {
    /// The driver has it; calls go through.
    Available,
    /// The declared ABI is newer than the driver: a driver of at least this CUDA version is needed.
    NeedsNewerDriver {
        /// The CUDA version (e.g. 13010) that introduced the ABI.
        required: u32,
    },
    /// The driver does not provide it at all.
    NotInDriver,
}

impl Availability {
    /// Whether calls reach the driver.
    pub fn is_available(self) -> bool {
        self == Availability::Available
    }
}

impl fmt::Display for Availability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Availability::Available => f.write_str("available"),
            Availability::NeedsNewerDriver { required } => {
                write!(
                    f,
                    "needs a CUDA {} driver",
                    crate::version_text(*required as i32)
                )
            }
            Availability::NotInDriver => f.write_str("not provided by the driver"),
        }
    }
}

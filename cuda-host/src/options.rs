//! How host functions are launched and run, beyond [`host_launch`](fn@crate::host_launch)'s
//! defaults: the driver's sync mode for one launch ([`host_launch_with`]), which engine runs a
//! stream's host functions ([`HostEngine`], set with
//! [`Stream::with_host_engine`](crate::Stream::with_host_engine)), how often launches reclaim
//! ([`set_launch_reclaim_interval`]), and the name a host function carries in profiles and spans
//! ([`named`]).
//!
//! ```no_run
//! use cuda_host::options::{HostEngine, HostTaskSyncMode, LaunchOptions, host_launch_with, named};
//! use cuda_host::{Device, Stream, StreamFlags, host_launch};
//!
//! let context = Device::get(cuda_host::driver()?, 0)?.primary_context()?;
//! // Served by cuda-host's polled engine rather than the driver's host-function thread.
//! let polled =
//!     Stream::new(&context, StreamFlags::NonBlocking)?.with_host_engine(HostEngine::Polled)?;
//! host_launch(&polled, named("tick", || println!("tick")))?;
//! // The driver's thread spin-waits for this launch's successors (CUDA 13.1 and later).
//! let stream = Stream::new(&context, StreamFlags::NonBlocking)?;
//! let spin = LaunchOptions::default().sync_mode(HostTaskSyncMode::SpinWait);
//! host_launch_with(&stream, spin, || println!("soon after the work before"))?;
//! stream.synchronize()?;
//! # Ok::<(), cuda_host::Error>(())
//! ```
//!
//! **The sync mode.** CUDA 13.1 added `cuLaunchHostFunc_v2`, whose fourth argument says how the driver's
//! host-function thread waits for its next task: blocking, or spin-waiting (the driver's own
//! low-latency path). A launch that asks for a mode goes through `cuLaunchHostFunc_v2` and
//! nothing else: on an older driver it fails with a typed error naming the entry point and the
//! driver version it needs, and never falls back to `cuLaunchHostFunc`, whose semantics differ.
//! Everything else about the launch is `host_launch`'s: the same run-once record, capture check,
//! reclaim rule and failure handling.

use crate::contain::ensure_outside_host_function;
use crate::error::{Error, Result};
use crate::host_launch::{UserData, launch_raw, launch_run_once};
use crate::launch::{
    HostFuncEntry, RunOnceClosure, drop_when_allowed, outside_host_function, reclaim_on_launch,
};
use crate::objects::Stream;
use cuda_host_sys::CUhostTaskSyncMode;
use std::ffi::c_void;

pub use crate::launch::set_launch_reclaim_interval;
pub use crate::objects::{HostEngine, HostEngineRefused};
pub use crate::observe::{Named, named};

/// How the driver's host-function thread waits for its next task (`CUhostTaskSyncMode`).
///
/// NVIDIA's reference: [`CUhostTaskSyncMode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TYPES.html).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[doc(alias = "CUhostTaskSyncMode")]
pub enum HostTaskSyncMode {
    /// The thread blocks until new host tasks are ready (`CU_HOST_TASK_BLOCKING`).
    #[doc(alias = "CU_HOST_TASK_BLOCKING")]
    Blocking,
    /// The thread spin-waits for new host tasks (`CU_HOST_TASK_SPINWAIT`): lower latency, one
    /// core busy.
    #[doc(alias = "CU_HOST_TASK_SPINWAIT")]
    SpinWait,
}

impl HostTaskSyncMode {
    /// The driver's value.
    pub fn to_raw(self) -> CUhostTaskSyncMode {
        match self {
            HostTaskSyncMode::Blocking => CUhostTaskSyncMode::CU_HOST_TASK_BLOCKING,
            HostTaskSyncMode::SpinWait => CUhostTaskSyncMode::CU_HOST_TASK_SPINWAIT,
        }
    }
}

/// Options of [`host_launch_with`] and [`host_launch_raw_with`]. The default launches as
/// [`host_launch`](fn@crate::host_launch) does, through `cuLaunchHostFunc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LaunchOptions {
    sync_mode: Option<HostTaskSyncMode>,
}

impl LaunchOptions {
    /// Launches through `cuLaunchHostFunc_v2` (CUDA 13.1) with `mode`. On a driver without that
    /// entry point the launch fails with
    /// [`EntryPointUnavailable`](cuda_host_sys::Error::EntryPointUnavailable) naming it and the
    /// version it needs; it never falls back to `cuLaunchHostFunc`.
    #[must_use]
    pub fn sync_mode(mut self, mode: HostTaskSyncMode) -> Self {
        self.sync_mode = Some(mode);
        self
    }

    /// The sync mode asked for; `None` launches through `cuLaunchHostFunc`.
    pub fn get_sync_mode(&self) -> Option<HostTaskSyncMode> {
        self.sync_mode
    }

    fn entry(self) -> HostFuncEntry<'static> {
        match self.sync_mode {
            None => HostFuncEntry::Classic,
            Some(mode) => HostFuncEntry::WithSyncMode(mode.to_raw().0),
        }
    }

    /// The entry point for a launch on `stream`: a sync mode is the driver's, which a stream on
    /// the polled engine does not use.
    fn entry_on(self, stream: &Stream) -> Result<HostFuncEntry<'_>> {
        match (stream.host_func_entry(), self.sync_mode) {
            (HostFuncEntry::Polled { .. }, Some(_)) => Err(Error::InvalidArgument {
                what: "a sync mode is the driver's host-function thread's; a stream on the \
                       polled engine takes none"
                    .to_owned(),
            }),
            (polled @ HostFuncEntry::Polled { .. }, None) => Ok(polled),
            _ => Ok(self.entry()),
        }
    }
}

/// [`host_launch`](fn@crate::host_launch) on a stream, with `options`: `function` runs once, in
/// stream order, under every rule of `host_launch`.
///
/// NVIDIA's reference: [`cuLaunchHostFunc_v2`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html).
///
/// # Errors
/// As [`host_launch`](fn@crate::host_launch); with a sync mode on a driver older than CUDA 13.1,
/// [`Error::Driver`] holding
/// [`EntryPointUnavailable`](cuda_host_sys::Error::EntryPointUnavailable) for
/// `cuLaunchHostFunc_v2` (`function` is then dropped at once, unrun, like any refused launch).
///
/// ```no_run
/// use cuda_host::{options::HostTaskSyncMode, options::LaunchOptions, options::host_launch_with};
/// # fn demo(stream: &cuda_host::Stream) -> cuda_host::Result<()> {
/// let spin = LaunchOptions::default().sync_mode(HostTaskSyncMode::SpinWait);
/// host_launch_with(stream, spin, || println!("served by a spin-waiting driver thread"))?;
/// # Ok(()) }
/// ```
#[doc(alias = "cuLaunchHostFunc_v2")]
pub fn host_launch_with<F>(stream: &Stream, options: LaunchOptions, function: F) -> Result<()>
where
    F: FnMut() + Send + 'static,
{
    let function = outside_host_function("host_launch_with", function)?;
    let entry = match options.entry_on(stream) {
        Ok(entry) => entry,
        Err(error) => {
            drop_when_allowed(function);
            return Err(error);
        }
    };
    reclaim_on_launch();
    launch_run_once(stream, RunOnceClosure(function), entry, None)
}

/// [`host_launch_raw`](crate::host_launch_raw) with `options`.
///
/// NVIDIA's reference: [`cuLaunchHostFunc_v2`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html).
///
/// # Safety
/// As [`host_launch_raw`](crate::host_launch_raw):
/// 1. `function` must be safe to call on the driver's host-function thread with the pointer it
///    receives, and must not call CUDA.
/// 2. With [`UserData::PassThrough`], the pointer must stay valid for what `function` does with
///    it until `function` has run.
/// 3. With [`UserData::Copied`], `function` must not keep the pointer after it returns.
///
/// # Errors
/// As [`host_launch_with`].
#[doc(alias = "cuLaunchHostFunc_v2")]
pub unsafe fn host_launch_raw_with(
    stream: &Stream,
    options: LaunchOptions,
    function: unsafe extern "C" fn(*mut c_void),
    user_data: UserData<'_>,
) -> Result<()> {
    ensure_outside_host_function("host_launch_raw_with")?;
    let entry = options.entry_on(stream)?;
    // SAFETY: per the caller.
    unsafe { launch_raw(stream, function, user_data, entry) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_launches_classically_and_a_mode_through_v2_with_its_value() {
        assert!(matches!(
            LaunchOptions::default().entry(),
            HostFuncEntry::Classic
        ));
        assert_eq!(LaunchOptions::default().get_sync_mode(), None);
        let spin = LaunchOptions::default().sync_mode(HostTaskSyncMode::SpinWait);
        assert!(matches!(spin.entry(), HostFuncEntry::WithSyncMode(1)));
        assert!(matches!(
            LaunchOptions::default()
                .sync_mode(HostTaskSyncMode::Blocking)
                .entry(),
            HostFuncEntry::WithSyncMode(0)
        ));
    }
}

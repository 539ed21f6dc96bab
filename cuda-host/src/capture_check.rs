//! Refusing run-once host functions on streams that are being captured.
//!
//! A host function enqueued on a capturing stream becomes a node of the graph being built; the
//! graph may then run it many times, or never, so a launch record that frees itself after one run
//! would be used after free or leaked. cuda-host therefore asks `cuStreamIsCapturing` before
//! enqueueing and refuses, leaving the capture untouched. It must ask rather than try: on the
//! legacy stream, a refused `cuLaunchHostFunc` invalidates the capture it would have joined.

use crate::error::{CaptureState, Error, Result};
use cuda_host_sys::{CUresult, CUstream, CUstreamCaptureStatus, Driver};

/// What `cuStreamIsCapturing` says of `stream`: `None` when it is not capturing.
pub(crate) fn capture_state(driver: &Driver, stream: CUstream) -> Result<Option<CaptureState>> {
    let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the caller's stream handle is valid; `status` is a valid out-pointer.
    let result = unsafe { driver.cuStreamIsCapturing(stream, &mut status) };
    match result {
        CUresult::CUDA_SUCCESS => Ok(match status {
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => None,
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED => {
                Some(CaptureState::Invalidated)
            }
            // ACTIVE, and any status a newer driver may add: not safe for a run-once record.
            _ => Some(CaptureState::Active),
        }),
        CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT => Ok(Some(CaptureState::Implicit)),
        error => {
            driver.check("cuStreamIsCapturing", error)?;
            Ok(None)
        }
    }
}

/// `Err(Error::StreamCapturing)` unless `stream` is free of any capture.
#[inline]
pub(crate) fn ensure_not_capturing(driver: &Driver, stream: CUstream) -> Result<()> {
    match capture_state(driver, stream)? {
        None => Ok(()),
        Some(status) => Err(Error::StreamCapturing { status }),
    }
}

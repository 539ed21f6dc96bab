//! Events: points in a stream that other streams and the host can wait for.

use crate::context::Context;
use crate::context_failure;
use crate::error::Result;
use crate::handle::SendHandle;
use crate::reclaim;
use crate::stream::Stream;
use crate::trampoline::ensure_outside_host_function;
use cuda_host_sys::{CUevent, CUevent_flags, CUresult};
use std::ptr;
use std::time::Duration;

/// Whether an event records time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EventFlags {
    /// Records time, for [`Event::elapsed_since`].
    #[default]
    Timing,
    /// No timing (`CU_EVENT_DISABLE_TIMING`): cheapest for ordering streams.
    DisableTiming,
}

/// A CUDA event of a [`Context`].
#[derive(Debug)]
pub struct Event {
    context: Context,
    raw: CUevent,
}

// SAFETY: `raw` is a driver handle, valid from any thread; the driver API is thread-safe.
unsafe impl Send for Event {}
// SAFETY: as above; `Event` has no interior mutability.
unsafe impl Sync for Event {}

impl Event {
    /// Creates an event in `context`.
    ///
    /// # Errors
    /// An error recorded by an earlier `Drop`, or the driver's error from `cuEventCreate`.
    #[doc(alias = "cuEventCreate")]
    pub fn new(context: &Context, flags: EventFlags) -> Result<Event> {
        ensure_outside_host_function("Event::new")?;
        let shared = &context.shared;
        shared.take_drop_error()?;
        let flags = match flags {
            EventFlags::Timing => CUevent_flags::CU_EVENT_DEFAULT,
            EventFlags::DisableTiming => CUevent_flags::CU_EVENT_DISABLE_TIMING,
        };
        let mut raw = ptr::null_mut();
        shared.with_current(|| {
            // SAFETY: `raw` is a valid out-pointer; the context is current.
            let result = unsafe { shared.driver().cuEventCreate(&mut raw, flags.0) };
            Ok(shared.driver().check("cuEventCreate", result)?)
        })?;
        Ok(Event {
            context: context.clone(),
            raw,
        })
    }

    /// The driver's handle. It stays valid while this `Event` exists.
    pub fn as_raw(&self) -> CUevent {
        self.raw
    }

    /// Captures the current end of `stream`'s work in this event.
    ///
    /// # Errors
    /// The driver's error from `cuEventRecord`.
    #[doc(alias = "cuEventRecord")]
    pub fn record(&self, stream: &Stream) -> Result<()> {
        ensure_outside_host_function("Event::record")?;
        stream.with_stream_context(|| {
            let driver = self.context.shared.driver();
            // SAFETY: both handles are valid while their owners exist.
            let result = unsafe { driver.cuEventRecord(self.raw, stream.as_raw()) };
            Ok(driver.check("cuEventRecord", result)?)
        })
    }

    /// Blocks until the recorded work has finished, then reclaims finished launch records.
    ///
    /// # Errors
    /// The driver's error from `cuEventSynchronize`.
    #[doc(alias = "cuEventSynchronize")]
    pub fn synchronize(&self) -> Result<()> {
        ensure_outside_host_function("Event::synchronize")?;
        self.context.shared.take_drop_error()?;
        let driver = self.context.shared.driver();
        // SAFETY: the handle is valid while `self` exists.
        let result = unsafe { driver.cuEventSynchronize(self.raw) };
        context_failure::note(&self.context.shared, result);
        reclaim::reclaim();
        Ok(driver.check("cuEventSynchronize", result)?)
    }

    /// Whether the recorded work has finished (`cuEventQuery`).
    ///
    /// # Errors
    /// The driver's error from `cuEventQuery`, other than `CUDA_ERROR_NOT_READY`.
    #[doc(alias = "cuEventQuery")]
    pub fn is_complete(&self) -> Result<bool> {
        ensure_outside_host_function("Event::is_complete")?;
        let driver = self.context.shared.driver();
        // SAFETY: the handle is valid while `self` exists.
        match unsafe { driver.cuEventQuery(self.raw) } {
            CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            result => {
                context_failure::note(&self.context.shared, result);
                driver
                    .check("cuEventQuery", result)
                    .map(|()| true)
                    .map_err(Into::into)
            }
        }
    }

    /// The time between `start`'s completion and this event's.
    ///
    /// # Errors
    /// The driver's error from `cuEventElapsedTime_v2`: `CUDA_ERROR_NOT_READY` before both have
    /// completed, `CUDA_ERROR_INVALID_HANDLE` for events without timing.
    #[doc(alias = "cuEventElapsedTime")]
    pub fn elapsed_since(&self, start: &Event) -> Result<Duration> {
        ensure_outside_host_function("Event::elapsed_since")?;
        let driver = self.context.shared.driver();
        let mut milliseconds = 0.0f32;
        // SAFETY: both handles are valid while their owners exist; the out-pointer is valid.
        let result =
            unsafe { driver.cuEventElapsedTime_v2(&mut milliseconds, start.raw, self.raw) };
        driver.check("cuEventElapsedTime_v2", result)?;
        Ok(Duration::from_secs_f64(
            f64::from(milliseconds.max(0.0)) / 1e3,
        ))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let shared = std::sync::Arc::clone(&self.context.shared);
        let raw = SendHandle::new(self.raw);
        let destroy = move || {
            // SAFETY: the event was created by `Event::new` and is destroyed once.
            let result = unsafe { shared.driver().cuEventDestroy_v2(raw.get()) };
            if let Err(error) = shared.driver().check("cuEventDestroy_v2", result) {
                shared.record_drop_error("event", error);
            }
        };
        reclaim::call_outside_host_function(destroy);
    }
}

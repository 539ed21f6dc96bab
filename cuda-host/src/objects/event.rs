//! Events: points in a stream that other streams and the host can wait for.

use super::{Context, Stream, destroy_later};
use crate::checked::checked;
use crate::contain::ensure_outside_host_function;
use crate::error::Result;
use crate::launch::{abandon_if_failed_then_wait, reclaim};
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
    /// NVIDIA's reference: [`cuEventCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html).
    ///
    /// # Errors
    /// An error recorded by an earlier `Drop`, or the driver's error from `cuEventCreate`.
    #[doc(alias = "cuEventCreate")]
    pub fn new(context: &Context, flags: EventFlags) -> Result<Event> {
        ensure_outside_host_function("Event::new")?;
        let shared = context.shared();
        shared.take_drop_error()?;
        let flags = match flags {
            EventFlags::Timing => CUevent_flags::CU_EVENT_DEFAULT,
            EventFlags::DisableTiming => CUevent_flags::CU_EVENT_DISABLE_TIMING,
        };
        let mut raw = ptr::null_mut();
        shared.with_current(|| {
            // SAFETY: `raw` is a valid out-pointer; the context is current.
            Ok(unsafe { checked!(shared.driver(), cuEventCreate(&mut raw, flags.0)) }?)
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
    /// NVIDIA's reference: [`cuEventRecord`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html).
    ///
    /// # Errors
    /// The driver's error from `cuEventRecord`.
    #[doc(alias = "cuEventRecord")]
    pub fn record(&self, stream: &Stream) -> Result<()> {
        ensure_outside_host_function("Event::record")?;
        stream.with_stream_context(|| {
            let driver = self.context.shared().driver();
            // SAFETY: both handles are valid while their owners exist.
            Ok(unsafe { checked!(driver, cuEventRecord(self.raw, stream.as_raw())) }?)
        })
    }

    /// Blocks until the recorded work has finished, then reclaims finished launch records.
    ///
    /// NVIDIA's reference: [`cuEventSynchronize`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html).
    ///
    /// # Errors
    /// [`Error::DropFailed`](crate::Error::DropFailed) waiting for this context value, returned
    /// before waiting (where it carries the context's failure, once no host function of the
    /// context runs, as for the driver's answer); the driver's error from `cuEventSynchronize`.
    #[doc(alias = "cuEventSynchronize")]
    pub fn synchronize(&self) -> Result<()> {
        ensure_outside_host_function("Event::synchronize")?;
        let shared = self.context.shared();
        if let Err(error) = shared.take_drop_error() {
            // A drop error stored earlier may be the failure itself: answered here, it waits
            // too, as the driver's answer would.
            if let Some(result) = error.driver_result() {
                abandon_if_failed_then_wait(shared, result, None);
            }
            reclaim();
            return Err(error);
        }
        // SAFETY: the handle is valid while `self` exists.
        let synchronized = unsafe { checked!(shared.driver(), cuEventSynchronize(self.raw)) };
        if let Err(error) = &synchronized {
            // The event knows no stream: every host function of the context is waited for.
            abandon_if_failed_then_wait(shared, error.result(), None);
        }
        reclaim();
        Ok(synchronized?)
    }

    /// Whether the recorded work has finished (`cuEventQuery`).
    ///
    /// NVIDIA's reference: [`cuEventQuery`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html).
    ///
    /// # Errors
    /// The driver's error from `cuEventQuery`, other than `CUDA_ERROR_NOT_READY`.
    #[doc(alias = "cuEventQuery")]
    pub fn is_complete(&self) -> Result<bool> {
        ensure_outside_host_function("Event::is_complete")?;
        let shared = self.context.shared();
        // SAFETY: the handle is valid while `self` exists.
        match unsafe { checked!(shared.driver(), cuEventQuery(self.raw)) } {
            Ok(()) => Ok(true),
            Err(error) if error.result() == CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            Err(error) => {
                abandon_if_failed_then_wait(shared, error.result(), None);
                Err(error.into())
            }
        }
    }

    /// The time between `start`'s completion and this event's.
    ///
    /// NVIDIA's reference: [`cuEventElapsedTime`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html).
    ///
    /// # Errors
    /// The driver's error from `cuEventElapsedTime_v2`: `CUDA_ERROR_NOT_READY` before both have
    /// completed, `CUDA_ERROR_INVALID_HANDLE` for events without timing.
    #[doc(alias = "cuEventElapsedTime")]
    pub fn elapsed_since(&self, start: &Event) -> Result<Duration> {
        ensure_outside_host_function("Event::elapsed_since")?;
        let driver = self.context.shared().driver();
        let mut milliseconds = 0.0f32;
        // SAFETY: both handles are valid while their owners exist; the out-pointer is valid.
        unsafe {
            checked!(
                driver,
                cuEventElapsedTime_v2(&mut milliseconds, start.raw, self.raw)
            )
        }?;
        Ok(Duration::from_secs_f64(
            f64::from(milliseconds.max(0.0)) / 1e3,
        ))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        destroy_later(self.context.shared(), "event", self.raw, |context, raw| {
            // SAFETY: the event was created by `Event::new` and is destroyed once.
            unsafe { checked!(context.driver(), cuEventDestroy_v2(raw)) }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_driver;
    use cuda_host_sys::{CUevent, CUresult};
    use std::ffi::c_void;

    unsafe extern "C" fn create_event(event: *mut CUevent, _flags: std::ffi::c_uint) -> CUresult {
        // SAFETY: the caller passes a valid out-pointer.
        unsafe { event.write(0x99_usize as CUevent) };
        CUresult::CUDA_SUCCESS
    }

    unsafe extern "C" fn fail_to_destroy(_event: CUevent) -> CUresult {
        CUresult::CUDA_ERROR_INVALID_HANDLE
    }

    #[test]
    fn a_destruction_that_fails_in_drop_is_returned_by_the_next_call() {
        // SAFETY: both fakes have their entry points' signatures.
        let driver = unsafe {
            fake_driver::driver(&[
                (c"cuEventCreate", create_event as *mut c_void),
                (c"cuEventDestroy_v2", fail_to_destroy as *mut c_void),
            ])
        };
        let context = Context::of_shared(fake_driver::context(&driver));
        let event = Event::new(&context, EventFlags::DisableTiming).expect("created");
        drop(event);
        let error = Event::new(&context, EventFlags::DisableTiming).unwrap_err();
        match &error {
            crate::Error::DropFailed { object, source } => {
                assert_eq!(*object, "event");
                assert_eq!(source.result(), CUresult::CUDA_ERROR_INVALID_HANDLE);
            }
            other => panic!("expected the drop's error, got {other}"),
        }
        assert!(error.to_string().contains("cuEventDestroy_v2"), "{error}");
        // Returned once: the call after it succeeds.
        Event::new(&context, EventFlags::DisableTiming).expect("created after the error");
    }
}

//! The software driver's test controls, [`cuda_host_testing::Controls`], for the tests that run
//! on it: a control that fails fails the test, with the package's typed error.

use crate::selection::{DriverKind, test_driver};
use cuda_host::{Context, Stream};
use cuda_host_sys::CUresult;
pub use cuda_host_testing::{LiveCounts, LiveObjects, LiveObjectsFn};
use std::ffi::{CStr, c_uint};
use std::fmt::Display;
use std::sync::OnceLock;
use std::time::Duration;

/// cuda-host-testing's controls, each panicking with the typed error where the package returns
/// one.
#[derive(Debug)]
pub struct Controls(&'static cuda_host_testing::Controls);

/// The controls, when the tests run on the software driver; `None` on the real one.
///
/// # Panics
/// When the software driver's controls cannot be opened.
pub fn controls() -> Option<&'static Controls> {
    static CONTROLS: OnceLock<Controls> = OnceLock::new();
    if test_driver().kind != DriverKind::Software {
        return None;
    }
    Some(CONTROLS.get_or_init(|| {
        // SAFETY: the library is the software driver this binary already runs on (its controls
        // are those of cudasw.h), so this only takes another reference to it.
        let controls = unsafe { cuda_host_testing::controls() };
        Controls(controls.unwrap_or_else(|e| panic!("{e}")))
    }))
}

/// The controls; panics on the real driver (for tests that only run on the software one).
#[track_caller]
pub fn expect_controls() -> &'static Controls {
    controls().expect("this test needs the software driver's controls")
}

#[track_caller]
fn ok<T>(result: Result<T, impl Display>) -> T {
    result.unwrap_or_else(|e| panic!("{e}"))
}

impl Controls {
    /// [`cuda_host_testing::Controls::fail_next_calls`].
    #[track_caller]
    pub fn fail_next_calls(&self, entry: &CStr, count: u32, code: CUresult) {
        ok(self.0.fail_next_calls(entry, count, code));
    }

    /// [`cuda_host_testing::Controls::fail_next_calls_any_thread`].
    #[track_caller]
    pub fn fail_next_calls_any_thread(&self, entry: &CStr, count: u32, code: CUresult) {
        ok(self.0.fail_next_calls_any_thread(entry, count, code));
    }

    /// [`cuda_host_testing::Controls::set_sticky_error`].
    #[track_caller]
    pub fn set_sticky_error(&self, context: &Context, code: CUresult) {
        ok(self.0.set_sticky_error(context, code));
    }

    /// [`cuda_host_testing::Controls::fresh_context`].
    #[track_caller]
    pub fn fresh_context(&self, device: &cuda_host::Device) -> Context {
        ok(self.0.fresh_context(device))
    }

    /// [`cuda_host_testing::Controls::launch_fault`].
    #[track_caller]
    pub fn launch_fault(&self, stream: &Stream, code: CUresult) {
        ok(self.0.launch_fault(stream, code));
    }

    /// [`cuda_host_testing::Controls::launch_sleep`].
    #[track_caller]
    pub fn launch_sleep(&self, stream: &Stream, duration: Duration) {
        ok(self.0.launch_sleep(stream, duration));
    }

    /// [`cuda_host_testing::Controls::set_driver_version`].
    #[track_caller]
    pub fn set_driver_version(&self, version: i32) {
        ok(self.0.set_driver_version(version));
    }

    /// The package's controls, for a test of their errors.
    pub fn inner(&self) -> &'static cuda_host_testing::Controls {
        self.0
    }

    /// [`cuda_host_testing::Controls::override_device_attribute`].
    #[track_caller]
    pub fn override_device_attribute(
        &self,
        attribute: cuda_host_sys::CUdevice_attribute,
        value: Option<i32>,
    ) {
        ok(self.0.override_device_attribute(attribute, value));
    }

    /// [`cuda_host_testing::Controls::user_object_stats`].
    #[track_caller]
    pub fn user_object_stats(&self) -> (u64, u64) {
        ok(self.0.user_object_stats())
    }

    /// [`cuda_host_testing::Controls::stream_operations`].
    #[track_caller]
    pub fn stream_operations(&self, id: u64) -> Option<(u64, u64)> {
        ok(self.0.stream_operations(id))
    }

    /// [`cuda_host_testing::Controls::begin_capture_at_next_call`].
    #[track_caller]
    pub fn begin_capture_at_next_call(
        &self,
        entry: &CStr,
        stream: &Stream,
        mode: cuda_host_sys::CUstreamCaptureMode,
    ) {
        ok(self.0.begin_capture_at_next_call(entry, stream, mode));
    }

    /// [`cuda_host_testing::Controls::begin_capture_at_call`].
    #[track_caller]
    pub fn begin_capture_at_call(
        &self,
        entry: &CStr,
        calls_before: u32,
        stream: &Stream,
        mode: cuda_host_sys::CUstreamCaptureMode,
    ) {
        ok(self
            .0
            .begin_capture_at_call(entry, calls_before, stream, mode));
    }

    /// [`cuda_host_testing::Controls::disarm_capture_at_next_call`].
    #[track_caller]
    pub fn disarm_capture_at_next_call(&self) {
        ok(self.0.disarm_capture_at_next_call());
    }

    /// [`cuda_host_testing::Controls::delay_next_calls`].
    #[track_caller]
    pub fn delay_next_calls(&self, entry: &CStr, count: u32, delay: Duration) {
        ok(self.0.delay_next_calls(entry, count, delay));
    }

    /// [`cuda_host_testing::Controls::set_wait_poll_interval`].
    #[track_caller]
    pub fn set_wait_poll_interval(&self, interval: Option<Duration>) {
        ok(self.0.set_wait_poll_interval(interval));
    }

    /// [`cuda_host_testing::Controls::stale_handle_uses`].
    #[track_caller]
    pub fn stale_handle_uses(&self) -> u64 {
        ok(self.0.stale_handle_uses())
    }

    /// [`cuda_host_testing::Controls::live_objects`].
    #[track_caller]
    pub fn live_objects(&self) -> LiveObjects {
        ok(self.0.live_objects())
    }

    /// [`cuda_host_testing::Controls::armed_failures`].
    #[track_caller]
    pub fn armed_failures(&self, entry: &CStr) -> u32 {
        ok(self.0.armed_failures(entry))
    }

    /// [`cuda_host_testing::Controls::armed_delays`].
    #[track_caller]
    pub fn armed_delays(&self, entry: &CStr) -> u32 {
        ok(self.0.armed_delays(entry))
    }

    /// [`cuda_host_testing::Controls::call_count`].
    #[track_caller]
    pub fn call_count(&self, entry: &CStr) -> u64 {
        ok(self.0.call_count(entry))
    }

    /// [`cuda_host_testing::Controls::host_task_sync_mode_launches`].
    #[track_caller]
    pub fn host_task_sync_mode_launches(&self, mode: c_uint) -> u64 {
        ok(self.0.host_task_sync_mode_launches(mode))
    }
}

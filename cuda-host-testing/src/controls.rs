//! The software driver's test controls (`cusw*`, declared in `driver/cudasw.h`) as a typed API.

use crate::Error;
use crate::stand_in::KernelLaunch;
use cuda_host::{Context, Device, Stream};
use cuda_host_sys::{
    CUcontext, CUdevice, CUdevice_attribute, CUresult, CUstream, CUstreamCaptureMode, Driver,
};
use std::ffi::{CStr, c_char, c_int, c_uint, c_ulonglong, c_void};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The software driver's control functions: fault injection, sticky errors, stand-ins for long
/// or faulting kernels, the reported driver version, and counts of calls and of live objects.
///
/// They are exported C functions of the software driver library, reached through the library
/// already loaded (the platform loader hands back the open library, so they act on the driver
/// the tests run on). Get them with [`controls`](fn@crate::controls) or [`Controls::open`].
#[derive(Debug)]
pub struct Controls {
    _library: libloading::Library,
    fail_next_calls: unsafe extern "C" fn(*const c_char, c_uint, CUresult) -> CUresult,
    fail_next_calls_any_thread: unsafe extern "C" fn(*const c_char, c_uint, CUresult) -> CUresult,
    set_sticky_error: unsafe extern "C" fn(CUcontext, CUresult) -> CUresult,
    launch_fault: unsafe extern "C" fn(CUstream, CUresult) -> CUresult,
    launch_sleep: unsafe extern "C" fn(CUstream, c_uint) -> CUresult,
    set_wait_poll_interval: unsafe extern "C" fn(c_uint) -> CUresult,
    set_driver_version: unsafe extern "C" fn(c_int) -> CUresult,
    override_device_attribute: unsafe extern "C" fn(CUdevice_attribute, *const c_int) -> CUresult,
    user_object_stats: unsafe extern "C" fn(*mut c_ulonglong, *mut c_ulonglong) -> CUresult,
    stream_operations:
        unsafe extern "C" fn(c_ulonglong, *mut c_ulonglong, *mut c_ulonglong) -> CUresult,
    delay_next_calls: unsafe extern "C" fn(*const c_char, c_uint, c_uint) -> CUresult,
    stale_handle_uses: unsafe extern "C" fn(*mut c_ulonglong) -> CUresult,
    unmodelled_calls: unsafe extern "C" fn(*mut c_ulonglong) -> CUresult,
    stream_ordered_memory_misuses: unsafe extern "C" fn(*mut c_ulonglong) -> CUresult,
    live_objects: LiveObjectsFn,
    armed_failures: unsafe extern "C" fn(*const c_char, *mut c_uint) -> CUresult,
    armed_delays: unsafe extern "C" fn(*const c_char, *mut c_uint) -> CUresult,
    call_count: unsafe extern "C" fn(*const c_char, *mut c_ulonglong) -> CUresult,
    host_task_sync_mode_launches: unsafe extern "C" fn(c_uint, *mut c_ulonglong) -> CUresult,
    begin_capture_at_next_call:
        unsafe extern "C" fn(*const c_char, CUstream, CUstreamCaptureMode) -> CUresult,
    begin_capture_at_call:
        unsafe extern "C" fn(*const c_char, c_uint, CUstream, CUstreamCaptureMode) -> CUresult,
    fresh_context_create: unsafe extern "C" fn(*mut CUcontext, CUdevice) -> CUresult,
    fresh_context_destroy: FreshContextDestroyFn,
    register_stand_in: RegisterStandInFn,
    kernels_without_stand_in: unsafe extern "C" fn(*mut c_ulonglong) -> CUresult,
}

/// `cuswStandIn` of `stand_in.h`.
type StandInFn = unsafe extern "C" fn(*const KernelLaunch, *mut c_void) -> c_int;
/// `cuswRegisterStandIn`, as `cudasw.h` declares it.
type RegisterStandInFn =
    unsafe extern "C" fn(*const c_char, Option<StandInFn>, *mut c_void) -> CUresult;

/// A stand-in registered from Rust: what [`Controls::register_stand_in`] boxes.
type BoxedStandIn = Box<dyn Fn(&KernelLaunch) -> Result<(), CUresult> + Send + Sync>;

/// Runs a stand-in registered from Rust, on a stream's worker thread: a panic is an error of the
/// launch, never an unwind into the driver, and its payload is not dropped there.
unsafe extern "C" fn run_stand_in(launch: *const KernelLaunch, data: *mut c_void) -> c_int {
    // SAFETY: registered with a leaked `BoxedStandIn` (register_stand_in), and the driver hands a
    // launch alive during this call.
    let (stand_in, launch) = unsafe { (&*data.cast::<BoxedStandIn>(), &*launch) };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| stand_in(launch))) {
        Ok(Ok(())) => 0,
        Ok(Err(error)) => error.0 as c_int,
        Err(payload) => {
            log::error!(
                "the stand-in of kernel {:?} panicked: its launch fails",
                launch.name()
            );
            std::mem::forget(payload);
            CUresult::CUDA_ERROR_LAUNCH_FAILED.0 as c_int
        }
    }
}

/// `cuswFreshContextDestroy`, as `cudasw.h` declares it.
type FreshContextDestroyFn = unsafe extern "C" fn(CUcontext) -> CUresult;

/// `cuswLiveObjects`, as `cudasw.h` declares it.
pub type LiveObjectsFn = unsafe extern "C" fn(*mut LiveCounts) -> CUresult;

/// `struct cuswLiveCounts` of `cudasw.h`: `size` first, then the counts; members are only added
/// at the end, so that a caller built against a shorter struct keeps working.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveCounts {
    /// Set by the caller to the size it knows; the driver answers the bytes it filled.
    pub size: usize,
    /// The counts, in the order of [`LiveObjects`]'s fields.
    pub counts: [u64; 8],
}

/// What is alive in the software driver now, process-wide (`cuswLiveObjects`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveObjects {
    /// Streams made by `cuStreamCreate*` and not destroyed (not the legacy or per-thread ones).
    pub streams: u64,
    /// Events not destroyed.
    pub events: u64,
    /// Graphs not destroyed, a capture's graph included while the capture lasts.
    pub graphs: u64,
    /// Executable graphs not destroyed.
    pub graph_execs: u64,
    /// User objects whose destructor has not run.
    pub user_objects: u64,
    /// Page-locked host allocations not freed.
    pub host_allocations: u64,
    /// Device allocations not freed.
    pub device_allocations: u64,
    /// Host functions and stream callbacks enqueued (also in graph launches) that have not
    /// finished running or been skipped.
    pub pending_host_functions: u64,
}

impl Controls {
    /// Opens the library at `path` (a software driver library) and resolves its controls.
    ///
    /// # Errors
    /// [`Error::Open`] when the library does not open, [`Error::MissingControl`] when it lacks a
    /// control.
    ///
    /// # Safety
    /// 1. `path` must be one of this package's libraries ([`library_path`](crate::library_path),
    ///    [`variant_path`](crate::variant_path)) or another library that exports the controls
    ///    `driver/cudasw.h` declares, with those C signatures;
    /// 2. running its initialisation code in this process must be sound (this package's
    ///    libraries only set up their own state).
    pub unsafe fn open(path: &Path) -> Result<Controls, Error> {
        // SAFETY: the caller vouches for the library's initialisation code.
        let library = unsafe { libloading::Library::new(path) }.map_err(|e| Error::Open {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        macro_rules! control {
            ($name:literal) => {
                // SAFETY: the caller guarantees that the library exports this control with the
                // C signature the field declares (driver/cudasw.h).
                *unsafe { library.get($name) }.map_err(|e| Error::MissingControl {
                    path: path.to_owned(),
                    control: control_name($name),
                    reason: e.to_string(),
                })?
            };
        }
        Ok(Controls {
            fail_next_calls: control!(c"cuswFailNextCalls"),
            fail_next_calls_any_thread: control!(c"cuswFailNextCallsAnyThread"),
            set_sticky_error: control!(c"cuswSetStickyError"),
            launch_fault: control!(c"cuswLaunchFault"),
            launch_sleep: control!(c"cuswLaunchSleep"),
            set_wait_poll_interval: control!(c"cuswSetWaitPollInterval"),
            set_driver_version: control!(c"cuswSetDriverVersion"),
            override_device_attribute: control!(c"cuswOverrideDeviceAttribute"),
            user_object_stats: control!(c"cuswUserObjectStats"),
            stream_operations: control!(c"cuswStreamOperations"),
            delay_next_calls: control!(c"cuswDelayNextCalls"),
            stale_handle_uses: control!(c"cuswStaleHandleUses"),
            unmodelled_calls: control!(c"cuswUnmodelledCalls"),
            stream_ordered_memory_misuses: control!(c"cuswStreamOrderedMemoryMisuses"),
            live_objects: control!(c"cuswLiveObjects"),
            armed_failures: control!(c"cuswArmedFailures"),
            armed_delays: control!(c"cuswArmedDelays"),
            call_count: control!(c"cuswCallCount"),
            host_task_sync_mode_launches: control!(c"cuswHostTaskSyncModeLaunches"),
            begin_capture_at_next_call: control!(c"cuswBeginCaptureAtNextCall"),
            begin_capture_at_call: control!(c"cuswBeginCaptureAtCall"),
            fresh_context_create: control!(c"cuswFreshContextCreate"),
            fresh_context_destroy: control!(c"cuswFreshContextDestroy"),
            register_stand_in: control!(c"cuswRegisterStandIn"),
            kernels_without_stand_in: control!(c"cuswKernelsWithoutStandIn"),
            _library: library,
        })
    }

    /// The next `count` calls of `entry` made from this thread answer `code` and do nothing;
    /// `count` 0 disarms. `entry` is a base name (`cuLaunchHostFunc`, which also covers its ABI
    /// versions and per-thread forms) or an exported name (`cuMemAlloc_v2`).
    ///
    /// # Errors
    /// [`Error::Control`] with `CUDA_ERROR_NOT_FOUND` when the driver has no such entry point.
    #[doc(alias = "cuswFailNextCalls")]
    pub fn fail_next_calls(&self, entry: &CStr, count: u32, code: CUresult) -> Result<(), Error> {
        // SAFETY: `entry` is NUL-terminated; the driver copies what it keeps.
        check("cuswFailNextCalls", unsafe {
            (self.fail_next_calls)(entry.as_ptr(), count, code)
        })
    }

    /// As [`fail_next_calls`](Self::fail_next_calls), for calls from any thread (the driver's
    /// own threads, other test threads).
    ///
    /// # Errors
    /// As [`fail_next_calls`](Self::fail_next_calls).
    #[doc(alias = "cuswFailNextCallsAnyThread")]
    pub fn fail_next_calls_any_thread(
        &self,
        entry: &CStr,
        count: u32,
        code: CUresult,
    ) -> Result<(), Error> {
        // SAFETY: `entry` is NUL-terminated; the driver copies what it keeps.
        check("cuswFailNextCallsAnyThread", unsafe {
            (self.fail_next_calls_any_thread)(entry.as_ptr(), count, code)
        })
    }

    /// Puts `context` into the sticky error `code` now, as a faulting kernel would.
    ///
    /// # Errors
    /// [`Error::Control`] when the driver refuses (a context of another driver).
    #[doc(alias = "cuswSetStickyError")]
    pub fn set_sticky_error(&self, context: &Context, code: CUresult) -> Result<(), Error> {
        // SAFETY: a live context's handle; the driver checks it against its registry.
        check("cuswSetStickyError", unsafe {
            (self.set_sticky_error)(context.as_raw(), code)
        })
    }

    /// Enqueues the stand-in for a faulting kernel: when `stream` reaches it, its context gets
    /// the sticky error `code`.
    ///
    /// # Errors
    /// [`Error::Control`] when the driver refuses (a stream of another driver).
    #[doc(alias = "cuswLaunchFault")]
    pub fn launch_fault(&self, stream: &Stream, code: CUresult) -> Result<(), Error> {
        // SAFETY: a live stream's handle; the driver checks it against its registry.
        check("cuswLaunchFault", unsafe {
            (self.launch_fault)(stream.as_raw(), code)
        })
    }

    /// Enqueues the stand-in for a long kernel: `stream` sleeps `duration` (to the microsecond)
    /// when it gets there.
    ///
    /// # Errors
    /// [`Error::DelayTooLong`] over `u32::MAX` microseconds; [`Error::Control`] when the driver
    /// refuses (a stream of another driver).
    #[doc(alias = "cuswLaunchSleep")]
    pub fn launch_sleep(&self, stream: &Stream, duration: Duration) -> Result<(), Error> {
        let microseconds = microseconds(duration)?;
        // SAFETY: a live stream's handle; the driver checks it against its registry.
        check("cuswLaunchSleep", unsafe {
            (self.launch_sleep)(stream.as_raw(), microseconds)
        })
    }

    /// From now on every stream wait on memory reads its word once every `interval` (to the
    /// microsecond); `None` restores the default, a backoff from 1 µs to 1 ms between reads. Plays
    /// a device slow to see a host's write (one time-sliced with other work), holding open the
    /// window between the write and the stream's seeing it. Process-wide.
    ///
    /// # Errors
    /// [`Error::DelayTooLong`] over `u32::MAX` microseconds; [`Error::Control`] when the driver
    /// answers an error.
    #[doc(alias = "cuswSetWaitPollInterval")]
    pub fn set_wait_poll_interval(&self, interval: Option<Duration>) -> Result<(), Error> {
        let microseconds = match interval {
            None => 0,
            // 0 would restore the backoff: a zero interval asks for the shortest there is.
            Some(interval) => microseconds(interval)?.max(1),
        };
        // SAFETY: no pointer arguments.
        check("cuswSetWaitPollInterval", unsafe {
            (self.set_wait_poll_interval)(microseconds)
        })
    }

    /// Makes the driver report `version` (e.g. 12040) and hide every ABI newer than it from
    /// `cuGetProcAddress_v2`; 0 restores the default. Drivers loaded before keep their tables.
    ///
    /// # Errors
    /// [`Error::Control`] when the driver refuses the version.
    #[doc(alias = "cuswSetDriverVersion")]
    pub fn set_driver_version(&self, version: i32) -> Result<(), Error> {
        // SAFETY: no pointer arguments.
        check("cuswSetDriverVersion", unsafe {
            (self.set_driver_version)(version)
        })
    }

    /// Makes every device answer `value` from `cuDeviceGetAttribute` for `attribute` (`None`:
    /// its own value again, an H200's unless [`DEVICE_ATTRIBUTES_VARIABLE`](crate::DEVICE_ATTRIBUTES_VARIABLE)
    /// set another), process-wide, to play another device: for example 0 for
    /// `CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS`, which the driver then follows by
    /// refusing 64-bit stream memory operations (`CUDA_ERROR_NOT_SUPPORTED`). Only for what code
    /// asks after the call: a value read before stays as it was read.
    ///
    /// # Errors
    /// [`Error::Control`] with `CUDA_ERROR_INVALID_VALUE` for a value that is no
    /// `CUdevice_attribute`.
    #[doc(alias = "cuswOverrideDeviceAttribute")]
    pub fn override_device_attribute(
        &self,
        attribute: CUdevice_attribute,
        value: Option<i32>,
    ) -> Result<(), Error> {
        let value = value.map(|value| value as c_int);
        let pointer = value.as_ref().map_or(std::ptr::null(), std::ptr::from_ref);
        // SAFETY: `pointer` is null or points at a live `c_int` for the call.
        check("cuswOverrideDeviceAttribute", unsafe {
            (self.override_device_attribute)(attribute, pointer)
        })
    }

    /// How many user-object destructors have run, and how many user objects are alive.
    ///
    /// # Errors
    /// [`Error::Control`] when the driver answers an error.
    #[doc(alias = "cuswUserObjectStats")]
    pub fn user_object_stats(&self) -> Result<(u64, u64), Error> {
        let (mut destroyed, mut alive) = (0, 0);
        // SAFETY: both out-pointers are valid.
        check("cuswUserObjectStats", unsafe {
            (self.user_object_stats)(&mut destroyed, &mut alive)
        })?;
        Ok((destroyed, alive))
    }

    /// How far the stream whose `cuStreamGetId` answer is `id` got: how many operations were
    /// enqueued on it and how many it completed, numbered from 1 in the order enqueued; `None`
    /// once the stream is gone (destroyed, and done with all of it). An operation counts as
    /// completed before what it holds is let go (a graph launch's references to user objects
    /// among it): the operation enqueued after a read of `enqueued` is number `enqueued + 1` or
    /// later, and a destructor its end makes due finds it counted.
    ///
    /// # Errors
    /// [`Error::Control`] when the driver answers another error.
    #[doc(alias = "cuswStreamOperations")]
    pub fn stream_operations(&self, id: u64) -> Result<Option<(u64, u64)>, Error> {
        let (mut enqueued, mut completed) = (0, 0);
        // SAFETY: both out-pointers are valid.
        match unsafe { (self.stream_operations)(id, &mut enqueued, &mut completed) } {
            CUresult::CUDA_ERROR_NOT_FOUND => Ok(None),
            result => {
                check("cuswStreamOperations", result)?;
                Ok(Some((enqueued, completed)))
            }
        }
    }

    /// The next `count` calls of `entry`, from any thread, sleep `delay` before doing anything:
    /// holds a race's window open (another thread acts while the call is held). `count` 0
    /// disarms the delays armed for `entry` (spelt as armed).
    ///
    /// # Errors
    /// [`Error::DelayTooLong`] over `u32::MAX` microseconds; [`Error::Control`] with
    /// `CUDA_ERROR_NOT_FOUND` when the driver has no such entry point.
    #[doc(alias = "cuswDelayNextCalls")]
    pub fn delay_next_calls(&self, entry: &CStr, count: u32, delay: Duration) -> Result<(), Error> {
        let microseconds = microseconds(delay)?;
        // SAFETY: `entry` is NUL-terminated; the driver copies what it keeps.
        check("cuswDelayNextCalls", unsafe {
            (self.delay_next_calls)(entry.as_ptr(), count, microseconds)
        })
    }

    /// How many calls so far named a handle after it was destroyed (the real driver may crash on
    /// those; the software one answers an error and counts them).
    ///
    /// # Errors
    /// [`Error::Control`] when the driver answers an error.
    #[doc(alias = "cuswStaleHandleUses")]
    pub fn stale_handle_uses(&self) -> Result<u64, Error> {
        let mut count = 0;
        // SAFETY: a valid out-pointer.
        check("cuswStaleHandleUses", unsafe {
            (self.stale_handle_uses)(&mut count)
        })?;
        Ok(count)
    }

    /// Registers `stand_in` for launches of the kernels named `kernel` (as their PTX names them),
    /// replacing the one registered before, process-wide: from then on each launch runs it once
    /// for the whole grid, in its stream's order on the stream's worker thread (see
    /// [`stand_in`](crate::stand_in)). Its error fails the launch's context with that code, as a
    /// fault in the kernel would (`CUDA_ERROR_ASSERT` for a failed assertion); a panic fails it
    /// with `CUDA_ERROR_LAUNCH_FAILED`, and is logged.
    ///
    /// The stand-in lives for the rest of the process, as launches in flight may still run it.
    ///
    /// # Errors
    /// [`Error::Control`] when the driver answers an error.
    #[doc(alias = "cuswRegisterStandIn")]
    pub fn register_stand_in(
        &self,
        kernel: &CStr,
        stand_in: impl Fn(&KernelLaunch) -> Result<(), CUresult> + Send + Sync + 'static,
    ) -> Result<(), Error> {
        let boxed: BoxedStandIn = Box::new(stand_in);
        let boxed: &'static BoxedStandIn = Box::leak(Box::new(boxed));
        let data = std::ptr::from_ref(boxed).cast_mut().cast();
        // SAFETY: `kernel` is NUL-terminated and copied by the driver; `run_stand_in` reads `data`,
        // a leaked `BoxedStandIn` that outlives every launch, on any thread (it is Send + Sync).
        check("cuswRegisterStandIn", unsafe {
            (self.register_stand_in)(kernel.as_ptr(), Some(run_stand_in), data)
        })
    }

    /// How many launches so far found no stand-in for their kernel: each did nothing, and the
    /// first of each kernel is named in the driver's log.
    ///
    /// # Errors
    /// [`Error::Control`] when the driver answers an error.
    #[doc(alias = "cuswKernelsWithoutStandIn")]
    pub fn kernels_without_stand_in(&self) -> Result<u64, Error> {
        let mut count = 0;
        // SAFETY: a valid out-pointer.
        check("cuswKernelsWithoutStandIn", unsafe {
            (self.kernels_without_stand_in)(&mut count)
        })?;
        Ok(count)
    }

    /// How many calls so far, from any thread, of the entry points the driver exports without
    /// modelling them ([`UNMODELLED_ENTRY_POINTS`](crate::UNMODELLED_ENTRY_POINTS)): each answers
    /// `CUDA_ERROR_NOT_SUPPORTED` and is named in the driver's log the first time. A test that
    /// expects code to stay within what the driver models checks that this does not grow.
    ///
    /// # Errors
    /// [`Error::Control`] when the driver answers an error.
    #[doc(alias = "cuswUnmodelledCalls")]
    pub fn unmodelled_calls(&self) -> Result<u64, Error> {
        let mut count = 0;
        // SAFETY: a valid out-pointer.
        check("cuswUnmodelledCalls", unsafe {
            (self.unmodelled_calls)(&mut count)
        })?;
        Ok(count)
    }

    /// How many times so far stream work (a copy, a set, a stream memory operation) touched
    /// memory of the stream-ordered allocator (`cuMemAllocAsync`) before the point of its
    /// allocation in its stream or after the point of its free: each such use failed its context
    /// with `CUDA_ERROR_ILLEGAL_ADDRESS`, as a fault would, and the first is named in the driver's
    /// log. The real driver keeps freed memory in its pool, where such a use goes unnoticed.
    ///
    /// # Errors
    /// [`Error::Control`] when the driver answers an error.
    #[doc(alias = "cuswStreamOrderedMemoryMisuses")]
    pub fn stream_ordered_memory_misuses(&self) -> Result<u64, Error> {
        let mut count = 0;
        // SAFETY: a valid out-pointer.
        check("cuswStreamOrderedMemoryMisuses", unsafe {
            (self.stream_ordered_memory_misuses)(&mut count)
        })?;
        Ok(count)
    }

    /// What is alive in the driver now, process-wide: for leak checks.
    ///
    /// # Errors
    /// [`Error::LiveCountsUnfilled`] when the driver does not fill every count this package
    /// knows of; [`Error::Control`] when it answers an error.
    #[doc(alias = "cuswLiveObjects")]
    pub fn live_objects(&self) -> Result<LiveObjects, Error> {
        let expected = size_of::<LiveCounts>();
        let mut raw = LiveCounts {
            size: expected,
            ..LiveCounts::default()
        };
        // SAFETY: `raw` is a valid `struct cuswLiveCounts` of the size it says.
        check("cuswLiveObjects", unsafe { (self.live_objects)(&mut raw) })?;
        if raw.size != expected {
            return Err(Error::LiveCountsUnfilled {
                filled: raw.size,
                expected,
            });
        }
        let [
            streams,
            events,
            graphs,
            graph_execs,
            user_objects,
            host_allocations,
            device_allocations,
            pending_host_functions,
        ] = raw.counts;
        Ok(LiveObjects {
            streams,
            events,
            graphs,
            graph_execs,
            user_objects,
            host_allocations,
            device_allocations,
            pending_host_functions,
        })
    }

    /// How many injected failures of `entry` (spelt as armed) are still to come for calls from
    /// this thread: those armed on this thread plus those armed for any thread.
    ///
    /// # Errors
    /// [`Error::Control`] with `CUDA_ERROR_NOT_FOUND` when the driver has no such entry point.
    #[doc(alias = "cuswArmedFailures")]
    pub fn armed_failures(&self, entry: &CStr) -> Result<u32, Error> {
        let mut remaining = 0;
        // SAFETY: `entry` is NUL-terminated; `remaining` is a valid out-pointer.
        check("cuswArmedFailures", unsafe {
            (self.armed_failures)(entry.as_ptr(), &mut remaining)
        })?;
        Ok(remaining)
    }

    /// How many delayed calls of `entry` (spelt as armed) are still to come, from any thread: a
    /// call leaves the count as it enters, before its delay, so 0 after
    /// [`delay_next_calls`](Self::delay_next_calls) means every delayed call is held or done.
    ///
    /// # Errors
    /// [`Error::Control`] with `CUDA_ERROR_NOT_FOUND` when the driver has no such entry point.
    #[doc(alias = "cuswArmedDelays")]
    pub fn armed_delays(&self, entry: &CStr) -> Result<u32, Error> {
        let mut remaining = 0;
        // SAFETY: `entry` is NUL-terminated; `remaining` is a valid out-pointer.
        check("cuswArmedDelays", unsafe {
            (self.armed_delays)(entry.as_ptr(), &mut remaining)
        })?;
        Ok(remaining)
    }

    /// How many times `entry` was called since the driver was loaded, by any thread, calls an
    /// injected failure answered included; a base name counts all its variants, an exported name
    /// only that function.
    ///
    /// # Errors
    /// [`Error::Control`] with `CUDA_ERROR_NOT_FOUND` when the driver has no such entry point.
    #[doc(alias = "cuswCallCount")]
    pub fn call_count(&self, entry: &CStr) -> Result<u64, Error> {
        let mut count = 0;
        // SAFETY: `entry` is NUL-terminated; `count` is a valid out-pointer.
        check("cuswCallCount", unsafe {
            (self.call_count)(entry.as_ptr(), &mut count)
        })?;
        Ok(count)
    }

    /// How many host functions were launched through `cuLaunchHostFunc_v2` (or its per-thread
    /// form) with the sync mode `mode` (a `CUhostTaskSyncMode` value) since the driver was
    /// loaded; launches an injected failure or a bad argument refused are not counted.
    ///
    /// # Errors
    /// [`Error::Control`] with `CUDA_ERROR_INVALID_VALUE` for an unknown mode.
    #[doc(alias = "cuswHostTaskSyncModeLaunches")]
    pub fn host_task_sync_mode_launches(&self, mode: c_uint) -> Result<u64, Error> {
        let mut count = 0;
        // SAFETY: `count` is a valid out-pointer.
        check("cuswHostTaskSyncModeLaunches", unsafe {
            (self.host_task_sync_mode_launches)(mode, &mut count)
        })?;
        Ok(count)
    }

    /// Makes the next call of `entry`, from any thread, first begin a capture of `stream` in
    /// `mode` on the calling thread, as `cuStreamBeginCapture_v2` would, then do its work: other
    /// code's capture begun between two driver calls of an operation, deterministically. Arming
    /// again replaces the armed capture.
    ///
    /// # Errors
    /// [`Error::Control`] with `CUDA_ERROR_NOT_FOUND` when the driver has no such entry point.
    #[doc(alias = "cuswBeginCaptureAtNextCall")]
    pub fn begin_capture_at_next_call(
        &self,
        entry: &CStr,
        stream: &Stream,
        mode: CUstreamCaptureMode,
    ) -> Result<(), Error> {
        // SAFETY: `entry` is NUL-terminated; the driver copies it, and checks the stream's
        // handle against its registry when the capture begins.
        check("cuswBeginCaptureAtNextCall", unsafe {
            (self.begin_capture_at_next_call)(entry.as_ptr(), stream.as_raw(), mode)
        })
    }

    /// As [`begin_capture_at_next_call`](Self::begin_capture_at_next_call), at the call of
    /// `entry` after `calls_before` others (from any thread), which go as usual: a capture begun
    /// between an operation's later calls.
    ///
    /// # Errors
    /// [`Error::Control`] with `CUDA_ERROR_NOT_FOUND` when the driver has no such entry point.
    #[doc(alias = "cuswBeginCaptureAtCall")]
    pub fn begin_capture_at_call(
        &self,
        entry: &CStr,
        calls_before: u32,
        stream: &Stream,
        mode: CUstreamCaptureMode,
    ) -> Result<(), Error> {
        // SAFETY: as `begin_capture_at_next_call`.
        check("cuswBeginCaptureAtCall", unsafe {
            (self.begin_capture_at_call)(entry.as_ptr(), calls_before, stream.as_raw(), mode)
        })
    }
}

impl Controls {
    /// Disarms the capture [`begin_capture_at_next_call`](Self::begin_capture_at_next_call)
    /// armed, if no call began it yet.
    ///
    /// # Errors
    /// [`Error::Control`] when the driver refuses (it does not).
    #[doc(alias = "cuswBeginCaptureAtNextCall")]
    pub fn disarm_capture_at_next_call(&self) -> Result<(), Error> {
        // SAFETY: a null entry is the documented way to disarm; the other arguments are unused.
        check("cuswBeginCaptureAtNextCall", unsafe {
            (self.begin_capture_at_next_call)(
                std::ptr::null(),
                std::ptr::null_mut(),
                CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            )
        })
    }
}

/// A duration in the controls' unit, whole microseconds.
fn microseconds(delay: Duration) -> Result<c_uint, Error> {
    c_uint::try_from(delay.as_micros()).map_err(|_| Error::DelayTooLong { delay })
}

impl Controls {
    /// A new context of `device` beside its primary context, for a test that fails a context on
    /// purpose ([`set_sticky_error`](Self::set_sticky_error),
    /// [`launch_fault`](Self::launch_fault)): its failure is its own, so the other tests of the
    /// binary go on, in parallel, on the primary context. It has its own legacy and per-thread
    /// streams, events, allocations and sticky error; host functions of every context share the
    /// driver's one host-function thread.
    ///
    /// It is destroyed once the returned context, its clones and everything made from them
    /// (streams, events, graphs, launch records) are gone, on the thread that drops the last of
    /// them: its streams drain first (pending host functions run, unless it failed), then its
    /// events and allocations go. cuda-host keeps nothing of it: a failed context stays failed
    /// for cuda-host, and the next fresh context is another. (A reset of the failed context
    /// instead could not keep cuda-host usable on it: `driver/api/fresh_contexts.c` says why.)
    ///
    /// ```
    /// use cuda_host::sys::CUresult;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // SAFETY: the library this package built is a driver library; no other driver was loaded.
    /// let driver = unsafe { cuda_host_testing::install() }?;
    /// // SAFETY: as above.
    /// let controls = unsafe { cuda_host_testing::controls() }?;
    /// let context = controls.fresh_context(&cuda_host::Device::get(driver, 0)?)?;
    /// let stream = cuda_host::Stream::new(&context, cuda_host::StreamFlags::NonBlocking)?;
    /// controls.launch_fault(&stream, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS)?;
    /// let error = stream.synchronize().unwrap_err();
    /// assert_eq!(error.driver_result(), Some(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS));
    /// // The primary context, which other tests use, has not failed.
    /// let primary = cuda_host::Device::get(driver, 0)?.primary_context()?;
    /// cuda_host::Stream::new(&primary, cuda_host::StreamFlags::NonBlocking)?.synchronize()?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// - [`Error::OtherDriver`] when `device` belongs to another driver than the one these
    ///   controls act on;
    /// - [`Error::Control`] when the driver refuses: `CUDA_ERROR_OUT_OF_MEMORY` with 64 fresh
    ///   contexts alive;
    /// - [`Error::Host`] when cuda-host refuses the context (inside a host function).
    #[doc(alias = "cuswFreshContextCreate")]
    pub fn fresh_context(&self, device: &Device) -> Result<Context, Error> {
        let driver = device.driver();
        if !self.acts_on(driver) {
            return Err(Error::OtherDriver {
                library: driver.library_name().to_owned(),
            });
        }
        let mut raw = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the driver checks the device's ordinal.
        check("cuswFreshContextCreate", unsafe {
            (self.fresh_context_create)(&mut raw, device.as_raw())
        })?;
        let owner = FreshContext {
            raw,
            destroy: self.fresh_context_destroy,
            driver: Arc::clone(driver),
        };
        // SAFETY: `raw` is a context of `driver` (the library these controls act on, checked
        // above), made just now; `owner` destroys it only when cuda-host drops it, after
        // the last use.
        unsafe { Context::borrow_raw_with_owner(driver, raw, owner) }
            .map_err(|source| Error::Host { source })
    }

    /// Whether `driver` was loaded from the library these controls act on: the same loaded
    /// object exports the same control at the same address.
    fn acts_on(&self, driver: &Driver) -> bool {
        // SAFETY: the library is loaded already (`driver` holds it), so opening it again runs no
        // initialisation code; the symbol's address is only compared, never called.
        unsafe { libloading::Library::new(driver.library_name()) }.is_ok_and(|library| {
            // SAFETY: as above.
            unsafe { library.get::<*mut c_void>(c"cuswFreshContextCreate") }.is_ok_and(|symbol| {
                // SAFETY: as above.
                unsafe { symbol.try_as_raw_ptr() }.is_some_and(|address| {
                    address.addr() == (self.fresh_context_create as *const c_void).addr()
                })
            })
        })
    }
}

/// What destroys a fresh context once cuda-host lets go of it: the owner cuda-host holds.
struct FreshContext {
    raw: CUcontext,
    destroy: FreshContextDestroyFn,
    /// The driver the context belongs to, which keeps the library, and so `destroy`, loaded.
    driver: Arc<Driver>,
}

// SAFETY: `raw` is a driver handle, valid on any thread; the driver API is thread-safe.
unsafe impl Send for FreshContext {}
// SAFETY: as above; nothing is mutable.
unsafe impl Sync for FreshContext {}

impl Drop for FreshContext {
    fn drop(&mut self) {
        // Not current on this thread any more, as a destroy by the real driver leaves it.
        let mut current = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        let result = unsafe { self.driver.cuCtxGetCurrent(&mut current) };
        if result == CUresult::CUDA_SUCCESS && current == self.raw {
            // SAFETY: null unbinds.
            let _ = unsafe { self.driver.cuCtxSetCurrent(std::ptr::null_mut()) };
        }
        // SAFETY: a fresh context of this driver, destroyed once, after cuda-host's last use.
        let result = unsafe { (self.destroy)(self.raw) };
        if result != CUresult::CUDA_SUCCESS {
            log::error!(
                "destroying a fresh context of the software driver failed: {}",
                result.name()
            );
        }
    }
}

fn check(control: &'static str, result: CUresult) -> Result<(), Error> {
    if result == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Control { control, result })
    }
}

/// A control's name from its C string literal: the names are ASCII.
fn control_name(name: &'static CStr) -> &'static str {
    name.to_str().unwrap_or("a control")
}

//! The software driver's test controls: fault injection, sticky errors, stand-ins for long or
//! faulting kernels, the reported driver version, and counts of calls and of live objects.
//!
//! They are exported C functions of the software driver library, reached through the same
//! loaded library the tests use (the platform loader hands back the already-open library).

use crate::selection::{DriverKind, software_driver_path, test_driver};
use cuda_host::{Context, Stream};
use cuda_host_sys::{CUcontext, CUresult, CUstream};
use std::ffi::{CStr, c_char, c_int, c_uint, c_ulonglong};
use std::sync::OnceLock;

/// The software driver's control functions.
#[derive(Debug)]
pub struct Controls {
    _library: libloading::Library,
    fail_next_calls: unsafe extern "C" fn(*const c_char, c_uint, CUresult) -> CUresult,
    fail_next_calls_any_thread: unsafe extern "C" fn(*const c_char, c_uint, CUresult) -> CUresult,
    set_sticky_error: unsafe extern "C" fn(CUcontext, CUresult) -> CUresult,
    launch_fault: unsafe extern "C" fn(CUstream, CUresult) -> CUresult,
    launch_sleep: unsafe extern "C" fn(CUstream, c_uint) -> CUresult,
    set_driver_version: unsafe extern "C" fn(c_int) -> CUresult,
    user_object_stats: unsafe extern "C" fn(*mut c_ulonglong, *mut c_ulonglong) -> CUresult,
    delay_next_calls: unsafe extern "C" fn(*const c_char, c_uint, c_uint) -> CUresult,
    stale_handle_uses: unsafe extern "C" fn(*mut c_ulonglong) -> CUresult,
    live_objects: LiveObjectsFn,
    armed_failures: unsafe extern "C" fn(*const c_char, *mut c_uint) -> CUresult,
    call_count: unsafe extern "C" fn(*const c_char, *mut c_ulonglong) -> CUresult,
    host_task_sync_mode_launches: unsafe extern "C" fn(c_uint, *mut c_ulonglong) -> CUresult,
}

/// `cuswLiveObjects`, as `cudasw.h` declares it.
pub type LiveObjectsFn = unsafe extern "C" fn(*mut LiveCounts) -> CUresult;

/// `struct cuswLiveCounts` of `cudasw.h`: `size` first, then the counts; members are only added
/// at the end.
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

/// The controls, when the tests run on the software driver; `None` on the real one.
pub fn controls() -> Option<&'static Controls> {
    static CONTROLS: OnceLock<Controls> = OnceLock::new();
    if test_driver().kind != DriverKind::Software {
        return None;
    }
    Some(CONTROLS.get_or_init(|| Controls::open(&software_driver_path("libcudasw.so"))))
}

/// The controls; panics on the real driver (for tests that only run on the software one).
#[track_caller]
pub fn expect_controls() -> &'static Controls {
    controls().expect("this test needs the software driver's controls")
}

macro_rules! symbol {
    ($library:expr, $name:literal) => {
        // SAFETY: the software driver exports this control function with the C signature the
        // field declares (tests/driver-double/cudasw.h).
        *unsafe { $library.get($name) }
            .unwrap_or_else(|e| panic!("the software driver lacks {:?}: {e}", $name))
    };
}

impl Controls {
    fn open(path: &std::path::Path) -> Controls {
        // SAFETY: the software driver has no initialisers with preconditions; the library is the
        // one the tests already loaded, so this only takes another reference to it.
        let library = unsafe { libloading::Library::new(path) }
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
        Controls {
            fail_next_calls: symbol!(library, c"cuswFailNextCalls"),
            fail_next_calls_any_thread: symbol!(library, c"cuswFailNextCallsAnyThread"),
            set_sticky_error: symbol!(library, c"cuswSetStickyError"),
            launch_fault: symbol!(library, c"cuswLaunchFault"),
            launch_sleep: symbol!(library, c"cuswLaunchSleep"),
            set_driver_version: symbol!(library, c"cuswSetDriverVersion"),
            user_object_stats: symbol!(library, c"cuswUserObjectStats"),
            delay_next_calls: symbol!(library, c"cuswDelayNextCalls"),
            stale_handle_uses: symbol!(library, c"cuswStaleHandleUses"),
            live_objects: symbol!(library, c"cuswLiveObjects"),
            armed_failures: symbol!(library, c"cuswArmedFailures"),
            call_count: symbol!(library, c"cuswCallCount"),
            host_task_sync_mode_launches: symbol!(library, c"cuswHostTaskSyncModeLaunches"),
            _library: library,
        }
    }

    /// The next `count` calls of `entry` (base or exported name) made from this thread answer
    /// `code` and do nothing.
    pub fn fail_next_calls(&self, entry: &CStr, count: u32, code: CUresult) {
        // SAFETY: `entry` is NUL-terminated.
        check(unsafe { (self.fail_next_calls)(entry.as_ptr(), count, code) });
    }

    /// As [`fail_next_calls`](Self::fail_next_calls), for calls from any thread.
    pub fn fail_next_calls_any_thread(&self, entry: &CStr, count: u32, code: CUresult) {
        // SAFETY: `entry` is NUL-terminated.
        check(unsafe { (self.fail_next_calls_any_thread)(entry.as_ptr(), count, code) });
    }

    /// Puts `context` into the sticky error `code` now.
    pub fn set_sticky_error(&self, context: &Context, code: CUresult) {
        // SAFETY: a live context's handle.
        check(unsafe { (self.set_sticky_error)(context.as_raw(), code) });
    }

    /// Enqueues the stand-in for a faulting kernel: when `stream` reaches it, its context gets
    /// the sticky error `code`.
    pub fn launch_fault(&self, stream: &Stream, code: CUresult) {
        // SAFETY: a live stream's handle.
        check(unsafe { (self.launch_fault)(stream.as_raw(), code) });
    }

    /// Enqueues the stand-in for a long kernel: `stream` sleeps `microseconds` when it gets there.
    pub fn launch_sleep(&self, stream: &Stream, microseconds: u32) {
        // SAFETY: a live stream's handle.
        check(unsafe { (self.launch_sleep)(stream.as_raw(), microseconds) });
    }

    /// Makes the driver report `version` and hide every ABI newer than it (0: the default).
    pub fn set_driver_version(&self, version: i32) {
        // SAFETY: no pointer arguments.
        check(unsafe { (self.set_driver_version)(version) });
    }

    /// How many user-object destructors have run, and how many user objects are alive.
    pub fn user_object_stats(&self) -> (u64, u64) {
        let (mut destroyed, mut alive) = (0, 0);
        // SAFETY: both out-pointers are valid.
        check(unsafe { (self.user_object_stats)(&mut destroyed, &mut alive) });
        (destroyed, alive)
    }

    /// The next `count` calls of `entry`, from any thread, sleep `delay` before doing anything:
    /// holds a race's window open (another thread acts while the call is held).
    pub fn delay_next_calls(&self, entry: &CStr, count: u32, delay: std::time::Duration) {
        let microseconds = u32::try_from(delay.as_micros()).expect("a delay of under an hour");
        // SAFETY: `entry` is NUL-terminated.
        check(unsafe { (self.delay_next_calls)(entry.as_ptr(), count, microseconds) });
    }

    /// How many calls so far named a handle after it was destroyed (the real driver may crash on
    /// those).
    pub fn stale_handle_uses(&self) -> u64 {
        let mut count = 0;
        // SAFETY: a valid out-pointer.
        check(unsafe { (self.stale_handle_uses)(&mut count) });
        count
    }

    /// What is alive in the driver now.
    ///
    /// # Panics
    /// When the driver does not fill every count this harness knows of.
    pub fn live_objects(&self) -> LiveObjects {
        let mut raw = LiveCounts {
            size: size_of::<LiveCounts>(),
            ..LiveCounts::default()
        };
        // SAFETY: `raw` is a valid `struct cuswLiveCounts` of the size it says.
        check(unsafe { (self.live_objects)(&mut raw) });
        assert_eq!(raw.size, size_of::<LiveCounts>(), "counts left unfilled");
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
        LiveObjects {
            streams,
            events,
            graphs,
            graph_execs,
            user_objects,
            host_allocations,
            device_allocations,
            pending_host_functions,
        }
    }

    /// How many injected failures of `entry` (spelt as armed) are still to come for calls from
    /// this thread: those armed on this thread plus those armed for any thread.
    pub fn armed_failures(&self, entry: &CStr) -> u32 {
        let mut remaining = 0;
        // SAFETY: `entry` is NUL-terminated; `remaining` is a valid out-pointer.
        check(unsafe { (self.armed_failures)(entry.as_ptr(), &mut remaining) });
        remaining
    }

    /// How many times `entry` was called since the driver was loaded, by any thread; a base name
    /// counts all its variants, an exported name only that function.
    pub fn call_count(&self, entry: &CStr) -> u64 {
        let mut count = 0;
        // SAFETY: `entry` is NUL-terminated; `count` is a valid out-pointer.
        check(unsafe { (self.call_count)(entry.as_ptr(), &mut count) });
        count
    }

    /// How many host functions were launched through `cuLaunchHostFunc_v2` (or its per-thread
    /// form) with the sync mode `mode` (a `CUhostTaskSyncMode` value) since the driver was loaded;
    /// launches an injected failure or a bad argument refused are not counted.
    pub fn host_task_sync_mode_launches(&self, mode: c_uint) -> u64 {
        let mut count = 0;
        // SAFETY: `count` is a valid out-pointer.
        check(unsafe { (self.host_task_sync_mode_launches)(mode, &mut count) });
        count
    }
}

#[track_caller]
fn check(result: CUresult) {
    assert_eq!(
        result,
        CUresult::CUDA_SUCCESS,
        "a software-driver control failed"
    );
}

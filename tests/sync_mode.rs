//! `cuLaunchHostFunc_v2`'s sync mode as a launch option: it reaches the driver when the driver
//! has the entry point, and is a typed error naming it and the version it needs when not.

use cuda_host::sys::{Availability, Driver};
use cuda_host::{
    Device, Error, Stream, StreamFlags, UserData, host_launch, options::HostTaskSyncMode,
    options::LaunchOptions, options::host_launch_raw_with, options::host_launch_with,
};
use std::ffi::{CStr, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use suite::{Tally, context};

/// Launches through `cuLaunchHostFunc_v2` with `mode` since load (software driver).
fn launches_in_mode(mode: HostTaskSyncMode) -> u64 {
    suite::software::expect_controls().host_task_sync_mode_launches(mode.to_raw().0)
}

fn call_count(entry: &CStr) -> u64 {
    suite::software::expect_controls().call_count(entry)
}

fn has_v2(driver: &Driver) -> bool {
    driver
        .availability("cuLaunchHostFunc_v2")
        .is_some_and(|availability| availability.is_available())
}

/// The exported name the driver's table calls `cuLaunchHostFunc_v2` by: its per-thread form on a
/// per-thread table.
fn v2_form() -> &'static std::ffi::CStr {
    if suite::test_driver().driver.per_thread_default_stream() {
        c"cuLaunchHostFunc_v2_ptsz"
    } else {
        c"cuLaunchHostFunc_v2"
    }
}

#[test]
fn each_sync_mode_reaches_the_driver_through_cu_launch_host_func_v2() {
    let test = "each_sync_mode_reaches_the_driver_through_cu_launch_host_func_v2";
    let context = context();
    if !has_v2(context.driver()) {
        return suite::skip(
            test,
            "this driver has no cuLaunchHostFunc_v2 (CUDA 13.1); \
             a_sync_mode_on_a_driver_without_cu_launch_host_func_v2_is_a_typed_error covers it",
        );
    }
    // Alone in a process: the software driver's counts are process-wide.
    let software = suite::test_driver().is_software();
    if software && !suite::in_child_process() {
        return suite::run_in_child(module_path!(), test, &[]);
    }
    let stream = Stream::new(&context, StreamFlags::NonBlocking).expect("stream");
    for mode in [HostTaskSyncMode::Blocking, HostTaskSyncMode::SpinWait] {
        let before = software.then(|| {
            (
                launches_in_mode(mode),
                call_count(v2_form()),
                call_count(c"cuLaunchHostFunc"),
            )
        });
        let tally = Tally::new();
        let probe = tally.probe();
        host_launch_with(
            &stream,
            LaunchOptions::default().sync_mode(mode),
            move || probe.ran(),
        )
        .unwrap_or_else(|error| panic!("{mode:?}: {error}"));
        stream.synchronize().expect("synchronize");
        assert_eq!((tally.runs(), tally.drops()), (1, 1), "{mode:?}");
        assert_eq!(tally.drop_threads(), [std::thread::current().id()]);
        if let Some((in_mode, v2, all)) = before {
            assert_eq!(
                launches_in_mode(mode),
                in_mode + 1,
                "{mode:?} reached the driver"
            );
            assert_eq!(call_count(v2_form()), v2 + 1);
            // The base name counts every ABI: the one launch, through _v2.
            assert_eq!(call_count(c"cuLaunchHostFunc"), all + 1);
        }
    }
}

#[test]
fn default_options_launch_through_cu_launch_host_func() {
    let test = "default_options_launch_through_cu_launch_host_func";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "call counts are a control of the software driver");
    };
    if !suite::in_child_process() {
        return suite::run_in_child(module_path!(), test, &[]);
    }
    let context = context();
    let stream = Stream::new(&context, StreamFlags::NonBlocking).expect("stream");
    let (v2, all) = (
        controls.call_count(v2_form()),
        controls.call_count(c"cuLaunchHostFunc"),
    );
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&ran);
    host_launch_with(&stream, LaunchOptions::default(), move || {
        counter.fetch_add(1, Ordering::SeqCst);
    })
    .expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert_eq!(controls.call_count(v2_form()), v2, "no _v2 call");
    assert_eq!(controls.call_count(c"cuLaunchHostFunc"), all + 1);
}

unsafe extern "C" fn bump(counter: *mut c_void) {
    // SAFETY: launched with the address of a live `AtomicUsize`.
    unsafe { &*counter.cast::<AtomicUsize>() }.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn the_raw_form_takes_a_sync_mode_too() {
    let test = "the_raw_form_takes_a_sync_mode_too";
    let context = context();
    if !has_v2(context.driver()) {
        return suite::skip(test, "this driver has no cuLaunchHostFunc_v2 (CUDA 13.1)");
    }
    let stream = Stream::new(&context, StreamFlags::NonBlocking).expect("stream");
    let counter = AtomicUsize::new(0);
    let spin = LaunchOptions::default().sync_mode(HostTaskSyncMode::SpinWait);
    // SAFETY: `bump` takes the counter, which outlives the synchronize below.
    unsafe {
        host_launch_raw_with(
            &stream,
            spin,
            bump,
            UserData::PassThrough(std::ptr::from_ref(&counter).cast_mut().cast()),
        )
    }
    .expect("launch");
    let bytes = 5u32.to_ne_bytes();
    // SAFETY: `ignore_bytes` reads nothing.
    unsafe { host_launch_raw_with(&stream, spin, ignore_bytes, UserData::Copied(&bytes)) }
        .expect("launch with copied bytes");
    stream.synchronize().expect("synchronize");
    assert_eq!(counter.load(Ordering::SeqCst), 1);
}

unsafe extern "C" fn ignore_bytes(_bytes: *mut c_void) {}

/// The driver the test checks the missing entry point on: the process's own when it lacks
/// `cuLaunchHostFunc_v2` (the H200's CUDA 13.0 driver), else a fresh table of the software driver
/// reporting CUDA 13.0.
fn driver_without_v2(test: &str) -> Option<Arc<Driver>> {
    let process = &suite::test_driver().driver;
    if !has_v2(process) {
        return Some(Arc::clone(process));
    }
    let controls = suite::software::controls()?;
    controls.set_driver_version(13000);
    // SAFETY: the software driver implements the driver API's signatures.
    let fresh = unsafe { Driver::open(cuda_host_testing::library_path()) }
        .unwrap_or_else(|error| panic!("{test}: the software driver opens: {error}"));
    Some(Arc::new(fresh))
}

#[test]
fn a_sync_mode_on_a_driver_without_cu_launch_host_func_v2_is_a_typed_error() {
    let test = "a_sync_mode_on_a_driver_without_cu_launch_host_func_v2_is_a_typed_error";
    let process = &suite::test_driver().driver;
    if has_v2(process) && suite::software::controls().is_none() {
        return suite::skip(test, "this real driver has cuLaunchHostFunc_v2");
    }
    // Alone in a process: the software driver's reported version is process-wide.
    if suite::test_driver().is_software() && !suite::in_child_process() {
        return suite::run_in_child(module_path!(), test, &[]);
    }
    let driver = driver_without_v2(test).expect("a driver without cuLaunchHostFunc_v2");
    let context = Device::get(&driver, 0)
        .and_then(|device| device.primary_context())
        .expect("a context");
    let stream = Stream::new(&context, StreamFlags::NonBlocking).expect("stream");
    for mode in [HostTaskSyncMode::Blocking, HostTaskSyncMode::SpinWait] {
        let tally = Tally::new();
        let probe = tally.probe();
        let error = host_launch_with(
            &stream,
            LaunchOptions::default().sync_mode(mode),
            move || probe.ran(),
        )
        .expect_err("launched without cuLaunchHostFunc_v2");
        match &error {
            Error::Driver(cuda_host::sys::Error::EntryPointUnavailable {
                entry_point,
                driver_version,
                availability,
            }) => {
                assert_eq!(*entry_point, "cuLaunchHostFunc_v2");
                assert!(*driver_version < 13010, "{driver_version}");
                assert_eq!(
                    *availability,
                    Availability::NeedsNewerDriver { required: 13010 }
                );
            }
            other => panic!("{mode:?}: expected the missing entry point, got {other:?}"),
        }
        let message = error.to_string();
        assert!(message.contains("cuLaunchHostFunc_v2"), "{message}");
        assert!(message.contains("13.1"), "{message}");
        // Refused, not fallen back: the closure never ran and was dropped at once, here.
        assert_eq!((tally.runs(), tally.drops()), (0, 1), "{mode:?}");
        assert_eq!(tally.drop_threads(), [std::thread::current().id()]);
    }
    // Without a sync mode the same stream launches through cuLaunchHostFunc.
    let tally = Tally::new();
    let probe = tally.probe();
    host_launch(&stream, move || probe.ran()).expect("the classic launch");
    stream.synchronize().expect("synchronize");
    assert_eq!((tally.runs(), tally.drops()), (1, 1));
}

//! The package as a user's test sees it: the driver it installs, the entry points it documents,
//! what answers for the others, its controls' typed errors and its libcuda folder.

use cuda_host::sys::{
    Availability, CUdriverProcAddressQueryResult, CUresult, Error as DriverError,
};
use cuda_host_testing::{
    CONTROLS, ENTRY_POINTS, Error, LibcudaDir, UNMODELLED_ENTRY_POINTS, Variant,
};
use std::ffi::{CString, c_char, c_int, c_void};
use std::sync::Arc;

/// `cuGetProcAddress_v2`, as cuda.h declares it.
type GetProcAddress = unsafe extern "C" fn(
    *const c_char,
    *mut *mut c_void,
    c_int,
    u64,
    *mut CUdriverProcAddressQueryResult,
) -> CUresult;

fn installed() -> &'static Arc<cuda_host::sys::Driver> {
    // SAFETY: the library is this package's software driver.
    unsafe { cuda_host_testing::install() }.expect("the software driver installs")
}

fn library() -> libloading::Library {
    // SAFETY: the software driver's initialisation only sets up its own state; the process has
    // it loaded already or loads the same library.
    unsafe { libloading::Library::new(cuda_host_testing::library_path()) }.expect("opens")
}

/// What the library's `cuGetProcAddress_v2` answers for `name` at the version it reports.
fn proc_address(name: &str) -> (CUresult, *mut c_void, CUdriverProcAddressQueryResult) {
    let library = library();
    // SAFETY: the software driver exports cuGetProcAddress_v2 with cuda.h's signature.
    let get_proc_address = unsafe { library.get::<GetProcAddress>(c"cuGetProcAddress_v2") }
        .expect("the software driver has cuGetProcAddress_v2");
    let name = CString::new(name).expect("no NUL in a name");
    let mut function = std::ptr::null_mut();
    let mut status = CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SUCCESS;
    // SAFETY: valid pointers; the version is the one the driver reports, which it accepts.
    let result = unsafe {
        get_proc_address(
            name.as_ptr(),
            &mut function,
            installed().version(),
            0,
            &mut status,
        )
    };
    (result, function, status)
}

#[test]
fn install_makes_the_software_driver_cuda_hosts_process_wide_driver() {
    let driver = installed();
    assert!(Arc::ptr_eq(driver, cuda_host::driver().expect("loaded")));
    assert!(
        Arc::ptr_eq(driver, installed()),
        "a second install is the same driver"
    );
    assert_eq!(
        std::fs::canonicalize(driver.library_name()).expect("a path"),
        std::fs::canonicalize(cuda_host_testing::library_path()).expect("a path")
    );
}

#[test]
fn every_documented_entry_point_is_resolved_through_get_proc_address() {
    assert!(ENTRY_POINTS.len() > 50, "entries.def was read");
    for entry in ENTRY_POINTS {
        let (result, function, status) = proc_address(entry.base);
        assert_eq!(result, CUresult::CUDA_SUCCESS, "{}", entry.base);
        assert!(!function.is_null(), "{} has no function", entry.base);
        assert_eq!(
            status,
            CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SUCCESS,
            "{}",
            entry.base
        );
    }
}

#[test]
fn every_documented_entry_point_and_control_is_exported() {
    let library = library();
    assert!(
        UNMODELLED_ENTRY_POINTS.len() > 400,
        "exports.txt was read: {} unmodelled",
        UNMODELLED_ENTRY_POINTS.len()
    );
    let exported = ENTRY_POINTS
        .iter()
        .chain(UNMODELLED_ENTRY_POINTS)
        .flat_map(|entry| std::iter::once(entry.exported).chain(entry.per_thread))
        .chain(CONTROLS.iter().copied());
    for name in exported {
        let symbol = CString::new(name).expect("no NUL in a name");
        // SAFETY: only the symbol's presence is checked; it is never called.
        let found = unsafe { library.get::<*mut c_void>(symbol.as_bytes_with_nul()) };
        assert!(found.is_ok(), "{name} is documented but not exported");
    }
}

#[test]
fn an_entry_point_the_driver_does_not_model_answers_not_supported_and_is_counted() {
    const TEST: &str =
        "an_entry_point_the_driver_does_not_model_answers_not_supported_and_is_counted";
    let Some(log) = std::env::var_os(IN_CHILD).and(std::env::var_os("CUSW_LOG")) else {
        // A process of its own: the count is process-wide, and its log goes to a file.
        let log = std::env::temp_dir().join(format!("cusw-log-{}", std::process::id()));
        let _ = std::fs::remove_file(&log);
        run_in_child(TEST, &[("CUSW_LOG", log.to_str().expect("a UTF-8 path"))]);
        let _ = std::fs::remove_file(&log);
        return;
    };
    let name = "cuArrayCreate_v2";
    let entry = UNMODELLED_ENTRY_POINTS
        .iter()
        .find(|entry| entry.exported == name)
        .expect("cuArrayCreate_v2 is not modelled");
    let (result, function, status) = proc_address(entry.base);
    assert_eq!(result, CUresult::CUDA_SUCCESS);
    assert_eq!(
        status,
        CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SUCCESS
    );
    let library = library();
    // SAFETY: only the address is compared.
    let exported = unsafe { library.get::<*mut c_void>(c"cuArrayCreate_v2") }.expect("exported");
    assert_eq!(
        function, *exported,
        "cuGetProcAddress finds the exported function"
    );
    // Called through cuda-host-sys's table, as a user's code calls it.
    let driver = installed();
    assert_eq!(
        driver.availability("cuArrayCreate_v2"),
        Some(Availability::Available)
    );
    // SAFETY: the library is this package's software driver.
    let controls = unsafe { cuda_host_testing::controls() }.expect("controls");
    let before = controls.unmodelled_calls().expect("a count");
    for _ in 0..2 {
        // SAFETY: the driver reads neither argument of an entry point it does not model.
        let result = unsafe { driver.cuArrayCreate_v2(std::ptr::null_mut(), std::ptr::null()) };
        assert_eq!(result, CUresult::CUDA_ERROR_NOT_SUPPORTED);
    }
    assert_eq!(controls.unmodelled_calls(), Ok(before + 2));
    assert_eq!(controls.call_count(c"cuArrayCreate"), Ok(2));
    let logged = std::fs::read_to_string(&log).expect("the driver's log");
    assert_eq!(
        logged
            .lines()
            .filter(|line| line.contains("cuArrayCreate_v2 is not modelled"))
            .count(),
        1,
        "named once: {logged}"
    );
}

#[test]
fn a_name_no_driver_has_is_answered_as_missing_never_a_crash() {
    let name = "cuNotAnEntryPoint";
    let (result, function, status) = proc_address(name);
    assert_eq!(result, CUresult::CUDA_SUCCESS, "{name}");
    assert!(function.is_null(), "{name} has a function");
    assert_eq!(
        status,
        CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
        "{name}"
    );
}

#[test]
fn every_entry_point_of_the_headers_resolves_in_a_table_on_the_software_driver() {
    let driver = installed();
    let missing: Vec<_> = driver
        .entry_points()
        .filter(|(_, availability, _)| *availability != Availability::Available)
        .map(|(entry_point, availability, _)| format!("{} ({availability:?})", entry_point.name()))
        .collect();
    assert!(missing.is_empty(), "missing: {missing:?}");
}

#[test]
fn a_control_naming_an_unknown_entry_point_is_a_typed_error() {
    installed();
    // SAFETY: the library is this package's software driver.
    let controls = unsafe { cuda_host_testing::controls() }.expect("controls");
    let error = controls
        .fail_next_calls(c"cuNotAnEntryPoint", 1, CUresult::CUDA_ERROR_UNKNOWN)
        .unwrap_err();
    assert!(matches!(
        error,
        Error::Control {
            control: "cuswFailNextCalls",
            result: CUresult::CUDA_ERROR_NOT_FOUND
        }
    ));
    assert!(controls.call_count(c"cuNotAnEntryPoint").is_err());
}

#[test]
fn an_injected_failure_answers_the_next_call_from_this_thread_once() {
    let driver = installed();
    // SAFETY: no pointer arguments.
    let init = unsafe { driver.cuInit(0) };
    assert_eq!(init, CUresult::CUDA_SUCCESS);
    // SAFETY: the library is this package's software driver.
    let controls = unsafe { cuda_host_testing::controls() }.expect("controls");
    controls
        .fail_next_calls(
            c"cuDeviceGetCount",
            1,
            CUresult::CUDA_ERROR_OPERATING_SYSTEM,
        )
        .expect("armed");
    assert_eq!(controls.armed_failures(c"cuDeviceGetCount"), Ok(1));
    let mut count = 0;
    // SAFETY: a valid out-pointer.
    let first = unsafe { driver.cuDeviceGetCount(&mut count) };
    assert_eq!(first, CUresult::CUDA_ERROR_OPERATING_SYSTEM);
    // SAFETY: as above.
    let second = unsafe { driver.cuDeviceGetCount(&mut count) };
    assert_eq!(second, CUresult::CUDA_SUCCESS);
    assert_eq!(controls.armed_failures(c"cuDeviceGetCount"), Ok(0));
}

#[test]
fn a_libcuda_folder_holds_the_driver_under_both_names_until_dropped() {
    let folder = LibcudaDir::new().expect("made");
    let driver = std::fs::canonicalize(cuda_host_testing::library_path()).expect("a path");
    for name in ["libcuda.so.1", "libcuda.so"] {
        let link = folder.path().join(name);
        assert_eq!(std::fs::canonicalize(&link).expect("a link"), driver);
    }
    let ld_library_path = folder.ld_library_path();
    assert!(
        ld_library_path
            .to_string_lossy()
            .starts_with(&*folder.path().to_string_lossy())
    );
    let path = folder.path().to_owned();
    drop(folder);
    assert!(!path.exists());
}

#[test]
fn a_missing_library_is_a_typed_error() {
    let error = LibcudaDir::for_library(std::path::Path::new("/nonexistent/libcudasw.so"));
    assert!(matches!(error, Err(Error::Io { .. })));
}

#[test]
fn the_variants_are_built_beside_the_driver() {
    for variant in [Variant::Driver, Variant::Stub, Variant::NoProcAddress] {
        let path = cuda_host_testing::variant_path(variant);
        assert!(path.is_file(), "{} is missing", path.display());
    }
}

/// Set in the child process of a test that needs a process of its own.
const IN_CHILD: &str = "CUDA_HOST_TESTING_IN_CHILD";

/// Runs the test `name` of this binary alone in a child process with `environment`, where the
/// variables that choose a driver are unset unless given, and fails unless it passes there.
fn run_in_child(name: &str, environment: &[(&str, &str)]) {
    let output = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env_remove(cuda_host_testing::DRIVER_CHOICE_VARIABLE)
        .env_remove("CUDA_SYS_LIBCUDA")
        .env(IN_CHILD, "1")
        .envs(environment.iter().copied())
        .output()
        .expect("the child runs");
    assert!(
        output.status.success(),
        "the child failed: {}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn install_after_a_failed_load_of_another_driver_names_that_load_and_its_cause() {
    const TEST: &str =
        "install_after_a_failed_load_of_another_driver_names_that_load_and_its_cause";
    if std::env::var_os(IN_CHILD).is_none() {
        // A driver library that cannot load, on any machine.
        return run_in_child(TEST, &[("CUDA_SYS_LIBCUDA", "/nonexistent/libcuda.so.1")]);
    }
    // Code under test loads the process-wide driver first, and that fails.
    let first = cuda_host::driver().expect_err("no driver at that path");
    // SAFETY: the library is this package's software driver.
    let error = unsafe { cuda_host_testing::install() }.expect_err("the earlier load failed");
    let Error::EarlierLoadFailed { path, source } = &error else {
        panic!("not the earlier load's error: {error}");
    };
    assert_eq!(*path, cuda_host_testing::library_path());
    assert_eq!(source.libraries(), ["/nonexistent/libcuda.so.1"]);
    assert_eq!(
        first,
        cuda_host::Error::Driver(DriverError::Load(source.clone()))
    );
    let message = error.to_string();
    assert!(
        message.contains("loaded before") && message.contains("/nonexistent/libcuda.so.1"),
        "{message}"
    );
    assert!(!message.contains("does not load"), "{message}");
}

#[test]
fn a_sleep_or_delay_beyond_the_controls_limit_is_a_typed_error_and_enqueues_nothing() {
    let driver = installed();
    let context = cuda_host::Device::get(driver, 0)
        .and_then(|device| device.primary_context())
        .expect("a primary context");
    let stream =
        cuda_host::Stream::new(&context, cuda_host::StreamFlags::NonBlocking).expect("a stream");
    // SAFETY: the library is this package's software driver.
    let controls = unsafe { cuda_host_testing::controls() }.expect("controls");
    // u32::MAX microseconds is about 71.6 minutes.
    let too_long = std::time::Duration::from_secs(4_295);
    assert_eq!(
        controls.launch_sleep(&stream, too_long),
        Err(Error::DelayTooLong { delay: too_long })
    );
    assert_eq!(
        controls.delay_next_calls(c"cuStreamQuery", 1, too_long),
        Err(Error::DelayTooLong { delay: too_long })
    );
    // Nothing was enqueued: the stream is idle, not sleeping for an hour.
    assert_eq!(stream.is_complete(), Ok(true));
}

/// What `select_driver` answers in this process, checked to answer the same when called again.
fn selected() -> Result<&'static cuda_host_testing::SelectedDriver, Error> {
    // SAFETY: the libraries these tests name are this package's software driver or missing;
    // NVIDIA's driver is opened as cuda_host::driver() opens it.
    let first = unsafe { cuda_host_testing::select_driver() };
    // SAFETY: as above.
    let again = unsafe { cuda_host_testing::select_driver() };
    match (&first, &again) {
        (Ok(first), Ok(again)) => assert!(Arc::ptr_eq(first.driver(), again.driver())),
        (Err(first), Err(again)) => assert_eq!(first, again),
        _ => panic!("a second call answered otherwise: {first:?}, then {again:?}"),
    }
    first
}

#[test]
fn select_driver_installs_the_software_driver_when_asked() {
    const TEST: &str = "select_driver_installs_the_software_driver_when_asked";
    if std::env::var_os(IN_CHILD).is_none() {
        return run_in_child(TEST, &[("CUDA_TEST_DRIVER", "software")]);
    }
    let selected = selected().expect("the software driver");
    assert_eq!(selected.kind(), cuda_host_testing::DriverKind::Software);
    assert!(Arc::ptr_eq(selected.driver(), installed()));
    assert!(Arc::ptr_eq(
        selected.driver(),
        cuda_host::driver().expect("the process-wide driver")
    ));
}

#[test]
fn select_driver_falls_back_to_the_software_driver_where_no_driver_is_found_by_name() {
    const TEST: &str =
        "select_driver_falls_back_to_the_software_driver_where_no_driver_is_found_by_name";
    if std::env::var_os(IN_CHILD).is_none() {
        for choice in ["auto", ""] {
            run_in_child(TEST, &[("CUDA_TEST_DRIVER", choice)]);
        }
        return;
    }
    // SAFETY: only whether it opens is looked at; a driver library's initialisation is sound.
    if unsafe { libloading::Library::new("libcuda.so.1") }.is_ok() {
        eprintln!("skipped {TEST}: this machine has a libcuda.so.1 to find by name");
        return;
    }
    let selected = selected().expect("the software driver");
    assert!(selected.is_software());
    assert!(Arc::ptr_eq(selected.driver(), installed()));
}

#[test]
fn select_driver_refuses_a_named_driver_library_that_does_not_load() {
    const TEST: &str = "select_driver_refuses_a_named_driver_library_that_does_not_load";
    let named = "/nonexistent/libcuda.so.1";
    if std::env::var_os(IN_CHILD).is_none() {
        for choice in ["auto", ""] {
            run_in_child(
                TEST,
                &[("CUDA_TEST_DRIVER", choice), ("CUDA_SYS_LIBCUDA", named)],
            );
        }
        return;
    }
    let error = selected().expect_err("the named library does not load");
    let Error::NamedDriverUnusable { library, reason } = &error else {
        panic!("not the named library's error: {error}");
    };
    assert_eq!(library, named);
    assert!(reason.starts_with("does not load"), "{reason}");
    let message = error.to_string();
    assert!(
        message.starts_with("CUDA_SYS_LIBCUDA=/nonexistent/libcuda.so.1, but that driver"),
        "{message}"
    );
    assert!(
        cuda_host::driver().is_err(),
        "the software driver was installed in its place"
    );
}

#[test]
fn select_driver_takes_the_software_driver_found_under_the_drivers_name_for_what_it_is() {
    const TEST: &str =
        "select_driver_takes_the_software_driver_found_under_the_drivers_name_for_what_it_is";
    let library = cuda_host_testing::library_path();
    let library = library.to_str().expect("a UTF-8 path");
    if std::env::var_os(IN_CHILD).is_none() {
        return run_in_child(TEST, &[("CUDA_SYS_LIBCUDA", library)]);
    }
    let selected = selected().expect("the software driver");
    assert!(selected.is_software());
    // The driver `cuda_host::driver()` opened, as CUDA_SYS_LIBCUDA names it.
    assert_eq!(selected.driver().library_name(), library);
}

#[test]
fn select_driver_for_the_real_driver_names_why_it_cannot_be_used() {
    const TEST: &str = "select_driver_for_the_real_driver_names_why_it_cannot_be_used";
    let library = cuda_host_testing::library_path();
    let library = library.to_str().expect("a UTF-8 path");
    let Some(libcuda) = std::env::var_os(IN_CHILD) else {
        for libcuda in ["/nonexistent/libcuda.so.1", library] {
            run_in_child(
                TEST,
                &[
                    ("CUDA_TEST_DRIVER", "real"),
                    ("CUDA_SYS_LIBCUDA", libcuda),
                    (IN_CHILD, libcuda),
                ],
            );
        }
        return;
    };
    let error = selected().expect_err("no real driver");
    let Error::RealDriverUnusable { reason } = &error else {
        panic!("not why the real driver cannot be used: {error}");
    };
    let libcuda = libcuda.to_str().expect("a UTF-8 path");
    assert!(reason.contains(libcuda), "{reason}");
    if libcuda == library {
        assert!(
            reason.ends_with("is cuda-host-testing's software driver"),
            "{reason}"
        );
    } else {
        assert!(reason.starts_with("does not load"), "{reason}");
        assert!(
            cuda_host::driver().is_err(),
            "the software driver was not installed in its place"
        );
    }
    assert!(
        error
            .to_string()
            .starts_with("CUDA_TEST_DRIVER=real, but the CUDA driver")
    );
}

#[test]
fn select_driver_refuses_an_unknown_choice_naming_the_allowed_ones() {
    const TEST: &str = "select_driver_refuses_an_unknown_choice_naming_the_allowed_ones";
    if std::env::var_os(IN_CHILD).is_none() {
        return run_in_child(TEST, &[("CUDA_TEST_DRIVER", "bogus")]);
    }
    let error = selected().expect_err("an unknown choice");
    assert_eq!(
        error,
        Error::UnknownDriverChoice {
            value: "bogus".to_owned()
        }
    );
    assert!(
        error.to_string().contains("auto, real, software"),
        "{error}"
    );
}

//! cuda-host-sys: loading a driver and resolving its table, on the driver the suite runs on
//! (`CUDA_TEST_DRIVER`), with the software driver's variants standing in for broken installs.

use cuda_host_sys::{Availability, CUresult, Driver, Error, LoadError, LoadOptions};
use std::collections::BTreeMap;
use std::ffi::CStr;
use suite::{DriverKind, test_driver};

/// The address the platform loader gives for `symbol` in the library `driver` was opened from.
fn platform_address(driver: &Driver, symbol: &CStr) -> usize {
    // SAFETY: reopening an already-loaded library only takes another reference to it.
    let library = unsafe { libloading::Library::new(driver.library_name()) }
        .expect("the driver's library opens again");
    // SAFETY: the address is only compared, never called.
    unsafe { library.get::<*mut std::ffi::c_void>(symbol) }
        .ok()
        .and_then(|symbol| unsafe { symbol.try_as_raw_ptr() })
        .map_or(0, |address| address.addr())
}

/// Entries whose resolved address is not the platform loader's address of their symbol.
fn mismatches(driver: &Driver, per_thread: bool) -> BTreeMap<String, (usize, usize)> {
    driver
        .entry_points()
        .filter(|(_, availability, _)| availability.is_available())
        .filter_map(|(entry, _, address)| {
            // A per-thread variant the library does not export (the real driver has no
            // `cuGetProcAddress_v2_ptsz`) is served by the plain symbol.
            let per_thread_address = match entry.per_thread_symbol {
                Some(symbol) if per_thread => platform_address(driver, symbol),
                _ => 0,
            };
            let expected = match per_thread_address {
                0 => platform_address(driver, entry.symbol),
                found => found,
            };
            (expected != address.addr())
                .then(|| (entry.name().to_owned(), (address.addr(), expected)))
        })
        .collect()
}

#[test]
fn table_pointers_equal_the_platform_loaders_for_every_available_entry() {
    let driver = &test_driver().driver;
    let available = driver
        .entry_points()
        .filter(|(_, availability, _)| availability.is_available())
        .count();
    assert!(available > 50, "only {available} entry points resolved");
    // The per-thread forms' symbols on a per-thread table (CUDA_SYS_PER_THREAD_DEFAULT_STREAM=1).
    let wrong = mismatches(driver, driver.per_thread_default_stream());
    assert!(
        wrong.is_empty(),
        "{} of {available} entries resolved to another address than their symbol: {wrong:#x?}",
        wrong.len()
    );
}

#[test]
fn per_thread_default_stream_resolves_the_ptsz_and_ptds_entries() {
    // SAFETY: the library the suite already runs on as its driver.
    let options = unsafe { LoadOptions::library(test_driver().driver.library_name()) }
        .per_thread_default_stream(true);
    // SAFETY: as above.
    let driver = unsafe { Driver::load(&options) }.expect("the driver loads again");
    assert!(driver.per_thread_default_stream());
    let launch = driver
        .entry_points()
        .find(|(entry, _, _)| entry.name() == "cuLaunchHostFunc")
        .expect("the header declares cuLaunchHostFunc");
    assert_eq!(launch.0.per_thread_symbol, Some(c"cuLaunchHostFunc_ptsz"));
    assert_eq!(
        launch.2.addr(),
        platform_address(&driver, c"cuLaunchHostFunc_ptsz")
    );
    let wrong = mismatches(&driver, true);
    assert!(
        wrong.is_empty(),
        "per-thread entries resolved elsewhere: {wrong:#x?}"
    );
    // The per-thread forms of the oldest entry points came with CUDA 7.0: asked for at their
    // ABI's version, the driver finds none (cuEventRecord, cuStreamSynchronize).
    let lost: Vec<&str> = test_driver()
        .driver
        .entry_points()
        .zip(driver.entry_points())
        .filter(|((_, legacy, _), (_, per_thread, _))| {
            legacy.is_available() && !per_thread.is_available()
        })
        .map(|((entry, _, _), _)| entry.name())
        .collect();
    assert!(
        lost.is_empty(),
        "the per-thread table lacks entry points the legacy one has: {lost:?}"
    );
}

#[test]
fn a_missing_library_is_a_typed_error_naming_what_was_tried() {
    // SAFETY: there is no library at that path, so nothing is opened.
    let error = unsafe { Driver::open("/nonexistent/libcuda.so.1") }.unwrap_err();
    let LoadError::LibraryNotFound { tried, message } = &error else {
        panic!("expected LibraryNotFound, got {error:?}");
    };
    assert_eq!(tried, &["/nonexistent/libcuda.so.1"]);
    assert!(!message.is_empty());
    assert!(error.to_string().contains("/nonexistent/libcuda.so.1"));
    assert_eq!(error.result(), CUresult::CUDA_ERROR_NOT_FOUND);
}

fn default_library_names() -> Vec<String> {
    LoadOptions::default()
        .libraries()
        .iter()
        .map(|name| name.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn default_library_names_are_the_versioned_name_then_the_plain_one() {
    // Empty counts as unset.
    suite::alone_in_child!(
        default_library_names_are_the_versioned_name_then_the_plain_one,
        &[("CUDA_SYS_LIBCUDA", "")]
    );
    assert_eq!(default_library_names(), ["libcuda.so.1", "libcuda.so"]);
}

#[test]
fn a_library_named_by_the_variable_is_the_only_one_tried() {
    suite::alone_in_child!(
        a_library_named_by_the_variable_is_the_only_one_tried,
        &[("CUDA_SYS_LIBCUDA", "/nonexistent/libcuda-custom.so")]
    );
    assert_eq!(default_library_names(), ["/nonexistent/libcuda-custom.so"]);
}

/// A new folder holding `libcuda.so.1`, a link to the software driver: on `LD_LIBRARY_PATH`, it
/// makes the platform loader's search for the default name succeed.
fn folder_with_libcuda_so_1(test: &str) -> std::path::PathBuf {
    let folder = std::env::temp_dir().join(format!("{test}-{}", std::process::id()));
    std::fs::create_dir_all(&folder).expect("the temporary folder is created");
    let link = folder.join("libcuda.so.1");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(cuda_host_testing::library_path(), &link)
        .expect("the link is created");
    folder
}

#[test]
fn a_library_named_by_the_variable_that_does_not_open_is_an_error_not_a_fallback() {
    const TEST: &str =
        "a_library_named_by_the_variable_that_does_not_open_is_an_error_not_a_fallback";
    if !suite::in_child_process() {
        let folder = folder_with_libcuda_so_1(TEST);
        let mut search_path = folder.display().to_string();
        if let Some(inherited) = std::env::var_os("LD_LIBRARY_PATH") {
            search_path = format!("{search_path}:{}", inherited.to_string_lossy());
        }
        suite::run_in_child(
            module_path!(),
            TEST,
            &[
                ("CUDA_SYS_LIBCUDA", "/nonexistent/libcuda-custom.so"),
                ("LD_LIBRARY_PATH", &search_path),
            ],
        );
        let _ = std::fs::remove_dir_all(folder);
        return;
    }
    // A `libcuda.so.1` is there to fall back to...
    // SAFETY: on this child's search path, `libcuda.so.1` is the software driver, which
    // implements the driver API's names with their C signatures.
    let fallback = unsafe { Driver::open("libcuda.so.1") };
    assert!(fallback.is_ok(), "the fallback does not load: {fallback:?}");
    // ...and the process-wide driver does not take it.
    let error = cuda_host_sys::driver().expect_err("the named library does not open");
    let LoadError::ConfiguredLibraryNotFound {
        variable,
        library,
        message,
    } = error
    else {
        panic!("expected ConfiguredLibraryNotFound, got {error:?}");
    };
    assert_eq!(*variable, "CUDA_SYS_LIBCUDA");
    assert_eq!(library, "/nonexistent/libcuda-custom.so");
    assert!(
        message.contains("No such file"),
        "the loader's reason is missing: {message}"
    );
    let text = error.to_string();
    assert!(
        text.contains("CUDA_SYS_LIBCUDA") && text.contains("/nonexistent/libcuda-custom.so"),
        "{text}"
    );
    assert_eq!(error.result(), CUresult::CUDA_ERROR_NOT_FOUND);
}

#[test]
fn a_stub_library_is_reported_as_a_stub() {
    let stub = cuda_host_testing::variant_path(cuda_host_testing::Variant::Stub);
    // SAFETY: the stub variant exports the driver API's names with their C signatures.
    let error = unsafe { Driver::open(&stub) }.unwrap_err();
    assert!(
        matches!(&error, LoadError::StubLibrary { library } if library.contains("libcudasw-stub")),
        "{error:?}"
    );
    assert!(error.to_string().contains("stub"));
    assert_eq!(error.result(), CUresult::CUDA_ERROR_STUB_LIBRARY);
}

#[test]
fn the_cuda_toolkits_own_stub_library_is_reported_as_a_stub() {
    let toolkit_stub = std::path::Path::new("/usr/local/cuda/lib64/stubs/libcuda.so");
    if !toolkit_stub.exists() {
        return suite::skip(
            "the_cuda_toolkits_own_stub_library_is_reported_as_a_stub",
            "no CUDA toolkit at /usr/local/cuda",
        );
    }
    // SAFETY: NVIDIA's stub exports the driver API's names with their C signatures.
    let error = unsafe { Driver::open(toolkit_stub) }.unwrap_err();
    assert!(matches!(error, LoadError::StubLibrary { .. }), "{error:?}");
}

#[test]
fn a_library_without_the_driver_api_is_not_taken_for_a_driver() {
    // SAFETY: libm exports no driver API name, so it is refused before any call, and the C
    // library's own initialisation has already run in this process.
    let error = unsafe { Driver::open("libm.so.6") }.unwrap_err();
    assert_eq!(
        error,
        LoadError::MissingBootstrap {
            library: "libm.so.6".to_owned(),
            symbol: "cuDriverGetVersion",
        }
    );
}

#[test]
fn an_entry_point_the_driver_lacks_answers_not_found_and_a_typed_error() {
    if test_driver().kind == DriverKind::Software {
        // The software driver exports every entry point of its headers: reporting CUDA 13.0, it
        // lacks the newer ones, as the real 13.0 driver does.
        suite::alone_in_child!(
            an_entry_point_the_driver_lacks_answers_not_found_and_a_typed_error,
            &[("CUSW_DRIVER_VERSION", "13000")]
        );
    }
    let driver = &test_driver().driver;
    // An entry point newer than a 13.0 driver.
    let (symbol, expected): (&'static str, _) = if driver.version() < 13010 {
        (
            "cuLaunchHostFunc_v2",
            Availability::NeedsNewerDriver { required: 13010 },
        )
    } else {
        return suite::skip(
            "an_entry_point_the_driver_lacks_answers_not_found_and_a_typed_error",
            "the driver is 13.1 or newer: no entry point known to be missing",
        );
    };
    assert_eq!(driver.availability(symbol), Some(expected));
    // SAFETY: the entry point is unavailable, so nothing reaches a driver.
    let result =
        unsafe { driver.cuLaunchHostFunc_v2(std::ptr::null_mut(), None, std::ptr::null_mut(), 0) };
    assert_eq!(result, CUresult::CUDA_ERROR_NOT_FOUND);
    let error = driver.check(symbol, result).unwrap_err();
    assert_eq!(
        error,
        Error::EntryPointUnavailable {
            entry_point: symbol,
            driver_version: driver.version(),
            availability: expected,
        }
    );
    assert!(error.to_string().contains(symbol));
}

/// `true` (and a skip note) on the real driver, whose reported version cannot be changed. Asked in
/// the parent process only: its child's driver may be too old to load as the test driver.
fn skip_unless_software(test: &str) -> bool {
    let real = !suite::in_child_process() && test_driver().kind != DriverKind::Software;
    if real {
        suite::skip(
            test,
            "changing the reported version needs the software driver",
        );
    }
    real
}

#[test]
fn an_older_driver_hides_entry_points_newer_than_itself() {
    if skip_unless_software("an_older_driver_hides_entry_points_newer_than_itself") {
        return;
    }
    suite::alone_in_child!(
        an_older_driver_hides_entry_points_newer_than_itself,
        &[("CUSW_DRIVER_VERSION", "12080")]
    );
    // SAFETY: the software driver implements the driver API's names with their C signatures.
    let driver = unsafe { Driver::open(cuda_host_testing::library_path()) }.expect("loads");
    assert_eq!(driver.version(), 12080);
    assert_eq!(
        driver.availability("cuLaunchHostFunc_v2"),
        Some(Availability::NeedsNewerDriver { required: 13010 })
    );
    assert_eq!(
        driver.availability("cuStreamGetCaptureInfo_v3"),
        Some(Availability::Available)
    );
    assert!(driver.functions().cuLaunchHostFunc_v2.is_none());
    assert!(driver.functions().cuLaunchHostFunc.is_some());
    let error = driver
        .check("cuLaunchHostFunc_v2", CUresult::CUDA_ERROR_NOT_FOUND)
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "cuLaunchHostFunc_v2 is unavailable in the loaded CUDA 12.8 driver: needs a CUDA 13.1 driver"
    );
}

#[test]
fn a_driver_older_than_the_minimum_is_refused() {
    if skip_unless_software("a_driver_older_than_the_minimum_is_refused") {
        return;
    }
    suite::alone_in_child!(
        a_driver_older_than_the_minimum_is_refused,
        &[("CUSW_DRIVER_VERSION", "9020")]
    );
    // SAFETY: the software driver implements the driver API's names with their C signatures.
    let error = unsafe { Driver::open(cuda_host_testing::library_path()) }.unwrap_err();
    assert!(
        matches!(
            error,
            LoadError::DriverTooOld {
                found: 9020,
                required: 10000,
                ..
            }
        ),
        "{error:?}"
    );
}

#[test]
fn without_cu_get_proc_address_entries_are_found_by_symbol_name() {
    // SAFETY: the variant without `cuGetProcAddress` still exports the driver API's names with
    // their C signatures.
    let driver = unsafe {
        Driver::open(cuda_host_testing::variant_path(
            cuda_host_testing::Variant::NoProcAddress,
        ))
    }
    .expect("loads");
    assert_eq!(
        driver.availability("cuLaunchHostFunc"),
        Some(Availability::Available)
    );
    assert_eq!(
        driver.availability("cuGetProcAddress_v2"),
        Some(Availability::NotInDriver)
    );
    let wrong = mismatches(&driver, false);
    assert!(wrong.is_empty(), "{wrong:#x?}");
}

#[test]
fn free_functions_call_the_process_wide_driver() {
    let driver = &test_driver().driver;
    let mut version = 0;
    // SAFETY: `version` is a valid out-pointer.
    let result = unsafe { cuda_host_sys::cuDriverGetVersion(&mut version) };
    assert_eq!(result, CUresult::CUDA_SUCCESS);
    assert_eq!(version, driver.version());
    let process_driver = cuda_host_sys::driver().expect("loaded by the harness");
    assert!(std::sync::Arc::ptr_eq(process_driver, driver));
}

#[test]
fn error_descriptions_come_from_the_driver_and_names_from_the_header() {
    let driver = &test_driver().driver;
    assert_eq!(
        driver.error_description(CUresult::CUDA_ERROR_INVALID_VALUE),
        "invalid argument"
    );
    let error = driver
        .check("cuStreamSynchronize", CUresult::CUDA_ERROR_INVALID_HANDLE)
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "cuStreamSynchronize failed: CUDA_ERROR_INVALID_HANDLE (400): invalid resource handle"
    );
    assert_eq!(error.result(), CUresult::CUDA_ERROR_INVALID_HANDLE);
}

#[test]
fn the_pointer_macros_have_their_header_values() {
    assert_eq!(cuda_host_sys::CU_STREAM_LEGACY.addr(), 1);
    assert_eq!(cuda_host_sys::CU_STREAM_PER_THREAD.addr(), 2);
    assert_eq!(cuda_host_sys::CU_LAUNCH_PARAM_END.addr(), 0);
    assert_eq!(cuda_host_sys::CU_LAUNCH_PARAM_BUFFER_POINTER.addr(), 1);
    assert_eq!(cuda_host_sys::CU_LAUNCH_PARAM_BUFFER_SIZE.addr(), 2);
    assert_eq!(cuda_host_sys::CU_DEVICE_CPU, -1);
}

#[test]
fn a_driver_another_library_opened_is_reused_through_its_proc_address() {
    let opened = &test_driver().driver;
    // Another library's handle on the same driver library (the platform loader hands back the
    // one already open).
    // SAFETY: the test driver's own library, already loaded and initialised in this process.
    let library = unsafe { libloading::Library::new(opened.library_name()) }.expect("opens");
    type GetProcAddress = unsafe extern "C" fn(
        *const std::ffi::c_char,
        *mut *mut std::ffi::c_void,
        std::ffi::c_int,
        u64,
        *mut std::ffi::c_int,
    ) -> CUresult;
    // SAFETY: the driver exports `cuGetProcAddress_v2` with this C signature.
    let get_proc_address = *unsafe { library.get::<GetProcAddress>(c"cuGetProcAddress_v2") }
        .expect("the driver has cuGetProcAddress_v2");
    // SAFETY: the driver's own resolver; `library` stays loaded until the end of the test, and
    // the test driver keeps the library loaded for the process anyway.
    let reused = unsafe {
        Driver::from_get_proc_address(get_proc_address, opened.per_thread_default_stream())
    }
    .expect("the table is resolved through the driver's resolver");
    assert_eq!(reused.version(), opened.version());
    // Both tables reach the same functions.
    assert!(mismatches_between(opened, &reused).is_empty());
    // SAFETY: no pointer arguments.
    assert_eq!(unsafe { reused.cuInit(0) }, CUresult::CUDA_SUCCESS);
    let mut count = 0;
    // SAFETY: a valid out-pointer.
    let counted = unsafe { reused.cuDeviceGetCount(&mut count) };
    assert_eq!(counted, CUresult::CUDA_SUCCESS);
    assert!(count >= 1);
    drop(library);
}

/// Entry points two tables resolved differently: (name, first's address, second's).
fn mismatches_between(first: &Driver, second: &Driver) -> Vec<(String, usize, usize)> {
    first
        .entry_points()
        .zip(second.entry_points())
        .filter(|((_, _, a), (_, _, b))| a != b)
        .map(|((entry, _, a), (_, _, b))| (entry.name().to_owned(), a.addr(), b.addr()))
        .collect()
}

/// `CUDA_TEST_DRIVER` with an unknown value: the binary's tests do not each panic with the
/// same message; the binary says once what is wrong, naming the allowed values, and stops.
#[test]
fn an_unknown_driver_choice_stops_the_binary_with_one_error_naming_the_values() {
    const TEST: &str = "an_unknown_driver_choice_stops_the_binary_with_one_error_naming_the_values";
    let run = suite::child::rerun_this_binary(
        &["--skip", TEST],
        &[("CUDA_TEST_DRIVER", "bogus")],
        suite::TIMEOUT,
    );
    let message = "[cuda-host tests] no driver: CUDA_TEST_DRIVER=bogus is not one of auto, real, \
                   software (unset or empty: auto)";
    assert_eq!(
        run.status.and_then(|status| status.code()),
        Some(2),
        "{}",
        run.output()
    );
    assert_eq!(run.stderr.matches(message).count(), 1, "{}", run.output());
    assert!(!run.stderr.contains("panicked"), "{}", run.output());
}

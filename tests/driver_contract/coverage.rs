//! The double is no larger than this contract: every function it models is called by one of the
//! contract's tests, so each does what a test says it does; every other function it exports is
//! called by one test, which checks that it answers `CUDA_ERROR_NOT_SUPPORTED` and is counted.

use cuda_host_sys::{CUdriverProcAddress_flags, CUdriverProcAddressQueryResult, CUresult};
use std::collections::BTreeMap;
use std::ffi::{CString, c_void};
use std::path::Path;
use suite::child::rerun_this_binary;
use suite::{TIMEOUT, test_driver};

const TEST: &str = "every_exported_function_of_the_double_is_called_by_a_contract_test";

/// The calls of each exported function that the processes of a run wrote into `folder` (one
/// `calls-PID` file each, a line per function: its name and its calls), summed.
fn calls_logged_in(folder: &Path) -> BTreeMap<String, u64> {
    let mut calls = BTreeMap::new();
    for file in std::fs::read_dir(folder).expect("the call log folder") {
        let text = std::fs::read_to_string(file.expect("a log file").path()).expect("a log");
        for line in text.lines() {
            let (name, count) = line.split_once(' ').expect("a name and a count");
            *calls.entry(name.to_owned()).or_default() += count.parse::<u64>().expect("a count");
        }
    }
    calls
}

/// Runs this binary's other tests again, in a process whose software driver (and those of the
/// processes its tests start) writes its call counts at exit (`CUSW_CALL_LOG`), and checks that
/// every function the double exports was called.
#[test]
fn every_exported_function_of_the_double_is_called_by_a_contract_test() {
    if !test_driver().is_software() {
        return suite::skip(TEST, "the call log is the software driver's");
    }
    let folder = std::env::temp_dir().join(format!("driver-contract-calls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&folder);
    std::fs::create_dir_all(&folder).expect("the call log folder is created");
    let skip_this = format!("coverage::{TEST}");
    let log = folder.to_str().expect("a UTF-8 temporary folder");
    let run = rerun_this_binary(
        &["--skip", &skip_this],
        // On a legacy table: its tests reach the per-thread forms through a per-thread table
        // of their own, so that every form is called.
        &[
            ("CUSW_CALL_LOG", log),
            ("CUDA_TEST_DRIVER", "software"),
            ("CUDA_SYS_PER_THREAD_DEFAULT_STREAM", "0"),
        ],
        TIMEOUT * 10,
    );
    assert!(
        run.status.is_some_and(|status| status.success()),
        "the contract's other tests did not pass ({:?})\n{}",
        run.status,
        run.output()
    );
    let calls = calls_logged_in(&folder);
    let _ = std::fs::remove_dir_all(&folder);
    assert!(
        calls.contains_key("cuLaunchHostFunc") && calls.contains_key("cuswCallCount"),
        "the log names the double's entry points and controls: {calls:?}"
    );
    let never: Vec<&str> = calls
        .iter()
        .filter(|&(_, &count)| count == 0)
        .map(|(name, _)| name.as_str())
        .collect();
    assert!(
        never.is_empty(),
        "the double exports functions no contract test calls: {never:?}; test them or remove them"
    );
}

/// Every function the double exports without modelling it is found by `cuGetProcAddress_v2` at
/// its base name and ABI version (its per-thread form with the per-thread flag), as the exported
/// function itself, and answers `CUDA_ERROR_NOT_SUPPORTED`; each call is counted, and each is
/// named once in the double's log.
#[test]
fn every_entry_point_the_double_does_not_model_answers_not_supported_through_get_proc_address() {
    const TEST: &str = "every_entry_point_the_double_does_not_model_answers_not_supported_through_get_proc_address";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            TEST,
            "calls every function the double leaves unmodelled, without arguments, which no \
             function of the real driver may be called with",
        );
    };
    // A process of its own: the count is process-wide, and its log goes to a file of its own.
    let log = std::env::temp_dir().join(format!("driver-contract-log-{}", std::process::id()));
    if !suite::in_child_process() {
        let _ = std::fs::remove_file(&log);
        let path = log.to_str().expect("a UTF-8 temporary folder");
        suite::run_in_child(module_path!(), TEST, &[("CUSW_LOG", path)]);
        let _ = std::fs::remove_file(&log);
        return;
    }
    let log = std::env::var_os("CUSW_LOG").expect("the parent names the log");
    let driver = &test_driver().driver;
    let before = controls.inner().unmodelled_calls().expect("a count");
    let mut called = Vec::new();
    for entry in cuda_host_testing::UNMODELLED_ENTRY_POINTS {
        let forms = [(entry.exported, false)]
            .into_iter()
            .chain(entry.per_thread.map(|form| (form, true)));
        for (exported, per_thread) in forms {
            let base = CString::new(entry.base).expect("no NUL");
            let (flags, version) = if per_thread {
                (
                    CUdriverProcAddress_flags::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.0,
                    entry.abi_version.max(7000),
                )
            } else {
                (0, entry.abi_version)
            };
            let mut function = std::ptr::null_mut();
            let mut status = CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
            // SAFETY: valid pointers; the version is at most the driver's.
            let result = unsafe {
                driver.cuGetProcAddress_v2(
                    base.as_ptr(),
                    &mut function,
                    i32::try_from(version).expect("a version"),
                    u64::from(flags),
                    &mut status,
                )
            };
            assert_eq!(result, CUresult::CUDA_SUCCESS, "{exported}");
            assert_eq!(
                status,
                CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SUCCESS,
                "{exported}"
            );
            let symbol = CString::new(exported).expect("no NUL");
            // SAFETY: the symbol's address, looked up by the platform loader, is only compared.
            let exported_address = unsafe { exported_address(driver, &symbol) };
            assert_eq!(function, exported_address, "{exported} is another function");
            // SAFETY: a function the double does not model is defined without parameters
            // (api/unmodelled.c), so this is its own type.
            let call: unsafe extern "C" fn() -> CUresult = unsafe { std::mem::transmute(function) };
            // SAFETY: as above; it reads nothing.
            let answer = unsafe { call() };
            assert_eq!(answer, CUresult::CUDA_ERROR_NOT_SUPPORTED, "{exported}");
            called.push(exported);
        }
    }
    let calls = u64::try_from(called.len()).expect("a count");
    assert_eq!(controls.inner().unmodelled_calls(), Ok(before + calls));
    let logged = std::fs::read_to_string(log).expect("the double's log");
    for exported in called {
        let line = format!(" {exported} is not modelled");
        assert_eq!(
            logged.lines().filter(|l| l.contains(&line)).count(),
            1,
            "{exported} is not named once in the log"
        );
    }
}

/// The address the platform loader finds for `symbol` in the driver's library.
///
/// # Safety
/// The library's initialisation code must be sound to run again (it is loaded already).
unsafe fn exported_address(driver: &cuda_host_sys::Driver, symbol: &CString) -> *mut c_void {
    // SAFETY: the library is loaded already; opening it again takes another reference.
    let library = unsafe { libloading::Library::new(driver.library_name()) }.expect("opens");
    // SAFETY: only the address is read.
    let address = unsafe { library.get::<*mut c_void>(symbol.as_bytes_with_nul()) };
    *address.expect("exported")
}

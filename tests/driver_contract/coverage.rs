//! The double is no larger than this contract: every function it exports is called by one of
//! the contract's tests, so each does what a test says it does.

use std::collections::BTreeMap;
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

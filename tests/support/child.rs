//! Running one test in a child process.
//!
//! Some behaviour poisons the whole process: a sticky context error stays with the process on the
//! real driver, and the software driver's reported version is process-wide. Such a test re-runs
//! itself in a child process of the same test binary and checks the child passed:
//!
//! ```ignore
//! #[test]
//! fn sticky_error_leaks_nothing() {
//!     suite::alone_in_child!(sticky_error_leaks_nothing);
//!     // the test itself
//! }
//! ```

use crate::wait::TIMEOUT;
use std::io::Write as _;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Unless this is the child process it started, re-runs the calling test in a child process of
/// its own and returns from the test with that child's outcome (see [`run_in_child`]); in the
/// child, the test goes on. `$test` is the calling test function's name, checked to name a
/// function; `$env`, when given, the child's extra environment (`&[(name, value)]`).
#[macro_export]
macro_rules! alone_in_child {
    ($test:ident) => {
        $crate::alone_in_child!($test, &[])
    };
    ($test:ident, $env:expr) => {
        let _: fn() = $test;
        if !$crate::in_child_process() {
            return $crate::run_in_child(module_path!(), stringify!($test), $env);
        }
    };
}

/// For a test of a library that opens libcuda by name (cudarc): whether `test` of `module` (pass
/// `module_path!()`) runs in this process. `false` when it ran in a child process instead, with
/// `env` added: always on the software driver, there with `LD_LIBRARY_PATH` leading the library
/// to the software driver this binary loaded ([`cuda_host_testing::LibcudaDir`]); on the real
/// driver too when `always_in_child`.
///
/// # Panics
/// When the child fails, or the links to the software driver cannot be made.
#[track_caller]
pub fn runs_here_with_libcuda(
    module: &str,
    test: &str,
    always_in_child: bool,
    env: &[(&str, &str)],
) -> bool {
    if in_child_process() {
        return true;
    }
    let software = crate::test_driver().is_software();
    if !software && !always_in_child {
        return true;
    }
    let libcuda = cuda_host_testing::LibcudaDir::new().unwrap_or_else(|e| panic!("{e}"));
    let library_path = libcuda.ld_library_path();
    let library_path = library_path.to_str().expect("a UTF-8 library path");
    let mut child_env = vec![(
        "CUDA_TEST_DRIVER",
        if software { "software" } else { "real" },
    )];
    if software {
        child_env.push(("LD_LIBRARY_PATH", library_path));
    }
    child_env.extend_from_slice(env);
    run_in_child(module, test, &child_env);
    false
}

const CHILD_VARIABLE: &str = "CUDA_HOST_SUITE_CHILD";

/// Whether this process is a child started by [`run_in_child`].
pub fn in_child_process() -> bool {
    std::env::var_os(CHILD_VARIABLE).is_some()
}

/// Runs the test `name` of `module` (pass `module_path!()`) in a child process of this test
/// binary with the extra environment `env`, and panics unless it passed within twice [`TIMEOUT`].
///
/// # Panics
/// When the child fails, times out or cannot be started; the panic carries its output.
#[track_caller]
pub fn run_in_child(module: &str, name: &str, env: &[(&str, &str)]) {
    // A driver that cannot be chosen stops this binary here, with its one error, rather than
    // failing each child with it.
    crate::test_driver();
    // `module_path!()` starts with the test crate's name, which test filters do not include.
    let path = match module.split_once("::") {
        Some((_, inner)) => format!("{inner}::{name}"),
        None => name.to_owned(),
    };
    let env: Vec<(&str, &str)> = [(CHILD_VARIABLE, "1")]
        .into_iter()
        .chain(env.iter().copied())
        .collect();
    let limit = TIMEOUT * 2;
    let run = rerun_this_binary(
        &[path.as_str(), "--exact", "--nocapture", "--test-threads=1"],
        &env,
        limit,
    );
    let output = run.output();
    match run.status {
        None => panic!("{path} did not finish within {limit:?} in a child\n{output}"),
        Some(status) if !status.success() => {
            panic!("{path} failed in a child process ({status})\n{output}")
        }
        Some(_) => {
            assert!(
                run.stdout.contains("1 passed"),
                "the child ran no test named {path}\n{output}"
            );
            // The child's skips and figures, which its own output capture would hide.
            let mut parent = std::io::stderr().lock();
            for line in run.stderr.lines().filter(|line| {
                line.starts_with("[cuda-host stress]")
                    || line.starts_with("[cuda-host figures]")
                    || line.starts_with("[cuda-host tests] skipped")
            }) {
                let _ = writeln!(parent, "{line}");
            }
        }
    }
}

/// Prints a measured figure to stderr, around the test harness's output capture; a child
/// process's figures are forwarded by [`run_in_child`].
pub fn figure(text: &str) {
    let _ = writeln!(std::io::stderr(), "[cuda-host figures] {text}");
}

/// How a run of this test binary in another process ended.
#[derive(Debug)]
pub struct Run {
    /// Its exit status; `None` when it did not finish in time and was killed.
    pub status: Option<ExitStatus>,
    /// What it wrote to stdout.
    pub stdout: String,
    /// What it wrote to stderr.
    pub stderr: String,
}

impl Run {
    /// Both outputs, labelled, for a failure message.
    pub fn output(&self) -> String {
        format!(
            "--- child stdout ---\n{}\n--- child stderr ---\n{}",
            self.stdout, self.stderr
        )
    }
}

/// Runs this test binary again, in a new process, with the arguments `args` (test filters and
/// options) and the extra environment `env`, its output captured; kills it after `limit`.
///
/// # Panics
/// When the process cannot be started.
pub fn rerun_this_binary(args: &[&str], env: &[(&str, &str)], limit: Duration) -> Run {
    let executable = std::env::current_exe().expect("the test binary's path");
    let mut child = Command::new(&executable)
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {} {args:?}: {e}", executable.display()));
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let readers = [
        std::thread::spawn(move || read_all(&mut stdout)),
        std::thread::spawn(move || read_all(&mut stderr)),
    ];
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the child") {
            break Some(status);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let [stdout, stderr] = readers.map(|reader| reader.join().unwrap_or_default());
    Run {
        status,
        stdout,
        stderr,
    }
}

fn read_all(source: &mut impl std::io::Read) -> String {
    let mut bytes = Vec::new();
    let _ = source.read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

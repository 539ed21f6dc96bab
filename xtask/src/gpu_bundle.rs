//! `cargo xtask gpu-bundle DIR`: everything needed to run the suite on a GPU machine that has the
//! NVIDIA driver but no Rust toolchain.
//!
//! DIR gets `tests/` (every test binary of the workspace, stripped), `examples/` (the release
//! examples), `benches/` (the benchmarks), `lib/` (the software driver libraries and the stand-ins
//! of cudarc's test kernels, for the tests that use them, and the NVTX recorder of the tests and
//! the benchmark of the `nvtx` and `tracing` features, which are built with those features on
//! besides the rest) and
//! `run-tests.sh`, which runs every test binary with `CUDA_TEST_DRIVER=real` unless told
//! otherwise and passes its arguments on (e.g. `--test-threads=4`).

use crate::{cargo, json_string};
use std::path::{Path, PathBuf};
use std::process::Command;

const RUNNER: &str = r#"#!/bin/sh
# Runs every test binary of the bundle. CUDA_TEST_DRIVER defaults to `real`; arguments go to
# each test binary; each binary gets TEST_BINARY_TIMEOUT seconds (default 300). Exit status: 0
# when every binary passed.
here=$(cd "$(dirname "$0")" && pwd)
export CUDA_SOFTWARE_DRIVER_DIR="$here/lib"
export NVTX_RECORDER_LIBRARY="$here/lib/libnvtx_recorder.so"
export CUDARC_STAND_INS_LIBRARY="$here/lib/libcudarc_stand_ins.so"
export CUDA_TEST_DRIVER="${CUDA_TEST_DRIVER:-real}"
status=0
for test in "$here"/tests/*; do
    echo "=== $(basename "$test") (CUDA_TEST_DRIVER=$CUDA_TEST_DRIVER)"
    timeout "${TEST_BINARY_TIMEOUT:-300}" "$test" "$@" || status=1
done
exit $status
"#;

/// Test binaries that check the repository's files (`git ls-files`, `cargo package`, the sources
/// and docs/RELIABILITY.md's matrix), not a driver: the GPU machine has neither the repository nor
/// cargo, and a binary that fails there for want of them would hide real failures.
const REPOSITORY_CHECKS: [&str; 4] = [".adversity_matrix", ".citations", ".figures", ".packages"];

pub(crate) fn run(root: &Path, dir: &Path) -> Result<(), String> {
    // Not xtask's own tests: they need cargo, which the GPU machine lacks.
    let mut tests = built_binaries(
        root,
        &["test", "--workspace", "--exclude", "xtask", "--no-run"],
        None,
    )?;
    let observing = ["-p", "cuda-host-suite", "--features", "nvtx,tracing"];
    tests.extend(built_binaries(
        root,
        &[
            &[
                "test",
                "--no-run",
                "--test",
                "nvtx",
                "--test",
                "tracing_spans",
            ],
            &observing[..],
        ]
        .concat(),
        None,
    )?);
    let mut benches = built_binaries(root, &["bench", "--workspace", "--no-run"], Some("bench"))?;
    benches.extend(built_binaries(
        root,
        &[&["bench", "--no-run", "--bench", "observe"], &observing[..]].concat(),
        Some("bench"),
    )?);
    crate::run(
        Command::new(cargo())
            .current_dir(root)
            .args(["build", "--release", "--examples"]),
    )?;
    for sub in ["tests", "examples", "benches", "lib"] {
        let path = dir.join(sub);
        if path.exists() {
            std::fs::remove_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        std::fs::create_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    for (name, executable) in &tests {
        if REPOSITORY_CHECKS.iter().any(|check| name.ends_with(check)) {
            continue;
        }
        copy_stripped(executable, &dir.join("tests").join(name))?;
    }
    for (name, executable) in &benches {
        copy_stripped(executable, &dir.join("benches").join(name))?;
    }
    let examples = crate::target_dir(root)?.join("release/examples");
    for entry in read_dir(&root.join("examples"))? {
        let Some(name) = entry.file_stem().and_then(|n| n.to_str()) else {
            continue;
        };
        if entry.extension().is_some_and(|ext| ext == "rs") {
            copy_stripped(&examples.join(name), &dir.join("examples").join(name))?;
        }
    }
    let libraries = software_driver_dir(&tests)?;
    for library in read_dir(&libraries)? {
        let is_driver = library
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("libcudasw") && n.ends_with(".so"));
        if is_driver {
            let target = dir
                .join("lib")
                .join(library.file_name().expect("a file name"));
            std::fs::copy(&library, &target).map_err(|e| format!("{}: {e}", target.display()))?;
        }
    }
    for library in ["libnvtx_recorder.so", "libcudarc_stand_ins.so"] {
        let built = suite_library(&tests, library)?;
        let target = dir.join("lib").join(library);
        std::fs::copy(&built, &target).map_err(|e| format!("{}: {e}", target.display()))?;
    }
    let runner = dir.join("run-tests.sh");
    std::fs::write(&runner, RUNNER).map_err(|e| format!("{}: {e}", runner.display()))?;
    make_executable(&runner)?;
    println!(
        "gathered {} test binaries, the examples and the software driver in {}; run {}",
        tests.len(),
        dir.display(),
        runner.display()
    );
    Ok(())
}

/// Runs `cargo <arguments> --message-format=json` and returns every test-profile executable it
/// built (of targets of `kind` only, when given), each with a readable name.
fn built_binaries(
    root: &Path,
    arguments: &[&str],
    kind: Option<&str>,
) -> Result<Vec<(String, PathBuf)>, String> {
    let output = Command::new(cargo())
        .current_dir(root)
        .args(arguments)
        .arg("--message-format=json")
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo {} failed:\n{}",
            arguments.join(" "),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let mut binaries = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        // Cargo's JSON messages: a test artifact names its executable and its target.
        if !line.contains(r#""reason":"compiler-artifact""#) || !line.contains(r#""test":true"#) {
            continue;
        }
        if kind.is_some_and(|kind| !line.contains(&format!(r#""kind":["{kind}"]"#))) {
            continue;
        }
        let (Some(executable), Some(target)) =
            (json_string(line, "executable"), json_string(line, "name"))
        else {
            continue;
        };
        let package = json_string(line, "package_id")
            .and_then(|id| package_name(&id))
            .unwrap_or_default();
        binaries.push((format!("{package}.{target}"), PathBuf::from(executable)));
    }
    if binaries.is_empty() {
        return Err(format!("cargo {} built no binaries", arguments.join(" ")));
    }
    Ok(binaries)
}

/// The package name in a package id: `path+file:///w/cuda-sys#cuda-host-sys@0.1.0` (name
/// differs from the folder) or `path+file:///w/cuda-host#0.1.0` (name is the folder's).
fn package_name(id: &str) -> Option<String> {
    let (url, fragment) = id.rsplit_once('#')?;
    let name = match fragment.split_once('@') {
        Some((name, _version)) => name,
        None => url.rsplit('/').next()?,
    };
    Some(name.to_owned())
}

/// The software driver's build folder, from the path baked into a test binary's build.
fn software_driver_dir(tests: &[(String, PathBuf)]) -> Result<PathBuf, String> {
    let (_, any_test) = tests.first().ok_or("no test binaries")?;
    let target_profile = any_test
        .parent()
        .and_then(Path::parent)
        .ok_or("unexpected test binary location")?;
    let build = target_profile.join("build");
    read_dir(&build)?
        .into_iter()
        .filter(|dir| {
            dir.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("cuda-host-testing-"))
        })
        .map(|dir| dir.join("out"))
        .find(|out| out.join("libcudasw.so").is_file())
        .ok_or_else(|| format!("no built software driver under {}", build.display()))
}

/// A library the suite's build script made (the NVTX recorder of the `nvtx` feature, the stand-ins
/// of cudarc's test kernels): the newest, should several builds have made one.
fn suite_library(tests: &[(String, PathBuf)], library: &str) -> Result<PathBuf, String> {
    let (_, any_test) = tests.first().ok_or("no test binaries")?;
    let build = any_test
        .parent()
        .and_then(Path::parent)
        .ok_or("unexpected test binary location")?
        .join("build");
    read_dir(&build)?
        .into_iter()
        .filter(|dir| {
            dir.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("cuda-host-suite-"))
        })
        .map(|dir| dir.join("out").join(library))
        .filter(|built| built.is_file())
        .max_by_key(|built| built.metadata().and_then(|m| m.modified()).ok())
        .ok_or_else(|| format!("no built {library} under {}", build.display()))
}

fn read_dir(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .collect();
    entries.sort();
    Ok(entries)
}

fn copy_stripped(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::copy(from, to).map_err(|e| format!("{} -> {}: {e}", from.display(), to.display()))?;
    // Debug information is most of a test binary's size; without it the bundle travels lighter.
    // Where `strip` is missing the binary is kept whole.
    if let Err(error) = crate::run(Command::new("strip").arg("--strip-debug").arg(to)) {
        eprintln!("xtask: keeping {} unstripped: {error}", to.display());
    }
    make_executable(to)
}

#[cfg(unix)]
fn make_executable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(not(unix))]
fn make_executable(_path: &Path) -> Result<(), String> {
    Ok(())
}

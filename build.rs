//! Builds the C part of the suite: `benches/floor.c`, the benchmark's floor (`cuLaunchHostFunc`
//! called from C), a static library the benchmark links; `tests/support/cudarc_stand_ins.c`, a
//! library of stand-ins for cudarc's test kernels the software driver loads through
//! `CUSW_STAND_INS` (its path in `CUDARC_STAND_INS_LIBRARY` at compile time); and with the `nvtx`
//! feature `tests/support/nvtx_recorder.c`, an NVTX injection library `tests/nvtx.rs` attaches
//! through `NVTX_INJECTION64_PATH` (its path in `NVTX_RECORDER_LIBRARY` at compile time).
//!
//! The software driver the tests load is cuda-host-testing's, built by its own build script.
//! Under a sanitizer its C code is instrumented but leaves the runtime to the executables that
//! load it: the suite's executables export the runtime rustc links into them, whose symbols that
//! build script names (`DEP_CUDASW_SANITIZER_RUNTIME_SYMBOLS`).

use std::env;
use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=benches/floor.c");
    // Linked by the benchmark alone (`#[link]` there): only the search path is announced.
    cc::Build::new()
        .file("benches/floor.c")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .cargo_metadata(false)
        .compile("hostfn_floor");
    let out_dir = env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    println!("cargo:rustc-link-search=native={out_dir}");

    if env::var_os("CARGO_FEATURE_NVTX").is_some() {
        build_nvtx_recorder(Path::new(&out_dir));
    }
    build_cudarc_stand_ins(Path::new(&out_dir));

    println!("cargo:rerun-if-env-changed=DEP_CUDASW_SANITIZER_RUNTIME_SYMBOLS");
    if let Ok(symbols) = env::var("DEP_CUDASW_SANITIZER_RUNTIME_SYMBOLS") {
        println!("cargo:rustc-link-arg=-Wl,--export-dynamic-symbol={symbols}");
    }
}

/// Compiles the NVTX recorder into `libnvtx_recorder.so` in `out_dir` (not instrumented by a
/// sanitizer: it only records), announcing its path.
fn build_nvtx_recorder(out_dir: &Path) {
    let library = build_shared_library(
        out_dir,
        "tests/support/nvtx_recorder.c",
        "nvtx_recorder",
        &[],
    );
    println!(
        "cargo:rustc-env=NVTX_RECORDER_LIBRARY={}",
        library.display()
    );
}

/// Compiles the stand-ins of cudarc's test kernels into `libcudarc_stand_ins.so` in `out_dir` (not
/// instrumented by a sanitizer, as a user's library would not be), announcing its path.
fn build_cudarc_stand_ins(out_dir: &Path) {
    const STAND_IN_HEADER: &str = "cuda-host-testing/driver/stand_in.h";
    println!("cargo:rerun-if-changed={STAND_IN_HEADER}");
    let library = build_shared_library(
        out_dir,
        "tests/support/cudarc_stand_ins.c",
        "cudarc_stand_ins",
        &["cuda-host-testing/driver"],
    );
    println!(
        "cargo:rustc-env=CUDARC_STAND_INS_LIBRARY={}",
        library.display()
    );
}

/// Compiles `source` into `lib{name}.so` in `out_dir`, with `includes`, without any sanitizer's
/// instrumentation; answers its path.
fn build_shared_library(
    out_dir: &Path,
    source: &str,
    name: &str,
    includes: &[&str],
) -> std::path::PathBuf {
    println!("cargo:rerun-if-changed={source}");
    let objects_dir = out_dir.join(format!("{name}.objects"));
    std::fs::create_dir_all(&objects_dir).expect("a folder for the library's objects");
    let mut build = cc::Build::new();
    build
        .file(source)
        .includes(includes)
        .out_dir(&objects_dir)
        .pic(true)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .flag("-std=c11")
        .flag("-pthread")
        .flag("-fvisibility=hidden")
        .cargo_metadata(false);
    let objects = build.compile_intermediates();
    let compiler = build.get_compiler();
    let library = out_dir.join(format!("lib{name}.so"));
    let status = Command::new(compiler.path())
        .args(
            compiler
                .args()
                .iter()
                .filter(|arg| !arg.to_string_lossy().starts_with("-fsanitize")),
        )
        .args(["-shared", "-pthread", "-o"])
        .arg(&library)
        .args(&objects)
        .arg("-lm")
        .status()
        .unwrap_or_else(|e| panic!("the C compiler runs to link lib{name}.so: {e}"));
    assert!(status.success(), "linking lib{name}.so failed");
    library
}

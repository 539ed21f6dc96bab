//! Builds the C part of the suite: `benches/floor.c`, the benchmark's floor (`cuLaunchHostFunc`
//! called from C), a static library the benchmark links; and with the `nvtx` feature
//! `tests/support/nvtx_recorder.c`, an NVTX injection library `tests/nvtx.rs` attaches through
//! `NVTX_INJECTION64_PATH` (its path in `NVTX_RECORDER_LIBRARY` at compile time).
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

    println!("cargo:rerun-if-env-changed=DEP_CUDASW_SANITIZER_RUNTIME_SYMBOLS");
    if let Ok(symbols) = env::var("DEP_CUDASW_SANITIZER_RUNTIME_SYMBOLS") {
        println!("cargo:rustc-link-arg=-Wl,--export-dynamic-symbol={symbols}");
    }
}

/// Compiles the NVTX recorder into `libnvtx_recorder.so` in `out_dir` (not instrumented by a
/// sanitizer: it only records), announcing its path.
fn build_nvtx_recorder(out_dir: &Path) {
    const SOURCE: &str = "tests/support/nvtx_recorder.c";
    println!("cargo:rerun-if-changed={SOURCE}");
    let objects_dir = out_dir.join("nvtx_recorder.objects");
    std::fs::create_dir_all(&objects_dir).expect("a folder for the recorder's objects");
    let mut build = cc::Build::new();
    build
        .file(SOURCE)
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
    let library = out_dir.join("libnvtx_recorder.so");
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
        .status()
        .expect("the C compiler runs to link the NVTX recorder");
    assert!(status.success(), "linking the NVTX recorder failed");
    println!(
        "cargo:rustc-env=NVTX_RECORDER_LIBRARY={}",
        library.display()
    );
}

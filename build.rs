//! Builds the C parts of the suite:
//! - `benches/floor.c`, the benchmark's floor (`cuLaunchHostFunc` called from C), a static
//!   library the benchmark links;
//! - the software CUDA driver the integration tests load (`tests/software-driver/`), as shared
//!   objects, whose folder the tests learn through `CUDA_SOFTWARE_DRIVER_DIR`:
//! - `libcudasw.so`: the software driver;
//! - `libcudasw-stub.so`: the same sources acting as the toolkit's stub `libcuda.so` (every entry
//!   point answers `CUDA_ERROR_STUB_LIBRARY`);
//! - `libcudasw-noproc.so`: the software driver without `cuGetProcAddress`, as drivers before
//!   CUDA 11.3, so that entry points are found by symbol name.

use std::env;
use std::path::{Path, PathBuf};

const SOURCE_DIR: &str = "tests/software-driver";
const VARIANTS: [(&str, Option<&str>); 3] = [
    ("libcudasw.so", None),
    ("libcudasw-stub.so", Some("CUSW_VARIANT_STUB")),
    ("libcudasw-noproc.so", Some("CUSW_VARIANT_NO_PROC_ADDRESS")),
];

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

    println!("cargo:rerun-if-changed={SOURCE_DIR}");
    // The software driver is built on POSIX threads; elsewhere the tests use the real driver only.
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let out_dir = PathBuf::from(out_dir);
    let sources = c_sources(Path::new(SOURCE_DIR));
    for source in &sources {
        println!("cargo:rerun-if-changed={}", source.display());
    }
    for (library, define) in VARIANTS {
        build_library(&sources, &out_dir, library, define);
    }
    println!(
        "cargo:rustc-env=CUDA_SOFTWARE_DRIVER_DIR={}",
        out_dir.display()
    );
}

fn build_library(sources: &[PathBuf], out_dir: &Path, library: &str, define: Option<&str>) {
    let objects_dir = out_dir.join(format!("{library}.objects"));
    std::fs::create_dir_all(&objects_dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", objects_dir.display()));
    let mut build = cc::Build::new();
    build
        .files(sources)
        .include(SOURCE_DIR)
        .out_dir(&objects_dir)
        .pic(true)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .flag("-std=c11")
        .flag("-pthread")
        .flag("-fvisibility=hidden");
    if let Some(define) = define {
        build.define(define, None);
    }
    let objects = build.compile_intermediates();

    let path = out_dir.join(library);
    let status = build
        .get_compiler()
        .to_command()
        .args(&objects)
        .args(["-shared", "-pthread", "-Wl,--no-undefined"])
        .arg(format!("-Wl,-soname,{library}"))
        .arg("-o")
        .arg(&path)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler to link {library}: {e}"));
    assert!(status.success(), "linking {library} failed: {status}");
}

fn c_sources(dir: &Path) -> Vec<PathBuf> {
    let mut sources: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("readable directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "c"))
        .collect();
    sources.sort();
    sources
}

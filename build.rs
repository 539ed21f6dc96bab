//! Builds the software CUDA driver the integration tests load (`tests/software-driver/`) into a
//! shared object and tells the tests where it is through `CUDA_SOFTWARE_DRIVER_PATH`.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE_DIR: &str = "tests/software-driver";
const LIBRARY_NAME: &str = "libcudasw.so";

fn main() {
    println!("cargo:rerun-if-changed={SOURCE_DIR}");
    // The software driver is built on POSIX threads; elsewhere the tests use the real driver only.
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let sources = c_sources(Path::new(SOURCE_DIR));
    for source in &sources {
        println!("cargo:rerun-if-changed={}", source.display());
    }

    let mut build = cc::Build::new();
    build
        .files(&sources)
        .include(SOURCE_DIR)
        .pic(true)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .flag("-std=c11")
        .flag("-pthread")
        .flag("-fvisibility=hidden");
    let objects = build.compile_intermediates();

    let library = out_dir.join(LIBRARY_NAME);
    let compiler = build.get_compiler();
    let status = compiler
        .to_command()
        .args(&objects)
        .args(["-shared", "-pthread", "-Wl,--no-undefined"])
        .arg(format!("-Wl,-soname,{LIBRARY_NAME}"))
        .arg("-o")
        .arg(&library)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler to link {LIBRARY_NAME}: {e}"));
    assert!(status.success(), "linking {LIBRARY_NAME} failed: {status}");
    println!(
        "cargo:rustc-env=CUDA_SOFTWARE_DRIVER_PATH={}",
        library.display()
    );
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

//! Builds the C part of the suite, `benches/floor.c`: the benchmark's floor (`cuLaunchHostFunc`
//! called from C), a static library the benchmark links.
//!
//! The software driver the tests load is cuda-host-testing's, built by its own build script.
//! Under a sanitizer its C code is instrumented but leaves the runtime to the executables that
//! load it: the suite's executables export the runtime rustc links into them, whose symbols that
//! build script names (`DEP_CUDASW_SANITIZER_RUNTIME_SYMBOLS`).

use std::env;

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

    println!("cargo:rerun-if-env-changed=DEP_CUDASW_SANITIZER_RUNTIME_SYMBOLS");
    if let Ok(symbols) = env::var("DEP_CUDASW_SANITIZER_RUNTIME_SYMBOLS") {
        println!("cargo:rustc-link-arg=-Wl,--export-dynamic-symbol={symbols}");
    }
}

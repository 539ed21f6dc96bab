//! Builds the C parts of the suite:
//! - `benches/floor.c`, the benchmark's floor (`cuLaunchHostFunc` called from C), a static
//!   library the benchmark links;
//! - the software CUDA driver the integration tests load (`tests/driver-double/`), as shared
//!   objects, whose folder the tests learn through `CUDA_SOFTWARE_DRIVER_DIR`:
//! - `libcudasw.so`: the software driver;
//! - `libcudasw-stub.so`: the same sources acting as the toolkit's stub `libcuda.so` (every entry
//!   point answers `CUDA_ERROR_STUB_LIBRARY`);
//! - `libcudasw-noproc.so`: the software driver without `cuGetProcAddress`, as drivers before
//!   CUDA 11.3, so that entry points are found by symbol name.
//!
//! Under a sanitizer (`-Zsanitizer=address` or `thread`, nightly), the driver's C code is
//! instrumented for it too, but its shared objects are linked without the sanitizer: the runtime
//! is the one rustc links into each test executable, which exports its entry points for them.
//! Linked with `-fsanitize`, a library would pull in the C compiler's own runtime as well, and
//! AddressSanitizer aborts a process whose first library is not its runtime.

use std::env;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE_DIR: &str = "tests/driver-double";
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
    let sanitizer = Sanitizer::of_target();
    if let Some(sanitizer) = sanitizer {
        // The libraries leave the runtime's symbols undefined; the executables that load them
        // must export the runtime rustc linked into them.
        println!(
            "cargo:rustc-link-arg=-Wl,--export-dynamic-symbol={}",
            sanitizer.runtime_symbols()
        );
    }
    for (library, define) in VARIANTS {
        build_library(&sources, &out_dir, library, define, sanitizer);
    }
    println!(
        "cargo:rustc-env=CUDA_SOFTWARE_DRIVER_DIR={}",
        out_dir.display()
    );
}

/// A sanitizer rustc instruments the Rust code for, which the C code then gets too.
#[derive(Debug, Clone, Copy)]
enum Sanitizer {
    /// cc passes `-fsanitize=address` to the compiler by itself.
    Address,
    /// ThreadSanitizer sees only instrumented code: the driver's worker threads call Rust host
    /// functions and synchronise with Rust threads through the driver's locks and atomics, so an
    /// uninstrumented driver would make every hand-over look like a race.
    Thread,
}

impl Sanitizer {
    /// From `CARGO_CFG_SANITIZE`, which Cargo sets from the target's `-Zsanitizer` flags.
    fn of_target() -> Option<Sanitizer> {
        let list = env::var("CARGO_CFG_SANITIZE").unwrap_or_default();
        let has = |name| list.split(',').any(|s| s == name);
        if has("thread") {
            Some(Sanitizer::Thread)
        } else if has("address") {
            Some(Sanitizer::Address)
        } else {
            None
        }
    }

    fn compile_flag(self) -> Option<&'static str> {
        match self {
            Sanitizer::Address => None,
            Sanitizer::Thread => Some("-fsanitize=thread"),
        }
    }

    fn runtime_symbols(self) -> &'static str {
        match self {
            Sanitizer::Address => "__asan_*",
            Sanitizer::Thread => "__tsan_*",
        }
    }
}

fn build_library(
    sources: &[PathBuf],
    out_dir: &Path,
    library: &str,
    define: Option<&str>,
    sanitizer: Option<Sanitizer>,
) {
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
        // Every function outside its file needs a prototype; an entry point gets its own from
        // entries.def, which also puts it in the entry table, so one missing there does not build.
        .flag("-Wmissing-prototypes")
        .flag("-std=c11")
        .flag("-pthread")
        .flag("-fvisibility=hidden");
    if let Some(define) = define {
        build.define(define, None);
    }
    if let Some(flag) = sanitizer.and_then(Sanitizer::compile_flag) {
        build.flag(flag);
    }
    let objects = build.compile_intermediates();

    // The compiler's flags without any sanitizer flag, whether cc added it or CFLAGS did: see
    // the module documentation.
    let compiler = build.get_compiler();
    let mut link = Command::new(compiler.path());
    link.args(compiler.args().iter().filter(|arg| !is_sanitizer_flag(arg)));
    link.envs(compiler.get_envs());
    // Instrumented objects call into the sanitizer runtime, which only the executable has.
    let instrumented = compiler
        .args()
        .iter()
        .any(|arg| arg.to_string_lossy().starts_with("-fsanitize="));
    if !instrumented {
        link.arg("-Wl,--no-undefined");
    } else if sanitizer.is_none() && library == VARIANTS[0].0 {
        println!(
            "cargo:warning=CFLAGS instrument the software driver for a sanitizer that the Rust \
             code is not built with (-Zsanitizer): the tests cannot load it"
        );
    }
    let path = out_dir.join(library);
    let status = link
        .args(&objects)
        .args(["-shared", "-pthread"])
        .arg(format!("-Wl,-soname,{library}"))
        .arg("-o")
        .arg(&path)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler to link {library}: {e}"));
    assert!(status.success(), "linking {library} failed: {status}");
}

fn is_sanitizer_flag(arg: &OsStr) -> bool {
    let arg = arg.to_string_lossy();
    arg.starts_with("-fsanitize") || arg.starts_with("-fno-sanitize")
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

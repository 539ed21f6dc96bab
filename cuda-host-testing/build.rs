//! Builds the software CUDA driver (`driver/`) as three shared objects in `OUT_DIR`, whose folder
//! the crate learns through `CUDA_SOFTWARE_DRIVER_DIR`:
//! - `libcudasw.so`: the software driver;
//! - `libcudasw-stub.so`: the same sources acting as the toolkit's stub `libcuda.so` (every entry
//!   point answers `CUDA_ERROR_STUB_LIBRARY`);
//! - `libcudasw-noproc.so`: the software driver without `cuGetProcAddress`, as drivers before
//!   CUDA 11.3, so that entry points are found by symbol name.
//!
//! It also writes `entry_points.rs` and `entry_points.md` from `driver/entries.def`: the list of
//! entry points the crate documents is the list the driver is built from.
//!
//! Under a sanitizer (`-Zsanitizer=address` or `thread`, nightly), the driver's C code is
//! instrumented for it too, but its shared objects are linked without the sanitizer: the runtime
//! is the one rustc links into each executable that loads them, which must export its entry
//! points for them (`-Wl,--export-dynamic-symbol=`, the `DEP_CUDASW_SANITIZER_RUNTIME_SYMBOLS`
//! this script announces to dependents' build scripts). Linked with `-fsanitize`, a library
//! would pull in the C compiler's own runtime as well, and AddressSanitizer aborts a process
//! whose first library is not its runtime.

use std::env;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE_DIR: &str = "driver";
const VARIANTS: [(&str, Option<&str>); 3] = [
    ("libcudasw.so", None),
    ("libcudasw-stub.so", Some("CUSW_VARIANT_STUB")),
    ("libcudasw-noproc.so", Some("CUSW_VARIANT_NO_PROC_ADDRESS")),
];

fn main() {
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:rerun-if-changed={SOURCE_DIR}");
    write_entry_points(&out_dir);
    println!(
        "cargo:rustc-env=CUDA_SOFTWARE_DRIVER_DIR={}",
        out_dir.display()
    );
    // The software driver is built on POSIX threads and ELF shared objects; elsewhere loading it
    // answers a typed error naming the missing library.
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let sources = c_sources(Path::new(SOURCE_DIR));
    // A package that lost its sources would otherwise link a driver with no entry points.
    assert!(
        !sources.is_empty(),
        "no C source under {SOURCE_DIR}/: the package does not carry the software driver"
    );
    for source in &sources {
        println!("cargo:rerun-if-changed={}", source.display());
    }
    let sanitizer = Sanitizer::of_target();
    if let Some(sanitizer) = sanitizer {
        // For this package's own tests, and (as DEP_CUDASW_SANITIZER_RUNTIME_SYMBOLS) for the
        // build scripts of packages whose executables load the libraries.
        println!(
            "cargo:rustc-link-arg=-Wl,--export-dynamic-symbol={}",
            sanitizer.runtime_symbols()
        );
        println!(
            "cargo:sanitizer_runtime_symbols={}",
            sanitizer.runtime_symbols()
        );
    }
    for (library, define) in VARIANTS {
        build_library(&sources, &out_dir, library, define, sanitizer);
    }
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
             code is not built with (-Zsanitizer): executables cannot load it"
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

/// The C files in `dir` and its folders (`model/`, `api/`), sorted.
fn c_sources(dir: &Path) -> Vec<PathBuf> {
    let mut sources = Vec::new();
    for entry in
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
    {
        let path = entry.expect("readable directory entry").path();
        if path.is_dir() {
            sources.extend(c_sources(&path));
        } else if path.extension().is_some_and(|ext| ext == "c") {
            sources.push(path);
        }
    }
    sources.sort();
    sources
}

/// One `ENTRY` or `TWIN` line of entries.def.
struct Entry {
    base: String,
    abi_version: u32,
    exported: String,
    per_thread_twin: bool,
}

/// Writes `entry_points.rs` (the `ENTRY_POINTS` and `CONTROLS` tables) and `entry_points.md` (the
/// same as a documentation table) from entries.def.
fn write_entry_points(out_dir: &Path) {
    let def = Path::new(SOURCE_DIR).join("entries.def");
    let text = std::fs::read_to_string(&def)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", def.display()));
    let mut entries = Vec::new();
    let mut controls = Vec::new();
    for line in text.lines() {
        let (per_thread_twin, rest) = if let Some(rest) = line.strip_prefix("ENTRY(") {
            (false, rest)
        } else if let Some(rest) = line.strip_prefix("TWIN(") {
            (true, rest)
        } else if let Some(rest) = line.strip_prefix("CONTROL(") {
            let name = rest.split(')').next().expect("CONTROL(name)").trim();
            controls.push(name.to_owned());
            continue;
        } else {
            continue;
        };
        // `"base", version, exported_name, (params` on the first line of every entry.
        let mut fields = rest.splitn(4, ',').map(str::trim);
        let mut field = || {
            fields
                .next()
                .unwrap_or_else(|| panic!("short entry: {line}"))
        };
        let base = field().trim_matches('"').to_owned();
        let abi_version = field()
            .parse()
            .unwrap_or_else(|e| panic!("entry version in {line}: {e}"));
        let exported = field().to_owned();
        entries.push(Entry {
            base,
            abi_version,
            exported,
            per_thread_twin,
        });
    }
    assert!(!entries.is_empty(), "no entries in {}", def.display());

    let mut rust = String::from(
        "// Generated by build.rs from driver/entries.def; do not edit.\n\
         /// Every driver entry point the software driver implements, in `entries.def`'s order.\n\
         pub const ENTRY_POINTS: &[EntryPoint] = &[\n",
    );
    let mut markdown = String::from(
        "| base name | ABI version | exported function | per-thread form |\n\
         | --- | --- | --- | --- |\n",
    );
    for entry in &entries {
        writeln!(
            rust,
            "    EntryPoint {{ base: {:?}, abi_version: {}, exported: {:?}, per_thread_twin: {} }},",
            entry.base, entry.abi_version, entry.exported, entry.per_thread_twin
        )
        .expect("writing to a String");
        writeln!(
            markdown,
            "| `{}` | {} | `{}` | {} |",
            entry.base,
            entry.abi_version,
            entry.exported,
            if entry.per_thread_twin {
                format!("`{}_ptsz`", entry.exported)
            } else {
                String::new()
            }
        )
        .expect("writing to a String");
    }
    rust.push_str(
        "];\n\n/// The software driver's control functions (`cusw*`), exported and reachable \
         through `cuGetProcAddress_v2` at any version.\npub const CONTROLS: &[&str] = &[\n",
    );
    for control in &controls {
        writeln!(rust, "    {control:?},").expect("writing to a String");
    }
    rust.push_str("];\n");
    write_file(&out_dir.join("entry_points.rs"), &rust);
    write_file(&out_dir.join("entry_points.md"), &markdown);
}

fn write_file(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

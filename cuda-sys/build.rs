//! Chooses where the bindings come from and writes them to `$OUT_DIR/bindings.rs`.
//!
//! `CUDA_SYS_BINDINGS` picks the route:
//! - `auto` (default): run bindgen over the `cuda.h` found, or use the committed snapshot when no
//!   headers or no libclang is there (one `cargo:warning` says why) or the `bindgen` feature is
//!   off (then the snapshot is the chosen route, without a warning);
//! - `generate`: run bindgen or fail, naming what is missing;
//! - `snapshot`: always use the committed snapshot.
//!
//! Headers are looked for in `CUDA_INCLUDE_DIR`; `include/` of `CUDA_PATH`, `CUDA_HOME`,
//! `CUDA_ROOT`, `CUDA_TOOLKIT_ROOT_DIR`; `/usr/local/cuda/include`, `/opt/cuda/include`,
//! `/usr/include`; then Python's site-packages (`nvidia/cu13/include`, then
//! `nvidia/cuda_runtime/include`, where NVIDIA's runtime wheels put them).

#[cfg(feature = "bindgen")]
#[path = "build/bindings.rs"]
mod bindings;

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const SNAPSHOT: &str = "snapshot/bindings.rs";

/// Variables naming a toolkit root whose `include/` may hold `cuda.h`, in search order.
const ROOT_VARIABLES: [&str; 4] = [
    "CUDA_PATH",
    "CUDA_HOME",
    "CUDA_ROOT",
    "CUDA_TOOLKIT_ROOT_DIR",
];
const SYSTEM_INCLUDE_DIRS: [&str; 3] = [
    "/usr/local/cuda/include",
    "/opt/cuda/include",
    "/usr/include",
];
const WHEEL_INCLUDE_DIRS: [&str; 2] = ["nvidia/cu13/include", "nvidia/cuda_runtime/include"];
/// Variables that change what Python reports as its site-packages.
const PYTHON_VARIABLES: [&str; 3] = ["PYTHONPATH", "VIRTUAL_ENV", "PYTHONUSERBASE"];
/// Variables bindgen and libclang read.
const CLANG_VARIABLES: [&str; 3] = ["LIBCLANG_PATH", "CLANG_PATH", "BINDGEN_EXTRA_CLANG_ARGS"];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Auto,
    Generate,
    Snapshot,
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build/bindings.rs");
    println!("cargo:rerun-if-changed={SNAPSHOT}");
    for variable in ["CUDA_SYS_BINDINGS", "CUDA_INCLUDE_DIR"]
        .into_iter()
        .chain(ROOT_VARIABLES)
        .chain(PYTHON_VARIABLES)
        .chain(CLANG_VARIABLES)
    {
        println!("cargo:rerun-if-env-changed={variable}");
    }
    // bindgen and the declaration walks also read the target's own forms of
    // BINDGEN_EXTRA_CLANG_ARGS.
    #[cfg(feature = "bindgen")]
    for variable in bindings::extra_clang_args_variables(env::var("TARGET").ok().as_deref()) {
        println!("cargo:rerun-if-env-changed={variable}");
    }

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mode = match env::var("CUDA_SYS_BINDINGS").as_deref() {
        Err(_) | Ok("" | "auto") => Mode::Auto,
        Ok("generate") => Mode::Generate,
        Ok("snapshot") => Mode::Snapshot,
        Ok(other) => panic!("CUDA_SYS_BINDINGS={other} is not one of auto, generate, snapshot"),
    };

    let origin = match mode {
        Mode::Snapshot => use_snapshot(&out_dir),
        Mode::Generate => match generate(&out_dir) {
            Ok(origin) => origin,
            Err(reason) => panic!("CUDA_SYS_BINDINGS=generate: {reason}"),
        },
        // Without the feature, the snapshot is the chosen route, not a fallback.
        Mode::Auto if !cfg!(feature = "bindgen") => use_snapshot(&out_dir),
        Mode::Auto => match generate(&out_dir) {
            Ok(origin) => origin,
            Err(reason) => {
                println!("cargo:warning=using the committed CUDA bindings snapshot: {reason}");
                use_snapshot(&out_dir)
            }
        },
    };
    write(&out_dir.join("origin.rs"), &origin);
}

fn use_snapshot(out_dir: &Path) -> String {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let snapshot = manifest_dir.join(SNAPSHOT);
    std::fs::copy(&snapshot, out_dir.join("bindings.rs"))
        .unwrap_or_else(|e| panic!("cannot copy {}: {e}", snapshot.display()));
    "/// Where this build's bindings came from.\n\
     pub const BINDINGS_ORIGIN: BindingsOrigin = BindingsOrigin::Snapshot;\n"
        .to_owned()
}

#[cfg(feature = "bindgen")]
fn generate(out_dir: &Path) -> Result<String, String> {
    let include_dir = find_headers()?;
    let headers = bindings::Headers::in_dir(&include_dir)?;
    for file in headers.files() {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    let provenance = format!(
        "Generated at build time by cuda-host-sys's build script from {}.",
        include_dir.display()
    );
    let text = bindings::generate(&headers, &provenance)?;
    write(&out_dir.join("bindings.rs"), &text);
    Ok(format!(
        "/// Where this build's bindings came from.\n\
         pub const BINDINGS_ORIGIN: BindingsOrigin = \
         BindingsOrigin::Generated {{ include_dir: {:?} }};\n",
        include_dir.display().to_string()
    ))
}

#[cfg(not(feature = "bindgen"))]
fn generate(_out_dir: &Path) -> Result<String, String> {
    Err("the `bindgen` feature of cuda-host-sys is off, so bindgen is not built".to_owned())
}

/// The first folder holding `cuda.h`, in the documented order.
#[cfg_attr(not(feature = "bindgen"), allow(dead_code))]
fn find_headers() -> Result<PathBuf, String> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(dir) = env::var_os("CUDA_INCLUDE_DIR").filter(|dir| !dir.is_empty()) {
        candidates.push(dir.into());
    }
    for variable in ROOT_VARIABLES {
        if let Some(root) = env::var_os(variable).filter(|root| !root.is_empty()) {
            candidates.push(PathBuf::from(root).join("include"));
        }
    }
    candidates.extend(SYSTEM_INCLUDE_DIRS.iter().map(PathBuf::from));
    for site_packages in python_site_packages() {
        candidates.extend(WHEEL_INCLUDE_DIRS.iter().map(|dir| site_packages.join(dir)));
    }
    candidates
        .into_iter()
        .find(|dir| dir.join("cuda.h").is_file())
        .ok_or_else(|| {
            "no cuda.h found; set CUDA_INCLUDE_DIR to the folder holding it, or CUDA_PATH to a \
             CUDA toolkit, or `pip install nvidia-cuda-runtime`"
                .to_owned()
        })
}

/// The site-packages folders of `python3` (or `python`), empty when there is no Python.
#[cfg_attr(not(feature = "bindgen"), allow(dead_code))]
fn python_site_packages() -> Vec<PathBuf> {
    const SCRIPT: &str = "import site, sys\n\
        paths = list(site.getsitepackages()) + [site.getusersitepackages()] + sys.path\n\
        print('\\n'.join(p for p in paths if p))";
    for python in ["python3", "python"] {
        if let Ok(output) = Command::new(python).args(["-c", SCRIPT]).output()
            && output.status.success()
        {
            return String::from_utf8_lossy(&output.stdout)
                .lines()
                .map(PathBuf::from)
                .collect();
        }
    }
    Vec::new()
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

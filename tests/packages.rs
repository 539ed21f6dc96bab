//! The published packages carry what their builds read: cuda-host-testing's build script
//! compiles every C file under `driver/` (its layers `api/` and `model/` included), so its
//! package must list every tracked file there, or a user's build from the registry links a
//! software driver with no entry points.

use std::process::Command;
use suite::repository::root;

/// The files `cargo package` would put into `package`, as paths inside it.
fn packaged(package: &str) -> Vec<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "package",
            "--list",
            "--allow-dirty",
            "--offline",
            "-p",
            package,
        ])
        .current_dir(root())
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo package --list failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("paths are UTF-8")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The tracked files under `folder` of the repository, as paths inside `folder`'s package root
/// `package_root`.
fn tracked_under(package_root: &str, folder: &str) -> Vec<String> {
    suite::repository::tracked_files(&format!("{package_root}/{folder}"))
        .into_iter()
        .map(|path| path[package_root.len() + 1..].to_owned())
        .collect()
}

#[test]
fn the_software_driver_package_carries_every_file_of_its_driver() {
    let listed = packaged("cuda-host-testing");
    let sources = tracked_under("cuda-host-testing", "driver");
    assert!(
        sources.iter().any(|path| path.ends_with(".c")),
        "no C source tracked under driver/"
    );
    let missing: Vec<&String> = sources
        .iter()
        .filter(|path| !listed.contains(path))
        .collect();
    assert!(
        missing.is_empty(),
        "cuda-host-testing's package lacks {missing:?}"
    );
}

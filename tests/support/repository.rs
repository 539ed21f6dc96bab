//! The repository's own files, for the tests that check them (citations, figures, packages).

use std::path::PathBuf;
use std::process::Command;

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The files git tracks under `pathspec` (the whole repository for `"."`), as paths from the
/// root.
///
/// # Panics
/// When git cannot list them.
pub fn tracked_files(pathspec: &str) -> Vec<String> {
    let output = Command::new("git")
        .args(["ls-files", "-z", "--", pathspec])
        .current_dir(root())
        .output()
        .expect("git runs in the repository");
    assert!(output.status.success(), "git ls-files failed");
    String::from_utf8(output.stdout)
        .expect("paths are UTF-8")
        .split('\0')
        .filter(|path| !path.is_empty())
        .map(str::to_owned)
        .collect()
}

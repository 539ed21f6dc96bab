//! A folder that makes a library the `libcuda` other libraries open by name.
//!
//! cudarc opens `libcuda.so` (then other names, down to `libcuda.so.1`) by itself. A child
//! process whose `LD_LIBRARY_PATH` starts with this folder finds the library it links to under
//! those names: the software driver the test binary loaded (the platform loader then hands back
//! the library already open, so both use one driver), or another one. The loader reads
//! `LD_LIBRARY_PATH` when a process starts, so it only works for a child.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A temporary folder of links named like `libcuda`, removed on drop.
#[derive(Debug)]
pub struct LibcudaAlias {
    dir: PathBuf,
}

impl LibcudaAlias {
    /// A new folder in which each of `names` (e.g. `libcuda.so`, `libcuda.so.1`) links to
    /// `library`.
    ///
    /// # Panics
    /// When the folder or a link cannot be made.
    pub fn new(library: &Path, names: &[&str]) -> LibcudaAlias {
        static MADE: AtomicUsize = AtomicUsize::new(0);
        let library =
            std::fs::canonicalize(library).unwrap_or_else(|e| panic!("{}: {e}", library.display()));
        let dir = std::env::temp_dir().join(format!(
            "cuda-host-suite-libcuda-{}-{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for name in names {
            let link = dir.join(name);
            std::os::unix::fs::symlink(&library, &link)
                .unwrap_or_else(|e| panic!("{}: {e}", link.display()));
        }
        LibcudaAlias { dir }
    }

    /// `LD_LIBRARY_PATH` for a child: this folder first, then the value this process has (where
    /// NVIDIA's driver may be found).
    ///
    /// # Panics
    /// When the path is not UTF-8.
    pub fn library_path(&self) -> String {
        let mut path = self
            .dir
            .to_str()
            .expect("a UTF-8 temporary folder")
            .to_owned();
        if let Ok(inherited) = std::env::var("LD_LIBRARY_PATH")
            && !inherited.is_empty()
        {
            path.push(':');
            path.push_str(&inherited);
        }
        path
    }
}

impl Drop for LibcudaAlias {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

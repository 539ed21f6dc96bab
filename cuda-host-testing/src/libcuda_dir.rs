//! A folder that makes a library the `libcuda` other code opens by name.

use crate::Error;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A temporary folder in which `libcuda.so.1` and `libcuda.so` link to the software driver (or
/// another library), removed on drop.
///
/// cudarc, and C code, open `libcuda.so.1` or `libcuda.so` by name. A process whose
/// `LD_LIBRARY_PATH` starts with this folder finds the software driver under those names (and
/// where it also loaded the library by path, the platform loader hands back the one already
/// open, so all its users share one driver). The loader reads `LD_LIBRARY_PATH` when a process
/// starts: set it for a child process ([`ld_library_path`](Self::ld_library_path)).
#[derive(Debug)]
pub struct LibcudaDir {
    dir: PathBuf,
}

impl LibcudaDir {
    /// A folder holding the software driver, [`library_path`](crate::library_path), as
    /// `libcuda`.
    ///
    /// # Errors
    /// [`Error::Io`] when the library is missing, or the folder or a link cannot be made.
    pub fn new() -> Result<LibcudaDir, Error> {
        LibcudaDir::for_library(&crate::library_path())
    }

    /// A folder holding `library` as `libcuda`.
    ///
    /// # Errors
    /// [`Error::Io`] when `library` is missing, or the folder or a link cannot be made.
    pub fn for_library(library: &Path) -> Result<LibcudaDir, Error> {
        LibcudaDir::with_names(library, &["libcuda.so.1", "libcuda.so"])
    }

    /// A folder holding `library` under `names` alone: e.g. only `libcuda.so`, which cudarc
    /// tries first, so that a driver opened as `libcuda.so.1` is another library.
    ///
    /// # Errors
    /// [`Error::Io`] when `library` is missing, or the folder or a link cannot be made.
    pub fn with_names(library: &Path, names: &[&str]) -> Result<LibcudaDir, Error> {
        static MADE: AtomicUsize = AtomicUsize::new(0);
        let library = std::fs::canonicalize(library).map_err(|e| io_error(library, &e))?;
        let dir = std::env::temp_dir().join(format!(
            "cuda-host-testing-libcuda-{}-{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, &e))?;
        // Owned from here, so that a failed link removes the folder.
        let folder = LibcudaDir { dir };
        for name in names {
            let link = folder.dir.join(name);
            std::os::unix::fs::symlink(&library, &link).map_err(|e| io_error(&link, &e))?;
        }
        log::debug!(
            "{} holds {} as libcuda",
            folder.dir.display(),
            library.display()
        );
        Ok(folder)
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// `LD_LIBRARY_PATH` for a child process: this folder first, then the value this process has.
    pub fn ld_library_path(&self) -> OsString {
        let mut path = OsString::from(&self.dir);
        if let Some(inherited) = std::env::var_os("LD_LIBRARY_PATH")
            && !inherited.is_empty()
        {
            path.push(":");
            path.push(inherited);
        }
        path
    }
}

impl Drop for LibcudaDir {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_dir_all(&self.dir) {
            log::warn!("cannot remove {}: {error}", self.dir.display());
        }
    }
}

fn io_error(path: &Path, error: &std::io::Error) -> Error {
    Error::Io {
        path: path.to_owned(),
        reason: error.to_string(),
    }
}

//! Opening the driver library at run time and resolving its entry points into a table.
//!
//! The library is opened with the platform loader; only `cuDriverGetVersion` and
//! `cuGetProcAddress_v2` are looked up by symbol. Every other entry point is resolved through
//! `cuGetProcAddress_v2` at the ABI version the header declares for it, so that an older driver
//! reports the entry point missing instead of handing back an older ABI. Where the driver has no
//! `cuGetProcAddress_v2`, the header's exported symbol names are looked up instead.
//!
//! Resolution is eager: all entry points are resolved when the driver is opened. It costs about
//! as much as opening the library's file (see `docs/PERFORMANCE.md`), and it makes each call a
//! plain load of a function pointer.

use crate::entry_point::{Availability, EntryPoint};
use crate::error::{Error, LoadError};
use crate::{CUresult, DriverFunctions, ENTRY_POINT_COUNT, ENTRY_POINTS};
use std::ffi::{CStr, OsString, c_char, c_int, c_void};
use std::path::Path;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// The environment variable naming the driver library to open instead of the default names; if
/// it cannot be opened, loading fails ([`LoadError::ConfiguredLibraryNotFound`]).
pub const LIBCUDA_VARIABLE: &str = "CUDA_SYS_LIBCUDA";
/// The environment variable that turns on the per-thread default stream (`1`).
pub const PER_THREAD_DEFAULT_STREAM_VARIABLE: &str = "CUDA_SYS_PER_THREAD_DEFAULT_STREAM";
/// The oldest driver supported: CUDA 10.0, the first with host functions (`cuLaunchHostFunc`),
/// stream capture and graphs.
pub const MINIMUM_DRIVER_VERSION: i32 = 10000;

/// The names tried when no library is named: `libcuda.so.1` first, so that a toolkit's stub
/// `libcuda.so` on the library path is not picked up by mistake.
#[cfg(not(windows))]
const DEFAULT_LIBRARY_NAMES: &[&str] = &["libcuda.so.1", "libcuda.so"];
#[cfg(windows)]
const DEFAULT_LIBRARY_NAMES: &[&str] = &["nvcuda.dll"];

// `CUdriverProcAddress_flags` values, fixed by the driver ABI.
const CU_GET_PROC_ADDRESS_LEGACY_STREAM: u64 = 1;
const CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: u64 = 2;

type DriverGetVersion = unsafe extern "C" fn(*mut c_int) -> CUresult;
type GetProcAddress =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CUresult;

/// How to open a driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadOptions {
    libraries: Vec<OsString>,
    // The environment variable that named the one library, if one did.
    named_by: Option<&'static str>,
    per_thread_default_stream: bool,
}

impl Default for LoadOptions {
    /// The library named by `CUDA_SYS_LIBCUDA` if set, and only that one: failing to open it is
    /// an error, not a reason to load another driver than the one asked for. Otherwise
    /// `libcuda.so.1`, then `libcuda.so`. The per-thread default stream when
    /// `CUDA_SYS_PER_THREAD_DEFAULT_STREAM=1`.
    fn default() -> Self {
        let (libraries, named_by) =
            match std::env::var_os(LIBCUDA_VARIABLE).filter(|path| !path.is_empty()) {
                Some(path) => (vec![path], Some(LIBCUDA_VARIABLE)),
                None => (
                    DEFAULT_LIBRARY_NAMES.iter().map(OsString::from).collect(),
                    None,
                ),
            };
        let per_thread_default_stream =
            std::env::var_os(PER_THREAD_DEFAULT_STREAM_VARIABLE).is_some_and(|value| value == "1");
        LoadOptions {
            libraries,
            named_by,
            per_thread_default_stream,
        }
    }
}

impl LoadOptions {
    /// Open exactly this library (a path, or a name for the platform loader's search).
    ///
    /// # Safety
    /// A load with these options ([`Driver::load`], [`init_driver`]) opens `path` and calls into
    /// it: `path` must meet the obligations of [`Driver::open`].
    ///
    /// ```compile_fail,E0133
    /// let options = cuda_host_sys::LoadOptions::library("/opt/any/library.so");
    /// ```
    pub unsafe fn library(path: impl AsRef<Path>) -> Self {
        LoadOptions {
            libraries: vec![path.as_ref().as_os_str().to_owned()],
            named_by: None,
            per_thread_default_stream: false,
        }
    }

    /// The libraries tried, in order.
    pub fn libraries(&self) -> &[OsString] {
        &self.libraries
    }

    /// Whether the per-thread default stream is asked for.
    pub fn uses_per_thread_default_stream(&self) -> bool {
        self.per_thread_default_stream
    }

    /// Resolve the per-thread-default-stream versions of the entry points that take a stream, so
    /// that the null stream means `CU_STREAM_PER_THREAD` instead of `CU_STREAM_LEGACY`.
    pub fn per_thread_default_stream(mut self, enabled: bool) -> Self {
        self.per_thread_default_stream = enabled;
        self
    }
}

/// A loaded driver library and its table of entry points.
///
/// Each entry point is a method with the C name and signature (`driver.cuInit(0)`), or a field of
/// [`functions`](Driver::functions) for callers that want the pointer. An entry point the driver
/// lacks answers `CUDA_ERROR_NOT_FOUND` (and is logged once); [`availability`](Driver::availability)
/// says which and why.
pub struct Driver {
    // Keeps the code the table points into loaded for as long as the table lives; `None` when
    // the table was built from a resolver, whose caller keeps the code alive.
    _library: Option<libloading::Library>,
    library_name: String,
    version: i32,
    per_thread_default_stream: bool,
    functions: DriverFunctions,
    // The resolved addresses, 0 where unavailable, for callers that compare them.
    addresses: Box<[usize]>,
    availability: Box<[Availability]>,
    missing_reported: Box<[AtomicBool]>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("library", &self.library_name)
            .field("version", &self.version)
            .field("per_thread_default_stream", &self.per_thread_default_stream)
            .field("available_entry_points", &self.available_count())
            .finish_non_exhaustive()
    }
}

impl Driver {
    /// Opens the driver library at `path` (or a name the platform loader searches for).
    ///
    /// # Errors
    /// A [`LoadError`] when the library cannot be opened, is a stub, lacks
    /// `cuDriverGetVersion` or is older than [`MINIMUM_DRIVER_VERSION`].
    ///
    /// # Safety
    /// Opening a library runs its initialisation code, closing it (when the last `Driver` of it
    /// is dropped) its termination code, and the table calls its functions through the
    /// signatures `cuda.h` declares, none of which can be checked. The caller must ensure that:
    /// 1. every function the library at `path` exports under a driver API name
    ///    (`cuDriverGetVersion`, `cuGetProcAddress_v2`, `cuInit`, ...), and every pointer its
    ///    `cuGetProcAddress_v2` returns, has the C signature and behaviour the CUDA driver API
    ///    documents for that name (NVIDIA's `libcuda` and its toolkit stub do; a library that
    ///    exports no `cuDriverGetVersion` is refused without any of its functions being called);
    /// 2. running the library's initialisation and termination code in this process is sound,
    ///    as for [`libloading::Library::new`].
    ///
    /// Safe code cannot choose the library:
    ///
    /// ```compile_fail,E0133
    /// let driver = cuda_host_sys::Driver::open("/opt/any/library.so");
    /// ```
    pub unsafe fn open(path: impl AsRef<Path>) -> Result<Driver, LoadError> {
        // SAFETY: the caller's obligations for `path` are those `library` and `load` ask for.
        unsafe { Driver::load(&LoadOptions::library(path)) }
    }

    /// Opens the first library of `options` that the platform loader can open, and resolves the
    /// table.
    ///
    /// # Errors
    /// As [`Driver::open`]; when no library opens, the error names all that were tried, or
    /// the variable and the library it named ([`LoadError::ConfiguredLibraryNotFound`]).
    ///
    /// # Safety
    /// Each library of `options` ([`LoadOptions::libraries`]) may be the one opened, so each
    /// must meet the obligations of [`Driver::open`]. [`LoadOptions::default`] names the
    /// driver the process is configured with, as [`driver`] opens it.
    ///
    /// ```compile_fail,E0133
    /// let driver = cuda_host_sys::Driver::load(&cuda_host_sys::LoadOptions::default());
    /// ```
    pub unsafe fn load(options: &LoadOptions) -> Result<Driver, LoadError> {
        let mut tried = Vec::new();
        let mut messages = Vec::new();
        for name in &options.libraries {
            let shown = name.to_string_lossy().into_owned();
            // SAFETY: the caller guarantees that every library of `options` is a driver library
            // whose initialisation and termination code is sound to run; its code stays loaded
            // while the returned `Driver` lives.
            match unsafe { libloading::Library::new(name) } {
                Ok(library) => {
                    if !messages.is_empty() {
                        log::debug!("opened {shown} after: {}", messages.join("; "));
                    }
                    return Driver::from_library(library, shown, options.per_thread_default_stream);
                }
                Err(error) => {
                    // libloading's own text is "dlopen failed"; the loader's reason is its source.
                    let reason = std::error::Error::source(&error)
                        .map_or_else(|| error.to_string(), |source| source.to_string());
                    messages.push(reason);
                    tried.push(shown);
                }
            }
        }
        let message = messages.join("; ");
        match (options.named_by, tried.as_mut_slice()) {
            (Some(variable), [library]) => Err(LoadError::ConfiguredLibraryNotFound {
                variable,
                library: std::mem::take(library),
                message,
            }),
            _ => Err(LoadError::LibraryNotFound { tried, message }),
        }
    }

    fn from_library(
        library: libloading::Library,
        library_name: String,
        per_thread_default_stream: bool,
    ) -> Result<Driver, LoadError> {
        // SAFETY: if present, the symbol is the driver's `cuDriverGetVersion`, whose C signature
        // is `CUresult (int *)`.
        let get_version = unsafe { library.get::<DriverGetVersion>(c"cuDriverGetVersion") }
            .map(|symbol| *symbol)
            .map_err(|_| LoadError::MissingBootstrap {
                library: library_name.clone(),
                symbol: "cuDriverGetVersion",
            })?;
        // SAFETY: if present, the symbol is the driver's `cuGetProcAddress_v2`, whose C signature
        // is `CUresult (const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *)`.
        let get_proc_address = unsafe { library.get::<GetProcAddress>(c"cuGetProcAddress_v2") }
            .ok()
            .map(|symbol| *symbol);

        let version = query_version(get_version, &library_name)?;
        let flags = if per_thread_default_stream {
            CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
        } else {
            CU_GET_PROC_ADDRESS_LEGACY_STREAM
        };
        let by_symbol = get_proc_address.is_none();
        let resolve = |entry: &EntryPoint| match (
            get_proc_address,
            entry.proc_address_for(per_thread_default_stream),
        ) {
            (Some(get_proc_address), Some((name, version))) => {
                resolve(get_proc_address, name, version, flags)
            }
            _ => {
                // Some `_ptsz` names the header declares are not exported (the real driver has
                // no `cuGetProcAddress_v2_ptsz`): the plain symbol serves both.
                let per_thread = match entry.per_thread_symbol {
                    Some(symbol) if per_thread_default_stream => lookup_symbol(&library, symbol),
                    _ => ptr::null_mut(),
                };
                if per_thread.is_null() {
                    lookup_symbol(&library, entry.symbol)
                } else {
                    per_thread
                }
            }
        };
        // SAFETY: each address is resolved for its entry at the ABI version the header declares
        // (or by the header's exported symbol name) from the library kept with the table.
        let mut driver =
            unsafe { Driver::assemble(library_name, version, per_thread_default_stream, resolve) };
        driver._library = Some(library);
        if by_symbol {
            log::debug!(
                "{}: resolved by symbol name (no cuGetProcAddress_v2)",
                driver.library_name
            );
        }
        Ok(driver)
    }

    /// A driver table whose entry points come from `resolve`, which answers each entry point the
    /// header declares with its address, or null where it has none. Entry points whose ABI is
    /// newer than `version` are not asked for: they need a newer driver.
    ///
    /// This is the seam for a driver made of something other than a library this crate opens:
    /// test fakes written in Rust, or a `libcuda` another library already opened (resolve through
    /// its `cuGetProcAddress_v2`, as [`Driver::from_get_proc_address`] does). `name` is what
    /// [`library_name`](Driver::library_name) reports.
    ///
    /// # Safety
    /// 1. Every non-null address `resolve` returns for an entry point must be a function with the
    ///    C signature `cuda.h` declares for that entry point's `symbol`, behaving as the CUDA
    ///    driver API documents it (or, for a fake, as its callers may rely on).
    /// 2. Those functions must stay callable, from any thread, for as long as the returned
    ///    `Driver` and anything made from it live.
    pub unsafe fn from_resolver(
        name: impl Into<String>,
        version: i32,
        resolve: impl FnMut(&EntryPoint) -> *mut c_void,
    ) -> Driver {
        // SAFETY: per the caller.
        unsafe { Driver::assemble(name.into(), version, false, resolve) }
    }

    /// A driver table resolved through the `cuGetProcAddress_v2` of a driver library another
    /// library already opened (the CUDA runtime, cudarc, a C library), so that both use the same
    /// `libcuda` without opening it twice. The driver's version comes from its
    /// `cuDriverGetVersion`, resolved through `get_proc_address` too.
    ///
    /// # Errors
    /// [`LoadError::MissingBootstrap`] when `get_proc_address` does not give
    /// `cuDriverGetVersion`; the errors of [`Driver::open`] about the version.
    ///
    /// # Safety
    /// 1. `get_proc_address` must be the driver's `cuGetProcAddress_v2` (the C signature
    ///    `CUresult (const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *)`),
    ///    and every pointer it returns must be the entry point it names, at the version asked.
    /// 2. The library it belongs to must stay loaded for as long as the returned `Driver` and
    ///    anything made from it live.
    pub unsafe fn from_get_proc_address(
        get_proc_address: unsafe extern "C" fn(
            *const c_char,
            *mut *mut c_void,
            c_int,
            u64,
            *mut c_int,
        ) -> CUresult,
        per_thread_default_stream: bool,
    ) -> Result<Driver, LoadError> {
        const NAME: &str = "the driver another library opened";
        let flags = if per_thread_default_stream {
            CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
        } else {
            CU_GET_PROC_ADDRESS_LEGACY_STREAM
        };
        let get_version = resolve(get_proc_address, c"cuDriverGetVersion", 2020, flags);
        if get_version.is_null() {
            return Err(LoadError::MissingBootstrap {
                library: NAME.to_owned(),
                symbol: "cuDriverGetVersion",
            });
        }
        // SAFETY: the driver's `cuDriverGetVersion` (per the caller's `get_proc_address`).
        let get_version: DriverGetVersion = unsafe { std::mem::transmute(get_version) };
        let version = query_version(get_version, NAME)?;
        let resolve = |entry: &EntryPoint| match entry.proc_address_for(per_thread_default_stream) {
            Some((name, version)) => resolve(get_proc_address, name, version, flags),
            None => ptr::null_mut(),
        };
        // SAFETY: per the caller: the addresses come from the driver's own resolver.
        Ok(unsafe {
            Driver::assemble(NAME.to_owned(), version, per_thread_default_stream, resolve)
        })
    }

    /// Builds the table from `resolve`.
    ///
    /// # Safety
    /// As [`Driver::from_resolver`].
    unsafe fn assemble(
        library_name: String,
        version: i32,
        per_thread_default_stream: bool,
        mut resolve: impl FnMut(&EntryPoint) -> *mut c_void,
    ) -> Driver {
        let mut addresses = vec![ptr::null_mut::<c_void>(); ENTRY_POINT_COUNT];
        let mut availability = vec![Availability::NotInDriver; ENTRY_POINT_COUNT];
        for (index, entry) in ENTRY_POINTS.iter().enumerate() {
            if let Some((_, required)) = entry.proc_address_for(per_thread_default_stream)
                && required as i64 > i64::from(version)
            {
                // Asking would be answered CUDA_ERROR_INVALID_VALUE: the ABI is newer than the
                // driver.
                availability[index] = Availability::NeedsNewerDriver { required };
                continue;
            }
            let address = resolve(entry);
            if !address.is_null() {
                addresses[index] = address;
                availability[index] = Availability::Available;
            }
        }
        let addresses: Box<[*mut c_void; ENTRY_POINT_COUNT]> = addresses
            .into_boxed_slice()
            .try_into()
            .expect("one address per entry point");
        // SAFETY: each non-null address is the entry at its index (per the caller).
        let functions = unsafe { DriverFunctions::from_addresses(&addresses) };
        let driver = Driver {
            _library: None,
            library_name,
            version,
            per_thread_default_stream,
            functions,
            addresses: addresses.iter().map(|address| address.addr()).collect(),
            availability: availability.into_boxed_slice(),
            missing_reported: (0..ENTRY_POINT_COUNT)
                .map(|_| AtomicBool::new(false))
                .collect(),
        };
        log::debug!(
            "loaded {} (CUDA {}): {} of {} entry points available",
            driver.library_name,
            crate::version_text(version),
            driver.available_count(),
            ENTRY_POINT_COUNT,
        );
        driver
    }

    /// The driver's version as `cuDriverGetVersion` reports it, e.g. `13000` for CUDA 13.0.
    pub fn version(&self) -> i32 {
        self.version
    }

    /// The name or path the library was opened by.
    pub fn library_name(&self) -> &str {
        &self.library_name
    }

    /// Whether stream entry points were resolved for the per-thread default stream.
    pub fn per_thread_default_stream(&self) -> bool {
        self.per_thread_default_stream
    }

    /// The table of function pointers, `None` where the driver lacks the entry point.
    #[inline]
    pub fn functions(&self) -> &DriverFunctions {
        &self.functions
    }

    /// Whether this driver has the entry point with the header's symbol name (e.g.
    /// `"cuLaunchHostFunc_v2"`); `None` for a name the header does not declare.
    pub fn availability(&self, symbol: &str) -> Option<Availability> {
        ENTRY_POINTS
            .iter()
            .position(|entry| entry.symbol.to_bytes() == symbol.as_bytes())
            .map(|index| self.availability[index])
    }

    /// Every entry point with its availability and resolved address (null when unavailable).
    pub fn entry_points(
        &self,
    ) -> impl ExactSizeIterator<Item = (&'static EntryPoint, Availability, *const c_void)> + '_
    {
        ENTRY_POINTS
            .iter()
            .zip(self.availability.iter().zip(self.addresses.iter()))
            .map(|(entry, (availability, address))| {
                (entry, *availability, ptr::without_provenance(*address))
            })
    }

    fn available_count(&self) -> usize {
        self.availability
            .iter()
            .filter(|a| a.is_available())
            .count()
    }

    /// Turns a driver answer into a `Result`, naming `call` (the entry point's symbol) when it
    /// failed, and telling an unavailable entry point apart from a driver error.
    ///
    /// # Errors
    /// [`Error::EntryPointUnavailable`] when `result` is `CUDA_ERROR_NOT_FOUND` and this driver
    /// lacks `call`; otherwise [`Error::Driver`] for any result but `CUDA_SUCCESS`.
    #[inline]
    pub fn check(&self, call: &'static str, result: CUresult) -> Result<(), Error> {
        if result == CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            self.failed(call, result)
        }
    }

    /// [`check`](Self::check) of a result other than `CUDA_SUCCESS`: kept out of line, so that
    /// a checked call that succeeds costs a comparison.
    #[cold]
    #[inline(never)]
    fn failed(&self, call: &'static str, result: CUresult) -> Result<(), Error> {
        if result == CUresult::CUDA_ERROR_NOT_FOUND
            && let Some(availability) = self.availability(call)
            && !availability.is_available()
        {
            return Err(Error::EntryPointUnavailable {
                entry_point: call,
                driver_version: self.version,
                availability,
            });
        }
        Err(Error::Driver {
            call,
            result,
            description: self.error_description(result),
        })
    }

    /// The driver's message for `result` (`cuGetErrorString`), or the header's description when
    /// the driver has none for it.
    pub fn error_description(&self, result: CUresult) -> String {
        let mut text: *const c_char = ptr::null();
        // SAFETY: `text` is a valid out-pointer; the driver stores a pointer to a static string.
        let answer = unsafe { self.cuGetErrorString(result, &mut text) };
        if answer == CUresult::CUDA_SUCCESS && !text.is_null() {
            // SAFETY: on success the driver stored a NUL-terminated static string.
            return unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned();
        }
        result.description().to_owned()
    }

    /// What a call of an entry point the driver lacks answers: logs once per entry point, then
    /// `CUDA_ERROR_NOT_FOUND`.
    #[cold]
    #[inline(never)]
    pub(crate) fn missing_entry_point(&self, index: usize) -> CUresult {
        if !self.missing_reported[index].swap(true, Ordering::Relaxed) {
            log::warn!(
                "{} was called but is unavailable in {} (CUDA {} driver): {}",
                ENTRY_POINTS[index].name(),
                self.library_name,
                crate::version_text(self.version),
                self.availability[index]
            );
        }
        CUresult::CUDA_ERROR_NOT_FOUND
    }
}

/// The driver's version from its `cuDriverGetVersion`, checked against the minimum.
fn query_version(get_version: DriverGetVersion, library: &str) -> Result<i32, LoadError> {
    let mut version: c_int = 0;
    // SAFETY: `version` is a valid `int` to write; the function needs no initialisation.
    let result = unsafe { get_version(&mut version) };
    match result {
        CUresult::CUDA_SUCCESS => {}
        CUresult::CUDA_ERROR_STUB_LIBRARY => {
            return Err(LoadError::StubLibrary {
                library: library.to_owned(),
            });
        }
        result => {
            return Err(LoadError::VersionQuery {
                library: library.to_owned(),
                result,
            });
        }
    }
    if version < MINIMUM_DRIVER_VERSION {
        return Err(LoadError::DriverTooOld {
            library: library.to_owned(),
            found: version,
            required: MINIMUM_DRIVER_VERSION,
        });
    }
    Ok(version)
}

fn resolve(get_proc_address: GetProcAddress, name: &CStr, version: u32, flags: u64) -> *mut c_void {
    let mut address = ptr::null_mut();
    let mut symbol_status: c_int = 0;
    let Ok(version) = c_int::try_from(version) else {
        return ptr::null_mut();
    };
    // SAFETY: `name` is NUL-terminated and both out-pointers are valid for writes.
    let result = unsafe {
        get_proc_address(
            name.as_ptr(),
            &mut address,
            version,
            flags,
            &mut symbol_status,
        )
    };
    if result == CUresult::CUDA_SUCCESS {
        address
    } else {
        ptr::null_mut()
    }
}

fn lookup_symbol(library: &libloading::Library, symbol: &CStr) -> *mut c_void {
    // SAFETY: the address is only read here, never dereferenced; it is called later through the
    // ABI the header declares for this exported name.
    unsafe {
        library
            .get::<*mut c_void>(symbol)
            .ok()
            .and_then(|symbol| symbol.try_as_raw_ptr())
            .unwrap_or(ptr::null_mut())
    }
}

static PROCESS_DRIVER: OnceLock<Result<Arc<Driver>, LoadError>> = OnceLock::new();

/// The process-wide driver, loaded on first use with [`LoadOptions::default`] (or the options
/// given to [`init_driver`] before).
///
/// Safe, unlike [`Driver::open`]: it opens only the library `CUDA_SYS_LIBCUDA` names or the one
/// the platform loader finds under the driver's own names, which is the user's configuration of
/// this process, as `LD_LIBRARY_PATH` is.
///
/// # Errors
/// The [`LoadError`] of the first attempt; the load is not retried.
pub fn driver() -> Result<&'static Arc<Driver>, &'static LoadError> {
    PROCESS_DRIVER
        // SAFETY: the default options name `CUDA_SYS_LIBCUDA`, else `libcuda.so.1` and
        // `libcuda.so` as the platform loader finds them: the user's own configuration, trusted
        // for the driver as `LD_LIBRARY_PATH` is trusted for every library the process loads.
        // Safe code cannot name another library here.
        .get_or_init(|| unsafe { load_process_driver(&LoadOptions::default()) })
        .as_ref()
}

/// Loads the process-wide driver with `options`, unless it is loaded already; then the loaded
/// one is returned and `options` are ignored.
///
/// # Errors
/// The [`LoadError`] of the first attempt.
///
/// # Safety
/// As for [`Driver::load`]: each library of `options` must meet the obligations of
/// [`Driver::open`]. The driver loaded becomes the one every caller of [`driver`] and of the
/// C-like free functions calls into.
///
/// ```compile_fail,E0133
/// let driver = cuda_host_sys::init_driver(&cuda_host_sys::LoadOptions::default());
/// ```
pub unsafe fn init_driver(
    options: &LoadOptions,
) -> Result<&'static Arc<Driver>, &'static LoadError> {
    PROCESS_DRIVER
        // SAFETY: the caller's obligations for `options` are those of `Driver::load`.
        .get_or_init(|| unsafe { load_process_driver(options) })
        .as_ref()
}

/// # Safety
/// As for [`Driver::load`].
unsafe fn load_process_driver(options: &LoadOptions) -> Result<Arc<Driver>, LoadError> {
    // SAFETY: passed on from the caller.
    unsafe { Driver::load(options) }
        .map(Arc::new)
        .inspect_err(|error| {
            log::error!("the process-wide CUDA driver could not be loaded: {error}");
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn fake_init(_flags: std::ffi::c_uint) -> CUresult {
        CUresult::CUDA_ERROR_NO_DEVICE
    }

    unsafe extern "C" fn fake_driver_get_version(version: *mut c_int) -> CUresult {
        // SAFETY: the caller passes a valid out-pointer.
        unsafe { version.write(12_000) };
        CUresult::CUDA_SUCCESS
    }

    /// A driver whose `cuInit` answers "no device" and that has nothing else.
    fn fake() -> Driver {
        // SAFETY: the only address handed out is `fake_init`, which has `cuInit`'s signature and
        // lives as long as the program.
        unsafe {
            Driver::from_resolver("fake", 12_000, |entry| {
                if entry.symbol == c"cuInit" {
                    fake_init as *mut c_void
                } else {
                    ptr::null_mut()
                }
            })
        }
    }

    #[test]
    fn a_driver_from_a_resolver_calls_what_it_resolved_and_nothing_else() {
        let driver = fake();
        assert_eq!(driver.library_name(), "fake");
        assert_eq!(driver.version(), 12_000);
        // SAFETY: no pointer arguments.
        assert_eq!(unsafe { driver.cuInit(0) }, CUresult::CUDA_ERROR_NO_DEVICE);
        assert_eq!(driver.availability("cuInit"), Some(Availability::Available));
        let mut count = 7;
        // SAFETY: a valid out-pointer; the entry is missing, so nothing is written.
        let missing = unsafe { driver.cuDeviceGetCount(&mut count) };
        assert_eq!(missing, CUresult::CUDA_ERROR_NOT_FOUND);
        assert_eq!(count, 7);
        assert_eq!(
            driver.availability("cuDeviceGetCount"),
            Some(Availability::NotInDriver)
        );
        assert!(matches!(
            driver.check("cuDeviceGetCount", missing),
            Err(Error::EntryPointUnavailable { .. })
        ));
    }

    #[test]
    fn a_resolver_is_never_asked_for_an_abi_newer_than_its_version() {
        let mut asked = Vec::new();
        // SAFETY: nothing is resolved, so nothing can be called wrongly.
        let driver = unsafe {
            Driver::from_resolver("fake", 12_000, |entry| {
                asked.push(entry.name());
                ptr::null_mut()
            })
        };
        assert!(asked.contains(&"cuInit"));
        assert!(
            !asked.contains(&"cuLaunchHostFunc_v2"),
            "asked for a CUDA 13.1 ABI from a 12.0 driver"
        );
        assert_eq!(
            driver.availability("cuLaunchHostFunc_v2"),
            Some(Availability::NeedsNewerDriver { required: 13010 })
        );
    }

    unsafe extern "C" fn fake_get_proc_address(
        name: *const c_char,
        address: *mut *mut c_void,
        _version: c_int,
        _flags: u64,
        status: *mut c_int,
    ) -> CUresult {
        // SAFETY: the caller passes a NUL-terminated name and valid out-pointers.
        let (name, address, status) =
            unsafe { (CStr::from_ptr(name), &mut *address, &mut *status) };
        *address = if name == c"cuDriverGetVersion" {
            fake_driver_get_version as *mut c_void
        } else if name == c"cuInit" {
            fake_init as *mut c_void
        } else {
            ptr::null_mut()
        };
        *status = i32::from(address.is_null());
        if address.is_null() {
            CUresult::CUDA_ERROR_NOT_FOUND
        } else {
            CUresult::CUDA_SUCCESS
        }
    }

    #[test]
    fn a_driver_another_library_opened_is_resolved_through_its_proc_address() {
        // SAFETY: the fake resolver hands out functions with the signatures of the names asked.
        let driver = unsafe { Driver::from_get_proc_address(fake_get_proc_address, false) }
            .expect("the fake resolves cuDriverGetVersion");
        assert_eq!(driver.version(), 12_000);
        // SAFETY: no pointer arguments.
        assert_eq!(unsafe { driver.cuInit(0) }, CUresult::CUDA_ERROR_NO_DEVICE);
        assert_eq!(
            driver.availability("cuStreamCreate"),
            Some(Availability::NotInDriver)
        );
    }
}

//! NVTX ranges and marks (feature `nvtx`): the client side of NVTX's injection protocol, in
//! Rust, with nothing linked at build time.
//!
//! **The protocol** (NVTX v3: `nvtxInit.h` and `nvtxTypes.h` among NVIDIA's header-only NVTX
//! sources). A profiler names its injection library in `NVTX_INJECTION64_PATH`; the client opens
//! it, calls its `InitializeInjectionNvtx2` with the client's export-table getter, and the library
//! asks the getter for the callbacks table (`NVTX_ETID_CALLBACKS`, 1), whose
//! `GetModuleFunctionTable` hands it, per module (core, core2, CUDA, OpenCL, CUDA runtime, sync),
//! an array of addresses of the client's function-pointer slots; it writes its functions into the
//! slots it implements and returns non-zero. The client then calls through the slots; a null
//! slot is a call the profiler does not want. Here the first launch of the process (a caller's
//! thread, never a host function's) reads the variable and, when it is set, opens the library
//! with libloading and initializes it, once; absent, nothing is opened and nothing happens;
//! failing to load or to initialize, one log line says why and nothing happens. The library is
//! never closed: its functions stay in the slots.
//!
//! **What is called.** A domain `cuda-host` (`nvtxDomainCreateA`) with its categories named
//! (host function, graph host node, polled engine, release points, future points); ranges are
//! pushed and popped on the thread that runs (`nvtxDomainRangePushEx` / `nvtxDomainRangePop`)
//! and points are marks (`nvtxDomainMarkEx`, a count or a stream id as payload), each message an
//! ASCII string copied into a buffer on the stack (a `&'static str` has no terminating NUL; the
//! profiler copies what it keeps during the call), so nothing is allocated. A profiler without
//! the domain calls gets the core ones (`nvtxRangePushEx`, `nvtxRangePop`, `nvtxMarkEx`).
//!
//! **Why not a crate.** The `nvtx` crate compiles NVIDIA's C sources with `cc` into every build
//! (a C compiler for every user) and allocates a `CString` for each range; the protocol is small
//! enough to speak from Rust, as `libcuda` is opened here.
//!
//! **Cost.** With no profiler, an observation is the load of [`API`]'s once-state.

use crate::contain::logged;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::ptr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

/// The categories of cuda-host's domain.
#[derive(Debug, Clone, Copy)]
pub(super) enum Category {
    HostFunction = 1,
    GraphNode = 2,
    Engine = 3,
    ReleasePoints = 4,
    FuturePoints = 5,
}

impl Category {
    const NAMED: [(Category, &'static CStr); 5] = [
        (Category::HostFunction, c"host function"),
        (Category::GraphNode, c"graph host node"),
        (Category::Engine, c"polled engine"),
        (Category::ReleasePoints, c"release in stream order"),
        (Category::FuturePoints, c"stream point future"),
    ];

    pub(super) fn of(points: super::Points) -> Category {
        match points {
            super::Points::Release => Category::ReleasePoints,
            super::Points::Future => Category::FuturePoints,
        }
    }
}

// The modules' sizes and the callback ids cuda-host uses (`NvtxCallbackModule`,
// `NvtxCallbackIdCore`, `NvtxCallbackIdCore2`).
const MODULE_CORE: c_int = 1;
const MODULE_SIZES: [usize; 6] = [16, 9, 15, 7, 16, 7];
const CORE_MARK_EX: usize = 1;
const CORE_RANGE_PUSH_EX: usize = 8;
const CORE_RANGE_POP: usize = 11;
const CORE_NAME_CATEGORY_A: usize = 12;
const MODULE_CORE2: c_int = 5;
const CORE2_DOMAIN_MARK_EX: usize = 1;
const CORE2_DOMAIN_RANGE_PUSH_EX: usize = 4;
const CORE2_DOMAIN_RANGE_POP: usize = 5;
const CORE2_DOMAIN_NAME_CATEGORY_A: usize = 8;
const CORE2_DOMAIN_CREATE_A: usize = 12;
const EXPORT_TABLE_CALLBACKS: u32 = 1;
const EXPORT_TABLE_VERSION_INFO: u32 = 3;
const NVTX_VERSION: u16 = 3;
const MESSAGE_TYPE_ASCII: i32 = 1;
const PAYLOAD_TYPE_UNSIGNED_INT64: i32 = 1;

/// `nvtxEventAttributes_v2`.
#[repr(C)]
struct EventAttributes {
    version: u16,
    size: u16,
    category: u32,
    color_type: i32,
    color: u32,
    payload_type: i32,
    reserved0: i32,
    payload: u64,
    message_type: i32,
    message: *const c_char,
}

const _: () = assert!(size_of::<EventAttributes>() == 48);

/// `NvtxExportTableCallbacks`.
#[repr(C)]
struct CallbacksTable {
    struct_size: usize,
    get_module_function_table:
        unsafe extern "C" fn(c_int, *mut *const *mut AtomicPtr<c_void>, *mut c_uint) -> c_int,
}

/// `NvtxExportTableVersionInfo`.
#[repr(C)]
struct VersionInfoTable {
    struct_size: usize,
    version: u32,
    reserved0: u32,
    set_injection_nvtx_version: unsafe extern "C" fn(u32),
}

static CALLBACKS: CallbacksTable = CallbacksTable {
    struct_size: size_of::<CallbacksTable>(),
    get_module_function_table: nvtx_get_module_function_table,
};

static VERSION_INFO: VersionInfoTable = VersionInfoTable {
    struct_size: size_of::<VersionInfoTable>(),
    version: NVTX_VERSION as u32,
    reserved0: 0,
    set_injection_nvtx_version: nvtx_set_injection_version,
};

/// The function-pointer slots of every module (index 0 unused, as in NVTX's own).
struct Slots([[AtomicPtr<c_void>; 17]; 6]);

static SLOTS: Slots = Slots([const { [const { AtomicPtr::new(ptr::null_mut()) }; 17] }; 6]);

/// Per module, the addresses of its slots as `GetModuleFunctionTable` hands them out: null at
/// index 0 and after the last.
struct SlotAddresses([[*mut AtomicPtr<c_void>; 18]; 6]);

// SAFETY: addresses of statics, never written after they were made.
unsafe impl Send for SlotAddresses {}
// SAFETY: as for `Send`.
unsafe impl Sync for SlotAddresses {}

fn slot_addresses() -> &'static SlotAddresses {
    static ADDRESSES: OnceLock<SlotAddresses> = OnceLock::new();
    ADDRESSES.get_or_init(|| {
        let mut addresses = SlotAddresses([[ptr::null_mut(); 18]; 6]);
        for (module, size) in MODULE_SIZES.iter().enumerate() {
            for index in 1..*size {
                addresses.0[module][index] = ptr::from_ref(&SLOTS.0[module][index]).cast_mut();
            }
        }
        addresses
    })
}

/// `nvtxGetExportTable`: the tables the injection library asks for.
unsafe extern "C" fn nvtx_get_export_table(id: u32) -> *const c_void {
    match id {
        EXPORT_TABLE_CALLBACKS => ptr::from_ref(&CALLBACKS).cast(),
        EXPORT_TABLE_VERSION_INFO => ptr::from_ref(&VERSION_INFO).cast(),
        _ => ptr::null(),
    }
}

/// `GetModuleFunctionTable`: the slots of `module`, and how many there are.
///
/// # Safety
/// Each out-pointer is null or valid for a write.
unsafe extern "C" fn nvtx_get_module_function_table(
    module: c_int,
    table: *mut *const *mut AtomicPtr<c_void>,
    size: *mut c_uint,
) -> c_int {
    let Some(index) = usize::try_from(module)
        .ok()
        .and_then(|module| module.checked_sub(1))
        .filter(|index| *index < MODULE_SIZES.len())
    else {
        return 0;
    };
    // SAFETY: per the caller, each is null or valid for a write.
    unsafe {
        if let Some(size) = size.as_mut() {
            *size = MODULE_SIZES[index] as c_uint;
        }
        if let Some(table) = table.as_mut() {
            *table = slot_addresses().0[index].as_ptr();
        }
    }
    1
}

/// `SetInjectionNvtxVersion`: reserved for clients that must refuse some profilers; unused.
unsafe extern "C" fn nvtx_set_injection_version(_version: u32) {}

/// The slot of `module`'s call `index`, as a function of type `F`.
///
/// # Safety
/// `F` must be the function type the NVTX headers declare for that call.
unsafe fn slot<F: Copy>(module: c_int, index: usize) -> Option<F> {
    const { assert!(size_of::<F>() == size_of::<*mut c_void>()) };
    let function = SLOTS.0[(module - 1) as usize][index].load(Ordering::Acquire);
    // SAFETY: a non-null slot holds the injection library's function of the type the headers
    // declare for it (per the caller), of the size of a pointer.
    (!function.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&function) })
}

type DomainCreate = unsafe extern "C" fn(*const c_char) -> *mut c_void;
type DomainNameCategory = unsafe extern "C" fn(*mut c_void, u32, *const c_char);
type DomainPush = unsafe extern "C" fn(*mut c_void, *const EventAttributes) -> c_int;
type DomainPop = unsafe extern "C" fn(*mut c_void) -> c_int;
type DomainMark = unsafe extern "C" fn(*mut c_void, *const EventAttributes);
type NameCategory = unsafe extern "C" fn(u32, *const c_char);
type Push = unsafe extern "C" fn(*const EventAttributes) -> c_int;
type Pop = unsafe extern "C" fn() -> c_int;
type Mark = unsafe extern "C" fn(*const EventAttributes);

/// The calls of an attached profiler: its domain's, or its core ones.
enum Api {
    Domain {
        domain: *mut c_void,
        push: DomainPush,
        pop: DomainPop,
        mark: Option<DomainMark>,
    },
    Core {
        push: Push,
        pop: Pop,
        mark: Option<Mark>,
    },
}

// SAFETY: the domain handle is the profiler's, valid on every thread for the process's life.
unsafe impl Send for Api {}
// SAFETY: as for `Send`; the functions are thread-safe by NVTX's contract.
unsafe impl Sync for Api {}

/// Set once a profiler attached.
static API: OnceLock<Api> = OnceLock::new();
/// Set by the first [`prepare`].
static PREPARED: AtomicBool = AtomicBool::new(false);

/// Opens and initializes the injection library once, on a caller's thread, when
/// `NVTX_INJECTION64_PATH` names one.
#[inline]
pub(super) fn prepare() {
    if !PREPARED.load(Ordering::Relaxed) && !PREPARED.swap(true, Ordering::AcqRel) {
        attach();
    }
}

fn attach() {
    let Some(path) = std::env::var_os("NVTX_INJECTION64_PATH") else {
        logged!(debug!(
            "NVTX_INJECTION64_PATH is not set: no NVTX profiler to attach"
        ));
        return;
    };
    // SAFETY: the library a profiler asks its client to load, by NVTX's protocol; its
    // initializers are the profiler's.
    let library = match unsafe { libloading::Library::new(&path) } {
        Ok(library) => library,
        Err(error) => {
            logged!(warn!(
                "NVTX_INJECTION64_PATH ({}) does not load, no NVTX ranges: {error}",
                path.display()
            ));
            return;
        }
    };
    type Initialize = unsafe extern "C" fn(unsafe extern "C" fn(u32) -> *const c_void) -> c_int;
    // SAFETY: `InitializeInjectionNvtx2` has this type by NVTX's protocol.
    let initialize = match unsafe { library.get::<Initialize>(b"InitializeInjectionNvtx2\0") } {
        Ok(initialize) => *initialize,
        Err(error) => {
            logged!(warn!(
                "the NVTX injection library {} has no InitializeInjectionNvtx2, no NVTX ranges: \
                 {error}",
                path.display()
            ));
            return;
        }
    };
    // Kept open for good: its functions are in the slots.
    std::mem::forget(library);
    let initialized = super::observe(|| {
        // SAFETY: the protocol's call, with the export-table getter of this client.
        unsafe { initialize(nvtx_get_export_table) }
    });
    if initialized.is_none_or(|status| status == 0) {
        logged!(warn!(
            "the NVTX injection library {} refused to initialize, no NVTX ranges",
            path.display()
        ));
        return;
    }
    let Some(api) = super::observe(api_of_slots).flatten() else {
        logged!(warn!(
            "the NVTX injection library {} implements no range calls, no NVTX ranges",
            path.display()
        ));
        return;
    };
    let _ = API.set(api);
    logged!(debug!("NVTX ranges go to {}", path.display()));
}

/// The calls the profiler put in the slots, with cuda-host's domain made and its categories
/// named.
fn api_of_slots() -> Option<Api> {
    // SAFETY: each slot is read as the type the headers declare for its call.
    unsafe {
        if let (Some(create), Some(push), Some(pop)) = (
            slot::<DomainCreate>(MODULE_CORE2, CORE2_DOMAIN_CREATE_A),
            slot::<DomainPush>(MODULE_CORE2, CORE2_DOMAIN_RANGE_PUSH_EX),
            slot::<DomainPop>(MODULE_CORE2, CORE2_DOMAIN_RANGE_POP),
        ) {
            let domain = create(c"cuda-host".as_ptr());
            if let Some(name) =
                slot::<DomainNameCategory>(MODULE_CORE2, CORE2_DOMAIN_NAME_CATEGORY_A)
            {
                for (category, text) in Category::NAMED {
                    name(domain, category as u32, text.as_ptr());
                }
            }
            return Some(Api::Domain {
                domain,
                push,
                pop,
                mark: slot::<DomainMark>(MODULE_CORE2, CORE2_DOMAIN_MARK_EX),
            });
        }
        let (push, pop) = (
            slot::<Push>(MODULE_CORE, CORE_RANGE_PUSH_EX)?,
            slot::<Pop>(MODULE_CORE, CORE_RANGE_POP)?,
        );
        if let Some(name) = slot::<NameCategory>(MODULE_CORE, CORE_NAME_CATEGORY_A) {
            for (category, text) in Category::NAMED {
                name(category as u32, text.as_ptr());
            }
        }
        Some(Api::Core {
            push,
            pop,
            mark: slot::<Mark>(MODULE_CORE, CORE_MARK_EX),
        })
    }
}

/// Calls `call` with the attributes of an event of `category` named `message` (copied, with a
/// terminating NUL, into a buffer on the stack; cut to at most 255 bytes, between characters)
/// and carrying `payload`.
fn with_attributes<R>(
    category: Category,
    message: &str,
    payload: Option<u64>,
    call: impl FnOnce(&EventAttributes) -> R,
) -> R {
    let mut text = [0u8; 256];
    let mut length = message.len().min(text.len() - 1);
    // Between characters: what the profiler gets stays text.
    while !message.is_char_boundary(length) {
        length -= 1;
    }
    text[..length].copy_from_slice(&message.as_bytes()[..length]);
    let attributes = EventAttributes {
        version: NVTX_VERSION,
        size: size_of::<EventAttributes>() as u16,
        category: category as u32,
        color_type: 0,
        color: 0,
        payload_type: if payload.is_some() {
            PAYLOAD_TYPE_UNSIGNED_INT64
        } else {
            0
        },
        reserved0: 0,
        payload: payload.unwrap_or(0),
        message_type: MESSAGE_TYPE_ASCII,
        message: text.as_ptr().cast(),
    };
    call(&attributes)
}

/// A range pushed on this thread, popped by [`Range::pop`].
pub(super) struct Range {
    pushed: bool,
}

impl Range {
    /// Pushes a range of `category` named `name`, when a profiler is attached.
    #[inline]
    pub(super) fn push(category: Category, name: &'static str) -> Range {
        let Some(api) = API.get() else {
            return Range { pushed: false };
        };
        let pushed = super::observe(|| {
            with_attributes(category, name, None, |attributes| match api {
                // SAFETY: the profiler's calls, with its domain and valid attributes.
                Api::Domain { domain, push, .. } => unsafe { push(*domain, attributes) },
                // SAFETY: as above.
                Api::Core { push, .. } => unsafe { push(attributes) },
            })
        })
        .is_some();
        Range { pushed }
    }

    /// Pops the range, if it was pushed.
    #[inline]
    pub(super) fn pop(self) {
        if let (true, Some(api)) = (self.pushed, API.get()) {
            super::observe(|| match api {
                // SAFETY: the profiler's calls, popping the range this thread pushed.
                Api::Domain { domain, pop, .. } => unsafe { pop(*domain) },
                // SAFETY: as above.
                Api::Core { pop, .. } => unsafe { pop() },
            });
        }
    }
}

/// Marks an event of `category` named `name` with `payload`, when a profiler is attached.
#[inline]
pub(super) fn mark(category: Category, name: &'static str, payload: u64) {
    let Some(api) = API.get() else {
        return;
    };
    super::observe(|| {
        with_attributes(category, name, Some(payload), |attributes| match api {
            Api::Domain {
                domain,
                mark: Some(mark),
                ..
            } => {
                // SAFETY: the profiler's call, with its domain and valid attributes.
                unsafe { mark(*domain, attributes) }
            }
            Api::Core {
                mark: Some(mark), ..
            } => {
                // SAFETY: the profiler's call, with valid attributes.
                unsafe { mark(attributes) }
            }
            _ => {}
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_export_tables_hand_out_every_modules_slots_between_nulls() {
        // SAFETY: the getter takes any id.
        let callbacks = unsafe { nvtx_get_export_table(EXPORT_TABLE_CALLBACKS) };
        assert!(ptr::eq(callbacks.cast(), &CALLBACKS));
        // SAFETY: as above.
        assert!(unsafe { nvtx_get_export_table(2) }.is_null());
        for module in 1..=6 {
            let mut table = ptr::null();
            let mut size = 0;
            // SAFETY: valid out-pointers.
            let found =
                unsafe { (CALLBACKS.get_module_function_table)(module, &mut table, &mut size) };
            assert_eq!(found, 1);
            let size = size as usize;
            assert_eq!(size, MODULE_SIZES[(module - 1) as usize]);
            // SAFETY: the table has `size + 1` entries.
            let entries = unsafe { std::slice::from_raw_parts(table, size + 1) };
            assert!(entries[0].is_null() && entries[size].is_null());
            assert!(entries[1..size].iter().all(|entry| !entry.is_null()));
        }
        // SAFETY: null out-pointers are allowed.
        let unknown =
            unsafe { (CALLBACKS.get_module_function_table)(7, ptr::null_mut(), ptr::null_mut()) };
        assert_eq!(unknown, 0);
    }

    #[test]
    fn a_message_too_long_is_cut_between_characters() {
        // A name is UTF-8 (a type name, or the caller's): cut inside a character, the profiler
        // would get bytes that are no text.
        let message = format!("{}é", "x".repeat(254));
        with_attributes(Category::HostFunction, &message, None, |attributes| {
            // SAFETY: the message is NUL-terminated within its buffer.
            let text = unsafe { CStr::from_ptr(attributes.message) };
            assert_eq!(text.to_str(), Ok("x".repeat(254).as_str()));
        });
    }

    #[test]
    fn a_message_is_copied_with_its_nul_and_cut_when_too_long() {
        let long = "x".repeat(300);
        for (message, expected) in [("decode", 6), (long.as_str(), 255)] {
            with_attributes(Category::HostFunction, message, Some(3), |attributes| {
                // SAFETY: the message is NUL-terminated within its buffer.
                let text = unsafe { CStr::from_ptr(attributes.message) };
                assert_eq!(text.to_bytes().len(), expected);
                assert_eq!(attributes.payload_type, PAYLOAD_TYPE_UNSIGNED_INT64);
                assert_eq!(attributes.category, 1);
            });
        }
    }
}

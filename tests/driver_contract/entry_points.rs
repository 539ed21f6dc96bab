//! Driver entry point access: `cuGetProcAddress` in its first ABI (without the symbol status),
//! which finds what the second finds, and `cuGetExportTable`, the private interface of NVIDIA's
//! own libraries, which the double answers without a table.

use crate::harness::*;
use cuda_host_sys::{CUdriverProcAddress_flags, CUdriverProcAddressQueryResult, CUresult, CUuuid};
use std::ffi::{CStr, c_char, c_int, c_void};
use std::ptr;
use suite::ok;

/// `cuGetProcAddress` of CUDA 11.3, as `cudaTypedefs.h` declares it.
type FirstGetProcAddress =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CUresult;

/// What `cuGetProcAddress_v2` finds for `name` at `version` with `flags`.
fn found_by_v2(name: &CStr, version: c_int, flags: u64) -> *mut c_void {
    let (mut address, mut status) = (ptr::null_mut(), CUdriverProcAddressQueryResult(77));
    // SAFETY: a NUL-terminated name and valid out-pointers.
    ok("cuGetProcAddress_v2", unsafe {
        driver().cuGetProcAddress_v2(name.as_ptr(), &mut address, version, flags, &mut status)
    });
    assert_eq!(
        status,
        CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SUCCESS,
        "{name:?}"
    );
    address
}

#[test]
fn the_first_abi_of_get_proc_address_finds_what_the_second_finds() {
    let _shared = shared();
    let first = found_by_v2(c"cuGetProcAddress", 11030, 0);
    assert!(!first.is_null());
    assert_ne!(first, found_by_v2(c"cuGetProcAddress", 12000, 0));
    // SAFETY: the ABI of CUDA 11.3, which the lookup asked for.
    let first: FirstGetProcAddress = unsafe { std::mem::transmute(first) };
    let per_thread =
        u64::from(CUdriverProcAddress_flags::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.0);
    for (name, version, flags) in [
        (c"cuStreamSynchronize", 2000, 0),
        (c"cuStreamSynchronize", 7000, per_thread),
        (c"cuMemAlloc", 3020, 0),
    ] {
        let mut address = ptr::null_mut();
        // SAFETY: a NUL-terminated name and a valid out-pointer.
        ok("cuGetProcAddress", unsafe {
            first(name.as_ptr(), &mut address, version, flags)
        });
        assert_eq!(
            address,
            found_by_v2(name, version, flags),
            "{name:?} at {version}"
        );
    }
}

#[test]
fn an_export_table_is_answered_with_an_error_and_no_table() {
    const TEST: &str = "an_export_table_is_answered_with_an_error_and_no_table";
    if !suite::test_driver().is_software() {
        return suite::skip(
            TEST,
            "the real driver's export tables are its undocumented interface to NVIDIA's own \
             libraries, which it has",
        );
    }
    let _shared = shared();
    let id = CUuuid { bytes: [0x5a; 16] };
    let mut table: *const c_void = ptr::dangling();
    // SAFETY: valid pointers.
    let result = unsafe { driver().cuGetExportTable(&mut table, &id) };
    assert_eq!(result, CUresult::CUDA_ERROR_NOT_SUPPORTED);
    assert!(table.is_null());
}

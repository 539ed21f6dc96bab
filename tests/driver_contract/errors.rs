//! Errors' names and descriptions, which need no `cuInit`.

use cuda_host_sys::CUresult;
use std::ffi::{CStr, c_char};
use std::ptr;

use crate::harness::driver;

/// `cuGetErrorName` or `cuGetErrorString` (`describe`) of `error`: the answer and the text.
fn text(error: CUresult, describe: bool) -> (CUresult, Option<String>) {
    let mut text: *const c_char = ptr::null();
    // SAFETY: a valid out-pointer.
    let result = unsafe {
        if describe {
            driver().cuGetErrorString(error, &mut text)
        } else {
            driver().cuGetErrorName(error, &mut text)
        }
    };
    // SAFETY: where not null, a NUL-terminated string of the driver's, which it keeps.
    let text = (!text.is_null()).then(|| unsafe { CStr::from_ptr(text) }.to_string_lossy().into());
    (result, text)
}

#[test]
fn an_error_is_named_by_its_enumerator() {
    for (error, name) in [
        (CUresult::CUDA_SUCCESS, "CUDA_SUCCESS"),
        (
            CUresult::CUDA_ERROR_INVALID_VALUE,
            "CUDA_ERROR_INVALID_VALUE",
        ),
        (CUresult::CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY"),
        (
            CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
            "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
        ),
    ] {
        assert_eq!(
            text(error, false),
            (CUresult::CUDA_SUCCESS, Some(name.to_owned()))
        );
    }
}

#[test]
fn an_error_has_a_description() {
    let (result, description) = text(CUresult::CUDA_ERROR_INVALID_VALUE, true);
    assert_eq!(result, CUresult::CUDA_SUCCESS);
    assert!(description.is_some_and(|text| !text.is_empty()));
}

#[test]
fn an_unknown_error_has_no_name_nor_description() {
    let unknown = CUresult(123_456);
    assert_eq!(
        text(unknown, false),
        (CUresult::CUDA_ERROR_INVALID_VALUE, None)
    );
    assert_eq!(
        text(unknown, true),
        (CUresult::CUDA_ERROR_INVALID_VALUE, None)
    );
}

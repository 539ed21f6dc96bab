//! Pointer-valued macros of `cuda.h`, which bindgen does not emit.

use crate::{
    CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT, CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT,
    CU_LAUNCH_PARAM_END_AS_INT, CUdevice, CUstream,
};
use std::ffi::c_void;

/// `CU_STREAM_LEGACY`: the legacy default stream, which synchronises with every blocking stream
/// of its context.
pub const CU_STREAM_LEGACY: CUstream = 0x1 as CUstream;
/// `CU_STREAM_PER_THREAD`: the calling thread's default stream, which synchronises only with the
/// legacy stream.
pub const CU_STREAM_PER_THREAD: CUstream = 0x2 as CUstream;
/// `CU_LAUNCH_PARAM_END`: ends the `extra` array of `cuLaunchKernel`.
pub const CU_LAUNCH_PARAM_END: *mut c_void = CU_LAUNCH_PARAM_END_AS_INT as usize as *mut c_void;
/// `CU_LAUNCH_PARAM_BUFFER_POINTER`: in `extra`, the next entry points to the parameter buffer.
pub const CU_LAUNCH_PARAM_BUFFER_POINTER: *mut c_void =
    CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT as usize as *mut c_void;
/// `CU_LAUNCH_PARAM_BUFFER_SIZE`: in `extra`, the next entry points to the buffer's size.
pub const CU_LAUNCH_PARAM_BUFFER_SIZE: *mut c_void =
    CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT as usize as *mut c_void;
/// `CU_DEVICE_CPU`: the host, where a device ordinal is expected.
pub const CU_DEVICE_CPU: CUdevice = -1;
/// `CU_DEVICE_INVALID`: no device.
pub const CU_DEVICE_INVALID: CUdevice = -2;

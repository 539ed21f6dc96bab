//! Modules and kernels: PTX loaded as a module (from memory, with JIT options, from a file, as a
//! fat binary holding it) or as a library, its functions and variables, their attributes and
//! occupancy, and launches (`cuLaunchKernel`, `cuLaunchKernelEx`, `cuLaunchCooperativeKernel`) in
//! their stream's order. On the software driver the kernels of `kernels/` run the suite's
//! stand-ins (`tests/support/kernels.rs`); the stand-ins' own rules (a library named in
//! `CUSW_STAND_INS`, a kernel without one, a stand-in's error) are tested on it alone.

use crate::harness::*;
use cuda_host::Context;
use cuda_host_sys::{
    CUdeviceptr, CUfunc_cache, CUfunction, CUfunction_attribute, CUjit_option, CUkernel,
    CUlaunchConfig, CUlibrary, CUmodule, CUresult, CUstream,
};
use std::ffi::{CStr, CString, c_void};
use std::ptr;
use suite::kernels::{Kernels, PTX, register_stand_ins};
use suite::{MappedWords, hold_and_release, ok};

/// A module with a variable in global memory and one in constant memory, and a kernel that does
/// nothing: valid PTX for any device since compute capability 5.0.
const VARIABLES_PTX: &CStr = c".version 7.0
.target sm_50
.address_size 64

.visible .global .align 4 .u32 counter = 5;
.visible .const .align 4 .b8 table[8] = {1, 2, 3, 4, 5, 6, 7, 8};

.visible .entry nothing()
{
	ret;
}
";

/// The kernels of `kernels/`, loaded into the current context (stand-ins registered on the
/// software driver).
fn kernels() -> Kernels<'static> {
    register_stand_ins();
    Kernels::load(driver()).expect("the kernels load")
}

fn load(image: *const c_void) -> CUmodule {
    let mut module = ptr::null_mut();
    // SAFETY: a valid out-pointer and an image the caller keeps alive for the call.
    ok("cuModuleLoadData", unsafe {
        driver().cuModuleLoadData(&mut module, image)
    });
    module
}

fn unload(module: CUmodule) {
    // SAFETY: a module loaded above, unloaded once.
    ok("cuModuleUnload", unsafe { driver().cuModuleUnload(module) });
}

fn function(module: CUmodule, name: &CStr) -> CUfunction {
    let mut function = ptr::null_mut();
    // SAFETY: a live module, a valid out-pointer and a NUL-terminated name.
    ok("cuModuleGetFunction", unsafe {
        driver().cuModuleGetFunction(&mut function, module, name.as_ptr())
    });
    function
}

fn attribute(function: CUfunction, attribute: CUfunction_attribute) -> i32 {
    let mut value = -7;
    // SAFETY: a live function and a valid out-pointer.
    ok("cuFuncGetAttribute", unsafe {
        driver().cuFuncGetAttribute(&mut value, attribute, function)
    });
    value
}

fn device_attribute(attribute: cuda_host_sys::CUdevice_attribute) -> i32 {
    let mut value = 0;
    // SAFETY: a valid out-pointer and device 0.
    ok("cuDeviceGetAttribute", unsafe {
        driver().cuDeviceGetAttribute(&mut value, attribute, 0)
    });
    value
}

/// `fill_iota(out, n, mul)` then `add_scalar(out, scalar, n)` on `stream`, in `N` words of device
/// memory, launched by `launch` (a function, its grid and block, the stream, the arguments); the
/// words copied back to mapped memory while the stream is held, then checked.
fn check_launches<const N: usize>(
    context: &Context,
    kernels: &Kernels,
    launch: impl Fn(CUfunction, u32, u32, CUstream, &mut [*mut c_void]),
) {
    let stream = non_blocking(context);
    let (out, scalar) = (DeviceMemory::new(N * 4), DeviceMemory::new(4));
    let words = MappedWords::new(context, N);
    let thousand = 1000u32;
    // SAFETY: one word of the allocation, from a live host word.
    ok("cuMemcpyHtoD_v2", unsafe {
        driver().cuMemcpyHtoD_v2(scalar.0, (&raw const thousand).cast(), 4)
    });
    let synchronized = hold_and_release(
        &stream,
        || {
            let (mut out_address, mut scalar_address, mut n, mut mul) =
                (out.0, scalar.0, N as u32, 3u32);
            let mut arguments = [
                (&raw mut out_address).cast(),
                (&raw mut n).cast(),
                (&raw mut mul).cast(),
            ];
            launch(kernels.fill_iota, 2, 64, stream.as_raw(), &mut arguments);
            let mut arguments = [
                (&raw mut out_address).cast(),
                (&raw mut scalar_address).cast(),
                (&raw mut n).cast(),
            ];
            launch(kernels.add_scalar, 2, 64, stream.as_raw(), &mut arguments);
            // SAFETY: the N words of the allocation into the mapped words, in the stream's order.
            ok("cuMemcpyDtoHAsync_v2", unsafe {
                driver().cuMemcpyDtoHAsync_v2(words.host_address(0), out.0, N * 4, stream.as_raw())
            });
        },
        || {
            assert_eq!(
                words.get(N - 1),
                0,
                "the kernels ran while their stream was held"
            )
        },
        |held| held.synchronize(),
    );
    synchronized.expect("the stream runs the kernels");
    for index in 0..N {
        assert_eq!(words.get(index), index as u32 * 3 + 1000, "word {index}");
    }
}

#[test]
fn launches_run_their_kernels_in_their_streams_order() {
    let _alone = alone();
    let context = current_context();
    let kernels = kernels();
    check_launches::<100>(
        &context,
        &kernels,
        |function, blocks, threads, stream, arguments| {
            // SAFETY: the arguments match the kernel; its memory outlives the stream's work.
            unsafe { kernels.launch(function, blocks, threads, stream, arguments) }
                .expect("cuLaunchKernel");
        },
    );
    check_launches::<100>(
        &context,
        &kernels,
        |function, blocks, threads, stream, arguments| {
            let config = CUlaunchConfig {
                gridDimX: blocks,
                gridDimY: 1,
                gridDimZ: 1,
                blockDimX: threads,
                blockDimY: 1,
                blockDimZ: 1,
                sharedMemBytes: 0,
                hStream: stream,
                attrs: ptr::null_mut(),
                numAttrs: 0,
            };
            // SAFETY: as above.
            ok("cuLaunchKernelEx", unsafe {
                driver().cuLaunchKernelEx(
                    &config,
                    function,
                    arguments.as_mut_ptr(),
                    ptr::null_mut(),
                )
            });
        },
    );
    check_launches::<100>(
        &context,
        &kernels,
        |function, blocks, threads, stream, arguments| {
            // SAFETY: as above; two blocks of 64 threads fit on the device at once.
            ok("cuLaunchCooperativeKernel", unsafe {
                driver().cuLaunchCooperativeKernel(
                    function,
                    blocks,
                    1,
                    1,
                    threads,
                    1,
                    1,
                    0,
                    stream,
                    arguments.as_mut_ptr(),
                )
            });
        },
    );
}

#[test]
fn a_launch_beyond_the_devices_limits_is_refused() {
    let _alone = alone();
    let context = current_context();
    let kernels = kernels();
    let stream = non_blocking(&context);
    let mut ns = 0u64;
    let mut arguments = [(&raw mut ns).cast::<c_void>()];
    for (blocks, threads) in [(1, 2048), (0, 32), (1, 0)] {
        // SAFETY: the arguments match the kernel; the launch is refused.
        let refused = unsafe {
            driver().cuLaunchKernel(
                kernels.spin_ns,
                blocks,
                1,
                1,
                threads,
                1,
                1,
                0,
                stream.as_raw(),
                arguments.as_mut_ptr(),
                ptr::null_mut(),
            )
        };
        assert_eq!(
            refused,
            CUresult::CUDA_ERROR_INVALID_VALUE,
            "{blocks} x {threads}"
        );
    }
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
}

#[test]
fn a_modules_functions_have_its_ptxs_attributes_and_a_name_it_lacks_is_not_found() {
    let _alone = alone();
    let _context = current_context();
    let kernels = kernels();
    let fill_iota = kernels.fill_iota;
    let threads = attribute(
        fill_iota,
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
    );
    assert!((1..=1024).contains(&threads), "{threads}");
    assert!(attribute(fill_iota, CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS) > 0);
    for (which, expected) in [
        (CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, 0),
        (CUfunction_attribute::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, 0),
        (CUfunction_attribute::CU_FUNC_ATTRIBUTE_PTX_VERSION, 75),
        (
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            48 * 1024,
        ),
    ] {
        assert_eq!(attribute(fill_iota, which), expected, "{which:?}");
    }
    let major = device_attribute(
        cuda_host_sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
    );
    let minor = device_attribute(
        cuda_host_sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
    );
    assert_eq!(
        attribute(
            fill_iota,
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_BINARY_VERSION
        ),
        major * 10 + minor
    );
    let dynamic = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
    // SAFETY: a live function; 64 KiB is within an H200's opt-in limit.
    ok("cuFuncSetAttribute", unsafe {
        driver().cuFuncSetAttribute(fill_iota, dynamic, 64 * 1024)
    });
    assert_eq!(attribute(fill_iota, dynamic), 64 * 1024);
    // SAFETY: as above.
    ok("cuFuncSetCacheConfig", unsafe {
        driver().cuFuncSetCacheConfig(fill_iota, CUfunc_cache::CU_FUNC_CACHE_PREFER_L1)
    });

    let ptx = CString::new(PTX).expect("no NUL");
    let module = load(ptx.as_ptr().cast());
    let mut missing = ptr::null_mut();
    // SAFETY: a live module, a valid out-pointer and a NUL-terminated name.
    let result =
        unsafe { driver().cuModuleGetFunction(&mut missing, module, c"no_such_kernel".as_ptr()) };
    assert_eq!(result, CUresult::CUDA_ERROR_NOT_FOUND);
    unload(module);
}

#[test]
fn occupancy_follows_the_devices_limits() {
    let _alone = alone();
    let _context = current_context();
    let kernels = kernels();
    let processors = device_attribute(
        cuda_host_sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
    );
    let mut blocks = -1;
    // SAFETY: a live function and a valid out-pointer.
    ok("cuOccupancyMaxActiveBlocksPerMultiprocessor", unsafe {
        driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut blocks, kernels.fill_iota, 256, 0)
    });
    assert!((1..=32).contains(&blocks), "{blocks} blocks of 256 threads");
    let mut flagged = -1;
    // SAFETY: as above.
    ok(
        "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
        unsafe {
            driver().cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
                &mut flagged,
                kernels.fill_iota,
                256,
                0,
                0,
            )
        },
    );
    assert_eq!(flagged, blocks);
    for with_flags in [false, true] {
        let (mut grid, mut block) = (-1, -1);
        // SAFETY: valid out-pointers and a live function; no size callback.
        ok("cuOccupancyMaxPotentialBlockSize", unsafe {
            if with_flags {
                driver().cuOccupancyMaxPotentialBlockSizeWithFlags(
                    &mut grid,
                    &mut block,
                    kernels.fill_iota,
                    None,
                    0,
                    0,
                    0,
                )
            } else {
                driver().cuOccupancyMaxPotentialBlockSize(
                    &mut grid,
                    &mut block,
                    kernels.fill_iota,
                    None,
                    0,
                    0,
                )
            }
        });
        assert!(
            block > 0 && block <= 1024 && block % 32 == 0,
            "block {block}"
        );
        assert!(
            grid >= processors,
            "grid {grid} on {processors} multiprocessors"
        );
    }
    let mut dynamic = 0;
    // SAFETY: a valid out-pointer and a live function.
    ok("cuOccupancyAvailableDynamicSMemPerBlock", unsafe {
        driver().cuOccupancyAvailableDynamicSMemPerBlock(&mut dynamic, kernels.fill_iota, 1, 256)
    });
    assert!(dynamic >= 48 * 1024, "{dynamic} bytes");
}

#[test]
fn a_modules_variables_hold_their_initial_values() {
    let _alone = alone();
    let _context = current_context();
    let module = load(VARIABLES_PTX.as_ptr().cast());
    let global = |name: &CStr| {
        let (mut address, mut bytes) = (0, 0);
        // SAFETY: a live module, valid out-pointers and a NUL-terminated name.
        ok("cuModuleGetGlobal_v2", unsafe {
            driver().cuModuleGetGlobal_v2(&mut address, &mut bytes, module, name.as_ptr())
        });
        (address, bytes)
    };
    let read = |address: CUdeviceptr, bytes: usize| {
        let mut host = vec![0u8; bytes];
        // SAFETY: the variable's bytes into a host buffer of their size.
        ok("cuMemcpyDtoH_v2", unsafe {
            driver().cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), address, bytes)
        });
        host
    };
    let (counter, bytes) = global(c"counter");
    assert_eq!(bytes, 4);
    assert_eq!(read(counter, 4), 5u32.to_le_bytes());
    let (table, bytes) = global(c"table");
    assert_eq!(read(table, bytes), [1, 2, 3, 4, 5, 6, 7, 8]);
    let mut address = 0;
    // SAFETY: as above.
    let missing = unsafe {
        driver().cuModuleGetGlobal_v2(&mut address, ptr::null_mut(), module, c"none".as_ptr())
    };
    assert_eq!(missing, CUresult::CUDA_ERROR_NOT_FOUND);
    unload(module);
}

/// The same kernels loaded from a file, with JIT options (their logs empty), as a fat binary
/// holding the PTX (`kernels/kernels.fatbin`), and as a library, whose kernel stands for its
/// function; each runs the kernels as cuModuleLoadData's module does.
#[test]
fn ptx_loads_from_a_file_with_options_from_a_fat_binary_and_as_a_library() {
    let _alone = alone();
    let context = current_context();
    register_stand_ins();
    let launch_from = |fill_iota: CUfunction| {
        let words = MappedWords::new(&context, 4);
        let stream = non_blocking(&context);
        let (mut out, mut n, mut mul) = (words.device_address(0), 4u32, 2u32);
        let mut arguments = [
            (&raw mut out).cast::<c_void>(),
            (&raw mut n).cast(),
            (&raw mut mul).cast(),
        ];
        // SAFETY: the arguments match fill_iota; the mapped words outlive the stream's work.
        ok("cuLaunchKernel", unsafe {
            driver().cuLaunchKernel(
                fill_iota,
                1,
                1,
                1,
                32,
                1,
                1,
                0,
                stream.as_raw(),
                arguments.as_mut_ptr(),
                ptr::null_mut(),
            )
        });
        ok("cuStreamSynchronize", synchronize(stream.as_raw()));
        assert_eq!(
            (0..4).map(|i| words.get(i)).collect::<Vec<_>>(),
            [0, 2, 4, 6]
        );
    };

    let file = std::env::temp_dir().join(format!("kernels-{}.ptx", std::process::id()));
    std::fs::write(&file, PTX).expect("the PTX is written");
    let path = CString::new(file.to_str().expect("a UTF-8 path")).expect("no NUL");
    let mut module = ptr::null_mut();
    // SAFETY: a valid out-pointer and a NUL-terminated path.
    ok("cuModuleLoad", unsafe {
        driver().cuModuleLoad(&mut module, path.as_ptr())
    });
    let _ = std::fs::remove_file(&file);
    launch_from(function(module, c"fill_iota"));
    unload(module);

    let ptx = CString::new(PTX).expect("no NUL");
    let mut log = [0x55u8; 256];
    let mut options = [
        CUjit_option::CU_JIT_INFO_LOG_BUFFER,
        CUjit_option::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
    ];
    let mut values = [log.as_mut_ptr().cast::<c_void>(), 256usize as *mut c_void];
    // SAFETY: a valid out-pointer, NUL-terminated PTX and two options with their values.
    ok("cuModuleLoadDataEx", unsafe {
        driver().cuModuleLoadDataEx(
            &mut module,
            ptx.as_ptr().cast(),
            2,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    });
    assert!(log.contains(&0), "the info log is a string");
    launch_from(function(module, c"fill_iota"));
    unload(module);

    let fatbin: &[u8] = include_bytes!("../../kernels/kernels.fatbin");
    // The driver reads the fat binary in place: aligned as the compiler aligns it.
    let aligned: Vec<u64> = fatbin
        .chunks(8)
        .map(|chunk| {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            u64::from_le_bytes(word)
        })
        .collect();
    let module = load(aligned.as_ptr().cast());
    launch_from(function(module, c"fill_iota"));
    unload(module);

    let mut library: CUlibrary = ptr::null_mut();
    // SAFETY: a valid out-pointer and NUL-terminated PTX; no options.
    ok("cuLibraryLoadData", unsafe {
        driver().cuLibraryLoadData(
            &mut library,
            ptx.as_ptr().cast(),
            ptr::null_mut(),
            ptr::null_mut(),
            0,
            ptr::null_mut(),
            ptr::null_mut(),
            0,
        )
    });
    let mut kernel: CUkernel = ptr::null_mut();
    // SAFETY: a live library, a valid out-pointer and a NUL-terminated name.
    ok("cuLibraryGetKernel", unsafe {
        driver().cuLibraryGetKernel(&mut kernel, library, c"fill_iota".as_ptr())
    });
    let mut from_kernel = ptr::null_mut();
    // SAFETY: a live kernel and a valid out-pointer; the context is current.
    ok("cuKernelGetFunction", unsafe {
        driver().cuKernelGetFunction(&mut from_kernel, kernel)
    });
    launch_from(from_kernel);
    // As documented, the kernel itself stands for its function in the current context.
    launch_from(kernel.cast());
    // SAFETY: a live library, unloaded once, with its work done.
    ok("cuLibraryUnload", unsafe {
        driver().cuLibraryUnload(library)
    });
}

/// A library named in `CUSW_STAND_INS` registers its stand-ins, which run for their kernels'
/// launches: here the suite's stand-ins of cudarc's test kernels (software driver).
#[test]
fn a_stand_in_library_named_in_the_environment_runs_for_its_kernels() {
    const TEST: &str = "a_stand_in_library_named_in_the_environment_runs_for_its_kernels";
    if !suite::test_driver().is_software() {
        return suite::skip(TEST, "stand-in libraries are the software driver's");
    }
    if !suite::in_child_process() {
        // The GPU bundle's, where it names one; else the one the build script made.
        let library = std::env::var("CUDARC_STAND_INS_LIBRARY")
            .unwrap_or_else(|_| env!("CUDARC_STAND_INS_LIBRARY").to_owned());
        return suite::run_in_child(module_path!(), TEST, &[("CUSW_STAND_INS", &library)]);
    }
    let _alone = alone();
    let context = current_context();
    let ptx = c".version 7.0
.target sm_50
.address_size 64
.visible .entry sin_kernel(.param .u64 out, .param .u64 inp, .param .u64 numel)
{
	ret;
}
";
    let module = load(ptx.as_ptr().cast());
    let sin_kernel = function(module, c"sin_kernel");
    let words = MappedWords::new(&context, 4);
    for (index, value) in [0.5f32, -1.0, 2.0].iter().enumerate() {
        words.set(index, value.to_bits());
    }
    let stream = non_blocking(&context);
    let (mut out, mut inp, mut numel) = (words.device_address(0), words.device_address(0), 3u64);
    let mut arguments = [
        (&raw mut out).cast::<c_void>(),
        (&raw mut inp).cast(),
        (&raw mut numel).cast(),
    ];
    // SAFETY: the arguments match the kernel; the mapped words outlive the stream's work.
    ok("cuLaunchKernel", unsafe {
        driver().cuLaunchKernel(
            sin_kernel,
            1,
            1,
            1,
            32,
            1,
            1,
            0,
            stream.as_raw(),
            arguments.as_mut_ptr(),
            ptr::null_mut(),
        )
    });
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    // The stand-in rounds as the device does, within an ulp of the host's sine.
    for (index, value) in [0.5f32, -1.0, 2.0].iter().enumerate() {
        let sine = f32::from_bits(words.get(index));
        assert!((sine - value.sin()).abs() <= 1e-6, "{value}: {sine}");
    }
    assert_eq!(
        words.get(1),
        0xBF57_6AA5,
        "sin(-1.0) as the device rounds it"
    );
    assert_eq!(words.get(3), 0, "beyond numel");
    unload(module);
}

/// A kernel without a stand-in runs as nothing: its stream goes on, the launch is counted and the
/// kernel named once in the log; a stand-in's error fails the launch's context, as a failed
/// assertion in the kernel does (software driver; on a fresh context).
#[test]
fn a_kernel_without_a_stand_in_does_nothing_and_a_stand_ins_error_fails_the_context() {
    let controls = controls_or_skip!(
        a_kernel_without_a_stand_in_does_nothing_and_a_stand_ins_error_fails_the_context
    );
    let device = cuda_host::Device::get(&suite::test_driver().driver, 0).expect("device 0");
    let context = controls.fresh_context(&device);
    context.bind_to_thread().expect("the context binds");
    let ptx = c".version 7.0
.target sm_50
.address_size 64
.visible .entry without_stand_in()
{
	ret;
}
.visible .entry asserting(.param .u32 value)
{
	ret;
}
";
    let module = load(ptx.as_ptr().cast());
    let stream = non_blocking(&context);
    let launch = |name: &CStr, arguments: &mut [*mut c_void]| {
        let function = function(module, name);
        // SAFETY: the arguments match the kernel.
        ok("cuLaunchKernel", unsafe {
            driver().cuLaunchKernel(
                function,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                stream.as_raw(),
                arguments.as_mut_ptr(),
                ptr::null_mut(),
            )
        });
    };
    let without = || {
        controls
            .inner()
            .kernels_without_stand_in()
            .expect("a count")
    };
    let before = without();
    launch(c"without_stand_in", &mut []);
    launch(c"without_stand_in", &mut []);
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(without(), before + 2);

    controls
        .inner()
        .register_stand_in(c"asserting", |launch| {
            match launch.params().first().and_then(|value| value.get::<u32>()) {
                Some(7) => Ok(()),
                _ => Err(CUresult::CUDA_ERROR_ASSERT),
            }
        })
        .expect("registered");
    let mut value = 7u32;
    launch(c"asserting", &mut [(&raw mut value).cast()]);
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    let mut value = 8u32;
    launch(c"asserting", &mut [(&raw mut value).cast()]);
    let error = stream
        .synchronize()
        .expect_err("the assertion fails the context");
    assert_eq!(error.driver_result(), Some(CUresult::CUDA_ERROR_ASSERT));
}

/// A launch captured into a graph is a kernel node, which each launch of the executable runs.
#[test]
fn a_captured_launch_is_a_kernel_node_each_graph_launch_runs() {
    let _alone = alone();
    let context = current_context();
    let kernels = kernels();
    let stream = non_blocking(&context);
    let (data, scalar) = (DeviceMemory::new(16), DeviceMemory::new(4));
    let (zeros, one) = ([0u32; 4], 1u32);
    // SAFETY: the allocations' bytes from live host values.
    unsafe {
        ok(
            "cuMemcpyHtoD_v2",
            driver().cuMemcpyHtoD_v2(data.0, zeros.as_ptr().cast(), 16),
        );
        ok(
            "cuMemcpyHtoD_v2",
            driver().cuMemcpyHtoD_v2(scalar.0, (&raw const one).cast(), 4),
        );
    }
    // SAFETY: a stream of the current context, not capturing.
    ok("cuStreamBeginCapture_v2", unsafe {
        driver().cuStreamBeginCapture_v2(stream.as_raw(), GLOBAL)
    });
    let (mut data_address, mut scalar_address, mut n) = (data.0, scalar.0, 4u32);
    let mut arguments = [
        (&raw mut data_address).cast::<c_void>(),
        (&raw mut scalar_address).cast(),
        (&raw mut n).cast(),
    ];
    // SAFETY: the arguments match add_scalar; the memory outlives the graph's launches.
    unsafe { kernels.launch(kernels.add_scalar, 1, 32, stream.as_raw(), &mut arguments) }
        .expect("captured");
    let mut graph = ptr::null_mut();
    // SAFETY: the capture begun above.
    ok("cuStreamEndCapture", unsafe {
        driver().cuStreamEndCapture(stream.as_raw(), &mut graph)
    });
    let mut exec = ptr::null_mut();
    // SAFETY: a live graph and a valid out-pointer.
    ok("cuGraphInstantiateWithFlags", unsafe {
        driver().cuGraphInstantiateWithFlags(&mut exec, graph, 0)
    });
    for _ in 0..2 {
        // SAFETY: a live executable and stream.
        ok("cuGraphLaunch", unsafe {
            driver().cuGraphLaunch(exec, stream.as_raw())
        });
    }
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(
        data.words(),
        [2; 4],
        "the captured launch ran once a graph launch"
    );
    // SAFETY: live, destroyed once, their launches done.
    unsafe {
        ok("cuGraphExecDestroy", driver().cuGraphExecDestroy(exec));
        ok("cuGraphDestroy", driver().cuGraphDestroy(graph));
    }
}

//! The per-thread-default-stream forms (`_ptsz`, and `_ptds` of the calls that take no stream),
//! which a table loaded for the per-thread default stream resolves: given the null stream, or
//! none, each acts on the calling thread's per-thread stream, where the plain forms act on the
//! legacy stream.

use crate::contexts::{stream_flags, stream_priority};
use crate::harness::*;
use cuda_host::{Event, EventFlags, Stream};
use cuda_host_sys::{
    Availability, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, CUdriverProcAddress_flags,
    CUdriverProcAddressQueryResult, CUhostTaskSyncMode, CUresult, CUstream, CUstreamBatchMemOpType,
    CUstreamCaptureStatus, CUstreamWaitValue_flags, Driver, LoadOptions,
};
use std::ffi::CStr;
use std::ptr;
use std::sync::OnceLock;
use suite::capture::{Graph, is_capturing};
use suite::host_function::{launch_host_through, leak_closure, run_closure};
use suite::{MappedWords, hold_and_release, ok};

/// The null stream: in the per-thread table's entries, the calling thread's per-thread stream.
const NULL: CUstream = ptr::null_mut();
const GEQ: u32 = CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ.0;

/// A second table of the test driver's library, loaded for the per-thread default stream: its
/// stream-ordered entries are the `_ptsz` forms.
fn per_thread_table() -> &'static Driver {
    static TABLE: OnceLock<Driver> = OnceLock::new();
    TABLE.get_or_init(|| {
        // SAFETY: the library the suite already runs on as its driver.
        let options = unsafe { LoadOptions::library(driver().library_name()) }
            .per_thread_default_stream(true);
        // SAFETY: as above.
        unsafe { Driver::load(&options) }.expect("the driver loads again")
    })
}

/// A table of the test driver's library loaded for the legacy default stream, whatever the
/// process-wide one is loaded for.
fn legacy_table() -> &'static Driver {
    static TABLE: OnceLock<Driver> = OnceLock::new();
    TABLE.get_or_init(|| {
        // SAFETY: the library the suite already runs on as its driver.
        let options = unsafe { LoadOptions::library(driver().library_name()) }
            .per_thread_default_stream(false);
        // SAFETY: as above.
        unsafe { Driver::load(&options) }.expect("the driver loads again")
    })
}

#[test]
fn the_per_thread_forms_given_the_null_stream_capture_the_calling_threads_per_thread_stream() {
    let _alone = alone();
    let context = current_context();
    let table = per_thread_table();
    let log = Log::default();
    let event = Event::new(&context, EventFlags::DisableTiming).expect("event");
    let v2 = table.availability("cuLaunchHostFunc_v2") == Some(Availability::Available);

    // SAFETY: the calling thread's per-thread stream, which is not capturing.
    ok("cuStreamBeginCapture_v2", unsafe {
        table.cuStreamBeginCapture_v2(NULL, GLOBAL)
    });
    let mut status = CUstreamCaptureStatus(77);
    // SAFETY: a valid out-pointer.
    ok("cuStreamIsCapturing", unsafe {
        table.cuStreamIsCapturing(NULL, &mut status)
    });
    assert_eq!(status, ACTIVE);
    assert_eq!(
        is_capturing(CU_STREAM_PER_THREAD),
        (SUCCESS, ACTIVE),
        "the capturing stream is the per-thread one"
    );
    ok(
        "cuLaunchHostFunc",
        launch_host_through(table, NULL, log.marker("host function")),
    );
    if v2 {
        let data = leak_closure(log.marker("host function v2"));
        let blocking = CUhostTaskSyncMode::CU_HOST_TASK_BLOCKING.0;
        // SAFETY: `run_closure` accepts `data` on any thread, for the process's lifetime.
        ok("cuLaunchHostFunc_v2", unsafe {
            table.cuLaunchHostFunc_v2(NULL, Some(run_closure), data, blocking)
        });
    }
    let (mut status, mut count) = (CUstreamCaptureStatus(77), usize::MAX);
    // SAFETY: valid out-pointers; nothing else asked for.
    ok("cuStreamGetCaptureInfo_v3", unsafe {
        table.cuStreamGetCaptureInfo_v3(
            NULL,
            &mut status,
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
            &mut count,
        )
    });
    assert_eq!((status, count), (ACTIVE, 1), "on the last captured node");
    // SAFETY: a live event, recorded into the capture, and waited for within it.
    unsafe {
        ok("cuEventRecord", table.cuEventRecord(event.as_raw(), NULL));
        ok(
            "cuStreamWaitEvent",
            table.cuStreamWaitEvent(NULL, event.as_raw(), 0),
        );
    }
    let mut graph = ptr::null_mut();
    // SAFETY: the capture begun above, ended on the thread that began it.
    ok("cuStreamEndCapture", unsafe {
        table.cuStreamEndCapture(NULL, &mut graph)
    });
    let graph = Graph(graph);
    assert_eq!(is_capturing(CU_STREAM_PER_THREAD), (SUCCESS, NONE));
    assert!(log.entries().is_empty(), "captured work ran");

    let exec = graph.instantiate();
    // SAFETY: a live executable of host nodes.
    unsafe {
        ok("cuGraphUpload", table.cuGraphUpload(exec.0, NULL));
        ok("cuGraphLaunch", table.cuGraphLaunch(exec.0, NULL));
        ok("cuStreamSynchronize", table.cuStreamSynchronize(NULL));
    }
    let launched: &[&str] = if v2 {
        &["host function", "host function v2"]
    } else {
        &["host function"]
    };
    assert_eq!(log.entries(), launched);
}

#[test]
fn the_per_thread_forms_of_capture_into_a_graph_and_recapture_capture_the_calling_threads_stream() {
    const TEST: &str = "the_per_thread_forms_of_capture_into_a_graph_and_recapture_capture_the_calling_threads_stream";
    let table = per_thread_table();
    if table.availability("cuStreamBeginRecaptureToGraph") != Some(Availability::Available) {
        return suite::skip(TEST, "the driver has no cuStreamBeginRecaptureToGraph");
    }
    let _alone = alone();
    let _context = current_context();
    let log = Log::default();
    let graph = Graph::new();
    let root = graph.add_host_node(&[], log.marker("root"));
    let end = || {
        let mut ended = ptr::null_mut();
        // SAFETY: the calling thread's per-thread stream, capturing; a valid out-pointer.
        ok("cuStreamEndCapture", unsafe {
            table.cuStreamEndCapture(NULL, &mut ended)
        });
        ended
    };

    // SAFETY: the per-thread stream, not capturing; a live graph and a node of it.
    ok("cuStreamBeginCaptureToGraph", unsafe {
        table.cuStreamBeginCaptureToGraph(NULL, graph.0, &root, ptr::null(), 1, GLOBAL)
    });
    assert_eq!(is_capturing(CU_STREAM_PER_THREAD), (SUCCESS, ACTIVE));
    ok(
        "cuLaunchHostFunc",
        launch_host_through(table, NULL, log.marker("captured")),
    );
    assert_eq!(end(), graph.0, "the end answers the graph given");

    // SAFETY: the per-thread stream, not capturing; a live graph; no callback.
    ok("cuStreamBeginRecaptureToGraph", unsafe {
        table.cuStreamBeginRecaptureToGraph(NULL, GLOBAL, graph.0, None, ptr::null_mut())
    });
    assert_eq!(is_capturing(CU_STREAM_PER_THREAD), (SUCCESS, ACTIVE));
    for name in ["recaptured root", "recaptured captured"] {
        ok(
            "cuLaunchHostFunc",
            launch_host_through(table, NULL, log.marker(name)),
        );
    }
    assert_eq!(end(), graph.0, "the end answers the graph recaptured");
    assert!(log.entries().is_empty(), "captured work ran");

    let exec = graph.instantiate();
    // SAFETY: a live executable of host nodes.
    unsafe {
        ok("cuGraphLaunch", table.cuGraphLaunch(exec.0, NULL));
        ok("cuStreamSynchronize", table.cuStreamSynchronize(NULL));
    }
    assert_eq!(log.entries(), ["recaptured root", "recaptured captured"]);
}

#[test]
fn the_per_thread_forms_given_the_null_stream_enqueue_on_and_query_the_calling_threads_stream() {
    let _alone = alone();
    let context = current_context();
    let table = per_thread_table();
    let log = Log::default();
    let callback = leak(CallbackProbe::default());
    let words = MemOpWords::new(&context);
    let event = Event::new(&context, EventFlags::DisableTiming).expect("event");
    let synchronized = hold_and_release(
        &Stream::per_thread(&context),
        || {
            ok(
                "cuLaunchHostFunc",
                launch_host_through(table, NULL, log.marker("held")),
            );
            ok("cuStreamAddCallback", callback.add_through(table, NULL));
            // SAFETY: mapped host memory of the context, aligned for each operation, which
            // outlives the stream's work; a live event.
            unsafe {
                ok(
                    "cuStreamWaitValue32_v2",
                    table.cuStreamWaitValue32_v2(NULL, words.narrow_address(), 1, GEQ),
                );
                ok(
                    "cuStreamWaitValue64_v2",
                    table.cuStreamWaitValue64_v2(NULL, words.wide_address(), 0, GEQ),
                );
                ok(
                    "cuStreamWriteValue32_v2",
                    table.cuStreamWriteValue32_v2(NULL, words.narrow_address(), 6, 0),
                );
                let write = CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_32;
                let mut ops = [batched(write, words.narrow_address(), 7, 0)];
                ok(
                    "cuStreamBatchMemOp_v2",
                    table.cuStreamBatchMemOp_v2(NULL, 1, ops.as_mut_ptr(), 0),
                );
                ok(
                    "cuStreamWriteValue64_v2",
                    table.cuStreamWriteValue64_v2(NULL, words.wide_address(), 1 << 40 | 9, 0),
                );
                ok("cuEventRecord", table.cuEventRecord(event.as_raw(), NULL));
            }
        },
        || {
            // SAFETY: the calling thread's per-thread stream.
            let here = unsafe { table.cuStreamQuery(NULL) };
            assert_eq!(
                here,
                CUresult::CUDA_ERROR_NOT_READY,
                "this thread's is held"
            );
            let queried_context = context.clone();
            let elsewhere = std::thread::spawn(move || {
                queried_context.bind_to_thread().expect("the context binds");
                // SAFETY: the other thread's own per-thread stream.
                unsafe { per_thread_table().cuStreamQuery(NULL) }
            })
            .join()
            .expect("the other thread");
            assert_eq!(elsewhere, SUCCESS, "another thread's is its own");
            assert!(log.entries().is_empty(), "ran with the stream held");
            assert_eq!(event_query(event.as_raw()), CUresult::CUDA_ERROR_NOT_READY);
            assert_eq!((words.narrow(), words.wide()), (0, 0), "written while held");
            words.set_narrow(1); // the wait goes on once the gate opens
        },
        // SAFETY: the calling thread's per-thread stream.
        |_| unsafe { table.cuStreamSynchronize(NULL) },
    );
    ok("cuStreamSynchronize", synchronized);
    assert_eq!(log.entries(), ["held"]);
    assert_eq!(callback.statuses_once_called(), [SUCCESS]);
    assert_eq!(event_query(event.as_raw()), SUCCESS);
    assert_eq!((words.narrow(), words.wide()), (7, 1 << 40 | 9));
}

#[test]
fn the_per_thread_copy_and_set_forms_given_the_null_stream_enqueue_on_the_calling_threads_stream() {
    let _alone = alone();
    let context = current_context();
    let table = per_thread_table();
    let (first, second) = (DeviceMemory::new(16), DeviceMemory::new(16));
    // SAFETY: 16 bytes from a live host array into the allocation.
    ok("cuMemcpyHtoD_v2", unsafe {
        driver().cuMemcpyHtoD_v2(first.0, [1u32, 2, 3, 4].as_ptr().cast(), 16)
    });
    let words = MappedWords::new(&context, 7);
    // Pageable host memory, leaked: a driver that read it later would still read live memory.
    let pageable: &'static [u32; 2] = leak([7, 8]);
    let synchronized = hold_and_release(
        &Stream::per_thread(&context),
        || {
            // SAFETY: device allocations of 16 bytes, mapped words of the context and leaked
            // host memory, all outliving the stream's work; addresses aligned for each set.
            unsafe {
                ok(
                    "cuMemcpyDtoDAsync_v2",
                    table.cuMemcpyDtoDAsync_v2(second.0, first.0, 8, NULL),
                );
                ok(
                    "cuMemcpyPeerAsync",
                    table.cuMemcpyPeerAsync(
                        second.0 + 8,
                        context.as_raw(),
                        first.0 + 8,
                        context.as_raw(),
                        8,
                        NULL,
                    ),
                );
                ok(
                    "cuMemcpyHtoDAsync_v2",
                    table.cuMemcpyHtoDAsync_v2(first.0, pageable.as_ptr().cast(), 8, NULL),
                );
                ok(
                    "cuMemsetD32Async",
                    table.cuMemsetD32Async(words.device_address(0), 9, 1, NULL),
                );
                ok(
                    "cuMemsetD16Async",
                    table.cuMemsetD16Async(words.device_address(1), 0x1234, 2, NULL),
                );
                ok(
                    "cuMemsetD8Async",
                    table.cuMemsetD8Async(words.device_address(2), 0x7f, 4, NULL),
                );
                ok(
                    "cuMemcpyDtoHAsync_v2",
                    table.cuMemcpyDtoHAsync_v2(words.host_address(3), second.0, 16, NULL),
                );
            }
        },
        || {
            assert_eq!(
                (0..7).map(|index| words.get(index)).collect::<Vec<_>>(),
                [0; 7],
                "written while the calling thread's per-thread stream was held"
            );
        },
        // SAFETY: the calling thread's per-thread stream.
        |_| unsafe { table.cuStreamSynchronize(NULL) },
    );
    ok("cuStreamSynchronize", synchronized);
    assert_eq!(second.words(), [1, 2, 3, 4]);
    assert_eq!(
        first.words(),
        [7, 8, 3, 4],
        "copied over after the copies from it"
    );
    assert_eq!(
        (0..7).map(|index| words.get(index)).collect::<Vec<_>>(),
        [9, 0x1234_1234, 0x7f7f_7f7f, 1, 2, 3, 4]
    );
}

/// The synchronous copies and sets of a per-thread table (`_ptds`) work on the calling thread's
/// per-thread stream, which waits for the legacy stream only, not for other blocking streams as
/// the legacy stream the plain forms work on does: with a blocking stream held, they all do their
/// work, and the per-thread stream is done, while the plain form waits.
#[test]
fn the_per_thread_synchronous_copy_and_set_forms_work_on_the_calling_threads_stream() {
    let _alone = alone();
    let context = current_context();
    let (first, second, third) = (
        DeviceMemory::new(16),
        DeviceMemory::new(16),
        DeviceMemory::new(16),
    );
    let gate = suite::Gate::new(&context);
    let held = blocking(&context);
    gate.hold(&held);
    let memory = SendHandle((first.0, second.0, third.0));
    let bound = context.clone();
    let copied = returns_while_held("the per-thread forms, a blocking stream held", move || {
        bound.bind_to_thread().expect("the context binds");
        let (first, second, third) = memory.get();
        let table = per_thread_table();
        let mut back = [0u32; 4];
        // SAFETY: device allocations of 16 bytes and live host arrays; aligned addresses.
        unsafe {
            ok(
                "cuMemcpyHtoD_v2_ptds",
                table.cuMemcpyHtoD_v2(first, [1u32, 2, 3, 4].as_ptr().cast(), 16),
            );
            ok(
                "cuMemcpyDtoD_v2_ptds",
                table.cuMemcpyDtoD_v2(second, first, 16),
            );
            ok("cuMemsetD32_v2_ptds", table.cuMemsetD32_v2(third, 9, 1));
            ok(
                "cuMemsetD16_v2_ptds",
                table.cuMemsetD16_v2(third + 4, 0x1234, 2),
            );
            ok(
                "cuMemsetD8_v2_ptds",
                table.cuMemsetD8_v2(third + 8, 0x7f, 4),
            );
            ok("cuStreamSynchronize", table.cuStreamSynchronize(NULL));
            ok(
                "cuMemcpyDtoH_v2_ptds",
                table.cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), second, 16),
            );
        }
        back
    });
    assert_eq!(copied, [1, 2, 3, 4]);
    let (set_memory, bound) = (SendHandle(third.0), context.clone());
    let set = returns_while_held(
        "the per-thread copy back, a blocking stream held",
        move || {
            bound.bind_to_thread().expect("the context binds");
            let table = per_thread_table();
            let mut back = [0u32; 4];
            // SAFETY: 16 bytes of a device allocation into a live host array.
            ok("cuMemcpyDtoH_v2_ptds", unsafe {
                table.cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), set_memory.get(), 16)
            });
            back
        },
    );
    assert_eq!(set[..3], [9, 0x1234_1234, 0x7f7f_7f7f]);
    gate.open();
    ok("cuStreamSynchronize", synchronize(held.as_raw()));
    // The plain form, on the legacy stream, waits for the held blocking stream.
    let gate = suite::Gate::new(&context);
    gate.hold(&held);
    let third = third.0;
    let (result, waited) = enqueue_then_open(&context, &gate, move || {
        let mut back = [0u32; 4];
        // SAFETY: 16 bytes of a device allocation into a live host array.
        unsafe { legacy_table().cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), third, 16) }
    });
    assert_eq!(result, SUCCESS);
    assert!(
        waited,
        "the legacy stream's copy went ahead of a held blocking stream"
    );
    ok("cuStreamSynchronize", synchronize(held.as_raw()));
}

/// The stream-ordered allocator's and managed memory's stream forms of a per-thread table, given
/// the null stream, act in the calling thread's per-thread stream: held at a gate, it has done none
/// of them.
#[test]
fn the_per_thread_allocation_forms_given_the_null_stream_act_in_the_calling_threads_stream() {
    const TEST: &str =
        "the_per_thread_allocation_forms_given_the_null_stream_act_in_the_calling_threads_stream";
    let _alone = alone();
    let context = current_context();
    let mut pools = 0;
    // SAFETY: a valid out-pointer and device 0.
    ok("cuDeviceGetAttribute", unsafe {
        driver().cuDeviceGetAttribute(
            &mut pools,
            cuda_host_sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
            0,
        )
    });
    if pools == 0 {
        return suite::skip(TEST, "the device reports no memory pools");
    }
    let table = per_thread_table();
    let words = MappedWords::new(&context, 4);
    let mut pool = ptr::null_mut();
    // SAFETY: a valid out-pointer and device 0.
    ok("cuDeviceGetDefaultMemPool", unsafe {
        driver().cuDeviceGetDefaultMemPool(&mut pool, 0)
    });
    let mut managed = 0;
    // SAFETY: a valid out-pointer; the context is current.
    ok("cuMemAllocManaged", unsafe {
        driver().cuMemAllocManaged(
            &mut managed,
            64,
            cuda_host_sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL.0,
        )
    });
    let mut location = cuda_host_sys::CUmemLocation {
        type_: cuda_host_sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        ..Default::default()
    };
    location.__bindgen_anon_1.id = 0;
    let synchronized = hold_and_release(
        &Stream::per_thread(&context),
        || {
            let (mut first, mut second) = (0, 0);
            // SAFETY: valid out-pointers, the default pool, managed memory of the context and
            // mapped words, all outliving the stream's work.
            unsafe {
                ok(
                    "cuMemAllocAsync_ptsz",
                    table.cuMemAllocAsync(&mut first, 16, NULL),
                );
                ok(
                    "cuMemAllocFromPoolAsync_ptsz",
                    table.cuMemAllocFromPoolAsync(&mut second, 16, pool, NULL),
                );
                ok(
                    "cuMemsetD32Async",
                    table.cuMemsetD32Async(first, 5, 4, NULL),
                );
                ok(
                    "cuMemcpyDtoDAsync_v2",
                    table.cuMemcpyDtoDAsync_v2(second, first, 16, NULL),
                );
                ok(
                    "cuMemcpyDtoHAsync_v2",
                    table.cuMemcpyDtoHAsync_v2(words.host_address(0), second, 16, NULL),
                );
                ok("cuMemFreeAsync_ptsz", table.cuMemFreeAsync(first, NULL));
                ok("cuMemFreeAsync_ptsz", table.cuMemFreeAsync(second, NULL));
                ok(
                    "cuStreamAttachMemAsync_ptsz",
                    table.cuStreamAttachMemAsync(
                        NULL,
                        managed,
                        0,
                        cuda_host_sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL.0,
                    ),
                );
                ok(
                    "cuMemPrefetchAsync_v2_ptsz",
                    table.cuMemPrefetchAsync_v2(managed, 64, location, 0, NULL),
                );
            }
        },
        || {
            assert_eq!(
                (0..4).map(|index| words.get(index)).collect::<Vec<_>>(),
                [0; 4],
                "copied while the calling thread's per-thread stream was held"
            );
        },
        // SAFETY: the calling thread's per-thread stream.
        |_| unsafe { table.cuStreamSynchronize(NULL) },
    );
    ok("cuStreamSynchronize", synchronized);
    assert_eq!(
        (0..4).map(|index| words.get(index)).collect::<Vec<_>>(),
        [5; 4]
    );
    // SAFETY: allocated above, freed once.
    ok("cuMemFree_v2", unsafe { driver().cuMemFree_v2(managed) });
}

/// The launches of a per-thread table, given the null stream, run in the calling thread's
/// per-thread stream: held at a gate, it has run none of them.
#[test]
fn the_per_thread_launch_forms_given_the_null_stream_run_in_the_calling_threads_stream() {
    let _alone = alone();
    let context = current_context();
    suite::kernels::register_stand_ins();
    let kernels = suite::kernels::Kernels::load(driver()).expect("the kernels load");
    let table = per_thread_table();
    let words = MappedWords::new(&context, 3 * 4);
    let synchronized = hold_and_release(
        &Stream::per_thread(&context),
        || {
            for form in 0..3usize {
                let (mut out, mut n, mut mul) =
                    (words.device_address(form * 4), 4u32, form as u32 + 1);
                let mut arguments = [
                    (&raw mut out).cast::<std::ffi::c_void>(),
                    (&raw mut n).cast(),
                    (&raw mut mul).cast(),
                ];
                let config = cuda_host_sys::CUlaunchConfig {
                    gridDimX: 1,
                    gridDimY: 1,
                    gridDimZ: 1,
                    blockDimX: 32,
                    blockDimY: 1,
                    blockDimZ: 1,
                    sharedMemBytes: 0,
                    hStream: NULL,
                    attrs: ptr::null_mut(),
                    numAttrs: 0,
                };
                let (f, args) = (kernels.fill_iota, arguments.as_mut_ptr());
                // SAFETY: the arguments match fill_iota; the mapped words outlive the stream's
                // work.
                let result = unsafe {
                    match form {
                        0 => table.cuLaunchKernel(
                            f,
                            1,
                            1,
                            1,
                            32,
                            1,
                            1,
                            0,
                            NULL,
                            args,
                            ptr::null_mut(),
                        ),
                        1 => table.cuLaunchKernelEx(&config, f, args, ptr::null_mut()),
                        _ => table.cuLaunchCooperativeKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args),
                    }
                };
                ok("a per-thread launch", result);
            }
        },
        || {
            assert_eq!(
                (0..12)
                    .map(|index| words.get(index))
                    .filter(|&w| w != 0)
                    .count(),
                0,
                "launched while the calling thread's per-thread stream was held"
            );
        },
        // SAFETY: the calling thread's per-thread stream.
        |_| unsafe { table.cuStreamSynchronize(NULL) },
    );
    ok("cuStreamSynchronize", synchronized);
    for form in 0..3u32 {
        let found: Vec<u32> = (0..4).map(|i| words.get((form * 4 + i) as usize)).collect();
        let expected: Vec<u32> = (0..4).map(|i| i * (form + 1)).collect();
        assert_eq!(found, expected, "form {form}");
    }
}

#[test]
fn the_per_thread_context_form_given_the_null_stream_names_the_current_context() {
    let _alone = alone();
    let context = current_context();
    let table = per_thread_table();
    let mut owner = ptr::null_mut();
    // SAFETY: the calling thread's per-thread stream and a valid out-pointer.
    ok("cuStreamGetCtx_ptsz", unsafe {
        table.cuStreamGetCtx(NULL, &mut owner)
    });
    assert_eq!(owner, context.as_raw());
}

#[test]
fn the_per_thread_priority_and_flags_forms_given_the_null_stream_tell_of_the_calling_threads() {
    let _alone = alone();
    let _context = current_context();
    let table = per_thread_table();
    assert_eq!(
        stream_priority(table, NULL),
        stream_priority(driver(), CU_STREAM_PER_THREAD)
    );
    assert_eq!(
        stream_flags(table, NULL),
        stream_flags(driver(), CU_STREAM_PER_THREAD)
    );
}

#[test]
fn the_per_thread_stream_id_form_given_the_null_stream_names_the_calling_threads_stream() {
    let _alone = alone();
    let _context = current_context();
    let table = per_thread_table();
    let here = stream_id(table, NULL);
    assert_eq!(here, stream_id(driver(), CU_STREAM_PER_THREAD));
    assert_ne!(here, stream_id(driver(), CU_STREAM_LEGACY));
    // Null is the legacy stream on a legacy process table (on a per-thread one, it is not).
    let legacy = if driver().per_thread_default_stream() {
        CU_STREAM_LEGACY
    } else {
        NULL
    };
    assert_eq!(
        stream_id(table, CU_STREAM_LEGACY),
        stream_id(driver(), legacy),
        "the legacy handle still names the legacy stream"
    );
}

#[test]
fn a_missing_form_is_a_null_pointer_and_a_status_and_per_thread_forms_start_at_cuda_7_0() {
    let _shared = shared();
    let (legacy, per_thread) = (
        CUdriverProcAddress_flags::CU_GET_PROC_ADDRESS_LEGACY_STREAM,
        CUdriverProcAddress_flags::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
    );
    let found = (
        SUCCESS,
        CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SUCCESS,
        false,
    );
    let too_old = (
        SUCCESS,
        CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
        true,
    );
    assert_eq!(
        lookup(c"cuEventRecord", 2000, legacy),
        found,
        "the ABI of CUDA 2.0"
    );
    assert_eq!(
        lookup(c"cuEventRecord", 2000, per_thread),
        too_old,
        "cuEventRecord_ptsz is of CUDA 7.0"
    );
    assert_eq!(lookup(c"cuEventRecord", 7000, per_thread), found);
    assert_eq!(
        lookup(c"cuLaunchHostFunc", 9020, legacy),
        too_old,
        "cuLaunchHostFunc is of CUDA 10.0"
    );
    assert_eq!(
        lookup(c"cuNoSuchEntryPoint", 12000, legacy),
        (
            SUCCESS,
            CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
            true
        ),
        "success too: the status and the null pointer say what is missing"
    );
}

/// `cuGetProcAddress_v2` of `name`: its answer, the symbol status, and whether the pointer is
/// null.
fn lookup(
    name: &CStr,
    version: i32,
    flags: CUdriverProcAddress_flags,
) -> (CUresult, CUdriverProcAddressQueryResult, bool) {
    let (mut address, mut status) = (ptr::null_mut(), CUdriverProcAddressQueryResult(77));
    // SAFETY: a NUL-terminated name and valid out-pointers.
    let result = unsafe {
        driver().cuGetProcAddress_v2(
            name.as_ptr(),
            &mut address,
            version,
            u64::from(flags.0),
            &mut status,
        )
    };
    (result, status, address.is_null())
}

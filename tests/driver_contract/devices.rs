//! Devices and contexts: a device's name and memory, its primary context's state, the device of a
//! context, context-wide synchronisation, module loading without a current context, and two
//! devices, each with its own primary context, streams, host functions, events and memory.

use crate::harness::*;
use cuda_host::{Context, Event, EventFlags};
use cuda_host_sys::{CU_STREAM_LEGACY, CUdevice_attribute, CUresult, CUuuid};
use std::ffi::{CStr, c_char};
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use suite::{Gate, ok, test_driver, wait_until};

/// What `attribute` of `device` reads.
fn attribute(device: &cuda_host::Device, attribute: CUdevice_attribute) -> i32 {
    let mut value = 0;
    // SAFETY: a valid out-pointer and a device of the driver.
    ok("cuDeviceGetAttribute", unsafe {
        driver().cuDeviceGetAttribute(&mut value, attribute, device.as_raw())
    });
    value
}

/// Free device memory as `cuMemGetInfo` reports it for `context`'s device.
fn free_memory(context: &Context) -> usize {
    context.bind_to_thread().expect("the context binds");
    let (mut free, mut total) = (0, 0);
    // SAFETY: valid out-pointers; the context is current.
    ok("cuMemGetInfo_v2", unsafe {
        driver().cuMemGetInfo_v2(&mut free, &mut total)
    });
    free
}

#[test]
fn two_devices_have_their_own_primary_contexts_streams_host_functions_events_and_memory() {
    let test =
        "two_devices_have_their_own_primary_contexts_streams_host_functions_events_and_memory";
    let devices = cuda_host::Device::count(&test_driver().driver).expect("device count");
    if !test_driver().is_software() && devices < 2 {
        return suite::skip(test, "the real driver has fewer than two devices here");
    }
    // The software driver reads its device count when it is loaded: a fresh process.
    suite::alone_in_child!(
        two_devices_have_their_own_primary_contexts_streams_host_functions_events_and_memory,
        &[("CUSW_DEVICE_COUNT", "2")]
    );
    assert!(devices >= 2, "{devices} devices");
    let device = [0, 1]
        .map(|ordinal| cuda_host::Device::get(&test_driver().driver, ordinal).expect("device"));
    let context = [&device[0], &device[1]].map(|device| device.primary_context().expect("ctx"));
    assert_ne!(context[0].as_raw(), context[1].as_raw());
    let mut uuid = [CUuuid::default(); 2];
    for (ordinal, context) in context.iter().enumerate() {
        assert_eq!(context.device(), device[ordinal].as_raw());
        context.bind_to_thread().expect("the context binds");
        let mut current = -1;
        // SAFETY: a valid out-pointer; the context is current.
        ok("cuCtxGetDevice", unsafe {
            driver().cuCtxGetDevice(&mut current)
        });
        assert_eq!(current, device[ordinal].as_raw());
        // SAFETY: a valid out-pointer and a device of the driver.
        ok("cuDeviceGetUuid_v2", unsafe {
            driver().cuDeviceGetUuid_v2(&mut uuid[ordinal], device[ordinal].as_raw())
        });
    }
    assert_ne!(uuid[0].bytes, uuid[1].bytes, "each device has its own UUID");
    let pci = |device: &cuda_host::Device| {
        [
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID,
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID,
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID,
        ]
        .map(|which| attribute(device, which))
    };
    assert_ne!(
        pci(&device[0]),
        pci(&device[1]),
        "each device has its own PCI address"
    );

    // Each device's stream belongs to its context; holding one holds nothing of the other.
    let stream = [&context[0], &context[1]].map(non_blocking);
    for (stream, context) in stream.iter().zip(&context) {
        let mut owner = ptr::null_mut();
        // SAFETY: a live stream and a valid out-pointer.
        ok("cuStreamGetCtx", unsafe {
            driver().cuStreamGetCtx(stream.as_raw(), &mut owner)
        });
        assert_eq!(owner, context.as_raw());
    }
    let event = [&context[0], &context[1]]
        .map(|context| Event::new(context, EventFlags::DisableTiming).expect("event"));
    let gate = Gate::new(&context[0]);
    let log = Log::default();
    gate.hold(&stream[0]);
    // A held blocking stream of device 0 would hold device 0's legacy stream, not device 1's.
    let held_blocking = blocking(&context[0]);
    gate.hold(&held_blocking);
    context[1].bind_to_thread().expect("the context binds");
    let legacy_ran = Arc::new(AtomicUsize::new(0));
    launch(CU_STREAM_LEGACY, counting(&legacy_ran));
    wait_until("device 1's legacy stream", || count(&legacy_ran) == 1);
    launch(stream[0].as_raw(), log.marker("device 0"));
    record(&event[0], stream[0].as_raw());
    launch(stream[1].as_raw(), log.marker("device 1"));
    record(&event[1], stream[1].as_raw());
    ok("cuEventSynchronize", event_synchronize(&event[1]));
    assert_eq!(log.entries(), ["device 1"], "device 1 waited for device 0");
    assert_eq!(
        event_query(event[0].as_raw()),
        CUresult::CUDA_ERROR_NOT_READY
    );
    assert_eq!(
        query(stream[0].as_raw()),
        CUresult::CUDA_ERROR_NOT_READY,
        "device 0's stream went on while held"
    );

    // An event of one device orders a stream of the other.
    stream[1]
        .wait_event(&event[0])
        .expect("waits for device 0's event");
    launch(stream[1].as_raw(), log.marker("device 1 after device 0"));
    let_free_work_run(&non_blocking(&context[1]));
    assert_eq!(
        log.entries(),
        ["device 1"],
        "device 1 ran past device 0's event"
    );
    gate.open();
    ok("cuStreamSynchronize", synchronize(stream[1].as_raw()));
    assert_eq!(
        log.entries(),
        ["device 1", "device 0", "device 1 after device 0"]
    );

    // Memory: an allocation on device 0 takes nothing from device 1.
    const GIB: usize = 1 << 30;
    let free_before = [&context[0], &context[1]].map(free_memory);
    context[0].bind_to_thread().expect("the context binds");
    let mut allocation = 0;
    // SAFETY: a valid out-pointer; device 0's context is current.
    ok("cuMemAlloc_v2", unsafe {
        driver().cuMemAlloc_v2(&mut allocation, GIB)
    });
    let free_after = [&context[0], &context[1]].map(free_memory);
    context[0].bind_to_thread().expect("the context binds");
    // SAFETY: allocated above, freed once.
    ok("cuMemFree_v2", unsafe { driver().cuMemFree_v2(allocation) });
    assert!(
        free_after[0] + GIB <= free_before[0],
        "device 0 lost the allocation"
    );
    assert!(
        free_after[1] + GIB / 2 > free_before[1],
        "device 1 lost {} bytes to device 0's allocation",
        free_before[1] - free_after[1]
    );
}

#[test]
fn loading_a_module_without_a_current_context_answers_invalid_context() {
    let _shared = shared();
    let _context = suite::context();
    // A thread of its own, with no context current.
    let result = std::thread::spawn(|| {
        let ptx = c".version 7.0\n.target sm_50\n.address_size 64\n";
        let mut module = ptr::null_mut();
        // SAFETY: a valid out-pointer and a NUL-terminated image.
        unsafe { driver().cuModuleLoadData(&mut module, ptx.as_ptr().cast()) }
    })
    .join()
    .unwrap();
    assert_eq!(result, CUresult::CUDA_ERROR_INVALID_CONTEXT);
}

#[test]
fn a_device_has_a_name() {
    let _shared = shared();
    let context = current_context();
    let mut name: [c_char; 256] = [0; 256];
    // SAFETY: a buffer of the length given and a device of the driver.
    ok("cuDeviceGetName", unsafe {
        driver().cuDeviceGetName(name.as_mut_ptr(), 256, context.device())
    });
    // SAFETY: the driver wrote a NUL-terminated name into the buffer.
    let name = unsafe { CStr::from_ptr(name.as_ptr()) };
    assert!(!name.is_empty(), "an empty name");
}

#[test]
fn a_device_has_at_least_the_memory_its_context_reports_free() {
    let _shared = shared();
    let context = current_context();
    let mut total = 0;
    // SAFETY: a valid out-pointer and a device of the driver.
    ok("cuDeviceTotalMem_v2", unsafe {
        driver().cuDeviceTotalMem_v2(&mut total, context.device())
    });
    assert!(total > 0);
    assert!(free_memory(&context) <= total);
    let count = cuda_host::Device::count(&test_driver().driver).expect("device count");
    let beyond = i32::try_from(count).expect("a device ordinal");
    // SAFETY: a valid out-pointer; the ordinal is no device's.
    let beyond = unsafe { driver().cuDeviceTotalMem_v2(&mut total, beyond) };
    assert_eq!(beyond, CUresult::CUDA_ERROR_INVALID_DEVICE);
}

#[test]
fn a_retained_primary_context_is_active() {
    let _shared = shared();
    let context = current_context(); // retained for the whole process
    let (mut flags, mut active) = (u32::MAX, -1);
    // SAFETY: valid out-pointers and a device of the driver.
    ok("cuDevicePrimaryCtxGetState", unsafe {
        driver().cuDevicePrimaryCtxGetState(context.device(), &mut flags, &mut active)
    });
    assert_eq!(active, 1);
}

#[test]
fn the_device_of_a_context_is_told_with_the_context_current_or_named() {
    let _shared = shared();
    let context = current_context();
    let mut current = -1;
    // SAFETY: a valid out-pointer; the context is current.
    ok("cuCtxGetDevice", unsafe {
        driver().cuCtxGetDevice(&mut current)
    });
    assert_eq!(current, context.device());
    let (without_current, named_device) = on_another_thread(context.as_raw(), |named| {
        let (mut current, mut named_device) = (-1, -1);
        // SAFETY: valid out-pointers and a live context.
        unsafe {
            let without_current = driver().cuCtxGetDevice(&mut current);
            let result = driver().cuCtxGetDevice_v2(&mut named_device, named);
            (without_current, (result, named_device))
        }
    });
    assert_eq!(without_current, CUresult::CUDA_ERROR_INVALID_CONTEXT);
    assert_eq!(named_device, (SUCCESS, context.device()));
}

/// Holds two streams of the context with a host function behind each, and has another thread, its
/// context current, call `synchronize`: checks that the call answered success only once both
/// host functions had run.
fn assert_synchronizes_the_context(synchronize: impl FnOnce() -> CUresult + Send + 'static) {
    let context = current_context();
    let streams = [non_blocking(&context), non_blocking(&context)];
    let gate = Gate::new(&context);
    let log = Log::default();
    for (stream, entry) in streams.iter().zip(["first stream", "second stream"]) {
        gate.hold(stream);
        launch(stream.as_raw(), log.marker(entry));
    }
    let seen = log.clone();
    let ((result, ran), waited) = enqueue_then_open(&context, &gate, move || {
        let result = synchronize();
        (result, seen.entries().len())
    });
    assert_eq!(result, SUCCESS);
    assert!(waited, "returned before the streams went on");
    assert_eq!(ran, 2, "returned before both host functions ran");
}

#[test]
fn context_synchronize_returns_once_every_stream_of_the_current_context_is_done() {
    let _alone = alone();
    // SAFETY: no arguments; the context is current on the calling thread.
    assert_synchronizes_the_context(|| unsafe { driver().cuCtxSynchronize() });
}

#[test]
fn context_synchronize_of_a_named_context_waits_for_it_without_it_current() {
    let _alone = alone();
    let named = SendHandle(current_context().as_raw());
    assert_synchronizes_the_context(move || {
        // SAFETY: no context, then a live one, named.
        unsafe {
            ok("cuCtxSetCurrent", driver().cuCtxSetCurrent(ptr::null_mut()));
            driver().cuCtxSynchronize_v2(named.get())
        }
    });
}

/// Attributes that describe the machine a device is in, or its board, rather than the device:
/// the comparison with an H200's values leaves them out. Beside the bus, NUMA and mode settings,
/// two H200 machines answered these differently (the defaults, then the other's): the memory bus
/// width (6144, 6016 bits), the L2 cache (50, 60 MiB), pageable memory access (1, 0: the
/// kernel's heterogeneous memory management), multi-device cooperative launch (0, 1), the
/// largest access policy window (134213632, 134217728 bytes), the memory pools' handle types
/// (1, 9), fabric handles (0, 1) and DMA-BUF host allocations (1, 0).
const OF_THE_MACHINE: [&str; 20] = [
    "PCI_BUS_ID",
    "PCI_DEVICE_ID",
    "PCI_DOMAIN_ID",
    "MULTI_GPU_BOARD",
    "MULTI_GPU_BOARD_GROUP_ID",
    "NUMA_CONFIG",
    "NUMA_ID",
    "HOST_NUMA_ID",
    "GPU_PCI_SUBSYSTEM_ID",
    "COMPUTE_MODE",
    "MPS_ENABLED",
    "MULTICAST_SUPPORTED",
    "GLOBAL_MEMORY_BUS_WIDTH",
    "L2_CACHE_SIZE",
    "PAGEABLE_MEMORY_ACCESS",
    "COOPERATIVE_MULTI_DEVICE_LAUNCH",
    "MAX_ACCESS_POLICY_WINDOW_SIZE",
    "MEMPOOL_SUPPORTED_HANDLE_TYPES",
    "HANDLE_TYPE_FABRIC_SUPPORTED",
    "HOST_ALLOC_DMA_BUF_SUPPORTED",
];

/// `cuDeviceGetAttribute` of device 0: the driver's answer and the value.
fn answer(attribute: CUdevice_attribute) -> (CUresult, i32) {
    let mut value = i32::MIN;
    // SAFETY: a valid out-pointer and a device of the driver.
    let result = unsafe { driver().cuDeviceGetAttribute(&mut value, attribute, 0) };
    (result, value)
}

/// Every attribute the headers define is answered, as an H200 answers it: on the software driver
/// each is its documented default; on an H200 the real driver's answers are the defaults (but for
/// what describes the machine, and the attributes newer than the driver).
#[test]
fn every_device_attribute_is_answered_as_an_h200_answers_it() {
    const TEST: &str = "every_device_attribute_is_answered_as_an_h200_answers_it";
    let _shared = shared();
    let _context = current_context();
    let device = cuda_host::Device::get(&test_driver().driver, 0).expect("device 0");
    let software = test_driver().is_software();
    if !software && !device.name().expect("a name").contains("H200") {
        return suite::skip(TEST, "the real device is not an H200");
    }
    let mut differ = Vec::new();
    for expected in cuda_host_testing::H200_ATTRIBUTES {
        let (result, value) = answer(expected.attribute);
        if software {
            assert_eq!(result, SUCCESS, "{}", expected.name);
        } else if result != SUCCESS || OF_THE_MACHINE.contains(&expected.name) {
            continue;
        }
        if i64::from(value) != expected.value {
            differ.push(format!(
                "{} {value} (default {})",
                expected.name, expected.value
            ));
        }
    }
    assert!(differ.is_empty(), "differ from an H200's: {differ:?}");
    let (result, _) = answer(CUdevice_attribute(100_000));
    assert_eq!(result, CUresult::CUDA_ERROR_INVALID_VALUE, "no attribute");
}

/// `CUSW_DEVICE_ATTRIBUTES` plays another device for the whole process: an older compute
/// capability, a narrow device without 64-bit stream memory operations (which it then refuses),
/// no memory pools; a pair that names no attribute is named in the log and left out.
#[test]
fn device_attributes_from_the_environment_replace_the_h200s() {
    const TEST: &str = "device_attributes_from_the_environment_replace_the_h200s";
    if !test_driver().is_software() {
        return suite::skip(TEST, "the environment variable is the software driver's");
    }
    let log = std::env::temp_dir().join(format!("{TEST}-{}", std::process::id()));
    if !suite::in_child_process() {
        let _ = std::fs::remove_file(&log);
        suite::run_in_child(
            module_path!(),
            TEST,
            &[
                (
                    "CUSW_DEVICE_ATTRIBUTES",
                    "COMPUTE_CAPABILITY_MAJOR=8,CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR=6,\
                     CAN_USE_64_BIT_STREAM_MEM_OPS=0,115=0,NOT_AN_ATTRIBUTE=1,WARP_SIZE=wide",
                ),
                ("CUSW_LOG", log.to_str().expect("a UTF-8 temporary folder")),
            ],
        );
        let _ = std::fs::remove_file(&log);
        return;
    }
    let _alone = alone();
    let context = current_context();
    let attribute = |name| {
        let entry = cuda_host_testing::H200_ATTRIBUTES
            .iter()
            .find(|entry| entry.name == name)
            .expect("an attribute");
        answer(entry.attribute)
    };
    assert_eq!(attribute("COMPUTE_CAPABILITY_MAJOR"), (SUCCESS, 8));
    assert_eq!(attribute("COMPUTE_CAPABILITY_MINOR"), (SUCCESS, 6));
    assert_eq!(attribute("CAN_USE_64_BIT_STREAM_MEM_OPS"), (SUCCESS, 0));
    assert_eq!(attribute("MEMORY_POOLS_SUPPORTED"), (SUCCESS, 0));
    assert_eq!(
        attribute("WARP_SIZE"),
        (SUCCESS, 32),
        "an invalid value is left out"
    );
    let words = MemOpWords::new(&context);
    let stream = non_blocking(&context);
    // SAFETY: a mapped, aligned word of the context.
    let wide =
        unsafe { driver().cuStreamWriteValue64_v2(stream.as_raw(), words.wide_address(), 1, 0) };
    assert_eq!(wide, CUresult::CUDA_ERROR_NOT_SUPPORTED);
    // SAFETY: as above.
    ok("cuStreamWriteValue32_v2", unsafe {
        driver().cuStreamWriteValue32_v2(stream.as_raw(), words.narrow_address(), 1, 0)
    });
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(words.narrow(), 1);
    let logged = std::fs::read_to_string(std::env::var_os("CUSW_LOG").expect("a log"))
        .expect("the driver's log");
    for pair in ["NOT_AN_ATTRIBUTE=1", "WARP_SIZE=wide"] {
        assert!(logged.contains(pair), "{pair} is not named: {logged}");
    }
}

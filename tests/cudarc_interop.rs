//! cuda-host on cudarc's contexts and streams (cuda-host's `cudarc` feature).
//!
//! cudarc opens libcuda by name. On the real driver it finds NVIDIA's, and the tests run here; on
//! the software driver each test runs in a child process whose `LD_LIBRARY_PATH` leads cudarc to
//! the software driver this binary loaded (`cuda_host_testing::LibcudaDir`). Tests of what is process-wide
//! (a primary context's state) run in a child on either driver.

use cuda_host::sys::{CUcontext, CUdevice};
use cuda_host::{Context, Error, Stream, StreamFlags, host_launch};
use cuda_host_testing::LibcudaDir;
use cudarc::driver::CudaContext;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use suite::{Gate, Tally, in_child_process, ok, test_driver, wait_until};

/// Whether `test` runs in this process (see [`suite::runs_here_with_libcuda`]).
fn runs_here(test: &str, always_in_child: bool, env: &[(&str, &str)]) -> bool {
    suite::runs_here_with_libcuda(module_path!(), test, always_in_child, env)
}

/// cudarc's primary context of device 0, and a cuda-host `Context` of it.
fn contexts() -> (Arc<CudaContext>, Context) {
    let cudarc_context = CudaContext::new(0).expect("cudarc's context of device 0");
    let context = Context::from_cudarc(&test_driver().driver, &cudarc_context)
        .expect("a Context from cudarc's");
    (cudarc_context, context)
}

/// The calling thread's current context, as the test driver sees it.
fn current_context() -> CUcontext {
    let mut current = ptr::null_mut();
    // SAFETY: `current` is a valid out-pointer.
    ok("cuCtxGetCurrent", unsafe {
        test_driver().driver.cuCtxGetCurrent(&mut current)
    });
    current
}

fn make_current(context: CUcontext) {
    // SAFETY: null (no context) or a live context of the test driver.
    ok("cuCtxSetCurrent", unsafe {
        test_driver().driver.cuCtxSetCurrent(context)
    });
}

/// Whether `device`'s primary context is active (retained by someone).
fn primary_context_active(device: CUdevice) -> bool {
    let (mut flags, mut active) = (0, 0);
    // SAFETY: valid out-pointers; `device` came from the driver.
    ok("cuDevicePrimaryCtxGetState", unsafe {
        test_driver()
            .driver
            .cuDevicePrimaryCtxGetState(device, &mut flags, &mut active)
    });
    active != 0
}

/// The software driver's count of live streams, `None` on the real driver.
fn live_streams() -> Option<u64> {
    suite::software::controls().map(|controls| controls.live_objects().streams)
}

#[test]
fn host_launch_on_a_cudarc_stream_runs_after_cudarc_work_before_it_and_before_cudarc_work_after_it()
{
    // Its cudarc streams' creation, on the legacy stream, would break another test's capture.
    let _captures = suite::capture_lock();
    let test = "host_launch_on_a_cudarc_stream_runs_after_cudarc_work_before_it_and_before_cudarc_work_after_it";
    if !runs_here(test, false, &[]) {
        return;
    }
    let (cudarc_context, context) = contexts();
    let cudarc_stream = cudarc_context.new_stream().expect("cudarc's stream");
    let stream = Stream::from_cudarc(&context, &cudarc_stream).expect("a Stream from cudarc's");

    let values: Vec<u32> = (1..=64).collect();
    let on_device = cudarc_stream.clone_htod(&values).expect("copied up");
    // SAFETY: the copy below writes every word before anything reads them.
    let mut pinned = unsafe { cudarc_context.alloc_pinned_with_flags::<u32>(values.len(), 0) }
        .expect("page-locked memory");
    let words = pinned
        .as_mut_ptr()
        .expect("its address")
        .expose_provenance();
    cudarc_stream
        .memcpy_dtoh(&on_device, &mut pinned)
        .expect("copy down enqueued");

    let seen = Arc::new(Mutex::new(None));
    let release = Arc::new(AtomicBool::new(false));
    let (host_seen, host_release, len) = (Arc::clone(&seen), Arc::clone(&release), values.len());
    host_launch(&stream, move || {
        let words = ptr::with_exposed_provenance::<u32>(words);
        // SAFETY: `len` words of live page-locked memory, written by the copy enqueued before
        // this function (if the stream keeps its order) and by nothing else meanwhile.
        let read: Vec<u32> = (0..len)
            .map(|index| unsafe { words.add(index).read_volatile() })
            .collect();
        *host_seen.lock().unwrap() = Some(read);
        // Holds the stream until the test has looked at the work enqueued after this function.
        let start = Instant::now();
        while !host_release.load(Ordering::SeqCst) && start.elapsed() < suite::TIMEOUT {
            std::thread::sleep(Duration::from_millis(1));
        }
    })
    .expect("launch");
    let after = cudarc_stream
        .record_event(None)
        .expect("cudarc's event after the host function");

    wait_until("the host function to run", || {
        seen.lock().unwrap().is_some()
    });
    assert!(
        !after.try_is_complete().expect("event query"),
        "cudarc's work after the host function finished while the function still ran"
    );
    release.store(true, Ordering::SeqCst);
    stream.synchronize().expect("synchronize");
    assert!(after.try_is_complete().expect("event query"));
    assert_eq!(
        seen.lock().unwrap().as_deref(),
        Some(&values[..]),
        "the host function ran before cudarc's copy enqueued before it had finished"
    );
}

#[test]
fn host_launch_runs_on_cudarcs_default_and_per_thread_streams_whatever_context_is_current() {
    let test =
        "host_launch_runs_on_cudarcs_default_and_per_thread_streams_whatever_context_is_current";
    if !runs_here(test, false, &[]) {
        return;
    }
    let (cudarc_context, context) = contexts();
    for cudarc_stream in [
        cudarc_context.default_stream(),
        cudarc_context.per_thread_stream(),
    ] {
        let stream = Stream::from_cudarc(&context, &cudarc_stream).expect("a Stream from cudarc's");
        // The driver resolves these handles against the current context: cuda-host makes the
        // stream's context current for each call, and makes none current again after.
        make_current(ptr::null_mut());
        let tally = Tally::new();
        let probe = tally.probe();
        host_launch(&stream, move || probe.ran()).expect("launch");
        stream.synchronize().expect("synchronize");
        assert_eq!((tally.runs(), tally.drops()), (1, 1));
        assert!(current_context().is_null());
    }
}

#[test]
fn a_stream_from_cudarc_holds_cudarcs_stream_until_dropped_and_never_destroys_it() {
    // Its cudarc streams' creation, on the legacy stream, would break another test's capture.
    let _captures = suite::capture_lock();
    let test = "a_stream_from_cudarc_holds_cudarcs_stream_until_dropped_and_never_destroys_it";
    if !runs_here(test, false, &[]) {
        return;
    }
    let (cudarc_context, context) = contexts();
    let cudarc_stream = cudarc_context.new_stream().expect("cudarc's stream");
    let streams = live_streams();
    let stream = Stream::from_cudarc(&context, &cudarc_stream).expect("a Stream from cudarc's");
    assert_eq!(Arc::strong_count(&cudarc_stream), 2, "the Stream holds one");

    // A launch, so that the drop also watches the stream for its context's failure.
    let tally = Tally::new();
    let probe = tally.probe();
    host_launch(&stream, move || probe.ran()).expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!((tally.runs(), tally.drops()), (1, 1));
    drop(stream);
    wait_until("the Stream to let go of cudarc's stream", || {
        cuda_host::reclaim();
        Arc::strong_count(&cudarc_stream) == 1
    });
    assert_eq!(
        live_streams(),
        streams,
        "cuda-host destroyed cudarc's stream"
    );

    // cudarc's stream still works.
    let on_device = cudarc_stream.clone_htod(&[7u32, 8, 9]).expect("copied up");
    let back = cudarc_stream.clone_dtoh(&on_device).expect("copied down");
    assert_eq!(back, [7, 8, 9]);
    cudarc_stream.synchronize().expect("cudarc's synchronize");
}

#[test]
fn the_last_reference_to_a_cudarc_stream_goes_on_a_callers_thread_and_leaves_the_current_context() {
    // Its cudarc streams' creation, on the legacy stream, would break another test's capture.
    let _captures = suite::capture_lock();
    let test = "the_last_reference_to_a_cudarc_stream_goes_on_a_callers_thread_and_leaves_the_current_context";
    if !runs_here(test, false, &[]) {
        return;
    }
    let (cudarc_context, context) = contexts();
    let cudarc_stream = cudarc_context.new_stream().expect("cudarc's stream");
    let stream = Stream::from_cudarc(&context, &cudarc_stream).expect("a Stream from cudarc's");
    let tally = Tally::new();
    let probe = tally.probe();
    host_launch(&stream, move || probe.ran()).expect("launch");
    stream.synchronize().expect("synchronize");
    let streams = live_streams();

    let weak = Arc::downgrade(&cudarc_stream);
    drop(cudarc_stream);
    assert_eq!(weak.strong_count(), 1, "the Stream holds cudarc's stream");
    // cudarc's `Drop` makes the stream's context current to destroy it; cuda-host leaves the
    // thread's current context as it found it.
    make_current(ptr::null_mut());
    drop(stream);
    wait_until("cudarc's stream to be let go of", || {
        cuda_host::reclaim();
        weak.strong_count() == 0
    });
    assert!(
        current_context().is_null(),
        "dropping cudarc's stream left its context current"
    );
    if let Some(streams) = streams {
        assert_eq!(
            live_streams(),
            Some(streams - 1),
            "cudarc destroyed its stream when cuda-host let go of the last reference"
        );
    }
}

#[test]
fn a_stream_from_cudarc_dropped_inside_a_host_function_lets_go_of_cudarcs_stream_on_the_launching_thread()
 {
    // Its cudarc streams' creation, on the legacy stream, would break another test's capture.
    let _captures = suite::capture_lock();
    let test = "a_stream_from_cudarc_dropped_inside_a_host_function_lets_go_of_cudarcs_stream_on_the_launching_thread";
    if !runs_here(test, false, &[]) {
        return;
    }
    let (cudarc_context, context) = contexts();
    let cudarc_stream = cudarc_context.new_stream().expect("cudarc's stream");
    let stream = Stream::from_cudarc(&context, &cudarc_stream).expect("a Stream from cudarc's");
    let weak = Arc::downgrade(&cudarc_stream);
    drop(cudarc_stream);

    let other = Stream::new(&context, StreamFlags::NonBlocking).expect("a stream");
    let tally = Tally::new();
    let probe = tally.probe();
    let mut held = Some(stream);
    host_launch(&other, move || {
        // The last reference: cudarc would destroy its stream here, where CUDA calls are
        // forbidden.
        drop(held.take());
        probe.ran();
    })
    .expect("launch");
    // Not a cuda-host call: nothing of this thread's is dropped while waiting.
    wait_until("the host function to run", || tally.runs() == 1);
    assert_eq!(
        weak.strong_count(),
        1,
        "cudarc's stream was let go of on the driver's thread"
    );
    wait_until("cudarc's stream to be let go of here", || {
        cuda_host::reclaim();
        weak.strong_count() == 0
    });
    other.synchronize().expect("synchronize");
}

#[test]
fn a_context_from_cudarc_holds_cudarcs_context_until_its_last_launch_record_is_reclaimed() {
    // Its cudarc streams' creation, on the legacy stream, would break another test's capture.
    let _captures = suite::capture_lock();
    let test =
        "a_context_from_cudarc_holds_cudarcs_context_until_its_last_launch_record_is_reclaimed";
    if !runs_here(test, false, &[]) {
        return;
    }
    let cudarc_context = CudaContext::new(0).expect("cudarc's context of device 0");
    let cudarc_stream = cudarc_context.new_stream().expect("cudarc's stream");
    let held_by_cudarc = Arc::strong_count(&cudarc_context);
    let context = Context::from_cudarc(&test_driver().driver, &cudarc_context)
        .expect("a Context from cudarc's");
    assert_eq!(Arc::strong_count(&cudarc_context), held_by_cudarc + 1);

    let stream = Stream::from_cudarc(&context, &cudarc_stream).expect("a Stream from cudarc's");
    let gate = Gate::new(&context);
    gate.hold(&stream);
    let tally = Tally::new();
    let probe = tally.probe();
    host_launch(&stream, move || probe.ran()).expect("launch");
    drop(stream);
    drop(context);
    cuda_host::reclaim();
    assert_eq!(
        Arc::strong_count(&cudarc_context),
        held_by_cudarc + 1,
        "the launch record in flight no longer holds cudarc's context"
    );

    gate.open();
    wait_until(
        "the host function to run and cudarc's context to be let go of",
        || {
            cuda_host::reclaim();
            tally.drops() == 1 && Arc::strong_count(&cudarc_context) == held_by_cudarc
        },
    );
    assert_eq!(tally.runs(), 1);
}

#[test]
fn the_last_hold_on_a_cudarc_context_releases_it_on_a_callers_thread_and_leaves_the_current_context()
 {
    let test = "the_last_hold_on_a_cudarc_context_releases_it_on_a_callers_thread_and_leaves_the_current_context";
    // Alone in a process: nothing else retains the primary context.
    if !runs_here(test, true, &[]) {
        return;
    }
    let (cudarc_context, context) = contexts();
    let device = context.device();
    assert_eq!(device, cudarc_context.cu_device());
    drop(cudarc_context);
    assert!(
        primary_context_active(device),
        "cudarc's context was released while a Context held it"
    );
    make_current(ptr::null_mut());
    drop(context);
    wait_until("cudarc's context to be released", || {
        cuda_host::reclaim();
        !primary_context_active(device)
    });
    assert!(
        current_context().is_null(),
        "releasing cudarc's context left it current"
    );
}

#[test]
fn a_cudarc_stream_of_another_context_is_refused() {
    // Its cudarc streams' creation, on the legacy stream, would break another test's capture.
    let _captures = suite::capture_lock();
    let test = "a_cudarc_stream_of_another_context_is_refused";
    // The software driver has one device unless told otherwise when it loads.
    if !runs_here(test, false, &[("CUSW_DEVICE_COUNT", "2")]) {
        return;
    }
    let (cudarc_context, context) = contexts();
    let devices = CudaContext::device_count().expect("device count");
    let other = if devices >= 2 {
        CudaContext::new(1).expect("the primary context of device 1")
    } else {
        CudaContext::new_non_primary(0, 0).expect("a second context of device 0")
    };
    let other_stream = other.new_stream().expect("a stream of the other context");
    let error = Stream::from_cudarc(&context, &other_stream)
        .expect_err("a stream of another context was taken");
    let Error::ContextMismatch {
        context: given,
        stream_context,
    } = error
    else {
        panic!("not a context mismatch: {error}");
    };
    assert_eq!(given, cudarc_context.cu_ctx().addr());
    assert_eq!(stream_context, other.cu_ctx().addr());
    assert_eq!(
        Arc::strong_count(&other_stream),
        1,
        "a refused stream is held"
    );
}

#[test]
fn cudarc_on_another_driver_library_than_cuda_hosts_is_refused() {
    // Its cudarc streams' creation, on the legacy stream, would break another test's capture.
    let _captures = suite::capture_lock();
    let test = "cudarc_on_another_driver_library_than_cuda_hosts_is_refused";
    if !in_child_process() {
        // cudarc opens `libcuda.so` first: here the software driver built without
        // cuGetProcAddress, another library than the test driver (NVIDIA's, or the software
        // driver's `libcudasw.so`), which has its own contexts.
        let libcuda = LibcudaDir::with_names(
            &cuda_host_testing::variant_path(cuda_host_testing::Variant::NoProcAddress),
            &["libcuda.so"],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let library_path = libcuda.ld_library_path();
        let kind = if test_driver().is_software() {
            "software"
        } else {
            "real"
        };
        return suite::run_in_child(
            module_path!(),
            test,
            &[
                ("CUDA_TEST_DRIVER", kind),
                (
                    "LD_LIBRARY_PATH",
                    library_path.to_str().expect("a UTF-8 library path"),
                ),
            ],
        );
    }
    let driver = &test_driver().driver;
    let cudarc_context = CudaContext::new(0).expect("cudarc's context, in the other library");
    // The test driver is not even initialised: cudarc initialised only its own library.
    let error = Context::from_cudarc(driver, &cudarc_context)
        .expect_err("a context of another driver library was taken");
    assert!(
        matches!(
            error,
            Error::DriverMismatch {
                library: "cudarc",
                ..
            }
        ),
        "{error}"
    );

    // Initialised, it sees its own current context, not the one cudarc made current.
    let context = suite::context();
    let current = current_context();
    let error = Context::from_cudarc(driver, &cudarc_context)
        .expect_err("a context of another driver library was taken");
    assert!(
        matches!(
            error,
            Error::DriverMismatch {
                library: "cudarc",
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(
        current_context(),
        current,
        "the check changed the current context"
    );

    let cudarc_stream = cudarc_context.new_stream().expect("cudarc's stream");
    let error = Stream::from_cudarc(&context, &cudarc_stream)
        .expect_err("a stream of another driver library was taken");
    assert!(matches!(error, Error::DriverMismatch { .. }), "{error}");
}

#[test]
fn borrow_raw_of_a_primary_context_releases_nothing() {
    let test = "borrow_raw_of_a_primary_context_releases_nothing";
    // Alone in a process: cudarc holds the only retain of the primary context.
    if !runs_here(test, true, &[]) {
        return;
    }
    let driver = &test_driver().driver;
    let cudarc_context = CudaContext::new(0).expect("cudarc's context of device 0");
    let device = cudarc_context.cu_device();
    let raw: CUcontext = cudarc_context.cu_ctx().cast();
    // SAFETY: cudarc's context is one of the test driver (cudarc opened the same library), and
    // it outlives `context`, everything made from it and their work, all gone before it is.
    let context = unsafe { Context::borrow_raw(driver, raw) }.expect("a borrowed Context");
    assert_eq!((context.as_raw(), context.device()), (raw, device));

    let stream = Stream::new(&context, StreamFlags::NonBlocking).expect("a stream");
    let tally = Tally::new();
    let probe = tally.probe();
    host_launch(&stream, move || probe.ran()).expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!((tally.runs(), tally.drops()), (1, 1));
    drop(stream);
    // The failure watch the drop added, which holds the Context, has run when this returns.
    cudarc_context.synchronize().expect("cudarc's synchronize");
    drop(context);
    cuda_host::reclaim();
    assert!(
        primary_context_active(device),
        "dropping a borrowed Context released the context"
    );
    drop(cudarc_context);
    assert!(
        !primary_context_active(device),
        "cudarc's was not the only retain, so the test shows nothing"
    );
}

#[test]
fn borrow_raw_of_a_non_primary_context_finds_its_device_and_runs_host_functions_there() {
    // Its cudarc streams' creation, on the legacy stream, would break another test's capture.
    let _captures = suite::capture_lock();
    let test = "borrow_raw_of_a_non_primary_context_finds_its_device_and_runs_host_functions_there";
    if !runs_here(test, false, &[]) {
        return;
    }
    let driver = &test_driver().driver;
    let cudarc_context = CudaContext::new_non_primary(0, 0).expect("a non-primary context");
    let raw: CUcontext = cudarc_context.cu_ctx().cast();
    // SAFETY: cudarc's context is one of the test driver (cudarc opened the same library), and
    // it outlives `context`, everything made from it and their work, all gone before it is.
    let context = unsafe { Context::borrow_raw(driver, raw) }.expect("a borrowed Context");
    assert_eq!(context.device(), cudarc_context.cu_device());

    let stream = Stream::new(&context, StreamFlags::NonBlocking).expect("a stream");
    let mut stream_context = ptr::null_mut();
    // SAFETY: a live stream; `stream_context` is a valid out-pointer.
    ok("cuStreamGetCtx", unsafe {
        driver.cuStreamGetCtx(stream.as_raw(), &mut stream_context)
    });
    assert_eq!(
        stream_context, raw,
        "the stream is not of the borrowed context"
    );
    let tally = Tally::new();
    let probe = tally.probe();
    host_launch(&stream, move || probe.ran()).expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!((tally.runs(), tally.drops()), (1, 1));
    drop(stream);
    drop(context);

    // Still cudarc's, and alive.
    let cudarc_stream = cudarc_context.new_stream().expect("cudarc's stream");
    let back = cudarc_stream
        .clone_dtoh(&cudarc_stream.clone_htod(&[4u32, 5]).expect("copied up"))
        .expect("copied down");
    assert_eq!(back, [4, 5]);
}

#[test]
fn a_replayable_host_function_in_cudarcs_capture_runs_on_every_launch_of_its_graph() {
    let test = "a_replayable_host_function_in_cudarcs_capture_runs_on_every_launch_of_its_graph";
    if !runs_here(test, false, &[]) {
        return;
    }
    let _alone = suite::capture_lock();
    let (cudarc_context, context) = contexts();
    let cudarc_stream = cudarc_context.new_stream().expect("cudarc's stream");
    let stream = Stream::from_cudarc(&context, &cudarc_stream).expect("a Stream from cudarc's");
    let tally = Tally::new();
    cudarc_stream
        .begin_capture(
            cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        )
        .expect("cudarc's capture begins");
    let probe = tally.probe();
    // SAFETY: no other thread ends cudarc's capture during the call.
    unsafe { cuda_host::graph::host_launch_replayable(&stream, move || probe.ran()) }
        .expect("added to cudarc's capture");
    let graph = cudarc_stream
        .end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0))
        .expect("cudarc's capture ends")
        .expect("a graph");
    for _ in 0..1_000 {
        graph.launch().expect("cudarc's graph launch");
    }
    cudarc_stream.synchronize().expect("cudarc's synchronize");
    assert_eq!(tally.runs(), 1_000);
    std::thread::sleep(Duration::from_millis(20));
    cuda_host::reclaim();
    assert_eq!(tally.drops(), 0, "dropped while cudarc's graph exists");
    drop(graph);
    tally.reclaim_until_dropped(1, "the callable to be dropped after cudarc's graph");
    assert_eq!(tally.drop_threads(), [std::thread::current().id()]);
}

#[test]
fn a_builder_refuses_a_stream_cudarc_holds_whose_end_capture_may_end_it_on_any_thread() {
    // cudarc's safe `end_capture` may run on any thread, and another thread's end ends a capture
    // in any mode (refused outside relaxed mode, yet ended): it could destroy a builder's graph
    // while a callback uses the graph's handle.
    let test = "a_builder_refuses_a_stream_cudarc_holds_whose_end_capture_may_end_it_on_any_thread";
    if !runs_here(test, false, &[]) {
        return;
    }
    let (cudarc_context, context) = contexts();
    let cudarc_stream = cudarc_context.new_stream().expect("cudarc's stream");
    let stream = Stream::from_cudarc(&context, &cudarc_stream).expect("a Stream from cudarc's");
    for mode in [
        cuda_host::graph::CaptureMode::Global,
        cuda_host::graph::CaptureMode::ThreadLocal,
        cuda_host::graph::CaptureMode::Relaxed,
    ] {
        assert!(
            matches!(
                cuda_host::graph::GraphBuilder::begin(&stream, mode),
                Err(Error::InvalidArgument { .. })
            ),
            "{mode:?}"
        );
    }
    // Nothing began: cudarc captures the stream itself, and its capture works.
    let _alone = suite::capture_lock();
    cudarc_stream
        .begin_capture(
            cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        )
        .expect("cudarc's capture begins");
    let graph = cudarc_stream
        .end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0))
        .expect("cudarc's capture ends");
    assert!(graph.is_some());
}

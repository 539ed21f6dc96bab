//! cudarc's safe API, the calls of it that need no kernel, on the driver the suite runs on: a
//! context and its device, a context of its own, streams (forked, joined, with a priority, the
//! default and per-thread ones), events, device memory set and copied, page-locked memory, a graph
//! captured from a stream, and raw context pushes around cudarc's work. What a user's crate calls through cudarc
//! on a machine without a GPU, the software driver serves.
//!
//! cudarc opens libcuda by name: on the software driver each test runs in a child process whose
//! `LD_LIBRARY_PATH` leads cudarc to the software driver ([`suite::runs_here_with_libcuda`]); on
//! the real driver, here.

use cudarc::driver::result::DriverError;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, result, sys};
use std::sync::Arc;

/// Whether `test` runs in this process (see [`suite::runs_here_with_libcuda`]), holding it alone
/// there: on the real driver, a capture of a blocking stream (the per-thread one) on one thread
/// fails another thread's work on the legacy stream (`CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`).
fn runs_here(test: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    suite::runs_here_with_libcuda(module_path!(), test, false, &[]).then(suite::capture_lock)
}

fn context() -> Arc<CudaContext> {
    CudaContext::new(0).expect("cudarc's context of device 0")
}

/// `len` words counting up from `first`.
fn words(first: u32, len: u32) -> Vec<u32> {
    (first..first + len).collect()
}

#[test]
fn a_context_tells_of_its_device_and_binds_to_any_thread() {
    let test = "a_context_tells_of_its_device_and_binds_to_any_thread";
    let Some(_alone) = runs_here(test) else {
        return;
    };
    assert!(CudaContext::device_count().expect("device count") >= 1);
    let context = context();
    assert_eq!(context.ordinal(), 0);
    assert!(!context.name().expect("the device's name").is_empty());
    context.uuid().expect("the device's UUID");
    let (major, _minor) = context.compute_capability().expect("compute capability");
    assert!(major > 0);
    let total = context.total_mem().expect("the device's memory");
    let (free, total_in_context) = context.mem_get_info().expect("free and total memory");
    assert!(free <= total && total_in_context <= total);
    context
        .set_blocking_synchronize()
        .expect("blocking synchronisation");
    context.synchronize().expect("synchronize");
    let elsewhere = Arc::clone(&context);
    std::thread::spawn(move || {
        elsewhere.bind_to_thread().expect("binds on another thread");
        elsewhere.synchronize().expect("synchronize there");
    })
    .join()
    .expect("the other thread");
    context.check_err().expect("no error recorded");
}

#[test]
fn a_context_of_its_own_has_streams_and_memory_of_its_own_until_dropped() {
    let test = "a_context_of_its_own_has_streams_and_memory_of_its_own_until_dropped";
    let Some(_alone) = runs_here(test) else {
        return;
    };
    let primary = context();
    let own = CudaContext::new_non_primary(0, 0).expect("a context of its own");
    assert!(!own.is_primary());
    assert_ne!(own.cu_ctx(), primary.cu_ctx());
    let stream = own.new_stream().expect("a stream");
    let on_device = stream.clone_htod(&words(11, 32)).expect("copied up");
    assert_eq!(
        stream.clone_dtoh(&on_device).expect("copied back"),
        words(11, 32)
    );
    drop((on_device, stream));
    drop(own);
    let stream = primary.default_stream();
    let on_device = stream.clone_htod(&words(1, 4)).expect("copied up");
    assert_eq!(
        stream.clone_dtoh(&on_device).expect("copied back"),
        words(1, 4)
    );
}

#[test]
fn a_driver_error_has_its_name_and_description() {
    let test = "a_driver_error_has_its_name_and_description";
    let Some(_alone) = runs_here(test) else {
        return;
    };
    let error = DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE);
    assert_eq!(
        error.error_name().expect("a name").to_str(),
        Ok("CUDA_ERROR_INVALID_VALUE")
    );
    assert!(!error.error_string().expect("a description").is_empty());
}

#[test]
fn memory_is_allocated_zeroed_copied_both_ways_between_slices_and_back() {
    let test = "memory_is_allocated_zeroed_copied_both_ways_between_slices_and_back";
    let Some(_alone) = runs_here(test) else {
        return;
    };
    let context = context();
    let stream = context.default_stream();
    let zeros = stream.alloc_zeros::<u32>(64).expect("zeroed memory");
    assert_eq!(stream.clone_dtoh(&zeros).expect("copied back"), [0; 64]);

    let sent = words(1, 64);
    let mut slice = stream.clone_htod(&sent).expect("copied up");
    assert_eq!(stream.clone_dtoh(&slice).expect("copied back"), sent);
    let copy = slice.try_clone().expect("a device-to-device copy");
    stream
        .memcpy_htod(&[7u32; 8], &mut slice.slice_mut(8..16))
        .expect("into part of it");
    let mut expected = sent.clone();
    expected[8..16].fill(7);
    assert_eq!(stream.clone_dtoh(&slice).expect("copied back"), expected);
    assert_eq!(stream.clone_dtoh(&copy).expect("copied back"), sent);

    let mut cleared = copy;
    stream.memset_zeros(&mut cleared).expect("set to zero");
    let mut back = vec![u32::MAX; 64];
    stream
        .memcpy_dtoh(&cleared, &mut back)
        .expect("copied back");
    assert_eq!(back, [0; 64]);
    stream.memcpy_dtod(&slice, &mut cleared).expect("copied");
    assert_eq!(stream.clone_dtoh(&cleared).expect("copied back"), expected);
    stream.synchronize().expect("synchronize");
}

#[test]
fn page_locked_memory_goes_to_the_device_and_back_in_stream_order() {
    let test = "page_locked_memory_goes_to_the_device_and_back_in_stream_order";
    let Some(_alone) = runs_here(test) else {
        return;
    };
    let context = context();
    let stream = context.default_stream();
    // SAFETY: every word is written below before anything reads it.
    let mut up = unsafe { context.alloc_pinned::<u32>(32) }.expect("page-locked memory");
    up.as_mut_slice()
        .expect("its words")
        .copy_from_slice(&words(100, 32));
    // SAFETY: as above: the copy down writes every word.
    let mut down =
        unsafe { context.alloc_pinned_with_flags::<u32>(32, sys::CU_MEMHOSTALLOC_DEVICEMAP) }
            .expect("mapped page-locked memory");
    let on_device = stream.clone_htod(&up).expect("copied up");
    stream
        .memcpy_dtoh(&on_device, &mut down)
        .expect("copied down");
    // With one stream, cudarc records no event for the copy: the stream says when it is done.
    stream.synchronize().expect("synchronize");
    assert_eq!(down.as_slice().expect("its words"), words(100, 32));
}

#[test]
fn streams_fork_join_and_keep_each_others_order_through_events() {
    let test = "streams_fork_join_and_keep_each_others_order_through_events";
    let Some(_alone) = runs_here(test) else {
        return;
    };
    let context = context();
    let first = context.new_stream().expect("a stream");
    let (least, greatest) = result::stream::get_priority_range().expect("the priority range");
    assert!(greatest <= least);
    let urgent = context
        .new_stream_with_priority(greatest)
        .expect("a stream of the greatest priority");
    let sent = words(1, 256);
    let on_first = first.clone_htod(&sent).expect("copied up");
    // The slice's events order the copy on `urgent` after the one on `first`.
    assert_eq!(urgent.clone_dtoh(&on_first).expect("copied back"), sent);

    let forked = first.fork().expect("a stream waiting for the first");
    let doubled: Vec<u32> = sent.iter().map(|word| word * 2).collect();
    let mut on_forked = forked.clone_htod(&doubled).expect("copied up");
    first.join(&forked).expect("joined");
    first
        .memcpy_dtod(&on_first, &mut on_forked)
        .expect("copied over");
    assert_eq!(first.clone_dtoh(&on_forked).expect("copied back"), sent);

    for stream in [context.default_stream(), context.per_thread_stream()] {
        let back = stream.clone_dtoh(&on_first).expect("copied back");
        assert_eq!(back, sent);
        stream.synchronize().expect("synchronize");
    }
}

#[test]
fn events_time_a_stream_and_tell_when_it_passed_them() {
    let test = "events_time_a_stream_and_tell_when_it_passed_them";
    let Some(_alone) = runs_here(test) else {
        return;
    };
    let context = context();
    let stream = context.new_stream().expect("a stream");
    let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    let start = stream.record_event(timing).expect("recorded");
    let on_device = stream.clone_htod(&words(0, 1024)).expect("copied up");
    let end = stream.record_event(timing).expect("recorded");
    let elapsed = start.elapsed_ms(&end).expect("elapsed time");
    assert!(elapsed >= 0.0, "{elapsed} ms");
    assert!(end.is_complete());
    assert_eq!(end.try_is_complete(), Ok(true));
    let never_recorded = context.new_event(None).expect("an event");
    assert_eq!(never_recorded.try_is_complete(), Ok(true));
    never_recorded.record(&stream).expect("recorded");
    never_recorded.synchronize().expect("synchronize");
    drop(on_device);
}

/// Copies `from` to `to` and clears `cleared` on `stream`, each as cudarc enqueues it.
fn copy_and_clear(
    stream: &Arc<CudaStream>,
    from: &CudaSlice<u32>,
    to: &mut CudaSlice<u32>,
    cleared: &mut CudaSlice<u32>,
) {
    stream.memcpy_dtod(from, to).expect("a copy");
    stream.memset_zeros(cleared).expect("a set");
}

#[test]
fn a_graph_captured_from_a_stream_replays_its_copies_and_sets() {
    let test = "a_graph_captured_from_a_stream_replays_its_copies_and_sets";
    let Some(_alone) = runs_here(test) else {
        return;
    };
    let context = context();
    // The per-thread stream, the only one of the context: cudarc then orders the slices' uses
    // by stream order alone, without the events it would wait on from inside the capture.
    let stream = context.per_thread_stream();
    let from = stream.clone_htod(&words(5, 16)).expect("copied up");
    let mut to = stream.alloc_zeros::<u32>(16).expect("zeroed memory");
    let mut cleared = stream.clone_htod(&[9u32; 16]).expect("copied up");
    stream.synchronize().expect("synchronize");

    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .expect("capture begun");
    assert_eq!(
        stream.capture_status(),
        Ok(sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE)
    );
    copy_and_clear(&stream, &from, &mut to, &mut cleared);
    let graph = stream
        .end_capture(sys::CUgraphInstantiate_flags(0))
        .expect("capture ended")
        .expect("a graph");
    assert_eq!(
        stream.capture_status(),
        Ok(sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    );
    assert_eq!(
        stream.clone_dtoh(&to).expect("copied back"),
        [0; 16],
        "captured work ran"
    );

    graph.upload().expect("uploaded");
    for _ in 0..2 {
        graph.launch().expect("launched");
        stream.synchronize().expect("synchronize");
        assert_eq!(stream.clone_dtoh(&to).expect("copied back"), words(5, 16));
        assert_eq!(stream.clone_dtoh(&cleared).expect("copied back"), [0; 16]);
        stream
            .memcpy_htod(&[9u32; 16], &mut cleared)
            .expect("set again between replays");
    }
}

/// The calling thread's current context, as the raw driver tells it.
fn current_context() -> sys::CUcontext {
    let mut current = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    unsafe { sys::cuCtxGetCurrent(&mut current) }
        .result()
        .expect("the current context");
    current
}

#[test]
fn a_context_pushed_and_popped_around_cudarcs_work_is_current_for_it_and_gone_after() {
    let test = "a_context_pushed_and_popped_around_cudarcs_work_is_current_for_it_and_gone_after";
    let Some(_alone) = runs_here(test) else {
        return;
    };
    let context = context();
    std::thread::spawn(move || {
        let raw = context.cu_ctx();
        assert!(current_context().is_null(), "a new thread has no context");
        // SAFETY: cudarc's live context.
        unsafe { sys::cuCtxPushCurrent_v2(raw) }
            .result()
            .expect("pushed");
        assert_eq!(current_context(), raw);
        let stream = context.new_stream().expect("a stream");
        let on_device = stream.clone_htod(&words(3, 8)).expect("copied up");
        assert_eq!(
            stream.clone_dtoh(&on_device).expect("copied back"),
            words(3, 8)
        );
        drop(on_device);
        drop(stream);
        let mut popped = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the context pushed above is current.
        unsafe { sys::cuCtxPopCurrent_v2(&mut popped) }
            .result()
            .expect("popped");
        assert_eq!(popped, raw);
        assert!(current_context().is_null(), "the pushed context is gone");
    })
    .join()
    .expect("the thread that pushed");
}

//! The native host copy: `host_copy_fn` (the `CUhostFn` C code can launch), the raw form with
//! its description copied into the launch record, and the scope whose borrows outlive the copies:
//! also when its body panics, its context fails, or other code captures.

use cuda_host::{
    Error, Stream, StreamFlags, UserData, graph::CaptureState, host_copy::HostCopy,
    host_copy::HostCopyScopeError, host_copy::host_copy_fn, host_copy::host_copy_raw,
    host_copy::host_copy_scope, host_launch, host_launch_raw, options::HostEngine,
};
use cuda_host_sys::{CUresult, CUstreamCaptureMode, CUstreamCaptureStatus};
use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use suite::capture::{Capture, is_capturing};
use suite::{Gate, capture_lock, context, wait_until, wait_until_done};

const SIZES: [usize; 4] = [0, 1, 4095, 1 << 20];

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|index| (index as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A stream on the engine `CUDA_HOST_TEST_ENGINE` names.
fn new_stream() -> Stream {
    stream_on(suite::host_engine())
}

fn stream_on(engine: HostEngine) -> Stream {
    Stream::new(&context(), StreamFlags::NonBlocking)
        .expect("stream")
        .with_host_engine(engine)
        .expect("the stream's engine")
}

/// What a copy did to its destination, as far as the bytes show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    /// It holds its old bytes.
    Not,
    /// It holds the source's.
    Wholly,
    /// Some of each: a copy was writing it.
    Partly,
}

/// What each copy did: `destinations[i]` was the destination of `sources[i]`, and held
/// `untouched`'s bytes before.
fn written(sources: &[Vec<u8>], destinations: &[Vec<u8>], untouched: &[u8]) -> Vec<Written> {
    sources
        .iter()
        .zip(destinations)
        .map(|(source, destination)| {
            if destination == source {
                Written::Wholly
            } else if destination.as_slice() == untouched {
                Written::Not
            } else {
                Written::Partly
            }
        })
        .collect()
}

/// A host function on `stream` that says when it ran.
fn ran_flag(stream: &Stream) -> Arc<AtomicBool> {
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    host_launch(stream, move || flag.store(true, Ordering::SeqCst)).expect("launch");
    ran
}

#[test]
fn a_scope_copies_bytes_that_match_for_sizes_0_1_4095_and_1_mib() {
    let stream = new_stream();
    for len in SIZES {
        let source = pattern(len, 3);
        let mut destination = vec![0xEEu8; len];
        host_copy_scope(&stream, |scope| scope.copy(&source, &mut destination))
            .expect("the scope")
            .expect("the copy");
        assert!(source == destination, "{len} bytes differ");
    }
}

#[test]
fn a_scope_waits_for_every_copy_it_launched() {
    let stream = new_stream();
    let sources: Vec<Vec<u8>> = (0..8).map(|seed| pattern(4096, seed)).collect();
    let mut destinations = vec![vec![0u8; 4096]; 8];
    host_copy_scope(&stream, |scope| {
        for (source, destination) in sources.iter().zip(destinations.iter_mut()) {
            scope.copy(source, destination).expect("the copy");
        }
    })
    .expect("the scope");
    assert_eq!(sources, destinations);
}

#[test]
fn a_scope_refuses_buffers_of_different_lengths() {
    let stream = new_stream();
    let source = vec![1u8; 16];
    let mut destination = vec![0u8; 15];
    let refused =
        host_copy_scope(&stream, |scope| scope.copy(&source, &mut destination)).expect("the scope");
    assert!(
        matches!(refused, Err(Error::InvalidArgument { .. })),
        "{refused:?}"
    );
    assert_eq!(destination, [0u8; 15]);
}

#[test]
fn the_raw_form_copies_bytes_that_match_for_sizes_0_1_4095_and_1_mib() {
    let stream = new_stream();
    for len in SIZES {
        let source = pattern(len, 9);
        let mut destination = vec![0u8; len];
        let copy = HostCopy::new(source.as_ptr().cast(), destination.as_mut_ptr().cast(), len)
            .expect("no overlap");
        // SAFETY: both buffers live until the synchronize below, and nothing else writes them.
        unsafe { host_copy_raw(&stream, copy) }.expect("launch");
        stream.synchronize().expect("synchronize");
        assert!(source == destination, "{len} bytes differ");
    }
}

#[test]
fn host_copy_fn_takes_its_description_as_c_code_passes_it() {
    // As C code would: `cuLaunchHostFunc(stream, fn, &copy)`, the description its own.
    let stream = new_stream();
    let source = pattern(4095, 1);
    let mut destination = vec![0u8; 4095];
    let copy = HostCopy {
        source: source.as_ptr().cast(),
        destination: destination.as_mut_ptr().cast(),
        length: source.len(),
    };
    // SAFETY: the description and both buffers live until the synchronize below.
    unsafe {
        host_launch_raw(
            &stream,
            host_copy_fn,
            UserData::PassThrough(std::ptr::from_ref(&copy).cast_mut().cast()),
        )
    }
    .expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(source, destination);
}

#[test]
fn a_copy_runs_in_stream_order_after_the_work_before_it() {
    let context = context();
    let stream = new_stream();
    let gate = Gate::new(&context);
    let source = pattern(4096, 5);
    let mut destination = vec![0u8; 4096];
    let copy = HostCopy::new(
        source.as_ptr().cast(),
        destination.as_mut_ptr().cast(),
        source.len(),
    )
    .expect("no overlap");
    gate.hold(&stream);
    // SAFETY: both buffers live until the synchronize below; the destination is only read
    // before the gate opens, when the copy cannot have run, and after the synchronize.
    unsafe { host_copy_raw(&stream, copy) }.expect("launch");
    std::thread::sleep(std::time::Duration::from_millis(20));
    // SAFETY: the copy waits behind the gate: nothing writes the destination now.
    let untouched = unsafe {
        std::slice::from_raw_parts(copy.destination.cast::<u8>(), 4096)
            .iter()
            .all(|&b| b == 0)
    };
    assert!(untouched, "the copy ran before the work ahead of it");
    gate.open();
    stream.synchronize().expect("synchronize");
    assert_eq!(source, destination);
}

#[test]
fn overlapping_buffers_are_refused_naming_both_ranges() {
    let stream = new_stream();
    let mut buffer = vec![0u8; 64];
    let base = buffer.as_mut_ptr();
    // SAFETY: offsets inside the buffer.
    let (from, to) = (
        base.cast_const().cast::<c_void>(),
        unsafe { base.add(16) }.cast(),
    );
    let refused = HostCopy::new(from, to, 32).expect_err("overlap accepted");
    let (from_start, to_start) = (from.addr(), to.addr());
    assert_eq!(
        refused,
        Error::OverlappingCopy {
            from: from_start..from_start + 32,
            to: to_start..to_start + 32,
        }
    );
    let message = refused.to_string();
    assert!(message.contains("overlap"), "{message}");
    assert!(message.contains(&format!("{from_start:#x}")), "{message}");
    assert!(message.contains(&format!("{to_start:#x}")), "{message}");
    // The raw form refuses before enqueueing anything; the same bytes do not overlap at 32.
    let overlapping = HostCopy {
        source: from,
        destination: to,
        length: 32,
    };
    // SAFETY: refused before anything is enqueued.
    let error = unsafe { host_copy_raw(&stream, overlapping) }.expect_err("enqueued");
    assert!(matches!(error, Error::OverlappingCopy { .. }), "{error}");
    // SAFETY: offsets inside the buffer.
    let apart = HostCopy::new(from, unsafe { base.add(32) }.cast(), 32).expect("adjacent");
    // SAFETY: the buffer lives until the synchronize below.
    unsafe { host_copy_raw(&stream, apart) }.expect("launch");
    stream.synchronize().expect("synchronize");
    // An empty copy overlaps nothing.
    HostCopy::new(from, from.cast_mut(), 0).expect("empty");
}

#[test]
fn host_copy_fn_handed_overlapping_buffers_copies_nothing() {
    let stream = new_stream();
    let mut buffer = pattern(64, 2);
    let expected = buffer.clone();
    let base = buffer.as_mut_ptr();
    let copy = HostCopy {
        source: base.cast_const().cast(),
        // SAFETY: an offset inside the buffer.
        destination: unsafe { base.add(8) }.cast(),
        length: 32,
    };
    // SAFETY: the description and the buffer live until the synchronize below.
    unsafe { host_launch_raw(&stream, host_copy_fn, UserData::Copied(copy.as_bytes())) }
        .expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(buffer, expected, "overlapping buffers were written");
}

/// The payload of the scope bodies' deliberate panics.
const BODY_PANIC: &str = "deliberate panic of a scope's body";

fn panicking_body_with_queued_copies(engine: HostEngine) {
    let context = context();
    let stream = stream_on(engine);
    let gate = Gate::new(&context);
    // Owned by the test for its whole length, and never freed if it fails: a copy that wrote
    // after the scope's unwind writes here, where it shows, rather than into freed memory.
    let source = ManuallyDrop::new(pattern(4096, 11));
    let mut destination = ManuallyDrop::new(vec![0u8; 4096]);
    gate.hold(&stream);
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        host_copy_scope(&stream, |scope| {
            scope.copy(&source, &mut destination).expect("the copy");
            std::panic::panic_any(BODY_PANIC);
        })
    }));
    let payload = unwound.expect_err("the body's panic comes through the scope");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&BODY_PANIC));
    // The copy's host function runs now, after the unwind: it must copy nothing.
    gate.open();
    stream.synchronize().expect("synchronize");
    assert!(
        destination.iter().all(|&byte| byte == 0),
        "the copy wrote after the scope's unwind ended"
    );
    drop(ManuallyDrop::into_inner(destination));
    drop(ManuallyDrop::into_inner(source));
}

#[test]
fn a_panicking_scope_body_unwinds_only_once_its_queued_copies_can_no_longer_write() {
    panicking_body_with_queued_copies(suite::host_engine());
}

#[test]
fn a_panicking_scope_body_on_a_polled_stream_unwinds_only_once_its_queued_copies_can_no_longer_write()
 {
    panicking_body_with_queued_copies(HostEngine::Polled);
}

fn panicking_body_with_a_running_copy(engine: HostEngine) {
    const LEN: usize = 64 << 20;
    let stream = stream_on(engine);
    // Never freed if the test fails, when a copy may still write them.
    let sources = ManuallyDrop::new(vec![vec![5u8; LEN]]);
    let mut destinations = ManuallyDrop::new(vec![vec![0u8; LEN]]);
    let untouched = vec![0u8; LEN];
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        host_copy_scope(&stream, |scope| {
            let before = ran_flag(&stream);
            scope
                .copy(&sources[0], &mut destinations[0])
                .expect("the copy");
            wait_until("the host function before the copy to run", || {
                before.load(Ordering::SeqCst)
            });
            // The copy starts meanwhile, most likely, and is running at the panic.
            std::thread::sleep(Duration::from_millis(1));
            std::panic::panic_any(BODY_PANIC);
        })
    }));
    assert!(unwound.is_err(), "the body's panic comes through the scope");
    // If the scope let the panic go while the copy ran, these reads race with it: what the test
    // shows is that they cannot.
    let at_unwind = written(&sources, &destinations, &untouched);
    assert_ne!(
        at_unwind,
        [Written::Partly],
        "the copy was writing when the scope's unwind ended"
    );
    wait_until_done(&stream);
    assert_eq!(
        written(&sources, &destinations, &untouched),
        at_unwind,
        "the copy wrote after the scope's unwind ended"
    );
    drop(ManuallyDrop::into_inner(destinations));
    drop(ManuallyDrop::into_inner(sources));
}

#[test]
fn a_panicking_scope_body_unwinds_only_once_its_running_copy_finished() {
    panicking_body_with_a_running_copy(suite::host_engine());
}

#[test]
fn a_panicking_scope_body_on_a_polled_stream_unwinds_only_once_its_running_copy_finished() {
    panicking_body_with_a_running_copy(HostEngine::Polled);
}

fn context_failing_while_a_copy_runs(engine: HostEngine) {
    const COPIES: usize = 8;
    const LEN: usize = 16 << 20;
    let context = context();
    let stream = stream_on(engine);
    let faulting = Stream::new(&context, StreamFlags::NonBlocking).expect("stream");
    let fault = suite::kernels::Fault::load(context.driver());
    // Never freed: the process ends with the test.
    let sources: Vec<Vec<u8>> = (1..=COPIES).map(|seed| vec![seed as u8; LEN]).collect();
    let mut destinations = ManuallyDrop::new(vec![vec![0u8; LEN]; COPIES]);
    let untouched = vec![0u8; LEN];
    let result = host_copy_scope(&stream, |scope| {
        let before = ran_flag(&stream);
        for (source, destination) in sources.iter().zip(destinations.iter_mut()) {
            scope.copy(source, destination).expect("the copy");
        }
        wait_until("the host function before the copies to run", || {
            before.load(Ordering::SeqCst)
        });
        // The first copies run meanwhile: the context fails while one of them runs, most likely.
        std::thread::sleep(Duration::from_millis(1));
        fault.launch(&faulting);
        assert!(faulting.synchronize().is_err(), "the fault is answered");
        "the body's output"
    });
    // If the scope returned while a copy ran, these reads race with it: what the test shows is
    // that they cannot.
    let at_return = written(&sources, &destinations, &untouched);
    assert!(
        !at_return.contains(&Written::Partly),
        "a copy was writing when the scope returned: {at_return:?}"
    );
    let ran = at_return
        .iter()
        .take_while(|&&w| w == Written::Wholly)
        .count();
    assert!(
        at_return[ran..].iter().all(|&w| w == Written::Not),
        "the copies ran out of order: {at_return:?}"
    );
    // Long enough for a copy still going to show; none may.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        written(&sources, &destinations, &untouched),
        at_return,
        "a copy wrote after the scope returned"
    );
    // The failure may come after every copy ran (a GPU can take longer to report a fault than
    // the copies take): then each copy's own record says it ran and the scope is a success.
    suite::figure(&format!(
        "the scope answered {} with the copies {at_return:?}",
        if result.is_ok() {
            "success"
        } else {
            "the failure"
        }
    ));
    match result {
        Ok(output) => {
            assert!(
                at_return.iter().all(|&w| w == Written::Wholly),
                "a scope that answers success ran every copy: {at_return:?}"
            );
            assert_eq!(output, "the body's output");
        }
        Err(failed) => {
            assert_eq!(
                failed.error.driver_result(),
                Some(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS),
                "{failed}"
            );
            assert_eq!(failed.output, Some("the body's output"));
        }
    }
    std::mem::forget((stream, faulting, sources));
}

#[test]
fn a_failed_scope_returns_once_its_running_copy_finished_and_later_copies_never_write() {
    // A sticky error fails the context for the rest of the process.
    suite::alone_in_child!(
        a_failed_scope_returns_once_its_running_copy_finished_and_later_copies_never_write
    );
    context_failing_while_a_copy_runs(suite::host_engine());
}

#[test]
fn a_failed_scope_on_a_polled_stream_returns_once_its_running_copy_finished_and_later_copies_never_write()
 {
    suite::alone_in_child!(
        a_failed_scope_on_a_polled_stream_returns_once_its_running_copy_finished_and_later_copies_never_write
    );
    context_failing_while_a_copy_runs(HostEngine::Polled);
}

#[test]
fn a_capture_begun_between_two_copies_is_left_intact_and_the_scope_returns_the_bodys_output() {
    // Alone in a process: a global-mode capture forbids other tests' unsafe calls.
    suite::alone_in_child!(
        a_capture_begun_between_two_copies_is_left_intact_and_the_scope_returns_the_bodys_output
    );
    let _alone = capture_lock();
    for mode in [
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
    ] {
        capture_begun_between_two_copies(mode);
    }
}

fn capture_begun_between_two_copies(mode: CUstreamCaptureMode) {
    let context = context();
    let stream = new_stream();
    let gate = Gate::new(&context);
    let sources = [pattern(4096, 1), pattern(4096, 2)];
    let [mut first, mut second] = [vec![0u8; 4096], vec![0u8; 4096]];
    gate.hold(&stream);
    let (launched, refused, capture) = std::thread::scope(|threads| {
        host_copy_scope(&stream, |scope| {
            let launched = scope.copy(&sources[0], &mut first);
            let capture = Capture::begin(stream.as_raw(), mode);
            let refused = scope.copy(&sources[1], &mut second);
            // The first copy waits at the gate while the scope joins, under the capture.
            threads.spawn(|| {
                std::thread::sleep(Duration::from_millis(30));
                gate.open();
            });
            (launched, refused, capture)
        })
        .expect("the scope hands back the body's output")
    });
    launched.expect("the copy before the capture");
    assert_eq!(
        refused.expect_err("the copy under the capture"),
        Error::StreamCapturing {
            status: CaptureState::Active
        },
        "{mode:?}"
    );
    assert_eq!(
        is_capturing(stream.as_raw()),
        (
            CUresult::CUDA_SUCCESS,
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
        ),
        "the scope broke the {mode:?} capture"
    );
    capture
        .end()
        .unwrap_or_else(|(result, _)| panic!("the {mode:?} capture ended with {result}"));
    assert_eq!(first, sources[0], "the copy before the capture ran");
    assert_eq!(second, [0u8; 4096], "the refused copy wrote");
}

#[test]
fn a_scope_on_a_special_stream_copies_in_its_order() {
    // The legacy stream and this thread's default stream resolve against the current context,
    // which the gate's raw calls need current.
    let context = context();
    context
        .bind_to_thread()
        .expect("the context binds to this thread");
    for stream in [Stream::legacy(&context), Stream::per_thread(&context)] {
        let gate = Gate::new(&context);
        let source = pattern(4096, 12);
        let mut destination = vec![0u8; 4096];
        gate.hold(&stream);
        std::thread::scope(|threads| {
            host_copy_scope(&stream, |scope| {
                scope.copy(&source, &mut destination).expect("the copy");
                threads.spawn(|| {
                    std::thread::sleep(Duration::from_millis(10));
                    gate.open();
                });
            })
            .expect("the scope");
        });
        assert_eq!(destination, source);
    }
}

#[test]
fn a_scope_on_a_capturing_stream_is_refused_before_its_body_runs_and_leaves_the_capture_intact() {
    suite::alone_in_child!(
        a_scope_on_a_capturing_stream_is_refused_before_its_body_runs_and_leaves_the_capture_intact
    );
    let _alone = capture_lock();
    let stream = new_stream();
    let capture = Capture::begin(
        stream.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
    );
    let mut called = false;
    let result = host_copy_scope(&stream, |_| called = true);
    let refused = result.expect_err("the scope is refused");
    assert!(!called, "the body ran on a capturing stream");
    assert_eq!(
        refused.error,
        Error::StreamCapturing {
            status: CaptureState::Active
        }
    );
    assert!(refused.output.is_none());
    capture.end().expect("the capture still yields a graph");
}

#[test]
fn a_scope_joining_on_the_legacy_stream_leaves_another_threads_global_capture_intact() {
    // The legacy stream's synchronize is a call another thread's global capture forbids
    // (measured on the H200); its looks must not make it.
    suite::alone_in_child!(
        a_scope_joining_on_the_legacy_stream_leaves_another_threads_global_capture_intact
    );
    let _alone = capture_lock();
    let context = context();
    let legacy = Stream::legacy(&context)
        .with_host_engine(suite::host_engine())
        .expect("the stream's engine");
    let captured = Stream::new(&context, StreamFlags::NonBlocking).expect("stream");
    let gate = Gate::new(&context);
    let source = pattern(4096, 4);
    let mut destination = vec![0u8; 4096];
    gate.hold(&legacy);
    let (began, end) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    let graph = std::thread::scope(|threads| {
        let capturing = threads.spawn(|| {
            let capture = Capture::begin(
                captured.as_raw(),
                CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            );
            began.wait();
            end.wait();
            capture.end().map(drop).map_err(|(result, _)| result)
        });
        began.wait();
        let copied = host_copy_scope(&legacy, |scope| {
            scope.copy(&source, &mut destination).expect("the copy");
            // The copy waits at the gate while the scope joins and looks.
            threads.spawn(|| {
                std::thread::sleep(Duration::from_millis(30));
                gate.open();
            });
        });
        end.wait();
        copied.expect("the scope");
        capturing.join().expect("the capturing thread")
    });
    graph.expect("the other thread's capture still yields a graph");
    assert_eq!(destination, source);
}

#[test]
fn a_drop_error_recorded_during_a_scope_replaces_nothing_and_is_the_next_calls() {
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            "a_drop_error_recorded_during_a_scope_replaces_nothing_and_is_the_next_calls",
            "failing a stream's destruction needs the software driver",
        );
    };
    // Alone in a process: a drop error goes to the next call on the context, of any test.
    suite::alone_in_child!(
        a_drop_error_recorded_during_a_scope_replaces_nothing_and_is_the_next_calls
    );
    let context = context();
    let stream = new_stream();
    let doomed = new_stream();
    let source = pattern(4096, 6);
    let mut destination = vec![0u8; 4096];
    let result = host_copy_scope(&stream, |scope| {
        scope.copy(&source, &mut destination).expect("the copy");
        wait_until_done(&stream);
        controls.fail_next_calls(c"cuStreamDestroy_v2", 1, CUresult::CUDA_ERROR_INVALID_VALUE);
        drop(doomed);
        "the body's output"
    });
    assert_eq!(result.expect("the scope's own result"), "the body's output");
    assert_eq!(destination, source);
    let next = Stream::new(&context, StreamFlags::NonBlocking).map(drop);
    assert!(
        matches!(
            next,
            Err(Error::DropFailed {
                object: "stream",
                ..
            })
        ),
        "the drop error was not left for the next call: {next:?}"
    );
}

#[test]
fn a_scope_inside_a_host_function_is_refused_without_calling_its_body() {
    let stream = Arc::new(new_stream());
    let answer = Arc::new(std::sync::Mutex::new(None));
    let (inner, answered) = (Arc::clone(&stream), Arc::clone(&answer));
    host_launch(&*stream, move || {
        let mut called = false;
        let result = host_copy_scope(inner.as_ref(), |_| called = true).map(drop);
        *answered.lock().unwrap() = Some((called, result));
    })
    .expect("launch");
    stream.synchronize().expect("synchronize");
    let (called, result) = answer
        .lock()
        .unwrap()
        .take()
        .expect("the host function ran");
    assert!(!called, "the body ran inside a host function");
    assert!(
        matches!(
            result,
            Err(HostCopyScopeError {
                error: Error::InHostFunction {
                    call: "host_copy_scope"
                },
                output: None,
            })
        ),
        "{result:?}"
    );
}

fn own_stream_failing_before_the_copies(engine: HostEngine) {
    let context = context();
    let stream = stream_on(engine);
    let fault = suite::kernels::Fault::load(context.driver());
    let sources = ManuallyDrop::new(vec![pattern(4096, 7), pattern(4096, 8)]);
    let mut destinations = ManuallyDrop::new(vec![vec![0u8; 4096]; 2]);
    let untouched = vec![0u8; 4096];
    // Nothing else looks at the stream or its context: the scope's own looks see the failure.
    let gate = Gate::new(&context);
    let result = host_copy_scope(&stream, |scope| {
        // Held at the gate, so that the copies are launched before the context fails.
        gate.hold(&stream);
        fault.launch(&stream);
        for (source, destination) in sources.iter().zip(destinations.iter_mut()) {
            scope.copy(source, destination).expect("the copy");
        }
        gate.open();
        "the body's output"
    });
    let at_return = written(&sources, &destinations, &untouched);
    assert_eq!(at_return, [Written::Not; 2], "a copy after the fault ran");
    let failed = result.expect_err("the scope answers the failure");
    assert_eq!(
        failed.error.driver_result(),
        Some(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS),
        "{failed}"
    );
    assert_eq!(failed.output, Some("the body's output"));
    std::mem::forget((stream, sources, destinations));
}

#[test]
fn a_scope_whose_stream_fails_before_its_copies_answers_the_failure_it_saw_itself() {
    suite::alone_in_child!(
        a_scope_whose_stream_fails_before_its_copies_answers_the_failure_it_saw_itself
    );
    own_stream_failing_before_the_copies(suite::host_engine());
}

#[test]
fn a_scope_whose_polled_stream_fails_before_its_copies_answers_the_failure_it_saw_itself() {
    suite::alone_in_child!(
        a_scope_whose_polled_stream_fails_before_its_copies_answers_the_failure_it_saw_itself
    );
    own_stream_failing_before_the_copies(HostEngine::Polled);
}

/// A logger that panics at the record of a context's failure, and only there.
struct PanickingAtFailures;

impl log::Log for PanickingAtFailures {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        if record.args().to_string().starts_with("the context failed") {
            panic!("deliberate panic in a logger");
        }
    }
    fn flush(&self) {}
}

fn logger_panicking_in_the_join(engine: HostEngine) {
    const COPIES: usize = 4;
    const LEN: usize = 16 << 20;
    log::set_logger(&PanickingAtFailures).expect("the first logger of this process");
    log::set_max_level(log::LevelFilter::Trace);
    let context = context();
    let stream = stream_on(engine);
    let faulting = Stream::new(&context, StreamFlags::NonBlocking).expect("stream");
    let fault = suite::kernels::Fault::load(context.driver());
    // Never freed: the process ends with the test.
    let sources: Vec<Vec<u8>> = (1..=COPIES).map(|seed| vec![seed as u8; LEN]).collect();
    let mut destinations = ManuallyDrop::new(vec![vec![0u8; LEN]; COPIES]);
    let untouched = vec![0u8; LEN];
    // The copies after the first wait at a gate that opens only at the end: at the failure they
    // are pending, and its record, which counts them, is logged.
    let gate = Gate::new(&context);
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        host_copy_scope(&stream, |scope| {
            let before = ran_flag(&stream);
            for (index, (source, destination)) in
                sources.iter().zip(destinations.iter_mut()).enumerate()
            {
                scope.copy(source, destination).expect("the copy");
                if index == 0 {
                    gate.hold(&stream);
                }
            }
            wait_until("the host function before the copies to run", || {
                before.load(Ordering::SeqCst)
            });
            std::thread::sleep(Duration::from_millis(1));
            // Nothing here looks for the failure: the scope's join sees it first, and its
            // record is logged there.
            fault.launch(&faulting);
        })
    }));
    let at_return = written(&sources, &destinations, &untouched);
    assert!(
        !at_return.contains(&Written::Partly),
        "a copy was writing when the scope unwound: {at_return:?}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        written(&sources, &destinations, &untouched),
        at_return,
        "a copy wrote after the scope unwound"
    );
    assert!(
        at_return[1..].iter().all(|&w| w == Written::Not),
        "a copy behind the gate ran: {at_return:?}"
    );
    // The failure's log calls contain a panicking logger; wherever one would still come
    // through, it comes only once no copy can write (checked above).
    match unwound {
        Err(payload) => assert!(suite::quiet::is_deliberate(&*payload), "another panic"),
        Ok(answer) => assert!(
            answer
                .as_ref()
                .is_err_and(|failed| failed.error.driver_result().is_some()),
            "the scope did not answer the failure: {answer:?}"
        ),
    }
    gate.open();
    std::mem::forget((stream, faulting, sources));
}

#[test]
fn a_logger_panicking_in_a_failed_scopes_join_unwinds_only_once_no_copy_can_write() {
    suite::alone_in_child!(
        a_logger_panicking_in_a_failed_scopes_join_unwinds_only_once_no_copy_can_write
    );
    logger_panicking_in_the_join(suite::host_engine());
}

#[test]
fn a_logger_panicking_in_a_failed_polled_scopes_join_unwinds_only_once_no_copy_can_write() {
    suite::alone_in_child!(
        a_logger_panicking_in_a_failed_polled_scopes_join_unwinds_only_once_no_copy_can_write
    );
    logger_panicking_in_the_join(HostEngine::Polled);
}

#[test]
fn a_raw_copy_queued_behind_a_failure_never_writes_and_its_description_is_reclaimed() {
    // Alone in a process: the failure stays with it.
    suite::alone_in_child!(
        a_raw_copy_queued_behind_a_failure_never_writes_and_its_description_is_reclaimed
    );
    let context = context();
    let stream = new_stream();
    let gate = Gate::new(&context);
    let fault = suite::kernels::Fault::load(context.driver());
    let source = pattern(4096, 9);
    let mut destination = vec![0u8; 4096];
    gate.hold(&stream);
    fault.launch(&stream);
    let copy = HostCopy::new(
        source.as_ptr().cast(),
        destination.as_mut_ptr().cast(),
        source.len(),
    )
    .expect("a copy");
    // SAFETY: both buffers outlive the stream's work (the synchronize below) and the check after.
    unsafe { host_copy_raw(&stream, copy) }.expect("the copy is enqueued");
    gate.open();
    assert!(stream.synchronize().is_err(), "the fault is reported");
    std::thread::sleep(std::time::Duration::from_millis(50));
    cuda_host::reclaim();
    assert!(
        destination.iter().all(|&byte| byte == 0),
        "a copy behind the fault wrote"
    );
    assert_eq!(
        cuda_host::metrics().launch_slots().in_flight,
        0,
        "the copy's description was not reclaimed"
    );
    std::mem::forget(stream);
}

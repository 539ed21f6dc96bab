//! Host functions of a stream run in FIFO order, all on one driver thread, whichever ABI launched
//! them.

use crate::harness::*;
use cuda_host::Stream;
use cuda_host_sys::{Availability, CUhostTaskSyncMode};
use std::ffi::c_void;
use std::ptr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::ThreadId;
use suite::host_function::{leak_closure, run_closure};
use suite::{hold_and_release, ok};

/// What the host functions of one stream share.
struct StreamState {
    next: AtomicUsize,
    out_of_order: AtomicUsize,
    threads: &'static HostThreads,
}

/// The threads host functions ran on: the first one seen, and how many runs were elsewhere.
#[derive(Default)]
struct HostThreads {
    first: OnceLock<ThreadId>,
    elsewhere: AtomicUsize,
}

/// One host function's user data: its stream's state and its place in the stream.
struct Call {
    state: &'static StreamState,
    sequence: usize,
}

unsafe extern "C" fn count_in_order(data: *mut c_void) {
    // SAFETY: launched with a pointer to a leaked `Call`.
    let call = unsafe { &*data.cast::<Call>() };
    let state = call.state;
    if state.next.fetch_add(1, Ordering::SeqCst) != call.sequence {
        state.out_of_order.fetch_add(1, Ordering::SeqCst);
    }
    let thread = std::thread::current().id();
    if *state.threads.first.get_or_init(|| thread) != thread {
        state.threads.elsewhere.fetch_add(1, Ordering::SeqCst);
    }
}

/// Enqueues `per_stream` host functions on each of 4 non-blocking streams, round-robin from this
/// thread, and waits for the streams.
fn run_on_four_streams(per_stream: usize) -> (Vec<&'static StreamState>, &'static HostThreads) {
    let context = current_context();
    let streams: Vec<Stream> = (0..4).map(|_| non_blocking(&context)).collect();
    let threads: &'static HostThreads = leak(HostThreads::default());
    let states: Vec<&'static StreamState> = streams
        .iter()
        .map(|_| {
            leak(StreamState {
                next: AtomicUsize::new(0),
                out_of_order: AtomicUsize::new(0),
                threads,
            })
        })
        .collect();
    let calls: Vec<&'static [Call]> = states
        .iter()
        .map(|&state| {
            let calls: Vec<Call> = (0..per_stream)
                .map(|sequence| Call { state, sequence })
                .collect();
            &*Box::leak(calls.into_boxed_slice())
        })
        .collect();
    for sequence in 0..per_stream {
        for (stream, calls) in streams.iter().zip(&calls) {
            let data = ptr::from_ref(&calls[sequence]).cast_mut().cast();
            // SAFETY: `count_in_order` reads a leaked `Call`, from any thread.
            let result =
                unsafe { driver().cuLaunchHostFunc(stream.as_raw(), Some(count_in_order), data) };
            ok("cuLaunchHostFunc", result);
        }
    }
    for stream in &streams {
        ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    }
    (states, threads)
}

#[test]
fn host_functions_of_each_stream_all_run_in_fifo_order() {
    const PER_STREAM: usize = 10_000;
    let _shared = shared();
    let (states, _) = run_on_four_streams(PER_STREAM);
    for (index, state) in states.iter().enumerate() {
        assert_eq!(
            count(&state.next),
            PER_STREAM,
            "stream {index}: not all ran"
        );
        assert_eq!(
            count(&state.out_of_order),
            0,
            "stream {index}: out of order"
        );
    }
}

#[test]
fn host_functions_of_all_streams_run_on_one_thread_that_is_not_the_callers() {
    let _shared = shared();
    let (states, threads) = run_on_four_streams(500);
    assert!(states.iter().all(|state| count(&state.next) == 500));
    assert_eq!(
        count(&threads.elsewhere),
        0,
        "host functions ran on more than one thread"
    );
    assert_ne!(
        threads.first.get().copied(),
        Some(std::thread::current().id()),
        "host functions ran on the enqueuing thread"
    );
}

#[test]
fn launch_host_func_v2_runs_host_functions_in_stream_order_in_either_sync_mode() {
    if driver().availability("cuLaunchHostFunc_v2") != Some(Availability::Available) {
        return suite::skip(
            "launch_host_func_v2_runs_host_functions_in_stream_order_in_either_sync_mode",
            "cuLaunchHostFunc_v2 came with CUDA 13.1, after this driver",
        );
    }
    let _shared = shared();
    let context = current_context();
    let (stream, witness) = (non_blocking(&context), non_blocking(&context));
    let log = Log::default();
    let modes = [
        (CUhostTaskSyncMode::CU_HOST_TASK_BLOCKING, "blocking"),
        (CUhostTaskSyncMode::CU_HOST_TASK_SPINWAIT, "spin-wait"),
    ];
    let synchronized = hold_and_release(
        &stream,
        || {
            for (mode, entry) in modes {
                let data = leak_closure(log.marker(entry));
                // SAFETY: `run_closure` accepts `data` on any thread, for the process's lifetime.
                ok("cuLaunchHostFunc_v2", unsafe {
                    driver().cuLaunchHostFunc_v2(stream.as_raw(), Some(run_closure), data, mode.0)
                });
            }
        },
        || assert_held(&witness, &log, stream.as_raw(), "the held stream"),
        |stream| synchronize(stream.as_raw()),
    );
    ok("cuStreamSynchronize", synchronized);
    assert_eq!(log.entries(), ["blocking", "spin-wait"]);
}

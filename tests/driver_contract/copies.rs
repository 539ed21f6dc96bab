//! Copies whose enqueue waits until the stream has reached them, and copies whose does not.

use crate::harness::*;
use cuda_host::Context;
use cuda_host_sys::{CUdeviceptr, CUresult};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use suite::{Gate, MappedWords, hold_and_release, ok, wait_until};

/// A word of device memory, freed on drop. Tests that use one run alone: allocating can be refused
/// by another test's global-mode capture, and freeing waits for the whole context.
struct DeviceWord(CUdeviceptr);

impl DeviceWord {
    fn new() -> DeviceWord {
        let mut address = 0;
        // SAFETY: a valid out-pointer; the context is current.
        ok("cuMemAlloc_v2", unsafe {
            driver().cuMemAlloc_v2(&mut address, 4)
        });
        DeviceWord(address)
    }
}

impl Drop for DeviceWord {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAlloc_v2 and freed once, here.
        let _ = unsafe { driver().cuMemFree_v2(self.0) };
    }
}

/// How long after an enqueue began the gate that holds its stream opens.
const RELEASE_AFTER: Duration = Duration::from_millis(200);

/// Calls `enqueue` on another thread (with `context` bound) while its stream is held at `gate`,
/// and opens the gate from this thread [`RELEASE_AFTER`] after the call began. Answers what the
/// call returned, and whether it returned only after the gate opened. Bounded: a call that never
/// returns fails the test.
fn enqueue_then_open<T: Send + 'static>(
    context: &Context,
    gate: &Gate,
    enqueue: impl FnOnce() -> T + Send + 'static,
) -> (T, bool) {
    let began = Arc::new(AtomicBool::new(false));
    let answer: Arc<Mutex<Option<(T, Instant)>>> = Arc::default();
    let (thread_began, slot) = (Arc::clone(&began), Arc::clone(&answer));
    let context = context.clone();
    std::thread::spawn(move || {
        context.bind_to_thread().expect("the context binds");
        thread_began.store(true, Ordering::SeqCst);
        let value = enqueue();
        *lock(&slot) = Some((value, Instant::now()));
    });
    wait_until("the enqueuing thread", || began.load(Ordering::SeqCst));
    std::thread::sleep(RELEASE_AFTER);
    let opened = Instant::now();
    gate.open();
    wait_until("the enqueue, once the gate opened", || {
        lock(&answer).is_some()
    });
    let (value, returned) = lock(&answer).take().expect("the answer");
    (value, returned >= opened)
}

#[test]
fn a_copy_between_mapped_host_buffers_returns_only_once_the_stream_reached_it() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let gate = Gate::new(&context);
    let words = Arc::new(MappedWords::new(&context, 2));
    words.set(0, 7);
    gate.hold(&stream);

    let (copy_words, handle) = (Arc::clone(&words), SendHandle(stream.as_raw()));
    let ((result, copied), waited) = enqueue_then_open(&context, &gate, move || {
        let (to, from) = (copy_words.device_address(1), copy_words.device_address(0));
        // SAFETY: both addresses are mapped host memory of the stream's context.
        let result = unsafe { driver().cuMemcpyDtoDAsync_v2(to, from, 4, handle.get()) };
        (result, copy_words.get(1))
    });
    ok("cuMemcpyDtoDAsync_v2", result);
    assert!(waited, "returned before the stream reached the copy");
    assert_eq!(copied, 7, "returned before the copy was done");
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
}

#[test]
fn a_copy_from_device_memory_into_pageable_host_memory_returns_only_once_the_stream_reached_it() {
    let _alone = alone();
    let context = current_context();
    let device = DeviceWord::new(); // freed after the gate has opened
    let stream = non_blocking(&context);
    let gate = Gate::new(&context);
    let words = MappedWords::new(&context, 1);
    words.set(0, 7);
    // SAFETY: mapped host memory to device memory, both of the stream's context.
    ok("cuMemcpyDtoDAsync_v2", unsafe {
        driver().cuMemcpyDtoDAsync_v2(device.0, words.device_address(0), 4, stream.as_raw())
    });
    gate.hold(&stream);

    // Plain heap memory, leaked: a driver that copied later would still write to live memory.
    let pageable: &'static AtomicU32 = leak(AtomicU32::new(0));
    let (from, handle) = (device.0, SendHandle(stream.as_raw()));
    let ((result, copied), waited) = enqueue_then_open(&context, &gate, move || {
        // SAFETY: four writable bytes that live for the process; device memory of the stream's
        // context.
        let result = unsafe {
            driver().cuMemcpyDtoHAsync_v2(pageable.as_ptr().cast(), from, 4, handle.get())
        };
        (result, pageable.load(Ordering::SeqCst))
    });
    ok("cuMemcpyDtoHAsync_v2", result);
    assert!(waited, "returned before the stream reached the copy");
    assert_eq!(copied, 7, "returned before the copy was done");
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
}

#[test]
fn a_copy_from_mapped_host_memory_to_device_memory_returns_at_once_behind_a_held_stream() {
    let _alone = alone();
    let context = current_context();
    let device = DeviceWord::new(); // freed after the gate has opened
    let stream = non_blocking(&context);
    let words = MappedWords::new(&context, 2);
    words.set(0, 7);

    let (to, from) = (device.0, words.device_address(0));
    let synchronized = hold_and_release(
        &stream,
        || {
            let (handle, copy_context) = (SendHandle(stream.as_raw()), context.clone());
            let result =
                returns_while_held("a copy to device memory with its stream held", move || {
                    copy_context.bind_to_thread().expect("the context binds");
                    // SAFETY: mapped host memory to device memory, both of the stream's context.
                    unsafe { driver().cuMemcpyDtoDAsync_v2(to, from, 4, handle.get()) }
                });
            ok("cuMemcpyDtoDAsync_v2", result);
        },
        || {
            assert_eq!(
                query(stream.as_raw()),
                CUresult::CUDA_ERROR_NOT_READY,
                "the stream went on before the gate opened"
            );
        },
        |stream| {
            // Copied back behind it: the copy ran, in order, once the stream went on.
            // SAFETY: device memory to mapped host memory, both of the stream's context.
            ok("cuMemcpyDtoDAsync_v2", unsafe {
                driver().cuMemcpyDtoDAsync_v2(words.device_address(1), to, 4, stream.as_raw())
            });
            synchronize(stream.as_raw())
        },
    );
    ok("cuStreamSynchronize", synchronized);
    assert_eq!(words.get(1), 7);
}

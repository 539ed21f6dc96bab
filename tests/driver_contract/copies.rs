//! Copies whose enqueue waits until the stream has reached them, copies whose does not, peer
//! copies, the synchronous copies, and memsets of 8, 16 and 32 bits, async and synchronous.

use crate::harness::*;
use cuda_host::Stream;
use cuda_host_sys::{CUdeviceptr, CUresult, CUstream};
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use suite::{Gate, MappedWords, hold_and_release, ok};

/// Has another thread make `copy` while `stream` is held, opening the hold a while after the copy
/// began: checks that `copy`, which answers the driver's result and the destination's word once
/// the call returned, returned only after that, with the word (7) copied.
fn assert_copy_waits_for_its_stream(
    stream: &Stream,
    call: &'static str,
    copy: impl FnOnce() -> (CUresult, u32) + Send + 'static,
) {
    let gate = Gate::new(stream.context());
    gate.hold(stream);
    let ((result, copied), waited) = enqueue_then_open(stream.context(), &gate, copy);
    ok(call, result);
    assert!(waited, "returned before the stream reached the copy");
    assert_eq!(copied, 7, "returned before the copy was done");
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
}

#[test]
fn a_copy_between_mapped_host_buffers_returns_only_once_the_stream_reached_it() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let words = Arc::new(MappedWords::new(&context, 2));
    words.set(0, 7);

    let (copy_words, handle) = (Arc::clone(&words), SendHandle(stream.as_raw()));
    assert_copy_waits_for_its_stream(&stream, "cuMemcpyDtoDAsync_v2", move || {
        let (to, from) = (copy_words.device_address(1), copy_words.device_address(0));
        // SAFETY: both addresses are mapped host memory of the stream's context.
        let result = unsafe { driver().cuMemcpyDtoDAsync_v2(to, from, 4, handle.get()) };
        (result, copy_words.get(1))
    });
}

#[test]
fn a_copy_from_device_memory_into_pageable_host_memory_returns_only_once_the_stream_reached_it() {
    let _alone = alone();
    let context = current_context();
    let device = DeviceMemory::new(4); // freed after the gate has opened
    let stream = non_blocking(&context);
    let words = MappedWords::new(&context, 1);
    words.set(0, 7);
    // SAFETY: mapped host memory to device memory, both of the stream's context.
    ok("cuMemcpyDtoDAsync_v2", unsafe {
        driver().cuMemcpyDtoDAsync_v2(device.0, words.device_address(0), 4, stream.as_raw())
    });

    // Plain heap memory, leaked: a driver that copied later would still write to live memory.
    let pageable: &'static AtomicU32 = leak(AtomicU32::new(0));
    let (from, handle) = (device.0, SendHandle(stream.as_raw()));
    assert_copy_waits_for_its_stream(&stream, "cuMemcpyDtoHAsync_v2", move || {
        // SAFETY: four writable bytes that live for the process; device memory of the stream's
        // context.
        let result = unsafe {
            driver().cuMemcpyDtoHAsync_v2(pageable.as_ptr().cast(), from, 4, handle.get())
        };
        (result, pageable.load(Ordering::SeqCst))
    });
}

/// Has another thread make `copy(to, stream)`, a copy of the word 7 to the device memory `to`,
/// while `stream` is held: checks that it returns while the stream is still held, and that the
/// word arrives, in order, once the stream goes on.
fn assert_copy_to_device_returns_at_once(
    call: &'static str,
    copy: impl FnOnce(CUdeviceptr, CUstream) -> CUresult + Send + 'static,
) {
    let context = current_context();
    let device = DeviceMemory::new(4); // freed after the gate has opened
    let stream = non_blocking(&context);
    let back = MappedWords::new(&context, 1);
    let to = device.0;
    let synchronized = hold_and_release(
        &stream,
        || {
            let (handle, copy_context) = (SendHandle(stream.as_raw()), context.clone());
            let result =
                returns_while_held("a copy to device memory with its stream held", move || {
                    copy_context.bind_to_thread().expect("the context binds");
                    copy(to, handle.get())
                });
            ok(call, result);
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
                driver().cuMemcpyDtoDAsync_v2(back.device_address(0), to, 4, stream.as_raw())
            });
            synchronize(stream.as_raw())
        },
    );
    ok("cuStreamSynchronize", synchronized);
    assert_eq!(back.get(0), 7);
}

#[test]
fn a_copy_from_mapped_host_memory_to_device_memory_returns_at_once_behind_a_held_stream() {
    let _alone = alone();
    let words = MappedWords::new(&current_context(), 1);
    words.set(0, 7);
    let from = words.device_address(0);
    assert_copy_to_device_returns_at_once("cuMemcpyDtoDAsync_v2", move |to, stream| {
        // SAFETY: mapped host memory to device memory, both of the stream's context.
        unsafe { driver().cuMemcpyDtoDAsync_v2(to, from, 4, stream) }
    });
}

#[test]
fn a_copy_from_pageable_host_memory_to_device_memory_returns_at_once_having_read_its_source() {
    let _alone = alone();
    // Plain heap memory, leaked: a driver that read it later would still read live memory.
    let pageable: &'static AtomicU32 = leak(AtomicU32::new(7));
    assert_copy_to_device_returns_at_once("cuMemcpyHtoDAsync_v2", move |to, stream| {
        // SAFETY: four readable bytes that live for the process, to device memory of the
        // stream's context.
        let result =
            unsafe { driver().cuMemcpyHtoDAsync_v2(to, pageable.as_ptr().cast(), 4, stream) };
        // Returned with the stream still held: the driver staged the word, and the caller may
        // use its memory again.
        pageable.store(8, Ordering::SeqCst);
        result
    });
}

#[test]
fn a_memset_writes_its_words_when_the_stream_reaches_it() {
    let _shared = shared();
    let context = current_context();
    let (stream, witness) = (non_blocking(&context), non_blocking(&context));
    let words = MappedWords::new(&context, 3);
    let synchronized = hold_and_release(
        &stream,
        || {
            // SAFETY: three mapped words of the stream's context, which outlive its work.
            ok("cuMemsetD32Async", unsafe {
                driver().cuMemsetD32Async(words.device_address(0), 9, 3, stream.as_raw())
            });
        },
        || {
            let_free_work_run(&witness);
            assert_eq!(
                [0, 1, 2].map(|index| words.get(index)),
                [0; 3],
                "set while held"
            );
        },
        |stream| synchronize(stream.as_raw()),
    );
    ok("cuStreamSynchronize", synchronized);
    assert_eq!([0, 1, 2].map(|index| words.get(index)), [9; 3]);
}

#[test]
fn memsets_of_bytes_and_halfwords_write_them_when_the_stream_reaches_them() {
    let _shared = shared();
    let context = current_context();
    let (stream, witness) = (non_blocking(&context), non_blocking(&context));
    let words = MappedWords::new(&context, 2);
    let synchronized = hold_and_release(
        &stream,
        || {
            // SAFETY: two mapped words of the stream's context, which outlive its work, each
            // aligned for the sets.
            unsafe {
                ok(
                    "cuMemsetD16Async",
                    driver().cuMemsetD16Async(words.device_address(0), 0xabcd, 2, stream.as_raw()),
                );
                ok(
                    "cuMemsetD8Async",
                    driver().cuMemsetD8Async(words.device_address(1), 0x5a, 3, stream.as_raw()),
                );
            }
        },
        || {
            let_free_work_run(&witness);
            assert_eq!([words.get(0), words.get(1)], [0; 2], "set while held");
        },
        |stream| synchronize(stream.as_raw()),
    );
    ok("cuStreamSynchronize", synchronized);
    // Little-endian words: two halfwords, and three bytes of four.
    assert_eq!([words.get(0), words.get(1)], [0xabcd_abcd, 0x005a_5a5a]);
}

#[test]
fn a_synchronous_memset_of_page_locked_memory_has_set_it_when_it_returns() {
    let _alone = alone(); // the legacy stream
    let words = MappedWords::new(&current_context(), 3);
    // SAFETY: three mapped words of the current context, each aligned for its set.
    unsafe {
        ok(
            "cuMemsetD32_v2",
            driver().cuMemsetD32_v2(words.device_address(0), 9, 1),
        );
        assert_eq!(words.get(0), 9);
        ok(
            "cuMemsetD16_v2",
            driver().cuMemsetD16_v2(words.device_address(1), 0x1234, 2),
        );
        assert_eq!(words.get(1), 0x1234_1234);
        ok(
            "cuMemsetD8_v2",
            driver().cuMemsetD8_v2(words.device_address(2), 0x7f, 4),
        );
        assert_eq!(words.get(2), 0x7f7f_7f7f);
    }
}

#[test]
fn synchronous_copies_carry_words_to_device_memory_between_allocations_and_back() {
    let _alone = alone(); // device memory and the legacy stream
    let _context = current_context();
    let (first, second) = (DeviceMemory::new(16), DeviceMemory::new(16));
    let sent: [u32; 4] = [1, 2, 3, 4];
    let mut back = [0u32; 4];
    // SAFETY: 16 bytes each way, between live host arrays and device allocations of 16 bytes.
    unsafe {
        ok(
            "cuMemcpyHtoD_v2",
            driver().cuMemcpyHtoD_v2(first.0, sent.as_ptr().cast(), 16),
        );
        ok(
            "cuMemcpyDtoD_v2",
            driver().cuMemcpyDtoD_v2(second.0, first.0, 16),
        );
        ok(
            "cuMemcpyDtoH_v2",
            driver().cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), second.0, 16),
        );
    }
    assert_eq!(
        back, sent,
        "the copy to the host has completed when it returns"
    );

    // A synchronous set of device memory, then a copy back: both in the legacy stream's order.
    // SAFETY: as above; the allocation is aligned for 32-bit words.
    unsafe {
        ok("cuMemsetD32_v2", driver().cuMemsetD32_v2(second.0, 6, 4));
        ok(
            "cuMemcpyDtoH_v2",
            driver().cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), second.0, 16),
        );
    }
    assert_eq!(back, [6; 4]);
}

#[test]
fn a_peer_copy_between_allocations_of_one_context_is_done_in_its_streams_order() {
    let _alone = alone(); // device memory and the legacy stream
    let context = current_context();
    let (from, to) = (DeviceMemory::new(4), DeviceMemory::new(4));
    let stream = non_blocking(&context);
    let mut back = 0u32;
    // SAFETY: four bytes each way, between a live host word and device allocations of four bytes
    // of the stream's context.
    unsafe {
        ok(
            "cuMemcpyHtoD_v2",
            driver().cuMemcpyHtoD_v2(from.0, ptr::from_ref(&5u32).cast(), 4),
        );
        ok(
            "cuMemcpyPeerAsync",
            driver().cuMemcpyPeerAsync(
                to.0,
                context.as_raw(),
                from.0,
                context.as_raw(),
                4,
                stream.as_raw(),
            ),
        );
        ok("cuStreamSynchronize", synchronize(stream.as_raw()));
        ok(
            "cuMemcpyDtoH_v2",
            driver().cuMemcpyDtoH_v2(ptr::from_mut(&mut back).cast(), to.0, 4),
        );
    }
    assert_eq!(back, 5);
}

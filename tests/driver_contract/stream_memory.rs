//! Stream memory operations: writes of 32- and 64-bit words in stream order, and waits that hold
//! a stream's later work until a word satisfies them.

use crate::harness::*;
use cuda_host_sys::{CUresult, CUstreamBatchMemOpType, CUstreamWaitValue_flags};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use suite::{Gate, MappedWords, hold_and_release, ok, wait_until};

#[test]
fn stream_writes_of_32_and_64_bit_words_land_when_the_stream_reaches_them() {
    let _shared = shared();
    let context = current_context();
    let (stream, witness) = (non_blocking(&context), non_blocking(&context));
    let words = MemOpWords::new(&context);
    let synchronized = hold_and_release(
        &stream,
        // SAFETY: mapped host memory of the stream's context, aligned for each write, which
        // outlives the stream's work.
        || unsafe {
            ok(
                "cuStreamWriteValue32_v2",
                driver().cuStreamWriteValue32_v2(stream.as_raw(), words.narrow_address(), 7, 0),
            );
            ok(
                "cuStreamWriteValue64_v2",
                driver().cuStreamWriteValue64_v2(
                    stream.as_raw(),
                    words.wide_address(),
                    1 << 40 | 9,
                    0,
                ),
            );
        },
        || {
            let_free_work_run(&witness);
            assert_eq!((words.narrow(), words.wide()), (0, 0), "written while held");
        },
        |stream| synchronize(stream.as_raw()),
    );
    ok("cuStreamSynchronize", synchronized);
    assert_eq!((words.narrow(), words.wide()), (7, 1 << 40 | 9));
}

/// Enqueues on a new stream a wait on `words` (`wide` or not) with `flags` and `value`, then a
/// host function; sets the word to each of `unsatisfying` in turn, checking the host function
/// waits, then to `satisfying`, checking it runs.
fn assert_wait_holds_until(
    wide: bool,
    flags: u32,
    value: u64,
    unsatisfying: &[u64],
    satisfying: u64,
) {
    let context = current_context();
    let (stream, witness) = (non_blocking(&context), non_blocking(&context));
    let words = MemOpWords::new(&context);
    let set = |value: u64| {
        if wide {
            words.set_wide(value);
        } else {
            words.set_narrow(u32::try_from(value).expect("a 32-bit value"));
        }
    };
    set(unsatisfying[0]);
    // SAFETY: mapped host memory of the stream's context, aligned for the wait, which outlives
    // the stream's work.
    let result = unsafe {
        if wide {
            driver().cuStreamWaitValue64_v2(stream.as_raw(), words.wide_address(), value, flags)
        } else {
            let value = u32::try_from(value).expect("a 32-bit value");
            driver().cuStreamWaitValue32_v2(stream.as_raw(), words.narrow_address(), value, flags)
        }
    };
    ok("cuStreamWaitValue", result);
    let runs = Arc::new(AtomicUsize::new(0));
    launch(stream.as_raw(), counting(&runs));
    for &word in unsatisfying {
        set(word);
        let_free_work_run(&witness);
        assert_eq!(
            count(&runs),
            0,
            "ran past a wait for {value} with the word at {word}"
        );
        assert_eq!(query(stream.as_raw()), CUresult::CUDA_ERROR_NOT_READY);
    }
    set(satisfying);
    wait_until("the work after a satisfied wait", || count(&runs) == 1);
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
}

#[test]
fn a_32_bit_wait_for_equality_holds_later_work_until_the_word_equals_its_value() {
    let _shared = shared();
    let eq = CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_EQ.0;
    assert_wait_holds_until(false, eq, 3, &[0, 4, 2], 3);
}

#[test]
fn a_64_bit_wait_for_at_least_holds_later_work_until_the_word_reaches_its_value() {
    let _shared = shared();
    let geq = CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ.0;
    assert_wait_holds_until(true, geq, 5, &[0, 4], 6);
}

#[test]
fn a_32_bit_wait_for_at_least_compares_cyclically_across_the_wrap() {
    let _shared = shared();
    let geq = CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ.0;
    // (int32)(word - value) >= 0: 5 is 21 past 0xFFFF_FFF0; 0x7FFF_FFF0 is 2^31 behind it.
    assert_wait_holds_until(false, geq, 0xFFFF_FFF0, &[0xFFFF_FFE0, 0x7FFF_FFF0], 5);
}

#[test]
fn a_64_bit_wait_for_at_least_compares_cyclically_across_the_wrap() {
    let _shared = shared();
    let geq = CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ.0;
    // (int64)(word - value) >= 0: 5 is 21 past 2^64 - 16, which 2^63 - 16 is 2^63 behind.
    assert_wait_holds_until(
        true,
        geq,
        0xFFFF_FFFF_FFFF_FFF0,
        &[0xFFFF_FFFF_FFFF_FFE0, 0x7FFF_FFFF_FFFF_FFF0],
        5,
    );
}

#[test]
fn a_64_bit_wait_for_at_least_is_exact_up_to_2_to_the_63_minus_1() {
    let _shared = shared();
    let geq = CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ.0;
    // What timelines rely on: below 2^63, "at least" is exact, also from 0 to the largest value.
    let top = (1 << 63) - 1;
    assert_wait_holds_until(true, geq, top, &[0, top - 1], top);
    assert_wait_holds_until(true, geq, 1, &[0], top);
}

#[test]
fn a_batch_of_a_write_and_a_wait_writes_when_the_stream_reaches_it_then_holds_later_work() {
    let _shared = shared();
    let context = current_context();
    let (stream, witness) = (non_blocking(&context), non_blocking(&context));
    let words = MappedWords::new(&context, 2);
    let (sequence, acknowledged) = (0, 1);
    let gate = Gate::new(&context);
    gate.hold(&stream);
    let mut ops = [
        batched(
            CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_32,
            words.device_address(sequence),
            1,
            0,
        ),
        batched(
            CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WAIT_VALUE_32,
            words.device_address(acknowledged),
            1,
            CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ.0,
        ),
    ];
    // SAFETY: a live stream; mapped host memory of its context, aligned, which outlives the
    // stream's work; two operations.
    ok("cuStreamBatchMemOp_v2", unsafe {
        driver().cuStreamBatchMemOp_v2(stream.as_raw(), 2, ops.as_mut_ptr(), 0)
    });
    let runs = Arc::new(AtomicUsize::new(0));
    launch(stream.as_raw(), counting(&runs));
    let_free_work_run(&witness);
    assert_eq!(
        words.get(sequence),
        0,
        "written before the stream reached it"
    );
    gate.open();
    wait_until("the batch's write to land", || words.get(sequence) == 1);
    let_free_work_run(&witness);
    assert_eq!(count(&runs), 0, "ran past the batch's wait");
    assert_eq!(query(stream.as_raw()), CUresult::CUDA_ERROR_NOT_READY);
    words.set(acknowledged, 1);
    wait_until("the work after the batch", || count(&runs) == 1);
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
}

//! Streams: legacy, blocking and non-blocking ordering, queries, events, waits on events, and
//! destroyed streams.

use crate::harness::*;
use cuda_host::{Event, EventFlags, Stream};
use cuda_host_sys::{CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, CUresult, CUstream_flags};
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use suite::host_function::launch_host;
use suite::{Gate, hold_and_release, ok, test_driver, wait_until};

#[test]
fn a_blocking_stream_waits_for_earlier_work_of_the_legacy_stream() {
    let _alone = alone();
    let context = current_context();
    let legacy = Stream::legacy(&context);
    let (stream, witness) = (blocking(&context), non_blocking(&context));
    let log = Log::default();
    round_trip(&stream);

    let synchronized = hold_and_release(
        &legacy,
        || {
            launch(CU_STREAM_LEGACY, log.marker("legacy"));
            launch(stream.as_raw(), log.marker("blocking"));
        },
        || assert_held(&witness, &log, stream.as_raw(), "the blocking stream"),
        |_| synchronize(stream.as_raw()),
    );
    ok("cuStreamSynchronize", synchronized);
    assert_eq!(log.entries(), ["legacy", "blocking"]);
}

#[test]
fn the_legacy_stream_waits_for_earlier_work_of_blocking_streams() {
    let _alone = alone();
    let context = current_context();
    let (stream, witness) = (blocking(&context), non_blocking(&context));
    let log = Log::default();
    ok("cuStreamSynchronize", synchronize(CU_STREAM_LEGACY));

    let synchronized = hold_and_release(
        &stream,
        || {
            launch(stream.as_raw(), log.marker("blocking"));
            launch(CU_STREAM_LEGACY, log.marker("legacy"));
        },
        || assert_held(&witness, &log, CU_STREAM_LEGACY, "the legacy stream"),
        |_| synchronize(CU_STREAM_LEGACY),
    );
    ok("cuStreamSynchronize", synchronized);
    assert_eq!(log.entries(), ["blocking", "legacy"]);
}

#[test]
fn a_non_blocking_stream_does_not_wait_for_a_held_legacy_stream() {
    let _alone = alone();
    let context = current_context();
    let legacy = Stream::legacy(&context);
    let stream = non_blocking(&context);
    let log = Log::default();

    let synchronized = hold_and_release(
        &legacy,
        || {
            launch(CU_STREAM_LEGACY, log.marker("legacy"));
            launch(stream.as_raw(), log.marker("non-blocking"));
        },
        || {
            wait_until(
                "the non-blocking stream's host function, with the legacy stream held",
                || !log.entries().is_empty(),
            );
            ok("cuStreamSynchronize", synchronize(stream.as_raw()));
            assert_eq!(query(CU_STREAM_LEGACY), CUresult::CUDA_ERROR_NOT_READY);
        },
        |legacy| synchronize(legacy.as_raw()),
    );
    ok("cuStreamSynchronize", synchronized);
    assert_eq!(log.entries(), ["non-blocking", "legacy"]);
}

#[test]
fn a_host_function_launch_without_a_function_answers_invalid_value() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    // SAFETY: a live stream; the driver refuses the missing function before using anything.
    let result = unsafe { driver().cuLaunchHostFunc(stream.as_raw(), None, ptr::null_mut()) };
    assert_eq!(result, CUresult::CUDA_ERROR_INVALID_VALUE);
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
}

#[test]
fn stream_query_answers_not_ready_while_work_is_pending_and_success_after() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let runs = Arc::new(AtomicUsize::new(0));
    assert_eq!(query(stream.as_raw()), SUCCESS, "a new stream is idle");

    let synchronized = hold_and_release(
        &stream,
        || launch(stream.as_raw(), counting(&runs)),
        || assert_eq!(query(stream.as_raw()), CUresult::CUDA_ERROR_NOT_READY),
        |stream| synchronize(stream.as_raw()),
    );
    ok("cuStreamSynchronize", synchronized);
    assert_eq!(query(stream.as_raw()), SUCCESS);
    assert_eq!(count(&runs), 1);
}

#[test]
fn an_event_is_not_ready_until_its_stream_reaches_it() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let event = Event::new(&context, EventFlags::Timing).expect("event");

    let synchronized = hold_and_release(
        &stream,
        || record(&event, stream.as_raw()),
        || assert_eq!(event_query(event.as_raw()), CUresult::CUDA_ERROR_NOT_READY),
        |_| event_synchronize(&event),
    );
    ok("cuEventSynchronize", synchronized);
    assert_eq!(event_query(event.as_raw()), SUCCESS);
}

#[test]
fn elapsed_time_is_not_ready_before_both_events_complete_and_not_negative_after() {
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let start = Event::new(&context, EventFlags::Timing).expect("event");
    let end = Event::new(&context, EventFlags::Timing).expect("event");
    let runs = Arc::new(AtomicUsize::new(0));

    let synchronized = hold_and_release(
        &stream,
        || {
            record(&start, stream.as_raw());
            launch(stream.as_raw(), counting(&runs));
            record(&end, stream.as_raw());
        },
        || assert_eq!(elapsed_ms(&start, &end).0, CUresult::CUDA_ERROR_NOT_READY),
        |_| event_synchronize(&end),
    );
    ok("cuEventSynchronize", synchronized);
    let (result, milliseconds) = elapsed_ms(&start, &end);
    ok("cuEventElapsedTime_v2", result);
    assert!(
        milliseconds.is_finite() && milliseconds >= 0.0,
        "elapsed {milliseconds} ms"
    );
    assert_eq!(count(&runs), 1);
}

#[test]
fn stream_wait_event_orders_one_stream_after_another() {
    let _shared = shared();
    let context = current_context();
    let (first, second) = (non_blocking(&context), non_blocking(&context));
    let witness = non_blocking(&context);
    let event = Event::new(&context, EventFlags::DisableTiming).expect("event");
    let log = Log::default();
    round_trip(&second);

    let synchronized = hold_and_release(
        &first,
        || {
            launch(first.as_raw(), log.marker("first"));
            record(&event, first.as_raw());
            // SAFETY: a live stream and a live event.
            ok("cuStreamWaitEvent", unsafe {
                driver().cuStreamWaitEvent(second.as_raw(), event.as_raw(), 0)
            });
            launch(second.as_raw(), log.marker("second"));
        },
        || assert_held(&witness, &log, second.as_raw(), "the waiting stream"),
        |_| synchronize(second.as_raw()),
    );
    ok("cuStreamSynchronize", synchronized);
    assert_eq!(log.entries(), ["first", "second"]);
}

#[test]
fn a_destroyed_stream_handle_answers_invalid_handle() {
    if !test_driver().is_software() {
        return suite::skip(
            "a_destroyed_stream_handle_answers_invalid_handle",
            "the real driver was seen to segfault on a destroyed stream handle; only the \
             software driver's answer is specified",
        );
    }
    let _shared = shared();
    let _context = current_context();
    let mut stream = ptr::null_mut();
    // SAFETY: a valid out-pointer; the context is current.
    ok("cuStreamCreate", unsafe {
        driver().cuStreamCreate(&mut stream, CUstream_flags::CU_STREAM_NON_BLOCKING.0)
    });
    // SAFETY: a live stream, destroyed once; later calls use the stale handle on purpose, which
    // the software driver detects.
    unsafe {
        ok("cuStreamDestroy_v2", driver().cuStreamDestroy_v2(stream));
        let invalid = CUresult::CUDA_ERROR_INVALID_HANDLE;
        assert_eq!(launch_host(stream, || {}), invalid);
        assert_eq!(query(stream), invalid);
        assert_eq!(synchronize(stream), invalid);
        let mut id = 77;
        assert_eq!(driver().cuStreamGetId(stream, &mut id), invalid);
        assert_eq!(id, 77, "nothing written for a destroyed stream");
        assert_eq!(driver().cuStreamDestroy_v2(stream), invalid);
    }
}

#[test]
fn destroying_a_stream_with_pending_work_returns_at_once_and_the_work_still_runs() {
    let _shared = shared();
    let context = current_context();
    let mut stream = ptr::null_mut();
    // SAFETY: a valid out-pointer; the context is current.
    ok("cuStreamCreate", unsafe {
        driver().cuStreamCreate(&mut stream, CUstream_flags::CU_STREAM_NON_BLOCKING.0)
    });
    let gate = Gate::new(&context);
    {
        // SAFETY: the stream is a stream of the context, destroyed only after this borrow ends.
        let borrowed = unsafe { Stream::borrow_raw(&context, stream) };
        gate.hold(&borrowed);
    }
    let runs = Arc::new(AtomicUsize::new(0));
    launch(stream, counting(&runs));

    let (handle, destroy_context) = (SendHandle(stream), context.clone());
    let answer = returns_while_held("cuStreamDestroy_v2 with its stream held", move || {
        destroy_context.bind_to_thread().expect("the context binds");
        // SAFETY: a live stream, destroyed once.
        unsafe { driver().cuStreamDestroy_v2(handle.get()) }
    });
    assert_eq!(answer, SUCCESS);
    assert_eq!(count(&runs), 0, "the held host function ran early");
    gate.open();
    wait_until("the destroyed stream's pending host function", || {
        count(&runs) == 1
    });
}

#[test]
fn stream_ids_tell_streams_apart_for_the_life_of_the_process() {
    let _alone = alone();
    let context = current_context();
    let (first, second) = (non_blocking(&context), blocking(&context));
    let first_id = stream_id(driver(), first.as_raw());
    assert_eq!(stream_id(driver(), first.as_raw()), first_id, "stable");
    assert_ne!(stream_id(driver(), second.as_raw()), first_id);

    let legacy = stream_id(driver(), CU_STREAM_LEGACY);
    let per_thread = stream_id(driver(), CU_STREAM_PER_THREAD);
    // The null stream is the legacy one in a legacy table, this thread's own in a per-thread one.
    let null_is = if driver().per_thread_default_stream() {
        per_thread
    } else {
        legacy
    };
    assert_eq!(
        stream_id(driver(), ptr::null_mut()),
        null_is,
        "the null stream is the table's default stream"
    );
    let elsewhere_context = context.clone();
    let elsewhere = std::thread::spawn(move || {
        elsewhere_context
            .bind_to_thread()
            .expect("the context binds");
        stream_id(driver(), CU_STREAM_PER_THREAD)
    })
    .join()
    .expect("the other thread");
    let ids = [
        first_id,
        stream_id(driver(), second.as_raw()),
        legacy,
        per_thread,
        elsewhere,
    ];
    let distinct: std::collections::BTreeSet<u64> = ids.into_iter().collect();
    assert_eq!(
        distinct.len(),
        ids.len(),
        "each stream, each thread's per-thread stream and the legacy stream has its own id: {ids:?}"
    );

    // A stream made after one was destroyed (perhaps at the same address) has a new id.
    drop(first);
    let third = non_blocking(&context);
    let third_id = stream_id(driver(), third.as_raw());
    assert!(
        !ids.contains(&third_id),
        "{third_id} was an id before: {ids:?}"
    );
}

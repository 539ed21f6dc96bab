//! cuda-host's `host_launch`: ordering, lifetimes, the raw forms, panics, refused launches,
//! sticky errors and many threads, on the driver the suite runs on. Capture rejection is in
//! `capture_rejection.rs`.

use cuda_host::{
    Context, Error, Stream, StreamFlags, UserData, host_launch, host_launch_raw, options::named,
    panics::HostFunctionPanic,
};
use cuda_host_sys::CUresult;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use suite::kernels::Kernels;
use suite::{Gate, MappedWords, Tally, context, hold_and_release, test_driver, wait_until};

/// A new stream, on the engine `CUDA_HOST_TEST_ENGINE` names (`driver`, the default, or
/// `polled`): the suite runs in both.
fn new_stream(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking)
        .expect("stream")
        .with_host_engine(suite::host_engine())
        .expect("the stream's engine")
}

#[test]
fn runs_after_the_work_enqueued_before_and_before_the_work_enqueued_after() {
    // No gate here: a copy between mapped host buffers is done synchronously, its enqueue
    // returning only once the stream has reached it, so a thread that would open a gate before it
    // afterwards never does (docs/REAL-DRIVER.md).
    let context = context();
    let stream = new_stream(&context);
    let words = Arc::new(MappedWords::new(&context, 3));
    let seen_by_host_function = Arc::new(Mutex::new(None));

    words.write_in_stream(&stream, 0, 1);
    let (host_words, seen) = (Arc::clone(&words), Arc::clone(&seen_by_host_function));
    host_launch(&stream, move || {
        *seen.lock().unwrap() = Some(host_words.get(0));
        host_words.set(1, 2);
    })
    .expect("launch");
    // Copies the host function's word: 2 only if the copy runs after it.
    words.copy_in_stream(&stream, 1, 2);

    stream.synchronize().expect("synchronize");
    assert_eq!(*seen_by_host_function.lock().unwrap(), Some(1));
    assert_eq!(words.get(2), 2);
}

#[test]
fn a_host_function_between_two_kernels_sees_the_first_and_is_seen_by_the_second() {
    if suite::skip_unless_real(
        "a_host_function_between_two_kernels_sees_the_first_and_is_seen_by_the_second",
        "the software driver runs no kernels",
    ) {
        return;
    }
    // Alone in a process: loading and unloading a module may wait for the whole context, where
    // other tests hold streams at gates.
    suite::alone_in_child!(
        a_host_function_between_two_kernels_sees_the_first_and_is_seen_by_the_second
    );
    const N: u32 = 4096;
    let context = context();
    let stream = new_stream(&context);
    let driver = Arc::clone(context.driver());
    // Raw driver calls (the module, the launches) use the calling thread's current context.
    context.bind_to_thread().expect("the context binds");
    let kernels = Kernels::load(&driver).expect("PTX loads");
    // One mapped buffer: N results of the first kernel, then the scalar the host function writes.
    let words = Arc::new(MappedWords::new(&context, N as usize + 1));
    let mut data = words.device_address(0);
    let mut scalar = words.device_address(N as usize);
    let (mut n, mut mul) = (N, 3u32);
    let spin_ns = 20_000_000u64;
    let mut spin_arguments = [(&raw const spin_ns).cast_mut().cast::<c_void>()];
    let verdict = Arc::new(Mutex::new(None));

    // SAFETY: the arguments match the kernels' parameters and the buffer holds N + 1 words.
    unsafe {
        // A slow kernel first, so that everything below is enqueued before anything runs.
        kernels
            .launch(kernels.spin_ns, 1, 1, stream.as_raw(), &mut spin_arguments)
            .unwrap();
        let mut fill = [
            (&raw mut data).cast::<c_void>(),
            (&raw mut n).cast(),
            (&raw mut mul).cast(),
        ];
        kernels
            .launch(
                kernels.fill_iota,
                N.div_ceil(256),
                256,
                stream.as_raw(),
                &mut fill,
            )
            .unwrap();
    }
    let (host_words, host_verdict) = (Arc::clone(&words), Arc::clone(&verdict));
    host_launch(&stream, move || {
        let wrong = (0..N)
            .filter(|&i| host_words.get(i as usize) != i * 3)
            .count();
        *host_verdict.lock().unwrap() = Some(wrong);
        host_words.set(N as usize, 1000);
    })
    .expect("launch");
    // SAFETY: as above.
    unsafe {
        let mut add = [
            (&raw mut data).cast::<c_void>(),
            (&raw mut scalar).cast(),
            (&raw mut n).cast(),
        ];
        kernels
            .launch(
                kernels.add_scalar,
                N.div_ceil(256),
                256,
                stream.as_raw(),
                &mut add,
            )
            .unwrap();
    }
    stream.synchronize().expect("synchronize");
    assert_eq!(
        *verdict.lock().unwrap(),
        Some(0),
        "the host function saw unfinished results"
    );
    let wrong = (0..N)
        .filter(|&i| words.get(i as usize) != i * 3 + 1000)
        .count();
    assert_eq!(
        wrong, 0,
        "the second kernel did not see the host function's write"
    );
}

#[test]
fn two_streams_keep_their_own_order_and_data() {
    // Not held at a gate: the real driver blocks host-function enqueues once a bounded number
    // are pending, so thousands held behind a gate only this thread opens would never enqueue.
    const LAUNCHES: usize = 2000;
    let context = context();
    let streams = [new_stream(&context), new_stream(&context)];
    let words = Arc::new(MappedWords::new(&context, 2));
    type Log = Arc<Mutex<Vec<(usize, u32)>>>;
    let logs: [Log; 2] = Default::default();
    for i in 0..LAUNCHES {
        for (index, (stream, log)) in streams.iter().zip(&logs).enumerate() {
            // Each stream writes its own data before each host function, which reads it back.
            let value = u32::try_from(i * 2 + index).expect("small");
            words.write_in_stream(stream, index, value);
            let (log, words) = (Arc::clone(log), Arc::clone(&words));
            host_launch(stream, move || {
                log.lock().unwrap().push((i, words.get(index)))
            })
            .expect("launch");
        }
    }
    for stream in &streams {
        stream.synchronize().expect("synchronize");
    }
    for (index, log) in logs.iter().enumerate() {
        let expected: Vec<(usize, u32)> = (0..LAUNCHES)
            .map(|i| (i, u32::try_from(i * 2 + index).expect("small")))
            .collect();
        assert_eq!(*log.lock().unwrap(), expected, "stream {index}");
    }
}

#[test]
fn captured_values_are_dropped_once_after_the_run_on_a_caller_thread() {
    // Alone in a process: another test's thread that reclaims first would drop the value.
    suite::alone_in_child!(captured_values_are_dropped_once_after_the_run_on_a_caller_thread);
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    hold_and_release(
        &stream,
        || {
            let probe = tally.probe();
            host_launch(&stream, move || probe.ran()).expect("launch");
        },
        || assert_eq!((tally.runs(), tally.drops()), (0, 0)),
        Stream::synchronize,
    )
    .expect("synchronize");
    assert_eq!(tally.runs(), 1);
    assert_eq!(
        tally.drops(),
        1,
        "dropped by the synchronize that saw it finish"
    );
    let (ran_on, dropped_on) = (tally.run_threads()[0], tally.drop_threads()[0]);
    assert_ne!(ran_on, dropped_on, "dropped on the driver's thread");
    assert_eq!(dropped_on, std::thread::current().id());
}

#[test]
fn every_launch_reclaims_the_records_finished_before_it() {
    // Alone in a process: any thread that calls into cuda-host may reclaim, and in this binary
    // other tests' threads do.
    suite::alone_in_child!(every_launch_reclaims_the_records_finished_before_it);
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let probe = tally.probe();
    host_launch(&stream, move || probe.ran()).expect("launch");
    wait_until("the host function to run", || tally.runs() == 1);
    // Dropping happens on a caller's thread: here, inside the next launch.
    wait_until("the next launch to reclaim the record", || {
        host_launch(&stream, || {}).expect("launch");
        tally.drops() == 1
    });
    assert_eq!(tally.drop_threads(), [std::thread::current().id()]);
    stream.synchronize().expect("synchronize");
}

#[test]
fn with_a_reclaim_interval_every_nth_launch_of_a_thread_reclaims() {
    // Alone in a process: the interval is process-wide, and other threads reclaim too.
    suite::alone_in_child!(with_a_reclaim_interval_every_nth_launch_of_a_thread_reclaims);
    cuda_host::options::set_launch_reclaim_interval(std::num::NonZeroU32::new(3).unwrap());
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let probe = tally.probe();
    host_launch(&stream, move || probe.ran()).expect("launch 1");
    suite::wait_until_done(&stream);
    host_launch(&stream, || {}).expect("launch 2");
    assert_eq!(tally.drops(), 0, "launch 2 of 3 does not reclaim");
    host_launch(&stream, || {}).expect("launch 3");
    assert_eq!(tally.drops(), 1, "launch 3 of 3 reclaims");
    stream.synchronize().expect("synchronize");
}

static COPIED: Mutex<Vec<u8>> = Mutex::new(Vec::new());
static COPIED_ALIGNMENT: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn keep_64_bytes(data: *mut c_void) {
    // SAFETY: launched with 64 copied bytes.
    let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), 64) };
    *COPIED.lock().unwrap() = bytes.to_vec();
    COPIED_ALIGNMENT.store(data.addr() % 16, Ordering::SeqCst);
}

#[test]
fn copied_bytes_survive_the_caller_overwriting_and_freeing_its_buffer() {
    let context = context();
    let stream = new_stream(&context);
    hold_and_release(
        &stream,
        || {
            let mut buffer: Vec<u8> = (0..64).collect();
            // SAFETY: `keep_64_bytes` reads exactly the 64 bytes given and keeps no pointer.
            unsafe { host_launch_raw(&stream, keep_64_bytes, UserData::Copied(&buffer)) }
                .expect("launch");
            buffer.fill(0xEE);
            drop(buffer);
        },
        || {
            assert!(
                COPIED.lock().unwrap().is_empty(),
                "ran with the stream held"
            )
        },
        Stream::synchronize,
    )
    .expect("synchronize");
    assert_eq!(*COPIED.lock().unwrap(), (0..64).collect::<Vec<u8>>());
    assert_eq!(
        COPIED_ALIGNMENT.load(Ordering::SeqCst),
        0,
        "not 16-byte aligned"
    );
}

unsafe extern "C" fn add_one(counter: *mut c_void) {
    // SAFETY: launched with a pointer to a live `AtomicUsize`.
    unsafe { &*counter.cast::<AtomicUsize>() }.fetch_add(1, Ordering::SeqCst);
}

static RECEIVED_POINTER: AtomicUsize = AtomicUsize::new(usize::MAX);

unsafe extern "C" fn remember_pointer(pointer: *mut c_void) {
    RECEIVED_POINTER.store(pointer.addr(), Ordering::SeqCst);
}

#[test]
fn a_pass_through_pointer_reaches_the_function_unchanged() {
    let context = context();
    let stream = new_stream(&context);
    let counter = AtomicUsize::new(0);
    let pointer = (&raw const counter).cast_mut().cast::<c_void>();
    // SAFETY: `counter` outlives the synchronize below.
    unsafe { host_launch_raw(&stream, add_one, UserData::PassThrough(pointer)) }.expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(counter.load(Ordering::SeqCst), 1);

    // SAFETY: the function only records the address.
    unsafe { host_launch_raw(&stream, remember_pointer, UserData::PassThrough(pointer)) }
        .expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(RECEIVED_POINTER.load(Ordering::SeqCst), pointer.addr());
}

static NULL_SEEN: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn count_null(pointer: *mut c_void) {
    if pointer.is_null() {
        NULL_SEEN.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn no_user_data_passes_a_null_pointer() {
    let context = context();
    let stream = new_stream(&context);
    // SAFETY: the function accepts null.
    unsafe { host_launch_raw(&stream, count_null, UserData::None) }.expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(NULL_SEEN.load(Ordering::SeqCst), 1);
}

#[test]
fn a_panicking_closure_is_reported_and_later_work_still_runs() {
    let context = context();
    let stream = new_stream(&context);
    let reports: Arc<Mutex<Vec<(String, usize)>>> = Arc::default();
    let hook_reports = Arc::clone(&reports);
    cuda_host::panics::set_host_panic_hook(move |panic: &HostFunctionPanic<'_>| {
        if panic.message.starts_with("deliberate") {
            let stream = panic.stream.map_or(0, |stream| stream.addr());
            hook_reports
                .lock()
                .unwrap()
                .push((panic.message.to_owned(), stream));
        }
    });
    let tally = Tally::new();
    let probe = tally.probe();
    host_launch(&stream, move || {
        probe.ran();
        panic!("deliberate panic in a host function");
    })
    .expect("launch");
    let after = tally.probe();
    host_launch(&stream, move || after.ran()).expect("launch after");
    stream
        .synchronize()
        .expect("the stream goes on after a panic");
    cuda_host::panics::clear_host_panic_hook();

    assert_eq!(tally.runs(), 2);
    assert_eq!(tally.drops(), 2);
    assert_eq!(
        *reports.lock().unwrap(),
        [(
            "deliberate panic in a host function".to_owned(),
            stream.as_raw().addr()
        )]
    );
}

#[test]
fn an_injected_refusal_drops_the_closure_at_once_without_running_it() {
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            "an_injected_refusal_drops_the_closure_at_once_without_running_it",
            "fault injection needs the software driver (the GPU case runs after a sticky error)",
        );
    };
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let probe = tally.probe();
    // The entry point the stream's engine launches through.
    let entry = match stream.host_engine() {
        cuda_host::options::HostEngine::Polled => c"cuStreamBatchMemOp",
        _ => c"cuLaunchHostFunc",
    };
    controls.fail_next_calls(entry, 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    let error = host_launch(&stream, move || probe.ran()).unwrap_err();
    assert_eq!(
        error.driver_result(),
        Some(CUresult::CUDA_ERROR_OUT_OF_MEMORY)
    );
    let entry = entry.to_str().expect("ASCII");
    assert!(error.to_string().contains(entry), "{error}");
    assert_eq!(tally.drop_threads(), [std::thread::current().id()]);
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), 0);
}

#[test]
fn after_a_sticky_error_a_launch_is_refused_and_its_closure_dropped_at_once() {
    suite::alone_in_child!(
        after_a_sticky_error_a_launch_is_refused_and_its_closure_dropped_at_once
    );
    let context = context();
    let stream = new_stream(&context);
    let fault = suite::kernels::Fault::load(context.driver());
    fault.fail(&stream);

    let tally = Tally::new();
    let probe = tally.probe();
    let error = host_launch(&stream, move || probe.ran()).unwrap_err();
    assert_eq!(
        error.driver_result(),
        Some(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS)
    );
    assert_eq!(tally.drop_threads(), [std::thread::current().id()]);
    assert_eq!(tally.runs(), 0);
}

#[test]
fn a_sticky_error_leaks_nothing_and_runs_nothing_twice() {
    suite::alone_in_child!(a_sticky_error_leaks_nothing_and_runs_nothing_twice);
    const EACH: usize = 50;
    let context = context();
    let (faulting, waiting) = (new_stream(&context), new_stream(&context));
    let gate = Gate::new(&context);
    let fault = suite::kernels::Fault::load(context.driver());
    let (before, after, elsewhere) = (Tally::new(), Tally::new(), Tally::new());

    gate.hold(&faulting);
    gate.hold(&waiting);
    before.launch_counted(&faulting, EACH);
    fault.launch(&faulting);
    for _ in 0..EACH {
        let probe = after.probe();
        host_launch(&faulting, move || probe.ran()).expect("launch");
        let probe = elsewhere.probe();
        host_launch(&waiting, move || probe.ran()).expect("launch");
    }
    gate.open();
    assert!(faulting.synchronize().is_err(), "the fault is reported");
    for tally in [&before, &after, &elsewhere] {
        tally.reclaim_until_dropped(EACH, "every record to be handed back and reclaimed once");
    }
    assert_eq!(before.runs(), EACH, "work before the fault ran");
    assert_eq!(after.runs(), 0, "work after the fault never runs");
    assert!(elsewhere.runs() <= EACH);
    drop((faulting, waiting));
}

#[test]
fn records_a_failed_context_never_runs_are_reclaimed_when_their_streams_are_dropped() {
    // Nothing observes the failure but the streams' drops: an owned stream, and a borrowed
    // wrapper of a stream that stays alive (whose drop destroys nothing).
    suite::alone_in_child!(
        records_a_failed_context_never_runs_are_reclaimed_when_their_streams_are_dropped
    );
    const EACH: usize = 50;
    let context = context();
    let (owned, kept) = (new_stream(&context), new_stream(&context));
    // SAFETY: `kept` outlives the wrapper.
    let borrowed = unsafe { Stream::borrow_raw(&context, kept.as_raw()) };
    let gate = Gate::new(&context);
    let fault = suite::kernels::Fault::load(context.driver());
    let (on_owned, on_borrowed) = (Tally::new(), Tally::new());

    gate.hold(&owned);
    gate.hold(&borrowed);
    fault.launch(&owned);
    for _ in 0..EACH {
        let probe = on_owned.probe();
        host_launch(&owned, move || probe.ran()).expect("launch");
        let probe = on_borrowed.probe();
        host_launch(&borrowed, move || probe.ran()).expect("launch");
    }
    gate.open();
    drop(borrowed);
    on_borrowed.reclaim_until_dropped(EACH, "the borrowed wrapper's records to be reclaimed");
    drop(owned);
    on_owned.reclaim_until_dropped(EACH, "the owned stream's records to be reclaimed");
    assert_eq!(on_owned.runs(), 0, "work after the fault never runs");
    assert!(on_borrowed.runs() <= EACH);
    std::mem::forget(kept);
}

#[test]
fn launches_racing_a_context_failure_on_four_threads_drop_every_record_once() {
    // Alone in a process: the failure stays with it.
    suite::alone_in_child!(
        launches_racing_a_context_failure_on_four_threads_drop_every_record_once
    );
    const THREADS: usize = 4;
    let context = context();
    let faulting = new_stream(&context); // also makes the context current, for the module
    let fault = suite::kernels::Fault::load(context.driver());
    let tally = Tally::new();
    // The fault waits behind a gate that opens while the threads launch: a host write, so the
    // flood of launches cannot delay it. Each thread launches until the driver refuses it.
    let gate = Gate::new(&context);
    gate.hold(&faulting);
    fault.launch(&faulting);
    let start = std::sync::Barrier::new(THREADS + 1);
    let attempts: usize = std::thread::scope(|scope| {
        let launchers: Vec<_> = (0..THREADS)
            .map(|_| {
                let (context, tally, start) = (&context, &tally, &start);
                scope.spawn(move || {
                    let stream = new_stream(context);
                    start.wait();
                    let began = std::time::Instant::now();
                    let mut attempts = 0;
                    loop {
                        let probe = tally.probe();
                        attempts += 1;
                        if host_launch(&stream, move || probe.ran()).is_err() {
                            return attempts; // refused after the failure: dropped, not run
                        }
                        assert!(
                            began.elapsed() < suite::TIMEOUT,
                            "no launch was refused within {:?} of the failure",
                            suite::TIMEOUT
                        );
                    }
                })
            })
            .collect();
        start.wait();
        std::thread::sleep(std::time::Duration::from_micros(300));
        gate.open();
        assert!(faulting.synchronize().is_err(), "the fault is reported");
        launchers
            .into_iter()
            .map(|launcher| launcher.join().unwrap())
            .sum()
    });
    wait_until("every record to be dropped", || {
        cuda_host::reclaim();
        tally.drops() >= attempts
    });
    std::thread::sleep(std::time::Duration::from_millis(50));
    cuda_host::reclaim();
    assert_eq!(tally.drops(), attempts, "each record dropped exactly once");
    assert!(
        tally.runs() <= attempts - THREADS,
        "refused closures never ran"
    );
    std::mem::forget(faulting);
}

#[test]
fn records_are_reclaimed_when_the_failure_shows_through_another_context_value() {
    // Two `Context` values of one primary context: a failure seen through one reclaims what was
    // launched through the other, whose stream stays alive.
    suite::alone_in_child!(
        records_are_reclaimed_when_the_failure_shows_through_another_context_value
    );
    const EACH: usize = 20;
    let first = context();
    let second = cuda_host::Device::get(first.driver(), 0)
        .and_then(|device| device.primary_context())
        .expect("a second value of the primary context");
    assert_eq!(first.as_raw(), second.as_raw());
    let (held, faulting) = (new_stream(&first), new_stream(&second));
    let gate = Gate::new(&first);
    let fault = suite::kernels::Fault::load(first.driver());
    let tally = Tally::new();
    gate.hold(&held);
    tally.launch_counted(&held, EACH);
    fault.launch(&faulting);
    assert!(faulting.synchronize().is_err(), "the fault is reported");
    tally.reclaim_until_dropped(EACH, "the held stream's records to be reclaimed");
    assert_eq!(tally.runs(), 0, "work behind the gate never ran");
    std::mem::forget((held, faulting));
}

#[test]
fn a_per_thread_launch_whose_value_another_thread_dropped_is_reclaimed_with_its_failed_context() {
    // A per-thread stream's value dropped on another thread watches that thread's stream, not
    // the launcher's; nothing answers the failure through cuda-host after it. The context's last
    // value is the last chance: its drop finds the failure and reclaims the record.
    suite::alone_in_child!(
        a_per_thread_launch_whose_value_another_thread_dropped_is_reclaimed_with_its_failed_context
    );
    let first = context();
    let second = cuda_host::Device::get(first.driver(), 0)
        .and_then(|device| device.primary_context())
        .expect("a second value of the primary context");
    let faulting = new_stream(&first);
    let fault = suite::kernels::Fault::load(first.driver());
    let gate = Gate::new(&first);
    let tally = Tally::new();
    std::thread::scope(|scope| {
        let (stream, launcher) =
            suite::per_thread::Launcher::spawn(scope, second.clone(), &gate, &tally);
        let launcher_drops = || {
            launcher.reclaim();
            tally.drops()
        };
        second.bind_to_thread().expect("the context binds");
        drop(stream); // watched on this thread's per-thread stream, not the launcher's
        // The watch is called before the failure, with success. Waited for (as the failure
        // below) without cuda-host, which would answer the failure.
        let driver = first.driver();
        // SAFETY: the calling thread's per-thread stream of its current context.
        let passed = unsafe { driver.cuStreamSynchronize(cuda_host_sys::CU_STREAM_PER_THREAD) };
        assert_eq!(passed, CUresult::CUDA_SUCCESS);
        fault.launch(&faulting);
        // SAFETY: the faulting stream is live.
        let answered = unsafe { driver.cuStreamSynchronize(faulting.as_raw()) };
        assert_eq!(answered, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
        gate.open();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(launcher_drops(), 0, "nothing answered the failure yet");
        drop(second);
        wait_until(
            "the record of the launcher's per-thread stream to go",
            || launcher_drops() == 1,
        );
        launcher.finish();
    });
    assert_eq!(tally.drops(), 1);
    assert_eq!(tally.runs(), 0, "work behind the gate never ran");
    std::mem::forget(faulting);
}

#[test]
fn reclaiming_inside_a_host_function_drops_nothing_on_the_drivers_thread() {
    // Alone in a process, so that no other test's thread takes the finished record first.
    suite::alone_in_child!(reclaiming_inside_a_host_function_drops_nothing_on_the_drivers_thread);
    let context = context();
    let stream = new_stream(&context);
    let tally = Tally::new();
    let reclaimed = Arc::new(AtomicUsize::new(usize::MAX));
    // Both run after the gate opens: the first is finished when the second reclaims.
    hold_and_release(
        &stream,
        || {
            let probe = tally.probe();
            host_launch(&stream, move || probe.ran()).expect("launch");
            let inner = Arc::clone(&reclaimed);
            host_launch(&stream, move || {
                inner.store(cuda_host::reclaim(), Ordering::SeqCst);
            })
            .expect("launch");
        },
        || assert_eq!(tally.runs(), 0, "ran with the stream held"),
        Stream::synchronize,
    )
    .expect("synchronize");
    assert_eq!(reclaimed.load(Ordering::SeqCst), 0);
    assert_eq!(tally.drops(), 1);
    assert_ne!(
        tally.drop_threads(),
        tally.run_threads(),
        "not dropped on the driver's thread"
    );
}

#[test]
fn a_captured_value_whose_drop_panics_still_lets_its_context_go() {
    // Alone in a process: the harness's own context would keep the primary context retained.
    suite::alone_in_child!(a_captured_value_whose_drop_panics_still_lets_its_context_go);
    struct PanicsOnDrop;
    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            panic!("deliberate panic in a captured value's Drop");
        }
    }
    let driver = Arc::clone(&test_driver().driver);
    let device = cuda_host::Device::get(&driver, 0).expect("device 0");
    let context = device.primary_context().expect("primary context");
    let stream = new_stream(&context);
    let value = PanicsOnDrop;
    host_launch(&stream, move || {
        let _ = &value;
    })
    .expect("launch");
    // The Drop's panic is reported through the hook; the reclaiming call goes on.
    stream.synchronize().expect("synchronize");
    drop((stream, context));
    let primary_context_active = || {
        let (mut flags, mut active) = (0, 0);
        // SAFETY: a device of this driver and valid out-pointers.
        let result =
            unsafe { driver.cuDevicePrimaryCtxGetState(device.as_raw(), &mut flags, &mut active) };
        assert_eq!(result, CUresult::CUDA_SUCCESS);
        active != 0
    };
    wait_until("the primary context to be released", || {
        cuda_host::reclaim();
        !primary_context_active()
    });
}

suite::count_allocations_per_thread!();

#[test]
fn small_closures_and_copied_bytes_launch_without_allocating_once_slots_are_warm() {
    // Alone in a process: a test thread that reclaims takes the freed slots into its own free
    // list, and this thread would then allocate new ones.
    suite::alone_in_child!(
        small_closures_and_copied_bytes_launch_without_allocating_once_slots_are_warm
    );
    const LAUNCHES: usize = 1_000;
    static RAN: AtomicUsize = AtomicUsize::new(0);
    let context = context();
    let stream = new_stream(&context);
    // Launches closures capturing `N` words (and nothing else), then synchronizes.
    fn closures<const N: usize>(stream: &Stream) {
        for launch in 0..LAUNCHES {
            let words = [launch as u64; N];
            host_launch(stream, move || {
                RAN.fetch_add(words.len(), Ordering::Relaxed);
            })
            .expect("launch");
        }
        stream.synchronize().expect("synchronize");
    }
    // Launches a C function with `len` copied bytes, then synchronizes.
    fn copies(stream: &Stream, len: usize) {
        let bytes = vec![0u8; len];
        for _ in 0..LAUNCHES {
            // SAFETY: `count_run` ignores its bytes.
            unsafe { host_launch_raw(stream, count_run, UserData::Copied(&bytes)) }
                .expect("launch");
        }
        stream.synchronize().expect("synchronize");
    }
    // Warm: hold the stream so that every launch is in flight at once; the slots exist now.
    hold_and_release(
        &stream,
        || {
            for _ in 0..LAUNCHES {
                host_launch(&stream, || {}).expect("launch");
            }
        },
        || assert_eq!(cuda_host::metrics().launch_slots().in_flight, LAUNCHES),
        Stream::synchronize,
    )
    .expect("synchronize");
    assert_eq!(
        allocations::during(|| closures::<8>(&stream)).0,
        0,
        "64 bytes inline"
    );
    assert_eq!(RAN.load(Ordering::Relaxed), LAUNCHES * 8);
    assert_eq!(
        allocations::during(|| closures::<9>(&stream)).0,
        LAUNCHES,
        "72 bytes boxed"
    );
    RUNS_COUNTED.store(0, Ordering::Relaxed);
    let short = allocations::during(|| copies(&stream, 48)).0 - 1; // less the Vec of the bytes
    let long = allocations::during(|| copies(&stream, 49)).0 - 1;
    assert_eq!((short, long), (0, LAUNCHES), "48 bytes inline, 49 boxed");
    assert_eq!(RUNS_COUNTED.load(Ordering::Relaxed), 2 * LAUNCHES);
}

#[test]
fn a_named_closure_of_64_bytes_launches_without_allocating_once_slots_are_warm() {
    // With the nvtx or tracing feature a name is kept for profilers: beside the closure, not in
    // its 64 inline bytes. Alone in a process, as the test above.
    suite::alone_in_child!(
        a_named_closure_of_64_bytes_launches_without_allocating_once_slots_are_warm
    );
    const LAUNCHES: usize = 1_000;
    static RAN: AtomicUsize = AtomicUsize::new(0);
    let context = context();
    let stream = new_stream(&context);
    hold_and_release(
        &stream,
        || {
            for _ in 0..LAUNCHES {
                host_launch(&stream, || {}).expect("launch");
            }
        },
        || assert_eq!(cuda_host::metrics().launch_slots().in_flight, LAUNCHES),
        Stream::synchronize,
    )
    .expect("synchronize");
    let (allocated, ()) = allocations::during(|| {
        for launch in 0..LAUNCHES {
            let words = [launch as u64; 8];
            host_launch(
                &stream,
                named("64 bytes", move || {
                    RAN.fetch_add(words.len(), Ordering::Relaxed);
                }),
            )
            .expect("launch");
        }
        stream.synchronize().expect("synchronize");
    });
    assert_eq!(allocated, 0, "a named closure of 64 bytes was boxed");
    assert_eq!(RAN.load(Ordering::Relaxed), LAUNCHES * 8);
}

static RUNS_COUNTED: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn count_run(_bytes: *mut c_void) {
    RUNS_COUNTED.fetch_add(1, Ordering::Relaxed);
}

#[test]
fn eight_threads_launching_on_four_streams_lose_nothing() {
    // Alone in a process. On the real driver the host functions of all streams share one
    // thread, and a flood of enqueues makes later enqueues wait for it: beside a test that holds
    // a host function behind a gate it opens only after its next enqueue, both would wait for
    // each other (seen on an H200).
    suite::alone_in_child!(eight_threads_launching_on_four_streams_lose_nothing);
    const THREADS: usize = 8;
    const LAUNCHES: usize = 100_000;
    let context = context();
    let streams: Vec<Stream> = (0..4).map(|_| new_stream(&context)).collect();
    let tally = Tally::new();
    std::thread::scope(|scope| {
        let launchers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (streams, tally) = (&streams, &tally);
                scope.spawn(move || {
                    for launch in 0..LAUNCHES {
                        let probe = tally.probe();
                        let stream = &streams[(thread + launch) % streams.len()];
                        host_launch(stream, move || probe.ran()).expect("launch");
                    }
                })
            })
            .collect();
        // Joined explicitly: the scope's own join does not wait for a thread's thread-local
        // destructors, among them the one that hands its inbox to the list of exited threads'
        // records, so the drain below could miss a few of them (seen on an H200: 6 of 800,000).
        for launcher in launchers {
            launcher.join().expect("the launching thread");
        }
    });
    for stream in &streams {
        stream.synchronize().expect("synchronize");
    }
    assert_eq!(tally.runs(), THREADS * LAUNCHES);
    assert_eq!(tally.drops(), THREADS * LAUNCHES);
}

#[test]
fn cuda_host_calls_inside_a_host_function_are_refused_without_reaching_the_driver() {
    let context = context();
    let stream = Arc::new(new_stream(&context));
    let other = new_stream(&context);
    let answers: Arc<Mutex<Vec<Error>>> = Arc::default();
    let (inner_stream, inner_answers) = (Arc::clone(&stream), Arc::clone(&answers));
    let mut other = Some(other);
    host_launch(&stream, move || {
        let mut answers = inner_answers.lock().unwrap();
        answers.push(inner_stream.synchronize().unwrap_err());
        answers.push(host_launch(&*inner_stream, || {}).unwrap_err());
        assert!(cuda_host::in_host_function());
        // Dropping a stream here destroys it later, on a caller's thread.
        drop(other.take());
    })
    .expect("launch");
    stream.synchronize().expect("synchronize");
    let answers = answers.lock().unwrap();
    assert_eq!(
        *answers,
        [
            Error::InHostFunction {
                call: "Stream::synchronize"
            },
            Error::InHostFunction {
                call: "host_launch"
            }
        ]
    );
    assert!(!cuda_host::in_host_function());
    // The deferred destruction ran on this thread without error.
    Stream::new(&context, StreamFlags::NonBlocking).expect("no error was recorded");
}

// ---- Who drops what, and where panics go ------------------------------------------------------

/// A captured value whose `Drop` panics.
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("deliberate panic in a captured value's Drop");
    }
}

/// Installs a panic hook that keeps the messages it is given.
fn collect_panic_reports() -> Arc<Mutex<Vec<String>>> {
    let reports: Arc<Mutex<Vec<String>>> = Arc::default();
    let hook_reports = Arc::clone(&reports);
    cuda_host::panics::set_host_panic_hook(move |panic: &HostFunctionPanic<'_>| {
        hook_reports.lock().unwrap().push(panic.message.to_owned());
    });
    reports
}

#[test]
fn a_drop_that_panics_in_a_drain_is_reported_and_the_draining_launch_goes_on() {
    // Alone in a process: the hook is process-wide.
    suite::alone_in_child!(
        a_drop_that_panics_in_a_drain_is_reported_and_the_draining_launch_goes_on
    );
    let reports = collect_panic_reports();
    let context = context();
    let stream = new_stream(&context);
    let first = Tally::new();
    let (probe, value) = (first.probe(), PanicsOnDrop);
    host_launch(&stream, move || {
        let _ = &value;
        probe.ran();
    })
    .expect("launch");
    suite::wait_until_done(&stream);
    assert_eq!(first.runs(), 1);
    // The next launch drains the finished record first: its value's Drop panics there.
    let second = Tally::new();
    let probe = second.probe();
    let launched = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        host_launch(&stream, move || probe.ran())
    }));
    assert!(
        matches!(launched, Ok(Ok(()))),
        "the launch that drained did not go on"
    );
    stream.synchronize().expect("synchronize");
    assert_eq!((second.runs(), second.drops()), (1, 1));
    assert_eq!(
        first.drops(),
        1,
        "the panicking value's record was still dropped"
    );
    assert_eq!(
        *reports.lock().unwrap(),
        ["deliberate panic in a captured value's Drop"]
    );
}

#[test]
fn captured_values_are_dropped_on_the_thread_that_launched_them() {
    let context = context();
    let tally = Tally::new();
    let ran = std::sync::Barrier::new(2);
    let other_reclaimed = std::sync::Barrier::new(2);
    let (dropped_elsewhere, launcher) = std::thread::scope(|scope| {
        let launcher = scope.spawn(|| {
            let stream = new_stream(&context);
            let probe = tally.probe();
            host_launch(&stream, move || probe.ran()).expect("launch");
            suite::wait_until_done(&stream);
            ran.wait();
            other_reclaimed.wait();
            cuda_host::reclaim();
            drop(stream);
            std::thread::current().id()
        });
        ran.wait();
        // Another thread's calls find the record finished: it is not this thread's to drop.
        cuda_host::reclaim();
        let scratch = new_stream(&context);
        host_launch(&scratch, || {}).expect("launch");
        scratch.synchronize().expect("synchronize");
        let dropped_elsewhere = tally.drops();
        other_reclaimed.wait();
        (dropped_elsewhere, launcher.join().unwrap())
    });
    assert_eq!(
        dropped_elsewhere, 0,
        "dropped on a thread that did not launch it"
    );
    assert_eq!(tally.drop_threads(), [launcher]);
}

#[test]
fn records_of_a_thread_that_exited_are_dropped_by_any_thread() {
    let context = context();
    let stream = Arc::new(new_stream(&context));
    let tally = Tally::new();
    let mut launcher = None;
    hold_and_release(
        &stream,
        || {
            std::thread::scope(|scope| {
                let launching = scope.spawn(|| {
                    let probe = tally.probe();
                    host_launch(&*stream, move || probe.ran()).expect("launch");
                });
                launcher = Some(launching.thread().id());
            });
        },
        || assert_eq!(tally.runs(), 0, "ran with the stream held"),
        |_| {
            tally.reclaim_until_dropped(1, "the exited thread's record to be dropped");
        },
    );
    assert_eq!(tally.runs(), 1);
    // Dropped by a drain of this thread or of another test's thread, which may get to the list
    // of exited threads' records first: never by the exited thread, nor on the driver's.
    let dropped_on = tally.drop_threads();
    assert_eq!(dropped_on.len(), 1);
    assert_ne!(
        Some(dropped_on[0]),
        launcher,
        "dropped by the thread that exited"
    );
    assert_ne!(
        dropped_on,
        tally.run_threads(),
        "dropped on the driver's thread"
    );
}

#[test]
fn a_thread_holding_a_lock_another_threads_value_needs_in_its_drop_does_not_deadlock() {
    // The value's Drop takes a lock that the second thread holds while it launches: had the
    // second thread dropped it, it would wait for itself forever.
    // In a child process, so that a deadlock fails the test within a bound.
    suite::alone_in_child!(
        a_thread_holding_a_lock_another_threads_value_needs_in_its_drop_does_not_deadlock
    );
    static SHARED_STATE: Mutex<u32> = Mutex::new(0);
    struct NeedsTheLock;
    impl Drop for NeedsTheLock {
        fn drop(&mut self) {
            *SHARED_STATE.lock().unwrap() += 1;
        }
    }
    let context = context();
    let tally = Tally::new();
    let ran = std::sync::Barrier::new(2);
    let done = std::sync::Barrier::new(2);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let stream = new_stream(&context);
            let (probe, value) = (tally.probe(), NeedsTheLock);
            host_launch(&stream, move || {
                let _ = &value;
                probe.ran();
            })
            .expect("launch");
            suite::wait_until_done(&stream);
            ran.wait();
            done.wait();
            stream.synchronize().expect("synchronize");
        });
        ran.wait();
        let (tx, rx) = std::sync::mpsc::channel();
        let context = &context;
        scope.spawn(move || {
            let _held = SHARED_STATE.lock().unwrap();
            let stream = new_stream(context);
            host_launch(&stream, || {}).expect("launch");
            stream.synchronize().expect("synchronize");
            tx.send(()).unwrap();
        });
        rx.recv_timeout(suite::TIMEOUT)
            .expect("a thread holding the lock dropped a value that needs it, and deadlocked");
        done.wait();
    });
    assert_eq!(*SHARED_STATE.lock().unwrap(), 1);
}

#[test]
fn synchronize_drops_this_threads_values_while_other_threads_reclaim() {
    const LAUNCHES: usize = 200;
    let context = context();
    let stream = new_stream(&context);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let tally = Tally::new();
    let late = std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    cuda_host::reclaim();
                    std::thread::yield_now();
                }
            });
        }
        let mut late = Vec::new();
        for launch in 0..LAUNCHES {
            let probe = tally.probe();
            host_launch(&stream, move || probe.ran()).expect("launch");
            stream.synchronize().expect("synchronize");
            if tally.drops() != launch + 1 {
                late.push(launch);
            }
        }
        stop.store(true, Ordering::Relaxed);
        late
    });
    assert!(
        late.is_empty(),
        "not dropped when synchronize returned: launches {late:?}"
    );
    let me = std::thread::current().id();
    assert!(tally.drop_threads().iter().all(|thread| *thread == me));
}

#[test]
fn a_closure_refused_inside_a_host_function_is_dropped_on_a_callers_thread() {
    let context = context();
    let stream = Arc::new(new_stream(&context));
    let graph = cuda_host::graph::Graph::new(&context).expect("graph");
    let tally = Tally::new();
    let driver_thread = Arc::new(Mutex::new(None));
    let (inner_stream, seen_thread) = (Arc::clone(&stream), Arc::clone(&driver_thread));
    let (for_launch, for_node) = (tally.probe(), tally.probe());
    let mut refused = Some((for_launch, for_node, graph));
    host_launch(&*stream, move || {
        *seen_thread.lock().unwrap() = Some(std::thread::current().id());
        let (for_launch, for_node, graph) = refused.take().expect("runs once");
        assert!(host_launch(&*inner_stream, move || for_launch.ran()).is_err());
        assert!(graph.add_host_node(&[], move || for_node.ran()).is_err());
        drop(graph);
    })
    .expect("launch");
    stream.synchronize().expect("synchronize");
    tally.reclaim_until_dropped(2, "both refused closures to be dropped");
    let driver_thread = driver_thread
        .lock()
        .unwrap()
        .expect("the host function ran");
    assert!(
        tally
            .drop_threads()
            .iter()
            .all(|thread| *thread != driver_thread),
        "a refused closure was dropped on the driver's thread"
    );
    assert_eq!(tally.runs(), 0);
}

#[test]
fn a_panic_hook_that_replaces_itself_does_not_deadlock() {
    // Alone in a process: the hook is process-wide.
    suite::alone_in_child!(a_panic_hook_that_replaces_itself_does_not_deadlock);
    let (first, second) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (in_first, for_second) = (Arc::clone(&first), Arc::clone(&second));
    cuda_host::panics::set_host_panic_hook(move |_: &HostFunctionPanic<'_>| {
        in_first.fetch_add(1, Ordering::SeqCst);
        let in_second = Arc::clone(&for_second);
        cuda_host::panics::set_host_panic_hook(move |_: &HostFunctionPanic<'_>| {
            in_second.fetch_add(1, Ordering::SeqCst);
        });
    });
    let context = context();
    let stream = new_stream(&context);
    for _ in 0..2 {
        host_launch(&stream, || panic!("deliberate panic in a host function")).expect("launch");
    }
    stream.synchronize().expect("synchronize");
    assert_eq!(
        (first.load(Ordering::SeqCst), second.load(Ordering::SeqCst)),
        (1, 1)
    );
}

#[test]
fn replacing_a_hook_whose_drop_clears_the_hook_does_not_deadlock() {
    // Alone in a process: the hook is process-wide.
    suite::alone_in_child!(replacing_a_hook_whose_drop_clears_the_hook_does_not_deadlock);
    struct ClearsOnDrop;
    impl Drop for ClearsOnDrop {
        fn drop(&mut self) {
            cuda_host::panics::clear_host_panic_hook();
        }
    }
    let value = ClearsOnDrop;
    cuda_host::panics::set_host_panic_hook(move |_: &HostFunctionPanic<'_>| {
        let _ = &value;
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        cuda_host::panics::set_host_panic_hook(|_: &HostFunctionPanic<'_>| {});
        tx.send(()).unwrap();
    });
    rx.recv_timeout(suite::TIMEOUT)
        .expect("replacing the hook deadlocked in the old hook's Drop");
}

#[test]
fn the_panic_hook_runs_marked_as_inside_a_host_function() {
    // Alone in a process: the hook is process-wide.
    suite::alone_in_child!(the_panic_hook_runs_marked_as_inside_a_host_function);
    let context = context();
    let stream = Arc::new(new_stream(&context));
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let (hook_stream, hook_seen) = (Arc::clone(&stream), Arc::clone(&seen));
    cuda_host::panics::set_host_panic_hook(move |_: &HostFunctionPanic<'_>| {
        let mut seen = hook_seen.lock().unwrap();
        seen.push(format!("marked: {}", cuda_host::in_host_function()));
        seen.push(format!("reclaimed: {}", cuda_host::reclaim()));
        seen.push(format!("synchronize: {:?}", hook_stream.synchronize()));
    });
    // A finished record waits for a drain when the hook runs.
    let tally = Tally::new();
    hold_and_release(
        &stream,
        || {
            let probe = tally.probe();
            host_launch(&*stream, move || probe.ran()).expect("launch");
            host_launch(&*stream, || panic!("deliberate panic in a host function"))
                .expect("launch");
        },
        || assert_eq!(tally.runs(), 0, "ran with the stream held"),
        |stream| stream.synchronize(),
    )
    .expect("synchronize");
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "marked: true".to_owned(),
            "reclaimed: 0".to_owned(),
            format!(
                "synchronize: {:?}",
                Err::<(), _>(Error::InHostFunction {
                    call: "Stream::synchronize"
                })
            ),
        ]
    );
    assert_eq!(tally.drop_threads(), [std::thread::current().id()]);
}

#[test]
fn a_panic_payload_whose_drop_panics_does_not_disturb_the_stream() {
    // Alone in a process: the panic is reported through the process-wide hook.
    suite::alone_in_child!(a_panic_payload_whose_drop_panics_does_not_disturb_the_stream);
    let reports = collect_panic_reports();
    let context = context();
    let stream = new_stream(&context);
    host_launch(&stream, || std::panic::panic_any(PanicsOnDrop)).expect("launch");
    let tally = Tally::new();
    let probe = tally.probe();
    host_launch(&stream, move || probe.ran()).expect("launch after");
    let synchronized =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| stream.synchronize()));
    assert!(
        matches!(synchronized, Ok(Ok(()))),
        "the payload's Drop panicked out of synchronize"
    );
    assert_eq!((tally.runs(), tally.drops()), (1, 1));
    assert_eq!(
        reports.lock().unwrap().len(),
        1,
        "the host function's panic is reported once"
    );
}

#[test]
fn a_logger_that_panics_does_not_abort_the_process() {
    // Alone in a process: the logger is process-wide and set once.
    suite::alone_in_child!(a_logger_that_panics_does_not_abort_the_process);
    struct PanickingLogger;
    impl log::Log for PanickingLogger {
        fn enabled(&self, _: &log::Metadata<'_>) -> bool {
            true
        }
        fn log(&self, _: &log::Record<'_>) {
            panic!("deliberate panic in a logger");
        }
        fn flush(&self) {}
    }
    log::set_logger(&PanickingLogger).expect("the first logger of this process");
    log::set_max_level(log::LevelFilter::Error);
    let context = context();
    let stream = new_stream(&context);
    host_launch(&stream, || panic!("deliberate panic in a host function")).expect("launch");
    let tally = Tally::new();
    let probe = tally.probe();
    host_launch(&stream, move || probe.ran()).expect("launch after");
    stream.synchronize().expect("synchronize");
    assert_eq!((tally.runs(), tally.drops()), (1, 1));
}

#[test]
fn a_borrowed_stream_dropped_inside_a_host_function_is_not_touched_after_its_owner_destroyed_it() {
    let test = "a_borrowed_stream_dropped_inside_a_host_function_is_not_touched_after_its_owner_destroyed_it";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "the real driver crashes on a destroyed handle; the software driver counts such calls",
        );
    };
    // Alone in a process: the count of calls on destroyed handles is process-wide.
    suite::alone_in_child!(a_borrowed_stream_dropped_inside_a_host_function_is_not_touched_after_its_owner_destroyed_it);
    let context = context();
    let owner = new_stream(&context);
    // SAFETY: the wrapper is dropped (inside the host function below) before `owner`.
    let borrowed = unsafe { Stream::borrow_raw(&context, owner.as_raw()) };
    host_launch(&borrowed, || {}).expect("launch on the borrowed stream");
    owner.synchronize().expect("synchronize");
    let host = new_stream(&context);
    let tally = Tally::new();
    let probe = tally.probe();
    let mut borrowed = Some(borrowed);
    host_launch(&host, move || {
        drop(borrowed.take());
        probe.ran();
    })
    .expect("launch");
    wait_until("the wrapper to be dropped", || tally.runs() == 1);
    let before = controls.stale_handle_uses();
    drop(owner);
    cuda_host::reclaim();
    host.synchronize().expect("synchronize");
    assert_eq!(
        controls.stale_handle_uses(),
        before,
        "a call named the borrowed stream after its owner destroyed it"
    );
}

#[test]
fn creating_streams_and_events_and_using_the_special_streams_leave_the_current_context_alone() {
    let context = context();
    let driver = Arc::clone(context.driver());
    let current = || {
        let mut current = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        suite::ok("cuCtxGetCurrent", unsafe {
            driver.cuCtxGetCurrent(&mut current)
        });
        current
    };
    // A thread of its own, with no context current.
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                assert!(current().is_null());
                let stream = new_stream(&context);
                assert!(current().is_null(), "Stream::new left its context current");
                let event = cuda_host::Event::new(&context, cuda_host::EventFlags::DisableTiming)
                    .expect("event");
                assert!(current().is_null(), "Event::new left its context current");
                event.record(&stream).expect("record");
                let per_thread = Stream::per_thread(&context);
                host_launch(&per_thread, || {}).expect("launch");
                assert!(
                    current().is_null(),
                    "the per-thread stream left its context current"
                );
                per_thread.synchronize().expect("synchronize");
                assert!(current().is_null());
                let graph = cuda_host::graph::Graph::new(&context).expect("graph");
                assert!(current().is_null(), "Graph::new left its context current");
                drop((graph, event, stream));
            })
            .join()
            .unwrap();
    });
}

#[test]
fn slot_memory_beyond_the_reserve_goes_back_after_a_burst() {
    // Alone in a process: the slot table is process-wide.
    suite::alone_in_child!(slot_memory_beyond_the_reserve_goes_back_after_a_burst);
    const BURST: usize = 50_000;
    let context = context();
    let stream = new_stream(&context);
    if stream.host_engine() == cuda_host::options::HostEngine::Polled
        && !suite::test_driver().is_software()
    {
        // The real driver takes only so many stream memory operations behind a wait nothing has
        // released before an enqueue blocks (docs/REAL-DRIVER.md): this thread would never open
        // its gate.
        return suite::skip(
            "slot_memory_beyond_the_reserve_goes_back_after_a_burst",
            "50,000 polled launches behind a held gate block the real driver's enqueue",
        );
    }
    let tally = Tally::new();
    hold_and_release(
        &stream,
        || {
            tally.launch_counted(&stream, BURST);
        },
        || {
            let during = cuda_host::metrics().launch_slots();
            assert!(during.allocated >= BURST, "{during:?}");
            assert_eq!(during.in_flight, BURST, "{during:?}");
        },
        Stream::synchronize,
    )
    .expect("synchronize");
    assert_eq!((tally.runs(), tally.drops()), (BURST, BURST));
    let after = cuda_host::metrics().launch_slots();
    assert!(
        after.allocated <= after.reserve,
        "slots beyond the reserve were kept after the burst: {after:?}"
    );
    assert_eq!((after.in_flight, after.finished), (0, 0), "{after:?}");
    assert!(after.peak >= BURST, "{after:?}");
    // The table grows again for the next burst, and gives it back again.
    hold_and_release(
        &stream,
        || {
            for _ in 0..BURST {
                host_launch(&stream, || {}).expect("launch");
            }
        },
        || assert!(cuda_host::metrics().launch_slots().allocated >= BURST),
        Stream::synchronize,
    )
    .expect("synchronize");
    assert!(cuda_host::metrics().launch_slots().allocated <= after.reserve);
}

#[test]
fn streams_on_two_devices_with_host_functions_in_flight_at_once_keep_their_order_and_leak_nothing()
{
    let test = "streams_on_two_devices_with_host_functions_in_flight_at_once_keep_their_order_and_leak_nothing";
    if test_driver().is_software() && !suite::in_child_process() {
        // The software driver has one device unless told otherwise when it loads.
        return suite::run_in_child(module_path!(), test, &[("CUSW_DEVICE_COUNT", "2")]);
    }
    let driver = Arc::clone(&test_driver().driver);
    let count = cuda_host::Device::count(&driver).expect("device count");
    if count < 2 {
        return suite::skip(
            test,
            &format!("needs two devices; this machine has {count}"),
        );
    }
    // Few enough that the driver never makes an enqueue wait for the held host-function thread.
    const EACH: usize = 200;
    type Log = Arc<Mutex<Vec<usize>>>;
    let contexts: Vec<Context> = (0..2)
        .map(|ordinal| {
            cuda_host::Device::get(&driver, ordinal)
                .and_then(|device| device.primary_context())
                .expect("the device's primary context")
        })
        .collect();
    assert_ne!(contexts[0].as_raw(), contexts[1].as_raw());
    let streams: Vec<Stream> = contexts
        .iter()
        .flat_map(|context| [new_stream(context), new_stream(context)])
        .collect();
    let logs: Vec<Log> = streams.iter().map(|_| Log::default()).collect();
    let tally = Tally::new();
    // Each stream's first host function holds it until every launch below is in flight.
    let release = Arc::new(std::sync::atomic::AtomicBool::new(false));
    for stream in &streams {
        let release = Arc::clone(&release);
        host_launch(stream, move || {
            let start = std::time::Instant::now();
            while !release.load(Ordering::SeqCst) && start.elapsed() < suite::TIMEOUT {
                std::thread::yield_now();
            }
        })
        .expect("launch");
    }
    for launch in 0..EACH {
        for (stream, log) in streams.iter().zip(&logs) {
            let (probe, log) = (tally.probe(), Arc::clone(log));
            host_launch(stream, move || {
                log.lock().unwrap().push(launch);
                probe.ran();
            })
            .expect("launch");
        }
    }
    assert_eq!(tally.runs(), 0, "ran before the streams were released");
    let in_flight = cuda_host::metrics().launch_slots().in_flight;
    assert!(
        in_flight >= 2 * streams.len(),
        "{in_flight} launches in flight"
    );
    release.store(true, Ordering::SeqCst);
    for stream in &streams {
        stream.synchronize().expect("synchronize");
    }
    let expected: Vec<usize> = (0..EACH).collect();
    for (index, log) in logs.iter().enumerate() {
        assert_eq!(*log.lock().unwrap(), expected, "stream {index}");
    }
    assert_eq!(tally.runs(), streams.len() * EACH);
    assert_eq!(
        tally.drops(),
        streams.len() * EACH,
        "dropped when synchronize returned"
    );
}

#[test]
fn a_borrowed_null_context_is_refused() {
    let driver = &test_driver().driver;
    // SAFETY: null is refused before any use.
    let error = unsafe { Context::borrow_raw(driver, std::ptr::null_mut()) }
        .expect_err("a null context was taken");
    assert!(matches!(error, Error::InvalidArgument { .. }), "{error}");
}

#[test]
fn a_synchronize_answering_a_failure_returns_only_once_no_host_function_of_its_stream_runs() {
    // The real driver answers a failure at once while its thread is still inside a host function
    // of the stream (docs/probes/failure_during_host_function.c): a closure that then wrote into
    // memory the caller frees after the synchronize would write into freed memory.
    suite::alone_in_child!(
        a_synchronize_answering_a_failure_returns_only_once_no_host_function_of_its_stream_runs
    );
    use std::sync::atomic::AtomicBool;
    let context = context();
    let (running, faulting) = (new_stream(&context), new_stream(&context));
    let fault = suite::kernels::Fault::load(context.driver());
    let started = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicBool::new(false));
    let ended = Arc::new(AtomicBool::new(false));
    let behind = Tally::new();
    {
        let (started, failed, ended) = (started.clone(), failed.clone(), ended.clone());
        host_launch(&running, move || {
            started.store(true, Ordering::SeqCst);
            let began = std::time::Instant::now();
            while !failed.load(Ordering::SeqCst) && began.elapsed() < suite::TIMEOUT {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
            ended.store(true, Ordering::SeqCst);
        })
        .expect("launch");
    }
    let probe = behind.probe();
    host_launch(&running, move || probe.ran()).expect("launch");
    wait_until("the host function to start", || {
        started.load(Ordering::SeqCst)
    });
    fault.launch(&faulting);
    assert!(faulting.synchronize().is_err(), "the fault is reported");
    failed.store(true, Ordering::SeqCst);
    assert!(running.synchronize().is_err(), "the failure is reported");
    assert!(
        ended.load(Ordering::SeqCst),
        "the synchronize answered the failure while a host function of its stream still ran"
    );
    behind.reclaim_until_dropped(1, "the function behind to be reclaimed");
    assert_eq!(
        behind.runs(),
        0,
        "a function queued behind ran after the failure was seen"
    );
    std::mem::forget((running, faulting));
}

static RAW_RUNS: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn count_raw_run(_data: *mut c_void) {
    RAW_RUNS.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn raw_launches_queued_behind_a_failure_never_run_and_later_ones_are_refused() {
    // Alone in a process: the failure stays with it.
    suite::alone_in_child!(
        raw_launches_queued_behind_a_failure_never_run_and_later_ones_are_refused
    );
    let context = context();
    let stream = new_stream(&context);
    let gate = Gate::new(&context);
    let fault = suite::kernels::Fault::load(context.driver());
    gate.hold(&stream);
    fault.launch(&stream);
    let bytes = [3u8; 32];
    for _ in 0..10 {
        // SAFETY: `count_raw_run` ignores its data.
        unsafe { host_launch_raw(&stream, count_raw_run, UserData::Copied(&bytes)) }
            .expect("launch");
        // SAFETY: as above.
        unsafe { host_launch_raw(&stream, count_raw_run, UserData::None) }.expect("launch");
    }
    gate.open();
    assert!(stream.synchronize().is_err(), "the fault is reported");
    // SAFETY: as above.
    let refused = unsafe { host_launch_raw(&stream, count_raw_run, UserData::Copied(&bytes)) };
    assert!(refused.is_err(), "a launch after the failure was taken");
    std::thread::sleep(std::time::Duration::from_millis(50));
    cuda_host::reclaim();
    assert_eq!(
        RAW_RUNS.load(Ordering::SeqCst),
        0,
        "a function behind the fault ran"
    );
    assert_eq!(
        cuda_host::metrics().launch_slots().in_flight,
        0,
        "copied bytes behind the failure were not reclaimed"
    );
    std::mem::forget(stream);
}

/// A host function's progress across a failure: it starts, waits until the test saw the failure,
/// then keeps running for 200 ms (it still uses what it was given) and ends.
#[derive(Default)]
struct Straddle {
    started: std::sync::atomic::AtomicBool,
    failed: std::sync::atomic::AtomicBool,
    ended: std::sync::atomic::AtomicBool,
}

impl Straddle {
    fn leaked() -> &'static Straddle {
        Box::leak(Box::default())
    }

    fn run(&self) {
        self.started.store(true, Ordering::SeqCst);
        let began = std::time::Instant::now();
        while !self.failed.load(Ordering::SeqCst) && began.elapsed() < suite::TIMEOUT {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        self.ended.store(true, Ordering::SeqCst);
    }

    /// Waits until the function started, fails the context through `faulting`, and lets the
    /// function go on.
    fn fail_while_running(&self, faulting: &Stream) {
        let fault = suite::kernels::Fault::load(faulting.context().driver());
        wait_until("the host function to start", || {
            self.started.load(Ordering::SeqCst)
        });
        fault.launch(faulting);
        assert!(faulting.synchronize().is_err(), "the fault is reported");
        self.failed.store(true, Ordering::SeqCst);
    }
}

/// A stream running a host function that straddles its context's failure, another stream whose
/// fault failed the context while the function ran, the function's progress, and an event
/// recorded after it.
fn an_event_behind_a_function_its_context_fails()
-> (Stream, Stream, &'static Straddle, cuda_host::Event) {
    let context = context();
    let (running, faulting) = (new_stream(&context), new_stream(&context));
    let progress = Straddle::leaked();
    host_launch(&running, move || progress.run()).expect("launch");
    let event =
        cuda_host::Event::new(&context, cuda_host::EventFlags::DisableTiming).expect("event");
    event.record(&running).expect("record");
    progress.fail_while_running(&faulting);
    (running, faulting, progress, event)
}

#[test]
fn an_event_synchronize_answering_a_failure_returns_only_once_no_host_function_before_it_runs() {
    // docs/GUIDE.md: "A call that answers the failure (`synchronize`, `is_complete`) returns only once
    // no host function of its stream is still running"; RELIABILITY: "so what a closure or copy
    // uses may be freed when it returns". Event::synchronize and Event::is_complete answer the
    // failure at once (docs/REAL-DRIVER.md measured cuEventQuery so) and do not wait.
    suite::alone_in_child!(
        an_event_synchronize_answering_a_failure_returns_only_once_no_host_function_before_it_runs
    );
    let (running, faulting, progress, event) = an_event_behind_a_function_its_context_fails();
    let queried = event.is_complete();
    let ended_at_query = progress.ended.load(Ordering::SeqCst);
    let synchronized = event.synchronize();
    let ended_at_synchronize = progress.ended.load(Ordering::SeqCst);
    assert!(
        queried.is_err() && synchronized.is_err(),
        "the failure is reported: {queried:?}, {synchronized:?}"
    );
    assert!(
        ended_at_query && ended_at_synchronize,
        "the event's calls answered the failure while a host function recorded before the event \
         still ran (is_complete: ended {ended_at_query}, synchronize: ended \
         {ended_at_synchronize})"
    );
    std::mem::forget((event, running, faulting));
}

#[test]
fn a_failed_contexts_synchronize_does_not_wait_for_a_host_function_of_another_context() {
    // Context::synchronize answering its failure waits until no listed host function runs, of any
    // stream of any context (wait_until_none_running(None)). A healthy context's host function
    // that waits for the synchronizing thread (here: for at most 3 s) then holds it up: a
    // deadlock were the wait unbounded.
    let test = "a_failed_contexts_synchronize_does_not_wait_for_a_host_function_of_another_context";
    if test_driver().is_software() && !suite::in_child_process() {
        return suite::run_in_child(module_path!(), test, &[("CUSW_DEVICE_COUNT", "2")]);
    }
    suite::alone_in_child!(
        a_failed_contexts_synchronize_does_not_wait_for_a_host_function_of_another_context
    );
    let driver = Arc::clone(&test_driver().driver);
    let count = cuda_host::Device::count(&driver).expect("device count");
    if count < 2 {
        return suite::skip(
            test,
            &format!("needs two devices; this machine has {count}"),
        );
    }
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};
    let failing = context();
    let healthy = cuda_host::Device::get(&driver, 1)
        .and_then(|device| device.primary_context())
        .expect("device 1's primary context");
    let faulting = new_stream(&failing);
    let other = new_stream(&healthy);
    let (started, released) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    {
        let (started, released) = (Arc::clone(&started), Arc::clone(&released));
        host_launch(&other, move || {
            started.store(true, Ordering::SeqCst);
            let began = Instant::now();
            while !released.load(Ordering::SeqCst) && began.elapsed() < Duration::from_secs(3) {
                std::thread::sleep(Duration::from_millis(1));
            }
        })
        .expect("launch");
    }
    wait_until("the other context's host function to start", || {
        started.load(Ordering::SeqCst)
    });
    let fault = suite::kernels::Fault::load(failing.driver());
    fault.launch(&faulting);
    let began = Instant::now();
    let synchronized = failing.synchronize();
    let waited = began.elapsed();
    released.store(true, Ordering::SeqCst);
    assert!(synchronized.is_err(), "the failure is reported");
    assert!(
        waited < Duration::from_secs(1),
        "the failed context's synchronize waited {waited:?} for a host function of another, \
         healthy context, which waited for this thread"
    );
    other.synchronize().expect("the healthy context goes on");
    std::mem::forget(faulting);
}

#[test]
fn a_failure_answered_through_the_null_stream_waits_for_a_function_launched_on_the_legacy_one() {
    // Stream::borrow_raw: null is "the default stream, which is the legacy stream on a legacy
    // driver table". Running functions are listed by handle (launch/running.rs `key`), so one
    // launched through Stream::legacy is listed under CU_STREAM_LEGACY and a synchronize of the
    // same stream through a borrowed null handle waits for null's entries only. On the polled
    // engine the stream itself finishes at the failure while the engine's thread still runs it.
    suite::alone_in_child!(
        a_failure_answered_through_the_null_stream_waits_for_a_function_launched_on_the_legacy_one
    );
    if std::env::var_os("CUDA_SYS_PER_THREAD_DEFAULT_STREAM").is_some_and(|value| value == "1") {
        return suite::skip(
            "a_failure_answered_through_the_null_stream_waits_for_a_function_launched_on_the_legacy_one",
            "null is the per-thread default stream on this table",
        );
    }
    let context = context();
    let legacy = Stream::legacy(&context)
        .with_host_engine(cuda_host::options::HostEngine::Polled)
        .expect("the polled engine");
    // SAFETY: null, the legacy stream on this table, resolved against `context`.
    let null = unsafe { Stream::borrow_raw(&context, std::ptr::null_mut()) };
    let faulting = new_stream(&context);
    let progress = Straddle::leaked();
    host_launch(&legacy, move || progress.run()).expect("launch");
    progress.fail_while_running(&faulting);
    assert!(null.synchronize().is_err(), "the failure is reported");
    assert!(
        progress.ended.load(Ordering::SeqCst),
        "the null stream's synchronize answered the failure while a host function launched on \
         the legacy stream, the same stream, still ran"
    );
    std::mem::forget((legacy, null, faulting));
}

#[test]
fn a_synchronize_answering_a_failure_returns_only_once_no_graph_host_node_of_its_stream_runs() {
    // A graph launched on the stream runs its host nodes as host functions of the stream
    // (enqueue.rs `graph_host_fn`), which are not listed as running: a synchronize answering
    // the failure returns while a node's callable still runs.
    suite::alone_in_child!(
        a_synchronize_answering_a_failure_returns_only_once_no_graph_host_node_of_its_stream_runs
    );
    let context = context();
    let (running, faulting) = (new_stream(&context), new_stream(&context));
    let progress = Straddle::leaked();
    let graph = cuda_host::graph::Graph::new(&context).expect("graph");
    graph
        .add_host_node(&[], move || progress.run())
        .expect("host node");
    let exec = graph.instantiate().expect("the graph instantiates");
    exec.launch(&running).expect("the graph launches");
    progress.fail_while_running(&faulting);
    assert!(running.synchronize().is_err(), "the failure is reported");
    assert!(
        progress.ended.load(Ordering::SeqCst),
        "the synchronize answered the failure while a graph host node of its stream still ran"
    );
    std::mem::forget((exec, graph, running, faulting));
}

#[test]
fn a_synchronize_answering_a_failed_drop_returns_only_once_no_host_function_of_its_stream_runs() {
    // A stream dropped after the failure records cuStreamDestroy's sticky error as a drop error,
    // and the next call of the context answers it first (`with_stream_context`'s
    // `take_drop_error`), before cuStreamSynchronize and the wait for running functions: the
    // synchronize reports the failure while a closure of its stream still runs.
    suite::alone_in_child!(
        a_synchronize_answering_a_failed_drop_returns_only_once_no_host_function_of_its_stream_runs
    );
    let context = context();
    let (running, faulting) = (new_stream(&context), new_stream(&context));
    let progress = Straddle::leaked();
    host_launch(&running, move || progress.run()).expect("launch");
    progress.fail_while_running(&faulting);
    drop(faulting);
    let synchronized = running.synchronize();
    let ended = progress.ended.load(Ordering::SeqCst);
    assert!(synchronized.is_err(), "the failure is reported");
    assert!(
        ended,
        "the synchronize answered {synchronized:?} while a host function of its stream still ran"
    );
    std::mem::forget(running);
}

#[test]
fn an_event_synchronize_answering_a_failed_drop_returns_only_once_no_host_function_runs() {
    // As for a stream: the failed context's stream destroy leaves the sticky error as a drop
    // error, which the event's synchronize answers first; the event knows no stream, so it
    // waits for every host function of its context.
    suite::alone_in_child!(
        an_event_synchronize_answering_a_failed_drop_returns_only_once_no_host_function_runs
    );
    let (running, faulting, progress, event) = an_event_behind_a_function_its_context_fails();
    drop(faulting);
    let synchronized = event.synchronize();
    let ended = progress.ended.load(Ordering::SeqCst);
    assert!(
        matches!(synchronized, Err(cuda_host::Error::DropFailed { .. })),
        "the failure is reported as the drop's: {synchronized:?}"
    );
    assert!(
        ended,
        "Event::synchronize answered {synchronized:?} while a host function recorded before the \
         event still ran"
    );
    std::mem::forget((event, running));
}

//! The polled engine (`Stream::with_host_engine(HostEngine::Polled)`): host functions in stream
//! order on cuda-host's own thread, with host_launch's rules: ordering both ways, values dropped
//! on the launching thread, panics, captures, refusals, failed contexts, streams dropped with
//! functions pending, many threads, parking, the lanes' memory.

use cuda_host::{
    CaptureMode, Context, Error, GraphBuilder, HostEngine, HostTaskSyncMode, LaunchOptions, Stream,
    StreamFlags, UserData, host_launch, host_launch_raw, host_launch_with, polled_engine_counts,
    reclaim,
};
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use suite::{Gate, MappedWords, Tally, context, wait_until};

fn polled_stream(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking)
        .expect("stream")
        .with_host_engine(HostEngine::Polled)
        .expect("a polled stream")
}

#[test]
fn runs_after_the_work_enqueued_before_and_before_the_work_enqueued_after() {
    let context = context();
    let stream = polled_stream(&context);
    let words = Arc::new(MappedWords::new(&context, 3));
    let seen_by_host_function = Arc::new(Mutex::new(None));
    words.write_in_stream(&stream, 0, 1);
    let (host_words, seen) = (Arc::clone(&words), Arc::clone(&seen_by_host_function));
    host_launch(&stream, move || {
        // Long enough that work not held back by the engine's wait would run meanwhile.
        std::thread::sleep(Duration::from_millis(20));
        *seen.lock().unwrap() = Some(host_words.get(0));
        host_words.set(1, 2);
    })
    .expect("launch");
    // Copies the host function's word: 2 only if the copy runs after it.
    words.copy_in_stream(&stream, 1, 2);
    stream.synchronize().expect("synchronize");
    assert_eq!(*seen_by_host_function.lock().unwrap(), Some(1));
    assert_eq!(
        words.get(2),
        2,
        "the work after the host function ran before it returned"
    );
}

#[test]
fn host_functions_run_once_in_order_on_the_engines_thread_and_drop_on_the_launching_thread() {
    const LAUNCHES: usize = 10_000;
    let context = context();
    let stream = polled_stream(&context);
    let tally = Tally::new();
    let order = Arc::new(Mutex::new(Vec::with_capacity(LAUNCHES)));
    let threads = Arc::new(Mutex::new(Vec::new()));
    for index in 0..LAUNCHES {
        let (probe, order, threads) = (tally.probe(), Arc::clone(&order), Arc::clone(&threads));
        host_launch(&stream, move || {
            probe.ran();
            order.lock().unwrap().push(index);
            let name = std::thread::current().name().map(str::to_owned);
            let mut threads = threads.lock().unwrap();
            if !threads.contains(&name) {
                threads.push(name);
            }
        })
        .expect("launch");
    }
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), LAUNCHES);
    assert_eq!(tally.drops(), LAUNCHES, "synchronize dropped every value");
    assert!(
        tally
            .drop_threads()
            .iter()
            .all(|id| *id == std::thread::current().id())
    );
    assert!(
        order.lock().unwrap().iter().copied().eq(0..LAUNCHES),
        "out of order"
    );
    assert_eq!(
        *threads.lock().unwrap(),
        [Some("cuda-host-poll".to_owned())],
        "not on the engine's thread"
    );
}

#[test]
fn the_raw_forms_run_on_the_engine_with_their_user_data() {
    unsafe extern "C" fn add_one(data: *mut c_void) {
        // SAFETY: the test passes a live counter.
        unsafe { &*data.cast::<AtomicUsize>() }.fetch_add(1, Ordering::SeqCst);
    }
    unsafe extern "C" fn add_copied(data: *mut c_void) {
        // SAFETY: the copied bytes are a pointer to a live counter, valid during the call.
        let counter = unsafe { data.cast::<*const AtomicUsize>().read() };
        // SAFETY: as above.
        unsafe { &*counter }.fetch_add(10, Ordering::SeqCst);
    }
    let context = context();
    let stream = polled_stream(&context);
    let counter = AtomicUsize::new(0);
    let address = std::ptr::from_ref(&counter);
    // SAFETY: `counter` outlives the synchronize below; the functions only bump it.
    unsafe {
        host_launch_raw(
            &stream,
            add_one,
            UserData::PassThrough(address.cast_mut().cast()),
        )
        .expect("launch");
        let bytes = (address as usize).to_ne_bytes();
        host_launch_raw(&stream, add_copied, UserData::Copied(&bytes)).expect("launch");
    }
    stream.synchronize().expect("synchronize");
    assert_eq!(counter.load(Ordering::SeqCst), 11);
}

#[test]
fn a_panicking_host_function_is_caught_and_the_stream_goes_on() {
    let context = context();
    let stream = polled_stream(&context);
    let tally = Tally::new();
    suite::quiet::quiet_deliberate_panics();
    host_launch(&stream, || panic!("deliberate panic on the polled engine")).expect("launch");
    let probe = tally.probe();
    host_launch(&stream, move || probe.ran()).expect("launch");
    stream.synchronize().expect("the stream went on");
    assert_eq!((tally.runs(), tally.drops()), (1, 1));
}

#[test]
fn a_capturing_stream_refuses_polled_launches_and_its_capture_still_works() {
    let _capture = suite::capture_lock();
    let context = context();
    let stream = polled_stream(&context);
    let tally = Tally::new();
    let builder = GraphBuilder::begin(&stream, CaptureMode::ThreadLocal).expect("capture");
    let probe = tally.probe();
    let refused = host_launch(&stream, move || probe.ran()).expect_err("captured");
    assert!(
        matches!(refused, Error::StreamCapturing { .. }),
        "{refused}"
    );
    builder.end().expect("the capture is intact");
    // Dropped by the first drain this thread may make, after its capture.
    reclaim();
    assert_eq!(tally.drops(), 1, "the refused closure was dropped");
    let probe = tally.probe();
    host_launch(&stream, move || probe.ran()).expect("launch after the capture");
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), 1);
}

#[test]
fn a_sync_mode_is_refused_on_a_polled_stream_and_the_closure_dropped() {
    let context = context();
    let stream = polled_stream(&context);
    let tally = Tally::new();
    let probe = tally.probe();
    let spin = LaunchOptions::default().sync_mode(HostTaskSyncMode::SpinWait);
    let refused = host_launch_with(&stream, spin, move || probe.ran()).expect_err("refused");
    assert!(
        matches!(refused, Error::InvalidArgument { .. }),
        "{refused}"
    );
    assert_eq!((tally.runs(), tally.drops()), (0, 1));
}

#[test]
fn functions_pending_when_the_context_fails_never_run_are_reclaimed_and_leave_no_wait() {
    // A sticky error fails the primary context for the rest of the process.
    suite::alone_in_child!(
        functions_pending_when_the_context_fails_never_run_are_reclaimed_and_leave_no_wait
    );
    const PENDING: usize = 50;
    let context = context();
    let stream = polled_stream(&context);
    let gate = Gate::new(&context);
    let fault = suite::kernels::Fault::load(context.driver());
    let tally = Tally::new();
    gate.hold(&stream);
    fault.launch(&stream);
    for _ in 0..PENDING {
        let probe = tally.probe();
        host_launch(&stream, move || probe.ran()).expect("launch");
    }
    gate.open();
    assert!(stream.synchronize().is_err(), "the fault is answered");
    tally.reclaim_until_dropped(PENDING, "the unrun functions' values to be dropped");
    assert_eq!(tally.runs(), 0, "ran after the fault");
    wait_until("the engine to let the failed stream's lane go", || {
        reclaim();
        polled_engine_counts().serving == 0
    });
}

#[test]
fn a_polled_stream_and_its_context_value_dropped_with_functions_pending_still_run_them_in_order() {
    const PENDING: usize = 100;
    let owner = context();
    let gate = Gate::new(&owner);
    let tally = Tally::new();
    let order = Arc::new(Mutex::new(Vec::with_capacity(PENDING)));
    {
        // A context value of its own, dropped with the stream, over a context `owner` keeps.
        // SAFETY: `owner` keeps the context retained for the whole test, past every use.
        let borrowed =
            unsafe { Context::borrow_raw(owner.driver(), owner.as_raw()) }.expect("borrowed");
        let stream = polled_stream(&borrowed);
        gate.hold(&stream);
        for index in 0..PENDING {
            let (probe, order) = (tally.probe(), Arc::clone(&order));
            host_launch(&stream, move || {
                probe.ran();
                order.lock().unwrap().push(index);
            })
            .expect("launch");
        }
        // The stream is destroyed and both values go with every function still queued.
    }
    assert_eq!(tally.runs(), 0, "ran before the gate opened");
    gate.open();
    wait_until("the pending functions to run", || tally.runs() == PENDING);
    // Every wait of the destroyed stream was acknowledged: the context's work all finishes.
    owner.synchronize().expect("synchronize the context");
    assert!(order.lock().unwrap().iter().copied().eq(0..PENDING));
    tally.reclaim_until_dropped(PENDING, "the pending functions' values to be dropped");
}

#[test]
fn threads_launching_on_four_polled_streams_lose_nothing_and_keep_each_streams_order() {
    const THREADS: usize = 4;
    const EACH: usize = 2_000;
    let context = context();
    let streams: Vec<Stream> = (0..4).map(|_| polled_stream(&context)).collect();
    let tally = Tally::new();
    type Order = Arc<Mutex<Vec<(usize, usize)>>>;
    let orders: Vec<Order> = (0..4).map(|_| Arc::new(Mutex::new(Vec::new()))).collect();
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (stream, order, tally) = (&streams[thread], &orders[thread], &tally);
            scope.spawn(move || {
                for index in 0..EACH {
                    let (probe, order) = (tally.probe(), Arc::clone(order));
                    host_launch(stream, move || {
                        probe.ran();
                        order.lock().unwrap().push((thread, index));
                    })
                    .expect("launch");
                }
                stream.synchronize().expect("synchronize");
            });
        }
    });
    assert_eq!(tally.runs(), THREADS * EACH);
    assert_eq!(tally.drops(), THREADS * EACH);
    for (thread, order) in orders.iter().enumerate() {
        let order = order.lock().unwrap();
        assert!(
            order
                .iter()
                .copied()
                .eq((0..EACH).map(|index| (thread, index)))
        );
    }
}

#[test]
fn the_engine_spins_while_a_function_is_pending_then_lets_go_and_parks_using_no_cpu() {
    // Alone in a process: no other test keeps the engine busy.
    suite::alone_in_child!(
        the_engine_spins_while_a_function_is_pending_then_lets_go_and_parks_using_no_cpu
    );
    let context = context();
    let stream = polled_stream(&context);
    let gate = Gate::new(&context);
    gate.hold(&stream);
    host_launch(&stream, || {}).expect("launch");
    let before = suite::started_thread_cpu_time("cuda-host-poll");
    std::thread::sleep(Duration::from_millis(50));
    let pending = suite::started_thread_cpu_time("cuda-host-poll") - before;
    gate.open();
    stream.synchronize().expect("synchronize");
    wait_until("the engine to park", || {
        let counts = polled_engine_counts();
        counts.serving == 0 && counts.parked
    });
    let parked_at = suite::started_thread_cpu_time("cuda-host-poll");
    std::thread::sleep(Duration::from_millis(200));
    let parked = suite::started_thread_cpu_time("cuda-host-poll") - parked_at;
    suite::figure(&format!(
        "polled engine CPU time: {pending:?} over 50 ms with a function pending; {parked:?} \
         over 200 ms parked"
    ));
    assert!(
        pending > Duration::ZERO,
        "the engine did not look while a function was pending"
    );
    assert!(
        parked < Duration::from_millis(2),
        "{parked:?} of CPU while parked"
    );
}

#[test]
fn a_contexts_lanes_are_freed_when_its_last_user_is_gone_though_the_context_lives_on() {
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            "a_contexts_lanes_are_freed_when_its_last_user_is_gone_though_the_context_lives_on",
            "counting host allocations needs the software driver",
        );
    };
    // Alone in a process: the count of host allocations is process-wide.
    suite::alone_in_child!(
        a_contexts_lanes_are_freed_when_its_last_user_is_gone_though_the_context_lives_on
    );
    let owner = context();
    let allocations = || controls.live_objects().host_allocations;
    let before = allocations();
    {
        // A context value of its own, over a context that outlives it: what frees the lanes is
        // that value's drop, not the context's destruction.
        // SAFETY: `owner` keeps the context retained for the whole test, past every use.
        let borrowed =
            unsafe { Context::borrow_raw(owner.driver(), owner.as_raw()) }.expect("borrowed");
        let stream = polled_stream(&borrowed);
        assert_eq!(allocations(), before + 1, "a page of lanes");
        let tally = Tally::new();
        let probe = tally.probe();
        host_launch(&stream, move || probe.ran()).expect("launch");
        stream.synchronize().expect("synchronize");
        assert_eq!(tally.runs(), 1);
    }
    // The server lets the context go a while after the stream's last function.
    wait_until("the lanes' page to be freed", || {
        reclaim();
        allocations() == before
    });
}

//! The polled engine (`Stream::with_host_engine(HostEngine::Polled)`): host functions in stream
//! order on cuda-host's own thread, with host_launch's rules: ordering both ways, values dropped
//! on the launching thread, panics, captures, refusals, failed contexts, streams dropped with
//! functions pending, many threads, parking, the lanes' memory; and adversity: a server thread
//! that cannot start, a batch other code's capture took and its graph run later, a panicking
//! logger, frees and allocations during a global capture.

use cuda_host::{
    Context, Error, Stream, StreamFlags, UserData, graph::CaptureMode, graph::GraphBuilder,
    host_launch, host_launch_raw, metrics, options::HostEngine, options::HostTaskSyncMode,
    options::LaunchOptions, options::host_launch_with, reclaim,
};
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use suite::{Gate, MappedWords, Tally, context, wait_until};

/// A cuda-host value of its own over the suite's context, and the tally whose probe goes with
/// the value's last reference.
fn value_of_its_own() -> (Context, Arc<Tally>) {
    let (owner, gone) = (context(), Tally::new());
    // SAFETY: the suite's context stays retained for the life of the process.
    let value =
        unsafe { Context::borrow_raw_with_owner(owner.driver(), owner.as_raw(), gone.probe()) }
            .expect("a context value");
    (value, gone)
}

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
        metrics().polled_engine().serving == 0
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
        let counts = metrics().polled_engine();
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
fn a_contexts_lanes_go_back_to_it_when_their_last_user_is_gone_for_its_next_value() {
    let test = "a_contexts_lanes_go_back_to_it_when_their_last_user_is_gone_for_its_next_value";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "counting host allocations needs the software driver");
    };
    // Alone in a process: the count of host allocations is process-wide.
    suite::alone_in_child!(
        a_contexts_lanes_go_back_to_it_when_their_last_user_is_gone_for_its_next_value
    );
    let allocations = || controls.live_objects().host_allocations;
    let before = allocations();
    for round in 0..3 {
        // A context value of its own, over a context that outlives it: its drop gives the page
        // back (a free would drain the context, and so wait for the owner's streams), and the
        // next value takes it again.
        // The value's last reference is gone once its owner is dropped.
        let (borrowed, gone) = value_of_its_own();
        let stream = polled_stream(&borrowed);
        assert_eq!(allocations(), before + 1, "a page of lanes, round {round}");
        let tally = Tally::new();
        let probe = tally.probe();
        host_launch(&stream, move || probe.ran()).expect("launch");
        stream.synchronize().expect("synchronize");
        assert_eq!(tally.runs(), 1);
        drop(stream);
        drop(borrowed);
        // The server lets the context go a while after the stream's last function.
        gone.reclaim_until_dropped(1, "the context value's last reference");
    }
    assert_eq!(allocations(), before + 1, "the page was not taken again");
}

#[test]
fn a_page_of_lanes_taken_again_keeps_the_acknowledgements_its_streams_have_yet_to_see() {
    let test = "a_page_of_lanes_taken_again_keeps_the_acknowledgements_its_streams_have_yet_to_see";
    let Some(controls) = software_controls(
        test,
        "a device slow to see a host's write is a control of the software driver",
    ) else {
        return;
    };
    // Alone in a process: the pace of stream waits is process-wide.
    suite::alone_in_child!(
        a_page_of_lanes_taken_again_keeps_the_acknowledgements_its_streams_have_yet_to_see
    );
    let owner = context();
    let (borrowed, gone) = value_of_its_own();
    // The page's first lane: a stream whose work is done, so that the next value's first stream
    // takes that lane and acknowledges its numbers in the same word as the second lane's.
    let first = polled_stream(&borrowed);
    host_launch(&first, || {}).expect("launch");
    first.synchronize().expect("synchronize");
    // The second lane: another thread's per-thread stream, dropped here, so watched on this
    // thread's stream and not its own: nothing of it keeps the context value while its wait has
    // yet to see its acknowledgement, which a device slow to read host memory sees late.
    controls.set_wait_poll_interval(Some(Duration::from_millis(200)));
    let words = Arc::new(MappedWords::new(&owner, 1));
    let (ran, has_run) = std::sync::mpsc::channel();
    let (stream_sent, stream_received) = std::sync::mpsc::channel();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let other = std::thread::spawn({
        let (borrowed, words, done) = (borrowed.clone(), Arc::clone(&words), Arc::clone(&done));
        move || {
            borrowed.bind_to_thread().expect("current");
            let stream = Stream::per_thread(&borrowed)
                .with_host_engine(HostEngine::Polled)
                .expect("a polled per-thread stream");
            host_launch(&stream, move || {
                // Long enough that the stream's first read of the acknowledgement comes before it.
                std::thread::sleep(Duration::from_millis(5));
                ran.send(()).expect("the test waits");
            })
            .expect("launch");
            words.write_in_stream(&stream, 0, 1);
            stream_sent.send(stream).expect("the test waits");
            drop(borrowed);
            // Its launch's record comes home here; the thread lives on, and so does its stream.
            while !done.load(Ordering::Acquire) {
                reclaim();
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    });
    has_run.recv().expect("the host function ran");
    drop(stream_received.recv().expect("the stream"));
    drop((first, borrowed));
    gone.reclaim_until_dropped(1, "the context value's last reference");
    // The next value takes the page again, and its stream the first lane.
    // SAFETY: as above.
    let next = unsafe { Context::borrow_raw(owner.driver(), owner.as_raw()) }.expect("borrowed");
    let stream = polled_stream(&next);
    let tally = Tally::new();
    let probe = tally.probe();
    host_launch(&stream, move || probe.ran()).expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), 1, "the lane taken again serves its stream");
    wait_until("the other thread's stream past its host function", || {
        words.get(0) == 1
    });
    controls.set_wait_poll_interval(None);
    done.store(true, Ordering::Release);
    other.join().expect("the other thread");
}

// ---- Adversity: a thread that cannot start, other code's captures, failures, loggers ----------

/// The software driver's controls for a test named `test`; `None`, with a skip note saying
/// `why`, on the real driver.
fn software_controls(test: &str, why: &str) -> Option<&'static suite::software::Controls> {
    let controls = suite::software::controls();
    if controls.is_none() {
        suite::skip(test, why);
    }
    controls
}

#[test]
fn a_polled_stream_is_refused_with_its_stream_given_back_when_the_engines_thread_cannot_start() {
    // No thread of the child can start: its stack size is impossible (libtest then runs the
    // test on its main thread).
    suite::alone_in_child!(
        a_polled_stream_is_refused_with_its_stream_given_back_when_the_engines_thread_cannot_start,
        &[("RUST_MIN_STACK", "1125899906842624")]
    );
    assert!(
        std::thread::Builder::new().spawn(|| {}).is_err(),
        "a thread started though RUST_MIN_STACK is impossible"
    );
    let context = context();
    let stream = Stream::new(&context, StreamFlags::NonBlocking).expect("stream");
    let refused = match stream.with_host_engine(HostEngine::Polled) {
        Err(refused) => refused,
        Ok(stream) => {
            let ran = Arc::new(AtomicUsize::new(0));
            let counter = Arc::clone(&ran);
            let launched = host_launch(&stream, move || {
                counter.fetch_add(1, Ordering::SeqCst);
            });
            wait_until(
                &format!(
                    "the function launched ({launched:?}) on a polled stream whose engine has \
                     no thread to run"
                ),
                || ran.load(Ordering::SeqCst) == 1,
            );
            panic!("the engine ran without its thread");
        }
    };
    assert!(
        matches!(
            refused.error,
            Error::ThreadStart {
                thread: "cuda-host-poll",
                ..
            }
        ),
        "{refused}"
    );
    // The stream comes back, still the driver's, and works.
    let stream = refused.into_stream();
    assert_eq!(stream.host_engine(), HostEngine::Driver);
    let tally = Tally::new();
    let probe = tally.probe();
    host_launch(&stream, move || probe.ran()).expect("launch through the driver");
    stream.synchronize().expect("synchronize");
    assert_eq!((tally.runs(), tally.drops()), (1, 1));
}

/// Launches a counted closure on `stream` from another thread, a launch that passes its capture
/// check and is then held inside the driver's `cuStreamBatchMemOp_v2` for 300 ms, during which
/// other code (the driver's own call, which cuda-host cannot hold) begins a relaxed capture of
/// the stream: the batch becomes a node of that capture. Answers the launch's result and the
/// capture's graph.
fn a_launch_taken_by_other_codes_capture(
    controls: &suite::software::Controls,
    stream: &Stream,
    tally: &Arc<Tally>,
) -> (cuda_host::Result<()>, suite::capture::Graph) {
    // Named by its base, which both the plain and the per-thread symbol share.
    controls.delay_next_calls(c"cuStreamBatchMemOp", 1, Duration::from_millis(300));
    std::thread::scope(|scope| {
        let launcher = scope.spawn(|| {
            let probe = tally.probe();
            host_launch(stream, move || probe.ran())
        });
        std::thread::sleep(Duration::from_millis(50));
        let capture = suite::capture::Capture::begin(
            stream.as_raw(),
            cuda_host_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        );
        let launched = launcher.join().unwrap();
        let graph = capture.end().expect("the capture ends with a graph");
        (launched, graph)
    })
}

#[test]
fn a_launch_other_codes_capture_took_leaves_no_work_behind_and_the_engine_parks() {
    let test = "a_launch_other_codes_capture_took_leaves_no_work_behind_and_the_engine_parks";
    let Some(controls) = software_controls(
        test,
        "holding a batch inside the driver is a software-driver control",
    ) else {
        return;
    };
    // Alone in a process: the engine's counts are process-wide.
    suite::alone_in_child!(
        a_launch_other_codes_capture_took_leaves_no_work_behind_and_the_engine_parks
    );
    let context = context();
    let stream = polled_stream(&context);
    let tally = Tally::new();
    let (launched, graph) = a_launch_taken_by_other_codes_capture(controls, &stream, &tally);
    assert!(
        matches!(launched, Err(Error::StreamCapturing { .. })),
        "{launched:?}"
    );
    drop(graph);
    reclaim();
    assert_eq!((tally.runs(), tally.drops()), (0, 1), "the refused closure");
    // With nothing launched since, the engine lets everything go.
    wait_until(
        "the engine to let the lane of the taken launch go and park",
        || {
            reclaim();
            let counts = metrics().polled_engine();
            counts.serving == 0 && counts.parked
        },
    );
    assert_eq!(
        metrics().polled_engine().retired_lanes,
        1,
        "the taken batch's lane is retired"
    );
    // The stream goes on, through a fresh lane.
    let probe = tally.probe();
    host_launch(&stream, move || probe.ran()).expect("a launch after the capture");
    stream.synchronize().expect("synchronize");
    assert_eq!(tally.runs(), 1);
}

#[test]
fn a_graph_that_took_a_polled_batch_never_makes_the_streams_functions_run_early_or_stall() {
    let test =
        "a_graph_that_took_a_polled_batch_never_makes_the_streams_functions_run_early_or_stall";
    let Some(controls) = software_controls(
        test,
        "holding a batch inside the driver is a software-driver control",
    ) else {
        return;
    };
    // Alone in a process: the delay armed in the driver is process-wide.
    suite::alone_in_child!(
        a_graph_that_took_a_polled_batch_never_makes_the_streams_functions_run_early_or_stall
    );
    const AFTER: usize = 20;
    let context = context();
    let stream = polled_stream(&context);
    let other = Stream::new(&context, StreamFlags::NonBlocking).expect("stream");
    let gate = Gate::new(&context);
    let tally = Tally::new();
    // A function queued before the capture, held back by the gate.
    gate.hold(&stream);
    let before = tally.probe();
    host_launch(&stream, move || before.ran()).expect("launch before the capture");
    let (launched, graph) = a_launch_taken_by_other_codes_capture(controls, &stream, &tally);
    assert!(
        matches!(launched, Err(Error::StreamCapturing { .. })),
        "{launched:?}"
    );
    // Functions queued after the capture, behind the same gate.
    for _ in 0..AFTER {
        let probe = tally.probe();
        host_launch(&stream, move || probe.ran()).expect("launch after the capture");
    }
    // The graph runs on another stream while all of them wait.
    let exec = graph.instantiate();
    exec.launch(other.as_raw());
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        tally.runs(),
        0,
        "a function ran before its stream reached it"
    );
    gate.open();
    wait_until("every function the stream reached to run", || {
        tally.runs() == 1 + AFTER
    });
    suite::wait_until_done(&stream);
    // Replayed while functions are queued again: still nothing of the stream's is touched.
    let gate = Gate::new(&context);
    gate.hold(&stream);
    for _ in 0..AFTER {
        let probe = tally.probe();
        host_launch(&stream, move || probe.ran()).expect("launch");
    }
    exec.launch(other.as_raw());
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        tally.runs(),
        1 + AFTER,
        "a function ran before its stream reached it"
    );
    gate.open();
    stream.synchronize().expect("the stream never stalls");
    other.synchronize().expect("the graph's runs end");
    assert_eq!(tally.runs(), 1 + 2 * AFTER);
    wait_until("the engine to park", || {
        reclaim();
        let counts = metrics().polled_engine();
        counts.serving == 0 && counts.parked
    });
}

#[test]
fn the_last_context_value_keeps_its_lanes_while_a_global_capture_is_open_and_gives_them_back_after()
{
    let test = "the_last_context_value_keeps_its_lanes_while_a_global_capture_is_open_and_gives_them_back_after";
    let Some(controls) =
        software_controls(test, "counting host allocations needs the software driver")
    else {
        return;
    };
    // Alone in a process: the count of host allocations is process-wide.
    suite::alone_in_child!(
        the_last_context_value_keeps_its_lanes_while_a_global_capture_is_open_and_gives_them_back_after
    );
    let owner = context();
    let allocations = || controls.live_objects().host_allocations;
    let captured = Stream::new(&owner, StreamFlags::NonBlocking).expect("stream");
    let before = allocations();
    // The value's last reference is gone once its owner is dropped.
    let (borrowed, gone) = value_of_its_own();
    {
        let stream = polled_stream(&borrowed);
        let tally = Tally::new();
        let probe = tally.probe();
        host_launch(&stream, move || probe.ran()).expect("launch");
        stream.synchronize().expect("synchronize");
        assert_eq!(tally.runs(), 1);
    }
    wait_until("the engine to let the context go", || {
        reclaim();
        metrics().polled_engine().serving == 0
    });
    assert_eq!(allocations(), before + 1, "a page of lanes");
    // The last value of the context with lanes goes during the other thread's capture.
    let during = suite::capture::during_a_global_capture(&captured, || {
        drop(borrowed);
        allocations()
    });
    assert_eq!(
        during,
        before + 1,
        "the lanes were freed during the capture"
    );
    // Given back after the capture, for the context's next value.
    gone.reclaim_until_dropped(1, "the context value's last reference");
    // SAFETY: as above.
    let next = unsafe { Context::borrow_raw(owner.driver(), owner.as_raw()) }.expect("borrowed");
    let _stream = polled_stream(&next);
    assert_eq!(allocations(), before + 1, "the page was not given back");
}

/// A logger that panics on every record while armed, but on the test's own thread (where a
/// panicking logger is the test's own business, and cuda-host's calls there may pass it on).
struct PanickingLogger(
    std::sync::atomic::AtomicBool,
    OnceLock<std::thread::ThreadId>,
);

impl log::Log for PanickingLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, _: &log::Record<'_>) {
        if self.0.load(Ordering::SeqCst) && self.1.get() != Some(&std::thread::current().id()) {
            panic!("deliberate panic in a logger");
        }
    }

    fn flush(&self) {}
}

#[test]
fn a_panicking_logger_never_stops_the_engine_nor_its_streams() {
    // Alone in a process: the logger is process-wide and set once.
    suite::alone_in_child!(a_panicking_logger_never_stops_the_engine_nor_its_streams);
    static LOGGER: PanickingLogger =
        PanickingLogger(std::sync::atomic::AtomicBool::new(false), OnceLock::new());
    LOGGER.1.set(std::thread::current().id()).unwrap();
    log::set_logger(&LOGGER).expect("the first logger of this process");
    log::set_max_level(log::LevelFilter::Trace);
    suite::quiet::quiet_deliberate_panics();
    let context = context();
    let stream = polled_stream(&context);
    let tally = Tally::new();
    LOGGER.0.store(true, Ordering::SeqCst);
    for round in 0..3 {
        host_launch(&stream, || panic!("deliberate panic on the polled engine")).expect("launch");
        let probe = tally.probe();
        host_launch(&stream, move || probe.ran()).expect("launch");
        stream.synchronize().expect("synchronize");
        assert_eq!(tally.runs(), round + 1);
        // The engine lets the lane go and parks between rounds.
        wait_until("the engine to park", || {
            reclaim();
            let counts = metrics().polled_engine();
            counts.serving == 0 && counts.parked
        });
    }
    // The engine logs on its own thread as it lets a failed context's functions go.
    let gate = Gate::new(&context);
    let fault = suite::kernels::Fault::load(context.driver());
    gate.hold(&stream);
    fault.launch(&stream);
    for _ in 0..5 {
        let probe = tally.probe();
        host_launch(&stream, move || probe.ran()).expect("launch");
    }
    gate.open();
    assert!(stream.synchronize().is_err(), "the fault is answered");
    wait_until(
        "the engine to let the failed stream's lane go and park",
        || {
            reclaim();
            let counts = metrics().polled_engine();
            counts.serving == 0 && counts.parked
        },
    );
    LOGGER.0.store(false, Ordering::SeqCst);
    tally.reclaim_until_dropped(3 + 5, "every value to be dropped");
    assert_eq!(tally.runs(), 3, "a function of the failed context ran");
}

#[test]
fn a_launch_that_needs_a_new_lane_during_a_global_capture_is_refused_and_the_capture_kept() {
    // Alone in a process: every lane of the context's first page is held busy.
    suite::alone_in_child!(
        a_launch_that_needs_a_new_lane_during_a_global_capture_is_refused_and_the_capture_kept
    );
    const LANES_PER_PAGE: usize = 512;
    let context = context();
    let captured = Stream::new(&context, StreamFlags::NonBlocking).expect("stream");
    let per_thread = Stream::per_thread(&context)
        .with_host_engine(HostEngine::Polled)
        .expect("this thread's per-thread stream, polled");
    // Every lane busy: a function queued behind a gate on each of as many streams.
    let gate = Gate::new(&context);
    let tally = Tally::new();
    let busy: Vec<Stream> = (0..LANES_PER_PAGE)
        .map(|_| polled_stream(&context))
        .collect();
    for stream in &busy {
        gate.hold(stream);
        let probe = tally.probe();
        host_launch(stream, move || probe.ran()).expect("launch");
    }
    let builder = GraphBuilder::begin(&captured, CaptureMode::Global).expect("capture");
    // Another thread's per-thread stream has no lane yet, and none is free.
    let probe = tally.probe();
    let launched = std::thread::scope(|scope| {
        scope
            .spawn(|| host_launch(&per_thread, move || probe.ran()))
            .join()
            .unwrap()
    });
    let ended = builder.end();
    gate.open();
    for stream in &busy {
        stream.synchronize().expect("synchronize");
    }
    ended.expect("the capture was not invalidated by the launch");
    assert!(
        launched.is_err(),
        "launched with a lane allocated during the capture"
    );
    reclaim();
    assert_eq!(tally.runs(), LANES_PER_PAGE);
}

#[test]
fn a_first_polled_stream_during_this_threads_capture_is_refused_with_its_stream_and_the_capture_kept()
 {
    let _capture = suite::capture_lock();
    let owner = context();
    let captured = Stream::new(&owner, StreamFlags::NonBlocking).expect("stream");
    // A context value of its own, which has no lanes yet: its first polled stream allocates.
    // SAFETY: `owner` keeps the context retained for the whole test, past every use.
    let borrowed =
        unsafe { Context::borrow_raw(owner.driver(), owner.as_raw()) }.expect("borrowed");
    let stream = Stream::new(&borrowed, StreamFlags::NonBlocking).expect("stream");
    let builder = GraphBuilder::begin(&captured, CaptureMode::ThreadLocal).expect("capture");
    let refused = stream
        .with_host_engine(HostEngine::Polled)
        .expect_err("a lane allocated during this thread's capture");
    assert!(
        matches!(refused.error, Error::AllocationInCapture { .. }),
        "{refused}"
    );
    builder.end().expect("the capture was not invalidated");
    // Once the capture ended, the stream it handed back becomes polled.
    let stream = refused
        .into_stream()
        .with_host_engine(HostEngine::Polled)
        .expect("a polled stream after the capture");
    let tally = Tally::new();
    let probe = tally.probe();
    host_launch(&stream, move || probe.ran()).expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!((tally.runs(), tally.drops()), (1, 1));
}

#[test]
fn a_batch_a_capture_took_while_the_engines_look_fails_never_stalls_the_stream() {
    // The engine asks cuStreamIsCapturing after the batch was accepted; an error there is taken
    // as "not capturing": the launch returns Ok, the lane is not retired, and the taken number
    // stays queued with its function. The stream never writes that number (the graph holds the
    // batch), so the server, serving only the first number queued, never serves the stream's
    // next function either: the stream waits for it for ever. Stream points treat "cannot
    // tell" as a capture (`ContextTracks::record`).
    let test = "a_batch_a_capture_took_while_the_engines_look_fails_never_stalls_the_stream";
    let Some(controls) = software_controls(
        test,
        "holding a batch inside the driver is a software-driver control",
    ) else {
        return;
    };
    suite::alone_in_child!(
        a_batch_a_capture_took_while_the_engines_look_fails_never_stalls_the_stream
    );
    let context = context();
    let stream = polled_stream(&context);
    let tally = Tally::new();
    controls.delay_next_calls(c"cuStreamBatchMemOp", 1, Duration::from_millis(300));
    let (launched, graph) = std::thread::scope(|scope| {
        let launcher = scope.spawn(|| {
            let probe = tally.probe();
            host_launch(&stream, move || probe.ran())
        });
        std::thread::sleep(Duration::from_millis(50));
        let capture = suite::capture::Capture::begin(
            stream.as_raw(),
            cuda_host_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        );
        // The engine's look after the batch cannot tell.
        controls.fail_next_calls_any_thread(
            c"cuStreamIsCapturing",
            1,
            cuda_host_sys::CUresult::CUDA_ERROR_INVALID_VALUE,
        );
        let launched = launcher.join().unwrap();
        let graph = capture.end().expect("the capture ends with a graph");
        (launched, graph)
    });
    drop(graph);
    // The stream goes on: a function launched after the capture runs.
    let after = tally.probe();
    host_launch(&stream, move || after.ran()).expect("a launch after the capture");
    wait_until("the function launched after the capture to run", || {
        tally.runs() >= 1
    });
    assert!(
        launched.is_err(),
        "the launch a capture took was answered {launched:?}"
    );
}

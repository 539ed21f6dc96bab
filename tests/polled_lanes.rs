//! The polled engine on parallel lanes: a pool of server threads
//! ([`set_polled_engine_threads`]) keeps each stream's order, never runs one stream's functions
//! on two threads at once, runs different streams' functions in parallel, parks every thread
//! when idle, and takes a new size after it started.
//!
//! Every test of this file runs on a pool of [`POOL`] servers, whatever the machine's cores, and
//! those that depend on which server a stream lands on run alone in a child process.

use cuda_host::{
    Context, Error, Stream, StreamFlags, host_launch, metrics, options::HostEngine,
    polled::MAX_POLLED_ENGINE_THREADS, polled::polled_engine_threads,
    polled::set_polled_engine_threads,
};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::ThreadId;
use std::time::Duration;
use suite::{Gate, Tally, context, wait_until};

/// The pool's size in this file's processes.
const POOL: usize = 4;

/// A polled stream, on a pool of [`POOL`] servers.
fn polled_stream(context: &Context) -> Stream {
    set_polled_engine_threads(POOL).expect("a pool of four servers");
    Stream::new(context, StreamFlags::NonBlocking)
        .expect("stream")
        .with_host_engine(HostEngine::Polled)
        .expect("a polled stream")
}

#[test]
fn eight_streams_fed_by_eight_threads_run_each_streams_functions_once_in_launch_order() {
    const STREAMS: usize = 8;
    const THREADS: usize = 8;
    const EACH: usize = 500;
    let context = context();
    let streams: Vec<Stream> = (0..STREAMS).map(|_| polled_stream(&context)).collect();
    // Per stream: the next ticket, taken with the launch under the lock so that tickets follow
    // the order the launches reached the stream; and the tickets in the order they ran.
    let issuing: Vec<Mutex<usize>> = (0..STREAMS).map(|_| Mutex::new(0)).collect();
    let ran: Vec<Arc<Mutex<Vec<usize>>>> = (0..STREAMS)
        .map(|_| Arc::new(Mutex::new(Vec::new())))
        .collect();
    let tally = Tally::new();
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (streams, issuing, ran, tally) = (&streams, &issuing, &ran, &tally);
            scope.spawn(move || {
                // Each thread feeds every stream, starting at its own.
                for index in 0..EACH * STREAMS {
                    let which = (thread + index) % STREAMS;
                    let (probe, ran) = (tally.probe(), Arc::clone(&ran[which]));
                    let mut next = issuing[which].lock().unwrap();
                    let ticket = *next;
                    host_launch(&streams[which], move || {
                        probe.ran();
                        ran.lock().unwrap().push(ticket);
                    })
                    .expect("launch");
                    *next += 1;
                }
            });
        }
    });
    for stream in &streams {
        stream.synchronize().expect("synchronize");
    }
    let launched = STREAMS * THREADS * EACH;
    assert_eq!(tally.runs(), launched, "functions lost or run twice");
    tally.reclaim_until_dropped(launched, "every value to be dropped");
    for (which, ran) in ran.iter().enumerate() {
        let ran = ran.lock().unwrap();
        assert_eq!(ran.len(), THREADS * EACH, "stream {which} lost functions");
        if let Some(at) = (1..ran.len()).find(|&at| ran[at] != ran[at - 1] + 1) {
            panic!(
                "stream {which} ran ticket {} after ticket {}",
                ran[at],
                ran[at - 1]
            );
        }
        assert_eq!(ran.first(), Some(&0));
    }
}

/// Two rules keep a stream's functions apart: its lane has one server at a time, and a server
/// runs a function only once the stream wrote its number, which it writes only after the one
/// before was acknowledged. The test fails where both break.
#[test]
fn a_streams_functions_never_run_on_two_threads_at_once_though_its_lane_moves_between_servers() {
    const STREAMS: usize = 8;
    const THREADS: usize = 8;
    const BURSTS: usize = 12;
    const BURST: usize = 4;
    let context = context();
    let streams: Vec<Stream> = (0..STREAMS).map(|_| polled_stream(&context)).collect();
    let running: Vec<Arc<AtomicBool>> = (0..STREAMS)
        .map(|_| Arc::new(AtomicBool::new(false)))
        .collect();
    let overlaps = Arc::new(AtomicUsize::new(0));
    let servers: Vec<Arc<Mutex<HashSet<ThreadId>>>> = (0..STREAMS)
        .map(|_| Arc::new(Mutex::new(HashSet::new())))
        .collect();
    let tally = Tally::new();
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (streams, running, servers, overlaps, tally) =
                (&streams, &running, &servers, &overlaps, &tally);
            scope.spawn(move || {
                for burst in 0..BURSTS {
                    for index in 0..BURST * STREAMS {
                        let which = (thread + index) % STREAMS;
                        let (probe, running, servers, overlaps) = (
                            tally.probe(),
                            Arc::clone(&running[which]),
                            Arc::clone(&servers[which]),
                            Arc::clone(overlaps),
                        );
                        host_launch(&streams[which], move || {
                            probe.ran();
                            if running.swap(true, Ordering::SeqCst) {
                                overlaps.fetch_add(1, Ordering::SeqCst);
                            }
                            servers.lock().unwrap().insert(std::thread::current().id());
                            // Widens the window in which another thread could run the stream.
                            std::thread::sleep(Duration::from_micros(200));
                            running.store(false, Ordering::SeqCst);
                        })
                        .expect("launch");
                    }
                    // Quiet for longer than a server keeps a lane, on some bursts, so that
                    // lanes are let go and handed to a server again.
                    if burst % 3 == thread % 3 {
                        for stream in streams {
                            stream.synchronize().expect("synchronize");
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            });
        }
    });
    for stream in &streams {
        stream.synchronize().expect("synchronize");
    }
    assert_eq!(tally.runs(), STREAMS * THREADS * BURSTS * BURST);
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "functions of one stream ran on two threads at once"
    );
    let moved = servers
        .iter()
        .filter(|servers| servers.lock().unwrap().len() > 1)
        .count();
    suite::figure(&format!(
        "{moved} of {STREAMS} streams were served by more than one server thread"
    ));
    assert!(
        moved > 0,
        "no stream's lane moved between servers: the test did not test that"
    );
}

/// Launches on `first` and `second` a function each that waits (up to `patience`) for the other
/// to have started: whether each saw the other while it ran. Both only if they ran at the same
/// time; run one after the other, the first waits in vain and the second sees it.
fn meet_on(first: &Stream, second: &Stream, patience: Duration) -> [bool; 2] {
    let arrived = Arc::new((Mutex::new(0_usize), Condvar::new()));
    let met: [Arc<AtomicBool>; 2] = [Arc::default(), Arc::default()];
    for (stream, met) in [first, second].into_iter().zip(&met) {
        let (arrived, met) = (Arc::clone(&arrived), Arc::clone(met));
        host_launch(stream, move || {
            let (count, changed) = &*arrived;
            let mut count = count.lock().unwrap();
            *count += 1;
            changed.notify_all();
            let (count, _) = changed
                .wait_timeout_while(count, patience, |count| *count < 2)
                .unwrap();
            met.store(*count >= 2, Ordering::SeqCst);
        })
        .expect("launch");
    }
    first.synchronize().expect("synchronize");
    second.synchronize().expect("synchronize");
    met.map(|met| met.load(Ordering::SeqCst))
}

#[test]
fn functions_of_two_streams_run_at_the_same_time_on_two_servers() {
    // Alone in a process: with no other lane served, the two streams go to two servers.
    suite::alone_in_child!(functions_of_two_streams_run_at_the_same_time_on_two_servers);
    let context = context();
    let (first, second) = (polled_stream(&context), polled_stream(&context));
    // Fails after 10 s, instead of hanging, where the functions run one after the other.
    let met = meet_on(&first, &second, Duration::from_secs(10));
    assert_eq!(
        met,
        [true, true],
        "the functions of two streams did not run at the same time"
    );
}

#[test]
fn on_a_pool_of_one_the_functions_of_two_streams_run_one_after_the_other() {
    // Alone in a process: the pool's size is process-wide.
    suite::alone_in_child!(on_a_pool_of_one_the_functions_of_two_streams_run_one_after_the_other);
    set_polled_engine_threads(1).expect("a pool of one");
    assert_eq!(polled_engine_threads(), 1);
    let context = context();
    let [first, second] = [(); 2].map(|()| {
        Stream::new(&context, StreamFlags::NonBlocking)
            .expect("stream")
            .with_host_engine(HostEngine::Polled)
            .expect("a polled stream")
    });
    // One after the other, in either order: the one that runs second sees the first's arrival.
    let met = meet_on(&first, &second, Duration::from_millis(200));
    assert_ne!(
        met,
        [true, true],
        "the two streams' functions ran at the same time on a pool of one"
    );
    assert_eq!(metrics().polled_engine().threads, 1);
}

#[test]
fn a_size_set_after_the_engine_started_starts_the_threads_and_serves_the_next_lanes_on_them() {
    // Alone in a process: the pool's size is process-wide.
    suite::alone_in_child!(
        a_size_set_after_the_engine_started_starts_the_threads_and_serves_the_next_lanes_on_them
    );
    set_polled_engine_threads(1).expect("a pool of one");
    let context = context();
    let [first, second] = [(); 2].map(|()| {
        Stream::new(&context, StreamFlags::NonBlocking)
            .expect("stream")
            .with_host_engine(HostEngine::Polled)
            .expect("a polled stream")
    });
    assert_eq!(metrics().polled_engine().threads, 1);
    set_polled_engine_threads(3).expect("three servers");
    assert_eq!(
        (polled_engine_threads(), metrics().polled_engine().threads),
        (3, 3)
    );
    let met = meet_on(&first, &second, Duration::from_secs(10));
    assert_eq!(met, [true, true], "the functions ran one after the other");
    // Smaller again: the servers beyond it take no lane, park and stay.
    set_polled_engine_threads(1).expect("one server");
    wait_until("every server to let its lanes go and park", || {
        let counts = metrics().polled_engine();
        counts.serving == 0 && counts.parked
    });
    let met = meet_on(&first, &second, Duration::from_millis(200));
    assert_ne!(met, [true, true], "the pool did not shrink to one");
    assert_eq!(metrics().polled_engine().threads, 3);
}

#[test]
fn a_size_of_zero_or_above_the_most_is_refused() {
    for threads in [0, MAX_POLLED_ENGINE_THREADS + 1] {
        let refused = set_polled_engine_threads(threads).expect_err("refused");
        assert!(
            matches!(refused, Error::InvalidArgument { .. }),
            "{refused}"
        );
    }
    assert!((1..=MAX_POLLED_ENGINE_THREADS).contains(&polled_engine_threads()));
}

#[test]
fn every_server_of_the_pool_spins_while_its_function_is_pending_then_parks_using_no_cpu() {
    // Alone in a process: no other test keeps the engine busy.
    suite::alone_in_child!(
        every_server_of_the_pool_spins_while_its_function_is_pending_then_parks_using_no_cpu
    );
    let context = context();
    let streams: Vec<Stream> = (0..POOL).map(|_| polled_stream(&context)).collect();
    let gate = Gate::new(&context);
    let tally = Tally::new();
    for stream in &streams {
        gate.hold(stream);
        tally.launch_counted(stream, 1);
    }
    wait_until("every server to serve a lane", || {
        metrics().polled_engine().serving == POOL as u64
    });
    let before = suite::started_thread_cpu_time("cuda-host-poll");
    std::thread::sleep(Duration::from_millis(50));
    let pending = suite::started_thread_cpu_time("cuda-host-poll") - before;
    gate.open();
    for stream in &streams {
        stream.synchronize().expect("synchronize");
    }
    let served_by: HashSet<ThreadId> = tally.run_threads().into_iter().collect();
    assert_eq!(
        served_by.len(),
        POOL,
        "the pool's servers did not take one stream each"
    );
    wait_until("every server to park", || {
        let counts = metrics().polled_engine();
        counts.serving == 0 && counts.parked
    });
    assert_eq!(metrics().polled_engine().threads, POOL as u64);
    // Every server has run, so each is named and counted.
    let parked_at = suite::started_thread_cpu_time("cuda-host-poll");
    std::thread::sleep(Duration::from_millis(200));
    let parked = suite::started_thread_cpu_time("cuda-host-poll") - parked_at;
    suite::figure(&format!(
        "polled engine CPU time, {POOL} servers: {pending:?} over 50 ms with a function pending \
         on each; {parked:?} over 200 ms parked"
    ));
    assert!(
        pending > Duration::ZERO,
        "the servers did not look while functions were pending"
    );
    assert!(
        parked < Duration::from_millis(2),
        "{parked:?} of CPU while parked"
    );
}

suite::count_allocations_per_thread!();

#[test]
fn a_launch_that_hands_its_lane_to_any_server_of_the_pool_allocates_nothing() {
    // Alone in a process: the lane is let go and handed over again with no other lane served,
    // and a thread that reclaims would take this thread's freed launch slots.
    suite::alone_in_child!(
        a_launch_that_hands_its_lane_to_any_server_of_the_pool_allocates_nothing
    );
    let context = context();
    let stream = polled_stream(&context);
    let tally = Tally::new();
    // Warm: a launch slot exists, and the lane was handed over once.
    tally.launch_counted(&stream, 1);
    stream.synchronize().expect("synchronize");
    for handover in 0..2 * POOL {
        wait_until("the lane to be let go", || {
            cuda_host::reclaim();
            metrics().polled_engine().serving == 0
        });
        let probe = tally.probe();
        let (allocated, launched) =
            allocations::during(|| host_launch(&stream, move || probe.ran()));
        launched.expect("launch");
        assert_eq!(allocated, 0, "hand-over {handover} allocated");
        stream.synchronize().expect("synchronize");
    }
    let servers: HashSet<ThreadId> = tally.run_threads().into_iter().collect();
    assert_eq!(
        servers.len(),
        POOL,
        "the lane was not handed to every server: the test did not test that"
    );
}

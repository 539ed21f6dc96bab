//! The capabilities beyond the primitive across two devices: stream points and releases, timelines
//! from one device's stream to the other's, the polled engine serving both, and a host function
//! captured by other code on device 1 while device 0 is current. On the software driver each test
//! runs in a child with two devices (`CUSW_DEVICE_COUNT=2`); on a machine with one GPU they skip.

use cuda_host::sys::CUstreamCaptureMode;
use cuda_host::{
    Context, Stream, StreamFlags, graph::host_launch_replayable, host_launch, options::HostEngine,
    points::release_in_stream_order, points::stream_point, timeline::Timeline,
};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::Duration;
use suite::capture::Capture;
use suite::{Gate, Tally, test_driver, wait_until};

/// The primary contexts of devices 0 and 1, or `None` when the test ran in a child (the software
/// driver, told to have two devices) or skipped (one device).
fn two_devices(test: &str) -> Option<[Context; 2]> {
    if test_driver().is_software() && !suite::in_child_process() {
        // The software driver has one device unless told otherwise when it loads.
        suite::run_in_child(module_path!(), test, &[("CUSW_DEVICE_COUNT", "2")]);
        return None;
    }
    let driver = Arc::clone(&test_driver().driver);
    let count = cuda_host::Device::count(&driver).expect("device count");
    if count < 2 {
        suite::skip(
            test,
            &format!("needs two devices; this machine has {count}"),
        );
        return None;
    }
    let context = |ordinal| {
        cuda_host::Device::get(&driver, ordinal)
            .and_then(|device| device.primary_context())
            .expect("the device's primary context")
    };
    let contexts = [context(0), context(1)];
    assert_ne!(contexts[0].as_raw(), contexts[1].as_raw());
    Some(contexts)
}

fn new_stream(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking).expect("stream")
}

/// Polls `future` once with a waker that does nothing: whether it completed.
fn is_ready<F: Future + Unpin>(future: &mut F) -> bool {
    matches!(
        Pin::new(future).poll(&mut TaskContext::from_waker(Waker::noop())),
        Poll::Ready(_)
    )
}

#[test]
fn points_and_releases_on_both_devices_each_complete_after_their_own_streams_point() {
    let test = "points_and_releases_on_both_devices_each_complete_after_their_own_streams_point";
    let Some(contexts) = two_devices(test) else {
        return;
    };
    let streams = contexts.each_ref().map(new_stream);
    let gates = contexts.each_ref().map(Gate::new);
    let tallies = [Tally::new(), Tally::new()];
    let mut points = Vec::new();
    for ((stream, gate), tally) in streams.iter().zip(&gates).zip(&tallies) {
        gate.hold(stream);
        points.push(stream_point(stream).expect("a point"));
        release_in_stream_order(stream, tally.probe()).expect("a release");
    }
    let mut points = points.into_iter();
    let (mut on_0, mut on_1) = (
        points.next().expect("device 0's point"),
        points.next().expect("device 1's point"),
    );
    std::thread::sleep(Duration::from_millis(20));
    cuda_host::reclaim();
    assert!(
        !is_ready(&mut on_0) && !is_ready(&mut on_1),
        "a point passed early"
    );
    assert_eq!(tallies.each_ref().map(|tally| tally.drops()), [0, 0]);

    // Device 1's stream goes on; device 0's stays held.
    gates[1].open();
    suite::wait::block_on(&mut on_1).expect("device 1's point passed");
    tallies[1].reclaim_until_dropped(1, "device 1's released value");
    assert!(
        !is_ready(&mut on_0),
        "device 0's point passed with device 1's"
    );
    assert_eq!(
        tallies[0].drops(),
        0,
        "device 0's value dropped with device 1's"
    );

    gates[0].open();
    suite::wait::block_on(&mut on_0).expect("device 0's point passed");
    tallies[0].reclaim_until_dropped(1, "device 0's released value");
}

#[test]
fn a_timeline_carries_work_from_one_devices_stream_to_the_others_both_ways() {
    let test = "a_timeline_carries_work_from_one_devices_stream_to_the_others_both_ways";
    let Some(contexts) = two_devices(test) else {
        return;
    };
    let streams = contexts.each_ref().map(new_stream);
    // Made on each device: device 0's signals device 1's stream, and device 1's the other way.
    let (host, forth, back) = (
        Timeline::new(&contexts[0], 0).expect("timeline"),
        Timeline::new(&contexts[0], 0).expect("timeline"),
        Timeline::new(&contexts[1], 0).expect("timeline"),
    );
    let words = contexts
        .each_ref()
        .map(|context| suite::MappedWords::new(context, 1));
    const ROUNDS: u32 = 100;
    for round in 1..=ROUNDS {
        let value = u64::from(round);
        // Device 0 waits for the host, writes, signals device 1, which writes and signals back.
        host.enqueue_wait(&streams[0], value)
            .expect("wait for the host");
        words[0].write_in_stream(&streams[0], 0, round);
        forth
            .enqueue_signal(&streams[0], value)
            .expect("signal device 1");
        forth
            .enqueue_wait(&streams[1], value)
            .expect("device 1 waits for device 0");
        words[1].write_in_stream(&streams[1], 0, round);
        back.enqueue_signal(&streams[1], value)
            .expect("signal device 0");
        back.enqueue_wait(&streams[0], value)
            .expect("device 0 waits for device 1");
    }
    for round in 1..=ROUNDS {
        // Nothing of this round ran before the host's signal.
        assert_eq!(words[0].get(0), round - 1, "device 0 ran ahead of the host");
        assert_eq!(words[1].get(0), round - 1, "device 1 ran ahead of device 0");
        host.signal(u64::from(round)).expect("signal");
        assert!(
            back.wait(u64::from(round), suite::TIMEOUT).expect("wait"),
            "round {round} never came back"
        );
        assert_eq!(words.each_ref().map(|words| words.get(0)), [round, round]);
    }
    for stream in &streams {
        stream.synchronize().expect("synchronize");
    }
}

#[test]
fn host_signals_release_streams_on_both_devices() {
    let test = "host_signals_release_streams_on_both_devices";
    let Some(contexts) = two_devices(test) else {
        return;
    };
    let streams = contexts.each_ref().map(new_stream);
    let timeline = Timeline::new(&contexts[1], 0).expect("timeline");
    let words = contexts
        .each_ref()
        .map(|context| suite::MappedWords::new(context, 1));
    for (stream, words) in streams.iter().zip(&words) {
        timeline.enqueue_wait(stream, 1).expect("wait");
        words.write_in_stream(stream, 0, 1);
    }
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        words.each_ref().map(|words| words.get(0)),
        [0, 0],
        "went on early"
    );
    timeline.signal(1).expect("signal");
    for stream in &streams {
        stream.synchronize().expect("synchronize");
    }
    assert_eq!(words.each_ref().map(|words| words.get(0)), [1, 1]);
}

#[test]
fn the_polled_engine_serves_streams_of_both_devices_at_once_in_order_with_nothing_lost() {
    let test =
        "the_polled_engine_serves_streams_of_both_devices_at_once_in_order_with_nothing_lost";
    let Some(contexts) = two_devices(test) else {
        return;
    };
    const EACH: usize = 2_000;
    let streams: Vec<Stream> = contexts
        .iter()
        .flat_map(|context| [new_stream(context), new_stream(context)])
        .map(|stream| {
            stream
                .with_host_engine(HostEngine::Polled)
                .expect("the polled engine")
        })
        .collect();
    let logs: Vec<Arc<Mutex<Vec<usize>>>> = streams.iter().map(|_| Arc::default()).collect();
    let tally = Tally::new();
    std::thread::scope(|scope| {
        for (stream, log) in streams.iter().zip(&logs) {
            let tally = &tally;
            scope.spawn(move || {
                for launch in 0..EACH {
                    let (probe, log) = (tally.probe(), Arc::clone(log));
                    host_launch(stream, move || {
                        log.lock().unwrap().push(launch);
                        probe.ran();
                    })
                    .expect("launch");
                }
                stream.synchronize().expect("synchronize");
            });
        }
    });
    let expected: Vec<usize> = (0..EACH).collect();
    for (index, log) in logs.iter().enumerate() {
        assert_eq!(*log.lock().unwrap(), expected, "stream {index}");
    }
    assert_eq!(tally.runs(), streams.len() * EACH);
    wait_until("every record to be dropped", || {
        cuda_host::reclaim();
        tally.drops() == streams.len() * EACH
    });
}

#[test]
fn a_host_function_other_code_captures_on_device_1_while_device_0_is_current_is_owned_by_its_graph()
{
    let test = "a_host_function_other_code_captures_on_device_1_while_device_0_is_current_is_owned_by_its_graph";
    let Some(contexts) = two_devices(test) else {
        return;
    };
    let _alone = suite::capture_lock();
    let stream = new_stream(&contexts[1]);
    // Other code's capture of device 1's stream; then device 0 becomes current.
    contexts[1].bind_to_thread().expect("bind device 1");
    let capture = Capture::begin(
        stream.as_raw(),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    );
    contexts[0].bind_to_thread().expect("bind device 0");
    let tally = Tally::new();
    let probe = tally.probe();
    // SAFETY: this thread ends the capture, after the call.
    unsafe { host_launch_replayable(&stream, move || probe.ran()) }.expect("added");
    contexts[1].bind_to_thread().expect("bind device 1");
    let graph = capture.end().expect("the capture is still valid");
    let executable = graph.instantiate();
    executable.run(&stream, 10);
    assert_eq!(tally.runs(), 10);
    drop((graph, executable));
    tally.reclaim_until_dropped(1, "the callable to be dropped after the graph");
    assert_eq!(tally.drop_threads(), [std::thread::current().id()]);
}

//! cuda-host's `tracing` spans and events (feature `tracing`), seen by a subscriber of the
//! test's: the spans of host functions on both engines and of graph host nodes, entered on the
//! thread that runs them, with their name, queue delay and run time; the events of stream
//! points. And the subscriber as user code on cuda-host's threads: one that panics everywhere,
//! and one that calls cuda-host back. Each test runs alone in a child process, which installs
//! the subscriber as its global default.

use cuda_host::{
    Context, Error, Stream, StreamFlags, graph::CaptureMode, graph::GraphBuilder, host_launch,
    metrics, options::HostEngine, options::named, points::release_in_stream_order,
    points::stream_point,
};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Waker};
use std::thread::ThreadId;
use std::time::Duration;
use suite::{Gate, context, wait_until};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// A span or event as the subscriber saw it.
#[derive(Debug, Clone, Default)]
struct Seen {
    name: &'static str,
    fields: HashMap<&'static str, String>,
    /// The threads it was entered on.
    entered_on: Vec<ThreadId>,
    /// The span entered on this thread when it was entered, if any.
    inside: Option<&'static str>,
}

impl Visit for Seen {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.fields.insert(field.name(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.fields.insert(field.name(), value.to_owned());
    }
}

/// What the subscriber does besides recording.
static PANICKING: AtomicBool = AtomicBool::new(false);
/// Panics only once a span exists: in `enter`, `record`, `exit`, `try_close` and `event`.
static PANICKING_IN_SPANS: AtomicBool = AtomicBool::new(false);
static CALLING_BACK: AtomicBool = AtomicBool::new(false);
/// Its panics and its calls back.
static PANICS: AtomicUsize = AtomicUsize::new(0);
static CALLS_BACK: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// The stream its calls back launch on.
static CALL_BACK_STREAM: Mutex<Option<Stream>> = Mutex::new(None);

#[derive(Default)]
struct Recorder {
    spans: Mutex<HashMap<u64, Seen>>,
    events: Mutex<Vec<Seen>>,
    next_id: AtomicU64,
}

thread_local! {
    /// The spans entered on this thread, innermost last.
    static ENTERED: std::cell::RefCell<Vec<&'static str>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Recorder {
    /// Panics or calls back, as the test set it.
    fn adversity(&self, at: &str) {
        let in_spans = !matches!(at, "enabled" | "new_span");
        if PANICKING.load(Ordering::SeqCst)
            || (in_spans && PANICKING_IN_SPANS.load(Ordering::SeqCst))
        {
            PANICS.fetch_add(1, Ordering::SeqCst);
            panic!("deliberate panic of a subscriber, in {at}");
        }
        if CALLING_BACK.load(Ordering::SeqCst) {
            let launched = match CALL_BACK_STREAM.lock().unwrap().as_ref() {
                Some(stream) => host_launch(stream, || {}),
                None => Ok(()),
            };
            let _ = metrics().stream_points();
            cuda_host::reclaim();
            let answer = match launched {
                Ok(()) => "launched".to_owned(),
                Err(Error::InHostFunction { .. }) => "refused inside a host function".to_owned(),
                Err(other) => format!("failed: {other}"),
            };
            CALLS_BACK.lock().unwrap().push(format!("{at}: {answer}"));
        }
    }

    fn spans_named(&self, name: &str) -> Vec<Seen> {
        self.spans
            .lock()
            .unwrap()
            .values()
            .filter(|seen| seen.name == name)
            .cloned()
            .collect()
    }

    fn events_named(&self, message: &str) -> Vec<Seen> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|seen| {
                seen.fields
                    .get("message")
                    .is_some_and(|text| text == message)
            })
            .cloned()
            .collect()
    }
}

impl Subscriber for &'static Recorder {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        if metadata.target().starts_with("cuda_host") {
            // Asked on the threads that run host functions too, while its interest varies.
            self.adversity("enabled");
            true
        } else {
            false
        }
    }

    fn register_callsite(
        &self,
        _metadata: &'static Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        // Asked again for every span and event: `enabled` is called each time.
        tracing::subscriber::Interest::sometimes()
    }

    fn new_span(&self, attributes: &Attributes<'_>) -> Id {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst) + 1;
        let mut seen = Seen {
            name: attributes.metadata().name(),
            ..Seen::default()
        };
        attributes.record(&mut seen);
        self.spans.lock().unwrap().insert(id, seen);
        self.adversity("new_span");
        Id::from_u64(id)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        if let Some(seen) = self.spans.lock().unwrap().get_mut(&span.into_u64()) {
            values.record(seen);
        }
        self.adversity("record");
    }

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut seen = Seen {
            name: event.metadata().name(),
            ..Seen::default()
        };
        event.record(&mut seen);
        self.events.lock().unwrap().push(seen);
        self.adversity("event");
    }

    fn enter(&self, span: &Id) {
        let inside = ENTERED.with(|entered| entered.borrow().last().copied());
        let name = {
            let mut spans = self.spans.lock().unwrap();
            let seen = spans.get_mut(&span.into_u64()).expect("a span of ours");
            seen.entered_on.push(std::thread::current().id());
            seen.inside = seen.inside.or(inside);
            seen.name
        };
        ENTERED.with(|entered| entered.borrow_mut().push(name));
        self.adversity("enter");
    }

    fn exit(&self, _span: &Id) {
        ENTERED.with(|entered| entered.borrow_mut().pop());
        self.adversity("exit");
    }

    fn try_close(&self, _span: Id) -> bool {
        self.adversity("try_close");
        false
    }
}

fn recorder() -> &'static Recorder {
    static RECORDER: std::sync::OnceLock<&'static Recorder> = std::sync::OnceLock::new();
    RECORDER.get_or_init(|| {
        let recorder: &'static Recorder = Box::leak(Box::default());
        tracing::subscriber::set_global_default(recorder).expect("the only subscriber");
        recorder
    })
}

fn new_stream(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking).expect("stream")
}

fn polled_stream(context: &Context) -> Stream {
    new_stream(context)
        .with_host_engine(HostEngine::Polled)
        .expect("a polled stream")
}

fn block_on_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    std::pin::Pin::new(future).poll(&mut TaskContext::from_waker(Waker::noop()))
}

/// Runs host functions on both engines, a graph's node twice, a release and a future that the
/// watcher wakes; returns how many of the functions ran.
fn drive_every_observed_place(context: &Context) -> usize {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = |runs: &Arc<AtomicUsize>| {
        let runs = Arc::clone(runs);
        move || {
            runs.fetch_add(1, Ordering::SeqCst);
        }
    };
    let stream = new_stream(context);
    let slow = counted(&runs);
    host_launch(
        &stream,
        named("decode batch", move || {
            std::thread::sleep(Duration::from_millis(2));
            slow();
        }),
    )
    .expect("launch");
    host_launch(&stream, counted(&runs)).expect("launch");
    let polled = polled_stream(context);
    host_launch(&polled, named("polled batch", counted(&runs))).expect("launch");
    let builder = GraphBuilder::begin(&stream, CaptureMode::Global).expect("capture begins");
    let node = counted(&runs);
    host_launch(&builder, named("graph step", node)).expect("a node");
    let executable = builder
        .end()
        .expect("capture ends")
        .instantiate()
        .expect("instantiates");
    for _ in 0..2 {
        executable.launch(&stream).expect("launch");
    }
    let gate = Gate::new(context);
    gate.hold(&stream);
    release_in_stream_order(&stream, vec![0u8; 16]).expect("released");
    let mut point = Box::pin(stream_point(&stream).expect("a point"));
    assert!(block_on_once(&mut point).is_pending());
    wait_until("the future to wait with the watcher", || {
        metrics().stream_points().waiting == 1
    });
    gate.open();
    suite::wait::block_on(point).expect("passed");
    stream.synchronize().expect("synchronize");
    polled.synchronize().expect("synchronize");
    runs.load(Ordering::SeqCst)
}

#[test]
fn host_functions_graph_nodes_and_points_are_spans_and_events_with_their_fields() {
    suite::alone_in_child!(
        host_functions_graph_nodes_and_points_are_spans_and_events_with_their_fields
    );
    let recorder = recorder();
    let context = context();
    assert_eq!(drive_every_observed_place(&context), 5);
    let here = std::thread::current().id();

    let functions = recorder.spans_named("host_function");
    assert_eq!(functions.len(), 3, "{functions:#?}");
    let decode = functions
        .iter()
        .find(|seen| seen.fields["name"] == "decode batch")
        .expect("the named function's span");
    let run_ns: u64 = decode.fields["run_ns"].parse().expect("a run time");
    assert!(run_ns >= 2_000_000, "ran 2 ms: {decode:?}");
    let delay: u64 = decode.fields["queue_delay_ns"]
        .trim_start_matches("Some(")
        .trim_end_matches(')')
        .parse()
        .expect("a queue delay");
    assert!(delay < suite::TIMEOUT.as_nanos() as u64, "{decode:?}");
    assert_eq!(decode.entered_on.len(), 1, "entered once: {decode:?}");
    assert_ne!(decode.entered_on[0], here, "entered on the running thread");
    let unnamed = functions
        .iter()
        .find(|seen| seen.fields["name"].contains("{{closure}}"))
        .expect("the unnamed function's span, named after its closure");
    assert!(
        unnamed.fields["name"].starts_with("tracing_spans::"),
        "{unnamed:?}"
    );
    let polled = functions
        .iter()
        .find(|seen| seen.fields["name"] == "polled batch")
        .expect("the polled function's span");
    assert_eq!(
        polled.inside,
        Some("polled_engine_call"),
        "inside the engine's call: {polled:?}"
    );
    assert!(!recorder.spans_named("polled_engine_call").is_empty());

    let nodes = recorder.spans_named("graph_host_node");
    assert_eq!(nodes.len(), 2, "one per launch: {nodes:#?}");
    assert!(nodes.iter().all(|node| node.fields["name"] == "graph step"
        && node.fields.contains_key("run_ns")
        && !node.fields.contains_key("queue_delay_ns")));

    let marked = recorder.events_named("point marked");
    let kinds: Vec<(&str, &str)> = marked
        .iter()
        .map(|seen| (seen.fields["points"].as_str(), seen.fields["name"].as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("release", "alloc::vec::Vec<u8>"),
            ("future", "stream_point")
        ]
    );
    let passed: Vec<(String, String)> = recorder
        .events_named("points passed")
        .iter()
        .map(|seen| (seen.fields["points"].clone(), seen.fields["count"].clone()))
        .collect();
    assert!(
        passed.contains(&("future".into(), "1".into())),
        "{passed:?}"
    );
    assert!(
        passed.contains(&("release".into(), "1".into())),
        "{passed:?}"
    );
}

#[test]
fn a_subscriber_that_panics_everywhere_is_contained_and_every_host_function_runs() {
    suite::alone_in_child!(
        a_subscriber_that_panics_everywhere_is_contained_and_every_host_function_runs
    );
    let _ = recorder();
    let context = context();
    PANICKING.store(true, Ordering::SeqCst);
    assert_eq!(drive_every_observed_place(&context), 5);
    PANICKING.store(false, Ordering::SeqCst);
    assert!(
        PANICS.load(Ordering::SeqCst) >= 8,
        "the subscriber was reached on every place"
    );
    // The streams go on.
    let stream = new_stream(&context);
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    host_launch(&stream, move || flag.store(true, Ordering::SeqCst)).expect("launch");
    stream.synchronize().expect("synchronize");
    assert!(ran.load(Ordering::SeqCst));
}

#[test]
fn a_subscriber_that_panics_in_every_call_on_a_span_is_contained_and_every_function_runs() {
    // Each panic unwinds through the span it is about: caught while another call on the span
    // runs in the unwinding (a guard's drop), the second panic would abort the process.
    suite::alone_in_child!(
        a_subscriber_that_panics_in_every_call_on_a_span_is_contained_and_every_function_runs
    );
    let recorder = recorder();
    let context = context();
    PANICKING_IN_SPANS.store(true, Ordering::SeqCst);
    assert_eq!(drive_every_observed_place(&context), 5);
    PANICKING_IN_SPANS.store(false, Ordering::SeqCst);
    assert!(
        PANICS.load(Ordering::SeqCst) >= 8,
        "the subscriber was reached on every span and event"
    );
    assert!(!recorder.spans_named("host_function").is_empty());
    let stream = new_stream(&context);
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    host_launch(&stream, move || flag.store(true, Ordering::SeqCst)).expect("launch");
    stream.synchronize().expect("synchronize");
    assert!(ran.load(Ordering::SeqCst));
}

#[test]
fn a_subscriber_that_calls_cuda_host_back_is_refused_in_host_functions_and_deadlocks_nowhere() {
    suite::alone_in_child!(
        a_subscriber_that_calls_cuda_host_back_is_refused_in_host_functions_and_deadlocks_nowhere
    );
    let _ = recorder();
    let context = context();
    *CALL_BACK_STREAM.lock().unwrap() = Some(new_stream(&context));
    CALLING_BACK.store(true, Ordering::SeqCst);
    assert_eq!(drive_every_observed_place(&context), 5);
    CALLING_BACK.store(false, Ordering::SeqCst);
    let calls = CALLS_BACK.lock().unwrap().clone();
    assert!(
        calls.contains(&"new_span: refused inside a host function".to_owned()),
        "{calls:?}"
    );
    assert!(calls.contains(&"event: launched".to_owned()), "{calls:?}");
    let stream = CALL_BACK_STREAM.lock().unwrap().take().expect("the stream");
    stream
        .synchronize()
        .expect("the launches of the calls back ran");
}

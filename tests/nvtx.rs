//! cuda-host's NVTX ranges and marks (feature `nvtx`), seen by an injection library of the
//! suite's (`tests/support/nvtx_recorder.c`) that attaches as a profiler does: named by
//! `NVTX_INJECTION64_PATH`, initialized through NVTX's protocol, recording each call. Each test
//! runs alone in a child process with the variable set (cuda-host opens the library once per
//! process, at its first launch), and reads the recorder's lines through the same library. The
//! recorder is the one `NVTX_RECORDER_LIBRARY` names at run time (the GPU bundle's), else the one
//! this build made.

use cuda_host::{
    Error, Stream, StreamFlags, UserData, graph::CaptureMode, graph::GraphBuilder, host_launch,
    host_launch_raw, metrics, options::HostEngine, options::named, points::release_in_stream_order,
    points::stream_point,
};
use std::ffi::{CStr, c_char};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Waker};
use suite::{Gate, context, wait_until};

/// The recorder's path.
fn recorder_path() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        std::env::var("NVTX_RECORDER_LIBRARY")
            .unwrap_or_else(|_| env!("NVTX_RECORDER_LIBRARY").to_owned())
    })
}

/// The recorder as this process loaded it (the library cuda-host opened, when it did).
fn recorder() -> &'static libloading::Library {
    static LIBRARY: std::sync::OnceLock<libloading::Library> = std::sync::OnceLock::new();
    // SAFETY: the suite's recorder, whose initializers do nothing.
    LIBRARY
        .get_or_init(|| unsafe { libloading::Library::new(recorder_path()) }.expect("the recorder"))
}

/// The lines the recorder has recorded.
fn events() -> Vec<String> {
    type Events = unsafe extern "C" fn(*mut c_char, usize) -> usize;
    // SAFETY: the recorder's function of this type.
    let read = unsafe { recorder().get::<Events>(b"nvtx_recorder_events\0") }.expect("exported");
    let mut buffer = vec![0u8; 1 << 20];
    // SAFETY: a buffer of that size.
    unsafe { read(buffer.as_mut_ptr().cast(), buffer.len()) };
    let text = CStr::from_bytes_until_nul(&buffer).expect("NUL-terminated");
    text.to_str()
        .expect("ASCII")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The lines of ranges and marks (without the thread numbers), in order.
fn ranges_and_marks() -> Vec<String> {
    events()
        .into_iter()
        .filter_map(|line| {
            let mut words = line.splitn(3, ' ');
            let kind = words.next()?;
            let _thread = words.next();
            match kind {
                "push" | "mark" => Some(format!("{kind} {}", words.next().unwrap_or(""))),
                "pop" => Some("pop".to_owned()),
                _ => None,
            }
        })
        .collect()
}

fn clear() {
    // SAFETY: the recorder's function of this type.
    let clear = unsafe { recorder().get::<unsafe extern "C" fn()>(b"nvtx_recorder_clear\0") }
        .expect("exported");
    // SAFETY: takes nothing.
    unsafe { clear() };
}

/// Runs the calling test in a child process with the recorder attached.
macro_rules! with_recorder {
    ($test:ident) => {
        suite::alone_in_child!($test, &[("NVTX_INJECTION64_PATH", recorder_path())]);
    };
}

fn new_stream() -> (cuda_host::Context, Stream) {
    let context = context();
    let stream = Stream::new(&context, StreamFlags::NonBlocking).expect("stream");
    (context, stream)
}

fn a_named_and_an_unnamed_function(stream: &Stream) {
    host_launch(stream, named("decode batch", || {})).expect("launch");
    host_launch(stream, || {}).expect("launch");
    stream.synchronize().expect("synchronize");
}

#[test]
fn driver_host_functions_are_ranges_named_by_the_caller_or_the_closure_type_in_order() {
    with_recorder!(
        driver_host_functions_are_ranges_named_by_the_caller_or_the_closure_type_in_order
    );
    let (_context, stream) = new_stream();
    a_named_and_an_unnamed_function(&stream);
    let events = events();
    assert!(
        events.iter().any(|line| line == "init")
            && events.iter().any(|line| line == "domain cuda-host")
            && events.iter().any(|line| line == "category 1 host function"),
        "attached with cuda-host's domain: {events:?}"
    );
    let ranges = ranges_and_marks();
    let closure = concat!(
        module_path!(),
        "::a_named_and_an_unnamed_function::{{closure}}"
    );
    assert_eq!(
        ranges,
        [
            "push 1 decode batch".to_owned(),
            "pop".to_owned(),
            format!("push 1 {closure}"),
            "pop".to_owned()
        ],
        "{events:?}"
    );
    // Pushed and popped on the one thread that ran them.
    let threads: Vec<&str> = events
        .iter()
        .filter(|line| line.starts_with("push") || line.starts_with("pop"))
        .map(|line| line.split(' ').nth(1).unwrap())
        .collect();
    assert!(
        threads.iter().all(|thread| *thread == threads[0]),
        "{events:?}"
    );
}

#[test]
fn polled_engine_host_functions_are_named_ranges_inside_the_engines_call() {
    with_recorder!(polled_engine_host_functions_are_named_ranges_inside_the_engines_call);
    let (_context, stream) = new_stream();
    let stream = stream
        .with_host_engine(HostEngine::Polled)
        .expect("a polled stream");
    host_launch(&stream, named("decode batch", || {})).expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(
        ranges_and_marks(),
        [
            "push 3 polled engine call",
            "push 1 decode batch",
            "pop",
            "pop"
        ],
        "{:?}",
        events()
    );
}

unsafe extern "C" fn raw_function(_data: *mut std::ffi::c_void) {}

#[test]
fn a_raw_function_the_polled_engine_serves_is_a_range_from_the_first_launch() {
    // The process's only launches are raw ones: they attach the profiler as a closure's would.
    with_recorder!(a_raw_function_the_polled_engine_serves_is_a_range_from_the_first_launch);
    let (_context, stream) = new_stream();
    let stream = stream
        .with_host_engine(HostEngine::Polled)
        .expect("a polled stream");
    for _ in 0..2 {
        // SAFETY: the function does nothing with its null pointer.
        unsafe { host_launch_raw(&stream, raw_function, UserData::None) }.expect("launch");
    }
    stream.synchronize().expect("synchronize");
    assert_eq!(
        ranges_and_marks(),
        [
            "push 3 polled engine call",
            "pop",
            "push 3 polled engine call",
            "pop"
        ],
        "{:?}",
        events()
    );
}

#[test]
fn a_graph_host_node_is_a_range_on_every_launch() {
    with_recorder!(a_graph_host_node_is_a_range_on_every_launch);
    let (_context, stream) = new_stream();
    let builder = GraphBuilder::begin(&stream, CaptureMode::Global).expect("capture begins");
    host_launch(&builder, named("graph step", || {})).expect("a node");
    let executable = builder
        .end()
        .expect("capture ends")
        .instantiate()
        .expect("instantiates");
    clear();
    for _ in 0..2 {
        executable.launch(&stream).expect("launch");
    }
    stream.synchronize().expect("synchronize");
    assert_eq!(
        ranges_and_marks(),
        ["push 2 graph step", "pop", "push 2 graph step", "pop"],
        "{:?}",
        events()
    );
}

#[test]
fn points_are_marked_when_marked_and_when_seen_passed() {
    with_recorder!(points_are_marked_when_marked_and_when_seen_passed);
    let (context, stream) = new_stream();
    let gate = Gate::new(&context);
    gate.hold(&stream);
    release_in_stream_order(&stream, vec![0u8; 16]).expect("released");
    let point = stream_point(&stream).expect("a point");
    let mut point = Box::pin(point);
    // Waits with the watcher, behind the gate.
    assert!(block_on_once(&mut point).is_pending());
    wait_until("the future to wait with the watcher", || {
        metrics().stream_points().waiting == 1
    });
    gate.open();
    wait_until("the watcher to mark the point passed", || {
        ranges_and_marks()
            .iter()
            .any(|line| line.ends_with("stream points passed"))
    });
    suite::wait::block_on(point).expect("passed");
    stream.synchronize().expect("synchronize");
    let marks = ranges_and_marks();
    let expected = [
        "mark 4 1 alloc::vec::Vec<u8>",
        "mark 5 1 stream_point",
        "mark 5 1 stream points passed",
        "mark 4 1 released values passed",
    ];
    // The stream id is the payload of a point's mark: read it from the first.
    let mut stream_id = 0;
    // SAFETY: a live stream; a valid out-pointer.
    suite::ok("cuStreamGetId", unsafe {
        suite::test_driver()
            .driver
            .cuStreamGetId(stream.as_raw(), &mut stream_id)
    });
    let expected: Vec<String> = expected
        .iter()
        .map(|line| line.replace(" 1 alloc", &format!(" {stream_id} alloc")))
        .map(|line| line.replace(" 1 stream_point", &format!(" {stream_id} stream_point")))
        .collect();
    assert_eq!(marks, expected, "{:?}", events());
}

fn block_on_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    let waker = Waker::noop();
    std::pin::Pin::new(future).poll(&mut TaskContext::from_waker(waker))
}

/// What the hook saw its cuda-host calls answer.
static HOOK_CALLS: Mutex<Vec<String>> = Mutex::new(Vec::new());
static HOOK_RUNS: AtomicUsize = AtomicUsize::new(0);
/// A stream the hook launches on.
static HOOK_STREAM: Mutex<Option<Stream>> = Mutex::new(None);

/// A profiler calling the application back on the thread it was called on: it launches on a
/// stream, asks for counts and reclaims.
extern "C" fn calling_hook(event: *const c_char) {
    // SAFETY: the recorder passes a NUL-terminated name.
    let event = unsafe { CStr::from_ptr(event) }
        .to_string_lossy()
        .into_owned();
    HOOK_RUNS.fetch_add(1, Ordering::SeqCst);
    let launched = match HOOK_STREAM.lock().unwrap().as_ref() {
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
    HOOK_CALLS
        .lock()
        .unwrap()
        .push(format!("{event}: {answer}"));
}

#[test]
fn a_profiler_that_calls_cuda_host_back_is_refused_on_the_driver_thread_and_deadlocks_nowhere() {
    with_recorder!(
        a_profiler_that_calls_cuda_host_back_is_refused_on_the_driver_thread_and_deadlocks_nowhere
    );
    let (_context, stream) = new_stream();
    let other = Stream::new(&context(), StreamFlags::NonBlocking).expect("stream");
    // Attached by this first launch, before the hook is in.
    host_launch(&stream, || {}).expect("launch");
    stream.synchronize().expect("synchronize");
    *HOOK_STREAM.lock().unwrap() = Some(other);
    type SetHook = unsafe extern "C" fn(Option<extern "C" fn(*const c_char)>);
    // SAFETY: the recorder's function of this type.
    let set_hook =
        unsafe { recorder().get::<SetHook>(b"nvtx_recorder_set_hook\0") }.expect("exported");
    // SAFETY: a hook callable from any thread.
    unsafe { set_hook(Some(calling_hook)) };
    host_launch(&stream, named("hooked", || {})).expect("launch");
    stream.synchronize().expect("synchronize");
    // On this thread (a point marked): the hook's own launch goes through, observed by nothing.
    release_in_stream_order(&stream, 5u32).expect("released");
    stream.synchronize().expect("synchronize");
    // SAFETY: as above.
    unsafe { set_hook(None) };
    let calls = HOOK_CALLS.lock().unwrap().clone();
    assert!(
        calls.contains(&"push: refused inside a host function".to_owned()),
        "{calls:?}"
    );
    assert!(calls.contains(&"mark: launched".to_owned()), "{calls:?}");
    // Taken out of the lock first: a host function of that stream still finds the hook (one that
    // read it before it was taken away), which locks the same mutex.
    let other = HOOK_STREAM.lock().unwrap().take();
    if let Some(other) = other {
        other.synchronize().expect("the hook's launches ran");
    }
    assert!(HOOK_RUNS.load(Ordering::SeqCst) >= 2);
}

#[test]
fn without_the_variable_nothing_is_attached_and_host_functions_run() {
    suite::alone_in_child!(without_the_variable_nothing_is_attached_and_host_functions_run);
    assert!(std::env::var_os("NVTX_INJECTION64_PATH").is_none());
    let (_context, stream) = new_stream();
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&ran);
    host_launch(
        &stream,
        named("unobserved", move || {
            counter.fetch_add(1, Ordering::SeqCst);
        }),
    )
    .expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert!(events().is_empty(), "{:?}", events());
}

#[test]
fn a_variable_naming_no_library_attaches_nothing_and_host_functions_run() {
    suite::alone_in_child!(
        a_variable_naming_no_library_attaches_nothing_and_host_functions_run,
        &[("NVTX_INJECTION64_PATH", "/nonexistent/libnvtx-injection.so")]
    );
    let (_context, stream) = new_stream();
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&ran);
    host_launch(&stream, move || {
        counter.fetch_add(1, Ordering::SeqCst);
    })
    .expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert!(events().is_empty(), "{:?}", events());
}

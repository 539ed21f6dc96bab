//! A logger that calls cuda-host back while a launch, a capture, an executable's launch or the
//! polled engine's table of lanes holds a window or a lock its call back needs: every log call is
//! made once they are let go, also in a thread-local's `Drop` as the thread exits. Each test names
//! a behaviour that holds. Every wait is bounded; a test that finds cuda-host wedged leaves the
//! wedged thread behind and fails.

use cuda_host::{
    Context, Stream, StreamFlags, graph::CaptureMode, graph::GraphBuilder, graph::GraphExec,
    host_launch,
};
use cuda_host_sys::CUresult;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;
use suite::wait::returns_within;
use suite::{Gate, calling_back_logger, context};

fn new_stream(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking).expect("stream")
}

/// A host function launched on the legacy stream holds the special streams' launch group (its
/// `EnqueueWindow`) until the driver answered. When the driver answers a sticky error, the
/// context's failure is noted, which abandons its pending host functions and logs their count:
/// were that logged while the window is held, a logger that begins a capture through cuda-host
/// (which waits for the special streams' launches however long) would wait for its own thread.
#[test]
fn a_logger_called_by_a_failed_launch_on_the_legacy_stream_may_begin_a_capture() {
    let test = "a_logger_called_by_a_failed_launch_on_the_legacy_stream_may_begin_a_capture";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "injected failures are a control of the software driver",
        );
    };
    suite::alone_in_child!(
        a_logger_called_by_a_failed_launch_on_the_legacy_stream_may_begin_a_capture
    );
    calling_back_logger::install();
    let context = context();
    let first = new_stream(&context);
    let third = Arc::new(new_stream(&context));
    let gate = Gate::new(&context);
    gate.hold(&first);
    // A host function pending behind the gate: the failure abandons it, and logs that.
    host_launch(&first, || {}).expect("launched");
    calling_back_logger::on_next_record_capture(&third);
    let returned = returns_within(Duration::from_secs(5), {
        let context = context.clone();
        move || {
            let legacy = Stream::legacy(&context);
            controls.fail_next_calls(c"cuLaunchHostFunc", 1, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
            let launched = host_launch(&legacy, || {});
            assert!(launched.is_err(), "the launch was refused");
        }
    })
    .is_some();
    gate.open();
    assert!(
        returned,
        "the failed launch on the legacy stream never returned: the failure it noted logged \
         while its window held the special streams' launch group, and the capture the logger \
         began waits for that group (called back: {:?})",
        calling_back_logger::outcome()
    );
}

/// A builder capture keeps launches of its stream and of the special streams out
/// ("beginning") while it waits for the launches in flight there; past `LAUNCH_WAIT` it logs that
/// the driver holds one. Were that logged while they are kept out, a logger that launches a host
/// function on the legacy stream would wait for its own thread's capture to begin.
#[test]
fn a_logger_called_while_a_capture_waits_for_a_held_launch_may_launch_on_the_legacy_stream() {
    let test =
        "a_logger_called_while_a_capture_waits_for_a_held_launch_may_launch_on_the_legacy_stream";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "delayed calls are a control of the software driver");
    };
    suite::alone_in_child!(
        a_logger_called_while_a_capture_waits_for_a_held_launch_may_launch_on_the_legacy_stream
    );
    calling_back_logger::install();
    let context = context();
    let stream = Arc::new(new_stream(&context));
    // Another thread's launch on the stream, held by the driver past the capture's bounded wait.
    controls.delay_next_calls(c"cuLaunchHostFunc", 1, Duration::from_millis(500));
    let launcher = std::thread::spawn({
        let stream = Arc::clone(&stream);
        move || {
            let _ = host_launch(&*stream, || {});
        }
    });
    std::thread::sleep(Duration::from_millis(100));
    calling_back_logger::on_next_record({
        let context = context.clone();
        move || {
            let legacy = Stream::legacy(&context);
            host_launch(&legacy, || {}).expect("launched on the legacy stream");
        }
    });
    let returned = returns_within(Duration::from_secs(5), {
        let stream = Arc::clone(&stream);
        move || {
            if let Ok(builder) = GraphBuilder::begin(&stream, CaptureMode::Relaxed) {
                drop(builder.end());
            }
        }
    })
    .is_some();
    assert!(
        returned,
        "the capture never began: it logged that the driver holds a launch of its group while \
         it kept the special streams' launches out, and the logger's launch on the legacy stream \
         waits for them to be let in (called back: {:?})",
        calling_back_logger::outcome()
    );
    let _ = launcher.join();
}

thread_local! {
    /// The executable and stream a logger's call back launches again, on the thread that set them.
    static RELAUNCH: std::cell::RefCell<Option<(std::rc::Rc<cuda_host::graph::GraphExec>, Arc<Stream>)>> =
        const { std::cell::RefCell::new(None) };
}

/// A launch of an executable with callables of its own records a fence after it, under the
/// executable's lock of its callables; when the record fails, it warns. Were that warning made
/// under the lock, a logger that launches the same executable again (on the same thread, where
/// the executable lives) would wait for the lock its own thread holds.
#[test]
fn a_logger_called_when_a_launchs_fence_cannot_be_recorded_may_launch_the_executable_again() {
    let test =
        "a_logger_called_when_a_launchs_fence_cannot_be_recorded_may_launch_the_executable_again";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "injected failures are a control of the software driver",
        );
    };
    suite::alone_in_child!(
        a_logger_called_when_a_launchs_fence_cannot_be_recorded_may_launch_the_executable_again
    );
    calling_back_logger::install();
    calling_back_logger::on_every_record(|| {
        if let Some((exec, stream)) = RELAUNCH.with(|relaunch| relaunch.borrow_mut().take()) {
            exec.launch(&stream).expect("launched again");
        }
    });
    let context = context();
    let returned = returns_within(Duration::from_secs(5), {
        let context = context.clone();
        move || {
            let stream = Arc::new(new_stream(&context));
            let graph = cuda_host::graph::Graph::new(&context).expect("graph");
            let node = graph.add_host_node(&[], || {}).expect("node");
            let exec = std::rc::Rc::new(graph.instantiate().expect("executable"));
            // A callable of the executable's own: its launches record fences.
            exec.set_host_node_callable(&node, || {})
                .expect("replaced in the executable");
            RELAUNCH.with(|relaunch| {
                *relaunch.borrow_mut() = Some((std::rc::Rc::clone(&exec), Arc::clone(&stream)))
            });
            controls.fail_next_calls(c"cuEventRecord", 1, CUresult::CUDA_ERROR_INVALID_VALUE);
            exec.launch(&stream).expect("launched");
            stream.synchronize().expect("synchronized");
        }
    })
    .is_some();
    assert!(
        returned,
        "the executable's launch never returned: it warned that its fence could not be recorded \
         while it held the executable's callables, and the logger's launch of the same \
         executable waits for that lock (called back: {:?})",
        calling_back_logger::outcome()
    );
}

thread_local! {
    /// The graph and executable a logger's call back replaces a callable of, on the thread they
    /// live on.
    static REPLACE: std::cell::RefCell<Option<(Rc<cuda_host::graph::Graph>, Rc<cuda_host::graph::GraphExec>)>> =
        const { std::cell::RefCell::new(None) };
}

/// Replacing an executable's callable lets go of the fences of launches that passed, under the
/// executable's lock of its callables; a fence whose event cannot be destroyed records the error,
/// which logs. Were that logged under the lock, a logger that replaces a callable of the same
/// executable again would wait for the lock its own thread holds.
#[test]
fn a_logger_called_when_a_replaced_callables_fence_cannot_be_destroyed_may_replace_it_again() {
    let test =
        "a_logger_called_when_a_replaced_callables_fence_cannot_be_destroyed_may_replace_it_again";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "injected failures are a control of the software driver",
        );
    };
    suite::alone_in_child!(
        a_logger_called_when_a_replaced_callables_fence_cannot_be_destroyed_may_replace_it_again
    );
    calling_back_logger::install();
    calling_back_logger::on_every_record(|| {
        if let Some((graph, exec)) = REPLACE.with(|replace| replace.borrow_mut().take()) {
            let nodes = graph.host_nodes().expect("the graph's nodes");
            exec.set_host_node_callable(&nodes[0], || {})
                .expect("replaced again");
        }
    });
    let context = context();
    let returned = returns_within(Duration::from_secs(5), {
        let context = context.clone();
        move || {
            let stream = new_stream(&context);
            let graph = Rc::new(cuda_host::graph::Graph::new(&context).expect("graph"));
            let node = graph.add_host_node(&[], || {}).expect("node");
            let exec = Rc::new(graph.instantiate().expect("executable"));
            // A callable of the executable's own: its launches record fences.
            exec.set_host_node_callable(&node, || {})
                .expect("replaced in the executable");
            exec.launch(&stream).expect("launched");
            stream.synchronize().expect("synchronized");
            REPLACE.with(|replace| {
                *replace.borrow_mut() = Some((Rc::clone(&graph), Rc::clone(&exec)));
            });
            // The passed launch's fence is let go by the next replacement, and its destroy fails.
            controls.fail_next_calls(c"cuEventDestroy_v2", 1, CUresult::CUDA_ERROR_INVALID_VALUE);
            exec.set_host_node_callable(&node, || {}).expect("replaced");
        }
    })
    .is_some();
    assert!(
        returned,
        "replacing the executable's callable never returned: a fence it let go failed to be \
         destroyed, which logged under the executable's callables, and the logger's replacement \
         waits for that lock (called back: {:?})",
        calling_back_logger::outcome()
    );
}

/// A function of nothing, for raw launches.
unsafe extern "C" fn nothing(_: *mut std::ffi::c_void) {}

/// A raw pass-through launch holds a seat with its stream's handle, which a builder capture of
/// that stream waits for however long. When the driver answers a sticky
/// error, the context's failure is noted, which logs the count of host functions it abandons:
/// were that logged while the window is held, a logger that begins a capture of the same stream
/// through cuda-host would wait for its own thread.
#[test]
fn a_logger_called_by_a_failed_pass_through_launch_may_begin_a_capture_of_its_stream() {
    let test = "a_logger_called_by_a_failed_pass_through_launch_may_begin_a_capture_of_its_stream";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "injected failures are a control of the software driver",
        );
    };
    suite::alone_in_child!(
        a_logger_called_by_a_failed_pass_through_launch_may_begin_a_capture_of_its_stream
    );
    calling_back_logger::install();
    let context = context();
    let first = new_stream(&context);
    let stream = Arc::new(new_stream(&context));
    let gate = Gate::new(&context);
    gate.hold(&first);
    // A host function pending behind the gate: the failure abandons it, and logs that.
    host_launch(&first, || {}).expect("launched");
    calling_back_logger::on_next_record_capture(&stream);
    let returned = returns_within(Duration::from_secs(5), {
        let stream = Arc::clone(&stream);
        move || {
            controls.fail_next_calls(c"cuLaunchHostFunc", 1, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
            // SAFETY: `nothing` may be called with any pointer, on any thread.
            let launched = unsafe {
                cuda_host::host_launch_raw(
                    &stream,
                    nothing,
                    cuda_host::UserData::PassThrough(std::ptr::null_mut()),
                )
            };
            assert!(launched.is_err(), "the launch was refused");
        }
    })
    .is_some();
    gate.open();
    assert!(
        returned,
        "the failed pass-through launch never returned: the failure it noted logged while its \
         window held the stream, and the capture the logger began waits for that window \
         (called back: {:?})",
        calling_back_logger::outcome()
    );
}

/// An executable with a callable of its own (its launches record fences), on `context`.
fn executable_with_fences(context: &Context) -> GraphExec {
    let graph = cuda_host::graph::Graph::new(context).expect("graph");
    let node = graph.add_host_node(&[], || {}).expect("node");
    let exec = graph.instantiate().expect("executable");
    exec.set_host_node_callable(&node, || {})
        .expect("replaced in the executable");
    exec
}

thread_local! {
    /// The executable and stream the logger launches again: raw pointers, so that the slot has
    /// no destructor and is still readable while the thread's other thread-locals are dropped.
    static TEARDOWN_RELAUNCH: Cell<Option<(*const GraphExec, *const Stream)>> = const { Cell::new(None) };
    /// What the thread's teardown does: registered before cuda-host's own thread-locals, so
    /// dropped after them.
    static TEARDOWN: RefCell<Option<Teardown>> = const { RefCell::new(None) };
}

/// Launches its executable, whose fence's record fails, when the thread's thread-locals are
/// dropped; then says it returned.
struct Teardown {
    exec: GraphExec,
    stream: Stream,
    returned: mpsc::Sender<()>,
}

impl Drop for Teardown {
    fn drop(&mut self) {
        TEARDOWN_RELAUNCH.set(Some((&raw const self.exec, &raw const self.stream)));
        let controls = suite::software::controls().expect("the software driver");
        controls.fail_next_calls(c"cuEventRecord", 1, CUresult::CUDA_ERROR_INVALID_VALUE);
        let _ = self.exec.launch(&self.stream);
        let _ = self.returned.send(());
    }
}

/// `holding_logs` keeps a log call made under a lock in the thread-local `HELD` until the lock
/// is let go; once that thread-local was dropped (a thread's teardown, where a user's
/// thread-local registered before it is dropped after it), `hold_log_call` cannot reach it and
/// the call is made at once, under the lock. Here: an executable's launch in a thread-local's
/// `Drop` warns that its fence could not be recorded while it holds the executable's callables,
/// and the logger's launch of the same executable waits for that lock on its own thread.
#[test]
fn a_log_call_held_during_a_threads_teardown_is_not_made_under_the_lock() {
    let test = "a_log_call_held_during_a_threads_teardown_is_not_made_under_the_lock";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(
            test,
            "injected failures are a control of the software driver",
        );
    };
    suite::alone_in_child!(a_log_call_held_during_a_threads_teardown_is_not_made_under_the_lock);
    calling_back_logger::install();
    calling_back_logger::on_every_record(|| {
        if let Some((exec, stream)) = TEARDOWN_RELAUNCH.take() {
            // SAFETY: both live in the `Teardown` whose `Drop` runs on this thread now.
            let _ = unsafe { (*exec).launch(&*stream) };
        }
    });
    let context = context();
    let (returned, teardown_returned) = mpsc::channel();
    let (ready, armed) = mpsc::channel();
    std::thread::spawn(move || {
        // Registered first, so dropped last.
        TEARDOWN.with(|_| ());
        let stream = new_stream(&context);
        // A held log call on this thread (another executable's fence that cannot be recorded):
        // cuda-host's `HELD` is registered now, after `TEARDOWN`.
        let warm = executable_with_fences(&context);
        controls.fail_next_calls(c"cuEventRecord", 1, CUresult::CUDA_ERROR_INVALID_VALUE);
        warm.launch(&stream).expect("launched");
        stream.synchronize().expect("synchronized");
        let exec = executable_with_fences(&context);
        TEARDOWN.with(|teardown| {
            *teardown.borrow_mut() = Some(Teardown {
                exec,
                stream,
                returned,
            });
        });
        let _ = ready.send(());
    });
    armed.recv().expect("the thread set its teardown up");
    let launched = teardown_returned
        .recv_timeout(Duration::from_secs(5))
        .is_ok();
    assert!(
        launched,
        "the launch in a thread-local's Drop never returned: cuda-host's held log calls were \
         gone, so its fence warning was logged at once under the executable's callables, and \
         the logger's launch of the same executable waits for that lock (called back: {:?})",
        calling_back_logger::outcome()
    );
}

/// The thread whose log records the logger of
/// `a_logger_called_when_a_context_cannot_be_made_current_again_may_make_a_polled_stream` acts
/// on: the one that makes the first polled stream.
static POLLED_MAKER: std::sync::Mutex<Option<std::thread::ThreadId>> = std::sync::Mutex::new(None);

/// `with_context_current` (`launch/context_shared.rs`) logs through `logged!` when it cannot make
/// the previous context current again. `ContextLanes::lane_of` (`polled/lanes.rs`) allocates the
/// context's first page of lanes with the context made current, under the lanes' table lock,
/// and `Stream::with_host_engine` calls it outside any `holding_logs`: the error is logged under
/// that lock, and a logger that makes another polled stream of the context (which takes the
/// same lock) waits for its own thread. The previous context here is a fresh context, destroyed
/// by another thread while the page's allocation is held by the driver.
#[test]
fn a_logger_called_when_a_context_cannot_be_made_current_again_may_make_a_polled_stream() {
    let test =
        "a_logger_called_when_a_context_cannot_be_made_current_again_may_make_a_polled_stream";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "delayed calls are a control of the software driver");
    };
    suite::alone_in_child!(
        a_logger_called_when_a_context_cannot_be_made_current_again_may_make_a_polled_stream
    );
    calling_back_logger::install();
    let context = context();
    calling_back_logger::on_every_record({
        let context = context.clone();
        move || {
            let maker = POLLED_MAKER.lock().expect("the maker").take();
            if maker == Some(std::thread::current().id()) {
                let other = new_stream(&context)
                    .with_host_engine(cuda_host::options::HostEngine::Polled)
                    .expect("a second polled stream");
                drop(other);
            }
        }
    });
    let device = cuda_host::Device::get(context.driver(), 0).expect("device");
    let fresh = controls.fresh_context(&device);
    let context_of_fresh = fresh.clone();
    let (bound, bound_here) = mpsc::channel::<()>();
    // Meanwhile the fresh context goes: the allocation's `with_current` cannot make it current
    // again.
    let dropper = std::thread::spawn({
        let fresh = fresh.clone();
        move || {
            bound_here
                .recv()
                .expect("the thread bound the fresh context");
            std::thread::sleep(Duration::from_millis(200));
            drop(fresh);
        }
    });
    drop(fresh);
    let returned = suite::wait::returns_within(Duration::from_secs(5), {
        let context = context.clone();
        let fresh = context_of_fresh;
        move || {
            // The fresh context is the thread's current one: what the allocation's
            // `with_current` makes current again afterwards.
            fresh.bind_to_thread().expect("bound");
            drop(fresh);
            let stream = new_stream(&context);
            *POLLED_MAKER.lock().expect("the maker") = Some(std::thread::current().id());
            controls.delay_next_calls(c"cuMemHostAlloc", 1, Duration::from_millis(600));
            let _ = bound.send(());
            // The context's first polled stream: its page of lanes is allocated now.
            let polled = stream.with_host_engine(cuda_host::options::HostEngine::Polled);
            polled.is_ok()
        }
    });
    let _ = dropper.join();
    assert!(
        returned.is_some(),
        "making a polled stream never returned: the lanes' page was allocated under the lanes' \
         table lock, the previous context could not be made current again, which logged under \
         that lock, and the logger's polled stream waits for it (called back: {:?})",
        calling_back_logger::outcome()
    );
}

thread_local! {
    /// The stream a logger's call back launches a replayable host function on, once, set on the
    /// thread whose log record it acts on.
    static REPLAYABLE_ON: RefCell<Option<Arc<Stream>>> = const { RefCell::new(None) };
}

/// Where a holder of the process-wide capture-node lock is made to log under it: what
/// [`a_logger_under_the_capture_node_lock_may_launch_a_replayable_host_function`] does while
/// the thread's current context can no longer be made current.
#[derive(Clone, Copy)]
enum CaptureNodeHolder {
    /// `host_launch_replayable` on the legacy stream, which looks up its capture.
    ReplayableLaunch,
    /// `GraphBuilder::callback` on a capture of the per-thread stream, on the driver's host nodes.
    Callback,
    /// The same, the builder's nodes served by the polled engine.
    EngineCallback,
    /// `GraphBuilder::callback_raw` with a pass-through pointer.
    RawCallback,
    /// `GraphBuilder::end` of a capture of the per-thread stream.
    End,
}

/// Every look-up of a stream's capture, every node's addition to it and the end of a builder capture
///  hold one process-wide lock (`graph/capture_lock.rs`). For the legacy
/// and per-thread streams, each makes the stream's context current and the previous one current
/// again; when that fails (the previous context was destroyed meanwhile), it logs. Were that
/// logged under the lock, a logger that launches a replayable host function (which takes the
/// same lock) would wait for its own thread.
fn a_logger_under_the_capture_node_lock_may_launch_a_replayable_host_function(
    holder: CaptureNodeHolder,
) {
    let controls = suite::software::expect_controls();
    calling_back_logger::install();
    calling_back_logger::on_every_record(|| {
        if let Some(stream) = REPLAYABLE_ON.with(|on| on.borrow_mut().take()) {
            // SAFETY: no other thread captures the stream.
            unsafe { cuda_host::graph::host_launch_replayable(&stream, || {}) }
                .expect("a replayable host function launched from the logger");
        }
    });
    let context = context();
    let returned = returns_within(Duration::from_secs(5), {
        let context = context.clone();
        move || {
            let other = Arc::new(new_stream(&context));
            let per_thread = Stream::per_thread(&context);
            let engine = match holder {
                CaptureNodeHolder::EngineCallback => cuda_host::options::HostEngine::Polled,
                _ => cuda_host::options::HostEngine::Driver,
            };
            let builder = match holder {
                CaptureNodeHolder::ReplayableLaunch => None,
                _ => Some(
                    GraphBuilder::begin_with_engine(&per_thread, CaptureMode::Relaxed, engine)
                        .expect("capture begun"),
                ),
            };
            // Current on this thread, then destroyed by another (a destroy on this thread would
            // pop it): a call that makes another context current cannot make it current again.
            let device = cuda_host::Device::get(context.driver(), 0).expect("device");
            let fresh = controls.fresh_context(&device);
            fresh.bind_to_thread().expect("bound");
            std::thread::spawn(move || drop(fresh))
                .join()
                .expect("the fresh context destroyed");
            REPLAYABLE_ON.with(|on| *on.borrow_mut() = Some(Arc::clone(&other)));
            match (holder, builder) {
                (CaptureNodeHolder::ReplayableLaunch, _) => {
                    let legacy = Stream::legacy(&context);
                    // SAFETY: no other thread captures the legacy stream.
                    unsafe { cuda_host::graph::host_launch_replayable(&legacy, || {}) }
                        .expect("launched");
                    legacy.synchronize().expect("synchronized");
                }
                (CaptureNodeHolder::End, Some(builder)) => {
                    builder.end().expect("the capture ends");
                }
                (CaptureNodeHolder::RawCallback, Some(builder)) => {
                    // SAFETY: `nothing` ignores its pointer.
                    unsafe {
                        builder.callback_raw(
                            nothing,
                            cuda_host::UserData::PassThrough(std::ptr::null_mut()),
                        )
                    }
                    .expect("a node added");
                    builder.end().expect("the capture ends");
                }
                (_, Some(builder)) => {
                    builder.callback(|| {}).expect("a node added");
                    builder.end().expect("the capture ends");
                }
                (_, None) => unreachable!("a builder for every holder but the launch"),
            }
            other.synchronize().expect("synchronized");
        }
    })
    .is_some();
    assert!(
        returned,
        "the call never returned: it logged that it could not make the previous context \
         current again while it held the capture-node lock, and the logger's replayable launch \
         waits for that lock (called back: {:?})",
        calling_back_logger::outcome()
    );
    assert_eq!(
        calling_back_logger::outcome(),
        Some(Ok(())),
        "the logger launched nothing"
    );
}

#[test]
fn a_logger_called_by_a_replayable_launchs_capture_look_up_may_launch_a_replayable_one() {
    if suite::software::controls().is_none() {
        return suite::skip(
            "a_logger_called_by_a_replayable_launchs_capture_look_up_may_launch_a_replayable_one",
            "fresh contexts are a control of the software driver",
        );
    }
    suite::alone_in_child!(
        a_logger_called_by_a_replayable_launchs_capture_look_up_may_launch_a_replayable_one
    );
    a_logger_under_the_capture_node_lock_may_launch_a_replayable_host_function(
        CaptureNodeHolder::ReplayableLaunch,
    );
}

#[test]
fn a_logger_called_by_a_callbacks_capture_look_up_may_launch_a_replayable_one() {
    if suite::software::controls().is_none() {
        return suite::skip(
            "a_logger_called_by_a_callbacks_capture_look_up_may_launch_a_replayable_one",
            "fresh contexts are a control of the software driver",
        );
    }
    suite::alone_in_child!(
        a_logger_called_by_a_callbacks_capture_look_up_may_launch_a_replayable_one
    );
    a_logger_under_the_capture_node_lock_may_launch_a_replayable_host_function(
        CaptureNodeHolder::Callback,
    );
}

#[test]
fn a_logger_called_by_an_engine_callbacks_capture_look_up_may_launch_a_replayable_one() {
    if suite::software::controls().is_none() {
        return suite::skip(
            "a_logger_called_by_an_engine_callbacks_capture_look_up_may_launch_a_replayable_one",
            "fresh contexts are a control of the software driver",
        );
    }
    suite::alone_in_child!(
        a_logger_called_by_an_engine_callbacks_capture_look_up_may_launch_a_replayable_one
    );
    a_logger_under_the_capture_node_lock_may_launch_a_replayable_host_function(
        CaptureNodeHolder::EngineCallback,
    );
}

#[test]
fn a_logger_called_by_a_raw_callbacks_capture_look_up_may_launch_a_replayable_one() {
    if suite::software::controls().is_none() {
        return suite::skip(
            "a_logger_called_by_a_raw_callbacks_capture_look_up_may_launch_a_replayable_one",
            "fresh contexts are a control of the software driver",
        );
    }
    suite::alone_in_child!(
        a_logger_called_by_a_raw_callbacks_capture_look_up_may_launch_a_replayable_one
    );
    a_logger_under_the_capture_node_lock_may_launch_a_replayable_host_function(
        CaptureNodeHolder::RawCallback,
    );
}

#[test]
fn a_logger_called_when_a_capture_ends_may_launch_a_replayable_one() {
    if suite::software::controls().is_none() {
        return suite::skip(
            "a_logger_called_when_a_capture_ends_may_launch_a_replayable_one",
            "fresh contexts are a control of the software driver",
        );
    }
    suite::alone_in_child!(a_logger_called_when_a_capture_ends_may_launch_a_replayable_one);
    a_logger_under_the_capture_node_lock_may_launch_a_replayable_host_function(
        CaptureNodeHolder::End,
    );
}

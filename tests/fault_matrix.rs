//! The fault matrix: every driver entry point cuda-host calls fails once, on the software driver,
//! inside the cuda-host operation that calls it. Each row checks that the failure surfaces as a
//! typed error naming the call (returned, returned by the next call when it happened in a
//! `Drop`, or logged where nothing can return it), that the injected failure fired, that nothing
//! of cuda-host's leaked (captured values, launch slots, and the driver objects it made, except
//! the one whose destruction the driver refused), and that later calls work.
//!
//! A row per entry point: the test fails when cuda-host's source calls an entry point that has
//! none, so a new call cannot go unexercised.

use cuda_host::{
    Context, Device, Event, EventFlags, Stream, StreamFlags, UserData, graph::CaptureMode,
    graph::Graph, graph::GraphBuilder, host_launch, host_launch_raw, options::HostEngine,
    options::HostTaskSyncMode, options::LaunchOptions, options::host_launch_with,
    points::release_in_stream_order, timeline::Timeline,
};
use cuda_host_sys::CUresult;
use std::collections::BTreeSet;
use std::ffi::{CStr, CString, c_void};
use std::sync::{Arc, Mutex, OnceLock};
use suite::Tally;
use suite::software::{Controls, LiveObjects};

/// How a row's failure reaches the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Surfaces {
    /// The operation returns the driver's error, naming the call.
    Returned,
    /// It happened in a `Drop`: the next call on the context returns it.
    NextCall,
    /// Nothing can return it: it is logged (warning or error), naming the call.
    Logged,
}

/// What may stay behind after the row: the driver object whose destruction the driver refused
/// (and what that object keeps alive), or the callable of a user object it refused to release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Leaves {
    streams: u64,
    events: u64,
    graphs: u64,
    graph_execs: u64,
    user_objects: u64,
    values: usize,
}

const NOTHING: Leaves = Leaves {
    streams: 0,
    events: 0,
    graphs: 0,
    graph_execs: 0,
    user_objects: 0,
    values: 0,
};

struct Row {
    entry: &'static CStr,
    surfaces: Surfaces,
    leaves: Leaves,
    /// Arms nothing itself; makes the operation that calls `entry`, counting the values it
    /// captures in the tally, and returns what the operation returned.
    exercise: fn(&Fixture) -> cuda_host::Result<()>,
}

struct Fixture {
    driver: Arc<cuda_host::sys::Driver>,
    context: Context,
    tally: Arc<Tally>,
}

impl Fixture {
    fn stream(&self) -> Stream {
        Stream::new(&self.context, StreamFlags::NonBlocking).expect("a stream")
    }

    fn polled_stream(&self) -> Stream {
        self.stream()
            .with_host_engine(HostEngine::Polled)
            .expect("a polled stream")
    }

    fn probe_closure(&self) -> impl Fn() + Send + Sync + 'static {
        let probe = self.tally.probe();
        move || probe.ran()
    }
}

unsafe extern "C" fn nothing(_: *mut c_void) {}

macro_rules! row {
    ($entry:literal, $surfaces:ident, $leaves:expr, $exercise:expr) => {
        Row {
            entry: $entry,
            surfaces: Surfaces::$surfaces,
            leaves: $leaves,
            exercise: $exercise,
        }
    };
}

fn rows() -> Vec<Row> {
    vec![
        row!(c"cuInit", Returned, NOTHING, |f| Device::count(&f.driver)
            .map(drop)),
        row!(c"cuDeviceGetCount", Returned, NOTHING, |f| Device::count(
            &f.driver
        )
        .map(drop)),
        row!(c"cuDeviceGet", Returned, NOTHING, |f| Device::get(
            &f.driver, 0
        )
        .map(drop)),
        row!(c"cuDeviceGetName", Returned, NOTHING, |f| {
            Device::get(&f.driver, 0)?.name().map(drop)
        }),
        row!(c"cuDevicePrimaryCtxRetain", Returned, NOTHING, |f| {
            Device::get(&f.driver, 0)?.primary_context().map(drop)
        }),
        row!(c"cuDevicePrimaryCtxRelease_v2", Logged, NOTHING, |f| {
            // The last reference of a context value of its own: its drop releases it.
            let context = Device::get(&f.driver, 0)?.primary_context()?;
            drop(context);
            Ok(())
        }),
        row!(c"cuCtxGetCurrent", Returned, NOTHING, |f| Stream::new(
            &f.context,
            StreamFlags::NonBlocking
        )
        .map(drop)),
        row!(c"cuCtxSetCurrent", Returned, NOTHING, |f| Stream::new(
            &f.context,
            StreamFlags::NonBlocking
        )
        .map(drop)),
        row!(c"cuCtxGetDevice", Returned, NOTHING, |f| {
            // SAFETY: the fixture's context is a live context of the fixture's driver, and
            // outlives the borrowed one, which is dropped at once.
            unsafe { Context::borrow_raw(&f.driver, f.context.as_raw()) }.map(drop)
        }),
        row!(c"cuCtxSynchronize", Returned, NOTHING, |f| f
            .context
            .synchronize()),
        row!(c"cuStreamCreate", Returned, NOTHING, |f| Stream::new(
            &f.context,
            StreamFlags::Blocking
        )
        .map(drop)),
        row!(
            c"cuStreamDestroy_v2",
            NextCall,
            Leaves {
                streams: 1,
                ..NOTHING
            },
            |f| {
                drop(f.stream());
                Ok(())
            }
        ),
        row!(c"cuStreamSynchronize", Returned, NOTHING, |f| f
            .stream()
            .synchronize()),
        row!(c"cuStreamQuery", Returned, NOTHING, |f| f
            .stream()
            .is_complete()
            .map(drop)),
        row!(c"cuStreamWaitEvent", Returned, NOTHING, |f| {
            let event = Event::new(&f.context, EventFlags::DisableTiming)?;
            f.stream().wait_event(&event)
        }),
        row!(c"cuStreamIsCapturing", Returned, NOTHING, |f| {
            let stream = f.stream();
            host_launch(&stream, f.probe_closure())
        }),
        row!(c"cuLaunchHostFunc", Returned, NOTHING, |f| {
            let stream = f.stream();
            host_launch(&stream, f.probe_closure())
        }),
        row!(c"cuStreamAddCallback", Logged, NOTHING, |f| {
            // A stream that launched is watched for its context's failure when dropped.
            let stream = f.stream();
            host_launch(&stream, f.probe_closure())?;
            stream.synchronize()?;
            drop(stream);
            Ok(())
        }),
        row!(c"cuStreamBeginCapture_v2", Returned, NOTHING, |f| {
            let stream = f.stream();
            GraphBuilder::begin(&stream, CaptureMode::Global).map(drop)
        }),
        row!(c"cuStreamEndCapture", Returned, NOTHING, |f| {
            let stream = f.stream();
            let builder = GraphBuilder::begin(&stream, CaptureMode::Global)?;
            builder.callback(f.probe_closure())?;
            builder.end().map(drop)
        }),
        row!(c"cuStreamGetCaptureInfo_v3", Returned, NOTHING, |f| {
            let stream = f.stream();
            let builder = GraphBuilder::begin(&stream, CaptureMode::ThreadLocal)?;
            let added = builder.callback(f.probe_closure());
            drop(builder.end()?);
            added
        }),
        row!(c"cuEventCreate", Returned, NOTHING, |f| Event::new(
            &f.context,
            EventFlags::Timing
        )
        .map(drop)),
        row!(
            c"cuEventDestroy_v2",
            NextCall,
            Leaves {
                events: 1,
                ..NOTHING
            },
            |f| {
                drop(Event::new(&f.context, EventFlags::Timing)?);
                Ok(())
            }
        ),
        row!(c"cuEventRecord", Returned, NOTHING, |f| {
            Event::new(&f.context, EventFlags::Timing)?.record(&f.stream())
        }),
        row!(c"cuEventSynchronize", Returned, NOTHING, |f| {
            let event = Event::new(&f.context, EventFlags::Timing)?;
            event.record(&f.stream())?;
            event.synchronize()
        }),
        row!(c"cuEventQuery", Returned, NOTHING, |f| {
            let event = Event::new(&f.context, EventFlags::Timing)?;
            event.record(&f.stream())?;
            event.is_complete().map(drop)
        }),
        row!(c"cuEventElapsedTime_v2", Returned, NOTHING, |f| {
            let stream = f.stream();
            let (start, end) = (
                Event::new(&f.context, EventFlags::Timing)?,
                Event::new(&f.context, EventFlags::Timing)?,
            );
            start.record(&stream)?;
            end.record(&stream)?;
            stream.synchronize()?;
            end.elapsed_since(&start).map(drop)
        }),
        row!(c"cuGraphCreate", Returned, NOTHING, |f| Graph::new(
            &f.context
        )
        .map(drop)),
        row!(
            c"cuGraphDestroy",
            NextCall,
            Leaves {
                graphs: 1,
                user_objects: 1,
                values: 1,
                ..NOTHING
            },
            |f| {
                // The graph the driver keeps keeps its callable too.
                let graph = Graph::new(&f.context)?;
                graph.add_host_node(&[], f.probe_closure())?;
                drop(graph);
                Ok(())
            }
        ),
        row!(c"cuGraphAddHostNode", Returned, NOTHING, |f| {
            Graph::new(&f.context)?
                .add_host_node(&[], f.probe_closure())
                .map(drop)
        }),
        row!(c"cuGraphGetNodes", Returned, NOTHING, |f| Graph::new(
            &f.context
        )?
        .host_nodes()
        .map(drop)),
        row!(c"cuGraphNodeGetType", Returned, NOTHING, |f| {
            let graph = Graph::new(&f.context)?;
            graph.add_host_node(&[], f.probe_closure())?;
            graph.host_nodes().map(drop)
        }),
        row!(c"cuGraphClone", Returned, NOTHING, |f| {
            let graph = Graph::new(&f.context)?;
            graph.add_host_node(&[], f.probe_closure())?;
            graph.try_clone().map(drop)
        }),
        row!(c"cuGraphHostNodeGetParams", Returned, NOTHING, |f| {
            let graph = Graph::new(&f.context)?;
            graph
                .add_host_node(&[], f.probe_closure())?
                .callable()
                .map(drop)
        }),
        row!(c"cuGraphHostNodeSetParams", Returned, NOTHING, |f| {
            let graph = Graph::new(&f.context)?;
            let node = graph.add_host_node(&[], f.probe_closure())?;
            node.set_callable(f.probe_closure())
        }),
        row!(c"cuGraphInstantiateWithFlags", Returned, NOTHING, |f| {
            let graph = Graph::new(&f.context)?;
            graph.add_host_node(&[], f.probe_closure())?;
            graph.instantiate().map(drop)
        }),
        row!(c"cuGraphLaunch", Returned, NOTHING, |f| {
            let graph = Graph::new(&f.context)?;
            graph.add_host_node(&[], f.probe_closure())?;
            graph.instantiate()?.launch(&f.stream())
        }),
        row!(
            c"cuGraphExecDestroy",
            NextCall,
            Leaves {
                graph_execs: 1,
                user_objects: 2,
                values: 1,
                ..NOTHING
            },
            |f| {
                // The executable the driver keeps keeps the graph's callable and its own holder.
                let graph = Graph::new(&f.context)?;
                graph.add_host_node(&[], f.probe_closure())?;
                drop(graph.instantiate()?);
                Ok(())
            }
        ),
        row!(c"cuGraphExecHostNodeSetParams", Returned, NOTHING, |f| {
            let graph = Graph::new(&f.context)?;
            let node = graph.add_host_node(&[], f.probe_closure())?;
            graph
                .instantiate()?
                .set_host_node_callable(&node, f.probe_closure())
        }),
        row!(c"cuGraphExecUpdate_v2", Returned, NOTHING, |f| {
            let graph = Graph::new(&f.context)?;
            graph.add_host_node(&[], f.probe_closure())?;
            let other = Graph::new(&f.context)?;
            other.add_host_node(&[], f.probe_closure())?;
            graph.instantiate()?.update(&other)
        }),
        // Engine host nodes: a batch node in the graph, a word of its own per executable.
        row!(c"cuGraphAddBatchMemOpNode", Returned, NOTHING, |f| {
            Graph::new(&f.context)?
                .add_engine_host_node(&[], f.probe_closure())
                .map(drop)
        }),
        row!(c"cuGraphBatchMemOpNodeGetParams", Returned, NOTHING, |f| {
            let graph = Graph::new(&f.context)?;
            graph
                .add_engine_host_node(&[], f.probe_closure())?
                .callable()
                .map(drop)
        }),
        row!(c"cuGraphBatchMemOpNodeSetParams", Returned, NOTHING, |f| {
            let graph = Graph::new(&f.context)?;
            let node = graph.add_engine_host_node(&[], f.probe_closure())?;
            node.set_callable(f.probe_closure())
        }),
        row!(
            c"cuGraphExecBatchMemOpNodeSetParams",
            Returned,
            NOTHING,
            |f| {
                let graph = Graph::new(&f.context)?;
                graph.add_engine_host_node(&[], f.probe_closure())?;
                graph.instantiate()?.launch(&f.stream())
            }
        ),
        row!(c"cuUserObjectCreate", Returned, NOTHING, |f| {
            Graph::new(&f.context)?
                .add_host_node(&[], f.probe_closure())
                .map(drop)
        }),
        row!(c"cuGraphRetainUserObject", Returned, NOTHING, |f| {
            Graph::new(&f.context)?
                .add_host_node(&[], f.probe_closure())
                .map(drop)
        }),
        row!(c"cuGraphReleaseUserObject", Logged, NOTHING, |f| {
            // Replacing a node's callable lets the graph's reference to the old one go; when
            // that fails, the graph keeps the old one until it is destroyed.
            let graph = Graph::new(&f.context)?;
            let node = graph.add_host_node(&[], f.probe_closure())?;
            node.set_callable(f.probe_closure())
        }),
        row!(
            c"cuUserObjectRelease",
            Logged,
            Leaves {
                user_objects: 1,
                values: 1,
                ..NOTHING
            },
            |f| {
                // Only reached when moving a fresh user object into a graph failed: arms that too.
                suite::software::expect_controls().fail_next_calls(
                    c"cuGraphRetainUserObject",
                    1,
                    CUresult::CUDA_ERROR_OUT_OF_MEMORY,
                );
                let added = Graph::new(&f.context)?
                    .add_host_node(&[], f.probe_closure())
                    .map(drop);
                assert!(added.is_err(), "the graph took the user object");
                Ok(())
            }
        ),
        // The copied-bytes raw form: its own record, the same launch.
        row!(c"cuLaunchHostFunc", Returned, NOTHING, |f| {
            // SAFETY: `nothing` ignores its bytes.
            unsafe { host_launch_raw(&f.stream(), nothing, UserData::Copied(&[7; 100])) }
        }),
        // A sync mode launches through cuLaunchHostFunc_v2.
        row!(c"cuLaunchHostFunc_v2", Returned, NOTHING, |f| {
            let spin = LaunchOptions::default().sync_mode(HostTaskSyncMode::SpinWait);
            host_launch_with(&f.stream(), spin, f.probe_closure())
        }),
        // Stream points: a release, which hands its value back when refused.
        row!(c"cuStreamGetId", Returned, NOTHING, |f| release(
            f,
            &f.stream()
        )),
        row!(c"cuEventRecord", Returned, NOTHING, |f| release(
            f,
            &f.stream()
        )),
        // A context value's first point makes its stream's first event.
        row!(c"cuEventCreate", Returned, NOTHING, |f| {
            let context = Device::get(&f.driver, 0)?.primary_context()?;
            release(f, &Stream::new(&context, StreamFlags::NonBlocking)?)
        }),
        // A look at a point's events that fails is logged; the value waits for the next look.
        row!(c"cuEventQuery", Logged, NOTHING, |f| {
            let stream = f.stream();
            release(f, &stream)?;
            cuda_host::reclaim();
            stream.synchronize()
        }),
        // The polled engine: a launch is one batch of a write and a wait; a timeline's stream
        // operation is one batch too, with its point's write.
        row!(c"cuStreamBatchMemOp_v2", Returned, NOTHING, |f| {
            host_launch(&f.polled_stream(), f.probe_closure())
        }),
        row!(c"cuDeviceGetAttribute", Returned, NOTHING, |f| {
            Timeline::new(&f.context, 0).map(drop)
        }),
        // A context value's first polled stream allocates its lanes' memory.
        row!(c"cuMemHostAlloc", Returned, NOTHING, |f| {
            let context = Device::get(&f.driver, 0)?.primary_context()?;
            let stream = Stream::new(&context, StreamFlags::NonBlocking)?;
            Ok(stream.with_host_engine(HostEngine::Polled).map(drop)?)
        }),
        row!(c"cuMemHostGetDevicePointer_v2", Returned, NOTHING, |f| {
            let context = Device::get(&f.driver, 0)?.primary_context()?;
            let stream = Stream::new(&context, StreamFlags::NonBlocking)?;
            Ok(stream.with_host_engine(HostEngine::Polled).map(drop)?)
        }),
        row!(c"cuMemFreeHost", Logged, NOTHING, |f| {
            // The lanes' memory is freed with the last value of its context, a fresh one here
            // (the fixture's holds the primary context's pages): the engine lets go of it
            // through a caller's drain once the lane is quiet.
            let device = Device::get(&f.driver, 0)?;
            let context = suite::software::expect_controls().fresh_context(&device);
            let stream = Stream::new(&context, StreamFlags::NonBlocking)?
                .with_host_engine(HostEngine::Polled)?;
            host_launch(&stream, f.probe_closure())?;
            stream.synchronize()?;
            drop((stream, context));
            suite::wait_until("the context value to be released", || {
                cuda_host::reclaim();
                suite::software::expect_controls().armed_failures(c"cuMemFreeHost") == 0
            });
            Ok(())
        }),
        // A look that cannot put its thread in the relaxed capture mode makes no query (it could
        // break a capture): logged; the value waits for the next look.
        row!(c"cuThreadExchangeStreamCaptureMode", Logged, NOTHING, |f| {
            let stream = f.stream();
            release(f, &stream)?;
            cuda_host::reclaim();
            stream.synchronize()
        }),
        // The events are destroyed with the last holder of their context value: the stream's
        // failure watch, reclaimed here once the driver hands it back. The one the driver
        // refused to destroy is left.
        row!(
            c"cuEventDestroy_v2",
            Logged,
            Leaves {
                events: 1,
                ..NOTHING
            },
            |f| {
                let context = Device::get(&f.driver, 0)?.primary_context()?;
                let stream = Stream::new(&context, StreamFlags::NonBlocking)?;
                release(f, &stream)?;
                stream.synchronize()?;
                drop((stream, context));
                suite::wait_until("the context value to be released", || {
                    cuda_host::reclaim();
                    suite::software::expect_controls().armed_failures(c"cuEventDestroy_v2") == 0
                });
                Ok(())
            }
        ),
    ]
}

/// Releases a value in stream order on `stream`; a refused value is dropped here.
fn release(f: &Fixture, stream: &Stream) -> cuda_host::Result<()> {
    release_in_stream_order(stream, f.tally.probe()).map_err(|refused| refused.error)
}

/// Keeps warnings and errors cuda-host logs, to check the rows whose failure is only logged.
struct KeptLog(Mutex<Vec<String>>);

impl log::Log for KeptLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(record.args().to_string());
        }
    }

    fn flush(&self) {}
}

fn kept_log() -> &'static KeptLog {
    static LOG: OnceLock<&'static KeptLog> = OnceLock::new();
    LOG.get_or_init(|| {
        let log: &'static KeptLog = Box::leak(Box::new(KeptLog(Mutex::new(Vec::new()))));
        log::set_logger(log).expect("the first logger of this process");
        log::set_max_level(log::LevelFilter::Warn);
        log
    })
}

/// The entry points cuda-host's source calls through the driver table: every `cuX(` outside
/// comments (`driver.cuX(...)`, `checked!(driver, cuX(...))`).
fn entry_points_cuda_host_calls() -> BTreeSet<String> {
    fn sources(folder: &std::path::Path, found: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(folder).expect("cuda-host's source") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                sources(&path, found);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                found.push(path);
            }
        }
    }
    let mut files = Vec::new();
    sources(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("cuda-host/src"),
        &mut files,
    );
    let mut called = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable");
        for line in text
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
        {
            for (index, _) in line.match_indices("cu") {
                let starts_a_word = line[..index]
                    .chars()
                    .next_back()
                    .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
                let name: String = line[index..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let follows = line[index + name.len()..].chars().next();
                if starts_a_word
                    && name.as_bytes().get(2).is_some_and(u8::is_ascii_uppercase)
                    && follows == Some('(')
                {
                    called.insert(name);
                }
            }
        }
    }
    called
}

/// The name a row's failure is armed by: for an entry point with a per-thread twin, its base name,
/// which the software driver matches in both tables' forms (`cuStreamBeginCapture_v2` and
/// `cuStreamBeginCapture_v2_ptsz`); else the exported name the row gives.
fn armed_name(entry: &CStr) -> CString {
    let exported = entry.to_str().expect("ASCII");
    let base = cuda_host_testing::ENTRY_POINTS
        .iter()
        .find(|point| point.exported == exported && point.per_thread.is_some())
        .map_or(exported, |point| point.base);
    CString::new(base).expect("no NUL")
}

fn leaks(before: &LiveObjects, after: &LiveObjects) -> Leaves {
    Leaves {
        streams: after.streams - before.streams.min(after.streams),
        events: after.events - before.events.min(after.events),
        graphs: after.graphs - before.graphs.min(after.graphs),
        graph_execs: after.graph_execs - before.graph_execs.min(after.graph_execs),
        user_objects: after.user_objects - before.user_objects.min(after.user_objects),
        values: 0,
    }
}

fn settle(fixture: &Fixture, controls: &Controls) {
    // Work in flight finishes, user objects' destructors run on their thread, records drop.
    fixture.context.synchronize().ok();
    suite::wait_until("the driver's pending host functions to finish", || {
        cuda_host::reclaim();
        controls.live_objects().pending_host_functions == 0
    });
    std::thread::sleep(std::time::Duration::from_millis(5));
    cuda_host::reclaim();
}

#[test]
fn every_entry_point_cuda_host_calls_fails_once_with_a_typed_error_and_leaks_nothing() {
    let test = "every_entry_point_cuda_host_calls_fails_once_with_a_typed_error_and_leaks_nothing";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "fault injection is a control of the software driver");
    };
    let rows = rows();
    let covered: BTreeSet<String> = rows
        .iter()
        .map(|row| row.entry.to_str().expect("ASCII").to_owned())
        .collect();
    let called = entry_points_cuda_host_calls();
    let missing: Vec<&String> = called.difference(&covered).collect();
    assert!(
        missing.is_empty(),
        "entry points cuda-host calls with no row: {missing:?}"
    );
    let stale: Vec<&String> = covered.difference(&called).collect();
    assert!(
        stale.is_empty(),
        "rows of entry points cuda-host no longer calls: {stale:?}"
    );

    let log = kept_log();
    let fixture = Fixture {
        driver: Arc::clone(&suite::test_driver().driver),
        context: suite::context(),
        tally: Tally::new(),
    };
    // The context value's stream points keep a ring of events for the streams they serve: made
    // here, before the rows count what they leave.
    let warm = fixture.stream();
    release(&fixture, &warm).expect("released");
    warm.synchronize().expect("synchronized");
    drop(warm);
    let mut declared_values = 0;
    for row in &rows {
        let entry = row.entry.to_str().expect("ASCII");
        settle(&fixture, controls);
        let before = controls.live_objects();
        log.0.lock().unwrap().clear();
        let armed = armed_name(row.entry);
        controls.fail_next_calls(&armed, 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        let outcome = (row.exercise)(&fixture);
        assert_eq!(
            controls.armed_failures(&armed),
            0,
            "{entry}: the failure never fired"
        );
        let surfaced = match row.surfaces {
            Surfaces::Returned => outcome.expect_err("the operation succeeded").to_string(),
            Surfaces::NextCall => {
                outcome.unwrap_or_else(|error| panic!("{entry}: {error}"));
                let next = Stream::new(&fixture.context, StreamFlags::NonBlocking);
                let error = next.expect_err("the next call returned no error");
                assert!(
                    matches!(error, cuda_host::Error::DropFailed { .. }),
                    "{entry}: {error}"
                );
                error.to_string()
            }
            Surfaces::Logged => {
                outcome.unwrap_or_else(|error| panic!("{entry}: {error}"));
                log.0.lock().unwrap().join("\n")
            }
        };
        assert!(
            surfaced.contains(entry),
            "{entry}: the failure does not name the call: {surfaced}"
        );

        // Later calls work: a launch runs and its value is dropped here.
        let stream = fixture.stream();
        let after_tally = Tally::new();
        let probe = after_tally.probe();
        host_launch(&stream, move || probe.ran()).unwrap_or_else(|e| panic!("{entry}: {e}"));
        stream
            .synchronize()
            .unwrap_or_else(|e| panic!("{entry}: {e}"));
        assert_eq!((after_tally.runs(), after_tally.drops()), (1, 1), "{entry}");
        drop(stream);

        settle(&fixture, controls);
        let after = controls.live_objects();
        // Values left behind by earlier rows (declared there) stay alive.
        let alive = fixture.tally.probes() - fixture.tally.drops();
        let leaked = Leaves {
            values: alive - declared_values,
            ..leaks(&before, &after)
        };
        assert_eq!(leaked, row.leaves, "{entry}: left behind");
        declared_values += row.leaves.values;
        let slots = cuda_host::metrics().launch_slots();
        assert_eq!(
            (slots.in_flight, slots.finished),
            (0, 0),
            "{entry}: {slots:?}"
        );
    }
}

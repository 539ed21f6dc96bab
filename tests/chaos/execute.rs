//! What each operation does on its worker, and the documented answers it checks on the spot:
//! a refusal needs a reason (an armed failure, a capture, a failed context), a refused closure
//! is dropped at once on the calling thread, a synchronize leaves its thread's values on that
//! stream run and dropped, a future completes only once its stream passed its point.

use crate::plan::{CAPTURE_ENTRIES, DESTROYS, ENTRIES, Mode, Op};
use crate::witness::{self, Passed, Witness, violated};
use crate::workers::{ForeignCapture, Local, OpenBuilder};
use crate::world::{
    ContextEntry, ContextKind, Operation, PendingPoint, StreamEntry, StreamKind, World,
};
use cuda_host::{
    Context, Device, Error, Stream, StreamFlags, graph::CaptureMode, options::HostEngine,
};
use cuda_host_sys::{CUresult, CUstreamCaptureMode};
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::Poll;

/// What a step needs besides its worker's own state.
#[derive(Clone)]
pub struct Env {
    pub world: Arc<World>,
    pub controls: &'static suite::software::Controls,
    /// Whether cuda-host's own threads cannot start in this process (an impossible
    /// RUST_MIN_STACK): refusals naming a thread start are then the answer.
    pub spawns_fail: bool,
    /// Every value handed over on a stream, for the steps that fail a context and the
    /// synchronize check.
    pub handed: Arc<Mutex<Vec<Handed>>>,
}

/// A value handed to cuda-host on a stream.
pub struct Handed {
    /// The stream's and its context's ids.
    pub stream: u64,
    pub context: u64,
    pub witness: Arc<Witness>,
    /// Whether a synchronize of the stream on its home worker must find it dropped (a launch or
    /// a release, not a graph's callable).
    pub for_synchronize: bool,
}

impl Env {
    pub fn note(&self, stream: &StreamEntry, witness: &Arc<Witness>, for_synchronize: bool) {
        self.handed.lock().unwrap().push(Handed {
            stream: stream.id,
            context: stream.context.id,
            witness: Arc::clone(witness),
            for_synchronize,
        });
    }

    /// Whether a refusal of an operation in `context` has a reason the harness knows of.
    fn excused_in(&self, context: Option<&ContextEntry>, error: &Error) -> bool {
        let world = &self.world;
        if matches!(error, Error::ThreadStart { .. }) {
            return self.spawns_fail;
        }
        if matches!(error, Error::DropFailed { .. })
            && world.destroy_failures_armed.load(Ordering::SeqCst)
        {
            DROP_ERRORS.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        let (changes, at_start) = STEP_START.with(Cell::get);
        world.faults_armed.load(Ordering::SeqCst)
            || at_start
            || world.any_capture()
            || world.capture_changes.load(Ordering::SeqCst) != changes
            || context.is_some_and(|context| context.failed.load(Ordering::SeqCst))
    }

    pub fn check_refusal(&self, what: &str, stream: Option<&StreamEntry>, error: &Error) {
        self.check_refusal_in(what, stream.map(|stream| &*stream.context), error);
    }

    pub fn check_refusal_in(&self, what: &str, context: Option<&ContextEntry>, error: &Error) {
        if !self.excused_in(context, error) {
            violated(format!(
                "{what} refused with no reason the harness knows of: {error}"
            ));
        }
        if let Some(context) = context
            && error.driver_result() == Some(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS)
        {
            self.check_reclaimed_behind_failure(what, context, error);
        }
    }

    /// A call (`what`) on this worker answered `context`'s failure (`error`, straight from the
    /// driver or as a drop's): what this worker launched or released there that never ran is
    /// reclaimed, so this worker's drains drop it ("cuda-host reclaims its record when a call
    /// answers the failure"). A function the driver's thread had already taken runs instead:
    /// given a moment.
    fn check_reclaimed_behind_failure(&self, what: &str, context: &ContextEntry, error: &Error) {
        let Some(home) = witness::current_worker() else {
            return;
        };
        let Some(globals) = witness::global_changes() else {
            return;
        };
        if !witness::drops_allowed_here() {
            return;
        }
        let stranded = || -> Vec<String> {
            self.handed
                .lock()
                .unwrap()
                .iter()
                .filter(|handed| handed.for_synchronize && handed.context == context.id)
                .map(|handed| &handed.witness)
                .filter(|witness| {
                    witness.home == home
                        && !witness.handed_back.load(Ordering::SeqCst)
                        && witness.accepted_at.load(Ordering::SeqCst) != 0
                        && witness.runs() == 0
                        && witness.drops() == 0
                })
                .map(|witness| witness.what.clone())
                .collect()
        };
        let reclaimed = suite::wait::holds_within(std::time::Duration::from_millis(200), || {
            cuda_host::reclaim();
            stranded().is_empty()
        });
        // A drain a global capture began meanwhile refused proves nothing.
        if !reclaimed && witness::no_global_capture_since(globals) {
            violated(format!(
                "{what} answered {}'s failure ({error}), yet what this worker handed it that \
                 never ran was not reclaimed: {:?}",
                context.name,
                stranded()
            ));
        }
    }
}

/// Errors failed destroys left that calls returned: to operations, and at the ends of
/// sequences.
pub static DROP_ERRORS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

thread_local! {
    /// The captures as the running step began: how many had changed, and whether one was open
    /// or armed. A step beside another may meet a capture that is gone by the time it looks.
    static STEP_START: Cell<(u64, bool)> = const { Cell::new((0, false)) };
}

/// Steps running now, on any worker.
pub static STEPS_RUNNING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Runs `op` on the calling worker: its outcome, for the operation log.
pub fn execute(env: &Env, local: &mut Local, op: &Op) -> String {
    /// Counts the step out, also on unwind.
    struct Running;
    impl Drop for Running {
        fn drop(&mut self) {
            STEPS_RUNNING.fetch_sub(1, Ordering::SeqCst);
        }
    }
    STEPS_RUNNING.fetch_add(1, Ordering::SeqCst);
    let _running = Running;
    let world = &env.world;
    let changes = world.capture_changes.load(Ordering::SeqCst);
    STEP_START.with(|start| start.set((changes, world.any_capture())));
    match *op {
        Op::NewContext { kind } => new_context(env, kind),
        Op::DropContext { index } => match world.remove_context(index) {
            Some((context, streams)) => {
                let names = streams.len();
                drop(streams);
                format!("dropped {} and its {names} streams", context.name)
            }
            None => "no context to drop".to_owned(),
        },
        Op::Bind { context } => {
            let context = world.context(context);
            match context.context.bind_to_thread() {
                Ok(()) => format!("{} is current on this worker", context.name),
                Err(error) => {
                    env.check_refusal_in("Context::bind_to_thread", Some(&context), &error);
                    format!("{} does not bind: {error}", context.name)
                }
            }
        }
        Op::NewStream {
            context,
            blocking,
            polled,
        } => {
            let context = world.context(context);
            let flags = if blocking {
                StreamFlags::Blocking
            } else {
                StreamFlags::NonBlocking
            };
            let stream = match Stream::new(&context.context, flags) {
                Ok(stream) => stream,
                Err(error) => {
                    env.check_refusal_in("Stream::new", Some(&context), &error);
                    return format!("refused: {error}");
                }
            };
            let stream = if polled {
                match stream.with_host_engine(HostEngine::Polled) {
                    Ok(stream) => stream,
                    Err(refused) => {
                        env.check_refusal_in(
                            "Stream::with_host_engine",
                            Some(&context),
                            &refused.error,
                        );
                        return format!("polled engine refused: {}", refused.error);
                    }
                }
            } else {
                stream
            };
            let kind = if blocking {
                StreamKind::Blocking
            } else {
                StreamKind::NonBlocking
            };
            world
                .add_stream(stream, &context, kind, polled)
                .name
                .clone()
        }
        Op::SpecialStream { context, legacy } => {
            let context = world.context(context);
            let (stream, kind) = if legacy {
                (Stream::legacy(&context.context), StreamKind::Legacy)
            } else {
                (Stream::per_thread(&context.context), StreamKind::PerThread)
            };
            world.add_stream(stream, &context, kind, false).name.clone()
        }
        Op::DropStream { index } => match world.remove_stream(index) {
            Some(stream) => format!("dropped {}", stream.name),
            None => "no stream".to_owned(),
        },
        Op::Launch {
            stream,
            panic_in_run,
            panic_in_drop,
        } => launch(env, stream, panic_in_run, panic_in_drop),
        Op::Replayable { stream } => replayable(env, local, stream),
        Op::Release {
            stream,
            panic_in_drop,
        } => release(env, stream, panic_in_drop),
        Op::Point { stream } => point(env, stream),
        Op::Poll { point } => poll(env, point),
        Op::DropPoint { point } => {
            let mut points = world.points.lock().unwrap();
            if points.is_empty() {
                return "no point".to_owned();
            }
            let at = usize::from(point) % points.len();
            let dropped = points.remove(at);
            drop(points);
            let name = dropped.name.clone();
            drop(dropped);
            format!("dropped {name}")
        }
        Op::Hold { stream } => {
            let Some(stream) = world.stream(stream) else {
                return "no stream".to_owned();
            };
            if !matches!(stream.stream.capture_state(), Ok(None)) {
                return format!("{} captures: not held", stream.name);
            }
            match world.hold(&stream) {
                Some(gate) => format!("gate {gate} closed on {}", stream.name),
                None => format!("{}: the driver refused the gate's wait", stream.name),
            }
        }
        Op::Open { gate } => {
            if world.open(gate) {
                "a gate opened".to_owned()
            } else {
                "no closed gate".to_owned()
            }
        }
        Op::Synchronize { stream } => synchronize(env, local, stream),
        Op::Reclaim => format!("reclaimed {}", cuda_host::reclaim()),
        Op::BuilderBegin { stream, mode } => builder_begin(env, local, stream, mode),
        Op::BuilderCallback {
            builder,
            panic_in_run,
        } => {
            if local.builders.is_empty() {
                return "no builder on this worker".to_owned();
            }
            let at = usize::from(builder) % local.builders.len();
            let open = &mut local.builders[at];
            let witness = Witness::new(
                format!(
                    "GraphBuilder::callback {} on {}",
                    world.number(),
                    open.stream.name
                ),
                panic_in_run,
                false,
                false,
            );
            env.note(&open.stream, &witness, false);
            let probe = witness.probe();
            match open.builder().callback(move || probe.ran()) {
                Ok(()) => {
                    open.callbacks.push(witness);
                    "callback added".to_owned()
                }
                Err(error) => {
                    env.check_refusal("GraphBuilder::callback", Some(&open.stream), &error);
                    format!("refused: {error}")
                }
            }
        }
        Op::BuilderEnd { builder, launch_on } => builder_end(env, local, builder, launch_on),
        Op::Fail { context } => fail(env, context),
        Op::FailBehindDroppedStream { context } => fail_behind_dropped_stream(env, context),
        Op::FailSeenByDrop => fail_seen_by_a_drop(env),
        Op::DropErrorKept { between } => crate::drop_errors::kept(env, between),
        Op::FailNext { entry, count } => {
            let entry = ENTRIES[usize::from(entry) % ENTRIES.len()];
            if DESTROYS.contains(&entry) {
                // A failed free of pinned memory is only logged: no error waits for a call.
                if entry != c"cuMemFreeHost" {
                    world.destroy_failures_armed.store(true, Ordering::SeqCst);
                }
                if entry == c"cuStreamDestroy_v2" {
                    world
                        .stream_destroy_failures
                        .fetch_add(u64::from(count), Ordering::SeqCst);
                }
            } else {
                world.faults_armed.store(true, Ordering::SeqCst);
            }
            env.controls.fail_next_calls_any_thread(
                entry,
                u32::from(count),
                CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            );
            format!("the next {count} calls of {entry:?} fail")
        }
        Op::DelayNext { entry, micros } => {
            let entry = ENTRIES[usize::from(entry) % ENTRIES.len()];
            let delay = std::time::Duration::from_micros(u64::from(micros));
            env.controls.delay_next_calls(entry, 1, delay);
            format!("the next call of {entry:?} waits {delay:?}")
        }
        Op::ForeignBegin { stream, mode } => foreign_begin(env, local, stream, mode),
        Op::ForeignEnd { capture } => {
            if local.foreign.is_empty() {
                return "no capture of other code on this worker".to_owned();
            }
            let at = usize::from(capture) % local.foreign.len();
            let capture = local.foreign.remove(at);
            end_foreign(env, capture)
        }
        Op::CaptureAtNextCall {
            entry,
            stream,
            mode,
            look_fails,
            calls_before,
        } => {
            let Some(stream) = world.stream(stream) else {
                return "no stream".to_owned();
            };
            if !matches!(stream.kind, StreamKind::NonBlocking | StreamKind::Blocking)
                || !matches!(stream.stream.capture_state(), Ok(None))
                || world.armed.lock().unwrap().is_some()
            {
                return "not armed".to_owned();
            }
            let entry = CAPTURE_ENTRIES[usize::from(entry) % CAPTURE_ENTRIES.len()];
            world.arm_capture_at_call(
                env.controls,
                entry,
                u32::from(calls_before),
                &stream,
                raw_mode(mode),
            );
            if look_fails {
                world.faults_armed.store(true, Ordering::SeqCst);
                env.controls.fail_next_calls_any_thread(
                    c"cuStreamGetCaptureInfo_v3",
                    1,
                    CUresult::CUDA_ERROR_OUT_OF_MEMORY,
                );
            }
            format!(
                "the call of {entry:?} after {calls_before} begins a {mode:?} capture of {}{}",
                stream.name,
                if look_fails {
                    ", and the next look at a capture fails"
                } else {
                    ""
                }
            )
        }
        Op::CaptureBesideHeldLaunches { context } => {
            crate::held_launches::capture_beside_held_launches(env, context)
        }
        Op::ContendedLooks { stream } => crate::contended::contended_looks(env, stream),
        Op::StrandCurrent { replayable } => {
            let stranded = strand_current(env);
            let Some((context, legacy)) = replayable else {
                return stranded;
            };
            let context = world.context(context);
            let (stream, kind) = if legacy {
                (Stream::legacy(&context.context), StreamKind::Legacy)
            } else {
                (Stream::per_thread(&context.context), StreamKind::PerThread)
            };
            let stream = world.add_stream(stream, &context, kind, false);
            world.use_stream(&stream);
            let launched = replayable_on(env, local, stream);
            format!("{stranded}; {launched}")
        }
        Op::Logger { mode } => {
            crate::observers::set_logger(mode);
            format!("logger {mode:?}")
        }
        Op::Hook { panicking } => {
            crate::observers::set_hook_panicking(panicking);
            format!("hook panicking: {panicking}")
        }
        Op::Pace { pace, engine } => {
            cuda_host::points::set_watcher_pace(pace);
            cuda_host::polled::set_polled_engine_pace(engine);
            format!("watcher pace {pace:?}, engine pace {engine:?}")
        }
        Op::Retire => unreachable!("the runner retires workers itself"),
        Op::Timeline(ref op) => crate::timelines::execute(env, op),
        Op::Copy(ref op) => crate::copies::execute(env, op),
        Op::Graph(ref op) => crate::graphs::execute(env, local, op),
    }
}

pub fn raw_mode(mode: Mode) -> CUstreamCaptureMode {
    match mode {
        Mode::Global => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
        Mode::ThreadLocal => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        Mode::Relaxed => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
    }
}

fn new_context(env: &Env, kind: ContextKind) -> String {
    let world = &env.world;
    let device = match Device::get(world.base.driver(), 0) {
        Ok(device) => device,
        Err(error) => return format!("no device: {error}"),
    };
    let made = match kind {
        ContextKind::Primary => Context::primary(&device),
        // SAFETY: the primary context stays retained by the base value for the whole run, and
        // its handle is of this driver.
        ContextKind::Borrowed => unsafe {
            Context::borrow_raw(world.base.driver(), world.base.as_raw())
        },
        ContextKind::Fresh => env
            .controls
            .inner()
            .fresh_context(&device)
            .map_err(|error| Error::InvalidArgument {
                what: error.to_string(),
            }),
    };
    match made {
        Ok(context) => world.add_context(context, kind).name.clone(),
        Err(error) => {
            env.check_refusal("a context value", None, &error);
            format!("refused: {error}")
        }
    }
}

/// Makes a fresh context current on this worker and destroys it on another thread (a destroy
/// on this thread would pop it): this thread's current context is then one that is gone.
fn strand_current(env: &Env) -> String {
    let device = match Device::get(env.world.base.driver(), 0) {
        Ok(device) => device,
        Err(error) => return format!("no device: {error}"),
    };
    let fresh = match env.controls.inner().fresh_context(&device) {
        Ok(fresh) => fresh,
        Err(error) => return format!("no fresh context: {error}"),
    };
    if let Err(error) = fresh.bind_to_thread() {
        return format!("the fresh context does not bind: {error}");
    }
    let destroyed = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn_scoped(scope, move || {
                let _step_thread = crate::workers::become_step_thread();
                drop(fresh);
            })
            .map(|thread| thread.join().is_ok())
    });
    match destroyed {
        Ok(true) => "this worker's current context is a destroyed one".to_owned(),
        Ok(false) => "the fresh context's drop panicked".to_owned(),
        Err(error) => format!("no thread to destroy it on: {error}"),
    }
}

fn launch(env: &Env, stream: u8, panic_in_run: bool, panic_in_drop: bool) -> String {
    match env.world.stream(stream) {
        Some(stream) => launch_on(env, &stream, panic_in_run, panic_in_drop).0,
        None => "no stream".to_owned(),
    }
}

/// Launches a witness on `stream`: what happened, and the witness.
fn launch_on(
    env: &Env,
    stream: &Arc<StreamEntry>,
    panic_in_run: bool,
    panic_in_drop: bool,
) -> (String, Arc<Witness>) {
    let world = &env.world;
    let witness = Witness::new(
        format!("host_launch {} on {}", world.number(), stream.name),
        panic_in_run,
        panic_in_drop,
        true,
    );
    env.note(stream, &witness, true);
    let probe = witness.probe();
    let globals = witness::global_changes();
    let outcome = match cuda_host::host_launch(&stream.stream, move || probe.ran()) {
        Ok(()) => {
            if !stream.context_failed() {
                witness.must_run.store(true, Ordering::SeqCst);
            }
            witness.accepted_at.store(witness::tick(), Ordering::SeqCst);
            format!("{} launched", witness.what)
        }
        Err(error) => {
            env.check_refusal("host_launch", Some(stream), &error);
            check_dropped_at_once(&witness, globals, &error);
            format!("{} refused: {error}", witness.what)
        }
    };
    (outcome, witness)
}

/// A refused launch's closure is dropped at once, unless a capture through a builder held drops
/// back meanwhile (`globals`: the global captures' changes as the launch began).
pub fn check_dropped_at_once(witness: &Witness, globals: Option<usize>, error: &Error) {
    let allowed =
        witness::drops_allowed_here() && globals.is_some_and(witness::no_global_capture_since);
    if allowed && witness.drops() == 0 {
        violated(format!(
            "{}: refused ({error}), its closure was not dropped at once",
            witness.what
        ));
    }
}

fn replayable(env: &Env, local: &mut Local, stream: u8) -> String {
    match env.world.stream(stream) {
        Some(stream) => replayable_on(env, local, stream),
        None => "no stream".to_owned(),
    }
}

fn replayable_on(env: &Env, local: &mut Local, stream: Arc<StreamEntry>) -> String {
    let world = &env.world;
    let witness = Witness::new(
        format!(
            "host_launch_replayable {} on {}",
            world.number(),
            stream.name
        ),
        false,
        false,
        false,
    );
    env.note(&stream, &witness, false);
    let probe = witness.probe();
    // SAFETY: steps run one at a time but for synchronizes started without waiting, and no step
    // ends another thread's capture, nor calls the driver on a capture's graph, meanwhile.
    match unsafe { cuda_host::graph::host_launch_replayable(&stream.stream, move || probe.ran()) } {
        Ok(()) => {
            // A node of this worker's builder capture runs on the graph's launches.
            if let Some(open) = local
                .builders
                .iter_mut()
                .find(|open| Arc::ptr_eq(&open.stream, &stream))
            {
                open.callbacks.push(witness);
            }
            "launched (a node where the stream captures)".to_owned()
        }
        Err(error) => {
            env.check_refusal("host_launch_replayable", Some(&stream), &error);
            format!("refused: {error}")
        }
    }
}

fn release(env: &Env, stream: u8, panic_in_drop: bool) -> String {
    let world = &env.world;
    let Some(stream) = world.stream(stream) else {
        return "no stream".to_owned();
    };
    let witness = Witness::new(
        format!("release {} on {}", world.number(), stream.name),
        false,
        panic_in_drop,
        true,
    );
    if let Some(marker) = mark(&stream) {
        witness.not_before(Passed {
            progress: Arc::clone(&stream.progress),
            marker,
            operation: None,
        });
    }
    env.note(&stream, &witness, true);
    match cuda_host::points::release_in_stream_order(&stream.stream, witness.probe()) {
        Ok(()) => {
            witness.accepted_at.store(witness::tick(), Ordering::SeqCst);
            format!("{} held", witness.what)
        }
        Err(refused) => {
            env.check_refusal("release_in_stream_order", Some(&stream), &refused.error);
            witness.handed_back.store(true, Ordering::SeqCst);
            witness.not_before.lock().unwrap().clear();
            let error = refused.error.to_string();
            let value = refused.into_value();
            // The value's own Drop may panic (the step asked for it): the harness's drop.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(value)));
            format!("{} refused, handed back: {error}", witness.what)
        }
    }
}

/// The next marker on `stream`, where markers mean something: not on a per-thread stream, whose
/// handle is another stream on each worker.
pub fn mark(stream: &StreamEntry) -> Option<u32> {
    if stream.kind == StreamKind::PerThread {
        return None;
    }
    stream.progress.mark(&stream.stream)
}

fn point(env: &Env, stream: u8) -> String {
    let world = &env.world;
    let Some(stream) = world.stream(stream) else {
        return "no stream".to_owned();
    };
    let marker = mark(&stream);
    let name = format!("point {} on {}", world.number(), stream.name);
    match cuda_host::points::stream_point(&stream.stream) {
        Ok(point) => {
            world.points.lock().unwrap().push(PendingPoint {
                name: name.clone(),
                point,
                stream,
                marker,
            });
            format!("{name} made")
        }
        Err(error) => {
            env.check_refusal("stream_point", Some(&stream), &error);
            format!("{name} refused: {error}")
        }
    }
}

/// Polls a pending point once; checks that a completed one completed only once its stream
/// passed it (or its context failed).
pub fn poll_point(point: &mut PendingPoint) -> Poll<cuda_host::Result<()>> {
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    let polled = std::pin::Pin::new(&mut point.point).poll(&mut context);
    match &polled {
        Poll::Ready(Ok(())) => {
            if let Some(marker) = point.marker {
                let seen = point.stream.progress.seen();
                if seen < marker && !point.stream.context_failed() {
                    violated(format!(
                        "{} completed before its stream passed it (marker {marker}, at {seen})",
                        point.name
                    ));
                }
            }
        }
        Poll::Ready(Err(Error::ContextFailed)) if point.stream.context_failed() => {}
        Poll::Ready(Err(error)) => violated(format!("{} completed with {error}", point.name)),
        Poll::Pending => {}
    }
    polled
}

use std::future::Future as _;

fn poll(env: &Env, point: u8) -> String {
    let mut points = env.world.points.lock().unwrap();
    if points.is_empty() {
        return "no point".to_owned();
    }
    let at = usize::from(point) % points.len();
    let polled = poll_point(&mut points[at]);
    let name = points[at].name.clone();
    match polled {
        Poll::Pending => format!("{name} pending"),
        Poll::Ready(answer) => {
            let done = points.remove(at);
            drop(points);
            drop(done);
            format!("{name} completed: {answer:?}")
        }
    }
}

fn synchronize(env: &Env, local: &Local, stream: u8) -> String {
    let world = &env.world;
    let Some(stream) = world.stream(stream) else {
        return "no stream".to_owned();
    };
    if stream.held(world) || crate::timelines::holds(&stream) {
        return format!(
            "{} is held by a gate or a timeline's wait: not synchronized",
            stream.name
        );
    }
    if !matches!(stream.kind, StreamKind::NonBlocking | StreamKind::Blocking) {
        return format!("{} is special: not synchronized", stream.name);
    }
    let armed_here = world.armed_on(&stream);
    if armed_here || !matches!(stream.stream.capture_state(), Ok(None)) {
        // Synchronizing a stream another thread captures invalidates that capture: the
        // driver's rule, for its callers to keep (a capture armed at a call may begin at any
        // worker's call meanwhile).
        return format!("{} captures, or may: not synchronized", stream.name);
    }
    let _ = local;
    let began = witness::tick();
    let globals = witness::global_changes();
    match stream.stream.synchronize() {
        Ok(()) => {
            // Its drain dropped them, unless a capture through a builder held drops back.
            if witness::drops_allowed_here()
                && globals.is_some_and(witness::no_global_capture_since)
            {
                check_synchronized(env, &stream, began);
            }
            format!("{} synchronized", stream.name)
        }
        Err(error) => {
            env.check_refusal("Stream::synchronize", Some(&stream), &error);
            format!("{} synchronize: {error}", stream.name)
        }
    }
}

/// After a synchronize of `stream` that began at `began` returned on this worker: the values
/// this worker's host functions on it captured, and those it released on it, accepted before,
/// have been dropped here.
fn check_synchronized(env: &Env, stream: &StreamEntry, began: u64) {
    let home = witness::current_worker().expect("a worker");
    let handed = env.handed.lock().unwrap();
    for witness in handed
        .iter()
        .filter(|handed| {
            handed.for_synchronize && handed.stream == stream.id && handed.witness.home == home
        })
        .map(|handed| &handed.witness)
    {
        let accepted = witness.accepted_at.load(Ordering::SeqCst);
        if witness.handed_back.load(Ordering::SeqCst)
            || stream.context_failed()
            || accepted == 0
            || accepted > began
        {
            continue;
        }
        let launched = witness.must_run.load(Ordering::SeqCst);
        let released = !witness.not_before.lock().unwrap().is_empty();
        if (launched || released) && witness.drops() == 0 {
            violated(format!(
                "{} not dropped after its stream's synchronize returned on its thread",
                witness.what
            ));
        }
    }
}

/// Ends every capture this worker began (through builders and as other code): before its thread
/// exits, and at the end of a sequence.
pub fn end_local_captures(env: &Env, local: &mut Local) -> String {
    let mut ended = Vec::new();
    while !local.builders.is_empty() {
        ended.push(builder_end(env, local, 0, None));
    }
    for capture in std::mem::take(&mut local.foreign) {
        ended.push(end_foreign(env, capture));
    }
    ended.join("; ")
}

pub fn builder_begin(env: &Env, local: &mut Local, stream: u8, mode: Mode) -> String {
    let world = &env.world;
    let Some(stream) = world.stream(stream) else {
        return "no stream".to_owned();
    };
    if !matches!(stream.kind, StreamKind::NonBlocking | StreamKind::Blocking) {
        return format!("{} is special: no capture", stream.name);
    }
    let capture_mode = match mode {
        Mode::Global => CaptureMode::Global,
        Mode::ThreadLocal => CaptureMode::ThreadLocal,
        Mode::Relaxed => CaptureMode::Relaxed,
    };
    let global = mode == Mode::Global;
    // Counted open from before it begins: a step beside this one may meet it as soon as it does.
    stream.captures.fetch_add(1, Ordering::SeqCst);
    world.capture_opens(true);
    if global {
        witness::global_span(true);
    }
    let begun = OpenBuilder::begin(Arc::clone(&stream), capture_mode, global);
    if begun.is_ok() {
        witness::building(true, global);
    } else if global {
        witness::global_span(false);
    }
    match begun {
        Ok(open) => {
            local.builders.push(open);
            format!("a {mode:?} capture of {} begins", stream.name)
        }
        Err(error) => {
            stream.captures.fetch_sub(1, Ordering::SeqCst);
            world.capture_opens(false);
            env.check_refusal("GraphBuilder::begin", Some(&stream), &error);
            format!("refused: {error}")
        }
    }
}

/// A builder capture of this worker, ended: its stream, its callbacks' witnesses, and what the
/// end answered.
pub struct EndedBuilder {
    pub captured: Arc<StreamEntry>,
    pub callbacks: Vec<Arc<Witness>>,
    pub ended: cuda_host::Result<cuda_host::graph::Graph>,
}

/// Ends the `builder`-th builder capture of this worker, if it has one, counted closed once its
/// end returned (a step beside this one may meet it still open).
pub fn end_builder(world: &World, local: &mut Local, builder: u8) -> Option<EndedBuilder> {
    if local.builders.is_empty() {
        return None;
    }
    let at = usize::from(builder) % local.builders.len();
    let open = local.builders.remove(at);
    witness::building(false, open.global);
    let callbacks = open.callbacks.clone();
    let captured = Arc::clone(&open.stream);
    let global = open.global;
    let ended = open.end();
    captured.captures.fetch_sub(1, Ordering::SeqCst);
    world.capture_opens(false);
    if global {
        witness::global_span(false);
    }
    Some(EndedBuilder {
        captured,
        callbacks,
        ended,
    })
}

/// Ends a builder capture of this worker; launches its graph on `launch_on` if given.
pub fn builder_end(env: &Env, local: &mut Local, builder: u8, launch_on: Option<u8>) -> String {
    let world = &env.world;
    let Some(EndedBuilder {
        captured,
        callbacks,
        ended,
    }) = end_builder(world, local, builder)
    else {
        return "no builder on this worker".to_owned();
    };
    let name = captured.name.clone();
    let graph = match ended {
        Ok(graph) => graph,
        Err(error) => {
            env.check_refusal("GraphBuilder::end", Some(&captured), &error);
            return format!("the capture of {name} ended with {error}");
        }
    };
    let Some(on) = launch_on.and_then(|index| world.stream(index)) else {
        return format!("the capture of {name} ended in a graph, dropped");
    };
    let executable = match graph.instantiate() {
        Ok(executable) => executable,
        Err(error) => {
            env.check_refusal("Graph::instantiate", Some(&captured), &error);
            return format!("instantiate refused: {error}");
        }
    };
    let operation = Operation::next_on(&on);
    match executable.launch(&on.stream) {
        Ok(()) => {
            if let Some(marker) = mark(&on) {
                for witness in &callbacks {
                    witness.not_before(Passed {
                        progress: Arc::clone(&on.progress),
                        marker,
                        operation,
                    });
                }
            }
            format!(
                "the capture of {name} ended; its graph launched on {}",
                on.name
            )
        }
        Err(error) => {
            env.check_refusal("GraphExec::launch", Some(&on), &error);
            format!("the graph's launch on {} refused: {error}", on.name)
        }
    }
}

/// The fresh contexts no step failed yet: those a step may fail.
fn fresh_unfailed(world: &crate::world::World) -> Vec<Arc<ContextEntry>> {
    world
        .contexts
        .lock()
        .unwrap()
        .iter()
        .filter(|entry| entry.kind == ContextKind::Fresh && !entry.failed.load(Ordering::SeqCst))
        .cloned()
        .collect()
}

fn fail(env: &Env, context: u8) -> String {
    let world = &env.world;
    let fresh = fresh_unfailed(world);
    if fresh.is_empty() {
        return "no fresh context to fail".to_owned();
    }
    fail_context(env, &fresh[usize::from(context) % fresh.len()])
}

/// Makes a stream of a fresh context, holds it, launches behind the gate, drops the stream and
/// fails the context: the records are left for the dropped stream's failure watch, which the
/// driver calls on its thread.
fn fail_behind_dropped_stream(env: &Env, context: u8) -> String {
    let world = &env.world;
    let fresh = fresh_unfailed(world);
    if fresh.is_empty() {
        return "no fresh context to fail".to_owned();
    }
    let context = &fresh[usize::from(context) % fresh.len()];
    let stream = match Stream::new(&context.context, StreamFlags::NonBlocking) {
        Ok(stream) => stream,
        Err(error) => {
            env.check_refusal_in("Stream::new", Some(context), &error);
            return format!("refused: {error}");
        }
    };
    let entry = world.add_stream(stream, context, StreamKind::NonBlocking, false);
    let Some(gate) = world.hold(&entry) else {
        world.remove_this_stream(&entry);
        return format!("{}: the driver refused the gate's wait", entry.name);
    };
    let (launched, witness) = launch_on(env, &entry, false, false);
    world.remove_this_stream(&entry);
    let name = entry.name.clone();
    // The gate kept the stream's entry: without it, the stream goes now, watched behind the
    // gate.
    let word = world.forget_gate(gate);
    drop(entry);
    let failed = fail_context(env, context);
    if let Some(word) = word {
        world.open_forgotten(word);
    }
    // Until the driver's thread called the watch, which abandons the launch to this thread: a
    // step after this one that answers the failure would find the record first.
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(100);
    while witness.drops() == 0 && std::time::Instant::now() < deadline {
        cuda_host::reclaim();
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    format!(
        "gate {gate} closed on {name}; {launched}; dropped; {failed}; {}",
        if witness.drops() == 0 {
            "not reclaimed within 100 ms"
        } else {
            "reclaimed"
        }
    )
}

/// Makes a fresh context of its own (so that no value another step holds there is looked at,
/// which would meet the failure first), a stream held at a gate, a launch behind it and an event;
/// fails the context and drops the event: its destroy meets the failure first and leaves it as
/// a drop error, which the next call answers (and `check_refusal_in` checks that the launch was
/// reclaimed).
fn fail_seen_by_a_drop(env: &Env) -> String {
    let world = &env.world;
    let device = match Device::get(world.base.driver(), 0) {
        Ok(device) => device,
        Err(error) => return format!("no device: {error}"),
    };
    let context = match env.controls.inner().fresh_context(&device) {
        Ok(context) => world.add_context(context, ContextKind::Fresh),
        Err(error) => return format!("no fresh context: {error}"),
    };
    let stream = match Stream::new(&context.context, StreamFlags::NonBlocking) {
        Ok(stream) => stream,
        Err(error) => {
            env.check_refusal_in("Stream::new", Some(&context), &error);
            return format!("refused: {error}");
        }
    };
    let entry = world.add_stream(stream, &context, StreamKind::NonBlocking, false);
    let Some(gate) = world.hold(&entry) else {
        return format!("{}: the driver refused the gate's wait", entry.name);
    };
    let (launched, _) = launch_on(env, &entry, false, false);
    let event = cuda_host::Event::new(&context.context, cuda_host::EventFlags::DisableTiming);
    let failed = fail_context(env, &context);
    let dropped = match event {
        Ok(event) => {
            drop(event);
            "an event dropped"
        }
        Err(_) => "no event",
    };
    let next = match Stream::new(&context.context, StreamFlags::NonBlocking) {
        Ok(stream) => {
            drop(stream);
            "made a stream".to_owned()
        }
        Err(error) => {
            env.check_refusal_in("Stream::new", Some(&context), &error);
            format!("{error}")
        }
    };
    format!(
        "gate {gate} closed on {}; {launched}; {failed}; {dropped}; the next call: {next}",
        entry.name
    )
}

fn fail_context(env: &Env, entry: &Arc<ContextEntry>) -> String {
    // What may now go unrun, or be dropped before its stream passed it, is noted first.
    entry.failed.store(true, Ordering::SeqCst);
    for witness in env
        .handed
        .lock()
        .unwrap()
        .iter()
        .filter(|handed| handed.context == entry.id)
        .map(|handed| &handed.witness)
    {
        witness.must_run.store(false, Ordering::SeqCst);
        witness.not_before.lock().unwrap().clear();
    }
    // A value of another context may wait for a point of one of this context's streams (a
    // graph launched there): that stream may never pass it now.
    let streams_here = format!(" of {}", entry.name);
    for witness in witness::all() {
        witness
            .not_before
            .lock()
            .unwrap()
            .retain(|passed| !passed.progress.name.ends_with(&streams_here));
    }
    env.controls
        .set_sticky_error(&entry.context, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    format!("{} failed", entry.name)
}

fn foreign_begin(env: &Env, local: &mut Local, stream: u8, mode: Mode) -> String {
    match env.world.stream(stream) {
        Some(stream) => foreign_begin_on(env, local, stream, mode, None),
        None => "no stream".to_owned(),
    }
}

/// Other code begins a capture of `stream` in `mode`; with `recapture`, a recapture of that
/// graph (`cuStreamBeginRecaptureToGraph`, CUDA 13.3), which lets go of the graph's user objects
/// first. On success the capture is the last of `local.foreign`.
pub fn foreign_begin_on(
    env: &Env,
    local: &mut Local,
    stream: Arc<StreamEntry>,
    mode: Mode,
    recapture: Option<cuda_host_sys::CUgraph>,
) -> String {
    let world = &env.world;
    if !matches!(stream.kind, StreamKind::NonBlocking | StreamKind::Blocking)
        || !matches!(stream.stream.capture_state(), Ok(None))
    {
        return format!("{}: no capture begun", stream.name);
    }
    let driver = stream.stream.context().driver();
    // Counted and watched from before it begins: a step beside this one may meet it, or break
    // it, as soon as it does.
    let capture = ForeignCapture {
        stream: Arc::clone(&stream),
        mode: raw_mode(mode),
        worker: local.id,
        breakers: Arc::new(Mutex::new(Vec::new())),
        calls_at_begin: crate::breaking_calls(env.controls),
    };
    stream.captures.fetch_add(1, Ordering::SeqCst);
    world.capture_opens(true);
    world.foreign.lock().unwrap().push(capture.watch());
    let begun = match recapture {
        // SAFETY: a live stream that is not capturing.
        None => unsafe { driver.cuStreamBeginCapture_v2(stream.stream.as_raw(), raw_mode(mode)) },
        // SAFETY: a live stream that is not capturing, a live graph no capture builds, and no
        // callback.
        Some(graph) => unsafe {
            driver.cuStreamBeginRecaptureToGraph(
                stream.stream.as_raw(),
                raw_mode(mode),
                graph,
                None,
                std::ptr::null_mut(),
            )
        },
    };
    if begun != CUresult::CUDA_SUCCESS {
        world
            .foreign
            .lock()
            .unwrap()
            .retain(|watched| !Arc::ptr_eq(&watched.breakers, &capture.breakers));
        stream.captures.fetch_sub(1, Ordering::SeqCst);
        world.capture_opens(false);
        return format!("{}: other code's capture refused: {begun}", stream.name);
    }
    local.foreign.push(capture);
    let what = if recapture.is_some() {
        "recapture"
    } else {
        "capture"
    };
    format!("other code begins a {mode:?} {what} of {}", stream.name)
}

/// Ends a capture other code began: it must end valid unless a step made a call that
/// documentedly breaks it (an allocation or a free of memory, a context synchronize) while it
/// was open.
pub fn end_foreign(env: &Env, capture: ForeignCapture) -> String {
    let stream = Arc::clone(&capture.stream);
    let driver = stream.stream.context().driver();
    let (ended, graph) = end_foreign_keeping(env, capture);
    if let Some(graph) = graph.filter(|graph| !graph.is_null()) {
        // SAFETY: the graph the capture made, destroyed once.
        let _ = unsafe { driver.cuGraphDestroy(graph) };
    }
    ended
}

/// [`end_foreign`], keeping the graph the capture ended in (the caller's to destroy, unless
/// null).
pub fn end_foreign_keeping(
    env: &Env,
    capture: ForeignCapture,
) -> (String, Option<cuda_host_sys::CUgraph>) {
    let world = &env.world;
    world
        .foreign
        .lock()
        .unwrap()
        .retain(|watched| !Arc::ptr_eq(&watched.breakers, &capture.breakers));
    let stream = Arc::clone(&capture.stream);
    let name = stream.name.clone();
    let mut breakers = capture.breakers.lock().unwrap().clone();
    // A breaking call of a step beside this one, which the runner notes as a breaker only once
    // both ended, breaks a global-mode capture all the same.
    if capture.mode == cuda_host_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL
        && crate::breaking_calls(env.controls) != capture.calls_at_begin
    {
        breakers.push("a call of a step beside it, while it was open".to_owned());
    }
    let ended = capture.end_keeping();
    // Counted open until its end returned: a step beside this one may meet it still open.
    stream.captures.fetch_sub(1, Ordering::SeqCst);
    world.capture_opens(false);
    match ended {
        Ok(graph) => (
            format!("other code's capture of {name} ended in a graph"),
            Some(graph),
        ),
        Err(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) if breakers.is_empty() => {
            violated(format!(
                "other code's capture of {name} was invalidated, and no step made a call that \
                 documentedly breaks it"
            ));
            (
                format!("other code's capture of {name} was invalidated"),
                None,
            )
        }
        Err(result) => (
            format!(
                "other code's capture of {name} ended with {result} (breaking calls: \
                 {breakers:?})"
            ),
            None,
        ),
    }
}

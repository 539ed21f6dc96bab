//! What the contract's tests share: the driver and context, streams, the isolation between tests,
//! host functions that log or count, stream callbacks, thin wrappers of raw calls, work held behind
//! a gate, user objects whose destructor reports where and when it ran, words for stream memory
//! operations and batch nodes of them, and device memory.

use cuda_host::{Context, Event, Stream, StreamFlags};
use cuda_host_sys::{
    CUDA_BATCH_MEM_OP_NODE_PARAMS, CUdeviceptr, CUevent, CUgraphNode, CUresult, CUstream,
    CUstreamBatchMemOpParams, CUstreamBatchMemOpType, CUstreamCaptureMode, CUstreamCaptureStatus,
    CUuserObject, CUuserObject_flags, CUuserObjectRetain_flags, Driver,
};
use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::ThreadId;
use std::time::{Duration, Instant};
use suite::capture::Graph;
use suite::host_function::launch_host;
use suite::software::Controls;
use suite::{Gate, MappedWords, ok, test_driver, wait_until};

pub(crate) fn driver() -> &'static Driver {
    &test_driver().driver
}

/// The primary context, made current on the calling thread: legacy-stream calls and raw
/// creations use the current context.
pub(crate) fn current_context() -> Context {
    let context = suite::context();
    context.bind_to_thread().expect("the context binds");
    context
}

pub(crate) fn non_blocking(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking).expect("stream")
}

pub(crate) fn blocking(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::Blocking).expect("stream")
}

static ISOLATION: RwLock<()> = RwLock::new(());

/// Held by the tests that may run beside each other: they use only non-blocking streams.
pub(crate) fn shared() -> RwLockReadGuard<'static, ()> {
    ISOLATION.read().unwrap_or_else(PoisonError::into_inner)
}

/// Held by the tests that capture, use the legacy or a per-thread stream (which wait for each
/// other) or synchronise the whole context: a global-mode capture refuses (and is invalidated by)
/// other threads' unsafe calls, and a blocking stream's capture by any use of the legacy stream,
/// so these run with no other test of this binary.
pub(crate) struct Alone {
    _capture: MutexGuard<'static, ()>,
    _isolation: RwLockWriteGuard<'static, ()>,
}

pub(crate) fn alone() -> Alone {
    let capture = suite::capture_lock();
    let isolation = ISOLATION.write().unwrap_or_else(PoisonError::into_inner);
    Alone {
        _capture: capture,
        _isolation: isolation,
    }
}

/// The software driver's controls; `None` (and a skip note) on the real driver.
pub(crate) fn software_controls(test: &str) -> Option<&'static Controls> {
    let controls = suite::software::controls();
    if controls.is_none() {
        suite::skip(
            test,
            "fault injection is a control of the software driver; the real driver has none",
        );
    }
    controls
}

/// [`software_controls`] for the test `$test` (checked to name a function): returns from the test
/// on the real driver.
macro_rules! controls_or_skip {
    ($test:ident) => {{
        let _: fn() = $test;
        match $crate::harness::software_controls(stringify!($test)) {
            Some(controls) => controls,
            None => return,
        }
    }};
}
pub(crate) use controls_or_skip;

pub(crate) fn leak<T>(value: T) -> &'static T {
    Box::leak(Box::new(value))
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A driver handle moved to another thread; it is only passed back to the driver.
pub(crate) struct SendHandle<T>(pub(crate) T);

// SAFETY: driver handles are valid on every thread; the driver API is thread-safe.
unsafe impl<T> Send for SendHandle<T> {}

impl<T: Copy> SendHandle<T> {
    pub(crate) fn get(&self) -> T {
        self.0
    }
}

impl<T> SendHandle<T> {
    pub(crate) fn into_inner(self) -> T {
        self.0
    }
}

/// What host functions saw, in the order they ran.
#[derive(Debug, Clone, Default)]
pub(crate) struct Log(Arc<Mutex<Vec<&'static str>>>);

impl Log {
    pub(crate) fn entries(&self) -> Vec<&'static str> {
        lock(&self.0).clone()
    }

    /// A host function that appends `entry`.
    pub(crate) fn marker(&self, entry: &'static str) -> impl Fn() + Send + Sync + 'static {
        let log = self.clone();
        move || lock(&log.0).push(entry)
    }
}

/// A host function that counts its runs in `counter`.
pub(crate) fn counting(counter: &Arc<AtomicUsize>) -> impl Fn() + Send + Sync + 'static {
    let counter = Arc::clone(counter);
    move || {
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

pub(crate) fn count(counter: &AtomicUsize) -> usize {
    counter.load(Ordering::SeqCst)
}

/// Launches `host_function` on `stream` (a raw handle), which must succeed.
#[track_caller]
pub(crate) fn launch(stream: CUstream, host_function: impl Fn() + Send + Sync + 'static) {
    ok("cuLaunchHostFunc", launch_host(stream, host_function));
}

/// Runs a host function through `stream` and waits (bounded) until it has run; also warms up a
/// stream before a test relies on how soon it runs.
#[track_caller]
pub(crate) fn round_trip(stream: &Stream) {
    let ran = Arc::new(AtomicUsize::new(0));
    launch(stream.as_raw(), counting(&ran));
    wait_until("a host function on an idle stream", || count(&ran) == 1);
}

/// Before a test checks that work it holds has *not* run: a few round trips through the idle,
/// independent stream `witness`, enqueued after that work. On a driver that wrongly let the work
/// go, it would have reached the single host-function thread well before they finish.
pub(crate) fn let_free_work_run(witness: &Stream) {
    for _ in 0..3 {
        round_trip(witness);
    }
}

/// Checks that work held behind a gate has not run: nothing is in `log` once independent work on
/// `witness` went through, and `waiting`, a stream with some of that work, is not done.
#[track_caller]
pub(crate) fn assert_held(witness: &Stream, log: &Log, waiting: CUstream, what: &str) {
    let_free_work_run(witness);
    assert!(log.entries().is_empty(), "{what}: work ran while held");
    assert_eq!(
        query(waiting),
        CUresult::CUDA_ERROR_NOT_READY,
        "{what} went ahead of the held work"
    );
}

/// Runs `work` on a new thread, where no context is current, with `handle` (driver handles are
/// valid on every thread), and answers what it returned.
pub(crate) fn on_another_thread<H: Copy + 'static, T: Send + 'static>(
    handle: H,
    work: impl FnOnce(H) -> T + Send + 'static,
) -> T {
    let handle = SendHandle(handle);
    std::thread::spawn(move || work(handle.get()))
        .join()
        .expect("the other thread")
}

/// Runs `call` on another thread and waits (bounded) for it to return: for calls that must not
/// wait for work a test holds at a gate, so that a driver that does wait fails the test instead
/// of hanging it.
#[track_caller]
pub(crate) fn returns_while_held<T: Send + 'static>(
    what: &str,
    call: impl FnOnce() -> T + Send + 'static,
) -> T {
    let answer: Arc<Mutex<Option<T>>> = Arc::default();
    let slot = Arc::clone(&answer);
    std::thread::spawn(move || {
        let value = call();
        *lock(&slot) = Some(value);
    });
    wait_until(what, || lock(&answer).is_some());
    lock(&answer).take().expect("the answer")
}

/// How long after an enqueue began the gate that holds its stream opens.
pub(crate) const RELEASE_AFTER: Duration = Duration::from_millis(200);

/// Calls `enqueue` on another thread (with `context` bound) while its stream is held at `gate`,
/// and opens the gate from this thread [`RELEASE_AFTER`] after the call began. Answers what the
/// call returned, and whether it returned only after the gate opened. Bounded: a call that never
/// returns fails the test.
pub(crate) fn enqueue_then_open<T: Send + 'static>(
    context: &Context,
    gate: &Gate,
    enqueue: impl FnOnce() -> T + Send + 'static,
) -> (T, bool) {
    let began = Arc::new(AtomicBool::new(false));
    let answer: Arc<Mutex<Option<(T, Instant)>>> = Arc::default();
    let (thread_began, slot) = (Arc::clone(&began), Arc::clone(&answer));
    let context = context.clone();
    std::thread::spawn(move || {
        context.bind_to_thread().expect("the context binds");
        thread_began.store(true, Ordering::SeqCst);
        let value = enqueue();
        *lock(&slot) = Some((value, Instant::now()));
    });
    wait_until("the enqueuing thread", || began.load(Ordering::SeqCst));
    std::thread::sleep(RELEASE_AFTER);
    let opened = Instant::now();
    gate.open();
    wait_until("the enqueue, once the gate opened", || {
        lock(&answer).is_some()
    });
    let (value, returned) = lock(&answer).take().expect("the answer");
    (value, returned >= opened)
}

/// Records every status a stream callback is called with.
#[derive(Debug, Default)]
pub(crate) struct CallbackProbe {
    statuses: Mutex<Vec<CUresult>>,
}

impl CallbackProbe {
    /// A stream callback on `stream`, through `driver`'s table, that records into this probe.
    pub(crate) fn add_through(&'static self, driver: &Driver, stream: CUstream) -> CUresult {
        let data = ptr::from_ref(self).cast_mut().cast();
        // SAFETY: `record_status` only reads the leaked probe, from any thread.
        unsafe { driver.cuStreamAddCallback(stream, Some(record_status), data, 0) }
    }

    /// The statuses the callback was called with, once it has been called.
    #[track_caller]
    pub(crate) fn statuses_once_called(&self) -> Vec<CUresult> {
        wait_until("the stream callback", || !lock(&self.statuses).is_empty());
        lock(&self.statuses).clone()
    }
}

unsafe extern "C" fn record_status(_stream: CUstream, status: CUresult, data: *mut c_void) {
    // SAFETY: added with a pointer to a leaked `CallbackProbe`.
    let probe = unsafe { &*data.cast::<CallbackProbe>() };
    lock(&probe.statuses).push(status);
}

/// Adds a stream callback on `stream` that records into `probe`, which must succeed.
#[track_caller]
pub(crate) fn add_callback(stream: CUstream, probe: &'static CallbackProbe) {
    ok("cuStreamAddCallback", probe.add_through(driver(), stream));
}

/// `cuStreamGetId` of `stream`, which must succeed.
#[track_caller]
pub(crate) fn stream_id(table: &Driver, stream: CUstream) -> u64 {
    let mut id = 0;
    // SAFETY: a live stream or a special handle of the current context; a valid out-pointer.
    ok("cuStreamGetId", unsafe {
        table.cuStreamGetId(stream, &mut id)
    });
    id
}

pub(crate) fn query(stream: CUstream) -> CUresult {
    // SAFETY: a live stream or a special handle, with the context current.
    unsafe { driver().cuStreamQuery(stream) }
}

pub(crate) fn synchronize(stream: CUstream) -> CUresult {
    // SAFETY: as above.
    unsafe { driver().cuStreamSynchronize(stream) }
}

pub(crate) fn record(event: &Event, stream: CUstream) {
    // SAFETY: a live event and a live stream of its context.
    ok("cuEventRecord", unsafe {
        driver().cuEventRecord(event.as_raw(), stream)
    });
}

pub(crate) fn event_query(event: CUevent) -> CUresult {
    // SAFETY: a live event.
    unsafe { driver().cuEventQuery(event) }
}

pub(crate) fn elapsed_ms(start: &Event, end: &Event) -> (CUresult, f32) {
    let mut milliseconds = f32::NAN;
    // SAFETY: live events and a valid out-pointer.
    let result =
        unsafe { driver().cuEventElapsedTime_v2(&mut milliseconds, start.as_raw(), end.as_raw()) };
    (result, milliseconds)
}

pub(crate) const SUCCESS: CUresult = CUresult::CUDA_SUCCESS;
pub(crate) const NONE: CUstreamCaptureStatus = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
pub(crate) const ACTIVE: CUstreamCaptureStatus =
    CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE;
pub(crate) const INVALIDATED: CUstreamCaptureStatus =
    CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED;
pub(crate) const GLOBAL: CUstreamCaptureMode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL;
pub(crate) const RELAXED: CUstreamCaptureMode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;

/// What a user object's destructor saw; also counts the runs of a host node next to it.
///
/// A test announces each release step with [`DestructorProbe::release`] just before making it,
/// and the destructor records the step it ran after: that it ran only after the last step does
/// not depend on how soon the driver's destructor thread gets to it.
#[derive(Debug)]
pub(crate) struct DestructorProbe {
    runs: AtomicUsize,
    thread: Mutex<Option<ThreadId>>,
    pub(crate) node_runs: AtomicUsize,
    pub(crate) node_thread: Mutex<Option<ThreadId>>,
    step: Mutex<&'static str>,
    seen: Mutex<Option<(&'static str, usize)>>,
}

impl DestructorProbe {
    pub(crate) fn new() -> &'static DestructorProbe {
        leak(DestructorProbe {
            runs: AtomicUsize::new(0),
            thread: Mutex::new(None),
            node_runs: AtomicUsize::new(0),
            node_thread: Mutex::new(None),
            step: Mutex::new("created"),
            seen: Mutex::new(None),
        })
    }

    /// A host function that counts its runs and remembers its thread.
    pub(crate) fn node(&'static self) -> impl Fn() + Send + Sync + 'static {
        move || {
            *lock(&self.node_thread) = Some(std::thread::current().id());
            self.node_runs.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Says that the test is about to make the release step `step`.
    pub(crate) fn release(&self, step: &'static str) {
        *lock(&self.step) = step;
    }

    pub(crate) fn runs(&self) -> usize {
        count(&self.runs)
    }

    /// The release step the destructor ran after, and how many node runs it saw.
    pub(crate) fn seen(&self) -> Option<(&'static str, usize)> {
        *lock(&self.seen)
    }

    pub(crate) fn thread(&self) -> ThreadId {
        lock(&self.thread).expect("the destructor recorded its thread")
    }
}

unsafe extern "C" fn record_destruction(data: *mut c_void) {
    // SAFETY: created with a pointer to a leaked `DestructorProbe`.
    let probe = unsafe { &*data.cast::<DestructorProbe>() };
    *lock(&probe.seen) = Some((*lock(&probe.step), count(&probe.node_runs)));
    *lock(&probe.thread) = Some(std::thread::current().id());
    probe.runs.fetch_add(1, Ordering::SeqCst);
}

/// A user object owning `probe`, with `references` references held by the caller.
pub(crate) fn user_object(probe: &'static DestructorProbe, references: u32) -> CUuserObject {
    let mut object = ptr::null_mut();
    let data = ptr::from_ref(probe).cast_mut().cast();
    // SAFETY: a valid out-pointer; the destructor only touches the leaked probe, on any thread.
    ok("cuUserObjectCreate", unsafe {
        driver().cuUserObjectCreate(
            &mut object,
            data,
            Some(record_destruction),
            references,
            CUuserObject_flags::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC.0,
        )
    });
    object
}

pub(crate) fn graph_retain(graph: &Graph, object: CUuserObject, flags: u32) {
    // SAFETY: a live graph and a live user object; moving takes one of the caller's references.
    ok("cuGraphRetainUserObject", unsafe {
        driver().cuGraphRetainUserObject(graph.0, object, 1, flags)
    });
}

pub(crate) fn release(object: CUuserObject, references: u32) {
    // SAFETY: a live user object; the caller holds the references it releases.
    ok("cuUserObjectRelease", unsafe {
        driver().cuUserObjectRelease(object, references)
    });
}

pub(crate) const MOVE: u32 = CUuserObjectRetain_flags::CU_GRAPH_USER_OBJECT_MOVE.0;

/// Before a test checks that a destructor has *not* run: a user object released now has been
/// destroyed when this returns. Where destructors run in turn on one driver thread (the software
/// driver's), one the driver had wrongly scheduled earlier has run too.
pub(crate) fn destructor_round_trip() {
    let sentinel = DestructorProbe::new();
    release(user_object(sentinel, 1), 1);
    wait_until("a released user object's destructor", || {
        sentinel.runs() == 1
    });
}

pub(crate) fn event_synchronize(event: &Event) -> CUresult {
    // SAFETY: a live event.
    unsafe { driver().cuEventSynchronize(event.as_raw()) }
}

/// Mapped host memory for stream memory operations: a 32-bit word, and a 64-bit one aligned to 8
/// bytes as they require.
pub(crate) struct MemOpWords {
    words: MappedWords,
    wide: usize,
}

impl MemOpWords {
    pub(crate) fn new(context: &Context) -> MemOpWords {
        let words = MappedWords::new(context, 4);
        let wide = if words.device_address(1).is_multiple_of(8) {
            1
        } else {
            2
        };
        MemOpWords { words, wide }
    }

    pub(crate) fn narrow_address(&self) -> CUdeviceptr {
        self.words.device_address(0)
    }

    pub(crate) fn narrow(&self) -> u32 {
        self.words.get(0)
    }

    pub(crate) fn set_narrow(&self, value: u32) {
        self.words.set(0, value);
    }

    pub(crate) fn wide_address(&self) -> CUdeviceptr {
        self.words.device_address(self.wide)
    }

    /// The 64-bit word, as two halves (little-endian): read only while no stream writes it.
    pub(crate) fn wide(&self) -> u64 {
        u64::from(self.words.get(self.wide)) | u64::from(self.words.get(self.wide + 1)) << 32
    }

    /// Writes the 64-bit word from the host, high half first: where the high half stays the same,
    /// as in these tests, a stream reading between the two writes sees the old or the new value.
    pub(crate) fn set_wide(&self, value: u64) {
        self.words.set(self.wide + 1, (value >> 32) as u32);
        self.words.set(self.wide, value as u32);
    }
}

/// One operation of a batch: a 32-bit write or wait of `value` at `address`.
pub(crate) fn batched(
    operation: CUstreamBatchMemOpType,
    address: CUdeviceptr,
    value: u32,
    flags: u32,
) -> CUstreamBatchMemOpParams {
    let mut op = CUstreamBatchMemOpParams::default();
    // The write's and the wait's parameters share one layout; the tag says which it is.
    op.writeValue.operation = operation;
    op.writeValue.address = address;
    op.writeValue.__bindgen_anon_1.value = value;
    op.writeValue.flags = flags;
    op
}

/// One operation of a batch on a 64-bit word: a write or wait of `value` at `address`.
pub(crate) fn batched_wide(
    operation: CUstreamBatchMemOpType,
    address: CUdeviceptr,
    value: u64,
    flags: u32,
) -> CUstreamBatchMemOpParams {
    let mut op = batched(operation, address, 0, flags);
    op.writeValue.__bindgen_anon_1.value64 = value;
    op
}

/// What an operation of a batch says: its type, address, value and flags (not `alias`, which is
/// the driver's own).
pub(crate) fn described(
    op: &CUstreamBatchMemOpParams,
) -> (CUstreamBatchMemOpType, CUdeviceptr, u64, u32) {
    // SAFETY: every member of the union begins with the operation; the write's and the wait's
    // members, the only ones these tests make, share one layout of plain integers.
    let fields = unsafe { op.writeValue };
    let wide = [
        CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_64,
        CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WAIT_VALUE_64,
    ]
    .contains(&fields.operation);
    // SAFETY: as above; a 64-bit operation's value is `value64`, a 32-bit one's `value`.
    let value = unsafe {
        if wide {
            fields.__bindgen_anon_1.value64
        } else {
            u64::from(fields.__bindgen_anon_1.value)
        }
    };
    (fields.operation, fields.address, value, fields.flags)
}

/// A batch node's parameters for `ops` in the current context (the suite's), no flags.
pub(crate) fn batch_params(ops: &mut [CUstreamBatchMemOpParams]) -> CUDA_BATCH_MEM_OP_NODE_PARAMS {
    CUDA_BATCH_MEM_OP_NODE_PARAMS {
        ctx: current_context().as_raw(),
        count: u32::try_from(ops.len()).expect("a short batch"),
        paramArray: ops.as_mut_ptr(),
        flags: 0,
    }
}

/// Adds to `graph` a batch node of `ops` after `dependencies` (`cuGraphAddBatchMemOpNode`),
/// which must succeed.
#[track_caller]
pub(crate) fn add_batch_node(
    graph: &Graph,
    dependencies: &[CUgraphNode],
    ops: &mut [CUstreamBatchMemOpParams],
) -> CUgraphNode {
    let params = batch_params(ops);
    let mut node = ptr::null_mut();
    // SAFETY: a live graph, nodes of it, and parameters whose operations name mapped memory of
    // the context that outlives the graph's launches.
    ok("cuGraphAddBatchMemOpNode", unsafe {
        driver().cuGraphAddBatchMemOpNode(
            &mut node,
            graph.0,
            dependencies.as_ptr(),
            dependencies.len(),
            &params,
        )
    });
    node
}

/// Device memory, freed on drop. Tests that use it run alone: allocating can be refused by another
/// test's global-mode capture, and freeing waits for the whole context.
pub(crate) struct DeviceMemory(pub(crate) CUdeviceptr);

impl DeviceMemory {
    /// `bytes` of device memory in the current context.
    pub(crate) fn new(bytes: usize) -> DeviceMemory {
        let mut address = 0;
        // SAFETY: a valid out-pointer; the context is current.
        ok("cuMemAlloc_v2", unsafe {
            driver().cuMemAlloc_v2(&mut address, bytes)
        });
        DeviceMemory(address)
    }

    /// Its first four words, copied back to the host (`cuMemcpyDtoH_v2`, on the legacy stream).
    pub(crate) fn words(&self) -> [u32; 4] {
        let mut words = [0u32; 4];
        // SAFETY: 16 bytes of this allocation into a live host array.
        ok("cuMemcpyDtoH_v2", unsafe {
            driver().cuMemcpyDtoH_v2(words.as_mut_ptr().cast(), self.0, 16)
        });
        words
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAlloc_v2 and freed once, here.
        let _ = unsafe { driver().cuMemFree_v2(self.0) };
    }
}

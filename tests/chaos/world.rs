//! What a sequence has made and shares between its workers: contexts, streams with their
//! progress words, gates, futures. Steps name objects by a small number taken modulo how many
//! there are, so that every sequence proptest makes or shrinks is valid.

use cuda_host::{Context, Stream};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use suite::MappedWords;

/// The harness's pinned words (progress words and gates), taken and given back across
/// sequences; a word a failed context's stream may still wait on is never given back.
pub struct Words {
    words: MappedWords,
    free: Mutex<Vec<usize>>,
    /// Given back, but a stream may still have to read or write them.
    retired: Mutex<Vec<usize>>,
}

const WORDS: usize = 1 << 16;

impl Words {
    /// The process's words, made on first use in `context`'s device.
    pub fn get(context: &Context) -> &'static Words {
        static WORDS_OF_PROCESS: OnceLock<Words> = OnceLock::new();
        WORDS_OF_PROCESS.get_or_init(|| Words {
            words: MappedWords::new(context, WORDS),
            free: Mutex::new((0..WORDS).rev().collect()),
            retired: Mutex::new(Vec::new()),
        })
    }

    fn take(&self) -> usize {
        let index = self
            .free
            .lock()
            .unwrap()
            .pop()
            .expect("the harness's words are used up");
        self.words.set(index, 0);
        index
    }

    /// Gives a word back for reuse once every stream of the run passed what it enqueued
    /// reading or writing it: at the next [`recycle`](Self::recycle).
    fn give_back(&self, index: usize) {
        self.retired.lock().unwrap().push(index);
    }

    /// Makes the words given back since the last call free again. Only once no stream can still
    /// read or write them: after a synchronize of every context the run used.
    pub fn recycle(&self) {
        let retired = std::mem::take(&mut *self.retired.lock().unwrap());
        self.free.lock().unwrap().extend(retired);
    }
}

/// Runs `call` (raw driver calls on `stream`) with the stream's context current where its
/// handle needs it (the legacy and per-thread streams name the current context's), and the
/// thread's own current context back afterwards: the harness's calls leave the context a step
/// made current alone, as a library's would. `None` when the context cannot be made current.
pub fn in_stream_context<T>(stream: &Stream, call: impl FnOnce() -> T) -> Option<T> {
    let driver = stream.context().driver();
    let special = stream.as_raw() == cuda_host_sys::CU_STREAM_LEGACY
        || stream.as_raw() == cuda_host_sys::CU_STREAM_PER_THREAD;
    if !special {
        return Some(call());
    }
    let mut previous = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    let got = unsafe { driver.cuCtxGetCurrent(&mut previous) };
    if got != cuda_host_sys::CUresult::CUDA_SUCCESS {
        return None;
    }
    // SAFETY: a live context of this driver.
    let set = unsafe { driver.cuCtxSetCurrent(stream.context().as_raw()) };
    if set != cuda_host_sys::CUresult::CUDA_SUCCESS {
        return None;
    }
    let answer = call();
    // SAFETY: what was current a moment ago (it may have been destroyed since: then it stays
    // unset, as a library's restore would fail too).
    let _ = unsafe { driver.cuCtxSetCurrent(previous) };
    Some(answer)
}

/// An operation on a stream, by the software driver's numbering (`cuswStreamOperations`): the
/// one enqueued next after [`Operation::next_on`] looked, or a later one.
#[derive(Debug, Clone, Copy)]
pub struct Operation {
    /// The stream's `cuStreamGetId`.
    stream: u64,
    number: u64,
}

impl Operation {
    /// The number the next operation enqueued on `stream` gets at least; `None` for a
    /// per-thread stream (another stream on each thread) or where the stream cannot be named.
    pub fn next_on(stream: &StreamEntry) -> Option<Operation> {
        if stream.kind == StreamKind::PerThread {
            return None;
        }
        let controls = suite::software::controls()?;
        let driver = stream.stream.context().driver();
        let mut id = 0;
        let named = in_stream_context(&stream.stream, || {
            // SAFETY: a live stream, or a special handle with its context current; a valid
            // out-pointer.
            unsafe { driver.cuStreamGetId(stream.stream.as_raw(), &mut id) }
        })?;
        if named != cuda_host_sys::CUresult::CUDA_SUCCESS {
            return None;
        }
        let (enqueued, _) = controls.stream_operations(id)?;
        Some(Operation {
            stream: id,
            number: enqueued + 1,
        })
    }

    /// Whether the stream completed it (or is gone, done with everything).
    pub fn completed(self) -> bool {
        suite::software::controls()
            .and_then(|controls| controls.stream_operations(self.stream))
            .is_none_or(|(_, completed)| completed >= self.number)
    }
}

/// How far a stream got: the last marker its stream wrote. A marker is a 32-bit write in the
/// stream (`cuMemsetD32Async` to a mapped word), enqueued right before work whose completion a
/// check later needs to know about.
pub struct Progress {
    pub name: String,
    words: &'static Words,
    word: usize,
    /// The last marker enqueued; locked from taking a number to enqueueing it, so that markers
    /// reach the stream in increasing order whichever workers enqueue them.
    next: Mutex<u32>,
    /// Whether a marker may still be written (a failed context's stream may not write, but it
    /// may still read the word: it is not given back).
    keep: AtomicBool,
}

impl Progress {
    fn new(name: String, words: &'static Words) -> Progress {
        Progress {
            name,
            words,
            word: words.take(),
            next: Mutex::new(0),
            keep: AtomicBool::new(false),
        }
    }

    /// Enqueues the next marker on `stream`: `Some(marker)` once the stream has it, `None` when a
    /// capture took it (the stream captures) or the driver refused it.
    pub fn mark(&self, stream: &Stream) -> Option<u32> {
        // Work on a capturing stream is captured, and on the legacy stream while a blocking
        // stream of its context captures, it would invalidate that capture: no marker then.
        if !matches!(stream.capture_state(), Ok(None)) {
            return None;
        }
        let mut next = self.next.lock().unwrap();
        let marker = *next + 1;
        let driver = stream.context().driver();
        let result = in_stream_context(stream, || {
            // SAFETY: the word is mapped memory of the stream's device, alive for the process.
            unsafe {
                driver.cuMemsetD32Async(
                    self.words.words.device_address(self.word),
                    marker,
                    1,
                    stream.as_raw(),
                )
            }
        })?;
        if driver.check("cuMemsetD32Async", result).is_err() {
            return None;
        }
        *next = marker;
        drop(next);
        match stream.capture_state() {
            Ok(None) => Some(marker),
            _ => None,
        }
    }

    /// The last marker the stream wrote.
    pub fn seen(&self) -> u32 {
        self.words.words.get(self.word)
    }

    /// The last marker the stream wrote, once it is `marker` or later or `lag` passed.
    pub fn seen_within(&self, marker: u32, lag: std::time::Duration) -> u32 {
        let deadline = std::time::Instant::now() + lag;
        loop {
            let seen = self.seen();
            if seen >= marker || std::time::Instant::now() > deadline {
                return seen;
            }
            std::hint::spin_loop();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if !self.keep.load(Ordering::SeqCst) {
            self.words.give_back(self.word);
        }
    }
}

/// How a context value was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContextKind {
    /// The device's primary context, retained again.
    Primary,
    /// The primary context's handle, borrowed (`Context::borrow_raw`).
    Borrowed,
    /// A fresh context of the software driver's, which a step may fail.
    Fresh,
}

/// A context value of the sequence.
pub struct ContextEntry {
    /// Its number in the sequence (never reused, unlike its address).
    pub id: u64,
    pub name: String,
    pub context: Context,
    pub kind: ContextKind,
    /// Whether a step failed it (a sticky error).
    pub failed: AtomicBool,
}

/// How a stream was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    NonBlocking,
    Blocking,
    /// The context's legacy stream.
    Legacy,
    /// The context's per-thread default stream (of whichever thread uses it).
    PerThread,
}

/// A stream of the sequence.
pub struct StreamEntry {
    /// Its number in the sequence (never reused, unlike its address).
    pub id: u64,
    pub name: String,
    pub stream: Stream,
    pub context: Arc<ContextEntry>,
    pub kind: StreamKind,
    pub progress: Arc<Progress>,
    /// The gates closed in front of work on it (its own, and for the legacy stream and blocking
    /// streams, those of the context's other blocking streams and legacy stream: the legacy
    /// stream orders them).
    pub gates: Mutex<Vec<u64>>,
    /// Captures of it a worker began (through a builder, or as other code): a capture armed at
    /// a driver call is another.
    pub captures: AtomicU32,
}

impl StreamEntry {
    /// Whether work enqueued on it now may wait for a gate a later step opens.
    pub fn held(&self, world: &World) -> bool {
        world.gates_holding(self)
    }

    /// Whether a step failed its context.
    pub fn context_failed(&self) -> bool {
        self.context.failed.load(Ordering::SeqCst)
    }
}

/// A closed (or opened) gate: streams wait on its word until a step opens it.
pub struct GateEntry {
    pub id: u64,
    word: usize,
    pub stream: Arc<StreamEntry>,
    pub open: bool,
}

/// A future of a stream point, not yet completed or dropped.
pub struct PendingPoint {
    pub name: String,
    pub point: cuda_host::points::StreamPoint,
    pub stream: Arc<StreamEntry>,
    /// The marker enqueued right before the point, when the stream has it.
    pub marker: Option<u32>,
}

/// Everything a sequence made that its workers share.
pub struct World {
    pub words: &'static Words,
    /// The context every sequence may use without making one: the primary context of device 0,
    /// held for the whole run, as a long-lived application holds it.
    pub base: Context,
    pub contexts: Mutex<Vec<Arc<ContextEntry>>>,
    pub streams: Mutex<Vec<Arc<StreamEntry>>>,
    pub gates: Mutex<Vec<GateEntry>>,
    pub points: Mutex<Vec<PendingPoint>>,
    next_name: AtomicU64,
    /// Whether driver failures are armed now (a refused operation is then no violation).
    pub faults_armed: AtomicBool,
    /// Whether failures of destroys were armed ([`crate::plan::DESTROYS`]): an operation may
    /// then be refused with the error a `Drop` left for the context's next call.
    pub destroy_failures_armed: AtomicBool,
    /// How many failures of `cuStreamDestroy_v2` were armed: as many streams may stay alive.
    pub stream_destroy_failures: AtomicU64,
    /// Whether a capture begun at a driver call may be going on (armed and not seen ended).
    pub capture_armed: AtomicBool,
    /// The stream a capture is armed to begin on at a driver call, until the runner ended it.
    pub armed: Mutex<Option<Arc<StreamEntry>>>,
    /// Captures open: through builders and by other code.
    pub captures_open: AtomicUsize,
    /// Changes of `captures_open` and `capture_armed`: a step during which they moved may have
    /// met a capture, though none is open before or after it.
    pub capture_changes: AtomicU64,
    /// The streams steps used, for the runner to tell what they touched.
    used: Mutex<Vec<Arc<StreamEntry>>>,
    /// Captures other code began, for the runner to note the steps that may break them.
    pub foreign: Mutex<Vec<crate::workers::ForeignWatch>>,
}

impl World {
    pub fn new(base: &Context) -> World {
        let world = World {
            words: Words::get(base),
            base: base.clone(),
            contexts: Mutex::new(Vec::new()),
            streams: Mutex::new(Vec::new()),
            gates: Mutex::new(Vec::new()),
            points: Mutex::new(Vec::new()),
            next_name: AtomicU64::new(0),
            faults_armed: AtomicBool::new(false),
            destroy_failures_armed: AtomicBool::new(false),
            stream_destroy_failures: AtomicU64::new(0),
            capture_armed: AtomicBool::new(false),
            armed: Mutex::new(None),
            captures_open: AtomicUsize::new(0),
            capture_changes: AtomicU64::new(0),
            foreign: Mutex::new(Vec::new()),
            used: Mutex::new(Vec::new()),
        };
        world.contexts.lock().unwrap().push(Arc::new(ContextEntry {
            id: u64::MAX,
            name: "context 0 (the base primary context)".to_owned(),
            context: base.clone(),
            kind: ContextKind::Primary,
            failed: AtomicBool::new(false),
        }));
        world
    }

    /// Notes a capture opening (`true`) or closed (`false`).
    pub fn capture_opens(&self, opens: bool) {
        self.capture_changes.fetch_add(1, Ordering::SeqCst);
        if opens {
            self.captures_open.fetch_add(1, Ordering::SeqCst);
        } else {
            self.captures_open.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Arms (`true`) or forgets (`false`) a capture at a driver call.
    pub fn arm_capture(&self, armed: bool) {
        self.capture_changes.fetch_add(1, Ordering::SeqCst);
        self.capture_armed.store(armed, Ordering::SeqCst);
    }

    /// Arms a capture of `stream` in `mode` that the call of `entry` after `calls_before` others,
    /// on any thread, begins (the software driver's control), noted as the one armed until the
    /// runner ends it.
    pub fn arm_capture_at_call(
        &self,
        controls: &suite::software::Controls,
        entry: &std::ffi::CStr,
        calls_before: u32,
        stream: &Arc<StreamEntry>,
        mode: cuda_host_sys::CUstreamCaptureMode,
    ) {
        self.arm_capture(true);
        *self.armed.lock().unwrap() = Some(Arc::clone(stream));
        controls.begin_capture_at_call(entry, calls_before, &stream.stream, mode);
    }

    /// Whether the capture armed at a driver call is of `stream`.
    pub fn armed_on(&self, stream: &Arc<StreamEntry>) -> bool {
        self.armed
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|armed| Arc::ptr_eq(armed, stream))
    }

    /// Whether a capture is open or armed now.
    pub fn any_capture(&self) -> bool {
        self.captures_open.load(Ordering::SeqCst) != 0 || self.capture_armed.load(Ordering::SeqCst)
    }

    /// A fresh number for an object's name.
    pub fn number(&self) -> u64 {
        self.next_name.fetch_add(1, Ordering::Relaxed)
    }

    pub fn context(&self, index: u8) -> Arc<ContextEntry> {
        let contexts = self.contexts.lock().unwrap();
        Arc::clone(&contexts[usize::from(index) % contexts.len()])
    }

    pub fn add_context(&self, context: Context, kind: ContextKind) -> Arc<ContextEntry> {
        let id = self.number();
        let entry = Arc::new(ContextEntry {
            id,
            name: format!("context {id} ({kind:?})"),
            context,
            kind,
            failed: AtomicBool::new(false),
        });
        self.contexts.lock().unwrap().push(Arc::clone(&entry));
        entry
    }

    /// Takes a context value out (never the base one), with the streams made from it.
    pub fn remove_context(&self, index: u8) -> Option<(Arc<ContextEntry>, Vec<Arc<StreamEntry>>)> {
        let mut contexts = self.contexts.lock().unwrap();
        if contexts.len() < 2 {
            return None;
        }
        let at = 1 + usize::from(index) % (contexts.len() - 1);
        let context = contexts.remove(at);
        drop(contexts);
        let mut streams = self.streams.lock().unwrap();
        let (gone, kept) = streams
            .drain(..)
            .partition(|stream| Arc::ptr_eq(&stream.context, &context));
        *streams = kept;
        Some((context, gone))
    }

    /// The `index`-th stream (modulo how many there are), noted as used by the step.
    pub fn stream(&self, index: u8) -> Option<Arc<StreamEntry>> {
        let streams = self.streams.lock().unwrap();
        let stream =
            (!streams.is_empty()).then(|| Arc::clone(&streams[usize::from(index) % streams.len()]));
        drop(streams);
        if let Some(stream) = &stream {
            self.used.lock().unwrap().push(Arc::clone(stream));
        }
        stream
    }

    /// Notes `stream` as used by the step, as [`stream`](Self::stream) does.
    pub fn use_stream(&self, stream: &Arc<StreamEntry>) {
        self.used.lock().unwrap().push(Arc::clone(stream));
    }

    /// The streams steps used since the last call.
    pub fn take_used(&self) -> Vec<Arc<StreamEntry>> {
        std::mem::take(&mut *self.used.lock().unwrap())
    }

    pub fn add_stream(
        &self,
        stream: Stream,
        context: &Arc<ContextEntry>,
        kind: StreamKind,
        polled: bool,
    ) -> Arc<StreamEntry> {
        let id = self.number();
        let name = format!(
            "stream {id} ({kind:?}{}) of {}",
            if polled { ", polled" } else { "" },
            context.name
        );
        let entry = Arc::new(StreamEntry {
            id,
            progress: Arc::new(Progress::new(name.clone(), self.words)),
            name,
            stream,
            context: Arc::clone(context),
            kind,
            gates: Mutex::new(Vec::new()),
            captures: AtomicU32::new(0),
        });
        self.streams.lock().unwrap().push(Arc::clone(&entry));
        entry
    }

    pub fn remove_stream(&self, index: u8) -> Option<Arc<StreamEntry>> {
        let mut streams = self.streams.lock().unwrap();
        if streams.is_empty() {
            return None;
        }
        let at = usize::from(index) % streams.len();
        Some(streams.remove(at))
    }

    /// Removes `stream` itself, if it is still listed.
    pub fn remove_this_stream(&self, stream: &Arc<StreamEntry>) -> bool {
        let mut streams = self.streams.lock().unwrap();
        let before = streams.len();
        streams.retain(|listed| !Arc::ptr_eq(listed, stream));
        streams.len() != before
    }

    /// Closes a new gate in front of `stream`'s later work: `None` when the driver refuses the
    /// wait (a failed context, an injected failure).
    pub fn hold(&self, stream: &Arc<StreamEntry>) -> Option<u64> {
        let word = self.words.take();
        let id = self.number();
        let driver = stream.stream.context().driver();
        let waits = in_stream_context(&stream.stream, || {
            // SAFETY: the word is mapped memory of the stream's device, alive for the process.
            unsafe {
                driver.cuStreamWaitValue32_v2(
                    stream.stream.as_raw(),
                    self.words.words.device_address(word),
                    1,
                    cuda_host_sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ.0,
                )
            }
        }) == Some(cuda_host_sys::CUresult::CUDA_SUCCESS);
        if !waits {
            self.words.give_back(word);
            return None;
        }
        stream.gates.lock().unwrap().push(id);
        self.gates.lock().unwrap().push(GateEntry {
            id,
            word,
            stream: Arc::clone(stream),
            open: false,
        });
        Some(id)
    }

    /// Opens a closed gate (the `index`-th, modulo how many are closed): `false` when none is.
    pub fn open(&self, index: u8) -> bool {
        let mut gates = self.gates.lock().unwrap();
        let closed: Vec<usize> = (0..gates.len()).filter(|&at| !gates[at].open).collect();
        if closed.is_empty() {
            return false;
        }
        let gate = &mut gates[closed[usize::from(index) % closed.len()]];
        self.words.words.set(gate.word, 1);
        gate.open = true;
        gate.stream
            .gates
            .lock()
            .unwrap()
            .retain(|&id| id != gate.id);
        true
    }

    /// Takes the gate `id`, still closed, out of the world's gates, so that it keeps its stream
    /// no more: for a step that drops the stream while the gate holds it, then opens the gate
    /// with [`open_forgotten`](Self::open_forgotten).
    pub fn forget_gate(&self, id: u64) -> Option<usize> {
        let mut gates = self.gates.lock().unwrap();
        let at = gates.iter().position(|gate| gate.id == id)?;
        let gate = gates.remove(at);
        gate.stream.gates.lock().unwrap().retain(|&held| held != id);
        Some(gate.word)
    }

    /// Opens a gate [`forget_gate`](Self::forget_gate) took; its word is free again once every
    /// stream passed it (`recycle`).
    pub fn open_forgotten(&self, word: usize) {
        self.words.words.set(word, 1);
        self.words.give_back(word);
    }

    /// Opens every gate.
    pub fn open_all(&self) {
        while self.open(0) {}
    }

    /// Whether work enqueued on `stream` now may wait for a closed gate: one of its own, or, for
    /// the legacy stream and blocking streams, one of its context's blocking or legacy streams
    /// (dropped ones included: their work still runs).
    fn gates_holding(&self, stream: &StreamEntry) -> bool {
        let orders_with_legacy = |kind| {
            matches!(
                kind,
                StreamKind::Blocking | StreamKind::Legacy | StreamKind::PerThread
            )
        };
        self.gates.lock().unwrap().iter().any(|gate| {
            !gate.open
                && (std::ptr::eq(&*gate.stream, stream)
                    || (orders_with_legacy(stream.kind)
                        && orders_with_legacy(gate.stream.kind)
                        && gate.stream.context.context.as_raw() == stream.context.context.as_raw()))
        })
    }

    /// Gives back the gates' words (at the end of a sequence); a failed context's stream may
    /// still wait on its gate: that word is kept.
    pub fn forget_gates(&self) {
        for gate in self.gates.lock().unwrap().drain(..) {
            if gate.stream.context_failed() {
                gate.stream.progress.keep.store(true, Ordering::SeqCst);
            } else {
                self.words.give_back(gate.word);
            }
        }
    }
}

//! Graph nodes the polled engine serves: a host node of a graph made as a batch of two stream
//! memory operations on a word of pinned, device-mapped memory, which the engine's servers answer
//! on every launch of the executable.
//!
//! **The protocol.** A graph replays constant values, so the node cannot number its runs as a
//! lane's batch does (`lanes`). Each executable has a word per engine node of its own, and the
//! node's batch is `write word = REQUESTED; wait until word == DONE`. The engine runs the node's
//! callable when the word holds [`REQUESTED`] and a launch of the executable is pending, then
//! writes [`DONE`]. The word keeps `DONE` between launches, and the next launch's write replaces
//! it: an executable's launches run one after another (the driver orders each behind the one
//! before, on whichever stream), so the word holds `REQUESTED` only while one launch waits at the
//! node, and the server, which writes `DONE` right after the run and reads the word only later,
//! never takes one request for two.
//!
//! **Pending launches.** The server polls a node's word only while a launch through
//! `GraphExec::launch` is pending on it: each launch queues the callable it must run (the one
//! the executable held at the launch, so that a callable replaced later runs from the next
//! launch on) on every engine node of the executable, and the server takes one at each request.
//! So an idle executable costs nothing, and a launch the engine was not told of (the driver's
//! `cuGraphLaunch` on the raw handle) waits at the node until a later launch's request is served
//! in its place. A callable the server ran stays with the slot until the node's next request:
//! the launch that ran it is still in flight after the run (the rest of its graph, and the wait
//! for [`DONE`]), and only the next launch's request, which the driver orders behind it, tells
//! that it finished; the executable's end (`close`) tells it too. The queued callables are
//! shared: whoever lets go of the last reference (the server at the next request or an abandon,
//! a caller's thread with the executable), the callable's record goes to the inbox of the thread
//! that made it (`GraphRecord`'s drop, one push), so no user `Drop` runs on the server, nor on a
//! thread that did not make the callable.
//!
//! **Failures.** Once the context's failure is seen, a pending launch never writes again: its
//! queued callables are let go unrun, as a lane's functions are.

use crate::launch::{ContextShared, GraphRecord, PinnedWord};
use crate::sync::lock;
use cuda_host_sys::{
    CUDA_BATCH_MEM_OP_NODE_PARAMS, CUdeviceptr, CUstreamBatchMemOpParams, CUstreamBatchMemOpType,
    CUstreamWaitValue_flags,
};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Slots retired, process-wide ([`NodeSlot::retire`]).
pub(super) static RETIRED_NODES: AtomicU64 = AtomicU64::new(0);

/// What an engine node's batch writes into its word when a launch reaches it.
pub(crate) const REQUESTED: u32 = 1;
/// What the engine writes once the node's callable ran, and what the batch waits for.
pub(crate) const DONE: u32 = 2;

/// The two operations of an engine node on the word at `device`: write `written`, then wait
/// until the word holds [`DONE`]. With `written == DONE` the batch waits for nothing (the
/// graph's own parameters, which no engine serves).
pub(crate) fn operations(device: CUdeviceptr, written: u32) -> [CUstreamBatchMemOpParams; 2] {
    let mut operations = [
        CUstreamBatchMemOpParams::default(),
        CUstreamBatchMemOpParams::default(),
    ];
    operations[0].writeValue.operation = CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_32;
    operations[0].writeValue.address = device;
    operations[0].writeValue.__bindgen_anon_1.value = written;
    operations[1].waitValue.operation = CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WAIT_VALUE_32;
    operations[1].waitValue.address = device;
    operations[1].waitValue.__bindgen_anon_1.value = DONE;
    operations[1].waitValue.flags = CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_EQ.0;
    operations
}

/// The parameters of a node running `operations` in `context`; they borrow the array.
pub(crate) fn node_params(
    context: &ContextShared,
    operations: &mut [CUstreamBatchMemOpParams; 2],
) -> CUDA_BATCH_MEM_OP_NODE_PARAMS {
    CUDA_BATCH_MEM_OP_NODE_PARAMS {
        ctx: context.raw(),
        count: 2,
        paramArray: operations.as_mut_ptr(),
        flags: 0,
    }
}

/// The address of the word an engine node's parameters name, if they are an engine node's
/// shape (a 32-bit write, then a 32-bit wait for [`DONE`] on the same word).
///
/// # Safety
/// `params.paramArray` must point to `params.count` operations.
pub(crate) unsafe fn word_of(params: &CUDA_BATCH_MEM_OP_NODE_PARAMS) -> Option<CUdeviceptr> {
    if params.count != 2 || params.paramArray.is_null() {
        return None;
    }
    // SAFETY: two operations, per the caller.
    let operations = unsafe { std::slice::from_raw_parts(params.paramArray, 2) };
    // SAFETY: every operation's first field is its type; the union's members share it.
    let (write, wait) = unsafe { (operations[0].writeValue, operations[1].waitValue) };
    let shaped = write.operation == CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_32
        && wait.operation == CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WAIT_VALUE_32
        && write.address == wait.address
        // SAFETY: a 32-bit wait's value is its 32-bit member.
        && unsafe { wait.__bindgen_anon_1.value } == DONE;
    shaped.then_some(write.address)
}

/// A callable an engine node runs: a graph's record, shared by the graph's node, the
/// executables that hold it and their pending launches. The last reference may go on any thread,
/// the server's too: the record then goes to the thread that made it.
pub(crate) struct NodeCallable(GraphRecord);

// SAFETY: a callable's or copied bytes' record: runs share it only by reference, and its
// payload is `Send + Sync` (a `HostCallable`) or bytes a C function reads.
unsafe impl Sync for NodeCallable {}

impl NodeCallable {
    pub(crate) fn new(record: GraphRecord) -> Arc<NodeCallable> {
        Arc::new(NodeCallable(record))
    }

    /// The record, as a graph's host node would run it.
    pub(crate) fn record(&self) -> &GraphRecord {
        &self.0
    }

    /// Runs it as the driver runs a graph's host node: marked, observed, every panic caught,
    /// and not at all once its context was seen failed.
    fn run(&self) {
        // SAFETY: the record is live while borrowed; graph records may run many times, on any
        // thread.
        unsafe { GraphRecord::host_fn()(self.0.user_data()) };
    }
}

/// One engine node of one executable: its word, and the callables its pending launches run.
pub(crate) struct NodeSlot {
    word: PinnedWord,
    context: Arc<ContextShared>,
    pending: Mutex<VecDeque<Arc<NodeCallable>>>,
    /// The callable the latest served request ran: its launch may still be in flight.
    ran: Mutex<Option<Arc<NodeCallable>>>,
    /// Whether a server has it on its list.
    pub(super) served: AtomicBool,
    /// Whether a capture may have taken a launch naming its word: a graph of other code's may
    /// write a request whenever it runs (see [`NodeSlot::retire`]).
    retired: AtomicBool,
}

// SAFETY: the word is pinned memory, accessed atomically from any thread; the rest is `Sync`.
unsafe impl Send for NodeSlot {}
// SAFETY: as above.
unsafe impl Sync for NodeSlot {}

impl NodeSlot {
    /// A slot on `word` of `context`, which it gives back when it goes; the word is set to
    /// [`DONE`].
    pub(crate) fn new(context: Arc<ContextShared>, word: PinnedWord) -> NodeSlot {
        let slot = NodeSlot {
            word,
            context,
            pending: Mutex::new(VecDeque::new()),
            ran: Mutex::new(None),
            served: AtomicBool::new(false),
            retired: AtomicBool::new(false),
        };
        slot.word().store(DONE, Ordering::Release);
        slot
    }

    fn word(&self) -> &AtomicU32 {
        // SAFETY: a pinned word of the context, 8-byte aligned, which lives while this slot
        // does (given back only when it goes).
        unsafe { &*self.word.host.cast::<AtomicU32>() }
    }

    /// The address the executable's node writes and waits on.
    pub(crate) fn device(&self) -> CUdeviceptr {
        self.word.device
    }

    pub(crate) fn context(&self) -> &Arc<ContextShared> {
        &self.context
    }

    /// Queues `callable` for a launch just enqueued.
    pub(crate) fn push(&self, callable: Arc<NodeCallable>) {
        lock(&self.pending).push_back(callable);
    }

    /// Runs the first pending callable if the node's word holds a request, and answers it.
    /// Whether one ran.
    pub(super) fn serve(&self) -> bool {
        if self.word().load(Ordering::Acquire) != REQUESTED {
            return false;
        }
        // A request: the launch before this one finished, so the callable it ran may go
        // (perhaps its last reference: its record goes to the thread that made it). Not on a
        // retired word, which a captured graph may request through at any time.
        if !self.is_retired() {
            let finished = lock(&self.ran).take();
            drop(finished);
        }
        let Some(callable) = lock(&self.pending).pop_front() else {
            if self.is_retired() {
                // A graph a capture made: its node completes without running.
                self.word().store(DONE, Ordering::Release);
                return true;
            }
            // A launch the engine was not told of: it waits for a later launch's turn.
            return false;
        };
        callable.run();
        self.word().store(DONE, Ordering::Release);
        // Kept while its launch may be in flight: until the next request, or the executable's end.
        *lock(&self.ran) = Some(callable);
        true
    }

    /// Lets go of every pending callable unrun: its executable is gone, so no request comes.
    pub(crate) fn close(&self) {
        let closed: Vec<_> = lock(&self.pending).drain(..).collect();
        drop(closed);
    }

    /// Lets go of the callable the latest request ran: its executable and its launches are gone.
    pub(crate) fn let_go_of_ran(&self) {
        let ran = lock(&self.ran).take();
        drop(ran);
    }

    /// Lets go of every pending callable unrun (the context failed). How many went.
    pub(super) fn abandon(&self) -> usize {
        let abandoned: Vec<_> = lock(&self.pending).drain(..).collect();
        abandoned.len()
    }

    /// Retires the slot: a capture may have taken a launch that names its word, so a graph of
    /// other code's may request a run whenever it runs. The launches pending run as ever; any
    /// request after them is answered without running, for as long as the process lives (its
    /// server never lets it go, and the word is never given back).
    pub(crate) fn retire(&self) {
        // Under the pending list's lock, as its server looks whether to let it go: either that
        // look sees it retired, or the server let it go before and the caller's hand-over
        // (`serve_node`) finds it unserved.
        let _pending = lock(&self.pending);
        if !self.retired.swap(true, Ordering::AcqRel) {
            RETIRED_NODES.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// Whether launches wait for their runs: a retired slot serves those queued before it
    /// retired, as ever.
    pub(super) fn has_pending(&self) -> bool {
        !lock(&self.pending).is_empty()
    }

    /// Whether no launch is pending and no graph may request a run; when so, the slot is marked
    /// unserved under the pending list's lock, so that a launch queued after is handed to a
    /// server again.
    pub(super) fn let_go_if_idle(&self) -> bool {
        let pending = lock(&self.pending);
        let idle = pending.is_empty() && !self.is_retired();
        if idle {
            self.served.store(false, Ordering::Release);
        }
        idle
    }
}

impl Drop for NodeSlot {
    fn drop(&mut self) {
        // No launch of the executable is left (the slot goes with it and with its launches), so
        // no stream touches the word any more; a retired slot's server never lets it go, so
        // this is never a retired word.
        self.context.release_pinned_word(self.word);
    }
}

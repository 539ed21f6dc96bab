//! Host nodes the polled engine serves (`crate::polled`'s nodes): a batch of two memory
//! operations in the graph, whose callable the engine runs on every launch of an executable made
//! through [`Graph::instantiate`](super::Graph::instantiate).
//!
//! **The graph's node.** In the graph itself the node writes [`DONE`] into a word of its own (its
//! *template* word) and waits for it: it waits for nothing. An executable made through cuda-host
//! gives each engine node a word of its own and sets its batch to request a run
//! (`cuGraphExecBatchMemOpNodeSetParams`), so that two executables of one graph never share a
//! word; an executable made any other way (the driver's instantiation of the raw graph, a child
//! graph node embedding it, an update from it) keeps the graph's batch: its engine nodes
//! complete without running their callables, and never leave a stream waiting.
//!
//! **Ownership.** The callable and the template word belong to the graph through a CUDA user
//! object, as a driver host node's record does (`user_object`): they live while any graph, clone
//! or executable holds the node, and go afterwards, the callable's record to the thread that
//! made it (`GraphRecord`). A child graph node embedding the graph is one of those holders:
//! NVIDIA's programming guide ("CUDA User Objects") has the embedded clone hold a copy of the
//! graph's references, and an executable of the parent those of its child graphs, so the template
//! word a parent's launch writes is never given back before both are gone. Each template word is
//! listed, so that the node found in a graph (by instantiation, [`Graph::host_nodes`]) leads
//! back to its callable; a word is listed while its template lives, and only a word cuda-host
//! allocated is ever listed.
//!
//! [`Graph::host_nodes`]: super::Graph::host_nodes

use super::user_object;
use crate::checked::checked;
use crate::error::{Error, Result};
use crate::handle::SendHandle;
use crate::launch::{ContextShared, GraphRecord, PinnedWord, nodes_of, unless_capture_forbids};
use crate::polled::{self, DONE, NodeCallable, NodeSlot, REQUESTED};
use crate::sync::lock;
use cuda_host_sys::{
    CUDA_BATCH_MEM_OP_NODE_PARAMS, CUdeviceptr, CUgraph, CUgraphExec, CUgraphNode, CUgraphNode_st,
    CUgraphNodeType, CUuserObject, CUuserObject_st, Driver,
};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The templates alive, by the device address of their word.
static TEMPLATES: Mutex<Vec<(CUdeviceptr, Weak<Template>)>> = Mutex::new(Vec::new());

/// A graph's engine node: its callable and its template word.
pub(crate) struct Template {
    callable: Arc<NodeCallable>,
    word: PinnedWord,
    context: Arc<ContextShared>,
    /// The user object through which the graph holds it (null until made).
    user_object: AtomicPtr<CUuserObject_st>,
}

// SAFETY: the word is pinned memory no host thread touches; the rest is `Send + Sync`.
unsafe impl Send for Template {}
// SAFETY: as above.
unsafe impl Sync for Template {}

impl Template {
    /// A template running `record` on `word` of `context` (which it gives back when it goes),
    /// listed.
    fn new(context: &Arc<ContextShared>, record: GraphRecord, word: PinnedWord) -> Arc<Template> {
        let callable = NodeCallable::new(record);
        let template = Arc::new(Template {
            callable,
            word,
            context: Arc::clone(context),
            user_object: AtomicPtr::new(ptr::null_mut()),
        });
        let mut templates = lock(&TEMPLATES);
        templates.retain(|(_, listed)| listed.strong_count() != 0);
        templates.push((word.device, Arc::downgrade(&template)));
        drop(templates);
        template
    }

    /// A template running `record` on a word of `context`.
    ///
    /// # Errors
    /// As [`allocate_word`]; `record` is then dropped as the reclaim rule allows (not here,
    /// where a capture may be open).
    fn allocate(context: &Arc<ContextShared>, record: GraphRecord) -> Result<Arc<Template>> {
        match allocate_word(context, "an engine node's word") {
            Ok(word) => Ok(Template::new(context, record, word)),
            Err(error) => {
                record.drop_soon();
                Err(error)
            }
        }
    }

    /// The callable the node runs.
    pub(crate) fn callable(&self) -> &Arc<NodeCallable> {
        &self.callable
    }

    /// The graph's batch: waits for nothing.
    fn operations(&self) -> [cuda_host_sys::CUstreamBatchMemOpParams; 2] {
        polled::operations(self.word.device, DONE)
    }

    /// The user object through which a graph holds it.
    fn user_object(&self) -> CUuserObject {
        self.user_object.load(Ordering::Acquire)
    }
}

impl Drop for Template {
    fn drop(&mut self) {
        let device = self.word.device;
        lock(&TEMPLATES)
            .retain(|(listed, template)| *listed != device || template.strong_count() != 0);
        // No graph or executable holds the node any more: no stream writes the word.
        self.context.release_pinned_word(self.word);
    }
}

/// A word of `context` for an engine node, where no builder capture forbids
/// allocating it.
fn allocate_word(context: &ContextShared, what: &'static str) -> Result<PinnedWord> {
    unless_capture_forbids(|| context.allocate_pinned_word())
        .ok_or(Error::AllocationInCapture { what })?
}

/// Words a capture's engine nodes take ([`GraphBuilder::begin_with_engine`]), reserved before
/// it began: a capture cannot allocate. Those left go back to the context with it.
///
/// [`GraphBuilder::begin_with_engine`]: super::GraphBuilder::begin_with_engine
pub(crate) struct ReservedWords {
    context: Arc<ContextShared>,
    words: Vec<PinnedWord>,
}

impl ReservedWords {
    /// `count` words of `context`.
    ///
    /// # Errors
    /// As [`allocate_word`].
    pub(crate) fn new(context: &Arc<ContextShared>, count: usize) -> Result<ReservedWords> {
        let words = unless_capture_forbids(|| context.allocate_pinned_words(count)).ok_or(
            Error::AllocationInCapture {
                what: "the words of a capture's engine nodes",
            },
        )??;
        Ok(ReservedWords {
            context: Arc::clone(context),
            words,
        })
    }

    /// A word for a node, if any is left.
    pub(crate) fn take(&mut self) -> Option<PinnedWord> {
        self.words.pop()
    }
}

impl Drop for ReservedWords {
    fn drop(&mut self) {
        for word in self.words.drain(..) {
            self.context.release_pinned_word(word);
        }
    }
}

impl std::fmt::Debug for ReservedWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReservedWords")
            .field("left", &self.words.len())
            .finish_non_exhaustive()
    }
}

/// Whether any engine node's template lives in the process (else no graph has one).
fn any_templates() -> bool {
    lock(&TEMPLATES)
        .iter()
        .any(|(_, template)| template.strong_count() != 0)
}

/// The template of `node` of a live graph, if it is an engine node of cuda-host's.
///
/// # Errors
/// The driver's error from `cuGraphNodeGetType` or `cuGraphBatchMemOpNodeGetParams`.
///
/// # Safety
/// `node` must be a node of a live graph, not used concurrently.
pub(crate) unsafe fn template_of(
    driver: &Driver,
    node: CUgraphNode,
) -> Result<Option<Arc<Template>>> {
    let mut kind = CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
    // SAFETY: per the caller; a valid out-pointer.
    unsafe { checked!(driver, cuGraphNodeGetType(node, &mut kind)) }?;
    if kind != CUgraphNodeType::CU_GRAPH_NODE_TYPE_BATCH_MEM_OP {
        return Ok(None);
    }
    let mut params = CUDA_BATCH_MEM_OP_NODE_PARAMS::default();
    // SAFETY: per the caller; a valid out-pointer. The array it points to is the node's, valid
    // until its parameters change, which they do not during this call.
    unsafe { checked!(driver, cuGraphBatchMemOpNodeGetParams(node, &mut params)) }?;
    // SAFETY: the driver's array holds `count` operations.
    let Some(device) = (unsafe { polled::word_of(&params) }) else {
        return Ok(None);
    };
    Ok(lock(&TEMPLATES)
        .iter()
        .filter(|(listed, _)| *listed == device)
        .find_map(|(_, template)| template.upgrade()))
}

/// Gives `graph` a user object holding `template`, then runs `add` with the template's batch;
/// if `add` fails, the graph lets go of it again.
///
/// # Errors
/// The driver's error from creating or retaining the user object, or the error of `add`.
///
/// # Safety
/// `graph` must be a live graph not used concurrently.
unsafe fn attach<T>(
    driver: &Driver,
    graph: CUgraph,
    template: &Arc<Template>,
    add: impl FnOnce(&mut [cuda_host_sys::CUstreamBatchMemOpParams; 2]) -> Result<T>,
) -> Result<T> {
    let object = user_object::create(driver, GraphRecord::holding(Arc::clone(template)))?;
    template.user_object.store(object, Ordering::Release);
    // SAFETY: per the caller; the fresh reference is ours.
    unsafe { user_object::move_into_graph(driver, graph, object)? };
    let mut operations = template.operations();
    let added = add(&mut operations);
    if added.is_err() {
        // SAFETY: the graph holds the reference moved to it above.
        unsafe { user_object::release_from_graph(driver, graph, object) };
    }
    added
}

/// Makes a template running `record` on a word of `context` and attaches it to `graph`
/// ([`attach`]), running `add` with the batch-node parameters of the template's batch (in
/// `context`).
///
/// # Errors
/// As [`Template::allocate`] and [`attach`], or the error of `add`.
///
/// # Safety
/// `graph` must be a live graph of `context` not used concurrently.
unsafe fn attach_node_params<T>(
    context: &Arc<ContextShared>,
    graph: CUgraph,
    record: GraphRecord,
    add: impl FnOnce(&CUDA_BATCH_MEM_OP_NODE_PARAMS) -> Result<T>,
) -> Result<T> {
    let template = Template::allocate(context, record)?;
    // SAFETY: per the caller.
    unsafe {
        attach(context.driver(), graph, &template, |operations| {
            // The parameters borrow `operations`, which outlive `add`.
            add(&polled::node_params(context, operations))
        })
    }
}

/// Adds to `graph` an engine node running `record`, after `dependencies`.
///
/// # Errors
/// As [`attach_node_params`]; the driver's error from `cuGraphAddBatchMemOpNode`.
///
/// # Safety
/// `graph` must be a live graph of `context` not used concurrently; `dependencies` nodes of it.
pub(crate) unsafe fn add_node(
    context: &Arc<ContextShared>,
    graph: CUgraph,
    dependencies: &[CUgraphNode],
    record: GraphRecord,
) -> Result<CUgraphNode> {
    // SAFETY: per the caller.
    unsafe {
        attach_node_params(context, graph, record, |params| {
            let mut node = ptr::null_mut();
            // SAFETY: per the caller; the parameters are read during the call (the driver
            // copies the operations).
            checked!(
                context.driver(),
                cuGraphAddBatchMemOpNode(
                    &mut node,
                    graph,
                    dependencies.as_ptr(),
                    dependencies.len(),
                    params,
                )
            )?;
            Ok(node)
        })
    }
}

/// Adds an engine node running `record` on `word` (of `context`, given back when the node goes)
/// to `graph`, which `stream` captures into, through the stream: the capture records its batch
/// as one node.
///
/// # Errors
/// As [`attach`], with `cuStreamBatchMemOp_v2`'s error.
///
/// # Safety
/// `graph` is the graph `stream`'s capture records into, and the capture does not end during
/// the call.
pub(crate) unsafe fn add_to_capture(
    context: &Arc<ContextShared>,
    stream: cuda_host_sys::CUstream,
    graph: CUgraph,
    record: GraphRecord,
    word: PinnedWord,
) -> Result<()> {
    let template = Template::new(context, record, word);
    let driver = context.driver();
    // SAFETY: per the caller.
    unsafe {
        attach(driver, graph, &template, |operations| {
            // SAFETY: a capturing stream: the batch becomes a node of the graph, and waits for
            // nothing when a graph made otherwise than through cuda-host runs it.
            Ok(checked!(
                driver,
                cuStreamBatchMemOp_v2(stream, 2, operations.as_mut_ptr(), 0)
            )?)
        })
    }
}

/// Replaces the callable of `node`, an engine node of `graph` with `old` as its template, by
/// `record`: the graph holds a new template and lets go of the old one (which lives on while
/// executables made before hold it).
///
/// # Errors
/// As [`attach_node_params`], with `cuGraphBatchMemOpNodeSetParams`'s error; the node is
/// unchanged then.
///
/// # Safety
/// `graph` must be a live graph of `context` not used concurrently, holding `node`.
pub(crate) unsafe fn replace(
    context: &Arc<ContextShared>,
    graph: CUgraph,
    node: CUgraphNode,
    old: &Template,
    record: GraphRecord,
) -> Result<()> {
    let driver = context.driver();
    // SAFETY: per the caller.
    unsafe {
        attach_node_params(context, graph, record, |params| {
            // SAFETY: a node of the live graph; the driver copies the operations.
            Ok(checked!(
                driver,
                cuGraphBatchMemOpNodeSetParams(node, params)
            )?)
        })?;
        // SAFETY: the graph holds that user object's reference.
        user_object::release_from_graph(driver, graph, old.user_object());
    }
    Ok(())
}

/// Whether a graph lives, shared with the executables made from it that have engine nodes: an
/// executable names a node of its graph (to give it a fresh word, [`ExecNode::refresh`]) only
/// under the lock and while the graph lives, which its drop ends under the same lock, before
/// the graph is destroyed.
#[derive(Clone, Debug)]
pub(crate) struct GraphLives(Arc<Mutex<bool>>);

impl GraphLives {
    pub(crate) fn new() -> GraphLives {
        GraphLives(Arc::new(Mutex::new(true)))
    }

    /// The graph is about to be destroyed.
    pub(crate) fn end(&self) {
        *lock(&self.0) = false;
    }
}

/// One engine node of an executable: the node, its slot, and the callable its launches run.
pub(crate) struct ExecNode {
    node: SendHandle<CUgraphNode_st>,
    slot: Arc<NodeSlot>,
    /// The node's slots retired before `slot`: each keeps the callable its latest request ran
    /// until the executable goes (their servers keep them for the life of the process).
    retired: Vec<Arc<NodeSlot>>,
    callable: Arc<NodeCallable>,
    /// Whether the graph holding `node` lives.
    graph: GraphLives,
}

impl ExecNode {
    pub(crate) fn node(&self) -> CUgraphNode {
        self.node.get()
    }

    /// Gives the node a fresh slot in `exec` if its slot was retired (a capture may have taken
    /// a launch naming its word) and the graph it was made from lives (the driver names the
    /// node by its handle in that graph); after the graph went, the node keeps its retired slot
    /// and its launches complete without running it.
    ///
    /// # Errors
    /// As [`allocate_word`]; the driver's error from `cuGraphExecBatchMemOpNodeSetParams`. The
    /// node keeps its retired slot then.
    ///
    /// # Safety
    /// `exec` must be the live executable holding this node, not used concurrently.
    pub(crate) unsafe fn refresh(
        &mut self,
        context: &Arc<ContextShared>,
        exec: CUgraphExec,
    ) -> Result<()> {
        if !self.slot.is_retired() {
            return Ok(());
        }
        let lives = lock(&self.graph.0);
        if !*lives {
            return Ok(());
        }
        let word = allocate_word(context, "an executable's engine node word")?;
        let slot = Arc::new(NodeSlot::new(Arc::clone(context), word));
        // SAFETY: per the caller; the node is one of the graph `exec` was made from, which
        // lives while `lives` is held.
        unsafe { set_word(context, exec, self.node.get(), &slot) }?;
        drop(lives);
        let retired = std::mem::replace(&mut self.slot, slot);
        self.retired.push(retired);
        Ok(())
    }

    /// Retires the node's slot: a capture may have taken the launch just enqueued.
    pub(crate) fn retire(&self) {
        self.slot.retire();
        polled::serve_node(&self.slot);
    }

    /// Queues this node's callable for a launch just enqueued, and has a server serve it.
    pub(crate) fn launched(&self) {
        if self.slot.is_retired() {
            // Its graph went before the node could take a fresh word: a retired word is
            // answered without running, whoever requests.
            return;
        }
        self.slot.push(Arc::clone(&self.callable));
        polled::serve_node(&self.slot);
    }

    /// Runs `callable` from the next launch on; the old one is dropped with the last launch that
    /// runs it.
    pub(crate) fn set(&mut self, callable: Arc<NodeCallable>) -> Arc<NodeCallable> {
        std::mem::replace(&mut self.callable, callable)
    }
}

/// Makes `node` of `exec` request its runs through `slot`'s word, from the next launch on.
///
/// # Safety
/// `exec` must be a live executable not used concurrently, made from a graph holding `node`.
unsafe fn set_word(
    context: &ContextShared,
    exec: CUgraphExec,
    node: CUgraphNode,
    slot: &NodeSlot,
) -> Result<()> {
    let mut operations = polled::operations(slot.device(), REQUESTED);
    let params = polled::node_params(context, &mut operations);
    // SAFETY: per the caller; the driver copies the operations.
    Ok(unsafe {
        checked!(
            context.driver(),
            cuGraphExecBatchMemOpNodeSetParams(exec, node, &params)
        )
    }?)
}

impl Drop for ExecNode {
    fn drop(&mut self) {
        // The executable and its launches are gone: no launch will request a run, so callables
        // still queued (launches that never reached the node: an update gave it another graph's
        // parameters) go now, to the threads that made them.
        if !self.slot.is_retired() {
            self.slot.close();
        }
        // The callable the last launch ran, which a retired slot keeps too: no launch runs on.
        self.slot.let_go_of_ran();
        for retired in &self.retired {
            retired.let_go_of_ran();
        }
    }
}

/// Gives each engine node of `graph` a word of its own in `exec`, just instantiated from it,
/// starting the engine's servers if there is any.
///
/// # Errors
/// [`Error::ThreadStart`] when a server cannot start; [`Error::AllocationInCapture`] while a
/// builder capture forbids allocating a page of words; the driver's error.
///
/// # Safety
/// `graph` must be a live graph of `context` not used concurrently, `exec` an executable just
/// made from it, not launched yet.
pub(crate) unsafe fn prepare_exec(
    context: &Arc<ContextShared>,
    graph: CUgraph,
    lives: impl FnOnce() -> GraphLives,
    exec: CUgraphExec,
) -> Result<Vec<ExecNode>> {
    if !any_templates() {
        return Ok(Vec::new());
    }
    let driver = context.driver();
    // SAFETY: per the caller.
    let nodes = unsafe { nodes_of(driver, graph) }?;
    let mut prepared = Vec::new();
    let mut lives = Some(lives);
    let mut graph_lives: Option<GraphLives> = None;
    for node in nodes {
        // SAFETY: a node of the live graph.
        let Some(template) = (unsafe { template_of(driver, node) })? else {
            continue;
        };
        if prepared.is_empty() {
            polled::start()?;
        }
        let word = allocate_word(context, "an executable's engine node word")?;
        let slot = Arc::new(NodeSlot::new(Arc::clone(context), word));
        // SAFETY: a node of the graph `exec` was made from, which is not launched yet.
        unsafe { set_word(context, exec, node, &slot) }?;
        prepared.push(ExecNode {
            node: SendHandle::new(node),
            slot,
            retired: Vec::new(),
            callable: Arc::clone(template.callable()),
            graph: graph_lives
                .get_or_insert_with(|| lives.take().expect("called once")())
                .clone(),
        });
    }
    Ok(prepared)
}

//! Executable graphs, and the callables set on one executable's nodes.
//!
//! The graph's own callables are kept by the graph's user objects, which each executable
//! references from its instantiation until it and its launches are gone. A callable set on an
//! executable's node (`set_host_node_callable`) is the executable's own: it keeps it in an
//! [`ExecutableCallables`], which a user object of the executable holds, so that it lives while
//! the executable and its launches in flight can run it. A callable the executable set and then
//! replaced is released as soon as no launch in flight can run it: each launch records a fence
//! (an event) on its stream once the executable has callables of its own, and a replaced callable
//! waits for the fences of the launches before its replacement, one per stream (a stream's
//! launches finish in order). So replacing before every launch keeps a bounded number alive.
//!
//! Only a fence's query that succeeds tells that its launch finished. One that fails tells
//! nothing: refused while another thread captures (a query in the default capture interaction
//! mode is, and it invalidates that capture: fences are queried in the relaxed mode, where it is
//! neither), or answering the context's failure, after which the driver still calls the host
//! nodes queued before it. The callables waiting for it then stay until the executable is gone. A
//! fence a capture took (other code began capturing the stream during the launch) is never
//! queried: the query would invalidate that capture, and could answer "complete" once it ended
//! before the launch ran; the executable's replaced callables then stay until it is gone too.
//! Replaced callables go to the threads that set them, by the reclaim rule, like every record.

use super::engine_node::{self, ExecNode};
use super::graph::{Graph, HostNode};
use super::user_object;
use crate::checked::checked;
use crate::contain::{ensure_outside_host_function, holding_logs, logged};
use crate::error::{CaptureState, Error, Result};
use crate::handle::SendHandle;
use crate::launch::{
    ContextShared, GraphRecord, HostCallable, RelaxedCaptureMode, capture_state,
    ensure_not_capturing, outside_host_function, reclaim,
};
use crate::objects::{Context, Stream, destroy_later};
use crate::polled::NodeCallable;
use crate::query_events;
use cuda_host_sys::{
    CUDA_HOST_NODE_PARAMS, CUevent_st, CUgraphExec, CUgraphExecUpdateResultInfo, CUgraphNode,
    CUgraphNode_st, CUstream, CUstream_st,
};
use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// An instantiated graph, launched on streams. It keeps the graph's callables alive on its own:
/// the graph may be dropped first.
#[derive(Debug)]
pub struct GraphExec {
    context: Context,
    raw: CUgraphExec,
    callables: Arc<Mutex<ExecutableCallables>>,
    // The driver does not synchronise calls on one executable: `Send` but not `Sync`.
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

// SAFETY: the driver allows an executable to be used from any thread, one at a time;
// `GraphExec` is not `Sync`.
unsafe impl Send for GraphExec {}

/// The callables one executable set on its nodes, those it replaced that a launch in flight may
/// still run, and the fences that tell when those launches finished.
struct ExecutableCallables {
    context: Arc<ContextShared>,
    /// The callable set on each node.
    current: Vec<(SendHandle<CUgraphNode_st>, GraphRecord)>,
    /// Per stream launched on, the fence of its latest launch.
    fences: Vec<Arc<Fence>>,
    /// Replaced callables, with the fences of the launches that may still run them.
    replaced: Vec<(GraphRecord, Vec<Arc<Fence>>)>,
    /// A launch whose fence could not be recorded, or that a capture took: replaced callables
    /// then stay until the executable is gone, and no fence is queried again.
    unfenced: bool,
    /// The executable's engine nodes (`engine_node`): each launch queues their callables.
    engine: Vec<ExecNode>,
}

impl std::fmt::Debug for ExecutableCallables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutableCallables")
            .field("current", &self.current.len())
            .field("replaced", &self.replaced.len())
            .field("fences", &self.fences.len())
            .field("engine", &self.engine.len())
            .finish_non_exhaustive()
    }
}

/// An event recorded after an executable's latest launch on one stream. Sealed once a replaced
/// callable waits for it: it is never recorded again.
struct Fence {
    context: Arc<ContextShared>,
    stream: SendHandle<CUstream_st>,
    event: SendHandle<CUevent_st>,
    sealed: AtomicBool,
}

impl Fence {
    /// Whether the launch it was recorded after has finished: only a query that succeeds says
    /// so (see the module's documentation).
    fn passed(&self) -> bool {
        let driver = self.context.driver();
        let Ok(_relaxed) = RelaxedCaptureMode::enter(driver) else {
            return false;
        };
        // SAFETY: the event is this fence's own, destroyed only when the fence is dropped.
        unsafe { checked!(driver, cuEventQuery(self.event.get())) }.is_ok()
    }
}

impl Drop for Fence {
    fn drop(&mut self) {
        // Fences are dropped on callers' threads: by the executable's calls, or with the
        // executable's callables through the reclaim lists.
        // SAFETY: created by `ExecutableCallables::fence`, destroyed once; a pending record
        // finishes on its own.
        let destroyed = unsafe { query_events::destroy(self.context.driver(), self.event.get()) };
        if let Err(error) = destroyed {
            self.context.record_drop_error("event", error);
        }
    }
}

impl ExecutableCallables {
    /// Records the fence of a launch on `stream`, when the executable has callables of its own,
    /// then asks whether a capture took it (other code began capturing the stream during the
    /// launch): such a fence must never be queried.
    fn fence(&mut self, stream: &Stream) {
        if self.current.is_empty() || self.unfenced {
            return;
        }
        let raw = stream.as_raw();
        let fenced = self
            .record_fence(raw)
            .and_then(|()| ensure_not_capturing(self.context.driver(), raw));
        if let Err(error) = fenced {
            logged!(warn!(
                "a launch's fence could not be recorded, or a capture took it ({error}): the \
                 callables this executable replaces stay until it is gone"
            ));
            self.unfenced = true;
        }
    }

    fn record_fence(&mut self, stream: CUstream) -> Result<()> {
        let driver = self.context.driver();
        let reusable = self
            .fences
            .iter()
            .position(|fence| fence.stream.get() == stream)
            .filter(|&index| !self.fences[index].sealed.load(Ordering::Relaxed));
        let event = match reusable {
            Some(index) => self.fences[index].event.get(),
            None => {
                let event = self.context.with_current(|| query_events::create(driver))?;
                let fence = Arc::new(Fence {
                    context: Arc::clone(&self.context),
                    stream: SendHandle::new(stream),
                    event: SendHandle::new(event),
                    sealed: AtomicBool::new(false),
                });
                self.fences.retain(|old| old.stream.get() != stream);
                self.fences.push(fence);
                event
            }
        };
        // SAFETY: the event is live; the stream is the launch's, valid during this call.
        Ok(unsafe { checked!(driver, cuEventRecord(event, stream)) }?)
    }

    /// Sets `record` as `node`'s callable; the one it replaces waits for the launches so far.
    fn set(&mut self, node: CUgraphNode, record: GraphRecord) {
        let previous = match self.current.iter_mut().find(|(set, _)| set.get() == node) {
            Some((_, current)) => Some(std::mem::replace(current, record)),
            None => {
                self.current.push((SendHandle::new(node), record));
                None
            }
        };
        let Some(previous) = previous else {
            return;
        };
        // Fences already passed need no waiting.
        if !self.unfenced {
            self.fences.retain(|fence| !fence.passed());
        }
        for fence in &self.fences {
            fence.sealed.store(true, Ordering::Relaxed);
        }
        self.replaced.push((previous, self.fences.clone()));
    }

    /// Lets go of the replaced callables no launch in flight can run any more: each goes to the
    /// thread that set it.
    fn let_go_unreachable(&mut self) {
        if !self.unfenced {
            self.replaced
                .retain(|(_, fences)| !fences.iter().all(|fence| fence.passed()));
        }
    }
}

impl GraphExec {
    /// Instantiates `graph`, giving the executable a user object of its own that holds the
    /// callables later set on its nodes: it is attached to the graph only while instantiating,
    /// so that the executable takes a reference to it, then the graph lets go.
    pub(crate) fn instantiate(graph: &Graph) -> Result<GraphExec> {
        let context = graph.context();
        let driver = context.driver();
        let callables = Arc::new(Mutex::new(ExecutableCallables {
            context: Arc::clone(context.shared()),
            current: Vec::new(),
            fences: Vec::new(),
            replaced: Vec::new(),
            unfenced: false,
            engine: Vec::new(),
        }));
        let mut raw = ptr::null_mut();
        with_own_object(graph, &callables, || {
            // SAFETY: a live graph; `raw` is a valid out-pointer; the context is current.
            Ok(unsafe {
                checked!(
                    driver,
                    cuGraphInstantiateWithFlags(&mut raw, graph.as_raw(), 0)
                )
            }?)
        })?;
        // SAFETY: the live graph `raw` was just made from, not launched yet.
        match unsafe {
            engine_node::prepare_exec(
                context.shared(),
                graph.as_raw(),
                || graph.lives().clone(),
                raw,
            )
        } {
            Ok(engine) => {
                callables
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .engine = engine;
            }
            Err(error) => {
                // Never launched: destroyed at once.
                // SAFETY: made above, owned here, destroyed once.
                if let Err(destroyed) = unsafe { checked!(driver, cuGraphExecDestroy(raw)) } {
                    context
                        .shared()
                        .record_drop_error("graph executable", destroyed);
                }
                return Err(error);
            }
        }
        Ok(GraphExec {
            context: context.clone(),
            raw,
            callables,
            _not_sync: PhantomData,
        })
    }

    /// The driver's handle, valid while this `GraphExec` exists.
    ///
    /// Update the executable through [`update`](Self::update), not through this handle. A raw
    /// `cuGraphExecUpdate` replaces the executable's user objects with the graph's, among them
    /// the one that keeps the callables set on its nodes
    /// ([`set_host_node_callable`](Self::set_host_node_callable)) and its engine nodes' state
    /// alive while its launches run:
    /// from then on they live only as long as this `GraphExec`, so the caller's `unsafe` block
    /// must keep it until every launch made after the update finished. Such an update also gives
    /// the engine's nodes ([`Graph::add_engine_host_node`]) the other graph's batch, which waits
    /// for nothing: they run nothing from then on.
    pub fn as_raw(&self) -> CUgraphExec {
        self.raw
    }

    /// Updates the executable from `graph` (`cuGraphExecUpdate`), a graph of the same shape: its
    /// nodes run `graph`'s parameters and callables from the next launch on, and it takes its
    /// own references to `graph`'s callables, as at instantiation, while keeping the callables
    /// set on its nodes alive for its launches in flight. Launches enqueued before run what they
    /// were enqueued with. A callable set on a node afterwards
    /// ([`set_host_node_callable`](Self::set_host_node_callable)) replaces `graph`'s in this
    /// executable only.
    ///
    /// NVIDIA's reference: [`cuGraphExecUpdate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `graph` belongs to another context, or when the
    /// executable or `graph` has engine nodes ([`Graph::add_engine_host_node`], whose words are
    /// the executable's own: instantiate `graph` instead); the driver's error from
    /// `cuGraphExecUpdate_v2` (`CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE` when the shapes differ),
    /// `cuGraphGetNodes` or from attaching the executable's callables to `graph`
    /// (`cuUserObjectCreate`, `cuGraphRetainUserObject`). The executable is unchanged then.
    #[doc(alias = "cuGraphExecUpdate")]
    pub fn update(&self, graph: &Graph) -> Result<()> {
        ensure_outside_host_function("GraphExec::update")?;
        reclaim();
        if graph.context().as_raw() != self.context.as_raw() {
            return Err(Error::InvalidArgument {
                what: "the graph belongs to another context than the executable".to_owned(),
            });
        }
        let engine_free = self.callables().engine.is_empty()
            && !graph.host_nodes()?.iter().any(HostNode::runs_on_engine);
        if !engine_free {
            return Err(Error::InvalidArgument {
                what: "an executable or graph with engine nodes is not updated: instantiate the \
                       graph instead"
                    .to_owned(),
            });
        }
        let driver = self.context.driver();
        with_own_object(graph, &self.callables, || {
            let mut info = CUgraphExecUpdateResultInfo::default();
            // SAFETY: both handles are live; `GraphExec` is not `Sync`, and the graph is not
            // shared; `info` is a valid out-pointer; the context is current.
            unsafe {
                checked!(
                    driver,
                    cuGraphExecUpdate_v2(self.raw, graph.as_raw(), &mut info)
                )
            }?;
            Ok(())
        })
    }

    fn callables(&self) -> MutexGuard<'_, ExecutableCallables> {
        self.callables
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Enqueues one run of the graph on `stream`: every host node runs again. The engine's nodes
    /// ([`Graph::add_engine_host_node`]) run the callables this executable holds now.
    ///
    /// NVIDIA's reference: [`cuGraphLaunch`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html).
    ///
    /// With engine nodes, a capture other code begins on `stream` during the call may take the
    /// launch: the engine looks right after it, and when the stream captures, the launch is
    /// refused ([`Error::StreamCapturing`]), its engine nodes run
    /// nothing (live, if the capture began just after the launch, or in the capture's graph,
    /// whose runs they then never hold up), and the words they use are served for the life of
    /// the process
    /// ([`PolledEngineCounts::retired_graph_nodes`](crate::metrics::PolledEngineCounts)): the
    /// server serving them no longer parks. The next launch gives the nodes fresh words while
    /// the graph lives (after it went, they keep the retired ones and run nothing). What stays:
    /// the capture's graph requests through the words of the launches before the taken one, so a
    /// run of it while one of those still waits before a node runs that launch's callable in its
    /// place, early (that launch then passes the node without running it); and a capture that
    /// begins and ends between the launch and the look is not seen (its graph then waits at the
    /// node until a later launch's callable answers it, and writes into the word once the
    /// executable is gone and the word serves another use). Other code must capture a stream while
    /// this thread launches on it for either.
    ///
    /// # Errors
    /// [`Error::StreamCapturing`] with [`CaptureState::Implicit`] on the legacy stream while a
    /// blocking stream of its context captures (the driver would refuse the launch and
    /// invalidate that capture); nothing is enqueued. For an executable with engine nodes,
    /// [`Error::StreamCapturing`]
    /// on a capturing stream (the capture would take the launch, which the engine could not
    /// tell from a live one) and nothing is enqueued, or as said above;
    /// [`Error::AllocationInCapture`] when retired nodes need
    /// fresh words while a builder capture forbids allocating them; the driver's
    /// error from `cuGraphLaunch` (or, with engine nodes, `cuStreamIsCapturing` or
    /// `cuGraphExecBatchMemOpNodeSetParams`).
    #[doc(alias = "cuGraphLaunch")]
    pub fn launch(&self, stream: &Stream) -> Result<()> {
        ensure_outside_host_function("GraphExec::launch")?;
        reclaim();
        // What logs under the callables' lock (a fence that cannot be recorded, one dropped) is
        // made once it is released: a logger may launch this executable again.
        holding_logs(|| {
            stream.with_stream_context(|| {
                let driver = self.context.driver();
                let mut callables = self.callables();
                if callables.engine.is_empty() {
                    // On the legacy stream while a blocking stream of its context captures, the
                    // driver would refuse the launch and invalidate that capture: asked first.
                    if let Some(CaptureState::Implicit) = capture_state(driver, stream.as_raw())? {
                        return Err(Error::StreamCapturing {
                            status: CaptureState::Implicit,
                        });
                    }
                    // SAFETY: both handles are live while their owners exist.
                    unsafe { checked!(driver, cuGraphLaunch(self.raw, stream.as_raw())) }?;
                } else {
                    self.launch_with_engine(&mut callables, stream)?;
                }
                callables.fence(stream);
                callables.let_go_unreachable();
                Ok(())
            })
        })
    }

    /// `cuGraphLaunch` of an executable with engine nodes: refused on a capturing stream; then
    /// each node queues its callable for the engine, unless a capture other code began during
    /// the call may have taken the launch: then its nodes' slots retire (`crate::polled`'s
    /// nodes), so that neither that capture's graph nor this launch runs them, and the launch is
    /// refused; the next launch gives them fresh slots.
    fn launch_with_engine(
        &self,
        callables: &mut ExecutableCallables,
        stream: &Stream,
    ) -> Result<()> {
        let driver = self.context.driver();
        ensure_not_capturing(driver, stream.as_raw())?;
        for node in &mut callables.engine {
            // SAFETY: this executable, which `&self` keeps live and no other thread uses.
            unsafe { node.refresh(self.context.shared(), self.raw) }?;
        }
        // SAFETY: both handles are live while their owners exist.
        unsafe { checked!(driver, cuGraphLaunch(self.raw, stream.as_raw())) }?;
        // A look that fails cannot tell either: it counts as taken.
        let taken = ensure_not_capturing(driver, stream.as_raw()).err();
        match taken {
            None => callables.engine.iter().for_each(ExecNode::launched),
            Some(_) => {
                callables.engine.iter().for_each(ExecNode::retire);
                // The launch may be a capture's, whose graph runs the executable's callables
                // whenever it runs: no fence tells when they are unreachable (see `fence`).
                callables.unfenced = true;
            }
        }
        taken.map_or(Ok(()), Err)
    }

    /// Replaces the callable of `node` (a host node of the graph this was instantiated from) in
    /// this executable only; launches enqueued afterwards run it. This executable owns the new
    /// callable until it and its launches in flight are gone, or until it is replaced in turn
    /// and no launch in flight can run it any more (launches through [`launch`](Self::launch)
    /// are tracked; so a callable replaced before every launch keeps a bounded number alive),
    /// then drops it on the thread that called this, whichever thread lets it go. The graph's own
    /// callable stays with the graph and its executables.
    ///
    /// NVIDIA's reference: [`cuGraphExecHostNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html).
    ///
    /// For an engine node ([`HostNode::runs_on_engine`]) no driver call is made: the executable's
    /// later launches queue the new callable for the engine; those queued before run the old.
    ///
    /// # Errors
    /// The driver's error from `cuGraphExecHostNodeSetParams`; for an engine node,
    /// [`Error::InvalidArgument`] when it is not one of the
    /// graph this executable was made from. Nothing changes then.
    #[doc(alias = "cuGraphExecHostNodeSetParams")]
    pub fn set_host_node_callable<F>(&self, node: &HostNode<'_>, callable: F) -> Result<()>
    where
        F: Fn() + Send + Sync + 'static,
    {
        let callable = outside_host_function("GraphExec::set_host_node_callable", callable)?;
        self.set_host_node_callable_named(node, Arc::new(callable), std::any::type_name::<F>())
    }

    /// As [`set_host_node_callable`](Self::set_host_node_callable), with a shared callable.
    ///
    /// NVIDIA's reference: [`cuGraphExecHostNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html).
    ///
    /// # Errors
    /// As [`set_host_node_callable`](Self::set_host_node_callable).
    #[doc(alias = "cuGraphExecHostNodeSetParams")]
    pub fn set_host_node_callable_shared(
        &self,
        node: &HostNode<'_>,
        callable: HostCallable,
    ) -> Result<()> {
        self.set_host_node_callable_named(node, callable, std::any::type_name::<HostCallable>())
    }

    /// As [`set_host_node_callable_shared`](Self::set_host_node_callable_shared); profilers show
    /// its runs as `name`. What logs under the callables' lock (a fence the replaced callable
    /// let go, whose destroy failed) is made once it is released, as in `launch`.
    fn set_host_node_callable_named(
        &self,
        node: &HostNode<'_>,
        callable: HostCallable,
        name: &'static str,
    ) -> Result<()> {
        holding_logs(|| self.set_host_node_callable_holding(node, callable, name))
    }

    /// [`set_host_node_callable_named`](Self::set_host_node_callable_named) inside its hold.
    fn set_host_node_callable_holding(
        &self,
        node: &HostNode<'_>,
        callable: HostCallable,
        name: &'static str,
    ) -> Result<()> {
        let callable = outside_host_function("GraphExec::set_host_node_callable", callable)?;
        reclaim();
        let driver = self.context.driver();
        let owned = GraphRecord::callable(Arc::clone(self.context.shared()), callable, name);
        if node.runs_on_engine() {
            let mut callables = self.callables();
            let Some(engine) = callables
                .engine
                .iter_mut()
                .find(|engine| engine.node() == node.as_raw())
            else {
                drop(callables);
                owned.drop_soon();
                return Err(Error::InvalidArgument {
                    what: "the node is not an engine node of the graph this executable was \
                           instantiated from"
                        .to_owned(),
                });
            };
            // Launches queued before keep the callable they queued.
            let old = engine.set(NodeCallable::new(owned));
            drop(callables);
            drop(old);
            return Ok(());
        }
        let params = CUDA_HOST_NODE_PARAMS {
            fn_: Some(GraphRecord::host_fn()),
            userData: owned.user_data(),
        };
        let mut callables = self.callables();
        // SAFETY: both handles are live; the executable's callables keep the record alive as
        // long as the executable and its launches can run it.
        let set = unsafe {
            checked!(
                driver,
                cuGraphExecHostNodeSetParams(self.raw, node.as_raw(), &params)
            )
        };
        if let Err(error) = set {
            drop(callables);
            // Never handed to the driver: dropped as soon as the reclaim rule allows, with no
            // lock held.
            owned.drop_soon();
            return Err(error.into());
        }
        callables.set(node.as_raw(), owned);
        callables.let_go_unreachable();
        Ok(())
    }
}

/// Runs `make` (an instantiation or update from `graph`) with `context` current while `graph`
/// holds a user object of its own keeping `callables`: the executable made or updated clones
/// `graph`'s references, so it keeps its callables for its launches in flight as it keeps the
/// graph's; then `graph` lets go of the object.
fn with_own_object(
    graph: &Graph,
    callables: &Arc<Mutex<ExecutableCallables>>,
    make: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let context = graph.context();
    let driver = context.driver();
    let holder = GraphRecord::holding(Arc::clone(callables));
    let object = user_object::create(driver, holder)?;
    // SAFETY: the graph is live and not shared; our fresh reference moves to it.
    unsafe { user_object::move_into_graph(driver, graph.as_raw(), object)? };
    let made = context.shared().with_current(make);
    // The executable (if any) holds its own reference now.
    // SAFETY: the graph holds the reference moved to it above.
    unsafe { user_object::release_from_graph(driver, graph.as_raw(), object) };
    made
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        // Launches in flight finish first; the user objects keep their callables until then.
        destroy_later(
            self.context.shared(),
            "graph executable",
            self.raw,
            |context, raw| {
                // SAFETY: owned by this `GraphExec`, destroyed once.
                unsafe { checked!(context.driver(), cuGraphExecDestroy(raw)) }
            },
        );
    }
}

//! Graphs built node by node, and their host nodes.

use super::engine_node;
use super::exec::GraphExec;
use super::user_object;
use crate::checked::checked;
use crate::contain::ensure_outside_host_function;
use crate::error::Result;
use crate::host_launch::UserData;
use crate::launch::{
    GraphRecord, HostCallable, callable_of_node, nodes_of, outside_host_function, reclaim,
};
use crate::objects::{Context, destroy_later};
use cuda_host_sys::{CUDA_HOST_NODE_PARAMS, CUgraph, CUgraphNode, CUgraphNodeType};
use std::ffi::c_void;
use std::marker::PhantomData;
use std::ptr;
use std::sync::Arc;

/// A CUDA graph: work (host nodes here; kernels through the raw handle) that can be
/// instantiated into [`GraphExec`]s and launched many times.
///
/// The graph owns its host nodes' callables through CUDA user objects: a callable lives while any
/// graph, clone, executable or launch in flight can run it, and is dropped afterwards on the
/// thread that added it (at its next cuda-host call; once it exited, on any caller's thread). A
/// `Graph` can move between threads but not be shared: the driver does not
/// synchronise calls on one graph.
#[derive(Debug)]
pub struct Graph {
    context: Context,
    raw: CUgraph,
    /// Whether `raw` lives: executables with engine nodes name its nodes only while it does.
    /// Made with the first such executable, so that other graphs allocate nothing for it.
    lives: std::cell::OnceCell<engine_node::GraphLives>,
    // Graph calls must be serialised by the caller: `Send` but not `Sync`.
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

// SAFETY: the driver allows a graph to be used from any thread, one at a time; `Graph` is not
// `Sync`, so `&Graph` never crosses threads.
unsafe impl Send for Graph {}

impl Graph {
    /// Creates an empty graph.
    ///
    /// NVIDIA's reference: [`cuGraphCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html).
    ///
    /// # Errors
    /// The driver's error from `cuGraphCreate`.
    #[doc(alias = "cuGraphCreate")]
    pub fn new(context: &Context) -> Result<Graph> {
        ensure_outside_host_function("Graph::new")?;
        let shared = context.shared();
        shared.take_drop_error()?;
        let mut raw = ptr::null_mut();
        shared.with_current(|| {
            // SAFETY: `raw` is a valid out-pointer; the context is current.
            Ok(unsafe { checked!(shared.driver(), cuGraphCreate(&mut raw, 0)) }?)
        })?;
        // SAFETY: a fresh graph, owned from here on.
        Ok(unsafe { Graph::from_raw(context, raw) })
    }

    /// Takes ownership of a graph made elsewhere (it is destroyed when dropped).
    ///
    /// # Safety
    /// `raw` must be a live graph of `context` that nothing else destroys or uses concurrently.
    pub unsafe fn from_raw(context: &Context, raw: CUgraph) -> Graph {
        Graph {
            context: context.clone(),
            raw,
            lives: std::cell::OnceCell::new(),
            _not_sync: PhantomData,
        }
    }

    /// The driver's handle, valid while this `Graph` exists.
    ///
    /// Other code that uses it with the driver's API keeps what the graph owns as cuda-host
    /// left it: it neither destroys the graph nor removes its nodes. It may recapture the graph
    /// (`cuStreamBeginRecaptureToGraph`, CUDA 13.3), which lets go of the callables the graph
    /// owns (they live on in the executables made before, for their launches) and leaves the
    /// nodes running what the recapture captured; but the driver leaves the graph of a
    /// recapture that failed undefined, with nodes the recapture did not reach still naming
    /// callables it let go of: such a `Graph` may only be dropped, never instantiated, cloned,
    /// listed or changed.
    pub fn as_raw(&self) -> CUgraph {
        self.raw
    }

    /// The context the graph belongs to.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// What tells its executables whether it lives.
    pub(super) fn lives(&self) -> &engine_node::GraphLives {
        self.lives.get_or_init(engine_node::GraphLives::new)
    }

    /// Adds a host node running `callable` on every launch, after `dependencies`.
    ///
    /// NVIDIA's reference: [`cuGraphAddHostNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html).
    ///
    /// # Errors
    /// The driver's error; nothing stays attached to the graph then.
    #[doc(alias = "cuGraphAddHostNode")]
    pub fn add_host_node<F>(
        &self,
        dependencies: &[&HostNode<'_>],
        callable: F,
    ) -> Result<HostNode<'_>>
    where
        F: Fn() + Send + Sync + 'static,
    {
        let callable = outside_host_function("Graph::add_host_node", callable)?;
        self.add_host_node_named(dependencies, Arc::new(callable), std::any::type_name::<F>())
    }

    /// As [`add_host_node`](Self::add_host_node), with a callable shared with other nodes.
    ///
    /// # Errors
    /// As [`add_host_node`](Self::add_host_node).
    pub fn add_host_node_shared(
        &self,
        dependencies: &[&HostNode<'_>],
        callable: HostCallable,
    ) -> Result<HostNode<'_>> {
        self.add_host_node_named(
            dependencies,
            callable,
            std::any::type_name::<HostCallable>(),
        )
    }

    /// Adds a host node running `callable` on every launch, after `dependencies`, served by the
    /// polled engine ([`HostEngine::Polled`](crate::options::HostEngine::Polled)) instead of the driver's
    /// host-function thread: the node is a batch of two memory operations (a write and a wait on
    /// pinned, device-mapped memory) that one of the engine's threads answers, under the same
    /// rules as a driver host node (panics caught and reported, not run once the context
    /// failed, dropped on the thread that added it; the graph owns it as it owns
    /// [`add_host_node`](Self::add_host_node)'s).
    ///
    /// It runs on the launches of executables made through [`instantiate`](Self::instantiate),
    /// launched through [`GraphExec::launch`]: each executable has a word of its own per engine
    /// node, so executables of one graph may run at once. An executable made any other way (the
    /// driver's instantiation of [`as_raw`](Self::as_raw), a child graph node embedding this
    /// graph) runs the node as a batch that waits for nothing: the callable does not run, and
    /// no stream waits for it. A launch of an executable through its raw handle is not served
    /// until a later [`GraphExec::launch`] of it: its stream waits at the node until then.
    ///
    /// NVIDIA's reference: [`cuGraphAddBatchMemOpNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html).
    ///
    /// # Errors
    /// [`Error::AllocationInCapture`](crate::Error::AllocationInCapture) when the node's word
    /// needs a fresh page of pinned memory while a builder capture forbids
    /// allocations; the driver's error (`cuGraphAddBatchMemOpNode` answers
    /// `CUDA_ERROR_NOT_SUPPORTED` where the device has no stream memory operations). Nothing
    /// stays attached to the graph then.
    #[doc(alias = "cuGraphAddBatchMemOpNode")]
    pub fn add_engine_host_node<F>(
        &self,
        dependencies: &[&HostNode<'_>],
        callable: F,
    ) -> Result<HostNode<'_>>
    where
        F: Fn() + Send + Sync + 'static,
    {
        let callable = outside_host_function("Graph::add_engine_host_node", callable)?;
        self.add_engine_host_node_named(
            dependencies,
            Arc::new(callable),
            std::any::type_name::<F>(),
        )
    }

    /// As [`add_engine_host_node`](Self::add_engine_host_node), with a callable shared with
    /// other nodes.
    ///
    /// # Errors
    /// As [`add_engine_host_node`](Self::add_engine_host_node).
    pub fn add_engine_host_node_shared(
        &self,
        dependencies: &[&HostNode<'_>],
        callable: HostCallable,
    ) -> Result<HostNode<'_>> {
        self.add_engine_host_node_named(
            dependencies,
            callable,
            std::any::type_name::<HostCallable>(),
        )
    }

    fn add_engine_host_node_named(
        &self,
        dependencies: &[&HostNode<'_>],
        callable: HostCallable,
        name: &'static str,
    ) -> Result<HostNode<'_>> {
        let callable = outside_host_function("Graph::add_engine_host_node", callable)?;
        reclaim();
        let shared = self.context.shared();
        let record = GraphRecord::callable(Arc::clone(shared), callable, name);
        let dependencies: Vec<CUgraphNode> = dependencies.iter().map(|node| node.raw).collect();
        // SAFETY: the graph is live and not shared; the dependencies are nodes of live graphs
        // (the driver rejects nodes of another graph).
        let raw = unsafe { engine_node::add_node(shared, self.raw, &dependencies, record) }?;
        Ok(HostNode {
            graph: self,
            raw,
            engine: true,
        })
    }

    /// As [`add_host_node_shared`](Self::add_host_node_shared); profilers show its runs as
    /// `name`.
    fn add_host_node_named(
        &self,
        dependencies: &[&HostNode<'_>],
        callable: HostCallable,
        name: &'static str,
    ) -> Result<HostNode<'_>> {
        let callable = outside_host_function("Graph::add_host_node", callable)?;
        reclaim();
        let driver = self.context.driver();
        let record = GraphRecord::callable(Arc::clone(self.context.shared()), callable, name);
        // SAFETY: the graph is live and not shared; the record passes to the user object, which
        // keeps it alive as long as the node can run.
        unsafe {
            user_object::attach_for(driver, self.raw, record, |data| {
                self.add_host_node_with(dependencies, GraphRecord::host_fn(), data)
            })
        }
    }

    /// Adds a host node running a C function on every launch. With [`UserData::Copied`], the
    /// graph owns the copy (through a user object) like a closure.
    ///
    /// # Safety
    /// As [`host_launch_raw`](crate::host_launch_raw), for every launch: the function must be
    /// callable with the pointer on the driver's thread each time the graph runs, and a
    /// pass-through pointer must stay valid while any graph, executable or launch can run it.
    ///
    /// # Errors
    /// The driver's error; nothing stays attached to the graph then.
    pub unsafe fn add_host_node_raw(
        &self,
        dependencies: &[&HostNode<'_>],
        function: unsafe extern "C" fn(*mut c_void),
        user_data: UserData<'_>,
    ) -> Result<HostNode<'_>> {
        ensure_outside_host_function("Graph::add_host_node_raw")?;
        reclaim();
        let pointer = match user_data {
            UserData::None => ptr::null_mut(),
            UserData::PassThrough(pointer) => pointer,
            UserData::Copied(bytes) => {
                let driver = self.context.driver();
                let shared = Arc::clone(self.context.shared());
                let record = GraphRecord::copied_bytes(shared, function, bytes);
                // SAFETY: as in `add_host_node_shared`.
                return unsafe {
                    user_object::attach_for(driver, self.raw, record, |data| {
                        self.add_host_node_with(dependencies, GraphRecord::host_fn(), data)
                    })
                };
            }
        };
        // SAFETY: the caller vouches for `function` and `pointer`.
        unsafe { self.add_host_node_with(dependencies, function, pointer) }
    }

    /// # Safety
    /// `function` must be callable with `data` whenever the graph runs.
    unsafe fn add_host_node_with(
        &self,
        dependencies: &[&HostNode<'_>],
        function: unsafe extern "C" fn(*mut c_void),
        data: *mut c_void,
    ) -> Result<HostNode<'_>> {
        let driver = self.context.driver();
        let dependencies: Vec<CUgraphNode> = dependencies.iter().map(|node| node.raw).collect();
        let params = CUDA_HOST_NODE_PARAMS {
            fn_: Some(function),
            userData: data,
        };
        let mut node = ptr::null_mut();
        // SAFETY: the graph is live; the dependencies are nodes of live graphs (the driver
        // rejects nodes of another graph); the caller vouches for `function` and `data`.
        unsafe {
            checked!(
                driver,
                cuGraphAddHostNode(
                    &mut node,
                    self.raw,
                    dependencies.as_ptr(),
                    dependencies.len(),
                    &params,
                )
            )
        }?;
        Ok(HostNode {
            graph: self,
            raw: node,
            engine: false,
        })
    }

    /// The graph's host nodes (also those added by stream capture), the polled engine's among
    /// them ([`HostNode::runs_on_engine`]).
    ///
    /// NVIDIA's reference: [`cuGraphGetNodes`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html).
    ///
    /// # Errors
    /// The driver's error from `cuGraphGetNodes`, `cuGraphNodeGetType` or
    /// `cuGraphBatchMemOpNodeGetParams`.
    #[doc(alias = "cuGraphGetNodes")]
    pub fn host_nodes(&self) -> Result<Vec<HostNode<'_>>> {
        ensure_outside_host_function("Graph::host_nodes")?;
        let driver = self.context.driver();
        // SAFETY: the graph is live and not shared.
        let nodes = unsafe { nodes_of(driver, self.raw) }?;
        let mut host_nodes = Vec::new();
        for node in nodes {
            let mut kind = CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
            // SAFETY: `node` is a node of this graph.
            unsafe { checked!(driver, cuGraphNodeGetType(node, &mut kind)) }?;
            let engine = kind == CUgraphNodeType::CU_GRAPH_NODE_TYPE_BATCH_MEM_OP
                // SAFETY: a node of this graph, which is not shared.
                && unsafe { engine_node::template_of(driver, node) }?.is_some();
            if engine || kind == CUgraphNodeType::CU_GRAPH_NODE_TYPE_HOST {
                host_nodes.push(HostNode {
                    graph: self,
                    raw: node,
                    engine,
                });
            }
        }
        Ok(host_nodes)
    }

    /// Instantiates the graph. The executable takes its own references to the graph's
    /// callables: it keeps working, and keeps them alive, after the graph is dropped.
    ///
    /// NVIDIA's reference: [`cuGraphInstantiate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html).
    ///
    /// # Errors
    /// The driver's error from `cuGraphInstantiateWithFlags` (or from attaching the executable's
    /// bookkeeping); with engine nodes ([`add_engine_host_node`](Self::add_engine_host_node)),
    /// [`Error::ThreadStart`](crate::Error::ThreadStart) when the engine's threads cannot start,
    /// [`Error::AllocationInCapture`](crate::Error::AllocationInCapture) when their words need a
    /// fresh page while a builder capture forbids allocations, or the driver's
    /// error from `cuGraphExecBatchMemOpNodeSetParams`; no executable is left then.
    #[doc(alias = "cuGraphInstantiate")]
    pub fn instantiate(&self) -> Result<GraphExec> {
        ensure_outside_host_function("Graph::instantiate")?;
        reclaim();
        self.context.shared().take_drop_error()?;
        GraphExec::instantiate(self)
    }

    /// A copy of the graph (`cuGraphClone`), owning its own references to the callables.
    ///
    /// NVIDIA's reference: [`cuGraphClone`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html).
    ///
    /// # Errors
    /// The driver's error from `cuGraphClone`.
    #[doc(alias = "cuGraphClone")]
    pub fn try_clone(&self) -> Result<Graph> {
        ensure_outside_host_function("Graph::try_clone")?;
        let driver = self.context.driver();
        let mut raw = ptr::null_mut();
        // SAFETY: a live graph; `raw` is a valid out-pointer.
        unsafe { checked!(driver, cuGraphClone(&mut raw, self.raw)) }?;
        // SAFETY: a fresh graph, owned from here on.
        Ok(unsafe { Graph::from_raw(&self.context, raw) })
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // No executable names a node of it from here on.
        if let Some(lives) = self.lives.get() {
            lives.end();
        }
        // Executables and launches in flight keep their own references to the callables.
        destroy_later(self.context.shared(), "graph", self.raw, |context, raw| {
            // SAFETY: owned by this `Graph`, destroyed once.
            unsafe { checked!(context.driver(), cuGraphDestroy(raw)) }
        });
    }
}

/// A host node of a [`Graph`]. It borrows its graph, so it cannot outlive it:
///
/// ```compile_fail
/// # fn demo(context: &cuda_host::Context) -> cuda_host::Result<()> {
/// let graph = cuda_host::graph::Graph::new(context)?;
/// let node = graph.add_host_node(&[], || {})?;
/// drop(graph);
/// node.callable()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct HostNode<'graph> {
    graph: &'graph Graph,
    raw: CUgraphNode,
    /// Whether it is the polled engine's (a batch of memory operations).
    engine: bool,
}

impl<'graph> HostNode<'graph> {
    /// The driver's handle, valid while the graph exists.
    pub fn as_raw(&self) -> CUgraphNode {
        self.raw
    }

    /// The graph it belongs to.
    pub fn graph(&self) -> &'graph Graph {
        self.graph
    }

    /// Whether the polled engine serves it ([`Graph::add_engine_host_node`]) rather than the
    /// driver's host-function thread.
    pub fn runs_on_engine(&self) -> bool {
        self.engine
    }

    /// The engine node's template, for an engine node.
    fn template(&self) -> Result<Option<Arc<engine_node::Template>>> {
        if !self.engine {
            return Ok(None);
        }
        // SAFETY: a node of the live graph, which is not shared.
        unsafe { engine_node::template_of(self.graph.context.driver(), self.raw) }
    }

    /// The node's callable in the graph, if cuda-host set it (not for raw C functions).
    ///
    /// NVIDIA's reference: [`cuGraphHostNodeGetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html).
    ///
    /// # Errors
    /// The driver's error from `cuGraphHostNodeGetParams`.
    #[doc(alias = "cuGraphHostNodeGetParams")]
    pub fn callable(&self) -> Result<Option<HostCallable>> {
        ensure_outside_host_function("HostNode::callable")?;
        if self.engine {
            return Ok(self.template()?.and_then(|template| {
                let callable = template.callable().record().as_callable()?;
                Some(Arc::clone(&callable.callable))
            }));
        }
        Ok(self
            .graph_callable()?
            .map(|callable| Arc::clone(&callable.callable)))
    }

    /// The node's callable in the graph, when it is one of cuda-host's; borrowed from the graph,
    /// whose user object keeps it alive while the graph exists.
    fn graph_callable(&self) -> Result<Option<&'graph crate::launch::GraphCallable>> {
        if self.engine {
            return Ok(None);
        }
        let driver = self.graph.context.driver();
        let mut params = CUDA_HOST_NODE_PARAMS {
            fn_: None,
            userData: ptr::null_mut(),
        };
        // SAFETY: a node of the live graph; `params` is a valid out-pointer.
        unsafe { checked!(driver, cuGraphHostNodeGetParams(self.raw, &mut params)) }?;
        // SAFETY: a node of cuda-host's runs a record the graph's user object keeps alive while
        // the graph (borrowed for 'graph) exists.
        Ok(unsafe { callable_of_node(params.fn_, params.userData) })
    }

    /// Replaces the node's callable in the graph (executables made before keep theirs). The
    /// graph owns the new one like the first; it releases the old one, which lives on while
    /// executables made before can run it.
    ///
    /// NVIDIA's reference: [`cuGraphHostNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html).
    ///
    /// For an engine node ([`runs_on_engine`](Self::runs_on_engine)) the graph takes a new word
    /// with the new callable (`cuGraphBatchMemOpNodeSetParams`).
    ///
    /// # Errors
    /// The driver's error; for an engine node also
    /// [`Error::AllocationInCapture`](crate::Error::AllocationInCapture) when its word needs a
    /// fresh page while a builder capture forbids allocations. The node is
    /// unchanged then.
    #[doc(alias = "cuGraphHostNodeSetParams")]
    pub fn set_callable<F>(&self, callable: F) -> Result<()>
    where
        F: Fn() + Send + Sync + 'static,
    {
        let callable = outside_host_function("HostNode::set_callable", callable)?;
        self.set_callable_named(Arc::new(callable), std::any::type_name::<F>())
    }

    /// As [`set_callable`](Self::set_callable), with a shared callable.
    ///
    /// NVIDIA's reference: [`cuGraphHostNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html).
    ///
    /// # Errors
    /// As [`set_callable`](Self::set_callable).
    #[doc(alias = "cuGraphHostNodeSetParams")]
    pub fn set_callable_shared(&self, callable: HostCallable) -> Result<()> {
        self.set_callable_named(callable, std::any::type_name::<HostCallable>())
    }

    /// As [`set_callable_shared`](Self::set_callable_shared); profilers show its runs as `name`.
    fn set_callable_named(&self, callable: HostCallable, name: &'static str) -> Result<()> {
        let callable = outside_host_function("HostNode::set_callable", callable)?;
        reclaim();
        let graph = self.graph;
        let driver = graph.context.driver();
        if let Some(old) = self.template()? {
            let shared = graph.context.shared();
            let record = GraphRecord::callable(Arc::clone(shared), callable, name);
            // SAFETY: the graph is live and not shared, and holds the node with that template.
            return unsafe { engine_node::replace(shared, graph.raw, self.raw, &old, record) };
        }
        let old = self.graph_callable()?.map(|old| old.user_object());
        let record = GraphRecord::callable(Arc::clone(graph.context.shared()), callable, name);
        // SAFETY: the graph is live and not shared; the record passes to the user object, which
        // keeps it alive as long as the node can run it.
        unsafe {
            user_object::attach_for(driver, graph.raw, record, |data| {
                let params = CUDA_HOST_NODE_PARAMS {
                    fn_: Some(GraphRecord::host_fn()),
                    userData: data,
                };
                Ok(checked!(
                    driver,
                    cuGraphHostNodeSetParams(self.raw, &params)
                )?)
            })?;
        }
        if let Some(old) = old {
            // SAFETY: the graph holds that user object's reference.
            unsafe { user_object::release_from_graph(driver, graph.raw, old) };
        }
        Ok(())
    }
}

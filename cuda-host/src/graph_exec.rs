//! Executable graphs.

use crate::context::Context;
use crate::error::Result;
use crate::graph::{Graph, HostNode};
use crate::handle::SendHandle;
use crate::reclaim;
use crate::record::{self, HostCallable, OwnedRecord};
use crate::stream::Stream;
use crate::trampoline::{self, ensure_outside_host_function};
use crate::user_object;
use cuda_host_sys::{CUDA_HOST_NODE_PARAMS, CUgraphExec};
use std::marker::PhantomData;
use std::ptr;
use std::sync::{Arc, Mutex};

/// Callables set on one executable's nodes. A user object of the executable holds them, so they
/// live until the executable and its launches in flight are gone.
type ExecutableCallables = Arc<Mutex<Vec<OwnedRecord>>>;

/// An instantiated graph, launched on streams. It keeps the graph's callables alive on its own:
/// the graph may be dropped first.
#[derive(Debug)]
pub struct GraphExec {
    context: Context,
    raw: CUgraphExec,
    callables: ExecutableCallables,
    // The driver does not synchronise calls on one executable: `Send` but not `Sync`.
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

// SAFETY: the driver allows an executable to be used from any thread, one at a time;
// `GraphExec` is not `Sync`.
unsafe impl Send for GraphExec {}

impl std::fmt::Debug for OwnedRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OwnedRecord")
    }
}

impl GraphExec {
    /// Instantiates `graph`, giving the executable a user object of its own that holds the
    /// callables later set on its nodes: it is attached to the graph only while instantiating,
    /// so that the executable takes a reference to it, then the graph lets go.
    pub(crate) fn instantiate(graph: &Graph) -> Result<GraphExec> {
        let context = graph.context();
        let driver = context.driver();
        let callables: ExecutableCallables = Arc::default();
        let holder = record::new_deferred_drop(Arc::clone(&callables));
        // SAFETY: the fresh record passes to the user object.
        let object = unsafe { user_object::create(driver, holder)? };
        // SAFETY: the graph is live and not shared; our fresh reference moves to it.
        unsafe { user_object::move_into_graph(driver, graph.as_raw(), object)? };
        let mut raw = ptr::null_mut();
        // SAFETY: a live graph; `raw` is a valid out-pointer.
        let result = unsafe { driver.cuGraphInstantiateWithFlags(&mut raw, graph.as_raw(), 0) };
        // The executable (if any) holds its own reference now.
        // SAFETY: the graph holds the reference moved to it above.
        unsafe { user_object::release_from_graph(driver, graph.as_raw(), object) };
        driver.check("cuGraphInstantiateWithFlags", result)?;
        Ok(GraphExec {
            context: context.clone(),
            raw,
            callables,
            _not_sync: PhantomData,
        })
    }

    /// The driver's handle, valid while this `GraphExec` exists.
    pub fn as_raw(&self) -> CUgraphExec {
        self.raw
    }

    /// Enqueues one run of the graph on `stream`: every host node runs again.
    ///
    /// # Errors
    /// The driver's error from `cuGraphLaunch`.
    #[doc(alias = "cuGraphLaunch")]
    pub fn launch(&self, stream: &Stream) -> Result<()> {
        ensure_outside_host_function("GraphExec::launch")?;
        reclaim::reclaim();
        stream.prepare()?;
        let driver = self.context.driver();
        // SAFETY: both handles are live while their owners exist.
        let result = unsafe { driver.cuGraphLaunch(self.raw, stream.as_raw()) };
        Ok(driver.check("cuGraphLaunch", result)?)
    }

    /// Replaces the callable of `node` (a host node of the graph this was instantiated from) in
    /// this executable only; launches enqueued afterwards run it. This executable owns the new
    /// callable until it and its launches in flight are gone; the replaced one lives as long as
    /// whatever else owns it (the graph, or this executable) can run it.
    ///
    /// # Errors
    /// The driver's error from `cuGraphExecHostNodeSetParams`; nothing changes then.
    #[doc(alias = "cuGraphExecHostNodeSetParams")]
    pub fn set_host_node_callable<F>(&self, node: &HostNode<'_>, callable: F) -> Result<()>
    where
        F: Fn() + Send + Sync + 'static,
    {
        self.set_host_node_callable_shared(node, Arc::new(callable))
    }

    /// As [`set_host_node_callable`](Self::set_host_node_callable), with a shared callable.
    ///
    /// # Errors
    /// As [`set_host_node_callable`](Self::set_host_node_callable).
    pub fn set_host_node_callable_shared(
        &self,
        node: &HostNode<'_>,
        callable: HostCallable,
    ) -> Result<()> {
        ensure_outside_host_function("GraphExec::set_host_node_callable")?;
        reclaim::reclaim();
        let driver = self.context.driver();
        let record = record::new_graph_callable(Arc::clone(&self.context.shared), callable);
        let mut callables = self
            .callables
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // SAFETY: a fresh record, owned from here on by the executable's list.
        callables.push(unsafe { OwnedRecord::new(record) });
        let params = CUDA_HOST_NODE_PARAMS {
            fn_: Some(trampoline::graph_host_fn),
            userData: record.as_ptr().cast(),
        };
        // SAFETY: both handles are live; the executable's list keeps the record alive as long as
        // the executable and its launches.
        let result =
            unsafe { driver.cuGraphExecHostNodeSetParams(self.raw, node.as_raw(), &params) };
        if let Err(error) = driver.check("cuGraphExecHostNodeSetParams", result) {
            // Never handed to the driver: dropped at once.
            callables.pop();
            return Err(error.into());
        }
        Ok(())
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        let shared = Arc::clone(&self.context.shared);
        let raw = SendHandle::new(self.raw);
        // Launches in flight finish first; the user objects keep their callables until then.
        reclaim::call_outside_host_function(move || {
            // SAFETY: owned by this `GraphExec`, destroyed once.
            let result = unsafe { shared.driver().cuGraphExecDestroy(raw.get()) };
            if let Err(error) = shared.driver().check("cuGraphExecDestroy", result) {
                shared.record_drop_error("graph executable", error);
            }
        });
    }
}

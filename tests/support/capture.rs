//! Raw stream capture and graph handles, for tests that drive the driver directly, with RAII so
//! that a failing test leaves no capture behind: dropping a [`Capture`] ends it, and dropping a
//! [`Graph`] or an [`Exec`] destroys it.
//!
//! Every call goes to [`test_driver`]'s driver, with the stream's context current where the driver
//! needs one. Streams are raw handles taken by safe functions, as everywhere in these tests: a
//! caller passes a live stream or a special handle (`CU_STREAM_LEGACY`, `CU_STREAM_PER_THREAD`).

#![expect(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "stream handles go only to the driver; callers pass live or special handles"
)]

use crate::host_function::host_params;
use crate::{ok, test_driver};
use cuda_host_sys::{
    CUgraph, CUgraphExec, CUgraphNode, CUresult, CUstream, CUstreamCaptureMode,
    CUstreamCaptureStatus,
};
use std::ptr;

/// `cuStreamIsCapturing`: the driver's answer and the status it wrote.
pub fn is_capturing(stream: CUstream) -> (CUresult, CUstreamCaptureStatus) {
    // A value the driver never writes, so that an unwritten status shows.
    let mut status = CUstreamCaptureStatus(77);
    // SAFETY: a live stream or a special handle with the context current; valid out-pointer.
    let result = unsafe {
        test_driver()
            .driver
            .cuStreamIsCapturing(stream, &mut status)
    };
    (result, status)
}

/// A capture going on; dropping it ends it (and destroys the graph), so that no test leaves a
/// capture behind when it fails.
#[derive(Debug)]
pub struct Capture {
    stream: CUstream,
    ended: bool,
}

impl Capture {
    /// Begins capturing `stream` in `mode` (`cuStreamBeginCapture_v2`).
    ///
    /// # Panics
    /// When the driver refuses.
    #[track_caller]
    pub fn begin(stream: CUstream, mode: CUstreamCaptureMode) -> Capture {
        // SAFETY: a live stream that is not capturing.
        ok("cuStreamBeginCapture_v2", unsafe {
            test_driver().driver.cuStreamBeginCapture_v2(stream, mode)
        });
        Capture {
            stream,
            ended: false,
        }
    }

    /// Ends the capture (`cuStreamEndCapture`): its graph.
    ///
    /// # Errors
    /// The driver's answer and the graph handle it wrote, when it did not answer success with a
    /// graph.
    pub fn end(mut self) -> Result<Graph, (CUresult, CUgraph)> {
        self.ended = true;
        end_capture(self.stream)
    }
}

/// Ends the capture `stream` is in (`cuStreamEndCapture`), whoever began it (a [`Capture`], a
/// control of the software driver's): its graph, destroyed on drop.
///
/// # Errors
/// The driver's answer and the graph handle it wrote, when it did not answer success with a
/// graph.
pub fn end_capture(stream: CUstream) -> Result<Graph, (CUresult, CUgraph)> {
    let mut graph = ptr::null_mut();
    // SAFETY: a live stream and a valid out-pointer.
    let result = unsafe { test_driver().driver.cuStreamEndCapture(stream, &mut graph) };
    if result == CUresult::CUDA_SUCCESS && !graph.is_null() {
        Ok(Graph(graph))
    } else {
        Err((result, graph))
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if !self.ended {
            let _ = end_capture(self.stream);
        }
    }
}

/// A graph, destroyed on drop.
#[derive(Debug)]
pub struct Graph(
    /// The raw graph, owned.
    pub CUgraph,
);

impl Graph {
    /// An empty graph (`cuGraphCreate`).
    ///
    /// # Panics
    /// When the driver refuses.
    #[track_caller]
    #[expect(
        clippy::new_without_default,
        reason = "a graph comes from a driver call that can fail: it is no default value"
    )]
    pub fn new() -> Graph {
        let mut graph = ptr::null_mut();
        // SAFETY: a valid out-pointer; flags must be 0.
        ok("cuGraphCreate", unsafe {
            test_driver().driver.cuGraphCreate(&mut graph, 0)
        });
        Graph(graph)
    }

    /// Adds a host node that runs `closure`, after `dependencies` (`cuGraphAddHostNode`).
    ///
    /// # Panics
    /// When the driver refuses.
    #[track_caller]
    pub fn add_host_node(
        &self,
        dependencies: &[CUgraphNode],
        closure: impl Fn() + Send + Sync + 'static,
    ) -> CUgraphNode {
        let params = host_params(closure);
        let mut node = ptr::null_mut();
        // SAFETY: a live graph, nodes of it, and parameters whose data lives for the process.
        ok("cuGraphAddHostNode", unsafe {
            test_driver().driver.cuGraphAddHostNode(
                &mut node,
                self.0,
                dependencies.as_ptr(),
                dependencies.len(),
                &params,
            )
        });
        node
    }

    /// `to` runs after `from` (`cuGraphAddDependencies_v2`, default edge).
    ///
    /// # Panics
    /// When the driver refuses.
    #[track_caller]
    pub fn add_dependency(&self, from: CUgraphNode, to: CUgraphNode) {
        // SAFETY: a live graph and two of its nodes; no edge data means default edges.
        ok("cuGraphAddDependencies_v2", unsafe {
            test_driver()
                .driver
                .cuGraphAddDependencies_v2(self.0, &from, &to, ptr::null(), 1)
        });
    }

    /// An executable of the graph (`cuGraphInstantiateWithFlags`, no flags).
    ///
    /// # Panics
    /// When the driver refuses.
    #[track_caller]
    pub fn instantiate(&self) -> Exec {
        // Instantiating needs a current context; the suite's context is made current.
        crate::context()
            .bind_to_thread()
            .expect("the context binds to this thread");
        let mut exec = ptr::null_mut();
        // SAFETY: a live graph and a valid out-pointer; the context is current.
        ok("cuGraphInstantiateWithFlags", unsafe {
            test_driver()
                .driver
                .cuGraphInstantiateWithFlags(&mut exec, self.0, 0)
        });
        Exec(exec)
    }

    /// A copy of the graph (`cuGraphClone`).
    ///
    /// # Panics
    /// When the driver refuses.
    #[track_caller]
    pub fn clone_graph(&self) -> Graph {
        let mut clone = ptr::null_mut();
        // SAFETY: a live graph and a valid out-pointer.
        ok("cuGraphClone", unsafe {
            test_driver().driver.cuGraphClone(&mut clone, self.0)
        });
        Graph(clone)
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: a live graph, destroyed once. (Its answer is not checked: a panic here, while a
        // failed test unwinds, would abort the whole test binary.)
        let _ = unsafe { test_driver().driver.cuGraphDestroy(self.0) };
    }
}

/// An executable graph, destroyed on drop (launches in flight still finish).
#[derive(Debug)]
pub struct Exec(
    /// The raw executable graph, owned.
    pub CUgraphExec,
);

impl Exec {
    /// Launches the executable on `stream` (`cuGraphLaunch`).
    ///
    /// # Panics
    /// When the driver refuses.
    #[track_caller]
    pub fn launch(&self, stream: CUstream) {
        // SAFETY: a live executable and a live stream.
        ok("cuGraphLaunch", unsafe {
            test_driver().driver.cuGraphLaunch(self.0, stream)
        });
    }

    /// Launches the executable `times` times on `stream`, then waits until the stream ran them.
    ///
    /// # Panics
    /// When the driver refuses a launch, or the synchronize answers an error.
    #[track_caller]
    pub fn run(&self, stream: &cuda_host::Stream, times: usize) {
        for _ in 0..times {
            self.launch(stream.as_raw());
        }
        stream.synchronize().expect("synchronize");
    }
}

impl Drop for Exec {
    fn drop(&mut self) {
        // SAFETY: a live executable, destroyed once. (Not checked, as for `Graph`.)
        let _ = unsafe { test_driver().driver.cuGraphExecDestroy(self.0) };
    }
}

/// Runs `during` on the calling thread while another thread holds a global-mode builder capture
/// of `captured` ([`cuda_host::graph::GraphBuilder`]), then checks that the
/// capture was not invalidated: it ends in a graph that instantiates, launches and runs. Answers
/// what `during` answered. Run it alone in a process (`alone_in_child!`): any other thread's
/// allocation would invalidate the capture too.
///
/// # Panics
/// When the capture cannot begin, was invalidated, or its graph does not run.
#[track_caller]
pub fn during_a_global_capture<T>(captured: &cuda_host::Stream, during: impl FnOnce() -> T) -> T {
    use cuda_host::{graph::CaptureMode, graph::GraphBuilder};
    let (began, done) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    std::thread::scope(|scope| {
        let capturing = scope.spawn(|| {
            let builder = GraphBuilder::begin(captured, CaptureMode::Global).expect("capture");
            began.wait();
            done.wait();
            let graph = builder.end().expect("the capture was not invalidated");
            let exec = graph.instantiate().expect("instantiate");
            exec.launch(captured).expect("launch the graph");
            captured.synchronize().expect("the graph ran");
        });
        began.wait();
        let answer = during();
        done.wait();
        capturing.join().expect("the capturing thread");
        answer
    })
}

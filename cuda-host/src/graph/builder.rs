//! Building a graph by capturing a stream, with host functions the graph owns.

use super::engine_node::{self, ReservedWords};
use super::graph::Graph;
use super::{capture, capture_lock};
use crate::checked::checked;
use crate::contain::{ensure_outside_host_function, holding_logs, logged};
use crate::error::{Error, Result};
use crate::host_launch::{HostLaunch, UserData};
use crate::launch::{
    CaptureBeginning, CaptureMark, GraphRecord, HostCallable, capture_state, outside_host_function,
    reclaim,
};
use crate::objects::{HostEngine, Stream};
use crate::observe::Named;
use cuda_host_sys::{CUgraph, CUstreamCaptureMode};
use std::cell::RefCell;
use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

/// How a capture limits other calls while it runs (`CUstreamCaptureMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CaptureMode {
    /// Calls that could break the capture are refused on every thread
    /// (`CU_STREAM_CAPTURE_MODE_GLOBAL`).
    #[default]
    Global,
    /// ... on the capturing thread only (`CU_STREAM_CAPTURE_MODE_THREAD_LOCAL`).
    ThreadLocal,
    /// No such calls are refused (`CU_STREAM_CAPTURE_MODE_RELAXED`).
    Relaxed,
}

/// Records the work enqueued on a stream into a [`Graph`] instead of running it.
///
/// Enqueue device work on [`stream`](Self::stream) as usual; add host functions with
/// [`callback`](Self::callback) (or [`host_launch`](fn@crate::host_launch) on the builder), which
/// takes `Fn` because the graph runs it on every launch. Dropping the builder without
/// [`end`](Self::end) ends the capture and discards the graph.
///
/// The docs call a capture a builder began a *builder capture*, and one other code began (a
/// library's `cuStreamBeginCapture`) a *foreign capture*: cuda-host knows the first from its
/// start and waits for it where needed; the second it can only ask the driver about.
///
/// A builder stays on the thread that began the capture: the driver ends a global or
/// thread-local capture only on that thread, and one graph must not be used from two threads at
/// once. So it is neither `Send` nor `Sync`:
///
/// ```compile_fail
/// fn shared_between_threads(builder: &cuda_host::graph::GraphBuilder<'_>) {
///     std::thread::scope(|scope| {
///         scope.spawn(|| builder.callback(|| {}));
///     });
/// }
/// ```
///
/// ```compile_fail
/// fn sent_to_another_thread(builder: cuda_host::graph::GraphBuilder<'static>) {
///     std::thread::spawn(move || builder.end());
/// }
/// ```
///
/// While the capture is open, this thread drops no finished records, and for a global-mode
/// capture no thread does: a `Drop` that frees memory would invalidate the capture. Beginning a
/// global-mode capture therefore waits for drops in progress on other threads, and beginning any
/// capture waits for launches in flight on its stream: do not begin one while holding a lock that
/// a captured value's `Drop` needs.
#[derive(Debug)]
pub struct GraphBuilder<'stream> {
    stream: &'stream Stream,
    /// Who serves the host nodes its callbacks add.
    engine: HostEngine,
    /// With the polled engine, the words its nodes take (reserved before the capture).
    words: RefCell<Option<ReservedWords>>,
    ended: bool,
    _capturing: CaptureMark,
}

impl<'stream> GraphBuilder<'stream> {
    /// Starts capturing `stream`, once the launches in flight on it were handed to the driver.
    ///
    /// NVIDIA's reference: [`cuStreamBeginCapture`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a stream from [`Stream::from_cudarc`](crate::Stream):
    /// cudarc's safe `end_capture` could end the capture on another thread while a callback
    /// uses the graph being captured. The driver's error from
    /// `cuStreamBeginCapture_v2` (for example, the legacy stream cannot be captured, nor a
    /// stream already capturing).
    #[doc(alias = "cuStreamBeginCapture")]
    pub fn begin(stream: &'stream Stream, mode: CaptureMode) -> Result<Self> {
        GraphBuilder::begin_with_engine(stream, mode, HostEngine::Driver)
    }

    /// As [`begin`](Self::begin), with the host nodes that [`callback`](Self::callback) adds
    /// served by `engine`: with [`HostEngine::Polled`], they are the polled engine's nodes, as
    /// [`Graph::add_engine_host_node`] adds them (what they cost, and the executables that run
    /// them, are said there). Each such node takes a word of pinned memory, which a capture
    /// cannot allocate: this reserves [`ENGINE_WORDS_RESERVED`](Self::ENGINE_WORDS_RESERVED)
    /// words of the stream's context for this capture before it begins (those left go back when
    /// it ends), and a callback that finds none left is refused with
    /// [`Error::AllocationInCapture`], the capture intact. [`callback_raw`](Self::callback_raw)
    /// and [`host_launch_replayable`](fn@crate::graph::host_launch_replayable) add the driver's host
    /// nodes whatever the engine.
    ///
    /// # Errors
    /// As [`begin`](Self::begin); with the polled engine, the driver's error from allocating the
    /// words, or [`Error::AllocationInCapture`] while another builder capture
    /// forbids it.
    #[doc(alias = "cuStreamBeginCapture")]
    pub fn begin_with_engine(
        stream: &'stream Stream,
        mode: CaptureMode,
        engine: HostEngine,
    ) -> Result<Self> {
        ensure_outside_host_function("GraphBuilder::begin")?;
        let words = match engine {
            HostEngine::Polled => Some(ReservedWords::new(
                stream.shared_context(),
                Self::ENGINE_WORDS_RESERVED,
            )?),
            _ => None,
        };
        if stream.is_shared_with_a_library() {
            // cudarc's safe `end_capture` ends a capture from any thread, in any mode (another
            // thread's end is refused in global and thread-local mode, yet ends it), and could
            // so destroy the graph while a callback uses its handle.
            return Err(Error::InvalidArgument {
                what: "a stream cudarc holds cannot be captured by a GraphBuilder: cudarc's \
                       end_capture may end the capture on another thread while a callback is \
                       added; capture it with cudarc and add host functions with \
                       host_launch_replayable"
                    .to_owned(),
            });
        }
        let capturing = CaptureMark::new(mode == CaptureMode::Global);
        let mode = match mode {
            CaptureMode::Global => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            CaptureMode::ThreadLocal => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            CaptureMode::Relaxed => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        };
        // The wait for launches logs one the driver holds long while it keeps new launches out:
        // made once it let them in, as a logger may launch.
        holding_logs(|| {
            stream.with_stream_context(|| {
                let _beginning = CaptureBeginning::wait_for_launches(stream.as_raw());
                let driver = stream.context().driver();
                // SAFETY: the stream handle is valid while `stream` exists.
                Ok(unsafe { checked!(driver, cuStreamBeginCapture_v2(stream.as_raw(), mode)) }?)
            })
        })?;
        Ok(GraphBuilder {
            stream,
            engine,
            words: RefCell::new(words),
            ended: false,
            _capturing: capturing,
        })
    }

    /// Words of pinned memory [`begin_with_engine`](Self::begin_with_engine) reserves for a
    /// capture's engine nodes: as many engine callbacks as this in a capture.
    pub const ENGINE_WORDS_RESERVED: usize = 64;

    /// The stream being captured: enqueue the graph's device work here.
    pub fn stream(&self) -> &'stream Stream {
        self.stream
    }

    /// Adds a host node that runs `callable` on every launch of the graph, in stream order. The
    /// graph owns it through a CUDA user object: it lives while any graph, clone, executable or
    /// launch in flight can run it, and is dropped afterwards on the thread that added it.
    ///
    /// # Errors
    /// [`Error::CaptureNotActive`] when the capture was invalidated or ended; the driver's error
    /// otherwise. On error nothing stays attached to the graph.
    pub fn callback<F>(&self, callable: F) -> Result<()>
    where
        F: Fn() + Send + Sync + 'static,
    {
        let callable = outside_host_function("GraphBuilder::callback", callable)?;
        self.callback_named(Arc::new(callable), std::any::type_name::<F>())
    }

    /// As [`callback`](Self::callback), with a shared callable.
    ///
    /// # Errors
    /// As [`callback`](Self::callback).
    pub fn callback_shared(&self, callable: HostCallable) -> Result<()> {
        self.callback_named(callable, std::any::type_name::<HostCallable>())
    }

    /// As [`callback_shared`](Self::callback_shared); profilers show its runs as `name`.
    fn callback_named(&self, callable: HostCallable, name: &'static str) -> Result<()> {
        let callable = outside_host_function("GraphBuilder::callback", callable)?;
        reclaim();
        let shared = self.stream.shared_context();
        let record = GraphRecord::callable(Arc::clone(shared), callable, name);
        if self.engine == HostEngine::Polled {
            let word = self
                .words
                .borrow_mut()
                .as_mut()
                .and_then(ReservedWords::take);
            let Some(word) = word else {
                // Dropped as the reclaim rule allows: not during the capture.
                record.drop_soon();
                return Err(Error::AllocationInCapture {
                    what: "an engine node's word, beyond the capture's reserved words",
                });
            };
            let held = capture_lock::adding("GraphBuilder::callback")
                .and_then(|adding| Ok((adding, capture::capturing_graph(self.stream)?)));
            let (_adding, graph) = match held {
                Ok(held) => held,
                Err(error) => {
                    record.drop_soon();
                    shared.release_pinned_word(word);
                    return Err(error);
                }
            };
            let mut node = Some((record, word));
            let added = self.stream.with_stream_context(|| {
                let (record, word) = node.take().expect("taken once");
                // SAFETY: the stream captures into `graph`, and its capture (this builder's)
                // does not end while `_adding` is held.
                unsafe {
                    engine_node::add_to_capture(shared, self.stream.as_raw(), graph, record, word)
                }
            });
            if let Some((record, word)) = node {
                // Refused before the node was added: nothing took them.
                record.drop_soon();
                shared.release_pinned_word(word);
            }
            return added;
        }
        // SAFETY: the stream's capture is this builder's, begun through cuda-host.
        unsafe { capture::add_to_capture(self.stream, record, "GraphBuilder::callback") }
    }

    /// Adds a host node running a C function on every launch. With [`UserData::Copied`], the
    /// graph owns the copy like a callable.
    ///
    /// # Safety
    /// As [`Graph::add_host_node_raw`].
    ///
    /// # Errors
    /// As [`callback`](Self::callback).
    pub unsafe fn callback_raw(
        &self,
        function: unsafe extern "C" fn(*mut c_void),
        user_data: UserData<'_>,
    ) -> Result<()> {
        ensure_outside_host_function("GraphBuilder::callback_raw")?;
        reclaim();
        if let UserData::Copied(bytes) = user_data {
            let shared = Arc::clone(self.stream.shared_context());
            let record = GraphRecord::copied_bytes(shared, function, bytes);
            // SAFETY: as in `callback_named`.
            return unsafe {
                capture::add_to_capture(self.stream, record, "GraphBuilder::callback_raw")
            };
        }
        let pointer = match user_data {
            UserData::PassThrough(pointer) => pointer,
            _ => ptr::null_mut(),
        };
        let _adding = capture_lock::adding("GraphBuilder::callback_raw")?;
        capture::capturing_graph(self.stream)?;
        // SAFETY: the caller vouches for `function` and `pointer`; the stream captures, and its
        // capture (this builder's) does not end while `_adding` is held.
        unsafe { capture::add_node(self.stream, function, pointer) }
    }

    /// Ends the capture and returns the graph.
    ///
    /// NVIDIA's reference: [`cuStreamEndCapture`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html).
    ///
    /// # Errors
    /// The driver's error from `cuStreamEndCapture` (`CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`
    /// when a forbidden call broke the capture). An error an earlier `Drop` left
    /// ([`Error::DropFailed`]) is not returned here, where it would cost the capture: it waits
    /// for the context's next call.
    #[doc(alias = "cuStreamEndCapture")]
    pub fn end(mut self) -> Result<Graph> {
        ensure_outside_host_function("GraphBuilder::end")?;
        // On an error the builder's drop ends the capture if it is still open.
        let graph = self.end_capture()?;
        self.ended = true;
        // SAFETY: a graph fresh from the capture, owned from here on.
        Ok(unsafe { Graph::from_raw(self.stream.context(), graph) })
    }

    fn end_capture(&self) -> Result<CUgraph> {
        let mut graph = ptr::null_mut();
        // The graph's handle, which nodes being added use, is valid until the capture ends.
        let _ending = capture_lock::ending("GraphBuilder::end")?;
        // An error an earlier drop left is no reason to keep the capture open: it waits for the
        // context's next call.
        self.stream.in_stream_context(|| {
            let driver = self.stream.context().driver();
            // SAFETY: the stream is capturing (begun by this builder, on this thread); `graph` is
            // a valid out-pointer.
            Ok(unsafe { checked!(driver, cuStreamEndCapture(self.stream.as_raw(), &mut graph)) }?)
        })?;
        Ok(graph)
    }
}

impl Drop for GraphBuilder<'_> {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        // Ends the capture (when `end` failed, if it is still open) so the stream is usable
        // again, and discards the graph (with the references it holds to callables).
        let capturing = self.stream.in_stream_context(|| {
            capture_state(self.stream.context().driver(), self.stream.as_raw())
        });
        if matches!(capturing, Ok(None)) {
            return;
        }
        match self.end_capture() {
            Ok(graph) if !graph.is_null() => {
                // SAFETY: a graph fresh from the capture, owned here.
                drop(unsafe { Graph::from_raw(self.stream.context(), graph) });
            }
            Ok(_) => {}
            Err(error) => logged!(warn!("ending an abandoned capture: {error}")),
        }
    }
}

impl crate::host_launch::sealed::Sealed for GraphBuilder<'_> {}

impl<F> HostLaunch<F> for GraphBuilder<'_>
where
    F: Fn() + Send + Sync + 'static,
{
    fn host_launch(&self, function: F) -> Result<()> {
        self.callback(function)
    }
}

/// A named callable: profilers show its runs by the name given ([`named`](crate::options::named)).
impl<F> HostLaunch<Named<F>> for GraphBuilder<'_>
where
    F: Fn() + Send + Sync + 'static,
{
    fn host_launch(&self, function: Named<F>) -> Result<()> {
        let callable = outside_host_function("GraphBuilder::callback", function.function)?;
        self.callback_named(Arc::new(callable), function.name)
    }
}

//! The worker threads a sequence's steps run on, each with what only it may hold (captures it
//! began, which its own thread must end), and the watchdog: a step that does not return within
//! its bound stops the run with every worker's state.

use crate::world::StreamEntry;
use cuda_host::{Stream, graph::GraphBuilder};
use cuda_host_sys::{CUgraph, CUresult, CUstreamCaptureMode};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A capture begun through a `GraphBuilder` on this worker, with the callables it added.
pub struct OpenBuilder {
    /// Borrows `stream`'s stream: dropped (ended) before it.
    builder: Option<GraphBuilder<'static>>,
    pub stream: Arc<StreamEntry>,
    pub global: bool,
    pub callbacks: Vec<Arc<crate::witness::Witness>>,
}

impl OpenBuilder {
    /// Begins a capture of `stream` through a builder.
    ///
    /// # Errors
    /// The builder's refusal.
    pub fn begin(
        stream: Arc<StreamEntry>,
        mode: cuda_host::graph::CaptureMode,
        global: bool,
    ) -> cuda_host::Result<OpenBuilder> {
        // SAFETY: the stream lives in the `StreamEntry` the `Arc` below keeps alive, at the same
        // address, until this value drops the builder, which it does first (`end`, `Drop`).
        let borrowed: &'static Stream = unsafe { &*std::ptr::from_ref(&stream.stream) };
        let builder = GraphBuilder::begin(borrowed, mode)?;
        Ok(OpenBuilder {
            builder: Some(builder),
            stream,
            global,
            callbacks: Vec::new(),
        })
    }

    pub fn builder(&self) -> &GraphBuilder<'static> {
        self.builder.as_ref().expect("open until ended")
    }

    /// Ends the capture: its graph.
    pub fn end(mut self) -> cuda_host::Result<cuda_host::graph::Graph> {
        self.builder.take().expect("open until ended").end()
    }
}

impl Drop for OpenBuilder {
    fn drop(&mut self) {
        drop(self.builder.take());
    }
}

/// A capture other code began on this worker (a raw `cuStreamBeginCapture_v2`).
pub struct ForeignCapture {
    pub stream: Arc<StreamEntry>,
    pub mode: CUstreamCaptureMode,
    /// The worker (by id) whose thread began it.
    pub worker: usize,
    /// The steps that ran while it was open and made a call that documentedly breaks it.
    pub breakers: Arc<Mutex<Vec<String>>>,
    /// The process's calls that documentedly break a capture (`breaking_calls`) as it began:
    /// a global-mode capture begun and ended within one step meets the calls of the steps
    /// beside it before the runner notes them as its breakers.
    pub calls_at_begin: u64,
}

/// What the runner watches of a capture other code began: which steps may break it.
pub struct ForeignWatch {
    pub stream: Arc<StreamEntry>,
    pub mode: CUstreamCaptureMode,
    pub worker: usize,
    pub breakers: Arc<Mutex<Vec<String>>>,
}

impl ForeignCapture {
    pub fn watch(&self) -> ForeignWatch {
        ForeignWatch {
            stream: Arc::clone(&self.stream),
            mode: self.mode,
            worker: self.worker,
            breakers: Arc::clone(&self.breakers),
        }
    }

    /// Ends the capture: `Ok` with the graph it ended in (the caller's to destroy), or the
    /// driver's answer.
    pub fn end_keeping(self) -> Result<CUgraph, CUresult> {
        let driver = self.stream.stream.context().driver();
        let mut graph: CUgraph = std::ptr::null_mut();
        // SAFETY: a live stream this worker began capturing; a valid out-pointer.
        let ended = unsafe { driver.cuStreamEndCapture(self.stream.stream.as_raw(), &mut graph) };
        match ended {
            CUresult::CUDA_SUCCESS => Ok(graph),
            other => {
                if !graph.is_null() {
                    // SAFETY: a graph the failed end handed back anyway, destroyed once.
                    let _ = unsafe { driver.cuGraphDestroy(graph) };
                }
                Err(other)
            }
        }
    }
}

/// What a worker holds that only its own thread may touch.
pub struct Local {
    pub id: usize,
    pub builders: Vec<OpenBuilder>,
    pub foreign: Vec<ForeignCapture>,
}

/// A step's work on a worker: its outcome, for the operation log.
pub type Job = Box<dyn FnOnce(&mut Local) -> String + Send>;

struct Worker {
    id: usize,
    jobs: Sender<(Job, Sender<String>)>,
    thread: Option<JoinHandle<()>>,
    /// What it is doing, since when (for the watchdog's report).
    doing: Arc<Mutex<Option<(String, Instant)>>>,
}

static NEXT_WORKER_ID: AtomicUsize = AtomicUsize::new(0);

/// Makes a thread a step starts a thread of the application's, as the witnesses see it: a
/// worker of an id of its own (values are dropped there as on any worker, and what it handed
/// over, a logger's launches say, anywhere once it ends). Ends with the guard.
#[must_use]
pub fn become_step_thread() -> StepThread {
    let id = NEXT_WORKER_ID.fetch_add(1, Ordering::Relaxed);
    crate::witness::become_worker(id);
    StepThread(id)
}

/// A thread a step started, noted as exited when dropped (at the end of its work).
pub struct StepThread(usize);

impl Drop for StepThread {
    fn drop(&mut self) {
        crate::witness::worker_exited(self.0);
    }
}

impl Worker {
    fn start() -> Worker {
        let id = NEXT_WORKER_ID.fetch_add(1, Ordering::Relaxed);
        let (jobs, received) = channel::<(Job, Sender<String>)>();
        let doing = Arc::new(Mutex::new(None));
        // An explicit stack size: in the run where cuda-host's threads cannot start (an
        // impossible RUST_MIN_STACK), the harness's own still do.
        let thread = std::thread::Builder::new()
            .name(format!("chaos worker {id}"))
            .stack_size(8 << 20)
            .spawn(move || {
                crate::witness::become_worker(id);
                let mut local = Local {
                    id,
                    builders: Vec::new(),
                    foreign: Vec::new(),
                };
                for (job, reply) in received {
                    // A step that panics (the harness's own mistake, or a panic cuda-host let
                    // through) is a violation, and the worker goes on.
                    let outcome = catch_unwind(AssertUnwindSafe(|| job(&mut local)))
                        .unwrap_or_else(|payload| {
                            let message = payload
                                .downcast_ref::<String>()
                                .cloned()
                                .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                                .unwrap_or_default();
                            crate::witness::violated(format!("a step panicked: {message}"));
                            format!("panicked: {message}")
                        });
                    let _ = reply.send(outcome);
                }
            })
            .expect("a worker thread starts");
        Worker {
            id,
            jobs,
            thread: Some(thread),
            doing,
        }
    }
}

/// A step that did not return within its bound: every worker's state.
#[derive(Debug)]
pub struct Stuck(pub String);

/// The workers of one sequence.
pub struct Workers {
    workers: Vec<Worker>,
    bound: Duration,
    /// Steps sent to a worker without waiting for them, which run beside the next.
    pending: Vec<(usize, String, Receiver<String>)>,
}

impl Workers {
    pub fn start(count: usize, bound: Duration) -> Workers {
        Workers {
            workers: (0..count).map(|_| Worker::start()).collect(),
            bound,
            pending: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.workers.len()
    }

    /// The id of worker `index`.
    pub fn id(&self, index: usize) -> usize {
        self.workers[index].id
    }

    /// Runs `job` on worker `index` and waits for its outcome, at most the bound.
    ///
    /// # Errors
    /// [`Stuck`] when it did not return in time.
    pub fn run(&mut self, index: usize, what: String, job: Job) -> Result<String, Stuck> {
        let reply = self.send(index, what.clone(), job);
        self.wait(index, &what, &reply)
    }

    /// Sends `job` to worker `index` without waiting for it: the next steps run meanwhile, on
    /// their workers, and [`finish_pending`](Self::finish_pending) waits for it.
    pub fn run_beside(&mut self, index: usize, what: String, job: Job) {
        let reply = self.send(index, what.clone(), job);
        self.pending.push((index, what, reply));
    }

    /// Waits for every step started without waiting.
    ///
    /// # Errors
    /// [`Stuck`] when one does not return within the bound.
    pub fn finish_pending(&mut self) -> Result<Vec<(String, String)>, Stuck> {
        let mut done = Vec::new();
        for (index, what, reply) in std::mem::take(&mut self.pending) {
            done.push((what.clone(), self.wait(index, &what, &reply)?));
        }
        Ok(done)
    }

    fn send(&mut self, index: usize, what: String, job: Job) -> Receiver<String> {
        let (reply, outcome) = channel();
        let doing = Arc::clone(&self.workers[index].doing);
        let job: Job = Box::new(move |local| {
            *doing.lock().unwrap() = Some((what, Instant::now()));
            let outcome = job(local);
            *doing.lock().unwrap() = None;
            outcome
        });
        self.workers[index]
            .jobs
            .send((job, reply))
            .expect("the worker lives");
        outcome
    }

    fn wait(&self, index: usize, what: &str, reply: &Receiver<String>) -> Result<String, Stuck> {
        match reply.recv_timeout(self.bound) {
            Ok(outcome) => Ok(outcome),
            Err(RecvTimeoutError::Timeout) => Err(Stuck(format!(
                "worker {index} did not finish `{what}` within {:?}\n{}",
                self.bound,
                self.states()
            ))),
            Err(RecvTimeoutError::Disconnected) => Err(Stuck(format!(
                "worker {index} died running `{what}` (a panic outside every step's catch)"
            ))),
        }
    }

    /// What every worker is doing, and for how long.
    pub fn states(&self) -> String {
        let mut states = String::new();
        for (index, worker) in self.workers.iter().enumerate() {
            let doing = worker.doing.lock().unwrap();
            let line = match &*doing {
                Some((what, since)) => {
                    format!("  worker {index}: `{what}` for {:?}\n", since.elapsed())
                }
                None => format!("  worker {index}: idle\n"),
            };
            states.push_str(&line);
        }
        states
    }

    /// Replaces worker `index` by a fresh thread, after its own captures were ended on it; the
    /// old thread exits (its records pass to the shared list).
    ///
    /// # Errors
    /// [`Stuck`] when the old thread does not exit within the bound.
    pub fn retire(&mut self, index: usize) -> Result<(), Stuck> {
        let old = std::mem::replace(&mut self.workers[index], Worker::start());
        self.exit(index, old)
    }

    /// Stops every worker.
    ///
    /// # Errors
    /// [`Stuck`] when one does not exit within the bound.
    pub fn stop(mut self) -> Result<(), Stuck> {
        for (index, worker) in std::mem::take(&mut self.workers).into_iter().enumerate() {
            self.exit(index, worker)?;
        }
        Ok(())
    }

    /// Lets `worker` exit, and waits for its thread (its thread-locals' destructors included).
    fn exit(&self, index: usize, mut worker: Worker) -> Result<(), Stuck> {
        let id = worker.id;
        // Noted before it exits: as it exits, its records pass to the shared list, which any
        // thread drains at once (a step beside this one may).
        crate::witness::worker_exited(id);
        crate::timelines::worker_exits(id);
        drop(worker.jobs);
        let thread = worker.thread.take().expect("joined once");
        let deadline = Instant::now() + self.bound;
        while !thread.is_finished() {
            if Instant::now() > deadline {
                return Err(Stuck(format!("worker {index} (id {id}) did not exit")));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        thread.join().expect("a worker's thread");
        Ok(())
    }
}

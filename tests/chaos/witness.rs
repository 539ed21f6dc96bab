//! Witnesses: the values the harness hands to cuda-host, each recording what happens to it (runs,
//! drops, on which thread, in which state of the harness), and the violations of the documented
//! rules they see. A witness never panics on its own account where cuda-host runs it (a panic is
//! only the one a step asked for): what it sees goes to the violation list, which the runner reads
//! after every step.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A rule broken, as a witness or a check saw it.
#[derive(Debug, Clone)]
pub struct Violation(pub String);

static VIOLATIONS: Mutex<Vec<Violation>> = Mutex::new(Vec::new());

/// Records a violation; the runner fails the sequence at its next look.
pub fn violated(what: String) {
    VIOLATIONS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(Violation(what));
}

/// The violations recorded since the last call.
pub fn take_violations() -> Vec<Violation> {
    std::mem::take(
        &mut *VIOLATIONS
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()),
    )
}

thread_local! {
    /// The harness worker this thread is, by its id (`None` on every other thread: the driver's,
    /// the engine's, the watcher's, the runner's). A worker that exits is replaced by one with a
    /// new id.
    static WORKER: Cell<Option<usize>> = const { Cell::new(None) };
    /// Captures this thread began through a `GraphBuilder` and has not ended.
    static BUILDING: Cell<u32> = const { Cell::new(0) };
    /// Whether a host function ran on this thread, which is no worker: the driver's (or the
    /// polled engine's, marked for its life).
    static RUNS_HOST_FUNCTIONS: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is one the driver (or the polled engine) ran host functions on.
pub fn runs_host_functions() -> bool {
    RUNS_HOST_FUNCTIONS.try_with(Cell::get).unwrap_or(false)
}

/// Global-mode captures begun through a `GraphBuilder` (by any worker) and not ended: while one
/// is open, no `Drop` of a witness may run anywhere.
static GLOBAL_BUILDS: AtomicUsize = AtomicUsize::new(0);
/// Global-mode captures through a `GraphBuilder` from before their `begin` is called until
/// after their `end` (or a failed `begin`) returned: cuda-host holds drops back within that span
/// (from before the capture begins, until its end returned), so a drop it could not make at once
/// is no violation then.
static GLOBAL_SPANS: AtomicUsize = AtomicUsize::new(0);

/// Changes of the two counts above: a call during which it moved may have met a global capture.
static GLOBAL_CHANGES: AtomicUsize = AtomicUsize::new(0);

/// Notes a global-mode builder capture's span opening (before its `begin`) or closed (after its
/// `end`, or a failed `begin`, returned).
pub fn global_span(open: bool) {
    GLOBAL_CHANGES.fetch_add(1, Ordering::SeqCst);
    if open {
        GLOBAL_SPANS.fetch_add(1, Ordering::SeqCst);
    } else {
        GLOBAL_SPANS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether no global-mode builder capture was open or beginning at any instant since
/// `changes` was read from [`global_changes`] (the calling thread's own captures aside).
pub fn no_global_capture_since(changes: usize) -> bool {
    GLOBAL_BUILDS.load(Ordering::SeqCst) == 0
        && GLOBAL_SPANS.load(Ordering::SeqCst) == 0
        && GLOBAL_CHANGES.load(Ordering::SeqCst) == changes
}

/// The count of changes, to read before a call and pass to [`no_global_capture_since`] after.
pub fn global_changes() -> Option<usize> {
    let changes = GLOBAL_CHANGES.load(Ordering::SeqCst);
    let none =
        GLOBAL_BUILDS.load(Ordering::SeqCst) == 0 && GLOBAL_SPANS.load(Ordering::SeqCst) == 0;
    none.then_some(changes)
}

/// Marks the calling thread as the worker of id `id` for its life.
pub fn become_worker(id: usize) {
    WORKER.with(|worker| worker.set(Some(id)));
}

/// The worker the calling thread is.
pub fn current_worker() -> Option<usize> {
    WORKER.with(Cell::get)
}

/// Notes that this thread's builder capture began (after `begin` returned) or is about to end
/// (before `end` is called): drops are forbidden in between.
pub fn building(begun: bool, global: bool) {
    BUILDING.with(|count| {
        count.set(if begun {
            count.get() + 1
        } else {
            count.get() - 1
        })
    });
    if global {
        GLOBAL_CHANGES.fetch_add(1, Ordering::SeqCst);
        if begun {
            GLOBAL_BUILDS.fetch_add(1, Ordering::SeqCst);
        } else {
            GLOBAL_BUILDS.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Whether a witness's `Drop` may run on the calling thread now: it captures through no
/// builder, and no global-mode builder capture is open or beginning anywhere.
pub fn drops_allowed_here() -> bool {
    BUILDING.with(Cell::get) == 0
        && GLOBAL_BUILDS.load(Ordering::SeqCst) == 0
        && GLOBAL_SPANS.load(Ordering::SeqCst) == 0
}

/// A condition a witness's drop must find true: the stream of `progress` passed its marker
/// `marker`, enqueued right after the work that must have finished first (a release's, right
/// before the value's point); or, for work enqueued right before the marker, the stream
/// completed that work (`operation`).
#[derive(Clone)]
pub struct Passed {
    pub progress: Arc<crate::world::Progress>,
    pub marker: u32,
    /// The work's operation on its stream, where the software driver numbers them: the driver
    /// lets a launch's callables go as the launch finishes, before its stream goes on to the
    /// marker (by more than [`STREAM_LAG`] when the stream's thread is not scheduled then).
    pub operation: Option<crate::world::Operation>,
}

/// How long a drop waits for its stream to write a marker it has not seen yet, where the work's
/// operation is not known: a stream that passed the work writes the marker soon after.
const STREAM_LAG: std::time::Duration = std::time::Duration::from_micros(500);

/// The order of the harness's events across workers: a step that runs beside another tells what
/// happened before it by this.
static CLOCK: AtomicU64 = AtomicU64::new(1);

/// The next instant of [`CLOCK`].
pub fn tick() -> u64 {
    CLOCK.fetch_add(1, Ordering::SeqCst)
}

/// What happens to one value handed to cuda-host.
pub struct Witness {
    /// What it is, for the messages (`host_launch #12 on stream 3`).
    pub what: String,
    /// The worker that handed it over: its home, where its `Drop` must run while it lives.
    pub home: usize,
    pub runs: AtomicU32,
    pub drops: AtomicU32,
    /// Whether its run panics (asked by the step).
    pub panic_in_run: bool,
    /// Whether its `Drop` panics (asked by the step).
    pub panic_in_drop: bool,
    /// Whether it must run exactly once before its drop (a run-once launch the driver accepted,
    /// on a context that did not fail).
    pub must_run: AtomicBool,
    /// Whether it may run at most once (run-once launches).
    pub once: bool,
    /// What must have passed before it may be dropped.
    pub not_before: Mutex<Vec<Passed>>,
    /// Whether the harness took it back (a refused release hands the value back): dropped by
    /// the harness, not by cuda-host.
    pub handed_back: AtomicBool,
    /// When the call that handed it over returned accepted ([`tick`]; 0 before).
    pub accepted_at: AtomicU64,
}

/// Every witness of the sequence under way.
static WITNESSES: Mutex<Vec<Arc<Witness>>> = Mutex::new(Vec::new());
/// Home workers that exited (their records pass to any thread).
static EXITED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

impl Witness {
    /// A witness of `what`, homed on the calling worker.
    pub fn new(what: String, panic_in_run: bool, panic_in_drop: bool, once: bool) -> Arc<Witness> {
        let witness = Arc::new(Witness {
            what,
            home: current_worker().expect("witnesses are made on workers"),
            runs: AtomicU32::new(0),
            drops: AtomicU32::new(0),
            panic_in_run,
            panic_in_drop,
            must_run: AtomicBool::new(false),
            once,
            not_before: Mutex::new(Vec::new()),
            handed_back: AtomicBool::new(false),
            accepted_at: AtomicU64::new(0),
        });
        WITNESSES.lock().unwrap().push(Arc::clone(&witness));
        witness
    }

    /// A value whose drop this witness sees.
    pub fn probe(self: &Arc<Self>) -> Probe {
        Probe(Arc::clone(self))
    }

    pub fn runs(&self) -> u32 {
        self.runs.load(Ordering::SeqCst)
    }

    pub fn drops(&self) -> u32 {
        self.drops.load(Ordering::SeqCst)
    }

    /// Adds a condition its drop must find true.
    pub fn not_before(&self, passed: Passed) {
        self.not_before.lock().unwrap().push(passed);
    }
}

/// Forgets the witnesses and exited workers of the last sequence.
pub fn reset() {
    WITNESSES.lock().unwrap().clear();
    EXITED.lock().unwrap().clear();
}

/// Every witness of the sequence.
pub fn all() -> Vec<Arc<Witness>> {
    WITNESSES.lock().unwrap().clone()
}

/// Notes that worker `id`'s thread exited: its witnesses may be dropped anywhere.
pub fn worker_exited(id: usize) {
    EXITED.lock().unwrap().push(id);
}

/// Whether worker `id`'s thread exited.
pub fn has_exited(id: usize) -> bool {
    EXITED.lock().unwrap().contains(&id)
}

/// The value a closure captures: counts its runs and its drop, and checks where each happens.
pub struct Probe(pub Arc<Witness>);

impl Probe {
    /// Called by the closure or callable when it runs.
    pub fn ran(&self) {
        let witness = &self.0;
        if witness.drops() != 0 {
            violated(format!("{} ran after it was dropped", witness.what));
        }
        let runs = witness.runs.fetch_add(1, Ordering::SeqCst) + 1;
        if witness.once && runs > 1 {
            violated(format!("{} ran {runs} times", witness.what));
        }
        if current_worker().is_some() && !cuda_host::in_host_function() {
            violated(format!(
                "{} ran on a worker outside a host function",
                witness.what
            ));
        }
        if current_worker().is_none() {
            let _ = RUNS_HOST_FUNCTIONS.try_with(|runs| runs.set(true));
        }
        if witness.panic_in_run {
            panic!("{PANIC_IN_RUN}");
        }
    }
}

/// The messages of the panics the harness injects, which the panic hook counts ("deliberate":
/// the suite's quiet panic hook keeps them out of the output).
pub const PANIC_IN_RUN: &str = "deliberate chaos panic in a run";
pub const PANIC_IN_DROP: &str = "deliberate chaos panic in a drop";

impl Drop for Probe {
    fn drop(&mut self) {
        let witness = &self.0;
        let drops = witness.drops.fetch_add(1, Ordering::SeqCst) + 1;
        let what = &witness.what;
        if drops > 1 {
            violated(format!("{what} dropped {drops} times"));
        }
        if witness.handed_back.load(Ordering::SeqCst) {
            // cuda-host handed it back: the harness drops it where it likes, as a user may.
            if witness.panic_in_drop && !std::thread::panicking() {
                panic!("{PANIC_IN_DROP}");
            }
            return;
        }
        if cuda_host::in_host_function() {
            violated(format!("{what} dropped inside a host function"));
        }
        match current_worker() {
            None => violated(format!(
                "{what} dropped on a thread that is no worker ({:?})",
                std::thread::current().name()
            )),
            Some(worker) if worker != witness.home => {
                let exited = EXITED.lock().unwrap().contains(&witness.home);
                if !exited && !witness.handed_back.load(Ordering::SeqCst) {
                    violated(format!(
                        "{what} dropped on worker {worker}, not on its home worker {}",
                        witness.home
                    ));
                }
            }
            Some(_) => {}
        }
        if BUILDING.with(Cell::get) != 0 {
            violated(format!(
                "{what} dropped on a worker capturing through a GraphBuilder"
            ));
        }
        if GLOBAL_BUILDS.load(Ordering::SeqCst) != 0 {
            violated(format!(
                "{what} dropped while a global-mode GraphBuilder capture is open"
            ));
        }
        if witness.must_run.load(Ordering::SeqCst) && witness.runs() == 0 {
            violated(format!("{what} dropped before it ran"));
        }
        for passed in witness.not_before.lock().unwrap().iter() {
            let seen = passed.progress.seen_within(passed.marker, STREAM_LAG);
            if seen < passed.marker && !passed.operation.is_some_and(|work| work.completed()) {
                violated(format!(
                    "{what} dropped before its stream passed it (marker {} of {}, at {seen})",
                    passed.marker, passed.progress.name
                ));
            }
        }
        // A user's `Drop` may call cuda-host back: one in three reclaims, inside the drain that
        // drops it (refused there, which must leave that drain in force) or wherever it runs.
        if DROPS.fetch_add(1, Ordering::Relaxed).is_multiple_of(3) {
            cuda_host::reclaim();
            RECLAIMS_IN_DROPS.fetch_add(1, Ordering::Relaxed);
        }
        if witness.panic_in_drop && !std::thread::panicking() {
            panic!("{PANIC_IN_DROP}");
        }
    }
}

/// Witnesses dropped by cuda-host, over the run.
static DROPS: AtomicU64 = AtomicU64::new(0);
/// How many of their `Drop`s called [`cuda_host::reclaim`] back, for the figures.
pub static RECLAIMS_IN_DROPS: AtomicU64 = AtomicU64::new(0);

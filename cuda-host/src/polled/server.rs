//! The polled engine's server: one process-wide thread that runs the host functions of the
//! lanes it serves, in order, and acknowledges each.
//!
//! A lane is served from the enqueue that finds it unserved until the server finds its queue
//! empty and no function of it ran for `LINGER` (the emptiness seen under the queue's lock, so a
//! function queued meanwhile is never left unserved).
//! The server holds the lane's context while it serves it, so the words it reads stay allocated;
//! it lets go of the context through the reclaim rule, since its thread counts as inside a host
//! function for its whole life.
//!
//! Its pace: it looks at its lanes without pause while a function ran in the last `SPIN`, then
//! yields until `YIELD`, then sleeps in growing steps up to `LONGEST_SLEEP` while functions are
//! queued (a stream still busy with earlier work); with none queued it lingers `LINGER`, then
//! parks until an enqueue finds it parked.
//!
//! No batch is enqueued unless the thread runs ([`start`] answers first). Nothing on it unwinds:
//! the functions are trampolines that catch every panic (or raw functions, which cannot unwind),
//! its log calls catch a panicking logger, and each round of its loop runs under `catch_unwind`
//! besides, so that the thread outlives a panic it did not foresee.

use super::lanes::{KEPT_PAGES, Lane, RETIRED_LANES, Words};
use crate::contained_log::logged;
use crate::error::Result;
use crate::launch::{ContextShared, InHostFunction, dispose_panic, drop_when_allowed, has_failed};
use crate::observe;
use crate::own_thread::OwnThread;
use crate::sync::lock;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A lane being served, with the context that keeps its words. The words and the context's
/// address are copies: polling reads them here, not from lines every enqueue writes (the lane's
/// locks, the context's count of references).
struct Served {
    lane: Arc<Lane>,
    words: Words,
    context: Arc<ContextShared>,
    context_address: usize,
    /// When a function of it last ran (or it was registered).
    last_active: Instant,
}

#[derive(Default)]
struct Registry {
    /// Lanes enqueuers asked the server to serve, not yet taken on its own list.
    fresh: Vec<Served>,
    /// Set by the server, under the lock, just before it parks.
    parked: bool,
}

struct Server {
    registry: Mutex<Registry>,
    functions: AtomicU64,
    parks: AtomicU64,
    serving: AtomicU64,
}

static SERVER: Server = Server {
    registry: Mutex::new(Registry {
        fresh: Vec::new(),
        parked: false,
    }),
    functions: AtomicU64::new(0),
    parks: AtomicU64::new(0),
    serving: AtomicU64::new(0),
};

/// The thread, started by the first lane it is asked to serve.
static THREAD: OwnThread = OwnThread::new("cuda-host-poll", run);

/// What the polled engine's server holds and has done, process-wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PolledEngineCounts {
    /// Lanes (streams) it serves now: with host functions queued, or just run.
    pub serving: u64,
    /// Host functions it ran (or let go unrun after their context failed).
    pub functions: u64,
    /// Whether its thread is parked (nothing queued anywhere).
    pub parked: bool,
    /// How many times it parked since it started.
    pub parks: u64,
    /// Lanes retired because a capture took one of their batches (the launch was refused); a
    /// retired lane is never lent again.
    pub retired_lanes: u64,
    /// Pages of lanes (4 KiB of pinned memory each) kept for the life of the process after their
    /// context value went, because a graph may still write into a retired lane of theirs.
    pub kept_pages: u64,
}

/// What the polled engine's server holds and has done (see [`PolledEngineCounts`]).
pub fn polled_engine_counts() -> PolledEngineCounts {
    let parked = lock(&SERVER.registry).parked;
    PolledEngineCounts {
        serving: SERVER.serving.load(Ordering::SeqCst),
        functions: SERVER.functions.load(Ordering::SeqCst),
        parked,
        parks: SERVER.parks.load(Ordering::Relaxed),
        retired_lanes: RETIRED_LANES.load(Ordering::Relaxed),
        kept_pages: KEPT_PAGES.load(Ordering::Relaxed),
    }
}

/// Starts the server's thread unless it runs.
///
/// # Errors
/// [`Error::ThreadStart`](crate::Error::ThreadStart) when it cannot be started.
pub(super) fn start() -> Result<()> {
    THREAD.get().map(drop)
}

/// Makes sure the server serves `lane`, which just got a function queued. The server's thread
/// runs: every enqueue started it first.
pub(super) fn serve(lane: &Arc<Lane>, context: &Arc<ContextShared>) {
    // Looked at before it is set, so that an enqueue on a lane the server keeps writes nothing
    // here. A lane the server let go, it let go with its queue empty under the queue's lock,
    // which this enqueue took afterwards to queue its function: the look sees it let go.
    if lane.served.load(Ordering::Acquire) || lane.served.swap(true, Ordering::AcqRel) {
        return;
    }
    SERVER.serving.fetch_add(1, Ordering::SeqCst);
    let Ok(thread) = THREAD.get() else {
        // Unreachable: the enqueue started the thread, which is never given back.
        return;
    };
    let mut registry = lock(&SERVER.registry);
    registry.fresh.push(Served {
        lane: Arc::clone(lane),
        words: lane.words(),
        context: Arc::clone(context),
        context_address: context.raw().addr(),
        last_active: Instant::now(),
    });
    if registry.parked {
        registry.parked = false;
        drop(registry);
        thread.unpark();
    }
}

const SPIN: Duration = Duration::from_micros(100);
const YIELD: Duration = Duration::from_millis(1);
const LONGEST_SLEEP: Duration = Duration::from_micros(200);
const LINGER: Duration = Duration::from_millis(2);

fn run() {
    // Host functions run here: no cuda-host call reaches the driver from this thread, and
    // nothing is dropped here (values go to their launching threads, the rest to any caller).
    let _marked = InHostFunction::enter();
    let mut served: Vec<Served> = Vec::new();
    let mut last_progress = Instant::now();
    loop {
        let round = catch_unwind(AssertUnwindSafe(|| {
            serve_round(&mut served, &mut last_progress);
        }));
        if let Err(payload) = round {
            dispose_panic(payload);
            logged!(error!(
                "a round of the polled engine's server panicked; the server goes on"
            ));
        }
    }
}

/// One round of the server's loop: takes on the lanes registered, serves each, lets go of those
/// quiet for `LINGER`, then spins, yields, sleeps or parks.
fn serve_round(served: &mut Vec<Served>, last_progress: &mut Instant) {
    {
        let mut registry = lock(&SERVER.registry);
        served.append(&mut registry.fresh);
        if served.is_empty() && last_progress.elapsed() >= LINGER {
            registry.parked = true;
            SERVER.parks.fetch_add(1, Ordering::Relaxed);
            drop(registry);
            std::thread::park();
            *last_progress = Instant::now();
            return;
        }
    }
    let mut progressed = false;
    let mut index = 0;
    while index < served.len() {
        let lane = &mut served[index];
        if serve_lane(lane) {
            lane.last_active = Instant::now();
            progressed = true;
        }
        // Kept a while after its last function, so that a stream launching one after
        // another does not register again each time.
        let quiet = lane.last_active.elapsed() >= LINGER && {
            let queue = lock(&lane.lane.queue);
            let empty = queue.is_empty();
            if empty {
                lane.lane.served.store(false, Ordering::Release);
            }
            empty
        };
        if quiet {
            let done = served.swap_remove(index);
            SERVER.serving.fetch_sub(1, Ordering::SeqCst);
            // The context's release is a driver call: made by a caller's thread instead.
            drop_when_allowed(done.context);
        } else {
            index += 1;
        }
    }
    if progressed {
        *last_progress = Instant::now();
    }
    let quiet = last_progress.elapsed();
    if quiet < SPIN {
        std::hint::spin_loop();
    } else if quiet < YIELD {
        std::thread::yield_now();
    } else {
        std::thread::sleep((quiet / 8).min(LONGEST_SLEEP));
    }
}

/// Runs the functions of `served` whose numbers the stream wrote, in order, acknowledging each,
/// and acknowledges the numbers a capture took once those before them are done; lets them go
/// unrun if the context failed. Whether any ran or went.
fn serve_lane(served: &Served) -> bool {
    let words = served.words;
    // The lane itself, whose locks every enqueue on it takes, is left alone while the stream
    // wrote no number since the last acknowledgement and no taken number waits.
    let mut progressed = run_reached(served, words);
    if !progressed && has_failed(served.context_address) {
        // The stream will never write again: its run-once records were abandoned by the
        // failure's path; raw functions are not run, as the driver runs none after a failure.
        let let_go: Vec<_> = lock(&served.lane.queue).drain(..).collect();
        if let Some(last) = let_go.last() {
            words.acknowledge(last.number);
            SERVER
                .functions
                .fetch_add(let_go.len() as u64, Ordering::SeqCst);
            logged!(debug!(
                "the polled engine let go of {} host functions of a failed context",
                let_go.len()
            ));
            progressed = true;
        }
    }
    progressed
}

/// Runs the functions of `served`'s lane (with its `words`) whose numbers the stream wrote, in
/// order, acknowledging each: the first queued when the stream's word holds its number (the
/// stream writes the next only once it was acknowledged), and a number a capture took as soon
/// as it is first. Whether any went.
fn run_reached(served: &Served, words: Words) -> bool {
    let lane: &Lane = &served.lane;
    let mut ran = false;
    loop {
        let sequence = words.sequence();
        if !ran && sequence == words.acknowledged() && !lane.is_retired() {
            return false;
        }
        let next = {
            let mut queue = lock(&lane.queue);
            match queue.front() {
                Some(waiting) if waiting.call.is_none() || waiting.number == sequence => {
                    queue.pop_front()
                }
                _ => None,
            }
        };
        let Some(waiting) = next else {
            return ran;
        };
        if let Some((function, data)) = waiting.call {
            let observed = observe::engine_call();
            // SAFETY: enqueued with this function and data by a launch, whose caller vouched
            // that the function may be called with it on a host-function thread; the trampoline
            // catches every panic (and, once the context failed, runs no record).
            unsafe { function(data) };
            observed.end();
        }
        words.acknowledge(waiting.number);
        SERVER.functions.fetch_add(1, Ordering::SeqCst);
        ran = true;
    }
}

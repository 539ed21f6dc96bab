//! The polled engine's servers: a small pool of threads, each running the host functions of the
//! lanes it serves, in order, and acknowledging each.
//!
//! **The pool.** Its threads, all named `cuda-host-poll`, start together with the first polled
//! stream, [`polled_engine_threads`] of them: by default half the cores the process may use, at
//! most 4 and at least 1 (each spins while its lanes' functions follow one another closely, so
//! the rule leaves the other half to the threads that feed the streams), or the number given to
//! [`set_polled_engine_threads`]. A lane is served by one server from the enqueue that finds it
//! unserved (which hands it to the server serving the fewest lanes) until that server finds its
//! queue empty and no function of it ran for `LINGER` (the emptiness seen under the queue's lock,
//! so a function queued meanwhile is never left unserved); only then may a later enqueue hand it
//! to another. So a stream's functions run in order and never on two threads at once, while those
//! of streams on different servers run in parallel.
//!
//! A server holds the lane's context while it serves it, so the words it reads stay allocated; it
//! lets go of the context through the reclaim rule, since its thread counts as inside a host
//! function for its whole life.
//!
//! Its pace: a server looks at its lanes without pause while a function ran in the last `SPIN`,
//! then yields until `YIELD`, then, at the pace the user chose (`pace`), sleeps in pauses of
//! `PAUSE` while functions are queued (a stream still busy with earlier work), its timer slack
//! at the least and the pause lengthened where its rounds cost more than a ninth of it, for
//! about a tenth of a core (`crate::pause`), or yields on for a core; with none queued it
//! lingers `LINGER`, then parks until an enqueue hands it a lane.
//!
//! No batch is enqueued unless the pool runs ([`start`] answers first), and a lane is handed only
//! to a server whose thread runs. Nothing on a server unwinds: the functions are trampolines that
//! catch every panic (or raw functions, which cannot unwind), its log calls catch a panicking
//! logger, and each round of its loop runs under `catch_unwind` besides, so that the thread
//! outlives a panic it did not foresee.

use super::lanes::{KEPT_PAGES, Lane, RETIRED_LANES, Words};
use super::nodes::{NodeSlot, RETIRED_NODES};
use super::pace::{EnginePace, pace};
use crate::contain::{InHostFunction, dispose, logged};
use crate::error::{Error, Result};
use crate::launch::{ContextShared, defer_value, drop_when_allowed, has_failed};
use crate::observe;
use crate::own_thread::OwnThreads;
use crate::pause::{Slack, SleepCost, set_timer_slack};
use crate::sync::lock;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The most server threads the pool may have.
pub const MAX_POLLED_ENGINE_THREADS: usize = 64;

/// The pool's size by default: half the cores, at most 4, at least 1.
const DEFAULT_MOST: usize = 4;

/// Lanes a server's registry takes before it must grow (it keeps its peak after).
const FRESH_RESERVED: usize = 16;

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

/// A graph's engine node (of one executable) being served, with the context that keeps its
/// word.
struct ServedNode {
    slot: Arc<NodeSlot>,
    context: Arc<ContextShared>,
    context_address: usize,
    last_active: Instant,
}

#[derive(Default)]
struct Registry {
    /// Lanes enqueuers handed this server, not yet taken on its own list.
    fresh: Vec<Served>,
    /// Engine nodes launches handed this server, not yet taken on its own list.
    fresh_nodes: Vec<ServedNode>,
    /// Set by the server, under the lock, just before it parks.
    parked: bool,
    /// Set by the server, under the lock, just before it sleeps between two rounds: a hand-over
    /// ends the sleep, as it ends a park.
    resting: bool,
}

/// One server of the pool: what enqueuers hand it and what it counts. Aligned apart, so that
/// one server's counts share no cache line with another's.
#[repr(align(128))]
struct Server {
    registry: Mutex<Registry>,
    functions: AtomicU64,
    parks: AtomicU64,
    /// Sleeps between two rounds while what it serves had functions or launches queued, or ran
    /// one in the last `LINGER` (`PolledEngineCounts::sleeps`).
    sleeps: AtomicU64,
    /// Lanes it serves: the pool hands a new lane to the server with the fewest.
    serving: AtomicU64,
}

impl Server {
    const fn new() -> Server {
        Server {
            registry: Mutex::new(Registry {
                fresh: Vec::new(),
                fresh_nodes: Vec::new(),
                parked: false,
                resting: false,
            }),
            functions: AtomicU64::new(0),
            parks: AtomicU64::new(0),
            sleeps: AtomicU64::new(0),
            serving: AtomicU64::new(0),
        }
    }
}

static SERVERS: [Server; MAX_POLLED_ENGINE_THREADS] =
    [const { Server::new() }; MAX_POLLED_ENGINE_THREADS];

/// The servers' threads: the `index`-th serves `SERVERS[index]`; never given back.
static THREADS: OwnThreads<MAX_POLLED_ENGINE_THREADS> =
    OwnThreads::new("cuda-host-poll", |index| run(&SERVERS[index]));

/// The pool's settings, changed under its lock.
struct Pool {
    /// The size [`set_polled_engine_threads`] asked for before the pool started (0: the rule's).
    requested: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool { requested: 0 });
/// The servers new lanes are handed to, `SERVERS[..SIZE]`; 0 until the pool started.
static SIZE: AtomicUsize = AtomicUsize::new(0);
/// Where the search for the least busy server begins, turned at each hand-over, so that servers
/// serving as many lanes take new ones in turn.
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// What the polled engine's servers hold and have done, process-wide: sums over the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PolledEngineCounts {
    /// Lanes (streams) and graphs' engine nodes served now: with host functions or launches
    /// queued, or just run (and retired engine nodes, for good).
    pub serving: u64,
    /// Host functions run (or let go unrun after their context failed).
    pub functions: u64,
    /// Whether every server thread is parked (nothing queued anywhere); `false` before the pool
    /// started.
    pub parked: bool,
    /// How many times a server parked since the pool started.
    pub parks: u64,
    /// How many times a server slept between two looks while functions or graph launches were
    /// queued on what it serves, or had run in the last 2 ms, since the pool started (never, at
    /// [`EnginePace::Spinning`]).
    pub sleeps: u64,
    /// Server threads that run (started, never stopped; 0 before the first polled stream).
    pub threads: u64,
    /// Lanes retired because a capture took one of their batches (the launch was refused); a
    /// retired lane is never lent again.
    pub retired_lanes: u64,
    /// Pages of lanes (4 KiB of pinned memory each) kept for the life of the process after their
    /// context value went, because a graph may still write into a retired lane of theirs.
    pub kept_pages: u64,
    /// Engine nodes of executables retired because a capture may have taken a launch of theirs
    /// ([`GraphExec::launch`](crate::graph::GraphExec::launch)): each is served for the life of the
    /// process, so its server never parks again.
    pub retired_graph_nodes: u64,
}

/// What the polled engine's servers hold and have done (see [`PolledEngineCounts`]).
pub(crate) fn polled_engine_counts() -> PolledEngineCounts {
    let started = &SERVERS[..THREADS.started()];
    let sum = |count: fn(&Server) -> &AtomicU64| -> u64 {
        started
            .iter()
            .map(|server| count(server).load(Ordering::SeqCst))
            .sum()
    };
    PolledEngineCounts {
        serving: sum(|server| &server.serving),
        functions: sum(|server| &server.functions),
        parked: !started.is_empty() && started.iter().all(|server| lock(&server.registry).parked),
        parks: sum(|server| &server.parks),
        sleeps: sum(|server| &server.sleeps),
        threads: started.len() as u64,
        retired_lanes: RETIRED_LANES.load(Ordering::Relaxed),
        kept_pages: KEPT_PAGES.load(Ordering::Relaxed),
        retired_graph_nodes: RETIRED_NODES.load(Ordering::Relaxed),
    }
}

/// How many server threads the polled engine spreads streams over: the size
/// [`set_polled_engine_threads`] set, else the default rule's, half the cores the process may use
/// ([`std::thread::available_parallelism`]), at most 4 and at least 1.
pub fn polled_engine_threads() -> usize {
    match SIZE.load(Ordering::Acquire) {
        0 => match lock(&POOL).requested {
            0 => default_threads(),
            requested => requested,
        },
        size => size,
    }
}

/// Sets how many server threads the polled engine spreads streams over: from 1 (every polled
/// function of the process on one thread, as the driver runs its host functions) to
/// [`MAX_POLLED_ENGINE_THREADS`]. Functions of streams on different servers run in parallel;
/// each server spins while it has functions following one another closely, so a busy pool of `n`
/// takes up to `n` cores.
///
/// Set before the first polled stream ([`Stream::with_host_engine`](crate::Stream::with_host_engine)),
/// the size is what the pool starts with. Set after, it applies to the lanes the engine takes
/// on from then on: a larger size starts the missing threads now; with a smaller one, streams
/// already on a server beyond it stay there until their queue has been empty a while, and that
/// server then parks for good (threads are never stopped, so a parked one costs nothing).
///
/// # Errors
/// [`Error::InvalidArgument`] for 0 or more than [`MAX_POLLED_ENGINE_THREADS`];
/// [`Error::ThreadStart`] when the pool runs and a thread the larger size needs cannot start
/// (the size stays what it was; the threads that did start serve once a later call succeeds).
pub fn set_polled_engine_threads(threads: usize) -> Result<()> {
    if !(1..=MAX_POLLED_ENGINE_THREADS).contains(&threads) {
        return Err(Error::InvalidArgument {
            what: format!(
                "the polled engine takes 1 to {MAX_POLLED_ENGINE_THREADS} server threads, not \
                 {threads}"
            ),
        });
    }
    let mut pool = lock(&POOL);
    if SIZE.load(Ordering::Acquire) == 0 {
        pool.requested = threads;
        return Ok(());
    }
    start_threads(threads)?;
    SIZE.store(threads, Ordering::Release);
    Ok(())
}

fn default_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    (cores / 2).clamp(1, DEFAULT_MOST)
}

/// Starts the pool unless it runs.
///
/// # Errors
/// [`Error::ThreadStart`] when one of its threads cannot be started; those that did start stay,
/// parked, and the next call starts the rest.
pub(super) fn start() -> Result<()> {
    if SIZE.load(Ordering::Acquire) != 0 {
        return Ok(());
    }
    let pool = lock(&POOL);
    if SIZE.load(Ordering::Acquire) != 0 {
        return Ok(());
    }
    let size = match pool.requested {
        0 => default_threads(),
        requested => requested,
    };
    start_threads(size)?;
    SIZE.store(size, Ordering::Release);
    Ok(())
}

/// Starts the threads of `SERVERS[..size]` that do not run; called with the pool's lock held.
fn start_threads(size: usize) -> Result<()> {
    THREADS.start(size, |index| {
        // Room for the lanes handed over between two of its rounds, so that handing one over
        // (a launch) allocates nothing in the usual case, whichever server takes it.
        lock(&SERVERS[index].registry).fresh.reserve(FRESH_RESERVED);
    })
}

/// The server a lane not served goes to, with its index: of the pool's, the one serving the
/// fewest lanes.
fn least_busy() -> (usize, &'static Server) {
    // At least 1: every enqueue started the pool first.
    let size = SIZE.load(Ordering::Acquire).max(1);
    let first = NEXT.fetch_add(1, Ordering::Relaxed) % size;
    let index = (0..size)
        .map(|offset| (first + offset) % size)
        .min_by_key(|&index| SERVERS[index].serving.load(Ordering::Relaxed))
        .unwrap_or(0);
    (index, &SERVERS[index])
}

/// Makes sure a server serves `lane`, which just got a function queued. The pool runs: every
/// enqueue started it first.
pub(super) fn serve(lane: &Arc<Lane>, context: &Arc<ContextShared>) {
    // Looked at before it is set, so that an enqueue on a lane a server keeps writes nothing
    // here. A lane its server let go, it let go with its queue empty under the queue's lock,
    // which this enqueue took afterwards to queue its function: the look sees it let go, and
    // the server that let go touches the lane no more, so the next may be another.
    if lane.served.load(Ordering::Acquire) || lane.served.swap(true, Ordering::AcqRel) {
        return;
    }
    let (index, server) = least_busy();
    let Some(thread) = THREADS.get(index) else {
        // Unreachable: only servers whose threads run are handed lanes.
        return;
    };
    server.serving.fetch_add(1, Ordering::SeqCst);
    let mut registry = lock(&server.registry);
    registry.fresh.push(Served {
        lane: Arc::clone(lane),
        words: lane.words(),
        context: Arc::clone(context),
        context_address: context.raw().addr(),
        last_active: Instant::now(),
    });
    wake(registry, thread);
}

/// Unparks the server of `registry`, whose thread is `thread`, if it parked or sleeps between
/// rounds: it was just handed a lane or a node.
fn wake(mut registry: MutexGuard<'_, Registry>, thread: &std::thread::Thread) {
    if registry.parked || registry.resting {
        registry.parked = false;
        registry.resting = false;
        drop(registry);
        thread.unpark();
    }
}

/// Makes sure a server serves `slot`, on which a launch was just queued. The pool runs: the
/// executable started it when it was made.
pub(super) fn serve_node(slot: &Arc<NodeSlot>) {
    // As for a lane: a slot its server let go, it let go with no launch pending, under the
    // pending list's lock, which this launch took afterwards to queue its callable.
    if slot.served.load(Ordering::Acquire) || slot.served.swap(true, Ordering::AcqRel) {
        return;
    }
    let (index, server) = least_busy();
    let Some(thread) = THREADS.get(index) else {
        // Unreachable: only servers whose threads run are handed slots.
        return;
    };
    server.serving.fetch_add(1, Ordering::SeqCst);
    let context = Arc::clone(slot.context());
    let mut registry = lock(&server.registry);
    registry.fresh_nodes.push(ServedNode {
        slot: Arc::clone(slot),
        context_address: context.raw().addr(),
        context,
        last_active: Instant::now(),
    });
    wake(registry, thread);
}

const SPIN: Duration = Duration::from_micros(100);
const YIELD: Duration = Duration::from_millis(1);
/// The sleep between rounds once nothing ran for `YIELD`, where a round and a wake cost at most
/// a ninth of it (longer where they cost more: `crate::pause`).
const PAUSE: Duration = Duration::from_micros(50);
/// The sleep between rounds of a server serving retired engine nodes alone.
const RETIRED_PAUSE: Duration = Duration::from_micros(200);
const LINGER: Duration = Duration::from_millis(2);

/// A server's thread.
fn run(server: &'static Server) {
    // Host functions run here: no cuda-host call reaches the driver from this thread, and
    // nothing is dropped here (values go to their launching threads, the rest to any caller).
    let _marked = InHostFunction::enter(defer_value);
    let mut slack = None;
    let mut served: Vec<Served> = Vec::new();
    let mut nodes: Vec<ServedNode> = Vec::new();
    let mut last_progress = Instant::now();
    let mut sleep_cost = SleepCost::default();
    loop {
        let pace = pace();
        if slack != Some(pace) {
            set_timer_slack(if pace == EnginePace::Frugal {
                Slack::Default
            } else {
                Slack::Least
            });
            slack = Some(pace);
        }
        let round = catch_unwind(AssertUnwindSafe(|| {
            serve_round(
                server,
                &mut served,
                &mut nodes,
                &mut last_progress,
                &mut sleep_cost,
            );
        }));
        if let Err(payload) = round {
            sleep_cost.interrupted();
            dispose(payload);
            logged!(error!(
                "a round of the polled engine's server panicked; the server goes on"
            ));
        }
    }
}

/// One round of `server`'s loop: takes on the lanes and nodes handed to it, serves each, lets go
/// of those quiet for `LINGER`, then spins, yields, sleeps (for what `sleep_cost` says) or parks.
fn serve_round(
    server: &Server,
    served: &mut Vec<Served>,
    nodes: &mut Vec<ServedNode>,
    last_progress: &mut Instant,
    sleep_cost: &mut SleepCost,
) {
    {
        let mut registry = lock(&server.registry);
        served.append(&mut registry.fresh);
        nodes.append(&mut registry.fresh_nodes);
        if served.is_empty() && nodes.is_empty() && last_progress.elapsed() >= LINGER {
            registry.parked = true;
            server.parks.fetch_add(1, Ordering::Relaxed);
            drop(registry);
            sleep_cost.interrupted();
            std::thread::park();
            *last_progress = Instant::now();
            return;
        }
    }
    let mut progressed = false;
    let mut index = 0;
    while index < served.len() {
        let lane = &mut served[index];
        if serve_lane(server, lane) {
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
            server.serving.fetch_sub(1, Ordering::SeqCst);
            // The context's release is a driver call: made by a caller's thread instead.
            drop_when_allowed(done.context);
        } else {
            index += 1;
        }
    }
    if serve_nodes(server, nodes) {
        progressed = true;
    }
    if progressed {
        *last_progress = Instant::now();
    }
    // Retired nodes with no launch pending are served for the life of the process, for graphs
    // of other code's that may run them at any time: they are looked at in the longer pauses.
    let live = !served.is_empty()
        || nodes
            .iter()
            .any(|node| !node.slot.is_retired() || node.slot.has_pending());
    let quiet = last_progress.elapsed();
    if quiet < SPIN {
        sleep_cost.interrupted();
        std::hint::spin_loop();
    } else if quiet < YIELD || (live && pace() == EnginePace::Spinning) {
        sleep_cost.interrupted();
        std::thread::yield_now();
    } else {
        let pause = sleep_cost.pause(if live { PAUSE } else { RETIRED_PAUSE });
        let mut registry = lock(&server.registry);
        if !registry.fresh.is_empty() || !registry.fresh_nodes.is_empty() {
            // Handed something since the round began: taken on at once.
            return;
        }
        registry.resting = true;
        drop(registry);
        if live {
            server.sleeps.fetch_add(1, Ordering::Relaxed);
        }
        // Ended early by a hand-over (`wake`), or by an unpark left from one that found the
        // thread awake: then a round comes a pause early.
        std::thread::park_timeout(pause);
        lock(&server.registry).resting = false;
    }
}

/// Serves each engine node of `nodes` whose word holds a request, lets go of the pending launches
/// of failed contexts, and of the nodes with none pending for `LINGER`. Whether any ran or went.
fn serve_nodes(server: &Server, nodes: &mut Vec<ServedNode>) -> bool {
    let mut progressed = false;
    let mut index = 0;
    while index < nodes.len() {
        let node = &mut nodes[index];
        let mut went = 0;
        if node.slot.serve() {
            went = 1;
        } else if has_failed(node.context_address) {
            went = node.slot.abandon();
            if went > 0 {
                logged!(debug!(
                    "the polled engine let go of {went} graph launches of a failed context"
                ));
            }
        }
        if went > 0 {
            server.functions.fetch_add(went as u64, Ordering::SeqCst);
            node.last_active = Instant::now();
            progressed = true;
        }
        if node.last_active.elapsed() >= LINGER && node.slot.let_go_if_idle() {
            let done = nodes.swap_remove(index);
            server.serving.fetch_sub(1, Ordering::SeqCst);
            // The slot's word goes back to its context, and the context's release is a driver
            // call: both on a caller's thread.
            drop_when_allowed((done.slot, done.context));
        } else {
            index += 1;
        }
    }
    progressed
}

/// Runs the functions of `served` whose numbers the stream wrote, in order, acknowledging each,
/// and acknowledges the numbers a capture took once those before them are done; lets them go
/// unrun if the context failed. Whether any ran or went.
fn serve_lane(server: &Server, served: &Served) -> bool {
    let words = served.words;
    // The lane itself, whose locks every enqueue on it takes, is left alone while the stream
    // wrote no number since the last acknowledgement and no taken number waits.
    let mut progressed = run_reached(server, served, words);
    if !progressed && has_failed(served.context_address) {
        // The stream will never write again: its run-once records were abandoned by the
        // failure's path; raw functions are not run, as the driver runs none after a failure.
        let let_go: Vec<_> = lock(&served.lane.queue).drain(..).collect();
        if let Some(last) = let_go.last() {
            words.acknowledge(last.number);
            server
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
fn run_reached(server: &Server, served: &Served, words: Words) -> bool {
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
        server.functions.fetch_add(1, Ordering::SeqCst);
        ran = true;
    }
}

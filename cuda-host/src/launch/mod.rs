//! The launch machinery: run-once records in launch slots under tickets, the trampolines the
//! driver calls, the inboxes finished records wait in and the rules for dropping them, the
//! capture check, what happens when a context fails, and the context state records share, on
//! the ground floor of containment (`crate::contain`: the host-function mark, log calls that
//! never unwind, the disposal of user values). It names no feature: each feature keeps its
//! per-context state with the public context (`objects`), and the polled engine reaches it as a
//! value ([`PolledEngine`]). The public objects (`objects`, `graph`) and `host_launch` enter it
//! only through what this module re-exports.
//!
//! # A record's life
//!
//! A record is the memory that owns what a host function needs (a closure, a graph's callable, a
//! copy of C user data) until it has run and been dropped (`record`). A run-once record lives in
//! a launch slot (`slot`), whose state (`slot_state`) is a generation and a phase in one atomic
//! word. Its life, with who owns it in each state:
//!
//! 1. **Check** (`capture_check`, [`EnqueueWindow`]): the stream is not capturing
//!    (`cuStreamIsCapturing`), and the answer holds until the driver took the launch.
//! 2. **Acquire** (`slot`; free → launching): the payload is written into a free
//!    slot, with the context and the launching thread's inbox. The launching thread owns it.
//! 3. **Launch** (`enqueue`): the driver gets the trampoline and a *ticket*, the slot's index
//!    and generation, never the record's address.
//! 4. **Launched** (`enqueue`, `context_failure::mark_launched`; launching → launched): the
//!    driver accepted it. Nobody owns the record: the first compare-and-swap out of launched
//!    wins it.
//! 5. **Claim** (`enqueue`, `slot::claim`; launched → claimed): the trampoline presents the
//!    ticket; the driver's thread (or the engine's) owns the record.
//! 6. **Run** (`enqueue`, `running`, `crate::contain`): the stream is listed as running, the
//!    context's failure looked at, the payload run under `catch_unwind` with the thread marked as
//!    inside a host function.
//! 7. **Finish** (`record`): the record is pushed, one compare-and-swap, to the inbox of the
//!    thread that made it, its *home*, which owns it from then on.
//! 8. **Drain** (`reclaim`, `panic_report`): the home thread's next cuda-host call, or
//!    [`reclaim`](fn@reclaim), drops it, catching and reporting a panicking `Drop`.
//! 9. **Release** (`slot::release`; claimed → free): the slot is free again, one generation on,
//!    back in the thread's cache or the pool.
//!
//! The other ways out:
//! - **Refused.** The capture check refuses at step 1, before the payload is in a slot (it is
//!   dropped as the rules allow); the driver refuses at step 3: the launching thread takes the
//!   record back (`slot::take_refused`) and drops it.
//! - **Abandoned.** The context failed (`context_failure`): every launched, unclaimed record of
//!   the context is claimed by abandoning (launched → abandoned) and finished unrun; a call that
//!   answers the failure waits for the functions of its stream still running (`running`). Or a
//!   capture that other code began between the check and the launch (steps 1 and 3) took the
//!   launch: found by the look after the launch, the record is abandoned and the launch
//!   refused. The driver may still hold an abandoned ticket, so the slot is *retired*: never
//!   used again (as is a slot whose generation reached the last value, so that a generation
//!   never repeats).
//! - **Held.** A release in stream order (`crate::points`) is a record in no slot, made at the
//!   release and held in a queue of its thread until its stream passes a point (`held`), then
//!   finished at step 7.
//! - **Owned by a graph.** A graph's callable is a record owned through a CUDA user object or
//!   by an executable (`graph_record`), run at step 6 on every launch of the graph, finished at
//!   step 7 once the graph lets go of it.
//!
//! # The rules
//!
//! Stated here once; the files cite them by number.
//! 1. **Nothing on the driver's thread but the run.** A host function's thread (the driver's, or
//!    the polled engine's) makes no cuda-host call that reaches the driver, runs no user `Drop`,
//!    and never unwinds into the driver: calls refuse ([`Error::InHostFunction`](crate::Error)),
//!    values go to a caller's thread (`crate::contain`, `reclaim`, `enqueue`).
//! 2. **No drop during a builder capture.** Not on a thread capturing a stream
//!    through cuda-host, nor anywhere while a global-mode builder capture is
//!    open: a `Drop` that frees memory would invalidate it. A drain that may not run leaves
//!    everything for the next that may; a global-mode capture that begins waits for drains in
//!    progress (`reclaim`). Captures begun by other code are not seen.
//! 3. **The driver holds tickets, never addresses**, and exactly one party moves a slot out of
//!    launched, by a compare-and-swap naming the generation: a late or repeated call with a
//!    stale ticket does nothing (`slot`, `slot_state`).
//! 4. **A record holds its context** (`context_shared`), so no record outlives the context the
//!    driver may still run it in; the context's release, and the free of its pinned memory
//!    (`pinned`) before it, are made only where rules 1 and 2 allow.
//! 5. **A thread drops only its own records**, so a thread that holds a lock is never made to
//!    run another's `Drop` that needs it; an exited thread's records go to the shared list,
//!    which every drain takes (`record`).
//! 6. **A failure is answered only once nothing of the stream runs**: a call that saw its
//!    context fail returns once no host function of its stream is still running, and a host
//!    function claimed after cuda-host saw the failure does not run (`running`,
//!    `context_failure`).
//!
//! # A closure's path
//!
//! From the call to the closure's drop, `host_launch(&stream, f)` runs code of fifteen files
//! (besides the error type and the `checked!` macro), in the order it reaches them:
//! `crate::host_launch` (the entry), `crate::objects::stream` (the stream's context),
//! `context_shared` (what records hold), `reclaim` (the drain on launch), `crate::contain::mark`
//! (refused on a host function's thread), `record` (the home inbox), `enqueue` (check, acquire,
//! launch), `crate::observe` (the launch's tracing), `capture_check` (steps 1 and 3),
//! `slot::ownership` and `slot::table` (the record in its slot), `slot_state` (the ticket),
//! `context_failure` (launched, and the failure looked at), `running` (step 6) and
//! `record_list` (step 7). A thread's first launch also reads `crate::sync`; a panic, in
//! `panic_report`, `hook_cell` and `crate::contain`, is the only way off it.
//!
//! # The lock-free cores
//!
//! Below the rest, imported by it and importing nothing of it, are the lock-free cores, which
//! loom model-checks on their own (`crate::models`): the record lists, the slot state machine,
//! the failed-context handshake, the list of running host functions and the hook cell.
pub(crate) mod hook_cell;
pub(crate) mod record_list;
pub(crate) mod running;
pub(crate) mod slot_state;

outside_loom_models! {
    mod capture_check;
    mod context_failure;
    mod context_shared;
    mod enqueue;
    mod graph_nodes;
    mod graph_record;
    mod held;
    mod panic_report;
    mod pinned;
    mod reclaim;
    mod record;
    mod slot;

    pub(crate) use capture_check::{
        CaptureBeginning, EnqueueWindow, RelaxedCaptureMode, capture_state, ensure_not_capturing,
        refuse_capture,
    };
    pub(crate) use context_failure::{
        abandon_context_if_failed, abandon_if_failed, abandon_if_failed_then_wait, has_failed,
        is_sticky, look_for_failure, seen_failed, watch_stream,
    };
    pub(crate) use context_shared::ContextShared;
    pub(crate) use enqueue::{
        HostFuncEntry, PolledEngine, pass_through, run_once,
    };
    pub(crate) use held::{Look, Progress, held_count, hold_or_extend, hold_until};
    pub(crate) use graph_nodes::nodes_of;
    pub(crate) use graph_record::{GraphCallable, GraphRecord, callable_of_node};
    pub(crate) use record::defer_value;
    pub(crate) use slot::{CopiedBytes, RunOnce, RunOnceClosure};
    pub(crate) use pinned::{PAGE_BYTES, PinnedPage, PinnedWord};
    pub(crate) use reclaim::{
        CaptureMark, call_outside_host_function, drop_when_allowed, outside_host_function,
        reclaim_on_launch, unless_capture_forbids,
    };

    pub use graph_record::HostCallable;
    pub use panic_report::{
        HostFunctionPanic, PanicOrigin, clear_host_panic_hook, set_host_panic_hook,
    };
    pub use reclaim::{reclaim, set_launch_reclaim_interval};
    pub use slot::{LaunchSlotCounts, launch_slot_counts};
}

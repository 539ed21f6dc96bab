//! The launch machinery: run-once records in launch slots under tickets, the trampolines the
//! driver calls, the inboxes finished records wait in and the rules for dropping them, the
//! capture check, and what happens when a context fails. The public objects (`objects`, `graph`)
//! and `host_launch` enter it only through what this module re-exports.
//!
//! Below the rest, imported by it and importing nothing of it, are the lock-free cores, which
//! loom model-checks on their own (`crate::models`): the record lists, the slot state machine,
//! the failed-context handshake, the list of running host functions and the hook cell.

pub(crate) mod failed_contexts;
pub(crate) mod hook_cell;
pub(crate) mod record_list;
pub(crate) mod running;
pub(crate) mod slot_state;

outside_loom_models! {
    mod capture_check;
    mod context_failure;
    mod context_shared;
    mod enqueue;
    mod graph_record;
    mod held;
    mod inboxes;
    mod mark;
    mod panic_report;
    mod payload;
    mod reclaim;
    mod record;
    mod slot;
    mod trampoline;

    pub(crate) use capture_check::{
        CaptureBeginning, LaunchWindow, RelaxedCaptureMode, capture_state,
    };
    pub(crate) use context_failure::{
        abandon_context_if_failed, abandon_if_failed, abandon_if_failed_then_wait, has_failed,
        is_sticky, watch_stream,
    };
    pub(crate) use context_shared::{ContextShared, StreamPointsOfContext, with_context_current};
    pub(crate) use enqueue::{
        HostFuncEntry, PolledEngine, pass_through, run_once,
    };
    pub(crate) use held::{Look, Progress, held_count, hold_until};
    pub(crate) use graph_record::{GraphCallable, GraphRecord, callable_of_node};
    pub(crate) use mark::{InHostFunction, ensure_outside_host_function};
    pub(crate) use panic_report::dispose as dispose_panic;
    pub(crate) use payload::{CopiedBytes, RunOnce, RunOnceClosure};
    pub(crate) use reclaim::{
        CaptureMark, call_outside_host_function, drop_when_allowed, outside_host_function,
        reclaim_on_launch, unless_capture_forbids,
    };

    pub use graph_record::HostCallable;
    pub use mark::in_host_function;
    pub use panic_report::{
        HostFunctionPanic, PanicOrigin, clear_host_panic_hook, set_host_panic_hook,
    };
    pub use reclaim::{reclaim, set_launch_reclaim_interval};
    pub use slot::{LaunchSlotCounts, launch_slot_counts};
}

//! Containment, the ground floor: what keeps user code that runs on a thread the driver or
//! cuda-host runs (a host function, a logger, a `Drop`, a waker, the panic hook) from unwinding
//! into it, blocking it on a lock a caller holds, or dropping a user's value there. Every other
//! module may import it; it imports none of them.
//!
//! - `mark`: the mark that a thread runs a host function, under which cuda-host's calls refuse
//!   to reach the driver, with its runner's way to hand values off the thread.
//! - `dispose`: getting rid of a caught panic's payload, or any user value, without unwinding:
//!   handed off a marked thread, dropped now elsewhere, leaked if its `Drop` panics.
//! - `logged`: log calls that never unwind and never call a logger under a lock ([`logged!`],
//!   [`holding_logs`]).

mod dispose;
mod logged;
mod mark;

pub(crate) use dispose::{dispose, drop_or_hand_off};
pub(crate) use logged::{LogHold, LogSite, hold_log_call, holding_logs, logged};
pub(crate) use mark::{InHostFunction, ensure_outside_host_function, ran_host_functions};

pub use mark::in_host_function;

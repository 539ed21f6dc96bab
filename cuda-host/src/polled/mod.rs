//! The polled engine: host functions served by cuda-host's own threads instead of the driver's,
//! reached through stream memory operations. Opt in per stream
//! ([`Stream::with_host_engine`](crate::Stream::with_host_engine)).
//!
//! ```no_run
//! use cuda_host::options::HostEngine;
//! use cuda_host::{Device, Stream, StreamFlags, host_launch};
//!
//! cuda_host::polled::set_polled_engine_threads(2)?;
//! let context = Device::get(cuda_host::driver()?, 0)?.primary_context()?;
//! let stream =
//!     Stream::new(&context, StreamFlags::NonBlocking)?.with_host_engine(HostEngine::Polled)?;
//! host_launch(&stream, || println!("on a cuda-host-poll thread, in stream order"))?;
//! stream.synchronize()?;
//! # Ok::<(), cuda_host::Error>(())
//! ```
//!
//! **Why.** A host function between two kernels costs the stream 17–45 µs on an H200 through the
//! driver: its host-function thread must wake, run the function and report back before the next
//! kernel may start. Here a launch enqueues one `cuStreamBatchMemOp` of two operations on the
//! stream: write the function's number to the stream's `sequence` word, then wait until the
//! `acknowledged` word reaches that number (`lanes`). The engine's threads (`server`) poll the
//! sequence words of the streams they serve, run each function whose number its stream wrote, in
//! order, and acknowledge it. The stream still waits for the function, as with the driver: only
//! the wake-up and the report are cheaper. Measured on the H200 (`benches/stream_points.rs`):
//! kernel + host function + kernel costs 1.5–2.3 µs more than kernel + kernel against 17–45 µs
//! through the driver, and on four streams fed by one thread the engine served 1.5–7 times the
//! host functions per second (`docs/PERFORMANCE.md`). The batch costs the enqueuing thread
//! 0.8–1.4 µs (the same write and wait as two calls, about twice as much).
//!
//! **What it costs.** A server polls while functions of its lanes are queued: without pause for
//! 100 µs after a function ran, then yielding until 1 ms, then in sleeps of 50 µs (so a function
//! queued behind long work is served up to that late), lengthened where its looks cost it more,
//! for about a tenth of a core; it parks when none is queued. [`set_polled_engine_pace`] chooses
//! a core instead, for the soonest runs after long waits ([`EnginePace`], `pace`). So a busy pool
//! of `n` servers takes up to `n` cores. And the driver
//! takes only so many stream memory operations behind a stream wait nothing has released before
//! an enqueue blocks, where `cuLaunchHostFunc` takes 100,000 (`docs/REAL-DRIVER.md`): a thread
//! must not enqueue thousands of polled launches behind a wait it releases itself afterwards.
//!
//! **Same semantics.** A launch is the same run-once record under a ticket, the same capture
//! check and refusal, the same panic reporting and reclaim rule: the engine only replaces
//! `cuLaunchHostFunc` with the batch, and the driver's thread with its own, each marked as
//! inside a host function for its whole life (no cuda-host call reaches the driver from it, and
//! nothing is dropped there).
//!
//! **Other code's captures.** A capture other code begins between the launch's check and its
//! enqueue takes the batch. The engine looks for it right after the batch was accepted, under the
//! lane's lock (so no later number was issued on the lane): the launch is refused
//! ([`Error::StreamCapturing`](crate::Error::StreamCapturing)) and never runs, its lane is
//! retired (`lanes`): the stream's later functions go through a fresh lane, which no graph
//! writes; those queued before are served as ever, the taken number is acknowledged after them,
//! and the server, which runs a function only when its stream's word holds exactly that
//! function's number, is never made to run one early by the graph's write. What stays: the
//! graph's write lands in the retired lane's word whenever it runs, so a run while functions
//! queued before the capture still wait may overwrite the number of one of those their stream
//! just wrote, and that stream then waits for it (rare: other code must capture a stream with
//! polled functions pending and run the graph before they ran); the retired lane's page (4 KiB
//! for up to 512 lanes) is kept for the life of the process; and a capture that begins and ends
//! between the enqueue and the look is not seen: the launch answers `Ok`, its number is never
//! written, and the lane's later functions (a copy scope's copies among them) wait for ever. A
//! capture that began just after the batch, which
//! then runs live, also refuses the launch (the function never runs), and its number is
//! acknowledged all the same.
//!
//! **Graphs.** A graph's host node can be the engine's too (`Graph::add_engine_host_node`,
//! `GraphBuilder::begin_with_engine`): a batch node that each executable made through cuda-host
//! points at a word of its own, served on each launch through `GraphExec::launch` (`nodes`).
//!
//! **Its threads.** A small pool of server threads, all named `cuda-host-poll`, serves the
//! lanes (`server`): by default half the cores the process may use, at most 4 and at least 1,
//! or what [`set_polled_engine_threads`] set ([`polled_engine_threads`] says which). The driver
//! runs every host function of a process on one thread, so four streams with a 100 µs host
//! function each took 414–419 µs an iteration on the H200, against 112.2–113.9 µs on a pool of
//! four (`benches/stream_points/lanes.rs`). Each stream is served by one server at a time, the
//! one serving the fewest lanes when the stream's function found it unserved, and keeps it
//! until its queue has been empty a while: a stream's functions run in order and never on two
//! threads at once, those of streams on different servers in parallel. Every server parks when
//! it serves nothing. The pool starts with the first polled stream
//! ([`Stream::with_host_engine`](crate::Stream::with_host_engine) answers
//! [`Error::ThreadStart`](crate::Error::ThreadStart) when one of its threads cannot start, and
//! gives the stream back), and every enqueue makes sure it runs before anything is enqueued: no
//! batch waits for a server that is not there.
//!
//! **Failures.** A stream whose context failed never writes again: once cuda-host sees the
//! failure (a call of any thread answering the sticky error: the stream's synchronize, a launch,
//! a look at a stream point), the lane's functions are let go unrun (their records are reclaimed
//! by the failure's path) and their numbers acknowledged, so nothing waits for them. Until then
//! the server polls the lane as it polls one whose stream is still busy: it makes no driver call
//! itself, since a query from its thread could invalidate another thread's global capture.

mod lanes;
mod nodes;
mod pace;
mod server;

use crate::checked::checked;
use crate::error::Result;
use crate::launch::{ContextShared, PolledEngine, ensure_not_capturing};
use crate::sync::lock;
use cuda_host_sys::{
    CUstream, CUstreamBatchMemOpParams, CUstreamBatchMemOpType, CUstreamWaitValue_flags,
};
use lanes::Waiting;
use std::ffi::c_void;
use std::sync::Arc;

pub(crate) use lanes::ContextLanes;
pub(crate) use nodes::{DONE, NodeCallable, NodeSlot, REQUESTED, node_params, operations, word_of};
pub use pace::{EnginePace, set_polled_engine_pace};
pub(crate) use server::polled_engine_counts;
pub use server::{
    MAX_POLLED_ENGINE_THREADS, PolledEngineCounts, polled_engine_threads, set_polled_engine_threads,
};

/// Starts the engine's servers unless they run.
///
/// # Errors
/// [`Error::ThreadStart`](crate::Error::ThreadStart) when one of their threads cannot start.
pub(crate) fn start() -> Result<()> {
    server::start()
}

/// Makes sure a server serves `slot`, on which a launch of its executable was just queued (the
/// pool runs: it started when the executable was made, `start`).
pub(crate) fn serve_node(slot: &Arc<NodeSlot>) {
    server::serve_node(slot);
}

impl ContextLanes {
    /// Gives the stream `stream_id` of `context`, whose lanes these are, its lane if it has
    /// none yet.
    ///
    /// # Errors
    /// As [`ContextLanes::lane_of`].
    pub(crate) fn prepare(&self, context: &ContextShared, stream_id: u64) -> Result<()> {
        self.lane_of(context, stream_id).map(drop)
    }
}

/// A polled stream's launches name its context's lanes as their engine.
impl PolledEngine for ContextLanes {
    unsafe fn enqueue(
        &self,
        context: &Arc<ContextShared>,
        stream: CUstream,
        stream_id: Option<u64>,
        function: unsafe extern "C" fn(*mut c_void),
        data: *mut c_void,
    ) -> Result<()> {
        // No batch waits for a server that is not there.
        server::start()?;
        let driver = context.driver();
        let stream_id = match stream_id {
            Some(id) => id,
            None => {
                let mut id = 0;
                // SAFETY: a valid stream (the caller's); a valid out-pointer.
                unsafe { checked!(driver, cuStreamGetId(stream, &mut id)) }?;
                id
            }
        };
        let lanes = self;
        loop {
            let lane = lanes.lane_of(context, stream_id)?;
            let mut state = lock(&lane.state);
            if state.retired {
                // Retired between the look-up and the lock: the stream gets another.
                drop(state);
                lanes.retire(context, stream_id, &lane);
                continue;
            }
            if state.owner != Some(stream_id) {
                // Taken back between the look-up and the lock: look again.
                continue;
            }
            let number = state.issued.wrapping_add(1);
            lock(&lane.queue).push_back(Waiting {
                number,
                call: Some((function, data)),
            });
            let mut operations = [
                CUstreamBatchMemOpParams::default(),
                CUstreamBatchMemOpParams::default(),
            ];
            operations[0].writeValue.operation =
                CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_32;
            operations[0].writeValue.address = lane.sequence_device();
            operations[0].writeValue.__bindgen_anon_1.value = number;
            operations[1].waitValue.operation =
                CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WAIT_VALUE_32;
            operations[1].waitValue.address = lane.acknowledged_device();
            operations[1].waitValue.__bindgen_anon_1.value = number;
            operations[1].waitValue.flags = CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ.0;
            // SAFETY: a valid stream; both words are pinned, device-mapped memory of this
            // context, 4-byte aligned, which lives while the context's shared state does, and
            // the server holds that state while the lane has functions queued.
            let enqueued = unsafe {
                checked!(
                    driver,
                    cuStreamBatchMemOp_v2(stream, 2, operations.as_mut_ptr(), 0)
                )
            };
            if let Err(error) = enqueued {
                // Nothing reached the stream: the stream never writes this number.
                lock(&lane.queue).pop_back();
                return Err(error.into());
            }
            state.issued = number;
            // Looked at with the lane still locked, so that no later number was issued on it: a
            // capture other code began since the launch's check took the batch.
            // A look that fails cannot tell: the batch may be a capture's, whose number the
            // stream would never write, stalling every later function of the lane. It counts as
            // taken, and the launch is refused with the look's error.
            let refused = match ensure_not_capturing(driver, stream) {
                Ok(()) => None,
                Err(error) => lane.retire(&mut state, number).then_some(error),
            };
            drop(state);
            if refused.is_some() {
                lanes.retire(context, stream_id, &lane);
            }
            server::serve(&lane, context);
            return refused.map_or(Ok(()), Err);
        }
    }
}

//! The polled engine: host functions served by cuda-host's own thread instead of the driver's,
//! reached through stream memory operations. Opt in per stream ([`Stream::with_host_engine`]).
//!
//! **Why.** A host function between two kernels costs the stream 17–40 µs on an H200 through the
//! driver: its host-function thread must wake, run the function and report back before the next
//! kernel may start. Here a launch enqueues one `cuStreamBatchMemOp` of two operations on the
//! stream: write the function's number to the stream's `sequence` word, then wait until the
//! `acknowledged` word reaches that number (`lanes`). The engine's thread (`server`) polls the
//! sequence words of the streams it serves, runs each function whose number the stream wrote, in
//! order, and acknowledges it. The stream still waits for the function, as with the driver: only
//! the wake-up and the report are cheaper. Measured on the H200 (`benches/stream_points.rs`):
//! kernel + host function + kernel costs 1.5–2.3 µs more than kernel + kernel against 18–45 µs
//! through the driver, and on four streams fed by one thread the engine served 1.5–7 times the
//! host functions per second (`docs/PERFORMANCE.md`). The batch costs the enqueuing thread
//! 0.8–1.4 µs (the same write and wait as two calls, 1.6–2.5 µs).
//!
//! **What it costs.** The server polls while functions are queued: without pause for 100 µs
//! after a function ran, then yielding, then in sleeps of up to 200 µs (so a function queued
//! behind long work is served up to that late); it parks when none is queued. And the driver
//! takes only so many stream memory operations behind a stream wait nothing has released before
//! an enqueue blocks, where `cuLaunchHostFunc` takes 100,000 (`docs/REAL-DRIVER.md`): a thread
//! must not enqueue thousands of polled launches behind a wait it releases itself afterwards.
//!
//! **Same semantics.** A launch is the same run-once record under a ticket, the same capture
//! check and refusal, the same panic reporting and reclaim rule: the engine only replaces
//! `cuLaunchHostFunc` with the batch, and the driver's thread with its own, which is marked as
//! inside a host function for its whole life (no cuda-host call reaches the driver from it, and
//! nothing is dropped there). A capture other code begins between the check and the enqueue takes
//! the batch: the launch is abandoned and refused, and the graph's operations, if it ever runs,
//! write a number that has passed and wait for one acknowledged long ago.
//!
//! **Failures.** A stream whose context failed never writes again: once cuda-host sees the
//! failure (a call of any thread answering the sticky error: the stream's synchronize, a launch,
//! a look at a stream point), the lane's functions are let go unrun (their records are reclaimed
//! by the failure's path) and their numbers acknowledged, so nothing waits for them. Until then
//! the server polls the lane as it polls one whose stream is still busy: it makes no driver call
//! itself, since a query from its thread could invalidate another thread's global capture.

mod lanes;
mod server;

use crate::checked::checked;
use crate::error::Result;
use crate::launch::{ContextShared, PolledEngine, install_polled_engine};
use crate::sync::lock;
use cuda_host_sys::{
    CUstream, CUstreamBatchMemOpParams, CUstreamBatchMemOpType, CUstreamWaitValue_flags,
};
use lanes::{ContextLanes, Waiting};
use std::ffi::c_void;
use std::sync::Arc;

pub use server::{PolledEngineCounts, polled_engine_counts};

/// Who runs the host functions launched on a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum HostEngine {
    /// The driver's host-function thread, through `cuLaunchHostFunc`: the default.
    #[default]
    Driver,
    /// cuda-host's polled engine: a thread of cuda-host's serves the stream through a write and
    /// a wait on pinned, device-mapped memory, under every rule of
    /// [`host_launch`](crate::host_launch). Between two kernels a host function costs the stream
    /// 1.5–2.3 µs more than nothing, against 18–45 µs through the driver, on an H200. The thread
    /// polls while functions are queued, a core's worth while they follow one another closely.
    /// Choose it for many short host functions between kernels with a core to spare; not for one
    /// in a while, nor without a core to spare, nor to queue thousands of host functions behind a
    /// stream wait the same thread releases afterwards (the driver then blocks the enqueue).
    /// A sync mode ([`LaunchOptions::sync_mode`](crate::LaunchOptions::sync_mode)) is refused.
    Polled,
}

/// The engine: stateless here; the lanes live with their contexts, the server is one thread.
struct Engine;

static ENGINE: Engine = Engine;

/// Makes the polled engine the one polled launches go through.
pub(crate) fn install() {
    install_polled_engine(&ENGINE);
}

/// Gives the stream `stream_id` of `context` its lane, if it has none yet. The context is
/// current where it must be for an allocation.
pub(crate) fn prepare_lane(context: &Arc<ContextShared>, stream_id: u64) -> Result<()> {
    lanes_of(context).lane_of(context, stream_id).map(drop)
}

/// The lanes of `context`, their table made on first use.
fn lanes_of(context: &ContextShared) -> &ContextLanes {
    context.polled_lanes(|| ContextLanes::new(context))
}

impl PolledEngine for Engine {
    unsafe fn enqueue(
        &self,
        context: &Arc<ContextShared>,
        stream: CUstream,
        stream_id: Option<u64>,
        function: unsafe extern "C" fn(*mut c_void),
        data: *mut c_void,
    ) -> Result<()> {
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
        let lanes = lanes_of(context);
        loop {
            let lane = lanes.lane_of(context, stream_id)?;
            let mut state = lock(&lane.state);
            if state.owner != Some(stream_id) {
                // Taken back between the look-up and the lock: look again.
                continue;
            }
            let number = state.issued.wrapping_add(1);
            lock(&lane.queue).push_back(Waiting {
                number,
                function,
                data,
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
            drop(state);
            server::serve(&lane, context);
            return Ok(());
        }
    }
}

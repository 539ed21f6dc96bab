//! An error a failed destroy left for its context's next call (`Error::DropFailed`), with
//! cuda-host's own work between: the next call must still answer it. The work is each place
//! cuda-host calls on its own account in a context: a launched special or borrowed stream
//! value's drop (which watches the stream for its context's failure), an abandoned builder's
//! drop, a builder's end (which ends the capture). On a primary context value of the step's own,
//! which no other thread names (the logger calls back on the base value), and on the worker's
//! thread, whose injected failure only its own destroy meets.

use crate::execute::Env;
use crate::witness::violated;
use crate::world::StreamKind;
use cuda_host::graph::{CaptureMode, GraphBuilder};
use cuda_host::{Context, Device, Error, Stream, StreamFlags, host_launch};
use cuda_host_sys::CUresult;
use std::sync::atomic::Ordering;

/// What runs between the error and the next call.
const BETWEEN: [&str; 5] = [
    "a launched per-thread stream value's drop",
    "a launched legacy stream value's drop",
    "a launched borrowed stream value's drop",
    "an abandoned builder's drop",
    "a builder's end",
];

/// Leaves the error, runs what `between` names, then checks that the next call answers it.
pub fn kept(env: &Env, between: u8) -> String {
    let index = usize::from(between) % BETWEEN.len();
    let what = BETWEEN[index];
    let value = match Device::get(env.world.base.driver(), 0).and_then(|d| Context::primary(&d)) {
        Ok(value) => value,
        Err(error) => return format!("no context value: {error}"),
    };
    let outcome = match index {
        0 | 1 => {
            let stream = if index == 0 {
                Stream::per_thread(&value)
            } else {
                // The base value's context is this value's: a blocking stream's capture of it
                // that other code began may be broken by the launch, as documented.
                let base = env.world.context(0);
                let noted = Stream::legacy(&base.context);
                let noted = env
                    .world
                    .add_stream(noted, &base, StreamKind::Legacy, false);
                env.world.use_stream(&noted);
                Stream::legacy(&value)
            };
            launched(env, &value, stream)
        }
        2 => match Stream::new(&value, StreamFlags::NonBlocking) {
            Ok(owner) => {
                // SAFETY: `owner`'s handle, a stream of `value`, outlives the borrowed value.
                let borrowed = unsafe { Stream::borrow_raw(&value, owner.as_raw()) };
                launched(env, &value, borrowed)
            }
            Err(error) => Err(format!("no stream: {error}")),
        },
        _ => built(env, &value, index == 4),
    };
    match outcome {
        Ok(true) => {
            let next = Stream::new(&value, StreamFlags::NonBlocking).map(drop);
            if matches!(next, Err(Error::DropFailed { .. })) {
                crate::execute::DROP_ERRORS.fetch_add(1, Ordering::Relaxed);
            } else {
                violated(format!(
                    "an error a failed destroy left for the context's next call was not \
                     answered by it after {what}: {next:?}"
                ));
            }
            format!("{what}, then the next call answered: {next:?}")
        }
        Ok(false) => format!("{what}: the destroy was deferred, nothing left"),
        Err(skipped) => format!("{what}: {skipped}"),
    }
}

/// A launch on `stream`, then the error, then the value's drop. Not synchronized: the legacy
/// stream may wait behind other steps' gates on blocking streams of the same context.
fn launched(env: &Env, value: &Context, stream: Stream) -> Result<bool, String> {
    host_launch(&stream, || {}).map_err(|error| format!("refused: {error}"))?;
    let left = leave(env, value)?;
    drop(stream);
    Ok(left)
}

/// A builder capturing a new stream of `value`, then the error, then its drop or (`end`) its end
/// after a callback, which must return the graph.
fn built(env: &Env, value: &Context, end: bool) -> Result<bool, String> {
    let stream =
        Stream::new(value, StreamFlags::NonBlocking).map_err(|e| format!("no stream: {e}"))?;
    let builder = GraphBuilder::begin(&stream, CaptureMode::Relaxed)
        .map_err(|error| format!("begin refused: {error}"))?;
    if end {
        builder
            .callback(|| {})
            .map_err(|error| format!("callback refused: {error}"))?;
    }
    let left = leave(env, value)?;
    if end {
        if let Err(error @ Error::DropFailed { .. }) = builder.end() {
            violated(format!(
                "a builder's end answered an error a failed destroy left: {error}"
            ));
        }
    } else {
        drop(builder);
    }
    Ok(left)
}

/// Drops a new stream of `value` whose destroy fails on this thread (the stream stays): whether
/// the destroy was made here (not deferred), so that its error waits for the context's next call.
pub fn leave(env: &Env, value: &Context) -> Result<bool, String> {
    let doomed =
        Stream::new(value, StreamFlags::NonBlocking).map_err(|e| format!("no stream: {e}"))?;
    let world = &env.world;
    world.destroy_failures_armed.store(true, Ordering::SeqCst);
    world.stream_destroy_failures.fetch_add(1, Ordering::SeqCst);
    let entry = c"cuStreamDestroy_v2";
    let armed = || env.controls.inner().armed_failures(entry).unwrap_or(0);
    let before = armed();
    env.controls
        .fail_next_calls(entry, 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    drop(doomed);
    let met = armed() == before;
    env.controls
        .fail_next_calls(entry, 0, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    Ok(met)
}

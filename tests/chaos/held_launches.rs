//! A builder capture while the driver holds launches on other streams: it waits
//! without bound only for launches named by their stream (its own stream's pass-through
//! launches and the special streams'), and at most `LAUNCH_WAIT` (10 ms) for any other. Many
//! streams are held at once, so that whatever cuda-host keys its waits on (a hash of the
//! handle, say), some held launch shares it with the capture's stream or the special streams.

use crate::execute::{Env, STEPS_RUNNING};
use crate::witness::violated;
use cuda_host::{Stream, StreamFlags, graph::CaptureMode, graph::GraphBuilder};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Streams whose launches the driver holds at once.
const STREAMS: usize = 64;
/// How long the driver holds each.
const HOLD: Duration = Duration::from_millis(400);
/// How long the capture may take to begin: its bound with a margin for a loaded machine, well
/// below `HOLD`.
const BOUND: Duration = Duration::from_millis(200);

pub fn capture_beside_held_launches(env: &Env, context: u8) -> String {
    let context = env.world.context(context);
    let new_stream = |flags| {
        Stream::new(&context.context, flags).map_err(|error| {
            env.check_refusal_in("Stream::new", Some(&context), &error);
            format!("refused: {error}")
        })
    };
    let held: Vec<Stream> = match (0..STREAMS)
        .map(|_| new_stream(StreamFlags::NonBlocking))
        .collect()
    {
        Ok(streams) => streams,
        Err(refused) => return refused,
    };
    let capturing = match new_stream(StreamFlags::Blocking) {
        Ok(stream) => stream,
        Err(refused) => return refused,
    };
    // Another step running meanwhile may take a delay armed here for a launch of its own (on a
    // special stream, which a capture waits for however long).
    let alone = STEPS_RUNNING.load(Ordering::SeqCst) == 1;
    env.controls
        .delay_next_calls(c"cuLaunchHostFunc", STREAMS as u32, HOLD);
    let ran = Arc::new(AtomicUsize::new(0));
    let outcome = std::thread::scope(|scope| {
        let launchers: Vec<_> = held
            .iter()
            .map(|stream| {
                let ran = Arc::clone(&ran);
                std::thread::Builder::new()
                    .stack_size(1 << 20)
                    .spawn_scoped(scope, move || {
                        let _step_thread = crate::workers::become_step_thread();
                        cuda_host::host_launch(stream, move || {
                            ran.fetch_add(1, Ordering::Relaxed);
                        })
                        .is_ok()
                    })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        while env.controls.armed_delays(c"cuLaunchHostFunc") != 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
        let every_launch_held = env.controls.armed_delays(c"cuLaunchHostFunc") == 0;
        let began = Instant::now();
        let builder = GraphBuilder::begin(&capturing, CaptureMode::Relaxed);
        let waited = began.elapsed();
        let begun = builder.is_ok();
        if let Ok(builder) = builder {
            let _ = builder.end();
        }
        let mut accepted = 0;
        for thread in launchers.into_iter().flatten() {
            accepted += usize::from(thread.join().unwrap_or(false));
        }
        (every_launch_held, begun, waited, accepted)
    });
    let (every_launch_held, begun, waited, accepted) = outcome;
    // Delays no launch took (one refused before its call) would hold later steps' calls.
    env.controls
        .delay_next_calls(c"cuLaunchHostFunc", 0, Duration::ZERO);
    for stream in held.iter().chain([&capturing]) {
        let _ = stream.synchronize();
    }
    let checked = alone && every_launch_held && begun && accepted == STREAMS;
    if checked && waited > BOUND {
        violated(format!(
            "a capture of a fresh blocking stream of {} began after {waited:?}, waiting for \
             launches the driver held on {STREAMS} other ordinary streams for {HOLD:?}",
            context.name
        ));
    }
    format!(
        "a capture began after {waited:?} beside {accepted} launches held {HOLD:?}{}",
        if checked { "" } else { " (not checked)" }
    )
}

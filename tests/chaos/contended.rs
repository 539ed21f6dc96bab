//! Several threads at one stream's points at once, as an application's threads share a stream:
//! one marks points, three others poll theirs, synchronize the stream and reclaim, so that the
//! looks at the stream's track race each other and the marking. Each future is checked as a
//! polled point is: complete only once its stream passed its marker.

use crate::execute::{Env, STEPS_RUNNING, mark, poll_point};
use crate::world::{PendingPoint, StreamKind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Points the marking thread makes.
const POINTS: usize = 60;
/// Threads looking meanwhile.
const LOOKERS: usize = 3;
/// How long the lookers poll once the marking ended; points still pending then (the stream
/// held) are left to the sequence.
const SETTLE: Duration = Duration::from_millis(500);

pub fn contended_looks(env: &Env, stream: u8) -> String {
    let world = &env.world;
    let Some(stream) = world.stream(stream) else {
        return "no stream".to_owned();
    };
    if !matches!(stream.kind, StreamKind::NonBlocking | StreamKind::Blocking)
        || stream.held(world)
        || crate::timelines::holds(&stream)
        || !matches!(stream.stream.capture_state(), Ok(None))
        || world.armed.lock().unwrap().is_some()
    {
        // A synchronize of a stream another thread captures (a capture armed at a driver call
        // may begin on any thread meanwhile) invalidates that capture: the driver's rule.
        return format!(
            "{}: special, held, capturing or armed: not contended",
            stream.name
        );
    }
    // A synchronize waits for what the stream waits for: only where no step beside this one
    // may have held the stream since.
    let may_synchronize = STEPS_RUNNING.load(Ordering::SeqCst) == 1;
    let settled_by = std::sync::Mutex::new(None::<Instant>);
    let polled: [Mutex<Vec<PendingPoint>>; LOOKERS] = Default::default();
    let marking = AtomicBool::new(true);
    let builder = || std::thread::Builder::new().stack_size(1 << 20);
    let made = std::thread::scope(|scope| {
        let marker = builder().spawn_scoped(scope, || {
            let _step_thread = crate::workers::become_step_thread();
            let mut made = 0;
            for number in 0..POINTS {
                let marker = mark(&stream);
                match cuda_host::points::stream_point(&stream.stream) {
                    Ok(point) => {
                        made += 1;
                        polled[number % LOOKERS].lock().unwrap().push(PendingPoint {
                            name: format!("contended point {number} on {}", stream.name),
                            point,
                            stream: std::sync::Arc::clone(&stream),
                            marker,
                        });
                    }
                    Err(error) => env.check_refusal("stream_point", Some(&stream), &error),
                }
            }
            *settled_by.lock().unwrap() = Some(Instant::now() + SETTLE);
            marking.store(false, Ordering::SeqCst);
            made
        });
        let (stream, marking, settled_by) = (&stream, &marking, &settled_by);
        for (looker, points) in polled.iter().enumerate() {
            let _ = builder().spawn_scoped(scope, move || {
                let _step_thread = crate::workers::become_step_thread();
                let mut turn = 0usize;
                while marking.load(Ordering::SeqCst)
                    || (!points.lock().unwrap().is_empty()
                        && settled_by
                            .lock()
                            .unwrap()
                            .is_some_and(|by| Instant::now() < by))
                {
                    turn += 1;
                    match (turn + looker) % 8 {
                        0 if may_synchronize => {
                            let _ = stream.stream.synchronize();
                        }
                        1 => {
                            cuda_host::reclaim();
                        }
                        _ => {
                            let mut points = points.lock().unwrap();
                            points.retain_mut(|point| poll_point(point).is_pending());
                        }
                    }
                    if stream.context_failed() {
                        points.lock().unwrap().clear();
                    }
                    std::thread::yield_now();
                }
            });
        }
        marker.map_or(0, |thread| thread.join().unwrap_or(0))
    });
    // What is still pending goes on as the sequence's points do.
    for points in polled {
        world
            .points
            .lock()
            .unwrap()
            .extend(points.into_inner().unwrap());
    }
    format!(
        "{made} points on {} polled by {LOOKERS} threads",
        stream.name
    )
}

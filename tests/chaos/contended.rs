//! Several threads at one stream's points at once, as an application's threads share a stream:
//! one marks points, three others poll theirs, synchronize the stream and reclaim, so that the
//! looks at the stream's track race each other and the marking. Each future is checked as a
//! polled point is: complete only once its stream passed its marker.

use crate::execute::{Env, mark, poll_point};
use crate::world::{PendingPoint, StreamKind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Points the marking thread makes.
const POINTS: usize = 60;
/// Threads looking meanwhile.
const LOOKERS: usize = 3;

pub fn contended_looks(env: &Env, stream: u8) -> String {
    let world = &env.world;
    let Some(stream) = world.stream(stream) else {
        return "no stream".to_owned();
    };
    if !matches!(stream.kind, StreamKind::NonBlocking | StreamKind::Blocking)
        || stream.held(world)
        || !matches!(stream.stream.capture_state(), Ok(None))
    {
        return format!("{}: special, held or capturing: not contended", stream.name);
    }
    let polled: [Mutex<Vec<PendingPoint>>; LOOKERS] = Default::default();
    let marking = AtomicBool::new(true);
    let builder = || std::thread::Builder::new().stack_size(1 << 20);
    let made = std::thread::scope(|scope| {
        let marker = builder().spawn_scoped(scope, || {
            let _step_thread = crate::workers::become_step_thread();
            let mut made = 0;
            for number in 0..POINTS {
                let marker = mark(&stream);
                match cuda_host::stream_point(&stream.stream) {
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
            marking.store(false, Ordering::SeqCst);
            made
        });
        let (stream, marking) = (&stream, &marking);
        for (looker, points) in polled.iter().enumerate() {
            let _ = builder().spawn_scoped(scope, move || {
                let _step_thread = crate::workers::become_step_thread();
                let mut turn = 0usize;
                while marking.load(Ordering::SeqCst) || !points.lock().unwrap().is_empty() {
                    turn += 1;
                    match (turn + looker) % 8 {
                        0 => {
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
    format!(
        "{made} points on {} polled by {LOOKERS} threads",
        stream.name
    )
}

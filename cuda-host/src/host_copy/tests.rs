//! The scope's cancellation against host functions starting copies.

use super::*;

/// The scope cancels while the stream's host functions start copies in launch order: the
/// copies that ran are always the first launched.
#[test]
fn copies_started_beside_a_cancellation_are_the_first_launched() {
    let waiter = Arc::new(Waiter {
        unfinished: AtomicUsize::new(0),
        thread: std::thread::current(),
    });
    for round in 0..20_000 {
        let copies: Vec<Arc<CopyState>> = (0..4)
            .map(|_| {
                waiter.unfinished.fetch_add(1, Ordering::AcqRel);
                Arc::new(CopyState {
                    state: AtomicU8::new(PENDING),
                    waiter: Arc::clone(&waiter),
                })
            })
            .collect();
        let barrier = std::sync::Barrier::new(2);
        let ran = std::thread::scope(|scope| {
            let functions = scope.spawn(|| {
                barrier.wait();
                copies
                    .iter()
                    .map(|copy| {
                        copy.start() && {
                            copy.finish();
                            true
                        }
                    })
                    .collect::<Vec<bool>>()
            });
            barrier.wait();
            cancel_from_last(&copies);
            functions.join().expect("the functions' thread")
        });
        let first_unrun = ran.iter().position(|&ran| !ran).unwrap_or(ran.len());
        assert!(
            ran[first_unrun..].iter().all(|&ran| !ran),
            "round {round}: copies ran {ran:?}, not the first launched"
        );
    }
}

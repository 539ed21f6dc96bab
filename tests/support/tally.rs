//! Counting what happens to a host function and the values it captures.

use crate::wait::wait_until;
use cuda_host::{Stream, host_launch};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

/// Counts runs and drops, and remembers the threads they happened on.
#[derive(Debug, Default)]
pub struct Tally {
    runs: AtomicUsize,
    drops: AtomicUsize,
    probes: AtomicUsize,
    run_threads: Mutex<Vec<ThreadId>>,
    drop_threads: Mutex<Vec<ThreadId>>,
}

impl Tally {
    /// A new tally, shared.
    pub fn new() -> Arc<Tally> {
        Arc::new(Tally::default())
    }

    /// Records a run on the calling thread.
    pub fn ran(&self) {
        self.run_threads
            .lock()
            .unwrap()
            .push(std::thread::current().id());
        self.runs.fetch_add(1, Ordering::SeqCst);
    }

    /// How many runs were recorded.
    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    /// How many [`DropProbe`]s of this tally were dropped.
    pub fn drops(&self) -> usize {
        self.drops.load(Ordering::SeqCst)
    }

    /// The threads the runs happened on.
    pub fn run_threads(&self) -> Vec<ThreadId> {
        self.run_threads.lock().unwrap().clone()
    }

    /// The threads the drops happened on.
    pub fn drop_threads(&self) -> Vec<ThreadId> {
        self.drop_threads.lock().unwrap().clone()
    }

    /// A value to capture: its drop is counted here.
    pub fn probe(self: &Arc<Self>) -> DropProbe {
        self.probes.fetch_add(1, Ordering::SeqCst);
        DropProbe(Arc::clone(self))
    }

    /// Launches `count` closures on `stream` with `host_launch`, each capturing a probe of this
    /// tally and recording its run.
    ///
    /// # Panics
    /// When a launch fails.
    #[track_caller]
    pub fn launch_counted(self: &Arc<Self>, stream: &Stream, count: usize) {
        for _ in 0..count {
            let probe = self.probe();
            host_launch(stream, move || probe.ran()).expect("launch");
        }
    }

    /// Reclaims on this thread (`cuda_host::reclaim`) until `drops` probes were dropped, then
    /// checks that no more were.
    ///
    /// # Panics
    /// When that many are not dropped within the harness's bound, or more are.
    #[track_caller]
    pub fn reclaim_until_dropped(&self, drops: usize, what: &str) {
        wait_until(what, || {
            cuda_host::reclaim();
            self.drops() >= drops
        });
        assert_eq!(self.drops(), drops, "{what}: dropped more than once");
    }

    /// How many probes were made: those not dropped yet are alive.
    pub fn probes(&self) -> usize {
        self.probes.load(Ordering::SeqCst)
    }
}

/// Counts its own drop in its [`Tally`].
#[derive(Debug)]
pub struct DropProbe(Arc<Tally>);

impl DropProbe {
    /// Records a run in the tally (call it from the host function).
    pub fn ran(&self) {
        self.0.ran();
    }
}

impl Drop for DropProbe {
    fn drop(&mut self) {
        self.0
            .drop_threads
            .lock()
            .unwrap()
            .push(std::thread::current().id());
        self.0.drops.fetch_add(1, Ordering::SeqCst);
    }
}

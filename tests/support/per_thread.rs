//! A thread that launches on its own per-thread stream and hands that stream's value to the
//! test's thread: what a per-thread stream shared between threads looks like, for tests of what
//! reclaims the launcher's records when the value is dropped elsewhere.

use crate::{Gate, Tally};
use cuda_host::{Context, Stream};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::{Scope, ScopedJoinHandle};

/// The launcher thread, which reclaims its own inbox when asked and exits when told.
pub struct Launcher<'scope> {
    requests: Sender<bool>,
    reclaimed: Receiver<()>,
    thread: ScopedJoinHandle<'scope, ()>,
}

impl<'scope> Launcher<'scope> {
    /// Starts a thread that binds `context`, holds its per-thread stream at `gate`, launches one
    /// closure counted by `tally` there and lets go of its context value: the stream's value
    /// comes back, for the caller to drop.
    ///
    /// # Panics
    /// When the context cannot bind or the launch fails.
    pub fn spawn<'env>(
        scope: &'scope Scope<'scope, 'env>,
        context: Context,
        gate: &'scope Gate,
        tally: &Arc<Tally>,
    ) -> (Stream, Launcher<'scope>) {
        let (launched_tx, launched_rx) = channel();
        let (requests, request_rx) = channel::<bool>();
        let (reclaimed_tx, reclaimed) = channel::<()>();
        let tally = Arc::clone(tally);
        let thread = scope.spawn(move || {
            context.bind_to_thread().expect("the context binds");
            let stream = Stream::per_thread(&context);
            gate.hold(&stream);
            tally.launch_counted(&stream, 1);
            drop(context);
            launched_tx.send(stream).expect("the test waits");
            while request_rx.recv() == Ok(true) {
                cuda_host::reclaim();
                reclaimed_tx.send(()).expect("the test waits");
            }
        });
        let stream = launched_rx.recv().expect("the launch was made");
        (
            stream,
            Launcher {
                requests,
                reclaimed,
                thread,
            },
        )
    }

    /// Has the launcher drain its inbox (where its records come back), then this thread.
    pub fn reclaim(&self) {
        self.requests.send(true).expect("the launcher waits");
        self.reclaimed.recv().expect("the launcher reclaimed");
        cuda_host::reclaim();
    }

    /// Tells the launcher to exit, and waits for it.
    pub fn finish(self) {
        self.requests.send(false).expect("the launcher waits");
        self.thread.join().expect("the launcher");
    }
}

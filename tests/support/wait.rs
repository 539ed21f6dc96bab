//! Bounded waiting: no test waits forever.

use crate::test_driver;
use cuda_host::Stream;
use cuda_host_sys::CUresult;
use std::time::{Duration, Instant};

/// How long a test waits for something that should happen promptly, before it fails.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Polls `condition` until it holds; panics naming `what` after [`TIMEOUT`].
///
/// # Panics
/// When the condition does not hold within the bound.
#[track_caller]
pub fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    let mut pause = Duration::from_micros(50);
    while !condition() {
        assert!(
            start.elapsed() < TIMEOUT,
            "timed out after {TIMEOUT:?} waiting for {what}"
        );
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(10));
    }
}

/// Polls `condition` for at most `bound`: whether it came to hold. For a test that fails with
/// its own message (a call that may be wedged), where [`wait_until`] would fail with its own.
pub fn holds_within(bound: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + bound;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs `call` on a thread of its own and waits for it at most `bound`: its result, or `None`
/// when it did not return (it may be wedged: the thread is left behind). For a test that fails
/// with its own message when a cuda-host call never returns.
pub fn returns_within<T: Send + 'static>(
    bound: Duration,
    call: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (sender, returned) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(call());
    });
    returned.recv_timeout(bound).ok()
}

/// Waits until `stream` has finished its work, through a raw `cuStreamQuery` that drains
/// nothing: a host function on it has returned, so its record is finished and waits for its
/// home's drain (a host function counts its run a moment before it returns; cuda-host's own
/// `Stream::is_complete` and `synchronize` would drain).
///
/// # Panics
/// When the stream does not finish within [`TIMEOUT`], or the query fails.
#[track_caller]
pub fn wait_until_done(stream: &Stream) {
    wait_until("the stream to finish its work", || {
        // SAFETY: a valid stream (the caller's).
        match unsafe { test_driver().driver.cuStreamQuery(stream.as_raw()) } {
            CUresult::CUDA_SUCCESS => true,
            CUresult::CUDA_ERROR_NOT_READY => false,
            failed => panic!("cuStreamQuery failed: {failed}"),
        }
    });
}

/// Polls `future` on this thread until it completes, parking between wakes: the smallest
/// executor, for futures that must complete with any of them.
///
/// # Panics
/// When the future does not complete within [`TIMEOUT`].
#[track_caller]
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct ThreadWaker(std::thread::Thread);
    impl Wake for ThreadWaker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        assert!(Instant::now() < deadline, "the future never completed");
        std::thread::park_timeout(TIMEOUT);
    }
}

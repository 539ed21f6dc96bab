//! Waiting on the host for a timeline's value: a future woken by the watcher (or by the host
//! signal that reaches it), and a blocking wait built on it.

use crate::error::{Error, Result};
use crate::launch::has_failed;
use crate::timeline::Timeline;
use crate::tracks::Registration;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// A future that completes once a timeline's value reached a value: see
/// [`Timeline::reached`].
#[must_use = "a timeline's future does nothing unless awaited or polled"]
pub struct Reached {
    timeline: Timeline,
    value: u64,
    /// Its registration with the timeline's waiters, while it has one.
    registration: Option<Registration>,
}

impl Reached {
    pub(super) fn new(timeline: Timeline, value: u64) -> Reached {
        Reached {
            timeline,
            value,
            registration: None,
        }
    }

    /// `Some` once the value was reached, or once the context was seen failed before.
    fn outcome(&self) -> Option<Result<()>> {
        if self.timeline.value() >= self.value {
            Some(Ok(()))
        } else if has_failed(self.timeline.waits().context()) {
            // Reached after all between the two reads? Then it counts as reached.
            Some(if self.timeline.value() >= self.value {
                Ok(())
            } else {
                Err(Error::ContextFailed)
            })
        } else {
            None
        }
    }

    fn forget(&mut self) {
        if let Some(registration) = self.registration.take() {
            self.timeline.waits().forget(registration);
        }
    }
}

impl Future for Reached {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        if let Some(outcome) = this.outcome() {
            this.forget();
            return Poll::Ready(outcome);
        }
        let waits = Arc::clone(this.timeline.waits());
        match waits.register(this.value, cx.waker(), this.registration) {
            Ok(registration) => this.registration = Some(registration),
            Err(error) => return Poll::Ready(Err(error)),
        }
        // A signal may have raised the value since the first read without seeing this waiter.
        if let Some(outcome) = this.outcome() {
            this.forget();
            return Poll::Ready(outcome);
        }
        Poll::Pending
    }
}

impl Drop for Reached {
    fn drop(&mut self) {
        self.forget();
    }
}

impl fmt::Debug for Reached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reached")
            .field("value", &self.value)
            .field("waiting", &self.registration.is_some())
            .finish_non_exhaustive()
    }
}

/// Unparks the thread blocked in [`block_on`].
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Blocks until `reached` completes, or `timeout` passed (`Ok(false)`).
pub(super) fn block_on(mut reached: Reached, timeout: Duration) -> Result<bool> {
    let deadline = Instant::now().checked_add(timeout);
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(outcome) = Pin::new(&mut reached).poll(&mut cx) {
            return outcome.map(|()| true);
        }
        match deadline {
            None => std::thread::park(),
            Some(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    return Ok(false);
                }
                std::thread::park_timeout(deadline - now);
            }
        }
    }
}

//! The scope: copies that borrow their buffers for as long as the scope, which ends only once
//! no copy it launched can still run.

use super::{HostCopy, host_copy_fn};
use crate::checked::checked;
use crate::contain::ensure_outside_host_function;
use crate::error::{CaptureState, Error, Result};
use crate::host_launch::host_launch;
use crate::launch::{
    EnqueueWindow, RelaxedCaptureMode, abandon_if_failed, ensure_not_capturing, has_failed,
    is_sticky,
};
use crate::objects::Stream;
use cuda_host_sys::{CU_STREAM_LEGACY, CU_STREAM_PER_THREAD};
use std::any::Any;
use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// Copies launched in a [`host_copy_scope`]: their borrows last as long as the scope. It stays
/// on the thread that runs the scope (it is not `Sync`), which its copies wake as they finish.
///
/// # What a scope promises
///
/// A scope neither returns nor unwinds while a copy it launched can still write or read: each
/// copy has its own state, shared with its host function: *pending* until
/// that function starts, *running*, then *done*; or *cancelled*, by the scope, while still
/// pending. The function starts only by a compare-and-swap from pending to running, so a
/// cancelled copy copies nothing, whenever the driver (or the polled engine) calls it later. The
/// scope waits for its own copies, not for the stream: it parks until each is done or cancelled,
/// woken by each copy as it finishes. This holds on both engines: with
/// [`HostEngine::Polled`](crate::options::HostEngine::Polled) the copies run on the engine's thread, under
/// the same states; and it does not rest on what a synchronize answers, which may be a failure
/// while a copy is still running (a failed stream gives up its wait for the engine; the software
/// driver's synchronize does not wait for a running host function either).
/// - **A body that panics:** the copies not yet started are cancelled, the running one is waited
///   for, and the panic goes on.
/// - **A context that fails** (a sticky error: a kernel's illegal address, a device-side
///   assert): while copies are unfinished the scope looks for the failure every so often (a
///   pause from 50 µs, doubling up to 10 ms): in cuda-host's record of failed contexts (any call
///   answering the failure), and by a `cuStreamQuery` of the stream. Once it sees one, it cancels
///   the copies not yet started, waits for the running one, and returns the failure (the
///   driver's error, asked of the stream by a `cuStreamSynchronize` once every copy finished).
///   A stream seen to have finished its work, on two looks in a row, while copies of it never
///   started (it passed them unrun, as the driver does after a failure) counts the same. So the
///   copies that ran are the first ones launched, and no copy writes after the scope returned.
/// - **Other code's captures:** a scope on a stream that is being captured is refused before its
///   body runs ([`Error::StreamCapturing`]), like [`host_launch`]; a copy launched after other
///   code began capturing the stream is refused by [`host_launch`] and never runs. The scope's
///   own looks make no call a capture forbids: `cuStreamIsCapturing` first, and only on a stream
///   that is not capturing the query (or the closing synchronize), made in relaxed capture
///   interaction mode (`cuThreadExchangeStreamCaptureMode`, the thread's mode given back after,
///   also on unwind), so that another thread's global-mode capture is not invalidated, and inside
///   the window a builder capture waits for (as it waits for launches in flight),
///   so that no such capture begins between the check and the query. A capture other code begins on the stream in that
///   window is invalidated by the query: the race [`host_launch`] documents for its own check.
///   While the stream captures, the scope only waits for its copies (enqueued before the capture,
///   they run as the stream reaches them). A copy that other code's capture took without the
///   driver showing it (that race again) never runs in stream order: once the stream finished,
///   the scope cancels it and answers [`Error::StreamCapturing`]; if the graph runs later, its
///   node copies nothing.
/// - **The result:** the body's output comes back with any error of the join
///   ([`HostCopyScopeError`]). An error of a copy ([`HostCopyScope::copy`]) is the body's to
///   return. A panic during the join (a logger's, when a look records the failure) is held until
///   no copy can run, then goes on.
/// - **Records and deferred `Drop` errors:** each copy's launch record (which holds only its
///   state and the addresses) is dropped by the usual rule: on this thread, at its next
///   cuda-host call. The scope's looks take no error a `Drop` recorded for its context: such an
///   error neither replaces the scope's result nor is lost; the next call that returns those
///   errors (a copy launched after it was recorded, or any later call on the context) returns
///   it.
/// - **Inside a host function** the scope is refused ([`Error::InHostFunction`]) and its body is
///   not called.
/// - **What keeps a scope waiting:** a copy queued behind a stream wait that nothing releases,
///   as a thread that never ends keeps `std::thread::scope`; and, while the stream stays
///   captured, a copy whose launch other code's capture took unseen.
pub struct HostCopyScope<'env> {
    stream: &'env Stream,
    /// Each copy launched, in launch order; the scope cancels those still pending when its body
    /// panics or its context fails.
    copies: RefCell<Vec<Arc<CopyState>>>,
    waiter: Arc<Waiter>,
    /// Invariant in `'env`, so that the body cannot hand in borrows that end before the scope
    /// (as `std::thread::Scope`).
    _env: PhantomData<&'env mut &'env ()>,
}

/// The scope's thread and its count of unfinished copies (pending or running), shared with the
/// copies' host functions.
struct Waiter {
    unfinished: AtomicUsize,
    thread: Thread,
}

impl Waiter {
    fn unfinished(&self) -> usize {
        self.unfinished.load(Ordering::Acquire)
    }

    /// One copy less to wait for: it finished or was cancelled.
    fn one_less(&self) {
        self.unfinished.fetch_sub(1, Ordering::AcqRel);
    }
}

const PENDING: u8 = 0;
const RUNNING: u8 = 1;
const DONE: u8 = 2;
const CANCELLED: u8 = 3;

/// One copy's state: `PENDING` until its host function starts it (`RUNNING`, then `DONE`), or
/// `CANCELLED` by the scope while still pending.
struct CopyState {
    state: AtomicU8,
    waiter: Arc<Waiter>,
}

impl CopyState {
    /// Whether the host function may copy: the copy was pending and is running now.
    fn start(&self) -> bool {
        self.state
            .compare_exchange(PENDING, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The host function copied: the scope may end. Only atomics and an unpark, which never
    /// blocks nor runs user code, on the driver's (or the engine's) thread.
    fn finish(&self) {
        self.state.store(DONE, Ordering::Release);
        self.waiter.one_less();
        self.waiter.thread.unpark();
    }

    /// Cancels the copy if it has not started; whether it did cancel it.
    fn cancel(&self) -> bool {
        let cancelled = self
            .state
            .compare_exchange(PENDING, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if cancelled {
            self.waiter.one_less();
        }
        cancelled
    }
}

/// Cancels every copy of `copies` not yet started, the last launched first: the host functions
/// start them in launch order, so the copies that ran stay the first launched.
fn cancel_from_last(copies: &[Arc<CopyState>]) {
    for copy in copies.iter().rev() {
        copy.cancel();
    }
}

/// A copy in flight: its description (raw addresses) and its state, sent to the driver's thread.
struct InFlight {
    copy: HostCopy,
    state: Arc<CopyState>,
}

impl<'env> HostCopyScope<'env> {
    /// Copies `source` into `destination` in stream order, after the work enqueued on the
    /// scope's stream before; both stay borrowed until the scope ends, when the copy has run or
    /// can never run.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the lengths differ; otherwise as
    /// [`host_launch`](fn@crate::host_launch) (nothing is then enqueued, or what was enqueued
    /// never copies). A copy refused so never runs.
    pub fn copy(&self, source: &'env [u8], destination: &'env mut [u8]) -> Result<()> {
        if source.len() != destination.len() {
            return Err(Error::InvalidArgument {
                what: format!(
                    "a host copy of {} bytes into a buffer of {}",
                    source.len(),
                    destination.len()
                ),
            });
        }
        // Distinct borrows never overlap, so the check cannot fail here.
        let copy = HostCopy::new(
            source.as_ptr().cast(),
            destination.as_mut_ptr().cast(),
            source.len(),
        )?;
        // Counted before the launch: if anything after the driver took it unwinds, the scope
        // still knows the copy.
        let state = Arc::new(CopyState {
            state: AtomicU8::new(PENDING),
            waiter: Arc::clone(&self.waiter),
        });
        self.waiter.unfinished.fetch_add(1, Ordering::AcqRel);
        self.copies.borrow_mut().push(Arc::clone(&state));
        let in_flight = InFlight {
            copy,
            state: Arc::clone(&state),
        };
        let launched = host_launch(self.stream, move || {
            let InFlight { copy, state } = &in_flight;
            if state.start() {
                // SAFETY: the buffers stay borrowed until the scope saw this copy done; the
                // description is this closure's own.
                unsafe { host_copy_fn(std::ptr::from_ref(copy).cast_mut().cast()) };
                state.finish();
            }
        });
        if launched.is_err() {
            // Refused: its function never runs, or runs finding it cancelled. (Should the
            // driver have run it all the same, the scope waits for it like any other.)
            state.cancel();
        }
        launched
    }

    /// Waits until every copy finished or was cancelled; only the running ones remain when
    /// the rest were cancelled.
    fn wait_for_running(&self) {
        while self.waiter.unfinished() != 0 {
            std::thread::park_timeout(LONGEST_PAUSE);
        }
    }
}

/// What a scope hands back when it ends with an error: the error, and the body's output when
/// the body was called and returned.
pub struct HostCopyScopeError<T> {
    /// Why the scope failed: it was refused before its body ran, or its context failed (every
    /// copy then ran or never will).
    pub error: Error,
    /// What the body returned; `None` when the scope was refused before calling it.
    pub output: Option<T>,
}

impl<T> fmt::Debug for HostCopyScopeError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        /// The output's presence, for any `T`.
        struct Output(bool);
        impl fmt::Debug for Output {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(if self.0 { "Some(..)" } else { "None" })
            }
        }
        f.debug_struct("HostCopyScopeError")
            .field("error", &self.error)
            .field("output", &Output(self.output.is_some()))
            .finish()
    }
}

impl<T> fmt::Display for HostCopyScopeError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.output.is_some() {
            write!(
                f,
                "the host-copy scope's body returned, then: {}",
                self.error
            )
        } else {
            write!(
                f,
                "the host-copy scope did not call its body: {}",
                self.error
            )
        }
    }
}

impl<T> std::error::Error for HostCopyScopeError<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<T> From<HostCopyScopeError<T>> for Error {
    /// The error alone; the body's output is dropped.
    fn from(failed: HostCopyScopeError<T>) -> Error {
        failed.error
    }
}

/// Runs `body` with a scope in which host copies on `stream` borrow their buffers, and ends only
/// once no copy launched in it can run any more: each has run, or was cancelled before it
/// started. Like `std::thread::scope`, with the copies as the threads: the borrows end only then,
/// also when `body` panics or the stream's context fails. [`HostCopyScope`] says exactly what
/// holds, on the polled engine too.
///
/// NVIDIA's reference: [`CUhostFn`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TYPES.html).
///
/// If `body` panics, the copies it launched that had not started are cancelled (they never
/// copy), the one running is waited for, and the panic goes on. If the stream's context fails,
/// the same happens and the scope returns the failure with the body's output; the copies that
/// ran are the first ones launched, and no copy writes after the scope ended.
///
/// # Errors
/// With `output: None` (the body is not called): [`Error::InHostFunction`] inside a host
/// function; [`Error::StreamCapturing`] when the stream is being captured; the driver's error
/// from `cuStreamIsCapturing`. With the body's output: the context's failure (the driver's
/// sticky error; [`Error::ContextFailed`] where the driver does not say it), or
/// [`Error::StreamCapturing`] for copies that the stream passed without running them, without a
/// failure (other code's capture took them). An error of a copy is `body`'s to return.
///
/// ```no_run
/// # fn demo(stream: &cuda_host::Stream) -> cuda_host::Result<()> {
/// let source = vec![7u8; 4096];
/// let mut destination = vec![0u8; 4096];
/// cuda_host::host_copy::host_copy_scope(stream, |scope| scope.copy(&source, &mut destination))??;
/// assert_eq!(source, destination);
/// # Ok(()) }
/// ```
///
/// The destination stays borrowed until the scope ends:
///
/// ```compile_fail,E0502
/// # fn demo(stream: &cuda_host::Stream) {
/// let source = vec![7u8; 16];
/// let mut destination = vec![0u8; 16];
/// let _ = cuda_host::host_copy::host_copy_scope(stream, |scope| {
///     scope.copy(&source, &mut destination).unwrap();
///     destination[0] // read while the copy may run
/// });
/// # }
/// ```
///
/// And a buffer must outlive the scope:
///
/// ```compile_fail,E0597
/// # fn demo(stream: &cuda_host::Stream) {
/// let source = vec![7u8; 16];
/// let _ = cuda_host::host_copy::host_copy_scope(stream, |scope| {
///     let mut local = vec![0u8; 16];
///     scope.copy(&source, &mut local).unwrap(); // `local` is gone before the copy ran
/// });
/// # }
/// ```
///
/// The scope stays on its thread, which its copies wake:
///
/// ```compile_fail,E0277
/// # fn demo(stream: &cuda_host::Stream) {
/// let source = vec![7u8; 16];
/// let mut destination = vec![0u8; 16];
/// let _ = cuda_host::host_copy::host_copy_scope(stream, |scope| {
///     std::thread::scope(|threads| {
///         threads.spawn(|| scope.copy(&source, &mut destination));
///     });
/// });
/// # }
/// ```
#[doc(alias = "CUhostFn")]
pub fn host_copy_scope<'env, T>(
    stream: &'env Stream,
    body: impl FnOnce(&HostCopyScope<'env>) -> T,
) -> Result<T, HostCopyScopeError<T>> {
    let refused = |error| HostCopyScopeError {
        error,
        output: None,
    };
    ensure_outside_host_function("host_copy_scope").map_err(refused)?;
    ensure_stream_not_capturing(stream).map_err(refused)?;
    let scope = HostCopyScope {
        stream,
        copies: RefCell::new(Vec::new()),
        waiter: Arc::new(Waiter {
            unfinished: AtomicUsize::new(0),
            thread: std::thread::current(),
        }),
        _env: PhantomData,
    };
    let output = match catch_unwind(AssertUnwindSafe(|| body(&scope))) {
        Ok(output) => output,
        Err(panic) => {
            cancel_from_last(&scope.copies.borrow());
            scope.wait_for_running();
            resume_unwind(panic);
        }
    };
    let (joined, panic) = join(&scope);
    if let Some(panic) = panic {
        // A logger's panic on the way, held until no copy could run any more.
        resume_unwind(panic);
    }
    match joined {
        Ok(()) => Ok(output),
        Err(error) => Err(HostCopyScopeError {
            error,
            output: Some(output),
        }),
    }
}

/// Refuses a stream that is being captured, as a launch does, before any copy.
fn ensure_stream_not_capturing(stream: &Stream) -> Result<()> {
    let context = stream.shared_context();
    with_stream_current(stream, || {
        ensure_not_capturing(context.driver(), stream.as_raw())
    })
    .inspect_err(|error| {
        if let Some(result) = error.driver_result() {
            abandon_if_failed(context, result);
        }
    })
}

/// The first pause between two looks for a context failure, and the longest.
const FIRST_PAUSE: Duration = Duration::from_micros(50);
const LONGEST_PAUSE: Duration = Duration::from_millis(10);

/// The join: waits until every copy of `scope` finished, or, once the stream's context failed
/// (or the stream passed copies without running them), cancels those not started, waits for the
/// running one, and returns the error. Never unwinds: a panic on the way (a logger's, in a look)
/// is held and handed back, for the caller to resume once no copy can run.
fn join(scope: &HostCopyScope<'_>) -> (Result<()>, Option<Box<dyn Any + Send>>) {
    let mut held = None;
    let mut pause = FIRST_PAUSE;
    let mut next_look = Instant::now() + pause;
    let mut passed_unrun = None;
    loop {
        if scope.waiter.unfinished() == 0 {
            return (Ok(()), held);
        }
        let now = Instant::now();
        if now < next_look {
            std::thread::park_timeout(next_look - now);
            continue;
        }
        match catch_unwind(AssertUnwindSafe(|| look(scope, &mut passed_unrun))) {
            Ok(None) => {}
            Ok(Some(answer)) => {
                cancel_from_last(&scope.copies.borrow());
                scope.wait_for_running();
                let error = answer.unwrap_or_else(|| {
                    catch_unwind(AssertUnwindSafe(|| failure_answer(scope.stream))).unwrap_or_else(
                        |panic| {
                            held.get_or_insert(panic);
                            Error::ContextFailed
                        },
                    )
                });
                return (Err(error), held);
            }
            Err(panic) => {
                held.get_or_insert(panic);
            }
        }
        pause = (pause * 2).min(LONGEST_PAUSE);
        next_look = Instant::now() + pause;
    }
}

/// One look for a reason the unfinished copies of `scope` may never run: `Some` when the
/// context failed (with the driver's error when the look got it), or when the stream finished
/// its work while copies were unfinished, on two looks in a row (`passed_unrun` keeps the count
/// of the first: a copy whose end was not yet visible at the first shows as a change).
fn look(scope: &HostCopyScope<'_>, passed_unrun: &mut Option<usize>) -> Option<Option<Error>> {
    let stream = scope.stream;
    let context = stream.shared_context();
    if has_failed(context.raw().addr()) {
        return Some(None);
    }
    match ask_outside_captures(stream, Ask::Query) {
        Ok(Some(Ok(()))) => {
            // The stream finished: a copy not started now never will. One may still be running
            // (a failed stream gave up its wait inside the engine's copy): the caller waits.
            let unfinished = scope.waiter.unfinished();
            if unfinished != 0 && *passed_unrun == Some(unfinished) {
                return Some(None);
            }
            *passed_unrun = (unfinished != 0).then_some(unfinished);
            None
        }
        Ok(Some(Err(error))) if is_sticky(error.result()) => {
            abandon_if_failed(context, error.result());
            Some(Some(error.into()))
        }
        Err(error) if error.driver_result().is_some_and(is_sticky) => {
            if let Some(result) = error.driver_result() {
                abandon_if_failed(context, result);
            }
            Some(Some(error))
        }
        // Not done, capturing (copies enqueued before run when reached), or no answer: later.
        _ => {
            *passed_unrun = None;
            None
        }
    }
}

/// Why copies of the stream never ran, asked once every copy finished or was cancelled: the
/// stream's synchronize answers the context's sticky error; a stream without one passed copies
/// that other code's capture had taken.
fn failure_answer(stream: &Stream) -> Error {
    let context = stream.shared_context();
    let asked = ask_outside_captures(stream, Ask::Synchronize);
    let sticky = match &asked {
        Ok(Some(Err(error))) => Some(error.result()),
        Err(error) => error.driver_result(),
        _ => None,
    }
    .filter(|&result| is_sticky(result));
    if let Some(result) = sticky {
        abandon_if_failed(context, result);
    }
    match asked {
        Ok(Some(Err(error))) if sticky.is_some() => error.into(),
        Err(error) if sticky.is_some() => error,
        _ if has_failed(context.raw().addr()) => Error::ContextFailed,
        Ok(Some(Err(error))) => error.into(),
        Err(error) => error,
        Ok(Some(Ok(()))) | Ok(None) => Error::StreamCapturing {
            status: CaptureState::Active,
        },
    }
}

/// What the scope asks of its stream.
#[derive(Clone, Copy)]
enum Ask {
    /// `cuStreamQuery`: whether the stream finished its work.
    Query,
    /// `cuStreamSynchronize`, once every copy finished: the context's error.
    Synchronize,
}

/// Asks `ask` of `stream` where no capture forbids it: `Ok(None)` when the stream is being
/// captured (nothing is asked), else the driver's answer. Inside the launch window (no builder capture
///  begins meanwhile) and in relaxed capture interaction mode (another
/// thread's global-mode capture is not disturbed). Takes no deferred `Drop` error.
fn ask_outside_captures(
    stream: &Stream,
    ask: Ask,
) -> Result<Option<std::result::Result<(), cuda_host_sys::Error>>> {
    let driver = stream.shared_context().driver();
    let raw = stream.as_raw();
    with_stream_current(stream, || {
        let window = match EnqueueWindow::open(driver, raw) {
            Ok(window) => window,
            Err(Error::StreamCapturing { .. }) => return Ok(None),
            Err(error) => return Err(error),
        };
        let relaxed = RelaxedCaptureMode::enter(driver)?;
        let answer = match ask {
            // SAFETY: the stream handle is valid while `stream` exists; it is not capturing
            // (checked in the window), so the query invalidates nothing.
            Ask::Query => unsafe { checked!(driver, cuStreamQuery(raw)) },
            // SAFETY: as above.
            Ask::Synchronize => unsafe { checked!(driver, cuStreamSynchronize(raw)) },
        };
        drop(relaxed);
        drop(window);
        Ok(Some(answer))
    })
}

/// Runs `call` with the stream's context current where the driver resolves the stream against
/// it (the special streams); takes no deferred `Drop` error, unlike the stream's own calls.
fn with_stream_current<T>(stream: &Stream, call: impl FnOnce() -> Result<T>) -> Result<T> {
    let raw = stream.as_raw();
    if raw.is_null() || raw == CU_STREAM_LEGACY || raw == CU_STREAM_PER_THREAD {
        stream.shared_context().with_current(call)
    } else {
        call()
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

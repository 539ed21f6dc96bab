//! A thread that left a point nothing records on its per-thread stream marks one after it as it
//! exits (`UnreadAtExit` in `cuda-host/src/objects/stream.rs`), so that what the point holds (a
//! timeline's word, a value of the context) is let go: with an error a drop left waiting, from a
//! thread-local's destructor, after a failed try, and on the null stream of a per-thread table;
//! where it cannot be made (a capture takes it: a warning says the hold stays; a failed context:
//! the hold goes with the failure), and under a logger that panics on the warning.

use cuda_host::{Context, Error, Stream, StreamFlags, metrics, reclaim, timeline::Timeline};
use cuda_host_sys::{CUresult, CUstreamCaptureMode};
use std::cell::RefCell;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use suite::context;

/// How long a word a thread left held gets to be let go after the thread exited (the passing
/// case takes milliseconds).
const LET_GO: Duration = Duration::from_secs(10);

/// Whether the process holds no timeline's word within [`LET_GO`], draining as it waits.
fn words_let_go() -> bool {
    suite::wait::holds_within(LET_GO, || {
        reclaim();
        metrics().timelines().words == 0
    })
}

/// Enqueues a signal of `timeline` to `value` on the calling thread's per-thread stream of
/// `context` whose point cannot be marked (the track offers no word and the event's record
/// fails): a point nothing records stands there, which the thread notes. The `Stream` value is
/// returned: dropped on this thread, it would mark a point after the unread one itself (the
/// enqueue counts as a launch through it), so a test that wants the point left at the thread's
/// exit drops it elsewhere, after the exit (its drop then names that thread's per-thread stream).
#[must_use]
fn signal_without_its_point(
    controls: &suite::software::Controls,
    context: &Context,
    timeline: &Timeline,
    value: u64,
) -> Stream {
    let stream = Stream::per_thread(context);
    controls.fail_next_calls(c"cuEventCreate", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    controls.fail_next_calls(c"cuEventRecord", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    timeline
        .enqueue_signal(&stream, value)
        .expect("the signal is enqueued without its point");
    stream
}

/// An error a `Drop` recorded "is returned by the next call on the same context" (`Error::
/// DropFailed`). A thread that once left a point nothing records on its per-thread stream exits
/// while such an error waits: its exit's marking leaves the error for the context's next call
/// rather than taking it as its own. Here the point was already followed (nothing left to
/// mark).
#[test]
fn a_drop_error_waiting_when_a_thread_exits_is_still_the_next_calls() {
    let test = "a_drop_error_waiting_when_a_thread_exits_is_still_the_next_calls";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    // Alone: the drop error is the context's, which other tests' calls would take.
    suite::alone_in_child!(a_drop_error_waiting_when_a_thread_exits_is_still_the_next_calls);
    let context = context();
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let (signalled, signal_seen) = mpsc::channel();
    let (may_exit, exit_allowed) = mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let (context, timeline) = (&context, &timeline);
        let worker = scope.spawn(move || {
            // Dropped here: its drop marks a point after the unread one, so the exit marking
            // has nothing left to mark, and still takes the error.
            drop(signal_without_its_point(controls, context, timeline, 1));
            signalled.send(()).expect("main waits");
            exit_allowed.recv().expect("main lets it exit");
        });
        signal_seen.recv().expect("the worker signalled");
        let doomed = Stream::new(context, StreamFlags::NonBlocking).expect("stream");
        controls.fail_next_calls(c"cuStreamDestroy_v2", 1, CUresult::CUDA_ERROR_INVALID_VALUE);
        drop(doomed);
        may_exit.send(()).expect("the worker waits");
        worker.join().expect("the worker ran");
    });
    let next = Stream::new(&context, StreamFlags::NonBlocking).map(drop);
    assert!(
        matches!(
            next,
            Err(Error::DropFailed {
                object: "stream",
                ..
            })
        ),
        "the drop error was not left for the next call on the context: {next:?}"
    );
}

/// The same drop error, seen from the word's side: the exit's marking marks its point all the
/// same, so the point nothing records is shown passed and the word (with a value of the
/// context) let go.
#[test]
fn a_drop_error_waiting_when_a_thread_exits_does_not_keep_its_point_unmarked() {
    let test = "a_drop_error_waiting_when_a_thread_exits_does_not_keep_its_point_unmarked";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    // Alone: the counts are process-wide.
    suite::alone_in_child!(
        a_drop_error_waiting_when_a_thread_exits_does_not_keep_its_point_unmarked
    );
    let context = context();
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let (signalled, signal_seen) = mpsc::channel();
    let (may_exit, exit_allowed) = mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let (context, timeline) = (&context, &timeline);
        let worker = scope.spawn(move || {
            let stream = signal_without_its_point(controls, context, timeline, 1);
            signalled.send(stream).expect("main waits");
            exit_allowed.recv().expect("main lets it exit");
        });
        let stream = signal_seen.recv().expect("the worker signalled");
        let doomed = Stream::new(context, StreamFlags::NonBlocking).expect("stream");
        controls.fail_next_calls(c"cuStreamDestroy_v2", 1, CUresult::CUDA_ERROR_INVALID_VALUE);
        drop(doomed);
        may_exit.send(()).expect("the worker waits");
        worker.join().expect("the worker ran");
        // After the exit: names this thread's per-thread stream.
        drop(stream);
    });
    drop(timeline);
    assert!(
        words_let_go(),
        "the word was still held {LET_GO:?} after its thread exited: its point was never \
         marked ({:?})",
        metrics().timelines()
    );
}

/// The driver takes work from a thread-local destructor on the thread's per-thread stream
/// (`a_threads_per_thread_stream_still_takes_work_from_its_thread_local_destructors`). A signal
/// enqueued there whose point cannot be marked leaves a point nothing records, as anywhere
/// else, once the thread's note of such points (`UNREAD_AT_EXIT`, registered after this
/// destructor's thread-local, so destroyed first) is gone: the operation marks a point after it
/// itself, and the word is let go.
#[test]
fn a_point_left_from_a_later_thread_local_destructor_passes_once_its_thread_exited() {
    let test = "a_point_left_from_a_later_thread_local_destructor_passes_once_its_thread_exited";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    suite::alone_in_child!(
        a_point_left_from_a_later_thread_local_destructor_passes_once_its_thread_exited
    );
    struct SignalAtExit {
        context: Context,
        timeline: Arc<Timeline>,
        controls: &'static suite::software::Controls,
        signalled: Arc<Mutex<Option<bool>>>,
        stream: Arc<Mutex<Option<Stream>>>,
    }
    impl Drop for SignalAtExit {
        fn drop(&mut self) {
            let stream = Stream::per_thread(&self.context);
            self.controls
                .fail_next_calls(c"cuEventCreate", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
            self.controls
                .fail_next_calls(c"cuEventRecord", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
            let signalled = self.timeline.enqueue_signal(&stream, 2).is_ok();
            *self.signalled.lock().unwrap() = Some(signalled);
            // Dropped on the test's thread, after the exit.
            *self.stream.lock().unwrap() = Some(stream);
        }
    }
    thread_local! {
        static AT_EXIT: RefCell<Option<SignalAtExit>> = const { RefCell::new(None) };
    }
    let context = context();
    let timeline = Arc::new(Timeline::new(&context, 0).expect("timeline"));
    let signalled = Arc::new(Mutex::new(None));
    let left = Arc::new(Mutex::new(None));
    std::thread::scope(|scope| {
        // Joined explicitly: the scope's own end does not wait for thread-local destructors.
        let worker = scope.spawn(|| {
            // The thread-local is registered first, so its destructor runs last.
            AT_EXIT.with(|at_exit| {
                *at_exit.borrow_mut() = Some(SignalAtExit {
                    context: context.clone(),
                    timeline: Arc::clone(&timeline),
                    controls,
                    signalled: Arc::clone(&signalled),
                    stream: Arc::clone(&left),
                })
            });
            // A first point nothing records, which the thread notes; then shown passed.
            drop(signal_without_its_point(controls, &context, &timeline, 1));
            Stream::per_thread(&context)
                .synchronize()
                .expect("the per-thread stream synchronizes");
        });
        worker.join().expect("the worker ran");
    });
    let signalled = signalled.lock().unwrap().take();
    assert_eq!(
        signalled,
        Some(true),
        "the destructor's signal was enqueued"
    );
    drop(left.lock().unwrap().take());
    drop(timeline);
    assert!(
        words_let_go(),
        "the word was still held {LET_GO:?} after its thread exited ({:?})",
        metrics().timelines()
    );
}

/// The exit's marking is the one chance to show the point passed: when its event's record fails
/// once (an injected failure of the exiting thread's `cuEventRecord`), it tries again, and the
/// word is let go.
#[test]
fn a_failed_exit_mark_does_not_keep_the_word_for_the_life_of_the_process() {
    let test = "a_failed_exit_mark_does_not_keep_the_word_for_the_life_of_the_process";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    suite::alone_in_child!(a_failed_exit_mark_does_not_keep_the_word_for_the_life_of_the_process);
    let context = context();
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let stream = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let stream = signal_without_its_point(controls, &context, &timeline, 1);
                // The exit marking's record fails.
                controls.fail_next_calls(c"cuEventRecord", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
                stream
            })
            .join()
            .expect("the thread ran")
    });
    drop(stream);
    drop(timeline);
    assert!(
        words_let_go(),
        "the word was still held {LET_GO:?} after its thread exited ({:?})",
        metrics().timelines()
    );
}

/// On a per-thread driver table (`CUDA_SYS_PER_THREAD_DEFAULT_STREAM=1`) the null stream is
/// the thread's per-thread stream: a point nothing records there is noted too, and the exit
/// marks after it through `CU_STREAM_PER_THREAD`.
#[test]
fn a_point_nothing_records_on_the_null_stream_of_a_per_thread_table_passes_once_its_thread_exited()
{
    let test = "a_point_nothing_records_on_the_null_stream_of_a_per_thread_table_passes_once_its_thread_exited";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    suite::alone_in_child!(
        a_point_nothing_records_on_the_null_stream_of_a_per_thread_table_passes_once_its_thread_exited,
        &[("CUDA_SYS_PER_THREAD_DEFAULT_STREAM", "1")]
    );
    let context = context();
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let stream = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // SAFETY: null is a special stream the driver resolves against the context.
                let stream = unsafe { Stream::borrow_raw(&context, std::ptr::null_mut()) };
                controls.fail_next_calls(c"cuEventCreate", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
                controls.fail_next_calls(c"cuEventRecord", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
                timeline
                    .enqueue_signal(&stream, 1)
                    .expect("the signal is enqueued without its point");
                stream
            })
            .join()
            .expect("the thread ran")
    });
    drop(stream);
    drop(timeline);
    assert!(
        words_let_go(),
        "the word was still held {LET_GO:?} after its thread exited ({:?})",
        metrics().timelines()
    );
}

/// The part of the exit marking's message, at whichever level it is logged.
const EXIT_MESSAGE: &str = "no point after a stream's points nothing records";

/// A logger that records the level and message of each record containing [`EXIT_MESSAGE`], and
/// panics on them when asked.
struct LevelLogger;

static RECORDS: Mutex<Vec<(log::Level, String)>> = Mutex::new(Vec::new());
static PANIC: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl log::Log for LevelLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        let message = record.args().to_string();
        if !message.contains(EXIT_MESSAGE) {
            return;
        }
        RECORDS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((record.level(), message));
        if PANIC.load(std::sync::atomic::Ordering::SeqCst) {
            panic!("a logger that panics on the exit marking's record");
        }
    }
    fn flush(&self) {}
}

fn install_logger() {
    log::set_logger(&LevelLogger).expect("the only logger of this process");
    log::set_max_level(log::LevelFilter::Trace);
}

fn records() -> Vec<(log::Level, String)> {
    RECORDS.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// RELIABILITY.md: a point nothing records is left where "a capture other code began takes the
/// record"; on a per-thread stream the thread marks one after it as it exits, and "A failed
/// mark there is tried again three times ...; if every try fails (a warning says so) ... the
/// hold stays". Here other code's capture takes the exit's own mark (begun at its record): the
/// hold stays for the life of the process, and the only record of it is at debug level, after
/// one try.
#[test]
fn a_capture_that_takes_the_exit_mark_leaves_the_hold_with_a_warning() {
    let test = "a_capture_that_takes_the_exit_mark_leaves_the_hold_with_a_warning";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    suite::alone_in_child!(a_capture_that_takes_the_exit_mark_leaves_the_hold_with_a_warning);
    install_logger();
    let context = context();
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let records_before = controls.call_count(c"cuEventRecord");
    let stream = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let stream = signal_without_its_point(controls, &context, &timeline, 1);
                // Other code's capture of this thread's per-thread stream, begun at the exit
                // mark's record.
                controls.begin_capture_at_next_call(
                    c"cuEventRecord",
                    &Stream::per_thread(&context),
                    CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
                );
                stream
            })
            .join()
            .expect("the thread ran")
    });
    let tries = controls.call_count(c"cuEventRecord") - records_before - 1;
    drop(stream);
    drop(timeline);
    let let_go = words_let_go();
    let records = records();
    let warned = records.iter().any(|(level, _)| *level == log::Level::Warn);
    assert!(
        let_go || warned,
        "the word is held for the life of the process ({:?}) after {tries} try of the exit's \
         mark, and no warning says so: {records:?}",
        metrics().timelines()
    );
}

/// `mark_after_unread_points` does not try again nor warn in a failed context: "what a failed
/// context's points hold goes with the failure". A thread leaves a point nothing records on
/// its per-thread stream of a context that then fails, and exits; once a call answered the
/// failure, the word is let go.
#[test]
fn what_a_point_left_at_exit_holds_goes_with_its_contexts_failure() {
    let test = "what_a_point_left_at_exit_holds_goes_with_its_contexts_failure";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    suite::alone_in_child!(what_a_point_left_at_exit_holds_goes_with_its_contexts_failure);
    install_logger();
    let device = cuda_host::Device::get(context().driver(), 0).expect("device");
    let context = controls.fresh_context(&device);
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let stream = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let stream = signal_without_its_point(controls, &context, &timeline, 1);
                controls.set_sticky_error(&context, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
                stream
            })
            .join()
            .expect("the thread ran")
    });
    drop(stream);
    drop(timeline);
    // Calls that answer the failure.
    let answered = Stream::per_thread(&context).synchronize();
    assert!(answered.is_err(), "the context failed: {answered:?}");
    let answered = Stream::new(&context, cuda_host::StreamFlags::NonBlocking).map(drop);
    assert!(answered.is_err(), "the context failed: {answered:?}");
    assert!(
        words_let_go(),
        "the word was still held {LET_GO:?} after its context failed and its thread exited \
         ({:?}); the exit's mark logged {:?}",
        metrics().timelines(),
        records()
    );
}

/// As above, for a stream the test owns: its drop's mark fails with the context's failure and
/// is not tried again (debug), on the promise that what the points hold goes with the failure.
#[test]
fn what_a_point_of_a_dropped_stream_holds_goes_with_its_contexts_failure() {
    let test = "what_a_point_of_a_dropped_stream_holds_goes_with_its_contexts_failure";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    suite::alone_in_child!(what_a_point_of_a_dropped_stream_holds_goes_with_its_contexts_failure);
    install_logger();
    let device = cuda_host::Device::get(context().driver(), 0).expect("device");
    let context = controls.fresh_context(&device);
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let stream = Stream::new(&context, cuda_host::StreamFlags::NonBlocking).expect("stream");
    controls.fail_next_calls(c"cuEventCreate", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    controls.fail_next_calls(c"cuEventRecord", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    timeline
        .enqueue_signal(&stream, 1)
        .expect("the signal is enqueued without its point");
    controls.set_sticky_error(&context, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    drop(stream);
    drop(timeline);
    let answered = Stream::per_thread(&context).synchronize();
    assert!(answered.is_err(), "the context failed: {answered:?}");
    assert!(
        words_let_go(),
        "the word was still held {LET_GO:?} after its context failed and its stream was \
         dropped ({:?}); the drop's mark logged {:?}",
        metrics().timelines(),
        records()
    );
}

/// Every try of the exit's mark fails: the warning goes to a logger that panics, from a
/// thread-local destructor (a panic there would abort the process). The thread exits, the
/// warning was made, and the process goes on.
#[test]
fn a_logger_that_panics_on_the_exit_marks_warning_does_not_abort_the_exit() {
    let test = "a_logger_that_panics_on_the_exit_marks_warning_does_not_abort_the_exit";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    suite::alone_in_child!(a_logger_that_panics_on_the_exit_marks_warning_does_not_abort_the_exit);
    suite::quiet::quiet_deliberate_panics();
    install_logger();
    PANIC.store(true, std::sync::atomic::Ordering::SeqCst);
    let context = context();
    let timeline = Timeline::new(&context, 0).expect("timeline");
    let stream = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let stream = signal_without_its_point(controls, &context, &timeline, 1);
                // Every try of the exit's mark fails.
                controls.fail_next_calls(c"cuEventRecord", 8, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
                stream
            })
            .join()
            .expect("the thread ran")
    });
    drop(stream);
    let records = records();
    assert!(
        records.iter().any(|(level, _)| *level == log::Level::Warn),
        "the failed exit mark warned: {records:?}"
    );
    drop(timeline);
}

/// The exit marking's note is made the first time a thread leaves a point nothing records. A
/// thread whose first such point is left from a thread-local's destructor (the thread's first
/// use of cuda-host) makes its note during its exit: the point is marked after all the same
/// (by the note's own destructor, or at once), and the word let go.
#[test]
fn a_first_point_left_from_a_thread_local_destructor_passes_once_its_thread_exited() {
    let test = "a_first_point_left_from_a_thread_local_destructor_passes_once_its_thread_exited";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "failures are controls of the software driver");
    };
    suite::alone_in_child!(
        a_first_point_left_from_a_thread_local_destructor_passes_once_its_thread_exited
    );
    use std::cell::RefCell;
    use std::sync::Arc;
    struct SignalAtExit {
        context: Context,
        timeline: Arc<Timeline>,
        controls: &'static suite::software::Controls,
        signalled: Arc<Mutex<Option<bool>>>,
        stream: Arc<Mutex<Option<Stream>>>,
    }
    impl Drop for SignalAtExit {
        fn drop(&mut self) {
            let stream = Stream::per_thread(&self.context);
            self.controls
                .fail_next_calls(c"cuEventCreate", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
            self.controls
                .fail_next_calls(c"cuEventRecord", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
            let signalled = self.timeline.enqueue_signal(&stream, 1).is_ok();
            *self.signalled.lock().unwrap() = Some(signalled);
            *self.stream.lock().unwrap() = Some(stream);
        }
    }
    thread_local! {
        static AT_EXIT: RefCell<Option<SignalAtExit>> = const { RefCell::new(None) };
    }
    let context = context();
    let timeline = Arc::new(Timeline::new(&context, 0).expect("timeline"));
    let signalled = Arc::new(Mutex::new(None));
    let left = Arc::new(Mutex::new(None));
    std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            AT_EXIT.with(|at_exit| {
                *at_exit.borrow_mut() = Some(SignalAtExit {
                    context: context.clone(),
                    timeline: Arc::clone(&timeline),
                    controls,
                    signalled: Arc::clone(&signalled),
                    stream: Arc::clone(&left),
                })
            });
        });
        worker.join().expect("the worker ran");
    });
    assert_eq!(signalled.lock().unwrap().take(), Some(true), "signalled");
    drop(left.lock().unwrap().take());
    drop(timeline);
    assert!(
        words_let_go(),
        "the word was still held {LET_GO:?} after its thread exited ({:?})",
        metrics().timelines()
    );
}

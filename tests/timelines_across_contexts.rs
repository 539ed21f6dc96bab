//! Timelines used by streams of other contexts than their own: a kept word outlives the context
//! that holds its memory while another context's stream reads it, and a failure of the
//! timeline's context leaves no other context's stream waiting.

use cuda_host::{Context, Device, Stream, StreamFlags, timeline::Timeline};
use cuda_host_sys::CUresult;
use std::time::Duration;
use suite::{Gate, MappedWords, context, wait_until};

fn new_stream(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking).expect("stream")
}

/// Whether the context `raw` of the test driver is still a live context.
fn is_live(raw: cuda_host_sys::CUcontext) -> bool {
    let driver = &suite::test_driver().driver;
    // SAFETY: a context handle (perhaps destroyed, which the driver answers with an error).
    let pushed = unsafe { driver.cuCtxPushCurrent_v2(raw) };
    if pushed != CUresult::CUDA_SUCCESS {
        return false;
    }
    let mut popped = std::ptr::null_mut();
    // SAFETY: pushed just above on this thread; a valid out-pointer.
    unsafe { driver.cuCtxPopCurrent_v2(&mut popped) };
    true
}

/// A word kept for the life of the process (no stream point could follow the operation on it)
/// lives in its timeline's context's pinned pages. When the stream that still reads it is of
/// another context, releasing the timeline's context (here a fresh one, destroyed with its last
/// value; a primary context's last release does the same) frees that memory under the pending
/// wait: the promise "never freed" holds only while the context lives.
#[test]
fn a_kept_word_read_by_another_contexts_stream_outlives_its_own_context() {
    let test = "a_kept_word_read_by_another_contexts_stream_outlives_its_own_context";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "fresh contexts are a control of the software driver");
    };
    // Alone in a process: the count of host allocations is process-wide.
    suite::alone_in_child!(a_kept_word_read_by_another_contexts_stream_outlives_its_own_context);
    let primary = context();
    let stream = new_stream(&primary);
    let gate = Gate::new(&primary);
    let words = MappedWords::new(&primary, 1);
    let device = Device::get(primary.driver(), 0).expect("device");
    let fresh = controls.fresh_context(&device);
    let fresh_raw = fresh.as_raw();
    let timeline = Timeline::new(&fresh, 0).expect("timeline");
    let allocations = || controls.live_objects().host_allocations;
    let with_the_word = allocations();
    gate.hold(&stream);
    // The point after the wait cannot be recorded: the word is kept, the wait stays on the
    // stream, behind the gate.
    controls.fail_next_calls(c"cuEventRecord", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    timeline
        .enqueue_wait(&stream, 1)
        .expect("the wait is enqueued without its point");
    words.write_in_stream(&stream, 0, 1);
    drop(timeline);
    drop(fresh);
    cuda_host::reclaim();
    std::thread::sleep(Duration::from_millis(20));
    cuda_host::reclaim();
    assert!(
        is_live(fresh_raw),
        "the kept word's context was destroyed, and its memory with it, while another \
         context's stream still has a wait on the word"
    );
    assert!(
        allocations() >= with_the_word,
        "the kept word's page was freed while another context's stream still waits on it"
    );
    gate.open();
    wait_until("the waiting stream to be released", || words.get(0) == 1);
    stream.synchronize().expect("synchronize");
}

/// A timeline of a fresh context, read by two streams of the primary context: one signals 1
/// behind a gate, the other waits for 2 behind another. The last handle goes (the value is
/// raised to the maximum, and the watcher raises it again after the late signal lowers it).
/// Then the timeline's own context fails, which stops no stream of the primary context: the
/// watcher must go on raising the value until those streams passed their operations.
#[test]
fn a_failure_of_the_timelines_context_leaves_no_other_contexts_stream_waiting() {
    let test = "a_failure_of_the_timelines_context_leaves_no_other_contexts_stream_waiting";
    let Some(controls) = suite::software::controls() else {
        return suite::skip(test, "fresh contexts are a control of the software driver");
    };
    // Alone in a process: the failure stays with it.
    suite::alone_in_child!(
        a_failure_of_the_timelines_context_leaves_no_other_contexts_stream_waiting
    );
    let primary = context();
    let device = Device::get(primary.driver(), 0).expect("device");
    let fresh = controls.fresh_context(&device);
    let timeline = Timeline::new(&fresh, 0).expect("timeline");
    let (signaller, waiter) = (new_stream(&primary), new_stream(&primary));
    let words = MappedWords::new(&primary, 1);
    let (first, second) = (Gate::new(&primary), Gate::new(&primary));
    first.hold(&signaller);
    timeline
        .enqueue_signal(&signaller, 1)
        .expect("a signal from another context's stream");
    second.hold(&waiter);
    timeline
        .enqueue_wait(&waiter, 2)
        .expect("a wait on another context's stream");
    words.write_in_stream(&waiter, 0, 1);
    drop(timeline);
    // The timeline's context fails, and cuda-host sees it.
    let failing = new_stream(&fresh);
    controls.set_sticky_error(&fresh, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    assert!(failing.synchronize().is_err(), "the failure is reported");
    // The watcher's rounds look at the failure.
    std::thread::sleep(Duration::from_millis(20));
    // The signal of 1 lands after the drop raised the value; the wait for 2 comes after it.
    first.open();
    signaller.synchronize().expect("synchronize");
    second.open();
    wait_until(
        "the primary context's waiting stream to be released after the fresh context failed",
        || words.get(0) == 1,
    );
    waiter.synchronize().expect("synchronize");
}

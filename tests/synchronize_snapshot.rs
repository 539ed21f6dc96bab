//! What a synchronize sees passed: the points marked on its stream before it began, never those
//! of another stream that its stream's track was lent to meanwhile. The window between looking
//! the track up and noting its last point has no driver call in it, so this binary's allocator
//! holds it open: on a thread that asks, an allocation of the size the note makes sleeps.

use cuda_host::{Context, Stream, StreamFlags, points::stream_point};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use suite::{Gate, context};

fn new_stream(context: &Context) -> Stream {
    Stream::new(context, StreamFlags::NonBlocking).expect("stream")
}

thread_local! {
    /// Whether this thread's allocations of `SLOW_SIZE` bytes sleep (`SlowAllocator`).
    static SLOW: Cell<bool> = const { Cell::new(false) };
}

/// The size of the allocations that sleep on a thread that asked for it: that of the one-element
/// list of tracks and their last points that a synchronize notes.
const SLOW_SIZE: usize = 16;
/// Set when a slow allocation begins its sleep.
static SLEEPING: AtomicBool = AtomicBool::new(false);

/// The system allocator, whose allocations of `SLOW_SIZE` bytes sleep 300 ms on a thread that set
/// `SLOW`: holds a window open between two steps of cuda-host that have no driver call between
/// them (a sleep allocates nothing).
struct SlowAllocator;

// SAFETY: the system allocator's, with a sleep before some allocations.
unsafe impl GlobalAlloc for SlowAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() == SLOW_SIZE && SLOW.try_with(Cell::get).unwrap_or(false) {
            SLEEPING.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(300));
        }
        // SAFETY: the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: allocated above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: SlowAllocator = SlowAllocator;

/// A synchronize of a stream notes the last point of the stream's track before it begins, and
/// passes every point up to it once it returned. A stream with no track that marks points
/// meanwhile may take the quiet track back: its points, which the synchronize of the first stream
/// does not wait for, are not seen passed when that synchronize returns, nor a value released
/// there dropped.
#[test]
fn a_synchronize_never_passes_a_point_of_another_stream_its_streams_track_went_to() {
    suite::alone_in_child!(
        a_synchronize_never_passes_a_point_of_another_stream_its_streams_track_went_to
    );
    let context = context();
    let (first, second) = (new_stream(&context), Arc::new(new_stream(&context)));
    // The context's one track serves the first stream, which passed its only point.
    let point = stream_point(&first).expect("point");
    first.synchronize().expect("synchronize");
    assert!(point.is_passed().expect("look"));
    let gate = Arc::new(Gate::new(&context));
    let tally = suite::Tally::new();
    let (synchronized, told) = std::sync::mpsc::channel::<()>();
    let marker = std::thread::spawn({
        let (second, gate, tally) = (Arc::clone(&second), Arc::clone(&gate), Arc::clone(&tally));
        move || {
            suite::wait_until("the synchronize to look its track up", || {
                SLEEPING.load(Ordering::SeqCst)
            });
            // The second stream, held, takes the quiet track back: a value released on it,
            // then a point.
            gate.hold(&second);
            cuda_host::points::release_in_stream_order(&second, tally.probe())
                .map_err(|refused| refused.error)
                .expect("released");
            let later = stream_point(&second).expect("point");
            told.recv_timeout(Duration::from_secs(10))
                .expect("the synchronize returned");
            // This thread's drain, with the second stream still held.
            cuda_host::reclaim();
            (later.is_passed().expect("look"), tally.drops())
        }
    });
    SLOW.with(|slow| slow.set(true));
    let returned = first.synchronize();
    SLOW.with(|slow| slow.set(false));
    returned.expect("synchronize");
    synchronized.send(()).expect("the marking thread");
    let (passed, dropped) = marker.join().expect("the marking thread");
    gate.open();
    second.synchronize().expect("synchronize");
    assert_eq!(
        (passed, dropped),
        (false, 0),
        "the second stream, held at its gate, was seen past its point (and its released value \
         dropped): the first stream's synchronize passed the points of the track it had lent"
    );
}

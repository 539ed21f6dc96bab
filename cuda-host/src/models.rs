//! loom models of the lock-free cores: every interleaving of a few threads, within loom's bounds.
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p cuda-host --lib --release`. The tracks'
//! look/mark handshake has its models beside it (`tracks/track/models.rs`).

use crate::launch::hook_cell::HookCell;
use crate::launch::record_list::{Linked, RecordList, last_of};
use crate::launch::running::FailedContexts;
use crate::launch::running::{RunningStreams, key};
use crate::launch::slot_state::{Phase, Released, SlotState};
use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use std::ptr;

/// A model checker bounded to three preemptions per execution, for models with three threads
/// and loops of compare-and-swap (unbounded, they take minutes).
fn bounded() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder
}

/// A node standing in for a launch record.
struct Node {
    next: *mut Node,
    id: usize,
}

// SAFETY: `next` is only touched by the list that owns the node.
unsafe impl Linked for Node {
    fn next(node: *mut Self) -> *mut *mut Self {
        // SAFETY: only the field's address is taken; the caller owns the node.
        unsafe { &raw mut (*node).next }
    }
}

fn node(id: usize) -> *mut Node {
    Box::into_raw(Box::new(Node {
        next: ptr::null_mut(),
        id,
    }))
}

/// Frees the chain at `first`, returning the ids it held.
fn free_chain(mut first: *mut Node) -> Vec<usize> {
    let mut ids = Vec::new();
    while !first.is_null() {
        // SAFETY: the chain was handed over by its list; each node is freed once.
        let node = unsafe { Box::from_raw(first) };
        ids.push(node.id);
        first = node.next;
    }
    ids
}

/// The driver's thread pushes finished records while their thread drains, then exits (closing
/// its list); refused pushes go to the shared list. Every record is dropped exactly once.
#[test]
fn every_pushed_record_is_taken_exactly_once_across_drains_and_the_close() {
    loom::model(|| {
        let own = Arc::new(RecordList::<Node>::new());
        let shared = Arc::new(RecordList::<Node>::new());
        let driver = {
            let (own, shared) = (Arc::clone(&own), Arc::clone(&shared));
            thread::spawn(move || {
                for id in [1, 2] {
                    // SAFETY: a fresh node, owned here until pushed.
                    if let Err(refused) = unsafe { own.push(node(id)) } {
                        // SAFETY: refused, so still ours; the shared list is never closed.
                        unsafe { shared.push(refused) }.expect("the shared list stays open");
                    }
                }
            })
        };
        let mut dropped = free_chain(own.take());
        dropped.extend(free_chain(own.take()));
        // The thread exits: what is left goes to the shared list.
        let left = own.close();
        if !left.is_null() {
            // SAFETY: the closed list handed its chain over.
            unsafe { shared.push_chain(left, last_of(left)) }.expect("open");
        }
        driver.join().unwrap();
        dropped.extend(free_chain(shared.take()));
        dropped.sort_unstable();
        assert_eq!(dropped, [1, 2]);
        assert!(own.is_empty());
    });
}

/// Two threads drain the shared list at once while another pushes: no record is taken twice.
#[test]
fn concurrent_drains_of_one_list_take_each_record_once() {
    bounded().check(|| {
        let list = Arc::new(RecordList::<Node>::new());
        let taken = Arc::new(AtomicUsize::new(0));
        let pusher = {
            let list = Arc::clone(&list);
            thread::spawn(move || {
                for id in [1, 2] {
                    // SAFETY: a fresh node; the list is open.
                    unsafe { list.push(node(id)) }.expect("open");
                }
            })
        };
        let drainers: Vec<_> = (0..2)
            .map(|_| {
                let (list, taken) = (Arc::clone(&list), Arc::clone(&taken));
                thread::spawn(move || {
                    let count = free_chain(list.take()).len();
                    taken.fetch_add(count, Ordering::SeqCst);
                })
            })
            .collect();
        pusher.join().unwrap();
        for drainer in drainers {
            drainer.join().unwrap();
        }
        let rest = free_chain(list.take()).len();
        assert_eq!(taken.load(Ordering::SeqCst) + rest, 2);
    });
}

/// A launch racing its context's failure, as both sides make it: the launcher marks its slot
/// launched, then abandons it if it sees the failure; the failure is recorded, then the slots are
/// scanned and a launched one abandoned. With `host_function`, the driver's thread also tries to
/// claim the record (a launch made before the fault, which the driver still runs). Returns how
/// many parties came to own the record, and the slot.
fn race_a_launch_against_its_contexts_failure(host_function: bool) -> (usize, Arc<SlotState>) {
    const CONTEXT: usize = 1;
    let slot = Arc::new(SlotState::new(1));
    let failed = Arc::new(FailedContexts::new());
    let owners = Arc::new(AtomicUsize::new(0));
    let generation = slot.begin();
    let launcher = {
        let (slot, failed, owners) = (Arc::clone(&slot), Arc::clone(&failed), Arc::clone(&owners));
        thread::spawn(move || {
            slot.mark_launched(generation);
            if failed.has_failed(CONTEXT) && slot.abandon(generation) {
                owners.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let claimer = host_function.then(|| {
        let (slot, owners) = (Arc::clone(&slot), Arc::clone(&owners));
        thread::spawn(move || {
            if slot.claim(generation) {
                owners.fetch_add(1, Ordering::SeqCst);
            }
        })
    });
    failed.record(CONTEXT);
    let (phase, seen) = slot.load(Ordering::Acquire);
    if phase == Phase::Launched && seen == generation && slot.abandon(generation) {
        owners.fetch_add(1, Ordering::SeqCst);
    }
    launcher.join().unwrap();
    if let Some(claimer) = claimer {
        claimer.join().unwrap();
    }
    (owners.load(Ordering::SeqCst), slot)
}

/// The driver never runs a failed context's functions: exactly one of the launcher (which sees
/// the failure afterwards) and the scan (which sees the launch) abandons the record. None would
/// leak it, both would drop it twice.
#[test]
fn a_launch_racing_its_contexts_failure_is_abandoned_exactly_once() {
    loom::model(|| {
        let (owners, slot) = race_a_launch_against_its_contexts_failure(false);
        assert_eq!(owners, 1);
        assert_eq!(slot.release(), Released::Retired);
    });
}

/// The same race while the host function still runs: exactly one party owns the record (the
/// host function's claim, or an abandon).
#[test]
fn a_launch_claimed_while_its_context_fails_has_exactly_one_owner() {
    loom::model(|| {
        let (owners, _) = race_a_launch_against_its_contexts_failure(true);
        assert_eq!(owners, 1);
    });
}

/// A host function claimed while its context fails, against a call that answered the failure:
/// the function lists its stream, then runs unless it sees the failure; the call records the
/// failure, then waits while it sees the function listed. Whatever the call saw when it
/// returned is final: the function either ran before it returned or never runs.
#[test]
fn a_call_answering_a_failure_returns_after_the_function_of_its_stream_or_it_never_runs() {
    const CONTEXT: usize = 1;
    const STREAM: usize = 0x40;
    bounded().check(|| {
        let running = Arc::new(RunningStreams::<1>::new());
        let failed = Arc::new(FailedContexts::new());
        let writes = Arc::new(AtomicUsize::new(0));
        let function = {
            let (running, failed, writes) = (
                Arc::clone(&running),
                Arc::clone(&failed),
                Arc::clone(&writes),
            );
            thread::spawn(move || {
                let _listed = running.enter(key(STREAM), CONTEXT);
                if !failed.has_failed(CONTEXT) {
                    writes.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        failed.record(CONTEXT);
        while running.any_running(Some(key(STREAM)), CONTEXT) {
            thread::yield_now();
        }
        let seen = writes.load(Ordering::Relaxed);
        function.join().unwrap();
        assert_eq!(
            writes.load(Ordering::Relaxed),
            seen,
            "the function wrote after the call returned"
        );
    });
}

/// A refused launch is taken back by its launcher unless the driver ran it anyway; a late call
/// with the ticket of a freed and reused slot claims nothing.
#[test]
fn a_refused_launch_and_a_stale_ticket_never_give_a_record_two_owners() {
    loom::model(|| {
        let slot = Arc::new(SlotState::new(1));
        let generation = slot.begin();
        let late_call = {
            let slot = Arc::clone(&slot);
            thread::spawn(move || slot.claim(generation))
        };
        let refused = slot.refuse(generation);
        let claimed = late_call.join().unwrap();
        assert!(refused ^ claimed, "refused: {refused}, claimed: {claimed}");
        assert_eq!(slot.release(), Released::Reusable);
        let next = slot.begin();
        let stale = {
            let slot = Arc::clone(&slot);
            thread::spawn(move || slot.claim(generation))
        };
        assert!(
            !stale.join().unwrap(),
            "a stale ticket claimed a later launch"
        );
        assert!(slot.claim(next));
    });
}

/// A hook that replaces itself while another thread calls it: no deadlock, every hook value
/// dropped exactly once (loom reports a leaked `Arc`).
#[test]
fn a_hook_replaced_while_it_runs_is_dropped_once_with_no_lock_held() {
    loom::model(|| {
        let cell = Arc::new(HookCell::<usize>::new());
        assert!(cell.replace(Some(Arc::new(1))).is_none());
        let caller = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || {
                if let Some(hook) = cell.get() {
                    // Calling it: the hook replaces itself.
                    let replaced = cell.replace(Some(Arc::new(*hook + 10)));
                    drop(replaced);
                }
            })
        };
        let replaced = cell.replace(Some(Arc::new(2)));
        drop(replaced);
        caller.join().unwrap();
        let last = cell.replace(None).expect("a hook is installed");
        assert!(matches!(*last, 2 | 11 | 12), "{}", *last);
    });
}

//! The software driver's own controls (software driver only): fault injection, delays, the pace
//! of stream waits, the reported driver version, counts of calls, of live objects and of stale
//! handles.

use crate::harness::*;
use cuda_host::{Event, EventFlags};
use cuda_host_sys::{
    Availability, CUcontext, CUdriverProcAddress_flags, CUdriverProcAddressQueryResult, CUgreenCtx,
    CUhostTaskSyncMode, CUresult, CUstream, CUstream_flags, Driver, Error,
};
use std::ffi::{CStr, c_char, c_uint, c_void};
use std::ptr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use suite::capture::Graph;
use suite::host_function::{launch_host, leak_closure, run_closure};
use suite::software::{Controls, LiveCounts, LiveObjects, LiveObjectsFn};
use suite::{Gate, ok, wait_until};

/// A failure injection the test armed: the next `count` calls of `entry`, from this thread or
/// (`any_thread`) from any, answer `code`. Disarmed when the test ends, also when it fails.
struct Armed {
    controls: &'static Controls,
    entry: &'static CStr,
    any_thread: bool,
}

impl Armed {
    fn new(
        controls: &'static Controls,
        entry: &'static CStr,
        count: u32,
        code: CUresult,
        any_thread: bool,
    ) -> Armed {
        if any_thread {
            controls.fail_next_calls_any_thread(entry, count, code);
        } else {
            controls.fail_next_calls(entry, count, code);
        }
        Armed {
            controls,
            entry,
            any_thread,
        }
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        if self.any_thread {
            self.controls
                .fail_next_calls_any_thread(self.entry, 0, SUCCESS);
        } else {
            self.controls.fail_next_calls(self.entry, 0, SUCCESS);
        }
    }
}

#[test]
fn fail_next_calls_fails_the_next_calls_of_this_thread_only_then_calls_succeed() {
    let controls = controls_or_skip!(
        fail_next_calls_fails_the_next_calls_of_this_thread_only_then_calls_succeed
    );
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let runs = Arc::new(AtomicUsize::new(0));
    let code = CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    let _armed = Armed::new(controls, c"cuLaunchHostFunc", 2, code, false);

    let other_runs = Arc::clone(&runs);
    let other = on_another_thread(stream.as_raw(), move |stream| {
        launch_host(stream, counting(&other_runs))
    });
    assert_eq!(other, SUCCESS, "another thread's call failed");
    assert_eq!(launch_host(stream.as_raw(), counting(&runs)), code);
    assert_eq!(launch_host(stream.as_raw(), counting(&runs)), code);
    assert_eq!(
        launch_host(stream.as_raw(), counting(&runs)),
        SUCCESS,
        "only 2 calls fail"
    );
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(count(&runs), 2, "a failed call enqueues nothing");
}

/// `cuswFailNextCalls`, as `cudasw.h` declares it.
type FailNextCalls = unsafe extern "C" fn(*const c_char, c_uint, CUresult) -> CUresult;

#[test]
fn the_controls_are_reachable_through_proc_address_and_refuse_unknown_entry_names() {
    controls_or_skip!(
        the_controls_are_reachable_through_proc_address_and_refuse_unknown_entry_names
    );
    let _shared = shared();
    let mut address = ptr::null_mut();
    let mut status = CUdriverProcAddressQueryResult(77);
    // SAFETY: a NUL-terminated name and valid out-pointers.
    ok("cuGetProcAddress_v2", unsafe {
        driver().cuGetProcAddress_v2(
            c"cuswFailNextCalls".as_ptr(),
            &mut address,
            10000,
            0,
            &mut status,
        )
    });
    assert!(!address.is_null());
    // SAFETY: the software driver's `cuswFailNextCalls` has this C signature (cudasw.h).
    let fail_next_calls = unsafe { std::mem::transmute::<*mut c_void, FailNextCalls>(address) };
    let code = CUresult::CUDA_ERROR_OUT_OF_MEMORY;
    // SAFETY: NUL-terminated names; a count of 0 arms nothing.
    unsafe {
        assert_eq!(
            fail_next_calls(c"cuNoSuchEntryPoint".as_ptr(), 1, code),
            CUresult::CUDA_ERROR_NOT_FOUND,
            "a misspelt entry name is refused"
        );
        assert_eq!(
            fail_next_calls(c"cuLaunchHostFunc".as_ptr(), 0, code),
            SUCCESS
        );
    }
}

#[test]
fn fail_next_calls_with_a_count_of_zero_disarms() {
    let controls = controls_or_skip!(fail_next_calls_with_a_count_of_zero_disarms);
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let runs = Arc::new(AtomicUsize::new(0));
    let _armed = Armed::new(
        controls,
        c"cuLaunchHostFunc",
        3,
        CUresult::CUDA_ERROR_UNKNOWN,
        false,
    );
    controls.fail_next_calls(c"cuLaunchHostFunc", 0, CUresult::CUDA_ERROR_UNKNOWN);
    launch(stream.as_raw(), counting(&runs));
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(count(&runs), 1);
}

#[test]
fn fail_next_calls_any_thread_fails_the_next_call_from_another_thread() {
    let controls =
        controls_or_skip!(fail_next_calls_any_thread_fails_the_next_call_from_another_thread);
    // Alone in a process: it fails calls of every thread.
    suite::alone_in_child!(fail_next_calls_any_thread_fails_the_next_call_from_another_thread);
    let context = current_context();
    let stream = non_blocking(&context);
    let runs = Arc::new(AtomicUsize::new(0));
    let code = CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    let _armed = Armed::new(controls, c"cuLaunchHostFunc", 1, code, true);

    let other_runs = Arc::clone(&runs);
    let other = on_another_thread(stream.as_raw(), move |stream| {
        launch_host(stream, counting(&other_runs))
    });
    assert_eq!(other, code, "the other thread's call was not failed");
    launch(stream.as_raw(), counting(&runs));
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(count(&runs), 1);
}

#[test]
fn launch_sleep_holds_its_stream_for_at_least_the_time_given() {
    let controls = controls_or_skip!(launch_sleep_holds_its_stream_for_at_least_the_time_given);
    const SLEEP: Duration = Duration::from_millis(500);
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let reached: Arc<Mutex<Option<Duration>>> = Arc::default();
    let start = Instant::now();
    controls.launch_sleep(&stream, SLEEP);
    let host_reached = Arc::clone(&reached);
    launch(stream.as_raw(), move || {
        *lock(&host_reached) = Some(start.elapsed());
    });
    assert_eq!(query(stream.as_raw()), CUresult::CUDA_ERROR_NOT_READY);
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    let reached = lock(&reached).expect("the host function ran");
    assert!(
        reached >= SLEEP,
        "work after the sleep started after {reached:?}"
    );
}

#[test]
fn a_wait_poll_interval_leaves_a_host_write_unseen_that_long_and_none_restores_the_backoff() {
    let controls = controls_or_skip!(
        a_wait_poll_interval_leaves_a_host_write_unseen_that_long_and_none_restores_the_backoff
    );
    // Alone in a process: the interval holds for every stream wait of the process.
    suite::alone_in_child!(
        a_wait_poll_interval_leaves_a_host_write_unseen_that_long_and_none_restores_the_backoff
    );
    const INTERVAL: Duration = Duration::from_millis(500);
    let context = current_context();
    let stream = non_blocking(&context);
    let words = suite::MappedWords::new(&context, 6);
    // How long after the host's write the stream that waits for it goes on, the wait having
    // read the word once before the write: the stream marks that it reached the wait, and the
    // host writes a while after.
    let seen_after = |reached: usize, gate: usize, mark: usize| {
        words.write_in_stream(&stream, reached, 1);
        words.wait_in_stream(&stream, gate, 1);
        words.write_in_stream(&stream, mark, 1);
        wait_until("the stream at its wait", || words.get(reached) == 1);
        std::thread::sleep(Duration::from_millis(50));
        let written = Instant::now();
        words.set(gate, 1);
        wait_until("the stream past its wait", || words.get(mark) == 1);
        written.elapsed()
    };
    controls.set_wait_poll_interval(Some(INTERVAL));
    let slow = seen_after(0, 1, 2);
    controls.set_wait_poll_interval(None);
    let restored = seen_after(3, 4, 5);
    assert!(
        slow >= INTERVAL / 2,
        "at an interval of {INTERVAL:?}, the write was seen after {slow:?}"
    );
    assert!(
        restored < INTERVAL,
        "with the backoff restored, the write was seen after {restored:?}"
    );
}

#[test]
fn set_driver_version_hides_newer_entry_points_from_proc_address_and_from_a_new_driver_table() {
    let controls = controls_or_skip!(
        set_driver_version_hides_newer_entry_points_from_proc_address_and_from_a_new_driver_table
    );
    suite::alone_in_child!(
        set_driver_version_hides_newer_entry_points_from_proc_address_and_from_a_new_driver_table
    );
    let context = current_context();
    let stream = non_blocking(&context);
    controls.set_driver_version(13000);

    let mut version = 0;
    // SAFETY: a valid out-pointer.
    ok("cuDriverGetVersion", unsafe {
        driver().cuDriverGetVersion(&mut version)
    });
    assert_eq!(version, 13000);
    let lookup = |abi: i32| {
        let mut address = ptr::null_mut();
        let mut status = CUdriverProcAddressQueryResult(77);
        let flags = u64::from(CUdriverProcAddress_flags::CU_GET_PROC_ADDRESS_DEFAULT.0);
        // SAFETY: a NUL-terminated name and valid out-pointers.
        let result = unsafe {
            driver().cuGetProcAddress_v2(
                c"cuLaunchHostFunc".as_ptr(),
                &mut address,
                abi,
                flags,
                &mut status,
            )
        };
        (result, address.is_null())
    };
    assert_eq!(
        lookup(13010),
        (CUresult::CUDA_ERROR_INVALID_VALUE, true),
        "an ABI newer than the driver is an invalid value"
    );
    assert_eq!(
        lookup(13000),
        (SUCCESS, false),
        "older ABIs are still found"
    );

    // SAFETY: the software driver implements the driver API's signatures.
    let fresh = unsafe { Driver::open(cuda_host_testing::library_path()) }.expect("driver opens");
    assert_eq!(fresh.version(), 13000);
    assert_eq!(
        fresh.availability("cuLaunchHostFunc_v2"),
        Some(Availability::NeedsNewerDriver { required: 13010 })
    );
    assert_eq!(
        fresh.availability("cuLaunchHostFunc"),
        Some(Availability::Available)
    );
    let data = leak_closure(|| {});
    // SAFETY: a live stream and a host function valid for the process (the table has no
    // cuLaunchHostFunc_v2, so the driver is not called at all).
    let result = unsafe {
        fresh.cuLaunchHostFunc_v2(
            stream.as_raw(),
            Some(run_closure),
            data,
            CUhostTaskSyncMode::CU_HOST_TASK_BLOCKING.0,
        )
    };
    match fresh.check("cuLaunchHostFunc_v2", result) {
        Err(Error::EntryPointUnavailable {
            entry_point,
            availability,
            ..
        }) => {
            assert_eq!(entry_point, "cuLaunchHostFunc_v2");
            assert_eq!(
                availability,
                Availability::NeedsNewerDriver { required: 13010 }
            );
        }
        other => panic!("expected an unavailable entry point, got {other:?}"),
    }
    controls.set_driver_version(0);
}

#[test]
fn user_object_stats_count_live_user_objects_and_destructors_run() {
    let controls = controls_or_skip!(user_object_stats_count_live_user_objects_and_destructors_run);
    // Alone in a process: the counts are process-wide.
    suite::alone_in_child!(user_object_stats_count_live_user_objects_and_destructors_run);
    let _context = current_context();
    let (destroyed, alive) = controls.user_object_stats();
    let probe = DestructorProbe::new();
    let object = user_object(probe, 1);
    assert_eq!(controls.user_object_stats(), (destroyed, alive + 1));
    release(object, 1);
    wait_until("the destructor to be counted", || {
        controls.user_object_stats() == (destroyed + 1, alive)
    });
    assert_eq!(probe.runs(), 1);
}

/// A software-driver control resolved by name through `cuGetProcAddress_v2`, as a caller without
/// the harness would find it.
fn control_address(name: &CStr) -> *mut c_void {
    let mut address = ptr::null_mut();
    let mut status = CUdriverProcAddressQueryResult(77);
    // SAFETY: a NUL-terminated name and valid out-pointers.
    ok("cuGetProcAddress_v2", unsafe {
        driver().cuGetProcAddress_v2(name.as_ptr(), &mut address, 10000, 0, &mut status)
    });
    assert!(!address.is_null(), "{name:?} resolves");
    address
}

#[test]
fn live_objects_count_each_kind_from_its_creation_until_its_destruction() {
    let controls =
        controls_or_skip!(live_objects_count_each_kind_from_its_creation_until_its_destruction);
    // Alone in a process: the counts are process-wide.
    suite::alone_in_child!(live_objects_count_each_kind_from_its_creation_until_its_destruction);
    let context = current_context();
    let held = non_blocking(&context);
    let gate = Gate::new(&context); // takes its pinned pool before the counts are read
    let before = controls.live_objects();

    let mut stream = ptr::null_mut();
    // SAFETY: a valid out-pointer; the context is current.
    ok("cuStreamCreate", unsafe {
        driver().cuStreamCreate(&mut stream, CUstream_flags::CU_STREAM_NON_BLOCKING.0)
    });
    let event = Event::new(&context, EventFlags::DisableTiming).expect("event");
    let log = Log::default();
    let graph = Graph::new();
    graph.add_host_node(&[], log.marker("node"));
    let exec = graph.instantiate();
    let object = user_object(DestructorProbe::new(), 1);
    let (mut host, mut device) = (ptr::null_mut(), 0);
    // SAFETY: valid out-pointers; the context is current.
    unsafe {
        ok("cuMemHostAlloc", driver().cuMemHostAlloc(&mut host, 64, 0));
        ok("cuMemAlloc_v2", driver().cuMemAlloc_v2(&mut device, 64));
    }
    gate.hold(&held);
    launch(held.as_raw(), log.marker("host function"));
    let callback = leak(CallbackProbe::default());
    add_callback(held.as_raw(), callback);
    exec.launch(held.as_raw());

    let one_more = LiveObjects {
        streams: before.streams + 1,
        events: before.events + 1,
        graphs: before.graphs + 1,
        graph_execs: before.graph_execs + 1,
        user_objects: before.user_objects + 1,
        host_allocations: before.host_allocations + 1,
        device_allocations: before.device_allocations + 1,
        // the host function, the callback and the graph's host node
        pending_host_functions: before.pending_host_functions + 3,
    };
    assert_eq!(controls.live_objects(), one_more);
    gate.open();
    ok("cuStreamSynchronize", synchronize(held.as_raw()));
    assert_eq!(log.entries(), ["host function", "node"]);
    assert_eq!(
        controls.live_objects(),
        LiveObjects {
            pending_host_functions: before.pending_host_functions,
            ..one_more
        },
        "run host functions are no longer pending"
    );

    // SAFETY: each object is live and destroyed once.
    unsafe {
        ok("cuStreamDestroy_v2", driver().cuStreamDestroy_v2(stream));
        ok("cuMemFreeHost", driver().cuMemFreeHost(host));
        ok("cuMemFree_v2", driver().cuMemFree_v2(device));
    }
    drop((event, exec, graph));
    release(object, 1); // the last reference: the destructor runs inside this call
    assert_eq!(controls.live_objects(), before);
}

#[test]
fn live_objects_fills_only_the_whole_counts_a_shorter_struct_has_room_for() {
    controls_or_skip!(live_objects_fills_only_the_whole_counts_a_shorter_struct_has_room_for);
    let _shared = shared();
    // SAFETY: the software driver's `cuswLiveObjects` has this C signature (cudasw.h).
    let live_objects = unsafe {
        std::mem::transmute::<*mut c_void, LiveObjectsFn>(control_address(c"cuswLiveObjects"))
    };
    const UNTOUCHED: u64 = u64::MAX;
    // Room for the size, two counts and half of the third.
    let short = size_of::<usize>() + 2 * size_of::<u64>() + 4;
    let mut counts = LiveCounts {
        size: short,
        counts: [UNTOUCHED; 8],
    };
    // SAFETY: the struct is larger than the size it declares.
    ok("cuswLiveObjects", unsafe { live_objects(&mut counts) });
    assert_eq!(counts.size, size_of::<usize>() + 2 * size_of::<u64>());
    assert!(counts.counts[..2].iter().all(|&count| count != UNTOUCHED));
    assert_eq!(counts.counts[2..], [UNTOUCHED; 6], "counts past the size");

    counts.size = 0;
    // SAFETY: as above; a size without room for `size` itself is refused.
    let refused = unsafe { live_objects(&mut counts) };
    assert_eq!(refused, CUresult::CUDA_ERROR_INVALID_VALUE);
    // SAFETY: a null pointer is refused, not written.
    let refused = unsafe { live_objects(ptr::null_mut()) };
    assert_eq!(refused, CUresult::CUDA_ERROR_INVALID_VALUE);
}

#[test]
fn armed_failures_count_down_as_injected_failures_fire_on_this_thread_then_any_thread() {
    let controls = controls_or_skip!(
        armed_failures_count_down_as_injected_failures_fire_on_this_thread_then_any_thread
    );
    // Alone in a process: an injection armed for any thread fails other tests' calls.
    suite::alone_in_child!(
        armed_failures_count_down_as_injected_failures_fire_on_this_thread_then_any_thread
    );
    let context = current_context();
    let stream = non_blocking(&context);
    let entry = c"cuStreamQuery";
    let code = CUresult::CUDA_ERROR_LAUNCH_TIMEOUT;
    let other_thread =
        |work: fn(CUstream) -> (CUresult, u32)| on_another_thread(stream.as_raw(), work);
    fn armed_here(_: CUstream) -> (CUresult, u32) {
        let controls = suite::software::expect_controls();
        (SUCCESS, controls.armed_failures(c"cuStreamQuery"))
    }
    fn query_there(stream: CUstream) -> (CUresult, u32) {
        let controls = suite::software::expect_controls();
        (query(stream), controls.armed_failures(c"cuStreamQuery"))
    }

    assert_eq!(controls.armed_failures(entry), 0);
    let _armed = [(2, false), (3, true)]
        .map(|(count, any_thread)| Armed::new(controls, entry, count, code, any_thread));
    assert_eq!(
        controls.armed_failures(entry),
        5,
        "this thread's and any thread's"
    );
    assert_eq!(other_thread(armed_here), (SUCCESS, 3), "only any thread's");

    assert_eq!(query(stream.as_raw()), code);
    assert_eq!(
        controls.armed_failures(entry),
        4,
        "this thread's fire first"
    );
    assert_eq!(query(stream.as_raw()), code);
    assert_eq!(controls.armed_failures(entry), 3);
    assert_eq!(other_thread(query_there), (code, 2));
    assert_eq!(controls.armed_failures(entry), 2);
    assert_eq!(query(stream.as_raw()), code);
    assert_eq!(query(stream.as_raw()), code);
    assert_eq!(controls.armed_failures(entry), 0);
    assert_eq!(query(stream.as_raw()), SUCCESS, "all fired");
    assert_eq!(
        controls.armed_failures(c"cuStreamQuery_ptsz"),
        0,
        "counted under the name they were armed with"
    );
}

#[test]
fn call_count_counts_every_call_by_base_name_and_by_exported_name() {
    let controls =
        controls_or_skip!(call_count_counts_every_call_by_base_name_and_by_exported_name);
    // Alone in a process: the counts are process-wide.
    suite::alone_in_child!(call_count_counts_every_call_by_base_name_and_by_exported_name);
    let context = current_context();
    let stream = non_blocking(&context);
    let names = [
        c"cuStreamGetCtx",
        c"cuStreamGetCtx_v2",
        c"cuStreamGetCtx_v2_ptsz",
    ];
    let counts = || names.map(|name| controls.call_count(name));
    assert_eq!(counts(), [0, 0, 0], "never called in this process");
    assert_eq!(controls.call_count(c"cuEventElapsedTime"), 0);

    let mut per_thread = ptr::null_mut();
    let mut status = CUdriverProcAddressQueryResult(77);
    let flags =
        u64::from(CUdriverProcAddress_flags::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.0);
    // SAFETY: a NUL-terminated name and valid out-pointers.
    ok("cuGetProcAddress_v2", unsafe {
        driver().cuGetProcAddress_v2(
            c"cuStreamGetCtx".as_ptr(),
            &mut per_thread,
            12050,
            flags,
            &mut status,
        )
    });
    // SAFETY: the per-thread form of cuStreamGetCtx_v2 has the same C signature.
    let per_thread = unsafe { std::mem::transmute::<*mut c_void, GetCtx>(per_thread) };
    let (mut raw, mut green) = (ptr::null_mut(), ptr::null_mut());
    let mut get_ctx = |per_thread: Option<GetCtx>| match per_thread {
        // SAFETY: a live stream and valid out-pointers.
        Some(get) => unsafe { get(stream.as_raw(), &mut raw, &mut green) },
        // SAFETY: as above.
        None => unsafe { driver().cuStreamGetCtx_v2(stream.as_raw(), &mut raw, &mut green) },
    };
    for _ in 0..3 {
        ok("cuStreamGetCtx_v2", get_ctx(None));
    }
    ok("cuStreamGetCtx_v2_ptsz", get_ctx(Some(per_thread)));
    // The table's own form is the per-thread one on a per-thread table.
    let table_is_per_thread = driver().per_thread_default_stream();
    let by_table = |legacy: u64, per_thread: u64, table: u64| {
        if table_is_per_thread {
            [legacy + per_thread + table, legacy, per_thread + table]
        } else {
            [legacy + per_thread + table, legacy + table, per_thread]
        }
    };
    assert_eq!(counts(), by_table(0, 1, 3));

    let code = CUresult::CUDA_ERROR_UNKNOWN;
    controls.fail_next_calls(c"cuStreamGetCtx", 1, code);
    assert_eq!(get_ctx(None), code);
    assert_eq!(
        counts(),
        by_table(0, 1, 4),
        "a call an injected failure answered counts too"
    );
}

/// `cuStreamGetCtx_v2`, as `cuda.h` declares it.
type GetCtx = unsafe extern "C" fn(CUstream, *mut CUcontext, *mut CUgreenCtx) -> CUresult;
/// `cuswArmedFailures`, as `cudasw.h` declares it.
type ArmedFailures = unsafe extern "C" fn(*const c_char, *mut c_uint) -> CUresult;
/// `cuswCallCount`, as `cudasw.h` declares it.
type CallCount = unsafe extern "C" fn(*const c_char, *mut u64) -> CUresult;

#[test]
fn armed_failures_and_call_count_refuse_unknown_entry_names_and_null_pointers() {
    controls_or_skip!(armed_failures_and_call_count_refuse_unknown_entry_names_and_null_pointers);
    let _shared = shared();
    // SAFETY: the software driver's controls have these C signatures (cudasw.h).
    let (armed_failures, call_count) = unsafe {
        (
            std::mem::transmute::<*mut c_void, ArmedFailures>(control_address(
                c"cuswArmedFailures",
            )),
            std::mem::transmute::<*mut c_void, CallCount>(control_address(c"cuswCallCount")),
        )
    };
    let (mut remaining, mut calls) = (7, 7);
    let (not_found, invalid) = (
        CUresult::CUDA_ERROR_NOT_FOUND,
        CUresult::CUDA_ERROR_INVALID_VALUE,
    );
    // SAFETY: NUL-terminated names or null pointers, which the controls refuse.
    unsafe {
        assert_eq!(
            armed_failures(c"cuNoSuchEntryPoint".as_ptr(), &mut remaining),
            not_found
        );
        assert_eq!(
            call_count(c"cuNoSuchEntryPoint".as_ptr(), &mut calls),
            not_found
        );
        assert_eq!(armed_failures(ptr::null(), &mut remaining), invalid);
        assert_eq!(call_count(ptr::null(), &mut calls), invalid);
        assert_eq!(armed_failures(c"cuInit".as_ptr(), ptr::null_mut()), invalid);
        assert_eq!(call_count(c"cuInit".as_ptr(), ptr::null_mut()), invalid);
    }
    assert_eq!((remaining, calls), (7, 7), "nothing written on refusal");
}

#[test]
fn a_delayed_entry_point_returns_only_after_its_delay_and_others_are_not_held() {
    let controls = controls_or_skip!(
        a_delayed_entry_point_returns_only_after_its_delay_and_others_are_not_held
    );
    // Alone in a process: a delay armed for any thread would hold other tests' calls too.
    suite::alone_in_child!(
        a_delayed_entry_point_returns_only_after_its_delay_and_others_are_not_held
    );
    let context = current_context();
    let stream = non_blocking(&context);
    const DELAY: Duration = Duration::from_millis(200);
    controls.delay_next_calls(c"cuStreamQuery", 1, DELAY);
    let start = Instant::now();
    assert_eq!(synchronize(stream.as_raw()), CUresult::CUDA_SUCCESS);
    assert!(start.elapsed() < DELAY, "another entry point was held");
    assert_eq!(query(stream.as_raw()), CUresult::CUDA_SUCCESS);
    assert!(start.elapsed() >= DELAY, "the delayed call returned early");
    let again = Instant::now();
    assert_eq!(query(stream.as_raw()), CUresult::CUDA_SUCCESS);
    assert!(
        again.elapsed() < DELAY,
        "the delay applies to the next call only"
    );
}

#[test]
fn armed_delays_are_counted_until_calls_take_them_and_a_count_of_zero_disarms_them() {
    let controls = controls_or_skip!(
        armed_delays_are_counted_until_calls_take_them_and_a_count_of_zero_disarms_them
    );
    // Alone in a process: a delay armed for any thread would hold other tests' calls too.
    suite::alone_in_child!(
        armed_delays_are_counted_until_calls_take_them_and_a_count_of_zero_disarms_them
    );
    let context = current_context();
    let stream = non_blocking(&context);
    const DELAY: Duration = Duration::from_millis(100);
    assert_eq!(controls.armed_delays(c"cuStreamQuery"), 0);
    controls.delay_next_calls(c"cuStreamQuery", 3, DELAY);
    assert_eq!(controls.armed_delays(c"cuStreamQuery"), 3);
    let start = Instant::now();
    assert_eq!(query(stream.as_raw()), CUresult::CUDA_SUCCESS);
    assert!(start.elapsed() >= DELAY, "the delayed call returned early");
    assert_eq!(
        controls.armed_delays(c"cuStreamQuery"),
        2,
        "the call took one delay"
    );
    controls.delay_next_calls(c"cuStreamQuery", 0, Duration::ZERO);
    assert_eq!(controls.armed_delays(c"cuStreamQuery"), 0, "disarmed");
    let again = Instant::now();
    assert_eq!(query(stream.as_raw()), CUresult::CUDA_SUCCESS);
    assert!(again.elapsed() < DELAY, "a disarmed delay held a call");
}

#[test]
fn calls_naming_a_destroyed_handle_are_counted() {
    let controls = controls_or_skip!(calls_naming_a_destroyed_handle_are_counted);
    // Alone in a process: the count is process-wide.
    suite::alone_in_child!(calls_naming_a_destroyed_handle_are_counted);
    let _context = current_context();
    let mut stream = ptr::null_mut();
    // SAFETY: a valid out-pointer; the context is current.
    ok("cuStreamCreate", unsafe {
        driver().cuStreamCreate(&mut stream, CUstream_flags::CU_STREAM_NON_BLOCKING.0)
    });
    assert_eq!(query(stream), CUresult::CUDA_SUCCESS);
    let before = controls.stale_handle_uses();
    // SAFETY: a live stream, destroyed once; the stale handle is used on purpose.
    ok("cuStreamDestroy_v2", unsafe {
        driver().cuStreamDestroy_v2(stream)
    });
    assert_eq!(
        controls.stale_handle_uses(),
        before,
        "a live handle is not stale"
    );
    assert_eq!(query(stream), CUresult::CUDA_ERROR_INVALID_HANDLE);
    assert_eq!(synchronize(stream), CUresult::CUDA_ERROR_INVALID_HANDLE);
    assert_eq!(controls.stale_handle_uses(), before + 2);
    // A made-up handle the driver never issued is not a destroyed one.
    assert_eq!(query(0x40 as CUstream), CUresult::CUDA_ERROR_INVALID_HANDLE);
    assert_eq!(controls.stale_handle_uses(), before + 2);
}

#[test]
fn host_task_sync_mode_launches_count_the_launches_the_driver_accepted_in_each_mode() {
    let controls = controls_or_skip!(
        host_task_sync_mode_launches_count_the_launches_the_driver_accepted_in_each_mode
    );
    // Alone in a process: the counts are process-wide.
    suite::alone_in_child!(
        host_task_sync_mode_launches_count_the_launches_the_driver_accepted_in_each_mode
    );
    let context = current_context();
    let stream = non_blocking(&context);
    let (blocking, spin_wait) = (
        CUhostTaskSyncMode::CU_HOST_TASK_BLOCKING.0,
        CUhostTaskSyncMode::CU_HOST_TASK_SPINWAIT.0,
    );
    let counts = || [blocking, spin_wait].map(|mode| controls.host_task_sync_mode_launches(mode));
    assert_eq!(counts(), [0, 0], "nothing launched in this process yet");
    let runs = Arc::new(AtomicUsize::new(0));
    let launch_v2 = |mode: c_uint| {
        let data = leak_closure(counting(&runs));
        // SAFETY: `run_closure` accepts `data` on any thread, for the process's lifetime.
        unsafe { driver().cuLaunchHostFunc_v2(stream.as_raw(), Some(run_closure), data, mode) }
    };
    ok("cuLaunchHostFunc_v2", launch_v2(blocking));
    ok("cuLaunchHostFunc_v2", launch_v2(blocking));
    ok("cuLaunchHostFunc_v2", launch_v2(spin_wait));
    assert_eq!(counts(), [2, 1]);

    let code = CUresult::CUDA_ERROR_UNKNOWN;
    // Armed by the form the table calls: the per-thread one on a per-thread table.
    let form = if driver().per_thread_default_stream() {
        c"cuLaunchHostFunc_v2_ptsz"
    } else {
        c"cuLaunchHostFunc_v2"
    };
    let armed = Armed::new(controls, form, 1, code, false);
    assert_eq!(launch_v2(spin_wait), code);
    drop(armed);
    assert_eq!(
        launch_v2(7),
        CUresult::CUDA_ERROR_INVALID_VALUE,
        "no such mode"
    );
    assert_eq!(counts(), [2, 1], "refused launches are not counted");
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(count(&runs), 3);

    // SAFETY: the control has this C signature (cudasw.h).
    let control = unsafe {
        std::mem::transmute::<*mut c_void, HostTaskSyncModeLaunches>(control_address(
            c"cuswHostTaskSyncModeLaunches",
        ))
    };
    let mut launches = 77;
    // SAFETY: a valid out-pointer with a mode the control refuses, then a null out-pointer.
    unsafe {
        assert_eq!(
            control(7, &mut launches),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            control(blocking, ptr::null_mut()),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
    }
    assert_eq!(launches, 77, "nothing written on refusal");
}

/// `cuswHostTaskSyncModeLaunches`, as `cudasw.h` declares it.
type HostTaskSyncModeLaunches = unsafe extern "C" fn(c_uint, *mut u64) -> CUresult;

#[test]
fn a_capture_armed_at_an_entry_begins_when_that_entry_is_next_called_and_takes_its_work() {
    let controls = controls_or_skip!(
        a_capture_armed_at_an_entry_begins_when_that_entry_is_next_called_and_takes_its_work
    );
    // Alone in a process: an armed capture would begin at another test's call too.
    suite::alone_in_child!(
        a_capture_armed_at_an_entry_begins_when_that_entry_is_next_called_and_takes_its_work
    );
    let context = current_context();
    let stream = non_blocking(&context);
    let gate = Gate::new(&context);
    let event = Event::new(&context, EventFlags::DisableTiming).expect("event");
    let relaxed = cuda_host_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    gate.hold(&stream);
    controls.begin_capture_at_next_call(c"cuEventRecord", &stream, relaxed);
    // Other entries leave it armed.
    assert_eq!(query(stream.as_raw()), CUresult::CUDA_ERROR_NOT_READY);
    assert_eq!(suite::capture::is_capturing(stream.as_raw()).1, NONE);
    // The record is the capture's first work, not the stream's.
    record(&event, stream.as_raw());
    assert_eq!(suite::capture::is_capturing(stream.as_raw()).1, ACTIVE);
    let mut graph = ptr::null_mut();
    // SAFETY: a capturing stream and a valid out-pointer; a relaxed capture ends on any thread.
    ok("cuStreamEndCapture", unsafe {
        driver().cuStreamEndCapture(stream.as_raw(), &mut graph)
    });
    drop(Graph(graph));
    // Once its capture ended, the event stands for nothing of the stream: complete, while the
    // stream is still held.
    assert_eq!(event_query(event.as_raw()), CUresult::CUDA_SUCCESS);
    assert_eq!(query(stream.as_raw()), CUresult::CUDA_ERROR_NOT_READY);
    // Fired once: the next record is the stream's own.
    record(&event, stream.as_raw());
    assert_eq!(suite::capture::is_capturing(stream.as_raw()).1, NONE);
    assert_eq!(event_query(event.as_raw()), CUresult::CUDA_ERROR_NOT_READY);
    gate.open();
    wait_until("the stream to pass the record", || {
        event_query(event.as_raw()) == CUresult::CUDA_SUCCESS
    });
}

#[test]
fn a_capture_armed_at_a_later_call_lets_the_calls_before_it_go_to_the_stream() {
    let controls = controls_or_skip!(
        a_capture_armed_at_a_later_call_lets_the_calls_before_it_go_to_the_stream
    );
    // Alone in a process: an armed capture would begin at another test's call too.
    suite::alone_in_child!(
        a_capture_armed_at_a_later_call_lets_the_calls_before_it_go_to_the_stream
    );
    let context = current_context();
    let stream = non_blocking(&context);
    let gate = Gate::new(&context);
    let (first, second, third) = (
        Event::new(&context, EventFlags::DisableTiming).expect("event"),
        Event::new(&context, EventFlags::DisableTiming).expect("event"),
        Event::new(&context, EventFlags::DisableTiming).expect("event"),
    );
    let relaxed = cuda_host_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    gate.hold(&stream);
    controls.begin_capture_at_call(c"cuEventRecord", 2, &stream, relaxed);
    // The first two records are the stream's own, held behind the gate.
    record(&first, stream.as_raw());
    record(&second, stream.as_raw());
    assert_eq!(suite::capture::is_capturing(stream.as_raw()).1, NONE);
    assert_eq!(event_query(second.as_raw()), CUresult::CUDA_ERROR_NOT_READY);
    // The third begins the capture and is its first work.
    record(&third, stream.as_raw());
    assert_eq!(suite::capture::is_capturing(stream.as_raw()).1, ACTIVE);
    let mut graph = ptr::null_mut();
    // SAFETY: a capturing stream and a valid out-pointer; a relaxed capture ends on any thread.
    ok("cuStreamEndCapture", unsafe {
        driver().cuStreamEndCapture(stream.as_raw(), &mut graph)
    });
    drop(Graph(graph));
    assert_eq!(event_query(third.as_raw()), CUresult::CUDA_SUCCESS);
    assert_eq!(event_query(second.as_raw()), CUresult::CUDA_ERROR_NOT_READY);
    gate.open();
    wait_until("the stream to pass its records", || {
        event_query(first.as_raw()) == CUresult::CUDA_SUCCESS
            && event_query(second.as_raw()) == CUresult::CUDA_SUCCESS
    });
    // Unknown entries and bad modes are refused.
    let unknown = controls
        .inner()
        .begin_capture_at_call(c"cuNoSuchEntry", 1, &stream, relaxed)
        .expect_err("an unknown entry is refused");
    assert!(
        unknown.to_string().contains("cuswBeginCaptureAtCall"),
        "{unknown}"
    );
}

#[test]
fn a_disarmed_capture_begins_at_no_call() {
    let controls = controls_or_skip!(a_disarmed_capture_begins_at_no_call);
    // Alone in a process: an armed capture would begin at another test's call too.
    suite::alone_in_child!(a_disarmed_capture_begins_at_no_call);
    let context = current_context();
    let stream = non_blocking(&context);
    let event = Event::new(&context, EventFlags::DisableTiming).expect("event");
    let relaxed = cuda_host_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    controls.begin_capture_at_next_call(c"cuEventRecord", &stream, relaxed);
    controls.disarm_capture_at_next_call();
    record(&event, stream.as_raw());
    assert_eq!(suite::capture::is_capturing(stream.as_raw()).1, NONE);
    // Disarming with nothing armed does nothing.
    controls.disarm_capture_at_next_call();
    record(&event, stream.as_raw());
    assert_eq!(suite::capture::is_capturing(stream.as_raw()).1, NONE);
}

#[test]
fn an_overridden_device_attribute_is_answered_and_followed_until_restored() {
    let controls =
        controls_or_skip!(an_overridden_device_attribute_is_answered_and_followed_until_restored);
    suite::alone_in_child!(an_overridden_device_attribute_is_answered_and_followed_until_restored);
    let context = current_context();
    let device = cuda_host::Device::get(&suite::test_driver().driver, 0).expect("device 0");
    let read = || {
        let mut value = -1;
        // SAFETY: a valid out-pointer and a device of the driver.
        ok("cuDeviceGetAttribute", unsafe {
            driver().cuDeviceGetAttribute(
                &mut value,
                cuda_host_sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
                device.as_raw(),
            )
        });
        value
    };
    let words = MemOpWords::new(&context);
    let stream = non_blocking(&context);
    let write_wide = || {
        // SAFETY: a mapped, aligned word of the context.
        unsafe { driver().cuStreamWriteValue64_v2(stream.as_raw(), words.wide_address(), 5, 0) }
    };
    let attribute =
        cuda_host_sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS;
    assert_eq!(read(), 1, "an H200 has 64-bit stream memory operations");
    controls.override_device_attribute(attribute, Some(0));
    assert_eq!(read(), 0, "the override is answered");
    assert_eq!(
        write_wide(),
        CUresult::CUDA_ERROR_NOT_SUPPORTED,
        "and followed: a narrow device refuses a 64-bit write"
    );
    controls.override_device_attribute(attribute, None);
    assert_eq!(read(), 1, "restored");
    ok("cuStreamWriteValue64_v2", write_wide());
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(words.wide(), 5);
    let no_attribute = controls
        .inner()
        .override_device_attribute(cuda_host_sys::CUdevice_attribute(100_000), Some(1))
        .unwrap_err();
    assert!(
        matches!(
            no_attribute,
            cuda_host_testing::Error::Control {
                result: CUresult::CUDA_ERROR_INVALID_VALUE,
                ..
            }
        ),
        "{no_attribute}"
    );
}

/// `cuswStreamOperations` counts what a stream was given and what it completed: held behind a
/// gate, its operations are enqueued and not completed; let through, all completed; once the
/// stream is destroyed and drained it is not found.
#[test]
fn stream_operations_count_what_a_stream_was_given_and_completed_until_it_is_gone() {
    let controls = controls_or_skip!(
        stream_operations_count_what_a_stream_was_given_and_completed_until_it_is_gone
    );
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let id = stream_id(driver(), stream.as_raw());
    assert_eq!(controls.stream_operations(id), Some((0, 0)));
    let gate = Gate::new(&context);
    gate.hold(&stream);
    launch(stream.as_raw(), || {});
    let (enqueued, completed) = controls.stream_operations(id).expect("a live stream");
    assert!(
        enqueued >= 2 && completed + 2 <= enqueued,
        "held: {completed} of {enqueued} completed"
    );
    gate.open();
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(controls.stream_operations(id), Some((enqueued, enqueued)));
    drop(stream);
    wait_until("the destroyed stream to be gone", || {
        controls.stream_operations(id).is_none()
    });
}

/// The stream's operations when a launch's user object was destroyed: the id of the stream it
/// was launched on, then the count of completed operations its destructor read.
static LAUNCHED_ON: Mutex<Option<(u64, Option<u64>)>> = Mutex::new(None);

unsafe extern "C" fn read_completed(_: *mut c_void) {
    let mut launched = lock(&LAUNCHED_ON);
    if let Some((id, completed)) = launched.as_mut() {
        *completed = suite::software::expect_controls()
            .stream_operations(*id)
            .map(|(_, completed)| completed);
    }
}

/// A graph launch counts as completed before its references to user objects go: a destructor
/// the launch's end makes due finds the launch among the stream's completed operations.
#[test]
fn a_launch_is_counted_completed_before_the_user_objects_it_held_are_destroyed() {
    let controls = controls_or_skip!(
        a_launch_is_counted_completed_before_the_user_objects_it_held_are_destroyed
    );
    let _shared = shared();
    let context = current_context();
    let stream = non_blocking(&context);
    let id = stream_id(driver(), stream.as_raw());
    *lock(&LAUNCHED_ON) = Some((id, None));
    let graph = Graph::new();
    graph.add_host_node(&[], || {});
    let mut object = ptr::null_mut();
    // SAFETY: a valid out-pointer; the destructor touches only statics, on any thread.
    ok("cuUserObjectCreate", unsafe {
        driver().cuUserObjectCreate(
            &mut object,
            ptr::null_mut(),
            Some(read_completed),
            1,
            cuda_host_sys::CUuserObject_flags::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC.0,
        )
    });
    graph_retain(&graph, object, MOVE);
    let exec = graph.instantiate();
    drop(graph);
    let gate = Gate::new(&context);
    gate.hold(&stream);
    let (before, _) = controls.stream_operations(id).expect("a live stream");
    exec.launch(stream.as_raw());
    drop(exec);
    gate.open();
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    wait_until("the user object's destructor", || {
        lock(&LAUNCHED_ON).is_some_and(|(_, completed)| completed.is_some())
    });
    let completed = lock(&LAUNCHED_ON)
        .take()
        .and_then(|(_, completed)| completed);
    assert!(
        completed.is_some_and(|completed| completed > before),
        "the destructor found {completed:?} completed; the launch was operation {} or later",
        before + 1
    );
}

//! The native host copy: `host_copy_fn` (the `CUhostFn` C code can launch), the raw form with
//! its description copied into the launch record, and the scope whose borrows outlive the copies.

use cuda_host::{
    Error, HostCopy, Stream, StreamFlags, UserData, host_copy_fn, host_copy_raw, host_copy_scope,
    host_launch_raw,
};
use std::ffi::c_void;
use suite::{Gate, context};

const SIZES: [usize; 4] = [0, 1, 4095, 1 << 20];

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|index| (index as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn new_stream() -> Stream {
    Stream::new(&context(), StreamFlags::NonBlocking).expect("stream")
}

#[test]
fn a_scope_copies_bytes_that_match_for_sizes_0_1_4095_and_1_mib() {
    let stream = new_stream();
    for len in SIZES {
        let source = pattern(len, 3);
        let mut destination = vec![0xEEu8; len];
        host_copy_scope(&stream, |scope| scope.copy(&source, &mut destination))
            .expect("the scope")
            .expect("the copy");
        assert!(source == destination, "{len} bytes differ");
    }
}

#[test]
fn a_scope_waits_for_every_copy_it_launched() {
    let stream = new_stream();
    let sources: Vec<Vec<u8>> = (0..8).map(|seed| pattern(4096, seed)).collect();
    let mut destinations = vec![vec![0u8; 4096]; 8];
    host_copy_scope(&stream, |scope| {
        for (source, destination) in sources.iter().zip(destinations.iter_mut()) {
            scope.copy(source, destination).expect("the copy");
        }
    })
    .expect("the scope");
    assert_eq!(sources, destinations);
}

#[test]
fn a_scope_refuses_buffers_of_different_lengths() {
    let stream = new_stream();
    let source = vec![1u8; 16];
    let mut destination = vec![0u8; 15];
    let refused =
        host_copy_scope(&stream, |scope| scope.copy(&source, &mut destination)).expect("the scope");
    assert!(
        matches!(refused, Err(Error::InvalidArgument { .. })),
        "{refused:?}"
    );
    assert_eq!(destination, [0u8; 15]);
}

#[test]
fn the_raw_form_copies_bytes_that_match_for_sizes_0_1_4095_and_1_mib() {
    let stream = new_stream();
    for len in SIZES {
        let source = pattern(len, 9);
        let mut destination = vec![0u8; len];
        let copy = HostCopy::new(source.as_ptr().cast(), destination.as_mut_ptr().cast(), len)
            .expect("no overlap");
        // SAFETY: both buffers live until the synchronize below, and nothing else writes them.
        unsafe { host_copy_raw(&stream, copy) }.expect("launch");
        stream.synchronize().expect("synchronize");
        assert!(source == destination, "{len} bytes differ");
    }
}

#[test]
fn host_copy_fn_takes_its_description_as_c_code_passes_it() {
    // As C code would: `cuLaunchHostFunc(stream, fn, &copy)`, the description its own.
    let stream = new_stream();
    let source = pattern(4095, 1);
    let mut destination = vec![0u8; 4095];
    let copy = HostCopy {
        source: source.as_ptr().cast(),
        destination: destination.as_mut_ptr().cast(),
        length: source.len(),
    };
    // SAFETY: the description and both buffers live until the synchronize below.
    unsafe {
        host_launch_raw(
            &stream,
            host_copy_fn,
            UserData::PassThrough(std::ptr::from_ref(&copy).cast_mut().cast()),
        )
    }
    .expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(source, destination);
}

#[test]
fn a_copy_runs_in_stream_order_after_the_work_before_it() {
    let context = context();
    let stream = new_stream();
    let gate = Gate::new(&context);
    let source = pattern(4096, 5);
    let mut destination = vec![0u8; 4096];
    let copy = HostCopy::new(
        source.as_ptr().cast(),
        destination.as_mut_ptr().cast(),
        source.len(),
    )
    .expect("no overlap");
    gate.hold(&stream);
    // SAFETY: both buffers live until the synchronize below; the destination is only read
    // before the gate opens, when the copy cannot have run, and after the synchronize.
    unsafe { host_copy_raw(&stream, copy) }.expect("launch");
    std::thread::sleep(std::time::Duration::from_millis(20));
    // SAFETY: the copy waits behind the gate: nothing writes the destination now.
    let untouched = unsafe {
        std::slice::from_raw_parts(copy.destination.cast::<u8>(), 4096)
            .iter()
            .all(|&b| b == 0)
    };
    assert!(untouched, "the copy ran before the work ahead of it");
    gate.open();
    stream.synchronize().expect("synchronize");
    assert_eq!(source, destination);
}

#[test]
fn overlapping_buffers_are_refused_naming_both_ranges() {
    let stream = new_stream();
    let mut buffer = vec![0u8; 64];
    let base = buffer.as_mut_ptr();
    // SAFETY: offsets inside the buffer.
    let (from, to) = (
        base.cast_const().cast::<c_void>(),
        unsafe { base.add(16) }.cast(),
    );
    let refused = HostCopy::new(from, to, 32).expect_err("overlap accepted");
    let (from_start, to_start) = (from.addr(), to.addr());
    assert_eq!(
        refused,
        Error::OverlappingCopy {
            from: from_start..from_start + 32,
            to: to_start..to_start + 32,
        }
    );
    let message = refused.to_string();
    assert!(message.contains("overlap"), "{message}");
    assert!(message.contains(&format!("{from_start:#x}")), "{message}");
    assert!(message.contains(&format!("{to_start:#x}")), "{message}");
    // The raw form refuses before enqueueing anything; the same bytes do not overlap at 32.
    let overlapping = HostCopy {
        source: from,
        destination: to,
        length: 32,
    };
    // SAFETY: refused before anything is enqueued.
    let error = unsafe { host_copy_raw(&stream, overlapping) }.expect_err("enqueued");
    assert!(matches!(error, Error::OverlappingCopy { .. }), "{error}");
    // SAFETY: offsets inside the buffer.
    let apart = HostCopy::new(from, unsafe { base.add(32) }.cast(), 32).expect("adjacent");
    // SAFETY: the buffer lives until the synchronize below.
    unsafe { host_copy_raw(&stream, apart) }.expect("launch");
    stream.synchronize().expect("synchronize");
    // An empty copy overlaps nothing.
    HostCopy::new(from, from.cast_mut(), 0).expect("empty");
}

#[test]
fn host_copy_fn_handed_overlapping_buffers_copies_nothing() {
    let stream = new_stream();
    let mut buffer = pattern(64, 2);
    let expected = buffer.clone();
    let base = buffer.as_mut_ptr();
    let copy = HostCopy {
        source: base.cast_const().cast(),
        // SAFETY: an offset inside the buffer.
        destination: unsafe { base.add(8) }.cast(),
        length: 32,
    };
    // SAFETY: the description and the buffer live until the synchronize below.
    unsafe { host_launch_raw(&stream, host_copy_fn, UserData::Copied(copy.as_bytes())) }
        .expect("launch");
    stream.synchronize().expect("synchronize");
    assert_eq!(buffer, expected, "overlapping buffers were written");
}

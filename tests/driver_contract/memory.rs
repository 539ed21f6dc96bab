//! Memory as users allocate it: the stream-ordered allocator (`cuMemAllocAsync`,
//! `cuMemAllocFromPoolAsync`, `cuMemFreeAsync`; the default, current and own pools, their
//! attributes and trimming), managed memory (`cuMemAllocManaged`, attachment, prefetch, advice),
//! and `cuMemFreeHost`, which waits for the work enqueued before it (the polled engine's lane
//! pages depend on it).

use crate::harness::*;
use cuda_host::Context;
use cuda_host_sys::{
    CUdeviceptr, CUmem_advise, CUmemAllocationType, CUmemAttach_flags, CUmemLocation,
    CUmemLocationType, CUmemPool_attribute, CUmemPoolProps, CUmemoryPool, CUresult, CUstream,
};
use std::ffi::c_void;
use std::ptr;
use suite::ok;

const POOLS: &str = "the device reports no memory pools";

/// Whether the test device has memory pools (an H200 has); a skip note otherwise.
fn has_pools(test: &str) -> bool {
    let mut value = 0;
    // SAFETY: a valid out-pointer and device 0.
    ok("cuDeviceGetAttribute", unsafe {
        driver().cuDeviceGetAttribute(
            &mut value,
            cuda_host_sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
            0,
        )
    });
    if value == 0 {
        suite::skip(test, POOLS);
    }
    value != 0
}

fn allocate_async(bytes: usize, stream: CUstream) -> CUdeviceptr {
    let mut memory = 0;
    // SAFETY: a valid out-pointer and a live stream of the current context.
    ok("cuMemAllocAsync", unsafe {
        driver().cuMemAllocAsync(&mut memory, bytes, stream)
    });
    memory
}

fn free_async(memory: CUdeviceptr, stream: CUstream) {
    // SAFETY: an allocation of the stream-ordered allocator, freed once.
    ok("cuMemFreeAsync", unsafe {
        driver().cuMemFreeAsync(memory, stream)
    });
}

/// A 64-bit attribute of `pool` (the statistics and the release threshold).
fn pool_bytes(pool: CUmemoryPool, attribute: CUmemPool_attribute) -> u64 {
    let mut value = 0u64;
    // SAFETY: a live pool; the attribute's value is a cuuint64_t.
    ok("cuMemPoolGetAttribute", unsafe {
        driver().cuMemPoolGetAttribute(pool, attribute, (&raw mut value).cast())
    });
    value
}

fn set_pool_bytes(pool: CUmemoryPool, attribute: CUmemPool_attribute, mut value: u64) {
    // SAFETY: as above.
    ok("cuMemPoolSetAttribute", unsafe {
        driver().cuMemPoolSetAttribute(pool, attribute, (&raw mut value).cast())
    });
}

const USED: CUmemPool_attribute = CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT;
const USED_HIGH: CUmemPool_attribute = CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH;
const RESERVED: CUmemPool_attribute = CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT;
const THRESHOLD: CUmemPool_attribute = CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;

fn default_pool() -> CUmemoryPool {
    let mut pool = ptr::null_mut();
    // SAFETY: a valid out-pointer and device 0.
    ok("cuDeviceGetDefaultMemPool", unsafe {
        driver().cuDeviceGetDefaultMemPool(&mut pool, 0)
    });
    pool
}

fn current_pool() -> CUmemoryPool {
    let mut pool = ptr::null_mut();
    // SAFETY: a valid out-pointer and device 0.
    ok("cuDeviceGetMemPool", unsafe {
        driver().cuDeviceGetMemPool(&mut pool, 0)
    });
    pool
}

fn set_current_pool(pool: CUmemoryPool) {
    // SAFETY: device 0 and a live pool of it.
    ok("cuDeviceSetMemPool", unsafe {
        driver().cuDeviceSetMemPool(0, pool)
    });
}

/// Copies `N` words at `memory` to the host, in `stream`'s order, and waits for them.
fn words_of<const N: usize>(memory: CUdeviceptr, stream: CUstream) -> [u32; N] {
    let mut words = [0u32; N];
    // SAFETY: N words of live device memory into a live host array, waited for below.
    ok("cuMemcpyDtoHAsync_v2", unsafe {
        driver().cuMemcpyDtoHAsync_v2(words.as_mut_ptr().cast(), memory, N * 4, stream)
    });
    ok("cuStreamSynchronize", synchronize(stream));
    words
}

#[test]
fn a_stream_ordered_allocation_is_used_in_its_stream_and_counted_by_its_pool_until_freed() {
    const TEST: &str =
        "a_stream_ordered_allocation_is_used_in_its_stream_and_counted_by_its_pool_until_freed";
    let _alone = alone();
    let context = current_context();
    if !has_pools(TEST) {
        return;
    }
    let stream = non_blocking(&context);
    let pool = default_pool();
    assert_eq!(current_pool(), pool, "the current pool is the default one");
    let used_before = pool_bytes(pool, USED);
    let memory = allocate_async(1024, stream.as_raw());
    assert_ne!(memory, 0);
    assert!(pool_bytes(pool, USED) >= used_before + 1024);
    // SAFETY: 256 words of the allocation, in its stream after its point.
    ok("cuMemsetD32Async", unsafe {
        driver().cuMemsetD32Async(memory, 7, 256, stream.as_raw())
    });
    assert_eq!(words_of::<4>(memory + 1020 - 12, stream.as_raw()), [7; 4]);
    free_async(memory, stream.as_raw());
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(
        pool_bytes(pool, USED),
        used_before,
        "given back to the pool"
    );
    // SAFETY: freed already: a second free is refused.
    let again = unsafe { driver().cuMemFreeAsync(memory, stream.as_raw()) };
    assert_ne!(again, SUCCESS, "freed twice");
}

#[test]
fn a_pool_of_its_own_serves_allocations_keeps_its_attributes_and_is_trimmed() {
    const TEST: &str = "a_pool_of_its_own_serves_allocations_keeps_its_attributes_and_is_trimmed";
    let _alone = alone();
    let context = current_context();
    if !has_pools(TEST) {
        return;
    }
    let stream = non_blocking(&context);
    let mut props = CUmemPoolProps {
        allocType: CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        ..CUmemPoolProps::default()
    };
    props.location.type_ = CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.__bindgen_anon_1.id = 0;
    let mut pool = ptr::null_mut();
    // SAFETY: valid pointers; a pool of device 0's memory.
    ok("cuMemPoolCreate", unsafe {
        driver().cuMemPoolCreate(&mut pool, &props)
    });
    assert_ne!(pool, default_pool());
    set_pool_bytes(pool, THRESHOLD, 1 << 20);
    assert_eq!(pool_bytes(pool, THRESHOLD), 1 << 20);

    let mut memory = 0;
    // SAFETY: a valid out-pointer, a live pool and stream.
    ok("cuMemAllocFromPoolAsync", unsafe {
        driver().cuMemAllocFromPoolAsync(&mut memory, 4096, pool, stream.as_raw())
    });
    assert!(pool_bytes(pool, USED) >= 4096);
    free_async(memory, stream.as_raw());
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    assert_eq!(pool_bytes(pool, USED), 0);
    assert!(
        pool_bytes(pool, USED_HIGH) >= 4096,
        "the high watermark stays"
    );
    set_pool_bytes(pool, USED_HIGH, 0);
    assert_eq!(pool_bytes(pool, USED_HIGH), 0, "reset to what is used now");

    // The device's current pool serves cuMemAllocAsync.
    set_current_pool(pool);
    assert_eq!(current_pool(), pool);
    let memory = allocate_async(512, stream.as_raw());
    assert!(pool_bytes(pool, USED) >= 512, "taken from the current pool");
    free_async(memory, stream.as_raw());
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    set_current_pool(default_pool());

    // SAFETY: a live pool.
    ok("cuMemPoolTrimTo", unsafe {
        driver().cuMemPoolTrimTo(pool, 0)
    });
    assert_eq!(
        pool_bytes(pool, RESERVED),
        0,
        "nothing in use, nothing kept"
    );
    // SAFETY: a live pool, all of its allocations freed; then the default pool, which stays.
    ok("cuMemPoolDestroy", unsafe {
        driver().cuMemPoolDestroy(pool)
    });
    // SAFETY: the default pool is live.
    let default_destroyed = unsafe { driver().cuMemPoolDestroy(default_pool()) };
    assert_eq!(default_destroyed, CUresult::CUDA_ERROR_INVALID_VALUE);
}

/// Stream work that uses stream-ordered memory outside its span fails the context, is counted and
/// logged (software driver: the real one keeps freed memory in its pool, where such a use goes
/// unnoticed). On fresh contexts, which the failure leaves failed.
#[test]
fn stream_work_on_stream_ordered_memory_outside_its_span_fails_the_context() {
    let controls =
        controls_or_skip!(stream_work_on_stream_ordered_memory_outside_its_span_fails_the_context);
    // Alone: the default pool's statistics, which other tests read, count what this one leaves.
    let _alone = alone();
    let device = cuda_host::Device::get(&suite::test_driver().driver, 0).expect("device 0");
    let misuses = || {
        controls
            .inner()
            .stream_ordered_memory_misuses()
            .expect("a count")
    };
    let illegal = Some(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);

    // After its free's point: a set ordered after the free.
    let context = controls.fresh_context(&device);
    context.bind_to_thread().expect("the context binds");
    let stream = non_blocking(&context);
    let before = misuses();
    let memory = allocate_async(64, stream.as_raw());
    free_async(memory, stream.as_raw());
    // SAFETY: freed memory, on purpose: the driver catches it.
    ok("cuMemsetD32Async", unsafe {
        driver().cuMemsetD32Async(memory, 1, 16, stream.as_raw())
    });
    let error = stream.synchronize().expect_err("the use fails the context");
    assert_eq!(error.driver_result(), illegal);
    assert_eq!(misuses(), before + 1);

    // Before its allocation's point: another stream's set runs while the allocating stream is
    // held ahead of it.
    let context = controls.fresh_context(&device);
    context.bind_to_thread().expect("the context binds");
    let (allocating, other) = (non_blocking(&context), non_blocking(&context));
    let gate = suite::Gate::new(&context);
    gate.hold(&allocating);
    let memory = allocate_async(64, allocating.as_raw());
    // SAFETY: unordered with the allocation, on purpose: the driver catches it.
    ok("cuMemsetD32Async", unsafe {
        driver().cuMemsetD32Async(memory, 1, 16, other.as_raw())
    });
    let error = other.synchronize().expect_err("the use fails the context");
    assert_eq!(error.driver_result(), illegal);
    assert_eq!(misuses(), before + 2);
    gate.open();
    // SAFETY: allocated above; the failed context refuses the free, as any call of it.
    let freed = unsafe { driver().cuMemFreeAsync(memory, allocating.as_raw()) };
    assert_eq!(Some(freed), illegal);
}

fn managed(bytes: usize, flags: CUmemAttach_flags) -> CUdeviceptr {
    let mut memory = 0;
    // SAFETY: a valid out-pointer; the context is current.
    ok("cuMemAllocManaged", unsafe {
        driver().cuMemAllocManaged(&mut memory, bytes, flags.0)
    });
    memory
}

fn device_location() -> CUmemLocation {
    let mut location = CUmemLocation {
        type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        ..CUmemLocation::default()
    };
    location.__bindgen_anon_1.id = 0;
    location
}

fn advise(memory: CUdeviceptr, bytes: usize, advice: CUmem_advise) -> CUresult {
    // SAFETY: an address and length the driver checks; device 0's location.
    unsafe { driver().cuMemAdvise_v2(memory, bytes, advice, device_location()) }
}

#[test]
fn managed_memory_is_reached_by_the_host_and_streams_and_takes_attachment_prefetch_and_advice() {
    let _alone = alone();
    let context = current_context();
    let stream = non_blocking(&context);
    let memory = managed(400, CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL);
    let host = memory as usize as *mut u32;
    for index in 0..100 {
        // SAFETY: 100 words of managed memory, which the host reaches; no stream uses it yet.
        unsafe { host.add(index).write_volatile(index as u32) };
    }
    // SAFETY: managed memory of the context, attached to a stream of its own.
    ok("cuStreamAttachMemAsync", unsafe {
        driver().cuStreamAttachMemAsync(
            stream.as_raw(),
            memory,
            0,
            CUmemAttach_flags::CU_MEM_ATTACH_SINGLE.0,
        )
    });
    // SAFETY: the whole allocation, to device 0, in the stream's order.
    ok("cuMemPrefetchAsync_v2", unsafe {
        driver().cuMemPrefetchAsync_v2(memory, 400, device_location(), 0, stream.as_raw())
    });
    assert_eq!(
        words_of::<4>(memory + 40, stream.as_raw()),
        [10, 11, 12, 13]
    );
    // SAFETY: 10 words of the allocation, in the stream's order.
    ok("cuMemsetD32Async", unsafe {
        driver().cuMemsetD32Async(memory, 9, 10, stream.as_raw())
    });
    ok("cuStreamSynchronize", synchronize(stream.as_raw()));
    // SAFETY: the stream it is attached to is done with it.
    assert_eq!(unsafe { host.add(9).read_volatile() }, 9);
    for advice in [
        CUmem_advise::CU_MEM_ADVISE_SET_READ_MOSTLY,
        CUmem_advise::CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
        CUmem_advise::CU_MEM_ADVISE_SET_ACCESSED_BY,
    ] {
        ok("cuMemAdvise_v2", advise(memory, 400, advice));
    }
    let device = DeviceMemory::new(64);
    assert_eq!(
        advise(device.0, 64, CUmem_advise::CU_MEM_ADVISE_SET_READ_MOSTLY),
        CUresult::CUDA_ERROR_INVALID_VALUE,
        "advice on memory that is not managed"
    );
    // SAFETY: allocated above, freed once.
    ok("cuMemFree_v2", unsafe { driver().cuMemFree_v2(memory) });
}

/// `cuMemFreeHost` returns only once the work enqueued before it is done, so that no stream still
/// writes into the memory it gives back (cuda-host frees its pages of lanes at a context's
/// release, relying on this).
#[test]
fn freeing_page_locked_memory_waits_for_the_work_enqueued_before_it() {
    let _alone = alone();
    let context = current_context();
    let stream = non_blocking(&context);
    let gate = suite::Gate::new(&context);
    gate.hold(&stream);
    let (host, mapped) = page_locked(&context, 64);
    // SAFETY: 16 words of the page-locked, mapped allocation, written behind the gate.
    ok("cuMemsetD32Async", unsafe {
        driver().cuMemsetD32Async(mapped, 3, 16, stream.as_raw())
    });
    let host = SendHandle(host);
    let (result, waited) = enqueue_then_open(&context, &gate, move || {
        // SAFETY: allocated by cuMemHostAlloc, freed once.
        unsafe { driver().cuMemFreeHost(host.into_inner()) }
    });
    assert_eq!(result, SUCCESS);
    assert!(
        waited,
        "returned while the stream still had to write into the memory"
    );
}

/// `bytes` of page-locked, device-mapped host memory of `context`: its host and device addresses.
fn page_locked(context: &Context, bytes: usize) -> (*mut c_void, CUdeviceptr) {
    context.bind_to_thread().expect("the context binds");
    let mut host = ptr::null_mut();
    // SAFETY: a valid out-pointer; the context is current.
    ok("cuMemHostAlloc", unsafe {
        driver().cuMemHostAlloc(&mut host, bytes, cuda_host_sys::CU_MEMHOSTALLOC_DEVICEMAP)
    });
    let mut mapped = 0;
    // SAFETY: the allocation just made, mapped.
    ok("cuMemHostGetDevicePointer_v2", unsafe {
        driver().cuMemHostGetDevicePointer_v2(&mut mapped, host, 0)
    });
    (host, mapped)
}

//! Counting what a thread allocates, to show that a launch allocates nothing.

/// Makes the calling test binary count each thread's heap allocations: defines the binary's
/// global allocator (the system's, counting) and a module `allocations` whose
/// `during(work)` answers how many allocations the calling thread made during `work`, and what
/// `work` returned. A binary has one global allocator, so the macro is invoked once, at the
/// crate root of a test file.
#[macro_export]
macro_rules! count_allocations_per_thread {
    () => {
        /// Counts the heap allocations of each thread, to show what a launch allocates.
        mod allocations {
            use std::alloc::{GlobalAlloc, Layout, System};
            use std::cell::Cell;

            struct PerThreadCount;

            thread_local! {
                static COUNT: Cell<usize> = const { Cell::new(0) };
            }

            // SAFETY: forwards to the system allocator unchanged; only counts.
            unsafe impl GlobalAlloc for PerThreadCount {
                unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
                    let _ = COUNT.try_with(|count| count.set(count.get() + 1));
                    // SAFETY: same contract as the caller's.
                    unsafe { System.alloc(layout) }
                }

                unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
                    // SAFETY: same contract as the caller's.
                    unsafe { System.dealloc(pointer, layout) }
                }
            }

            #[global_allocator]
            static ALLOCATOR: PerThreadCount = PerThreadCount;

            /// The calling thread's allocations during `work`, and what it returned.
            pub fn during<R>(work: impl FnOnce() -> R) -> (usize, R) {
                let before = COUNT.with(Cell::get);
                let output = work();
                (COUNT.with(Cell::get) - before, output)
            }
        }
    };
}

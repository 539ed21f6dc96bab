//! A timeline's word: 8 bytes of pinned, device-mapped host memory of its context (a word of the
//! context's pinned pages, `crate::launch::PinnedWord`), which the host reads and raises
//! atomically and streams read and write through its device address.
//!
//! Whoever may still touch the word holds an `Arc` of it: every handle of the timeline, and, for
//! the stream operations on it, a record held in stream order until the stream passed the
//! operation (`crate::launch::hold_or_extend`: a thread's next operation on the same stream
//! extends its record rather than adding one). So it is given back, for another timeline of the
//! context, once no handle is left and every stream that waited on it or signalled it got past
//! that; never early. It is not freed: a free (`cuMemFreeHost`) waits for the device, which a
//! drain must not do (a host function may wait for the draining thread), and would invalidate a
//! builder capture if the last handle went during one; the context's pages are
//! freed when it is released. The watcher reads it
//! through `Waits` (`super::waits`), which this value closes before the memory goes.
//! Where a capture may have taken an operation on it, it is kept for the life of the process
//! ([`Word::keep`]): a graph may read or write it whenever it runs. Once a stream of another
//! context reached it, so is its context: that stream, or its graph, outlives the context, whose
//! release would free the pages (kept ones too, as the driver frees a context's memory).

use crate::checked::checked;
use crate::error::{Error, Result};
use crate::launch::{ContextShared, PinnedWord, unless_capture_forbids};
use crate::objects::Context;
use crate::sync::lock;
use crate::timeline::waits::Waits;
use cuda_host_sys::CUdeviceptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Words kept for the life of the process because a capture may have taken an operation on
/// them (see the module's documentation).
pub(super) static KEPT_WORDS: AtomicU64 = AtomicU64::new(0);
/// Contexts kept for the life of the process because a kept word of theirs may be read by a
/// stream of another context (see [`Word`]'s drop).
static KEPT_CONTEXTS: Mutex<Vec<Context>> = Mutex::new(Vec::new());
/// Words in use or kept, process-wide.
pub(super) static LIVE_WORDS: AtomicU64 = AtomicU64::new(0);

/// A timeline's word.
pub(super) struct Word {
    /// The pinned word of the context, holding one `AtomicU64`.
    memory: PinnedWord,
    /// Its context, retained while the word lives: a public context value, whose last reference
    /// defers itself where it may not go (inside a host function, during a builder capture
    /// ), as this word's last holder may be anywhere.
    context: Context,
    /// What the watcher reads the word through; closed before the memory goes.
    waits: Arc<Waits>,
    /// Whether a capture may have taken an operation on it: never freed.
    kept: AtomicBool,
    /// Its device address in other contexts than its own, by the context handle's address, as
    /// streams of those contexts reach it (`cuMemHostGetDevicePointer` there).
    elsewhere: Mutex<Vec<(usize, CUdeviceptr)>>,
}

// SAFETY: pinned memory, which any thread may access atomically.
unsafe impl Send for Word {}
// SAFETY: as above.
unsafe impl Sync for Word {}

impl Word {
    /// A word of `context` holding `initial`, with the watcher's view of it.
    ///
    /// # Errors
    /// [`Error::AllocationInCapture`] while a builder capture forbids the
    /// allocation; the driver's error from `cuMemHostAlloc` or `cuMemHostGetDevicePointer`.
    pub(super) fn new(context: &Context, initial: u64) -> Result<Word> {
        // With a word to spare for the track of a stream the timeline's operations go to, which
        // takes one without an allocation (`crate::tracks`): an operation is no call that may
        // allocate.
        let memory = unless_capture_forbids(|| context.shared().allocate_pinned_word_with_spare())
            .ok_or(Error::AllocationInCapture {
                what: "a timeline's word",
            })??;
        let host = memory.host.cast::<AtomicU64>();
        // SAFETY: a pinned word of the context, 8-byte aligned, which nothing else uses now.
        unsafe { host.write(AtomicU64::new(initial)) };
        LIVE_WORDS.fetch_add(1, Ordering::Relaxed);
        Ok(Word {
            memory,
            context: context.clone(),
            waits: Arc::new(Waits::new(context.as_raw().addr(), host)),
            kept: AtomicBool::new(false),
            elsewhere: Mutex::new(Vec::new()),
        })
    }

    /// The counter.
    pub(super) fn atomic(&self) -> &AtomicU64 {
        // SAFETY: the word is this value's while it lives; written as an `AtomicU64`.
        unsafe { &*self.memory.host.cast::<AtomicU64>() }
    }

    /// The address streams of `context` use: the one it was made with in its own context; in
    /// another (a stream of another device waits or signals), the address of its portable
    /// pages there, asked once. `wide`: whether the timeline uses 64-bit operations, which the
    /// other context's device must then have.
    ///
    /// # Errors
    /// [`Error::ContextMismatch`] for a context of another driver library (its handles mean
    /// nothing to this one); [`Error::InvalidArgument`] when `wide` and the other device lacks
    /// 64-bit stream memory operations; the driver's error from `cuDeviceGetAttribute` or
    /// `cuMemHostGetDevicePointer`.
    pub(super) fn device_in(&self, context: &ContextShared, wide: bool) -> Result<CUdeviceptr> {
        let own = self.context.shared();
        if context.raw() == own.raw() {
            return Ok(self.memory.device);
        }
        if !std::ptr::eq(context.driver(), own.driver()) {
            return Err(Error::ContextMismatch {
                context: own.raw().addr(),
                stream_context: context.raw().addr(),
            });
        }
        let key = context.raw().addr();
        if let Some(&(_, device)) = lock(&self.elsewhere).iter().find(|(at, _)| *at == key) {
            return Ok(device);
        }
        if wide && !super::has_64_bit_operations(context)? {
            return Err(Error::InvalidArgument {
                what: "a timeline made on a device with 64-bit stream memory operations uses \
                       them: a stream of a device without them can neither wait on it nor \
                       signal it (make the timeline on that device)"
                    .to_owned(),
            });
        }
        let driver = context.driver();
        let mut device = 0;
        // The pages are portable (`CU_MEMHOSTALLOC_PORTABLE`): mapped in every context.
        context.with_current(|| {
            // SAFETY: a valid out-pointer; the word's pinned, portable, device-mapped memory,
            // which lives as long as this value.
            Ok(unsafe {
                checked!(
                    driver,
                    cuMemHostGetDevicePointer_v2(&mut device, self.memory.host, 0)
                )
            }?)
        })?;
        lock(&self.elsewhere).push((key, device));
        Ok(device)
    }

    /// The watcher's view of it.
    pub(super) fn waits(&self) -> &Arc<Waits> {
        &self.waits
    }

    /// Keeps the memory for the life of the process: a capture may have taken an operation on
    /// it, or a stream may read it with no stream point after the operation.
    pub(super) fn keep(&self) {
        if !self.kept.swap(true, Ordering::Relaxed) {
            KEPT_WORDS.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether it is kept ([`Word::keep`]).
    pub(super) fn is_kept(&self) -> bool {
        self.kept.load(Ordering::Relaxed)
    }
}

impl Drop for Word {
    fn drop(&mut self) {
        if self.kept.load(Ordering::Relaxed) {
            self.context.shared().keep_pinned_word(self.memory);
            // A stream may still read the word with no hold left on it (an operation refused
            // after it reached its stream has no point a hold waits for): the watcher goes on
            // keeping an abandoned value where that stream needs it (a narrow wait's turn)
            // until it passed, reading the memory, which is never freed.
            let still_read = self.waits.streams_may_read();
            if still_read || !lock(&self.elsewhere).is_empty() {
                // A stream of another context, or its graph, or the watcher, may read the word
                // after this context's last value went: the context, whose release would free
                // its pages, is kept for the life of the process too.
                lock(&KEPT_CONTEXTS).push(self.context.clone());
            }
            if !still_read {
                self.waits.close();
            }
            return;
        }
        // No look of the watcher reads the memory after this.
        self.waits.close();
        // No handle is left and every stream that used it passed its operations (the module's
        // documentation): the word may serve another timeline. Its page goes with the context.
        self.context.shared().release_pinned_word(self.memory);
        LIVE_WORDS.fetch_sub(1, Ordering::Relaxed);
    }
}

//! The word of a track's written points: pinned, device-mapped memory of the context, taken from
//! its free words when a written point first asks for it, withdrawn when a capture may have taken
//! a write of it or an unread point joins the track, and given back with the context's tracks
//! once the stream wrote it for the last time (`context`).

use super::look::{Track, TrackState};
use crate::launch::{ContextShared, PinnedWord};
use crate::query_events;
use cuda_host_sys::CUdeviceptr;
use std::sync::atomic::AtomicU32;

/// A write of a point's number that `ContextTracks::mark_written` asks its caller to enqueue:
/// a 32-bit `CU_STREAM_MEM_OP_WRITE_VALUE_32` of `value` to `address`, with the default flags (a
/// memory barrier before it, so the stream's earlier work is visible once the host reads it).
pub(crate) struct PointWrite {
    pub(crate) address: CUdeviceptr,
    pub(crate) value: u32,
}

impl Track {
    /// The device address of the track's word, taken on first use (under the track's lock,
    /// `state`) from the context's free words, never allocated: an allocation would invalidate
    /// another thread's global-mode capture, which a memory operation on a stream that is not
    /// capturing leaves intact (a timeline leaves a word free for it, `crate::timeline`).
    /// `None` where the track has none to offer (see `ContextTracks::mark_written`).
    pub(super) fn word_for(
        &self,
        shared: &ContextShared,
        state: &mut TrackState,
    ) -> Option<CUdeviceptr> {
        if state.word_withdrawn {
            return None;
        }
        if let Some(word) = &state.word {
            return Some(word.device);
        }
        let word = shared.take_free_pinned_word()?;
        let probe = match shared.with_current(|| query_events::create(&self.driver)) {
            Ok(probe) => probe,
            Err(_) => {
                shared.release_pinned_word(word);
                return None;
            }
        };
        // SAFETY: a word of the context's pinned memory, 8-byte aligned, which nothing else uses
        // and which lives while the context's tracks do, which close this track before they go;
        // the caller holds the track's lock (`state`), and the track had no word (none is ever
        // offered again once withdrawn).
        unsafe { self.core.adopt_word(word.host.cast::<AtomicU32>(), probe) };
        let device = word.device;
        state.word = Some(word);
        Some(device)
    }

    /// Whether the stream passed the last point written into `word`, the track's, so that it
    /// never writes it again. The track is closed: nobody reads the word meanwhile.
    pub(super) fn passed_its_last_write(&self, word: PinnedWord) -> bool {
        // SAFETY: the track's word, pinned memory of the context, which lives while the context's
        // tracks do (the caller's).
        let value = unsafe { &*word.host.cast::<AtomicU32>() };
        self.core.passed_last_write(value)
    }

    /// Takes the track's word away for good: a capture may have taken a write of it (see
    /// `ContextTracks::mark_written`).
    pub(super) fn take_word(&self, shared: &ContextShared, state: &mut TrackState) {
        self.withdraw_word(state);
        if let Some(word) = state.word.take() {
            shared.keep_pinned_word(word);
        }
    }

    /// Reads the track's word no more, and offers none from now on: its written points are
    /// *unread* (see the module's documentation). A word it has stays its, for the context's
    /// tracks' drop to give back once the stream passed the last point written into it.
    pub(super) fn withdraw_word(&self, state: &mut TrackState) {
        self.core.withdraw_word();
        state.word_withdrawn = true;
    }
}

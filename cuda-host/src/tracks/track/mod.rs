//! The tracks stream points are made of: per stream in use, its points in order, each recorded
//! on an event of its own or written into the track's word, and the events its passed points
//! gave back.
//!
//! **One event a point, reused once seen passed.** Point `n` of a track is recorded on an event
//! no pending point holds: one its track's pool got back from a point seen passed, or a new one.
//! An event therefore holds one point from its record until a look saw that point passed, and a
//! completed query of it proves exactly its point passed: no point waits for a later one to be
//! seen, however many follow it, and the pool holds as many events as points were once in
//! flight, with no cap. A look gives the events of the points it saw passed back to the pool
//! (beyond `KEPT_EVENTS` of them, a few at a time to the driver). The points pending are
//! numbered without gaps: point `first + i` holds the `i`th event of `Events::pending`.
//!
//! **Written points.** Where a caller enqueues a stream memory operation anyway (a timeline's
//! wait or signal), its point rides in the same `cuStreamBatchMemOp`: a 32-bit write of the
//! point's number into the track's word, pinned, device-mapped memory of the context
//! (`ContextTracks::mark_written`). The stream writes a track's numbers in order, so the word
//! holding `n` proves every point up to `n` passed, and a look reads it before it queries
//! anything: a written point costs no query, and the stream no call of its own. A look for the
//! newest point passed goes on from the point after the one the word names (points recorded on
//! events after it may have passed too); one for a single point stops once the word shows it
//! passed. A written point holds no event (none in `handshake::Events::pending`); a look that
//! finds the word short of it queries the track's probe instead, an event never recorded, which
//! answers only the context's sticky error, so that the failure is learnt as for other points.
//! The word holds 32 bits: a look takes them as the newest number not after the last written
//! point (`written_passed`), so a word older than the points seen passed since says nothing,
//! however many passed. The word is one
//! the context had free (a timeline leaves one), never allocated for the track: an allocation
//! would break another thread's global capture. It goes back to the context's pinned pages, for
//! a timeline or a track of another value of the context, when this value's tracks go, if the
//! stream passed the last point written into it (`ContextTracks`' drop): every value of a
//! context shares one pool, which a value made per request would otherwise drain by a word each.
//! A write a capture may have taken would write an old number whenever the graph runs: the word
//! is then taken from the track, never read again, and its written points are *unread*: they
//! pass with a later point recorded on an event, with a synchronize of the stream
//! (`Synchronizing`), or with the point the stream marks when dropped
//! (`ContextTracks::mark_after_unread`). So does a point nothing records or writes, which stands
//! after an operation whose own point could not be marked (`ContextTracks::mark_unread`); the
//! track reads its word no more from then on, as after a capture took a write of it, but the
//! word stays the track's, to go back with the tracks.
//!
//! **Looks.** Events, not memory writes (see `crate::points`): recording an event costs the
//! enqueuing thread 0.13 µs on an H200, a 32-bit stream memory write 0.8 µs; a look costs a
//! `cuEventQuery` (0.1–0.3 µs) per event it queries. A look for a point queries that point's
//! event; when it completed, the newest point's, which answers for every point when the stream
//! caught up; else it gallops from the point towards the newest, then bisects: about twice the
//! logarithm of how far the stream got since the last look, and one query when it got nowhere.
//! After a look that found the stream caught up, the next queries the newest point's event
//! first: one query while the stream keeps up. A look [`Look::Fresh`](crate::launch::Look::Fresh)
//! always queries (a synchronize, [`reclaim`](crate::reclaim),
//! [`StreamPoint::is_passed`](crate::points::StreamPoint::is_passed), the watcher, which paces itself);
//! a look [`Look::Paced`](crate::launch::Look::Paced) (a launch's drain, when its thread's drains
//! look at all, `crate::launch::held`; a future's poll while the watcher does not have its track
//! on its list) only when no look was made for `PACED_LOOK` (50 µs), and for the track's first
//! pending point only when no look asked after that point: a look for a later point that finds
//! it pending says nothing of the points before. One thread looks at a track at a time
//! (`handshake::Looking`); only looks take a point's event out of the
//! pending ones, so a look's query never meets an event that is recorded again; and the
//! context's tracks, when dropped, wait for a look under way and close their tracks to later
//! ones, so no look queries a destroyed event. Every look runs in the relaxed capture
//! interaction mode (`Track::look_for`), and every log call in it, its own or one of what it
//! calls (a failure it is the first to see), is made once it ended, so that a logger may call
//! cuda-host back, even to look at the same track (`AfterLook`, `holding_logs`).
//!
//! **Records a capture took.** A point's number and event join the pending ones only once its
//! record returned and the stream was asked again whether it is capturing (`ContextTracks::mark`),
//! so no look ever queries an event whose record may be a capture's. Such an event is retired:
//! never recorded or queried again, destroyed with the context's tracks; the point is refused and
//! its number goes to the next point.
//!
//! A track's sequence only grows: a point is the next number, recorded under the track's lock,
//! so the stream records the numbers in order, and a point is passed once the track has seen it
//! or a later one complete (`high`).
//!
//! Streams are told apart by `cuStreamGetId`, which is unique for the life of the process (a
//! destroyed stream's handle may come back; its id does not) and resolves the per-thread default
//! stream to the calling thread's. A track serves one stream at a time. When every track of the
//! context is taken, the tracks whose stream has passed all its points are taken back (their
//! sequence goes on where it was, so no point of the old stream can be mistaken for one of the
//! new); only when none is free is another track made. Each thread remembers the track it last
//! marked a point on (`LAST_TRACK`), so that threads marking on streams of one context do not
//! meet in the context's table.
//!
//! The events belong to the context's tracks, which the context's state keeps (`objects::context`)
//! and every holder of a point keeps with it (a future, a released value); they are destroyed
//! before the context is released, and the driver lets an event still pending go once it
//! completed.
//!
//! **Map.**
//! - `handshake`: the lock-free core, free of driver calls: who may look, the highest point
//!   seen passed, the pending and free events, the word's reads and give-back (loom-checked,
//!   `models`).
//! - `look`: [`Track`], and its looks: pacing, the relaxed capture interaction mode, the event
//!   queries, the log calls made after.
//! - `word`: the written points' word: taken from the context's free words, withdrawn, given
//!   back.
//! - `events`: destroying the points' events (they are made by `crate::query_events`).
//! - `context`: a context's tracks ([`ContextTracks`]): marking points, lending tracks to
//!   streams, synchronizes, closing the tracks with the context.
//!
//! Imports run one way: `context` → `word` → `look` → `events`, `handshake`.

pub(crate) mod handshake;
#[cfg(all(test, loom))]
mod models;

outside_loom_models! {
    mod context;
    mod events;
    mod look;
    mod word;

    #[cfg(test)]
    mod tests;

    pub(crate) use context::{ContextTracks, Synchronizing};
    pub(crate) use look::Track;
    pub(crate) use word::PointWrite;
}

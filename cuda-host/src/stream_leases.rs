//! Per-stream resources of a context, lent to one stream at a time: a stream point's track
//! (`points`), a polled engine's lane (`polled`). Streams are told apart by `cuStreamGetId`,
//! which is unique for the life of the process; a destroyed stream's id stays in the table until
//! its resource is taken back, which happens, when none is free, to the resources their streams
//! are done with, before new ones are made.

use crate::error::Result;
use std::collections::HashMap;
use std::sync::Arc;

/// A resource lent to one stream at a time.
pub(crate) trait StreamLease {
    /// Lends the resource to the stream `stream_id`.
    fn lend(&self, stream_id: u64);

    /// Takes the resource back from its stream if that stream has nothing pending on it and no thread
    /// is using it now; whether it did.
    fn take_back_if_quiet(&self) -> bool;
}

/// The leases of one context: the resources lent, by stream id, and those free.
pub(crate) struct StreamLeases<T> {
    lent: HashMap<u64, Arc<T>>,
    free: Vec<Arc<T>>,
}

impl<T> Default for StreamLeases<T> {
    fn default() -> Self {
        StreamLeases {
            lent: HashMap::new(),
            free: Vec::new(),
        }
    }
}

impl<T: StreamLease> StreamLeases<T> {
    /// The resource of the stream `stream_id`, lent one if it has none: a free one, else one taken
    /// back from a quiet stream, else the first of those `make` makes.
    pub(crate) fn of(
        &mut self,
        stream_id: u64,
        make: impl FnOnce() -> Result<Vec<Arc<T>>>,
    ) -> Result<Arc<T>> {
        if let Some(resource) = self.lent.get(&stream_id) {
            return Ok(Arc::clone(resource));
        }
        if self.free.is_empty() {
            let free = &mut self.free;
            self.lent.retain(|_, resource| {
                let quiet = resource.take_back_if_quiet();
                if quiet {
                    free.push(Arc::clone(resource));
                }
                !quiet
            });
        }
        if self.free.is_empty() {
            self.free.extend(make()?.into_iter().rev());
        }
        let resource = self.free.pop().expect("a free resource");
        resource.lend(stream_id);
        self.lent.insert(stream_id, Arc::clone(&resource));
        Ok(resource)
    }

    /// Forgets `resource`, lent to the stream `stream_id`: it is neither lent nor free any more, and
    /// the stream is lent another at its next look-up. Whether it was lent to that stream.
    pub(crate) fn forget(&mut self, stream_id: u64, resource: &Arc<T>) -> bool {
        let lent = self
            .lent
            .get(&stream_id)
            .is_some_and(|lent| Arc::ptr_eq(lent, resource));
        if lent {
            self.lent.remove(&stream_id);
        }
        lent
    }

    /// The resource lent to the stream `stream_id`, if any.
    pub(crate) fn lent_to(&self, stream_id: u64) -> Option<&Arc<T>> {
        self.lent.get(&stream_id)
    }

    /// The resources lent now.
    pub(crate) fn lent(&self) -> impl Iterator<Item = &Arc<T>> {
        self.lent.values()
    }
}

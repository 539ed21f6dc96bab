//! A replaceable value (the panic hook) that is used through clones: readers take a clone under
//! the lock and call it with no lock held, so a hook may replace or clear itself; a replaced value
//! is handed back to the replacer, to drop with no lock held.

use crate::sync::{Arc, RwLock};
use std::sync::PoisonError;

/// A replaceable hook, called through clones with no lock held.
pub(crate) struct HookCell<T: ?Sized> {
    current: RwLock<Option<Arc<T>>>,
}

impl<T: ?Sized> HookCell<T> {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        HookCell {
            current: RwLock::new(None),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        HookCell {
            current: RwLock::new(None),
        }
    }

    /// Puts `hook` in place; returns the one it replaced, for the caller to drop with no lock
    /// held.
    pub(crate) fn replace(&self, hook: Option<Arc<T>>) -> Option<Arc<T>> {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        std::mem::replace(&mut *current, hook)
    }

    /// A clone of the hook in place, taken under the lock and returned without it.
    pub(crate) fn get(&self) -> Option<Arc<T>> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

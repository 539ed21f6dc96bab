//! The synchronisation types of the lock-free cores (record lists, slot states, failed contexts,
//! the panic hook, the tracks' handshake), from `loom` when the crate is built for its models
//! (`--cfg loom`), else from `std`; and locking that ignores poisoning.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, fence,
};
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Mutex, MutexGuard, RwLock};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, fence,
};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard, RwLock};

/// Locks `mutex`, also when a thread panicked while holding it: every critical section in this
/// crate leaves its data consistent at each step, so a poisoned lock's data is still good.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

//! The synchronisation types of the lock-free cores (record lists, slot states, failed contexts,
//! the panic hook),
//! from `loom` when the crate is built for its models (`--cfg loom`), else from `std`.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, fence};
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Mutex, RwLock};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, fence};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Mutex, RwLock};

//! The synchronisation types of the lock-free cores (record lists, slot states, the panic hook),
//! from `loom` when the crate is built for its models (`--cfg loom`), else from `std`.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicPtr, AtomicU64};
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, RwLock};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU64};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, RwLock};

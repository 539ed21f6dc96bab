//! Getting rid of a user's value without unwinding, and never on a marked thread (`super::mark`):
//! there it is handed off to a thread that may drop it; elsewhere it is dropped now. A caught
//! panic's payload is a user's value too: its `Drop` may panic, which leaks it.

use super::mark::hand_off;
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Gets rid of a caught panic's payload without unwinding: on a marked thread it is dropped
/// later on another; elsewhere now, and leaked if its `Drop` panics.
pub(crate) fn dispose(payload: Box<dyn Any + Send>) {
    drop_or_hand_off(PayloadDrop(Some(payload)));
}

/// Drops `value` now, or, on a marked thread, hands it off to be dropped on another.
pub(crate) fn drop_or_hand_off<T: Send + 'static>(value: T) {
    match hand_off() {
        Some(hand_off) => hand_off(Box::new(value)),
        None => drop(value),
    }
}

/// Drops a payload, leaking it if its `Drop` panics, and leaking that panic's payload too.
struct PayloadDrop(Option<Box<dyn Any + Send>>);

impl Drop for PayloadDrop {
    fn drop(&mut self) {
        let payload = self.0.take();
        if let Err(panicked) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            std::mem::forget(panicked);
            // Not `logged!`, which would hand a logger's panic back here: leaked too.
            if let Err(logger_panic) =
                catch_unwind(|| log::error!("a panic's payload panicked in its Drop; leaked"))
            {
                std::mem::forget(logger_panic);
            }
        }
    }
}

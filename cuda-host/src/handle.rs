//! Moving driver handles into work that runs on another thread.

/// A driver handle (`CUstream`, `CUevent`, ...) to be used on another thread.
#[derive(Debug)]
pub(crate) struct SendHandle<T>(*mut T);

impl<T> Clone for SendHandle<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SendHandle<T> {}

// SAFETY: driver handles are opaque identifiers that the driver accepts from any thread; the
// pointer is never dereferenced by Rust.
unsafe impl<T> Send for SendHandle<T> {}
// SAFETY: as above; a `&SendHandle` only hands out a copy of the handle.
unsafe impl<T> Sync for SendHandle<T> {}

impl<T> SendHandle<T> {
    pub(crate) fn new(handle: *mut T) -> Self {
        SendHandle(handle)
    }

    /// The handle. A method rather than a field access, so that closures capture the wrapper.
    pub(crate) fn get(self) -> *mut T {
        self.0
    }
}

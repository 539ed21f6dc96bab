//! Another library's references, held while cuda-host uses the handles they keep alive.

use crate::launch::drop_when_allowed;
use std::any::Any;
use std::fmt;

/// A value that keeps another library's driver object alive (cudarc's `Arc` of a context or a
/// stream), held by the cuda-host object that uses its handle. When that object goes, the value
/// is dropped as rules 1 and 2 of `crate::launch` allow (its `Drop` may call CUDA, destroying the
/// object), and a panic in its `Drop` is caught and reported.
pub(crate) struct KeepAlive(Option<Box<dyn Any + Send + Sync>>);

// Only the cudarc feature makes them.
#[cfg_attr(not(feature = "cudarc"), allow(dead_code))]
impl KeepAlive {
    pub(crate) fn new(value: impl Any + Send + Sync) -> KeepAlive {
        KeepAlive(Some(Box::new(value)))
    }
}

impl fmt::Debug for KeepAlive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeepAlive")
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        if let Some(value) = self.0.take() {
            drop_when_allowed(value);
        }
    }
}

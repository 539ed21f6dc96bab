//! The nodes of a graph, as the driver lists them.

use crate::checked::checked;
use crate::error::Result;
use cuda_host_sys::{CUgraph, CUgraphNode, Driver};
use std::ptr;

/// Every node of `graph`.
///
/// # Errors
/// The driver's error from `cuGraphGetNodes`.
///
/// # Safety
/// `graph` must be a live graph not used concurrently.
pub(super) unsafe fn nodes_of(driver: &Driver, graph: CUgraph) -> Result<Vec<CUgraphNode>> {
    let mut count = 0;
    // SAFETY: per the caller; a null array asks for the count only.
    unsafe { checked!(driver, cuGraphGetNodes(graph, ptr::null_mut(), &mut count)) }?;
    if count == 0 {
        // The 13.0 driver answered `CUDA_ERROR_INVALID_VALUE` listing an empty graph's nodes:
        // no array is asked for when there are none.
        return Ok(Vec::new());
    }
    let mut nodes = vec![ptr::null_mut(); count];
    // SAFETY: per the caller; the array holds `count` nodes.
    unsafe {
        checked!(
            driver,
            cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut count)
        )
    }?;
    nodes.truncate(count);
    Ok(nodes)
}

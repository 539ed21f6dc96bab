//! The nodes of a graph, as the driver lists them: the one way in for `cuGraphGetNodes`, which
//! graphs, engine nodes and the look at other code's captures each make.

use crate::checked::checked;
use crate::error::Result;
use cuda_host_sys::{CUgraph, CUgraphNode, Driver};

/// Every node of `graph`.
///
/// # Errors
/// The driver's error from `cuGraphGetNodes`.
///
/// # Safety
/// `graph` must be a live graph.
pub(crate) unsafe fn nodes_of(driver: &Driver, graph: CUgraph) -> Result<Vec<CUgraphNode>> {
    let mut count = 0;
    // SAFETY: per the caller; a null array asks for the count only.
    unsafe {
        checked!(
            driver,
            cuGraphGetNodes(graph, std::ptr::null_mut(), &mut count)
        )
    }?;
    if count == 0 {
        // The 13.0 driver refuses an array with room for no node (`CUDA_ERROR_INVALID_VALUE`):
        // none is asked for when there are none.
        return Ok(Vec::new());
    }
    let mut nodes = vec![std::ptr::null_mut(); count];
    // SAFETY: per the caller; the array holds `count` nodes; the driver writes at most that many
    // and says how many.
    unsafe {
        checked!(
            driver,
            cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut count)
        )
    }?;
    nodes.truncate(count);
    Ok(nodes)
}

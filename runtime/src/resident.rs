//! How many blocks of a persistent kernel run at once: the grid its
//! launchers (this crate's, the measurement workers', the benchmark's)
//! give it, each block then looping over the tiles.

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaFunction, CudaStream, DriverError, LaunchConfig};

/// The blocks of `function` that the GPU of `stream` holds at once, for
/// blocks of `block` threads with `shared` bytes of dynamic shared memory
/// in clusters of `cluster` blocks (1: none): the SMs times the blocks
/// each holds, or the clusters the GPU holds at once times their blocks
/// (a cluster's blocks must fit in one GPC together, so the clusters can
/// be fewer than the SMs' room divided by their size).
///
/// # Errors
///
/// The driver's, reading the SM count or the occupancy.
pub fn resident_blocks(
    function: &CudaFunction,
    stream: &CudaStream,
    (block, shared, cluster): ([u32; 3], u32, u32),
) -> Result<u32, DriverError> {
    let context = stream.context();
    context.bind_to_thread()?;
    if cluster > 1 {
        let config = LaunchConfig {
            grid_dim: (cluster, 1, 1),
            block_dim: block.into(),
            shared_mem_bytes: shared,
        };
        // One cluster at least, so that the grid stays whole clusters: a
        // kernel none of whose clusters fits fails at its launch.
        let clusters = function.occupancy_max_active_clusters(config, stream)?;
        return Ok(clusters.max(1).saturating_mul(cluster));
    }
    let sms = context.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let per_sm = function.occupancy_max_active_blocks_per_multiprocessor(
        block.iter().product(),
        shared as usize,
        None,
    )?;
    Ok(u32::try_from(sms).unwrap_or(0).saturating_mul(per_sm))
}

//! A device's identity, asked of the driver once, outside any worker.

use ktune_core::SmVersion;

use crate::gpu::Gpu;
use crate::{DeviceInfo, DeviceKind};

/// What is known about `kind`: for a GPU, what its driver reports (this
/// opens a CUDA context in the calling process; the driver library is
/// probed first, so a machine without one gets an error, not a panic); for
/// the virtual GPU, its stand-in for `vgpu_target`.
pub fn device_info(kind: DeviceKind, vgpu_target: SmVersion) -> Result<DeviceInfo, String> {
    match kind {
        DeviceKind::Vgpu => Ok(DeviceInfo::vgpu(vgpu_target)),
        DeviceKind::Gpu { ordinal } => Gpu::open(ordinal).map(|gpu| gpu.info().clone()),
    }
}

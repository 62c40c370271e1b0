//! Which device measures, and what is known about it.

use std::fmt;

use cudarc::driver::CudaContext;
use cudarc::driver::result::DriverError;
use cudarc::driver::sys::CUresult;
use ktune_core::SmVersion;
use serde::{Deserialize, Serialize};

/// The environment variable that overrides [`detect`]: `gpu` (the first
/// GPU), `gpu:N` (GPU ordinal N), `vgpu` or `none`. Read by the caller and
/// given to [`device_from_env_value`].
pub const DEVICE_ENV: &str = "KTUNE_DEVICE";

/// The name in a virtual GPU's [`DeviceInfo`].
pub const VGPU_NAME: &str = "ktune-vgpu";

/// Where points are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    /// The CUDA GPU with this ordinal.
    Gpu { ordinal: usize },
    /// ktune's virtual GPU: correctness checked, time estimated from the
    /// run's counts.
    Vgpu,
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceKind::Gpu { ordinal } => write!(f, "gpu:{ordinal}"),
            DeviceKind::Vgpu => f.write_str("vgpu"),
        }
    }
}

/// The first CUDA GPU, when the driver library loads, initialises and
/// sees one; `None` otherwise. Never panics: the driver library is probed
/// before any other driver call.
pub fn detect() -> Option<DeviceKind> {
    (gpu_count().unwrap_or(0) > 0).then_some(DeviceKind::Gpu { ordinal: 0 })
}

/// Why a [`DEVICE_ENV`] value gives no device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceEnvError {
    #[error("{DEVICE_ENV}={value:?} names no device (expected `gpu`, `gpu:N`, `vgpu` or `none`)")]
    Unknown { value: String },
    #[error("{DEVICE_ENV}={value:?} asks for a GPU, but {reason}")]
    NoGpu { value: String, reason: String },
}

/// The device a [`DEVICE_ENV`] value asks for: unset or empty is
/// [`detect`]; `gpu` and `gpu:N` a GPU that must exist; `vgpu` the virtual
/// GPU; `none` no measurement at all (`Ok(None)`).
///
/// # Errors
///
/// [`DeviceEnvError::Unknown`] for another value, [`DeviceEnvError::NoGpu`]
/// when the GPU asked for is not there.
pub fn device_from_env_value(value: Option<&str>) -> Result<Option<DeviceKind>, DeviceEnvError> {
    let value = value.map(str::trim).unwrap_or("");
    let ordinal = match value.to_ascii_lowercase().as_str() {
        "" => return Ok(detect()),
        "none" => return Ok(None),
        "vgpu" => return Ok(Some(DeviceKind::Vgpu)),
        "gpu" => 0,
        other => match other.strip_prefix("gpu:").map(str::parse::<usize>) {
            Some(Ok(n)) => n,
            _ => {
                return Err(DeviceEnvError::Unknown {
                    value: value.to_string(),
                });
            }
        },
    };
    let no_gpu = |reason: String| DeviceEnvError::NoGpu {
        value: value.to_string(),
        reason,
    };
    let count = gpu_count().map_err(no_gpu)?;
    if ordinal >= count {
        return Err(no_gpu(format!(
            "the driver sees {count} GPU(s), so there is no ordinal {ordinal}"
        )));
    }
    Ok(Some(DeviceKind::Gpu { ordinal }))
}

/// True when libcuda can be loaded; asked before any other cudarc call,
/// which would panic without it.
pub(crate) fn driver_present() -> bool {
    // SAFETY: loads the system's CUDA driver library by its standard names
    // and unloads it again, running its initialisers, as any CUDA program's
    // first step does.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// How many GPUs the driver sees, or why none can be used.
pub(crate) fn gpu_count() -> Result<usize, String> {
    if !driver_present() {
        return Err("the CUDA driver library (libcuda) is not installed".into());
    }
    match cudarc::driver::result::init() {
        Ok(()) => {}
        Err(DriverError(CUresult::CUDA_ERROR_NO_DEVICE)) => return Ok(0),
        Err(e) => return Err(format!("the CUDA driver does not initialise: {e}")),
    }
    let count = CudaContext::device_count().map_err(|e| format!("counting CUDA devices: {e}"))?;
    Ok(usize::try_from(count).unwrap_or(0))
}

/// What is known about the device a point was measured on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeviceInfo {
    /// The GPU's name as the driver reports it, or [`VGPU_NAME`].
    pub name: String,
    /// The GPU's UUID (`GPU-xxxxxxxx-…`), when known.
    pub uuid: Option<String>,
    /// Compute capability; for the virtual GPU, the target's.
    pub compute_capability: (u32, u32),
    /// Streaming multiprocessors; for the virtual GPU, the target's
    /// reference GPU's.
    pub sm_count: u32,
    /// The kernel driver's version (from `/proc/driver/nvidia/version`
    /// on Linux), when known.
    pub driver_version: Option<String>,
    /// The CUDA version the driver supports (`cuDriverGetVersion`), as
    /// `major.minor`.
    pub cuda_version: Option<String>,
    /// The maximum SM clock in MHz (a device attribute). The current
    /// clock and the temperature, read after each measurement where the
    /// driver allows, are in [`crate::Measured::sensors`].
    pub max_sm_clock_mhz: Option<u32>,
    /// The memory clock in MHz (a device attribute).
    pub memory_clock_mhz: Option<u32>,
    /// The L2 cache's size in bytes.
    pub l2_bytes: Option<u64>,
    /// True for ktune's virtual GPU, whose times are estimates from its
    /// runs' counts: records made from them must never be taken for a real
    /// GPU's.
    pub virtual_gpu: bool,
}

impl Default for DeviceInfo {
    fn default() -> DeviceInfo {
        DeviceInfo::vgpu(SmVersion::BASELINE)
    }
}

impl DeviceInfo {
    /// The virtual GPU standing in for `target`.
    pub fn vgpu(target: SmVersion) -> DeviceInfo {
        DeviceInfo {
            name: VGPU_NAME.to_string(),
            uuid: None,
            compute_capability: target.compute_capability(),
            sm_count: target.limits().sm_count,
            driver_version: None,
            cuda_version: None,
            max_sm_clock_mhz: Some(target.hardware().clock_mhz),
            memory_clock_mhz: None,
            l2_bytes: None,
            virtual_gpu: true,
        }
    }

    /// Whether this is ktune's virtual GPU (and its times estimates).
    pub fn is_virtual(&self) -> bool {
        self.virtual_gpu || self.name == VGPU_NAME
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_parse() {
        assert_eq!(device_from_env_value(Some("none")), Ok(None));
        assert_eq!(
            device_from_env_value(Some(" VGPU ")),
            Ok(Some(DeviceKind::Vgpu))
        );
        let err = device_from_env_value(Some("tpu")).unwrap_err();
        assert!(err.to_string().contains("`gpu:N`"), "{err}");
        assert!(matches!(
            device_from_env_value(Some("gpu:x")),
            Err(DeviceEnvError::Unknown { .. })
        ));
    }

    #[test]
    fn asking_for_a_missing_gpu_is_an_error_not_a_panic() {
        if gpu_count().unwrap_or(0) > 0 {
            return;
        }
        let err = device_from_env_value(Some("gpu")).unwrap_err();
        assert!(matches!(err, DeviceEnvError::NoGpu { .. }), "{err}");
        assert_eq!(detect(), None);
    }

    #[test]
    fn the_virtual_gpu_is_marked() {
        let info = DeviceInfo::vgpu(SmVersion::Sm90);
        assert!(info.is_virtual());
        assert_eq!(info.compute_capability, (9, 0));
    }
}

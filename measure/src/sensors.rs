//! The GPU's SM clock, temperature and the reasons its clocks are held
//! down, read through NVML, the management library the NVIDIA driver
//! ships (`libnvidia-ml.so.1`, loaded at run time). Where the driver has no
//! NVML, or does not allow the queries, there is no reading and nothing
//! fails: throttling is then inferred from the times alone
//! (the slowdown of the runs themselves).

use std::ffi::OsStr;

use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use serde::{Deserialize, Serialize};

/// What NVML said about the GPU right after a candidate was timed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reading {
    /// The SM clock, in MHz.
    pub sm_clock_mhz: Option<u32>,
    /// The GPU die's temperature, in °C.
    pub temperature_c: Option<u32>,
    /// The active reasons that slow the clocks down (power cap, thermal or
    /// hardware slowdown), as NVML names them; empty when none is.
    pub slowdown: Vec<String>,
}

impl Reading {
    /// Whether the clocks were held down while the candidate ran.
    pub fn throttled(&self) -> bool {
        !self.slowdown.is_empty()
    }
}

/// The reasons that lower the clocks under load. Idleness, application or
/// display clock settings and sync boost describe configuration, not a
/// slowdown of the kernel being timed.
const SLOWDOWNS: [(ThrottleReasons, &str); 5] = [
    (ThrottleReasons::SW_POWER_CAP, "power cap"),
    (ThrottleReasons::HW_SLOWDOWN, "hardware slowdown"),
    (
        ThrottleReasons::SW_THERMAL_SLOWDOWN,
        "software thermal slowdown",
    ),
    (
        ThrottleReasons::HW_THERMAL_SLOWDOWN,
        "hardware thermal slowdown",
    ),
    (ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN, "power brake"),
];

/// The names of the slowdowns among `reasons`.
fn slowdowns(reasons: ThrottleReasons) -> Vec<String> {
    SLOWDOWNS
        .iter()
        .filter(|(flag, _)| reasons.contains(*flag))
        .map(|(_, name)| (*name).to_owned())
        .collect()
}

/// NVML, opened for one GPU.
pub(crate) struct Sensors {
    nvml: Nvml,
    /// The GPU's PCI address, as NVML takes it (`domain:bus:device.0`).
    pci_bus_id: String,
}

impl Sensors {
    /// Opens NVML for the GPU at PCI `domain:bus:device`, or `None` where
    /// the driver has no NVML or NVML does not know that GPU.
    pub(crate) fn open(domain: u32, bus: u32, device: u32) -> Option<Sensors> {
        let nvml = Nvml::builder()
            .lib_path(OsStr::new("libnvidia-ml.so.1"))
            .init()
            .ok()?;
        let pci_bus_id = format!("{domain:08x}:{bus:02x}:{device:02x}.0");
        nvml.device_by_pci_bus_id(pci_bus_id.as_str()).ok()?;
        Some(Sensors { nvml, pci_bus_id })
    }

    /// Reads the clock, the temperature and the slowdowns; each is `None`
    /// (no slowdown, for the reasons) where NVML does not answer.
    pub(crate) fn read(&self) -> Option<Reading> {
        let device = self
            .nvml
            .device_by_pci_bus_id(self.pci_bus_id.as_str())
            .ok()?;
        Some(Reading {
            sm_clock_mhz: device.clock_info(Clock::SM).ok(),
            temperature_c: device.temperature(TemperatureSensor::Gpu).ok(),
            slowdown: device
                .current_throttle_reasons()
                .map(slowdowns)
                .unwrap_or_default(),
        })
    }
}

impl std::fmt::Debug for Sensors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sensors")
            .field("pci_bus_id", &self.pci_bus_id)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_slowdowns_under_load_count_as_throttling() {
        assert!(slowdowns(ThrottleReasons::NONE).is_empty());
        let configuration = ThrottleReasons::GPU_IDLE
            | ThrottleReasons::APPLICATIONS_CLOCKS_SETTING
            | ThrottleReasons::SYNC_BOOST
            | ThrottleReasons::DISPLAY_CLOCK_SETTING;
        assert!(slowdowns(configuration).is_empty());
        assert_eq!(
            slowdowns(ThrottleReasons::SW_POWER_CAP | ThrottleReasons::HW_THERMAL_SLOWDOWN),
            ["power cap", "hardware thermal slowdown"]
        );
        let reading = Reading {
            sm_clock_mhz: Some(1410),
            temperature_c: Some(84),
            slowdown: slowdowns(ThrottleReasons::SW_THERMAL_SLOWDOWN),
        };
        assert!(reading.throttled());
    }

    #[test]
    fn without_nvml_for_the_device_there_is_no_reading_and_no_panic() {
        // No GPU sits at this PCI address on any machine.
        assert!(Sensors::open(0xffff, 0xff, 0x1f).is_none());
    }
}

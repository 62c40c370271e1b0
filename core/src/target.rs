//! GPU targets: the SM versions ktune generates code for.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A streaming-multiprocessor architecture that PTX can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum SmVersion {
    /// A100: the baseline; sm_80 PTX is JIT-compiled by the driver on every newer GPU.
    #[serde(rename = "sm_80")]
    Sm80,
    /// A10, A40, RTX 30xx.
    #[serde(rename = "sm_86")]
    Sm86,
    /// L4, L40, RTX 40xx.
    #[serde(rename = "sm_89")]
    Sm89,
    /// H100, H200.
    #[serde(rename = "sm_90")]
    Sm90,
}

impl SmVersion {
    pub const ALL: [SmVersion; 4] = [
        SmVersion::Sm80,
        SmVersion::Sm86,
        SmVersion::Sm89,
        SmVersion::Sm90,
    ];

    /// The target every build emits, whatever else is declared.
    pub const BASELINE: SmVersion = SmVersion::Sm80;

    pub fn name(self) -> &'static str {
        match self {
            SmVersion::Sm80 => "sm_80",
            SmVersion::Sm86 => "sm_86",
            SmVersion::Sm89 => "sm_89",
            SmVersion::Sm90 => "sm_90",
        }
    }

    /// Compute capability as (major, minor).
    pub fn compute_capability(self) -> (u32, u32) {
        match self {
            SmVersion::Sm80 => (8, 0),
            SmVersion::Sm86 => (8, 6),
            SmVersion::Sm89 => (8, 9),
            SmVersion::Sm90 => (9, 0),
        }
    }

    pub fn from_compute_capability(major: u32, minor: u32) -> Option<SmVersion> {
        SmVersion::ALL
            .into_iter()
            .find(|sm| sm.compute_capability() == (major, minor))
    }

    /// Whether the target has `cp.async` (sm_80 and newer), which
    /// multi-stage contraction pipelines copy tiles with.
    pub fn has_async_copy(self) -> bool {
        self.compute_capability() >= (8, 0)
    }

    /// Whether the target runs thread-block clusters (sm_90): blocks
    /// scheduled together that read each other's shared memory.
    pub fn has_clusters(self) -> bool {
        self.compute_capability() >= (9, 0)
    }

    /// The oldest PTX ISA version that supports this target.
    pub fn ptx_isa(self) -> PtxIsa {
        match self {
            SmVersion::Sm80 => PtxIsa { major: 7, minor: 0 },
            SmVersion::Sm86 => PtxIsa { major: 7, minor: 1 },
            SmVersion::Sm89 | SmVersion::Sm90 => PtxIsa { major: 7, minor: 8 },
        }
    }

    /// Hardware limits the code generator must respect (ptxas checks none of
    /// the shared-memory ones).
    pub fn limits(self) -> Limits {
        let (max_shared_per_block, shared_per_sm, sm_count) = match self {
            SmVersion::Sm80 => (163 * 1024, 164 * 1024, 108),
            SmVersion::Sm86 => (99 * 1024, 100 * 1024, 84),
            SmVersion::Sm89 => (99 * 1024, 100 * 1024, 128),
            SmVersion::Sm90 => (227 * 1024, 228 * 1024, 132),
        };
        Limits {
            max_threads_per_block: 1024,
            max_threads_per_sm: if self == SmVersion::Sm86 || self == SmVersion::Sm89 {
                1536
            } else {
                2048
            },
            registers_per_sm: 65536,
            max_registers_per_thread: 255,
            static_shared_per_block: 48 * 1024,
            max_shared_per_block,
            shared_per_sm,
            sm_count,
            warp_size: 32,
            max_blocks_per_sm: match self {
                SmVersion::Sm80 | SmVersion::Sm90 => 32,
                SmVersion::Sm86 => 16,
                SmVersion::Sm89 => 24,
            },
            register_allocation_unit: 256,
            shared_allocation_unit: 128,
            reserved_shared_per_block: 1024,
        }
    }
}

impl fmt::Display for SmVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error for a target name ktune does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown GPU target `{0}`; expected one of sm_80, sm_86, sm_89, sm_90")]
pub struct UnknownTarget(pub String);

impl FromStr for SmVersion {
    type Err = UnknownTarget;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SmVersion::ALL
            .into_iter()
            .find(|sm| sm.name() == s)
            .ok_or_else(|| UnknownTarget(s.to_owned()))
    }
}

/// A PTX ISA version, printed in the `.version` directive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PtxIsa {
    pub major: u32,
    pub minor: u32,
}

impl fmt::Display for PtxIsa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Per-target hardware limits and sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_threads_per_block: u32,
    pub max_threads_per_sm: u32,
    pub registers_per_sm: u32,
    pub max_registers_per_thread: u32,
    /// Shared memory a block may use without opting in.
    pub static_shared_per_block: u32,
    /// Shared memory a block may use after opting in.
    pub max_shared_per_block: u32,
    pub shared_per_sm: u32,
    pub sm_count: u32,
    pub warp_size: u32,
    /// Resident blocks an SM holds at most, whatever their size.
    pub max_blocks_per_sm: u32,
    /// Registers are allocated per warp in multiples of this many.
    pub register_allocation_unit: u32,
    /// Shared memory is allocated per block in multiples of this many bytes.
    pub shared_allocation_unit: u32,
    /// Shared memory the CUDA runtime reserves for each resident block
    /// (counted within `shared_per_sm`).
    pub reserved_shared_per_block: u32,
}

/// Published figures of the GPU whose limits each target's tables hold: the
/// heuristic model's inputs. Peaks are nominal (boost clock, dense).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hardware {
    pub gpu: &'static str,
    pub clock_mhz: u32,
    /// FP32 fused multiply-adds an SM issues per clock.
    pub fp32_lanes_per_sm: u32,
    /// 16-bit tensor-core FLOPs (f32 accumulate) an SM does per clock.
    pub tensor_flops_per_sm_clock: u32,
    /// tf32 tensor-core FLOPs an SM does per clock: half the 16-bit rate
    /// on every target (A100 156 TFLOPS dense against 312, H100 SXM 495
    /// against 989, A40 75 against 150, RTX 4090 83 against 165).
    pub tf32_flops_per_sm_clock: u32,
    /// DRAM bandwidth, bytes per second.
    pub dram_bandwidth: f64,
    pub l2_bytes: u32,
}

impl SmVersion {
    /// The reference GPU of this target: A100 SXM4 80 GB (sm_80), A40
    /// (sm_86), RTX 4090 (sm_89), H100 SXM5 (sm_90; an H200 has the same SMs
    /// and 4.8 TB/s).
    pub fn hardware(self) -> Hardware {
        match self {
            SmVersion::Sm80 => Hardware {
                gpu: "A100-SXM4-80GB",
                clock_mhz: 1410,
                fp32_lanes_per_sm: 64,
                tensor_flops_per_sm_clock: 2048,
                tf32_flops_per_sm_clock: 1024,
                dram_bandwidth: 2.039e12,
                l2_bytes: 40 << 20,
            },
            SmVersion::Sm86 => Hardware {
                gpu: "A40",
                clock_mhz: 1740,
                fp32_lanes_per_sm: 128,
                tensor_flops_per_sm_clock: 1024,
                tf32_flops_per_sm_clock: 512,
                dram_bandwidth: 0.696e12,
                l2_bytes: 6 << 20,
            },
            SmVersion::Sm89 => Hardware {
                gpu: "RTX 4090",
                clock_mhz: 2520,
                fp32_lanes_per_sm: 128,
                tensor_flops_per_sm_clock: 512,
                tf32_flops_per_sm_clock: 256,
                dram_bandwidth: 1.008e12,
                l2_bytes: 72 << 20,
            },
            SmVersion::Sm90 => Hardware {
                gpu: "H100-SXM5-80GB",
                clock_mhz: 1980,
                fp32_lanes_per_sm: 128,
                tensor_flops_per_sm_clock: 4096,
                tf32_flops_per_sm_clock: 2048,
                dram_bandwidth: 3.35e12,
                l2_bytes: 50 << 20,
            },
        }
    }
}

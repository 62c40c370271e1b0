//! What is measured, how, and what comes back.

use std::fmt;

use ktune_core::SmVersion;
use ktune_core::ir::Kernel;
use ktune_core::syntax;
use serde::{Deserialize, Serialize};

use crate::DeviceInfo;
use crate::sensors::Reading;

/// A kernel to measure points of, for one target.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Job {
    /// The whole `#[tuned_kernel(...)] fn` item, as source text: the worker
    /// parses it again (a kernel IR is not serialised).
    pub kernel_source: String,
    /// The target the schedule is lowered for. On a GPU, PTX for an older
    /// target than the GPU's runs (the driver compiles it for the GPU).
    pub target: SmVersion,
}

impl Job {
    pub fn new(kernel_source: impl Into<String>, target: SmVersion) -> Job {
        Job {
            kernel_source: kernel_source.into(),
            target,
        }
    }

    /// The kernel, parsed and checked as the worker does.
    ///
    /// # Errors
    ///
    /// The front-end's error, or one saying the text holds no function
    /// with a `#[tuned_kernel]` attribute.
    pub fn parse(&self) -> Result<Kernel, syn::Error> {
        let item: syn::ItemFn = syn::parse_str(&self.kernel_source)?;
        let attr = item
            .attrs
            .iter()
            .find(|a| syntax::is_kernel_attr(a))
            .ok_or_else(|| {
                syn::Error::new(
                    item.sig.ident.span(),
                    format!(
                        "function `{}` has no #[tuned_kernel(...)] attribute",
                        item.sig.ident
                    ),
                )
            })?;
        syntax::parse_kernel_fn(attr, &item)
    }
}

/// How a point is checked and timed on a GPU. The virtual GPU uses only
/// [`Settings::seed`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// Seeds the random inputs ([`ktune_vgpu::verify::random_inputs`]:
    /// never zero). The input sets rotated while timing on a GPU are
    /// copies of the checked set, in allocations of their own.
    pub seed: u64,
    /// Timing stops once the 95% confidence interval of the median lies
    /// within this fraction of the median on both sides (0.02: ±2%)…
    pub confidence: f64,
    /// …or once this much time has been spent timing, whichever is first.
    pub time_cap_s: f64,
    /// At least this many timed runs, whatever the interval.
    pub min_samples: u32,
    /// Warm-up runs before timing (at least this many, and at least
    /// 10 ms of them).
    pub warmup_runs: u32,
    /// On a GPU, the output is compared with the CPU evaluation of the
    /// kernel ([`ktune_core::interp`], every element) when the kernel
    /// takes at most this many floating-point operations
    /// ([`Kernel::flops`]); above it the CPU would take too long, and the
    /// output is compared with that of the target's heuristic schedule
    /// run on the same GPU and inputs (every element, with the tolerance
    /// doubled), itself checked against the CPU at sampled elements where
    /// the kernel's output dimensions allow sub-problems
    /// ([`ktune_vgpu::sample`]: a matmul's dot products, a row kernel's
    /// rows) of at most this many operations in all, at
    /// [`SAMPLED_POINTS`] of them.
    pub reference_flops: u64,
}

/// Output elements (a matmul's dot products, a row kernel's rows) at which
/// the CPU checks a large kernel's heuristic schedule when its output is
/// the reference (see [`Settings::reference_flops`]).
pub const SAMPLED_POINTS: usize = 64;

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            seed: 0x6b74_756e,
            confidence: 0.02,
            time_cap_s: 2.0,
            min_samples: 10,
            warmup_runs: 3,
            reference_flops: 2_000_000_000,
        }
    }
}

/// A point that computed the reference's result, and its time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// The median of the timed runs, in microseconds. On the virtual GPU,
    /// an estimate from the run's counts (see the [crate docs](crate)).
    pub median_us: f64,
    /// The 10th percentile of the runs.
    pub p10_us: f64,
    /// The 90th percentile of the runs.
    pub p90_us: f64,
    /// Timed runs (1 on the virtual GPU).
    pub samples: u32,
    /// Where it was measured.
    pub device: DeviceInfo,
    /// The GPU was throttling while the runs were timed: the driver
    /// reported a power or thermal slowdown right after them (see
    /// `sensors`), or the runs themselves slowed down (the median of the
    /// last quarter over that of the first quarter by more than 5%). The
    /// time is suspect.
    pub throttled: bool,
    /// The SM clock, temperature and active slowdowns the driver reported
    /// right after the timed runs (through NVML); `None` on the virtual
    /// GPU and where the driver has no NVML.
    #[serde(default)]
    pub sensors: Option<Reading>,
}

/// Why a point has no time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum Rejected {
    /// The schedule does not lower for the kernel and target (or the
    /// kernel itself does not parse).
    Invalid(String),
    /// The driver did not compile the PTX.
    CompileFailed(String),
    /// The output differs from the reference, or an element was never
    /// written.
    WrongResult(String),
    /// The kernel faulted: an illegal address or a launch error on a GPU, or
    /// the virtual GPU's fault (out of bounds, race, barrier divergence…).
    Fault(String),
    /// The worker did not answer in time and was killed.
    Timeout { after_s: f64 },
    /// The worker exited or broke the protocol in the middle of the
    /// request (or could not be started again).
    WorkerCrashed(String),
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejected::Invalid(why) => write!(f, "invalid: {why}"),
            Rejected::CompileFailed(why) => write!(f, "compile failed: {why}"),
            Rejected::WrongResult(why) => write!(f, "wrong result: {why}"),
            Rejected::Fault(why) => write!(f, "fault: {why}"),
            Rejected::Timeout { after_s } => {
                write!(
                    f,
                    "timed out: no answer after {after_s:.1} s, worker killed"
                )
            }
            Rejected::WorkerCrashed(why) => write!(f, "worker crashed: {why}"),
        }
    }
}

impl std::error::Error for Rejected {}

//! The tuning database: measured schedules, keyed by what they were
//! measured for.
//!
//! A [`Database`] is a versioned list of [`Record`]s. Each record holds one
//! measured schedule for one [`Key`]: a kernel's computation (its
//! checksum), a shape, a dtype and a GPU (model and compute capability).
//! Several records may share a key: every measurement that no other
//! measurement of the key beats beyond noise is kept, and the
//! [winner](Database::winner) is the oldest of them, so that a new result
//! replaces the incumbent only when it is clearly faster (see [`beats`]).
//! Because keeping the unbeaten is a function of the set of records,
//! [`Database::insert`] and [`Database::merge`] give the same database
//! whatever the order of the records.
//!
//! The text form ([`Database::to_text`], [`Database::parse`]) is
//! deterministic pretty JSON, records sorted by key and date, one block per
//! record, so that adding a result adds lines without changing others.
//!
//! This module is pure, like the rest of the crate: the file, its lock and
//! the current date belong to the caller (`ktune_build::db`).

mod check;
mod merge;
mod text;

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::dtype::DType;
use crate::schedule::Schedule;
use crate::target::SmVersion;

pub use check::{Problem, ProblemKind};
pub use merge::{MARGIN, beats};
pub use text::ParseError;

/// The version of the file format this ktune reads and writes.
pub const FORMAT_VERSION: u32 = 1;

/// A tuning database: every kept measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Database {
    /// The format version the file was written with.
    pub version: u32,
    /// Sorted by key, then date (see [`Database::normalize`]).
    #[serde(default)]
    pub records: Vec<Record>,
}

/// One measured schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// The kernel's name (its function name).
    pub kernel: String,
    /// [`crate::canon::checksum`] of the kernel measured.
    pub checksum: String,
    /// [`crate::canon::canonical_form`] of the kernel measured, to explain
    /// a stale record.
    #[serde(default)]
    pub canonical: String,
    /// The size of each dimension, by name.
    pub shape: BTreeMap<String, u32>,
    /// The kernel's output dtype.
    pub dtype: DType,
    pub gpu: Gpu,
    pub schedule: Schedule,
    pub stats: Stats,
    pub provenance: Provenance,
}

/// The GPU a record was measured on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    /// The model, as the driver names it (e.g. `NVIDIA H100 80GB HBM3`).
    pub name: String,
    pub compute_capability: ComputeCapability,
    #[serde(default)]
    pub sm_count: u32,
    /// The driver version, as the driver reports it.
    #[serde(default)]
    pub driver: String,
    /// The CUDA version the driver supports (e.g. `12.8`).
    #[serde(default)]
    pub cuda: String,
    /// Clocks during the measurement, when known.
    #[serde(default)]
    pub clocks_mhz: Option<Clocks>,
}

/// A compute capability, written `"9.0"`. It may name a GPU this ktune has
/// no target for: such a record is kept and reported, never used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ComputeCapability {
    pub major: u32,
    pub minor: u32,
}

/// Clock frequencies in MHz.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Clocks {
    pub sm: u32,
    pub memory: u32,
}

/// What was measured: a confidence interval of the kernel's time. (A
/// winner confirmed on a GPU after its search, `ktune_build::tune`'s
/// `Task::confirm`, records the mean of two measurements' medians, the
/// union of their intervals and their samples together, and the default's
/// mean likewise.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stats {
    pub median_us: f64,
    /// Lower end of the confidence interval of the median.
    pub low_us: f64,
    /// Upper end of the confidence interval of the median.
    pub high_us: f64,
    pub samples: u32,
    /// The median of the default (heuristic) schedule, measured alongside.
    #[serde(default)]
    pub baseline_us: Option<f64>,
    #[serde(default)]
    pub throughput: Option<Throughput>,
}

/// Useful work per second at the median time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Throughput {
    pub value: f64,
    pub unit: ThroughputUnit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThroughputUnit {
    /// Billions of floating-point operations per second.
    Gflops,
    /// Billions of bytes moved per second.
    Gbps,
}

/// Where a record comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// The version of ktune that measured it.
    pub ktune_version: String,
    /// The code generator's [`crate::GENERATOR_VERSION`] at the time.
    pub generator_version: u32,
    pub measured_on: MeasuredOn,
    /// When, in ISO 8601 (`2026-11-29T10:19:07Z`), so that text order is
    /// time order.
    pub date: String,
}

/// What ran the measured kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MeasuredOn {
    /// A real GPU.
    Gpu,
    /// The virtual GPU: a placeholder timing, never chosen for a real GPU.
    Vgpu,
}

/// What a record is for. Two records with the same key compete.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub checksum: String,
    pub shape: BTreeMap<String, u32>,
    pub dtype: DType,
    pub gpu: Fingerprint,
}

/// Identifies a kind of GPU: its model and compute capability.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint {
    pub name: String,
    pub compute_capability: ComputeCapability,
}

impl Database {
    /// An empty database of the current format.
    pub fn new() -> Database {
        Database {
            version: FORMAT_VERSION,
            records: Vec::new(),
        }
    }

    /// The record chosen for `key` on a real GPU: the oldest of those no
    /// other real measurement beats beyond noise. Records measured on the
    /// virtual GPU are never chosen.
    pub fn winner(&self, key: &Key) -> Option<&Record> {
        let candidates: Vec<&Record> = self
            .records
            .iter()
            .filter(|r| r.provenance.measured_on == MeasuredOn::Gpu && r.key() == *key)
            .collect();
        candidates
            .iter()
            .copied()
            .filter(|r| !candidates.iter().any(|other| beats(other, r)))
            .min_by(|a, b| merge::age_order(a, b))
    }

    /// Whether `record` is the one [`Database::winner`] returns for its key.
    pub fn is_winner(&self, record: &Record) -> bool {
        self.winner(&record.key())
            .is_some_and(|w| std::ptr::eq(w, record))
    }
}

impl Default for Database {
    fn default() -> Database {
        Database::new()
    }
}

impl Record {
    pub fn key(&self) -> Key {
        Key {
            checksum: self.checksum.clone(),
            shape: self.shape.clone(),
            dtype: self.dtype,
            gpu: self.gpu.fingerprint(),
        }
    }

    /// The median's speed-up over the default schedule, when the baseline
    /// was measured.
    pub fn speedup(&self) -> Option<f64> {
        self.stats
            .baseline_us
            .map(|baseline| baseline / self.stats.median_us)
    }
}

impl Gpu {
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint {
            name: self.name.clone(),
            compute_capability: self.compute_capability,
        }
    }
}

impl ComputeCapability {
    /// The code-generation target of this GPU, if ktune has one.
    pub fn target(self) -> Option<SmVersion> {
        SmVersion::from_compute_capability(self.major, self.minor)
    }
}

impl From<SmVersion> for ComputeCapability {
    fn from(sm: SmVersion) -> ComputeCapability {
        let (major, minor) = sm.compute_capability();
        ComputeCapability { major, minor }
    }
}

impl fmt::Display for ComputeCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl FromStr for ComputeCapability {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parsed = s
            .split_once('.')
            .and_then(|(major, minor)| Some((major.parse().ok()?, minor.parse().ok()?)));
        match parsed {
            Some((major, minor)) => Ok(ComputeCapability { major, minor }),
            None => Err(format!(
                "`{s}` is not a compute capability; expected MAJOR.MINOR, e.g. \"9.0\""
            )),
        }
    }
}

impl Serialize for ComputeCapability {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ComputeCapability {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.compute_capability)
    }
}

//! Validation of records, alone and against the crate's kernels.
//!
//! A record that fails is reported, never dropped: the caller decides
//! (the build does not use it, `cargo ktune db verify` fails).

use std::collections::BTreeMap;
use std::fmt;

use super::{Database, Record};
use crate::ir::Kernel;
use crate::schedule::Schedule;
use crate::target::SmVersion;

/// Something wrong with one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The record's position in the database.
    pub index: usize,
    pub kernel: String,
    pub kind: ProblemKind,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProblemKind {
    /// The statistics are not a finite, ordered, positive interval.
    Stats,
    /// The schedule cannot be lowered for the kernel on the record's GPU.
    Schedule,
    /// The compute capability is not one ktune generates code for.
    UnknownGpu,
    /// The kernel changed (checksum) or the code generator did since the
    /// measurement.
    Stale,
    /// The record's shape names other dimensions than the kernel's.
    Shape,
    /// No kernel of this name exists any more.
    Orphan,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "record {} (kernel `{}`): {}",
            self.index, self.kernel, self.message
        )
    }
}

impl Database {
    /// Checks what can be checked without the kernels: statistics, the GPU
    /// and the schedule's knobs against the GPU's limits.
    pub fn check(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        for (index, r) in self.records.iter().enumerate() {
            let mut report = |kind, message| {
                problems.push(Problem {
                    index,
                    kernel: r.kernel.clone(),
                    kind,
                    message,
                })
            };
            if let Some(message) = stats_problem(r) {
                report(ProblemKind::Stats, message);
            }
            match r.gpu.compute_capability.target() {
                None => report(
                    ProblemKind::UnknownGpu,
                    format!(
                        "GPU `{}` has compute capability {}, which this ktune has no target for (known: {})",
                        r.gpu.name,
                        r.gpu.compute_capability,
                        SmVersion::ALL.map(|sm| sm.name()).join(", ")
                    ),
                ),
                Some(target) => {
                    if let Err(message) = knobs(&r.schedule, target) {
                        report(ProblemKind::Schedule, message);
                    }
                }
            }
        }
        problems
    }

    /// Checks each record against the current kernels (the crate's, and
    /// for an application's database its dependencies'): a kernel
    /// that changed or vanished, a generator that changed, a shape that
    /// does not fit, a schedule that does not lower for the record's shape
    /// and GPU.
    pub fn check_against(&self, kernels: &[Kernel]) -> Vec<Problem> {
        let mut problems = Vec::new();
        for (index, r) in self.records.iter().enumerate() {
            let mut report = |kind, message| {
                problems.push(Problem {
                    index,
                    kernel: r.kernel.clone(),
                    kind,
                    message,
                })
            };
            let Some(kernel) = r.kernel_in(kernels) else {
                report(
                    ProblemKind::Orphan,
                    "no kernel of this name in the crate any more".to_owned(),
                );
                continue;
            };
            let checksum = crate::canon::checksum(kernel);
            if checksum != r.checksum {
                report(ProblemKind::Stale, staleness(r, kernel, &checksum));
                continue;
            }
            if r.provenance.generator_version != crate::GENERATOR_VERSION {
                report(
                    ProblemKind::Stale,
                    format!(
                        "stale: measured with code generator version {}, this ktune generates version {}",
                        r.provenance.generator_version,
                        crate::GENERATOR_VERSION
                    ),
                );
            }
            let Some(shaped) = with_shape(kernel, r) else {
                let dims: Vec<&str> = kernel.dims.iter().map(|d| d.name.as_str()).collect();
                let recorded: Vec<&str> = r.shape.keys().map(String::as_str).collect();
                report(
                    ProblemKind::Shape,
                    format!(
                        "the shape names dimensions {}, the kernel has {}",
                        recorded.join(", "),
                        dims.join(", ")
                    ),
                );
                continue;
            };
            // Shapes are static: a record of sizes the kernel no longer
            // declares is never chosen again.
            let declared: BTreeMap<String, u32> = kernel.shape().collect();
            if declared != r.shape {
                let sizes = |shape: &BTreeMap<String, u32>| {
                    let sizes: Vec<String> =
                        shape.iter().map(|(d, n)| format!("{d}={n}")).collect();
                    sizes.join(", ")
                };
                report(
                    ProblemKind::Stale,
                    format!(
                        "stale: measured at {}, the kernel now declares {}",
                        sizes(&r.shape),
                        sizes(&declared)
                    ),
                );
                continue;
            }
            if let Some(target) = r.gpu.compute_capability.target()
                && let Err(e) = crate::lower::lower(&shaped, &r.schedule, target)
            {
                report(ProblemKind::Schedule, e.to_string());
            }
        }
        problems
    }
}

impl Record {
    /// `kernel` with this record's dimension sizes: what was measured, if
    /// the record names the kernel's dimensions.
    pub fn shaped(&self, kernel: &Kernel) -> Option<Kernel> {
        with_shape(kernel, self)
    }

    /// The kernel of `kernels` this record is for: of those with its name
    /// (an application's database may hold several crates' kernels), the
    /// one with its checksum and sizes, else its checksum, else the first.
    pub fn kernel_in<'k>(&self, kernels: &'k [Kernel]) -> Option<&'k Kernel> {
        let named = || kernels.iter().filter(|k| k.name == self.kernel);
        let same = |k: &&Kernel| crate::canon::checksum(k) == self.checksum;
        named()
            .filter(same)
            .find(|k| k.shape().collect::<BTreeMap<_, _>>() == self.shape)
            .or_else(|| named().find(same))
            .or_else(|| named().next())
    }
}

fn stats_problem(r: &Record) -> Option<String> {
    let s = &r.stats;
    let values = [s.low_us, s.median_us, s.high_us];
    if values.iter().any(|v| !v.is_finite() || *v <= 0.0) {
        return Some(format!(
            "times must be positive: low {} µs, median {} µs, high {} µs",
            s.low_us, s.median_us, s.high_us
        ));
    }
    if !(s.low_us <= s.median_us && s.median_us <= s.high_us) {
        return Some(format!(
            "the interval is out of order: expected low {} ≤ median {} ≤ high {} (µs)",
            s.low_us, s.median_us, s.high_us
        ));
    }
    if s.samples == 0 {
        return Some("no samples".to_owned());
    }
    if let Some(baseline) = s.baseline_us
        && !(baseline.is_finite() && baseline > 0.0)
    {
        return Some(format!(
            "the baseline time must be positive, not {baseline} µs"
        ));
    }
    None
}

/// The knobs' sanity for a target, without the kernel.
fn knobs(schedule: &Schedule, target: SmVersion) -> Result<(), String> {
    let check = |threads: u32| crate::lower::check_block(threads, target).map_err(|v| v.reason);
    match *schedule {
        Schedule::Generic { block } => check(block),
        Schedule::Elementwise {
            block,
            per_thread,
            vector,
        } => {
            check(block)?;
            nonzero(&[per_thread, vector])
        }
        Schedule::Rows {
            threads_per_row,
            rows_per_block,
            vector,
            ..
        } => {
            nonzero(&[vector])?;
            check(threads_per_row.saturating_mul(rows_per_block))
        }
        Schedule::Matmul(tiles) => {
            nonzero(&schedule.knob_values())?;
            check(tiles.threads())
        }
        Schedule::Mma(tiles) => {
            // `min_blocks`, `swizzle` and `prefetch` may be 0: ptxas
            // chooses, rows are padded, fragments are loaded as needed.
            nonzero(&[
                tiles.block_m,
                tiles.block_n,
                tiles.block_k,
                tiles.warp_m,
                tiles.warp_n,
                tiles.stages,
                tiles.group_m,
                tiles.split_k,
            ])?;
            check(tiles.threads())
        }
    }
}

fn nonzero(knobs: &[u32]) -> Result<(), String> {
    if knobs.contains(&0) {
        Err("a schedule knob is 0".to_owned())
    } else {
        Ok(())
    }
}

/// The kernel with the record's dimension sizes, if it names the same
/// dimensions.
fn with_shape(kernel: &Kernel, r: &Record) -> Option<Kernel> {
    if kernel.dims.len() != r.shape.len() {
        return None;
    }
    let mut shaped = kernel.clone();
    for dim in &mut shaped.dims {
        dim.size = *r.shape.get(&dim.name)?;
    }
    Some(shaped)
}

fn staleness(r: &Record, kernel: &Kernel, checksum: &str) -> String {
    let mut message = format!(
        "stale: the kernel changed since this was tuned (checksum {}, now {checksum})",
        r.checksum
    );
    if r.canonical.is_empty() {
        return message;
    }
    let now = crate::canon::canonical_form(kernel);
    let mut then_lines = r.canonical.lines();
    let mut now_lines = now.lines();
    loop {
        match (then_lines.next(), now_lines.next()) {
            (None, None) => break,
            (a, b) if a == b => continue,
            (a, b) => {
                message.push_str(&format!(
                    "; tuned: `{}`, now: `{}`",
                    a.unwrap_or("(nothing)"),
                    b.unwrap_or("(nothing)")
                ));
                break;
            }
        }
    }
    message
}

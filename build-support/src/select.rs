//! Decides which schedule each (kernel, target) variant uses.
//!
//! Today every choice is the heuristic default. This is the seam where the
//! tuning database (a hit) and the search (a miss with a GPU) plug in: they
//! add variants keyed by GPU model and say where each choice came from.

use std::fmt;

use ktune_core::SmVersion;
use ktune_core::ir::Kernel;
use ktune_core::lower::{self, Lowered};
use ktune_core::schedule::Schedule;

use crate::error::{Error, Location};

/// Where a variant's schedule came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Ranked by the heuristic model, nothing measured.
    Heuristic,
    /// Given by the user (a tool's `--schedule`).
    Explicit,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Heuristic => f.write_str("heuristic"),
            Source::Explicit => f.write_str("explicit"),
        }
    }
}

/// One variant of a kernel: the code for one target (and, once tuned, one GPU
/// model).
#[derive(Debug, Clone)]
pub struct Variant {
    pub target: SmVersion,
    /// The GPU model this variant was tuned for; `None` for defaults.
    pub gpu: Option<String>,
    pub schedule: Schedule,
    pub source: Source,
    pub lowered: Lowered,
}

impl Variant {
    /// A file-name-safe label: `sm_80.default`, or `sm_90.<gpu>` once tuned.
    pub fn label(&self) -> String {
        let who = match &self.gpu {
            None => "default".to_owned(),
            Some(gpu) => gpu
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() {
                        c.to_ascii_lowercase()
                    } else {
                        '_'
                    }
                })
                .collect(),
        };
        format!("{}.{who}", self.target)
    }
}

/// The targets a build emits: the sm_80 baseline plus those declared.
pub fn targets(declared: &[SmVersion]) -> Vec<SmVersion> {
    let mut all = vec![SmVersion::BASELINE];
    all.extend(declared.iter().copied());
    all.sort();
    all.dedup();
    all
}

/// Chooses and lowers one variant per target for a kernel.
pub fn variants(
    kernel: &Kernel,
    location: &Location,
    targets: &[SmVersion],
) -> Result<Vec<Variant>, Error> {
    targets
        .iter()
        .map(|target| {
            let schedule = lower::heuristic(kernel, *target);
            variant(kernel, location, *target, schedule, Source::Heuristic)
        })
        .collect()
}

/// Lowers one kernel with a given schedule.
pub fn variant(
    kernel: &Kernel,
    location: &Location,
    target: SmVersion,
    schedule: Schedule,
    source: Source,
) -> Result<Variant, Error> {
    let lowered = lower::lower(kernel, &schedule, target).map_err(|error| Error::Lower {
        kernel: kernel.name.clone(),
        location: location.clone(),
        error: Box::new(error),
    })?;
    Ok(Variant {
        target,
        gpu: None,
        schedule,
        source,
        lowered,
    })
}

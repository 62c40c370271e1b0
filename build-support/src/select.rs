//! Decides which schedule each (kernel, target) variant uses.
//!
//! Every build emits the heuristic default for each target ([`variants`]);
//! the tuning database adds one variant per GPU model it holds a winner for
//! ([`tuned`]). The search (a miss with a GPU) will plug in here too.

use std::fmt;

use std::collections::{BTreeMap, BTreeSet};

use ktune_core::SmVersion;
use ktune_core::db::{Fingerprint, Key};
use ktune_core::ir::Kernel;
use ktune_core::lower::{self, Lowered};
use ktune_core::schedule::Schedule;

use crate::error::{Error, Location};
use crate::layer::{Layer, Layers};

/// Where a variant's schedule came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Ranked by the heuristic model, nothing measured.
    Heuristic,
    /// Given by the user (a tool's `--schedule`).
    Explicit,
    /// Measured: the winner of a tuning database's layer.
    Database { layer: Layer },
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Heuristic => f.write_str("heuristic"),
            Source::Explicit => f.write_str("explicit"),
            Source::Database { layer } => write!(f, "database ({layer})"),
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
    /// Whether the code uses instructions only its target's architecture
    /// has (Hopper's `wgmma`): an `sm_90a` module, which loads on compute
    /// capability 9.0 alone.
    pub fn arch_specific(&self) -> bool {
        self.lowered.ptx.is_sm90a()
    }

    /// A file-name-safe label: `sm_80.default`, `sm_90a.default` for an
    /// architecture-specific default, or `sm_90.<gpu>` once tuned.
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
        let suffix = if self.arch_specific() { "a" } else { "" };
        format!("{}{suffix}.{who}", self.target)
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

/// Chooses and lowers the heuristic defaults of a kernel: one per target,
/// and where that one is architecture-specific (Hopper's `wgmma`) the
/// portable default of the target beside it, for newer GPUs.
pub fn variants(
    kernel: &Kernel,
    location: &Location,
    targets: &[SmVersion],
) -> Result<Vec<Variant>, Error> {
    let mut out = Vec::new();
    for &target in targets {
        let schedule = lower::heuristic(kernel, target);
        let default = variant(kernel, location, target, schedule, Source::Heuristic)?;
        let specific = default.arch_specific();
        out.push(default);
        if specific {
            let schedule = lower::portable_heuristic(kernel, target);
            out.push(variant(
                kernel,
                location,
                target,
                schedule,
                Source::Heuristic,
            )?);
        }
    }
    Ok(out)
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

/// A kernel's variants from the tuning database, and what the build must
/// tell the user about the records it did not use.
#[derive(Debug, Clone, Default)]
pub struct Tuned {
    /// One variant per GPU model holding a usable winner for the kernel's
    /// computation, shape and dtype, for that GPU's target; ordered by GPU.
    pub variants: Vec<Variant>,
    /// One line per problem, for `cargo:warning`: the kernel's stale
    /// records (counted, once), and each winner that is invalid or for a
    /// GPU ktune has no target for.
    pub warnings: Vec<String>,
}

/// The database's variants of `kernel`.
///
/// A record is *current* when its checksum and code-generator version are
/// this kernel's and this ktune's. For each GPU model with current records
/// of the kernel's shape and dtype, the first layer holding a winner
/// decides ([`Layers::winner`]); records measured on the virtual GPU are
/// never winners, so they give no variant. The winner's schedule is
/// lowered again for the GPU's target, and a record that does not lower is
/// reported, not embedded; the next layer is not consulted, so that the
/// report points at the record that has to be fixed. Records of the
/// kernel's name that are not current are stale: counted in one warning,
/// never used (in the application's layer, only those with the kernel's
/// checksum: another crate's kernel may have the same name).
pub fn tuned(kernel: &Kernel, layers: &Layers) -> Tuned {
    let checksum = ktune_core::canon::checksum(kernel);
    let shape: BTreeMap<String, u32> = kernel.shape().collect();
    let is_current = |r: &ktune_core::db::Record| {
        r.checksum == checksum && r.provenance.generator_version == ktune_core::GENERATOR_VERSION
    };

    let mut stale = 0;
    let mut gpus = BTreeSet::<Fingerprint>::new();
    let mut current = Layers::new();
    for opened in layers.iter() {
        let mut database = ktune_core::db::Database::new();
        for r in opened
            .database
            .records
            .iter()
            .filter(|r| r.kernel == kernel.name)
        {
            if !is_current(r) {
                // The application's database holds other crates' kernels
                // too: one of the same name is not a stale record of this.
                if opened.layer != Layer::Application || r.checksum == checksum {
                    stale += 1;
                }
                continue;
            }
            if r.shape == shape && r.dtype == kernel.output.dtype {
                gpus.insert(r.gpu.fingerprint());
                database.records.push(r.clone());
            }
        }
        current.push(opened.layer, opened.path.clone(), database);
    }

    let mut tuned = Tuned::default();
    if stale > 0 {
        let (records, are, it) = if stale == 1 {
            ("record is", "was", "it")
        } else {
            ("records are", "were", "they")
        };
        tuned.warnings.push(format!(
            "kernel `{}`: {stale} tuning {records} stale (the kernel or ktune's code generator changed since {it} {are} tuned); run `cargo ktune db verify`",
            kernel.name
        ));
    }
    for gpu in gpus {
        let key = Key {
            checksum: checksum.clone(),
            shape: shape.clone(),
            dtype: kernel.output.dtype,
            gpu,
        };
        let Some((opened, record)) = current.winner(&key) else {
            continue;
        };
        let unused = |reason: String| {
            format!(
                "kernel `{}`: the tuning record for `{}` (measured {}, {} layer `{}`) is not used: {reason}",
                kernel.name,
                record.gpu.name,
                record.provenance.date,
                opened.layer,
                opened.path.display()
            )
        };
        let Some(target) = key.gpu.compute_capability.target() else {
            tuned.warnings.push(unused(format!(
                "ktune has no target for compute capability {}",
                key.gpu.compute_capability
            )));
            continue;
        };
        match lower::lower(kernel, &record.schedule, target) {
            Ok(lowered) => tuned.variants.push(Variant {
                target,
                gpu: Some(record.gpu.name.clone()),
                schedule: record.schedule.clone(),
                source: Source::Database {
                    layer: opened.layer,
                },
                lowered,
            }),
            Err(e) => tuned
                .warnings
                .push(unused(format!("its schedule is invalid: {e}"))),
        }
    }
    tuned
}

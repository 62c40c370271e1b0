//! Build-script helper of [ktune](https://docs.rs/ktune).
//!
//! Finds every `#[tuned_kernel]` in the crate's sources, chooses a schedule
//! for each kernel and GPU target, generates the PTX and writes it into
//! `$OUT_DIR/ktune/`, where the kernel's macro expansion embeds it. A
//! kernel with a mistake in it is passed over: the macro reports the
//! mistake where it is, as a compile error.
//!
//! A complete `build.rs`:
//!
//! ```no_run
//! fn main() {
//!     ktune_build::tune_crate();
//! }
//! ```
//!
//! Targets beyond the sm_80 baseline (whose PTX the driver compiles for any
//! newer GPU) are declared in the crate's `Cargo.toml`:
//!
//! ```toml
//! [package.metadata.ktune]
//! targets = ["sm_90"]
//! ```
//!
//! For more control, use [`Config`]:
//!
//! ```no_run
//! fn main() {
//!     let report = ktune_build::Config::new()
//!         .source_dir("kernels")
//!         .build()
//!         .unwrap_or_else(|e| {
//!             eprintln!("{e}");
//!             std::process::exit(1)
//!         });
//!     eprintln!("{} kernels", report.kernels.len());
//! }
//! ```
//!
//! No GPU and no CUDA toolkit are needed: without measurements every variant
//! uses the heuristic schedule.
//!
//! # The tuning database
//!
//! Measured schedules are read from the crate's database (default
//! `tuning/ktune.json`, see [`Config::database`]) layered over the per-user
//! cache (`<cache dir>/ktune/<crate>/ktune.json`), under the application's
//! database when the application declares one in `KTUNE_APP_DATABASE`
//! (see [`layer`]). Besides the heuristic default of each target, every
//! kernel gets one variant per GPU model holding a winner for its
//! computation, shape and dtype, for that GPU's target; the runtime picks
//! it on that model. Records measured on the virtual GPU are never
//! embedded; stale and invalid records are reported with `cargo:warning`
//! and not embedded (see [`select::tuned`]).

// The examples above are complete build scripts: their `fn main` is the point.
#![allow(clippy::needless_doctest_main)]

pub mod db;
mod error;
pub mod layer;
pub mod manifest;
pub mod out;
pub mod ptxas;
pub mod sass;
pub mod scan;
pub mod select;
pub mod tune;

use std::path::{Path, PathBuf};

pub use error::{Diagnostic, Error, Location};
use ktune_core::SmVersion;
use layer::Layers;
pub use select::{Source, Variant};

/// Prepares every kernel of the crate being built, with default settings.
///
/// On error (a database that does not parse, a bad setting), prints what
/// is wrong and exits the build script with a failure, without a panic
/// backtrace.
pub fn tune_crate() {
    ktune_measure::worker_main_if_requested();
    if let Err(e) = Config::new().build() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Settings of one build-script run.
#[derive(Debug, Clone, Default)]
pub struct Config {
    manifest_dir: Option<PathBuf>,
    out_dir: Option<PathBuf>,
    source_dirs: Vec<PathBuf>,
    targets: Vec<SmVersion>,
    database: Option<PathBuf>,
    user_cache: bool,
    cargo_instructions: bool,
    search: bool,
}

/// What a build produced.
#[derive(Debug, Clone)]
pub struct Report {
    /// Each kernel's name and the variants emitted for it.
    pub kernels: Vec<(String, Vec<Variant>)>,
    /// Every file the build read.
    pub inputs: Vec<PathBuf>,
    /// What the build warned about (stale or unusable tuning records).
    pub warnings: Vec<String>,
}

impl Config {
    /// Defaults: the crate's `src/`, Cargo's `OUT_DIR`, the targets declared
    /// in `[package.metadata.ktune]`, the database `tuning/ktune.json` over
    /// the user cache, and Cargo instructions on stdout.
    pub fn new() -> Config {
        Config {
            user_cache: true,
            search: true,
            cargo_instructions: true,
            ..Config::default()
        }
    }

    /// The crate root (default: `$CARGO_MANIFEST_DIR`).
    pub fn manifest_dir(mut self, dir: impl Into<PathBuf>) -> Config {
        self.manifest_dir = Some(dir.into());
        self
    }

    /// Where outputs go; files are written to its `ktune/` subfolder
    /// (default: `$OUT_DIR`).
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Config {
        self.out_dir = Some(dir.into());
        self
    }

    /// Scans this folder (relative to the crate root) instead of `src/`;
    /// call again to scan several.
    pub fn source_dir(mut self, dir: impl Into<PathBuf>) -> Config {
        self.source_dirs.push(dir.into());
        self
    }

    /// Emits variants for this target too, besides those in the manifest.
    pub fn target(mut self, target: SmVersion) -> Config {
        self.targets.push(target);
        self
    }

    /// The crate's tuning database, relative to the crate root (default:
    /// [`db::DEFAULT_PATH`]). A missing file is an empty database.
    pub fn database(mut self, path: impl Into<PathBuf>) -> Config {
        self.database = Some(path.into());
        self
    }

    /// Whether to read the per-user cache under the crate's database
    /// (default: on).
    pub fn user_cache(mut self, on: bool) -> Config {
        self.user_cache = on;
        self
    }

    /// Whether to print `cargo:` instructions (off for use outside a build
    /// script).
    pub fn cargo_instructions(mut self, on: bool) -> Config {
        self.cargo_instructions = on;
        self
    }

    /// Whether to search on a miss (see [`tune`]; on by default, driven by
    /// `KTUNE_*` variables and the crate's `max-autotune` feature).
    pub fn search(mut self, on: bool) -> Config {
        self.search = on;
        self
    }

    /// Runs: scan, search on a miss, choose, lower, write.
    pub fn build(&self) -> Result<Report, Error> {
        let started = std::time::SystemTime::now();
        let manifest_dir = dir_or_env(&self.manifest_dir, "CARGO_MANIFEST_DIR")?;
        let out_root = dir_or_env(&self.out_dir, "OUT_DIR")?;
        // When Cargo started this run: it dates it by `invoked.timestamp`
        // beside `OUT_DIR`, which may be before this function was called.
        let started = out_root
            .parent()
            .and_then(|dir| std::fs::metadata(dir.join("invoked.timestamp")).ok())
            .and_then(|m| m.modified().ok())
            .map_or(started, |invoked| invoked.min(started));
        let out_dir = out_root.join("ktune");
        let manifest_path = manifest_dir.join("Cargo.toml");
        let metadata = manifest::read(&manifest_path)?;
        let source_dirs = self.source_dirs(&manifest_dir);
        if self.cargo_instructions {
            println!("cargo:rerun-if-changed={}", manifest_path.display());
            for dir in &source_dirs {
                println!("cargo:rerun-if-changed={}", dir.display());
            }
        }
        let scan = scan::scan_leaving_errors_to_the_compiler(&manifest_dir, &source_dirs)?;
        if self.cargo_instructions {
            for file in &scan.files {
                println!("cargo:rerun-if-changed={}", file.display());
            }
        }

        if self.cargo_instructions {
            println!("cargo:rerun-if-env-changed={}", layer::APP_DATABASE_ENV);
        }
        let stack = layer::under_application(
            layer::app_database()?,
            layer::stack(
                manifest_dir.join(self.database_path()),
                metadata.name.as_deref().filter(|_| self.user_cache),
            ),
        );
        if self.cargo_instructions && self.user_cache {
            for var in layer::USER_CACHE_ENV {
                println!("cargo:rerun-if-env-changed={var}");
            }
        }
        // What the user should act on: reported to Cargo, and kept.
        let mut warnings = Vec::new();
        let warn = |warnings: &mut Vec<String>, warning: String| {
            if self.cargo_instructions {
                println!("cargo:warning={warning}");
            }
            warnings.push(warning);
        };
        let mut layers = Layers::open_for_build(stack.clone())?;
        for warning in layers.warnings() {
            warn(&mut warnings, warning.clone());
        }

        let mut declared = metadata.targets.clone();
        declared.extend(self.targets.iter().copied());
        let targets = select::targets(&declared);

        if self.search {
            if self.cargo_instructions {
                for var in tune::ENV {
                    println!("cargo:rerun-if-env-changed={var}");
                }
            }
            let full = std::env::var_os("CARGO_FEATURE_MAX_AUTOTUNE").is_some();
            let settings = tune::Settings::from_env(|v| std::env::var(v).ok(), full)?;
            let places = tune::Places {
                crate_database: manifest_dir.join(self.database_path()),
                user_cache: stack
                    .iter()
                    .find(|(l, _)| *l == layer::Layer::UserCache)
                    .map(|(_, p)| p.clone()),
                work: work_dir(&out_dir),
            };
            let outcome = tune::run(&scan.kernels, &layers, &settings, &declared, &places)?;
            if !outcome.tuned.is_empty() {
                layers = Layers::open_for_build(stack.clone())?;
                // This run read what its search wrote: the database is no
                // change for Cargo to rerun the script for.
                if let Some(written) = &outcome.written_to {
                    layer::date_before(written, started);
                }
            }
            if !outcome.out_of_time.is_empty() {
                let warning = format!(
                    "ktune: the search of {} ran out of time with the default alone measured; nothing was recorded (raise KTUNE_SECONDS; the next build goes on from where this one stopped)",
                    outcome.out_of_time.join(", ")
                );
                warn(&mut warnings, warning);
            }
            for too_large in &outcome.too_large {
                warn(
                    &mut warnings,
                    format!("ktune: {too_large}; it keeps its heuristic schedule"),
                );
            }
            let device = std::env::var("KTUNE_DEVICE").ok();
            if let Some(warning) = untuned_warning(&outcome.untuned, device.as_deref()) {
                warn(&mut warnings, warning);
            }
        }

        // After the search, which may have written the first database of
        // a layer: the file is watched then, not just its folder.
        if self.cargo_instructions {
            for (layer, path) in &stack {
                if let Some(watched) = layer::watched(*layer, path) {
                    println!("cargo:rerun-if-changed={}", watched.display());
                }
            }
        }

        std::fs::create_dir_all(&out_dir).map_err(|source| Error::Write {
            path: out_dir.clone(),
            source,
        })?;
        let mut written = Vec::new();
        let mut kernels = Vec::new();
        for found in &scan.kernels {
            for input in found.kernel.unread_inputs() {
                let warning = format!(
                    "ktune: kernel `{}` ({}): input `{}` is never read",
                    found.kernel.name, found.location, input.name
                );
                warn(&mut warnings, warning);
            }
            let mut variants = select::variants(&found.kernel, &found.location, &targets)?;
            let tuned = select::tuned(&found.kernel, &layers);
            variants.extend(tuned.variants);
            for warning in tuned.warnings {
                warn(&mut warnings, warning);
            }
            written.extend(out::write_kernel(&out_dir, &found.kernel, &variants)?);
            kernels.push((found.kernel.name.clone(), variants));
        }
        out::remove_stale(&out_dir, &written)?;

        let mut inputs = vec![manifest_path];
        inputs.extend(
            layers
                .iter()
                .filter(|l| l.path.exists())
                .map(|l| l.path.clone()),
        );
        inputs.extend(scan.files);
        Ok(Report {
            kernels,
            inputs,
            warnings,
        })
    }

    fn database_path(&self) -> &Path {
        self.database
            .as_deref()
            .unwrap_or(Path::new(db::DEFAULT_PATH))
    }

    fn source_dirs(&self, manifest_dir: &Path) -> Vec<PathBuf> {
        if self.source_dirs.is_empty() {
            vec![manifest_dir.join("src")]
        } else {
            self.source_dirs
                .iter()
                .map(|d| manifest_dir.join(d))
                .collect()
        }
    }
}

/// A count and its noun, plural unless the count is 1: "1 kernel", "2
/// kernels" for `counted(n, "kernel")`.
pub fn counted(n: usize, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        n => format!("{n} {noun}s"),
    }
}

/// The one warning of a build that had no device to tune on, unless
/// `KTUNE_DEVICE=none` (`device`) asked for heuristic schedules.
fn untuned_warning(untuned: &[String], device: Option<&str>) -> Option<String> {
    const SHOWN: usize = 6;
    let declined = device.is_some_and(|d| d.trim().eq_ignore_ascii_case("none"));
    if untuned.is_empty() || declined {
        return None;
    }
    let mut names = untuned[..untuned.len().min(SHOWN)].join(", ");
    if untuned.len() > SHOWN {
        names.push_str(&format!(" and {} more", untuned.len() - SHOWN));
    }
    let count = match untuned.len() {
        1 => "1 kernel uses".to_owned(),
        n => format!("{n} kernels use"),
    };
    Some(format!(
        "ktune: no GPU to tune on: {count} heuristic schedules ({names}); \
         build where a GPU is, or set KTUNE_DEVICE=vgpu to run the search on the virtual GPU"
    ))
}

/// Where the search keeps journals and its log: `<target>/<profile>/ktune`
/// when `out` (`$OUT_DIR/ktune`) lies in Cargo's layout, else beside `out`.
fn work_dir(out: &Path) -> PathBuf {
    out.ancestors()
        .nth(4)
        .filter(|profile| profile.join("build").is_dir())
        .map_or_else(|| out.join("search"), |profile| profile.join("ktune"))
}

fn dir_or_env(dir: &Option<PathBuf>, var: &'static str) -> Result<PathBuf, Error> {
    match dir {
        Some(dir) => Ok(dir.clone()),
        None => std::env::var_os(var)
            .map(PathBuf::from)
            .ok_or(Error::MissingEnv(var)),
    }
}

#[cfg(test)]
mod tests {
    use super::untuned_warning;

    #[test]
    fn untuned_kernels_are_a_warning_unless_no_device_was_asked_for() {
        let untuned: Vec<String> = (1..=8).map(|i| format!("k{i}")).collect();
        let warning = untuned_warning(&untuned, None).expect("a warning");
        assert!(
            warning.starts_with(
                "ktune: no GPU to tune on: 8 kernels use heuristic schedules (k1, k2, k3, k4, k5, k6 and 2 more)"
            ),
            "{warning}"
        );
        assert!(untuned_warning(&untuned[..1], Some("")).is_some());
        assert_eq!(untuned_warning(&untuned, Some("none")), None);
        assert_eq!(untuned_warning(&untuned, Some(" None ")), None);
        assert_eq!(untuned_warning(&[], None), None);
    }
}

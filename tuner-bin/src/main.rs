//! `cargo ktune`: the command line of ktune.
//!
//! - `cargo ktune status`: the kernels of a crate, their shapes, and the
//!   schedule each variant would use and where it came from (heuristic, or
//!   which database layer), with the targets no GPU was tuned for.
//! - `cargo ktune ptx <kernel> [--target sm_90] [--schedule default|JSON]`:
//!   the PTX a kernel ships, to read what runs.
//! - `cargo ktune verify [--sample N] [--seed S] [--json]`: every variant
//!   the build would ship, plus N sampled schedule points per kernel, run on
//!   the virtual GPU and compared with the CPU evaluation of the kernel.
//! - `cargo ktune db show|verify [--file F]`: the tuning database as a
//!   table; its records checked against the crate's kernels and GPUs.

mod db;
mod verify;

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use ktune_build::layer::{self, Layers};
use ktune_build::scan::{self, Found};
use ktune_build::{Source, manifest, select};
use ktune_core::SmVersion;
use ktune_core::schedule::Schedule;

#[derive(Parser)]
#[command(name = "cargo", bin_name = "cargo")]
enum Cargo {
    /// ktune's tools for crates with #[tuned_kernel]s.
    #[command(version)]
    Ktune(Cli),
}

#[derive(Args)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
pub(crate) struct CrateArgs {
    /// Path to the crate's Cargo.toml (default: the one in the current folder).
    #[arg(long)]
    manifest_path: Option<PathBuf>,
    /// The package, in a workspace.
    #[arg(short, long)]
    package: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// List the crate's kernels with their shapes and the schedule each
    /// target would use.
    Status {
        #[command(flatten)]
        krate: CrateArgs,
    },
    /// Print the PTX of one kernel for one target and schedule.
    Ptx {
        /// The kernel's name (its function name).
        kernel: String,
        #[arg(long, default_value = "sm_80")]
        target: SmVersion,
        /// `default` (the heuristic choice) or a schedule as JSON, e.g.
        /// '{"class":"generic","block":128}'.
        #[arg(long, default_value = "default")]
        schedule: String,
        #[command(flatten)]
        krate: CrateArgs,
    },
    /// Run every variant the build would ship, plus sampled schedule
    /// points, on the virtual GPU against the CPU evaluation of each kernel.
    Verify {
        /// Further points of each kernel's schedule space to verify, drawn
        /// with the seed.
        #[arg(long, default_value_t = 0)]
        sample: usize,
        /// Seed of the random inputs and of the sample.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
        /// Where to run the kernels.
        #[arg(long, value_enum, default_value = "vgpu")]
        device: verify::Device,
        #[command(flatten)]
        krate: CrateArgs,
    },
    /// Inspect and check the tuning database.
    Db {
        #[command(subcommand)]
        command: db::Command,
    },
}

fn main() {
    let Cargo::Ktune(cli) = Cargo::parse();
    if let Err(e) = run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Status { krate } => status(&krate),
        Command::Ptx {
            kernel,
            target,
            schedule,
            krate,
        } => ptx(&krate, &kernel, target, &schedule),
        Command::Verify {
            sample,
            seed,
            json,
            device,
            krate,
        } => verify::verify(
            &krate,
            &verify::Options {
                sample,
                seed,
                json,
                device,
            },
        ),
        Command::Db { command } => db::run(command),
    }
}

/// The crate to work on: its root folder and its manifest's ktune settings.
pub(crate) struct Crate {
    name: String,
    root: PathBuf,
    metadata: manifest::Metadata,
    kernels: Vec<Found>,
}

pub(crate) fn load_crate(args: &CrateArgs) -> Result<Crate> {
    let mut cmd = cargo_metadata::MetadataCommand::new();
    cmd.no_deps();
    if let Some(path) = &args.manifest_path {
        cmd.manifest_path(path);
    }
    let meta = cmd.exec().context("cannot read the crate's metadata")?;
    let packages = meta.workspace_packages();
    let package = match &args.package {
        Some(name) => packages
            .iter()
            .find(|p| p.name.as_str() == name)
            .with_context(|| format!("no package `{name}` in this workspace"))?,
        None => {
            let wanted = match &args.manifest_path {
                Some(path) => path.clone(),
                None => std::env::current_dir()?.join("Cargo.toml"),
            };
            let wanted = wanted.canonicalize().unwrap_or(wanted);
            match packages
                .iter()
                .find(|p| p.manifest_path.as_std_path() == wanted)
            {
                Some(p) => p,
                None => {
                    let names: Vec<&str> = packages.iter().map(|p| p.name.as_str()).collect();
                    bail!(
                        "this is a workspace: choose a package with -p ({})",
                        names.join(", ")
                    )
                }
            }
        }
    };
    let manifest_path = package.manifest_path.clone().into_std_path_buf();
    let root = manifest_path
        .parent()
        .map(PathBuf::from)
        .context("manifest without a folder")?;
    let metadata = manifest::read(&manifest_path)?;
    let found = scan::scan(&root, &[root.join("src")])?;
    Ok(Crate {
        name: package.name.to_string(),
        root,
        metadata,
        kernels: found.kernels,
    })
}

fn status(args: &CrateArgs) -> Result<()> {
    let krate = load_crate(args)?;
    let targets = select::targets(&krate.metadata.targets);
    let layers = Layers::open(layer::stack(
        krate.root.join(ktune_build::db::DEFAULT_PATH),
        Some(&krate.name),
    ))?;
    for opened in layers.iter() {
        println!(
            "{} database: {} ({} records)",
            opened.layer,
            opened.path.display(),
            opened.database.records.len()
        );
    }
    println!(
        "crate `{}` ({}): {} kernels, targets {}",
        krate.name,
        krate.root.display(),
        krate.kernels.len(),
        targets
            .iter()
            .map(|t| t.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    for found in &krate.kernels {
        let k = &found.kernel;
        let shape: Vec<String> = k
            .dims
            .iter()
            .map(|d| format!("{}={}", d.name, d.size))
            .collect();
        println!(
            "\n{}  ({})\n  shape: {}  output: {}",
            k.name,
            found.location,
            shape.join(", "),
            k.output.dtype
        );
        let mut variants = select::variants(k, &found.location, &targets)?;
        let tuned = select::tuned(k, &layers);
        variants.extend(tuned.variants);
        for v in &variants {
            println!(
                "  {:<6} {:<24} {:<20} {}",
                v.target.name(),
                v.gpu.as_deref().unwrap_or("default"),
                v.source.to_string(),
                v.schedule.to_json()
            );
        }
        let tuned_targets: Vec<SmVersion> = variants
            .iter()
            .filter(|v| v.gpu.is_some())
            .map(|v| v.target)
            .collect();
        let missing: Vec<&str> = targets
            .iter()
            .filter(|t| !tuned_targets.contains(t))
            .map(|t| t.name())
            .collect();
        if !missing.is_empty() {
            println!("  not tuned for a GPU of: {}", missing.join(", "));
        }
        for warning in &tuned.warnings {
            println!("  warning: {warning}");
        }
    }
    Ok(())
}

fn ptx(args: &CrateArgs, name: &str, target: SmVersion, schedule: &str) -> Result<()> {
    let krate = load_crate(args)?;
    let Some(found) = krate.kernels.iter().find(|f| f.kernel.name == name) else {
        let names: Vec<&str> = krate
            .kernels
            .iter()
            .map(|f| f.kernel.name.as_str())
            .collect();
        bail!(
            "no kernel `{name}` in crate `{}`; its kernels: {}",
            krate.name,
            names.join(", ")
        );
    };
    let variant = if schedule == "default" {
        select::variants(&found.kernel, &found.location, &[target])?.remove(0)
    } else {
        let schedule = Schedule::from_json(schedule)
            .with_context(|| format!("`{schedule}` is not a schedule"))?;
        select::variant(
            &found.kernel,
            &found.location,
            target,
            schedule,
            Source::Explicit,
        )?
    };
    print!("{}", ktune_core::ptx::print(&variant.lowered.ptx, target));
    Ok(())
}

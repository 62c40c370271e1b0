//! `cargo ktune`: the command line of ktune.
//!
//! - `cargo ktune status [--json]`: the kernels of a crate and of its dependencies
//!   that tune their own, their shapes, and the schedule each variant would
//!   use and where it came from (heuristic, or which database layer:
//!   application, crate, user cache), with the targets no GPU was tuned for.
//! - `cargo ktune ptx <kernel> [--target sm_90] [--schedule default|JSON]`:
//!   the PTX a kernel ships, to read what runs.
//! - `cargo ktune verify [--sample N] [--seed S] [--device vgpu|gpu] [--max-gflop G] [--json]`:
//!   every variant the build would ship, plus N sampled schedule points per
//!   kernel, run on the virtual GPU (or the GPU) and compared with the CPU
//!   evaluation of the kernel.
//! - `cargo ktune space <kernel> [--target sm_90] [--top N] [--json]`: the
//!   kernel's schedule space: its knobs and values, how many points are
//!   valid and which constraints reject the others, and the heuristic
//!   model's best-ranked points.
//! - `cargo ktune inspect <kernel> [--target sm_90] [--schedule default|best|JSON] [--json]`:
//!   registers, spills, shared memory, occupancy and the main loop's
//!   instruction mix of the kernel's machine code (needs ptxas and nvdisasm).
//! - `cargo ktune replay --space FILE --strategy NAME --seeds N --budget B [--json]`:
//!   a search strategy scored on a recorded tuning space.
//! - `cargo ktune tune [KERNEL…] [--device auto|gpu|vgpu] [--trials N] [--seconds S] [--strategy NAME] [--weight KERNEL=W] [--write crate|user] [--json]`:
//!   the kernels' schedule spaces searched under one budget, spread over
//!   the kernels where it saves the most; winners written to the database.
//! - `cargo ktune report [--out FILE] [--json]`: the last `tune` run as an
//!   HTML page with SVG plots (best so far against trials, the cost model's
//!   predictions against the measurements, speed-ups over the default).
//! - `cargo ktune db show [--json] [--file F]`, `db verify [--file F]`,
//!   `db diff OLD NEW [--json]`, `db merge INTO FROM… [--dry-run]`,
//!   `db prune [--stale] [--superseded] [--dry-run] [--file F]`: the tuning
//!   database as a table, its records checked against the crate's kernels
//!   and GPUs, two databases compared, merged with the build's hysteresis,
//!   and pruned of stale or superseded records.
//!
//! Cargo runs it as `cargo-ktune ktune …`; run directly, `cargo-ktune …`
//! means the same.

mod db;
mod inspect;
mod replay;
mod report;
mod space;
mod status;
mod tune;
mod verify;

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use ktune_build::scan::{self, Found};
use ktune_build::{Source, manifest, select};
use ktune_core::SmVersion;
use ktune_core::schedule::Schedule;

#[derive(Parser)]
#[command(name = "cargo", bin_name = "cargo")]
enum Cargo {
    /// ktune's tools for crates with `#[tuned_kernel]` kernels.
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
    /// List the kernels of the crate and of its dependencies with their
    /// shapes, the schedule each target would use and its database layer.
    Status {
        /// Print the status as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        krate: CrateArgs,
    },
    /// Print the PTX of one kernel for one target and schedule.
    Ptx {
        /// The kernel's name (its function name).
        kernel: String,
        /// The GPU architecture: sm_80, sm_86, sm_89 or sm_90.
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
        /// The largest kernel to verify, in GFLOP at its shape; larger ones
        /// are listed as not verified. On the virtual GPU, which runs
        /// kernels thread by thread (about 10 s per GFLOP and point), by
        /// default the limit of a search there (1); on a GPU, for the CPU
        /// evaluation every output is compared with (about 12 s per GFLOP,
        /// once per kernel), by default 20; a larger kernel is compared
        /// with its heuristic schedule's output instead, which the CPU
        /// checks at 64 sampled elements (dot products, rows) within it.
        #[arg(long)]
        max_gflop: Option<f64>,
        #[command(flatten)]
        krate: CrateArgs,
    },
    /// One kernel's schedule space: knobs, size, valid fraction, the
    /// constraints that reject points, and the model's best-ranked points.
    Space {
        /// The kernel's name (its function name).
        kernel: String,
        /// The GPU architecture: sm_80, sm_86, sm_89 or sm_90.
        #[arg(long, default_value = "sm_80")]
        target: SmVersion,
        /// How many of the model's best-ranked points to show.
        #[arg(long, default_value_t = 5)]
        top: usize,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        krate: CrateArgs,
    },
    /// Static measures of one kernel's machine code: registers, spills,
    /// shared memory, occupancy, the main loop's instruction mix and load
    /// widths (needs ptxas and nvdisasm: `cargo xtask setup`).
    Inspect {
        /// The kernel's name (its function name).
        kernel: String,
        /// The GPU architecture: sm_80, sm_86, sm_89 or sm_90.
        #[arg(long, default_value = "sm_80")]
        target: SmVersion,
        /// `default` (the heuristic choice), `best` (the tuning database's
        /// winner for the target) or a schedule as JSON.
        #[arg(long, default_value = "default")]
        schedule: String,
        /// Print the measures as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        krate: CrateArgs,
    },
    /// Score a search strategy on a recorded tuning space (a Kernel Tuner
    /// cache file) over many seeds: the evaluations each needs to get
    /// within 5% of the optimum (median, its 95% interval and quartiles),
    /// how many seeds get there within the budget, and the area under the
    /// best-so-far curve (1 would be the optimum from the first evaluation).
    Replay {
        /// A Kernel Tuner cache file, JSON, gzipped or not (e.g.
        /// ../shared/data/tuning-spaces/gemm/RTX_3090.json.gz).
        #[arg(long)]
        space: PathBuf,
        /// random, coordinate_descent, evolutionary (the default search),
        /// evolutionary-knn; with the `xgboost` feature also
        /// evolutionary-xgb-rank, evolutionary-xgb-reg.
        #[arg(long, default_value = "evolutionary")]
        strategy: String,
        /// A recording of the same kernel on another GPU (repeatable): the
        /// search starts from its winner, as a build's search starts from
        /// the database's winners for other GPUs. Evolutionary strategies
        /// only.
        #[arg(long)]
        known: Vec<PathBuf>,
        /// Runs of the strategy, with seeds 0 to N-1.
        #[arg(long, default_value_t = 50, value_parser = at_least_one::<u64>)]
        seeds: u64,
        /// Evaluations per seed (failed configurations count).
        #[arg(long, default_value_t = 1000, value_parser = at_least_one::<usize>)]
        budget: usize,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Search the kernels' schedule spaces under one budget of trials and
    /// seconds, spread over the kernels where it saves the most time, and
    /// write the winners to the database.
    Tune {
        #[command(flatten)]
        options: tune::Options,
        #[command(flatten)]
        krate: CrateArgs,
    },
    /// Write an HTML report of the last `tune` run, with SVG plots.
    Report {
        #[command(flatten)]
        options: report::Options,
        #[command(flatten)]
        krate: CrateArgs,
    },
    /// Inspect and check the tuning database: show, verify, diff, merge,
    /// prune.
    Db {
        #[command(subcommand)]
        command: db::Command,
    },
}

fn main() {
    // `tune` measures in a child process that is this executable again.
    ktune_measure::worker_main_if_requested();
    let mut args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_none_or(|a| a != "ktune") {
        args.insert(1, "ktune".into());
    }
    let Cargo::Ktune(cli) = Cargo::parse_from(args);
    if !cli.command.talks_to_a_worker() {
        end_quietly_when_stdout_closes();
    }
    if let Err(e) = run(cli) {
        eprintln!("error: {}", chain(&e));
        std::process::exit(1);
    }
}

/// A count of at least one, for the options where 0 would do nothing.
fn at_least_one<T>(text: &str) -> Result<T, String>
where
    T: std::str::FromStr<Err = std::num::ParseIntError> + PartialEq + From<u8>,
{
    match text.parse::<T>() {
        Ok(n) if n == T::from(0) => Err("0 would do nothing; give at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// An error and its causes, `: `-separated, leaving out a cause the message
/// before it already ends with (an error whose message includes its
/// source's, as the library crates' do for callers that print one level).
fn chain(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain().map(ToString::to_string) {
        if text.is_empty() {
            text = cause;
        } else if !text.ends_with(&cause) {
            text = format!("{text}: {cause}");
        }
    }
    text
}

impl Command {
    /// Whether the command measures through a worker process, over pipes.
    fn talks_to_a_worker(&self) -> bool {
        match self {
            Command::Tune { .. } => true,
            Command::Verify { device, .. } => *device == verify::Device::Gpu,
            _ => false,
        }
    }
}

/// A command's output piped to a reader that stops early (`cargo ktune db
/// show | head`) ends it quietly, as it does other command-line tools:
/// Rust ignores `SIGPIPE`, so the next print would panic. Not for commands
/// that talk to a measurement worker over pipes, where a worker's death
/// must be an error the search handles, not the end of the search.
fn end_quietly_when_stdout_closes() {
    #[cfg(unix)]
    // SAFETY: before any other thread exists, restoring a signal's default
    // disposition touches no Rust state.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Status { json, krate } => status::status(&krate, json),
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
            max_gflop,
            krate,
        } => verify::verify(
            &krate,
            &verify::Options {
                sample,
                seed,
                json,
                device,
                max_gflop,
            },
        ),
        Command::Space {
            kernel,
            target,
            top,
            json,
            krate,
        } => space::space(&krate, &kernel, target, top, json),
        Command::Inspect {
            kernel,
            target,
            schedule,
            json,
            krate,
        } => inspect::inspect(&krate, &kernel, target, &schedule, json),
        Command::Db { command } => db::run(command),
        Command::Tune { options, krate } => tune::tune(&krate, &options),
        Command::Report { options, krate } => report::report(&krate, &options),
        Command::Replay {
            space,
            strategy,
            known,
            seeds,
            budget,
            json,
        } => replay::replay(&replay::Options {
            space: &space,
            strategy: &strategy,
            known: &known,
            seeds,
            budget,
            json,
        }),
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
    crate_of(selected(&meta, args)?)
}

/// The package `args` name in the workspace `meta` describes.
pub(crate) fn selected<'a>(
    meta: &'a cargo_metadata::Metadata,
    args: &CrateArgs,
) -> Result<&'a cargo_metadata::Package> {
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
    Ok(package)
}

/// A package's kernels, found in its `src/`, and its ktune settings.
pub(crate) fn crate_of(package: &cargo_metadata::Package) -> Result<Crate> {
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

impl Crate {
    /// The kernel named `name`, or an error listing the crate's kernels.
    pub(crate) fn kernel(&self, name: &str) -> Result<&Found> {
        self.kernels
            .iter()
            .find(|f| f.kernel.name == name)
            .with_context(|| {
                let names: Vec<&str> = self
                    .kernels
                    .iter()
                    .map(|f| f.kernel.name.as_str())
                    .collect();
                format!(
                    "no kernel `{name}` in crate `{}`; its kernels: {}",
                    self.name,
                    names.join(", ")
                )
            })
    }
}

fn ptx(args: &CrateArgs, name: &str, target: SmVersion, schedule: &str) -> Result<()> {
    let krate = load_crate(args)?;
    let found = krate.kernel(name)?;
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

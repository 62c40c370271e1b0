//! `cargo ktune tune`: search the schedule spaces of a crate's kernels
//! under one budget and write the winners to its database.
//!
//! The budget (trials and seconds) is spread over the kernels by the
//! campaign's scheduler; measurements run in a worker process (this
//! executable, started again), so a crashing candidate costs only itself.
//! Every measurement goes to a journal under the target directory: a run
//! that is interrupted and started again measures only what is new. The
//! run's evaluations, in order, are kept for `cargo ktune report`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use ktune_build::scan::Found;
use ktune_build::tune::{
    Campaign, CampaignResult, DeviceTarget, Method, Observer, Progress, Step, Task, Timing,
    WorkerBench, measured_line,
};
use ktune_core::canon;
use ktune_core::db::{Gpu, MeasuredOn};
use ktune_core::schedule::Schedule;
use ktune_measure::DeviceKind;
use ktune_search::session::Deadline;
use serde::{Deserialize, Serialize};

use crate::{Crate, CrateArgs, load_crate};

/// Evaluations per kernel when no `--trials` is given.
const TRIALS_PER_KERNEL: usize = 64;
/// Seconds per kernel when no `--seconds` is given.
const SECONDS_PER_KERNEL: u64 = 300;

/// Raised by a run's first Ctrl-C.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Where `tune` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Device {
    /// The GPU when there is one, else an error.
    Auto,
    /// The first CUDA GPU.
    Gpu,
    /// ktune's virtual GPU: verified candidates, estimated times; its
    /// records are marked and never chosen for a real GPU.
    Vgpu,
}

/// Where the winners go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Destination {
    /// The crate's committed database.
    Crate,
    /// The per-user cache.
    User,
}

/// The options of `cargo ktune tune`.
#[derive(Debug, Args)]
pub struct Options {
    /// Kernels to tune (default: all of the crate's).
    pub kernels: Vec<String>,
    /// Where to measure.
    #[arg(long, value_enum, default_value = "auto")]
    pub device: Device,
    /// Measurements over all kernels (default: 64 per kernel).
    #[arg(long, value_parser = crate::at_least_one::<usize>)]
    pub trials: Option<usize>,
    /// Wall-clock seconds for the whole run (default: 300 per kernel).
    #[arg(long, value_parser = crate::at_least_one::<u64>)]
    pub seconds: Option<u64>,
    /// Threads compiling a batch of candidates ahead of its measurements
    /// (default: `NUM_JOBS`, else the machine's cores).
    #[arg(short, long, value_parser = crate::at_least_one::<u16>)]
    pub jobs: Option<u16>,
    /// evolutionary (a learned cost model; XGBoost when built with the
    /// `xgboost` feature), bounded (the heuristic model's best),
    /// coordinate_descent or random.
    #[arg(long, default_value = "evolutionary")]
    pub strategy: Method,
    /// KERNEL=W: the kernel runs W times as often as the others (its time
    /// is worth W times as much); repeatable.
    #[arg(long = "weight", value_parser = parse_weight)]
    pub weights: Vec<(String, f64)>,
    /// Where the winners go.
    #[arg(long, value_enum, default_value = "crate")]
    pub write: Destination,
    /// The database `--write crate` writes (default: the crate's
    /// `tuning/ktune.json`).
    #[arg(long)]
    pub database: Option<PathBuf>,
    /// Print the run as JSON.
    #[arg(long)]
    pub json: bool,
    /// Scan this folder's sources for kernels instead of a Cargo package
    /// (on a machine without cargo, as the GPU bundle runs).
    #[arg(long, conflicts_with_all = ["manifest_path", "package"])]
    pub sources: Option<PathBuf>,
    /// Where the journal, the log and the run's history go (default:
    /// `ktune/` in the target directory).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
}

/// Parses `NAME=WEIGHT`.
pub fn parse_weight(text: &str) -> Result<(String, f64), String> {
    let (name, weight) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not NAME=WEIGHT"))?;
    let weight: f64 = weight
        .parse()
        .ok()
        .filter(|w: &f64| w.is_finite() && *w > 0.0)
        .ok_or_else(|| {
            format!("the weight of `{name}` must be a positive number, not `{weight}`")
        })?;
    Ok((name.to_owned(), weight))
}

/// What a `tune` run did, as `cargo ktune report` reads it back.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct History {
    pub date: String,
    pub krate: String,
    pub gpu: Gpu,
    pub measured_on: MeasuredOn,
    pub target: String,
    pub strategy: String,
    /// The budget of trials (those run are the kernels' steps).
    pub trials: usize,
    pub seconds: f64,
    /// Ended early by Ctrl-C.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    pub kernels: Vec<KernelHistory>,
}

/// One kernel's part of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KernelHistory {
    pub kernel: String,
    pub shape: Vec<(String, u32)>,
    pub weight: f64,
    pub rounds: usize,
    pub default_us: Option<f64>,
    pub best_us: Option<f64>,
    pub best: Option<Schedule>,
    pub steps: Vec<Step>,
}

/// The file a `tune` run's history is kept in, in its work folder.
pub fn history_path(work: &Path) -> PathBuf {
    work.join("tune-history.json")
}

/// The work folder `tune` and `report` use: `explicit`, else `ktune/` in
/// the target directory of the crate `args` names.
pub fn work_dir(args: &CrateArgs, explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(dir) = explicit {
        return Ok(dir.to_owned());
    }
    let mut cmd = cargo_metadata::MetadataCommand::new();
    cmd.no_deps();
    if let Some(path) = &args.manifest_path {
        cmd.manifest_path(path);
    }
    let meta = cmd.exec().context("cannot read the crate's metadata")?;
    Ok(meta.target_directory.into_std_path_buf().join("ktune"))
}

/// The kernels of the `.rs` files under `dir`, as a crate named after the
/// folder, with no declared targets: for a machine without cargo.
fn crate_of_sources(dir: &Path) -> Result<Crate> {
    let scan = ktune_build::scan::scan(dir, &[dir.to_owned()])?;
    Ok(Crate {
        name: dir.file_name().map_or_else(
            || "sources".to_owned(),
            |n| n.to_string_lossy().into_owned(),
        ),
        root: dir.to_owned(),
        metadata: ktune_build::manifest::Metadata::default(),
        kernels: scan.kernels,
    })
}

pub fn tune(args: &CrateArgs, options: &Options) -> Result<()> {
    let krate = match &options.sources {
        Some(dir) => crate_of_sources(dir)?,
        None => load_crate(args)?,
    };
    let selected: Vec<&Found> = if options.kernels.is_empty() {
        krate.kernels.iter().collect()
    } else {
        options
            .kernels
            .iter()
            .map(|name| krate.kernel(name))
            .collect::<Result<_>>()?
    };
    if selected.is_empty() {
        bail!("crate `{}` has no #[tuned_kernel]s to tune", krate.name);
    }
    for (name, _) in &options.weights {
        if !selected.iter().any(|f| f.kernel.name == *name) {
            bail!("--weight names `{name}`, which is not among the kernels being tuned");
        }
    }
    let kind = match options.device {
        Device::Vgpu => DeviceKind::Vgpu,
        Device::Gpu => DeviceKind::Gpu { ordinal: 0 },
        Device::Auto => ktune_measure::detect().context(
            "no GPU found; `--device vgpu` tunes on ktune's virtual GPU (verified candidates, \
             estimated times, records marked and never chosen for a real GPU)",
        )?,
    };
    let device = DeviceTarget::of(kind, &krate.metadata.targets)?;
    let selected = searchable_on(&device, selected, !options.kernels.is_empty())?;
    let database = options
        .database
        .clone()
        .unwrap_or_else(|| krate.root.join(ktune_build::db::DEFAULT_PATH));
    let known = known_winners(&database)?;
    let tasks: Vec<(Task<'_>, f64)> = selected
        .iter()
        .map(|f| {
            let checksum = canon::checksum(&f.kernel);
            let known: Vec<Schedule> = known
                .iter()
                .filter(|(c, _)| *c == checksum)
                .map(|(_, s)| s.clone())
                .collect();
            let weight = options
                .weights
                .iter()
                .find(|(n, _)| *n == f.kernel.name)
                .map_or(1.0, |(_, w)| *w);
            (
                Task::new(&f.kernel, &f.source, device.target, &known),
                weight,
            )
        })
        .collect();
    let trials = options.trials.unwrap_or(TRIALS_PER_KERNEL * tasks.len());
    let seconds = options
        .seconds
        .unwrap_or(SECONDS_PER_KERNEL * tasks.len() as u64);
    let work = work_dir(args, options.work_dir.as_deref())?;
    let campaign = Campaign {
        tasks,
        method: options.strategy,
        evaluations: trials,
        deadline: Deadline::at(Instant::now() + Duration::from_secs(seconds))
            .or_interrupt(&INTERRUPTED),
        journals: Some(work.join("journal")),
    };
    eprintln!(
        "tuning {} of `{}` on {device}, {} strategy, up to {trials} trials and {seconds} s",
        ktune_build::counted(campaign.tasks.len(), "kernel"),
        krate.name,
        options.strategy
    );
    let jobs = options
        .jobs
        .map_or_else(ktune_measure::default_jobs, usize::from);
    let mut bench = WorkerBench::with_jobs(device.clone(), jobs)?;
    let mut observer = Bar::new(trials as u64, &work.join("tune.log"));
    stop_gracefully_on_interrupt(observer.bar.clone())?;
    let result = campaign.run(&mut bench, &mut observer);
    observer.finish();

    let destination = match options.write {
        Destination::Crate => database,
        Destination::User => ktune_build::layer::user_cache_path(&krate.name)
            .context("no per-user cache folder on this system; use `--write crate`")?,
    };
    // A kernel the run's time (or an interrupt) left with the default alone
    // measured gets no record, which would stop a build's search of it.
    let interrupted = result.interrupted;
    let out_of_time = interrupted || result.elapsed >= Duration::from_secs(seconds);
    let (records, unrecorded): (Vec<_>, Vec<_>) = result
        .runs
        .iter()
        .filter_map(|r| r.tuned.as_ref().map(|t| (r, t)))
        .partition(|(_, t)| !(out_of_time && t.evaluations <= 1));
    let (cut, advice) = if interrupted {
        ("interrupted", "")
    } else {
        ("out of time", " (give it more --seconds)")
    };
    for (run, _) in &unrecorded {
        eprintln!(
            "{}: {cut} with the default alone measured; not recorded{advice}",
            run.kernel
        );
    }
    let records: Vec<_> = records.into_iter().map(|(_, t)| t.record.clone()).collect();
    if !records.is_empty() {
        ktune_build::db::bank(&destination, records)?;
    }
    let history = history_of(&krate.name, &device, options, trials, &selected, &result);
    let path = history_path(&work);
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    std::fs::write(&path, serde_json::to_string_pretty(&history)?)
        .with_context(|| format!("cannot write {}", path.display()))?;
    if options.json {
        println!("{}", serde_json::to_string_pretty(&history)?);
    } else {
        print_summary(&history, &destination, &path);
    }
    Ok(())
}

/// Makes Ctrl-C end the run as its time running out would: the
/// measurement in progress finishes (the worker, in a process group of its
/// own, does not get the signal), none starts after it, and what was found
/// is recorded and summed up. A second Ctrl-C ends it at once; the journal
/// keeps every finished measurement for the next run. Says so above the
/// progress `bar`.
fn stop_gracefully_on_interrupt(bar: ProgressBar) -> Result<()> {
    ctrlc::set_handler(move || {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        say(
            &bar,
            "interrupted: finishing the measurement in progress, then recording what was found \
             (Ctrl-C again to stop at once)",
        );
    })
    .context("cannot catch Ctrl-C")
}

/// The kernels of `selected` the device can search: on the virtual GPU, a
/// kernel too large for it is an error when named, else left out with a
/// note (an error when that leaves none).
fn searchable_on<'k>(
    device: &DeviceTarget,
    selected: Vec<&'k Found>,
    named: bool,
) -> Result<Vec<&'k Found>> {
    if device.measured_on != MeasuredOn::Vgpu {
        return Ok(selected);
    }
    let mut fit = Vec::new();
    for found in selected {
        match ktune_measure::vgpu_searchable(&found.kernel) {
            Ok(()) => fit.push(found),
            Err(too_large) if named => bail!("{too_large}; tune it on a GPU"),
            Err(too_large) => eprintln!("left out: {too_large}"),
        }
    }
    if fit.is_empty() {
        bail!("every kernel is too large for the virtual GPU; tune them on a GPU");
    }
    Ok(fit)
}

/// `(checksum, schedule)` of the database's winners measured on real GPUs.
fn known_winners(database: &Path) -> Result<Vec<(String, Schedule)>> {
    if !database.exists() {
        return Ok(Vec::new());
    }
    let db = ktune_build::db::open(database)?;
    Ok(db
        .records
        .iter()
        .filter(|r| r.provenance.measured_on == MeasuredOn::Gpu)
        .map(|r| (r.checksum.clone(), r.schedule.clone()))
        .collect())
}

fn history_of(
    krate: &str,
    device: &DeviceTarget,
    options: &Options,
    trials: usize,
    selected: &[&Found],
    result: &CampaignResult,
) -> History {
    let kernels = result
        .runs
        .iter()
        .zip(selected)
        .map(|(run, found)| {
            let tuned = run.tuned.as_ref();
            KernelHistory {
                kernel: run.kernel.clone(),
                shape: found.kernel.shape().collect(),
                weight: run.weight,
                rounds: run.rounds,
                default_us: tuned.and_then(|t| t.record.stats.baseline_us),
                best_us: tuned.map(|t| t.record.stats.median_us),
                best: tuned.map(|t| t.record.schedule.clone()),
                steps: tuned.map(|t| t.history.clone()).unwrap_or_default(),
            }
        })
        .collect();
    History {
        date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        krate: krate.to_owned(),
        gpu: device.gpu.clone(),
        measured_on: device.measured_on,
        target: device.target.to_string(),
        strategy: options.strategy.to_string(),
        trials,
        seconds: result.elapsed.as_secs_f64(),
        interrupted: result.interrupted,
        kernels,
    }
}

fn print_summary(history: &History, database: &Path, path: &Path) {
    println!(
        "{:<16} {:>6} {:>6} {:>12} {:>12} {:>8}  schedule",
        "kernel", "trials", "rounds", "default µs", "best µs", "speed-up"
    );
    for k in &history.kernels {
        let us = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
        let speedup = match (k.default_us, k.best_us) {
            (Some(d), Some(b)) => format!("{:.2}×", d / b),
            _ => "-".to_owned(),
        };
        println!(
            "{:<16} {:>6} {:>6} {:>12} {:>12} {:>8}  {}",
            k.kernel,
            k.steps.len(),
            k.rounds,
            us(k.default_us),
            us(k.best_us),
            speedup,
            k.best
                .as_ref()
                .map_or("nothing measured".into(), Schedule::to_json)
        );
    }
    let tuned = history.kernels.iter().filter(|k| k.best.is_some()).count();
    println!(
        "tuned {tuned} of {} in {:.1} s{}; winners in {}; history in {} (`cargo ktune report`)",
        ktune_build::counted(history.kernels.len(), "kernel"),
        history.seconds,
        if history.interrupted {
            " (interrupted)"
        } else {
            ""
        },
        database.display(),
        path.display()
    );
    if history.measured_on == MeasuredOn::Vgpu {
        println!(
            "measured on the virtual GPU: the records are marked and never chosen for a real GPU"
        );
    }
}

/// Progress on the terminal: a bar over the trials, a line per measured
/// candidate above it (plain lines when stderr is not a terminal), and the
/// same lines in the log under the target directory.
struct Bar {
    bar: ProgressBar,
    log: Progress,
}

impl Bar {
    fn new(trials: u64, log: &Path) -> Bar {
        let bar = if std::io::stderr().is_terminal() {
            ProgressBar::new(trials)
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} trials, {elapsed} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Bar {
            bar,
            log: Progress::log_only(log),
        }
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// A line above the progress bar, or on standard error when there is no
/// terminal to draw it on.
fn say(bar: &ProgressBar, text: &str) {
    if bar.is_hidden() {
        eprintln!("{text}");
    } else {
        bar.println(text);
    }
}

impl Observer for Bar {
    fn measured(&mut self, schedule: &Schedule, result: &Result<Timing, String>) {
        self.bar.inc(1);
        let line = measured_line(schedule, result);
        self.log.line(&line);
        say(&self.bar, &line);
    }

    fn line(&mut self, text: &str) {
        self.log.line(text);
        self.bar.set_message(text.to_owned());
        say(&self.bar, text);
    }
}

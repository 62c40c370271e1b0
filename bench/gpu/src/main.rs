//! `ktune-bench`: ktune's kernels on a real GPU against cuBLAS and the
//! copy bandwidth. See README.md beside this crate's Cargo.toml.
//!
//! Exit status: 0 when every case ran cleanly, 1 when a case recorded an
//! error (or the dry run found a schedule that does not lower or
//! assemble), 2 for a bad command line, 3 when there is no GPU.

mod agree;
mod blas;
mod gpu;
mod run;

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use clap::Parser;
use ktune_bench::agreement::AgreeResults;
use ktune_bench::cases;
use ktune_bench::fit;
use ktune_bench::plan;
use ktune_bench::report::{self, Results, iso_date};
use ktune_core::SmVersion;

use crate::agree::Compiler;
use crate::blas::Blas;
use crate::gpu::{Gpu, OpenError};
use crate::run::{Policy, Runner};

/// Exit status when there is no GPU to benchmark on.
const EXIT_NO_GPU: u8 = 3;

/// ktune's GPU benchmark: the default schedule, what a build's bounded
/// search would pick, and the best of a seeded sample of the schedule
/// space, checked against a CPU reference and timed
/// against cuBLAS (matmuls) or the device's copy bandwidth (row kernels).
#[derive(Debug, Parser)]
#[command(name = "ktune-bench", version)]
struct Cli {
    /// Cases or groups to run, comma-separated: `all`, or names from `--list`.
    #[arg(long, default_value = "all")]
    cases: String,
    /// Schedules sampled from each case's space, besides the default.
    #[arg(long, default_value_t = 32)]
    sample: usize,
    /// Evaluations of `max-autotune`'s search of each case's space (the
    /// evolutionary search a `--features max-autotune` build runs, its
    /// default schedule first), each screened like a sampled schedule,
    /// after the sample and within the case's share of `--budget-s`; the
    /// schedule it finds is re-measured in full. 0: no search.
    #[arg(long, default_value_t = 0)]
    search: usize,
    /// Seed of the sample and of the inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Fewer timed runs (5 to 20 per measurement, 1 per screened schedule).
    #[arg(long)]
    quick: bool,
    /// Leave out schedules with a producer warpgroup (`producer` 1 or 2)
    /// from the alternatives, the bounded search's candidates and the
    /// sample (the search's evaluations of such points fail unrun), or
    /// with `--agree` from the suite's runs: for a GPU
    /// on which the runtime's producer test failed. Should their memory
    /// barriers never complete, the kernel ends with a trap, which leaves
    /// the process's CUDA context unusable for every run after.
    #[arg(long, conflicts_with_all = ["fit", "dry_run", "list"])]
    without_producer: bool,
    /// Likewise, only the schedules whose producer copies by tensor maps
    /// (`tma = 1`): for a GPU on which the runtime's tensor-map test
    /// failed.
    #[arg(long, conflicts_with_all = ["fit", "dry_run", "list"])]
    without_tma: bool,
    /// Likewise, only the schedules whose blocks pair up in clusters that
    /// share B's tiles by multicast (`cluster_m = 2`): for a GPU on which
    /// the runtime's multicast test failed.
    #[arg(long, conflicts_with_all = ["fit", "dry_run", "list"])]
    without_cluster: bool,
    /// Wall-clock seconds for the whole run; each case gets an equal share
    /// of what is left, and stops screening schedules when its share is
    /// spent (the baseline and default are always measured, and the
    /// fastest screened re-measured).
    #[arg(long, default_value_t = 210.0)]
    budget_s: f64,
    /// The results file [default: $OUT/bench.json when OUT is set, else bench.json].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Without a GPU: list the cases, their default schedule, the bounded
    /// search's candidates and the sample, lower each and assemble it with
    /// ptxas where one is found.
    #[arg(long)]
    dry_run: bool,
    /// The target the dry run lowers for (a GPU run uses the GPU's own).
    #[arg(long, default_value = "sm_90")]
    target: SmVersion,
    /// Print the selected cases as JSON (for torch_baseline.py) and exit.
    #[arg(long)]
    list: bool,
    /// Instead of benchmarking: run the virtual GPU's verification suite on
    /// this GPU too, check both devices against the CPU reference and
    /// compare them point by point, within `--budget-s`; writes the results
    /// to `--out` [default: $OUT/agree.json when OUT is set, else
    /// agree.json]. The GPU's code is assembled by ptxas where one is found
    /// (`KTUNE_PTXAS`, a `.venv`, `PATH`), in parallel; else, or with
    /// `--jit`, the driver compiles the PTX, one module at a time.
    #[arg(long, conflicts_with_all = ["cases", "dry_run", "list", "quick"])]
    agree: bool,
    /// With `--agree`: the driver compiles the PTX, as ktune's runtime
    /// does, even where ptxas is found.
    #[arg(long, requires = "agree")]
    jit: bool,
    /// With `--agree`: instead of the suite's catalogue, the kernels
    /// `ktune_vgpu::random` writes from these seeds (`FIRST..END`; the
    /// virtual GPU's random-kernel test runs `0..200`); a failure quotes
    /// its kernel's source.
    #[arg(long, value_name = "FIRST..END", requires = "agree", value_parser = ktune_vgpu::random::seeds)]
    random: Option<Range<u64>>,
    /// With `--agree`: only the catalogue's kernels whose names start with
    /// this (`mma_`: the tensor-core kernels, warpgroups included).
    #[arg(
        long,
        value_name = "PREFIX",
        requires = "agree",
        conflicts_with = "random"
    )]
    only: Option<String>,
    /// Without a GPU: how well the heuristic model ranks the schedules a
    /// results file (`bench.json`) measured, case by case, as a table
    /// (`--json`: with every schedule's estimate beside its time).
    #[arg(long, value_name = "BENCH_JSON", conflicts_with_all = ["agree", "dry_run", "list"])]
    fit: Option<PathBuf>,
    /// With `--fit`: print JSON, every measured schedule with its estimate.
    #[arg(long, requires = "fit")]
    json: bool,
}

impl Cli {
    /// The schedules `--without-producer`, `--without-tma` and
    /// `--without-cluster` leave out.
    fn left_out(&self) -> plan::LeftOut {
        plan::LeftOut {
            producer: self.without_producer,
            tma: self.without_tma,
            cluster: self.without_cluster,
        }
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ktune-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    if let Some(path) = &cli.fit {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let results: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        let fits = fit::fit(&results).with_context(|| format!("reading {}", path.display()))?;
        if cli.json {
            println!("{}", serde_json::to_string_pretty(&fit::json(&fits))?);
        } else {
            print!("{}", fit::table(&fits));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let selected = cases::select(&cli.cases).map_err(anyhow::Error::msg)?;
    if cli.list {
        let list: Vec<serde_json::Value> = selected
            .iter()
            .map(|c| {
                let shape: serde_json::Map<String, serde_json::Value> = c
                    .shape
                    .iter()
                    .map(|(d, n)| ((*d).to_owned(), (*n).into()))
                    .collect();
                let dtype = c.dtype().map(|d| d.name()).unwrap_or_default();
                serde_json::json!({
                    "name": c.name, "group": c.group, "kind": c.kind,
                    "dtype": dtype, "shape": shape, "baseline": c.kind.baseline(),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    if cli.dry_run {
        let ptxas = ktune_build::ptxas::find();
        let summary = plan::dry_run(
            &selected,
            cli.target,
            cli.sample,
            cli.seed,
            ptxas.as_deref(),
            &mut std::io::stdout().lock(),
        )?;
        return Ok(if summary.failures.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }

    let mut gpu = match Gpu::open() {
        Ok(gpu) => gpu,
        Err(OpenError::NoGpu(why)) => {
            eprintln!(
                "ktune-bench: no GPU to benchmark on ({why}); `ktune-bench --dry-run` checks the cases without one"
            );
            return Ok(ExitCode::from(EXIT_NO_GPU));
        }
        Err(OpenError::Failed(e)) => return Err(e.context("opening the GPU")),
    };
    let out_file = |name: &str| {
        cli.out
            .clone()
            .or_else(|| std::env::var_os("OUT").map(|dir| PathBuf::from(dir).join(name)))
            .unwrap_or_else(|| PathBuf::from(name))
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if cli.agree {
        let out = out_file("agree.json");
        let started = Instant::now();
        let ptxas = ktune_build::ptxas::find().filter(|_| !cli.jit);
        let compiler = ptxas.as_deref().map_or(Compiler::Driver, Compiler::Ptxas);
        let deadline = started + Duration::from_secs_f64(cli.budget_s.max(0.0));
        let date = iso_date(now);
        let finish = |results: &AgreeResults| {
            for failure in &results.failures {
                println!("{failure}");
            }
            println!(
                "{} of {} runs exactly specified, {} identical on both devices, {} skipped (targets newer than the GPU), {} left out (a producer warpgroup), {} not run (time budget spent), in {:.1} s",
                results.exact_points,
                results.points,
                results.identical_points,
                results.skipped_points,
                results.left_out_points,
                results.out_of_time_points,
                started.elapsed().as_secs_f64()
            );
            println!("{}", results.summary);
            write(&out, results)?;
            eprintln!("ktune-bench: results in {}", out.display());
            anyhow::Ok(())
        };
        let stopped = |results: AgreeResults| {
            eprintln!(
                "ktune-bench: stopped: {}",
                results.stopped.as_deref().unwrap_or_default()
            );
            if let Err(e) = finish(&results) {
                eprintln!("ktune-bench: {e:#}");
            }
        };
        if let Some(prefix) = &cli.only
            && !ktune_vgpu::suite::catalogue()
                .iter()
                .any(|e| e.kernel.name.starts_with(prefix.as_str()))
        {
            anyhow::bail!(
                "--only {prefix}: no kernel of the verification suite's catalogue is named so"
            );
        }
        let kernels = cli.random.clone().map_or(
            agree::Kernels::Catalogue(cli.only.clone()),
            agree::Kernels::Random,
        );
        let results = agree::agree(
            &gpu,
            &kernels,
            compiler,
            cli.left_out(),
            deadline,
            &date,
            stopped,
        )
        .results(&gpu, date);
        finish(&results)?;
        return Ok(if results.failures.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let out = out_file("bench.json");
    let blas = match Blas::open(&gpu) {
        Ok((blas, version)) => {
            gpu.info.cublas_version = Some(version);
            Ok(blas)
        }
        Err(e) => {
            eprintln!("ktune-bench: {e:#}; the matmul cases run without their baseline");
            Err(format!("{e:#}"))
        }
    };
    let policy = Policy::new(cli.quick);
    let mut results = Results {
        tool: "ktune-bench",
        ktune_version: env!("CARGO_PKG_VERSION"),
        generator_version: ktune_core::GENERATOR_VERSION,
        date: iso_date(now),
        gpu: gpu.info.clone(),
        settings: policy.settings(
            (cli.sample, cli.search),
            cli.seed,
            (cli.quick, cli.left_out()),
            cli.budget_s,
        ),
        memory: None,
        cases: Vec::new(),
    };
    eprintln!(
        "ktune-bench: {} (compute capability {}, {} SMs, {} MB L2, CUDA {}), {} cases, budget {} s",
        gpu.info.name,
        gpu.info.compute_capability,
        gpu.info.sm_count,
        gpu.info.l2_bytes >> 20,
        gpu.info.cuda_version,
        selected.len(),
        cli.budget_s
    );

    let start = Instant::now();
    match gpu.memory_probe() {
        Ok(memory) => {
            eprintln!(
                "ktune-bench: reads stream at {:.0} GB/s from L2, {:.0} GB/s from DRAM",
                memory.l2_read_bytes_per_s / 1e9,
                memory.dram_read_bytes_per_s / 1e9
            );
            results.memory = Some(memory);
        }
        Err(e) => eprintln!("ktune-bench: the memory probe failed: {e:#}"),
    }
    let budget = Duration::from_secs_f64(cli.budget_s.max(0.0));
    let mut runner = Runner {
        gpu: &mut gpu,
        blas: blas.as_ref().map_err(Clone::clone),
        policy,
        sample: cli.sample,
        search: cli.search,
        seed: cli.seed,
        left_out: cli.left_out(),
    };
    for (i, case) in selected.iter().enumerate() {
        let left = budget.saturating_sub(start.elapsed());
        let share = left / u32::try_from(selected.len() - i).unwrap_or(u32::MAX);
        let began = Instant::now();
        let result = runner.run(case, began + share);
        eprintln!(
            "ktune-bench: {} in {:.1} s: {} bounded and {} sampled screened, {} errors",
            case.name,
            began.elapsed().as_secs_f64(),
            result.bounded.screened.len(),
            result.sampled.screened.len(),
            result.errors.len()
        );
        for error in &result.errors {
            eprintln!("  {error}");
        }
        results.cases.push(result);
        write(&out, &results)?;
    }
    println!("{}", report::markdown(&results));
    eprintln!("ktune-bench: results in {}", out.display());
    let clean = results.cases.iter().all(|c| c.errors.is_empty());
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Writes the results so far (after every case, so that a run cut short
/// still leaves its measurements).
fn write(path: &Path, results: &impl serde::Serialize) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(results)?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

//! `ktune-bench --agree`: every run of the verification suite, over its
//! catalogue or over random kernels, on this GPU and on the virtual GPU,
//! each output checked against the CPU reference and the two compared (see
//! [`ktune_bench::agreement`]). The virtual GPU
//! and ptxas, assembling the GPU's code, run on every core (the driver,
//! compiling the PTX instead, takes one module at a time); the GPU runs
//! one kernel at a time.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use cudarc::driver::CudaSlice;
use ktune_bench::agreement::{AgreeResults, Comparison, inexact};
use ktune_bench::plan::{LeftOut, Variant};
use ktune_build::ptxas;
use ktune_core::lower::lower;
use ktune_vgpu::suite::{self, Run};
use ktune_vgpu::verify::Failure;

use crate::gpu::{Gpu, Loaded};

/// How long one run may hold the GPU, and how long the comparison may go
/// on past its budget, before it is stopped as stuck.
const STUCK: Duration = Duration::from_secs(60);
const GRACE: Duration = Duration::from_secs(30);
/// How often progress is printed.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// The kernels the suite runs.
#[derive(Debug, Clone)]
pub enum Kernels {
    /// The verification suite's catalogue: its kernels whose names start
    /// with the prefix, or all of them.
    Catalogue(Option<String>),
    /// The kernels [`ktune_vgpu::random`] writes from these seeds.
    Random(Range<u64>),
}

impl Kernels {
    /// What the results file records.
    fn describe(&self) -> String {
        match self {
            Kernels::Catalogue(None) => "the verification suite's catalogue".to_owned(),
            Kernels::Catalogue(Some(prefix)) => {
                format!("the verification suite's catalogue, kernels named {prefix}*")
            }
            Kernels::Random(seeds) => format!(
                "random kernels (ktune_vgpu::random), seeds {}..{}",
                seeds.start, seeds.end
            ),
        }
    }

    /// The entries, and the source of each generated kernel by name.
    fn entries(&self) -> (Vec<suite::Entry>, HashMap<String, String>) {
        match self {
            Kernels::Catalogue(prefix) => (
                suite::catalogue()
                    .into_iter()
                    .filter(|e| prefix.as_ref().is_none_or(|p| e.kernel.name.starts_with(p)))
                    .collect(),
                HashMap::new(),
            ),
            Kernels::Random(seeds) => seeds
                .clone()
                .map(|seed| {
                    let generated = ktune_vgpu::random::kernel(seed);
                    let source = (generated.entry.kernel.name.clone(), generated.source);
                    (generated.entry, source)
                })
                .unzip(),
        }
    }
}

/// What the suite's runs on both devices came to.
pub struct Agreement {
    pub kernels: String,
    pub compiled_by: String,
    pub exact: usize,
    pub identical: usize,
    pub skipped: usize,
    pub left_out: usize,
    pub out_of_time: usize,
    pub report: suite::Report<String>,
}

impl Agreement {
    /// The results file's content.
    pub fn results(self, gpu: &Gpu, date: String) -> AgreeResults {
        let summary = self.report.to_string();
        AgreeResults {
            tool: "ktune-bench --agree",
            ktune_version: env!("CARGO_PKG_VERSION"),
            generator_version: ktune_core::GENERATOR_VERSION,
            date,
            gpu: gpu.info.clone(),
            catalogue: self.kernels,
            compiled_by: self.compiled_by,
            kernels: self.report.kernels,
            shapes: self.report.shapes,
            points: self.report.points,
            exact_points: self.exact,
            identical_points: self.identical,
            skipped_points: self.skipped,
            left_out_points: self.left_out,
            out_of_time_points: self.out_of_time,
            stopped: None,
            failures: self.report.failures,
            summary,
        }
    }
}

/// The counts as runs finish, for progress and for a comparison stopped
/// before its end.
#[derive(Default)]
struct Tally {
    begun: AtomicUsize,
    exact: AtomicUsize,
    identical: AtomicUsize,
    skipped: AtomicUsize,
    left_out: AtomicUsize,
    out_of_time: AtomicUsize,
    on_gpu: AtomicUsize,
    failures: Mutex<Vec<String>>,
    /// The run the GPU has now, and since when.
    running: Mutex<Option<(Instant, String)>>,
}

/// How the GPU's code is made from each run's PTX.
#[derive(Clone, Copy)]
pub enum Compiler<'a> {
    /// The driver compiles the PTX as it loads it, as ktune's runtime does.
    Driver,
    /// `ptxas` assembles it for the GPU first, in parallel runs.
    Ptxas(&'a Path),
}

impl Compiler<'_> {
    /// What the results file records (ptxas's version: a process run).
    fn describe(self) -> String {
        match self {
            Compiler::Driver => "the driver (PTX loaded as ktune's runtime loads it)".to_owned(),
            Compiler::Ptxas(path) => format!(
                "ptxas at {} ({})",
                path.display(),
                ptxas::version(path).unwrap_or_else(|e| e.to_string())
            ),
        }
    }
}

/// Runs the whole suite over `kernels` on `gpu`, its code made by
/// `compiler`, and on the virtual GPU (a generated kernel's failures quote
/// its source); runs that would start after `deadline` are counted, not
/// run. Prints progress every [`PROGRESS_EVERY`]. When one run holds the
/// GPU for [`STUCK`], or the runs go on [`GRACE`] past `deadline`, hands
/// what was found so far to `stopped` and ends the process: a hung launch
/// cannot be taken back. Runs of schedules `left_out` names are counted,
/// not run. Says first, on stderr, what it
/// compares.
pub fn agree(
    gpu: &Gpu,
    kernels: &Kernels,
    compiler: Compiler<'_>,
    left_out: LeftOut,
    deadline: Instant,
    date: &str,
    stopped: impl Fn(AgreeResults) + Sync,
) -> Agreement {
    let compiled_by = compiler.describe();
    let described = kernels.describe();
    eprintln!(
        "ktune-bench: the verification suite over {described} on {} (its code made by {compiled_by}) and on the virtual GPU",
        gpu.info.name
    );
    let tally = Tally::default();
    let device = Mutex::new(gpu);
    let done = AtomicBool::new(false);
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let (catalogue, sources) = kernels.entries();
    let report = std::thread::scope(|scope| {
        scope.spawn(|| {
            if let Some(why) = watch(&tally, deadline, &done) {
                let made = [described.as_str(), &compiled_by];
                stopped(partial(gpu, made, date, &catalogue, &tally, why));
                std::process::exit(1);
            }
        });
        let report = suite::run(&catalogue, workers, |run| {
            tally.begun.fetch_add(1, Ordering::Relaxed);
            let leave_out = left_out.reason(run.schedule).is_some();
            check(gpu, compiler, &device, &tally, run, (deadline, leave_out)).map_err(|e| {
                let e = match sources.get(&run.reference.kernel().name) {
                    Some(source) => format!("{e}\n{source}"),
                    None => e,
                };
                lock(&tally.failures).push(e.clone());
                e
            })
        });
        done.store(true, Ordering::Relaxed);
        report
    });
    Agreement {
        kernels: described,
        compiled_by,
        exact: tally.exact.into_inner(),
        identical: tally.identical.into_inner(),
        skipped: tally.skipped.into_inner(),
        left_out: tally.left_out.into_inner(),
        out_of_time: tally.out_of_time.into_inner(),
        report,
    }
}

/// One run on both devices.
fn check(
    gpu: &Gpu,
    compiler: Compiler<'_>,
    device: &Mutex<&Gpu>,
    tally: &Tally,
    run: &Run<'_>,
    (deadline, leave_out): (Instant, bool),
) -> Result<(), String> {
    if run.target > gpu.target {
        tally.skipped.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }
    if leave_out {
        tally.left_out.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }
    if Instant::now() > deadline {
        tally.out_of_time.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }
    let fail = |kind| run.reference.error(run.schedule, run.target, kind);
    let lowered = lower(run.reference.kernel(), run.schedule, run.target)
        .map_err(|e| fail(Failure::Lower(Box::new(e))).to_string())?;
    let approximate = inexact(&lowered.ptx);
    if approximate.is_none() {
        tally.exact.fetch_add(1, Ordering::Relaxed);
    }
    let (on_vgpu, _) = run
        .reference
        .run_virtual(&lowered)
        .map_err(|f| fail(Failure::Fault(Box::new(f))).to_string())?;
    run.reference
        .compare(&on_vgpu)
        .map_err(|kind| format!("virtual GPU: {}", fail(kind)))?;
    let variant = Variant::of(run.schedule, &lowered, run.target);
    // The code is made on this thread, in parallel with the others; only
    // the run holds the GPU.
    let loaded = match compiler {
        Compiler::Driver => gpu.load(run.reference.kernel(), &variant),
        Compiler::Ptxas(ptxas) => gpu.load_assembled(run.reference.kernel(), &variant, ptxas),
    };
    let on_gpu = loaded
        .and_then(|loaded| {
            let gpu = lock(device);
            *lock(&tally.running) = Some((Instant::now(), describe(run)));
            let output = launch(&gpu, run, &loaded);
            *lock(&tally.running) = None;
            output
        })
        .map_err(|e| format!("GPU: {}: {e:#}", describe(run)))?;
    tally.on_gpu.fetch_add(1, Ordering::Relaxed);
    run.reference
        .compare(&on_gpu)
        .map_err(|kind| format!("GPU: {}", fail(kind)))?;
    let comparison = Comparison::of(run.reference, &on_gpu, &on_vgpu);
    if comparison.differing == 0 {
        tally.identical.fetch_add(1, Ordering::Relaxed);
    }
    if comparison.agrees(approximate) {
        return Ok(());
    }
    let Comparison {
        differing,
        worst,
        index,
    } = comparison;
    let why = match approximate {
        None => "every instruction is exact, so the outputs must be identical".to_owned(),
        Some(inst) => format!("with {inst}, they must agree within the tolerance"),
    };
    Err(format!(
        "{}: the GPU and the virtual GPU differ in {differing} elements, the worst \
         (element {index}) by {worst:.3} tolerances; {why}",
        describe(run)
    ))
}

/// Prints progress until `done`; returns why the comparison must stop if
/// it is stuck.
fn watch(tally: &Tally, deadline: Instant, done: &AtomicBool) -> Option<String> {
    let started = Instant::now();
    let mut printed = started;
    while !done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(200));
        let now = Instant::now();
        let running = lock(&tally.running).clone();
        if let Some((since, run)) = &running
            && now - *since > STUCK
        {
            return Some(format!(
                "the GPU ran {run} for more than {} s without finishing",
                STUCK.as_secs()
            ));
        }
        if now > deadline + GRACE {
            return Some(format!(
                "the runs went on {} s past the time budget",
                GRACE.as_secs()
            ));
        }
        if now - printed >= PROGRESS_EVERY {
            printed = now;
            eprintln!(
                "ktune-bench: {:.0} s: {} runs begun, {} on the GPU, {} failed, {} not run (budget){}",
                (now - started).as_secs_f64(),
                tally.begun.load(Ordering::Relaxed),
                tally.on_gpu.load(Ordering::Relaxed),
                lock(&tally.failures).len(),
                tally.out_of_time.load(Ordering::Relaxed),
                running.map_or(String::new(), |(since, run)| format!(
                    "; the GPU has had {run} for {:.1} s",
                    (now - since).as_secs_f64()
                )),
            );
        }
    }
    None
}

/// The results of a comparison stopped before its end, `why`, over the
/// kernels and with the code made as `made` describes.
fn partial(
    gpu: &Gpu,
    [kernels, compiled_by]: [&str; 2],
    date: &str,
    catalogue: &[suite::Entry],
    tally: &Tally,
    why: String,
) -> AgreeResults {
    let failures = lock(&tally.failures).clone();
    let begun = tally.begun.load(Ordering::Relaxed);
    let summary = format!(
        "stopped after {begun} runs ({} on the GPU): {why}; {} mismatches so far",
        tally.on_gpu.load(Ordering::Relaxed),
        failures.len()
    );
    AgreeResults {
        tool: "ktune-bench --agree",
        ktune_version: env!("CARGO_PKG_VERSION"),
        generator_version: ktune_core::GENERATOR_VERSION,
        date: date.to_owned(),
        gpu: gpu.info.clone(),
        catalogue: kernels.to_owned(),
        compiled_by: compiled_by.to_owned(),
        kernels: catalogue.len(),
        shapes: suite::shaped(catalogue).len(),
        points: begun,
        exact_points: tally.exact.load(Ordering::Relaxed),
        identical_points: tally.identical.load(Ordering::Relaxed),
        skipped_points: tally.skipped.load(Ordering::Relaxed),
        left_out_points: tally.left_out.load(Ordering::Relaxed),
        out_of_time_points: tally.out_of_time.load(Ordering::Relaxed),
        stopped: Some(why),
        failures,
        summary,
    }
}

/// Locks `mutex`, whether or not a thread panicked holding it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The run's kernel, shape, schedule and target, as failures name them.
fn describe(run: &Run<'_>) -> String {
    let kernel = run.reference.kernel();
    let shape: Vec<String> = kernel.shape().map(|(d, n)| format!("{d} = {n}")).collect();
    format!(
        "kernel `{}` ({}) with {} on {}",
        kernel.name,
        shape.join(", "),
        run.schedule.to_json(),
        run.target
    )
}

/// One launch of `loaded` on the reference's inputs and a poisoned output;
/// the output's bytes.
fn launch(gpu: &Gpu, run: &Run<'_>, loaded: &Loaded) -> Result<Vec<u8>> {
    let kernel = run.reference.kernel();
    let inputs = run
        .reference
        .buffers()
        .iter()
        .map(|bytes| gpu.upload(bytes))
        .collect::<Result<Vec<CudaSlice<u8>>>>()?;
    let inputs: Vec<&CudaSlice<u8>> = inputs.iter().collect();
    let mut output = gpu.alloc_poisoned(kernel.output.dtype, run.reference.output().len())?;
    loaded.launch(&gpu.stream, &inputs, &mut output)?;
    gpu.stream.synchronize().context("running the kernel")?;
    gpu.download(&output)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ago(d: Duration) -> Instant {
        Instant::now()
            .checked_sub(d)
            .expect("the clock started long enough ago")
    }

    #[test]
    fn a_run_that_holds_the_gpu_too_long_stops_the_comparison() {
        let tally = Tally::default();
        *lock(&tally.running) = Some((ago(STUCK + Duration::from_secs(1)), "run 7".into()));
        let far = Instant::now() + Duration::from_secs(3600);
        let why = watch(&tally, far, &AtomicBool::new(false)).expect("stuck");
        assert!(why.contains("run 7"), "{why}");
    }

    #[test]
    fn runs_far_past_the_budget_stop_the_comparison() {
        let tally = Tally::default();
        let deadline = ago(GRACE + Duration::from_secs(1));
        let why = watch(&tally, deadline, &AtomicBool::new(false)).expect("past the budget");
        assert!(why.contains("past the time budget"), "{why}");
    }

    #[test]
    fn random_kernels_come_with_their_sources() {
        let (entries, sources) = Kernels::Random(40..43).entries();
        let names: Vec<&str> = entries.iter().map(|e| e.kernel.name.as_str()).collect();
        assert_eq!(names, ["random_40", "random_41", "random_42"]);
        for entry in &entries {
            let source = &sources[&entry.kernel.name];
            assert!(
                source.contains(&format!("fn {}(", entry.kernel.name)),
                "{source}"
            );
        }
        let (catalogue, none) = Kernels::Catalogue(None).entries();
        assert_eq!(catalogue.len(), suite::catalogue().len());
        assert!(none.is_empty());
        let (tensor, _) = Kernels::Catalogue(Some("mma_".into())).entries();
        assert!(!tensor.is_empty() && tensor.len() < catalogue.len());
        assert!(tensor.iter().all(|e| e.kernel.name.starts_with("mma_")));
    }

    #[test]
    fn a_finished_comparison_is_not_stopped() {
        let tally = Tally::default();
        *lock(&tally.running) = Some((Instant::now(), "run 1".into()));
        let far = Instant::now() + Duration::from_secs(3600);
        assert_eq!(watch(&tally, far, &AtomicBool::new(true)), None);
    }
}

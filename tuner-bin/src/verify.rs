//! `cargo ktune verify`: every variant a crate's build would ship, plus
//! sampled points of each kernel's schedule space, run on seeded random
//! inputs and compared with the CPU evaluation of the kernel's IR.
//!
//! On the virtual GPU (the default), shipped variants are checked through
//! their printed PTX text (printed, parsed back, run), so the code checked
//! is the code embedded. On a GPU (`--device gpu`), each point runs in a
//! measurement worker (this executable, started again), its output
//! poisoned first and compared element by element with the CPU evaluation:
//! a wrong result, a fault or a hang fails that point only. Only the
//! variants of targets the GPU runs are checked there. Kernels run at the
//! shapes the crate declares: what is verified is what ships. The virtual
//! GPU runs kernels thread by thread, and the CPU evaluation a GPU's output
//! is compared with walks the IR element by element, so kernels above
//! `--max-gflop` at their shape ([`Options::limit_gflop`]) are listed as
//! not verified rather than run for hours; on a GPU, one whose output
//! dimensions allow sub-problems ([`ktune_vgpu::sample`]) within the limit
//! is verified element by element against its heuristic schedule's output
//! on the GPU, and that output against the CPU at
//! [`ktune_measure::SAMPLED_POINTS`] sampled elements.

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use ktune_build::select;
use ktune_build::tune::DeviceTarget;
use ktune_core::SmVersion;
use ktune_core::ir::Kernel;
use ktune_core::lower::Lowered;
use ktune_core::schedule::Schedule;
use ktune_core::{ptx, space};
use ktune_measure::{DeviceKind, Job, Worker, WorkerConfig};
use ktune_vgpu::sample::Sample;
use ktune_vgpu::verify::Reference;
use serde_json::{Value, json};

use crate::{Crate, CrateArgs, load_crate};

/// Where `verify` runs the kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Device {
    /// ktune's virtual GPU, on the CPU.
    Vgpu,
    /// The first CUDA GPU.
    Gpu,
}

/// The options of `cargo ktune verify`.
pub struct Options {
    pub sample: usize,
    pub seed: u64,
    pub json: bool,
    pub device: Device,
    /// The largest kernel verified, in GFLOP; the device's default when
    /// `None` ([`Options::limit_gflop`]).
    pub max_gflop: Option<f64>,
}

/// The CPU evaluation of a kernel's IR, in GFLOP a second: a 512³ f32
/// product took 3.5 s (0.08 GFLOP/s) on the development machine.
const CPU_REFERENCE_GFLOP_PER_S: f64 = 0.08;

/// On a GPU, the largest kernel whose CPU evaluation `verify` computes by
/// default: about four minutes of it.
const GPU_DEFAULT_MAX_GFLOP: f64 = 20.0;

// The default limit's CPU evaluation fits a measurement worker's usual ten
// minutes.
const _: () = assert!(GPU_DEFAULT_MAX_GFLOP / CPU_REFERENCE_GFLOP_PER_S < 600.0);

impl Options {
    /// The largest kernel verified, in GFLOP: `--max-gflop`, else the
    /// virtual GPU's search limit there, else [`GPU_DEFAULT_MAX_GFLOP`].
    pub fn limit_gflop(&self) -> f64 {
        self.max_gflop.unwrap_or(match self.device {
            Device::Vgpu => ktune_measure::VGPU_MAX_FLOPS as f64 * 1e-9,
            Device::Gpu => GPU_DEFAULT_MAX_GFLOP,
        })
    }
}

/// One schedule point and how it fared.
struct Point {
    target: SmVersion,
    schedule: Schedule,
    shipped: bool,
    result: Result<Checked, String>,
}

/// A point that matched the reference.
struct Checked {
    /// The largest error and the tolerance where it occurred (the virtual
    /// GPU reports them; a GPU only says every element was within its
    /// tolerance).
    error: Option<(f32, f32)>,
    /// Instructions executed (on the virtual GPU).
    instructions: Option<u64>,
}

/// What a kernel's points are compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Evaluation {
    /// The CPU evaluation of the whole output.
    Whole,
    /// The heuristic schedule's output on the GPU, checked by the CPU at
    /// sampled elements.
    Sampled,
}

impl Evaluation {
    /// How `kernel` is verified with `options`; `None` when its evaluation
    /// is over the limit.
    fn of(kernel: &Kernel, options: &Options) -> Option<Evaluation> {
        let limit = options.limit_gflop() * 1e9;
        if kernel.flops() as f64 <= limit {
            return Some(Evaluation::Whole);
        }
        let sampled = Sample::flops(kernel, ktune_measure::SAMPLED_POINTS)
            .is_some_and(|flops| flops as f64 <= limit);
        (options.device == Device::Gpu && sampled).then_some(Evaluation::Sampled)
    }

    fn name(self) -> &'static str {
        match self {
            Evaluation::Whole => "whole",
            Evaluation::Sampled => "sampled",
        }
    }
}

/// One kernel's points.
struct KernelReport {
    name: String,
    shape: Vec<(String, u32)>,
    evaluation: Evaluation,
    points: Vec<Point>,
}

impl KernelReport {
    fn mismatches(&self) -> usize {
        self.points.iter().filter(|p| p.result.is_err()).count()
    }

    /// The verified point whose error is the largest fraction of its
    /// tolerance: (error, tolerance).
    fn worst(&self) -> Option<(f32, f32)> {
        self.points
            .iter()
            .filter_map(|p| p.result.as_ref().ok()?.error)
            .max_by(|a, b| ratio(*a).total_cmp(&ratio(*b)))
    }
}

fn ratio((error, tolerance): (f32, f32)) -> f32 {
    if error == 0.0 {
        0.0
    } else {
        error / tolerance.max(f32::MIN_POSITIVE)
    }
}

pub fn verify(args: &CrateArgs, options: &Options) -> Result<()> {
    let krate = load_crate(args)?;
    let limit = options.limit_gflop();
    let (fit, too_large): (Vec<_>, Vec<_>) = krate
        .kernels
        .iter()
        .partition(|f| Evaluation::of(&f.kernel, options).is_some());
    let reports = match options.device {
        Device::Vgpu => fit
            .into_iter()
            .map(|found| verify_kernel(&krate, found, options))
            .collect::<Result<Vec<_>>>()?,
        Device::Gpu => verify_on_gpu(&krate, &fit, options)?,
    };
    let points: usize = reports.iter().map(|r| r.points.len()).sum();
    let mismatches: usize = reports.iter().map(KernelReport::mismatches).sum();
    let summary = format!(
        "verified {} kernels, {points} schedule points, {} shapes: {mismatches} mismatches",
        reports.len(),
        reports.len()
    );
    let not_verified: Vec<(String, f64)> = too_large
        .iter()
        .map(|f| (f.kernel.name.clone(), f.kernel.flops() as f64 * 1e-9))
        .collect();
    if options.json {
        let mut value = to_json(&krate, &reports, options, points, mismatches);
        value["not_verified"] = not_verified
            .iter()
            .map(|(name, gflop)| json!({"kernel": name, "gflop": gflop}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        let width = reports.iter().map(|r| r.name.len()).max().unwrap_or(0);
        for report in &reports {
            print_kernel(report, width);
        }
        println!("{summary}");
        if !not_verified.is_empty() {
            let names: Vec<String> = not_verified
                .iter()
                .map(|(name, gflop)| format!("{name} ({gflop:.2} GFLOP)"))
                .collect();
            match options.device {
                Device::Vgpu => println!(
                    "not verified, larger than {limit} GFLOP for the virtual GPU: {} \
                     (raise --max-gflop, or verify on a GPU with --device gpu)",
                    names.join(", ")
                ),
                Device::Gpu => println!(
                    "not verified, larger than {limit} GFLOP for the CPU evaluation, whole or at sampled elements: {} \
                     (raise --max-gflop: it takes about {:.0} s per GFLOP)",
                    names.join(", "),
                    1.0 / CPU_REFERENCE_GFLOP_PER_S
                ),
            }
        }
    }
    if mismatches > 0 {
        bail!("{summary}");
    }
    Ok(())
}

fn verify_kernel(
    krate: &Crate,
    found: &ktune_build::scan::Found,
    options: &Options,
) -> Result<KernelReport> {
    let kernel = &found.kernel;
    let targets = select::targets(&krate.metadata.targets);
    let shipped = select::variants(kernel, &found.location, &targets)?;
    let mut work: Vec<(SmVersion, Schedule, Option<Lowered>)> = Vec::new();
    for v in shipped {
        // What ships is the printed text: check exactly that.
        let text = ptx::print(&v.lowered.ptx, v.target);
        let (code, _) = ptx::parse(&text)
            .with_context(|| format!("kernel `{}`: reading its {} PTX", kernel.name, v.target))?;
        let lowered = Lowered {
            ptx: code,
            launch: v.lowered.launch,
        };
        work.push((v.target, v.schedule, Some(lowered)));
    }
    let baseline = SmVersion::BASELINE;
    let others: Vec<Schedule> = space::candidates(kernel, baseline)
        .into_iter()
        .filter(|s| !work.iter().any(|(t, w, _)| *t == baseline && w == s))
        .collect();
    for schedule in space::sample(&others, options.sample, options.seed) {
        work.push((baseline, schedule, None));
    }
    let reference = Reference::new(kernel, options.seed);
    let points = parallel_map(work, |(target, schedule, lowered)| {
        let result = match &lowered {
            Some(lowered) => reference.check_lowered(&schedule, target, lowered),
            None => reference.check(&schedule, target),
        };
        Point {
            target,
            schedule,
            shipped: lowered.is_some(),
            result: result
                .map(|v| Checked {
                    error: Some((v.max_error, v.tolerance)),
                    instructions: Some(v.stats.instructions),
                })
                .map_err(|e| e.to_string()),
        }
    });
    Ok(report_of(kernel, Evaluation::Whole, points))
}

fn report_of(kernel: &Kernel, evaluation: Evaluation, points: Vec<Point>) -> KernelReport {
    KernelReport {
        name: kernel.name.clone(),
        shape: kernel.shape().collect(),
        evaluation,
        points,
    }
}

/// Every kernel's points on the GPU, one at a time through a worker.
fn verify_on_gpu(
    krate: &Crate,
    kernels: &[&ktune_build::scan::Found],
    options: &Options,
) -> Result<Vec<KernelReport>> {
    let kind = ktune_measure::detect().context(
        "no GPU found (no CUDA driver, or it sees no device); verify on the virtual GPU \
         with --device vgpu (the default)",
    )?;
    let device = DeviceTarget::of(kind, &krate.metadata.targets)?;
    let runnable: Vec<SmVersion> = select::targets(&krate.metadata.targets)
        .into_iter()
        .filter(|t| *t <= device.target)
        .collect();
    // Check, do not time: one run after one warm-up, every output element
    // against the CPU evaluation for kernels up to the limit, against the
    // heuristic schedule's output, sampled by the CPU, above it. The worker
    // computes that evaluation before a kernel's first point: its time
    // limit leaves room for the largest.
    let settings = ktune_measure::Settings {
        seed: options.seed,
        time_cap_s: 0.0,
        min_samples: 1,
        warmup_runs: 1,
        reference_flops: (options.limit_gflop() * 1e9) as u64,
        ..ktune_measure::Settings::default()
    };
    let config = WorkerConfig::new(DeviceKind::Gpu { ordinal: 0 })?
        .settings(settings)
        .timeout(std::time::Duration::from_secs_f64(
            600f64.max(2.0 * options.limit_gflop() / CPU_REFERENCE_GFLOP_PER_S),
        ));
    let mut worker = Worker::spawn(config)?;
    eprintln!(
        "verifying on {device}, variants of {}",
        runnable
            .iter()
            .map(|t| t.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    kernels
        .iter()
        .map(|found| {
            let kernel = &found.kernel;
            let mut work: Vec<(SmVersion, Schedule, bool)> =
                select::variants(kernel, &found.location, &runnable)?
                    .into_iter()
                    .map(|v| (v.target, v.schedule, true))
                    .collect();
            let others: Vec<Schedule> = space::candidates(kernel, device.target)
                .into_iter()
                .filter(|s| !work.iter().any(|(t, w, _)| *t == device.target && w == s))
                .collect();
            for schedule in space::sample(&others, options.sample, options.seed) {
                work.push((device.target, schedule, false));
            }
            let points = work
                .into_iter()
                .map(|(target, schedule, shipped)| {
                    let job = Job::new(found.source.clone(), target);
                    let result = worker
                        .measure(&job, &schedule)
                        .map(|_| Checked {
                            error: None,
                            instructions: None,
                        })
                        .map_err(|r| {
                            format!(
                                "kernel `{}` {} on {target}: {r}",
                                kernel.name,
                                schedule.to_json()
                            )
                        });
                    Point {
                        target,
                        schedule,
                        shipped,
                        result,
                    }
                })
                .collect();
            let evaluation = Evaluation::of(kernel, options).unwrap_or(Evaluation::Whole);
            Ok(report_of(kernel, evaluation, points))
        })
        .collect()
}

/// `f` over `items` on every core, in order.
fn parallel_map<T: Send, U: Send>(items: Vec<T>, f: impl Fn(T) -> U + Sync) -> Vec<U> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = items.len().div_ceil(threads).max(1);
    let mut chunks: Vec<Vec<T>> = Vec::new();
    let mut items = items.into_iter().peekable();
    while items.peek().is_some() {
        chunks.push(items.by_ref().take(chunk).collect());
    }
    let f = &f;
    std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| scope.spawn(move || chunk.into_iter().map(f).collect::<Vec<U>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

fn shape_text(shape: &[(String, u32)]) -> String {
    shape
        .iter()
        .map(|(n, s)| format!("{n}={s}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn print_kernel(report: &KernelReport, width: usize) {
    let shipped = report.points.iter().filter(|p| p.shipped).count();
    let worst = match report.worst() {
        Some((0.0, _)) => "max error 0 (exact)".to_owned(),
        Some((error, tolerance)) => format!("max error {error:.2e} (tolerance {tolerance:.2e})"),
        None if report.points.iter().any(|p| p.result.is_ok()) => {
            "every element within tolerance".to_owned()
        }
        None => "max error -".to_owned(),
    };
    println!(
        "{:<width$}  {:<22} {:>3} points ({shipped} shipped)  {worst}  {} mismatches",
        report.name,
        shape_text(&report.shape),
        report.points.len(),
        report.mismatches()
    );
    if report.evaluation == Evaluation::Sampled {
        println!(
            "  compared with its heuristic schedule's output, checked by the CPU at {} sampled elements",
            ktune_measure::SAMPLED_POINTS
        );
    }
    for point in &report.points {
        if let Err(e) = &point.result {
            println!("  MISMATCH {e}");
        }
    }
}

fn to_json(
    krate: &Crate,
    reports: &[KernelReport],
    options: &Options,
    points: usize,
    mismatches: usize,
) -> Value {
    let kernels: Vec<Value> = reports
        .iter()
        .map(|r| {
            let (max_error, tolerance) = r.worst().unwrap_or((0.0, 0.0));
            let points: Vec<Value> = r
                .points
                .iter()
                .map(|p| {
                    let mut point = json!({
                        "target": p.target.name(),
                        "schedule": serde_json::to_value(&p.schedule).unwrap_or(Value::Null),
                        "shipped": p.shipped,
                        "ok": p.result.is_ok(),
                    });
                    match &p.result {
                        Ok(checked) => {
                            if let Some((error, tolerance)) = checked.error {
                                point["max_error"] = json!(error);
                                point["tolerance"] = json!(tolerance);
                            }
                            if let Some(n) = checked.instructions {
                                point["instructions"] = json!(n);
                            }
                        }
                        Err(e) => point["error"] = json!(e),
                    }
                    point
                })
                .collect();
            json!({
                "name": r.name,
                "shape": r.shape.iter().map(|(n, s)| (n.clone(), json!(s))).collect::<serde_json::Map<_, _>>(),
                "points": points.len(),
                "reference": r.evaluation.name(),
                "max_error": max_error,
                "tolerance": tolerance,
                "mismatches": r.mismatches(),
                "schedule_points": points,
            })
        })
        .collect();
    json!({
        "crate": krate.name,
        "device": match options.device {
            Device::Vgpu => "vgpu",
            Device::Gpu => "gpu",
        },
        "seed": options.seed,
        "sample": options.sample,
        "kernels": kernels,
        "summary": {
            "kernels": reports.len(),
            "schedule_points": points,
            "shapes": reports.len(),
            "mismatches": mismatches,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(device: Device, max_gflop: Option<f64>) -> Options {
        Options {
            sample: 0,
            seed: 1,
            json: false,
            device,
            max_gflop,
        }
    }

    #[test]
    fn each_device_has_its_own_default_limit() {
        assert_eq!(options(Device::Vgpu, None).limit_gflop(), 1.0);
        assert_eq!(
            options(Device::Gpu, None).limit_gflop(),
            GPU_DEFAULT_MAX_GFLOP
        );
        assert_eq!(options(Device::Gpu, Some(200.0)).limit_gflop(), 200.0);
    }

    #[test]
    fn large_kernels_are_verified_on_a_gpu_at_sampled_elements() {
        let kernel = |attr: proc_macro2::TokenStream, item: proc_macro2::TokenStream| {
            ktune_core::syntax::parse_kernel(attr, item).expect("parses")
        };
        let matmul = |m: u32| {
            kernel(
                quote::quote!(shape(M = #m, N = 4096, K = 4096)),
                quote::quote! {
                    fn mm(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
                        compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
                    }
                },
            )
        };
        let (small, large) = (matmul(16), matmul(4096));
        let (gpu, vgpu) = (options(Device::Gpu, None), options(Device::Vgpu, None));
        assert_eq!(Evaluation::of(&small, &gpu), Some(Evaluation::Whole));
        assert_eq!(Evaluation::of(&large, &gpu), Some(Evaluation::Sampled));
        // The virtual GPU would run the whole kernel, whatever the check.
        assert_eq!(Evaluation::of(&large, &vgpu), None);
        // Every element here reads all of `x`: none can be sampled.
        let total = kernel(
            quote::quote!(shape(N = 200_000)),
            quote::quote! {
                fn scaled(x: Tensor<f32, N>) -> Tensor<f32, N> {
                    compute(|n| x[n] * sum(N, |j| x[j]))
                }
            },
        );
        assert!(total.flops() as f64 > gpu.limit_gflop() * 1e9);
        assert_eq!(Evaluation::of(&total, &gpu), None);
    }
}

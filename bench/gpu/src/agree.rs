//! `ktune-bench --agree`: every run of the verification suite on this GPU
//! and on the virtual GPU, each output checked against the CPU reference
//! and the two compared (see [`ktune_bench::agreement`]). The virtual GPU
//! runs on every core; the GPU runs one kernel at a time.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, Result};
use cudarc::driver::CudaSlice;
use ktune_bench::agreement::{AgreeResults, Comparison, inexact};
use ktune_bench::plan::Variant;
use ktune_core::lower::lower;
use ktune_vgpu::suite::{self, Run};
use ktune_vgpu::verify::Failure;

use crate::gpu::Gpu;

/// What the suite's runs on both devices came to.
pub struct Agreement {
    pub exact: usize,
    pub identical: usize,
    pub skipped: usize,
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
            kernels: self.report.kernels,
            shapes: self.report.shapes,
            points: self.report.points,
            exact_points: self.exact,
            identical_points: self.identical,
            skipped_points: self.skipped,
            out_of_time_points: self.out_of_time,
            failures: self.report.failures,
            summary,
        }
    }
}

/// Runs the whole suite on `gpu` and on the virtual GPU; runs that would
/// start after `deadline` are counted, not run.
pub fn agree(gpu: &Gpu, deadline: Instant) -> Agreement {
    let exact = AtomicUsize::new(0);
    let identical = AtomicUsize::new(0);
    let skipped = AtomicUsize::new(0);
    let out_of_time = AtomicUsize::new(0);
    let device = Mutex::new(gpu);
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let report = suite::run(&suite::catalogue(), workers, |run| {
        if run.target > gpu.target {
            skipped.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        if Instant::now() > deadline {
            out_of_time.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let fail = |kind| run.reference.error(run.schedule, run.target, kind);
        let lowered = lower(run.reference.kernel(), run.schedule, run.target)
            .map_err(|e| fail(Failure::Lower(Box::new(e))).to_string())?;
        let approximate = inexact(&lowered.ptx);
        if approximate.is_none() {
            exact.fetch_add(1, Ordering::Relaxed);
        }
        let (on_vgpu, _) = run
            .reference
            .run_virtual(&lowered)
            .map_err(|f| fail(Failure::Fault(Box::new(f))).to_string())?;
        run.reference
            .compare(&on_vgpu)
            .map_err(|kind| format!("virtual GPU: {}", fail(kind)))?;
        let variant = Variant::of(run.schedule, &lowered, run.target);
        let on_gpu = {
            let gpu = device.lock().unwrap_or_else(|e| e.into_inner());
            launch(&gpu, run, &variant)
        }
        .map_err(|e| format!("GPU: {}: {e:#}", describe(run)))?;
        run.reference
            .compare(&on_gpu)
            .map_err(|kind| format!("GPU: {}", fail(kind)))?;
        let comparison = Comparison::of(run.reference, &on_gpu, &on_vgpu);
        if comparison.differing == 0 {
            identical.fetch_add(1, Ordering::Relaxed);
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
    });
    Agreement {
        exact: exact.into_inner(),
        identical: identical.into_inner(),
        skipped: skipped.into_inner(),
        out_of_time: out_of_time.into_inner(),
        report,
    }
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

/// One launch of `variant` on the reference's inputs and a poisoned
/// output; the output's bytes.
fn launch(gpu: &Gpu, run: &Run<'_>, variant: &Variant) -> Result<Vec<u8>> {
    let kernel = run.reference.kernel();
    let loaded = gpu.load(kernel, variant)?;
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

//! One case on the GPU: inputs (rotated through enough copies to defeat
//! the L2), the baseline, the default schedule, then the bounded search's
//! candidates, the sample and `max-autotune`'s search
//! ([`ktune_bench::search`]), each
//! screened within the case's share of the time budget and its fastest
//! re-measured.

use std::time::Instant;

use anyhow::{Context, Result, bail};
use cudarc::driver::CudaSlice;
use ktune_bench::cases::{BIAS_GELU, Baseline, Case, Kind, parse, plain_product};
use ktune_bench::check::{Check, HostTensor, Reference, random_inputs};
use ktune_bench::plan::{Plan, Variant};
use ktune_bench::report::{CaseResult, Measured, Ratios, Sampled, Screened, Settings, Times};
use ktune_bench::search::search;
use ktune_core::ir::Kernel;
use ktune_core::lower;
use ktune_core::schedule::Schedule;

use crate::blas::{Blas, Product};
use crate::gpu::{Gpu, Loaded};

/// How many timed runs a measurement takes.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub min_reps: usize,
    pub max_reps: usize,
    /// Time the timed runs of one full measurement aim to fill.
    pub cap_ms: f64,
    /// Timed runs per sampled schedule while screening.
    pub screen_reps: usize,
}

impl Policy {
    pub fn new(quick: bool) -> Policy {
        if quick {
            Policy {
                min_reps: 5,
                max_reps: 20,
                cap_ms: 50.0,
                screen_reps: 1,
            }
        } else {
            Policy {
                min_reps: 20,
                max_reps: 200,
                cap_ms: 400.0,
                screen_reps: 3,
            }
        }
    }

    /// Timed runs for a kernel that took `probe_ms` in warm-up: enough to
    /// fill the cap, at least `min_reps` unless that would take more than
    /// twice the cap (then at least 3), at most `max_reps`.
    pub fn reps(&self, probe_ms: f64) -> usize {
        let probe = probe_ms.max(1e-4);
        let fill = (self.cap_ms / probe) as usize;
        let ceiling = ((2.0 * self.cap_ms / probe) as usize).max(3);
        fill.clamp(self.min_reps, self.max_reps).min(ceiling)
    }

    pub fn settings(
        &self,
        (sample, search): (usize, usize),
        seed: u64,
        quick: bool,
        budget_s: f64,
    ) -> Settings {
        Settings {
            sample,
            search,
            seed,
            quick,
            budget_s,
            min_reps: self.min_reps,
            max_reps: self.max_reps,
            time_cap_ms: self.cap_ms,
            screen_reps: self.screen_reps,
        }
    }
}

/// What is timed: a ktune kernel or a baseline.
#[derive(Clone, Copy)]
enum Subject<'a> {
    Ktune(&'a Loaded),
    Cublas(&'a Blas, Product),
    CublasThenBiasGelu(&'a Blas, Product, &'a Loaded),
    /// cuBLAS's product alone, into the intermediate buffer.
    CublasProduct(&'a Blas, Product),
    /// The first input's bytes, copied into the intermediate buffer.
    Copy,
}

/// A case's device buffers: `sets` copies of the inputs, the output and,
/// for the baselines that do not write the kernel's output, the
/// intermediate buffer they write.
struct Buffers {
    sets: Vec<Vec<CudaSlice<u8>>>,
    output: CudaSlice<u8>,
    intermediate: Option<CudaSlice<u8>>,
}

impl Subject<'_> {
    /// Queues one run on input set `set`.
    fn launch(&self, gpu: &Gpu, bufs: &mut Buffers, set: usize) -> Result<()> {
        let inputs = &bufs.sets[set % bufs.sets.len()];
        let output = &mut bufs.output;
        match *self {
            Subject::Ktune(kernel) => {
                let inputs: Vec<&CudaSlice<u8>> = inputs.iter().collect();
                kernel.launch(&gpu.stream, &inputs, output)
            }
            Subject::Cublas(blas, product) => blas.gemm(product, &inputs[0], &inputs[1], output),
            Subject::CublasThenBiasGelu(blas, product, bias_gelu) => {
                let h = intermediate(&mut bufs.intermediate)?;
                blas.gemm(product, &inputs[0], &inputs[1], h)?;
                bias_gelu.launch(&gpu.stream, &[&*h, &inputs[2]], output)
            }
            Subject::CublasProduct(blas, product) => {
                let c = intermediate(&mut bufs.intermediate)?;
                blas.gemm(product, &inputs[0], &inputs[1], c)
            }
            Subject::Copy => {
                let copy = intermediate(&mut bufs.intermediate)?;
                gpu.stream.memcpy_dtod(&inputs[0], copy)?;
                Ok(())
            }
        }
    }

    /// The buffer a run writes and its check reads.
    fn written<'b>(&self, bufs: &'b mut Buffers) -> Result<&'b mut CudaSlice<u8>> {
        match self {
            Subject::CublasProduct(..) | Subject::Copy => intermediate(&mut bufs.intermediate),
            Subject::Ktune(_) | Subject::Cublas(..) | Subject::CublasThenBiasGelu(..) => {
                Ok(&mut bufs.output)
            }
        }
    }
}

fn intermediate(buffer: &mut Option<CudaSlice<u8>>) -> Result<&mut CudaSlice<u8>> {
    buffer.as_mut().context("no intermediate buffer")
}

/// Runs cases on one GPU.
pub struct Runner<'g> {
    pub gpu: &'g mut Gpu,
    pub blas: Result<&'g Blas, String>,
    pub policy: Policy,
    pub sample: usize,
    /// Evaluations of `max-autotune`'s search per case (0: none).
    pub search: usize,
    pub seed: u64,
}

impl Runner<'_> {
    /// Measures `case`, screening sampled schedules only until `deadline`.
    /// Failures are recorded in the result, never returned.
    pub fn run(&mut self, case: &'static Case, deadline: Instant) -> CaseResult {
        let mut result = CaseResult::new(case);
        if let Err(e) = self.fill(case, deadline, &mut result) {
            result.errors.push(format!("{e:#}"));
        }
        result.ratios = Ratios::of(&result);
        result
    }

    fn fill(
        &mut self,
        case: &'static Case,
        deadline: Instant,
        result: &mut CaseResult,
    ) -> Result<()> {
        let plan = Plan::new(case, self.gpu.target, self.sample, self.seed)?;
        let kernel = &plan.kernel;
        result.dtype = case.dtype()?.name().to_owned();
        result.flops = kernel.flops();
        result.bytes = kernel.compulsory_bytes();

        let host = random_inputs(kernel, self.seed);
        // Output points checked: dot products, rows, or single elements.
        let points = match case.kind {
            Kind::Matmul | Kind::MatmulBiasGelu | Kind::MatmulEpilogue => 64,
            Kind::Softmax | Kind::LayerNorm => 8,
            Kind::Elementwise => 4096,
        };
        let reference = Reference::sample(kernel, &host, points, self.seed)?;
        // A baseline that computes the product alone is checked against it.
        let product_reference = match case.kind.baseline() {
            Baseline::CublasProduct => {
                let p = product(kernel)?;
                let size = |x: usize| u32::try_from(x).context("a dimension exceeds u32");
                let plain = plain_product(p.dtype, [size(p.m)?, size(p.n)?, size(p.k)?])
                    .map_err(anyhow::Error::msg)?;
                Some(Reference::sample(&plain, &host[..2], points, self.seed)?)
            }
            Baseline::Cublas | Baseline::CublasThenBiasGelu | Baseline::Copy => None,
        };
        let input_bytes: usize = host.iter().map(HostTensor::byte_len).sum();
        let l2 = usize::try_from(self.gpu.info.l2_bytes).unwrap_or(0);
        let copies = (2 * l2).div_ceil(input_bytes.max(1)).max(2);
        result.input_copies = copies;
        let first = host
            .iter()
            .map(|t| self.gpu.upload(&t.bytes()))
            .collect::<Result<Vec<_>>>()?;
        drop(host);
        let mut sets = Vec::with_capacity(copies);
        for _ in 1..copies {
            sets.push(
                first
                    .iter()
                    .map(|b| self.gpu.copy(b))
                    .collect::<Result<Vec<_>>>()?,
            );
        }
        sets.push(first);
        let out_dtype = kernel.output.dtype;
        let out_len = kernel.len_of(&kernel.output) as usize;
        let mut bufs = Buffers {
            sets,
            output: self.gpu.alloc_poisoned(out_dtype, out_len)?,
            intermediate: None,
        };

        let baseline_reference = product_reference.as_ref().unwrap_or(&reference);
        match self.baseline(case, kernel, &mut bufs, baseline_reference) {
            Ok(measured) => result.baseline = Some(measured),
            Err(e) => result.errors.push(format!("baseline: {e:#}")),
        }
        match self.ktune(kernel, &plan.default, &mut bufs, &reference) {
            Ok(measured) => result.default = Some(measured),
            Err(e) => result.errors.push(format!("default schedule: {e:#}")),
        }

        let (alternatives, _) =
            self.screen_all(kernel, &plan.alternatives, deadline, &mut bufs, &reference);
        result.alternatives = alternatives;
        let (bounded, fastest) =
            self.screen_all(kernel, &plan.bounded, deadline, &mut bufs, &reference);
        result.bounded = bounded;
        result.tuned = match fastest {
            Some((_, loaded, check, schedule)) => {
                let times = self.measure(Subject::Ktune(&loaded), &mut bufs)?;
                let candidate = measured(kernel, Some(schedule.clone()), times, Some(check));
                let default_ms = result.default.as_ref().map(|d| d.times.median_ms);
                if default_ms.is_some_and(|ms| ms <= candidate.times.median_ms) {
                    result.default.clone()
                } else {
                    Some(candidate)
                }
            }
            None => result.default.clone(),
        };

        let (sampled, fastest) =
            self.screen_all(kernel, &plan.sample, deadline, &mut bufs, &reference);
        result.sampled = sampled;
        if let Some((_, loaded, check, schedule)) = fastest {
            let times = self.measure(Subject::Ktune(&loaded), &mut bufs)?;
            result.best = Some(measured(kernel, Some(schedule.clone()), times, Some(check)));
        }

        if self.search > 0 {
            let info = self.gpu.info.clone();
            let allowance = (self.search, deadline);
            let reps = self.policy.screen_reps;
            let (found, evaluated) = search(&plan, &info, allowance, reps, |kernel, schedule| {
                self.screen(kernel, schedule, &mut bufs, &reference)
                    .map(|(ms, ..)| ms)
                    .map_err(|e| format!("{e:#}"))
            });
            result.search = evaluated;
            if let Some(schedule) = found {
                result.searched = Some(self.ktune(kernel, &schedule, &mut bufs, &reference)?);
            }
        }
        Ok(())
    }

    /// Screens `schedules` in order until `deadline`; what became of them,
    /// and the fastest correct one with its screening median.
    fn screen_all<'s>(
        &mut self,
        kernel: &Kernel,
        schedules: &'s [Schedule],
        deadline: Instant,
        bufs: &mut Buffers,
        reference: &Reference,
    ) -> (Sampled, Option<(f64, Loaded, Check, &'s Schedule)>) {
        let mut sampled = Sampled {
            planned: schedules.len(),
            ..Sampled::default()
        };
        let mut fastest: Option<(f64, Loaded, Check, &Schedule)> = None;
        for (i, schedule) in schedules.iter().enumerate() {
            if Instant::now() >= deadline {
                sampled.skipped_for_budget = schedules.len() - i;
                break;
            }
            let (median_ms, excluded) = match self.screen(kernel, schedule, bufs, reference) {
                Ok((median, loaded, check)) => {
                    if fastest.as_ref().is_none_or(|b| median < b.0) {
                        fastest = Some((median, loaded, check, schedule));
                    }
                    (Some(median), None)
                }
                Err(e) => (None, Some(format!("{e:#}"))),
            };
            sampled.screened.push(Screened {
                schedule: schedule.clone(),
                median_ms,
                excluded,
            });
        }
        (sampled, fastest)
    }

    /// The baseline's measurement, its output checked where it computes the
    /// kernel's result.
    fn baseline(
        &mut self,
        case: &Case,
        kernel: &Kernel,
        bufs: &mut Buffers,
        reference: &Reference,
    ) -> Result<Measured> {
        let blas = self.blas.clone();
        let blas = || blas.map_err(anyhow::Error::msg);
        match case.kind.baseline() {
            Baseline::Copy => {
                let input = kernel.inputs.first().context("no inputs")?;
                let elements = kernel.len_of(input) as usize;
                bufs.intermediate = Some(self.gpu.alloc_poisoned(input.dtype, elements)?);
                let times = self.measure(Subject::Copy, bufs);
                bufs.intermediate = None;
                let times = times?;
                let bytes = 2 * bufs.sets[0][0].len() as u64;
                let median = times.median_ms;
                let mut m = measured(kernel, None, times, None);
                m.gbps = bytes as f64 / (median * 1e6);
                Ok(m)
            }
            Baseline::Cublas => {
                let subject = Subject::Cublas(blas()?, product(kernel)?);
                let check = self.check(subject, bufs, reference)?;
                let times = self.measure(subject, bufs)?;
                Ok(measured(kernel, None, times, Some(check)))
            }
            Baseline::CublasProduct => {
                let p = product(kernel)?;
                bufs.intermediate = Some(self.gpu.alloc_poisoned(p.dtype, p.batch * p.m * p.n)?);
                let subject = Subject::CublasProduct(blas()?, p);
                let check = self.check(subject, bufs, reference);
                let times = check.and_then(|check| Ok((check, self.measure(subject, bufs)?)));
                bufs.intermediate = None;
                let (check, times) = times?;
                Ok(measured(kernel, None, times, Some(check)))
            }
            Baseline::CublasThenBiasGelu => {
                let p = product(kernel)?;
                let shape = [("M", p.m as u32), ("N", p.n as u32)];
                let epilogue = parse(BIAS_GELU, &shape, false).map_err(anyhow::Error::msg)?;
                let schedule = lower::heuristic(&epilogue, self.gpu.target);
                let variant = Variant::lower(&epilogue, &schedule, self.gpu.target)?;
                let loaded = self.gpu.load(&epilogue, &variant)?;
                bufs.intermediate = Some(self.gpu.alloc_poisoned(p.dtype, p.batch * p.m * p.n)?);
                let subject = Subject::CublasThenBiasGelu(blas()?, p, &loaded);
                let check = self.check(subject, bufs, reference)?;
                let times = self.measure(subject, bufs)?;
                bufs.intermediate = None;
                Ok(measured(kernel, Some(schedule), times, Some(check)))
            }
        }
    }

    /// Lowers, loads, checks and fully measures one schedule.
    fn ktune(
        &mut self,
        kernel: &Kernel,
        schedule: &Schedule,
        bufs: &mut Buffers,
        reference: &Reference,
    ) -> Result<Measured> {
        let variant = Variant::lower(kernel, schedule, self.gpu.target)?;
        let loaded = self.gpu.load(kernel, &variant)?;
        let check = self.check(Subject::Ktune(&loaded), bufs, reference)?;
        let times = self.measure(Subject::Ktune(&loaded), bufs)?;
        Ok(measured(kernel, Some(schedule.clone()), times, Some(check)))
    }

    /// Lowers, loads and checks one sampled schedule and times it briefly.
    fn screen(
        &mut self,
        kernel: &Kernel,
        schedule: &Schedule,
        bufs: &mut Buffers,
        reference: &Reference,
    ) -> Result<(f64, Loaded, Check)> {
        let variant = Variant::lower(kernel, schedule, self.gpu.target)?;
        let loaded = self.gpu.load(kernel, &variant)?;
        let check = self.check(Subject::Ktune(&loaded), bufs, reference)?;
        let subject = Subject::Ktune(&loaded);
        let ms = self.gpu.time(1, self.policy.screen_reps, |gpu, i| {
            subject.launch(gpu, bufs, i)
        })?;
        let times = Times::from_ms(&ms).context("no screening runs")?;
        Ok((times.median_ms, loaded, check))
    }

    /// Runs `subject` once on a poisoned output and checks the result; a
    /// wrong output is an error.
    fn check(
        &mut self,
        subject: Subject<'_>,
        bufs: &mut Buffers,
        reference: &Reference,
    ) -> Result<Check> {
        self.gpu.poison(subject.written(bufs)?, reference.dtype)?;
        subject.launch(self.gpu, bufs, 0)?;
        let output = self
            .gpu
            .download(subject.written(bufs)?)
            .context("running the checked launch")?;
        let check = reference.check(&output);
        if let Some(failure) = check.failure() {
            bail!("wrong output: {failure}");
        }
        Ok(check)
    }

    /// Warm-up, then timed runs as the policy says, rotating input sets.
    fn measure(&mut self, subject: Subject<'_>, bufs: &mut Buffers) -> Result<Times> {
        let warm = self.gpu.time(0, 2, |gpu, i| subject.launch(gpu, bufs, i))?;
        let probe = warm.iter().copied().fold(f32::INFINITY, f32::min);
        let reps = self.policy.reps(f64::from(probe));
        let ms = self
            .gpu
            .time(2, reps, |gpu, i| subject.launch(gpu, bufs, i))?;
        Times::from_ms(&ms).context("no timed runs")
    }
}

fn measured(
    kernel: &Kernel,
    schedule: Option<Schedule>,
    times: Times,
    check: Option<Check>,
) -> Measured {
    let ms = times.median_ms;
    Measured {
        schedule,
        times,
        tflops: kernel.flops() as f64 / (ms * 1e9),
        gbps: kernel.compulsory_bytes() as f64 / (ms * 1e6),
        check,
    }
}

/// The kernel as a row-major product, for cuBLAS.
fn product(kernel: &Kernel) -> Result<Product> {
    let size = |name: &str| {
        kernel
            .dims
            .iter()
            .find(|d| d.name == name)
            .map(|d| d.size as usize)
    };
    let dim =
        |name: &str| size(name).with_context(|| format!("the kernel has no dimension {name}"));
    Ok(Product {
        batch: size("B").unwrap_or(1),
        m: dim("M")?,
        n: dim("N")?,
        k: dim("K")?,
        dtype: kernel.inputs.first().context("no inputs")?.dtype,
        tf32: kernel.allow_tf32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_fill_the_cap_within_their_bounds() {
        let policy = Policy::new(false);
        assert_eq!(policy.reps(0.001), policy.max_reps);
        assert_eq!(policy.reps(4.0), 100);
        assert_eq!(policy.reps(30.0), policy.min_reps);
        // 20 runs of 100 ms would take 5 times the cap: as many as fit in twice it.
        assert_eq!(policy.reps(100.0), 8);
        assert_eq!(policy.reps(10_000.0), 3);
        let quick = Policy::new(true);
        assert!((quick.min_reps..=quick.max_reps).contains(&quick.reps(1.0)));
    }
}

//! One case on the GPU: inputs (rotated through enough copies to defeat
//! the L2), the baseline and the default schedule set up and checked, the
//! default measured alone (the time screenings are scaled to), then the
//! bounded search's candidates, the default's alternatives, the sample and
//! `max-autotune`'s search ([`ktune_bench::search`]), each screened in
//! turn with the default within the case's share of the time budget;
//! last, the baseline, the default and each list's fastest measured in
//! full, side by side ([`ktune_bench::turns`]).

use std::time::Instant;

use anyhow::{Context, Result, bail};
use cudarc::driver::CudaSlice;
use ktune_bench::cases::{BIAS_GELU, Baseline, Case, Kind, parse, plain_product};
use ktune_bench::check::{Check, HostTensor, Reference, random_inputs};
use ktune_bench::plan::{LeftOut, Plan, Variant};
use ktune_bench::report::{
    CaseResult, Measured, Ratios, Sampled, Screen, Screened, Settings, Times,
};
use ktune_bench::search::search;
use ktune_bench::turns;
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
        (quick, left_out): (bool, LeftOut),
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
            without_producer: left_out.producer,
            without_tma: left_out.tma,
            without_cluster: left_out.cluster,
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
    /// The schedules left out.
    pub left_out: LeftOut,
}

/// The baseline set up and checked, ready to time: what its runs need
/// besides the inputs and the buffers.
enum Rig<'b> {
    Copy,
    Cublas(&'b Blas, Product),
    CublasProduct(&'b Blas, Product),
    /// cuBLAS's product, then ktune's bias-gelu kernel (its schedule, the
    /// heuristic one) on it.
    CublasThenBiasGelu(&'b Blas, Product, Box<Loaded>, Schedule),
}

impl Rig<'_> {
    fn subject(&self) -> Subject<'_> {
        match self {
            Rig::Copy => Subject::Copy,
            Rig::Cublas(blas, p) => Subject::Cublas(blas, *p),
            Rig::CublasProduct(blas, p) => Subject::CublasProduct(blas, *p),
            Rig::CublasThenBiasGelu(blas, p, loaded, _) => {
                Subject::CublasThenBiasGelu(blas, *p, loaded)
            }
        }
    }
}

/// A ktune schedule lowered, loaded and checked.
struct Contender<'s> {
    schedule: &'s Schedule,
    loaded: Loaded,
    check: Check,
}

/// The fastest of a list of screened schedules, its screening median as
/// the default's full measurement puts it ([`turns::normalized`]).
struct Fastest<'s> {
    normalized_ms: f64,
    contender: Contender<'s>,
}

/// What the final side-by-side measurement times, besides the baseline.
#[derive(Clone, Copy)]
enum Role {
    Default,
    Bounded,
    Alternative,
    Sampled,
    Searched,
}

impl<'g> Runner<'g> {
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
        let mut plan = Plan::new(case, self.gpu.target, self.sample, self.seed)?;
        plan.leave_out(self.left_out);
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
        // Enough copies that consecutive runs' inputs together exceed twice
        // the L2, and a number a screening's two subjects take in turns.
        let copies = turns::input_sets((2 * l2).div_ceil(input_bytes.max(1)), 2);
        let first = host
            .iter()
            .map(|t| self.gpu.upload(&t.bytes()))
            .collect::<Result<Vec<_>>>()?;
        drop(host);
        let out_dtype = kernel.output.dtype;
        let out_len = kernel.len_of(&kernel.output) as usize;
        let mut bufs = Buffers {
            sets: vec![first],
            output: self.gpu.alloc_poisoned(out_dtype, out_len)?,
            intermediate: None,
        };
        self.rotate_over(copies, &mut bufs)?;

        let baseline_reference = product_reference.as_ref().unwrap_or(&reference);
        let rig = match self.rig(case, kernel, &mut bufs, baseline_reference) {
            Ok(rig) => Some(rig),
            Err(e) => {
                result.errors.push(format!("baseline: {e:#}"));
                None
            }
        };
        // The default, and its full measurement alone: the time screenings
        // are scaled to.
        let default = self
            .contender(kernel, &plan.default, &mut bufs, &reference)
            .and_then(|d| {
                let mut alone = self.measure_together(&[Subject::Ktune(&d.loaded)], &mut bufs)?;
                Ok((d, alone.remove(0)))
            });
        let (default, default_ms) = match default {
            Ok((d, alone)) => {
                // Kept should the side-by-side measurement fail.
                let m = measured(kernel, Some(d.schedule.clone()), alone, Some(d.check));
                result.default = Some(m);
                (Some(d), Some(alone.median_ms))
            }
            Err(e) => {
                result.errors.push(format!("default schedule: {e:#}"));
                (None, None)
            }
        };
        let beside = default.as_ref().map(|d| &d.loaded);
        let screening = (deadline, beside, default_ms);

        // The bounded search's candidates first: what a build keeps, which
        // the results report for every case; then the alternatives, which
        // long rows' many cluster points could otherwise spend the share on.
        let (bounded, fastest_bounded) =
            self.screen_all(kernel, &plan.bounded, screening, &mut bufs, &reference);
        result.bounded = bounded;
        let (alternatives, alternative) =
            self.screen_all(kernel, &plan.alternatives, screening, &mut bufs, &reference);
        result.alternatives = alternatives;
        let (sampled, fastest_sampled) =
            self.screen_all(kernel, &plan.sample, screening, &mut bufs, &reference);
        result.sampled = sampled;

        let mut found = None;
        if self.search > 0 {
            let info = self.gpu.info.clone();
            let allowance = (self.search, deadline);
            let screens = (self.policy.screen_reps, default_ms);
            let left_out = self.left_out;
            let (schedule, evaluated) = search(&plan, &info, allowance, screens, |kernel, s| {
                if let Some(why) = left_out.reason(s) {
                    return Err(format!("left out: {why}"));
                }
                self.screen(kernel, s, &mut bufs, &reference, beside)
                    .map(|(screen, _)| screen)
                    .map_err(|e| format!("{e:#}"))
            });
            result.search = evaluated;
            found = schedule;
        }
        let searched = found.as_ref().and_then(|schedule| {
            self.contender(kernel, schedule, &mut bufs, &reference)
                .map_err(|e| result.errors.push(format!("searched schedule: {e:#}")))
                .ok()
        });

        // The baseline and the schedules measured in full, side by side.
        let mut entrants: Vec<(Role, &Contender<'_>)> = Vec::new();
        entrants.extend(default.as_ref().map(|c| (Role::Default, c)));
        for (role, fastest) in [
            (Role::Bounded, &fastest_bounded),
            (Role::Alternative, &alternative),
            (Role::Sampled, &fastest_sampled),
        ] {
            entrants.extend(fastest.as_ref().map(|f| (role, &f.contender)));
        }
        entrants.extend(searched.as_ref().map(|c| (Role::Searched, c)));
        let mut subjects: Vec<Subject<'_>> = rig.iter().map(|(rig, _)| rig.subject()).collect();
        subjects.extend(entrants.iter().map(|(_, c)| Subject::Ktune(&c.loaded)));
        if subjects.is_empty() {
            return Ok(());
        }
        let mut times = self.measure_together(&subjects, &mut bufs)?.into_iter();
        result.input_copies = bufs.sets.len();
        if let Some((rig, check)) = &rig {
            let times = times.next().context("the baseline's times")?;
            let baseline = Self::baseline_measured(rig, *check, kernel, &bufs, times);
            result.baseline = Some(baseline);
        }
        for ((role, contender), times) in entrants.iter().zip(times) {
            let schedule = Some(contender.schedule.clone());
            let m = measured(kernel, schedule, times, Some(contender.check));
            match role {
                Role::Default => result.default = Some(m),
                Role::Bounded => result.tuned = Some(m),
                Role::Alternative => result.alternative = Some(m),
                Role::Sampled => result.best = Some(m),
                Role::Searched => result.searched = Some(m),
            }
        }
        // What a build's bounded search keeps: the faster of the default
        // and its fastest candidate.
        if let Some(default) = &result.default
            && result
                .tuned
                .as_ref()
                .is_none_or(|t| default.times.median_ms <= t.times.median_ms)
        {
            result.tuned = Some(default.clone());
        }
        Ok(())
    }

    /// Adds copies of the first input set until the inputs rotate over
    /// `sets` of them.
    fn rotate_over(&mut self, sets: usize, bufs: &mut Buffers) -> Result<()> {
        while bufs.sets.len() < sets {
            let copy = bufs.sets[0]
                .iter()
                .map(|b| self.gpu.copy(b))
                .collect::<Result<Vec<_>>>()?;
            bufs.sets.push(copy);
        }
        Ok(())
    }

    /// Screens `schedules` in order until the deadline, each in turn with
    /// the default (`beside`) where it loaded; what became of them, and the
    /// fastest correct one.
    fn screen_all<'s>(
        &mut self,
        kernel: &Kernel,
        schedules: &'s [Schedule],
        (deadline, beside, default_ms): (Instant, Option<&Loaded>, Option<f64>),
        bufs: &mut Buffers,
        reference: &Reference,
    ) -> (Sampled, Option<Fastest<'s>>) {
        let mut sampled = Sampled {
            planned: schedules.len(),
            ..Sampled::default()
        };
        let mut fastest: Option<Fastest<'s>> = None;
        for (i, schedule) in schedules.iter().enumerate() {
            if Instant::now() >= deadline {
                sampled.skipped_for_budget = schedules.len() - i;
                break;
            }
            let screened = self.screen(kernel, schedule, bufs, reference, beside);
            let screen = match screened {
                Ok((screen, contender)) => {
                    let normalized_ms =
                        turns::normalized(screen.median_ms, screen.default_ms, default_ms);
                    if fastest
                        .as_ref()
                        .is_none_or(|f| normalized_ms < f.normalized_ms)
                    {
                        fastest = Some(Fastest {
                            normalized_ms,
                            contender,
                        });
                    }
                    Ok(screen)
                }
                Err(e) => Err(format!("{e:#}")),
            };
            sampled
                .screened
                .push(Screened::new(schedule.clone(), &screen));
        }
        (sampled, fastest)
    }

    /// Sets up the baseline and checks its output where it computes the
    /// kernel's result (the check's figures returned); the intermediate
    /// buffer it writes stays allocated.
    fn rig(
        &mut self,
        case: &Case,
        kernel: &Kernel,
        bufs: &mut Buffers,
        reference: &Reference,
    ) -> Result<(Rig<'g>, Option<Check>)> {
        let blas = self.blas.clone();
        let blas = || blas.map_err(anyhow::Error::msg);
        let rig = match case.kind.baseline() {
            Baseline::Copy => {
                let input = kernel.inputs.first().context("no inputs")?;
                let elements = kernel.len_of(input) as usize;
                bufs.intermediate = Some(self.gpu.alloc_poisoned(input.dtype, elements)?);
                return Ok((Rig::Copy, None));
            }
            Baseline::Cublas => Rig::Cublas(blas()?, product(kernel)?),
            Baseline::CublasProduct => {
                let p = product(kernel)?;
                bufs.intermediate = Some(self.gpu.alloc_poisoned(p.dtype, p.batch * p.m * p.n)?);
                Rig::CublasProduct(blas()?, p)
            }
            Baseline::CublasThenBiasGelu => {
                let p = product(kernel)?;
                let shape = [("M", p.m as u32), ("N", p.n as u32)];
                let epilogue = parse(BIAS_GELU, &shape, false).map_err(anyhow::Error::msg)?;
                let schedule = lower::heuristic(&epilogue, self.gpu.target);
                let variant = Variant::lower(&epilogue, &schedule, self.gpu.target)?;
                let loaded = self.gpu.load(&epilogue, &variant)?;
                bufs.intermediate = Some(self.gpu.alloc_poisoned(p.dtype, p.batch * p.m * p.n)?);
                Rig::CublasThenBiasGelu(blas()?, p, Box::new(loaded), schedule)
            }
        };
        let check = self.check(rig.subject(), bufs, reference)?;
        Ok((rig, Some(check)))
    }

    /// The baseline's measurement from its times and its check.
    fn baseline_measured(
        rig: &Rig<'_>,
        check: Option<Check>,
        kernel: &Kernel,
        bufs: &Buffers,
        times: Times,
    ) -> Measured {
        let schedule = match rig {
            Rig::CublasThenBiasGelu(.., schedule) => Some(schedule.clone()),
            Rig::Copy | Rig::Cublas(..) | Rig::CublasProduct(..) => None,
        };
        let median = times.median_ms;
        let mut m = measured(kernel, schedule, times, check);
        if let Rig::Copy = rig {
            // A copy's bandwidth counts the bytes it reads and writes.
            let bytes = 2 * bufs.sets[0][0].len() as u64;
            m.gbps = bytes as f64 / (median * 1e6);
        }
        m
    }

    /// Lowers, loads and checks one schedule.
    fn contender<'s>(
        &mut self,
        kernel: &Kernel,
        schedule: &'s Schedule,
        bufs: &mut Buffers,
        reference: &Reference,
    ) -> Result<Contender<'s>> {
        let variant = Variant::lower(kernel, schedule, self.gpu.target)?;
        let loaded = self.gpu.load(kernel, &variant)?;
        let check = self.check(Subject::Ktune(&loaded), bufs, reference)?;
        Ok(Contender {
            schedule,
            loaded,
            check,
        })
    }

    /// Lowers, loads and checks one schedule and times it briefly, in turn
    /// with the default (`beside`) where there is one.
    fn screen<'s>(
        &mut self,
        kernel: &Kernel,
        schedule: &'s Schedule,
        bufs: &mut Buffers,
        reference: &Reference,
        beside: Option<&Loaded>,
    ) -> Result<(Screen, Contender<'s>)> {
        let contender = self.contender(kernel, schedule, bufs, reference)?;
        let mut subjects = vec![Subject::Ktune(&contender.loaded)];
        subjects.extend(beside.map(Subject::Ktune));
        let ms = self.in_turns(&subjects, bufs, self.policy.screen_reps)?;
        let median = |ms: &[f32]| Times::from_ms(ms).map(|t| t.median_ms);
        let screen = Screen {
            median_ms: median(&ms[0]).context("no screening runs")?,
            default_ms: ms.get(1).and_then(|ms| median(ms)),
            blocks: contender.loaded.persistent_blocks(),
        };
        Ok((screen, contender))
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

    /// `reps` timed runs of each of `subjects`, taken in turns
    /// ([`turns::turn`]); each subject's times.
    fn in_turns(
        &mut self,
        subjects: &[Subject<'_>],
        bufs: &mut Buffers,
        reps: usize,
    ) -> Result<Vec<Vec<f32>>> {
        let n = subjects.len();
        let sets = bufs.sets.len();
        let ms = self.gpu.time(reps * n, n, |gpu, k| {
            let (subject, set) = turns::turn(k, n, sets);
            subjects[subject].launch(gpu, bufs, set)
        })?;
        Ok(turns::by_subject(&ms, n))
    }

    /// Measures `subjects` side by side: two warm-up runs each, then the
    /// timed runs the policy gives their mean warm-up time, in turns, over
    /// input sets as many as the turns need.
    fn measure_together(
        &mut self,
        subjects: &[Subject<'_>],
        bufs: &mut Buffers,
    ) -> Result<Vec<Times>> {
        self.rotate_over(turns::input_sets(bufs.sets.len(), subjects.len()), bufs)?;
        let warm = self.in_turns(subjects, bufs, 2)?;
        let probes: Vec<f64> = warm
            .iter()
            .map(|ms| f64::from(ms.iter().copied().fold(f32::INFINITY, f32::min)))
            .collect();
        let probe = probes.iter().sum::<f64>() / probes.len().max(1) as f64;
        let reps = self.policy.reps(probe);
        self.in_turns(subjects, bufs, reps)?
            .iter()
            .map(|ms| Times::from_ms(ms).context("no timed runs"))
            .collect()
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

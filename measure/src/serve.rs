//! The worker's side: read requests, compile or measure, answer.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::time::Instant;

use ktune_core::SmVersion;
use ktune_core::ir::Kernel;
use ktune_core::lower::{self, Lowered};
use ktune_core::parallel;
use ktune_core::schedule::Schedule;
use ktune_vgpu::verify::Reference;

use crate::gpu::{Expected, Gpu, GpuRejected, Program, Rotation};
use crate::prepare::CACHE_LIMIT;
use crate::protocol::{Hello, Measure, PROTOCOL_VERSION, Prepare, Request, Response};
use crate::{DeviceKind, Injection, Job, Measured, Rejected, Settings};

/// The environment variable that makes [`worker_main_if_requested`] serve
/// requests: the [`crate::Worker`] sets it to `1` for its child.
pub const WORKER_ENV: &str = "KTUNE_MEASURE_WORKER";

/// When this process was started as a measurement worker ([`WORKER_ENV`]
/// is `1`), serves requests on stdin and stdout until stdin closes, then
/// exits the process; otherwise returns at once.
///
/// Call it first thing in `main` of every executable a [`crate::Worker`]
/// starts — the build script, when the build tunes — before anything
/// writes to stdout.
pub fn worker_main_if_requested() {
    if std::env::var_os(WORKER_ENV).is_none_or(|v| v != "1") {
        return;
    }
    let code = serve(std::io::stdin().lock(), std::io::stdout().lock());
    std::process::exit(code);
}

/// The requests' loop; the process's exit code.
fn serve(input: impl BufRead, mut output: impl Write) -> i32 {
    let hello = Hello {
        ktune_measure_worker: PROTOCOL_VERSION,
        pid: std::process::id(),
    };
    if write_line(&mut output, &hello).is_err() {
        return 1;
    }
    let mut state = State::default();
    for line in input.lines() {
        let Ok(line) = line else { return 1 };
        if line.trim().is_empty() {
            continue;
        }
        let response = match serde_json::from_str::<Request>(&line) {
            Ok(Request::Measure(request)) => {
                if let Some(Injection::Exit { code }) = request.inject {
                    std::process::exit(code);
                }
                let (result, retire) = state.handle(&request);
                Response::Done {
                    id: request.id,
                    result: result.map(Box::new),
                    retire,
                }
            }
            Ok(Request::Prepare(request)) => Response::Prepared {
                id: request.id,
                cached: state.compile(&request),
            },
            Err(e) => Response::BadRequest {
                message: format!("worker protocol {PROTOCOL_VERSION}: unreadable request: {e}"),
            },
        };
        let retire = matches!(response, Response::Done { retire: true, .. });
        if write_line(&mut output, &response).is_err() {
            return 1;
        }
        if retire {
            return 0;
        }
    }
    0
}

fn write_line(output: &mut impl Write, message: &impl serde::Serialize) -> std::io::Result<()> {
    let line = serde_json::to_string(message).map_err(std::io::Error::other)?;
    writeln!(output, "{line}")?;
    output.flush()
}

/// What the worker keeps between requests: each kernel parsed once, with
/// what its candidates are compared with, the GPU opened once, and the
/// candidates of the last prepare request compiled and not measured yet.
#[derive(Debug, Default)]
struct State {
    kernels: HashMap<Key, Opened>,
    gpus: HashMap<usize, Result<Gpu, String>>,
    compiled: HashMap<Candidate, Compiled>,
}

#[derive(Debug)]
struct Opened {
    kernel: Kernel,
    check: Check,
}

/// A candidate compiled ahead of its measure request.
#[derive(Debug)]
enum Compiled {
    /// The virtual GPU's whole answer: its check and estimate are
    /// deterministic, so running them early changes nothing.
    Vgpu(Result<Measured, Rejected>),
    /// The module loaded into the GPU's context (or why it did not load).
    Gpu(Result<Program, GpuRejected>),
}

#[derive(Debug)]
enum Check {
    Vgpu(Box<Reference>),
    Gpu {
        ordinal: usize,
        expected: Expected,
        rotation: Rotation,
    },
}

type Key = (Job, DeviceKind, u64);

/// A candidate: its kernel, schedule and injection.
type Candidate = (Key, Schedule, Option<Injection>);

impl State {
    /// Measures one request; with `true` when the worker must exit after
    /// answering.
    fn handle(&mut self, request: &Measure) -> (Result<Measured, Rejected>, bool) {
        match self.try_handle(request) {
            Ok(measured) => (Ok(measured), false),
            Err((rejected, retire)) => (Err(rejected), retire),
        }
    }

    fn try_handle(&mut self, request: &Measure) -> Result<Measured, (Rejected, bool)> {
        let Measure {
            device,
            job,
            schedule,
            settings,
            inject,
            ..
        } = request;
        let key = (job.clone(), *device, settings.seed);
        self.open(&key, settings)?;
        let compiled = self
            .compiled
            .remove(&(key.clone(), schedule.clone(), *inject));
        let Some(Opened { kernel, check }) = self.kernels.get_mut(&key) else {
            let why = "the kernel was not kept after opening it".to_string();
            return Err((Rejected::WorkerCrashed(why), true));
        };
        let target = job.target;
        let lowered = || lower_candidate(kernel, schedule, target, *inject).map_err(|r| (r, false));
        match (check, compiled) {
            (_, Some(Compiled::Vgpu(result))) => result.map_err(|r| (r, false)),
            (Check::Vgpu(reference), _) => {
                crate::vgpu::measure(kernel, reference, schedule, target, &lowered()?)
                    .map_err(|r| (r, false))
            }
            (
                Check::Gpu {
                    ordinal,
                    expected,
                    rotation,
                },
                compiled,
            ) => {
                let gpu = opened(self.gpus.get(ordinal), *ordinal)?;
                let program = match compiled {
                    Some(Compiled::Gpu(program)) => program?,
                    _ => gpu.load(&lowered()?, target)?,
                };
                gpu.measure(kernel, expected, rotation, &program, settings)
            }
        }
    }

    /// Compiles a prepare request's candidates on its number of threads,
    /// in place of those of the previous one; how many are now compiled
    /// (those that lower, up to [`CACHE_LIMIT`]). A candidate that does not
    /// lower, or a kernel that does not parse, is left for its measure
    /// request to reject; one not started by the request's deadline is
    /// left uncompiled.
    fn compile(&mut self, request: &Prepare) -> usize {
        self.compiled.clear();
        let Prepare {
            device,
            job,
            candidates,
            settings,
            jobs,
            within,
            ..
        } = request;
        let deadline = within.map(|within| Instant::now() + within);
        let key = (job.clone(), *device, settings.seed);
        if self.open(&key, settings).is_err() {
            return 0;
        }
        let Some(Opened { kernel, check }) = self.kernels.get(&key) else {
            return 0;
        };
        let target = job.target;
        // A candidate whose worker is to exit has nothing to compile.
        let candidates: Vec<&(Schedule, Option<Injection>)> = candidates
            .iter()
            .filter(|(_, inject)| !matches!(inject, Some(Injection::Exit { .. })))
            .take(CACHE_LIMIT)
            .collect();
        let lowered = |(schedule, inject): &&(Schedule, Option<Injection>)| {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return None;
            }
            lower_candidate(kernel, schedule, target, *inject).ok()
        };
        let compiled: Vec<Option<Compiled>> = match check {
            Check::Vgpu(reference) => parallel::map(*jobs, &candidates, |c| {
                let measured = crate::vgpu::measure(kernel, reference, &c.0, target, &lowered(c)?);
                Some(Compiled::Vgpu(measured))
            }),
            Check::Gpu { ordinal, .. } => {
                let Some(Ok(gpu)) = self.gpus.get(ordinal) else {
                    return 0;
                };
                let loader = gpu.loader();
                parallel::map(*jobs, &candidates, |c| {
                    Some(Compiled::Gpu(loader.load(&lowered(c)?, target)))
                })
            }
        };
        for (candidate, compiled) in candidates.into_iter().zip(compiled) {
            if let Some(compiled) = compiled {
                let (schedule, inject) = candidate;
                self.compiled
                    .insert((key.clone(), schedule.clone(), *inject), compiled);
            }
        }
        self.compiled.len()
    }

    /// The GPU with this ordinal, opened once (or why it could not be).
    fn gpu(&mut self, ordinal: usize) -> Result<&Gpu, (Rejected, bool)> {
        let gpu = self
            .gpus
            .entry(ordinal)
            .or_insert_with(|| Gpu::open(ordinal));
        opened(Some(gpu), ordinal)
    }

    /// Parses the kernel of `key` and computes what its candidates are
    /// compared with, once.
    fn open(&mut self, key: &Key, settings: &Settings) -> Result<(), (Rejected, bool)> {
        if self.kernels.contains_key(key) {
            return Ok(());
        }
        let (job, device, seed) = key;
        let kernel = job.parse().map_err(|e| {
            let why = format!("the kernel source does not parse: {e}");
            (Rejected::Invalid(why), false)
        })?;
        let check = match *device {
            DeviceKind::Vgpu => Check::Vgpu(Box::new(Reference::new(&kernel, *seed))),
            DeviceKind::Gpu { ordinal } => Check::Gpu {
                ordinal,
                expected: self.gpu(ordinal)?.expected(&kernel, job.target, settings)?,
                rotation: Rotation::default(),
            },
        };
        self.kernels.insert(key.clone(), Opened { kernel, check });
        Ok(())
    }
}

/// A candidate lowered, with its injection applied.
fn lower_candidate(
    kernel: &Kernel,
    schedule: &Schedule,
    target: SmVersion,
    inject: Option<Injection>,
) -> Result<Lowered, Rejected> {
    let mut lowered =
        lower::lower(kernel, schedule, target).map_err(|e| Rejected::Invalid(e.to_string()))?;
    if let Some(injection) = inject {
        injection.apply(&mut lowered.ptx);
    }
    Ok(lowered)
}

fn opened(gpu: Option<&Result<Gpu, String>>, ordinal: usize) -> Result<&Gpu, (Rejected, bool)> {
    match gpu {
        Some(Ok(gpu)) => Ok(gpu),
        Some(Err(e)) => Err((
            Rejected::WorkerCrashed(format!("GPU {ordinal}: {e}")),
            false,
        )),
        None => Err((
            Rejected::WorkerCrashed(format!("GPU {ordinal} was never opened")),
            false,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(output: &[u8]) -> Vec<serde_json::Value> {
        String::from_utf8_lossy(output)
            .lines()
            .map(|l| serde_json::from_str(l).expect("every line is JSON"))
            .collect()
    }

    #[test]
    fn the_worker_greets_and_answers_an_unreadable_request_without_exiting() {
        let job = Job::new(
            "#[tuned_kernel(shape(N = 64))]
             fn neg(x: Tensor<f32, N>) -> Tensor<f32, N> { compute(|i| -x[i]) }",
            ktune_core::SmVersion::Sm80,
        );
        let kernel = job.parse().expect("parses");
        let request = Request::Measure(Measure {
            id: 7,
            device: DeviceKind::Vgpu,
            schedule: lower::heuristic(&kernel, job.target),
            job,
            settings: Settings::default(),
            inject: None,
        });
        let input = format!(
            "not json\n\n{}\n",
            serde_json::to_string(&request).expect("serialises")
        );
        let mut output = Vec::new();
        assert_eq!(serve(input.as_bytes(), &mut output), 0);
        let lines = lines(&output);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(lines[0]["ktune_measure_worker"], PROTOCOL_VERSION);
        let message = lines[1]["bad_request"]["message"].as_str().unwrap_or("");
        assert!(message.contains("unreadable request"), "{message}");
        let done = &lines[2]["done"];
        assert_eq!(done["id"], 7);
        assert_eq!(done["retire"], false);
        assert_eq!(done["result"]["Ok"]["device"]["name"], crate::VGPU_NAME);
    }

    #[test]
    fn a_prepare_caches_what_lowers_and_each_measure_takes_its_own() {
        let job = Job::new(
            "#[tuned_kernel(shape(N = 300))]
             fn neg(x: Tensor<f32, N>) -> Tensor<f32, N> { compute(|i| -x[i]) }",
            ktune_core::SmVersion::Sm80,
        );
        let schedule = |block| ktune_core::schedule::Schedule::Elementwise {
            block,
            per_thread: 1,
            vector: 1,
        };
        let candidates = vec![
            (schedule(64), None),
            (schedule(33), None),
            (schedule(64), Some(Injection::WrongStore)),
            (schedule(128), Some(Injection::Exit { code: 1 })),
        ];
        let prepare = Prepare {
            id: 1,
            device: DeviceKind::Vgpu,
            job: job.clone(),
            candidates: candidates.clone(),
            settings: Settings::default(),
            jobs: 2,
            within: None,
        };
        let measure = |(schedule, inject): &(Schedule, Option<Injection>)| Measure {
            id: 2,
            device: DeviceKind::Vgpu,
            job: job.clone(),
            schedule: schedule.clone(),
            settings: Settings::default(),
            inject: *inject,
        };
        let mut state = State::default();
        assert_eq!(state.compile(&prepare), 2, "a block of 33 does not lower");
        let mut fresh = State::default();
        for candidate in &candidates[..3] {
            let cached = state.compiled.len();
            assert_eq!(
                state.handle(&measure(candidate)),
                fresh.handle(&measure(candidate))
            );
            let taken = usize::from(candidate.0 != schedule(33));
            assert_eq!(state.compiled.len(), cached - taken, "{candidate:?}");
        }
        assert_eq!(state.compile(&prepare), 2);
        assert_eq!(
            state.compile(&Prepare {
                candidates: Vec::new(),
                ..prepare
            }),
            0
        );
        assert!(state.compiled.is_empty(), "a new batch replaces the last");
    }
}

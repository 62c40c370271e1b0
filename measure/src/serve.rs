//! The worker's side: read requests, measure, answer.

use std::collections::HashMap;
use std::io::{BufRead, Write};

use ktune_core::ir::Kernel;
use ktune_core::lower;
use ktune_vgpu::verify::Reference;

use crate::gpu::{Expected, Gpu, Rotation};
use crate::protocol::{Hello, PROTOCOL_VERSION, Request, Response};
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
            Ok(request) => {
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
/// what its candidates are compared with, and the GPU opened once.
#[derive(Debug, Default)]
struct State {
    kernels: HashMap<Key, Prepared>,
    gpus: HashMap<usize, Result<Gpu, String>>,
}

#[derive(Debug)]
struct Prepared {
    kernel: Kernel,
    check: Check,
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

impl State {
    /// Measures one request; with `true` when the worker must exit after
    /// answering.
    fn handle(&mut self, request: &Request) -> (Result<Measured, Rejected>, bool) {
        match self.try_handle(request) {
            Ok(measured) => (Ok(measured), false),
            Err((rejected, retire)) => (Err(rejected), retire),
        }
    }

    fn try_handle(&mut self, request: &Request) -> Result<Measured, (Rejected, bool)> {
        let Request {
            device,
            job,
            schedule,
            settings,
            inject,
            ..
        } = request;
        let key = (job.clone(), *device, settings.seed);
        self.prepare(&key, settings)?;
        let Some(Prepared { kernel, check }) = self.kernels.get_mut(&key) else {
            let why = "the kernel was not kept after preparing it".to_string();
            return Err((Rejected::WorkerCrashed(why), true));
        };
        let target = job.target;
        let mut lowered = lower::lower(kernel, schedule, target)
            .map_err(|e| (Rejected::Invalid(e.to_string()), false))?;
        if let Some(injection) = inject {
            injection.apply(&mut lowered.ptx);
        }
        match check {
            Check::Vgpu(reference) => {
                crate::vgpu::measure(kernel, reference, schedule, target, &lowered)
                    .map_err(|r| (r, false))
            }
            Check::Gpu {
                ordinal,
                expected,
                rotation,
            } => opened(self.gpus.get(ordinal), *ordinal)?
                .measure(kernel, expected, rotation, &lowered, target, settings),
        }
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
    fn prepare(&mut self, key: &Key, settings: &Settings) -> Result<(), (Rejected, bool)> {
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
        self.kernels.insert(key.clone(), Prepared { kernel, check });
        Ok(())
    }
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
        let request = Request {
            id: 7,
            device: DeviceKind::Vgpu,
            schedule: lower::heuristic(&kernel, job.target),
            job,
            settings: Settings::default(),
            inject: None,
        };
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
}

//! The parent's side: a child process that measures, a timeout per
//! request, and a new child after every timeout or crash.

use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ktune_core::schedule::Schedule;

use crate::protocol::{Hello, Measure, PROTOCOL_VERSION, Prepare, Request, Response};
use crate::{DeviceKind, Injection, Job, Measured, Rejected, Settings, WORKER_ENV, default_jobs};

/// The end of the worker's stderr kept for crash reports.
const STDERR_TAIL: usize = 4096;

/// How a [`Worker`] is started and how long it may take.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    program: PathBuf,
    device: DeviceKind,
    timeout: Duration,
    startup_timeout: Duration,
    settings: Settings,
    jobs: usize,
}

impl WorkerConfig {
    /// Workers that are the current executable (which must call
    /// [`crate::worker_main_if_requested`] first thing), measuring on
    /// `device`, with a 120 s timeout per request.
    ///
    /// # Errors
    ///
    /// [`WorkerError::CurrentExe`] when the current executable's path is
    /// unknown.
    pub fn new(device: DeviceKind) -> Result<WorkerConfig, WorkerError> {
        let program = std::env::current_exe().map_err(WorkerError::CurrentExe)?;
        Ok(WorkerConfig::with_program(program, device))
    }

    /// Workers that are `program` (which must call
    /// [`crate::worker_main_if_requested`] first thing), compiling on
    /// [`default_jobs`] threads.
    pub fn with_program(program: impl Into<PathBuf>, device: DeviceKind) -> WorkerConfig {
        WorkerConfig {
            program: program.into(),
            device,
            timeout: Duration::from_secs(120),
            startup_timeout: Duration::from_secs(30),
            settings: Settings::default(),
            jobs: default_jobs(),
        }
    }

    /// How many threads compile the candidates of a [`Worker::prepare`]
    /// (at least one).
    pub fn jobs(mut self, jobs: usize) -> WorkerConfig {
        self.jobs = jobs.max(1);
        self
    }

    /// How long one request may take, from sending it to its answer (the
    /// kernel's first use also parses it and computes its reference).
    pub fn timeout(mut self, timeout: Duration) -> WorkerConfig {
        self.timeout = timeout;
        self
    }

    /// How long a new worker may take to greet.
    pub fn startup_timeout(mut self, timeout: Duration) -> WorkerConfig {
        self.startup_timeout = timeout;
        self
    }

    /// How points are checked and timed.
    pub fn settings(mut self, settings: Settings) -> WorkerConfig {
        self.settings = settings;
        self
    }
}

/// Why a worker could not be started.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("cannot find the current executable to start as a measurement worker: {0}")]
    CurrentExe(#[source] io::Error),
    #[error("cannot start the measurement worker `{}`: {source}", program.display())]
    Spawn {
        program: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "the measurement worker `{}` did not greet with protocol {PROTOCOL_VERSION}: {detail} \
         (its main must call ktune_measure::worker_main_if_requested() first)",
        program.display()
    )]
    Handshake { program: PathBuf, detail: String },
}

/// A measurement worker: one child process at a time, requests answered
/// one at a time. A request that times out kills the child
/// ([`Rejected::Timeout`]); a child that exits or garbles its answer
/// gives [`Rejected::WorkerCrashed`]; either way the next request starts a
/// new child.
pub struct Worker {
    config: WorkerConfig,
    running: Option<Running>,
    next_id: u64,
    starts: u32,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("config", &self.config)
            .field("pid", &self.running.as_ref().map(|r| r.child.id()))
            .field("starts", &self.starts)
            .finish()
    }
}

/// A started child.
struct Running {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<io::Result<String>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    stderr_thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Starts a worker and checks its greeting.
    ///
    /// # Errors
    ///
    /// When the program cannot be started, or does not greet with this
    /// protocol version in time.
    pub fn spawn(config: WorkerConfig) -> Result<Worker, WorkerError> {
        let mut worker = Worker {
            config,
            running: None,
            next_id: 0,
            starts: 0,
        };
        worker.start()?;
        Ok(worker)
    }

    /// The device this worker measures on.
    pub fn device(&self) -> DeviceKind {
        self.config.device
    }

    /// How many times a child was started again after a timeout or crash.
    pub fn restarts(&self) -> u32 {
        self.starts.saturating_sub(1)
    }

    /// Checks and times `schedule` for `job`'s kernel.
    pub fn measure(&mut self, job: &Job, schedule: &Schedule) -> Result<Measured, Rejected> {
        self.request(job, schedule, None)
    }

    /// [`Worker::measure`] with a fault injected into the candidate, to
    /// test that each kind of failure is rejected and the worker goes on.
    pub fn measure_injected(
        &mut self,
        job: &Job,
        schedule: &Schedule,
        injection: Injection,
    ) -> Result<Measured, Rejected> {
        self.request(job, schedule, Some(injection))
    }

    /// Compiles `schedules` of `job`'s kernel, on the configured number of
    /// threads, for the [`Worker::measure`] calls that follow; how many
    /// were compiled (those that lower). A hint: measuring answers the
    /// same with or without it, and a candidate that was not compiled is
    /// compiled when measured. A new prepare replaces what the last one
    /// compiled and was not measured. Waits as long as measuring them one
    /// by one on each thread may take; a worker that crashes or times out
    /// meanwhile is ended (0 compiled), and the next request starts a new
    /// one. With a `deadline`, no candidate starts compiling after it (no
    /// measurement does either: a search's batch is not allowed to run
    /// past its time).
    pub fn prepare(
        &mut self,
        job: &Job,
        schedules: &[Schedule],
        deadline: Option<Instant>,
    ) -> usize {
        let candidates: Vec<(Schedule, Option<Injection>)> =
            schedules.iter().map(|s| (s.clone(), None)).collect();
        self.prepare_injected(job, &candidates, deadline)
    }

    /// [`Worker::prepare`] for candidates that will be measured with these
    /// injections ([`Worker::measure_injected`]).
    pub fn prepare_injected(
        &mut self,
        job: &Job,
        candidates: &[(Schedule, Option<Injection>)],
        deadline: Option<Instant>,
    ) -> usize {
        let jobs = self.config.jobs.max(1);
        let rounds = candidates.len().div_ceil(jobs).max(1);
        let timeout = self
            .config
            .timeout
            .saturating_mul(u32::try_from(rounds).unwrap_or(u32::MAX));
        let id = self.next_id();
        let request = Request::Prepare(Prepare {
            id,
            device: self.config.device,
            job: job.clone(),
            candidates: candidates.to_vec(),
            settings: self.config.settings.clone(),
            jobs,
            within: deadline.map(|d| d.saturating_duration_since(Instant::now())),
        });
        match self.exchange(id, &request, timeout) {
            Ok(Response::Prepared { cached, .. }) => cached,
            Ok(_) => {
                self.crashed(&format!("answered prepare request {id} with a measurement"));
                0
            }
            Err(_) => 0,
        }
    }

    fn request(
        &mut self,
        job: &Job,
        schedule: &Schedule,
        inject: Option<Injection>,
    ) -> Result<Measured, Rejected> {
        let id = self.next_id();
        let request = Request::Measure(Measure {
            id,
            device: self.config.device,
            job: job.clone(),
            schedule: schedule.clone(),
            settings: self.config.settings.clone(),
            inject,
        });
        match self.exchange(id, &request, self.config.timeout)? {
            Response::Done { result, retire, .. } => {
                if retire {
                    self.stop();
                }
                result.map(|m| *m)
            }
            _ => Err(self.crashed(&format!("answered request {id} as a prepare request"))),
        }
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Sends `request` (number `id`) to the child, starting one if needed,
    /// and waits up to `timeout` for its answer.
    fn exchange(
        &mut self,
        id: u64,
        request: &Request,
        timeout: Duration,
    ) -> Result<Response, Rejected> {
        if self.running.is_none() {
            self.start()
                .map_err(|e| Rejected::WorkerCrashed(e.to_string()))?;
        }
        let Some(running) = self.running.as_mut() else {
            return Err(Rejected::WorkerCrashed("no worker is running".into()));
        };
        let sent = serde_json::to_string(request)
            .map_err(io::Error::other)
            .and_then(|line| writeln!(running.stdin, "{line}"))
            .and_then(|()| running.stdin.flush());
        if let Err(e) = sent {
            let why = format!("could not send the request: {e}");
            return Err(self.crashed(&why));
        }
        match running.lines.recv_timeout(timeout) {
            Ok(Ok(line)) => match serde_json::from_str::<Response>(&line) {
                Ok(
                    response @ (Response::Done { id: answered, .. }
                    | Response::Prepared { id: answered, .. }),
                ) if answered == id => Ok(response),
                Ok(
                    Response::Done { id: answered, .. } | Response::Prepared { id: answered, .. },
                ) => {
                    let why = format!("answered request {answered} to request {id}");
                    Err(self.crashed(&why))
                }
                Ok(Response::BadRequest { message }) => Err(self.crashed(&message)),
                Err(e) => {
                    let why = format!("unreadable answer ({e}): {}", clip(&line));
                    Err(self.crashed(&why))
                }
            },
            Ok(Err(e)) => Err(self.crashed(&format!("reading its answer: {e}"))),
            Err(RecvTimeoutError::Timeout) => {
                if let Some(mut running) = self.running.take() {
                    let _ = running.child.kill();
                    let _ = running.child.wait();
                }
                Err(Rejected::Timeout {
                    after_s: timeout.as_secs_f64(),
                })
            }
            Err(RecvTimeoutError::Disconnected) => {
                Err(self.crashed("it closed its output in the middle of the request"))
            }
        }
    }

    /// Ends the child after it broke off a request, and says how it ended.
    fn crashed(&mut self, what: &str) -> Rejected {
        let Some(running) = self.running.take() else {
            return Rejected::WorkerCrashed(what.to_string());
        };
        let (status, stderr) = running.finish(Duration::from_secs(2));
        let status = match status {
            Some(status) => format!("; it {}", describe(status)),
            None => "; it was killed".to_string(),
        };
        let stderr = stderr.trim();
        let stderr = if stderr.is_empty() {
            String::new()
        } else {
            format!("; its stderr ends with: {stderr}")
        };
        Rejected::WorkerCrashed(format!("{what}{status}{stderr}"))
    }

    /// Ends the child after it said it would exit.
    fn stop(&mut self) {
        if let Some(running) = self.running.take() {
            running.finish(Duration::from_secs(5));
        }
    }

    fn start(&mut self) -> Result<(), WorkerError> {
        let program = &self.config.program;
        let mut command = Command::new(program);
        command
            .env(WORKER_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // In a process group of its own, the worker does not get the
        // terminal's Ctrl-C: the parent decides (`cargo ktune tune` lets
        // the measurement in progress finish). It ends when the parent
        // does, at its next read of a request.
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = command.spawn().map_err(|source| WorkerError::Spawn {
            program: program.clone(),
            source,
        })?;
        self.starts += 1;
        let (Some(stdin), Some(stdout), Some(stderr_pipe)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(WorkerError::Handshake {
                program: program.clone(),
                detail: "its standard streams were not piped".into(),
            });
        };
        let (send, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let failed = line.is_err();
                if send.send(line).is_err() || failed {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let tail = stderr.clone();
        let stderr_thread = std::thread::spawn(move || keep_tail(stderr_pipe, &tail));
        let running = Running {
            child,
            stdin,
            lines,
            stderr,
            stderr_thread: Some(stderr_thread),
        };
        let greeting = match running.lines.recv_timeout(self.config.startup_timeout) {
            Ok(Ok(line)) => match serde_json::from_str::<Hello>(&line) {
                Ok(hello) if hello.ktune_measure_worker == PROTOCOL_VERSION => Ok(()),
                Ok(hello) => Err(format!("it speaks protocol {}", hello.ktune_measure_worker)),
                Err(_) => Err(format!("its first line is {}", clip(&line))),
            },
            Ok(Err(e)) => Err(format!("reading its greeting: {e}")),
            Err(RecvTimeoutError::Timeout) => Err(format!(
                "no greeting within {:.1} s",
                self.config.startup_timeout.as_secs_f64()
            )),
            Err(RecvTimeoutError::Disconnected) => Err("it exited without a word".into()),
        };
        match greeting {
            Ok(()) => {
                self.running = Some(running);
                Ok(())
            }
            Err(detail) => {
                let (_, stderr) = running.finish(Duration::ZERO);
                let stderr = stderr.trim();
                let detail = if stderr.is_empty() {
                    detail
                } else {
                    format!("{detail}; its stderr ends with: {stderr}")
                };
                Err(WorkerError::Handshake {
                    program: program.clone(),
                    detail,
                })
            }
        }
    }
}

impl Running {
    /// Closes the child's stdin, waits up to `grace` for it to exit, kills
    /// it otherwise; its exit status (`None` when killed) and the end of
    /// its stderr.
    fn finish(mut self, grace: Duration) -> (Option<ExitStatus>, String) {
        drop(self.stdin);
        let deadline = Instant::now() + grace;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break None;
                }
            }
        };
        if let Some(thread) = self.stderr_thread.take() {
            let _ = thread.join();
        }
        let tail = self.stderr.lock().unwrap_or_else(PoisonError::into_inner);
        (status, String::from_utf8_lossy(&tail).into_owned())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Reads `pipe` to its end, keeping the last [`STDERR_TAIL`] bytes.
fn keep_tail(mut pipe: impl Read, tail: &Mutex<Vec<u8>>) {
    let mut chunk = [0u8; 1024];
    while let Ok(n) = pipe.read(&mut chunk) {
        if n == 0 {
            break;
        }
        let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
        tail.extend_from_slice(&chunk[..n]);
        let excess = tail.len().saturating_sub(STDERR_TAIL);
        tail.drain(..excess);
    }
}

fn describe(status: ExitStatus) -> String {
    match status.code() {
        Some(code) => format!("exited with code {code}"),
        None => format!("was ended by a signal ({status})"),
    }
}

/// A line cut to a readable length for an error message.
fn clip(line: &str) -> String {
    const MAX: usize = 200;
    match line.char_indices().nth(MAX) {
        Some((at, _)) => format!("{:?}…", &line[..at]),
        None => format!("{line:?}"),
    }
}

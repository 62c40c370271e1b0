//! The search on a miss: when no database layer has a record of a kernel
//! for the device at hand, measure candidates of its schedule space and
//! bank the winner.
//!
//! - **Device** (`KTUNE_DEVICE`): `gpu`, `vgpu` (the virtual GPU: real
//!   correctness checks, an estimated time; its records are marked and
//!   never chosen for a real GPU) or `none` (heuristic defaults, quietly).
//!   Unset: the GPU when the driver finds one, else none — then the build
//!   uses heuristic defaults and warns, listing what is untuned.
//! - **Effort**: the bounded search (the heuristic model's best
//!   `KTUNE_BUDGET` candidates, default [`BOUNDED_CANDIDATES`], Inductor
//!   style) unless the crate's `max-autotune` feature is on: then the full
//!   search, evolutionary with a learned cost model and a coordinate-descent
//!   polish, `KTUNE_BUDGET` evaluations (default [`FULL_EVALUATIONS`];
//!   [`VGPU_FULL_EVALUATIONS`] on the virtual GPU). Either stops early
//!   after `KTUNE_SECONDS` per kernel (default [`BOUNDED_SECONDS`] for the
//!   bounded search, which runs in every plain build with a miss, and
//!   [`SECONDS`] for the full one; [`VGPU_SECONDS`] on the virtual GPU).
//!   The heuristic default is always measured first: it is the baseline of
//!   the record.
//! - **Confirming** (on a GPU, within the search's time): the fastest
//!   candidates, those within [`CONFIRM_WITHIN`] of the fastest (at most
//!   [`CONFIRM_MOST`]), and the default are measured again in two rounds,
//!   the second reversed, before the winner is recorded, so that a clock
//!   drifting through the search does not choose it; the record then
//!   keeps the confirmed times, the default's as its baseline
//!   ([`Task::confirm`]).
//! - **Where results go**: the bounded search's to the per-user cache, the
//!   full search's to the crate's database (`KTUNE_WRITE=crate` sends the
//!   bounded search's there too).
//! - **Resuming**: every measurement is appended to a journal under the
//!   target directory, keyed by kernel checksum, shape, device and target;
//!   a search that was interrupted replays it instead of measuring again.
//!   The strategies are seeded, so they ask for the same points again.
//! - **Compiling**: the points a strategy has in hand at once (a
//!   generation, the bounded search's candidates, a knob's line) are
//!   announced to the measurement worker, less those the journal answers,
//!   and it compiles them on the build's job limit of threads (`NUM_JOBS`)
//!   before measuring them one at a time.

mod campaign;
mod confirm;
mod journal;
mod task;

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ktune_core::db::{Clocks, ComputeCapability, Gpu, MeasuredOn};
use ktune_core::ir::Kernel;
use ktune_core::schedule::Schedule;
use ktune_core::{GENERATOR_VERSION, SmVersion, canon};
use ktune_measure::{DeviceInfo, DeviceKind, Job, Worker, WorkerConfig};
use ktune_search::measure::Rejection;
use ktune_search::session::Deadline;
use serde::{Deserialize, Serialize};

pub use campaign::{Campaign, CampaignResult, KernelRun};
pub use confirm::{CONFIRM_MOST, CONFIRM_WITHIN};
pub use journal::{Journal, Observer, Progress, measured_line};
pub use task::{Method, Plan, Step, Task, Tuned, best_so_far};

use crate::error::Error;
use crate::layer::{Layer, Layers};
use crate::scan::Found;

/// Candidates the bounded search measures by default.
pub const BOUNDED_CANDIDATES: usize = 8;
/// Evaluations the full search makes by default.
pub const FULL_EVALUATIONS: usize = 64;
/// Seconds a kernel's full search may take by default.
pub const SECONDS: u64 = 300;
/// Seconds a kernel's bounded search may take by default: it runs in a
/// plain build, which should not wait long.
pub const BOUNDED_SECONDS: u64 = 30;
/// The defaults on the virtual GPU, which interprets every candidate at
/// the kernel's real shape and so is far slower than a GPU.
pub const VGPU_FULL_EVALUATIONS: usize = 16;
pub const VGPU_SECONDS: u64 = 120;
/// The variables the search reads.
pub const ENV: [&str; 4] = [
    "KTUNE_DEVICE",
    "KTUNE_BUDGET",
    "KTUNE_SECONDS",
    "KTUNE_WRITE",
];

/// How hard to search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effort {
    /// Measure the model's best `candidates` points.
    Bounded { candidates: usize },
    /// Evolutionary search with a cost model, `evaluations` measurements.
    Full { evaluations: usize },
}

/// The search's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// What measures candidates; none: heuristic defaults only.
    pub device: Option<DeviceKind>,
    pub effort: Effort,
    /// Wall-clock time a kernel's search may take.
    pub time: Duration,
    /// Whether results go to the crate's database (else the user cache).
    pub write_crate: bool,
}

impl Settings {
    /// The settings from `KTUNE_*` variables (read with `var`); `full` when
    /// the crate's `max-autotune` feature is on. An unset `KTUNE_DEVICE`
    /// means the GPU when the driver finds one.
    pub fn from_env(var: impl Fn(&str) -> Option<String>, full: bool) -> Result<Settings, Error> {
        let bad = |name: &'static str, value: String, expected: &'static str| Error::Setting {
            name,
            value,
            expected,
        };
        let device =
            ktune_measure::device_from_env_value(var("KTUNE_DEVICE").as_deref()).map_err(|e| {
                Error::Device {
                    device: var("KTUNE_DEVICE").unwrap_or_default(),
                    reason: e.to_string(),
                }
            })?;
        let budget = match var("KTUNE_BUDGET") {
            None => None,
            Some(v) => Some(
                v.parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| bad("KTUNE_BUDGET", v, "a positive number of candidates"))?,
            ),
        };
        let on_vgpu = device == Some(DeviceKind::Vgpu);
        let time = match var("KTUNE_SECONDS") {
            None => Duration::from_secs(match (on_vgpu, full) {
                (true, _) => VGPU_SECONDS,
                (false, true) => SECONDS,
                (false, false) => BOUNDED_SECONDS,
            }),
            Some(v) => Duration::from_secs(
                v.parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| bad("KTUNE_SECONDS", v, "a positive number of seconds"))?,
            ),
        };
        let write_crate = match var("KTUNE_WRITE").as_deref() {
            None | Some("") => full,
            Some("crate") => true,
            Some("user") => false,
            Some(other) => return Err(bad("KTUNE_WRITE", other.into(), "crate or user")),
        };
        let effort = if full {
            Effort::Full {
                evaluations: budget.unwrap_or(if on_vgpu {
                    VGPU_FULL_EVALUATIONS
                } else {
                    FULL_EVALUATIONS
                }),
            }
        } else {
            Effort::Bounded {
                candidates: budget.unwrap_or(BOUNDED_CANDIDATES),
            }
        };
        Ok(Settings {
            device,
            effort,
            time,
            write_crate,
        })
    }
}

impl Settings {
    /// One kernel's search, starting at `start`.
    pub fn plan(&self, start: Instant) -> Plan {
        let (method, evaluations) = match self.effort {
            Effort::Bounded { candidates } => (Method::Bounded, candidates + 1),
            Effort::Full { evaluations } => (Method::Evolutionary, evaluations),
        };
        Plan {
            method,
            evaluations,
            deadline: Deadline::at(start + self.time),
        }
    }
}

/// A kernel's measured time: the median and an interval around it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    pub median_us: f64,
    pub low_us: f64,
    pub high_us: f64,
    pub samples: u32,
    /// The GPU was throttling while the runs were timed (the driver
    /// reported a power or thermal slowdown, or the runs slowed down): the
    /// time is suspect. Left out of the JSON form when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub throttled: bool,
}

/// Measures schedule points of kernels on one device.
pub trait Bench {
    /// The GPU records are made for (for the virtual GPU, a name that says
    /// so and the target's compute capability).
    fn gpu(&self) -> Gpu;
    fn measured_on(&self) -> MeasuredOn;
    /// The target this device's code is generated for.
    fn target(&self) -> SmVersion;
    /// Measures `schedule` of `kernel` (whose source is `source`); a wrong,
    /// crashing or hanging candidate is a rejection with its reason.
    fn measure(
        &mut self,
        kernel: &Kernel,
        source: &str,
        schedule: &Schedule,
    ) -> Result<Timing, Rejection>;

    /// A hint: `schedules` of `kernel` are about to be measured, in this
    /// order, none after `deadline`; a bench that compiles candidates may
    /// compile them all now, in parallel, starting none after the
    /// deadline. It must not change what [`Bench::measure`] answers. Does
    /// nothing by default.
    fn prepare(
        &mut self,
        kernel: &Kernel,
        source: &str,
        schedules: &[Schedule],
        deadline: Option<Instant>,
    ) {
        let _ = (kernel, source, schedules, deadline);
    }
}

/// Searches `kernel`'s space on `bench`'s device within `settings`, with
/// `journal` holding what earlier, interrupted runs measured; the full
/// search starts from `known` (the database's winners for other GPUs) and
/// the model's best points; its winner confirmed side by side with the
/// other fastest ([`Task::confirm`]). `None` when no candidate could be
/// measured.
pub fn search(
    kernel: &Kernel,
    source: &str,
    bench: &mut dyn Bench,
    settings: &Settings,
    known: &[Schedule],
    journal: &mut Journal,
    observer: &mut dyn Observer,
) -> Option<Tuned> {
    let task = Task::new(kernel, source, bench.target(), known);
    let plan = settings.plan(Instant::now());
    let tuned = task.search(bench, &plan, journal, observer).ok()?;
    task.confirm(bench, tuned, plan.deadline, observer)
}

/// Where a build's search keeps its files.
#[derive(Debug, Clone)]
pub struct Places {
    /// The crate's database, written by the full search.
    pub crate_database: PathBuf,
    /// The per-user cache, written by the bounded search (the crate's
    /// database when there is none).
    pub user_cache: Option<PathBuf>,
    /// Journals and the progress log (under the target directory).
    pub work: PathBuf,
}

/// What a build's search did.
#[derive(Debug, Default)]
pub struct Summary {
    /// The kernels searched, with what was found.
    pub tuned: Vec<Tuned>,
    /// Kernels that have no measured record and were not searched (no
    /// device), by name.
    pub untuned: Vec<String>,
    /// Kernels the virtual GPU did not search, being too large for it.
    pub too_large: Vec<ktune_measure::TooLarge>,
    /// Kernels whose search ran out of time with the default alone
    /// measured: nothing recorded, and the next build goes on from the
    /// journal.
    pub out_of_time: Vec<String>,
    /// Where results were written.
    pub written_to: Option<PathBuf>,
}

/// A device's identity, and the target its code is generated for.
#[derive(Debug, Clone)]
pub struct DeviceTarget {
    pub kind: DeviceKind,
    pub gpu: Gpu,
    pub measured_on: MeasuredOn,
    pub target: SmVersion,
}

impl DeviceTarget {
    /// `kind`'s identity: for a GPU, asked of the driver (its target the
    /// newest ktune has that the GPU runs); for the virtual GPU, the newest
    /// of `targets`.
    pub fn of(kind: DeviceKind, targets: &[SmVersion]) -> Result<DeviceTarget, Error> {
        let newest = targets.iter().copied().max().unwrap_or(SmVersion::BASELINE);
        let info = ktune_measure::device_info(kind, newest).map_err(|reason| Error::Device {
            device: kind.to_string(),
            reason,
        })?;
        let (major, minor) = info.compute_capability;
        let target = SmVersion::ALL
            .into_iter()
            .filter(|t| t.compute_capability() <= (major, minor))
            .max()
            .unwrap_or(SmVersion::BASELINE);
        Ok(DeviceTarget {
            kind,
            gpu: gpu_of(&info),
            measured_on: if info.is_virtual() {
                MeasuredOn::Vgpu
            } else {
                MeasuredOn::Gpu
            },
            target,
        })
    }
}

/// The GPU and its target, `NVIDIA H200 (sm_90)`; the virtual GPU's name
/// holds its target already.
impl fmt::Display for DeviceTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.measured_on {
            MeasuredOn::Vgpu => f.write_str(&self.gpu.name),
            MeasuredOn::Gpu => write!(f, "{} ({})", self.gpu.name, self.target),
        }
    }
}

fn gpu_of(info: &DeviceInfo) -> Gpu {
    let (major, minor) = info.compute_capability;
    let name = if info.is_virtual() {
        format!(
            "{} ({})",
            info.name,
            SmVersion::from_compute_capability(major, minor).map_or("?", SmVersion::name)
        )
    } else {
        info.name.clone()
    };
    Gpu {
        name,
        compute_capability: ComputeCapability { major, minor },
        sm_count: info.sm_count,
        driver: info.driver_version.clone().unwrap_or_default(),
        cuda: info.cuda_version.clone().unwrap_or_default(),
        clocks_mhz: match (info.max_sm_clock_mhz, info.memory_clock_mhz) {
            (Some(sm), Some(memory)) => Some(Clocks { sm, memory }),
            _ => None,
        },
    }
}

/// Measures through a [`Worker`] child process: the current executable,
/// which must call [`ktune_measure::worker_main_if_requested`] first thing.
#[derive(Debug)]
pub struct WorkerBench {
    worker: Worker,
    device: DeviceTarget,
}

impl WorkerBench {
    /// A worker measuring on `device`, compiling on the build's job limit
    /// of threads (`NUM_JOBS`, else the machine's cores).
    pub fn spawn(device: DeviceTarget) -> Result<WorkerBench, Error> {
        WorkerBench::with_jobs(device, ktune_measure::default_jobs())
    }

    /// A worker measuring on `device`, compiling on `jobs` threads.
    pub fn with_jobs(device: DeviceTarget, jobs: usize) -> Result<WorkerBench, Error> {
        let failed = |reason: String| Error::Device {
            device: device.kind.to_string(),
            reason,
        };
        let config = WorkerConfig::new(device.kind)
            .map_err(|e| failed(e.to_string()))?
            .timeout(MEASURE_TIMEOUT)
            .jobs(jobs);
        let worker = Worker::spawn(config).map_err(|e| failed(e.to_string()))?;
        Ok(WorkerBench { worker, device })
    }
}

impl Bench for WorkerBench {
    fn gpu(&self) -> Gpu {
        self.device.gpu.clone()
    }

    fn measured_on(&self) -> MeasuredOn {
        self.device.measured_on
    }

    fn target(&self) -> SmVersion {
        self.device.target
    }

    fn measure(
        &mut self,
        _: &Kernel,
        source: &str,
        schedule: &Schedule,
    ) -> Result<Timing, Rejection> {
        let job = Job::new(source, self.device.target);
        let m = self.worker.measure(&job, schedule)?;
        Ok(Timing {
            median_us: m.median_us,
            low_us: m.p10_us,
            high_us: m.p90_us,
            samples: m.samples,
            throttled: m.throttled,
        })
    }

    /// Has the worker compile them on the build's job limit of threads
    /// ([`ktune_measure::Worker::prepare`]).
    fn prepare(
        &mut self,
        _: &Kernel,
        source: &str,
        schedules: &[Schedule],
        deadline: Option<Instant>,
    ) {
        let job = Job::new(source, self.device.target);
        self.worker.prepare(&job, schedules, deadline);
    }
}

/// Whether a layer holds a current record of `kernel` for `gpu`, measured
/// the way `measured_on` measures; with `committed_only`, a layer other
/// than the per-user cache (the full search writes the crate's database,
/// whatever a bounded search left in the cache).
fn covered(
    kernel: &Kernel,
    layers: &Layers,
    gpu: &Gpu,
    measured_on: MeasuredOn,
    committed_only: bool,
) -> bool {
    let checksum = canon::checksum(kernel);
    let fingerprint = gpu.fingerprint();
    layers.records().any(|(opened, r)| {
        !(committed_only && opened.layer == Layer::UserCache)
            && r.checksum == checksum
            && r.provenance.generator_version == GENERATOR_VERSION
            && r.provenance.measured_on == measured_on
            && r.gpu.fingerprint() == fingerprint
            && r.shape.iter().all(|(name, size)| {
                kernel
                    .dims
                    .iter()
                    .any(|d| d.name == *name && d.size == *size)
            })
    })
}

/// Searches every kernel of `kernels` that no layer covers for the device
/// `settings` names, banking each winner; with no device, lists the
/// kernels no layer holds a real measurement of.
pub fn run(
    kernels: &[Found],
    layers: &Layers,
    settings: &Settings,
    targets: &[SmVersion],
    places: &Places,
) -> Result<Summary, Error> {
    let Some(kind) = settings.device else {
        let untuned = kernels
            .iter()
            .filter(|f| {
                let checksum = canon::checksum(&f.kernel);
                !layers.records().any(|(_, r)| {
                    r.checksum == checksum && r.provenance.measured_on == MeasuredOn::Gpu
                })
            })
            .map(|f| f.kernel.name.clone())
            .collect();
        return Ok(Summary {
            untuned,
            ..Summary::default()
        });
    };
    let device = DeviceTarget::of(kind, targets)?;
    let missing: Vec<&Found> = kernels
        .iter()
        .filter(|f| {
            !covered(
                &f.kernel,
                layers,
                &device.gpu,
                device.measured_on,
                settings.write_crate,
            )
        })
        .collect();
    // The virtual GPU runs a kernel thread by thread: a large one would
    // time out candidate after candidate.
    let mut too_large = Vec::new();
    let missing: Vec<&Found> = missing
        .into_iter()
        .filter(|f| {
            device.measured_on != MeasuredOn::Vgpu
                || ktune_measure::vgpu_searchable(&f.kernel)
                    .map_err(|e| too_large.push(e))
                    .is_ok()
        })
        .collect();
    if missing.is_empty() {
        return Ok(Summary {
            too_large,
            ..Summary::default()
        });
    }
    let destination = match (&places.user_cache, settings.write_crate) {
        (Some(cache), false) => cache.clone(),
        _ => places.crate_database.clone(),
    };
    let mut progress = Progress::open(&places.work.join("tune.log"));
    progress.line(&format!(
        "{} search of {} on {} for {}, results to {}",
        match settings.effort {
            Effort::Bounded { .. } => "bounded",
            Effort::Full { .. } => "full",
        },
        crate::counted(missing.len(), "kernel"),
        device.gpu.name,
        device.target,
        destination.display()
    ));
    let mut bench = WorkerBench::spawn(device)?;
    for kernel in &too_large {
        progress.line(&format!("not searched: {kernel}"));
    }
    let mut outcome = Summary {
        written_to: Some(destination.clone()),
        too_large,
        ..Summary::default()
    };
    for found in missing {
        progress.line(&format!("{} ({})", found.kernel.name, found.location));
        let gpu = bench.gpu();
        let mut journal = Journal::open(&places.work.join("journal"), &found.kernel, &gpu);
        if !journal.is_empty() {
            progress.line(&format!(
                "  resuming: {} measured before, answered from the journal",
                crate::counted(journal.len(), "point")
            ));
        }
        let checksum = canon::checksum(&found.kernel);
        let known: Vec<Schedule> = layers
            .records()
            .filter(|(_, r)| r.checksum == checksum && r.provenance.measured_on == MeasuredOn::Gpu)
            .map(|(_, r)| r.schedule.clone())
            .collect();
        let Some(tuned) = search(
            &found.kernel,
            &found.source,
            &mut bench,
            settings,
            &known,
            &mut journal,
            &mut progress,
        ) else {
            progress.line("  no candidate could be measured");
            continue;
        };
        if tuned.cut_short(settings.time) {
            progress.line(&format!(
                "  {}: out of time ({:.1} s) with the default alone measured; nothing recorded, the next build goes on",
                found.kernel.name,
                tuned.elapsed.as_secs_f64()
            ));
            outcome.out_of_time.push(found.kernel.name.clone());
            continue;
        }
        crate::db::bank(&destination, [tuned.record.clone()])?;
        progress.line(&format!(
            "  {}: {:.2} µs{} after the default and {} in {:.1} s: {}",
            found.kernel.name,
            tuned.record.stats.median_us,
            tuned
                .speedup()
                .map_or(String::new(), |s| format!(" ({s:.2}× the default)")),
            crate::counted(tuned.evaluations - 1, "candidate"),
            tuned.elapsed.as_secs_f64(),
            tuned.record.schedule.to_json()
        ));
        outcome.tuned.push(tuned);
    }
    let seconds: f64 = outcome.tuned.iter().map(|t| t.elapsed.as_secs_f64()).sum();
    progress.line(&format!(
        "tuned {} in {seconds:.1} s",
        crate::counted(outcome.tuned.len(), "kernel")
    ));
    Ok(outcome)
}

/// How long one candidate may take on the device before its worker is
/// killed.
const MEASURE_TIMEOUT: Duration = Duration::from_secs(120);

//! The search on a miss: when no database layer has a record of a kernel
//! for the device at hand, measure candidates of its schedule space and
//! bank the winner.
//!
//! - **Device** (`KTUNE_DEVICE`): `gpu`, `vgpu` (the virtual GPU: real
//!   correctness checks, an estimated time; its records are marked and
//!   never chosen for a real GPU) or `none`. Unset: the GPU when the driver
//!   finds one, else none — then the build uses heuristic defaults and
//!   warns once, listing what is untuned.
//! - **Effort**: the bounded search (the heuristic model's best
//!   `KTUNE_BUDGET` candidates, default [`BOUNDED_CANDIDATES`], Inductor
//!   style) unless the crate's `max-autotune` feature is on: then the full
//!   search, evolutionary with a learned cost model and a coordinate-descent
//!   polish, `KTUNE_BUDGET` evaluations (default [`FULL_EVALUATIONS`];
//!   [`VGPU_FULL_EVALUATIONS`] on the virtual GPU). Either stops early
//!   after `KTUNE_SECONDS` per kernel (default [`SECONDS`];
//!   [`VGPU_SECONDS`]). The heuristic default is always measured first: it
//!   is the baseline of the record.
//! - **Where results go**: the bounded search's to the per-user cache, the
//!   full search's to the crate's database (`KTUNE_WRITE=crate` sends the
//!   bounded search's there too).
//! - **Resuming**: every measurement is appended to a journal under the
//!   target directory, keyed by kernel checksum, shape, device and target;
//!   a search that was interrupted replays it instead of measuring again.
//!   The strategies are seeded, so they ask for the same points again.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ktune_core::db::{Clocks, ComputeCapability, Gpu, MeasuredOn, Provenance, Record, Stats};
use ktune_core::ir::Kernel;
use ktune_core::lower::heuristic;
use ktune_core::model;
use ktune_core::schedule::Schedule;
use ktune_core::space::Space;
use ktune_core::{GENERATOR_VERSION, SmVersion, canon};
use ktune_search::measure::{Measurement, Outcome, Rejection};
use ktune_search::session::{Budget, Session};
use ktune_search::space::{Knob, Point, Value};
use ktune_search::strategy::{Bounded, Evolutionary, Strategy};
use serde::{Deserialize, Serialize};

use ktune_measure::{DeviceInfo, DeviceKind, Job, Worker, WorkerConfig};

use crate::error::Error;
use crate::layer::{Layer, Layers};
use crate::scan::Found;

/// Candidates the bounded search measures by default.
pub const BOUNDED_CANDIDATES: usize = 8;
/// Evaluations the full search makes by default.
pub const FULL_EVALUATIONS: usize = 64;
/// Seconds a kernel's search may take by default.
pub const SECONDS: u64 = 300;
/// The defaults on the virtual GPU, which interprets every candidate at
/// the kernel's real shape and so is far slower than a GPU.
pub const VGPU_FULL_EVALUATIONS: usize = 16;
pub const VGPU_SECONDS: u64 = 120;
/// The seed of every search, so that a resumed search asks for the same
/// points.
const SEED: u64 = 0x006b_7475_6e65;

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
            None => Duration::from_secs(if on_vgpu { VGPU_SECONDS } else { SECONDS }),
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

/// A kernel's measured time: the median and an interval around it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    pub median_us: f64,
    pub low_us: f64,
    pub high_us: f64,
    pub samples: u32,
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
}

/// What a kernel's search found.
#[derive(Debug, Clone)]
pub struct Tuned {
    pub record: Record,
    pub evaluations: usize,
    /// Candidates rejected, with why.
    pub rejected: Vec<(Schedule, String)>,
    pub elapsed: Duration,
}

impl Tuned {
    /// The winner's speed-up over the heuristic default.
    pub fn speedup(&self) -> Option<f64> {
        let stats = &self.record.stats;
        stats.baseline_us.map(|b| b / stats.median_us)
    }
}

/// Searches `kernel`'s space on `bench`'s device within `settings`, with
/// `journal` holding what earlier, interrupted runs measured; the full
/// search starts from `known` (the database's winners for other GPUs) and
/// the model's best points. `None` when no candidate could be measured.
pub fn search(
    kernel: &Kernel,
    source: &str,
    bench: &mut dyn Bench,
    settings: &Settings,
    known: &[Schedule],
    journal: &mut Journal,
    progress: &mut Progress,
) -> Option<Tuned> {
    let started = Instant::now();
    let target = bench.target();
    let core_space = Space::of(kernel, target);
    let valid = core_space.survey(kernel, target).valid;
    let mapping = Mapping::new(core_space);
    let point_of = |s: &Schedule| mapping.point(s);
    let schedule_of = |p: &Point| mapping.schedule(p);
    let space = ktune_search::space::Space::listed(mapping.knobs(), valid.iter().map(point_of));

    let default = heuristic(kernel, target);
    let ranked = model::rank(kernel, target, &valid);
    let estimates: HashMap<Point, f64> = ranked
        .iter()
        .map(|(s, e)| (point_of(s), e.seconds))
        .collect();

    let deadline = started + settings.time;
    let mut rejected = Vec::new();
    let mut measure = |_: &ktune_search::space::Space, p: &Point| -> Outcome {
        let schedule = schedule_of(p);
        let outcome = match journal.get(&schedule) {
            Some(done) => done.clone(),
            None if Instant::now() > deadline => {
                Err("the search's time budget is spent".to_owned())
            }
            None => {
                let result = bench
                    .measure(kernel, source, &schedule)
                    .map_err(|r| r.to_string());
                journal.append(&schedule, &result);
                match &result {
                    Ok(t) => progress.line(&format!(
                        "  {:>9.2} µs  {}",
                        t.median_us,
                        schedule.to_json()
                    )),
                    Err(why) => {
                        progress.line(&format!("  rejected    {}: {why}", schedule.to_json()))
                    }
                }
                result
            }
        };
        match outcome {
            Ok(t) => Ok(Measurement::new(t.median_us)),
            Err(why) => {
                rejected.push((schedule, why.clone()));
                Err(Rejection::RuntimeFailed(why))
            }
        }
    };
    let evaluations = match settings.effort {
        Effort::Bounded { candidates } => candidates + 1,
        Effort::Full { evaluations } => evaluations,
    };
    let mut session = Session::new(&space, &mut measure, Budget::evaluations(evaluations));
    let default_point = point_of(&default);
    session.measure(&default_point);
    match settings.effort {
        Effort::Bounded { candidates } => {
            let score = Arc::new(move |_: &ktune_search::space::Space, p: &Point| {
                estimates.get(p).copied().unwrap_or(f64::INFINITY)
            });
            Bounded::new(score, candidates).run(&mut session, SEED);
        }
        Effort::Full { .. } => {
            let mut strategy = full_strategy();
            let valid_known = known.iter().filter(|s| valid.contains(s));
            strategy.starts = std::iter::once(default_point.clone())
                .chain(valid_known.map(point_of))
                .chain(ranked.iter().take(4).map(|(s, _)| point_of(s)))
                .collect();
            strategy.run(&mut session, SEED);
        }
    }
    let default_us = session.time(&default_point);
    let evaluations = session.history().len();
    let best = session.best().map(|(p, _)| p.clone());
    drop(session);
    let best = schedule_of(&best?);
    let timing = journal.get(&best)?.clone().ok()?;
    let record = record(kernel, best, timing, default_us, bench);
    Some(Tuned {
        record,
        evaluations,
        rejected,
        elapsed: started.elapsed(),
    })
}

/// A ktune space as the search sees it: a `class` knob choosing the
/// family, then every family's knobs, named `<class>.<knob>`; a point of
/// one family holds index 0 in the other families' knobs.
struct Mapping {
    space: Space,
    /// Where each family's knobs start in a point.
    offsets: Vec<usize>,
}

impl Mapping {
    fn new(space: Space) -> Mapping {
        let offsets = space
            .families
            .iter()
            .scan(1, |next, f| {
                let at = *next;
                *next += f.knobs.len();
                Some(at)
            })
            .collect();
        Mapping { space, offsets }
    }

    fn knobs(&self) -> Vec<Knob> {
        let classes = self
            .space
            .families
            .iter()
            .map(|f| Value::Str(f.class.name().to_owned()))
            .collect();
        std::iter::once(Knob::new("class", classes))
            .chain(self.space.families.iter().flat_map(|f| {
                f.knobs.iter().map(|k| {
                    let values: Vec<i64> = k.values.iter().map(|v| i64::from(*v)).collect();
                    Knob::ints(format!("{}.{}", f.class.name(), k.name), &values)
                })
            }))
            .collect()
    }

    fn point(&self, schedule: &Schedule) -> Point {
        let width = 1 + self
            .space
            .families
            .iter()
            .map(|f| f.knobs.len())
            .sum::<usize>();
        let mut point = vec![0; width];
        if let Some(i) = self
            .space
            .families
            .iter()
            .position(|f| f.class == schedule.kind())
        {
            point[0] = i as u32;
            let family = &self.space.families[i];
            for (j, (value, knob)) in schedule.knob_values().iter().zip(&family.knobs).enumerate() {
                point[self.offsets[i] + j] =
                    knob.values.iter().position(|v| v == value).unwrap_or(0) as u32;
            }
        }
        Point(point)
    }

    fn schedule(&self, point: &Point) -> Schedule {
        let i = point.0[0] as usize;
        let family = &self.space.families[i];
        let values: Vec<u32> = family
            .knobs
            .iter()
            .enumerate()
            .map(|(j, k)| k.values[point.0[self.offsets[i] + j] as usize])
            .collect();
        family
            .class
            .schedule(&values)
            .expect("a point of the family")
    }
}

#[cfg(feature = "max-autotune")]
fn full_strategy() -> Evolutionary {
    Evolutionary::xgboost(ktune_search::model::XgbObjective::RankPairwise)
}

#[cfg(not(feature = "max-autotune"))]
fn full_strategy() -> Evolutionary {
    Evolutionary::knn()
}

fn record(
    kernel: &Kernel,
    schedule: Schedule,
    timing: Timing,
    baseline_us: Option<f64>,
    bench: &dyn Bench,
) -> Record {
    Record {
        kernel: kernel.name.clone(),
        checksum: canon::checksum(kernel),
        canonical: canon::canonical_form(kernel),
        shape: kernel
            .dims
            .iter()
            .map(|d| (d.name.clone(), d.size))
            .collect(),
        dtype: kernel.output.dtype,
        gpu: bench.gpu(),
        schedule,
        stats: Stats {
            median_us: timing.median_us,
            low_us: timing.low_us,
            high_us: timing.high_us,
            samples: timing.samples,
            baseline_us,
            throughput: None,
        },
        provenance: Provenance {
            ktune_version: env!("CARGO_PKG_VERSION").to_owned(),
            generator_version: GENERATOR_VERSION,
            measured_on: bench.measured_on(),
            date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        },
    }
}

/// Measurements of one kernel on one device for one target, kept on disk
/// so that an interrupted search resumes.
#[derive(Debug)]
pub struct Journal {
    path: Option<PathBuf>,
    entries: HashMap<Schedule, Result<Timing, String>>,
}

#[derive(Serialize, Deserialize)]
struct Entry {
    schedule: Schedule,
    result: Result<Timing, String>,
}

impl Journal {
    /// A journal that is not kept.
    pub fn in_memory() -> Journal {
        Journal {
            path: None,
            entries: HashMap::new(),
        }
    }

    /// The journal of `kernel` on `gpu` under `dir`, with what it holds.
    /// Lines that do not parse (a run killed mid-write) are skipped.
    pub fn open(dir: &Path, kernel: &Kernel, gpu: &Gpu) -> Journal {
        let shape: Vec<String> = kernel.dims.iter().map(|d| d.size.to_string()).collect();
        let device: String = gpu
            .name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let path = dir.join(format!(
            "{}-{}-{}-{}.jsonl",
            kernel.name,
            &canon::checksum(kernel)[..12],
            shape.join("x"),
            device
        ));
        let entries = File::open(&path)
            .map(|f| {
                BufReader::new(f)
                    .lines()
                    .map_while(Result::ok)
                    .filter_map(|line| serde_json::from_str::<Entry>(&line).ok())
                    .map(|e| (e.schedule, e.result))
                    .collect()
            })
            .unwrap_or_default();
        Journal {
            path: Some(path),
            entries,
        }
    }

    pub fn get(&self, schedule: &Schedule) -> Option<&Result<Timing, String>> {
        self.entries.get(schedule)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn append(&mut self, schedule: &Schedule, result: &Result<Timing, String>) {
        self.entries.insert(schedule.clone(), result.clone());
        let Some(path) = &self.path else { return };
        let line = serde_json::to_string(&Entry {
            schedule: schedule.clone(),
            result: result.clone(),
        });
        // The journal only saves work: a failure to keep it costs a
        // re-measurement after an interruption, nothing else.
        if let (Ok(line), Some(Ok(mut file))) = (
            line,
            path.parent()
                .map(|d| std::fs::create_dir_all(d).and_then(|()| append_to(path))),
        ) {
            let _ = writeln!(file, "{line}");
        }
    }
}

fn append_to(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Where a search reports its progress: a log file under the target
/// directory and, because Cargo hides build scripts' output, the terminal
/// when there is one.
#[derive(Debug, Default)]
pub struct Progress {
    log: Option<File>,
    tty: Option<File>,
}

impl Progress {
    /// Progress into `log` (appended) and the controlling terminal, if any.
    pub fn open(log: &Path) -> Progress {
        let log = log
            .parent()
            .and_then(|d| std::fs::create_dir_all(d).ok())
            .and_then(|()| append_to(log).ok());
        let tty = OpenOptions::new().write(true).open("/dev/tty").ok();
        Progress { log, tty }
    }

    /// Progress nowhere.
    pub fn silent() -> Progress {
        Progress::default()
    }

    pub fn line(&mut self, text: &str) {
        for sink in [&mut self.log, &mut self.tty].into_iter().flatten() {
            let _ = writeln!(sink, "ktune: {text}");
        }
    }
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

/// Measures through a [`Worker`] child process.
struct WorkerBench {
    worker: Worker,
    device: DeviceTarget,
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
        })
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
    if missing.is_empty() {
        return Ok(Summary::default());
    }
    let destination = match (&places.user_cache, settings.write_crate) {
        (Some(cache), false) => cache.clone(),
        _ => places.crate_database.clone(),
    };
    let mut progress = Progress::open(&places.work.join("tune.log"));
    progress.line(&format!(
        "{} search of {} kernels on {} for {}, results to {}",
        match settings.effort {
            Effort::Bounded { .. } => "bounded",
            Effort::Full { .. } => "full",
        },
        missing.len(),
        device.gpu.name,
        device.target,
        destination.display()
    ));
    let config = WorkerConfig::new(kind)
        .map_err(|e| Error::Device {
            device: kind.to_string(),
            reason: e.to_string(),
        })?
        .timeout(MEASURE_TIMEOUT);
    let worker = Worker::spawn(config).map_err(|e| Error::Device {
        device: kind.to_string(),
        reason: e.to_string(),
    })?;
    let mut bench = WorkerBench { worker, device };
    let mut outcome = Summary {
        written_to: Some(destination.clone()),
        ..Summary::default()
    };
    for found in missing {
        progress.line(&format!("{} ({})", found.kernel.name, found.location));
        let gpu = bench.gpu();
        let mut journal = Journal::open(&places.work.join("journal"), &found.kernel, &gpu);
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
        crate::db::insert(&destination, [tuned.record.clone()])?;
        progress.line(&format!(
            "  {}: {:.2} µs{} after {} candidates in {:.1} s: {}",
            found.kernel.name,
            tuned.record.stats.median_us,
            tuned
                .speedup()
                .map_or(String::new(), |s| format!(" ({s:.2}× the default)")),
            tuned.evaluations,
            tuned.elapsed.as_secs_f64(),
            tuned.record.schedule.to_json()
        ));
        outcome.tuned.push(tuned);
    }
    let seconds: f64 = outcome.tuned.iter().map(|t| t.elapsed.as_secs_f64()).sum();
    progress.line(&format!(
        "tuned {} kernels in {seconds:.1} s",
        outcome.tuned.len()
    ));
    Ok(outcome)
}

/// How long one candidate may take on the device before its worker is
/// killed.
const MEASURE_TIMEOUT: Duration = Duration::from_secs(120);

//! One kernel's search: its schedule space as the search layer sees it, a
//! strategy run within an allowance of evaluations and a deadline, the
//! winner as a database record, and every evaluation in order.
//!
//! A task can be searched again with a larger allowance: the strategies are
//! seeded and the journal answers every point already measured, so the
//! strategy asks for the same points again, for free, and goes on where it
//! stopped. That is how an interrupted search resumes and how the
//! scheduler of [`super::campaign`] hands out its budget in rounds.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ktune_core::db::{Provenance, Record, Stats};
use ktune_core::ir::Kernel;
use ktune_core::lower::heuristic;
use ktune_core::model::{self, Estimate};
use ktune_core::schedule::Schedule;
use ktune_core::space::Space;
use ktune_core::{GENERATOR_VERSION, SmVersion, canon};
use ktune_search::measure::{Measurement, Measurer, Outcome, Rejection};
use ktune_search::session::{Budget, Deadline, Session};
use ktune_search::space::{Knob, Point, Value};
use ktune_search::strategy::{Bounded, CoordinateDescent, Evolutionary, Random, Strategy};
use serde::{Deserialize, Serialize};

use super::journal::{Journal, Observer};
use super::{Bench, Timing};

/// The seed of every search, so that a resumed search asks for the same
/// points.
const SEED: u64 = 0x006b_7475_6e65;

/// How many of the heuristic model's best points the evolutionary search
/// starts from, besides the default and the known winners (chosen as the
/// bounded search chooses its candidates: spread over the knobs).
const MODEL_STARTS: usize = 4;

/// Which strategy chooses the candidates after the heuristic default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// A few of the heuristic model's best-ranked points, spread over the
    /// knobs (see [`Bounded`]).
    Bounded,
    /// Evolutionary with a learned cost model (XGBoost with the
    /// `max-autotune` feature, else nearest neighbours) and a
    /// coordinate-descent polish.
    Evolutionary,
    /// Coordinate descent from the default, restarting at random points.
    CoordinateDescent,
    /// Uniformly random valid points: the baseline.
    Random,
}

impl Method {
    pub const ALL: [Method; 4] = [
        Method::Evolutionary,
        Method::Bounded,
        Method::CoordinateDescent,
        Method::Random,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Method::Bounded => "bounded",
            Method::Evolutionary => "evolutionary",
            Method::CoordinateDescent => "coordinate_descent",
            Method::Random => "random",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Method {
    type Err = String;

    fn from_str(s: &str) -> Result<Method, String> {
        Method::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Method::ALL.iter().map(|m| m.name()).collect();
                format!(
                    "unknown strategy `{s}`; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// One search's allowance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    pub method: Method,
    /// Evaluations, the heuristic default's included.
    pub evaluations: usize,
    /// No measurement starts after this.
    pub deadline: Deadline,
}

/// One evaluation of a search, in the order made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub schedule: Schedule,
    /// The time, or why the candidate was rejected.
    pub result: Result<Timing, String>,
    /// The learned cost model's score when it chose the candidate (lower is
    /// better; its own scale).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted: Option<f64>,
    /// The heuristic model's estimate, in microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate_us: Option<f64>,
}

/// What a kernel's search found.
#[derive(Debug, Clone)]
pub struct Tuned {
    pub record: Record,
    pub evaluations: usize,
    /// Candidates rejected, with why.
    pub rejected: Vec<(Schedule, String)>,
    pub elapsed: Duration,
    /// Every evaluation, in order (the default first).
    pub history: Vec<Step>,
}

impl Tuned {
    /// Whether the search ran out of `time` with the default alone
    /// measured: no result worth a record, which would stop every later
    /// search of the kernel. (A space of one point, or a budget of one,
    /// measures the default alone well within its time.)
    pub fn cut_short(&self, time: Duration) -> bool {
        self.evaluations <= 1 && self.elapsed >= time
    }

    /// The winner's speed-up over the heuristic default.
    pub fn speedup(&self) -> Option<f64> {
        let stats = &self.record.stats;
        stats.baseline_us.map(|b| b / stats.median_us)
    }
}

/// A kernel's search, prepared once for any number of runs.
pub struct Task<'k> {
    kernel: &'k Kernel,
    source: &'k str,
    mapping: Mapping,
    space: ktune_search::space::Space,
    default: Point,
    /// The heuristic model's estimate of every valid point, in seconds
    /// (shared with the bounded search's score).
    estimates: Arc<HashMap<Point, f64>>,
    /// Where the evolutionary search starts: the default, the known
    /// winners that are valid here, a few of the model's best.
    starts: Vec<Point>,
}

impl fmt::Debug for Task<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Task")
            .field("kernel", &self.kernel.name)
            .field("points", &self.estimates.len())
            .finish()
    }
}

impl<'k> Task<'k> {
    /// The search of `kernel` (whose source is `source`) on `target`;
    /// `known` are the database's winners for other GPUs.
    pub fn new(
        kernel: &'k Kernel,
        source: &'k str,
        target: SmVersion,
        known: &[Schedule],
    ) -> Task<'k> {
        let valid = Space::of(kernel, target).survey(kernel, target).valid;
        let ranked = model::rank(kernel, target, &valid);
        Task::surveyed(kernel, source, target, known, &valid, &ranked)
    }

    /// [`Task::new`] for a caller that has surveyed the space already:
    /// `valid` its valid points, `ranked` their estimates
    /// ([`model::rank`]).
    pub fn surveyed(
        kernel: &'k Kernel,
        source: &'k str,
        target: SmVersion,
        known: &[Schedule],
        valid: &[Schedule],
        ranked: &[(Schedule, Estimate)],
    ) -> Task<'k> {
        let mapping = Mapping::new(Space::of(kernel, target));
        let space = ktune_search::space::Space::listed(
            mapping.knobs(),
            valid.iter().map(|s| mapping.point(s)),
        );
        let default = mapping.point(&heuristic(kernel, target));
        let estimates = Arc::new(
            ranked
                .iter()
                .map(|(s, e)| (mapping.point(s), e.seconds))
                .collect(),
        );
        let mut task = Task {
            kernel,
            source,
            mapping,
            space,
            default,
            estimates,
            starts: Vec::new(),
        };
        let favourites = task
            .bounded(MODEL_STARTS)
            .choose_besides(&task.space, SEED, |p| *p == task.default);
        task.starts = std::iter::once(task.default.clone())
            .chain(
                known
                    .iter()
                    .filter(|s| valid.contains(s))
                    .map(|s| task.mapping.point(s)),
            )
            .chain(favourites)
            .collect();
        task
    }

    pub fn kernel(&self) -> &'k Kernel {
        self.kernel
    }

    pub(super) fn source(&self) -> &'k str {
        self.source
    }

    /// The heuristic default, which every search measures first.
    pub(super) fn default_schedule(&self) -> Schedule {
        self.mapping.schedule(&self.default)
    }

    /// What a bounded search of `candidates` points measures after the
    /// default, in order (the default is not among them).
    pub fn bounded_candidates(&self, candidates: usize) -> Vec<Schedule> {
        self.bounded(candidates)
            .choose_besides(&self.space, SEED, |p| *p == self.default)
            .iter()
            .map(|p| self.mapping.schedule(p))
            .collect()
    }

    /// The bounded search of `candidates` points, scored by the heuristic
    /// model.
    fn bounded(&self, candidates: usize) -> Bounded {
        let estimates = Arc::clone(&self.estimates);
        let score = Arc::new(move |_: &ktune_search::space::Space, p: &Point| {
            estimates.get(p).copied().unwrap_or(f64::INFINITY)
        });
        Bounded::new(score, candidates)
    }

    /// Searches on `bench` within `plan`, the heuristic default first, with
    /// `journal` answering what was measured before. When no candidate
    /// could be measured, the evaluations made, all rejected.
    pub fn search(
        &self,
        bench: &mut dyn Bench,
        plan: &Plan,
        journal: &mut Journal,
        observer: &mut dyn Observer,
    ) -> Result<Tuned, Vec<Step>> {
        let started = Instant::now();
        let mut measurer = Journaled {
            task: self,
            bench,
            journal,
            observer,
            rejected: Vec::new(),
        };
        let budget = Budget::evaluations(plan.evaluations).until(plan.deadline);
        let mut session = Session::new(&self.space, &mut measurer, budget);
        session.measure(&self.default);
        match plan.method {
            Method::Bounded => self
                .bounded(plan.evaluations.saturating_sub(1))
                .run(&mut session, SEED),
            Method::Evolutionary => {
                let mut strategy = Evolutionary::max_autotune();
                strategy.starts.clone_from(&self.starts);
                strategy.run(&mut session, SEED);
            }
            Method::CoordinateDescent => CoordinateDescent {
                start: Some(self.default.clone()),
                ..CoordinateDescent::default()
            }
            .run(&mut session, SEED),
            Method::Random => Random.run(&mut session, SEED),
        }
        let default_us = session.time(&self.default);
        let best = session.best().map(|(p, _)| p.clone());
        let evaluations = session.into_history();
        let Journaled {
            bench,
            journal,
            rejected,
            ..
        } = measurer;
        let history: Vec<Step> = evaluations
            .into_iter()
            .filter_map(|e| {
                let schedule = self.mapping.schedule(&e.point);
                Some(Step {
                    result: journal.get(&schedule)?.clone(),
                    schedule,
                    predicted: e.predicted,
                    estimate_us: self.estimates.get(&e.point).map(|s| s * 1e6),
                })
            })
            .collect();
        let Some((best, Some(Ok(timing)))) = best.map(|p| {
            let schedule = self.mapping.schedule(&p);
            let timing = journal.get(&schedule).cloned();
            (schedule, timing)
        }) else {
            return Err(history);
        };
        Ok(Tuned {
            record: record(self.kernel, best, timing, default_us, bench),
            evaluations: history.len(),
            rejected,
            elapsed: started.elapsed(),
            history,
        })
    }
}

/// A task's points measured on a bench, the journal answering those
/// measured before (which are neither measured nor prepared again).
struct Journaled<'t, 'k, 'b> {
    task: &'t Task<'k>,
    bench: &'b mut dyn Bench,
    journal: &'b mut Journal,
    observer: &'b mut dyn Observer,
    /// Candidates rejected, with why, in order.
    rejected: Vec<(Schedule, String)>,
}

impl Measurer for Journaled<'_, '_, '_> {
    fn measure(&mut self, _: &ktune_search::space::Space, p: &Point) -> Outcome {
        let schedule = self.task.mapping.schedule(p);
        let result = match self.journal.get(&schedule) {
            Some(done) => done.clone(),
            None => {
                let result = self
                    .bench
                    .measure(self.task.kernel, self.task.source, &schedule)
                    .map_err(|r| r.to_string());
                self.journal.append(&schedule, &result);
                self.observer.measured(&schedule, &result);
                result
            }
        };
        match result {
            Ok(t) => Ok(Measurement::new(t.median_us)),
            Err(why) => {
                self.rejected.push((schedule, why.clone()));
                Err(Rejection::RuntimeFailed(why))
            }
        }
    }

    fn prepare(
        &mut self,
        _: &ktune_search::space::Space,
        points: &[Point],
        deadline: Option<Instant>,
    ) {
        let schedules: Vec<Schedule> = points
            .iter()
            .map(|p| self.task.mapping.schedule(p))
            .filter(|s| self.journal.get(s).is_none())
            .collect();
        if !schedules.is_empty() {
            self.bench
                .prepare(self.task.kernel, self.task.source, &schedules, deadline);
        }
    }
}

/// The best time after each step (`None` before the first success).
pub fn best_so_far(history: &[Step]) -> Vec<Option<f64>> {
    history
        .iter()
        .scan(None, |best: &mut Option<f64>, step| {
            if let Ok(t) = &step.result {
                *best = Some(best.map_or(t.median_us, |b: f64| b.min(t.median_us)));
            }
            Some(*best)
        })
        .collect()
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
                    let knob = Knob::ints(format!("{}.{}", f.class.name(), k.name), &values);
                    if f.class.thread_knobs().contains(&k.name) {
                        knob.counting_threads()
                    } else {
                        knob
                    }
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
        shape: kernel.shape().collect(),
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

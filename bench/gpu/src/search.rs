//! `max-autotune`'s search of a case's space: the build's own search
//! ([`Task::search`](ktune_build::tune::Task::search), the evolutionary
//! search with its cost model, the default schedule first), with every
//! evaluation a *screening* the caller provides (on the GPU: lowered,
//! loaded, checked against the reference, timed briefly, as for the
//! sample). A candidate whose screening fails (a wrong output, a failed
//! load or launch) is a rejection the search goes on after.

use std::time::Instant;

use ktune_build::tune::{Bench, Journal, Method, Progress, Timing};
use ktune_core::SmVersion;
use ktune_core::db::{Gpu, MeasuredOn};
use ktune_core::ir::Kernel;
use ktune_core::schedule::Schedule;
use ktune_search::measure::Rejection;

use crate::plan::Plan;
use crate::report::{GpuInfo, Sampled, Screen, Screened};
use crate::turns;

/// Searches `plan`'s space within `evaluations` and `deadline`, screening
/// each candidate with `screen` (its times, or why it failed); the
/// schedule found (the fastest screened) and every evaluation, in order.
/// The search compares screenings as the default's full measurement,
/// `default_ms`, puts them ([`turns::normalized`]). `screen_reps` is how
/// many timed runs a screening takes, for the records.
pub fn search(
    plan: &Plan,
    gpu: &GpuInfo,
    (evaluations, deadline): (usize, Instant),
    (screen_reps, default_ms): (usize, Option<f64>),
    screen: impl FnMut(&Kernel, &Schedule) -> Result<Screen, String>,
) -> (Option<Schedule>, Sampled) {
    let mut bench = Screening {
        gpu,
        target: plan.target,
        screen_reps,
        default_ms,
        screen,
        screened: Vec::new(),
    };
    let allowance = ktune_build::tune::Plan {
        method: Method::Evolutionary,
        evaluations,
        deadline: deadline.into(),
    };
    let found = plan.task().search(
        &mut bench,
        &allowance,
        &mut Journal::in_memory(),
        &mut Progress::silent(),
    );
    let screened = bench.screened;
    let evaluated = Sampled {
        planned: evaluations,
        skipped_for_budget: evaluations.saturating_sub(screened.len()),
        screened,
    };
    (found.ok().map(|tuned| tuned.record.schedule), evaluated)
}

/// The device as a build's search sees it, every measurement a screening.
struct Screening<'g, F> {
    gpu: &'g GpuInfo,
    target: SmVersion,
    screen_reps: usize,
    /// The default's full measurement, which screenings are scaled to.
    default_ms: Option<f64>,
    screen: F,
    /// Every evaluation, in order.
    screened: Vec<Screened>,
}

impl<F: FnMut(&Kernel, &Schedule) -> Result<Screen, String>> Bench for Screening<'_, F> {
    fn gpu(&self) -> Gpu {
        Gpu {
            name: self.gpu.name.clone(),
            compute_capability: self
                .gpu
                .compute_capability
                .parse()
                .unwrap_or_else(|_| self.target.into()),
            sm_count: self.gpu.sm_count,
            driver: self.gpu.driver_version.clone().unwrap_or_default(),
            cuda: self.gpu.cuda_version.clone(),
            clocks_mhz: None,
        }
    }

    fn measured_on(&self) -> MeasuredOn {
        MeasuredOn::Gpu
    }

    fn target(&self) -> SmVersion {
        self.target
    }

    fn measure(
        &mut self,
        kernel: &Kernel,
        _source: &str,
        schedule: &Schedule,
    ) -> Result<Timing, Rejection> {
        let screened = (self.screen)(kernel, schedule);
        self.screened
            .push(Screened::new(schedule.clone(), &screened));
        let screen = screened.map_err(Rejection::RuntimeFailed)?;
        let us = turns::normalized(screen.median_ms, screen.default_ms, self.default_ms) * 1e3;
        Ok(Timing {
            median_us: us,
            low_us: us,
            high_us: us,
            samples: u32::try_from(self.screen_reps).unwrap_or(u32::MAX),
            throttled: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ktune_core::model;

    use super::*;
    use crate::cases::CASES;

    fn info() -> GpuInfo {
        GpuInfo {
            name: "test GPU".to_owned(),
            compute_capability: "9.0".to_owned(),
            target: "sm_90".to_owned(),
            sm_count: 132,
            l2_bytes: 50 << 20,
            memory_bytes: 80 << 30,
            driver_version: None,
            cuda_version: "12.8".to_owned(),
            cublas_version: None,
        }
    }

    fn softmax_plan() -> Plan {
        let case = CASES
            .iter()
            .find(|c| c.name == "softmax_8192x4096")
            .expect("in the catalogue");
        Plan::new(case, SmVersion::Sm90, 4, 1).expect("a plan")
    }

    /// A screening that answers the heuristic model's estimate, and fails
    /// every point with 256 threads per row.
    fn fake(kernel: &Kernel, schedule: &Schedule) -> Result<Screen, String> {
        match schedule {
            Schedule::Rows {
                threads_per_row: 256,
                ..
            } => Err("wrong output: injected".to_owned()),
            _ => model::estimate(kernel, schedule, SmVersion::Sm90)
                .map(|e| Screen {
                    median_ms: e.seconds * 1e3,
                    default_ms: None,
                    blocks: None,
                })
                .map_err(|e| e.to_string()),
        }
    }

    #[test]
    fn the_search_screens_in_order_and_finds_the_fastest_correct_point() {
        let plan = softmax_plan();
        let deadline = Instant::now() + Duration::from_secs(600);
        let (found, evaluated) = search(&plan, &info(), (24, deadline), (3, None), fake);
        assert_eq!(evaluated.planned, 24);
        assert_eq!(evaluated.screened.len(), 24);
        assert_eq!(evaluated.skipped_for_budget, 0);
        assert_eq!(evaluated.screened[0].schedule, plan.default);
        let mut distinct: Vec<&Schedule> = evaluated.screened.iter().map(|s| &s.schedule).collect();
        distinct.sort_by_key(|s| s.to_json());
        distinct.dedup();
        assert_eq!(distinct.len(), 24, "no point is screened twice");
        let failed: Vec<&Screened> = evaluated
            .screened
            .iter()
            .filter(|s| s.excluded.is_some())
            .collect();
        assert!(!failed.is_empty(), "the search met a failing point");
        for s in &failed {
            assert_eq!(s.median_ms, None);
            assert_eq!(s.excluded.as_deref(), Some("wrong output: injected"));
        }
        let fastest = evaluated
            .screened
            .iter()
            .filter_map(|s| Some((s.median_ms?, &s.schedule)))
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, s)| s.clone());
        assert_eq!(found, fastest);
    }

    #[test]
    fn a_drifting_clock_does_not_pick_the_schedule_found() {
        // Each screening runs 10% faster than the one before (the clock
        // recovering), the default's runs beside it alike: the search must
        // compare them as the default's full measurement (1 ms) puts them.
        let plan = softmax_plan();
        let deadline = Instant::now() + Duration::from_secs(600);
        let mut slowdown = 1.0;
        let drifting = |kernel: &Kernel, schedule: &Schedule| {
            slowdown *= 0.9;
            fake(kernel, schedule).map(|s| Screen {
                median_ms: s.median_ms * slowdown,
                default_ms: Some(slowdown),
                blocks: None,
            })
        };
        let (found, evaluated) = search(&plan, &info(), (24, deadline), (3, Some(1.0)), drifting);
        let fastest_by = |time: fn(&Screened) -> Option<f64>| {
            evaluated
                .screened
                .iter()
                .filter_map(|s| Some((time(s)?, &s.schedule)))
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(_, s)| s.clone())
        };
        let scaled = fastest_by(|s| Some(s.median_ms? / s.default_ms?));
        assert_ne!(
            scaled,
            fastest_by(|s| s.median_ms),
            "the drift reorders the screenings"
        );
        assert_eq!(found, scaled);
    }

    #[test]
    fn a_search_past_its_deadline_screens_nothing() {
        let plan = softmax_plan();
        let (found, evaluated) = search(&plan, &info(), (24, Instant::now()), (3, None), fake);
        assert_eq!(found, None);
        assert!(evaluated.screened.is_empty());
        assert_eq!(evaluated.skipped_for_budget, 24);
    }
}

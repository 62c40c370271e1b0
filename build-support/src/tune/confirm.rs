//! The winner confirmed side by side. A search measures its candidates one
//! after another, over seconds or minutes, while a GPU's clock drifts: it
//! rises from idle, and falls under sustained load (the H200 ran the same
//! kernel up to 12% slower within one benchmark run). So the first
//! candidates, the heuristic default among them, may have been timed at
//! another clock than the last. Before a search's winner is
//! recorded, the fastest candidates are measured again in two rounds, the
//! second in reverse order (`A B C`, then `C B A`): a clock drifting
//! steadily then weighs on each of them alike, and the winner is the one
//! whose rounds took the least time on average.

use std::time::Instant;

use ktune_core::db::MeasuredOn;
use ktune_core::schedule::Schedule;

use super::journal::{Observer, measured_line};
use super::task::{Task, Tuned};
use super::{Bench, Timing};

/// Candidates whose times are within this factor of the fastest's are
/// measured again before a winner is chosen.
pub const CONFIRM_WITHIN: f64 = 1.10;

/// The most candidates measured again, the fastest first.
pub const CONFIRM_MOST: usize = 3;

impl Task<'_> {
    /// `tuned` with its winner confirmed on `bench`, against a clock that
    /// drifted while the search measured: the candidates of its history within
    /// [`CONFIRM_WITHIN`] of the fastest, at most [`CONFIRM_MOST`],
    /// measured again in two rounds, the second reversed; the record takes
    /// the one with the lowest mean of its two medians, with that mean as
    /// its time (and the default's mean as the baseline, where the default
    /// was among them). A candidate rejected now is dropped. `tuned` as it
    /// is where there is nothing to confirm: on the virtual GPU, whose
    /// times are estimates without noise, with one candidate in reach of
    /// the fastest, or where `deadline` passes before both rounds end.
    pub fn confirm(
        &self,
        bench: &mut dyn Bench,
        mut tuned: Tuned,
        deadline: Instant,
        observer: &mut dyn Observer,
    ) -> Tuned {
        let contenders = contenders(&tuned);
        if bench.measured_on() == MeasuredOn::Vgpu || contenders.len() < 2 {
            return tuned;
        }
        let started = Instant::now();
        observer.line(&format!(
            "  the {} fastest measured again, in turns",
            contenders.len()
        ));
        let order = (0..contenders.len()).chain((0..contenders.len()).rev());
        let mut rounds: Vec<Vec<Timing>> = vec![Vec::new(); contenders.len()];
        let mut dropped = vec![false; contenders.len()];
        for i in order {
            if Instant::now() >= deadline {
                observer.line("  not confirmed: the search's time is up");
                return tuned;
            }
            if dropped[i] {
                continue;
            }
            let result = bench
                .measure(self.kernel(), self.source(), &contenders[i])
                .map_err(|r| r.to_string());
            observer.line(&measured_line(&contenders[i], &result));
            match result {
                Ok(timing) => rounds[i].push(timing),
                Err(_) => dropped[i] = true,
            }
        }
        let confirmed: Vec<(&Schedule, Timing)> = contenders
            .iter()
            .zip(&rounds)
            .zip(&dropped)
            .filter(|(_, dropped)| !**dropped)
            .map(|((schedule, rounds), _)| (schedule, combined(rounds)))
            .collect();
        let Some((winner, timing)) = confirmed
            .iter()
            .min_by(|a, b| a.1.median_us.total_cmp(&b.1.median_us))
        else {
            return tuned;
        };
        let default = self.default_schedule();
        if let Some((_, default_timing)) = confirmed.iter().find(|(s, _)| **s == default) {
            tuned.record.stats.baseline_us = Some(default_timing.median_us);
        }
        let stats = &mut tuned.record.stats;
        stats.median_us = timing.median_us;
        stats.low_us = timing.low_us;
        stats.high_us = timing.high_us;
        stats.samples = timing.samples;
        tuned.record.schedule = (*winner).clone();
        tuned.elapsed += started.elapsed();
        tuned
    }
}

/// The distinct schedules of `tuned`'s history measured within
/// [`CONFIRM_WITHIN`] of the fastest, at most [`CONFIRM_MOST`], fastest
/// first.
fn contenders(tuned: &Tuned) -> Vec<Schedule> {
    let mut measured: Vec<(&Schedule, f64)> = tuned
        .history
        .iter()
        .filter_map(|step| Some((&step.schedule, step.result.as_ref().ok()?.median_us)))
        .collect();
    measured.sort_by(|a, b| a.1.total_cmp(&b.1));
    let Some(&(_, fastest)) = measured.first() else {
        return Vec::new();
    };
    let mut contenders: Vec<Schedule> = Vec::new();
    for (schedule, us) in measured {
        if us > fastest * CONFIRM_WITHIN || contenders.len() == CONFIRM_MOST {
            break;
        }
        if !contenders.contains(schedule) {
            contenders.push(schedule.clone());
        }
    }
    contenders
}

/// One time from a candidate's rounds: the mean of their medians, the
/// widest interval, their samples together.
fn combined(rounds: &[Timing]) -> Timing {
    let n = rounds.len().max(1) as f64;
    Timing {
        median_us: rounds.iter().map(|t| t.median_us).sum::<f64>() / n,
        low_us: rounds
            .iter()
            .map(|t| t.low_us)
            .fold(f64::INFINITY, f64::min),
        high_us: rounds.iter().map(|t| t.high_us).fold(0.0, f64::max),
        samples: rounds.iter().map(|t| t.samples).sum(),
        throttled: rounds.iter().any(|t| t.throttled),
    }
}

//! The winner confirmed side by side. A search measures its candidates one
//! after another, over seconds or minutes, while a GPU's clock drifts: it
//! rises from idle, and falls under sustained load (the H200 ran the same
//! kernel up to 12% slower within one benchmark run). So the first
//! candidates, the heuristic default among them, may have been timed at
//! another clock than the last. Before a search's winner is recorded,
//! the fastest candidates and the default are measured again in two
//! rounds, the second in reverse order (`A B C`, then `C B A`): a clock
//! drifting steadily then weighs on each of them alike, and the winner is
//! the one whose rounds took the least time on average.

use std::time::Instant;

use ktune_core::db::MeasuredOn;
use ktune_core::schedule::Schedule;
use ktune_search::session::Deadline;

use super::journal::{Observer, measured_line};
use super::task::{Task, Tuned};
use super::{Bench, Timing};

/// Candidates whose times are within this factor of the fastest's are
/// measured again before a winner is chosen.
pub const CONFIRM_WITHIN: f64 = 1.10;

/// The most candidates measured again besides the default, the fastest
/// first.
pub const CONFIRM_MOST: usize = 3;

impl Task<'_> {
    /// `tuned` with its winner confirmed on `bench`, against a clock that
    /// drifted while the search measured: the candidates of its history
    /// within [`CONFIRM_WITHIN`] of the fastest, at most [`CONFIRM_MOST`],
    /// and the default, measured again in two rounds, the second reversed.
    /// The record takes the one with the lowest mean of its two medians,
    /// with that mean as its time and the default's mean as the baseline
    /// of its speed-up. A candidate that fails now is rejected (added to
    /// `tuned.rejected`), and where the search's winner is, the fastest of
    /// the rest takes its place; `None` when every candidate the search
    /// measured has failed. Nothing is measured on the virtual GPU, whose
    /// times are estimates without noise, where the default is the only
    /// candidate in reach, or once `deadline` passes (the rounds stop
    /// there; unfinished, they choose nothing).
    pub fn confirm(
        &self,
        bench: &mut dyn Bench,
        mut tuned: Tuned,
        deadline: Deadline,
        observer: &mut dyn Observer,
    ) -> Option<Tuned> {
        let default = self.default_schedule();
        let contenders = contenders(&tuned, &default);
        if bench.measured_on() == MeasuredOn::Vgpu || contenders.len() < 2 {
            return Some(tuned);
        }
        let started = Instant::now();
        observer.line(&format!(
            "  {}: {} candidates measured again, in turns",
            self.kernel().name,
            contenders.len()
        ));
        let order = (0..contenders.len()).chain((0..contenders.len()).rev());
        let mut rounds: Vec<Vec<Timing>> = vec![Vec::new(); contenders.len()];
        let mut failed: Vec<Option<String>> = vec![None; contenders.len()];
        let mut finished = true;
        for i in order {
            if deadline.passed() {
                observer.line(if deadline.interrupted() {
                    "  not confirmed: interrupted"
                } else {
                    "  not confirmed: the search's time is up"
                });
                finished = false;
                break;
            }
            if failed[i].is_some() {
                continue;
            }
            let result = bench
                .measure(self.kernel(), self.source(), &contenders[i])
                .map_err(|r| r.to_string());
            observer.line(&measured_line(&contenders[i], &result));
            match result {
                Ok(timing) => rounds[i].push(timing),
                Err(why) => failed[i] = Some(why),
            }
        }
        tuned.elapsed += started.elapsed();
        for (schedule, why) in contenders.iter().zip(&failed) {
            if let Some(why) = why {
                tuned.rejected.push((schedule.clone(), why.clone()));
            }
        }
        let confirmed: Vec<(&Schedule, Timing)> = contenders
            .iter()
            .zip(&rounds)
            .zip(&failed)
            .filter(|(_, failed)| failed.is_none())
            .map(|((schedule, rounds), _)| (schedule, combined(rounds)))
            .collect();
        let winner = if finished {
            confirmed
                .iter()
                .min_by(|a, b| a.1.median_us.total_cmp(&b.1.median_us))
                .map(|(s, t)| ((*s).clone(), *t))
        } else {
            None
        };
        let (schedule, timing) = match winner {
            Some(winner) => {
                let default_timing = confirmed.iter().find(|(s, _)| **s == default);
                tuned.record.stats.baseline_us = default_timing.map(|(_, t)| t.median_us);
                winner
            }
            // Unconfirmed: the search's own fastest, of those that have not
            // failed since.
            None => fastest_standing(&tuned, &failed, &contenders)?,
        };
        let stats = &mut tuned.record.stats;
        stats.median_us = timing.median_us;
        stats.low_us = timing.low_us;
        stats.high_us = timing.high_us;
        stats.samples = timing.samples;
        tuned.record.schedule = schedule;
        Some(tuned)
    }
}

/// The distinct schedules of `tuned`'s history measured within
/// [`CONFIRM_WITHIN`] of the fastest, at most [`CONFIRM_MOST`], fastest
/// first, and `default` after them where the search measured it.
fn contenders(tuned: &Tuned, default: &Schedule) -> Vec<Schedule> {
    let measured = measured(tuned);
    let Some(fastest) = measured.first().map(|(_, t)| t.median_us) else {
        return Vec::new();
    };
    let mut contenders: Vec<Schedule> = Vec::new();
    for (schedule, timing) in &measured {
        if timing.median_us > fastest * CONFIRM_WITHIN || contenders.len() == CONFIRM_MOST {
            break;
        }
        if !contenders.contains(schedule) {
            contenders.push((*schedule).clone());
        }
    }
    if !contenders.contains(default) && measured.iter().any(|(s, _)| *s == default) {
        contenders.push(default.clone());
    }
    contenders
}

/// The schedules `tuned`'s search measured, with their times, fastest
/// first.
fn measured(tuned: &Tuned) -> Vec<(&Schedule, Timing)> {
    let mut measured: Vec<(&Schedule, Timing)> = tuned
        .history
        .iter()
        .filter_map(|step| Some((&step.schedule, *step.result.as_ref().ok()?)))
        .collect();
    measured.sort_by(|a, b| a.1.median_us.total_cmp(&b.1.median_us));
    measured
}

/// The fastest schedule of `tuned`'s search, with its time then, that did
/// not fail when measured again (`failed`, beside `contenders`).
fn fastest_standing(
    tuned: &Tuned,
    failed: &[Option<String>],
    contenders: &[Schedule],
) -> Option<(Schedule, Timing)> {
    let fell = |s: &Schedule| {
        contenders
            .iter()
            .zip(failed)
            .any(|(c, why)| c == s && why.is_some())
    };
    measured(tuned)
        .into_iter()
        .find(|(s, _)| !fell(s))
        .map(|(s, t)| (s.clone(), t))
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

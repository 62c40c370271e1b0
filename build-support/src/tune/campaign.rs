//! Tuning several kernels under one budget (`cargo ktune tune`): the
//! scheduler of `ktune-search` hands out evaluations in rounds, more to the
//! kernels where a measurement is expected to save the most time, and each
//! round searches its kernel again with a larger allowance (the journal
//! answers what the earlier rounds measured, so a round measures only new
//! points).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ktune_search::scheduler::Scheduler;
use ktune_search::session::Deadline;

use super::Bench;
use super::journal::{Journal, Observer};
use super::task::{Method, Plan, Task, Tuned, best_so_far};

/// Evaluations every kernel gets first (fewer when the budget is short).
const WARMUP: usize = 8;
/// Evaluations per later round (the evolutionary search's batch).
const ROUND: usize = 8;

/// Several kernels' searches under one budget.
#[derive(Debug)]
pub struct Campaign<'k> {
    /// Each kernel's search and its weight (how often the application runs
    /// it).
    pub tasks: Vec<(Task<'k>, f64)>,
    pub method: Method,
    /// Evaluations over all kernels.
    pub evaluations: usize,
    /// No measurement starts after this.
    pub deadline: Deadline,
    /// Where each kernel's journal is kept (none: in memory only).
    pub journals: Option<PathBuf>,
}

/// What one kernel's part of a campaign found.
#[derive(Debug)]
pub struct KernelRun {
    pub kernel: String,
    pub weight: f64,
    /// The fastest round's result (`None`: nothing could be measured).
    pub tuned: Option<Tuned>,
    /// Rounds this kernel was given.
    pub rounds: usize,
}

/// What a campaign did.
#[derive(Debug)]
pub struct CampaignResult {
    pub runs: Vec<KernelRun>,
    pub elapsed: Duration,
    /// Ended early by the deadline's interrupt.
    pub interrupted: bool,
}

impl Campaign<'_> {
    /// Runs the campaign on `bench`, reporting to `observer`.
    pub fn run(&self, bench: &mut dyn Bench, observer: &mut dyn Observer) -> CampaignResult {
        let started = Instant::now();
        let gpu = bench.gpu();
        let mut journals: Vec<Journal> = self
            .tasks
            .iter()
            .map(|(task, _)| match &self.journals {
                Some(dir) => Journal::open(dir, task.kernel(), &gpu),
                None => Journal::in_memory(),
            })
            .collect();
        for ((task, _), journal) in self.tasks.iter().zip(&journals) {
            if !journal.is_empty() {
                observer.line(&format!(
                    "{}: resuming, {} measured before answered from the journal",
                    task.kernel().name,
                    crate::counted(journal.len(), "point")
                ));
            }
        }
        let weights: Vec<f64> = self.tasks.iter().map(|(_, w)| *w).collect();
        let warmup = (self.evaluations / self.tasks.len().max(1)).clamp(1, WARMUP);
        let mut scheduler = Scheduler::new(&weights, self.evaluations, warmup, ROUND);
        let mut runs: Vec<KernelRun> = self
            .tasks
            .iter()
            .map(|(task, weight)| KernelRun {
                kernel: task.kernel().name.clone(),
                weight: *weight,
                tuned: None,
                rounds: 0,
            })
            .collect();
        while !self.deadline.passed() {
            let Some((i, allowance)) = scheduler.next_round() else {
                break;
            };
            let run = &mut runs[i];
            run.rounds += 1;
            observer.line(&format!(
                "{}: round {}, up to {allowance} evaluations",
                run.kernel, run.rounds
            ));
            let plan = Plan {
                method: self.method,
                evaluations: allowance,
                deadline: self.deadline,
            };
            match self.tasks[i]
                .0
                .search(bench, &plan, &mut journals[i], observer)
            {
                Ok(tuned) => {
                    scheduler.record(i, best_so_far(&tuned.history));
                    // A round the deadline cuts short may end with fewer
                    // points than the one before (its session refuses even
                    // journaled ones past the deadline): keep the fastest
                    // winner of any round, of equals the one that saw more.
                    let better = |kept: &Tuned| {
                        let (new, old) =
                            (tuned.record.stats.median_us, kept.record.stats.median_us);
                        new < old || (new == old && tuned.history.len() >= kept.history.len())
                    };
                    if run.tuned.as_ref().is_none_or(better) {
                        run.tuned = Some(tuned);
                    }
                }
                Err(rejected) => scheduler.record(i, best_so_far(&rejected)),
            }
        }
        for (run, (task, _)) in runs.iter_mut().zip(&self.tasks) {
            if let Some(tuned) = run.tuned.take() {
                run.tuned = task.confirm(bench, tuned, self.deadline, observer);
            }
        }
        CampaignResult {
            runs,
            elapsed: started.elapsed(),
            interrupted: self.deadline.interrupted(),
        }
    }
}

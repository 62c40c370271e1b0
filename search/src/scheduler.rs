//! Spreading one evaluation budget over several searches.
//!
//! A crate has several kernels; tuning them is one budget of measurements,
//! and a measurement is worth most where it is likely to save the most time
//! in the application. The scheduler hands out the budget in rounds: every
//! task first gets `warmup` evaluations (enough to have a best time and a
//! trend), then each round of `round` evaluations goes to the task with the
//! largest expected saving per evaluation, its weight times its expected
//! gain:
//!
//! - *recent gain*: how much its best time fell per evaluation over its last
//!   round;
//! - *average gain*: how much it fell per evaluation since the first
//!   success.
//!
//! The expected gain is the mean of the two, plus a small share of the best
//! time that fades as the task measures more (so that a task whose first
//! point happened to be its best is not starved forever). Gains are in the
//! tasks' time unit, so a kernel that takes longer is worth more; the weight
//! says how often the
//! application runs the kernel (1 by default). A task whose strategy stopped
//! short of its allowance has nothing left to try and gets no more rounds.
//! Ties go to the lower task index, so a schedule is reproducible.

/// The share of its best time a task is hoped to gain per evaluation,
/// divided by the evaluations it has made.
const FADING_HOPE: f64 = 0.01;

/// One task as the scheduler sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Task {
    /// How much a unit of this task's time is worth (how often it runs).
    pub weight: f64,
    /// The best time after each evaluation made so far (`None` until one
    /// succeeded).
    pub curve: Vec<Option<f64>>,
    /// Evaluations allowed so far.
    pub allowed: usize,
    /// Whether its strategy has nothing left to try.
    pub exhausted: bool,
}

/// The scheduler's plan: which task gets the next round.
#[derive(Clone, Debug)]
pub struct Scheduler {
    tasks: Vec<Task>,
    budget: usize,
    warmup: usize,
    round: usize,
}

impl Scheduler {
    /// `budget` evaluations over tasks of these weights, `warmup` first to
    /// each, then `round` at a time.
    pub fn new(weights: &[f64], budget: usize, warmup: usize, round: usize) -> Scheduler {
        Scheduler {
            tasks: weights
                .iter()
                .map(|&weight| Task {
                    weight,
                    curve: Vec::new(),
                    allowed: 0,
                    exhausted: false,
                })
                .collect(),
            budget,
            warmup: warmup.max(1),
            round: round.max(1),
        }
    }

    pub fn tasks(&self) -> &[Task] {
        &self.tasks
    }

    /// Evaluations allowed so far, over all tasks.
    pub fn allowed(&self) -> usize {
        self.tasks.iter().map(|t| t.allowed).sum()
    }

    /// The next task to run and its new total allowance (the evaluations it
    /// may have made when this round ends), or `None` when the budget is
    /// handed out or every task is exhausted.
    pub fn next_round(&mut self) -> Option<(usize, usize)> {
        let left = self.budget.saturating_sub(self.allowed());
        if left == 0 {
            return None;
        }
        let live = |t: &Task| !t.exhausted;
        let (index, grant) = match self.tasks.iter().position(|t| live(t) && t.allowed == 0) {
            Some(i) => (i, self.warmup),
            None => {
                let i = (0..self.tasks.len())
                    .filter(|&i| live(&self.tasks[i]))
                    .map(|i| (i, self.priority(i)))
                    .fold(None, |best: Option<(usize, f64)>, (i, p)| match best {
                        Some((_, b)) if b >= p => best,
                        _ => Some((i, p)),
                    })?
                    .0;
                (i, self.round)
            }
        };
        let task = &mut self.tasks[index];
        task.allowed += grant.min(left);
        Some((index, task.allowed))
    }

    /// What task `index` did with its allowance: the best time after each of
    /// its evaluations, from the first. A task that made fewer evaluations
    /// than it was allowed is exhausted; what it left goes back to the
    /// budget.
    pub fn record(&mut self, index: usize, curve: Vec<Option<f64>>) {
        let task = &mut self.tasks[index];
        task.exhausted = curve.len() < task.allowed;
        task.allowed = task.allowed.min(curve.len());
        task.curve = curve;
    }

    /// Expected saving per evaluation of task `i`: infinite while it has no
    /// successful measurement (any time beats none).
    fn priority(&self, i: usize) -> f64 {
        let task = &self.tasks[i];
        let spent = task.curve.len();
        let Some(best) = task.curve.last().copied().flatten() else {
            return f64::INFINITY;
        };
        let slope_since = |from: usize| match task.curve[from] {
            Some(before) if from + 1 < spent => (before - best) / (spent - 1 - from) as f64,
            _ => 0.0,
        };
        let recent = slope_since(spent.saturating_sub(self.round + 1));
        let first = task.curve.iter().position(Option::is_some).unwrap_or(0);
        let average = slope_since(first);
        let hope = FADING_HOPE * best / spent as f64;
        task.weight * (0.5 * (recent + average) + hope)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the scheduler over tasks whose best-so-far after `n`
    /// evaluations is `curve(task, n)`, recording each round; returns the
    /// evaluations each task got.
    fn simulate(
        weights: &[f64],
        budget: usize,
        space_sizes: &[usize],
        curve: impl Fn(usize, usize) -> f64,
    ) -> Vec<usize> {
        let mut scheduler = Scheduler::new(weights, budget, 4, 4);
        while let Some((task, allowed)) = scheduler.next_round() {
            let made = allowed.min(space_sizes[task]);
            scheduler.record(task, (1..=made).map(|n| Some(curve(task, n))).collect());
        }
        scheduler.tasks().iter().map(|t| t.curve.len()).collect()
    }

    #[test]
    fn every_task_is_warmed_up_and_the_budget_is_spent_exactly() {
        let got = simulate(&[1.0, 1.0, 1.0], 40, &[usize::MAX; 3], |_, n| {
            10.0 / n as f64
        });
        assert!(got.iter().all(|&n| n >= 4), "{got:?}");
        assert_eq!(got.iter().sum::<usize>(), 40);
    }

    #[test]
    fn a_task_that_keeps_improving_gets_more_than_one_that_has_converged() {
        // Task 0 is flat at 10 from its first evaluation; task 1 starts at
        // 10 and keeps falling.
        let got = simulate(&[1.0, 1.0], 64, &[usize::MAX; 2], |task, n| {
            if task == 0 {
                10.0
            } else {
                10.0 * 0.9f64.powi(n as i32)
            }
        });
        assert!(got[1] > 2 * got[0], "{got:?}");
    }

    #[test]
    fn weight_and_time_scale_the_share() {
        // The same relative progress; task 1 runs 10× as often.
        let weighted = simulate(&[1.0, 10.0], 80, &[usize::MAX; 2], |_, n| {
            5.0 + 5.0 / n as f64
        });
        assert!(weighted[1] > 2 * weighted[0], "{weighted:?}");
        // The same, task 0 takes 10× as long per run.
        let slow = simulate(&[1.0, 1.0], 80, &[usize::MAX; 2], |task, n| {
            let scale = if task == 0 { 10.0 } else { 1.0 };
            scale * (5.0 + 5.0 / n as f64)
        });
        assert!(slow[0] > 2 * slow[1], "{slow:?}");
    }

    #[test]
    fn an_exhausted_task_gets_no_more_rounds() {
        // Task 0's space has 6 points; the rest of the budget goes to task 1.
        let got = simulate(&[100.0, 1.0], 50, &[6, usize::MAX], |_, n| 10.0 / n as f64);
        assert_eq!(got, vec![6, 44]);
        // When every task is exhausted, the schedule ends early.
        let got = simulate(&[1.0, 1.0], 50, &[3, 5], |_, n| 10.0 / n as f64);
        assert_eq!(got, vec![3, 5]);
    }

    #[test]
    fn a_task_without_a_success_is_retried_first() {
        let mut scheduler = Scheduler::new(&[1.0, 1.0], 100, 2, 2);
        assert_eq!(scheduler.next_round(), Some((0, 2)));
        scheduler.record(0, vec![None, None]);
        assert_eq!(scheduler.next_round(), Some((1, 2)));
        scheduler.record(1, vec![Some(1.0), Some(1.0)]);
        assert_eq!(scheduler.next_round(), Some((0, 4)));
    }
}

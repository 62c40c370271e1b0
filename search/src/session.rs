//! One search run: the space, the measurer, the budget and the history.
//!
//! Strategies measure only through [`Session::measure`], which enforces the
//! two rules every strategy keeps: a point is never measured twice (asking
//! again returns the recorded outcome for free) and no evaluation is made
//! past the budget, in evaluations or in wall-clock time. A strategy that
//! has several points in hand measures them with [`Session::measure_batch`],
//! which keeps the same rules and first tells the measurer which points are
//! coming ([`Measurer::prepare`]), so that it can compile them in parallel.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::measure::{Measurer, Outcome};
use crate::space::{Point, Space};

/// When a run stops.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Budget {
    /// The most evaluations (measurements, rejections included).
    pub evaluations: usize,
    /// Stop as soon as a time at or below this is measured (for scoring on a
    /// replay, where nothing can beat the known optimum).
    pub stop_at: Option<f64>,
    /// No measurement starts after this.
    pub deadline: Option<Deadline>,
}

impl Budget {
    pub fn evaluations(evaluations: usize) -> Self {
        Budget {
            evaluations,
            stop_at: None,
            deadline: None,
        }
    }

    /// This budget, also ending at `deadline`.
    pub fn until(self, deadline: impl Into<Deadline>) -> Self {
        Budget {
            deadline: Some(deadline.into()),
            ..self
        }
    }
}

/// When a run's time is up: at an instant, or sooner when an interrupt
/// (Ctrl-C, caught by the program) raises a flag. The flag is the
/// process's, hence `'static`, and every search of a run holds the same.
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    pub at: Instant,
    interrupt: Option<&'static AtomicBool>,
}

impl Deadline {
    pub fn at(at: Instant) -> Deadline {
        Deadline {
            at,
            interrupt: None,
        }
    }

    /// This deadline, or the moment `interrupt` is raised if sooner.
    pub fn or_interrupt(self, interrupt: &'static AtomicBool) -> Deadline {
        Deadline {
            interrupt: Some(interrupt),
            ..self
        }
    }

    /// Whether the time is up.
    pub fn passed(&self) -> bool {
        self.interrupted() || Instant::now() >= self.at
    }

    /// Whether it came early, by the interrupt.
    pub fn interrupted(&self) -> bool {
        self.interrupt.is_some_and(|i| i.load(Ordering::Relaxed))
    }
}

impl From<Instant> for Deadline {
    fn from(at: Instant) -> Deadline {
        Deadline::at(at)
    }
}

impl PartialEq for Deadline {
    fn eq(&self, other: &Deadline) -> bool {
        self.at == other.at
            && match (self.interrupt, other.interrupt) {
                (Some(a), Some(b)) => std::ptr::eq(a, b),
                (a, b) => a.is_none() && b.is_none(),
            }
    }
}

/// One evaluation, in the order made.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    pub point: Point,
    pub outcome: Outcome,
    /// What the strategy's cost model predicted for the point when it chose
    /// it (lower is better; the model's own scale), if a model chose it.
    pub predicted: Option<f64>,
}

/// A run in progress.
pub struct Session<'a> {
    space: &'a Space,
    measurer: &'a mut dyn Measurer,
    budget: Budget,
    history: Vec<Evaluation>,
    seen: HashMap<Point, usize>,
    best: Option<usize>,
    done: bool,
}

impl std::fmt::Debug for Session<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("budget", &self.budget)
            .field("evaluations", &self.history.len())
            .field("best", &self.best())
            .finish()
    }
}

impl<'a> Session<'a> {
    pub fn new(space: &'a Space, measurer: &'a mut dyn Measurer, budget: Budget) -> Self {
        Session {
            space,
            measurer,
            budget,
            history: Vec::new(),
            seen: HashMap::new(),
            best: None,
            done: budget.evaluations == 0,
        }
    }

    pub fn space(&self) -> &'a Space {
        self.space
    }

    /// Whether the run must stop: budget spent, deadline passed or target
    /// reached.
    pub fn is_done(&self) -> bool {
        self.done || self.budget.deadline.is_some_and(|d| d.passed())
    }

    /// Evaluations left.
    pub fn remaining(&self) -> usize {
        if self.is_done() {
            0
        } else {
            self.budget.evaluations - self.history.len()
        }
    }

    /// Measures a point, or returns its earlier outcome without spending an
    /// evaluation. `None` when the point is new and the run is done.
    pub fn measure(&mut self, point: &Point) -> Option<&Outcome> {
        self.evaluate(point, None)
    }

    /// [`Session::measure`] for a point a cost model chose, recording the
    /// model's prediction beside the outcome (for reports on the model).
    pub fn measure_predicted(&mut self, point: &Point, predicted: f64) -> Option<&Outcome> {
        self.evaluate(point, Some(predicted))
    }

    /// Measures `points` in order, as [`Session::measure`] would one after
    /// the other, after telling the measurer which of them it is about to
    /// measure: those not measured yet, each once, as many as the
    /// evaluations left allow. The history, the budget and the outcomes
    /// are the same as with one call per point; a point the run stops
    /// before (target reached, deadline) is left unmeasured.
    pub fn measure_batch(&mut self, points: &[Point]) {
        self.evaluate_batch(points.iter().map(|p| (p, None)).collect());
    }

    /// [`Session::measure_batch`] for points a cost model may have chosen:
    /// each with its prediction, as [`Session::measure_predicted`] records.
    pub fn measure_batch_predicted(&mut self, points: &[(Point, Option<f64>)]) {
        self.evaluate_batch(points.iter().map(|(p, m)| (p, *m)).collect());
    }

    fn evaluate_batch(&mut self, batch: Vec<(&Point, Option<f64>)>) {
        let mut fresh = HashSet::new();
        let batch: Vec<(&Point, Option<f64>)> = batch
            .into_iter()
            .filter(|(p, _)| !self.seen.contains_key(*p) && fresh.insert(*p))
            .take(self.remaining())
            .collect();
        if batch.is_empty() {
            return;
        }
        let points: Vec<Point> = batch.iter().map(|(p, _)| (*p).clone()).collect();
        self.measurer
            .prepare(self.space, &points, self.budget.deadline.map(|d| d.at));
        for (point, predicted) in batch {
            self.evaluate(point, predicted);
        }
    }

    fn evaluate(&mut self, point: &Point, predicted: Option<f64>) -> Option<&Outcome> {
        if let Some(&i) = self.seen.get(point) {
            return Some(&self.history[i].outcome);
        }
        if self.is_done() {
            self.done = true;
            return None;
        }
        let outcome = self.measurer.measure(self.space, point);
        let index = self.history.len();
        if let Ok(m) = &outcome {
            let better = self
                .best
                .is_none_or(|b| m.time < self.time_of(b).unwrap_or(f64::INFINITY));
            if better {
                self.best = Some(index);
            }
            if self.budget.stop_at.is_some_and(|t| m.time <= t) {
                self.done = true;
            }
        }
        self.history.push(Evaluation {
            point: point.clone(),
            outcome,
            predicted,
        });
        self.seen.insert(point.clone(), index);
        if self.history.len() >= self.budget.evaluations {
            self.done = true;
        }
        Some(&self.history[index].outcome)
    }

    /// The time measured for a point, if measured and successful.
    pub fn time(&self, point: &Point) -> Option<f64> {
        self.seen.get(point).and_then(|&i| self.time_of(i))
    }

    fn time_of(&self, index: usize) -> Option<f64> {
        self.history[index].outcome.as_ref().ok().map(|m| m.time)
    }

    /// Whether the point has been measured (or rejected).
    pub fn is_measured(&self, point: &Point) -> bool {
        self.seen.contains_key(point)
    }

    /// The best point so far and its time.
    pub fn best(&self) -> Option<(&Point, f64)> {
        self.best.map(|i| {
            (
                &self.history[i].point,
                self.time_of(i).unwrap_or(f64::INFINITY),
            )
        })
    }

    /// Every evaluation, in order.
    pub fn history(&self) -> &[Evaluation] {
        &self.history
    }

    /// Ends the session, returning its history.
    pub fn into_history(self) -> Vec<Evaluation> {
        self.history
    }
}

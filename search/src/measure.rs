//! Measuring a point: the one expensive operation a search makes.

use std::fmt;
use std::time::Instant;

use crate::space::{Point, Space};

/// A successful measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    /// The mean time (any unit, the same for every point of a space; lower
    /// is better).
    pub time: f64,
    /// The individual runs the mean was taken over, when known.
    pub samples: Vec<f64>,
}

impl Measurement {
    pub fn new(time: f64) -> Self {
        Measurement {
            time,
            samples: Vec::new(),
        }
    }

    /// The sample standard deviation of the runs, when there are two or more.
    pub fn spread(&self) -> Option<f64> {
        let n = self.samples.len();
        if n < 2 {
            return None;
        }
        let mean = self.samples.iter().sum::<f64>() / n as f64;
        let var = self.samples.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        Some(var.sqrt())
    }
}

/// Why a point has no time. A rejection still costs an evaluation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// The point violates the space's constraints.
    Invalid(String),
    /// The kernel did not compile (or assemble) for this point.
    CompileFailed(String),
    /// The kernel failed at run time (launch error, fault, timeout).
    RuntimeFailed(String),
    /// The kernel ran but its output was wrong.
    WrongResult(String),
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Invalid(why) => write!(f, "invalid: {why}"),
            Rejection::CompileFailed(why) => write!(f, "compile failed: {why}"),
            Rejection::RuntimeFailed(why) => write!(f, "runtime failure: {why}"),
            Rejection::WrongResult(why) => write!(f, "wrong result: {why}"),
        }
    }
}

/// What measuring a point gave.
pub type Outcome = Result<Measurement, Rejection>;

/// Something that measures points of a space: a GPU, the virtual GPU, or a
/// replayed recording.
pub trait Measurer {
    fn measure(&mut self, space: &Space, point: &Point) -> Outcome;

    /// A hint: `points` are about to be measured, in this order, each once,
    /// none after `deadline`. A measurer that compiles candidates may
    /// compile them all now, in parallel, so that the measurements that
    /// follow only run them, starting none after the deadline. It must
    /// not change what [`Measurer::measure`] answers; a point may still be
    /// left unmeasured (the budget ran out). Does nothing by default.
    fn prepare(&mut self, space: &Space, points: &[Point], deadline: Option<Instant>) {
        let _ = (space, points, deadline);
    }
}

impl<F: FnMut(&Space, &Point) -> Outcome> Measurer for F {
    fn measure(&mut self, space: &Space, point: &Point) -> Outcome {
        self(space, point)
    }
}

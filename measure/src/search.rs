//! The seam to `ktune-search`: a kernel's worker as a
//! [`Measurer`] of the search's points.
//!
//! The search works on generic [`Space`]s and [`Point`]s; the caller says
//! how a point becomes a schedule. Every measurement, with its full
//! statistics and device, is kept in [`KernelMeasurer::history`] for the
//! database records the search's times alone cannot make.

use std::fmt;
use std::time::Instant;

use ktune_core::schedule::Schedule;
use ktune_search::measure::{Measurement, Measurer, Outcome, Rejection};
use ktune_search::space::{Point, Space};

use crate::{Job, Measured, Rejected, Worker};

impl From<Rejected> for Rejection {
    fn from(rejected: Rejected) -> Rejection {
        match rejected {
            Rejected::Invalid(why) => Rejection::Invalid(why),
            Rejected::CompileFailed(why) => Rejection::CompileFailed(why),
            Rejected::WrongResult(why) => Rejection::WrongResult(why),
            other
            @ (Rejected::Fault(_) | Rejected::Timeout { .. } | Rejected::WorkerCrashed(_)) => {
                Rejection::RuntimeFailed(other.to_string())
            }
        }
    }
}

impl From<&Measured> for Measurement {
    /// The median, in microseconds.
    fn from(measured: &Measured) -> Measurement {
        Measurement::new(measured.median_us)
    }
}

/// One kernel's points measured by a [`Worker`].
pub struct KernelMeasurer<'w, F> {
    worker: &'w mut Worker,
    job: Job,
    schedule_of: F,
    history: Vec<(Schedule, Result<Measured, Rejected>)>,
}

impl<F> fmt::Debug for KernelMeasurer<'_, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelMeasurer")
            .field("worker", &self.worker)
            .field("job", &self.job)
            .field("measured", &self.history.len())
            .finish()
    }
}

impl<'w, F> KernelMeasurer<'w, F>
where
    F: FnMut(&Space, &Point) -> Option<Schedule>,
{
    /// Measures `job`'s points on `worker`; `schedule_of` turns a search
    /// point into a schedule (`None`: the point is rejected as invalid).
    pub fn new(worker: &'w mut Worker, job: Job, schedule_of: F) -> Self {
        KernelMeasurer {
            worker,
            job,
            schedule_of,
            history: Vec::new(),
        }
    }

    /// Measures one schedule, and keeps the result.
    pub fn measure_schedule(&mut self, schedule: &Schedule) -> Result<Measured, Rejected> {
        let result = self.worker.measure(&self.job, schedule);
        self.history.push((schedule.clone(), result.clone()));
        result
    }

    /// Every schedule measured so far, in order, with its result.
    pub fn history(&self) -> &[(Schedule, Result<Measured, Rejected>)] {
        &self.history
    }

    /// The history, giving up the measurer.
    pub fn into_history(self) -> Vec<(Schedule, Result<Measured, Rejected>)> {
        self.history
    }
}

impl<F> Measurer for KernelMeasurer<'_, F>
where
    F: FnMut(&Space, &Point) -> Option<Schedule>,
{
    fn measure(&mut self, space: &Space, point: &Point) -> Outcome {
        let Some(schedule) = (self.schedule_of)(space, point) else {
            return Err(Rejection::Invalid(format!(
                "point {} maps to no schedule of the kernel",
                space.describe(point)
            )));
        };
        self.measure_schedule(&schedule)
            .map(|m| Measurement::from(&m))
            .map_err(Rejection::from)
    }

    /// Compiles the points' schedules in the worker ([`Worker::prepare`]).
    fn prepare(&mut self, space: &Space, points: &[Point], deadline: Option<Instant>) {
        let schedules: Vec<Schedule> = points
            .iter()
            .filter_map(|p| (self.schedule_of)(space, p))
            .collect();
        self.worker.prepare(&self.job, &schedules, deadline);
    }
}

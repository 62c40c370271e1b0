//! Coordinate descent: improve a point one knob at a time.

use rand::seq::SliceRandom;

use super::{Rng, Strategy, random_unmeasured, rng};
use crate::session::Session;
use crate::space::{Neighbourhood, Point};

/// From a start point (the given one, else a random valid one), tries every
/// other value of one knob at a time (knobs in a random order per pass) and
/// moves to the best; stops at a point no single-knob change improves. With
/// `restart`, then starts again from a random valid point while budget
/// remains.
#[derive(Clone, Debug)]
pub struct CoordinateDescent {
    pub start: Option<Point>,
    pub neighbourhood: Neighbourhood,
    pub restart: bool,
}

impl Default for CoordinateDescent {
    fn default() -> Self {
        CoordinateDescent {
            start: None,
            neighbourhood: Neighbourhood::Any,
            restart: true,
        }
    }
}

impl CoordinateDescent {
    /// Polishes `start` once, without restarts.
    pub fn polish(start: Point) -> Self {
        CoordinateDescent {
            start: Some(start),
            neighbourhood: Neighbourhood::Any,
            restart: false,
        }
    }
}

impl Strategy for CoordinateDescent {
    fn name(&self) -> String {
        "coordinate_descent".to_string()
    }

    fn run(&self, session: &mut Session<'_>, seed: u64) {
        let mut rng = rng(seed);
        let mut start = self.start.clone();
        while !session.is_done() {
            let Some(p) = start
                .take()
                .or_else(|| random_unmeasured(session, &mut rng))
            else {
                return;
            };
            descend(session, p, self.neighbourhood, &mut rng, &mut |_, line| {
                line
            });
            if !self.restart {
                return;
            }
        }
    }
}

/// Which points of a knob's line to measure (all of them, or those a model
/// prefers).
pub(crate) type LineFilter<'f> = dyn FnMut(&Session<'_>, Vec<Point>) -> Vec<Point> + 'f;

/// Descends from `start` to a local optimum (or until the session is done),
/// measuring on each knob's line the points `filter` keeps; returns the
/// point reached, if any was measured successfully.
pub(crate) fn descend(
    session: &mut Session<'_>,
    start: Point,
    neighbourhood: Neighbourhood,
    rng: &mut Rng,
    filter: &mut LineFilter<'_>,
) -> Option<Point> {
    let space = session.space();
    session.measure(&start);
    let mut here = start;
    let mut here_time = session.time(&here)?;
    let mut knobs: Vec<usize> = (0..space.knobs().len()).collect();
    loop {
        let mut improved = false;
        knobs.shuffle(rng);
        for &knob in &knobs {
            let line = space.knob_neighbours(&here, knob, neighbourhood);
            let line = filter(session, line);
            session.measure_batch(&line);
            if session.is_done() {
                return Some(here);
            }
            // The best of this knob's values, measured now or before.
            for p in space.knob_neighbours(&here, knob, neighbourhood) {
                if let Some(t) = session.time(&p).filter(|&t| t < here_time) {
                    here = p;
                    here_time = t;
                    improved = true;
                }
            }
        }
        if !improved || session.is_done() {
            return Some(here);
        }
    }
}

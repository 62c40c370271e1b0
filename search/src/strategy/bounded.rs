//! Bounded search: rank points by a fixed scoring function (a heuristic
//! model of the hardware) and measure only the best few.

use std::fmt;
use std::sync::Arc;

use super::{Strategy, rng};
use crate::session::Session;
use crate::space::{Point, Space};

/// A heuristic score of a point: lower means expected faster.
pub type Score = Arc<dyn Fn(&Space, &Point) -> f64 + Send + Sync>;

/// Measures the `k` best-scored points, best first.
///
/// The candidates are every valid point, or, with `sample`, that many valid
/// points drawn with the run's seed (for spaces too large to list). Ties keep
/// the space's order.
#[derive(Clone)]
pub struct Bounded {
    pub score: Score,
    pub k: usize,
    pub sample: Option<usize>,
}

impl fmt::Debug for Bounded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bounded")
            .field("k", &self.k)
            .field("sample", &self.sample)
            .finish()
    }
}

impl Bounded {
    pub fn new(score: Score, k: usize) -> Self {
        Bounded {
            score,
            k,
            sample: None,
        }
    }
}

impl Strategy for Bounded {
    fn name(&self) -> String {
        format!("bounded-{}", self.k)
    }

    fn run(&self, session: &mut Session<'_>, seed: u64) {
        let space = session.space();
        let mut candidates = match self.sample {
            None => space.valid_points(),
            Some(n) => {
                let mut rng = rng(seed);
                let mut drawn: Vec<Point> = (0..n)
                    .filter_map(|_| space.random_valid(&mut rng))
                    .collect();
                drawn.sort();
                drawn.dedup();
                drawn
            }
        };
        let scores: Vec<f64> = candidates.iter().map(|p| (self.score)(space, p)).collect();
        let mut order: Vec<usize> = (0..candidates.len()).collect();
        order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
        let mut ranked: Vec<Point> = order
            .into_iter()
            .map(|i| std::mem::replace(&mut candidates[i], Point(Vec::new())))
            .collect();
        ranked.truncate(self.k);
        session.measure_batch(&ranked);
    }
}

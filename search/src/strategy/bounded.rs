//! Bounded search: rank points by a fixed scoring function (a heuristic
//! model of the hardware) and measure only a few of the best.

use std::fmt;
use std::sync::Arc;

use super::{Strategy, rng};
use crate::session::Session;
use crate::space::{Point, Space};

/// A heuristic score of a point: lower means expected faster.
pub type Score = Arc<dyn Fn(&Space, &Point) -> f64 + Send + Sync>;

/// How much worse than the best score a point may be and still count as
/// one of the best: a heuristic model's estimates are no finer than that
/// (ktune's is off by tens of percent on some shapes), so the points
/// within it are candidates alike.
pub const SCORE_BAND: f64 = 0.1;

/// Measures `k` of the best-scored points, the best first.
///
/// The candidates are every valid point, or, with `sample`, that many valid
/// points drawn with the run's seed (for spaces too large to list). A
/// model's estimates often tie over many points that differ only in knobs
/// it does not see (vector widths, rasterization) and rank them side by
/// side: measuring the first `k` would spend the budget on one kernel's
/// variations. So among the points scored within `band` of the best, the
/// `k` measured are spread over the knobs: after the best-scored one, each
/// is the one that differs in the most knobs from every point chosen
/// before it (ties go to the better score, then to the space's order).
/// When fewer than `k` points are within the band, the rest follow in
/// order of score.
#[derive(Clone)]
pub struct Bounded {
    pub score: Score,
    pub k: usize,
    pub sample: Option<usize>,
    /// The relative width of the best scores' band (see [`SCORE_BAND`]).
    pub band: f64,
}

impl fmt::Debug for Bounded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bounded")
            .field("k", &self.k)
            .field("sample", &self.sample)
            .field("band", &self.band)
            .finish()
    }
}

impl Bounded {
    pub fn new(score: Score, k: usize) -> Self {
        Bounded {
            score,
            k,
            sample: None,
            band: SCORE_BAND,
        }
    }

    /// The points a run with `seed` measures, in order.
    pub fn choose(&self, space: &Space, seed: u64) -> Vec<Point> {
        self.choose_besides(space, seed, |_| false)
    }

    /// [`Bounded::choose`] among the points `known` does not hold (those
    /// measured already, as a build's search measures the default first):
    /// `k` others.
    pub fn choose_besides(
        &self,
        space: &Space,
        seed: u64,
        known: impl Fn(&Point) -> bool,
    ) -> Vec<Point> {
        let candidates = match self.sample {
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
        let mut ranked: Vec<(f64, Point)> = candidates
            .into_iter()
            .filter(|p| !known(p))
            .map(|p| ((self.score)(space, &p), p))
            .collect();
        ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
        self.best(&ranked, self.k)
    }

    /// Up to `k` of `ranked` (best first): spread over the band of the
    /// best scores, then the next in order of score.
    fn best(&self, ranked: &[(f64, Point)], k: usize) -> Vec<Point> {
        let Some(&(best, _)) = ranked.first() else {
            return Vec::new();
        };
        let limit = best + self.band * best.abs();
        let within = ranked.partition_point(|(s, _)| *s <= limit);
        let mut chosen = spread(&ranked[..within], k);
        let rest = ranked[within..].iter().map(|(_, p)| p.clone());
        chosen.extend(rest.take(k - chosen.len()));
        chosen
    }
}

/// Up to `k` of `ranked` (best first): the first, then each time the one
/// whose fewest differing knobs from those chosen are the most, the
/// earliest on ties.
fn spread(ranked: &[(f64, Point)], k: usize) -> Vec<Point> {
    let mut chosen: Vec<Point> = Vec::with_capacity(k.min(ranked.len()));
    // Each candidate's distance to the nearest chosen point; `None` once it
    // is chosen itself.
    let mut nearest: Vec<Option<usize>> = vec![Some(usize::MAX); ranked.len()];
    while chosen.len() < k {
        let Some(next) = nearest
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.map(|d| (i, d)))
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
            .map(|(i, _)| i)
        else {
            break;
        };
        let point = &ranked[next].1;
        nearest[next] = None;
        for (d, (_, other)) in nearest.iter_mut().zip(ranked) {
            if let Some(d) = d {
                *d = (*d).min(differing(point, other));
            }
        }
        chosen.push(point.clone());
    }
    chosen
}

/// How many knobs two points set differently.
fn differing(a: &Point, b: &Point) -> usize {
    a.0.iter().zip(&b.0).filter(|(x, y)| x != y).count()
}

impl Strategy for Bounded {
    fn name(&self) -> String {
        format!("bounded-{}", self.k)
    }

    fn run(&self, session: &mut Session<'_>, seed: u64) {
        let chosen = self.choose_besides(session.space(), seed, |p| session.is_measured(p));
        session.measure_batch(&chosen);
    }
}

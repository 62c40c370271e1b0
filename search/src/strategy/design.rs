//! Space-filling designs: the first points of a search, spread over each
//! knob's values.
//!
//! Uniform draws over the valid points follow the space's constraints: a
//! knob value that admits many combinations (a small block size, when the
//! block's threads are bounded) is drawn far more often than one that
//! admits few, and independent draws repeat values and leave others out.
//! When the fast points share a few knob values, that makes them slow to
//! find. A Latin hypercube over the knobs' value indices gives each knob's
//! values equal shares instead; each of its rows is then moved to the
//! nearest valid point.
//!
//! Within its stratum, a knob counting a block's threads takes the value
//! with the most factors of two: a block of 40 or 56 threads along a
//! dimension leaves lanes of its warps idle, and in the recorded spaces
//! such sizes are rarely among the fast ones (on dedispersion A4000, 37%
//! of the points with 128 threads along `y` are within 5% of the best,
//! 1.3% of those with 136).

use rand::Rng as _;
use rand::seq::SliceRandom;

use super::Rng;
use crate::space::{Knob, Point, Space};

/// The most combinations enumerated to find the nearest valid point to a
/// design's row; larger spaces that are not listed choose among random
/// valid points instead.
const ENUMERATION_LIMIT: u64 = 1 << 20;

/// Random valid points drawn per design point when the valid points are
/// not enumerated.
const DRAWS_PER_POINT: usize = 64;

/// Up to `count` distinct valid points for which `taken` is false, spread
/// over each knob's values; fewer only when no other valid point is left.
///
/// The rows of a Latin hypercube over the value indices (each knob's range
/// cut into `count` equal strata, one row per stratum, the strata matched
/// across knobs at random) are taken in turn; each becomes the valid point
/// nearest to it in the sum over knobs of the index distance relative to
/// the knob's range, ties broken at random. The same `rng` state gives the
/// same design.
pub fn spread(
    space: &Space,
    count: usize,
    rng: &mut Rng,
    taken: impl Fn(&Point) -> bool,
) -> Vec<Point> {
    if count == 0 {
        return Vec::new();
    }
    let mut candidates: Vec<Point> = match space.enumerate_within(ENUMERATION_LIMIT) {
        Some(all) => all,
        None => {
            let mut drawn: Vec<Point> = (0..count * DRAWS_PER_POINT)
                .filter_map(|_| space.random_valid(rng))
                .collect();
            drawn.sort();
            drawn.dedup();
            drawn
        }
    };
    candidates.retain(|p| !taken(p));
    let sizes: Vec<usize> = space.knobs().iter().map(|k| k.values.len()).collect();
    let columns: Vec<Vec<f64>> = space
        .knobs()
        .iter()
        .map(|k| column(k, count, rng))
        .collect();
    let mut design = Vec::with_capacity(count);
    for row in 0..count {
        if candidates.is_empty() {
            break;
        }
        let target: Vec<f64> = columns.iter().map(|c| c[row]).collect();
        let i = nearest(&candidates, &sizes, &target, rng);
        design.push(candidates.swap_remove(i));
    }
    design
}

/// One knob's column of the hypercube: a value index drawn in each of
/// `count` equal strata of the knob's values, in random order. For a knob
/// counting a block's threads whose values are not all powers of two, the
/// draw is among the stratum's values with the smallest odd factor (the
/// most factors of two, the fewest idle lanes).
fn column(knob: &Knob, count: usize, rng: &mut Rng) -> Vec<f64> {
    let size = knob.values.len();
    let mut column: Vec<f64> = (0..count)
        .map(|i| {
            let u: f64 = rng.random();
            let drawn = ((i as f64 + u) / count as f64 * size as f64).floor();
            if !knob.threads {
                return drawn;
            }
            // The stratum's indices: those the draw can give.
            let lo = i * size / count;
            let hi = ((i + 1) * size).div_ceil(count);
            let odd = |j: usize| knob.odd_factor(j);
            let Some(least) = (lo..hi).filter_map(odd).min() else {
                return drawn;
            };
            let roundest: Vec<usize> = (lo..hi).filter(|&j| odd(j) == Some(least)).collect();
            roundest[rng.random_range(0..roundest.len())] as f64
        })
        .collect();
    column.shuffle(rng);
    column
}

/// The index of the candidate nearest to `target`, a tie going to each of
/// the tied candidates with equal probability.
fn nearest(candidates: &[Point], sizes: &[usize], target: &[f64], rng: &mut Rng) -> usize {
    let mut best = f64::INFINITY;
    let mut chosen = 0;
    let mut ties = 0u32;
    for (i, p) in candidates.iter().enumerate() {
        let d: f64 =
            p.0.iter()
                .zip(sizes)
                .zip(target)
                .filter(|((_, n), _)| **n > 1)
                .map(|((&v, &n), &t)| (f64::from(v) - t).abs() / (n - 1) as f64)
                .sum();
        if d < best {
            best = d;
            chosen = i;
            ties = 1;
        } else if d == best {
            ties += 1;
            if rng.random_range(0..ties) == 0 {
                chosen = i;
            }
        }
    }
    chosen
}

//! Scoring a strategy on a replayed space, over many seeds.
//!
//! Per seed, with a budget of `B` evaluations:
//! - `evals`: the 1-based index of the first evaluation whose time is within
//!   5% of the space's optimum (`time ≤ 1.05 · optimum`), or `None` if none
//!   is within `B`;
//! - `auc`: `(1/B) · Σ_{i=1..B} optimum / best_i`, where `best_i` is the best
//!   time after `i` evaluations (the term is 0 before the first successful
//!   measurement).
//!
//! A run stops once it measures the optimum itself (nothing can improve
//! then) or has measured the whole space: the remaining terms of the `auc`
//! are those of its best, as if it had gone on (so a budget beyond the
//! space costs nothing). Failed configurations count as evaluations. The
//! summary's quantiles treat an unreached seed as +∞; they
//! interpolate linearly between order statistics (numpy's default) and are
//! `None` when an unreached seed takes part. The median also comes with a
//! distribution-free 95% confidence interval ([`median_interval`]): on
//! spaces where the seeds split into fast and slow groups, the median of 50
//! seeds moves a lot from one set of seeds to another. Fewer than six seeds
//! have no such interval.

use crate::replay::Replay;
use crate::session::{Budget, Session};
use crate::strategy::Strategy;

/// "Within 5%": the tolerance on the optimum that counts as found.
pub const TOLERANCE: f64 = 1.05;

/// One seed's result.
#[derive(Clone, Debug, PartialEq)]
pub struct SeedScore {
    pub evals: Option<usize>,
    pub auc: f64,
}

/// The result over all seeds.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub seeds: u64,
    pub budget: usize,
    pub evals: Vec<Option<usize>>,
    pub median: Option<f64>,
    /// A 95% confidence interval of the median ([`median_interval`]);
    /// `None` for fewer than six seeds.
    pub median_interval: Option<(Option<f64>, Option<f64>)>,
    pub q1: Option<f64>,
    pub q3: Option<f64>,
    pub success_fraction: f64,
    pub auc: f64,
}

/// Runs `strategy` once per seed `0..seeds` with `budget` evaluations.
/// `None` when the space has no successful measurement.
pub fn score(
    replay: &Replay,
    strategy: &dyn Strategy,
    seeds: u64,
    budget: usize,
) -> Option<Summary> {
    let optimum = replay.optimum()?;
    let per_seed: Vec<SeedScore> = (0..seeds)
        .map(|seed| score_seed(replay, strategy, seed, budget, optimum))
        .collect();
    Some(summarise(&per_seed, seeds, budget))
}

fn score_seed(
    replay: &Replay,
    strategy: &dyn Strategy,
    seed: u64,
    budget: usize,
    optimum: f64,
) -> SeedScore {
    let mut measurer = replay;
    let mut session = Session::new(
        replay.space(),
        &mut measurer,
        Budget {
            stop_at: Some(optimum),
            ..Budget::evaluations(budget)
        },
    );
    strategy.run(&mut session, seed);
    let history = session.into_history();
    let mut evals = None;
    let mut best = f64::INFINITY;
    let mut sum = 0.0;
    for (i, evaluation) in history.iter().enumerate() {
        if let Ok(m) = &evaluation.outcome {
            best = best.min(m.time);
            if evals.is_none() && m.time <= TOLERANCE * optimum {
                evals = Some(i + 1);
            }
        }
        if best.is_finite() {
            sum += optimum / best;
        }
    }
    if best.is_finite() {
        sum += (budget - history.len()) as f64 * (optimum / best);
    }
    SeedScore {
        evals,
        auc: if budget == 0 {
            0.0
        } else {
            sum / budget as f64
        },
    }
}

fn summarise(per_seed: &[SeedScore], seeds: u64, budget: usize) -> Summary {
    let evals: Vec<Option<usize>> = per_seed.iter().map(|s| s.evals).collect();
    let mut sorted: Vec<f64> = evals
        .iter()
        .map(|e| e.map_or(f64::INFINITY, |v| v as f64))
        .collect();
    sorted.sort_by(f64::total_cmp);
    let n = per_seed.len();
    Summary {
        seeds,
        budget,
        median: quantile(&sorted, 0.5),
        median_interval: median_interval(&sorted),
        q1: quantile(&sorted, 0.25),
        q3: quantile(&sorted, 0.75),
        success_fraction: if n == 0 {
            0.0
        } else {
            evals.iter().filter(|e| e.is_some()).count() as f64 / n as f64
        },
        auc: if n == 0 {
            0.0
        } else {
            per_seed.iter().map(|s| s.auc).sum::<f64>() / n as f64
        },
        evals,
    }
}

/// A distribution-free 95% confidence interval of the median of sorted
/// values: the order statistics `j` and `k` (1-based) around the middle
/// between which a binomial(n, ½) count falls with about 95% probability
/// (normal approximation), `j = ⌊n/2 − 1.96·√n/2⌋` and `k = ⌈n/2 + 1 +
/// 1.96·√n/2⌉`, clamped to the values; an end on an infinite value (an
/// unreached seed) is `None`. The strategy benchmark's `table.py` uses the
/// same rule. `None` for fewer than [`MIN_INTERVAL_VALUES`] values, which
/// no interval of them covers with 95% probability.
pub fn median_interval(sorted: &[f64]) -> Option<(Option<f64>, Option<f64>)> {
    if sorted.len() < MIN_INTERVAL_VALUES {
        return None;
    }
    let n = sorted.len() as f64;
    let half_width = 1.96 * n.sqrt() / 2.0;
    let j = ((n / 2.0 - half_width).floor() as usize).clamp(1, sorted.len());
    let k = ((n / 2.0 + 1.0 + half_width).ceil() as usize).clamp(1, sorted.len());
    let finite = |v: f64| v.is_finite().then_some(v);
    Some((finite(sorted[j - 1]), finite(sorted[k - 1])))
}

/// The fewest values with a 95% interval of their median: even the widest,
/// from the least to the greatest of `n` values, misses it with
/// probability `2 · 2⁻ⁿ`, above 5% for five values (6.25%).
pub const MIN_INTERVAL_VALUES: usize = 6;

/// The `q`-quantile of sorted values by linear interpolation; `None` when it
/// involves an infinite value (or there are no values).
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let h = (sorted.len() - 1) as f64 * q;
    let lo = h.floor() as usize;
    let frac = h - lo as f64;
    let value = if frac == 0.0 {
        sorted[lo]
    } else {
        sorted[lo] + frac * (sorted[lo + 1] - sorted[lo])
    };
    value.is_finite().then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_and_refuse_infinity() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&v, 0.5), Some(2.5));
        assert_eq!(quantile(&v, 0.25), Some(1.75));
        assert_eq!(quantile(&[1.0, 2.0, f64::INFINITY], 0.5), Some(2.0));
        assert_eq!(quantile(&[1.0, 2.0, f64::INFINITY], 0.75), None);
    }

    #[test]
    fn the_median_interval_is_order_statistics_around_the_middle() {
        // 50 values 1..=50: j = ⌊25 − 6.93⌋ = 18, k = ⌈26 + 6.93⌉ = 33.
        let fifty: Vec<f64> = (1..=50).map(f64::from).collect();
        assert_eq!(median_interval(&fifty), Some((Some(18.0), Some(33.0))));
        let mut unreached = fifty.clone();
        unreached[32..].fill(f64::INFINITY);
        assert_eq!(median_interval(&unreached), Some((Some(18.0), None)));
        assert_eq!(median_interval(&[7.0]), None);
        assert_eq!(median_interval(&[]), None);
        assert_eq!(quantile(&[], 0.5), None);
    }

    /// The chance that the median of `n` values lies between the `j`-th
    /// and `k`-th of them (1-based): a binomial(n, ½) count in `j..k`.
    fn coverage(n: usize, j: usize, k: usize) -> f64 {
        let mut ln_p = -(n as f64) * std::f64::consts::LN_2;
        let mut total = 0.0;
        for i in 0..k {
            if i >= j {
                total += ln_p.exp();
            }
            ln_p += ((n - i) as f64 / (i + 1) as f64).ln();
        }
        total
    }

    #[test]
    fn the_median_interval_covers_the_median_with_95_percent_probability() {
        for n in 1..=400 {
            let values: Vec<f64> = (1..=n).map(|v| v as f64).collect();
            match median_interval(&values) {
                Some((Some(low), Some(high))) => {
                    let p = coverage(n, low as usize, high as usize);
                    assert!(p >= 0.95, "{n} values: {p}");
                }
                Some(other) => panic!("{n} finite values: {other:?}"),
                None => {
                    assert!(n < MIN_INTERVAL_VALUES);
                    assert!(coverage(n, 1, n) < 0.95, "{n} values");
                }
            }
        }
    }

    #[test]
    fn a_budget_beyond_the_space_costs_nothing_and_scores_the_best() {
        let json: serde_json::Value = serde_json::from_str(
            r#"{"tune_params_keys": ["b"], "tune_params": {"b": [1, 2]},
                "cache": {"1": {"b": 1, "time": 2.0}, "2": {"b": 2, "time": "InvalidConfig"}}}"#,
        )
        .expect("json");
        let replay = Replay::from_json(&json).expect("a space");
        // Each seed measures the optimum first or second (after the failed
        // point, whose term is 0); every term from the optimum on is 1.
        let budget = usize::MAX / 2;
        let s = score(&replay, &crate::strategy::Random, 8, budget).expect("an optimum");
        assert_eq!(s.success_fraction, 1.0);
        assert!(s.evals.iter().all(|e| matches!(e, Some(1 | 2))));
        assert!(s.auc >= 1.0 - 2.0 / budget as f64, "{}", s.auc);
    }

    #[test]
    fn summary_counts_unreached_seeds() {
        let seeds = [
            SeedScore {
                evals: Some(3),
                auc: 0.5,
            },
            SeedScore {
                evals: None,
                auc: 0.1,
            },
            SeedScore {
                evals: Some(1),
                auc: 0.9,
            },
        ];
        let s = summarise(&seeds, 3, 10);
        assert_eq!(s.evals, vec![Some(3), None, Some(1)]);
        assert_eq!(s.median, Some(3.0));
        assert_eq!(s.q3, None);
        assert_eq!(s.q1, Some(2.0));
        assert!((s.success_fraction - 2.0 / 3.0).abs() < 1e-12);
        assert!((s.auc - 0.5).abs() < 1e-12);
    }
}

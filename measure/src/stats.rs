//! Order statistics of timed runs, and the rank correlation tools use to
//! compare a model's estimates with measured times.

/// The `q`-quantile (0 ≤ q ≤ 1) of sorted values, interpolating linearly
/// between neighbours; `NaN` for no values.
pub(crate) fn quantile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        n => {
            let at = q.clamp(0.0, 1.0) * (n - 1) as f64;
            let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
            sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo as f64)
        }
    }
}

/// The distribution-free 95% confidence interval of the median of sorted
/// values: the order statistics at ranks `n/2 ∓ 1.96·√n/2` (the normal
/// approximation of the binomial). `None` below 6 values, where the
/// interval is the whole range.
pub(crate) fn median_interval(sorted: &[f64]) -> Option<(f64, f64)> {
    let n = sorted.len();
    if n < 6 {
        return None;
    }
    let half = 1.96 * (n as f64).sqrt() / 2.0;
    let middle = n as f64 / 2.0;
    let lo = (middle - half).floor().max(0.0) as usize;
    let hi = ((middle + half).ceil() as usize).min(n - 1);
    Some((sorted[lo], sorted[hi]))
}

/// Whether the median's confidence interval lies within `fraction` of the
/// median on both sides.
pub(crate) fn converged(sorted: &[f64], fraction: f64) -> bool {
    let median = quantile(sorted, 0.5);
    median_interval(sorted).is_some_and(|(lo, hi)| {
        median - lo <= fraction * median && hi - median <= fraction * median
    })
}

/// Whether runs in the order they were timed slowed down: the median of the
/// last quarter exceeds the first quarter's by more than 5%. Needs 8 runs.
pub(crate) fn slowed_down(in_order: &[f64]) -> bool {
    let quarter = in_order.len() / 4;
    if quarter < 2 {
        return false;
    }
    let median_of = |runs: &[f64]| {
        let mut runs = runs.to_vec();
        runs.sort_by(f64::total_cmp);
        quantile(&runs, 0.5)
    };
    let first = median_of(&in_order[..quarter]);
    let last = median_of(&in_order[in_order.len() - quarter..]);
    last > 1.05 * first
}

/// Spearman's rank correlation of the pairs; `None` for fewer than three
/// or when either side is constant.
pub fn spearman(pairs: &[(f64, f64)]) -> Option<f64> {
    if pairs.len() < 3 {
        return None;
    }
    let xs = ranks(pairs.iter().map(|p| p.0));
    let ys = ranks(pairs.iter().map(|p| p.1));
    let n = xs.len() as f64;
    let mean = (n + 1.0) / 2.0;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (x, y) in xs.iter().zip(&ys) {
        sxy += (x - mean) * (y - mean);
        sxx += (x - mean).powi(2);
        syy += (y - mean).powi(2);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

/// Ranks from 1, ties sharing their mean rank.
fn ranks(values: impl Iterator<Item = f64>) -> Vec<f64> {
    let values: Vec<f64> = values.collect();
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mut ranks = vec![0.0; values.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && values[order[j + 1]] == values[order[i]] {
            j += 1;
        }
        let rank = (i + j) as f64 / 2.0 + 1.0;
        for &k in &order[i..=j] {
            ranks[k] = rank;
        }
        i = j + 1;
    }
    ranks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&v, 0.5), 2.5);
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&v, 1.0), 4.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn the_interval_narrows_with_tight_runs() {
        let tight: Vec<f64> = (0..100).map(|i| 100.0 + f64::from(i) * 0.01).collect();
        assert!(converged(&tight, 0.02));
        let wide: Vec<f64> = (0..100).map(|i| 100.0 + f64::from(i) * 2.0).collect();
        assert!(!converged(&wide, 0.02));
        assert!(!converged(&tight[..5], 0.02));
        let (lo, hi) = median_interval(&tight).expect("enough runs");
        assert!(lo < quantile(&tight, 0.5) && quantile(&tight, 0.5) < hi);
    }

    #[test]
    fn a_slowdown_is_flagged_and_noise_is_not() {
        let steady: Vec<f64> = (0..40).map(|i| 10.0 + f64::from(i % 3) * 0.1).collect();
        assert!(!slowed_down(&steady));
        let throttled: Vec<f64> = (0..40).map(|i| 10.0 + f64::from(i) * 0.1).collect();
        assert!(slowed_down(&throttled));
    }

    #[test]
    fn rank_correlation_is_one_for_the_same_order_and_minus_one_reversed() {
        let same = [(1.0, 10.0), (2.0, 20.0), (3.0, 35.0), (4.0, 36.0)];
        assert!((spearman(&same).unwrap() - 1.0).abs() < 1e-12);
        let reversed: Vec<(f64, f64)> = same.iter().map(|&(x, y)| (-x, y)).collect();
        assert!((spearman(&reversed).unwrap() + 1.0).abs() < 1e-12);
        assert_eq!(spearman(&same[..2]), None);
        assert_eq!(spearman(&[(1.0, 1.0), (1.0, 2.0), (1.0, 3.0)]), None);
        let swapped = [(1.0, 1.0), (2.0, 3.0), (3.0, 2.0), (4.0, 4.0)];
        assert!((spearman(&swapped).unwrap() - 0.8).abs() < 1e-12);
    }

    #[test]
    fn ties_share_their_mean_rank() {
        assert_eq!(
            ranks([3.0, 1.0, 3.0, 2.0].into_iter()),
            vec![3.5, 1.0, 3.5, 2.0]
        );
    }
}

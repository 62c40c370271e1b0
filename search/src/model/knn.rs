//! The built-in cost model: k nearest neighbours.

use super::CostModel;

/// Predicts a row's cost as the inverse-distance-weighted mean cost of its
/// `k` nearest training rows, with every feature scaled to [0, 1] by the
/// training rows' range (so a knob with large values does not dominate the
/// distance). A row that coincides with a training row gets its cost.
#[derive(Clone, Debug)]
pub struct Knn {
    k: usize,
    rows: Vec<Vec<f32>>,
    costs: Vec<f64>,
    low: Vec<f32>,
    scale: Vec<f32>,
}

impl Knn {
    pub fn new(k: usize) -> Self {
        Knn {
            k: k.max(1),
            rows: Vec::new(),
            costs: Vec::new(),
            low: Vec::new(),
            scale: Vec::new(),
        }
    }

    fn normalise(&self, row: &[f32]) -> Vec<f32> {
        row.iter()
            .zip(self.low.iter().zip(&self.scale))
            .map(|(x, (low, scale))| (x - low) * scale)
            .collect()
    }
}

impl Default for Knn {
    fn default() -> Self {
        Knn::new(5)
    }
}

impl CostModel for Knn {
    fn fit(&mut self, rows: &[Vec<f32>], costs: &[f64]) {
        let dim = rows.first().map_or(0, Vec::len);
        self.low = vec![f32::INFINITY; dim];
        let mut high = vec![f32::NEG_INFINITY; dim];
        for row in rows {
            for (j, &x) in row.iter().enumerate() {
                self.low[j] = self.low[j].min(x);
                high[j] = high[j].max(x);
            }
        }
        self.scale = self
            .low
            .iter()
            .zip(&high)
            .map(|(l, h)| if h > l { 1.0 / (h - l) } else { 0.0 })
            .collect();
        self.rows = rows.iter().map(|r| self.normalise(r)).collect();
        self.costs = costs.to_vec();
    }

    fn predict(&self, rows: &[Vec<f32>]) -> Vec<f64> {
        if self.rows.is_empty() {
            return vec![0.0; rows.len()];
        }
        let k = self.k.min(self.rows.len());
        let mut nearest: Vec<(f32, usize)> = Vec::with_capacity(self.rows.len());
        rows.iter()
            .map(|row| {
                let x = self.normalise(row);
                nearest.clear();
                nearest.extend(self.rows.iter().enumerate().map(|(i, t)| {
                    let d: f32 = t.iter().zip(&x).map(|(a, b)| (a - b) * (a - b)).sum();
                    (d, i)
                }));
                nearest.select_nth_unstable_by(k - 1, |a, b| a.0.total_cmp(&b.0));
                let mut weight = 0.0;
                let mut sum = 0.0;
                for &(d, i) in &nearest[..k] {
                    if d == 0.0 {
                        return self.costs[i];
                    }
                    let w = 1.0 / f64::from(d).sqrt();
                    weight += w;
                    sum += w * self.costs[i];
                }
                sum / weight
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_by_nearby_costs() {
        let mut m = Knn::new(2);
        let rows = vec![
            vec![0.0, 0.0],
            vec![1.0, 0.0],
            vec![0.0, 10.0],
            vec![1.0, 10.0],
        ];
        m.fit(&rows, &[1.0, 1.0, 5.0, 5.0]);
        let p = m.predict(&[vec![0.5, 1.0], vec![0.5, 9.0], vec![1.0, 10.0]]);
        assert!(p[0] < p[1]);
        assert_eq!(p[2], 5.0);
    }
}

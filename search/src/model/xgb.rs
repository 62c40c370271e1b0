//! The cost model as gradient-boosted trees (XGBoost).

use std::collections::HashMap;

use xgboost_rs::{Booster, DMatrix};

use super::CostModel;

/// What the trees are trained to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XgbObjective {
    /// `rank:pairwise`: order every pair of measured points correctly.
    RankPairwise,
    /// `reg:squarederror` on the cost (the log of the time).
    Regression,
}

/// Gradient-boosted trees retrained from scratch at every `fit`.
///
/// When XGBoost reports an error the model forgets what it had learnt (every
/// row scores the same, so the search goes on unguided) and keeps the
/// message for [`XgbModel::last_error`].
pub struct XgbModel {
    objective: XgbObjective,
    rounds: u32,
    seed: u64,
    booster: Option<Booster>,
    last_error: Option<String>,
}

impl std::fmt::Debug for XgbModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XgbModel")
            .field("objective", &self.objective)
            .field("rounds", &self.rounds)
            .field("trained", &self.booster.is_some())
            .field("last_error", &self.last_error)
            .finish()
    }
}

impl XgbModel {
    pub fn new(objective: XgbObjective, seed: u64) -> Self {
        XgbModel {
            objective,
            rounds: 40,
            seed,
            booster: None,
            last_error: None,
        }
    }

    /// The last error XGBoost reported, if any.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    fn train(&self, rows: &[Vec<f32>], costs: &[f64]) -> Result<Booster, String> {
        let mut dtrain = matrix(rows)?;
        let labels: Vec<f32> = match self.objective {
            // Relevance: higher is better.
            XgbObjective::RankPairwise => {
                let worst = costs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                costs.iter().map(|c| (worst - c) as f32).collect()
            }
            XgbObjective::Regression => costs.iter().map(|&c| c as f32).collect(),
        };
        dtrain.set_labels(&labels).map_err(|e| e.to_string())?;
        if self.objective == XgbObjective::RankPairwise {
            dtrain
                .set_group(&[rows.len() as u32])
                .map_err(|e| e.to_string())?;
        }
        let objective = match self.objective {
            XgbObjective::RankPairwise => "rank:pairwise",
            XgbObjective::Regression => "reg:squarederror",
        };
        let config: HashMap<String, String> = [
            ("objective", objective.to_string()),
            ("eta", "0.3".to_string()),
            ("max_depth", "6".to_string()),
            ("min_child_weight", "1".to_string()),
            ("subsample", "1".to_string()),
            ("nthread", "1".to_string()),
            ("verbosity", "0".to_string()),
            ("seed", self.seed.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let mut booster =
            Booster::new_with_json_config(&[&dtrain], config).map_err(|e| e.to_string())?;
        for i in 0..self.rounds {
            booster
                .update(&dtrain, i as i32)
                .map_err(|e| e.to_string())?;
        }
        Ok(booster)
    }
}

/// A dense matrix given as CSR with every entry stored, so that zeros are
/// values and not "missing".
fn matrix(rows: &[Vec<f32>]) -> Result<DMatrix, String> {
    let cols = rows.first().map_or(0, Vec::len);
    let mut indptr = Vec::with_capacity(rows.len() + 1);
    let mut indices = Vec::with_capacity(rows.len() * cols);
    let mut data = Vec::with_capacity(rows.len() * cols);
    indptr.push(0);
    for row in rows {
        indices.extend(0..row.len());
        data.extend_from_slice(row);
        indptr.push(data.len());
    }
    DMatrix::from_csr(&indptr, &indices, &data, Some(cols)).map_err(|e| e.to_string())
}

impl CostModel for XgbModel {
    fn fit(&mut self, rows: &[Vec<f32>], costs: &[f64]) {
        self.booster = None;
        if rows.len() < 2 {
            return;
        }
        match self.train(rows, costs) {
            Ok(b) => {
                self.booster = Some(b);
                self.last_error = None;
            }
            Err(e) => self.last_error = Some(e),
        }
    }

    fn predict(&self, rows: &[Vec<f32>]) -> Vec<f64> {
        let Some(booster) = &self.booster else {
            return vec![0.0; rows.len()];
        };
        if rows.is_empty() {
            return Vec::new();
        }
        let scores = matrix(rows).and_then(|m| booster.predict(&m).map_err(|e| e.to_string()));
        match (scores, self.objective) {
            (Ok(s), XgbObjective::RankPairwise) => s.iter().map(|&x| -f64::from(x)).collect(),
            (Ok(s), XgbObjective::Regression) => s.iter().map(|&x| f64::from(x)).collect(),
            (Err(_), _) => vec![0.0; rows.len()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_objectives_rank_a_monotone_cost() {
        let rows: Vec<Vec<f32>> = (0..40).map(|i| vec![i as f32, (i % 3) as f32]).collect();
        let costs: Vec<f64> = (0..40).map(|i| f64::from(i) * 0.1).collect();
        for objective in [XgbObjective::RankPairwise, XgbObjective::Regression] {
            let mut m = XgbModel::new(objective, 1);
            m.fit(&rows, &costs);
            assert_eq!(m.last_error(), None);
            let p = m.predict(&[vec![2.0, 2.0], vec![35.0, 2.0]]);
            assert!(p[0] < p[1], "{objective:?}: {p:?}");
        }
    }
}

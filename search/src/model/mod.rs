//! Cost models: learn from the points measured so far which unmeasured
//! points look fast, so the search measures those first.
//!
//! A model sees a point as a feature vector ([`Features`]) and is trained on
//! the logarithm of the measured time (rejected points are labelled as worse
//! than anything measured, so the model learns to avoid them too). It only
//! has to rank well, not predict times: [`CostModel::predict`] returns a
//! score where lower means "expected faster".
//!
//! Two implementations: [`Knn`] (always built: k nearest neighbours on
//! normalised features, cheap and dependency-free) and, with the `xgboost`
//! feature, `XgbModel` (gradient-boosted trees).

mod knn;
#[cfg(feature = "xgboost")]
mod xgb;

use std::fmt;
use std::sync::Arc;

pub use knn::Knn;
#[cfg(feature = "xgboost")]
pub use xgb::{XgbModel, XgbObjective};

use crate::space::{Point, Space};

/// A learned ranking of points.
pub trait CostModel {
    /// Retrains from scratch on these rows (`costs[i]` is the cost of
    /// `rows[i]`, lower is better).
    fn fit(&mut self, rows: &[Vec<f32>], costs: &[f64]);

    /// A score per row: lower means expected faster. Before the first `fit`,
    /// every row scores the same.
    fn predict(&self, rows: &[Vec<f32>]) -> Vec<f64>;
}

/// Derived features of a point (occupancy, arithmetic intensity...), added
/// after the knob features.
pub type Derived = Arc<dyn Fn(&Space, &Point, &mut Vec<f32>) + Send + Sync>;

/// How points become feature vectors: each knob's value (its base-2
/// logarithm for knobs whose values are all positive numbers, the number
/// itself for other numeric knobs, one-hot for string knobs with at most
/// [`ONE_HOT_MAX`] values, the value's index otherwise), then the derived
/// features if any.
///
/// A knob of positive integers that are not all powers of two also gives
/// the base-2 logarithm of its value's odd factor (0 for a power of two,
/// log2 3 for 48 or 96). GPU kernels are often fastest where sizes divide
/// evenly into warps, banks and the problem's dimensions, and a tree
/// cannot single out 32, 64, 128 and 256 among 16, 32, 48, ... 256 by
/// thresholds on the logarithm alone; on the recorded convolution spaces
/// the fastest block widths are exactly the powers of two.
#[derive(Clone, Default)]
pub struct Features {
    derived: Option<Derived>,
}

/// The most values a string knob may have to be one-hot encoded.
pub const ONE_HOT_MAX: usize = 8;

impl fmt::Debug for Features {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Features")
            .field("derived", &self.derived.is_some())
            .finish()
    }
}

impl Features {
    /// Knob features only.
    pub fn knobs() -> Self {
        Features::default()
    }

    /// Knob features followed by what `derived` appends.
    pub fn with_derived(derived: Derived) -> Self {
        Features {
            derived: Some(derived),
        }
    }

    /// The feature vector of a point.
    pub fn of(&self, space: &Space, point: &Point) -> Vec<f32> {
        let mut out = Vec::with_capacity(space.knobs().len());
        for (k, knob) in space.knobs().iter().enumerate() {
            let index = point.0[k] as usize;
            if knob.is_numeric() {
                let positive = knob
                    .values
                    .iter()
                    .all(|v| v.as_f64().is_some_and(|x| x > 0.0));
                let x = knob.values[index].as_f64().unwrap_or(0.0);
                out.push(if positive { x.log2() } else { x } as f32);
                if let Some(odd) = knob.odd_factor(index) {
                    out.push((odd as f64).log2() as f32);
                }
            } else if knob.values.len() <= ONE_HOT_MAX {
                out.extend((0..knob.values.len()).map(|i| if i == index { 1.0 } else { 0.0 }));
            } else {
                out.push(index as f32);
            }
        }
        if let Some(derived) = &self.derived {
            derived(space, point, &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::{Knob, Value};

    #[test]
    fn encodes_numeric_and_string_knobs() {
        let space = Space::new(vec![
            Knob::ints("block", &[32, 64, 128]),
            Knob::ints("unroll", &[0, 1]),
            Knob::new(
                "layout",
                vec![Value::Str("row".into()), Value::Str("col".into())],
            ),
        ]);
        let derived: Derived = Arc::new(|s: &Space, p: &Point, out: &mut Vec<f32>| {
            out.push(s.value(p, 0).as_f64().unwrap_or(0.0) as f32 / 32.0);
        });
        let f = Features::with_derived(derived);
        let v = f.of(&space, &Point(vec![2, 1, 1]));
        assert_eq!(v, vec![7.0, 1.0, 0.0, 1.0, 4.0]);
        assert_eq!(
            Features::knobs().of(&space, &Point(vec![0, 0, 0])),
            vec![5.0, 0.0, 1.0, 0.0]
        );
    }

    #[test]
    fn integer_knobs_beside_powers_of_two_also_give_their_odd_factor() {
        let space = Space::new(vec![
            Knob::ints("block_x", &[16, 32, 48, 96]),
            Knob::ints("tile", &[1, 2, 4]),
            Knob::ints("offset", &[0, 3]),
        ]);
        let f = Features::knobs();
        assert_eq!(
            f.of(&space, &Point(vec![1, 2, 1])),
            vec![5.0, 0.0, 2.0, 3.0]
        );
        let v = f.of(&space, &Point(vec![3, 0, 0]));
        assert_eq!(v.len(), 4);
        assert_eq!(v[0], 96f32.log2());
        assert_eq!(v[1], 3f32.log2());
        assert_eq!(v[2..], [0.0, 0.0]);
    }
}

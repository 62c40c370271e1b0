//! A generic schedule space: named knobs with ordered values, and which
//! combinations are valid.
//!
//! A [`Point`] holds one value index per knob. Validity comes from one of two
//! sources: a predicate over the point (ktune's own spaces, whose constraints
//! are code), or a list of the valid points (replayed spaces, where the points
//! that were measured are exactly the valid ones). Every listing this module
//! returns is in one deterministic order: lexicographic over the indices.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use rand::Rng;

/// One value a knob can take.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Int(i64),
    Float(f64),
    Str(String),
}

impl Value {
    /// The value as a number, for numeric knobs.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(v) => Some(*v as f64),
            Value::Float(v) => Some(*v),
            Value::Str(_) => None,
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int(v) => write!(f, "{v}"),
            Value::Float(v) => write!(f, "{v}"),
            Value::Str(v) => f.write_str(v),
        }
    }
}

/// A named knob and its values, in their natural order (the order that
/// "adjacent" refers to).
#[derive(Clone, Debug, PartialEq)]
pub struct Knob {
    pub name: String,
    pub values: Vec<Value>,
    /// Whether the values count a thread block's threads (along one
    /// dimension): sizes with more factors of two fill whole warps, and
    /// the initial design favours them.
    pub threads: bool,
}

impl Knob {
    pub fn new(name: impl Into<String>, values: Vec<Value>) -> Self {
        Knob {
            name: name.into(),
            values,
            threads: false,
        }
    }

    /// The knob, marked as counting a thread block's threads.
    pub fn counting_threads(self) -> Self {
        Knob {
            threads: true,
            ..self
        }
    }

    /// A knob whose values are integers.
    pub fn ints(name: impl Into<String>, values: &[i64]) -> Self {
        Knob::new(name, values.iter().map(|&v| Value::Int(v)).collect())
    }

    /// The odd factor of the value at `index`, for a knob whose values are
    /// all positive integers and not all powers of two.
    pub fn odd_factor(&self, index: usize) -> Option<i64> {
        let positive = |v: &Value| match *v {
            Value::Int(i) if i > 0 => Some(i),
            _ => None,
        };
        let mut all_powers = true;
        for v in &self.values {
            all_powers &= positive(v)?.count_ones() == 1;
        }
        let v = positive(&self.values[index])?;
        (!all_powers).then(|| v >> v.trailing_zeros())
    }

    /// Whether every value is a number.
    pub fn is_numeric(&self) -> bool {
        self.values.iter().all(|v| v.as_f64().is_some())
    }
}

/// A point of a space: one value index per knob.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Point(pub Vec<u32>);

impl Point {
    pub fn indices(&self) -> &[u32] {
        &self.0
    }
}

/// Which points a neighbourhood holds: those that differ from the centre in
/// exactly one knob, by one step in its value order ([`Adjacent`]) or to any
/// other value ([`Any`]).
///
/// [`Adjacent`]: Neighbourhood::Adjacent
/// [`Any`]: Neighbourhood::Any
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Neighbourhood {
    Adjacent,
    Any,
}

/// The predicate form of a space's constraints.
pub type Predicate = Arc<dyn Fn(&Space, &Point) -> bool + Send + Sync>;

#[derive(Clone)]
enum Validity {
    All,
    Predicate(Predicate),
    /// Sorted, and as a set for lookups.
    Listed(Arc<(Vec<Point>, HashSet<Point>)>),
}

/// How many draws [`Space::random_valid`] makes before it falls back to
/// listing the valid points.
const REJECTION_TRIES: usize = 1000;

/// Knobs plus validity.
#[derive(Clone)]
pub struct Space {
    knobs: Vec<Knob>,
    validity: Validity,
}

impl fmt::Debug for Space {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let validity = match &self.validity {
            Validity::All => "all".to_string(),
            Validity::Predicate(_) => "predicate".to_string(),
            Validity::Listed(list) => format!("{} listed", list.0.len()),
        };
        f.debug_struct("Space")
            .field("knobs", &self.knobs)
            .field("validity", &validity)
            .finish()
    }
}

impl Space {
    /// A space where every combination of values is valid.
    pub fn new(knobs: Vec<Knob>) -> Self {
        Space {
            knobs,
            validity: Validity::All,
        }
    }

    /// A space whose valid points are those the predicate accepts.
    pub fn with_constraint(
        knobs: Vec<Knob>,
        valid: impl Fn(&Space, &Point) -> bool + Send + Sync + 'static,
    ) -> Self {
        Space {
            knobs,
            validity: Validity::Predicate(Arc::new(valid)),
        }
    }

    /// A space whose valid points are exactly `points` (duplicates and
    /// points out of range are dropped).
    pub fn listed(knobs: Vec<Knob>, points: impl IntoIterator<Item = Point>) -> Self {
        let bare = Space::new(knobs);
        let mut list: Vec<Point> = points.into_iter().filter(|p| bare.in_range(p)).collect();
        list.sort();
        list.dedup();
        let set = list.iter().cloned().collect();
        Space {
            knobs: bare.knobs,
            validity: Validity::Listed(Arc::new((list, set))),
        }
    }

    pub fn knobs(&self) -> &[Knob] {
        &self.knobs
    }

    /// The index of the knob with this name.
    pub fn knob_index(&self, name: &str) -> Option<usize> {
        self.knobs.iter().position(|k| k.name == name)
    }

    /// The point of this space whose knobs, matched by name, have the
    /// values that `point` has in `other` (another recording of the same
    /// kernel, on another GPU). The error names the first knob or value
    /// that one of the two spaces lacks; validity is not checked.
    pub fn translate(&self, other: &Space, point: &Point) -> Result<Point, String> {
        if let Some(extra) = other
            .knobs
            .iter()
            .find(|k| self.knob_index(&k.name).is_none())
        {
            return Err(format!(
                "`{}` is a knob of the other space only",
                extra.name
            ));
        }
        self.knobs
            .iter()
            .map(|knob| {
                let there = other
                    .knob_index(&knob.name)
                    .ok_or_else(|| format!("`{}` is a knob of this space only", knob.name))?;
                let value = other.value(point, there);
                knob.values
                    .iter()
                    .position(|v| v == value)
                    .map(|i| i as u32)
                    .ok_or_else(|| {
                        format!(
                            "`{}` = {value} is not one of this space's values",
                            knob.name
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Point)
    }

    /// The value of knob `knob` at `point`.
    pub fn value(&self, point: &Point, knob: usize) -> &Value {
        &self.knobs[knob].values[point.0[knob] as usize]
    }

    /// The number of combinations, valid or not (saturating).
    pub fn cardinality(&self) -> u64 {
        self.knobs
            .iter()
            .fold(1u64, |n, k| n.saturating_mul(k.values.len() as u64))
    }

    fn in_range(&self, point: &Point) -> bool {
        point.0.len() == self.knobs.len()
            && point
                .0
                .iter()
                .zip(&self.knobs)
                .all(|(&i, k)| (i as usize) < k.values.len())
    }

    /// Whether the point is in range and satisfies the constraints.
    pub fn is_valid(&self, point: &Point) -> bool {
        self.in_range(point)
            && match &self.validity {
                Validity::All => true,
                Validity::Predicate(valid) => valid(self, point),
                Validity::Listed(list) => list.1.contains(point),
            }
    }

    /// The valid points, in lexicographic order of their indices.
    pub fn valid_points(&self) -> Vec<Point> {
        if let Validity::Listed(list) = &self.validity {
            return list.0.clone();
        }
        let mut out = Vec::new();
        if self.knobs.iter().any(|k| k.values.is_empty()) {
            return out;
        }
        let mut current = Point(vec![0; self.knobs.len()]);
        loop {
            if self.is_valid(&current) {
                out.push(current.clone());
            }
            // Odometer increment, last knob fastest.
            let mut knob = self.knobs.len();
            loop {
                if knob == 0 {
                    return out;
                }
                knob -= 1;
                current.0[knob] += 1;
                if (current.0[knob] as usize) < self.knobs[knob].values.len() {
                    break;
                }
                current.0[knob] = 0;
            }
        }
    }

    /// The valid points, as [`Space::valid_points`], when that takes at most
    /// `limit` validity checks (always for a listed space); `None` otherwise.
    pub fn enumerate_within(&self, limit: u64) -> Option<Vec<Point>> {
        let listed = matches!(self.validity, Validity::Listed(_));
        (listed || self.cardinality() <= limit).then(|| self.valid_points())
    }

    /// A uniformly random point, valid or not.
    pub fn random_point(&self, rng: &mut impl Rng) -> Point {
        Point(
            self.knobs
                .iter()
                .map(|k| rng.random_range(0..k.values.len() as u32))
                .collect(),
        )
    }

    /// A uniformly random valid point, or `None` when the space has none.
    ///
    /// Listed spaces draw from the list; others draw combinations until one
    /// is valid and, after many failures, draw from the enumerated points.
    pub fn random_valid(&self, rng: &mut impl Rng) -> Option<Point> {
        if self.knobs.iter().any(|k| k.values.is_empty()) {
            return None;
        }
        if let Validity::Listed(list) = &self.validity {
            if list.0.is_empty() {
                return None;
            }
            return Some(list.0[rng.random_range(0..list.0.len())].clone());
        }
        for _ in 0..REJECTION_TRIES {
            let p = self.random_point(rng);
            if self.is_valid(&p) {
                return Some(p);
            }
        }
        let all = self.valid_points();
        if all.is_empty() {
            None
        } else {
            Some(all[rng.random_range(0..all.len())].clone())
        }
    }

    /// The valid points that differ from `point` in exactly one knob, in
    /// deterministic order (knob by knob, values ascending).
    pub fn neighbours(&self, point: &Point, kind: Neighbourhood) -> Vec<Point> {
        let mut out = Vec::new();
        for knob in 0..self.knobs.len() {
            for candidate in self.knob_neighbours(point, knob, kind) {
                out.push(candidate);
            }
        }
        out
    }

    /// The valid points that differ from `point` only in knob `knob`.
    pub fn knob_neighbours(&self, point: &Point, knob: usize, kind: Neighbourhood) -> Vec<Point> {
        let n = self.knobs[knob].values.len() as u32;
        let here = point.0[knob];
        let indices: Vec<u32> = match kind {
            Neighbourhood::Adjacent => [here.checked_sub(1), Some(here + 1)]
                .into_iter()
                .flatten()
                .filter(|&i| i < n)
                .collect(),
            Neighbourhood::Any => (0..n).filter(|&i| i != here).collect(),
        };
        indices
            .into_iter()
            .map(|i| {
                let mut p = point.clone();
                p.0[knob] = i;
                p
            })
            .filter(|p| self.is_valid(p))
            .collect()
    }

    /// The point's values, for display: `name=value` pairs.
    pub fn describe(&self, point: &Point) -> String {
        self.knobs
            .iter()
            .enumerate()
            .map(|(i, k)| format!("{}={}", k.name, self.value(point, i)))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;

    fn small() -> Space {
        Space::with_constraint(
            vec![Knob::ints("a", &[1, 2, 4]), Knob::ints("b", &[1, 2, 4])],
            |s, p| {
                let a = s.value(p, 0).as_f64().unwrap_or(0.0);
                let b = s.value(p, 1).as_f64().unwrap_or(0.0);
                a * b <= 8.0
            },
        )
    }

    #[test]
    fn enumerates_valid_points_in_order() {
        let s = small();
        let all = s.valid_points();
        assert_eq!(all.len(), 8);
        assert!(all.windows(2).all(|w| w[0] < w[1]));
        assert!(!all.contains(&Point(vec![2, 2])));
        assert_eq!(s.cardinality(), 9);
    }

    #[test]
    fn neighbours_respect_constraints() {
        let s = small();
        let n = s.neighbours(&Point(vec![1, 2]), Neighbourhood::Adjacent);
        assert_eq!(n, vec![Point(vec![0, 2]), Point(vec![1, 1])]);
        let any = s.neighbours(&Point(vec![0, 0]), Neighbourhood::Any);
        assert_eq!(any.len(), 4);
    }

    #[test]
    fn points_translate_between_spaces_by_knob_name_and_value() {
        let here = small();
        let there = Space::new(vec![Knob::ints("b", &[4, 2]), Knob::ints("a", &[2, 8])]);
        assert_eq!(
            here.translate(&there, &Point(vec![0, 0])),
            Ok(Point(vec![1, 2]))
        );
        assert_eq!(
            here.translate(&there, &Point(vec![0, 1])),
            Err("`a` = 8 is not one of this space's values".to_string())
        );
        let wider = Space::new(vec![
            Knob::ints("a", &[1]),
            Knob::ints("b", &[1]),
            Knob::ints("c", &[1]),
        ]);
        assert_eq!(
            here.translate(&wider, &Point(vec![0, 0, 0])),
            Err("`c` is a knob of the other space only".to_string())
        );
        assert_eq!(
            wider.translate(&here, &Point(vec![0, 0])),
            Err("`c` is a knob of this space only".to_string())
        );
    }

    #[test]
    fn listed_space_draws_only_listed_points() {
        let knobs = vec![Knob::ints("a", &[1, 2, 3]), Knob::ints("b", &[1, 2])];
        let s = Space::listed(
            knobs,
            vec![Point(vec![2, 1]), Point(vec![0, 0]), Point(vec![9, 0])],
        );
        assert_eq!(s.valid_points(), vec![Point(vec![0, 0]), Point(vec![2, 1])]);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for _ in 0..20 {
            let p = s.random_valid(&mut rng).expect("non-empty");
            assert!(s.is_valid(&p));
        }
    }
}

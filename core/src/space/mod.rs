//! Schedule spaces: the points a kernel can be lowered with on a target.
//!
//! A [`Space`] is a set of named knobs, each with the values `rules`
//! derive from the kernel's IR (its extents, dtypes and op class) and the
//! target; its points are the cartesian product. A point is valid when it
//! passes every [`Constraint`] — checked by [`crate::lower::validate`]
//! before any code is emitted — and is not redundant
//! ([`Rejection::Coverage`]: a block covering more than twice the work there
//! is computes the same as a smaller one with idle threads, and grouping
//! the block rows of a one-column grid changes nothing). [`Space::survey`]
//! sorts every point into valid or rejected-by-what; [`candidates`] is the
//! valid points, in a deterministic order.

mod rules;

use std::collections::BTreeMap;
use std::ops::Range;

use crate::ir::Kernel;
use crate::lower::{Constraint, Lowering};
use crate::parallel;
use crate::schedule::{Class, MmaTiles, Schedule, Tiles};
use crate::target::SmVersion;

/// One knob: its name (a field of the [`Schedule`] variant) and the values
/// the space gives it, ascending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Knob {
    pub name: &'static str,
    pub values: Vec<u32>,
}

/// A kernel's schedule space on a target: one or more families of points
/// (a contraction of 16-bit operands has a tensor-core family beside the
/// SIMT one), each the product of its knobs' values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Space {
    pub families: Vec<Family>,
    /// Work units (output groups, rows) that bound useful block sizes.
    coverage: Coverage,
}

/// The points of one schedule class: the product of its knobs' values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    pub class: Class,
    pub knobs: Vec<Knob>,
}

impl Family {
    /// How many points the knobs span.
    pub fn size(&self) -> u64 {
        self.knobs.iter().map(|k| k.values.len() as u64).product()
    }

    /// The `index`-th point, the last knob varying fastest.
    pub fn point(&self, index: u64) -> Schedule {
        self.points_in(index..index + 1)
            .next()
            .expect("an index below the family's size")
    }

    /// The points of `range` of indices, in order: the knobs' positions
    /// are worked out once for the first and then counted up like an
    /// odometer's digits, the last knob turning fastest.
    pub fn points_in(&self, range: Range<u64>) -> impl Iterator<Item = Schedule> + '_ {
        let mut digits = vec![0; self.knobs.len()];
        let mut rest = range.start;
        for (digit, knob) in digits.iter_mut().zip(&self.knobs).rev() {
            let n = knob.values.len() as u64;
            *digit = (rest % n) as usize;
            rest /= n;
        }
        let mut values: Vec<u32> = digits
            .iter()
            .zip(&self.knobs)
            .map(|(&d, k)| k.values[d])
            .collect();
        (range.start..range.end.min(self.size())).map(move |_| {
            let point = self
                .class
                .schedule(&values)
                .expect("a family has its class's knobs");
            for ((digit, value), knob) in digits.iter_mut().zip(&mut values).zip(&self.knobs).rev()
            {
                *digit += 1;
                if *digit < knob.values.len() {
                    *value = knob.values[*digit];
                    break;
                }
                *digit = 0;
                *value = knob.values[0];
            }
            point
        })
    }
}

/// Points per piece of a survey's work (a few milliseconds of checking).
const SURVEY_PIECE: u64 = 1 << 16;

/// Why a point of a space is not a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rejection {
    /// It breaks a constraint of the lowering or the target.
    Constraint(Constraint),
    /// A block holds more than twice the work the kernel has, or a grouped
    /// walk of a grid of one block column (the same as row by row).
    Coverage,
}

impl Rejection {
    pub fn name(self) -> &'static str {
        match self {
            Rejection::Constraint(c) => c.name(),
            Rejection::Coverage => "coverage",
        }
    }
}

/// How many points of a space are valid, and why the others are not.
#[derive(Debug, Clone, PartialEq)]
pub struct Survey {
    pub size: u64,
    pub valid: Vec<Schedule>,
    /// Per rejection: how many points, and the first one's reason.
    pub rejected: BTreeMap<Rejection, (u64, String)>,
}

impl Survey {
    /// The fraction of the space's points that are valid.
    pub fn valid_fraction(&self) -> f64 {
        self.valid.len() as f64 / self.size.max(1) as f64
    }
}

/// Limits on block sizes beyond which a block only adds idle threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Coverage {
    /// Elementwise and generic: output elements.
    Elements(u64),
    /// Rows: how many rows there are.
    Rows(u64),
    /// Matmul tiles are bounded by the knob values themselves; the extent
    /// along `n` tells whether a grouped walk differs from row by row.
    Tiles { n: u32 },
}

impl Space {
    /// The space of `kernel` on `target`, by the rules of its op class.
    pub fn of(kernel: &Kernel, target: SmVersion) -> Space {
        rules::space(kernel, target)
    }

    /// How many points the families span.
    pub fn size(&self) -> u64 {
        self.families.iter().map(Family::size).sum()
    }

    /// Every point, family by family, each in index order.
    pub fn points(&self) -> impl Iterator<Item = Schedule> + '_ {
        self.families.iter().flat_map(|f| f.points_in(0..f.size()))
    }

    /// The family of `class`, if the space has one.
    pub fn family(&self, class: Class) -> Option<&Family> {
        self.families.iter().find(|f| f.class == class)
    }

    /// Why `point` is not a candidate, if it is not.
    pub fn reject(
        &self,
        kernel: &Kernel,
        point: &Schedule,
        target: SmVersion,
    ) -> Option<(Rejection, String)> {
        self.rejection(&Lowering::new(kernel, target), point)
    }

    /// [`Space::reject`] for the kernel and target of `lowering`, which
    /// checks many points at the cost of one.
    pub fn rejection(
        &self,
        lowering: &Lowering<'_>,
        point: &Schedule,
    ) -> Option<(Rejection, String)> {
        if let Some(reason) = self.redundant(point) {
            return Some((Rejection::Coverage, reason));
        }
        lowering
            .violation(point)
            .map(|(constraint, reason)| (Rejection::Constraint(constraint), reason))
    }

    /// Every point sorted into valid or rejected. The points are checked
    /// in pieces on all the machine's cores (a large space has tens of
    /// millions); the result is the same as checking them one by one in
    /// index order.
    pub fn survey(&self, kernel: &Kernel, target: SmVersion) -> Survey {
        let lowering = Lowering::new(kernel, target);
        // Pieces of each family's indices, in index order.
        let pieces: Vec<(&Family, Range<u64>)> = self
            .families
            .iter()
            .flat_map(|f| {
                (0..f.size())
                    .step_by(SURVEY_PIECE as usize)
                    .map(move |start| (f, start..(start + SURVEY_PIECE).min(f.size())))
            })
            .collect();
        let parts = parallel::map(parallel::available(), &pieces, |(family, range)| {
            let mut part = Survey {
                size: range.end - range.start,
                valid: Vec::new(),
                rejected: BTreeMap::new(),
            };
            for point in family.points_in(range.clone()) {
                match self.rejection(&lowering, &point) {
                    None => part.valid.push(point),
                    Some((why, reason)) => {
                        part.rejected.entry(why).or_insert((0, reason)).0 += 1;
                    }
                }
            }
            part
        });
        let mut survey = Survey {
            size: self.size(),
            valid: Vec::new(),
            rejected: BTreeMap::new(),
        };
        for part in parts {
            survey.valid.extend(part.valid);
            for (why, (count, reason)) in part.rejected {
                survey.rejected.entry(why).or_insert((0, reason)).0 += count;
            }
        }
        survey
    }

    fn redundant(&self, point: &Schedule) -> Option<String> {
        let too_big = |work: u64, total: u64| work > 32 && work / 2 >= total;
        match (point, self.coverage) {
            (&Schedule::Generic { block }, Coverage::Elements(total))
                if too_big(u64::from(block), total) =>
            {
                Some(format!("{block} threads for {total} outputs"))
            }
            (
                &Schedule::Elementwise {
                    block,
                    per_thread,
                    vector,
                },
                Coverage::Elements(total),
            ) if block > 32 && too_big(u64::from(block * per_thread * vector), total) => {
                Some(format!(
                    "a block covers {} outputs of {total}",
                    block * per_thread * vector
                ))
            }
            (&Schedule::Rows { rows_per_block, .. }, Coverage::Rows(rows))
                if rows_per_block > 1 && u64::from(rows_per_block / 2) >= rows =>
            {
                Some(format!("{rows_per_block} rows per block for {rows} rows"))
            }
            (
                &(Schedule::Matmul(Tiles {
                    block_n, group_m, ..
                })
                | Schedule::Mma(MmaTiles {
                    block_n, group_m, ..
                })),
                Coverage::Tiles { n },
            ) if group_m > 1 && n <= block_n => Some(format!(
                "groups of {group_m} block rows in a grid of one block column walk it row by row"
            )),
            _ => None,
        }
    }
}

/// The valid points of `kernel`'s space on `target`, in index order.
pub fn candidates(kernel: &Kernel, target: SmVersion) -> Vec<Schedule> {
    Space::of(kernel, target).survey(kernel, target).valid
}

/// `n` of `points` chosen at random with `seed` (all of them when there are
/// no more than `n`), in their original order. The same arguments always
/// give the same sample.
pub fn sample(points: &[Schedule], n: usize, seed: u64) -> Vec<Schedule> {
    if points.len() <= n {
        return points.to_vec();
    }
    let mut state = seed;
    let mut next = move || {
        // splitmix64
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut order: Vec<usize> = (0..points.len()).collect();
    for i in 0..n {
        let j = i + (next() % (points.len() - i) as u64) as usize;
        order.swap(i, j);
    }
    let mut chosen = order[..n].to_vec();
    chosen.sort_unstable();
    chosen.into_iter().map(|i| points[i].clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lower::{LowerError, lower};
    use crate::test_kernels::{matmul, softmax};

    #[test]
    fn every_candidate_lowers_and_every_rejection_is_stated() {
        for k in [softmax(7, 13), softmax(64, 1024), matmul(33, 65, 17)] {
            for target in SmVersion::ALL {
                let space = Space::of(&k, target);
                let survey = space.survey(&k, target);
                assert!(survey.valid.len() > 10, "{}: {:?}", k.name, survey.rejected);
                let rejected: u64 = survey.rejected.values().map(|(n, _)| n).sum();
                assert_eq!(survey.valid.len() as u64 + rejected, space.size());
                for p in &survey.valid {
                    lower(&k, p, target).unwrap_or_else(|e| panic!("{e}"));
                }
                for p in space.points() {
                    if let Some((why, _)) = space.reject(&k, &p, target) {
                        let lowered = lower(&k, &p, target);
                        match why {
                            Rejection::Coverage => assert!(lowered.is_ok()),
                            Rejection::Constraint(c) => assert!(matches!(
                                lowered,
                                Err(LowerError::Invalid { constraint, .. }) if constraint == c
                            )),
                        }
                    }
                }
                assert_eq!(survey.valid, candidates(&k, target));
            }
        }
    }

    #[test]
    fn points_enumerate_the_knobs_product_without_duplicates() {
        let k = matmul(64, 64, 64);
        let space = Space::of(&k, SmVersion::Sm80);
        let family = space.family(Class::Matmul).expect("a SIMT family");
        let names: Vec<&str> = family.knobs.iter().map(|k| k.name).collect();
        assert_eq!(names, Class::Matmul.knobs());
        let points: Vec<Schedule> = space.points().collect();
        assert_eq!(points.len() as u64, space.size());
        let mut unique = points.clone();
        unique.sort_by_key(Schedule::to_json);
        unique.dedup();
        assert_eq!(unique.len(), points.len());
        for p in &points {
            for (knob, value) in family.knobs.iter().zip(p.knob_values()) {
                assert!(knob.values.contains(&value));
            }
        }
    }

    #[test]
    fn points_in_a_range_are_the_points_of_its_indices() {
        let k = matmul(64, 64, 64);
        let space = Space::of(&k, SmVersion::Sm90);
        for family in &space.families {
            let decode = |mut index: u64| {
                let mut values = vec![0; family.knobs.len()];
                for (value, knob) in values.iter_mut().zip(&family.knobs).rev() {
                    let n = knob.values.len() as u64;
                    *value = knob.values[(index % n) as usize];
                    index /= n;
                }
                family.class.schedule(&values).expect("the class's knobs")
            };
            let size = family.size();
            for range in [0..7, 5..1000, size - 300..size, size - 2..size + 5] {
                let expected: Vec<Schedule> =
                    (range.start..range.end.min(size)).map(decode).collect();
                let points: Vec<Schedule> = family.points_in(range.clone()).collect();
                assert_eq!(points, expected, "{:?} {range:?}", family.class);
            }
        }
    }

    #[test]
    fn a_survey_in_pieces_is_the_survey_point_by_point() {
        let k = matmul(200, 96, 40);
        let target = SmVersion::Sm90;
        let space = Space::of(&k, target);
        assert!(space.size() > 4 * SURVEY_PIECE, "several pieces");
        let mut expected = Survey {
            size: space.size(),
            valid: Vec::new(),
            rejected: BTreeMap::new(),
        };
        for point in space.points() {
            match space.reject(&k, &point, target) {
                None => expected.valid.push(point),
                Some((why, reason)) => {
                    expected.rejected.entry(why).or_insert((0, reason)).0 += 1;
                }
            }
        }
        assert_eq!(space.survey(&k, target), expected);
    }

    #[test]
    fn rows_spaces_include_rows_spanning_warps() {
        let points = candidates(&softmax(3, 7), SmVersion::Sm80);
        assert!(points.iter().any(|p| matches!(
            p,
            Schedule::Rows {
                threads_per_row: 64,
                ..
            }
        )));
    }

    #[test]
    fn surveys_name_the_constraints_that_reject() {
        let cases = [
            (
                matmul(4096, 4096, 4096),
                [Constraint::Threads, Constraint::Registers],
            ),
            (
                matmul(1, 4096, 4096),
                [Constraint::Tiling, Constraint::Threads],
            ),
            (
                softmax(64, 1022),
                [Constraint::Alignment, Constraint::Threads],
            ),
        ];
        for (k, constraints) in cases {
            let survey = Space::of(&k, SmVersion::Sm80).survey(&k, SmVersion::Sm80);
            for c in constraints {
                let rejected = survey.rejected.get(&Rejection::Constraint(c));
                let keys: Vec<_> = survey.rejected.keys().collect();
                assert!(
                    rejected.is_some_and(|(n, reason)| *n > 0 && !reason.is_empty()),
                    "{}: {c:?} not among {keys:?}",
                    k.name
                );
            }
            assert!(survey.valid_fraction() > 0.0 && survey.valid_fraction() < 1.0);
        }
    }

    #[test]
    fn samples_are_deterministic_ordered_subsets() {
        let points = candidates(&matmul(64, 64, 64), SmVersion::Sm80);
        assert!(points.len() > 20);
        let a = sample(&points, 10, 42);
        assert_eq!(a, sample(&points, 10, 42));
        assert_ne!(a, sample(&points, 10, 43));
        assert_eq!(a.len(), 10);
        let positions: Vec<usize> = a
            .iter()
            .map(|s| points.iter().position(|p| p == s).expect("a subset"))
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(sample(&points, points.len(), 1), points);
    }
}

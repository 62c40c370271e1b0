//! The space-filling initial design: spread over each knob's values, valid,
//! distinct, clear of the points already taken, and reproducible per seed.

use std::collections::HashSet;

use ktune_search::space::{Knob, Point, Space};
use ktune_search::strategy::{rng, spread};

/// Block sizes whose product is bounded, as threads per block are: uniform
/// draws over the valid points mostly have small `x`.
fn blocks() -> Space {
    Space::with_constraint(
        vec![
            Knob::ints("x", &[1, 2, 4, 8, 16, 32, 64]),
            Knob::ints("y", &[1, 2, 4, 8, 16, 32, 64]),
            Knob::ints("unroll", &[1, 2, 3, 4]),
        ],
        |s, p| {
            let x = s.value(p, 0).as_f64().unwrap_or(f64::INFINITY);
            let y = s.value(p, 1).as_f64().unwrap_or(f64::INFINITY);
            x * y <= 64.0
        },
    )
}

/// The number of distinct values each knob takes in `points`, summed over
/// the knobs.
fn distinct_values(space: &Space, points: &[Point]) -> usize {
    (0..space.knobs().len())
        .map(|k| points.iter().map(|p| p.0[k]).collect::<HashSet<_>>().len())
        .sum()
}

#[test]
fn a_design_covers_more_values_than_random_draws() {
    let space = blocks();
    let (mut designed, mut drawn) = (0, 0);
    for seed in 0..20 {
        let design = spread(&space, 6, &mut rng(seed), |_| false);
        assert_eq!(design.len(), 6);
        designed += distinct_values(&space, &design);
        let mut r = rng(seed);
        let mut random: Vec<Point> = Vec::new();
        while random.len() < 6 {
            let p = space.random_valid(&mut r).expect("valid points");
            if !random.contains(&p) {
                random.push(p);
            }
        }
        drawn += distinct_values(&space, &random);
    }
    assert!(designed > drawn, "design {designed}, random {drawn}");
}

#[test]
fn without_constraints_a_design_of_n_points_takes_every_value_once() {
    let space = Space::new(vec![
        Knob::ints("a", &[1, 2, 3, 4, 5]),
        Knob::ints("b", &[8, 16, 32, 64, 128]),
        Knob::ints("c", &[0, 1, 2, 3, 4]),
    ]);
    for seed in 0..10 {
        let design = spread(&space, 5, &mut rng(seed), |_| false);
        for k in 0..3 {
            let mut values: Vec<u32> = design.iter().map(|p| p.0[k]).collect();
            values.sort_unstable();
            assert_eq!(values, vec![0, 1, 2, 3, 4], "seed {seed}, knob {k}");
        }
    }
}

#[test]
fn a_design_is_valid_distinct_and_clear_of_taken_points() {
    let space = blocks();
    let taken: HashSet<Point> = space.valid_points().into_iter().step_by(3).collect();
    for seed in 0..10 {
        let design = spread(&space, 24, &mut rng(seed), |p| taken.contains(p));
        assert_eq!(design.len(), 24);
        assert!(design.iter().all(|p| space.is_valid(p)));
        assert!(design.iter().all(|p| !taken.contains(p)));
        assert_eq!(design.iter().collect::<HashSet<_>>().len(), design.len());
    }
    // Asked for more than is left, it gives everything left.
    let left = space.valid_points().len() - taken.len();
    let design = spread(&space, left + 10, &mut rng(1), |p| taken.contains(p));
    assert_eq!(design.len(), left);
}

#[test]
fn a_design_is_reproducible_per_seed() {
    let space = blocks();
    let a = spread(&space, 10, &mut rng(7), |_| false);
    assert_eq!(a, spread(&space, 10, &mut rng(7), |_| false));
    assert_ne!(a, spread(&space, 10, &mut rng(8), |_| false));
}

#[test]
fn a_space_too_large_to_enumerate_gets_a_design_from_random_valid_points() {
    // 16^6 combinations, more than are enumerated.
    let values: Vec<i64> = (0..16).collect();
    let knobs = (0..6)
        .map(|k| Knob::ints(format!("k{k}"), &values))
        .collect();
    let space = Space::with_constraint(knobs, |_, p| p.0.iter().sum::<u32>() % 2 == 0);
    let design = spread(&space, 12, &mut rng(3), |_| false);
    assert_eq!(design.len(), 12);
    assert!(design.iter().all(|p| space.is_valid(p)));
    assert_eq!(design.iter().collect::<HashSet<_>>().len(), 12);
    assert_eq!(design, spread(&space, 12, &mut rng(3), |_| false));
}

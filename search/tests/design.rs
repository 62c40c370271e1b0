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

#[test]
fn a_knob_counting_threads_takes_the_roundest_size_of_each_stratum() {
    // 32 to 256 threads in steps of 8: in each eighth of the range there
    // is a multiple of 16 (and in most a multiple of 32). Eight points and
    // eight tile sizes: no two rows aim at the same point.
    let sizes: Vec<i64> = (4..=32).map(|i| 8 * i).collect();
    let space = |threads: bool| {
        let knob = Knob::ints("block_size_y", &sizes);
        Space::new(vec![
            if threads {
                knob.counting_threads()
            } else {
                knob
            },
            Knob::ints("tile", &[1, 2, 3, 4, 5, 6, 7, 8]),
        ])
    };
    let (marked, plain) = (space(true), space(false));
    let mut plain_odd = 0;
    for seed in 0..20 {
        for p in spread(&marked, 8, &mut rng(seed), |_| false) {
            let size = sizes[p.0[0] as usize];
            assert_eq!(size % 16, 0, "seed {seed}: {size} threads");
        }
        plain_odd += spread(&plain, 8, &mut rng(seed), |_| false)
            .iter()
            .filter(|p| sizes[p.0[0] as usize] % 16 != 0)
            .count();
        // Only the knob counting threads is steered: the tile sizes stay
        // one per stratum.
        let mut tiles: Vec<u32> = spread(&marked, 8, &mut rng(seed), |_| false)
            .iter()
            .map(|p| p.0[1])
            .collect();
        tiles.sort_unstable();
        assert_eq!(tiles, (0..8).collect::<Vec<u32>>(), "seed {seed}");
    }
    assert!(plain_odd > 0, "unmarked, the draws include sizes off 16");
}

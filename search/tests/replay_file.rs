//! A real recorded space (../shared/data/tuning-spaces) read and replayed.

use std::path::PathBuf;

use ktune_search::measure::{Measurer, Rejection};
use ktune_search::replay::Replay;
use ktune_search::score;
use ktune_search::strategy::Random;

fn pnpoly() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/tuning-spaces/pnpoly/RTX_3090.json.gz")
}

#[test]
fn reads_the_pnpoly_space() {
    let mut replay = Replay::load(&pnpoly()).expect("the space loads");
    assert_eq!(replay.len(), 4092);
    assert_eq!(replay.optimum(), Some(8.714240169525146));
    let space = replay.space().clone();
    let names: Vec<&str> = space.knobs().iter().map(|k| k.name.as_str()).collect();
    assert_eq!(
        names,
        ["between_method", "block_size_x", "tile_size", "use_method"]
    );
    assert_eq!(space.knobs()[1].values.len(), 31);
    assert_eq!(space.valid_points().len(), 4092);
    assert_eq!(space.cardinality(), 4 * 31 * 11 * 3);
    // The best configuration, key "0,64,20,0".
    let best = ktune_search::space::Point(vec![0, 1, 10, 0]);
    let m = replay.measure(&space, &best).expect("measured");
    assert_eq!(m.time, 8.714240169525146);
    assert!(m.spread().is_some_and(|s| s > 0.0));
    let failed: Vec<_> = space
        .valid_points()
        .into_iter()
        .filter_map(|p| replay.outcome(&p).and_then(|o| o.clone().err()))
        .collect();
    assert_eq!(failed.len(), 318);
    assert!(
        failed
            .iter()
            .all(|r| matches!(r, Rejection::RuntimeFailed(_)))
    );
    // Every combination was recorded here; one out of range is invalid.
    let outside = ktune_search::space::Point(vec![0, 31, 0, 0]);
    assert!(!space.is_valid(&outside));
    assert!(matches!(
        replay.measure(&space, &outside),
        Err(Rejection::Invalid(_))
    ));
}

#[test]
fn scores_random_search_on_it() {
    let replay = Replay::load(&pnpoly()).expect("the space loads");
    let summary = score::score(&replay, &Random, 4, 4092).expect("has an optimum");
    // With the whole space as budget, random search always gets there.
    assert_eq!(summary.success_fraction, 1.0);
    assert!(summary.evals.iter().all(|e| e.is_some_and(|n| n <= 4092)));
    assert!(summary.auc > 0.0 && summary.auc <= 1.0);
    assert_eq!(summary.evals.len(), 4);
}

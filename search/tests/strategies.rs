//! Every strategy on a small synthetic space: it finds the optimum, never
//! measures a point twice, is reproducible per seed, keeps to its budget and
//! counts rejections as evaluations without ever choosing one.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ktune_search::measure::{Measurement, Outcome, Rejection};
use ktune_search::model::CostModel;
use ktune_search::session::{Budget, Deadline, Evaluation, Session};
use ktune_search::space::{Knob, Point, Space, Value};
use ktune_search::strategy::{Bounded, CoordinateDescent, Evolutionary, Random, Strategy};

/// Four knobs, 360 combinations, the 72 with `a·b > 64` invalid.
fn space() -> Space {
    Space::with_constraint(
        vec![
            Knob::ints("a", &[1, 2, 4, 8, 16, 32]),
            Knob::ints("b", &[1, 2, 4, 8, 16]),
            Knob::new(
                "c",
                vec![
                    Value::Str("x".into()),
                    Value::Str("y".into()),
                    Value::Str("z".into()),
                ],
            ),
            Knob::ints("d", &[0, 1, 2, 3]),
        ],
        |s, p| num(s, p, 0) * num(s, p, 1) <= 64.0,
    )
}

fn num(s: &Space, p: &Point, knob: usize) -> f64 {
    s.value(p, knob).as_f64().unwrap_or(f64::NAN)
}

/// A smooth time with its unique optimum at a=8, b=4, c=x, d=1 (time 1);
/// c=z with d=3 fails to compile.
fn time(s: &Space, p: &Point) -> Outcome {
    let c = p.0[2];
    let d = num(s, p, 3);
    if c == 2 && d == 3.0 {
        return Err(Rejection::CompileFailed("too many registers".into()));
    }
    let a = num(s, p, 0).log2();
    let b = num(s, p, 1).log2();
    Ok(Measurement::new(
        1.0 + (a - 3.0).powi(2) + 0.5 * (b - 2.0).powi(2) + 0.3 * f64::from(c) + (d - 1.0).abs(),
    ))
}

fn optimum() -> Point {
    Point(vec![3, 2, 0, 1])
}

/// Runs a strategy, counting how often each point reached the measurer.
fn run(
    strategy: &dyn Strategy,
    seed: u64,
    budget: usize,
) -> (Vec<Evaluation>, HashMap<Point, usize>) {
    let space = space();
    let mut calls: HashMap<Point, usize> = HashMap::new();
    let mut measurer = |s: &Space, p: &Point| {
        *calls.entry(p.clone()).or_default() += 1;
        time(s, p)
    };
    let mut session = Session::new(&space, &mut measurer, Budget::evaluations(budget));
    strategy.run(&mut session, seed);
    let history = session.into_history();
    (history, calls)
}

fn strategies() -> Vec<Box<dyn Strategy>> {
    let all: Vec<Box<dyn Strategy>> = vec![
        Box::new(Random),
        Box::new(CoordinateDescent::default()),
        Box::new(Bounded::new(
            // A heuristic that knows a and b but not c and d.
            Arc::new(|s: &Space, p: &Point| {
                (num(s, p, 0) - 8.0).abs() + (num(s, p, 1) - 4.0).abs()
            }),
            40,
        )),
        Box::new(Evolutionary::knn()),
    ];
    #[cfg(feature = "xgboost")]
    let all = {
        use ktune_search::model::XgbObjective;
        let mut all = all;
        all.push(Box::new(Evolutionary::xgboost(XgbObjective::RankPairwise)));
        all.push(Box::new(Evolutionary::xgboost(XgbObjective::Regression)));
        all
    };
    all
}

fn best(history: &[Evaluation]) -> Option<(&Point, f64)> {
    history
        .iter()
        .filter_map(|e| e.outcome.as_ref().ok().map(|m| (&e.point, m.time)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

#[test]
fn every_strategy_finds_the_optimum() {
    let valid = space().valid_points().len();
    for strategy in strategies() {
        for seed in 0..3 {
            let (history, _) = run(strategy.as_ref(), seed, valid);
            let (point, t) = best(&history).expect("something measured");
            assert_eq!(point, &optimum(), "{} seed {seed}", strategy.name());
            assert_eq!(t, 1.0);
        }
    }
}

#[test]
fn guided_strategies_find_the_optimum_early() {
    // Far fewer evaluations than the space's 288 valid points.
    let guided: Vec<Box<dyn Strategy>> = vec![
        Box::new(CoordinateDescent::default()),
        Box::new(Evolutionary::knn()),
    ];
    for strategy in guided {
        for seed in 0..5 {
            let (history, _) = run(strategy.as_ref(), seed, 80);
            assert_eq!(
                best(&history).map(|b| b.0),
                Some(&optimum()),
                "{} seed {seed}",
                strategy.name()
            );
        }
    }
}

#[test]
fn no_point_is_measured_twice_and_the_budget_holds() {
    for strategy in strategies() {
        for budget in [1, 7, 50, 1000] {
            let (history, calls) = run(strategy.as_ref(), 11, budget);
            assert!(
                history.len() <= budget,
                "{}: {} > {budget}",
                strategy.name(),
                history.len()
            );
            assert!(
                calls.values().all(|&n| n == 1),
                "{} re-measured a point",
                strategy.name()
            );
            assert_eq!(calls.len(), history.len());
            assert!(history.iter().all(|e| space().is_valid(&e.point)));
        }
    }
}

#[test]
fn runs_are_reproducible_per_seed() {
    for strategy in strategies() {
        let (a, _) = run(strategy.as_ref(), 5, 60);
        let (b, _) = run(strategy.as_ref(), 5, 60);
        assert_eq!(a, b, "{}", strategy.name());
    }
    let (a, _) = run(&Random, 1, 60);
    let (b, _) = run(&Random, 2, 60);
    assert_ne!(a, b);
}

#[test]
fn rejections_count_as_evaluations_and_are_never_best() {
    let (history, _) = run(&Random, 3, 1000);
    let rejected = history.iter().filter(|e| e.outcome.is_err()).count();
    // Every valid point was evaluated, the 24 with c=z, d=3 failing.
    assert_eq!(history.len(), 288);
    assert_eq!(rejected, 24);
    let space = space();
    let mut measurer = time;
    let mut session = Session::new(&space, &mut measurer, Budget::evaluations(2));
    let failing = Point(vec![0, 0, 2, 3]);
    session.measure(&failing);
    assert_eq!(session.best(), None);
    assert_eq!(session.remaining(), 1);
    session.measure(&Point(vec![0, 0, 0, 0]));
    assert!(session.is_done());
    assert_eq!(session.best().map(|b| b.1), Some(1.0 + 9.0 + 2.0 + 1.0));
    // Asking again for a measured point is free; a new one is refused.
    assert!(session.measure(&failing).is_some_and(|o| o.is_err()));
    assert_eq!(session.measure(&Point(vec![1, 0, 0, 0])), None);
}

#[test]
fn a_session_measures_nothing_after_its_deadline() {
    let space = space();
    let mut measurer = time;
    let past = Instant::now() - Duration::from_millis(1);
    let mut session = Session::new(&space, &mut measurer, Budget::evaluations(100).until(past));
    assert!(session.is_done());
    assert_eq!(session.measure(&Point(vec![0, 0, 0, 0])), None);
    Random.run(&mut session, 1);
    assert!(session.history().is_empty());
    let soon = Instant::now() + Duration::from_secs(3600);
    let mut session = Session::new(&space, &mut measurer, Budget::evaluations(5).until(soon));
    Random.run(&mut session, 1);
    assert_eq!(session.history().len(), 5);
}

#[test]
fn a_session_measures_nothing_once_interrupted() {
    static INTERRUPT: AtomicBool = AtomicBool::new(false);
    let space = space();
    let mut calls = 0;
    let mut measurer = |s: &Space, p: &Point| {
        calls += 1;
        if calls == 3 {
            INTERRUPT.store(true, Ordering::Relaxed);
        }
        time(s, p)
    };
    let hour = Deadline::at(Instant::now() + Duration::from_secs(3600));
    let budget = Budget::evaluations(100).until(hour.or_interrupt(&INTERRUPT));
    let mut session = Session::new(&space, &mut measurer, budget);
    Random.run(&mut session, 1);
    assert_eq!(session.history().len(), 3, "the one in progress finishes");
    assert!(session.is_done());
    assert!(hour.or_interrupt(&INTERRUPT).interrupted() && !hour.interrupted());
}

#[test]
fn the_evolutionary_search_records_its_models_predictions() {
    let strategy = Evolutionary::knn();
    let (history, _) = run(&strategy, 4, 80);
    let predicted = history.iter().filter(|e| e.predicted.is_some()).count();
    // The first population is the initial design; the model chooses most of
    // the rest.
    assert!(predicted > 20, "{predicted} of {} predicted", history.len());
    assert!(
        history[..strategy.initial]
            .iter()
            .all(|e| e.predicted.is_none())
    );
}

/// A cost model that expects every point to take the same time.
struct Indifferent;

impl CostModel for Indifferent {
    fn fit(&mut self, _: &[Vec<f32>], _: &[f64]) {}

    fn predict(&self, rows: &[Vec<f32>]) -> Vec<f64> {
        vec![1.0; rows.len()]
    }
}

#[test]
fn a_model_that_expects_no_gain_is_followed_for_one_batch_then_the_search_restarts() {
    let strategy = Evolutionary::new("indifferent", Arc::new(|_| Box::new(Indifferent)));
    let explore = (strategy.batch as f64 * strategy.epsilon).round() as usize;
    let (history, _) = run(&strategy, 3, 150);
    // The model's choices come in runs, one per measured batch, each followed
    // by the batch's `explore` random points; a restart's descent then adds
    // more unpredicted points before the next batch. Two batches in a row
    // would be `explore` points apart.
    let mut gaps = Vec::new();
    let mut unpredicted = None;
    for e in &history {
        match (e.predicted, unpredicted.as_mut()) {
            (Some(_), Some(n)) if *n > 0 => {
                gaps.push(*n);
                *n = 0;
            }
            (Some(_), _) => unpredicted = Some(0),
            (None, Some(n)) => *n += 1,
            (None, None) => {}
        }
    }
    assert!(gaps.len() >= 3, "only {} batches: {gaps:?}", gaps.len() + 1);
    assert!(
        gaps.iter().all(|&g| g > explore),
        "gaps between batches: {gaps:?}"
    );
}

#[test]
fn bounded_spreads_its_points_over_the_best_scored() {
    let strategy = Bounded::new(
        Arc::new(|s: &Space, p: &Point| (num(s, p, 0) - 8.0).abs() + (num(s, p, 1) - 4.0).abs()),
        5,
    );
    let (history, _) = run(&strategy, 0, 100);
    // The twelve best-scored points all have a=8, b=4 and tie; the heuristic
    // cannot tell c and d apart, so the five measured differ there as much
    // as they can: the first in the space's order, then two that differ
    // from it and from each other in both c and d (c has three values),
    // then the earliest that differ from each chosen one in at least one.
    let points: Vec<&Point> = history.iter().map(|e| &e.point).collect();
    assert_eq!(
        points,
        vec![
            &Point(vec![3, 2, 0, 0]),
            &Point(vec![3, 2, 1, 1]),
            &Point(vec![3, 2, 2, 2]),
            &Point(vec![3, 2, 0, 1]),
            &Point(vec![3, 2, 0, 2]),
        ]
    );
}

#[test]
fn bounded_takes_the_next_scores_in_order_past_its_band() {
    // Only a=8, b=4 is within 10% of the best score; past those twelve
    // points the rest come in order of score (a=8 with b=2 scores 3), ties
    // in the space's order.
    let strategy = Bounded::new(
        Arc::new(|s: &Space, p: &Point| {
            1.0 + (num(s, p, 0) - 8.0).abs() + (num(s, p, 1) - 4.0).abs()
        }),
        14,
    );
    let (history, _) = run(&strategy, 0, 100);
    let space = space();
    let a_b = |e: &Evaluation| (num(&space, &e.point, 0), num(&space, &e.point, 1));
    assert!(history[..12].iter().all(|e| a_b(e) == (8.0, 4.0)));
    assert_eq!(history[12].point, Point(vec![3, 1, 0, 0]));
    assert_eq!(history[13].point, Point(vec![3, 1, 0, 1]));
}

#[test]
fn starts_are_measured_first() {
    let mut strategy = Evolutionary::knn();
    strategy.starts = vec![Point(vec![0, 0, 1, 1]), optimum()];
    let (history, _) = run(&strategy, 4, 20);
    assert_eq!(history[0].point, Point(vec![0, 0, 1, 1]));
    assert_eq!(history[1].point, optimum());
    let (history, _) = run(&CoordinateDescent::polish(Point(vec![5, 0, 2, 0])), 4, 200);
    assert_eq!(history[0].point, Point(vec![5, 0, 2, 0]));
    assert_eq!(best(&history).map(|b| b.0), Some(&optimum()));
}

#[test]
fn bounded_measures_k_points_besides_those_measured_before_it() {
    // A build's search measures the default first; when the default is
    // among the best scored, the bounded search still measures k others.
    let strategy = Bounded::new(
        Arc::new(|s: &Space, p: &Point| (num(s, p, 0) - 8.0).abs() + (num(s, p, 1) - 4.0).abs()),
        5,
    );
    let space = space();
    let first = strategy.choose(&space, 0)[0].clone();
    let mut measurer = |s: &Space, p: &Point| time(s, p);
    let mut session = Session::new(&space, &mut measurer, Budget::evaluations(100));
    session.measure(&first);
    strategy.run(&mut session, 0);
    let history = session.into_history();
    assert_eq!(history.len(), 6);
    assert_eq!(history[0].point, first);
    assert!(history[1..].iter().all(|e| e.point != first));
}

//! Measuring a batch: the measurer hears which points are coming, and the
//! session's history, budget and outcomes are those of measuring them one
//! by one.

use ktune_search::measure::{Measurement, Measurer, Outcome, Rejection};
use ktune_search::session::{Budget, Session};
use ktune_search::space::{Knob, Point, Space};
use ktune_search::strategy::{Bounded, CoordinateDescent, Evolutionary, Strategy};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Two knobs of eight values each; `a = b + 1` fails to compile.
fn space() -> Space {
    let values: Vec<i64> = (0..8).collect();
    Space::new(vec![Knob::ints("a", &values), Knob::ints("b", &values)])
}

fn time(p: &Point) -> Outcome {
    let (a, b) = (f64::from(p.0[0]), f64::from(p.0[1]));
    if a == b + 1.0 {
        return Err(Rejection::CompileFailed("too many registers".into()));
    }
    Ok(Measurement::new(
        1.0 + (a - 5.0).powi(2) + (b - 2.0).powi(2),
    ))
}

/// What reached the measurer, in order.
#[derive(Debug, Clone, PartialEq)]
enum Call {
    Prepare(Vec<Point>, Option<Instant>),
    Measure(Point),
}

#[derive(Default)]
struct Recorder {
    calls: Vec<Call>,
}

impl Measurer for Recorder {
    fn measure(&mut self, _: &Space, point: &Point) -> Outcome {
        self.calls.push(Call::Measure(point.clone()));
        time(point)
    }

    fn prepare(&mut self, _: &Space, points: &[Point], deadline: Option<Instant>) {
        self.calls.push(Call::Prepare(points.to_vec(), deadline));
    }
}

fn p(a: u32, b: u32) -> Point {
    Point(vec![a, b])
}

#[test]
fn a_batch_prepares_only_new_points_once_and_keeps_to_the_budget() {
    let space = space();
    let mut recorder = Recorder::default();
    let mut session = Session::new(&space, &mut recorder, Budget::evaluations(4));
    session.measure(&p(1, 1));
    session.measure_batch(&[p(1, 1), p(2, 2), p(2, 2), p(3, 4), p(6, 1), p(0, 0)]);
    session.measure_batch(&[p(7, 7)]);
    let measured: Vec<Point> = session.history().iter().map(|e| e.point.clone()).collect();
    assert_eq!(measured, [p(1, 1), p(2, 2), p(3, 4), p(6, 1)]);
    assert!(session.is_done());
    assert_eq!(
        recorder.calls,
        [
            Call::Measure(p(1, 1)),
            Call::Prepare(vec![p(2, 2), p(3, 4), p(6, 1)], None),
            Call::Measure(p(2, 2)),
            Call::Measure(p(3, 4)),
            Call::Measure(p(6, 1)),
        ]
    );
}

#[test]
fn a_batch_records_what_one_by_one_measurement_records() {
    let space = space();
    let batch = [
        (p(3, 4), None),
        (p(4, 3), Some(2.0)),
        (p(5, 2), Some(0.5)),
        (p(5, 2), Some(9.0)),
        (p(0, 1), None),
    ];
    let budget = Budget {
        stop_at: Some(1.0),
        ..Budget::evaluations(10)
    };

    let mut one = |_: &Space, p: &Point| time(p);
    let mut single = Session::new(&space, &mut one, budget);
    single.measure(&p(0, 0));
    for (point, predicted) in &batch {
        match predicted {
            Some(m) => single.measure_predicted(point, *m),
            None => single.measure(point),
        };
    }

    let mut recorder = Recorder::default();
    let mut batched = Session::new(&space, &mut recorder, budget);
    batched.measure(&p(0, 0));
    batched.measure_batch_predicted(&batch);

    // (4, 3) is rejected; the optimum (5, 2) reaches the target: nothing
    // after it is measured.
    assert_eq!(single.history().len(), 4);
    assert!(single.history()[2].outcome.is_err());
    assert_eq!(batched.history(), single.history());
    assert_eq!(batched.best(), single.best());
    assert!(batched.is_done());
    drop(batched);
    assert_eq!(
        recorder.calls[1],
        Call::Prepare(vec![p(3, 4), p(4, 3), p(5, 2), p(0, 1)], None),
        "the batch is announced whole, the run stopping early or not"
    );
    assert_eq!(recorder.calls.len(), 5);
}

#[test]
fn a_batch_is_prepared_to_start_nothing_after_the_deadline() {
    let space = space();
    let deadline = Instant::now() + Duration::from_secs(3600);
    let mut recorder = Recorder::default();
    let mut session = Session::new(
        &space,
        &mut recorder,
        Budget::evaluations(4).until(deadline),
    );
    session.measure_batch(&[p(2, 2), p(3, 4)]);
    drop(session);
    assert_eq!(
        recorder.calls[0],
        Call::Prepare(vec![p(2, 2), p(3, 4)], Some(deadline))
    );
}

#[test]
fn a_batch_after_the_end_prepares_nothing() {
    let space = space();
    let mut recorder = Recorder::default();
    let mut session = Session::new(&space, &mut recorder, Budget::evaluations(1));
    session.measure(&p(1, 1));
    session.measure_batch(&[p(2, 2), p(3, 3)]);
    assert_eq!(session.history().len(), 1);
    assert_eq!(recorder.calls, [Call::Measure(p(1, 1))]);
}

/// Every strategy that has batches in hand announces them, and measures
/// exactly what it announced, in that order (a run may stop inside a
/// batch only when the budget is spent).
#[test]
fn strategies_measure_what_they_prepare_in_order() {
    let strategies: Vec<Box<dyn Strategy>> = vec![
        Box::new(Evolutionary::knn()),
        Box::new(CoordinateDescent::default()),
        Box::new(Bounded::new(
            Arc::new(|s: &Space, p: &Point| {
                let a = s.value(p, 0).as_f64().unwrap_or(0.0);
                (a - 4.0).abs()
            }),
            12,
        )),
    ];
    for strategy in &strategies {
        let space = space();
        let mut recorder = Recorder::default();
        let mut session = Session::new(&space, &mut recorder, Budget::evaluations(40));
        strategy.run(&mut session, 7);
        let evaluations = session.history().len();
        drop(session);
        let mut pending: Vec<Point> = Vec::new();
        let mut largest = 0;
        for call in &recorder.calls {
            match call {
                Call::Prepare(points, _) => {
                    assert!(
                        pending.is_empty(),
                        "{}: a batch left unmeasured",
                        strategy.name()
                    );
                    largest = largest.max(points.len());
                    pending = points.iter().rev().cloned().collect();
                }
                Call::Measure(point) => {
                    if let Some(next) = pending.pop() {
                        assert_eq!(&next, point, "{}: out of order", strategy.name());
                    }
                }
            }
        }
        assert!(
            pending.is_empty() || evaluations == 40,
            "{}: stopped inside a batch with budget left",
            strategy.name()
        );
        assert!(largest > 1, "{}: never measured a batch", strategy.name());
    }
}

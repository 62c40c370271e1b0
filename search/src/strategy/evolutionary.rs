//! Evolutionary search guided by a learned cost model.
//!
//! 1. The first population is the given start points plus `initial` valid
//!    points spread over each knob's values (see [`spread`]), all measured.
//! 2. Each generation: the cost model is retrained on everything measured;
//!    `candidates` unmeasured valid points are bred from the elite (the best
//!    measured points) by mutation (one or more knobs moved to an adjacent or
//!    any value) and uniform crossover, plus the single-knob neighbours of
//!    the best few points and some random points; the model ranks them. The
//!    batch measured is the model's best `batch · (1 − epsilon)` candidates
//!    plus `batch · epsilon` uniformly random valid points, so that the
//!    regions the model knows nothing about keep being sampled.
//! 3. Every new best point is polished at once by coordinate descent (each
//!    knob in turn set to its best value; with `guided_polish`, only the
//!    model's favourite values of each knob are measured). When the best has not improved
//!    for `patience` generations, coordinate descent starts afresh from the
//!    model's favourite among `candidates` random valid points (a new basin
//!    the model thinks promising). The evolution then goes on while budget
//!    remains, so the search ends polished around its best.
//! 4. A generation whose model expects none of its candidates to beat the
//!    best point measured (it scores the best no worse than its favourite
//!    candidate) is a sign that the model has nothing more to offer around
//!    what it knows; when [`DOUBTS_BEFORE_RESTART`] generations in a row are,
//!    the search counts as stale at once and restarts, instead of measuring
//!    near-copies of the best basin's points until `patience` runs out
//!    (on the recorded convolution spaces that exploitation of the wrong
//!    basin was where the slow seeds spent their evaluations).

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use rand::Rng as _;

use super::coordinate::descend;
use super::{Rng, Strategy, random_unmeasured, random_untaken, rng, spread};
use crate::model::{CostModel, Features};
use crate::session::Session;
use crate::space::{Neighbourhood, Point, Space};

/// Makes a fresh cost model for a run, from the run's seed.
pub type ModelFactory = Arc<dyn Fn(u64) -> Box<dyn CostModel> + Send + Sync>;

/// How much worse than the worst measured time a rejected point is labelled
/// for the model (a factor on the time).
const REJECTED_PENALTY: f64 = 2.0;

/// How many of the best points contribute their whole single-knob
/// neighbourhood to the candidates.
const NEIGHBOURHOOD_OF_BEST: usize = 3;

/// Which share of the candidates are uniformly random valid points.
const RANDOM_CANDIDATES: f64 = 0.25;

/// Which share of the bred candidates come from crossover (the rest from
/// mutation alone).
const CROSSOVER: f64 = 0.3;

/// Generations in a row in which the model expects no candidate to beat the
/// best measured point before the search restarts without waiting for its
/// patience to run out. One made the search leave basins the model was
/// still about to improve (convolution A100's single point within 5% is
/// reached from such a basin).
const DOUBTS_BEFORE_RESTART: usize = 2;

#[derive(Clone)]
pub struct Evolutionary {
    /// Points to start from (a heuristic's choice, earlier winners).
    pub starts: Vec<Point>,
    /// A name for the model, for reports.
    pub model_name: String,
    pub model: ModelFactory,
    pub features: Features,
    /// Points of the space-filling design in the first population.
    pub initial: usize,
    /// Points measured per generation.
    pub batch: usize,
    /// Share of each batch drawn at random.
    pub epsilon: f64,
    /// Candidates the model ranks per generation.
    pub candidates: usize,
    /// How many of the best measured points breed.
    pub elite: usize,
    /// Generations without improvement before coordinate descent restarts
    /// from a new point.
    pub patience: usize,
    /// Whether coordinate descent measures only the model's favourites on
    /// each knob's line (see `guided_line`) rather than the whole line.
    /// Worth it with a model that ranks unseen values well (the trees);
    /// the nearest-neighbour model averages over neighbours and misses
    /// optima at a line's ends, so it polishes whole lines.
    pub guided_polish: bool,
}

impl fmt::Debug for Evolutionary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Evolutionary")
            .field("starts", &self.starts)
            .field("model", &self.model_name)
            .field("initial", &self.initial)
            .field("batch", &self.batch)
            .field("epsilon", &self.epsilon)
            .field("candidates", &self.candidates)
            .field("elite", &self.elite)
            .field("patience", &self.patience)
            .field("guided_polish", &self.guided_polish)
            .finish()
    }
}

impl Evolutionary {
    /// The strategy with default settings and this cost model.
    pub fn new(model_name: impl Into<String>, model: ModelFactory) -> Self {
        Evolutionary {
            starts: Vec::new(),
            model_name: model_name.into(),
            model,
            features: Features::knobs(),
            initial: 10,
            batch: 8,
            epsilon: 0.2,
            candidates: 512,
            elite: 16,
            patience: 4,
            guided_polish: false,
        }
    }

    /// With the built-in k-nearest-neighbour model.
    pub fn knn() -> Self {
        Evolutionary::new("knn", Arc::new(|_| Box::new(crate::model::Knn::default())))
    }

    /// The strategy `max-autotune` runs, and the one the strategy benchmark
    /// scores as ktune's `evolutionary`: gradient-boosted trees regressing
    /// the log of the time (which ranked better than `rank:pairwise` over
    /// the recorded spaces, `bench/results/strategies/ktune.jsonl`) where
    /// the `xgboost` feature is built, else the nearest-neighbour model.
    pub fn max_autotune() -> Self {
        #[cfg(feature = "xgboost")]
        {
            Evolutionary::xgboost(crate::model::XgbObjective::Regression)
        }
        #[cfg(not(feature = "xgboost"))]
        {
            Evolutionary::knn()
        }
    }

    /// With gradient-boosted trees.
    #[cfg(feature = "xgboost")]
    pub fn xgboost(objective: crate::model::XgbObjective) -> Self {
        let name = match objective {
            crate::model::XgbObjective::RankPairwise => "xgb-rank",
            crate::model::XgbObjective::Regression => "xgb-reg",
        };
        Evolutionary {
            guided_polish: true,
            ..Evolutionary::new(
                name,
                Arc::new(move |seed| Box::new(crate::model::XgbModel::new(objective, seed))),
            )
        }
    }
}

impl Strategy for Evolutionary {
    fn name(&self) -> String {
        format!("evolutionary-{}", self.model_name)
    }

    fn run(&self, session: &mut Session<'_>, seed: u64) {
        let mut rng = rng(seed);
        let mut run = Run {
            space: session.space(),
            features: Vec::new(),
            polished: HashSet::new(),
        };
        let mut model = (self.model)(seed);
        // The design avoids the starts as it would once they are measured:
        // the first population is one batch.
        let starts: HashSet<&Point> = self.starts.iter().collect();
        let design = spread(run.space, self.initial, &mut rng, |p| {
            session.is_measured(p) || starts.contains(p)
        });
        let first: Vec<Point> = self.starts.iter().cloned().chain(design).collect();
        session.measure_batch(&first);
        let mut best = session.best().map(|(_, t)| t);
        let mut stale = 0;
        let mut doubts = 0;
        while !session.is_done() {
            let mut start = run.unpolished_best(session);
            if start.is_none() && stale >= self.patience {
                run.fit(session, model.as_mut(), &self.features);
                start = run.restart(session, model.as_ref(), self, &mut rng);
            }
            if let Some(start) = start {
                run.polished.insert(start.clone());
                if self.guided_polish {
                    run.fit(session, model.as_mut(), &self.features);
                }
                let mut filter = |session: &Session<'_>, line: Vec<Point>| {
                    if self.guided_polish {
                        guided_line(session, line, model.as_ref(), &self.features)
                    } else {
                        line
                    }
                };
                if let Some(end) =
                    descend(session, start, Neighbourhood::Any, &mut rng, &mut filter)
                {
                    run.polished.insert(end);
                }
                best = session.best().map(|(_, t)| t);
                stale = 0;
                continue;
            }
            run.fit(session, model.as_mut(), &self.features);
            let pool = run.breed(session, self, &mut rng);
            if pool.is_empty() {
                // Nothing to breed: measure at random, or stop when every
                // valid point has been measured.
                let Some(p) = random_unmeasured(session, &mut rng) else {
                    return;
                };
                session.measure(&p);
                continue;
            }
            let rows: Vec<Vec<f32>> = pool
                .iter()
                .map(|p| self.features.of(run.space, p))
                .collect();
            let scores = model.predict(&rows);
            let mut order: Vec<usize> = (0..pool.len()).collect();
            order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
            // Once stale, the restart above had no point to start from, and
            // the batch is measured whatever the model expects.
            if stale < self.patience {
                let favourite = scores[order[0]];
                if run.expects_no_gain(session, model.as_ref(), &self.features, favourite) {
                    doubts += 1;
                    if doubts >= DOUBTS_BEFORE_RESTART {
                        doubts = 0;
                        stale = self.patience;
                        continue;
                    }
                } else {
                    doubts = 0;
                }
            }
            let explore = ((self.batch as f64) * self.epsilon).round() as usize;
            let exploit = self.batch.saturating_sub(explore).max(1);
            // The random draws avoid the model's choices as they would once
            // those are measured: the generation is one batch.
            let mut batch: Vec<(Point, Option<f64>)> = order
                .iter()
                .take(exploit)
                .map(|&i| (pool[i].clone(), Some(scores[i])))
                .collect();
            let mut chosen: HashSet<Point> = batch.iter().map(|(p, _)| p.clone()).collect();
            for _ in 0..explore {
                let drawn = random_untaken(run.space, &mut rng, |p| {
                    session.is_measured(p) || chosen.contains(p)
                });
                if let Some(p) = drawn {
                    chosen.insert(p.clone());
                    batch.push((p, None));
                }
            }
            session.measure_batch_predicted(&batch);
            let now = session.best().map(|(_, t)| t);
            if now < best || best.is_none() && now.is_some() {
                best = now;
                stale = 0;
            } else {
                stale += 1;
            }
        }
    }
}

/// The points of a knob's line worth measuring: the model's favourites,
/// about half the square root of the line's length of them and at least
/// 2, all of the line's points when the model is untrained (it scores
/// everything alike). Where a knob matters little, its line's points are
/// near-copies of each other, and measuring more of them spends the
/// budget on noise: on the recorded pnpoly space, whose 31 block sizes
/// are within a few percent of each other in its fast basin, the slow
/// seeds measured six of them on every polish (the whole square root);
/// three took its median from 27 to 20 evaluations over 200 seeds
/// (the other spaces: `bench/results/strategies/README.md`).
fn guided_line(
    session: &Session<'_>,
    line: Vec<Point>,
    model: &dyn CostModel,
    features: &Features,
) -> Vec<Point> {
    let space = session.space();
    let rows: Vec<Vec<f32>> = line.iter().map(|p| features.of(space, p)).collect();
    let scores = model.predict(&rows);
    if scores.windows(2).all(|w| w[0] == w[1]) {
        return line;
    }
    let keep = (((line.len() as f64).sqrt() / 2.0).ceil() as usize).max(2);
    let mut order: Vec<usize> = (0..line.len()).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    order.truncate(keep);
    order.sort_unstable();
    order.into_iter().map(|i| line[i].clone()).collect()
}

/// The state of one run besides the session.
struct Run<'a> {
    space: &'a Space,
    /// The feature rows of the session's history, in order.
    features: Vec<Vec<f32>>,
    /// Points coordinate descent has started from or ended at.
    polished: HashSet<Point>,
}

impl Run<'_> {
    /// The best point, if coordinate descent has not started from it or
    /// ended at it yet.
    fn unpolished_best(&self, session: &Session<'_>) -> Option<Point> {
        let (best, _) = session.best()?;
        (!self.polished.contains(best)).then(|| best.clone())
    }

    /// Whether the model scores the best measured point no worse than
    /// `favourite`, its best candidate's score.
    fn expects_no_gain(
        &self,
        session: &Session<'_>,
        model: &dyn CostModel,
        features: &Features,
        favourite: f64,
    ) -> bool {
        session.best().is_some_and(|(best, _)| {
            model.predict(&[features.of(self.space, best)])[0] <= favourite
        })
    }

    /// Retrains the model on the whole history; nothing to do when nothing
    /// was measured since the last time (a restart and its guided polish
    /// follow a generation without measuring, and the models train
    /// deterministically).
    fn fit(&mut self, session: &Session<'_>, model: &mut dyn CostModel, features: &Features) {
        let history = session.history();
        if !history.is_empty() && history.len() == self.features.len() {
            return;
        }
        for e in &history[self.features.len()..] {
            self.features.push(features.of(self.space, &e.point));
        }
        let worst = history
            .iter()
            .filter_map(|e| e.outcome.as_ref().ok().map(|m| m.time))
            .fold(f64::NEG_INFINITY, f64::max);
        if worst == f64::NEG_INFINITY {
            return;
        }
        let rejected = (worst * REJECTED_PENALTY).ln();
        let costs: Vec<f64> = history
            .iter()
            .map(|e| e.outcome.as_ref().map_or(rejected, |m| m.time.ln()))
            .collect();
        model.fit(&self.features, &costs);
    }

    /// A fresh start for coordinate descent when the search is stale: the
    /// model's favourite among random unmeasured valid points.
    fn restart(
        &self,
        session: &Session<'_>,
        model: &dyn CostModel,
        config: &Evolutionary,
        rng: &mut Rng,
    ) -> Option<Point> {
        let mut seen = HashSet::new();
        let pool: Vec<Point> = (0..config.candidates)
            .filter_map(|_| self.space.random_valid(rng))
            .filter(|p| !session.is_measured(p) && seen.insert(p.clone()))
            .collect();
        let rows: Vec<Vec<f32>> = pool
            .iter()
            .map(|p| config.features.of(self.space, p))
            .collect();
        let scores = model.predict(&rows);
        (0..pool.len())
            .min_by(|&a, &b| scores[a].total_cmp(&scores[b]))
            .map(|i| pool[i].clone())
    }

    /// Unmeasured valid candidates, without duplicates, in the order made.
    fn breed(&self, session: &Session<'_>, config: &Evolutionary, rng: &mut Rng) -> Vec<Point> {
        let mut ranked: Vec<(f64, &Point)> = session
            .history()
            .iter()
            .filter_map(|e| e.outcome.as_ref().ok().map(|m| (m.time, &e.point)))
            .collect();
        ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
        let elite: Vec<&Point> = ranked
            .iter()
            .take(config.elite.max(1))
            .map(|e| e.1)
            .collect();
        let mut seen = HashSet::new();
        let mut pool = Vec::new();
        let mut offer = |p: Point, pool: &mut Vec<Point>| {
            if !session.is_measured(&p) && seen.insert(p.clone()) {
                pool.push(p);
            }
        };
        for p in elite.iter().take(NEIGHBOURHOOD_OF_BEST) {
            for n in self.space.neighbours(p, Neighbourhood::Any) {
                offer(n, &mut pool);
            }
        }
        let random = ((config.candidates as f64) * RANDOM_CANDIDATES) as usize;
        let bred = config.candidates.saturating_sub(random);
        if !elite.is_empty() {
            let mut tries = 0;
            while pool.len() < bred && tries < bred * 20 {
                tries += 1;
                let child = self.child(&elite, rng);
                if self.space.is_valid(&child) {
                    offer(child, &mut pool);
                }
            }
        }
        for _ in 0..random {
            if let Some(p) = self.space.random_valid(rng) {
                offer(p, &mut pool);
            }
        }
        pool
    }

    /// One child of the elite: a parent (better ones more often), crossed
    /// with another at times, then mutated.
    fn child(&self, elite: &[&Point], rng: &mut Rng) -> Point {
        let pick = |rng: &mut Rng| {
            let u: f64 = rng.random();
            elite[((u * u) * elite.len() as f64) as usize % elite.len()]
        };
        let mut child = pick(rng).clone();
        let crossed = rng.random_bool(CROSSOVER);
        if crossed {
            let other = pick(rng);
            for (k, v) in child.0.iter_mut().enumerate() {
                if rng.random_bool(0.5) {
                    *v = other.0[k];
                }
            }
        }
        if !crossed || rng.random_bool(0.5) {
            self.mutate(&mut child, rng);
        }
        child
    }

    /// Moves one knob, then more with halving probability; each move goes to
    /// an adjacent value or, half the time, to any value.
    fn mutate(&self, point: &mut Point, rng: &mut Rng) {
        let knobs = self.space.knobs();
        let movable: Vec<usize> = (0..knobs.len())
            .filter(|&k| knobs[k].values.len() > 1)
            .collect();
        if movable.is_empty() {
            return;
        }
        loop {
            let k = movable[rng.random_range(0..movable.len())];
            let n = knobs[k].values.len() as u32;
            let here = point.0[k];
            point.0[k] = if rng.random_bool(0.5) {
                let up = rng.random_bool(0.5);
                match (up, here) {
                    (true, h) if h + 1 < n => h + 1,
                    (_, 0) => 1,
                    (false, h) => h - 1,
                    (true, h) => h - 1,
                }
            } else {
                let other = rng.random_range(0..n - 1);
                if other >= here { other + 1 } else { other }
            };
            if !rng.random_bool(0.5) {
                return;
            }
        }
    }
}

//! Search strategies: which points to measure, in which order, within a
//! session's budget.
//!
//! Every strategy is reproducible: its random choices come from a
//! [`ChaCha8Rng`] seeded with the run's seed (ChaCha8's output for a seed is
//! fixed by its specification, so results do not change with crate
//! versions). None measures a point twice: [`Session`] makes a repeated
//! request free, and the strategies skip measured points when choosing.

mod bounded;
mod coordinate;
mod design;
mod evolutionary;
mod random;

pub use bounded::{Bounded, SCORE_BAND};
pub use coordinate::CoordinateDescent;
pub use design::spread;
pub use evolutionary::{Evolutionary, ModelFactory};
pub use random::Random;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::session::Session;
use crate::space::{Point, Space};

/// The random number generator strategies use.
pub type Rng = ChaCha8Rng;

/// A generator for a run's seed.
pub fn rng(seed: u64) -> Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// A search strategy.
pub trait Strategy {
    /// A short name, for reports.
    fn name(&self) -> String;

    /// Measures points through the session until it is done or the strategy
    /// has nothing left to try.
    fn run(&self, session: &mut Session<'_>, seed: u64);
}

/// How many draws of an already measured point in a row make
/// [`random_unmeasured`] list the remaining points instead.
const DRAW_MISSES: usize = 64;

/// A uniformly random valid point not measured yet, or `None` when every
/// valid point has been measured.
pub(crate) fn random_unmeasured(session: &Session<'_>, rng: &mut Rng) -> Option<Point> {
    random_untaken(session.space(), rng, |p| session.is_measured(p))
}

/// A uniformly random valid point for which `taken` is false (drawn as
/// [`random_unmeasured`] draws), or `None` when there is none.
pub(crate) fn random_untaken(
    space: &Space,
    rng: &mut Rng,
    taken: impl Fn(&Point) -> bool,
) -> Option<Point> {
    for _ in 0..DRAW_MISSES {
        let p = space.random_valid(rng)?;
        if !taken(&p) {
            return Some(p);
        }
    }
    let mut rest: Vec<Point> = space
        .valid_points()
        .into_iter()
        .filter(|p| !taken(p))
        .collect();
    rest.shuffle(rng);
    rest.pop()
}

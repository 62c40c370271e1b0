//! Random search, the baseline: valid points drawn uniformly without
//! replacement.

use super::{Strategy, random_unmeasured, rng};
use crate::session::Session;

#[derive(Clone, Copy, Debug, Default)]
pub struct Random;

impl Strategy for Random {
    fn name(&self) -> String {
        "random".to_string()
    }

    fn run(&self, session: &mut Session<'_>, seed: u64) {
        let mut rng = rng(seed);
        while !session.is_done() {
            let Some(p) = random_unmeasured(session, &mut rng) else {
                return;
            };
            session.measure(&p);
        }
    }
}

//! The default contraction schedule, chosen from the problem's shape and the
//! target without measuring anything.
//!
//! Rules, in order:
//! 1. **Block tile.** When both `M` and `N` are above 16, the first of
//!    128×128 (8×8 per thread), 128×64, 64×128, 64×64 (4×4), 64×32, 32×64,
//!    32×32 (2×2) — all 256 threads — that is no larger than the problem
//!    rounded up to a power of two along `m` and `n` and whose grid fills at
//!    least one wave (`blocks ≥ sm_count`); the smallest fitting one when
//!    none fills a wave. When one of `M`, `N` is at most 16 (decode-style
//!    shapes), that side's tile is the extent rounded up to a power of two
//!    (never split: splitting it rereads the other operand) and the other
//!    side takes the largest of 128, 64, 32 that fills a wave (else 32),
//!    about 128 threads per block. When both are at most 16, one tile
//!    covers the product, grown along `n` to the 32 threads of a warp.
//! 2. **Depth.** `block_k` is the largest power of two up to 64 for which
//!    each thread stages at most 32 elements of A and B per step (up to 4
//!    outputs per thread), 16 (up to 16 outputs) or 8 (more: registers go
//!    to accumulators), and no deeper than `K` rounded up to a power of
//!    two. Deep steps keep more loads in flight for the small tiles of
//!    narrow problems.
//! 3. **Vectors.** Each operand's global loads are as wide (up to 16 bytes)
//!    as its layout and alignment allow.
//! 4. If a choice fails validation (it should not), smaller tiles are tried,
//!    down to a 1×32 tile that fits every target.

use super::{Layout, MatmulPlan, Tiles};
use crate::ir::Kernel;
use crate::schedule::Schedule;
use crate::target::SmVersion;

/// The 256-thread tiles for large problems, preferred first:
/// `(block_m, block_n, thread_m, thread_n)`.
const LARGE: [(u32, u32, u32, u32); 7] = [
    (128, 128, 8, 8),
    (128, 64, 8, 4),
    (64, 128, 4, 8),
    (64, 64, 4, 4),
    (64, 32, 4, 2),
    (32, 64, 2, 4),
    (32, 32, 2, 2),
];

/// A narrow side's extent at or below which its tile is never split.
const NARROW: u32 = 16;

/// The default schedule for a contraction on `target`.
pub fn heuristic(kernel: &Kernel, plan: &MatmulPlan, target: SmVersion) -> Schedule {
    let shape = Shape {
        m: plan.m_extent(kernel),
        n: plan.n_extent(kernel),
        k: plan.k_extent(kernel),
        batch: plan.batch_count(kernel),
        sm_count: target.limits().sm_count,
    };
    candidates(&shape)
        .into_iter()
        .find_map(|c| finish(kernel, plan, target, &shape, c))
        .unwrap_or(Tiles {
            block_m: 1,
            block_n: 32,
            block_k: 1,
            thread_m: 1,
            thread_n: 1,
            vector_a: 1,
            vector_b: 1,
        })
        .to_schedule()
}

struct Shape {
    m: u32,
    n: u32,
    k: u32,
    batch: u64,
    sm_count: u32,
}

impl Shape {
    fn blocks(&self, (bm, bn, _, _): (u32, u32, u32, u32)) -> u64 {
        u64::from(self.m.div_ceil(bm)) * u64::from(self.n.div_ceil(bn)) * self.batch
    }

    fn fills_wave(&self, c: (u32, u32, u32, u32)) -> bool {
        self.blocks(c) >= u64::from(self.sm_count)
    }
}

/// Block and thread tiles in the order they are tried (rule 1, then the
/// fallbacks of rule 4).
fn candidates(s: &Shape) -> Vec<(u32, u32, u32, u32)> {
    let mut out = Vec::new();
    let (pm, pn) = (s.m.next_power_of_two(), s.n.next_power_of_two());
    if s.m <= NARROW && s.n <= NARROW {
        let bn = pn.max(32 / pm);
        out.push((pm, bn, 1, 1));
    } else if s.m <= NARROW {
        out.push(narrow(s, pm, |wide, narrow_tile, t_wide, t_narrow| {
            (narrow_tile, wide, t_narrow, t_wide)
        }));
    } else if s.n <= NARROW {
        out.push(narrow(s, pn, |wide, narrow_tile, t_wide, t_narrow| {
            (wide, narrow_tile, t_wide, t_narrow)
        }));
    } else {
        let fits: Vec<_> = LARGE
            .iter()
            .copied()
            .filter(|(bm, bn, _, _)| *bm <= pm && *bn <= pn)
            .collect();
        let fits = if fits.is_empty() {
            LARGE.to_vec()
        } else {
            fits
        };
        let wave = fits.iter().find(|c| s.fills_wave(**c));
        out.extend(wave.or(fits.last()).copied());
    }
    out.extend(LARGE.iter().rev());
    out.push((1, 32, 1, 1));
    out
}

/// Tiles for a problem with one narrow side of padded extent `p`: the narrow
/// side unsplit, the wide side the largest of 128/64/32 that fills a wave.
/// `orient(wide, narrow, thread_wide, thread_narrow)` builds the tuple.
fn narrow(
    s: &Shape,
    p: u32,
    orient: impl Fn(u32, u32, u32, u32) -> (u32, u32, u32, u32),
) -> (u32, u32, u32, u32) {
    let t_narrow = (p / 8).max(1);
    let lanes_narrow = p / t_narrow;
    let options: Vec<_> = [128, 64, 32]
        .into_iter()
        .map(|wide| {
            let t_wide = (wide * lanes_narrow / 128).clamp(1, 8);
            orient(wide, p, t_wide, t_narrow)
        })
        .collect();
    options
        .iter()
        .copied()
        .find(|c| s.fills_wave(*c))
        .unwrap_or(options[2])
}

/// Completes a tile choice with `block_k` and vector widths (rules 2 and 3);
/// `None` when it does not validate.
fn finish(
    kernel: &Kernel,
    plan: &MatmulPlan,
    target: SmVersion,
    s: &Shape,
    (block_m, block_n, thread_m, thread_n): (u32, u32, u32, u32),
) -> Option<Tiles> {
    let threads = (block_m / thread_m) * (block_n / thread_n);
    let per_thread = match thread_m * thread_n {
        0..=4 => 32,
        5..=16 => 16,
        _ => 8,
    };
    let mut block_k = 64;
    while block_k > 1 && (block_m + block_n) * block_k > per_thread * threads {
        block_k /= 2;
    }
    let block_k = block_k.min(s.k.next_power_of_two());
    let mut tiles = Tiles {
        block_m,
        block_n,
        block_k,
        thread_m,
        thread_n,
        vector_a: 1,
        vector_b: 1,
    };
    let valid = |t: Tiles| Layout::new(kernel, plan, t, target).is_ok();
    if !valid(tiles) {
        return None;
    }
    for v in [8, 4, 2] {
        let t = Tiles {
            vector_a: v,
            ..tiles
        };
        if valid(t) {
            tiles = t;
            break;
        }
    }
    for v in [8, 4, 2] {
        let t = Tiles {
            vector_b: v,
            ..tiles
        };
        if valid(t) {
            tiles = t;
            break;
        }
    }
    Some(tiles)
}

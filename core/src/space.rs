//! Schedule spaces: the points a kernel can be lowered with on a target.
//!
//! This is a first version, a grid of knobs per op class, used to verify
//! the lowerings over many points and to sample candidates; the schedule
//! space issue (4) extends it with the remaining knobs and constraints and
//! its order may change then. Every point returned lowers
//! ([`crate::lower::lower`] accepts it); the order is deterministic.
//!
//! The grids, before the lowering's own constraints filter them:
//! - **Elementwise**: `block` ∈ {32, 64, 128, 256} × `per_thread` ∈
//!   {1, 2, 4, 8} × `vector` ∈ {1, 2, 4}, minus blocks more than twice as
//!   large as the whole output needs.
//! - **Rows**: `threads_per_row` every power of two up to the row length
//!   (at least 64, so that rows spanning several warps are always in the
//!   space; at most 1024) × blocks of 32, 64, 128 or 256 threads ×
//!   `vector` ∈ {1, 2, 4}, minus blocks holding more than twice as many
//!   rows as there are.
//! - **Matmul**: `block_m`, `block_n` ∈ {16, 32, 64, 128} (up to the next
//!   power of two of the extent, at least 16) × `block_k` ∈ {8, 16, 32} ×
//!   thread tiles {1×1, 1×2, 2×1, 2×2, 2×4, 4×2, 4×4, 4×8, 8×4, 8×8}, each
//!   with scalar loads and with the widest vector loads the kernel allows.
//! - **Generic**: `block` ∈ {32, 64, 128, 256, 512}, minus blocks more than
//!   twice as large as the output.

use crate::ir::{Expr, Kernel};
use crate::lower::classify::{OpClass, classify};
use crate::lower::lower;
use crate::lower::matmul::{MatmulPlan, Tiles};
use crate::schedule::Schedule;
use crate::target::SmVersion;

/// The schedule points of `kernel`'s op class on `target`, each valid.
pub fn candidates(kernel: &Kernel, target: SmVersion) -> Vec<Schedule> {
    let points = match classify(kernel) {
        OpClass::Elementwise => elementwise(kernel),
        OpClass::Rows(plan) => {
            let reduced = plan.reductions().filter_map(|r| match kernel.expr(r) {
                Expr::Reduce { var, .. } => Some(kernel.extent(*var)),
                _ => None,
            });
            let inner: u32 = plan.inner_vars.iter().map(|v| kernel.extent(*v)).product();
            let rows: u32 = plan.row_vars.iter().map(|v| kernel.extent(*v)).product();
            let length = reduced.chain([inner]).max().unwrap_or(1);
            rows_grid(length, rows)
        }
        OpClass::Matmul(plan) => return matmul(kernel, &plan, target),
        OpClass::Generic => [32, 64, 128, 256, 512]
            .into_iter()
            .filter(|b| fits(*b, output_len(kernel)))
            .map(|block| Schedule::Generic { block })
            .collect(),
    };
    points
        .into_iter()
        .filter(|s| lower(kernel, s, target).is_ok())
        .collect()
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

fn output_len(kernel: &Kernel) -> u64 {
    kernel.len_of(&kernel.output)
}

/// Whether `work` units of a block are not more than twice what `total`
/// needs (the smallest block always fits).
fn fits(work: u32, total: u64) -> bool {
    work <= 32 || u64::from(work / 2) < total
}

fn elementwise(kernel: &Kernel) -> Vec<Schedule> {
    let len = output_len(kernel);
    let mut out = Vec::new();
    for block in [32, 64, 128, 256] {
        for per_thread in [1, 2, 4, 8] {
            for vector in [1, 2, 4] {
                if block > 32 && !fits(block * per_thread * vector, len) {
                    continue;
                }
                out.push(Schedule::Elementwise {
                    block,
                    per_thread,
                    vector,
                });
            }
        }
    }
    out
}

fn rows_grid(length: u32, rows: u32) -> Vec<Schedule> {
    let max_threads = length.next_power_of_two().clamp(64, 1024);
    let mut out = Vec::new();
    let mut threads_per_row = 1;
    while threads_per_row <= max_threads {
        for block in [32, 64, 128, 256] {
            if block % threads_per_row != 0 {
                continue;
            }
            let rows_per_block = block / threads_per_row;
            if rows_per_block > 1 && !fits(rows_per_block, u64::from(rows)) {
                continue;
            }
            for vector in [1, 2, 4] {
                out.push(Schedule::Rows {
                    threads_per_row,
                    rows_per_block,
                    vector,
                });
            }
        }
        if threads_per_row > 256 {
            for vector in [1, 2, 4] {
                out.push(Schedule::Rows {
                    threads_per_row,
                    rows_per_block: 1,
                    vector,
                });
            }
        }
        threads_per_row *= 2;
    }
    out
}

const THREAD_TILES: [(u32, u32); 10] = [
    (1, 1),
    (1, 2),
    (2, 1),
    (2, 2),
    (2, 4),
    (4, 2),
    (4, 4),
    (4, 8),
    (8, 4),
    (8, 8),
];

fn matmul(kernel: &Kernel, plan: &MatmulPlan, target: SmVersion) -> Vec<Schedule> {
    let sizes = |extent: u32| {
        let cap = extent.next_power_of_two().max(16);
        [16, 32, 64, 128].into_iter().filter(move |b| *b <= cap)
    };
    let ok = |t: Tiles| lower(kernel, &t.to_schedule(), target).is_ok();
    let mut out = Vec::new();
    for block_m in sizes(plan.m_extent(kernel)) {
        for block_n in sizes(plan.n_extent(kernel)) {
            for block_k in [8, 16, 32] {
                for (thread_m, thread_n) in THREAD_TILES {
                    let scalar = Tiles {
                        block_m,
                        block_n,
                        block_k,
                        thread_m,
                        thread_n,
                        vector_a: 1,
                        vector_b: 1,
                    };
                    if !(32..=256).contains(&scalar.threads()) || !ok(scalar) {
                        continue;
                    }
                    out.push(scalar.to_schedule());
                    let widest = |base: Tiles, set: fn(Tiles, u32) -> Tiles| {
                        [8, 4, 2]
                            .into_iter()
                            .map(|v| set(base, v))
                            .find(|t| ok(*t))
                            .unwrap_or(base)
                    };
                    let wide = widest(scalar, |t, v| Tiles { vector_a: v, ..t });
                    let wide = widest(wide, |t, v| Tiles { vector_b: v, ..t });
                    if wide != scalar {
                        out.push(wide.to_schedule());
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_kernels::{matmul, softmax};

    #[test]
    fn every_point_lowers_and_the_order_is_stable() {
        for k in [softmax(7, 13), softmax(64, 1024), matmul(33, 65, 17)] {
            for target in SmVersion::ALL {
                let points = candidates(&k, target);
                assert!(points.len() > 10, "{}: {} points", k.name, points.len());
                for p in &points {
                    lower(&k, p, target).unwrap_or_else(|e| panic!("{e}"));
                }
                assert_eq!(points, candidates(&k, target));
                let mut unique = points.clone();
                unique.sort_by_key(Schedule::to_json);
                unique.dedup();
                assert_eq!(unique.len(), points.len(), "duplicates");
            }
        }
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
        assert_eq!(sample(&points, 1000, 1), points);
    }
}

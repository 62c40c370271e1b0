//! The default schedule of a kernel on a target, chosen without measuring.
//!
//! The heuristic classifies the kernel ([`classify`]) and picks knobs from
//! the kernel's sizes and the target's [`Limits`](crate::target::Limits):
//!
//! - **Elementwise**: the widest vector width (4, 2, 1) dividing the output's
//!   element count (groups straddle rows where it does not divide the
//!   innermost extent: the output and same-shaped inputs keep their vector
//!   accesses, and no element costs more than with width 1); 256 threads per block (fewer, in whole warps, when the
//!   output has fewer groups); `per_thread` the largest of 8, 4, 2 that still
//!   leaves at least [`WAVES`] full waves of blocks over the target's SMs, so
//!   large outputs get more independent loads per thread and small ones keep
//!   every SM busy.
//! - **Rows**: the vector width as above for the reduced extents (or 4 for
//!   a row read once per pass, peeled, where the model prefers it); threads per
//!   row from the row length `L` (the longest reduction or the row's element
//!   count): about 8 elements per thread for short rows (`L ≤ 256`, sub-warp
//!   groups), a warp up to `L = 1024`, then about 32 elements per thread up
//!   to 512 threads (1024 when there are fewer rows than SMs). Rows per block
//!   make blocks of 128 threads, halved while the grid would leave SMs idle.
//!   A reduction that does not read along contiguous memory (a column sum)
//!   gets one thread per row, so that neighbouring threads read neighbouring
//!   addresses. The row is read once, kept in registers (`cache = 1`), when
//!   more than one pass reads it and each thread keeps at most
//!   [`COMFORTABLE_CACHE`] values; a row too long for that is kept in
//!   shared memory (`cache = 2`), by the threads above or by as many as a
//!   block may have (one row a block), when it fits the target's and the
//!   model ([`crate::model`]) estimates that faster than reading it once
//!   per pass (`cache = 0`) with either of those thread counts, where a
//!   maximum and its sum of exponentials, or a mean and its variance, pair
//!   also in one pass for both (`online = 1`); shuffles combine across warps (`tree = 0`: one
//!   barrier per reduction, where a shared-memory tree needs one per
//!   level).
//! - **Matmul**: the matmul lowering's own heuristic
//!   ([`crate::lower::matmul::heuristic`]).
//! - **Generic**: 128 threads per block.
//!
//! Every schedule it returns lowers (a unit test checks all targets).

use crate::ir::{Expr, Kernel};
use crate::lower::classify::{OpClass, RowPlan, classify};
use crate::lower::rows::{CachePlan, online};
use crate::lower::validate;
use crate::model::estimate;
use crate::schedule::Schedule;
use crate::target::SmVersion;

/// Full waves of blocks an elementwise grid keeps before threads take on
/// more than one group.
pub const WAVES: u32 = 4;

/// Block size of the generic schedule.
pub const GENERIC_BLOCK: u32 = 128;

/// The most values per thread a default rows schedule keeps in registers:
/// with the row's other work the model counts about 80 registers at vector
/// width 4, which leaves an SM room for 24 warps; since every kept value
/// is loaded at once, that still keeps enough bytes in flight to saturate
/// DRAM.
pub const COMFORTABLE_CACHE: u32 = 32;

const ELEMENTWISE_BLOCK: u32 = 256;
const ROWS_BLOCK: u32 = 128;

/// The default schedule for `kernel` on GPUs of `target`. On sm_90 it may
/// use instructions only Hopper has (a 16-bit contraction on warpgroups,
/// `wgmma`), whose module loads on compute capability 9.0 alone;
/// [`portable`] is the default that runs on newer GPUs too.
pub fn heuristic(kernel: &Kernel, target: SmVersion) -> Schedule {
    match classify(kernel) {
        OpClass::Matmul(plan) => crate::lower::matmul::heuristic(kernel, &plan, target),
        class => portable_of(kernel, class, target),
    }
}

/// The default schedule for `kernel` on `target` that also runs on every
/// newer GPU: [`heuristic`] without architecture-specific instructions.
pub fn portable(kernel: &Kernel, target: SmVersion) -> Schedule {
    portable_of(kernel, classify(kernel), target)
}

fn portable_of(kernel: &Kernel, class: OpClass, target: SmVersion) -> Schedule {
    match class {
        OpClass::Elementwise => elementwise(kernel, target),
        OpClass::Rows(plan) => rows(kernel, &plan, target),
        OpClass::Matmul(plan) => crate::lower::matmul::portable(kernel, &plan, target),
        OpClass::Generic => Schedule::Generic {
            block: GENERIC_BLOCK,
        },
    }
}

/// The widest vector width dividing every one of `extents`.
fn widest_vector(extents: impl IntoIterator<Item = u32> + Clone) -> u32 {
    [4, 2, 1]
        .into_iter()
        .find(|v| extents.clone().into_iter().all(|e| e.is_multiple_of(*v)))
        .unwrap_or(1)
}

fn elementwise(kernel: &Kernel, target: SmVersion) -> Schedule {
    let limits = target.limits();
    let total = kernel.len_of(&kernel.output) as u32;
    let vector = widest_vector([total]);
    let groups = total / vector;
    let block = ELEMENTWISE_BLOCK.min(groups.next_multiple_of(limits.warp_size));
    let blocks_per_wave = limits.sm_count * (limits.max_threads_per_sm / block);
    let per_thread = [8, 4, 2]
        .into_iter()
        .find(|p| groups.div_ceil(block * p) >= WAVES * blocks_per_wave)
        .unwrap_or(1);
    Schedule::Elementwise {
        block,
        per_thread,
        vector,
    }
}

fn rows(kernel: &Kernel, plan: &RowPlan, target: SmVersion) -> Schedule {
    let limits = target.limits();
    let warp = limits.warp_size;
    let rows = plan.rows(kernel);
    let reduced: Vec<u32> = plan.reduced_extents(kernel).collect();
    let vector = widest_vector(reduced.iter().copied());
    let length = plan.length(kernel);

    let threads_per_row = if !reads_contiguously(kernel, plan) {
        1
    } else if length <= 256 {
        length.div_ceil(8).next_power_of_two().min(warp)
    } else if length <= 32 * warp {
        warp
    } else {
        let cap = if rows < limits.sm_count { 1024 } else { 512 };
        length
            .div_ceil(32)
            .next_power_of_two()
            .clamp(warp, cap.min(limits.max_threads_per_block))
    };
    let mut rows_per_block = (ROWS_BLOCK / threads_per_row).max(1);
    while rows_per_block > 1
        && rows.div_ceil(rows_per_block) < limits.sm_count
        && (rows_per_block / 2) * threads_per_row >= warp
    {
        rows_per_block /= 2;
    }
    let point_in = |vector, cache, online| Schedule::Rows {
        threads_per_row,
        rows_per_block,
        vector,
        cache,
        tree: 0,
        online,
        cluster: 1,
    };
    let point_with = |cache, online| point_in(vector, cache, online);
    let point = |cache| point_with(cache, 0);
    let kept = CachePlan::of(kernel, plan);
    if kept.is_empty() {
        return point(0);
    }
    if kept.values_per_thread(threads_per_row, vector) <= COMFORTABLE_CACHE
        && validate(kernel, &point(1), target).is_ok()
    {
        return point(1);
    }
    // A row kept in shared memory takes most of an SM's, so its block may
    // get as many threads as a block may have: they hide each pass's
    // waits. So many threads may also beat the narrower block at reading
    // the row once per pass (on the H200, 2026-12-04, layernorm over 4096
    // rows of 50257: 1,024 threads a row 0.613 ms reading it once per
    // pass, 0.607 ms keeping it in shared memory; 512 threads 0.647 and
    // 0.864 ms).
    let widest_in = |vector, cache, online| Schedule::Rows {
        threads_per_row: limits.max_threads_per_block,
        rows_per_block: 1,
        vector,
        cache,
        tree: 0,
        online,
        cluster: 1,
    };
    let widest = |cache, online| widest_in(vector, cache, online);
    // Where two reductions pair (softmax's, a mean and variance), reading the row
    // once per pass takes one pass fewer with `online = 1`. A row that 4
    // does not divide is read 4 values at a time from its first aligned
    // position when read once per pass (peeled; invalid where it cannot be).
    let online = u32::from(!online::pairs(kernel, plan).is_empty());
    [
        point(2),
        widest(2, 0),
        widest(0, 0),
        point_with(0, online),
        widest(0, online),
        point_in(4, 0, online),
        widest_in(4, 0, online),
    ]
    .into_iter()
    .fold(point(0), |best, other| {
        if faster(kernel, &other, &best, target) {
            other
        } else {
            best
        }
    })
}

/// Whether the model estimates `a` faster than `b` (and `a` is valid).
fn faster(kernel: &Kernel, a: &Schedule, b: &Schedule, target: SmVersion) -> bool {
    match (estimate(kernel, a, target), estimate(kernel, b, target)) {
        (Ok(a), Ok(b)) => a.seconds < b.seconds,
        (Ok(_), Err(_)) => true,
        (Err(_), _) => false,
    }
}

/// Whether every reduction reads some tensor along its innermost, contiguous
/// dimension (a row sum does; a column sum does not).
fn reads_contiguously(kernel: &Kernel, plan: &RowPlan) -> bool {
    plan.reductions().all(|r| {
        let Expr::Reduce { var, body, .. } = kernel.expr(r) else {
            return true;
        };
        let mut stack = vec![*body];
        let mut loads = 0;
        while let Some(id) = stack.pop() {
            match kernel.expr(id) {
                Expr::Load { index, .. } => {
                    loads += 1;
                    if index.last() == Some(var) {
                        return true;
                    }
                }
                Expr::Reduce { .. } | Expr::Let(_) => {}
                _ => stack.extend(kernel.children(id)),
            }
        }
        loads == 0
    })
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;
    use crate::lower::lower;
    use crate::syntax::parse_kernel;
    use crate::test_kernels::{layernorm, matmul, softmax};

    fn scale(r: u32, c: u32) -> Kernel {
        parse_kernel(
            quote!(shape(R = #r, C = #c)),
            quote! {
                fn scale(x: Tensor<bf16, (R, C)>, s: Tensor<f32, (R,)>) -> Tensor<bf16, (R, C)> {
                    compute(|r, c| x[r][c] * s[r])
                }
            },
        )
        .expect("valid kernel")
    }

    fn col_sum(r: u32, c: u32) -> Kernel {
        parse_kernel(
            quote!(shape(R = #r, C = #c)),
            quote! {
                fn col_sum(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C,)> {
                    compute(|c| sum(R, |r| x[r][c]))
                }
            },
        )
        .expect("valid kernel")
    }

    #[test]
    fn always_lowers() {
        let sizes = [1, 2, 7, 31, 33, 1000, 1025, 4096, 50257];
        let mut kernels = Vec::new();
        for &r in &sizes {
            for &c in &sizes {
                if u64::from(r) * u64::from(c) <= 1 << 28 {
                    kernels.extend([softmax(r, c), scale(r, c), col_sum(r, c)]);
                }
            }
        }
        kernels.push(matmul(33, 7, 65));
        for k in &kernels {
            for target in SmVersion::ALL {
                let s = heuristic(k, target);
                if let Err(e) = lower(k, &s, target) {
                    panic!(
                        "{}: heuristic {} fails on {target}: {e}",
                        k.name,
                        s.to_json()
                    );
                }
            }
        }
    }

    #[test]
    fn picks() {
        let sm90 = SmVersion::Sm90;
        let rows = |t, r, v, cache| Schedule::Rows {
            threads_per_row: t,
            rows_per_block: r,
            vector: v,
            cache,
            tree: 0,
            online: 0,
            cluster: 1,
        };
        let online = |s: Schedule| match s {
            Schedule::Rows {
                threads_per_row,
                rows_per_block,
                vector,
                cache,
                tree,
                ..
            } => Schedule::Rows {
                threads_per_row,
                rows_per_block,
                vector,
                cache,
                tree,
                online: 1,
                cluster: 1,
            },
            other => other,
        };
        // 1000 elements over 32 threads, 4 at a time: 32 kept per thread.
        assert_eq!(heuristic(&softmax(8192, 1000), sm90), rows(32, 4, 4, 1));
        // 99 and 50 values per thread: too many for registers. A row of
        // 201 KB fits sm_90's shared memory and is read from DRAM once;
        // one block an SM then waits on its own loads, which 512 threads
        // hide as well as 1,024. On the H200 (2026-12-04), 4096 such rows:
        // 0.551 ms kept by 512 threads, 0.569 ms by 1,024; read once per
        // pass, the maximum and the sum of exponentials in one, 4 values
        // at a time (peeled: 50257 is odd), 0.605 ms with 1,024 threads,
        // 0.632 ms with 512. (The model put the kept row 4% behind until
        // it counted the 32 registers ptxas gives a 1,024-thread block.)
        let kept = rows(512, 1, 1, 2);
        assert_eq!(heuristic(&softmax(8192, 50257), sm90), kept);
        assert_eq!(heuristic(&softmax(4096, 50257), sm90), kept);
        // Eight rows leave most SMs idle whichever way: a single read of
        // each row from DRAM decides.
        assert_eq!(heuristic(&softmax(8, 50257), sm90), rows(1024, 1, 1, 2));
        // Layernorm's weights make each pass over a row in shared memory
        // wait on L2, which 1,024 threads hide better than 512 (on the
        // H200, 2026-12-04: 0.607 ms kept with 1,024 threads, 0.864 ms
        // with 512, 0.613 ms read once per pass, the mean and the variance
        // in one).
        assert_eq!(
            heuristic(&layernorm(4096, 50257), sm90),
            rows(1024, 1, 1, 2)
        );
        // sm_86 blocks have 99 KiB: the row cannot be kept, and its 6 MB
        // of L2 holds no rows in flight, so blocks of 512 threads, three an
        // SM, keep the most loads in flight.
        assert_eq!(
            heuristic(&softmax(4096, 50257), SmVersion::Sm86),
            online(rows(512, 1, 4, 0))
        );
        // 8192 one-thread rows: 64 blocks of 128 would leave SMs idle.
        assert_eq!(heuristic(&softmax(8192, 7), sm90), rows(1, 32, 1, 1));
        assert_eq!(heuristic(&softmax(8192, 64), sm90), rows(8, 16, 4, 1));
        // Few rows: smaller blocks, so that more SMs get one.
        assert_eq!(heuristic(&softmax(64, 1000), sm90), rows(32, 1, 4, 1));
        // A column sum reads across rows: one thread per output element;
        // it reads each element once, so there is nothing to keep.
        assert_eq!(heuristic(&col_sum(4096, 65536), sm90), rows(1, 128, 4, 0));

        let elementwise = |b, p, v| Schedule::Elementwise {
            block: b,
            per_thread: p,
            vector: v,
        };
        assert_eq!(heuristic(&scale(7, 7), sm90), elementwise(64, 1, 1));
        // Rows of 1026 that 4 does not divide: groups of 4 straddle rows.
        assert_eq!(heuristic(&scale(1024, 1026), sm90), elementwise(256, 1, 4));
        assert_eq!(heuristic(&scale(1023, 1026), sm90), elementwise(256, 1, 2));
        // 2^28 elements: 2^26 groups of 4; 8 per thread still leaves
        // 32768 blocks, over 4 waves of 132 SMs × 8 blocks.
        assert_eq!(
            heuristic(&scale(16384, 16384), sm90),
            elementwise(256, 8, 4)
        );
        assert_eq!(heuristic(&matmul(33, 7, 65), sm90).class(), "matmul");
    }
}

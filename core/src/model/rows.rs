//! Rows: a kernel reducing each row, then writing it. Streamed like the
//! flat classes, plus its extra passes over each row (a softmax's maximum
//! and sum one pass with `online = 1`), from L2 while the rows in flight
//! across the GPU (every resident block's) fit it and from DRAM otherwise,
//! unless it keeps the row: in registers (`cache = 1`: one read, all of a
//! thread's loads in flight at once, but the kept values cost registers
//! and so occupancy, and each pass folds them one after another, once per
//! wave) or in shared memory (`cache = 2`: one read, the fill's `cp.async`
//! copies or loads in flight, but the block's rows cost shared memory, so
//! occupancy, and the fill and the passes' reads cost shared-memory
//! bandwidth once per wave); and its reduction trees once per wave
//! (shuffles and one barrier across warps, or a barrier per level of a
//! shared-memory tree), and with `cluster` above 1 the exchange across
//! the cluster's blocks.

use crate::ir::Kernel;
use crate::lower::classify::RowPlan;
use crate::lower::rows::{CachePlan, Pass, online, shared_bytes};
use crate::occupancy::{BlockUsage, occupancy};
use crate::schedule::Schedule;
use crate::target::SmVersion;

use super::{BARRIER_CYCLES, SHARED_BYTES_PER_CLOCK, Stream, access_efficiency, input_bytes};

/// A pass's loop iteration over a row kept in shared memory: a shared
/// load, the arithmetic waiting on it and the loop's branch. Fitted to the
/// H200 visit of 2026-12-04 (`ktune-bench --fit`, its screened
/// alternatives included), whose row fills copy by `cp.async`: 80, fitted
/// before them, put 4096 softmax rows of 50257 kept in shared memory at
/// 0.97 ms (512 threads) and 0.78 ms (1,024), measured 0.551 and 0.569;
/// with 20 the estimates are 0.61 and 0.61, and the rank correlation over
/// that case's 13 measured points goes from 0.74 to 0.90; 40 gives 0.87,
/// 10 no better than 20.
const SHARED_ITERATION_CYCLES: f64 = 20.0;
/// How many iterations' waits on L2 overlap in a pass over a row kept in
/// shared memory that also reads a tensor from global memory on every
/// iteration (layernorm's weights): fitted, like the above, to the same
/// visit, where such a pass took far less than an L2 latency an
/// iteration (4096 layernorm rows of 50257 in shared memory: 0.864 ms
/// with 512 threads, 0.607 with 1,024, against softmax's 0.551 and
/// 0.569). With 3 the case's rank correlation is 0.67, with 1 0.42.
const L2_WAITS_OVERLAPPED: f64 = 3.0;
/// A pass's cycles per value a thread keeps in registers (`cache = 1`):
/// the dependent chain of the pass's fold. Fitted to the three H200 visits
/// (`ktune-bench --fit`): with 8, the model's pick among the measured
/// points of `softmax_8192x4096` goes from 1.56× and 1.57× the fastest to
/// 1.01× and 1.00× (second and third visits), `layernorm_8192x4096`'s from
/// 1.32× to 1.01× and 1.02×, the demo's layernorm from 4.65× to 1.05×;
/// their rank correlations rise from 0.40–0.69 to 0.62–0.78, the demo
/// layernorm's from −0.03 to 0.50. With 16, the first visit's softmax pick
/// falls to 1.29×.
const KEPT_VALUE_CYCLES: f64 = 8.0;
/// Latency of a global load that hits L2.
const L2_LATENCY_S: f64 = 300e-9;
/// Cycles of one shuffle step of a reduction tree.
const SHUFFLE_CYCLES: f64 = 30.0;
/// Cycles a reduction of a row spread over a cluster spends combining the
/// blocks' values: a cluster barrier and a load of distributed shared
/// memory, each a few hundred cycles. Not yet measured: a guess, to be
/// refitted from the first GPU run of cluster points.
const CLUSTER_EXCHANGE_CYCLES: f64 = 800.0;

pub(super) fn estimate(
    kernel: &Kernel,
    plan: &RowPlan,
    schedule: &Schedule,
    target: SmVersion,
) -> (BlockUsage, u64, Stream) {
    let Schedule::Rows {
        threads_per_row,
        rows_per_block,
        vector,
        cache,
        tree,
        online,
        cluster,
    } = *schedule
    else {
        unreachable!("a rows point")
    };
    let rows = plan.rows(kernel);
    let length = plan.length(kernel);
    let elem = input_bytes(kernel);
    // A row spread over a cluster's blocks has their threads together.
    let row_threads = threads_per_row * cluster;
    let busy = (f64::from(length) / f64::from(row_threads * vector)).min(1.0);
    let reductions = plan.reductions().count();
    let passes = reductions as f64;
    let levels = f64::from(threads_per_row.trailing_zeros());
    let tree_cycles = if threads_per_row <= 32 {
        levels * SHUFFLE_CYCLES
    } else if tree == 1 {
        (levels + 1.0) * BARRIER_CYCLES
    } else {
        5.0 * SHUFFLE_CYCLES + 2.0 * BARRIER_CYCLES
    } + if cluster > 1 {
        CLUSTER_EXCHANGE_CYCLES
    } else {
        0.0
    };
    let kept = CachePlan::of(kernel, plan);
    let (cached, fill, kept_shared) = match cache {
        1 => (kept.values_per_thread(row_threads, vector), None, 0),
        2 => (
            0,
            Some(kept.fill_cost(kernel, row_threads, vector, target)),
            u64::from(rows_per_block) * kept.shared_bytes_per_row(vector, cluster),
        ),
        _ => (0, None, 0),
    };
    let cluster_slots = match cluster {
        1 => 0,
        _ => (u64::from(rows_per_block) * reductions as u64 * 4).next_multiple_of(16),
    };
    // Kept values are loaded all at once: a thread's whole share of the row
    // is in flight; the fill of a row in shared memory has its `cp.async`
    // copies (the whole share) or its iteration's loads in flight;
    // otherwise one access per loop iteration.
    let in_flight = match (cached, fill) {
        (0, None) => busy * f64::from(vector),
        (0, Some(fill)) => f64::from(fill.in_flight),
        _ => (f64::from(length) / f64::from(row_threads * vector)).ceil() * f64::from(vector),
    };
    // A fill entirely by `cp.async` has the thread's whole share of the
    // row in flight, whatever its width; the passes then read shared
    // memory. On the H200 (2026-12-04), 8192 rows of 4096 kept in shared
    // memory took 0.070 and 0.073 ms with 4 and 1 values an access (128
    // threads), 0.105 and 0.106 ms (1,024).
    let access_efficiency = match fill {
        Some(fill) if fill.registers == 0 => 1.0,
        _ => access_efficiency(f64::from(vector) * elem),
    };
    let threads = threads_per_row * rows_per_block;
    // ptxas holds a block of 1,024 threads that keeps nothing in registers
    // to 32 a thread, so that two such blocks share an SM (every rows
    // point of the benchmark's dry runs, 24 to 32).
    let registers = match (threads, cached) {
        (1024, 0) => 32,
        _ => 32 + 4 * vector + cached + fill.map_or(0, |f| f.registers),
    };
    let usage = BlockUsage {
        threads,
        registers,
        shared_bytes: (shared_bytes(threads_per_row, rows_per_block, 32, tree)
            + cluster_slots
            + kept_shared) as u32,
    };
    // Without a cache the passes after the first, the outputs' included,
    // read the row again (a pair of reductions, with `online = 1`, in one
    // pass): from L2 while the rows in flight across the GPU (a row of the
    // widest input each) fit it, else from DRAM. (Counting the reductions
    // alone missed the outputs' read, and counted every input's bytes per
    // element: the model's pick among the points measured on the H200 on
    // 2026-12-04 was 1.73 times the fastest for softmax over 8192 rows of
    // 4096 and 2.10 times for layernorm, a one-pass `online` point over
    // ones that keep the row; with the reads counted, 1.00 and 1.00.)
    let paired: u64 = match online {
        0 => 0,
        _ => online::pairs(kernel, plan)
            .iter()
            .map(|pair| kept.pass_bytes(kernel, Pass::Reduce(pair.second)))
            .sum(),
    };
    let re_reads =
        f64::from(rows) * kept.re_read_bytes_per_row(kernel).saturating_sub(paired) as f64;
    let limits = target.limits();
    let blocks_per_sm = occupancy(usage, target).blocks_per_sm;
    let rows_in_flight =
        (u64::from(limits.sm_count) * u64::from(blocks_per_sm) * u64::from(rows_per_block)
            / u64::from(cluster))
        .min(u64::from(rows));
    let widest = kernel
        .inputs
        .iter()
        .map(|t| t.dtype.size())
        .max()
        .unwrap_or(4);
    let from_l2 = rows_in_flight as f64 * f64::from(length) * f64::from(widest)
        <= f64::from(target.hardware().l2_bytes);
    let (dram_re_reads, l2_bytes) = match cache {
        0 if from_l2 => (0.0, re_reads),
        0 => (re_reads, 0.0),
        _ => (0.0, 0.0),
    };
    // A row in shared memory is written once and read by every pass that
    // keeps it, at the SM's shared-memory bandwidth, after the fill. Each
    // pass then walks the thread's share of the row an iteration at a
    // time, waiting on its loads: shared memory's latency, or L2's where
    // the pass also reads a tensor no other pass does (layernorm's weights).
    // With a long row a block holds most of an SM's shared memory, so few
    // warps hide those waits (on the H200, 4096 rows of 50257: 1,024
    // threads a row 1.07 ms, 512 1.69 ms, 256 2.91 ms, 128 5.45 ms).
    // A row kept in registers is loaded at once, then every pass folds a
    // thread's values one after another, with the warps it has left to
    // hide that (as many values a thread keeps, as few warps an SM holds).
    let kept_cycles = match cache {
        1 => f64::from(kept.passes().0) * f64::from(cached) * KEPT_VALUE_CYCLES,
        _ => 0.0,
    };
    let shared_cycles = match cache {
        2 => {
            let resident = f64::from(blocks_per_sm.max(1));
            let bandwidth = resident
                * f64::from(rows_per_block)
                * (kept.shared_traffic_per_row() as f64 / f64::from(cluster))
                / SHARED_BYTES_PER_CLOCK;
            let iterations = (f64::from(length) / f64::from(row_threads * vector)).ceil();
            let (all, global) = kept.passes();
            let l2_cycles = L2_LATENCY_S * f64::from(target.hardware().clock_mhz) * 1e6;
            let latency = iterations
                * (f64::from(all) * SHARED_ITERATION_CYCLES
                    + f64::from(global) * l2_cycles / L2_WAITS_OVERLAPPED);
            bandwidth.max(latency)
        }
        _ => 0.0,
    };
    (
        usage,
        u64::from(rows.div_ceil(rows_per_block)) * u64::from(cluster),
        Stream {
            dram_bytes: kernel.compulsory_bytes() as f64 + dram_re_reads,
            l2_bytes,
            in_flight_per_thread: in_flight * elem,
            access_efficiency,
            serial_cycles: passes * tree_cycles + shared_cycles + kept_cycles,
            cached_per_thread: cached,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::{rows, seconds};
    use crate::model::{Bound, estimate};
    use crate::test_kernels::{rows_with, softmax};

    #[test]
    fn one_pass_rows_save_the_re_reads_and_shared_trees_cost_barriers() {
        for k in [softmax(8192, 1000), softmax(64, 1000), softmax(8192, 4096)] {
            // The heuristic keeps the row, and the model agrees.
            let default = crate::heuristic::heuristic(&k, SmVersion::Sm90);
            assert!(
                matches!(default, Schedule::Rows { cache: 1, .. }),
                "{default:?}"
            );
            let one_pass = estimate(&k, &default, SmVersion::Sm90).expect("valid");
            let passes =
                estimate(&k, &rows_with(default.clone(), 0, 0), SmVersion::Sm90).expect("valid");
            assert!(one_pass.seconds < passes.seconds, "{k:?}");
            assert!(one_pass.registers > passes.registers);
            assert_eq!(one_pass.cached_per_thread, 32);
            assert_eq!(passes.cached_per_thread, 0);
        }
        let k = softmax(8192, 4096);
        assert!(seconds(&k, rows(128, 1, 4)) < seconds(&k, rows_with(rows(128, 1, 4), 0, 1)));
        let tree = estimate(&k, &rows_with(rows(128, 1, 4), 0, 1), SmVersion::Sm90).expect("valid");
        assert_eq!(tree.shared_bytes, 2 * 128 * 4);
    }

    #[test]
    fn fewer_threads_wait_longer_on_a_row_in_shared_memory() {
        // One 201 KB row a block fills an SM's shared memory: each pass
        // over it takes an iteration's wait per value a thread holds, until
        // the row's DRAM time hides them. On the H200, 4096 rows, before
        // the fills copied by `cp.async`: 128 threads 2.18 ms, 256 1.23;
        // on 2026-12-04, with them: 512 0.551 ms, 1,024 0.569 ms.
        let k = softmax(4096, 50257);
        let seconds: Vec<f64> = [128, 256, 512, 1024]
            .map(|t| {
                let point = rows_with(rows(t, 1, 1), 2, 0);
                estimate(&k, &point, SmVersion::Sm90)
                    .expect("valid")
                    .seconds
            })
            .to_vec();
        assert!(seconds[..3].is_sorted_by(|a, b| a > b), "{seconds:?}");
        assert!(seconds[0] > 1.3 * seconds[2], "{seconds:?}");
        assert!((seconds[2] / seconds[3] - 1.0).abs() < 0.05, "{seconds:?}");
    }

    #[test]
    fn a_cluster_spreads_a_kept_row_over_its_blocks() {
        // Rows of 50257 kept in shared memory over a cluster of 4 blocks:
        // four blocks a row, each keeping a quarter of it (plus the
        // cluster's slots for the two reductions), so that two blocks of
        // 1,024 threads share an SM, each with a quarter of the passes'
        // iterations.
        let k = softmax(4096, 50257);
        let spread = |cluster| {
            rows_with(rows(1024, 1, 1), 2, 0)
                .with_knob("cluster", cluster)
                .expect("a rows point")
        };
        let one = estimate(&k, &spread(1), SmVersion::Sm90).expect("valid");
        let four = estimate(&k, &spread(4), SmVersion::Sm90).expect("valid");
        assert_eq!(four.blocks, 4 * one.blocks);
        let quarter = (12_565 * 4u32).next_multiple_of(16);
        assert_eq!(four.shared_bytes, 2 * 32 * 4 + 16 + quarter);
        assert_eq!(
            (one.occupancy.blocks_per_sm, four.occupancy.blocks_per_sm),
            (1, 2)
        );
        // Which is faster is not asserted: the exchange's cost is a guess
        // until a GPU measures clusters.
    }

    #[test]
    fn long_rows_are_read_once_from_shared_memory() {
        // Rows of 50257 f32 values: 201 KB each, too many values for
        // registers; kept in shared memory, one block fills an SM, and is
        // faster than reading the row once for each of its three passes.
        let k = softmax(4096, 50257);
        let kept = rows_with(rows(1024, 1, 1), 2, 0);
        let shared = estimate(&k, &kept, SmVersion::Sm90).expect("valid");
        let passes = estimate(&k, &rows_with(kept, 0, 0), SmVersion::Sm90).expect("valid");
        assert!(shared.seconds < passes.seconds);
        assert_eq!(shared.shared_bytes, 2 * 32 * 4 + 201_040);
        assert_eq!(shared.occupancy.blocks_per_sm, 1);
        assert!(passes.shared_bytes < 1024, "{}", passes.shared_bytes);
        assert_eq!(shared.cached_per_thread, 0);

        // Without a cache, softmax reads its rows again: from L2 while the
        // rows in flight fit it (8192 × 4096), from DRAM when they do not
        // (4096 × 50256: 201 KB for each resident block of 132 SMs).
        let bandwidth = SmVersion::Sm90.hardware().dram_bandwidth;
        for (k, threads, from_dram) in [
            (softmax(8192, 4096), 128, false),
            (softmax(4096, 50256), 512, true),
        ] {
            let e = estimate(&k, &rows(threads, 1, 4), SmVersion::Sm90).expect("valid");
            assert_eq!(e.bound, Bound::Memory);
            let re_read = k.compulsory_bytes() as f64 / 2.0;
            let dram = (k.compulsory_bytes() as f64 + re_read) / bandwidth;
            assert_eq!(e.seconds > dram, from_dram, "{}: {}", k.name, e.seconds);
        }
    }
}

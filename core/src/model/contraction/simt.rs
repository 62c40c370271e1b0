//! SIMT contractions (`Schedule::Matmul`), bound by the slowest of: FFMA
//! issue, instruction issue and shared-memory bandwidth, per `block_k`
//! step of all the blocks an SM holds (issue per scheduler: the busiest of
//! the four holds a quarter of the SM's warps, rounded up, and is busy
//! only part of the time when they are few, `SCHEDULER_SLACK`); and the
//! global-memory latency of a step, which the other resident blocks hide,
//! and with `stages` above 1 the block's own `stages - 1` tiles in flight
//! (the more bytes in flight per SM, the less a step waits, while the
//! ring's shared memory may cost resident blocks). Then the traffic and
//! waves every contraction has (`super`).

use crate::lower::matmul::{Layout, Tiles};
use crate::occupancy::BlockUsage;

use super::{Block, Product, Walk};
use crate::model::{
    BARRIER_CYCLES, Bound, Estimate, ISSUE_PER_CLOCK, SCHEDULERS, SHARED_BYTES_PER_CLOCK,
};

/// A scheduler holding `w` warps of a SIMT contraction keeps its pipes
/// busy `w / (w + SCHEDULER_SLACK)` of the time: with few warps, each
/// one's waits (shared loads, barriers) show. Fitted to the three H200
/// visits' measured SIMT schedules (`ktune-bench --fit` on `sgemm_4096`,
/// `sgemm_tf32_4096`, the three long-tail shapes and `demo_ffn_down`, 16
/// case-visits): the mean rank correlation goes from 0.44 without the
/// term to 0.71, and the model's pick among the measured points from
/// 1.41× the fastest (geometric mean) to 1.08×; slack 0.25 and 1 do about
/// as well (0.68 and 0.70), 2 worse (0.62). On the first visit, 33
/// random points a case, the SGEMM's correlation drops from 0.75 to 0.71
/// and the tf32 SGEMM's from 0.73 to 0.58 (its SIMT points now rank below
/// more of its tensor-core ones).
const SCHEDULER_SLACK: f64 = 0.5;

pub(in crate::model) fn estimate(product: &Product<'_>, tiles: Tiles) -> Estimate {
    let layout =
        Layout::new(product.kernel, product.plan, tiles, product.target).expect("validated");
    let block = Block::new(
        product,
        BlockUsage {
            threads: layout.threads,
            registers: layout.registers,
            shared_bytes: layout.shared_bytes,
        },
        Walk {
            block_m: tiles.block_m,
            block_n: tiles.block_n,
            block_k: tiles.block_k,
            group_m: tiles.group_m,
            split: layout.split,
            k_tiles: layout.k_tiles(),
            fill: false,
            persistent: false,
            ping_pong: false,
            shares_b: 1,
        },
    );
    let (hw, resident) = (&block.hw, block.resident);
    let (tm, tn, bk) = (
        f64::from(tiles.thread_m),
        f64::from(tiles.thread_n),
        f64::from(tiles.block_k),
    );

    // One block_k step of one thread.
    let (fm, fn_) = (f64::from(layout.frag_m), f64::from(layout.frag_n));
    let ffma = tm * tn * bk;
    let shared_loads = bk * ((tm / fm).ceil() + (tn / fn_).ceil());
    // A warp's threads walk `n` first: lanes with the same `m` read the same
    // A fragment (a broadcast), so a warp reads distinct A rows for only
    // ⌈32 / threads_n⌉ of them.
    let lanes_n = f64::from(layout.threads_n).min(32.0);
    let warp_shared_bytes = bk * ((32.0 / lanes_n).ceil() * tm + lanes_n * tn) * 4.0;
    // Through registers, a load and a store per access; by `cp.async`, a
    // copy per access (per element where the store transposes), and the
    // ring's slot arithmetic, commit and wait.
    let staging = match tiles.stages {
        1 => 2.0 * f64::from(layout.a.passes + layout.b.passes),
        _ => f64::from(layout.a.copies() + layout.b.copies()) + 8.0,
    };
    let instructions = ffma + shared_loads + staging + 12.0;
    let warps = f64::from(layout.threads) / 32.0;

    let sm_warps = warps * f64::from(resident);
    let ffma_rate = f64::from(hw.fp32_lanes_per_sm) / 32.0;
    // Warps are dealt to the SM's schedulers in turn; the busiest holds
    // `per_scheduler` of them and keeps its pipes busy only part of the
    // time with few to choose from.
    let per_scheduler = (sm_warps / SCHEDULERS).ceil();
    let busy = per_scheduler / (per_scheduler + SCHEDULER_SLACK);
    let issue = per_scheduler * instructions / (ISSUE_PER_CLOCK / SCHEDULERS) / busy;
    let fma = per_scheduler * ffma / (ffma_rate / SCHEDULERS) / busy;
    let shared = sm_warps * (warp_shared_bytes / SHARED_BYTES_PER_CLOCK).max(shared_loads);
    let memory = block.memory_cycles();
    // One stage: a block waits for its tiles, then computes. More: the
    // copies of `stages - 1` tiles ahead overlap its own steps.
    let latency = match tiles.stages {
        1 => memory + warps * instructions / ISSUE_PER_CLOCK + 2.0 * BARRIER_CYCLES,
        s => {
            (memory / f64::from(s - 1)).max(warps * instructions / ISSUE_PER_CLOCK) + BARRIER_CYCLES
        }
    };
    let step = [
        (fma.max(issue), Bound::Compute),
        (shared, Bound::SharedMemory),
        (latency, Bound::Latency),
    ]
    .into_iter()
    .fold(
        (0.0, Bound::Compute),
        |best, c| if c.0 > best.0 { c } else { best },
    );
    block.estimate(product, step)
}

#[cfg(test)]
mod tests {
    use crate::model::tests::{mm, seconds};
    use crate::model::{Bound, estimate};
    use crate::schedule::Schedule;
    use crate::target::SmVersion;
    use crate::test_kernels::matmul;

    #[test]
    fn register_tiles_beat_one_output_per_thread_on_large_products() {
        let k = matmul(4096, 4096, 4096);
        assert!(seconds(&k, mm(128, 8, 16)) < seconds(&k, mm(16, 1, 16)));
        let e = estimate(&k, &mm(128, 8, 16), SmVersion::Sm90).expect("valid");
        assert_ne!(e.bound, Bound::Memory);
        // 2·4096³ FLOPs over three 64 MiB matrices.
        assert!(
            (e.intensity - 2.0 * 4096.0 / 12.0).abs() < 1.0,
            "{}",
            e.intensity
        );
    }

    #[test]
    fn simt_stages_hide_latency_at_a_cost_in_shared_memory() {
        let k = matmul(4096, 4096, 4096);
        let staged = |s: Schedule, stages: u32| {
            let mut values = s.knob_values();
            let at = s.kind().knobs().iter().position(|k| *k == "stages");
            values[at.expect("a stages knob")] = stages;
            s.kind().schedule(&values).expect("same knobs")
        };
        for target in SmVersion::ALL {
            let point = mm(32, 2, 8);
            let serial = estimate(&k, &point, target).expect("valid");
            assert_eq!(serial.bound, Bound::Latency, "{target}");
            let piped = estimate(&k, &staged(point, 3), target).expect("valid");
            assert!(piped.seconds < serial.seconds, "{target}");
            assert_eq!(piped.shared_bytes, 3 * serial.shared_bytes);
        }
    }
}

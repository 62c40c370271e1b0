//! A deterministic time estimate of a run from what it did: its
//! instruction, memory-traffic, barrier and tensor-core counts ([`Stats`]),
//! over the target's published figures
//! ([`ktune_core::target::Hardware`]). It is not a measurement: the same
//! run always gives the same estimate, whatever the host, so that searches
//! on the virtual GPU are reproducible.
//!
//! The run's work is spread evenly over the SMs its blocks occupy. The time
//! is the slowest of:
//! - instruction issue: warp instructions over four schedulers per SM;
//! - tensor cores: `mma` FLOPs over the SM's tensor rate (tf32 FLOPs over
//!   its tf32 rate, half the 16-bit one);
//! - shared memory: bytes over 128 per clock per SM;
//! - L2: global bytes (every load and store) over [`L2_OVER_DRAM`] times
//!   the DRAM bandwidth, in proportion to the SMs in use;
//! - DRAM: the bytes the kernel must move at least, over the bandwidth
//!   (a grid on few SMs reaches less of it);
//! - latency: each barrier interval of a block waits about one memory
//!   round trip, hidden by up to four resident blocks of the same SM;
//!
//! plus a fixed launch cost.
//!
//! A tensor copy (`cp.async.bulk.tensor`) is one instruction of the thread
//! that issues it, however large its box: it costs an issue slot, and its
//! bytes cost memory time, those it reads from the tensor as global loads
//! (L2, and DRAM through the compulsory bytes) and its whole box as shared
//! stores, as `cp.async`'s do, whose every 16 bytes are an instruction of
//! their own.

use ktune_core::SmVersion;
use ktune_core::lower::Launch;

use crate::Stats;

/// L2 bandwidth relative to DRAM's.
pub const L2_OVER_DRAM: f64 = 3.0;
const MEMORY_LATENCY_S: f64 = 600e-9;
const LAUNCH_S: f64 = 3e-6;
const ISSUE_PER_CLOCK: f64 = 4.0;
const SHARED_BYTES_PER_CLOCK: f64 = 128.0;
/// Resident blocks of one SM that overlap each other's memory waits.
const OVERLAP: f64 = 4.0;

/// The estimated seconds of a run that did `stats` under `launch` on
/// `target`, for a kernel that must move `compulsory_bytes` to and from
/// DRAM.
pub fn estimate(stats: &Stats, launch: &Launch, target: SmVersion, compulsory_bytes: u64) -> f64 {
    let hw = target.hardware();
    let limits = target.limits();
    let clock = f64::from(hw.clock_mhz) * 1e6;
    // A persistent kernel's blocks stand for its tiles, spread as a
    // block per tile would be.
    let blocks = match launch.persistent {
        true => u64::from(launch.grid[0]),
        false => stats.blocks,
    }
    .max(1) as f64;
    let threads = launch.block.iter().product::<u32>().max(1);
    let by_threads = limits.max_threads_per_sm / threads;
    let by_shared = match launch.dynamic_shared_bytes {
        0 => limits.max_blocks_per_sm,
        bytes => limits.shared_per_sm / (bytes + limits.reserved_shared_per_block),
    };
    let resident = f64::from(by_threads.min(by_shared).clamp(1, limits.max_blocks_per_sm));
    let sms = f64::from(limits.sm_count);
    let active = blocks.min(sms);
    let share = active / sms;
    let waves = (blocks / (resident * sms)).ceil();

    let issue = stats.instructions as f64 / 32.0 / active / ISSUE_PER_CLOCK / clock;
    let sixteen_bit = (stats.mma_flops - stats.tf32_flops) as f64;
    let tensor = (sixteen_bit / f64::from(hw.tensor_flops_per_sm_clock)
        + stats.tf32_flops as f64 / f64::from(hw.tf32_flops_per_sm_clock))
        / active
        / clock;
    let shared = (stats.shared_load_bytes + stats.shared_store_bytes) as f64
        / active
        / SHARED_BYTES_PER_CLOCK
        / clock;
    let global = (stats.global_load_bytes + stats.global_store_bytes) as f64;
    let l2 = global / (L2_OVER_DRAM * hw.dram_bandwidth * share);
    let dram = compulsory_bytes as f64 / (hw.dram_bandwidth * (2.0 * share).min(1.0));
    let intervals = stats.barriers as f64 / blocks + 1.0;
    let latency = waves * intervals * MEMORY_LATENCY_S / resident.min(OVERLAP);
    [issue, tensor, shared, l2, dram, latency]
        .into_iter()
        .fold(0.0, f64::max)
        + LAUNCH_S
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(blocks: u32, threads: u32) -> Launch {
        Launch {
            grid: [blocks, 1, 1],
            block: [threads, 1, 1],
            dynamic_shared_bytes: 0,
            workspace_bytes: 0,
            persistent: false,
            registers: 0,
        }
    }

    fn stats(blocks: u64, threads: u64) -> Stats {
        Stats {
            blocks,
            threads: blocks * threads,
            ..Stats::default()
        }
    }

    #[test]
    fn more_work_takes_longer_and_the_same_run_the_same_time() {
        let l = launch(1024, 256);
        let light = Stats {
            instructions: 1 << 24,
            ..stats(1024, 256)
        };
        let heavy = Stats {
            instructions: 1 << 28,
            ..light
        };
        let t = |s: &Stats| estimate(s, &l, SmVersion::Sm90, 1 << 20);
        assert!(t(&heavy) > t(&light));
        assert_eq!(t(&light), t(&light));
    }

    #[test]
    fn memory_bound_runs_follow_the_bandwidth() {
        let l = launch(4096, 256);
        let s = Stats {
            instructions: 4096 * 256 * 20,
            global_load_bytes: 1 << 30,
            global_store_bytes: 1 << 30,
            ..stats(4096, 256)
        };
        let bytes = 2u64 << 30;
        let t = estimate(&s, &l, SmVersion::Sm80, bytes);
        let dram = bytes as f64 / SmVersion::Sm80.hardware().dram_bandwidth;
        assert!((t - dram - LAUNCH_S).abs() < 1e-9, "{t} vs {dram}");
        assert!(
            estimate(&s, &l, SmVersion::Sm90, bytes) < t,
            "H100 has more bandwidth"
        );
    }

    #[test]
    fn tf32_tensor_work_takes_twice_as_long_as_16_bit() {
        let l = launch(4096, 128);
        let bf16 = Stats {
            mma_flops: 1 << 40,
            ..stats(4096, 128)
        };
        let tf32 = Stats {
            tf32_flops: 1 << 40,
            ..bf16
        };
        for target in SmVersion::ALL {
            let t = |s: &Stats| estimate(s, &l, target, 0) - LAUNCH_S;
            let ratio = t(&tf32) / t(&bf16);
            assert!((ratio - 2.0).abs() < 1e-9, "{target}: {ratio}");
        }
    }

    /// The same bytes copied by `cp.async` (a thread's instruction each
    /// 16 bytes, with its address arithmetic) and by tensor copies (one
    /// instruction a box of 8 KiB): the memory's time bounds both, and
    /// the tensor copies' few instructions do not add to it.
    #[test]
    fn a_tensor_copy_s_bytes_cost_memory_time_not_issue_slots() {
        let l = launch(1024, 128);
        let bytes = 1024 * 64 * 8192;
        let moved = Stats {
            global_load_bytes: bytes,
            shared_store_bytes: bytes,
            shared_load_bytes: bytes,
            ..stats(1024, 128)
        };
        let per_thread = Stats {
            instructions: bytes / 16 * 6,
            ..moved
        };
        let per_box = Stats {
            instructions: bytes / 8192 * 4,
            ..moved
        };
        let t = |s: &Stats| estimate(s, &l, SmVersion::Sm90, bytes);
        let memory = bytes as f64 / SmVersion::Sm90.hardware().dram_bandwidth;
        assert!(t(&per_box) >= memory);
        assert!(t(&per_box) <= t(&per_thread));
        let issue_free = Stats {
            instructions: 0,
            ..moved
        };
        assert_eq!(t(&per_box), t(&issue_free));
    }

    #[test]
    fn a_grid_on_few_sms_is_slower_than_the_same_work_spread_out() {
        let work = |blocks: u64| Stats {
            instructions: 1 << 26,
            ..stats(blocks, 256)
        };
        let few = estimate(&work(8), &launch(8, 256), SmVersion::Sm90, 0);
        let many = estimate(&work(512), &launch(512, 256), SmVersion::Sm90, 0);
        assert!(few > many);
    }
}

//! The heuristic model: an estimate of a schedule point's run time from the
//! target's published figures, without running anything. It ranks points,
//! so it cares about the ratios between them more than absolute times.
//!
//! Every estimate starts from what a block needs (threads, registers,
//! shared memory), the [`occupancy`] that gives, and the number of blocks.
//! Then, per op class:
//!
//! - **Streaming classes** (elementwise, rows, generic) are bound by memory.
//!   The bandwidth a grid reaches follows Little's law: the bytes its
//!   resident threads keep in flight (loads each thread issues before it
//!   needs the first, times resident threads) over the memory latency,
//!   capped by the DRAM peak and by the width of each access (narrow loads
//!   reach less of the peak). Rows (`rows`) add their extra passes over
//!   each row, what keeping the row costs, and their reduction trees.
//! - **Contractions** are bound by the slowest of their issue,
//!   shared-memory bandwidth and global-memory latency per `block_k` step
//!   of the blocks an SM holds, and their L2 and DRAM traffic, in whole
//!   waves over the SMs: SIMT tiles in `contraction::simt`, tensor cores'
//!   in `contraction::tensor_core`, what both share in `contraction`.
//!
//! Every estimate carries its [`Bound`] and the figures it used, so that
//! tools can show why a point ranks where it does.

use serde::Serialize;

use crate::ir::Kernel;
use crate::lower::classify::OpClass;
use crate::lower::matmul::MatmulPlan;
use crate::lower::{LowerError, Lowering};
use crate::occupancy::{BlockUsage, Occupancy, occupancy};
use crate::schedule::Schedule;
use crate::target::SmVersion;

use contraction::Product;

mod contraction;
mod rows;

/// Latency of a global load that misses the caches.
const MEMORY_LATENCY_S: f64 = 600e-9;
/// A kernel launch and its drain, whatever it does.
const LAUNCH_S: f64 = 3e-6;
/// L2 bandwidth relative to DRAM's.
pub const L2_OVER_DRAM: f64 = 3.0;
/// Shared-memory bytes an SM serves per clock.
const SHARED_BYTES_PER_CLOCK: f64 = 128.0;
/// Warp instructions an SM issues per clock (four schedulers).
const ISSUE_PER_CLOCK: f64 = 4.0;
/// Warp schedulers per SM.
const SCHEDULERS: f64 = 4.0;
/// Cycles of a barrier.
const BARRIER_CYCLES: f64 = 60.0;

/// What limits a point's estimated time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// DRAM bandwidth.
    Memory,
    /// Too few bytes in flight to reach the bandwidth.
    Latency,
    /// Arithmetic or instruction issue.
    Compute,
    /// Shared-memory bandwidth.
    SharedMemory,
    /// L2 bandwidth.
    L2,
}

/// The model's estimate for one schedule point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    pub seconds: f64,
    pub bound: Bound,
    pub occupancy: Occupancy,
    pub threads_per_block: u32,
    pub registers: u32,
    pub shared_bytes: u32,
    pub blocks: u64,
    /// Blocks over what the SMs hold at once.
    pub waves: f64,
    /// FLOPs per byte the kernel must move from DRAM.
    pub intensity: f64,
    /// Values per thread a one-pass rows point keeps in registers (the row
    /// elements each thread owns); 0 for every other point.
    pub cached_per_thread: u32,
}

/// Estimates `schedule`'s run time for `kernel` on `target`; an invalid
/// point is the lowering's error.
pub fn estimate(
    kernel: &Kernel,
    schedule: &Schedule,
    target: SmVersion,
) -> Result<Estimate, LowerError> {
    Model::new(kernel, target).estimate(schedule)
}

/// `points` with their estimates, fastest first (ties keep their order);
/// invalid points are left out.
pub fn rank(kernel: &Kernel, target: SmVersion, points: &[Schedule]) -> Vec<(Schedule, Estimate)> {
    Model::new(kernel, target).rank(points)
}

/// The model of one kernel on one target, with what every estimate needs
/// from the kernel found once (its op class, its arithmetic intensity, a
/// contraction's epilogue): ranking a space estimates thousands of points.
#[derive(Debug, Clone)]
pub struct Model<'k> {
    lowering: Lowering<'k>,
    intensity: f64,
    /// A contraction's epilogue instructions an output
    /// ([`contraction::epilogue_instructions`]); 0 for other classes.
    epilogue: f64,
}

impl<'k> Model<'k> {
    pub fn new(kernel: &'k Kernel, target: SmVersion) -> Model<'k> {
        let lowering = Lowering::new(kernel, target);
        let epilogue = match lowering.class() {
            OpClass::Matmul(plan) => contraction::epilogue_instructions(kernel, plan),
            _ => 0.0,
        };
        let intensity = kernel.flops() as f64 / kernel.compulsory_bytes().max(1) as f64;
        Model {
            lowering,
            intensity,
            epilogue,
        }
    }

    /// The checks every estimate starts with, to check other points by.
    pub fn lowering(&self) -> &Lowering<'k> {
        &self.lowering
    }

    /// [`estimate`] for this model's kernel and target.
    pub fn estimate(&self, schedule: &Schedule) -> Result<Estimate, LowerError> {
        self.lowering.check(schedule)?;
        let (kernel, target) = (self.lowering.kernel(), self.lowering.target());
        let hw = target.hardware();
        let intensity = self.intensity;
        let (usage, blocks, cost) = match (schedule, self.lowering.class()) {
            (Schedule::Matmul(tiles), OpClass::Matmul(plan)) => {
                return Ok(contraction::simt::estimate(&self.product(plan), *tiles));
            }
            (Schedule::Mma(tiles), OpClass::Matmul(plan)) => {
                return Ok(contraction::tensor_core::estimate(
                    &self.product(plan),
                    *tiles,
                ));
            }
            (Schedule::Rows { .. }, OpClass::Rows(plan)) => {
                rows::estimate(kernel, plan, schedule, target)
            }
            _ => flat(kernel, schedule),
        };
        let occ = occupancy(usage, target);
        let resident = f64::from(occ.blocks_per_sm.max(1) * target.limits().sm_count);
        let waves = blocks as f64 / resident;
        let threads = blocks as f64 * f64::from(usage.threads);
        let resident_threads = threads.min(resident * f64::from(usage.threads));
        let peak = hw.dram_bandwidth * cost.access_efficiency;
        let little = resident_threads * cost.in_flight_per_thread / MEMORY_LATENCY_S;
        let (bandwidth, bound) = if little < peak {
            (little, Bound::Latency)
        } else {
            (peak, Bound::Memory)
        };
        let clock = f64::from(hw.clock_mhz) * 1e6;
        let seconds = cost.dram_bytes / bandwidth
            + cost.l2_bytes / (hw.dram_bandwidth * L2_OVER_DRAM)
            + waves.ceil() * cost.serial_cycles / clock
            + LAUNCH_S;
        Ok(Estimate {
            seconds,
            bound,
            occupancy: occ,
            threads_per_block: usage.threads,
            registers: usage.registers,
            shared_bytes: usage.shared_bytes,
            blocks,
            waves,
            intensity,
            cached_per_thread: cost.cached_per_thread,
        })
    }

    /// `points` with their estimates, fastest first (ties keep their
    /// order); invalid points are left out.
    pub fn rank(&self, points: &[Schedule]) -> Vec<(Schedule, Estimate)> {
        let mut ranked: Vec<(Schedule, Estimate)> = points
            .iter()
            .filter_map(|p| Some((p.clone(), self.estimate(p).ok()?)))
            .collect();
        ranked.sort_by(|a, b| a.1.seconds.total_cmp(&b.1.seconds));
        ranked
    }

    fn product<'p>(&'p self, plan: &'p MatmulPlan) -> Product<'p> {
        Product {
            kernel: self.lowering.kernel(),
            plan,
            target: self.lowering.target(),
            intensity: self.intensity,
            epilogue: self.epilogue,
        }
    }
}

/// How a streaming kernel moves its bytes.
struct Stream {
    dram_bytes: f64,
    /// Re-reads served by L2.
    l2_bytes: f64,
    /// Bytes each thread has in flight before it waits.
    in_flight_per_thread: f64,
    /// The fraction of peak bandwidth its access width reaches.
    access_efficiency: f64,
    /// Cycles per wave spent outside memory (reduction trees).
    serial_cycles: f64,
    /// Values per thread kept in registers.
    cached_per_thread: u32,
}

/// The fraction of peak bandwidth loads of `bytes` each reach: 16-byte
/// accesses reach it; 4-byte ones, issuing four times the instructions,
/// about 85%.
fn access_efficiency(bytes: f64) -> f64 {
    0.8 + 0.2 * (bytes.clamp(1.0, 16.0) / 16.0)
}

fn input_bytes(kernel: &Kernel) -> f64 {
    kernel
        .inputs
        .iter()
        .map(|t| f64::from(t.dtype.size()))
        .sum::<f64>()
}

fn flat(kernel: &Kernel, schedule: &Schedule) -> (BlockUsage, u64, Stream) {
    let len = kernel.len_of(&kernel.output);
    let (block, groups_per_thread, vector) = match *schedule {
        Schedule::Elementwise {
            block,
            per_thread,
            vector,
        } => (block, per_thread, vector),
        Schedule::Generic { block } => (block, 1, 1),
        _ => unreachable!("a flat class"),
    };
    let per_block = u64::from(block * groups_per_thread * vector);
    let elem = input_bytes(kernel).max(f64::from(kernel.output.dtype.size()));
    let registers = (16 + 6 * groups_per_thread * vector).min(255);
    let in_flight = f64::from(groups_per_thread * vector) * elem;
    let access = f64::from(vector) * f64::from(kernel.output.dtype.size());
    let reductions = kernel.flops() as f64 / len.max(1) as f64;
    (
        BlockUsage {
            threads: block,
            registers,
            shared_bytes: 0,
        },
        len.div_ceil(per_block),
        Stream {
            dram_bytes: kernel.compulsory_bytes() as f64,
            l2_bytes: 0.0,
            in_flight_per_thread: in_flight,
            access_efficiency: access_efficiency(access),
            serial_cycles: if matches!(schedule, Schedule::Generic { .. }) {
                reductions
            } else {
                0.0
            },
            cached_per_thread: 0,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lower::matmul::Tiles;
    use crate::lower::matmul::mma::MmaTiles;
    use crate::space::candidates;
    use crate::test_kernels::{matmul, softmax};

    pub(super) fn seconds(k: &Kernel, s: Schedule) -> f64 {
        estimate(k, &s, SmVersion::Sm90).expect("valid").seconds
    }

    pub(super) fn mm(block: u32, thread: u32, block_k: u32) -> Schedule {
        Schedule::Matmul(Tiles {
            block_m: block,
            block_n: block,
            block_k,
            thread_m: thread,
            thread_n: thread,
            vector_a: 4,
            vector_b: 4,
            group_m: 1,
            stages: 1,
            split_k: 1,
        })
    }

    pub(super) fn rows(threads_per_row: u32, rows_per_block: u32, vector: u32) -> Schedule {
        Schedule::Rows {
            threads_per_row,
            rows_per_block,
            vector,
            cache: 0,
            tree: 0,
            online: 0,
            cluster: 1,
        }
    }

    #[test]
    fn every_candidate_has_an_estimate_and_ranks_are_ordered() {
        for k in [softmax(33, 1000), matmul(65, 33, 17)] {
            for target in SmVersion::ALL {
                let points = candidates(&k, target);
                let ranked = rank(&k, target, &points);
                assert_eq!(ranked.len(), points.len());
                assert!(ranked.windows(2).all(|w| w[0].1.seconds <= w[1].1.seconds));
                assert!(
                    ranked
                        .iter()
                        .all(|(_, e)| e.seconds.is_finite() && e.seconds > 0.0)
                );
                assert_eq!(ranked, rank(&k, target, &points));
            }
        }
        let k = matmul(64, 64, 64);
        assert!(estimate(&k, &mm(64, 3, 8), SmVersion::Sm90).is_err());
    }

    #[test]
    fn streaming_needs_bytes_in_flight() {
        let k = softmax(8192, 4096);
        // Wide accesses reach more of the bandwidth.
        assert!(seconds(&k, rows(128, 1, 4)) < seconds(&k, rows(128, 1, 1)));
        // One thread per row keeps too few loads in flight.
        let serial = estimate(&k, &rows(1, 32, 4), SmVersion::Sm90).expect("valid");
        assert_eq!(serial.bound, Bound::Latency);
        assert!(seconds(&k, rows(128, 1, 4)) < serial.seconds);
        let best = estimate(&k, &rows(128, 1, 4), SmVersion::Sm90).expect("valid");
        assert_eq!(best.bound, Bound::Memory);
    }

    pub(super) fn seconds_on(k: &Kernel, s: Schedule, target: SmVersion) -> f64 {
        estimate(k, &s, target).expect("valid").seconds
    }

    pub(super) fn bf16_matmul(m: u32, n: u32, k: u32) -> Kernel {
        crate::syntax::parse_kernel(
            quote::quote!(shape(M = #m, N = #n, K = #k)),
            quote::quote! {
                fn mm(a: Tensor<bf16, (M, K)>, b: Tensor<bf16, (K, N)>) -> Tensor<bf16, (M, N)> {
                    compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
                }
            },
        )
        .expect("valid kernel")
    }

    pub(super) fn tc(block: u32, warp: u32, stages: u32) -> Schedule {
        Schedule::Mma(MmaTiles {
            block_m: block,
            block_n: block,
            block_k: 32,
            warp_m: warp,
            warp_n: warp,
            stages,
            group_m: 1,
            split_k: 1,
            min_blocks: 0,
            swizzle: 0,
            prefetch: 0,
            wgmma: 0,
            tail_split: 1,
            persistent: 0,
            producer: 0,
            tma: 0,
            cluster_m: 1,
        })
    }
}

//! Occupancy: how many blocks of a kernel an SM holds at once, and which
//! resource stops it holding more.
//!
//! The rules are those of NVIDIA's occupancy calculator for compute
//! capability 8.0 and newer:
//!
//! - a block occupies `⌈threads / 32⌉` warps; an SM holds at most
//!   `max_threads_per_sm / 32` warps and `max_blocks_per_sm` blocks;
//! - registers are allocated per warp, `registers · 32` rounded up to the
//!   allocation unit (256); the register file is split evenly between the
//!   SM's four sub-partitions and a warp's registers live in one of them, so
//!   the warps it holds are `⌊(registers_per_sm / 4) / per_warp⌋ · 4`; a
//!   block whose registers exceed the whole file does not launch;
//! - shared memory is allocated per block: its static and dynamic bytes
//!   plus the 1 KiB the runtime reserves per block, rounded up to the
//!   allocation unit (128 bytes), out of `shared_per_sm` (the largest
//!   carve-out, which ktune's launcher requests).

use serde::Serialize;

use crate::target::SmVersion;

/// Register-file sub-partitions per SM (four on every target ktune knows).
const SUB_PARTITIONS: u32 = 4;

/// What one block of a kernel needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockUsage {
    pub threads: u32,
    /// Registers per thread, as ptxas reports them.
    pub registers: u32,
    /// Static plus dynamic shared memory, in bytes.
    pub shared_bytes: u32,
}

/// A resource that bounds the number of resident blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    /// The SM's warp slots.
    Warps,
    /// The SM's block slots.
    Blocks,
    Registers,
    SharedMemory,
}

impl Resource {
    pub fn describe(self) -> &'static str {
        match self {
            Resource::Warps => "warps",
            Resource::Blocks => "blocks",
            Resource::Registers => "registers",
            Resource::SharedMemory => "shared memory",
        }
    }
}

/// The occupancy of one kernel on one target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Occupancy {
    /// Resident blocks per SM; 0 when one block does not fit.
    pub blocks_per_sm: u32,
    /// Resident warps per SM.
    pub active_warps: u32,
    /// `active_warps` over the SM's warp slots.
    pub fraction: f64,
    /// Every resource whose bound equals `blocks_per_sm`, in the order of
    /// [`Resource`].
    pub limited_by: Vec<Resource>,
}

/// The occupancy of blocks using `usage` on `target`.
pub fn occupancy(usage: BlockUsage, target: SmVersion) -> Occupancy {
    let limits = target.limits();
    let max_warps = limits.max_threads_per_sm / limits.warp_size;
    let warps = usage.threads.div_ceil(limits.warp_size);

    let by_warps = if usage.threads == 0 || usage.threads > limits.max_threads_per_block {
        0
    } else {
        max_warps / warps
    };
    let by_registers = if usage.registers == 0 {
        u32::MAX
    } else if usage.registers > limits.max_registers_per_thread {
        0
    } else {
        let per_warp =
            (usage.registers * limits.warp_size).next_multiple_of(limits.register_allocation_unit);
        let warps_held = (limits.registers_per_sm / SUB_PARTITIONS / per_warp) * SUB_PARTITIONS;
        warps_held / warps.max(1)
    };
    let per_block_shared = (usage.shared_bytes + limits.reserved_shared_per_block)
        .next_multiple_of(limits.shared_allocation_unit);
    let by_shared = if usage.shared_bytes > limits.max_shared_per_block {
        0
    } else {
        limits.shared_per_sm / per_block_shared
    };

    let bounds = [
        (Resource::Warps, by_warps),
        (Resource::Blocks, limits.max_blocks_per_sm),
        (Resource::Registers, by_registers),
        (Resource::SharedMemory, by_shared),
    ];
    let blocks_per_sm = bounds.iter().map(|&(_, b)| b).min().unwrap_or(0);
    let active_warps = blocks_per_sm * warps;
    Occupancy {
        blocks_per_sm,
        active_warps,
        fraction: f64::from(active_warps) / f64::from(max_warps),
        limited_by: bounds
            .iter()
            .filter(|&&(_, b)| b == blocks_per_sm)
            .map(|&(r, _)| r)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(threads: u32, registers: u32, shared_bytes: u32) -> BlockUsage {
        BlockUsage {
            threads,
            registers,
            shared_bytes,
        }
    }

    #[test]
    fn light_blocks_fill_every_warp_slot() {
        // sm_80, 256 threads, 32 registers, no shared memory: 8 warps per
        // block; 64 warp slots → 8 blocks; registers: 32 · 32 = 1024 per
        // warp, 16384 / 1024 = 16 warps per sub-partition, 64 warps → 8
        // blocks; shared: 1 KiB reserved per block, 164 → 164 blocks.
        let o = occupancy(usage(256, 32, 0), SmVersion::Sm80);
        assert_eq!((o.blocks_per_sm, o.active_warps), (8, 64));
        assert_eq!(o.fraction, 1.0);
        assert_eq!(o.limited_by, vec![Resource::Warps, Resource::Registers]);
    }

    #[test]
    fn registers_round_up_per_warp_and_per_sub_partition() {
        // 40 registers: 1280 per warp (a multiple of 256). 16384 / 1280 =
        // 12.8 → 12 warps per sub-partition, 48 per SM (not 65536 / 1280 =
        // 51): 128-thread blocks (4 warps) → 12 blocks, 48 warps, 75 %.
        let o = occupancy(usage(128, 40, 0), SmVersion::Sm80);
        assert_eq!((o.blocks_per_sm, o.active_warps), (12, 48));
        assert_eq!(o.fraction, 0.75);
        assert_eq!(o.limited_by, vec![Resource::Registers]);
        // 33 registers: 1056 → 1280 per warp, the same as 40.
        assert_eq!(
            occupancy(usage(128, 33, 0), SmVersion::Sm80).blocks_per_sm,
            12
        );
    }

    #[test]
    fn shared_memory_counts_the_reserved_kilobyte() {
        // sm_90, 256 threads, 32 registers, 48 KiB of shared memory: 49 KiB
        // per block with the reserved one; 228 / 49 = 4 blocks, 32 of 64
        // warps.
        let o = occupancy(usage(256, 32, 48 * 1024), SmVersion::Sm90);
        assert_eq!((o.blocks_per_sm, o.active_warps), (4, 32));
        assert_eq!(o.fraction, 0.5);
        assert_eq!(o.limited_by, vec![Resource::SharedMemory]);
        // 100 bytes round up to 1152 with the reserve: 228 KiB / 1152 = 202,
        // so warps (8 blocks) bind instead.
        let o = occupancy(usage(256, 32, 100), SmVersion::Sm90);
        assert_eq!(o.blocks_per_sm, 8);
        assert_eq!(o.limited_by, vec![Resource::Warps, Resource::Registers]);
    }

    #[test]
    fn small_blocks_hit_the_block_slots() {
        // 32-thread blocks with 16 registers: 64 warp slots would hold 64
        // blocks, but sm_80 holds 32 (50 %) and sm_86 16 of its 48 warps.
        let o = occupancy(usage(32, 16, 0), SmVersion::Sm80);
        assert_eq!((o.blocks_per_sm, o.fraction), (32, 0.5));
        assert_eq!(o.limited_by, vec![Resource::Blocks]);
        let o = occupancy(usage(32, 16, 0), SmVersion::Sm86);
        assert_eq!(o.blocks_per_sm, 16);
        assert_eq!(o.fraction, 16.0 / 48.0);
    }

    #[test]
    fn blocks_that_cannot_launch_have_no_occupancy() {
        // 1024 threads · 128 registers = 131072 > 65536: no block fits.
        let o = occupancy(usage(1024, 128, 0), SmVersion::Sm80);
        assert_eq!((o.blocks_per_sm, o.active_warps, o.fraction), (0, 0, 0.0));
        assert_eq!(o.limited_by, vec![Resource::Registers]);
        // More shared memory than a block may have on sm_86 (99 KiB).
        let o = occupancy(usage(128, 32, 100 * 1024), SmVersion::Sm86);
        assert_eq!(o.blocks_per_sm, 0);
        assert_eq!(o.limited_by, vec![Resource::SharedMemory]);
    }

    #[test]
    fn heavy_gemm_threads_on_sm_80() {
        // 256 threads, 128 registers: 4096 per warp, 4 per sub-partition,
        // 16 warps → 2 blocks (25 %); 32 KiB of shared memory would allow 4.
        let o = occupancy(usage(256, 128, 32 * 1024), SmVersion::Sm80);
        assert_eq!((o.blocks_per_sm, o.active_warps), (2, 16));
        assert_eq!(o.fraction, 0.25);
        assert_eq!(o.limited_by, vec![Resource::Registers]);
    }
}

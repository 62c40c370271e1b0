//! Checking a tensor-core schedule against a contraction and a target, and
//! deriving everything the emitter needs from it.

use super::{MmaTiles, tma};
use crate::dtype::DType;
use crate::ir::{Expr, Kernel};
use crate::lower::matmul::output::check_group;
use crate::lower::matmul::pipeline::MAX_STAGES;
use crate::lower::matmul::split::{self, Extents, Split};
use crate::lower::matmul::{MatmulOperand, MatmulPlan, Side};
use crate::lower::{Constraint, Violation, check_block};
use crate::ptx::TensorMap;
use crate::ptx::inst::MmaKind;
use crate::target::SmVersion;

/// Bytes of one `cp.async` chunk.
const CHUNK_BYTES: u32 = 16;

/// Registers a thread may use (the hardware's per-thread maximum).
const REGISTER_BUDGET: u32 = 255;

/// How one operand's tile lies in shared memory and how threads copy it.
///
/// The tile is `block_x × block_k` (`x` is `m` for A, `n` for B), stored
/// as `rows × pitch` elements of `element_bytes`: rows along the operand's
/// non-contiguous dimension, `pitch = cols + pad` (see [`pad`]), or with
/// `swizzled` rows unpadded (`pitch = cols`) and each row's 16-byte chunks
/// permuted: chunk `c` of row `r` is stored at chunk `c ^ key`, `key =
/// (r / key_rows) % swizzle_width`, the XOR touching only the chunk's low
/// bits. An `ldmatrix` phase reads one chunk of eight consecutive rows
/// (from a multiple of 8): their keys take `swizzle_width` distinct
/// values, each shared by the `key_rows` rows that fill one 128-byte line
/// side by side, so the eight chunks land in the eight 16-byte bank
/// groups. Unpadded rows start on 128-byte lines or fill their part of
/// one, so a warp's 32 consecutive 16-byte copies fill four whole lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MmaStaging {
    /// Whether the operand is contiguous along `k` (rows are `x`).
    pub k_major: bool,
    /// 2 (f16, bf16) or 4 (f32, rounded to tf32 as fragments are read).
    pub element_bytes: u32,
    pub block_x: u32,
    pub rows: u32,
    /// Elements per row holding data.
    pub cols: u32,
    /// Elements per row, padding included.
    pub pitch: u32,
    /// Byte offset of the tile within a ring slot.
    pub offset: u32,
    /// 16-byte copies per thread per tile.
    pub passes: u32,
    /// Whether only the first `rows · cols / 8` threads copy (the tile has
    /// fewer chunks than the block has threads).
    pub partial: bool,
    /// Whether rows are unpadded and their chunks XOR-permuted.
    pub swizzled: bool,
    /// Column panels a row is cut into (1: whole rows). A `wgmma` tile
    /// contiguous along `x` and wider than 128 bytes is stored as panels
    /// of 128 bytes, one after another, each `rows` deep and swizzled on
    /// its own: the swizzle atoms side by side along `x` that `wgmma`'s
    /// M- and N-major layouts read.
    pub panels: u32,
}

impl MmaStaging {
    pub fn bytes(&self) -> u32 {
        self.rows * self.pitch * self.element_bytes * self.panels
    }

    /// Bytes of one column panel (the whole tile when it has one).
    pub fn panel_bytes(&self) -> u32 {
        self.rows * self.pitch * self.element_bytes
    }

    /// Elements of one 16-byte chunk.
    pub fn chunk(&self) -> u32 {
        CHUNK_BYTES / self.element_bytes
    }

    /// Chunks per row.
    pub fn row_chunks(&self) -> u32 {
        self.cols / self.chunk()
    }

    /// Chunks of a row that the swizzle permutes among themselves: a
    /// 128-byte line's worth, or the whole row when it is shorter.
    pub fn swizzle_width(&self) -> u32 {
        self.row_chunks().min(LINE_CHUNKS)
    }

    /// Consecutive rows that share a swizzle key: those of one 128-byte
    /// line.
    pub fn key_rows(&self) -> u32 {
        LINE_CHUNKS / self.swizzle_width()
    }

    /// Address registers a lane keeps for its `ldmatrix` reads of a warp
    /// tile `warp_x` wide over `k_steps` k-steps: one for padded rows;
    /// swizzled, one per class of fragment steps along the stored rows
    /// (the emitter's `lane_addresses`).
    pub fn lane_registers(&self, warp_x: u32, k_steps: u32) -> u32 {
        if !self.swizzled {
            return 1;
        }
        let steps = if self.k_major { k_steps } else { warp_x / 16 };
        steps.min(self.swizzle_width() / 2)
    }
}

impl MmaStaging {
    /// Bytes of one stored row.
    pub fn row_bytes(&self) -> u32 {
        self.pitch * self.element_bytes
    }

    /// Checks that `wgmma` can read the tile, in swizzled rows, as one of
    /// its canonical layouts: rows (or panels) of at most 128 bytes (a
    /// `k`-major row is at most 64 16-bit elements, always), and an M- or
    /// N-major tile read by each warpgroup from the start of a swizzle
    /// atom: whole, or in whole 128-byte panels.
    fn check_canonical(&self, name: &str, warp_x: u32) -> Result<(), Violation> {
        let atom = LINE_CHUNKS * CHUNK_BYTES / self.element_bytes;
        if self.k_major || warp_x == self.block_x || warp_x.is_multiple_of(atom) {
            return Ok(());
        }
        Err(Violation::new(
            Constraint::Tiling,
            format!(
                "{name} is not contiguous along k: each warpgroup reads it from the start of a 128-byte panel, but its {warp_x}-wide part of the {}-wide tile is not a multiple of {atom}",
                self.block_x
            ),
        ))
    }

    /// The swizzle mode of a `wgmma` matrix descriptor for the tile's rows
    /// (1: 128 bytes, 2: 64, 3: 32).
    pub fn descriptor_mode(&self) -> u64 {
        match self.row_bytes() {
            128 => 1,
            64 => 2,
            _ => 3,
        }
    }
}

/// 16-byte chunks of a 128-byte line (the 32 banks once over).
const LINE_CHUNKS: u32 = 8;

/// Everything the emitter needs, derived from a checked schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MmaLayout {
    pub tiles: MmaTiles,
    pub kind: MmaKind,
    /// Threads per block, a producer's included.
    pub threads: u32,
    /// Threads that copy the operand tiles: all of them, or a producer's
    /// 128.
    pub copiers: u32,
    /// How a producer's block shares its registers, where it reallocates.
    pub realloc: Option<Realloc>,
    /// Warps along `n`.
    pub warps_n: u32,
    pub a: MmaStaging,
    pub b: MmaStaging,
    /// Bytes of one ring slot (both tiles).
    pub slot_bytes: u32,
    pub shared_bytes: u32,
    /// Registers per thread, as estimated when checking the tiles.
    pub registers: u32,
    pub m_extent: u32,
    pub n_extent: u32,
    pub k_extent: u32,
    /// How `K` is cut, with `split_k` above 1.
    pub split: Option<Split>,
    /// Output tiles: `block_m × block_n` tiles of each batch element.
    pub grid: u64,
    /// With `tma = 1`, the tensor maps of A and B the producer copies
    /// through (the kernel's, in that order).
    pub maps: Vec<TensorMap>,
}

impl MmaLayout {
    pub fn new(
        kernel: &Kernel,
        plan: &MatmulPlan,
        tiles: MmaTiles,
        target: SmVersion,
    ) -> Result<MmaLayout, Violation> {
        let kind = operand_kind(kernel, plan)?;
        let MmaTiles {
            block_m,
            block_n,
            block_k,
            warp_m,
            warp_n,
            stages,
            group_m,
            split_k,
            min_blocks,
            swizzle,
            prefetch,
            wgmma,
            tail_split,
            persistent: _,
            producer: _,
            tma,
            cluster_m,
        } = tiles;
        let warpgroups = wgmma == 1;
        // A warpgroup's `wgmma`s are 64 rows by up to 256 columns.
        let (warp_m_low, warp_n_high) = if warpgroups { (64, 256) } else { (16, 128) };
        for (name, value, low, high) in [
            ("block_m", block_m, 16, 256),
            ("block_n", block_n, 16, 256),
            ("block_k", block_k, 16, 64),
            ("warp_m", warp_m, warp_m_low, 128),
            ("warp_n", warp_n, 16, warp_n_high),
        ] {
            if !value.is_power_of_two() || !(low..=high).contains(&value) {
                return Err(Violation::new(
                    Constraint::Range,
                    format!("{name} = {value}; expected a power of two from {low} to {high}"),
                ));
            }
        }
        if !(1..=MAX_STAGES).contains(&stages) {
            return Err(Violation::new(
                Constraint::Range,
                format!("stages = {stages}; expected 1 to {MAX_STAGES}"),
            ));
        }
        if min_blocks > 1 {
            return Err(Violation::new(
                Constraint::Range,
                format!(
                    "min_blocks = {min_blocks}; expected 0 (ptxas chooses the registers) or 1 (a thread may have as many as ptxas likes)"
                ),
            ));
        }
        match (prefetch, stages) {
            (0, _) | (1, 2..) => {}
            (1, _) => {
                return Err(Violation::new(
                    Constraint::Range,
                    "prefetch = 1 loads the next tile's fragments from its own slot while the current one's are in use; stages = 1 has one slot".to_owned(),
                ));
            }
            _ => {
                return Err(Violation::new(
                    Constraint::Range,
                    format!(
                        "prefetch = {prefetch}; expected 0 (fragments loaded as needed) or 1 (one k-step ahead)"
                    ),
                ));
            }
        }
        match (swizzle, kind) {
            (0, _) | (1, MmaKind::F16 | MmaKind::Bf16) => {}
            (1, MmaKind::Tf32) => {
                return Err(Violation::new(
                    Constraint::Operands,
                    "swizzle = 1 permutes the 16-byte chunks `ldmatrix` reads; tf32 fragments are read word by word from padded rows".to_owned(),
                ));
            }
            _ => {
                return Err(Violation::new(
                    Constraint::Range,
                    format!(
                        "swizzle = {swizzle}; expected 0 (padded rows) or 1 (XOR-swizzled rows)"
                    ),
                ));
            }
        }
        if warpgroups {
            check_warpgroups(tiles, kind, target)?;
        } else if wgmma > 1 {
            return Err(Violation::new(
                Constraint::Range,
                format!(
                    "wgmma = {wgmma}; expected 0 (warps' mma.sync) or 1 (warpgroups' wgmma.mma_async)"
                ),
            ));
        }
        check_cluster(tiles)?;
        // A cluster's blocks take adjacent tiles along `M`, the grid's
        // rows walked in clusters' worth (the last may hang past `M`).
        let cluster_rows = block_m * cluster_m;
        check_group(group_m, cluster_rows, kernel.extent(plan.m))?;
        let k_extent = kernel.extent(plan.k);
        let grid = u64::from(kernel.extent(plan.m).div_ceil(cluster_rows) * cluster_m)
            * u64::from(kernel.extent(plan.n).div_ceil(block_n))
            * plan.batch_count(kernel);
        let extents = Extents {
            k_extent,
            block_k,
            grid,
            tile_values: block_m * block_n,
        };
        let split = match (split_k, tail_split) {
            (_, 1) => Split::new(split_k, extents)?,
            (1, _) => {
                let tail = Split::tail(tail_split, extents, target.limits().sm_count)?;
                // Every block's ring fills its slots from tiles of its own.
                if let Some(slices) = tail.filter(|s| s.tiles < stages) {
                    return Err(Violation::new(
                        Constraint::Split,
                        format!(
                            "tail_split = {tail_split} slices of {} tiles of {block_k} are shallower than the ring's {stages} stages",
                            slices.tiles
                        ),
                    ));
                }
                tail
            }
            _ => {
                return Err(Violation::new(
                    Constraint::Split,
                    format!(
                        "split_k = {split_k} already splits every tile; tail_split = {tail_split} splits the last wave's alone"
                    ),
                ));
            }
        };
        check_persistent(tiles, grid, target)?;
        check_producer(tiles)?;
        if warp_m > block_m || warp_n > block_n {
            return Err(Violation::new(
                Constraint::Tiling,
                format!(
                    "a warp's {warp_m}×{warp_n} tile does not fit the {block_m}×{block_n} block tile"
                ),
            ));
        }
        let threads = tiles.threads();
        check_block(threads, target).map_err(|v| Violation {
            reason: format!(
                "{}·(block_m/warp_m)·(block_n/warp_n){} gives {}",
                if warpgroups { 128 } else { 32 },
                match tiles.producer {
                    0 => "",
                    1 => " + 128 (the producer)",
                    _ => " · 2 (ping-pong) + 128 (the producer)",
                },
                v.reason
            ),
            ..v
        })?;

        let copiers = if tiles.producer >= 1 {
            WARPGROUP
        } else {
            threads
        };
        let a = staging(kernel, plan, Side::A, kind, tiles, copiers)?;
        let b = staging(kernel, plan, Side::B, kind, tiles, copiers)?;
        let b = MmaStaging {
            offset: a.bytes(),
            ..b
        };
        let maps = if tma == 1 {
            vec![
                tma::tensor_map(kernel, plan, Side::A, &a, (block_k, 1))?,
                tma::tensor_map(kernel, plan, Side::B, &b, (block_k, cluster_m))?,
            ]
        } else {
            Vec::new()
        };
        if warpgroups {
            for (s, name, warp_x) in [(&a, "A", warp_m), (&b, "B", warp_n)] {
                s.check_canonical(name, warp_x)?;
            }
        }
        // `wgmma` reads swizzled tiles whose pattern repeats every 1024
        // bytes at most, from slots that keep it in phase.
        let slot_bytes = if warpgroups {
            (a.bytes() + b.bytes()).next_multiple_of(WGMMA_SWIZZLE_PERIOD)
        } else {
            a.bytes() + b.bytes()
        };
        // Beside a producer each slot has two memory barriers (8 bytes
        // each) after the ring, and ping-pong's sets one each.
        let barriers = match tiles.producer {
            0 => 0,
            1 => 16 * stages,
            _ => 16 * stages + 16,
        };
        let shared_bytes = stages * slot_bytes + barriers;
        let max_shared = target.limits().max_shared_per_block;
        if shared_bytes > max_shared {
            let with = if barriers > 0 {
                format!(" and their {barriers} bytes of barriers")
            } else {
                String::new()
            };
            return Err(Violation::new(
                Constraint::SharedMemory,
                format!(
                    "{stages} stages of A and B tiles{with} need {shared_bytes} bytes of shared memory; {target} allows {max_shared} per block"
                ),
            ));
        }
        // Accumulators live throughout; one k-step's A and B fragments (two
        // with `prefetch` and a single k-step a tile: ptxas keeps two
        // steps' either way where a tile has more), the copy pointers
        // (64-bit), the fragments' lane addresses and the addressing around
        // them come on top.
        let k_steps = block_k / kind.k();
        let (accumulators, registers) = if warpgroups {
            // A thread holds 1/128 of its warpgroup's tile; no fragments,
            // two 64-bit descriptors, the copy pointers. Beside a producer
            // a thread copies nothing, but ptxas then spends the registers
            // the block gives it on the epilogue: with a bf16 GELU
            // epilogue (ptxas 12.9), 128 accumulators spill in 224
            // registers and not in 232, 64 spill in 104.
            let accumulators = warp_m * warp_n / 128;
            let registers = if tiles.producer >= 1 {
                accumulators * 7 / 4 + 8
            } else {
                accumulators + 2 * (a.passes + b.passes) + 34
            };
            (accumulators, registers)
        } else {
            let accumulators = (warp_m / 16) * (warp_n / 8) * 4;
            let buffers = if prefetch == 1 && k_steps == 1 { 2 } else { 1 };
            let fragments = ((warp_m / 16) * 4 + (warp_n / 8) * 2) * buffers;
            let lanes = a.lane_registers(warp_m, k_steps) + b.lane_registers(warp_n, k_steps);
            let registers = accumulators + fragments + 2 * (a.passes + b.passes) + lanes + 30;
            (accumulators, registers)
        };
        let realloc = Realloc::new(tiles, target);
        let budget = realloc.map_or(
            REGISTER_BUDGET.min(target.limits().registers_per_sm / threads),
            |r| r.consumers,
        );
        if registers > budget {
            return Err(Violation::new(
                Constraint::Registers,
                format!(
                    "an estimated {registers} registers per thread ({accumulators} accumulators); at most {budget} fit with {threads} threads"
                ),
            ));
        }
        Ok(MmaLayout {
            tiles,
            kind,
            threads,
            copiers,
            realloc,
            warps_n: block_n / warp_n,
            a,
            b,
            slot_bytes,
            shared_bytes,
            registers,
            m_extent: kernel.extent(plan.m),
            n_extent: kernel.extent(plan.n),
            k_extent,
            split,
            grid,
            maps,
        })
    }

    /// The window offset of the first byte past the ring: where a
    /// producer point's memory barriers start.
    pub fn barriers(&self) -> u32 {
        self.tiles.stages * self.slot_bytes
    }

    /// `K` tiles each block's loop runs over: all of them, or its slice's.
    pub fn k_tiles(&self) -> u32 {
        split::k_tiles(self.split, self.k_extent, self.tiles.block_k)
    }

    /// Whether the tiles the blocks run over reach past `K` (so loads
    /// need a `k` guard).
    pub fn k_overhangs(&self) -> bool {
        split::k_overhangs(self.split, self.k_extent, self.tiles.block_k)
    }
}

/// Threads of a warpgroup.
const WARPGROUP: u32 = 128;

/// Registers a producer warpgroup keeps per thread once it has given the
/// rest to the others: the least `setmaxnreg` allows, which its copies'
/// addresses and counters fit in (ptxas 12.9, with edges along every
/// dimension). Two consumer warpgroups then take 240 each, not the 232
/// that 40 would leave them, where two sets of 64 × 256 in ping-pong
/// spilled up to 132 bytes of their epilogue.
const PRODUCER_REGISTERS: u32 = 24;

/// How a block with a producer warpgroup (`producer` 1 or 2) shares its
/// registers: ptxas gives every thread the block's share of the SM's
/// registers at launch (the kernel says one block an SM, `.minnctapersm
/// 1`); the producer then lowers its count to `producer`
/// (`setmaxnreg.dec`) and the others raise theirs to `consumers`
/// (`setmaxnreg.inc`), as far as the block's pool allows. Where the launch
/// share is already as much as the others could take (one of them), the
/// block does not reallocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Realloc {
    /// Each thread's count at launch, which ptxas fixes.
    pub launch: u32,
    pub producer: u32,
    pub consumers: u32,
}

impl Realloc {
    /// The reallocation of a producer point, if it has one.
    pub fn new(tiles: MmaTiles, target: SmVersion) -> Option<Realloc> {
        if tiles.producer == 0 {
            return None;
        }
        let threads = tiles.threads();
        let pool = target.limits().registers_per_sm;
        let launch = (REGISTER_BUDGET.min(pool / threads) / 8) * 8;
        let others = threads - WARPGROUP;
        let share = (pool.min(launch * threads) - WARPGROUP * PRODUCER_REGISTERS) / others;
        let consumers = (share / 8 * 8).min(MAX_REALLOC);
        (consumers > launch).then_some(Realloc {
            launch,
            producer: PRODUCER_REGISTERS,
            consumers,
        })
    }
}

/// The most registers a warpgroup takes with `setmaxnreg.inc` (the count
/// is a multiple of 8, and a thread addresses at most 255).
const MAX_REALLOC: u32 = 248;

/// Checks `producer`: 0, or 1 and 2 for warpgroups (whose ring is read by
/// the tensor cores themselves) over a ring of several slots, with no
/// split of `K` (each block's tiles run whole) and `min_blocks = 1`, which
/// makes ptxas give each thread its share of the SM at launch, as
/// `setmaxnreg` needs; 2 (ping-pong) only for persistent blocks, whose
/// tiles its two sets of warpgroups take in turn.
fn check_producer(tiles: MmaTiles) -> Result<(), Violation> {
    let range = |reason: String| Err(Violation::new(Constraint::Range, reason));
    let producer = tiles.producer;
    match (producer, tiles.wgmma) {
        (0, _) if tiles.tma != 0 => range(format!(
            "tma = {} is how a producer warpgroup copies; producer = 0 has none",
            tiles.tma
        )),
        (0, _) => Ok(()),
        (1 | 2, 1) => {
            if tiles.stages == 1 {
                return range(format!(
                    "producer = {producer} copies into one slot while the others are multiplied; stages = 1 has one"
                ));
            }
            if tiles.min_blocks != 1 {
                return range(format!(
                    "producer = {producer} hands registers between warpgroups (setmaxnreg), which needs each thread's count fixed at launch: min_blocks = 1, not {}",
                    tiles.min_blocks
                ));
            }
            if tiles.split_k > 1 || tiles.tail_split > 1 {
                return Err(Violation::new(
                    Constraint::Split,
                    format!(
                        "producer = {producer} runs each tile's whole K in one block; split_k = {} and tail_split = {} split tiles across blocks",
                        tiles.split_k, tiles.tail_split
                    ),
                ));
            }
            if tiles.tma > 1 {
                return range(format!(
                    "tma = {}; expected 0 (the producer's threads copy by cp.async) or 1 (one thread copies whole tiles by the tensor memory accelerator)",
                    tiles.tma
                ));
            }
            if producer == 2 && tiles.persistent != 1 {
                return range(
                    "producer = 2 has two sets of warpgroups take a block's tiles in turn; a block of one tile (persistent = 0) gives the second none".to_owned(),
                );
            }
            Ok(())
        }
        (1 | 2, _) => range(format!(
            "producer = {producer} is implemented for warpgroups (wgmma = 1); wgmma = 0"
        )),
        (other, _) => range(format!(
            "producer = {other}; expected 0 (every thread copies), 1 (a producer warpgroup copies) or 2 (and two sets of warpgroups take tiles in turn)"
        )),
    }
}

/// Checks `cluster_m`: 1, or 2 where a producer copies by the tensor
/// memory accelerator (`tma = 1`), whose multicast shares B's tiles.
fn check_cluster(tiles: MmaTiles) -> Result<(), Violation> {
    let range = |reason: String| Err(Violation::new(Constraint::Range, reason));
    match tiles.cluster_m {
        1 => Ok(()),
        2 if tiles.tma != 1 => range(format!(
            "cluster_m = 2 shares B's tiles by the tensor memory accelerator's multicast; tma = {}",
            tiles.tma
        )),
        2 => Ok(()),
        other => range(format!(
            "cluster_m = {other}; expected 1 (each block copies its own tiles) or 2 (two blocks along M share B's tiles)"
        )),
    }
}

/// The period of the widest swizzle `wgmma` reads (128-byte rows, 8 of
/// them), which tiles and ring slots start at multiples of.
pub(crate) const WGMMA_SWIZZLE_PERIOD: u32 = 1024;

/// Checks `persistent`: 0, or 1 for warpgroups with a ring of several
/// slots (the one filled ahead), whose tiles are neither split along `K`
/// (each block's ring runs whole tiles) nor fewer than the target's SMs
/// (where every block would compute one; with fewer than the SMs hold at
/// once, the launcher gives each its own block).
fn check_persistent(tiles: MmaTiles, grid: u64, target: SmVersion) -> Result<(), Violation> {
    match (tiles.persistent, tiles.wgmma) {
        (0, _) => Ok(()),
        (1, 1) => {
            if tiles.stages == 1 {
                return Err(Violation::new(
                    Constraint::Range,
                    "persistent = 1 fills the next tile's ring during the current one's epilogue; stages = 1 copies each K tile in its own step".to_owned(),
                ));
            }
            if tiles.split_k > 1 || tiles.tail_split > 1 {
                return Err(Violation::new(
                    Constraint::Split,
                    format!(
                        "persistent = 1 runs each tile's whole K in one block; split_k = {} and tail_split = {} split tiles across blocks",
                        tiles.split_k, tiles.tail_split
                    ),
                ));
            }
            let sms = target.limits().sm_count;
            if grid <= u64::from(sms) {
                return Err(Violation::new(
                    Constraint::Tiling,
                    format!(
                        "persistent = 1 loops over a block's tiles; a grid of {grid} tiles gives each of {target}'s {sms} SMs one at most"
                    ),
                ));
            }
            Ok(())
        }
        (1, _) => Err(Violation::new(
            Constraint::Range,
            "persistent = 1 is implemented for warpgroups (wgmma = 1); wgmma = 0".to_owned(),
        )),
        (other, _) => Err(Violation::new(
            Constraint::Range,
            format!(
                "persistent = {other}; expected 0 (a block per tile) or 1 (blocks looping over tiles)"
            ),
        )),
    }
}

/// The knobs `wgmma = 1` needs: sm_90's instruction, 16-bit operands in
/// swizzled rows (its canonical layouts), and none of the `mma.sync`
/// path's fragment loads.
fn check_warpgroups(tiles: MmaTiles, kind: MmaKind, target: SmVersion) -> Result<(), Violation> {
    if target != SmVersion::Sm90 {
        return Err(Violation::new(
            Constraint::Range,
            format!("wgmma = 1 is sm_90's warpgroup instruction; {target} has none"),
        ));
    }
    if kind == MmaKind::Tf32 {
        return Err(Violation::new(
            Constraint::Operands,
            "wgmma = 1 multiplies f16 or bf16 operands; tf32 products run on mma.sync".to_owned(),
        ));
    }
    for (name, value, want, why) in [
        (
            "swizzle",
            tiles.swizzle,
            1,
            "wgmma reads tiles in swizzled rows",
        ),
        (
            "prefetch",
            tiles.prefetch,
            0,
            "wgmma loads no fragments into registers",
        ),
    ] {
        if value != want {
            return Err(Violation::new(
                Constraint::Range,
                format!("{name} = {value} with wgmma = 1; expected {want} ({why})"),
            ));
        }
    }
    Ok(())
}

/// The `mma` form for the contraction's operands, or why tensor cores do
/// not apply.
pub(crate) fn operand_kind(kernel: &Kernel, plan: &MatmulPlan) -> Result<MmaKind, Violation> {
    let plain = |o: &MatmulOperand| {
        o.value == o.load
            || matches!(kernel.expr(o.value), Expr::Cast(DType::F32, inner) if *inner == o.load)
    };
    let dtype = |o: &MatmulOperand| kernel.input(o.tensor).dtype;
    let name = |o: &MatmulOperand| &kernel.input(o.tensor).name;
    for o in [&plan.a, &plan.b] {
        if !plain(o) {
            return Err(Violation::new(
                Constraint::Operands,
                format!(
                    "the factor reading `{}` is not a plain load (or a cast of one to f32)",
                    name(o)
                ),
            ));
        }
    }
    match (dtype(&plan.a), dtype(&plan.b)) {
        (DType::F16, DType::F16) => Ok(MmaKind::F16),
        (DType::Bf16, DType::Bf16) => Ok(MmaKind::Bf16),
        (DType::F32, DType::F32) if kernel.allow_tf32 => Ok(MmaKind::Tf32),
        (x, y) => Err(Violation::new(
            Constraint::Operands,
            format!(
                "`{}` is {x} and `{}` is {y}; tensor cores need both f16 or both bf16{}",
                name(&plan.a),
                name(&plan.b),
                if (x, y) == (DType::F32, DType::F32) {
                    ", or both f32 with `allow_tf32`"
                } else {
                    ""
                }
            ),
        )),
    }
}

/// Padding (in elements) of each shared-memory row, which keeps rows
/// 16-byte aligned (for `cp.async` and `ldmatrix`) and spreads the rows a
/// warp's fragment reads across the 32 four-byte banks.
///
/// - 16-bit operands: 8 elements (16 bytes). Consecutive rows shift by four
///   banks, so the eight 16-byte rows of an `ldmatrix` phase cover all 32.
/// - f32 operands (tf32 fragments, read one 32-bit word per lane): a lane's
///   word is at row `g`, column `t` (`k`-major tiles: `x` rows, `k`
///   columns) or at row `t`, column `g` (the others), for `g` in 0..8 and
///   `t` in 0..4, plus offsets common to the warp. `k`-major rows pad by 4
///   elements: the pitch is 4 modulo 8 words (`cols` is a multiple of 16),
///   so rows `g` start at eight distinct multiples of 4 banks, each taking
///   4 columns. The others pad by 8: the pitch is 8 modulo 16 words (8 or
///   24 modulo 32), so rows `t` start at banks 0, 8, 16, 24 in some order,
///   each taking 8 columns. Either way the 32 lanes hit 32 banks.
fn pad(kind: MmaKind, k_major: bool) -> u32 {
    match kind {
        MmaKind::F16 | MmaKind::Bf16 => 8,
        MmaKind::Tf32 if k_major => 4,
        MmaKind::Tf32 => 8,
    }
}

/// Chooses how an operand is staged and checks that 16-byte copies reach
/// it aligned.
fn staging(
    kernel: &Kernel,
    plan: &MatmulPlan,
    side: Side,
    kind: MmaKind,
    tiles: MmaTiles,
    threads: u32,
) -> Result<MmaStaging, Violation> {
    let element_bytes = match kind {
        MmaKind::F16 | MmaKind::Bf16 => 2,
        MmaKind::Tf32 => 4,
    };
    let chunk = CHUNK_BYTES / element_bytes;
    let operand = side.operand(plan);
    let (name, block_x, x_extent) = match side {
        Side::A => ("A", tiles.block_m, kernel.extent(plan.m)),
        Side::B => ("B", tiles.block_n, kernel.extent(plan.n)),
    };
    let k_extent = kernel.extent(plan.k);
    // A dimension of extent 1 never moves the address: its stride is moot.
    let live = |stride: u64, extent: u32| if extent > 1 { stride } else { 0 };
    let (sx, sk) = (
        live(operand.stride_x, x_extent),
        live(operand.stride_k, k_extent),
    );
    let misaligned = |why: String| {
        Err(Violation::new(
            Constraint::Alignment,
            format!("16-byte copies of {name} need aligned {chunk}-element runs, but {why}"),
        ))
    };
    let k_major = match (sk, sx) {
        (1, _) | (0, 0) => true,
        (_, 1) => false,
        _ => return misaligned(format!("{name} is contiguous along neither k nor its row")),
    };
    let (contiguous, other) = if k_major {
        (k_extent, (sx, x_extent))
    } else {
        (x_extent, (sk, k_extent))
    };
    if !contiguous.is_multiple_of(chunk) {
        return misaligned(format!("its contiguous extent {contiguous} is not"));
    }
    let strides = std::iter::once(other).chain(
        operand
            .stride_batch
            .iter()
            .zip(&plan.batch)
            .map(|(s, v)| (*s, kernel.extent(*v))),
    );
    if let Some((stride, _)) = strides
        .filter(|(_, e)| *e > 1)
        .find(|(s, _)| !s.is_multiple_of(u64::from(chunk)))
    {
        return misaligned(format!("its stride {stride} is not a multiple of {chunk}"));
    }
    let (rows, cols) = if k_major {
        (block_x, tiles.block_k)
    } else {
        (tiles.block_k, block_x)
    };
    let swizzled = tiles.swizzle == 1;
    let chunks = rows * cols / chunk;
    // `wgmma` reads rows of at most 128 bytes: wider ones (never `k`-major,
    // `block_k` being at most 64) are cut into panels.
    let panels = if tiles.wgmma == 1 {
        (cols * element_bytes).div_ceil(LINE_CHUNKS * CHUNK_BYTES)
    } else {
        1
    };
    Ok(MmaStaging {
        k_major,
        element_bytes,
        block_x,
        rows,
        cols,
        pitch: if swizzled {
            cols / panels
        } else {
            cols + pad(kind, k_major)
        },
        offset: 0,
        passes: chunks.div_ceil(threads),
        partial: chunks < threads,
        swizzled,
        panels,
    })
}

//! A producer's copies by the tensor memory accelerator (`tma = 1`): one
//! thread of the producer warpgroup moves each operand tile into its ring
//! slot with `cp.async.bulk.tensor`, through a tensor map per operand
//! that the launcher encodes ([`crate::ptx::TensorMap`]).
//!
//! Each map's box is what one copy moves: a `k`-major tile whole (`block_k
//! × block_x`, its rows `block_k` elements), a tile contiguous along `x`
//! one 128-byte column panel at a time (`layout::MmaStaging::panels`).
//! The map's swizzle is the span of those rows, so the copies lay tiles
//! out exactly as the other copiers' XOR-permuted chunks do, the layouts
//! `wgmma`'s descriptors read; slots and panels start at multiples of the
//! pattern's period. Elements outside the operand (rows past `M` or `N`,
//! `k` past `K`) read as zero, so no edge needs a guard. The maps'
//! dimensions are the operand's contiguous one, its other one, then each
//! batch variable it moves along (those it is broadcast over left out):
//! at most five.
//!
//! For each fill the thread arrives at the slot's `full` barrier
//! expecting the fill's bytes (`mbarrier.arrive.expect_tx`), the barrier's
//! only arrival, then issues the copies, whose bytes complete the phase as
//! they land. The copies are the async proxy's writes, as `wgmma`'s reads
//! are: neither side needs a proxy fence.
//!
//! With `cluster_m = 2` the two blocks of a cluster compute vertically
//! adjacent tiles of the same columns, and B's tiles are the same for
//! both: B's map boxes half of each copy along its outer dimension (`x`
//! for a `k`-major tile, `k` for a panel), and each block copies its
//! half, rank `r` the `r`-th, multicast to both. Each block's `full`
//! barrier still expects the whole fill: its own A, and B's halves, one
//! from each block.

use super::layout::{MmaLayout, MmaStaging};
use crate::ir::Kernel;
use crate::lower::matmul::output::Tile;
use crate::lower::matmul::{MatmulPlan, Side};
use crate::lower::{Constraint, Violation};
use crate::ptx::inst::{Addr, ArithOp, Op, Operand, Reg, RegClass, Ty};
use crate::ptx::{Builder, Swizzle, TensorMap};

/// The tensor map a `tma = 1` producer copies `side`'s tiles through;
/// with `shares` blocks sharing them, each copy boxes a `1 / shares` part
/// of its outer dimension.
pub(super) fn tensor_map(
    kernel: &Kernel,
    plan: &MatmulPlan,
    side: Side,
    staging: &MmaStaging,
    (block_k, shares): (u32, u32),
) -> Result<TensorMap, Violation> {
    let operand = side.operand(plan);
    let x_extent = match side {
        Side::A => kernel.extent(plan.m),
        Side::B => kernel.extent(plan.n),
    };
    let k_extent = kernel.extent(plan.k);
    let dtype = kernel.inputs[operand.tensor.0].dtype;
    let size = u64::from(dtype.size());
    let ((contiguous, other, other_stride), boxed) = if staging.k_major {
        (
            (k_extent, x_extent, operand.stride_x),
            [block_k, staging.block_x / shares],
        )
    } else {
        (
            (x_extent, k_extent, operand.stride_k),
            [staging.pitch, block_k / shares],
        )
    };
    // An extent of 1 is never stepped along: any valid stride will do.
    let other_stride = if other > 1 {
        other_stride * size
    } else {
        (u64::from(contiguous) * size).next_multiple_of(16)
    };
    let mut dims = vec![u64::from(contiguous), u64::from(other)];
    let mut strides = vec![other_stride];
    let mut boxes = boxed.to_vec();
    for (v, stride) in moving_batch(kernel, plan, side) {
        dims.push(u64::from(kernel.extent(v)));
        strides.push(stride * size);
        boxes.push(1);
    }
    let name = match side {
        Side::A => "A",
        Side::B => "B",
    };
    let swizzle = Swizzle::of_span(staging.row_bytes()).ok_or_else(|| {
        Violation::new(
            Constraint::Tiling,
            format!(
                "tma = 1 copies {name}'s tiles swizzled as wgmma reads them, but their {}-byte rows match no swizzle of 32, 64 or 128 bytes",
                staging.row_bytes()
            ),
        )
    })?;
    let map = TensorMap {
        param: operand.tensor.0,
        dtype,
        dims,
        strides,
        boxed: boxes,
        swizzle,
    };
    map.check().map_err(|reason| {
        Violation::new(
            Constraint::Alignment,
            format!("tma = 1 copies {name} through a tensor map, but its {reason}"),
        )
    })?;
    Ok(map)
}

/// The batch variables `side`'s operand moves along, with its element
/// stride along each, in the plan's order: its map's dimensions after
/// the first two.
fn moving_batch<'a>(
    kernel: &'a Kernel,
    plan: &'a MatmulPlan,
    side: Side,
) -> impl Iterator<Item = (crate::ir::VarId, u64)> + 'a {
    let operand = side.operand(plan);
    plan.batch
        .iter()
        .zip(&operand.stride_batch)
        .filter(move |(v, s)| **s != 0 && kernel.extent(**v) > 1)
        .map(|(v, s)| (*v, *s))
}

/// The issuing thread's generic addresses of the two maps (A's, then
/// B's: the kernel's maps in that order), and with `cluster_m = 2` what
/// its block's share of B's copies needs.
pub(super) struct Maps {
    a: Reg,
    b: Reg,
    share: Option<Share>,
}

/// A block's share of B's copies in a cluster of two: its rank, and the
/// mask of the blocks they land in (both).
struct Share {
    rank: Reg,
    mask: Reg,
}

impl Maps {
    /// The maps' addresses; `rank`, the block's rank in its cluster where
    /// the cluster's blocks share B's tiles.
    pub fn new(b: &mut Builder, rank: Option<Reg>) -> Maps {
        let mut generic = |index: usize| {
            let param = b.reg(RegClass::B64);
            b.push(Op::TensorMapParam { dst: param, index });
            let map = b.reg(RegClass::B64);
            b.push(Op::CvtaParam {
                dst: map,
                src: param,
            });
            map
        };
        let (a, maps_b) = (generic(0), generic(1));
        let share = rank.map(|rank| {
            let mask = b.reg(RegClass::B16);
            b.push(Op::Mov {
                ty: Ty::B16,
                dst: mask,
                src: Operand::Int(0b11),
            });
            Share { rank, mask }
        });
        Maps {
            a,
            b: maps_b,
            share,
        }
    }

    /// Fills the slot at window offset `slot` (`smem` plus it) with the
    /// tile's `K` tile `kt` (0 where `None`): the `full` barrier's
    /// arrival expecting both operands' bytes, then their copies (of B,
    /// the block's share, multicast).
    pub fn fill(
        &self,
        b: &mut Builder,
        (kernel, plan, layout): (&Kernel, &MatmulPlan, &MmaLayout),
        tile: &Tile,
        (kt, slot, full): (Option<Reg>, Reg, Addr),
    ) {
        let state = b.reg(RegClass::B64);
        b.push(Op::MbarrierArriveExpectTx {
            state,
            addr: full,
            bytes: Operand::from(layout.a.bytes() + layout.b.bytes()),
        });
        let k = match kt {
            Some(kt) => b.u32_op(ArithOp::Mul, kt, layout.tiles.block_k),
            None => b.u32_imm(0),
        };
        for (side, map, staging, x0) in [
            (Side::A, self.a, &layout.a, tile.m0),
            (Side::B, self.b, &layout.b, tile.n0),
        ] {
            let batch: Vec<Reg> = moving_batch(kernel, plan, side)
                .map(|(v, _)| tile.env.index[&v])
                .collect();
            let share = match side {
                Side::A => None,
                Side::B => self.share.as_ref(),
            };
            // The block's part of each copy: the rank's half of the box's
            // rows, along its outer coordinate and in the slot.
            let (dst, multicast) = match share {
                Some(share) => {
                    let part = staging.panel_bytes() / 2;
                    (b.u32_mad(share.rank, part, slot), Some(share.mask))
                }
                None => (slot, None),
            };
            for panel in 0..staging.panels {
                let x = if panel == 0 {
                    x0
                } else {
                    b.u32_op(ArithOp::Add, x0, panel * staging.pitch)
                };
                let [inner, outer] = if staging.k_major { [k, x] } else { [x, k] };
                let outer = match share {
                    Some(share) => {
                        let rows = if staging.k_major {
                            staging.block_x / 2
                        } else {
                            layout.tiles.block_k / 2
                        };
                        b.u32_mad(share.rank, rows, outer)
                    }
                    None => outer,
                };
                b.push(Op::CpAsyncBulkTensor {
                    dst: Addr {
                        base: dst,
                        offset: i64::from(staging.offset + panel * staging.panel_bytes()),
                    },
                    map,
                    coords: [inner, outer]
                        .into_iter()
                        .chain(batch.iter().copied())
                        .collect(),
                    barrier: full,
                    multicast,
                });
            }
        }
    }
}

//! Emits a tensor-core contraction on Hopper's warpgroup instructions
//! (`wgmma = 1`, sm_90, f16 and bf16) for a checked [`MmaLayout`].
//!
//! The block's threads form `(block_m / warp_m) · (block_n / warp_n)`
//! warpgroups of 128; each computes a `warp_m × warp_n` sub-tile as
//! `warp_m / 64` accumulators of `m64n<warp_n>` (a thread holds
//! `warp_m · warp_n / 128` f32 values). The operand tiles move through the
//! same `cp.async` ring as the `mma.sync` path's, in swizzled rows, which
//! are the canonical layouts `wgmma` reads (`layout::MmaStaging`): rows of
//! 32, 64 or 128 bytes, 8 of them a period (the descriptor's stride
//! offset), chunks XOR-permuted by row as the descriptor's swizzle mode
//! says. `k`-major tiles are read K-major; the others M- or N-major
//! (`imm-trans`), in 128-byte column panels, each warpgroup's part from
//! the start of one (or the whole tile, when it is one panel or less).
//!
//! ```text
//! decode tile and batch from ctaid.x; copy pointers; the warpgroup (tid / 128, read from
//! lane 0: warp-uniform for ptxas); its first A and B elements
//! accumulators zeroed
//! loop over the K tiles, the ring of `pipeline` (each thread's landed copies behind
//! fence.proxy.async before the barrier, for the async proxy `wgmma` reads through):
//!     descriptors of the slot's A and B tiles
//!     wgmma.fence; block_k / 16 k-steps: warp_m / 64 wgmma.mma_async each
//!     wgmma.commit_group; wgmma.wait_group 1   (the tile before is done: its slot is free
//!                                               for the copies after the next barrier)
//! wgmma.wait_group 0
//! (with fewer than 3 stages, wgmma.wait_group 0 in the loop: a ring of two
//! has no slot to spare for a tile in flight)
//! split-K (split_k above 1): each block's ring covers its slice of K; the
//! partial sums are added up in the workspace as on warps (`split`)
//! epilogue: accumulator register 4j + 2h + e of wgmma i is row 64i + 16w + g + 8h,
//! column 8j + 2t + e of the warpgroup's sub-tile (warp w of the warpgroup, lane 4g + t)
//! ```

use super::MmaLayout;
use super::copy::Copier;
use super::emit::{imm, offset, store};
use super::layout::MmaStaging;
use crate::ir::Kernel;
use crate::lower::Lowered;
use crate::lower::matmul::output::begin;
use crate::lower::matmul::pipeline::{self, Ring};
use crate::lower::matmul::{MatmulPlan, Side};
use crate::ptx::Builder;
use crate::ptx::inst::{ArithOp, Cmp, Op, Operand, Reg, RegClass, ShflMode, Ty};

/// Threads of a warpgroup.
const WARPGROUP: u32 = 128;

/// Rows of one `wgmma`'s A and accumulator.
const WGMMA_M: u32 = 64;

pub(super) fn emit(kernel: &Kernel, plan: &MatmulPlan, layout: &MmaLayout) -> Lowered {
    let t = layout.tiles;
    let mut b = Builder::new();
    let (tile, smem, k0) = begin(
        &mut b,
        (kernel, plan),
        [t.block_m, t.block_n, t.block_k],
        t.group_m,
        layout.split.as_ref(),
    );
    let a = Copier::new(&mut b, kernel, plan, layout, Side::A, &tile, (smem, k0));
    let bs = Copier::new(&mut b, kernel, plan, layout, Side::B, &tile, (smem, k0));

    let group = b.u32_op(ArithOp::Div, tile.tid, imm(WARPGROUP));
    let group = broadcast(&mut b, group);
    let member = b.u32_op(ArithOp::Rem, tile.tid, imm(WARPGROUP));
    let group_n = b.u32_op(ArithOp::Rem, group, imm(layout.warps_n));
    let group_m = b.u32_op(ArithOp::Div, group, imm(layout.warps_n));
    let wm0 = b.u32_op(ArithOp::Mul, group_m, imm(t.warp_m));
    let wn0 = b.u32_op(ArithOp::Mul, group_n, imm(t.warp_n));
    let a_start = first_element(&mut b, &layout.a, wm0, smem);
    let b_start = first_element(&mut b, &layout.b, wn0, smem);

    let acc: Vec<Vec<Reg>> = (0..t.warp_m / WGMMA_M)
        .map(|_| (0..t.warp_n / 2).map(|_| b.f32_imm(0.0)).collect())
        .collect();
    // `scale-d` true: every product adds to the accumulators.
    let accumulate = b.setp(Cmp::Eq, Ty::U32, tile.tid, tile.tid);
    let issue = |b: &mut Builder, slot: Reg| {
        a.issue(b, slot);
        bs.issue(b, slot);
        a.advance(b);
        bs.advance(b);
    };
    // With a third slot, a tile's `wgmma`s stay in flight while the next
    // tile's are issued, and are waited for then.
    let held = t.held();
    let ring = Ring {
        tiles: layout.k_tiles(),
        count: tile.count,
        stages: t.stages,
        slot_bytes: layout.slot_bytes,
        async_proxy: true,
        held,
    };
    pipeline::ring(&mut b, ring, issue, |b, slot| {
        let a_desc = descriptor(b, a_start, slot, &layout.a);
        let b_desc = descriptor(b, b_start, slot, &layout.b);
        b.push(Op::WgmmaFence);
        for step in 0..t.block_k / layout.kind.k() {
            let b_at = advance(b, b_desc, step_bytes(&layout.b, step));
            for (i, d) in acc.iter().enumerate() {
                let rows = x_bytes(&layout.a, WGMMA_M * i as u32);
                let a_at = advance(b, a_desc, rows + step_bytes(&layout.a, step));
                b.push(Op::Wgmma {
                    kind: layout.kind,
                    d: d.clone(),
                    a: a_at,
                    b: b_at,
                    scale_d: accumulate,
                    trans_a: !layout.a.k_major,
                    trans_b: !layout.b.k_major,
                });
            }
        }
        b.push(Op::WgmmaCommit);
        b.push(Op::WgmmaWait { pending: held });
    });
    if held > 0 {
        b.push(Op::WgmmaWait { pending: 0 });
    }

    let warp = b.u32_op(ArithOp::Div, member, imm(32));
    let lane = b.u32_op(ArithOp::Rem, member, imm(32));
    let g = b.u32_op(ArithOp::Div, lane, imm(4));
    let t4 = b.u32_op(ArithOp::Rem, lane, imm(4));
    let m_base = b.u32_op(ArithOp::Add, tile.m0, wm0);
    let m_base = b.u32_mad(warp, imm(16), m_base);
    let m_base = b.u32_op(ArithOp::Add, m_base, g);
    let n_base = b.u32_op(ArithOp::Add, tile.n0, wn0);
    let n_base = b.u32_mad(t4, imm(2), n_base);
    let ms: Vec<Reg> = (0..2 * acc.len() as u32)
        .map(|r| offset(&mut b, m_base, WGMMA_M * (r / 2) + 8 * (r % 2)))
        .collect();
    let ns: Vec<Reg> = (0..t.warp_n / 4)
        .map(|c| offset(&mut b, n_base, 8 * (c / 2) + c % 2))
        .collect();
    let sums: Vec<Vec<Reg>> = (0..ms.len())
        .map(|r| {
            (0..ns.len())
                .map(|c| acc[r / 2][4 * (c / 2) + 2 * (r % 2) + c % 2])
                .collect()
        })
        .collect();
    let params = kernel.inputs.len() + 1;
    let reduced = layout
        .split
        .map(|split| split.reduce(&mut b, &tile, (smem, layout.threads, params), &sums));
    store(b, (kernel, plan, layout), &tile, (&sums, &ms, &ns), reduced)
}

/// `value`, the same in every lane of a warp, read from lane 0. ptxas
/// cannot tell that a value computed from `%tid` is warp-uniform; read
/// through `shfl.sync.idx` it can, and keeps what follows from it (the
/// warpgroup's descriptors) on the uniform datapath, which `wgmma` reads
/// them from: nothing moves into uniform registers in the main loop.
fn broadcast(b: &mut Builder, value: Reg) -> Reg {
    let dst = b.reg(RegClass::B32);
    b.push(Op::Shfl {
        mode: ShflMode::Idx,
        dst,
        src: value,
        lane: Operand::Int(0),
        clamp: 0x1f,
    });
    dst
}

/// The shared address (slot 0) of the first element of the tile's part
/// `x0` on along its `x`.
fn first_element(b: &mut Builder, s: &MmaStaging, x0: Reg, smem: Reg) -> Reg {
    let per_x = x_bytes(s, 1);
    let at = b.u32_mad(x0, imm(per_x), smem);
    b.u32_op(ArithOp::Add, at, imm(s.offset))
}

/// Bytes from the tile's first element to its `x`-th along `x`: `x` rows
/// of a `k`-major tile; for the others, whose parts start on a panel (or
/// are the whole tile, `x` 0), `x / 64` panels (16-bit elements).
fn x_bytes(s: &MmaStaging, x: u32) -> u32 {
    if s.k_major {
        x * s.row_bytes()
    } else {
        x * s.panel_bytes() / (s.row_bytes() / s.element_bytes)
    }
}

/// Bytes a descriptor's start moves for k-step `step`: 16 elements along
/// a `k`-major row, 16 rows down the others.
fn step_bytes(s: &MmaStaging, step: u32) -> u32 {
    if s.k_major {
        step * 16 * s.element_bytes
    } else {
        step * 16 * s.row_bytes()
    }
}

/// The matrix descriptor of the tile whose first element is at `start`
/// in the slot at byte offset `slot`: the 18-bit shared address in units
/// of 16 bytes, the stride offset of 8 rows, the swizzle of the rows, and
/// the leading offset from one panel to the next (unused in K-major
/// swizzled rows, which hold a k-step whole, and in one-panel tiles).
fn descriptor(b: &mut Builder, start: Reg, slot: Reg, s: &MmaStaging) -> Reg {
    let at = b.u32_op(ArithOp::Add, start, slot);
    let at = b.u32_op(ArithOp::And, at, imm(0x3ffff));
    let at = b.u32_op(ArithOp::Shr, at, imm(4));
    let wide = b.reg(RegClass::B64);
    b.push(Op::Cvt {
        to: Ty::U64,
        from: Ty::U32,
        dst: wide,
        src: at,
    });
    // Atoms side by side along M or N: one panel after the other.
    let leading = if s.panels > 1 {
        u64::from(s.panel_bytes() / 16)
    } else {
        1
    };
    let stride = u64::from(8 * s.row_bytes() / 16);
    let fields = leading << 16 | stride << 32 | s.descriptor_mode() << 62;
    let desc = b.reg(RegClass::B64);
    b.push(Op::Arith {
        op: ArithOp::Or,
        ty: Ty::B64,
        dst: desc,
        a: wide.into(),
        b: Operand::Int(fields as i64),
    });
    desc
}

/// `desc` with its start `bytes` further on (a multiple of 16; no carry
/// leaves the 14-bit field, the window being below 256 KiB).
fn advance(b: &mut Builder, desc: Reg, bytes: u32) -> Reg {
    if bytes == 0 {
        return desc;
    }
    let moved = b.reg(RegClass::B64);
    b.push(Op::Arith {
        op: ArithOp::Add,
        ty: Ty::U64,
        dst: moved,
        a: desc.into(),
        b: Operand::Int(i64::from(bytes / 16)),
    });
    moved
}

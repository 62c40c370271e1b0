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
//!
//! With `persistent = 1` the grid has as many blocks as the GPU holds at
//! once (the launcher sizes it), and each block loops over the tiles
//! `ctaid.x, ctaid.x + nctaid.x, …`: once a tile's last `wgmma`s have
//! landed and a barrier has seen every warpgroup leave the ring, the
//! copies of the next tile's first `K` tiles are issued, and the current
//! tile's epilogue runs while they land (see `persistent`).

use super::MmaLayout;
use super::copy::Copier;
use super::emit::{block_shape, imm, offset, outputs, store};
use super::layout::MmaStaging;
use crate::ir::Kernel;
use crate::lower::Lowered;
use crate::lower::matmul::output::{Tile, assemble, begin, epilogue};
use crate::lower::matmul::pipeline::{self, Ring};
use crate::lower::matmul::{MatmulPlan, Side};
use crate::ptx::Builder;
use crate::ptx::inst::{ArithOp, Cmp, Op, Operand, Reg, RegClass, ShflMode, Special, Ty};

/// Threads of a warpgroup.
const WARPGROUP: u32 = 128;

/// Rows of one `wgmma`'s A and accumulator.
const WGMMA_M: u32 = 64;

pub(super) fn emit(kernel: &Kernel, plan: &MatmulPlan, layout: &MmaLayout) -> Lowered {
    if layout.tiles.persistent == 1 {
        return persistent(kernel, plan, layout);
    }
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
    let group = Warpgroup::new(&mut b, layout, tile.tid, smem);
    let acc = accumulators(&mut b, layout);
    let ring = ring(layout, tile.count);
    pipeline::ring(&mut b, ring, issuer(&a, &bs), group.compute(layout, &acc));
    drain(&mut b, layout);
    let (sums, ms, ns) = group.outputs(&mut b, layout, &tile, &acc);
    let params = kernel.inputs.len() + 1;
    let reduced = layout
        .split
        .map(|split| split.reduce(&mut b, &tile, (smem, layout.threads, params), &sums));
    store(b, (kernel, plan, layout), &tile, (&sums, &ms, &ns), reduced)
}

/// The `persistent = 1` kernel: each block walks the tiles `ctaid.x`,
/// `ctaid.x + nctaid.x`, … of the grid. Once a tile's products are done
/// and the block has left the ring, the copies that fill the ring for the
/// block's next tile are issued, then the tile's epilogue runs while they
/// land:
///
/// ```text
/// fill the ring with the first tile's first K tiles
/// loop over the block's tiles:
///     the tile's copiers, past the K tiles the ring holds; accumulators zeroed
///     the K loop of the ring, without its fill; wgmma.wait_group 0
///     bar.sync                                  (no warpgroup reads the ring any more)
///     when there is a next tile: fill the ring with its first K tiles
///     epilogue of this tile
/// ```
fn persistent(kernel: &Kernel, plan: &MatmulPlan, layout: &MmaLayout) -> Lowered {
    let t = layout.tiles;
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let smem = b.shared_base();
    let group = Warpgroup::new(&mut b, layout, tid, smem);
    let ring = ring(layout, None);
    let ctaid = b.special(Special::CtaidX);
    let index = b.reg(RegClass::B32);
    b.push(Op::Mov {
        ty: Ty::U32,
        dst: index,
        src: ctaid.into(),
    });
    let stride = b.special(Special::NctaidX);
    let blocks = (t.block_m, t.block_n);
    let tile_at =
        |b: &mut Builder, index: Reg| Tile::at(b, (kernel, plan), blocks, t.group_m, (tid, index));
    let copiers = |b: &mut Builder, tile: &Tile, k0: Option<Reg>| {
        [Side::A, Side::B].map(|side| Copier::new(b, kernel, plan, layout, side, tile, (smem, k0)))
    };
    let first = tile_at(&mut b, index);
    let tiles = Operand::Int(first.grid as i64);
    // Launchers give a persistent kernel at most a block per tile; a
    // block past them has nothing to do.
    let done = b.label();
    let any = b.setp(Cmp::Lt, Ty::U32, index, tiles);
    b.bra_if(any, true, done);
    let [a, bs] = copiers(&mut b, &first, None);
    ring.fill(&mut b, &issuer(&a, &bs));

    let top = b.label();
    b.place(top);
    let tile = tile_at(&mut b, index);
    let past = b.u32_imm(ring.ahead() * t.block_k);
    let [a, bs] = copiers(&mut b, &tile, Some(past));
    let acc = accumulators(&mut b, layout);
    pipeline::filled(&mut b, ring, issuer(&a, &bs), group.compute(layout, &acc));
    drain(&mut b, layout);
    let next = b.u32_op(ArithOp::Add, index, stride);
    b.push(Op::BarSync);
    let last = b.label();
    let more = b.setp(Cmp::Lt, Ty::U32, next, tiles);
    b.bra_if(more, true, last);
    let following = tile_at(&mut b, next);
    let [a, bs] = copiers(&mut b, &following, None);
    ring.fill(&mut b, &issuer(&a, &bs));
    b.place(last);

    group.epilogue(&mut b, (kernel, plan, layout), &tile, &acc);
    b.push(Op::Mov {
        ty: Ty::U32,
        dst: index,
        src: next.into(),
    });
    let more = b.setp(Cmp::Lt, Ty::U32, index, tiles);
    b.bra_if(more, false, top);
    b.place(done);
    assemble(b, kernel, tile.grid, block_shape(layout))
}

/// The ring of a block whose count of `K` tiles is `count` (a tail
/// split's), or the whole `K`'s. With a third slot, a tile's `wgmma`s stay
/// in flight while the next tile's are issued, and are waited for then.
fn ring(layout: &MmaLayout, count: Option<Reg>) -> Ring {
    let t = layout.tiles;
    Ring {
        tiles: layout.k_tiles(),
        count,
        stages: t.stages,
        slot_bytes: layout.slot_bytes,
        async_proxy: true,
        held: t.held(),
    }
}

/// Copies the current `K` tile of both operands into a slot, and moves
/// both on to the next.
pub(super) fn issuer<'c>(a: &'c Copier<'c>, bs: &'c Copier<'c>) -> impl Fn(&mut Builder, Reg) + 'c {
    move |b, slot| {
        a.issue(b, slot);
        bs.issue(b, slot);
        a.advance(b);
        bs.advance(b);
    }
}

/// What a thread knows of its warpgroup's part of the block's tile,
/// whichever tile that is.
pub(super) struct Warpgroup {
    /// The thread's place in its warpgroup.
    member: Reg,
    /// The first row and column of the warpgroup's sub-tile in the block's.
    wm0: Reg,
    wn0: Reg,
    /// The shared addresses (slot 0) of the sub-tile's first A and B
    /// elements.
    a_start: Reg,
    b_start: Reg,
    /// `scale-d`, true: every product adds to the accumulators.
    accumulate: Reg,
}

impl Warpgroup {
    pub(super) fn new(b: &mut Builder, layout: &MmaLayout, tid: Reg, smem: Reg) -> Warpgroup {
        let t = layout.tiles;
        let group = b.u32_op(ArithOp::Div, tid, imm(WARPGROUP));
        let group = broadcast(b, group);
        let member = b.u32_op(ArithOp::Rem, tid, imm(WARPGROUP));
        let group_n = b.u32_op(ArithOp::Rem, group, imm(layout.warps_n));
        let group_m = b.u32_op(ArithOp::Div, group, imm(layout.warps_n));
        let wm0 = b.u32_op(ArithOp::Mul, group_m, imm(t.warp_m));
        let wn0 = b.u32_op(ArithOp::Mul, group_n, imm(t.warp_n));
        Warpgroup {
            member,
            wm0,
            wn0,
            a_start: first_element(b, &layout.a, wm0, smem),
            b_start: first_element(b, &layout.b, wn0, smem),
            accumulate: b.setp(Cmp::Eq, Ty::U32, tid, tid),
        }
    }

    /// The ring's compute: a `K` tile's `wgmma`s on the slot into `acc`,
    /// committed, and the tiles before it waited for as far as the ring
    /// holds none.
    pub(super) fn compute<'s>(
        &'s self,
        layout: &'s MmaLayout,
        acc: &'s [Vec<Reg>],
    ) -> impl FnMut(&mut Builder, Reg) + 's {
        let t = layout.tiles;
        move |b: &mut Builder, slot: Reg| {
            let a_desc = descriptor(b, self.a_start, slot, &layout.a);
            let b_desc = descriptor(b, self.b_start, slot, &layout.b);
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
                        scale_d: self.accumulate,
                        trans_a: !layout.a.k_major,
                        trans_b: !layout.b.k_major,
                    });
                }
            }
            b.push(Op::WgmmaCommit);
            b.push(Op::WgmmaWait { pending: t.held() });
        }
    }

    /// The tile's epilogue on the warpgroup's accumulators, which hold its
    /// sums.
    pub(super) fn epilogue(
        &self,
        b: &mut Builder,
        (kernel, plan, layout): (&Kernel, &MatmulPlan, &MmaLayout),
        tile: &Tile,
        acc: &[Vec<Reg>],
    ) {
        let (sums, ms, ns) = self.outputs(b, layout, tile, acc);
        epilogue(b, kernel, plan, tile, &outputs(layout, (&sums, &ms, &ns)));
    }

    /// The thread's sums with their output rows and columns: accumulator
    /// register `4j + 2h + e` of `wgmma` `i` is row `64i + 16w + g + 8h`,
    /// column `8j + 2t + e` of the warpgroup's sub-tile (warp `w` of the
    /// warpgroup, lane `4g + t`).
    pub(super) fn outputs(
        &self,
        b: &mut Builder,
        layout: &MmaLayout,
        tile: &Tile,
        acc: &[Vec<Reg>],
    ) -> (Vec<Vec<Reg>>, Vec<Reg>, Vec<Reg>) {
        let t = layout.tiles;
        let warp = b.u32_op(ArithOp::Div, self.member, imm(32));
        let lane = b.u32_op(ArithOp::Rem, self.member, imm(32));
        let g = b.u32_op(ArithOp::Div, lane, imm(4));
        let t4 = b.u32_op(ArithOp::Rem, lane, imm(4));
        let m_base = b.u32_op(ArithOp::Add, tile.m0, self.wm0);
        let m_base = b.u32_mad(warp, imm(16), m_base);
        let m_base = b.u32_op(ArithOp::Add, m_base, g);
        let n_base = b.u32_op(ArithOp::Add, tile.n0, self.wn0);
        let n_base = b.u32_mad(t4, imm(2), n_base);
        let ms: Vec<Reg> = (0..2 * acc.len() as u32)
            .map(|r| offset(b, m_base, WGMMA_M * (r / 2) + 8 * (r % 2)))
            .collect();
        let ns: Vec<Reg> = (0..t.warp_n / 4)
            .map(|c| offset(b, n_base, 8 * (c / 2) + c % 2))
            .collect();
        let sums = (0..ms.len())
            .map(|r| {
                (0..ns.len())
                    .map(|c| acc[r / 2][4 * (c / 2) + 2 * (r % 2) + c % 2])
                    .collect()
            })
            .collect();
        (sums, ms, ns)
    }
}

/// Waits for the last tile's `wgmma`s, where the ring leaves them in
/// flight: after it, the accumulators hold the sums, and the warpgroup no
/// longer reads the ring.
pub(super) fn drain(b: &mut Builder, layout: &MmaLayout) {
    if layout.tiles.held() > 0 {
        b.push(Op::WgmmaWait { pending: 0 });
    }
}

/// The warpgroup's accumulators, zeroed where the code is emitted (at
/// the top of each tile of a persistent block).
pub(super) fn accumulators(b: &mut Builder, layout: &MmaLayout) -> Vec<Vec<Reg>> {
    let t = layout.tiles;
    (0..t.warp_m / WGMMA_M)
        .map(|_| (0..t.warp_n / 2).map(|_| b.f32_imm(0.0)).collect())
        .collect()
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

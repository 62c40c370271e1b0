//! Emits a tensor-core contraction's instruction list for a checked
//! [`MmaLayout`] (the kernel's shape is in the [module docs](super)).
//!
//! Fragment layouts (lane `l`, `g = l / 4`, `t = l % 4`): an `ldmatrix.x4`
//! of A at lane addresses "row `l % 8` of matrix `l / 8`", matrices ordered
//! (rows 0–7, k 0–7), (rows 8–15, k 0–7), (rows 0–7, k 8–15), (rows 8–15,
//! k 8–15), yields exactly the m16n8k16 A fragment; for B, the matrices
//! (k 0–7, n 0–7), (k 8–15, n 0–7), (k 0–7, n 8–15), (k 8–15, n 8–15) yield
//! the B fragments of two n8 tiles. Which of a matrix's dimensions is its
//! stored row depends on the operand's contiguous dimension; `.trans`
//! makes both cases hand out the same fragment. Accumulator register `i`
//! holds row `g + 8 (i / 2)`, column `2t + i % 2` of its 16×8 tile.
//!
//! tf32 fragments (m16n8k8) hold one f32 element per register, which
//! `ldmatrix` (16-bit rows) cannot hand out: each lane reads its words with
//! `ld.shared.f32` and rounds each with `cvt.rna.tf32.f32`. A register `i`
//! holds row `g + 8 (i & 1)`, `k` `t + 4 (i >> 1)` of A and `k` `t + 4i`,
//! column `g` of B, so every word a lane reads is its "lane word" (`x` `g`,
//! `k` `t` of the warp's first fragment) plus a constant offset.

use super::MmaLayout;
use super::copy::Copier;
use super::layout::MmaStaging;
use crate::dtype::DType;
use crate::ir::Kernel;
use crate::lower::Lowered;
use crate::lower::matmul::output::{BlockShape, Outputs, Tile, begin, finish};
use crate::lower::matmul::pipeline::{self, Ring, Steps};
use crate::lower::matmul::{MatmulPlan, Side};
use crate::ptx::Builder;
use crate::ptx::inst::{Addr, ArithOp, Label, MmaKind, Op, Operand, Reg, Space, Ty};

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

    let lane = b.u32_op(ArithOp::Rem, tile.tid, imm(32));
    let warp = b.u32_op(ArithOp::Div, tile.tid, imm(32));
    let warp_n = b.u32_op(ArithOp::Rem, warp, imm(layout.warps_n));
    let warp_m = b.u32_op(ArithOp::Div, warp, imm(layout.warps_n));
    let wm0 = b.u32_op(ArithOp::Mul, warp_m, imm(t.warp_m));
    let wn0 = b.u32_op(ArithOp::Mul, warp_n, imm(t.warp_n));
    let (a_lane, b_lane) = match layout.kind {
        MmaKind::F16 | MmaKind::Bf16 => {
            let mut lanes = |operand, x0, warp_x| {
                lane_addresses(&mut b, operand, lane, (x0, warp_x), smem, t.block_k / 16)
            };
            (
                lanes((&layout.a, Side::A), wm0, t.warp_m),
                lanes((&layout.b, Side::B), wn0, t.warp_n),
            )
        }
        MmaKind::Tf32 => (
            vec![lane_word(&mut b, &layout.a, lane, wm0, smem)],
            vec![lane_word(&mut b, &layout.b, lane, wn0, smem)],
        ),
    };

    let acc = main_loop(&mut b, layout, [&a, &bs], [&a_lane, &b_lane], tile.count);

    // Accumulator register 2h + e of tile (i, j) is output row
    // 16i + 8h + g, column 8j + 2t + e of the warp's sub-tile.
    let g = b.u32_op(ArithOp::Div, lane, imm(4));
    let t4 = b.u32_op(ArithOp::Rem, lane, imm(4));
    let m_base = b.u32_op(ArithOp::Add, tile.m0, wm0);
    let m_base = b.u32_op(ArithOp::Add, m_base, g);
    let n_base = b.u32_op(ArithOp::Add, tile.n0, wn0);
    let n_base = b.u32_mad(t4, imm(2), n_base);
    let ms: Vec<Reg> = (0..t.warp_m / 8)
        .map(|r| offset(&mut b, m_base, 8 * r))
        .collect();
    let ns: Vec<Reg> = (0..t.warp_n / 4)
        .map(|c| offset(&mut b, n_base, 8 * (c / 2) + c % 2))
        .collect();
    let sums: Vec<Vec<Reg>> = (0..ms.len())
        .map(|r| {
            (0..ns.len())
                .map(|c| acc[r / 2][c / 2][2 * (r % 2) + c % 2])
                .collect()
        })
        .collect();
    let params = kernel.inputs.len() + 1;
    let reduced = layout
        .split
        .map(|split| split.reduce(&mut b, &tile, (smem, layout.threads, params), &sums));
    store(b, (kernel, plan, layout), &tile, (&sums, &ms, &ns), reduced)
}

/// The epilogue and the kernel's end: each thread's sums `sums[i][j]`,
/// for outputs `(ms[i], ns[j])` (pairs of consecutive columns), stored;
/// `reduced` the label split-K's blocks that did not reduce jump to.
pub(super) fn store(
    b: Builder,
    (kernel, plan, layout): (&Kernel, &MatmulPlan, &MmaLayout),
    tile: &Tile,
    accumulated: (&[Vec<Reg>], &[Reg], &[Reg]),
    reduced: Option<Label>,
) -> Lowered {
    finish(
        b,
        kernel,
        plan,
        (tile, &outputs(layout, accumulated)),
        reduced,
        block_shape(layout),
    )
}

/// The thread's sums with their output rows and columns, checked against
/// the extents their tiles overhang, stored two columns at a time.
pub(super) fn outputs<'r>(
    layout: &MmaLayout,
    (sums, ms, ns): (&'r [Vec<Reg>], &'r [Reg], &'r [Reg]),
) -> Outputs<'r> {
    let t = layout.tiles;
    let bound = |extent: u32, block: u32| (!extent.is_multiple_of(block)).then_some(extent);
    Outputs {
        acc: sums,
        ms,
        ns,
        m_bound: bound(layout.m_extent, t.block_m),
        n_bound: bound(layout.n_extent, t.block_n),
        run: 2,
    }
}

/// The block the layout was checked for.
pub(super) fn block_shape(layout: &MmaLayout) -> BlockShape {
    BlockShape {
        threads: layout.threads,
        shared_bytes: layout.shared_bytes,
        split: layout.split,
        min_blocks: layout.tiles.min_blocks,
        persistent: layout.tiles.persistent == 1,
        registers: layout.realloc.map_or(0, |r| r.launch),
    }
}

/// The shared addresses (slot 0) this lane hands `ldmatrix.x4`, for the
/// 16×16 (`x` × `k`) fragments of the warp's `warp_x`-wide tile at `x0`
/// over `k_steps` k-steps: one register
/// for padded rows, fragments at constant offsets from it
/// ([`fragment_address`]).
///
/// Swizzled rows permute chunks by the lane's row key, which fragments
/// 16 stored rows apart share (16 rows are `16 / key_rows` whole keys, a
/// multiple of `swizzle_width`), so moving along the stored rows is a
/// constant offset; moving `d` chunks along them is one when `d` is a
/// multiple of `swizzle_width` (the XOR only touches the chunk's low
/// bits). Fragments `2·step` chunks along (`step` the k-step, or for
/// non-`k`-major tiles the fragment along `x`) take the register of
/// `step % (swizzle_width / 2)`: one per class, as many as `steps` uses.
fn lane_addresses(
    b: &mut Builder,
    (s, side): (&MmaStaging, Side),
    lane: Reg,
    (x0, warp_x): (Reg, u32),
    smem: Reg,
    k_steps: u32,
) -> Vec<Reg> {
    let matrix = b.u32_op(ArithOp::Shr, lane, Operand::Int(3));
    let row = b.u32_op(ArithOp::And, lane, Operand::Int(7));
    let low = b.u32_op(ArithOp::And, matrix, Operand::Int(1));
    let high = b.u32_op(ArithOp::Shr, matrix, Operand::Int(1));
    // Which bit of the matrix index moves along `x` and which along `k`.
    let (x_bit, k_bit) = match side {
        Side::A => (low, high),
        Side::B => (high, low),
    };
    // The matrix's stored rows run along the non-contiguous dimension.
    let (x, k) = if s.k_major {
        let x = b.u32_mad(x_bit, imm(8), row);
        (x, b.u32_op(ArithOp::Mul, k_bit, imm(8)))
    } else {
        let k = b.u32_mad(k_bit, imm(8), row);
        (b.u32_op(ArithOp::Mul, x_bit, imm(8)), k)
    };
    let x = b.u32_op(ArithOp::Add, x, x0);
    let (stored_row, stored_col) = if s.k_major { (x, k) } else { (k, x) };
    if !s.swizzled {
        let element = b.u32_mad(stored_row, imm(s.pitch), stored_col);
        let address = b.u32_mad(element, imm(2), smem);
        return vec![b.u32_op(ArithOp::Add, address, imm(s.offset))];
    }
    let row_start = b.u32_mad(stored_row, imm(s.pitch * 2), smem);
    let row_start = b.u32_op(ArithOp::Add, row_start, imm(s.offset));
    let chunk = b.u32_op(ArithOp::Div, stored_col, imm(s.chunk()));
    let key = b.u32_op(ArithOp::Div, stored_row, imm(s.key_rows()));
    let key = b.u32_op(ArithOp::Rem, key, imm(s.swizzle_width()));
    (0..s.lane_registers(warp_x, k_steps))
        .map(|step| {
            let chunk = offset(b, chunk, 2 * step);
            let chunk = b.u32_op(ArithOp::Xor, chunk, key);
            b.u32_mad(chunk, imm(16), row_start)
        })
        .collect()
}

/// The shared address (slot 0) of this lane's word of a tf32 fragment:
/// `x` `x0 + g`, `k` `t` (the first k-step).
fn lane_word(b: &mut Builder, s: &MmaStaging, lane: Reg, x0: Reg, smem: Reg) -> Reg {
    let g = b.u32_op(ArithOp::Shr, lane, Operand::Int(2));
    let t = b.u32_op(ArithOp::And, lane, Operand::Int(3));
    let x = b.u32_op(ArithOp::Add, g, x0);
    let (stored_row, stored_col) = if s.k_major { (x, t) } else { (t, x) };
    let element = b.u32_mad(stored_row, imm(s.pitch), stored_col);
    let address = b.u32_mad(element, imm(s.element_bytes), smem);
    b.u32_op(ArithOp::Add, address, imm(s.offset))
}

/// Byte offset of the element `x` rows and `k` columns on from a lane's
/// word.
pub(super) fn word_offset(s: &MmaStaging, x: u32, k: u32) -> i64 {
    let (row, col) = if s.k_major { (x, k) } else { (k, x) };
    i64::from((row * s.pitch + col) * s.element_bytes)
}

/// Reads the words at `offsets` from `base` and rounds each to tf32.
fn tf32_words<const N: usize>(b: &mut Builder, base: Reg, offsets: [i64; N]) -> [Reg; N] {
    offsets.map(|offset| {
        let word = b.load(Space::Shared, DType::F32, Addr { base, offset });
        b.f32_to_tf32(word)
    })
}

/// Where a lane reads the 16×16 fragment `xt` (along `x`) at k-step `kk`,
/// from the lane's registers of [`lane_addresses`] (in some slot).
fn fragment_address(s: &MmaStaging, lanes: &[Reg], xt: u32, kk: u32) -> Addr {
    let (along_rows, step) = if s.k_major { (xt, kk) } else { (kk, xt) };
    let row_bytes = s.pitch * 2;
    if !s.swizzled {
        return Addr {
            base: lanes[0],
            offset: i64::from(16 * along_rows * row_bytes + 32 * step),
        };
    }
    let width = s.swizzle_width();
    let class = step % (width / 2);
    Addr {
        base: lanes[class as usize],
        offset: i64::from(16 * along_rows * row_bytes + (2 * step - 2 * class) * 16),
    }
}

/// Accumulators: `[i][j]` is the m16n8 tile `i` along `m`, `j` along `n`.
type Accumulators = Vec<Vec<[Reg; 4]>>;

/// The `k` loop over the ring of shared-memory slots.
fn main_loop(
    b: &mut Builder,
    layout: &MmaLayout,
    [a, bs]: [&Copier<'_>; 2],
    lanes: [&[Reg]; 2],
    count: Option<Reg>,
) -> Accumulators {
    let t = layout.tiles;
    let acc: Accumulators = (0..t.warp_m / 16)
        .map(|_| {
            (0..t.warp_n / 8)
                .map(|_| [(); 4].map(|()| b.f32_imm(0.0)))
                .collect()
        })
        .collect();
    let issue = |b: &mut Builder, slot: Reg| {
        a.issue(b, slot);
        bs.issue(b, slot);
        a.advance(b);
        bs.advance(b);
    };
    let ring = Ring {
        tiles: layout.k_tiles(),
        count,
        stages: t.stages,
        slot_bytes: layout.slot_bytes,
        async_proxy: false,
        held: 0,
    };
    let warp = Warp { layout, acc, lanes };
    if t.prefetch == 1 {
        pipeline::ring_ahead(b, ring, issue, &warp);
    } else {
        pipeline::ring(b, ring, issue, |b, slot| {
            let at = warp.lanes_at(b, slot);
            for step in 0..warp.count() {
                let fragments = warp.fragments(b, &at, step);
                warp.compute(b, &fragments, step);
            }
        });
    }
    warp.acc
}

/// A warp's part of a tile: `block_k / k` steps (`k` 16, or 8 for tf32)
/// of fragment loads and `mma`s.
struct Warp<'a> {
    layout: &'a MmaLayout,
    acc: Accumulators,
    /// The lane's fragment addresses in slot 0, of A and of B.
    lanes: [&'a [Reg]; 2],
}

impl Warp<'_> {
    /// The lane's fragment addresses in the slot at byte offset `slot`.
    fn lanes_at(&self, b: &mut Builder, slot: Reg) -> [Vec<Reg>; 2] {
        self.lanes.map(|regs| {
            regs.iter()
                .map(|r| b.u32_op(ArithOp::Add, *r, slot))
                .collect()
        })
    }

    /// Step `step`'s fragments, from the addresses of [`Warp::lanes_at`].
    fn fragments(
        &self,
        b: &mut Builder,
        [a_lanes, b_lanes]: &[Vec<Reg>; 2],
        step: u32,
    ) -> Fragments {
        match self.layout.kind {
            MmaKind::F16 | MmaKind::Bf16 => {
                ldmatrix_fragments(b, self.layout, step, [a_lanes, b_lanes])
            }
            MmaKind::Tf32 => tf32_fragments(b, self.layout, step, [a_lanes[0], b_lanes[0]]),
        }
    }
}

impl Steps for Warp<'_> {
    type Operands = Fragments;

    fn count(&self) -> u32 {
        self.layout.tiles.block_k / self.layout.kind.k()
    }

    fn load(&self, b: &mut Builder, slot: Reg, step: u32) -> Fragments {
        let at = self.lanes_at(b, slot);
        self.fragments(b, &at, step)
    }

    fn compute(&self, b: &mut Builder, (a_frags, b_frags): &Fragments, _step: u32) {
        for (row, a_frag) in self.acc.iter().zip(a_frags) {
            for (c, b_frag) in row.iter().zip(b_frags) {
                b.mma_acc(self.layout.kind, *c, *a_frag, *b_frag);
            }
        }
    }

    fn carry(&self, b: &mut Builder, (a_to, b_to): &Fragments, (a_from, b_from): &Fragments) {
        let pairs = a_to.iter().flatten().zip(a_from.iter().flatten());
        let pairs = pairs.chain(b_to.iter().flatten().zip(b_from.iter().flatten()));
        for (to, from) in pairs {
            b.push(Op::Mov {
                ty: Ty::B32,
                dst: *to,
                src: (*from).into(),
            });
        }
    }
}

/// A warp's A fragments (one per 16 rows) and B fragments (one per 8
/// columns) of one k-step.
type Fragments = (Vec<[Reg; 4]>, Vec<[Reg; 2]>);

/// k-step `kk`'s m16n8k16 fragments, by `ldmatrix.x4`.
fn ldmatrix_fragments(
    b: &mut Builder,
    layout: &MmaLayout,
    kk: u32,
    [a_lanes, b_lanes]: [&[Reg]; 2],
) -> Fragments {
    let t = layout.tiles;
    let a_frags = (0..t.warp_m / 16)
        .map(|i| {
            let addr = fragment_address(&layout.a, a_lanes, i, kk);
            let r = b.ldmatrix(4, !layout.a.k_major, addr);
            [r[0], r[1], r[2], r[3]]
        })
        .collect();
    let b_frags = (0..t.warp_n / 16)
        .flat_map(|j| {
            let addr = fragment_address(&layout.b, b_lanes, j, kk);
            let r = b.ldmatrix(4, !layout.b.k_major, addr);
            [[r[0], r[1]], [r[2], r[3]]]
        })
        .collect();
    (a_frags, b_frags)
}

/// k-step `kk`'s m16n8k8 tf32 fragments, word by word from the lane words.
fn tf32_fragments(
    b: &mut Builder,
    layout: &MmaLayout,
    kk: u32,
    [a_base, b_base]: [Reg; 2],
) -> Fragments {
    let t = layout.tiles;
    let k0 = 8 * kk;
    let a_frags = (0..t.warp_m / 16)
        .map(|i| {
            let at = |r: u32| word_offset(&layout.a, 16 * i + 8 * (r & 1), k0 + 4 * (r >> 1));
            tf32_words(b, a_base, [at(0), at(1), at(2), at(3)])
        })
        .collect();
    let b_frags = (0..t.warp_n / 8)
        .map(|j| {
            let at = |r: u32| word_offset(&layout.b, 8 * j, k0 + 4 * r);
            tf32_words(b, b_base, [at(0), at(1)])
        })
        .collect();
    (a_frags, b_frags)
}

/// `base + delta`, with no instruction when `delta` is 0.
pub(super) fn offset(b: &mut Builder, base: Reg, delta: u32) -> Reg {
    if delta == 0 {
        base
    } else {
        b.u32_op(ArithOp::Add, base, imm(delta))
    }
}

pub(super) fn imm(value: u32) -> Operand {
    Operand::Int(i64::from(value))
}

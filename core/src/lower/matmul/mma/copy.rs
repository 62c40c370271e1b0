//! Moving one operand's tiles from global to shared memory with 16-byte
//! `cp.async` copies.
//!
//! Each thread owns the same chunks of every tile: `passes` chunks, chunk
//! `tid + pass · threads` in row-major order of the shared tile (so
//! consecutive threads copy consecutive 16 bytes of a row, coalesced),
//! written where `shared_addresses` puts it (swizzled tiles
//! permute each row's chunks: a warp's 32 chunks still fill four whole
//! 128-byte lines).
//! Rows hold no more chunks than the block has threads: `k`-contiguous
//! rows are `block_k ≤ 64` elements, at most 16 chunks; the others
//! `block_x` elements, at most `block_x / 4` chunks (f32), while warp tiles
//! of at most 128 give at least `block_x / 128` warps, `block_x / 4`
//! threads. Both being powers of two, a thread's chunks share their column
//! and are `threads / row_chunks` rows apart. Global addresses advance by `block_k`
//! along `k` per tile; shared addresses move to the tile's ring slot.
//!
//! Chunks outside the tensor read nothing and are zero-filled (source size
//! 0): past `K`, and in rows past `M` (`N`), whose addresses are clamped to
//! the last row so that they stay valid. Rows past `M` only reach outputs
//! that are never stored; not reading them spares the memory system, most
//! of all where one row is the whole operand (a decode's `M = 1`, whose
//! clamped rows would make every block read that row `block_m` times,
//! past L1).
//!
//! Threads that copy between their products keep each pass's guards and
//! clamped addresses in registers, computed once before the `k` loop. A
//! producer warpgroup, which only copies, has issue slots to spare and
//! few registers (`layout::Realloc`): it keeps the first row's address
//! and the last row's, and checks each pass's row as it issues it.

use super::layout::{MmaLayout, MmaStaging};
use crate::ir::Kernel;
use crate::lower::matmul::output::Tile;
use crate::lower::matmul::stage::{self, offset_address};
use crate::lower::matmul::{MatmulOperand, MatmulPlan, Side};
use crate::ptx::Builder;
use crate::ptx::inst::{Addr, ArithOp, Cmp, CpAsyncCache, Op, Operand, Reg, Ty};

/// Copies one operand's tiles into the ring.
#[derive(Debug)]
pub(super) struct Copier<'a> {
    staging: &'a MmaStaging,
    operand: &'a MatmulOperand,
    block_k: u32,
    /// Per pass: where the chunk is read, in the current tile.
    access: Vec<Addr>,
    /// The distinct base registers of `access` (and `last`), advanced once
    /// per tile.
    pointers: Vec<Reg>,
    /// Per pass: where the chunk is written in slot 0 (window included).
    shared: Vec<Addr>,
    /// Per pass: the chunk's `k` within the tile, a register plus a
    /// constant, when `k` can overhang.
    k_local: Vec<Option<(Reg, u32)>>,
    /// Per pass: how the chunk's row is kept inside the tensor, when rows
    /// can overhang.
    rows: Vec<Option<Row>>,
    /// `K - k0` (compared as s32), when `k` can overhang.
    k_end: Option<Reg>,
    /// Whether the thread copies, when the tile has fewer chunks than the
    /// block has threads.
    active: Option<Reg>,
}

/// How a pass's chunk stays inside the tensor where its row may not.
#[derive(Debug, Clone, Copy)]
enum Row {
    /// The bytes it reads (16 inside the tensor, 0 past `M` or `N`), kept
    /// in a register, from an address clamped inside the tensor.
    Held(Reg),
    /// Its row `x + offset`, compared with `extent` as the pass is issued:
    /// a row past it reads nothing, from `last`, the last row's address.
    Checked {
        x: Reg,
        offset: u32,
        extent: u32,
        last: Reg,
    },
}

impl<'a> Copier<'a> {
    /// Computes the thread's addresses and the guards that stay fixed over
    /// the `k` loop (a producer's row guards are computed as each pass is
    /// issued).
    pub fn new(
        b: &mut Builder,
        kernel: &Kernel,
        plan: &'a MatmulPlan,
        layout: &'a MmaLayout,
        side: Side,
        tile: &Tile,
        (smem, k0): (Reg, Option<Reg>),
    ) -> Copier<'a> {
        let operand = side.operand(plan);
        let (staging, x0, x_extent) = match side {
            Side::A => (&layout.a, tile.m0, layout.m_extent),
            Side::B => (&layout.b, tile.n0, layout.n_extent),
        };
        let threads = layout.copiers;
        let (chunk, size) = (staging.chunk(), staging.element_bytes);
        let row_chunks = staging.row_chunks();
        let row = b.u32_op(ArithOp::Div, tile.tid, imm(row_chunks));
        let col_chunk = b.u32_op(ArithOp::Rem, tile.tid, imm(row_chunks));
        let col = b.u32_op(ArithOp::Mul, col_chunk, imm(chunk));
        let rows_per_pass = threads / row_chunks;
        let shared = shared_addresses(b, staging, (row, col_chunk), rows_per_pass, smem);

        let (x_local, k_local) = if staging.k_major {
            (row, col)
        } else {
            (col, row)
        };
        let mut fixed = None;
        for (v, stride) in plan.batch.iter().zip(&operand.stride_batch) {
            if *stride != 0 && kernel.extent(*v) > 1 {
                let index = tile.env.index[v];
                fixed = Some(match fixed {
                    None => b.u32_op(ArithOp::Mul, index, imm_u64(*stride)),
                    Some(acc) => b.u32_mad(index, imm_u64(*stride), acc),
                });
            }
        }
        let base = tile.env.inputs[operand.tensor.0];
        let pointer = |b: &mut Builder, x: Reg, k: Reg| {
            let k = match k0 {
                Some(k0) => b.u32_op(ArithOp::Add, k, k0),
                None => k,
            };
            let offset = b.u32_mad(
                x,
                imm_u64(operand.stride_x),
                fixed.map_or(imm(0), Operand::Reg),
            );
            let offset = b.u32_mad(k, imm_u64(operand.stride_k), offset);
            b.global_addr(base, offset, size)
        };
        let x = b.u32_op(ArithOp::Add, x0, x_local);
        let x_overhangs = !x_extent.is_multiple_of(staging.block_x);
        // A producer warpgroup keeps few registers and has issue slots to
        // spare (it only copies): it computes each pass's guards as it
        // issues the pass. Threads that also multiply keep them.
        let checked = layout.tiles.producer >= 1;
        let mut access = Vec::new();
        let mut pointers = Vec::new();
        let mut rows = vec![None; staging.passes as usize];
        if staging.k_major && x_overhangs && checked {
            // Each pass reads another row, at a fixed distance from the
            // first.
            let first = pointer(b, x, k_local);
            let end = b.u32_imm(x_extent - 1);
            let last = pointer(b, end, k_local);
            pointers.extend([first, last]);
            for pass in 0..staging.passes {
                let offset = pass * rows_per_pass;
                rows[pass as usize] = Some(Row::Checked {
                    x,
                    offset,
                    extent: x_extent,
                    last,
                });
                let bytes = u64::from(offset) * operand.stride_x * u64::from(size);
                access.push(offset_address(b, first, bytes, &mut pointers));
            }
        } else if staging.k_major && x_overhangs {
            // Each pass reads another row: clamp each.
            for pass in 0..staging.passes {
                let at = b.u32_op(ArithOp::Add, x, imm(pass * rows_per_pass));
                rows[pass as usize] = Some(Row::Held(copy_bytes(b, at, x_extent)));
                let at = b.u32_op(ArithOp::Min, at, imm(x_extent - 1));
                let ptr = pointer(b, at, k_local);
                pointers.push(ptr);
                access.push(Addr {
                    base: ptr,
                    offset: 0,
                });
            }
        } else {
            // The chunk's `x` is fixed over the passes (clamped to the last
            // whole chunk: extents are multiples of a chunk).
            let x = if x_overhangs {
                rows.fill(Some(Row::Held(copy_bytes(b, x, x_extent))));
                b.u32_op(ArithOp::Min, x, imm(x_extent - chunk))
            } else {
                x
            };
            let first = pointer(b, x, k_local);
            pointers.push(first);
            let stride = if staging.k_major {
                operand.stride_x
            } else {
                operand.stride_k
            };
            for pass in 0..staging.passes {
                let bytes = u64::from(pass * rows_per_pass) * stride * u64::from(size);
                access.push(offset_address(b, first, bytes, &mut pointers));
            }
        }

        let active = staging
            .partial
            .then(|| b.setp(Cmp::Lt, Ty::U32, tile.tid, imm(staging.rows * row_chunks)));
        let block_k = layout.tiles.block_k;
        let k_overhangs = layout.k_overhangs();
        let k_local = (0..staging.passes)
            .map(|pass| {
                let offset = if staging.k_major {
                    0
                } else {
                    pass * rows_per_pass
                };
                k_overhangs.then(|| match (offset, checked) {
                    (0, _) | (_, true) => (k_local, offset),
                    (_, false) => (b.u32_op(ArithOp::Add, k_local, imm(offset)), 0),
                })
            })
            .collect();
        let k_end = k_overhangs.then(|| match k0 {
            Some(k0) => {
                let k = b.u32_imm(layout.k_extent);
                b.u32_op(ArithOp::Sub, k, k0)
            }
            None => b.u32_imm(layout.k_extent),
        });
        Copier {
            staging,
            operand,
            block_k,
            access,
            pointers,
            shared,
            k_local,
            rows,
            k_end,
            active,
        }
    }

    /// Starts the copies of the current tile into the ring slot at byte
    /// offset `slot` (a register), without committing them.
    pub fn issue(&self, b: &mut Builder, slot: Reg) {
        let s = self.staging;
        let mut in_slot: Vec<(Reg, Reg)> = Vec::new();
        let mut last_k: Option<((Reg, u32), Reg)> = None;
        for pass in 0..s.passes {
            let k_bytes = match (self.k_local[pass as usize], self.k_end) {
                (Some(k), Some(end)) => Some(match last_k {
                    Some((prev, bytes)) if prev == k => bytes,
                    _ => {
                        let at = match k {
                            (k, 0) => k,
                            (k, offset) => b.u32_op(ArithOp::Add, k, imm(offset)),
                        };
                        let inside = b.setp(Cmp::Lt, Ty::S32, at, end);
                        let bytes = b.u32_select(inside, imm(16), imm(0));
                        last_k = Some((k, bytes));
                        bytes
                    }
                }),
                _ => None,
            };
            let mut src = self.access[pass as usize];
            let x_bytes = self.rows[pass as usize].map(|row| match row {
                Row::Held(bytes) => bytes,
                Row::Checked {
                    x,
                    offset,
                    extent,
                    last,
                } => {
                    let Some(room) = extent.checked_sub(offset).filter(|&r| r > 0) else {
                        src = Addr {
                            base: last,
                            offset: 0,
                        };
                        return b.u32_imm(0);
                    };
                    let inside = b.setp(Cmp::Lt, Ty::U32, x, imm(room));
                    let at = match src.offset {
                        0 => src.base,
                        offset => b.u64_add(src.base, Operand::Int(offset)),
                    };
                    src = Addr {
                        base: b.u64_select(inside, at, last),
                        offset: 0,
                    };
                    b.u32_select(inside, imm(16), imm(0))
                }
            });
            let src_bytes = match (k_bytes, x_bytes) {
                (Some(k), Some(x)) => Some(b.u32_op(ArithOp::Min, k, x)),
                (k, x) => k.or(x),
            };
            let Addr { base, offset } = self.shared[pass as usize];
            let base = match in_slot.iter().find(|(from, _)| *from == base) {
                Some(&(_, moved)) => moved,
                None => {
                    let moved = b.u32_op(ArithOp::Add, base, slot);
                    in_slot.push((base, moved));
                    moved
                }
            };
            let op = Op::CpAsync {
                cache: CpAsyncCache::Cg,
                dst: Addr { base, offset },
                src,
                bytes: 16,
                src_bytes,
            };
            match self.active {
                Some(p) => b.push_guarded(p, false, op),
                None => b.push(op),
            }
        }
    }

    /// Moves on to the next `k` tile.
    pub fn advance(&self, b: &mut Builder) {
        let bytes =
            u64::from(self.block_k) * self.operand.stride_k * u64::from(self.staging.element_bytes);
        stage::advance(b, &self.pointers, self.k_end, self.block_k, bytes);
    }
}

/// Where each pass's chunk lies in slot 0 (window included), for the
/// thread whose first chunk is `col_chunk` of `row`: pass `p` writes the
/// same chunk of row `row + p · rows_per_pass` (rows cut into panels
/// keep a panel's rows together, `MmaStaging::panels`).
///
/// Padded rows take an offset per pass from one register. Swizzled rows
/// permute their chunks by the row's key, which moves on by
/// `rows_per_pass / key_rows` per pass (`rows_per_pass` is a multiple of
/// `key_rows`: both are powers of two, and a block's threads, at least a
/// warp, cover at least a 128-byte line's rows); passes whose keys differ
/// take a register each, at most `swizzle_width` of them.
fn shared_addresses(
    b: &mut Builder,
    staging: &MmaStaging,
    (row, col_chunk): (Reg, Reg),
    rows_per_pass: u32,
    smem: Reg,
) -> Vec<Addr> {
    let row_bytes = staging.pitch * staging.element_bytes;
    let row_start = b.u32_mad(row, imm(row_bytes), smem);
    let row_start = b.u32_op(ArithOp::Add, row_start, imm(staging.offset));
    let at = |b: &mut Builder, chunk: Reg| {
        if staging.panels == 1 {
            return b.u32_mad(chunk, imm(16), row_start);
        }
        // Chunk `c` of a row lies in panel `c / 8`, at chunk `c % 8` of
        // the panel's row (the swizzle's XOR leaves the panel bits alone).
        let panel = b.u32_op(ArithOp::Shr, chunk, imm(3));
        let within = b.u32_op(ArithOp::And, chunk, imm(7));
        let at = b.u32_mad(panel, imm(staging.panel_bytes()), row_start);
        b.u32_mad(within, imm(16), at)
    };
    let pass_offset = |pass: u32| i64::from(pass * rows_per_pass * row_bytes);
    if !staging.swizzled {
        let base = at(b, col_chunk);
        return (0..staging.passes)
            .map(|pass| Addr {
                base,
                offset: pass_offset(pass),
            })
            .collect();
    }
    let width = staging.swizzle_width();
    let key = b.u32_op(ArithOp::Div, row, imm(staging.key_rows()));
    let step = rows_per_pass / staging.key_rows();
    let mut bases: Vec<(u32, Reg)> = Vec::new();
    (0..staging.passes)
        .map(|pass| {
            let shift = (pass * step) % width;
            let base = match bases.iter().find(|(s, _)| *s == shift) {
                Some(&(_, base)) => base,
                None => {
                    let key = b.u32_op(ArithOp::Add, key, imm(shift));
                    let key = b.u32_op(ArithOp::Rem, key, imm(width));
                    let chunk = b.u32_op(ArithOp::Xor, col_chunk, key);
                    let base = at(b, chunk);
                    bases.push((shift, base));
                    base
                }
            };
            Addr {
                base,
                offset: pass_offset(pass),
            }
        })
        .collect()
}

/// 16 where `x` is inside the extent, else 0: a chunk's source size.
fn copy_bytes(b: &mut Builder, x: Reg, extent: u32) -> Reg {
    let inside = b.setp(Cmp::Lt, Ty::U32, x, imm(extent));
    b.u32_select(inside, imm(16), imm(0))
}

fn imm(value: u32) -> Operand {
    Operand::Int(i64::from(value))
}

fn imm_u64(value: u64) -> Operand {
    Operand::Int(value as i64)
}

//! Warp-level matrix fragments: which lane holds which element of an
//! `ldmatrix` or `mma.sync` operand, per the PTX ISA's fragment layouts,
//! and `mma`'s arithmetic.
//!
//! Notation of the ISA: for lane `l`, `g = l / 4` (groupID) and
//! `t = l % 4` (threadID_in_group). A `.b32` register of an f16/bf16
//! fragment holds two elements, the lower-indexed one in bits 0–15.
//!
//! | operand | register `i`, half `h` holds |
//! |---|---|
//! | `ldmatrix` matrix `i` | row `g`, columns `2t + h` (`.trans`: column `g`, rows `2t + h`) |
//! | A, m16n8k16 f16/bf16 | row `g + 8 (i & 1)`, column `2t + h + 8 (i >> 1)` |
//! | B, m16n8k16 f16/bf16 | row (k) `2t + h + 8i`, column (n) `g` |
//! | A, m16n8k8 tf32 | row `g + 8 (i & 1)`, column `t + 4 (i >> 1)` |
//! | B, m16n8k8 tf32 | row (k) `t + 4i`, column (n) `g` |
//! | C and D, f32 | row `g + 8 (i >> 1)`, column `2t + (i & 1)` |

use half::{bf16, f16};
use ktune_core::ptx::inst::MmaKind;

pub(crate) const WARP: usize = 32;

/// What `ldmatrix` gives each lane: `rows[8m + r]` is row `r` of matrix
/// `m` as read from shared memory (8 b16 values), for `n` matrices.
pub(crate) fn ldmatrix(n: usize, trans: bool, rows: &[[u16; 8]; WARP]) -> [[u32; 4]; WARP] {
    let mut out = [[0u32; 4]; WARP];
    for (lane, regs) in out.iter_mut().enumerate() {
        let (g, t) = (lane / 4, lane % 4);
        for (m, reg) in regs.iter_mut().enumerate().take(n) {
            let element = |h: usize| {
                if trans {
                    rows[8 * m + 2 * t + h][g]
                } else {
                    rows[8 * m + g][2 * t + h]
                }
            };
            *reg = u32::from(element(0)) | u32::from(element(1)) << 16;
        }
    }
    out
}

/// `(row, k)` of the A element in `lane`'s register `reg`, half `h`.
fn a_coord(kind: MmaKind, lane: usize, reg: usize, h: usize) -> (usize, usize) {
    let (g, t) = (lane / 4, lane % 4);
    let row = g + 8 * (reg & 1);
    match kind {
        MmaKind::F16 | MmaKind::Bf16 => (row, 2 * t + h + 8 * (reg >> 1)),
        MmaKind::Tf32 => (row, t + 4 * (reg >> 1)),
    }
}

/// `(k, column)` of the B element in `lane`'s register `reg`, half `h`.
fn b_coord(kind: MmaKind, lane: usize, reg: usize, h: usize) -> (usize, usize) {
    let (g, t) = (lane / 4, lane % 4);
    match kind {
        MmaKind::F16 | MmaKind::Bf16 => (2 * t + h + 8 * reg, g),
        MmaKind::Tf32 => (t + 4 * reg, g),
    }
}

/// `(row, column)` of the C/D element in `lane`'s register `reg`.
fn c_coord(lane: usize, reg: usize) -> (usize, usize) {
    let (g, t) = (lane / 4, lane % 4);
    (g + 8 * (reg >> 1), 2 * t + (reg & 1))
}

/// Elements per `.b32` register of an A or B fragment.
fn per_reg(kind: MmaKind) -> usize {
    match kind {
        MmaKind::F16 | MmaKind::Bf16 => 2,
        MmaKind::Tf32 => 1,
    }
}

/// An operand element of `kind` held in the low bits of `bits` (16 for
/// f16 and bf16, 32 for tf32), exactly as an f32.
pub(crate) fn value(kind: MmaKind, bits: u32) -> f32 {
    element(kind, bits, 0)
}

/// Element `h` of a `.b32` fragment register, exactly as an f32. A tf32
/// operand's low 13 bits are ignored, as by the tensor cores.
fn element(kind: MmaKind, word: u32, h: usize) -> f32 {
    let half = (word >> (16 * h)) as u16;
    match kind {
        MmaKind::F16 => f16::from_bits(half).to_f32(),
        MmaKind::Bf16 => bf16::from_bits(half).to_f32(),
        MmaKind::Tf32 => f32::from_bits(word & !0x1fff),
    }
}

/// One warp's `mma.sync`: each lane's A (4), B (2) and C (4) registers in,
/// each lane's D registers (f32 bits) out.
///
/// Every D element is `C[i][j]` followed by a chain of fused multiply-adds
/// in increasing k: `acc = fma(A[i][k], B[k][j], acc)`, rounded to nearest
/// even at each step. Products of f16, bf16 and tf32 values are exact in
/// f32 arithmetic (the fma rounds only the sum). Tensor cores add the
/// products in another order and with their own internal precision, so
/// results differ from a GPU's by a few ulp of the sum's magnitude: compare
/// them with the per-dtype tolerances, never bit for bit.
pub(crate) fn mma(
    kind: MmaKind,
    a: &[[u32; 4]; WARP],
    b: &[[u32; 2]; WARP],
    c: &[[u32; 4]; WARP],
) -> [[u32; 4]; WARP] {
    let k = kind.k() as usize;
    let mut am = [[0f32; 16]; 16];
    let mut bm = [[0f32; 8]; 16];
    let mut cm = [[0f32; 8]; 16];
    for lane in 0..WARP {
        for h in 0..per_reg(kind) {
            for (reg, word) in a[lane].iter().enumerate() {
                let (row, kk) = a_coord(kind, lane, reg, h);
                am[row][kk] = element(kind, *word, h);
            }
            for (reg, word) in b[lane].iter().enumerate() {
                let (kk, col) = b_coord(kind, lane, reg, h);
                bm[kk][col] = element(kind, *word, h);
            }
        }
        for (reg, word) in c[lane].iter().enumerate() {
            let (row, col) = c_coord(lane, reg);
            cm[row][col] = f32::from_bits(*word);
        }
    }
    let mut d = [[0u32; 4]; WARP];
    for (lane, regs) in d.iter_mut().enumerate() {
        for (reg, out) in regs.iter_mut().enumerate() {
            let (row, col) = c_coord(lane, reg);
            let sum = (0..k).fold(cm[row][col], |acc, kk| {
                am[row][kk].mul_add(bm[kk][col], acc)
            });
            *out = sum.to_bits();
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_has_exactly_one_place() {
        for kind in [MmaKind::F16, MmaKind::Bf16, MmaKind::Tf32] {
            let k = kind.k() as usize;
            let (mut a, mut b, mut c) = (vec![0; 16 * k], vec![0; k * 8], vec![0; 16 * 8]);
            for lane in 0..WARP {
                for h in 0..per_reg(kind) {
                    for reg in 0..4 {
                        let (row, kk) = a_coord(kind, lane, reg, h);
                        a[row * k + kk] += 1;
                    }
                    for reg in 0..2 {
                        let (kk, col) = b_coord(kind, lane, reg, h);
                        b[kk * 8 + col] += 1;
                    }
                }
                for reg in 0..4 {
                    let (row, col) = c_coord(lane, reg);
                    c[row * 8 + col] += 1;
                }
            }
            assert!(a.iter().chain(&b).chain(&c).all(|n| *n == 1), "{kind:?}");
        }
    }
}

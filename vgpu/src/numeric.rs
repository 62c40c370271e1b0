//! The arithmetic of PTX instructions where it differs from Rust's
//! operators: float min/max, the approximate transcendental functions,
//! conversions and the source lane of a shuffle.

use half::{bf16, f16};
use ktune_core::ptx::inst::ShflMode;

use crate::decode::Num;

/// The NaN NVIDIA GPUs produce for f32 results.
pub(crate) const CANONICAL_NAN: u32 = 0x7fff_ffff;
/// The NaN produced for f16 and bf16 results.
const CANONICAL_NAN_16: u16 = 0x7fff;

/// `min.f32`: a NaN operand yields the other operand; -0.0 < +0.0.
pub(crate) fn min_f32(a: f32, b: f32) -> f32 {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => f32::from_bits(CANONICAL_NAN),
        (true, false) => b,
        (false, true) => a,
        _ if a < b || (a == b && a.is_sign_negative()) => a,
        _ => b,
    }
}

/// `max.f32`: a NaN operand yields the other operand; +0.0 > -0.0.
pub(crate) fn max_f32(a: f32, b: f32) -> f32 {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => f32::from_bits(CANONICAL_NAN),
        (true, false) => b,
        (false, true) => a,
        _ if a > b || (a == b && a.is_sign_positive()) => a,
        _ => b,
    }
}

// The `.approx` functions are computed in f64 and rounded once: the
// hardware's results are within 2 ulp of the true value, so these are
// within 2 ulp of the hardware's, never bit-exact by design.

/// `rsqrt.approx.f32`
pub(crate) fn rsqrt_approx(x: f32) -> f32 {
    (1.0 / f64::from(x).sqrt()) as f32
}

/// `ex2.approx.f32`
pub(crate) fn ex2_approx(x: f32) -> f32 {
    f64::from(x).exp2() as f32
}

/// `lg2.approx.f32`
pub(crate) fn lg2_approx(x: f32) -> f32 {
    f64::from(x).log2() as f32
}

/// Reads a register's low bits as `from` and converts to `to`, with the
/// rounding the printer gives the pair: `.rn` into floats, `.rzi` (with
/// saturation, NaN → 0) into integers. Returns exactly `to`'s bits,
/// zero-extended to 64.
pub(crate) fn convert(from: Num, to: Num, bits: u64) -> u64 {
    match (from, to) {
        (
            Num::Int {
                bits: fb,
                signed: fs,
            },
            Num::Int { bits: tb, .. },
        ) => {
            let v = extend(bits, fb, fs);
            truncate(v, tb)
        }
        (Num::Int { bits: fb, signed }, float) => {
            let v = extend(bits, fb, signed);
            // Rust's integer-to-float `as` rounds to nearest even, like `.rn`.
            let x = if signed { v as i64 as f32 } else { v as f32 };
            from_f32(x, float)
        }
        (float, Num::Int { bits: tb, signed }) => {
            let x = to_f32(bits, float);
            let v = match (tb, signed) {
                // PTX: NaN converts to 0, except into 64-bit integers, where it
                // converts to 1 << 63.
                (64, _) if x.is_nan() => 1u64 << 63,
                (64, false) => x as u64,
                (64, true) => x as i64 as u64,
                (32, false) => u64::from(x as u32),
                (32, true) => x as i32 as u32 as u64,
                (16, false) => u64::from(x as u16),
                (16, true) => u64::from(x as i16 as u16),
                (b, _) => truncate(x as i64 as u64, b),
            };
            truncate(v, tb)
        }
        (from, to) => from_f32(to_f32(bits, from), to),
    }
}

/// Sign- or zero-extends the low `bits` bits of `v` to 64 bits.
fn extend(v: u64, bits: u8, signed: bool) -> u64 {
    if bits >= 64 {
        return v;
    }
    let shift = 64 - u32::from(bits);
    if signed {
        (((v << shift) as i64) >> shift) as u64
    } else {
        (v << shift) >> shift
    }
}

fn truncate(v: u64, bits: u8) -> u64 {
    if bits >= 64 {
        v
    } else {
        v & ((1u64 << bits) - 1)
    }
}

fn to_f32(bits: u64, from: Num) -> f32 {
    match from {
        Num::F32 | Num::Tf32 => f32::from_bits(bits as u32),
        Num::F16 => f16::from_bits(bits as u16).to_f32(),
        Num::Bf16 => bf16::from_bits(bits as u16).to_f32(),
        Num::Int { .. } => 0.0,
    }
}

fn from_f32(x: f32, to: Num) -> u64 {
    match to {
        Num::F32 => u64::from(x.to_bits()),
        Num::Tf32 => u64::from(tf32_rna(x)),
        _ if x.is_nan() => u64::from(CANONICAL_NAN_16),
        // `half` rounds to nearest even, overflowing to infinity, like `.rn`.
        Num::F16 => u64::from(f16::from_f32(x).to_bits()),
        Num::Bf16 => u64::from(bf16::from_f32(x).to_bits()),
        Num::Int { .. } => 0,
    }
}

/// `cvt.rna.tf32.f32`: rounds to 10 mantissa bits, to nearest with ties
/// away from zero, leaving the low 13 bits zero; NaN gives the canonical NaN.
pub(crate) fn tf32_rna(x: f32) -> u32 {
    if x.is_nan() {
        return CANONICAL_NAN;
    }
    // Half a tf32 ulp added to the magnitude carries into the kept bits
    // exactly when the dropped bits are at least half: ties go up in
    // magnitude. The largest finite values round to infinity, like `.rna`.
    (x.to_bits() + 0x1000) & !0x1fff
}

/// `atom.add.f32` / `red.add.f32` on global memory: rounds to nearest even
/// and flushes subnormal inputs and results to zero, keeping the sign.
pub(crate) fn atomic_add_f32(old: f32, value: f32) -> f32 {
    let ftz = |x: f32| {
        if x.is_subnormal() {
            0.0f32.copysign(x)
        } else {
            x
        }
    };
    ftz(ftz(old) + ftz(value))
}

/// The lane a `shfl.sync` lane reads from, per the PTX ISA:
///
/// ```text
/// bval = b[4:0]; cval = c[4:0]; segmask = c[12:8]
/// maxLane = (lane & segmask) | (cval & ~segmask)
/// minLane = lane & segmask
/// up:   j = lane - bval;                      pval = j >= maxLane
/// down: j = lane + bval;                      pval = j <= maxLane
/// bfly: j = lane ^ bval;                      pval = j <= maxLane
/// idx:  j = minLane | (bval & ~segmask);      pval = j <= maxLane
/// if !pval { j = lane }
/// ```
pub(crate) fn shfl_source(mode: ShflMode, lane: u32, b: u32, c: u32) -> u32 {
    let bval = (b & 31) as i32;
    let cval = (c & 31) as i32;
    let segmask = ((c >> 8) & 31) as i32;
    let lane = lane as i32;
    let max_lane = (lane & segmask) | (cval & !segmask & 31);
    let min_lane = lane & segmask;
    let (j, valid) = match mode {
        ShflMode::Up => {
            let j = lane - bval;
            (j, j >= max_lane)
        }
        ShflMode::Down => {
            let j = lane + bval;
            (j, j <= max_lane)
        }
        ShflMode::Bfly => {
            let j = lane ^ bval;
            (j, j <= max_lane)
        }
        ShflMode::Idx => {
            let j = min_lane | (bval & !segmask & 31);
            (j, j <= max_lane)
        }
    };
    if valid { j as u32 } else { lane as u32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_max_follow_ptx() {
        assert_eq!(min_f32(f32::NAN, 1.0), 1.0);
        assert_eq!(max_f32(2.0, f32::NAN), 2.0);
        assert!(min_f32(f32::NAN, f32::NAN).is_nan());
        assert!(min_f32(0.0, -0.0).is_sign_negative());
        assert!(min_f32(-0.0, 0.0).is_sign_negative());
        assert!(max_f32(0.0, -0.0).is_sign_positive());
        assert!(max_f32(-0.0, 0.0).is_sign_positive());
    }

    #[test]
    fn shfl_clamps() {
        // down with clamp 31: lanes past the end keep their own value.
        assert_eq!(shfl_source(ShflMode::Down, 30, 4, 31), 30);
        assert_eq!(shfl_source(ShflMode::Down, 3, 4, 31), 7);
        // up with c = 0: lanes below the start keep their own value.
        assert_eq!(shfl_source(ShflMode::Up, 2, 4, 0), 2);
        assert_eq!(shfl_source(ShflMode::Up, 9, 4, 0), 5);
        // up with c = 31 never transfers (maxLane = 31).
        assert_eq!(shfl_source(ShflMode::Up, 9, 4, 31), 9);
        // idx broadcast and 16-lane segments (width 16: c = (16 << 8) | 15).
        assert_eq!(shfl_source(ShflMode::Idx, 20, 3, 31), 3);
        let c16 = (0x10 << 8) | 0xf;
        assert_eq!(shfl_source(ShflMode::Idx, 20, 3, c16), 19);
        assert_eq!(shfl_source(ShflMode::Down, 14, 4, c16), 14);
        assert_eq!(shfl_source(ShflMode::Bfly, 5, 16, c16), 5);
        assert_eq!(shfl_source(ShflMode::Bfly, 5, 8, c16), 13);
    }

    #[test]
    fn conversions() {
        let f = |x: f32| u64::from(x.to_bits());
        let u32_ = Num::Int {
            bits: 32,
            signed: false,
        };
        assert_eq!(convert(Num::F32, u32_, f(-3.5)), 0);
        assert_eq!(convert(Num::F32, u32_, f(3.99)), 3);
        assert_eq!(convert(Num::F32, u32_, f(f32::NAN)), 0);
        assert_eq!(convert(Num::F32, u32_, f(1e20)), u64::from(u32::MAX));
        assert_eq!(convert(u32_, Num::F32, 16_777_217), f(16_777_216.0));
        assert_eq!(convert(Num::F32, Num::F16, f(f32::NAN)), 0x7fff);
    }

    #[test]
    fn tf32_rounds_to_nearest_ties_away() {
        let tf32 = |bits: u32| tf32_rna(f32::from_bits(bits));
        // 1 + 2^-11 is half a tf32 ulp above 1: a tie, away from zero.
        assert_eq!(tf32(0x3f80_1000), 0x3f80_2000);
        assert_eq!(tf32(0xbf80_1000), 0xbf80_2000);
        assert_eq!(tf32(0x3f80_0fff), 0x3f80_0000);
        assert_eq!(tf32(0x3f80_1001), 0x3f80_2000);
        assert_eq!(tf32(0x3f80_3000), 0x3f80_4000);
        assert_eq!(tf32(f32::MAX.to_bits()), f32::INFINITY.to_bits());
        assert_eq!(
            tf32(f32::NEG_INFINITY.to_bits()),
            f32::NEG_INFINITY.to_bits()
        );
        assert_eq!(tf32(0x7f80_0001), CANONICAL_NAN);
        assert_eq!(
            convert(Num::F32, Num::Tf32, u64::from(1.5f32.to_bits())),
            u64::from(1.5f32.to_bits())
        );
    }

    #[test]
    fn atomic_add_flushes_subnormals() {
        let tiny = f32::from_bits(1);
        assert_eq!(atomic_add_f32(1.0, 2.5), 3.5);
        assert_eq!(atomic_add_f32(tiny, 0.0).to_bits(), 0);
        assert_eq!(atomic_add_f32(-tiny, -0.0).to_bits(), (-0.0f32).to_bits());
        // A subnormal input counts as zero; a subnormal sum becomes zero.
        let half_min = f32::MIN_POSITIVE / 2.0;
        assert_eq!(
            atomic_add_f32(f32::MIN_POSITIVE, -half_min),
            f32::MIN_POSITIVE
        );
        let just_above = f32::from_bits(f32::MIN_POSITIVE.to_bits() + 1);
        assert_eq!(atomic_add_f32(just_above, -f32::MIN_POSITIVE).to_bits(), 0);
    }
}

//! Each instruction family on hand-built kernels, against results computed
//! directly in Rust.

mod common;

use common::{arith, map_f32, one_block, per_lane, try_per_lane};
use ktune_core::ptx::Builder;
use ktune_core::ptx::inst::{
    Addr, ArithOp, Cmp, Op, Operand, Reg, RegClass, Space, Special, Ty, UnaryOp,
};
use ktune_core::{DType, lower::Launch};
use ktune_vgpu::{Config, FaultKind, Memory};

fn unary(b: &mut Builder, op: UnaryOp, ty: Ty, x: impl Into<Operand>) -> Reg {
    let class = match ty {
        Ty::F32 => RegClass::F32,
        Ty::Pred => RegClass::Pred,
        _ => RegClass::B32,
    };
    let dst = b.reg(class);
    b.push(Op::Unary {
        op,
        ty,
        dst,
        a: x.into(),
    });
    dst
}

fn cvt(b: &mut Builder, to: Ty, from: Ty, src: Reg) -> Reg {
    let class = match to {
        Ty::F32 => RegClass::F32,
        Ty::F16 | Ty::Bf16 | Ty::U16 | Ty::B16 => RegClass::B16,
        Ty::U64 => RegClass::B64,
        _ => RegClass::B32,
    };
    let dst = b.reg(class);
    b.push(Op::Cvt { to, from, dst, src });
    dst
}

fn select_u32(b: &mut Builder, p: Reg) -> Reg {
    let dst = b.reg(RegClass::B32);
    b.push(Op::Selp {
        ty: Ty::U32,
        dst,
        a: Operand::Int(1),
        b: Operand::Int(0),
        cond: p,
    });
    dst
}

fn lanes() -> impl Iterator<Item = u32> {
    0..32
}

#[test]
fn integer_arithmetic_wraps() {
    let got = per_lane(|b, t| arith(b, ArithOp::Add, Ty::U32, t, Operand::Int(-1)));
    assert_eq!(got, lanes().map(|t| t.wrapping_sub(1)).collect::<Vec<_>>());
    let got = per_lane(|b, t| arith(b, ArithOp::Sub, Ty::U32, Operand::Int(0), t));
    assert_eq!(
        got,
        lanes().map(|t| 0u32.wrapping_sub(t)).collect::<Vec<_>>()
    );
    let got = per_lane(|b, t| arith(b, ArithOp::Mul, Ty::U32, t, Operand::Int(0x9e37_79b9)));
    assert_eq!(
        got,
        lanes()
            .map(|t| t.wrapping_mul(0x9e37_79b9))
            .collect::<Vec<_>>()
    );
    let got = per_lane(|b, t| b.u32_mad(t, Operand::Int(0x7fff_ffff), Operand::Int(7)));
    let want: Vec<u32> = lanes()
        .map(|t| t.wrapping_mul(0x7fff_ffff).wrapping_add(7))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn mul_wide_and_truncating_cvt() {
    let wide = |b: &mut Builder, t: Reg, high: bool| {
        let x = arith(b, ArithOp::Add, Ty::U32, t, Operand::Int(0xffff_fff0));
        let w = b.reg(RegClass::B64);
        b.push(Op::MulWide {
            dst: w,
            a: x.into(),
            b: Operand::Int(0x1_0001),
        });
        let w = if high {
            arith(b, ArithOp::Shr, Ty::U64, w, Operand::Int(32))
        } else {
            w
        };
        cvt(b, Ty::U32, Ty::U64, w)
    };
    let reference = |t: u32| u64::from(t.wrapping_add(0xffff_fff0)) * 0x1_0001;
    let lo = per_lane(|b, t| wide(b, t, false));
    let hi = per_lane(|b, t| wide(b, t, true));
    for t in lanes() {
        assert_eq!(lo[t as usize], reference(t) as u32);
        assert_eq!(hi[t as usize], (reference(t) >> 32) as u32);
    }
}

#[test]
fn division_and_remainder() {
    let got = per_lane(|b, t| {
        let q = b.u32_op(ArithOp::Div, t, Operand::Int(3));
        let r = b.u32_op(ArithOp::Rem, t, Operand::Int(3));
        b.u32_mad(q, Operand::Int(1000), r)
    });
    assert_eq!(
        got,
        lanes().map(|t| t / 3 * 1000 + t % 3).collect::<Vec<_>>()
    );
    let got = per_lane(|b, t| {
        let neg = arith(b, ArithOp::Sub, Ty::S32, t, Operand::Int(16));
        arith(b, ArithOp::Div, Ty::S32, neg, Operand::Int(5))
    });
    let want: Vec<u32> = lanes().map(|t| ((t as i32 - 16) / 5) as u32).collect();
    assert_eq!(got, want);
}

#[test]
fn division_by_zero_faults() {
    let fault = try_per_lane(|b, t| b.u32_op(ArithOp::Div, Operand::Int(100), t)).unwrap_err();
    assert_eq!(fault.kind, FaultKind::DivisionByZero);
    assert_eq!(fault.thread, [0, 0, 0]);
    assert_eq!(fault.instruction, "div.u32 %r1, 100, %r0");
}

#[test]
fn trap_faults() {
    let fault = try_per_lane(|b, t| {
        b.push(Op::Trap);
        t
    })
    .unwrap_err();
    assert_eq!(fault.kind, FaultKind::Trap);
    assert_eq!(fault.instruction, "trap");
}

/// `%globaltimer_lo` counts a nanosecond an instruction the thread
/// executed: it advances over every instruction between two reads.
#[test]
fn the_global_timer_advances() {
    let got = per_lane(|b, t| {
        let start = b.special(Special::GlobalTimerLo);
        let spent = b.u32_op(ArithOp::Add, t, Operand::Int(1));
        let spent = b.u32_op(ArithOp::Mul, spent, Operand::Int(3));
        let now = b.special(Special::GlobalTimerLo);
        let elapsed = b.u32_op(ArithOp::Sub, now, start);
        b.u32_op(ArithOp::Add, elapsed, spent)
    });
    // Three instructions from the first read to the second; `spent` is
    // the lane's own.
    assert_eq!(got, lanes().map(|t| 3 + 3 * (t + 1)).collect::<Vec<_>>());
}

#[test]
fn shifts_clamp_at_the_width() {
    let got = per_lane(|b, t| b.u32_op(ArithOp::Shl, Operand::Int(1), t));
    assert_eq!(got, lanes().map(|t| 1 << t).collect::<Vec<_>>());
    let got = per_lane(|b, t| {
        let s = arith(b, ArithOp::Add, Ty::U32, t, Operand::Int(16));
        b.u32_op(ArithOp::Shl, Operand::Int(0xffff), s)
    });
    let want: Vec<u32> = lanes()
        .map(|t| 0xffffu32.checked_shl(t + 16).unwrap_or(0))
        .collect();
    assert_eq!(got, want);
    let got = per_lane(|b, t| {
        let s = arith(b, ArithOp::Add, Ty::U32, t, Operand::Int(16));
        arith(b, ArithOp::Shr, Ty::U32, Operand::Int(0x8000_0000), s)
    });
    let want: Vec<u32> = lanes()
        .map(|t| 0x8000_0000u32.checked_shr(t + 16).unwrap_or(0))
        .collect();
    assert_eq!(got, want);
    let got = per_lane(|b, t| {
        let s = arith(b, ArithOp::Add, Ty::U32, t, Operand::Int(16));
        arith(b, ArithOp::Shr, Ty::S32, Operand::Int(0x8000_0000), s)
    });
    let want: Vec<u32> = lanes()
        .map(|t| (i32::MIN >> (t + 16).min(31)) as u32)
        .collect();
    assert_eq!(got, want);
}

#[test]
fn bitwise_and_min_max() {
    let got = per_lane(|b, t| {
        let x = b.u32_op(ArithOp::Xor, t, Operand::Int(0x5a));
        let y = b.u32_op(ArithOp::And, x, Operand::Int(0x3c));
        let z = b.u32_op(ArithOp::Or, y, Operand::Int(0x100));
        unary(b, UnaryOp::Not, Ty::B32, z)
    });
    assert_eq!(
        got,
        lanes()
            .map(|t| !(((t ^ 0x5a) & 0x3c) | 0x100))
            .collect::<Vec<_>>()
    );
    let got = per_lane(|b, t| {
        let d = arith(b, ArithOp::Sub, Ty::S32, t, Operand::Int(16));
        let lo = arith(b, ArithOp::Max, Ty::S32, d, Operand::Int(-4));
        arith(b, ArithOp::Min, Ty::S32, lo, Operand::Int(4))
    });
    assert_eq!(
        got,
        lanes()
            .map(|t| (t as i32 - 16).clamp(-4, 4) as u32)
            .collect::<Vec<_>>()
    );
    let got = per_lane(|b, t| {
        let d = arith(b, ArithOp::Sub, Ty::U32, t, Operand::Int(16));
        arith(b, ArithOp::Min, Ty::U32, d, Operand::Int(100))
    });
    assert_eq!(
        got,
        lanes()
            .map(|t| t.wrapping_sub(16).min(100))
            .collect::<Vec<_>>()
    );
}

#[test]
fn predicates_and_select() {
    let got = per_lane(|b, t| {
        let lt = b.setp(Cmp::Lt, Ty::U32, t, Operand::Int(16));
        let ge = b.setp(Cmp::Ge, Ty::U32, t, Operand::Int(8));
        let odd_bit = b.u32_op(ArithOp::And, t, Operand::Int(1));
        let odd = b.setp(Cmp::Ne, Ty::U32, odd_bit, Operand::Int(0));
        let both = b.pred_op(ArithOp::And, lt, ge);
        let either = b.pred_op(ArithOp::Or, both, odd);
        let flip = b.pred_op(ArithOp::Xor, either, lt);
        let not = b.pred_not(flip);
        select_u32(b, not)
    });
    let want: Vec<u32> = lanes()
        .map(|t| {
            let (lt, ge, odd) = (t < 16, t >= 8, t % 2 == 1);
            u32::from(!(((lt && ge) || odd) ^ lt))
        })
        .collect();
    assert_eq!(got, want);
    let got = per_lane(|b, t| {
        let d = arith(b, ArithOp::Sub, Ty::S32, t, Operand::Int(16));
        let neg = b.setp(Cmp::Lt, Ty::S32, d, Operand::Int(0));
        select_u32(b, neg)
    });
    assert_eq!(got, lanes().map(|t| u32::from(t < 16)).collect::<Vec<_>>());
}

fn specials() -> Vec<f32> {
    vec![
        0.0,
        -0.0,
        1.0,
        -1.5,
        3.25,
        1e-40,
        -1e-40,
        f32::MIN_POSITIVE,
        f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        0.1,
        7.0,
        -1e30,
        16_777_217.0,
    ]
}

/// `min.f32` per the PTX ISA: a NaN operand yields the other; -0 < +0.
fn ptx_min(a: f32, b: f32) -> f32 {
    if a.is_nan() {
        return b;
    }
    if b.is_nan() || a < b || (a == b && a.is_sign_negative()) {
        a
    } else {
        b
    }
}

/// `max.f32` per the PTX ISA: a NaN operand yields the other; +0 > -0.
fn ptx_max(a: f32, b: f32) -> f32 {
    if a.is_nan() {
        return b;
    }
    if b.is_nan() || a > b || (a == b && a.is_sign_positive()) {
        a
    } else {
        b
    }
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || a.is_nan() && b.is_nan()
}

#[test]
fn f32_arithmetic_rounds_like_ieee() {
    let mut x = common::values(32, 5);
    let mut y = common::values(32, 6);
    let s = specials();
    x[..16].copy_from_slice(&s);
    y[16..].copy_from_slice(&s);
    y[..16].copy_from_slice(&[
        1.0,
        0.0,
        -0.0,
        3.0,
        f32::NAN,
        1e-40,
        2.0,
        0.5,
        2.0,
        1.0,
        -1.0,
        1.0,
        3.0,
        0.1,
        1e30,
        1.0,
    ]);
    type F = fn(f32, f32) -> f32;
    let cases: [(ArithOp, F); 6] = [
        (ArithOp::Add, |a, b| a + b),
        (ArithOp::Sub, |a, b| a - b),
        (ArithOp::Mul, |a, b| a * b),
        (ArithOp::Div, |a, b| a / b),
        (ArithOp::Min, ptx_min),
        (ArithOp::Max, ptx_max),
    ];
    for (arith, reference) in cases {
        let got = map_f32(&[&x, &y], |b, v| b.f32_op(arith, v[0], v[1]));
        for i in 0..32 {
            let want = reference(x[i], y[i]);
            assert!(
                same(got[i], want),
                "{arith:?}({}, {}) = {} want {want}",
                x[i],
                y[i],
                got[i]
            );
        }
    }
}

#[test]
fn fma_is_fused() {
    let a = 1.0 + f32::EPSILON * 2048.0;
    let c = -(1.0 + f32::EPSILON * 4096.0);
    assert_ne!(
        a * a + c,
        a.mul_add(a, c),
        "the case must tell fused from unfused"
    );
    let x = vec![a; 32];
    let z = vec![c; 32];
    let got = map_f32(&[&x, &z], |b, v| b.f32_fma(v[0], v[0], v[1]));
    assert_eq!(got[0].to_bits(), a.mul_add(a, c).to_bits());
}

#[test]
fn f32_unary_operations() {
    let mut x = common::values(32, 9);
    x[..16].copy_from_slice(&specials());
    type Exact = fn(f32) -> f32;
    type Reference = fn(f64) -> f64;
    let exact: [(UnaryOp, Exact); 4] = [
        (UnaryOp::Neg, |a| -a),
        (UnaryOp::Abs, f32::abs),
        (UnaryOp::Sqrt, f32::sqrt),
        (UnaryOp::Rcp, |a| 1.0 / a),
    ];
    for (u, reference) in exact {
        let got = map_f32(&[&x], |b, v| b.f32_unary(u, v[0]));
        for i in 0..32 {
            assert!(
                same(got[i], reference(x[i])),
                "{u:?}({}) = {}",
                x[i],
                got[i]
            );
        }
    }
    let approx: [(UnaryOp, Reference); 4] = [
        (UnaryOp::Rsqrt, |a| 1.0 / a.sqrt()),
        (UnaryOp::RcpApprox, |a| 1.0 / a),
        (UnaryOp::Ex2, f64::exp2),
        (UnaryOp::Lg2, f64::log2),
    ];
    for (u, reference) in approx {
        let got = map_f32(&[&x], |b, v| b.f32_unary(u, v[0]));
        for i in 0..32 {
            let want = reference(f64::from(x[i])) as f32;
            assert!(
                same(got[i], want),
                "{u:?}({}) = {} want {want}",
                x[i],
                got[i]
            );
        }
    }
    let zeros = [0.0f32, -0.0].repeat(16);
    let got = map_f32(&[&zeros], |b, v| b.f32_unary(UnaryOp::Rsqrt, v[0]));
    assert_eq!((got[0], got[1]), (f32::INFINITY, f32::NEG_INFINITY));
}

#[test]
fn float_comparisons_are_ordered_except_neu() {
    let x: Vec<f32> = [1.0, f32::NAN, 2.0, f32::NAN].repeat(8);
    let y: Vec<f32> = [1.0, 1.0, 1.0, f32::NAN].repeat(8);
    let cmps = [
        Cmp::Lt,
        Cmp::Le,
        Cmp::Gt,
        Cmp::Ge,
        Cmp::Eq,
        Cmp::Ne,
        Cmp::Neu,
    ];
    for cmp in cmps {
        let got = map_f32(&[&x, &y], |b, v| {
            let p = b.setp(cmp, Ty::F32, v[0], v[1]);
            b.f32_select(p, Operand::F32(1.0), Operand::F32(0.0))
        });
        for i in 0..4 {
            let (a, c) = (x[i], y[i]);
            let want = match cmp {
                Cmp::Lt => a < c,
                Cmp::Le => a <= c,
                Cmp::Gt => a > c,
                Cmp::Ge => a >= c,
                Cmp::Eq => a == c,
                Cmp::Ne => a != c && !a.is_nan() && !c.is_nan(),
                Cmp::Neu => a != c,
            };
            assert_eq!(got[i], f32::from(u8::from(want)), "{cmp:?}({a}, {c})");
        }
    }
}

#[test]
fn integer_float_conversions() {
    let ints: [u32; 8] = [
        0,
        1,
        16_777_217,
        16_777_219,
        0xffff_ffff,
        0x8000_0001,
        3,
        1 << 31,
    ];
    let got = per_lane(|b, t| {
        // Pick ints[t % 8] through a small table in registers.
        let i = b.u32_op(ArithOp::And, t, Operand::Int(7));
        let mut v = b.u32_imm(ints[0]);
        for (k, value) in ints.iter().enumerate().skip(1) {
            let hit = b.setp(Cmp::Eq, Ty::U32, i, Operand::Int(k as i64));
            let c = b.u32_imm(*value);
            let next = b.reg(RegClass::B32);
            b.push(Op::Selp {
                ty: Ty::U32,
                dst: next,
                a: c.into(),
                b: v.into(),
                cond: hit,
            });
            v = next;
        }
        let f = b.u32_to_f32(v);
        let back = b.reg(RegClass::B32);
        b.push(Op::Mov {
            ty: Ty::B32,
            dst: back,
            src: f.into(),
        });
        back
    });
    for t in 0..32 {
        assert_eq!(f32::from_bits(got[t]), ints[t % 8] as f32);
    }
    let x: Vec<f32> = [
        -3.5,
        3.99,
        f32::NAN,
        1e20,
        0.5,
        -0.0,
        4_294_967_040.0,
        f32::INFINITY,
    ]
    .repeat(4);
    let got = map_f32(&[&x], |b, v| {
        let u = cvt(b, Ty::U32, Ty::F32, v[0]);
        let f = b.reg(RegClass::F32);
        b.push(Op::Mov {
            ty: Ty::B32,
            dst: f,
            src: u.into(),
        });
        f
    });
    for i in 0..8 {
        assert_eq!(got[i].to_bits(), x[i] as u32, "cvt.rzi.u32.f32({})", x[i]);
    }
}

#[test]
fn mov_between_f32_and_b32_copies_bits() {
    let x = common::values(32, 3);
    let got = map_f32(&[&x], |b, v| {
        let r = b.reg(RegClass::B32);
        b.push(Op::Mov {
            ty: Ty::B32,
            dst: r,
            src: v[0].into(),
        });
        let flipped = b.u32_op(ArithOp::Xor, r, Operand::Int(0x8000_0000));
        let f = b.reg(RegClass::F32);
        b.push(Op::Mov {
            ty: Ty::B32,
            dst: f,
            src: flipped.into(),
        });
        f
    });
    for i in 0..32 {
        assert_eq!(got[i], -x[i]);
    }
}

/// A kernel that copies `n` f32 per thread with one vector load and store.
fn vector_copy(n: usize, offset: i64) -> ktune_core::ptx::Kernel {
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let src = b.param_ptr(0);
    let dst = b.param_ptr(1);
    let first = b.u32_op(ArithOp::Mul, tid, Operand::Int(n as i64));
    let s = b.global_addr(src, first, 4);
    let regs = b.load_f32_vec(Space::Global, Addr { base: s, offset }, n);
    let d = b.global_addr(dst, first, 4);
    b.push(Op::St {
        space: Space::Global,
        ty: Ty::F32,
        addr: Addr { base: d, offset: 0 },
        srcs: regs.iter().map(|r| (*r).into()).collect(),
    });
    b.finish("vector_copy".into(), 2, 32, 0)
}

#[test]
fn vector_loads_and_stores() {
    for n in [2, 4] {
        let x = common::values(32 * n, n as u64);
        let (got, stats) =
            ktune_vgpu::run_f32(&vector_copy(n, 0), &one_block(32, 0), &[&x], 32 * n).unwrap();
        assert_eq!(got, x);
        assert_eq!(stats.global_load_bytes, 32 * n as u64 * 4);
        assert_eq!(stats.global_store_bytes, 32 * n as u64 * 4);
    }
    let x = common::values(32 * 4 + 1, 1);
    let fault =
        ktune_vgpu::run_f32(&vector_copy(4, 4), &one_block(32, 0), &[&x], 32 * 4).unwrap_err();
    assert!(
        matches!(fault.kind, FaultKind::MisalignedAccess { size: 16, .. }),
        "{fault}"
    );
}

#[test]
fn sixteen_bit_loads_and_stores() {
    // out[t] = in[t] through .b16, with f16 data.
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let src = b.param_ptr(0);
    let dst = b.param_ptr(1);
    let s = b.global_addr(src, tid, 2);
    let x = b.load(Space::Global, DType::F16, Addr { base: s, offset: 0 });
    let y = b.f32_op(ArithOp::Mul, x, Operand::F32(2.0));
    let d = b.global_addr(dst, tid, 2);
    b.store(Space::Global, DType::F16, Addr { base: d, offset: 0 }, y);
    let kernel = b.finish("half".into(), 2, 32, 0);
    let x: Vec<half::f16> = common::values(32, 4)
        .into_iter()
        .map(half::f16::from_f32)
        .collect();
    let bytes: Vec<u8> = x.iter().flat_map(|h| h.to_le_bytes()).collect();
    let (out, _) = ktune_vgpu::run_bytes(
        &kernel,
        &one_block(32, 0),
        &[&bytes],
        ktune_vgpu::poisoned(DType::F16, 32),
    )
    .unwrap();
    for (i, c) in out.chunks_exact(2).enumerate() {
        let got = half::f16::from_le_bytes([c[0], c[1]]);
        assert_eq!(got, half::f16::from_f32(x[i].to_f32() * 2.0));
    }
}

#[test]
fn special_registers() {
    // Every thread stores ctaid/tid/ntid/nctaid/laneid packed into bytes.
    let launch = Launch {
        grid: [2, 3, 2],
        block: [8, 4, 1],
        dynamic_shared_bytes: 0,
        workspace_bytes: 0,
        persistent: false,
        registers: 0,
    };
    let mut b = Builder::new();
    let regs: Vec<Reg> = [
        Special::TidX,
        Special::TidY,
        Special::NtidX,
        Special::CtaidX,
        Special::CtaidY,
        Special::CtaidZ,
        Special::NctaidX,
        Special::NctaidY,
        Special::LaneId,
    ]
    .into_iter()
    .map(|s| b.special(s))
    .collect();
    let out = b.param_ptr(0);
    // flat = ((ctaid.z * nctaid.y + ctaid.y) * nctaid.x + ctaid.x) * 32 + tid.y * ntid.x + tid.x
    let zy = b.u32_mad(regs[5], regs[7], regs[4]);
    let block = b.u32_mad(zy, regs[6], regs[3]);
    let row = b.u32_mad(regs[1], regs[2], regs[0]);
    let flat = b.u32_mad(block, Operand::Int(32), row);
    let mut packed = regs[8];
    for r in [regs[0], regs[1], regs[3], regs[4], regs[5]] {
        let shifted = b.u32_op(ArithOp::Shl, packed, Operand::Int(5));
        packed = b.u32_op(ArithOp::Or, shifted, r);
    }
    common::store_at_tid(&mut b, out, flat, packed);
    let kernel = b.finish("specials".into(), 1, 32, 0);
    let mut params = vec![vec![0u8; 12 * 32 * 4]];
    let stats = ktune_vgpu::run(&kernel, &launch, &mut params).unwrap();
    assert_eq!((stats.blocks, stats.threads), (12, 384));
    let words: Vec<u32> = params[0]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    for z in 0..2 {
        for y in 0..3 {
            for x in 0..2 {
                for ty in 0..4 {
                    for tx in 0..8 {
                        let block = (z * 3 + y) * 2 + x;
                        let lane = ty * 8 + tx;
                        let mut want = lane;
                        for v in [tx, ty, x, y, z] {
                            want = (want << 5) | v;
                        }
                        assert_eq!(words[(block * 32 + lane) as usize], want);
                    }
                }
            }
        }
    }
}

#[test]
fn loops_guards_and_early_return() {
    // sum = 0 + 1 + ... + (tid - 1), by a loop; odd threads return early
    // and leave their output untouched.
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let out = b.param_ptr(0);
    let bit = b.u32_op(ArithOp::And, tid, Operand::Int(1));
    let odd = b.setp(Cmp::Ne, Ty::U32, bit, Operand::Int(0));
    b.push_guarded(odd, false, Op::Ret);
    let sum = b.u32_imm(0);
    let i = b.u32_imm(0);
    let top = b.label();
    let done = b.label();
    b.place(top);
    let at_end = b.setp(Cmp::Ge, Ty::U32, i, tid);
    b.bra_if(at_end, false, done);
    b.push(Op::Arith {
        op: ArithOp::Add,
        ty: Ty::U32,
        dst: sum,
        a: sum.into(),
        b: i.into(),
    });
    b.push(Op::Arith {
        op: ArithOp::Add,
        ty: Ty::U32,
        dst: i,
        a: i.into(),
        b: Operand::Int(1),
    });
    b.bra(top);
    b.place(done);
    // @!odd add 1000 (always taken here: odd threads have returned).
    b.push_guarded(
        odd,
        true,
        Op::Arith {
            op: ArithOp::Add,
            ty: Ty::U32,
            dst: sum,
            a: sum.into(),
            b: Operand::Int(1000),
        },
    );
    common::store_at_tid(&mut b, out, tid, sum);
    let kernel = b.finish("loop".into(), 1, 32, 0);
    let mut params = vec![vec![0xffu8; 32 * 4]];
    ktune_vgpu::run(&kernel, &one_block(32, 0), &mut params).unwrap();
    for t in 0..32u32 {
        let c = &params[0][t as usize * 4..][..4];
        let got = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        let want = if t % 2 == 1 {
            u32::MAX
        } else {
            t * (t.max(1) - 1) / 2 + 1000
        };
        assert_eq!(got, want, "thread {t}");
    }
}

#[test]
fn reading_an_unwritten_register_faults() {
    let fault = try_per_lane(|b, t| {
        let never = b.reg(RegClass::B32);
        b.u32_op(ArithOp::Add, t, never)
    })
    .unwrap_err();
    assert_eq!(
        fault.kind,
        FaultKind::UninitializedRegister { reg: "%r1".into() }
    );
}

#[test]
fn an_endless_loop_hits_the_step_limit() {
    let mut b = Builder::new();
    let top = b.label();
    b.place(top);
    b.bra(top);
    let kernel = b.finish("forever".into(), 0, 32, 0);
    let fault = ktune_vgpu::run_with(
        &kernel,
        &one_block(32, 0),
        &mut Memory::default(),
        &Config::default().step_limit(1000),
    )
    .unwrap_err();
    assert_eq!(fault.kind, FaultKind::StepLimit { limit: 1000 });
    assert_eq!(fault.instruction, "bra.uni $L__BB1");
}

#[test]
fn malformed_kernels_and_launches_are_rejected() {
    let mut b = Builder::new();
    let nowhere = b.label();
    b.bra(nowhere);
    let kernel = b.finish("dangling".into(), 0, 32, 0);
    let fault = ktune_vgpu::run(&kernel, &one_block(32, 0), &mut []).unwrap_err();
    assert!(
        matches!(fault.kind, FaultKind::InvalidKernel { .. }),
        "{fault}"
    );
    assert_eq!(fault.pc, 0);

    let mut b = Builder::new();
    let t = b.special(Special::TidX);
    let wide = b.reg(RegClass::B64);
    b.push(Op::Arith {
        op: ArithOp::Add,
        ty: Ty::U32,
        dst: wide,
        a: t.into(),
        b: Operand::Int(1),
    });
    let kernel = b.finish("mixed_widths".into(), 0, 32, 0);
    let fault = ktune_vgpu::run(&kernel, &one_block(32, 0), &mut []).unwrap_err();
    assert!(
        matches!(fault.kind, FaultKind::InvalidKernel { .. }),
        "{fault}"
    );
    assert_eq!(fault.pc, 1);

    let kernel = Builder::new().finish("empty".into(), 1, 32, 0);
    let fault = ktune_vgpu::run(&kernel, &one_block(32, 0), &mut []).unwrap_err();
    assert!(
        matches!(fault.kind, FaultKind::InvalidLaunch { .. }),
        "{fault}"
    );
    let fault = ktune_vgpu::run(&kernel, &one_block(64, 0), &mut [vec![]]).unwrap_err();
    assert!(fault.to_string().contains(".maxntid"), "{fault}");
}

//! f16 and bf16 round trips through `cvt` (and the bf16 widening by
//! shift), against the `half` crate.

mod common;

use common::one_block;
use half::{bf16, f16};
use ktune_core::DType;
use ktune_core::ptx::Builder;
use ktune_core::ptx::inst::{Addr, Space, Special};

/// For each input f32: the 16-bit value `cvt.rn` makes of it, and that
/// value widened back to f32.
fn round_trip(dtype: DType, x: &[f32]) -> (Vec<u16>, Vec<f32>) {
    let n = x.len() as u32;
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let (src, narrow_out, wide_out) = (b.param_ptr(0), b.param_ptr(1), b.param_ptr(2));
    let a = b.global_addr(src, tid, 4);
    let v = b.load(Space::Global, DType::F32, Addr { base: a, offset: 0 });
    let h = b.narrow(dtype, v);
    let a = b.global_addr(narrow_out, tid, 2);
    b.push(ktune_core::ptx::inst::Op::St {
        space: Space::Global,
        ty: ktune_core::ptx::inst::Ty::B16,
        addr: Addr { base: a, offset: 0 },
        srcs: vec![h.into()],
    });
    let w = b.widen(dtype, h);
    let a = b.global_addr(wide_out, tid, 4);
    b.store(Space::Global, DType::F32, Addr { base: a, offset: 0 }, w);
    let kernel = b.finish("round_trip".into(), 3, n, 0);
    let mut params = vec![
        ktune_vgpu::f32_bytes(x),
        ktune_vgpu::poisoned(dtype, x.len()),
        ktune_vgpu::poisoned(DType::F32, x.len()),
    ];
    ktune_vgpu::run(&kernel, &one_block(n, 0), &mut params).unwrap_or_else(|f| panic!("{f}"));
    let narrow = params[1]
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    let wide = params[2]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    (narrow, wide)
}

fn inputs() -> Vec<f32> {
    let mut x = vec![
        0.0,
        -0.0,
        1.0,
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        1.0 + 2f32.powi(-8),
        1.0 + 3.0 * 2f32.powi(-8),
        65504.0,
        65519.99,
        65520.0,
        -65520.0,
        2f32.powi(-24),
        2f32.powi(-25),
        3.0 * 2f32.powi(-25),
        2f32.powi(-26),
        1e-40,
        f32::MIN_POSITIVE,
        3.389_531_4e38,
        f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        std::f32::consts::PI,
        -1.0 / 3.0,
    ];
    x.extend(
        common::values(1024 - x.len(), 11)
            .iter()
            .map(|v| v * 1000.0),
    );
    x
}

#[test]
fn f16_round_trips_match_half() {
    let x = inputs();
    let (narrow, wide) = round_trip(DType::F16, &x);
    for i in 0..x.len() {
        let want = f16::from_f32(x[i]);
        if want.is_nan() {
            assert!(f16::from_bits(narrow[i]).is_nan() && wide[i].is_nan());
            continue;
        }
        assert_eq!(narrow[i], want.to_bits(), "cvt.rn.f16.f32({:e})", x[i]);
        assert_eq!(
            wide[i].to_bits(),
            want.to_f32().to_bits(),
            "cvt.f32.f16({want})"
        );
    }
}

#[test]
fn bf16_round_trips_match_half() {
    let x = inputs();
    let (narrow, wide) = round_trip(DType::Bf16, &x);
    for i in 0..x.len() {
        let want = bf16::from_f32(x[i]);
        if want.is_nan() {
            assert!(bf16::from_bits(narrow[i]).is_nan() && wide[i].is_nan());
            continue;
        }
        assert_eq!(narrow[i], want.to_bits(), "cvt.rn.bf16.f32({:e})", x[i]);
        assert_eq!(wide[i].to_bits(), want.to_f32().to_bits(), "widen({want})");
    }
}

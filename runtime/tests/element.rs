//! Element types: names, exact widening, round-to-nearest-even narrowing.

use ktune::{Element, bf16, f16};

#[test]
fn dtype_names() {
    assert_eq!(f32::DTYPE_NAME, "f32");
    assert_eq!(f16::DTYPE_NAME, "f16");
    assert_eq!(bf16::DTYPE_NAME, "bf16");
}

#[test]
fn representable_values_round_trip_exactly() {
    for v in [
        0.0f32,
        -0.0,
        1.0,
        -2.5,
        0.099_609_375,
        65504.0,
        f32::INFINITY,
    ] {
        assert_eq!(<f16 as Element>::from_f32(v).to_f32(), v, "f16 {v}");
    }
    for v in [
        0.0f32,
        1.0,
        -3.0,
        2f32.powi(100),
        0.007_812_5,
        f32::NEG_INFINITY,
    ] {
        assert_eq!(<bf16 as Element>::from_f32(v).to_f32(), v, "bf16 {v}");
    }
    for v in [0.1f32, f32::MIN_POSITIVE, 1.0e-40] {
        assert_eq!(<f32 as Element>::from_f32(v).to_f32(), v);
    }
    assert!(<bf16 as Element>::from_f32(f32::NAN).to_f32().is_nan());
    assert!(<f16 as Element>::from_f32(f32::NAN).to_f32().is_nan());
}

#[test]
fn every_16_bit_pattern_round_trips() {
    for bits in 0..=u16::MAX {
        let h = f16::from_bits(bits);
        let b = bf16::from_bits(bits);
        if !h.is_nan() {
            assert_eq!(<f16 as Element>::from_f32(Element::to_f32(h)), h);
        }
        if !b.is_nan() {
            assert_eq!(<bf16 as Element>::from_f32(Element::to_f32(b)), b);
        }
    }
}

#[test]
fn narrowing_rounds_to_nearest_ties_to_even() {
    // bf16 keeps 7 fraction bits: the spacing above 1.0 is 2^-7.
    let ulp = 2f32.powi(-7);
    let bf = |v: f32| <bf16 as Element>::from_f32(v).to_f32();
    assert_eq!(bf(1.0 + ulp / 2.0), 1.0, "tie goes to even (down)");
    assert_eq!(
        bf(1.0 + 1.5 * ulp),
        1.0 + 2.0 * ulp,
        "tie goes to even (up)"
    );
    assert_eq!(bf(1.0 + 0.6 * ulp), 1.0 + ulp, "above the tie rounds up");
    assert_eq!(bf(1.0 + 0.4 * ulp), 1.0, "below the tie rounds down");

    // f16 keeps 10 fraction bits.
    let ulp = 2f32.powi(-10);
    let h = |v: f32| <f16 as Element>::from_f32(v).to_f32();
    assert_eq!(h(1.0 + ulp / 2.0), 1.0);
    assert_eq!(h(1.0 + 1.5 * ulp), 1.0 + 2.0 * ulp);
    assert_eq!(h(-(1.0 + 1.5 * ulp)), -(1.0 + 2.0 * ulp));
    assert_eq!(h(1.0e6), f32::INFINITY, "overflow gives infinity");
}

#[test]
fn defaults_are_zero() {
    assert_eq!(f32::default(), 0.0);
    assert_eq!(f16::default().to_f32(), 0.0);
    assert_eq!(bf16::default().to_f32(), 0.0);
}

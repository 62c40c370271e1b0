//! The reference math functions generated code calls.

use ktune::__private::math;

fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 2e-7 * b.abs().max(1.0)
}

#[test]
fn elementary_functions() {
    assert_eq!(math::neg(2.0), -2.0);
    assert_eq!(math::exp(0.0), 1.0);
    assert!(close(math::exp(1.0), std::f32::consts::E));
    assert!(close(math::log(std::f32::consts::E), 1.0));
    assert_eq!(math::sqrt(9.0), 3.0);
    assert_eq!(math::rsqrt(4.0), 0.5);
    assert!(close(math::tanh(0.5), 0.462_117_16));
    assert_eq!(math::abs(-1.5), 1.5);
    assert_eq!(math::relu(-1.0), 0.0);
    assert_eq!(math::relu(2.0), 2.0);
    assert_eq!(math::relu(f32::NAN), 0.0);
}

#[test]
fn activations() {
    assert_eq!(math::sigmoid(0.0), 0.5);
    assert_eq!(math::sigmoid(-200.0), 0.0);
    assert_eq!(math::sigmoid(200.0), 1.0);
    assert!(close(math::silu(1.0), 0.731_058_6));
    // Reference values from the closed forms in f64.
    assert!(close(math::gelu(1.0), 0.841_192));
    assert!(close(math::gelu(-2.0), -0.045_402_3));
    assert!(close(math::gelu_erf(1.0), 0.841_344_7));
    assert!(close(math::gelu_erf(-2.0), -0.045_500_26));
}

#[test]
fn erf_values() {
    assert_eq!(math::erf(0.0), 0.0);
    assert!(close(math::erf(0.5), 0.520_499_9));
    assert!(close(math::erf(1.0), 0.842_700_8));
    assert!(close(math::erf(-2.0), -0.995_322_3));
    assert_eq!(math::erf(10.0), 1.0);
}

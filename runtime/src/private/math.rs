//! The kernel language's functions as the CPU reference computes them: in
//! `f32`, to within an ulp or two of the exact value. The GPU variants use
//! faster approximations and are checked against these.

/// `-x`
#[inline]
pub fn neg(x: f32) -> f32 {
    -x
}

/// `eˣ`
#[inline]
pub fn exp(x: f32) -> f32 {
    x.exp()
}

/// Natural logarithm.
#[inline]
pub fn log(x: f32) -> f32 {
    x.ln()
}

/// `√x`
#[inline]
pub fn sqrt(x: f32) -> f32 {
    x.sqrt()
}

/// `1 / √x`
#[inline]
pub fn rsqrt(x: f32) -> f32 {
    1.0 / x.sqrt()
}

/// Hyperbolic tangent.
#[inline]
pub fn tanh(x: f32) -> f32 {
    x.tanh()
}

/// `|x|`
#[inline]
pub fn abs(x: f32) -> f32 {
    x.abs()
}

/// `max(x, 0)`; 0 for NaN, like the GPU's `max.f32`.
#[inline]
pub fn relu(x: f32) -> f32 {
    x.max(0.0)
}

/// `1 / (1 + e⁻ˣ)`
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `x · sigmoid(x)`
#[inline]
pub fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// GELU, tanh approximation: `0.5·x·(1 + tanh(u))` with
/// `u = √(2/π)·(x + 0.044715·x³)`, computed as the equal `x · sigmoid(2u)`,
/// which does not cancel where `tanh(u)` nears −1 (x below about −3).
#[inline]
pub fn gelu(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = std::f32::consts::FRAC_2_SQRT_PI * std::f32::consts::FRAC_1_SQRT_2;
    x * sigmoid(2.0 * SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x))
}

/// GELU, exact form: `0.5·x·(1 + erf(x/√2))`, computed as the equal
/// `0.5·x·erfc(−x/√2)`, which does not cancel where `erf` nears −1 (x
/// below about −2).
#[inline]
pub fn gelu_erf(x: f32) -> f32 {
    0.5 * x * erfc(-x * std::f32::consts::FRAC_1_SQRT_2)
}

/// The error function: libm's f64 `erf` rounded to f32 (its f32 `erff` is
/// off by an ulp here and there).
#[inline]
pub fn erf(x: f32) -> f32 {
    libm::erf(f64::from(x)) as f32
}

/// The complementary error function, `1 − erf(x)`: libm's f64 `erfc`
/// rounded to f32 (its f32 `erfcf` is up to 3 ulps off near 2).
#[inline]
pub fn erfc(x: f32) -> f32 {
    libm::erfc(f64::from(x)) as f32
}

//! An independent f64 implementation of the block, written from the
//! formulas (not from ktune's reference), to check every backend against.

/// Row-major `rows × cols` matrix of f64.
pub struct Matrix {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f64>,
}

impl Matrix {
    pub fn new(rows: usize, cols: usize, data: Vec<f64>) -> Matrix {
        assert_eq!(data.len(), rows * cols, "matrix data of the wrong length");
        Matrix { rows, cols, data }
    }

    fn at(&self, r: usize, c: usize) -> f64 {
        self.data[r * self.cols + c]
    }
}

pub fn layernorm(x: &Matrix, gamma: &[f64], beta: &[f64]) -> Matrix {
    let mut out = Vec::with_capacity(x.data.len());
    for r in 0..x.rows {
        let row = &x.data[r * x.cols..(r + 1) * x.cols];
        let mu = row.iter().sum::<f64>() / x.cols as f64;
        let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / x.cols as f64;
        let inv = 1.0 / (var + 1e-5).sqrt();
        out.extend(
            row.iter()
                .zip(gamma.iter().zip(beta))
                .map(|(v, (g, b))| (v - mu) * inv * g + b),
        );
    }
    Matrix::new(x.rows, x.cols, out)
}

/// `a · b + bias` (bias broadcast over rows).
pub fn matmul_bias(a: &Matrix, b: &Matrix, bias: &[f64]) -> Matrix {
    let mut out = vec![0.0; a.rows * b.cols];
    for r in 0..a.rows {
        for k in 0..a.cols {
            let av = a.at(r, k);
            for c in 0..b.cols {
                out[r * b.cols + c] += av * b.at(k, c);
            }
        }
        for c in 0..b.cols {
            out[r * b.cols + c] += bias[c];
        }
    }
    Matrix::new(a.rows, b.cols, out)
}

/// GELU, tanh approximation.
pub fn gelu(x: f64) -> f64 {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
}

pub fn softmax(x: &Matrix) -> Matrix {
    let mut out = Vec::with_capacity(x.data.len());
    for r in 0..x.rows {
        let row = &x.data[r * x.cols..(r + 1) * x.cols];
        let mx = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|v| (v - mx).exp()).sum();
        out.extend(row.iter().map(|v| (v - mx).exp() / s));
    }
    Matrix::new(x.rows, x.cols, out)
}

/// The largest error relative to the largest magnitude of the expected
/// values (a normwise relative error, robust to entries near zero); infinite
/// when any value is not finite or the lengths differ.
pub fn relative_error(got: &[f64], want: &[f64]) -> f64 {
    if got.len() != want.len() || got.iter().any(|g| !g.is_finite()) {
        return f64::INFINITY;
    }
    let scale = want
        .iter()
        .fold(0.0f64, |m, v| m.max(v.abs()))
        .max(f64::MIN_POSITIVE);
    got.iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0, f64::max)
        / scale
}

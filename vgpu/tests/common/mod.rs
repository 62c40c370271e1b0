//! Hand-built IR kernels and launch helpers shared by the tests and the
//! benchmark.

#![allow(dead_code)]

use ktune_core::DType;
use ktune_core::ir::{
    BinaryOp, Dim, DimId, Expr, ExprId, Kernel, ReduceOp, Tensor, TensorId, Type, Var, VarId,
    VarKind,
};
use ktune_core::lower::Launch;

fn dims(rows: u32, cols: u32) -> Vec<Dim> {
    vec![
        Dim {
            name: "R".into(),
            size: rows,
        },
        Dim {
            name: "C".into(),
            size: cols,
        },
    ]
}

fn tensor(name: &str, dtype: DType, dims: &[usize]) -> Tensor {
    Tensor {
        name: name.into(),
        dtype,
        dims: dims.iter().map(|d| DimId(*d)).collect(),
    }
}

fn var(name: &str, dim: usize, kind: VarKind) -> Var {
    Var {
        name: name.into(),
        dim: DimId(dim),
        kind,
    }
}

/// `out[r][c] = x[r][c] + b[c]`
pub fn add_bias(rows: u32, cols: u32, dtype: DType) -> Kernel {
    let exprs = vec![
        Expr::Load {
            tensor: TensorId(0),
            index: vec![VarId(0), VarId(1)],
        },
        Expr::Load {
            tensor: TensorId(1),
            index: vec![VarId(1)],
        },
        Expr::Binary(BinaryOp::Add, ExprId(0), ExprId(1)),
    ];
    Kernel {
        name: "add_bias".into(),
        dims: dims(rows, cols),
        inputs: vec![tensor("x", dtype, &[0, 1]), tensor("b", dtype, &[1])],
        output: tensor("out", dtype, &[0, 1]),
        vars: vec![
            var("r", 0, VarKind::Output(0)),
            var("c", 1, VarKind::Output(1)),
        ],
        lets: vec![],
        types: vec![Type::Num(dtype); exprs.len()],
        exprs,
        root: ExprId(2),
    }
}

/// `out[r] = sum(c, x[r][c])`
pub fn row_sum(rows: u32, cols: u32) -> Kernel {
    let exprs = vec![
        Expr::Load {
            tensor: TensorId(0),
            index: vec![VarId(0), VarId(1)],
        },
        Expr::Reduce {
            op: ReduceOp::Sum,
            var: VarId(1),
            body: ExprId(0),
        },
    ];
    Kernel {
        name: "row_sum".into(),
        dims: dims(rows, cols),
        inputs: vec![tensor("x", DType::F32, &[0, 1])],
        output: tensor("out", DType::F32, &[0]),
        vars: vec![
            var("r", 0, VarKind::Output(0)),
            var("c", 1, VarKind::Reduce),
        ],
        lets: vec![],
        types: vec![Type::Num(DType::F32); exprs.len()],
        exprs,
        root: ExprId(1),
    }
}

/// A one-block launch of `threads` threads.
pub fn one_block(threads: u32, shared: u32) -> Launch {
    Launch {
        grid: [1, 1, 1],
        block: [threads, 1, 1],
        dynamic_shared_bytes: shared,
    }
}

/// Deterministic pseudo-random values in [-2, 2).
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
        })
        .collect()
}

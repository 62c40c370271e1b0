//! Hand-built IR kernels and launch helpers shared by the tests and the
//! benchmark.

#![allow(dead_code)]

use ktune_core::DType;
use ktune_core::ir::{
    BinaryOp, Dim, DimId, Expr, ExprId, Kernel, ReduceOp, Tensor, TensorId, Type, Var, VarId,
    VarKind,
};
use ktune_core::lower::Launch;
use ktune_core::ptx::Builder;
use ktune_core::ptx::inst::{Addr, ArithOp, Op, Operand, Reg, RegClass, Space, Special, Ty};

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
        allow_tf32: false,
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
        allow_tf32: false,
    }
}

/// A one-block launch of `threads` threads.
pub fn one_block(threads: u32, shared: u32) -> Launch {
    Launch {
        grid: [1, 1, 1],
        block: [threads, 1, 1],
        dynamic_shared_bytes: shared,
        workspace_bytes: 0,
        persistent: false,
        registers: 0,
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

/// `out[tid] = value` as a 32-bit store.
pub fn store_at_tid(b: &mut Builder, out: Reg, tid: Reg, value: Reg) {
    let addr = b.global_addr(out, tid, 4);
    let ty = if value.class == RegClass::F32 {
        Ty::F32
    } else {
        Ty::B32
    };
    b.push(Op::St {
        space: Space::Global,
        ty,
        addr: Addr {
            base: addr,
            offset: 0,
        },
        srcs: vec![value.into()],
    });
}

/// Runs a one-warp kernel in which every thread computes one 32-bit value
/// from its `%tid.x` and stores it at `out[tid]`; returns the 32 values'
/// bits.
pub fn per_lane(build: impl FnOnce(&mut Builder, Reg) -> Reg) -> Vec<u32> {
    try_per_lane(build).unwrap_or_else(|f| panic!("{f}"))
}

pub fn try_per_lane(
    build: impl FnOnce(&mut Builder, Reg) -> Reg,
) -> Result<Vec<u32>, ktune_vgpu::Fault> {
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let out = b.param_ptr(0);
    let value = build(&mut b, tid);
    store_at_tid(&mut b, out, tid, value);
    let kernel = b.finish("per_lane".into(), 1, 32, 0);
    let mut params = vec![vec![0u8; 32 * 4]];
    ktune_vgpu::run(&kernel, &one_block(32, 0), &mut params)?;
    Ok(params[0]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Runs a kernel that loads `inputs[k][tid]` for every input `k` (f32,
/// `inputs[k].len()` threads), computes one f32 from them and stores it at
/// `out[tid]`.
pub fn map_f32(inputs: &[&[f32]], build: impl FnOnce(&mut Builder, &[Reg]) -> Reg) -> Vec<f32> {
    let n = inputs[0].len() as u32;
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let mut xs = Vec::new();
    for k in 0..inputs.len() {
        let p = b.param_ptr(k);
        let a = b.global_addr(p, tid, 4);
        xs.push(b.load(Space::Global, DType::F32, Addr { base: a, offset: 0 }));
    }
    let out = b.param_ptr(inputs.len());
    let value = build(&mut b, &xs);
    store_at_tid(&mut b, out, tid, value);
    let kernel = b.finish("map_f32".into(), inputs.len() + 1, n, 0);
    ktune_vgpu::run_f32(&kernel, &one_block(n, 0), inputs, n as usize)
        .unwrap_or_else(|f| panic!("{f}"))
        .0
}

/// `out[m][n] = Σ_k x·w` on `dtype` factors at `(M, N, K)`, A stored
/// `(K, M)` when `a_transposed`, B stored `(N, K)` when `b_transposed`.
pub fn gemm(
    dtype: &str,
    a_transposed: bool,
    b_transposed: bool,
    (m, n, k): (u32, u32, u32),
) -> ktune_core::ir::Kernel {
    use quote::{format_ident, quote};
    let t = format_ident!("{dtype}");
    let (a_shape, a_read) = if a_transposed {
        (quote!((K, M)), quote!(x[k][m]))
    } else {
        (quote!((M, K)), quote!(x[m][k]))
    };
    let (b_shape, b_read) = if b_transposed {
        (quote!((N, K)), quote!(w[n][k]))
    } else {
        (quote!((K, N)), quote!(w[k][n]))
    };
    ktune_core::syntax::parse_kernel(
        quote!(shape(M = #m, N = #n, K = #k)),
        quote! {
            fn gemm(x: Tensor<#t, #a_shape>, w: Tensor<#t, #b_shape>) -> Tensor<f32, (M, N)> {
                compute(|m, n| sum(K, |k| #a_read * #b_read))
            }
        },
    )
    .expect("valid kernel")
}

/// `out[b][m][n] = gelu(Σ_k x·w + bias[n])` on bf16 factors over a batch
/// of 4 at `M = 200`, `N = 136`, `K = 72`, with an f32 bias: edges along
/// every dimension of a tensor-core tile, and an epilogue of its own.
pub fn batched_bias_gelu() -> ktune_core::ir::Kernel {
    use quote::quote;
    ktune_core::syntax::parse_kernel(
        quote!(shape(B = 4, M = 200, N = 136, K = 72)),
        quote! {
            fn fused(x: Tensor<bf16, (B, M, K)>, w: Tensor<bf16, (K, N)>, bias: Tensor<f32, (N,)>) -> Tensor<bf16, (B, M, N)> {
                compute(|b, m, n| gelu(sum(K, |k| x[b][m][k] * w[k][n]) + bias[n]))
            }
        },
    )
    .expect("valid kernel")
}

/// Runs the persistent tensor-core point `t` of `kernel`, whose grid has
/// `tiles` tiles, with 1, 2, 5, `tiles - 1`, `tiles` and more resident
/// blocks, each time checking that it ran as many blocks (at most one a
/// tile; in clusters, whole clusters, one at least) and computed the
/// reference's output.
pub fn with_any_number_of_blocks(kernel: &Kernel, t: ktune_core::schedule::MmaTiles, tiles: u32) {
    use ktune_core::schedule::Schedule;
    use ktune_core::target::SmVersion;
    use ktune_vgpu::verify::Reference;
    use ktune_vgpu::{Config, poisoned, run_bytes_with};

    let lowered =
        ktune_core::lower::lower(kernel, &Schedule::Mma(t), SmVersion::Sm90).expect("lowers");
    let reference = Reference::new(kernel, 3);
    let inputs: Vec<&[u8]> = reference.buffers().iter().map(Vec::as_slice).collect();
    for blocks in [1, 2, 5, tiles - 1, tiles, 1000] {
        let config = Config::default().resident_blocks(blocks);
        let output = poisoned(kernel.output.dtype, reference.output().len());
        let (bytes, stats) =
            run_bytes_with(&lowered.ptx, &lowered.launch, &inputs, output, &config)
                .unwrap_or_else(|f| panic!("{blocks} blocks: {f}"));
        let cluster = lowered.ptx.cluster_blocks.max(1);
        let ran = (blocks / cluster * cluster).max(cluster).min(tiles);
        assert_eq!(stats.blocks, u64::from(ran));
        reference
            .compare(&bytes)
            .unwrap_or_else(|e| panic!("{blocks} blocks: {e}"));
    }
}

/// `dst = x op y` in a new register of `ty`'s class.
pub fn arith(
    b: &mut Builder,
    op: ArithOp,
    ty: Ty,
    x: impl Into<Operand>,
    y: impl Into<Operand>,
) -> Reg {
    let class = match ty {
        Ty::F32 => RegClass::F32,
        Ty::U64 | Ty::B64 => RegClass::B64,
        Ty::Pred => RegClass::Pred,
        _ => RegClass::B32,
    };
    let dst = b.reg(class);
    b.push(Op::Arith {
        op,
        ty,
        dst,
        a: x.into(),
        b: y.into(),
    });
    dst
}

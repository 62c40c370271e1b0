//! The verification suite: a catalogue of kernels covering every op class
//! and dtype, each at shapes chosen to hit edges (1, primes, one less and
//! one more than tile multiples, non-square, tall-skinny), each shape run
//! under every point of its schedule space when the space has at most
//! `EVERY_POINT` points and a seeded sample of `SAMPLE` points otherwise
//! (the tensor-core family of a 16-bit or `allow_tf32` contraction sampled on
//! its own, `SAMPLE_MMA` points, and its warpgroup points, `wgmma = 1`, on
//! sm_90, `SAMPLE_WGMMA` where every thread copies, as many beside a
//! producer warpgroup, `SAMPLE_PONG` beside one and two sets of
//! warpgroups taking tiles in turn, and `SAMPLE_WGMMA_SPLIT` split along
//! `K`; a
//! contraction's grouped walks, `group_m` above 1,
//! on their own too: every one up to `SAMPLE_GROUPED`, a sample beyond;
//! its SIMT points pipelined by `cp.async`, `stages` above 1, up to
//! `SAMPLE_STAGED`; each family's points split along `K`, `split_k`
//! above 1, up to `SAMPLE_SPLIT`, their blocks run in a shuffled order
//! on the virtual GPU; likewise the rows points that keep the row in
//! registers or in shared memory, that combine warps with a shared-memory
//! tree, and that do both, `SAMPLE_ROWS_KNOB` points each; and on sm_90,
//! `SAMPLE_CLUSTER` rows points spread over a thread-block cluster of 2, 4
//! and 8 blocks in turn, rows shorter than the cluster's threads
//! included), plus the heuristic's choice on every target and a generic
//! point.
//!
//! [`run`] hands every run (one kernel, shape, schedule and target) to a
//! check, in parallel: the test `vgpu/tests/suite.rs` checks each on the
//! virtual GPU against the CPU evaluation of the IR ([`crate::verify`]);
//! `ktune-bench agree` runs each on a real GPU as well and compares the two
//! devices. The [`Report`] counts the runs of each family and prints the
//! summary line `verified <K> kernels, <P> schedule points, <S> shapes: <M>
//! mismatches`, where K counts the catalogue's kernels (a kernel in another
//! dtype is another kernel), S the distinct (kernel, shape) pairs, P every
//! run, and M the runs the check failed.

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use ktune_core::ir::Kernel;
use ktune_core::lower::{heuristic, validate};
use ktune_core::schedule::{Class, MmaTiles, Schedule, Tiles};
use ktune_core::space::{candidates, sample};
use ktune_core::syntax::parse_kernel;
use ktune_core::target::SmVersion;
use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use crate::verify::{Reference, with_shape};

/// Spaces up to this size run every point.
const EVERY_POINT: usize = 24;
/// Points sampled from larger spaces.
const SAMPLE: usize = 24;
/// Tensor-core points sampled besides, when the space has them.
const SAMPLE_MMA: usize = 12;
/// Warpgroup tensor-core points (`wgmma = 1`) sampled besides on sm_90,
/// the one target that has them, when the space there has them: this many
/// where every thread copies, and as many beside a producer warpgroup
/// (`producer = 1`).
const SAMPLE_WGMMA: usize = 4;
/// Ping-pong points (`producer = 2`) sampled besides, where the space on
/// sm_90 has them.
const SAMPLE_PONG: usize = 2;
/// Warpgroup points split along `K` sampled besides, where the space on
/// sm_90 has them.
const SAMPLE_WGMMA_SPLIT: usize = 4;
/// Grouped-walk points (`group_m` above 1) run besides, per family: all of
/// them up to this many, else a sample of this many.
const SAMPLE_GROUPED: usize = 8;
/// SIMT points with `stages` above 1 run besides: all of them up to this
/// many, else a sample of this many.
const SAMPLE_STAGED: usize = 8;
/// Points with `split_k` above 1 run besides, per family: all of them up
/// to this many, else a sample of this many.
const SAMPLE_SPLIT: usize = 12;
/// SIMT points sampled for the tensor-core entries (named `mma_…`), whose
/// SIMT family the contraction entries already cover.
const SAMPLE_SIMT_OF_MMA: usize = 4;
/// Rows points sampled besides for each of `cache = 1`, `cache = 2`,
/// `tree = 1` and each cache with it, and `online = 1` with each tree, when
/// the space has them.
const SAMPLE_ROWS_KNOB: usize = 6;
/// Rows points of the space on sm_90 run besides, each spread over a
/// cluster of 2, 4 or 8 blocks in turn.
const SAMPLE_CLUSTER: usize = 6;

const DTYPES: [&str; 3] = ["f32", "f16", "bf16"];

/// A kernel of the catalogue and the shapes it runs at.
#[derive(Debug, Clone)]
pub struct Entry {
    pub kernel: Kernel,
    pub shapes: Vec<Vec<(&'static str, u32)>>,
}

fn parse(shape: TokenStream, item: TokenStream) -> Kernel {
    parse_kernel(shape, item.clone())
        .unwrap_or_else(|e| panic!("the suite's kernel is rejected: {e}\n{item}"))
}

fn shapes2(
    a: &'static str,
    b: &'static str,
    sizes: &[(u32, u32)],
) -> Vec<Vec<(&'static str, u32)>> {
    sizes.iter().map(|&(x, y)| vec![(a, x), (b, y)]).collect()
}

const ELEMENTWISE_SHAPES: [(u32, u32); 6] = [(1, 1), (7, 13), (3, 63), (2, 65), (31, 4), (5, 129)];
/// Rows of one element, of primes and of lengths one off a multiple of the
/// vector widths; one row, and 67 rows that no rows-per-block divides.
const ROW_SHAPES: [(u32, u32); 9] = [
    (1, 1),
    (3, 7),
    (13, 31),
    (4, 63),
    (2, 65),
    (5, 129),
    (1, 97),
    (67, 20),
    (2, 1025),
];

fn elementwise() -> Vec<Entry> {
    let mut out = Vec::new();
    for dt in DTYPES {
        let t = format_ident!("{dt}");
        let name = format_ident!("bias_act_{dt}");
        out.push(Entry {
            kernel: parse(
                quote!(shape(R = 4, C = 8)),
                quote! {
                    fn #name(x: Tensor<#t, (R, C)>, b: Tensor<#t, (C,)>, s: Tensor<f32, (R,)>)
                        -> Tensor<#t, (R, C)>
                    {
                        compute(|r, c| {
                            let y = x[r][c] + b[c];
                            let z = select(y > 0.0 && !(y > 1.5), y, gelu_erf(y) * s[r]);
                            (silu(z) + tanh(y) * exp(-abs(y)) + min(y, 1.0)
                                - max(y, -1.0) + sigmoid(y) * relu(y)) as #t
                        })
                    }
                },
            ),
            shapes: shapes2("R", "C", &ELEMENTWISE_SHAPES),
        });
        let name = format_ident!("broadcast3_{dt}");
        out.push(Entry {
            kernel: parse(
                quote!(shape(A = 2, B = 3, C = 4)),
                quote! {
                    fn #name(x: Tensor<#t, (A, B, C)>, y: Tensor<f32, (B, C)>, z: Tensor<#t, (A,)>)
                        -> Tensor<f32, (A, B, C)>
                    {
                        compute(|a, b, c| x[a][b][c] * y[b][c] + z[a])
                    }
                },
            ),
            shapes: [(1, 1, 1), (2, 3, 8), (3, 5, 7), (1, 2, 65)]
                .iter()
                .map(|&(a, b, c)| vec![("A", a), ("B", b), ("C", c)])
                .collect(),
        });
    }
    out.push(Entry {
        kernel: parse(
            quote!(shape(R = 4, C = 8)),
            quote! {
                fn transpose_add(x: Tensor<f32, (C, R)>, y: Tensor<f32, (R, C)>, d: Tensor<f32, (C, C)>)
                    -> Tensor<f32, (R, C)>
                {
                    compute(|r, c| x[c][r] + y[r][c] * (c as f32) - (r as f32) + d[c][c])
                }
            },
        ),
        shapes: shapes2("R", "C", &[(1, 1), (7, 13), (3, 63), (17, 4)]),
    });
    out.push(Entry {
        kernel: parse(
            quote!(shape(N = 8)),
            quote! {
                fn casts(x: Tensor<f32, N>, y: Tensor<bf16, N>) -> Tensor<f16, N> {
                    compute(|i| ((x[i] as bf16) * 3.0 + (y[i] as f16) - (x[i] * y[i]) as f16) as f16)
                }
            },
        ),
        shapes: [1, 7, 63, 65, 257].iter().map(|&n| vec![("N", n)]).collect(),
    });
    let functions = [
        "exp", "log", "sqrt", "rsqrt", "tanh", "abs", "relu", "sigmoid", "silu", "gelu",
        "gelu_erf", "erf",
    ];
    for f in functions {
        let name = format_ident!("unary_{f}");
        let call = format_ident!("{f}");
        out.push(Entry {
            kernel: parse(
                quote!(shape(R = 3, C = 65)),
                quote! {
                    fn #name(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                        compute(|r, c| -#call(x[r][c]))
                    }
                },
            ),
            shapes: shapes2("R", "C", &[(3, 65), (1, 7)]),
        });
    }
    out
}

fn rows() -> Vec<Entry> {
    let mut out = Vec::new();
    for dt in DTYPES {
        let t = format_ident!("{dt}");
        let name = format_ident!("softmax_{dt}");
        out.push(Entry {
            kernel: parse(
                quote!(shape(R = 4, C = 8)),
                quote! {
                    fn #name(x: Tensor<#t, (R, C)>) -> Tensor<#t, (R, C)> {
                        compute(|r, c| {
                            let mx = max(C, |j| x[r][j]);
                            let s = sum(C, |j| exp(x[r][j] - mx));
                            exp(x[r][c] - mx) / s
                        })
                    }
                },
            ),
            shapes: shapes2("R", "C", &ROW_SHAPES),
        });
        let name = format_ident!("layernorm_{dt}");
        out.push(Entry {
            kernel: parse(
                quote!(shape(R = 4, C = 8)),
                quote! {
                    fn #name(x: Tensor<#t, (R, C)>, g: Tensor<#t, (C,)>, b: Tensor<f32, (C,)>)
                        -> Tensor<#t, (R, C)>
                    {
                        compute(|r, c| {
                            let mu = mean(C, |j| x[r][j]);
                            let var = mean(C, |j| (x[r][j] - mu) * (x[r][j] - mu));
                            (x[r][c] - mu) * rsqrt(var + 0.00001) * g[c] + b[c]
                        })
                    }
                },
            ),
            shapes: shapes2("R", "C", &ROW_SHAPES[..8]),
        });
        let name = format_ident!("rmsnorm_{dt}");
        out.push(Entry {
            kernel: parse(
                quote!(shape(R = 4, C = 8)),
                quote! {
                    fn #name(x: Tensor<#t, (R, C)>, w: Tensor<#t, (C,)>) -> Tensor<#t, (R, C)> {
                        compute(|r, c| {
                            let ms = mean(C, |j| x[r][j] * x[r][j]);
                            x[r][c] * rsqrt(ms + 0.000001) * w[c]
                        })
                    }
                },
            ),
            shapes: shapes2("R", "C", &ROW_SHAPES[..8]),
        });
        let name = format_ident!("col_sum_{dt}");
        out.push(Entry {
            kernel: parse(
                quote!(shape(R = 4, C = 8)),
                quote! {
                    fn #name(x: Tensor<#t, (R, C)>) -> Tensor<f32, (C,)> {
                        compute(|c| sum(R, |i| x[i][c]))
                    }
                },
            ),
            shapes: shapes2("R", "C", &[(1, 1), (7, 3), (129, 5), (4, 130)]),
        });
    }
    out.push(Entry {
        kernel: parse(
            quote!(shape(R = 4, C = 8)),
            quote! {
                fn row_stats(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
                    compute(|r| sum(C, |j| x[r][j]) + max(C, |j| x[r][j]) * min(C, |j| x[r][j])
                        - mean(C, |j| x[r][j] - max(C, |k| x[r][k])))
                }
            },
        ),
        shapes: shapes2("R", "C", &ROW_SHAPES),
    });
    out.push(Entry {
        kernel: parse(
            quote!(shape(R = 4, C = 8)),
            quote! {
                fn shifted(x: Tensor<f32, (R, C)>, w: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
                    compute(|r, c| {
                        let y = x[r][c] - max(C, |j| x[r][j]);
                        exp(y) * w[c] / sum(C, |j| exp(x[r][j] - max(C, |k| x[r][k])) * w[j])
                    })
                }
            },
        ),
        shapes: shapes2("R", "C", &ROW_SHAPES),
    });
    out.push(Entry {
        kernel: parse(
            quote!(shape(B = 2, R = 4, C = 8)),
            quote! {
                fn rms_transposed_bf16(x: Tensor<bf16, (B, R, C)>, w: Tensor<f32, (C,)>)
                    -> Tensor<bf16, (C, B, R)>
                {
                    compute(|c, b, r| {
                        let ms = mean(C, |j| x[b][r][j] * x[b][r][j]);
                        (x[b][r][c] * rsqrt(ms + 0.000001) * w[c]) as bf16
                    })
                }
            },
        ),
        shapes: [(1, 1, 1), (3, 5, 64), (2, 1, 7), (1, 3, 129)]
            .iter()
            .map(|&(b, r, c)| vec![("B", b), ("R", r), ("C", c)])
            .collect(),
    });
    out.push(Entry {
        kernel: parse(
            quote!(shape(R = 4, C = 8)),
            quote! {
                fn row_mean_f16(x: Tensor<f16, (R, C)>) -> Tensor<f32, (R,)> {
                    compute(|r| mean(C, |j| x[r][j]))
                }
            },
        ),
        shapes: shapes2("R", "C", &[(1, 1), (13, 31), (3, 65)]),
    });
    // A row statistic that is itself the output, reading the row a let
    // read before it: the pass of the root's reduction and the row's
    // outputs are two passes.
    out.push(Entry {
        kernel: parse(
            quote!(shape(R = 4, C = 8)),
            quote! {
                fn row_sum_of_squares(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
                    compute(|r| {
                        let m = mean(C, |j| x[r][j]);
                        sum(C, |j| (x[r][j] - m) * (x[r][j] - m))
                    })
                }
            },
        ),
        shapes: shapes2("R", "C", &ROW_SHAPES),
    });
    out.push(Entry {
        kernel: parse(
            quote!(shape(N = 8)),
            quote! {
                fn normalize(x: Tensor<f16, N>) -> Tensor<f16, N> {
                    compute(|i| x[i] / sum(N, |j| x[j]))
                }
            },
        ),
        shapes: [1, 7, 129, 1025].iter().map(|&n| vec![("N", n)]).collect(),
    });
    out.push(Entry {
        kernel: parse(
            quote!(shape(M = 4, K = 8)),
            quote! {
                fn gemv(a: Tensor<f16, (M, K)>, x: Tensor<f16, (K,)>) -> Tensor<f32, (M,)> {
                    compute(|m| sum(K, |k| a[m][k] * x[k]))
                }
            },
        ),
        shapes: shapes2("M", "K", &[(1, 1), (33, 129), (5, 8)]),
    });
    out
}

/// The last three have more block rows than a group of 4 or 8 (with
/// 16-row tiles) and a last group that is partial.
const MATMUL_SHAPES: [(u32, u32, u32); 8] = [
    (1, 1, 1),
    (7, 13, 5),
    (33, 17, 9),
    (63, 65, 31),
    (129, 3, 7),
    (2, 129, 16),
    (97, 33, 5),
    (131, 17, 3),
];

/// Contractions whose spaces offer split-K (`K` of at least 32 on a grid
/// that leaves SMs idle).
const SPLIT_SHAPES: [(u32, u32, u32); 4] = [(1, 70, 97), (5, 33, 40), (17, 9, 131), (2, 64, 256)];

fn shapes_mnk(sizes: &[(u32, u32, u32)]) -> Vec<Vec<(&'static str, u32)>> {
    sizes
        .iter()
        .map(|&(m, n, k)| vec![("M", m), ("N", n), ("K", k)])
        .collect()
}

fn matmul() -> Vec<Entry> {
    let mut out = Vec::new();
    for (ti, to) in [("f32", "f32"), ("bf16", "bf16"), ("f16", "f32")] {
        let (a, c) = (format_ident!("{ti}"), format_ident!("{to}"));
        let name = format_ident!("mm_{ti}_{to}");
        out.push(Entry {
            kernel: parse(
                quote!(shape(M = 4, N = 4, K = 4)),
                quote! {
                    fn #name(x: Tensor<#a, (M, K)>, w: Tensor<#a, (K, N)>) -> Tensor<#c, (M, N)> {
                        compute(|m, n| sum(K, |k| x[m][k] * w[k][n]))
                    }
                },
            ),
            shapes: shapes_mnk(&MATMUL_SHAPES),
        });
        let name = format_ident!("mm_bt_{ti}_{to}");
        out.push(Entry {
            kernel: parse(
                quote!(shape(M = 4, N = 4, K = 4)),
                quote! {
                    fn #name(x: Tensor<#a, (M, K)>, w: Tensor<#a, (N, K)>) -> Tensor<#c, (M, N)> {
                        compute(|m, n| sum(K, |k| x[m][k] * w[n][k]))
                    }
                },
            ),
            // With `K = 1`, `w` is contiguous along `n`, and the zero-filled
            // rows of a pipelined tile must stay aligned.
            shapes: shapes_mnk(&[&MATMUL_SHAPES[..5], &[(31, 16, 1)]].concat()),
        });
    }
    for dt in ["f32", "bf16"] {
        let t = format_ident!("{dt}");
        let name = format_ident!("bmm_{dt}");
        out.push(Entry {
            kernel: parse(
                quote!(shape(B = 2, M = 4, N = 4, K = 4)),
                quote! {
                    fn #name(x: Tensor<#t, (B, M, K)>, w: Tensor<#t, (B, K, N)>) -> Tensor<#t, (B, M, N)> {
                        compute(|b, m, n| sum(K, |k| x[b][m][k] * w[b][k][n]))
                    }
                },
            ),
            shapes: [(1, 1, 1, 1), (3, 5, 7, 9), (2, 33, 17, 16), (3, 81, 33, 8)]
                .iter()
                .map(|&(b, m, n, k)| vec![("B", b), ("M", m), ("N", n), ("K", k)])
                .collect(),
        });
        let name = format_ident!("mm_bias_gelu_{dt}");
        out.push(Entry {
            kernel: parse(
                quote!(shape(M = 4, N = 4, K = 4)),
                quote! {
                    fn #name(x: Tensor<#t, (M, K)>, w: Tensor<#t, (K, N)>, bias: Tensor<f32, (N,)>)
                        -> Tensor<#t, (M, N)>
                    {
                        compute(|m, n| gelu(sum(K, |k| x[m][k] * w[k][n]) + bias[n]))
                    }
                },
            ),
            shapes: shapes_mnk(&[(1, 1, 1), (13, 17, 19), (65, 33, 8)]),
        });
    }
    // Split-K with a fused epilogue: `K` prime (the last slice overhangs
    // it), `K` shorter than some `split_k · block_k` (slices of one tile,
    // or points rejected by name), `M = 1`, extents off the tiles.
    for (ti, to) in [("f32", "f32"), ("bf16", "bf16"), ("f16", "f32")] {
        let (a, c) = (format_ident!("{ti}"), format_ident!("{to}"));
        let name = format_ident!("mm_split_{ti}_{to}");
        out.push(Entry {
            kernel: parse(
                quote!(shape(M = 4, N = 4, K = 4)),
                quote! {
                    fn #name(x: Tensor<#a, (M, K)>, w: Tensor<#a, (K, N)>, bias: Tensor<f32, (N,)>)
                        -> Tensor<#c, (M, N)>
                    {
                        compute(|m, n| gelu(sum(K, |k| x[m][k] * w[k][n]) + bias[n]))
                    }
                },
            ),
            shapes: shapes_mnk(&SPLIT_SHAPES),
        });
    }
    // Long `K` (both operands `k`-contiguous, copied element by element
    // when pipelined): the ring of stages wraps around several times.
    out.push(Entry {
        kernel: parse(
            quote!(shape(M = 4, N = 4, K = 4)),
            quote! {
                fn mm_long_k(x: Tensor<f32, (M, K)>, w: Tensor<f32, (N, K)>) -> Tensor<f32, (M, N)> {
                    compute(|m, n| sum(K, |k| x[m][k] * w[n][k]))
                }
            },
        ),
        shapes: shapes_mnk(&[(33, 31, 100), (64, 64, 64), (17, 65, 129)]),
    });
    out.push(Entry {
        kernel: parse(
            quote!(shape(M = 4, N = 4, K = 4)),
            quote! {
                fn mm_bias_residual(
                    x: Tensor<f32, (M, K)>,
                    w: Tensor<f32, (K, N)>,
                    bias: Tensor<f32, (N,)>,
                    r: Tensor<f32, (M, N)>,
                ) -> Tensor<f32, (M, N)> {
                    compute(|m, n| {
                        let y = sum(K, |k| x[m][k] * w[k][n]) + bias[n];
                        y + r[m][n]
                    })
                }
            },
        ),
        shapes: shapes_mnk(&[(1, 1, 1), (13, 17, 19), (31, 65, 8)]),
    });
    out
}

/// Tensor-core contractions: `(M, N, K)` with M, N among 1, 7, 33, 65 and
/// K among 16, 24, 40, 72; shapes whose contiguous extents are not
/// multiples of 8 (K = 20, or N = 7 for `w[k][n]`) keep their tensor-core
/// family, every point of it rejected by its alignment constraint.
fn tensor_cores() -> Vec<Entry> {
    let mut out = Vec::new();
    for dt in ["bf16", "f16"] {
        let t = format_ident!("{dt}");
        let name = format_ident!("mma_{dt}");
        out.push(Entry {
            kernel: parse(
                quote!(shape(M = 4, N = 4, K = 4)),
                quote! {
                    fn #name(x: Tensor<#t, (M, K)>, w: Tensor<#t, (K, N)>) -> Tensor<#t, (M, N)> {
                        compute(|m, n| sum(K, |k| x[m][k] * w[k][n]))
                    }
                },
            ),
            shapes: shapes_mnk(&[
                (1, 8, 16),
                (7, 16, 24),
                (33, 40, 40),
                (65, 72, 72),
                (145, 24, 40),
                (33, 7, 16),
                (7, 8, 20),
            ]),
        });
        let name = format_ident!("mma_bt_{dt}");
        out.push(Entry {
            kernel: parse(
                quote!(shape(M = 4, N = 4, K = 4)),
                quote! {
                    fn #name(x: Tensor<#t, (M, K)>, w: Tensor<#t, (N, K)>) -> Tensor<f32, (M, N)> {
                        compute(|m, n| sum(K, |k| x[m][k] * w[n][k]))
                    }
                },
            ),
            shapes: shapes_mnk(&[
                (1, 1, 16),
                (7, 33, 24),
                (65, 7, 40),
                (33, 65, 72),
                (7, 7, 20),
            ]),
        });
        let name = format_ident!("mma_bias_gelu_{dt}");
        out.push(Entry {
            kernel: parse(
                quote!(shape(M = 4, N = 4, K = 4)),
                quote! {
                    fn #name(x: Tensor<#t, (M, K)>, w: Tensor<#t, (K, N)>, bias: Tensor<f32, (N,)>)
                        -> Tensor<#t, (M, N)>
                    {
                        compute(|m, n| gelu(sum(K, |k| (x[m][k] as f32) * (w[k][n] as f32)) + bias[n]))
                    }
                },
            ),
            shapes: shapes_mnk(&[(7, 16, 24), (33, 40, 72), (65, 8, 40)]),
        });
    }
    out.push(Entry {
        kernel: parse(
            quote!(shape(B = 2, M = 4, N = 4, K = 4)),
            quote! {
                fn mma_batched(x: Tensor<bf16, (B, M, K)>, w: Tensor<bf16, (K, B, N)>) -> Tensor<f32, (B, M, N)> {
                    compute(|b, m, n| sum(K, |k| x[b][m][k] * w[k][b][n]))
                }
            },
        ),
        shapes: [(2, 7, 16, 24), (3, 33, 8, 40), (2, 97, 40, 24)]
            .iter()
            .map(|&(b, m, n, k)| vec![("B", b), ("M", m), ("N", n), ("K", k)])
            .collect(),
    });
    out.push(Entry {
        kernel: parse(
            quote!(shape(M = 4, N = 4, K = 4)),
            quote! {
                fn mma_at_f16(x: Tensor<f16, (K, M)>, w: Tensor<f16, (K, N)>) -> Tensor<f32, (M, N)> {
                    compute(|m, n| sum(K, |k| x[k][m] * w[k][n]))
                }
            },
        ),
        shapes: shapes_mnk(&[(8, 16, 7), (40, 8, 33)]),
    });
    out.extend(tf32());
    out
}

/// `allow_tf32` contractions of f32 tensors (m16n8k8 tf32 on tensor cores,
/// 16-byte copies of 4 elements): M among 1, 7, 31, 65, 129 (tile ± 1), N
/// among 1, 7, 33 where `w[n][k]` leaves it free, K among 4, 12, 20, 68
/// (4 + the 64-deep tile) and 127; shapes whose contiguous extent is not a
/// multiple of 4 (K = 127, N = 7 for `w[k][n]`) keep their tensor-core
/// family, every point rejected by its alignment constraint.
fn tf32() -> Vec<Entry> {
    let kernel = |name: &str, item: TokenStream| {
        let kernel = parse(quote!(shape(M = 4, N = 4, K = 4), allow_tf32), item);
        assert_eq!(kernel.name, name);
        kernel
    };
    vec![
        Entry {
            kernel: kernel(
                "mma_tf32",
                quote! {
                    fn mma_tf32(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
                        compute(|m, n| sum(K, |k| x[m][k] * w[k][n]))
                    }
                },
            ),
            shapes: shapes_mnk(&[
                (1, 4, 4),
                (7, 12, 20),
                (31, 36, 12),
                (65, 8, 68),
                (129, 20, 36),
                (7, 7, 20),
            ]),
        },
        Entry {
            kernel: kernel(
                "mma_bt_tf32",
                quote! {
                    fn mma_bt_tf32(x: Tensor<f32, (M, K)>, w: Tensor<f32, (N, K)>) -> Tensor<f32, (M, N)> {
                        compute(|m, n| sum(K, |k| x[m][k] * w[n][k]))
                    }
                },
            ),
            shapes: shapes_mnk(&[
                (1, 1, 4),
                (7, 33, 12),
                (65, 7, 20),
                (33, 31, 68),
                (3, 5, 127),
            ]),
        },
        Entry {
            kernel: kernel(
                "mma_at_bias_relu_tf32",
                quote! {
                    fn mma_at_bias_relu_tf32(x: Tensor<f32, (K, M)>, w: Tensor<f32, (K, N)>, bias: Tensor<f32, (N,)>)
                        -> Tensor<f32, (M, N)>
                    {
                        compute(|m, n| relu(sum(K, |k| x[k][m] * w[k][n]) + bias[n]))
                    }
                },
            ),
            shapes: shapes_mnk(&[(4, 8, 1), (36, 12, 7), (68, 4, 31)]),
        },
    ]
}

fn generic() -> Vec<Entry> {
    let mut out = Vec::new();
    for dt in DTYPES {
        let t = format_ident!("{dt}");
        let name = format_ident!("pairwise_distance_{dt}");
        out.push(Entry {
            kernel: parse(
                quote!(shape(N = 4, M = 4, D = 4)),
                quote! {
                    fn #name(x: Tensor<#t, (N, D)>, y: Tensor<#t, (M, D)>) -> Tensor<#t, (N, M)> {
                        compute(|i, j| sqrt(sum(D, |d| (x[i][d] - y[j][d]) * (x[i][d] - y[j][d]))))
                    }
                },
            ),
            shapes: [(1, 1, 1), (7, 13, 3), (31, 5, 17)]
                .iter()
                .map(|&(n, m, d)| vec![("N", n), ("M", m), ("D", d)])
                .collect(),
        });
    }
    out
}

/// Whether a contraction point walks the grid in groups of block rows.
fn grouped(schedule: &Schedule) -> bool {
    matches!(
        *schedule,
        Schedule::Matmul(Tiles { group_m, .. }) | Schedule::Mma(MmaTiles { group_m, .. }) if group_m > 1
    )
}

/// Whether a SIMT contraction point copies its tiles by `cp.async`.
pub fn staged(schedule: &Schedule) -> bool {
    matches!(*schedule, Schedule::Matmul(Tiles { stages, .. }) if stages > 1)
}

/// Whether a contraction point splits `K` across blocks.
pub fn split(schedule: &Schedule) -> bool {
    matches!(
        *schedule,
        Schedule::Matmul(Tiles { split_k, .. }) | Schedule::Mma(MmaTiles { split_k, .. }) if split_k > 1
    )
}

/// The points one (kernel, shape) runs: its space (all of it or a sample;
/// the tensor-core family, the split-K points, each family's grouped walks
/// and the SIMT family's pipelined points sampled on their own), the heuristic's choice
/// on every target, and a generic point, each once.
pub fn points(kernel: &Kernel, seed: u64) -> Vec<(Schedule, SmVersion)> {
    let target = SmVersion::BASELINE;
    let (splits, others): (Vec<Schedule>, Vec<Schedule>) =
        candidates(kernel, target).into_iter().partition(split);
    let (tensor_splits, simt_splits): (Vec<Schedule>, Vec<Schedule>) =
        splits.into_iter().partition(|s| s.kind() == Class::Mma);
    let (walks, others): (Vec<Schedule>, Vec<Schedule>) = others.into_iter().partition(grouped);
    let (tensor, rest): (Vec<Schedule>, Vec<Schedule>) =
        others.into_iter().partition(|s| s.kind() == Class::Mma);
    let (simt_staged, rest): (Vec<Schedule>, Vec<Schedule>) = rest.into_iter().partition(staged);
    let (tensor_walks, simt_walks): (Vec<Schedule>, Vec<Schedule>) =
        walks.into_iter().partition(|s| s.kind() == Class::Mma);
    let mut rows_knobs: [Vec<Schedule>; 7] = Default::default();
    let mut simt = Vec::new();
    for s in rest {
        match s {
            Schedule::Rows {
                tree, online: 1, ..
            } => rows_knobs[5 + tree as usize].push(s),
            Schedule::Rows { cache, tree, .. } if cache + tree > 0 => {
                rows_knobs[(cache + 3 * tree - 1) as usize].push(s);
            }
            _ => simt.push(s),
        }
    }
    let pick = |points: Vec<Schedule>, every: usize, n: usize| {
        if points.len() <= every {
            points
        } else {
            sample(&points, n, seed)
        }
    };
    let simt_sample = if kernel.name.starts_with("mma_") {
        SAMPLE_SIMT_OF_MMA
    } else {
        SAMPLE
    };
    let chosen = pick(simt, simt_sample.min(EVERY_POINT), simt_sample)
        .into_iter()
        .chain(pick(tensor, SAMPLE_MMA, SAMPLE_MMA))
        .chain(pick(simt_staged, SAMPLE_STAGED, SAMPLE_STAGED))
        .chain(pick(simt_splits, SAMPLE_SPLIT, SAMPLE_SPLIT))
        .chain(pick(tensor_splits, SAMPLE_SPLIT, SAMPLE_SPLIT))
        .chain(pick(simt_walks, SAMPLE_GROUPED, SAMPLE_GROUPED))
        .chain(pick(tensor_walks, SAMPLE_GROUPED, SAMPLE_GROUPED))
        .chain(
            rows_knobs
                .into_iter()
                .flat_map(|points| pick(points, SAMPLE_ROWS_KNOB, SAMPLE_ROWS_KNOB)),
        );
    let mut out: Vec<(Schedule, SmVersion)> = chosen.map(|s| (s, target)).collect();
    // Only contractions with tensor-core points have warpgroup ones.
    if out.iter().any(|(s, _)| s.kind() == Class::Mma) {
        let (split_groups, whole_groups): (Vec<Schedule>, Vec<Schedule>) =
            candidates(kernel, SmVersion::Sm90)
                .into_iter()
                .filter(|s| matches!(s, Schedule::Mma(t) if t.wgmma == 1))
                .partition(split);
        let (fed, whole_groups): (Vec<Schedule>, Vec<Schedule>) = whole_groups
            .into_iter()
            .partition(|s| matches!(s, Schedule::Mma(t) if t.producer >= 1));
        let (pong, fed): (Vec<Schedule>, Vec<Schedule>) = fed
            .into_iter()
            .partition(|s| matches!(s, Schedule::Mma(t) if t.producer == 2));
        out.extend(
            pick(whole_groups, SAMPLE_WGMMA, SAMPLE_WGMMA)
                .into_iter()
                .chain(pick(fed, SAMPLE_WGMMA, SAMPLE_WGMMA))
                .chain(pick(pong, SAMPLE_PONG, SAMPLE_PONG))
                .chain(pick(split_groups, SAMPLE_WGMMA_SPLIT, SAMPLE_WGMMA_SPLIT))
                .map(|s| (s, SmVersion::Sm90)),
        );
    }
    if out.iter().any(|(s, _)| s.kind() == Class::Rows) {
        let rows = candidates(kernel, SmVersion::Sm90);
        let spread = sample(&rows, SAMPLE_CLUSTER, seed)
            .into_iter()
            .zip([2, 4, 8].into_iter().cycle())
            .filter_map(|(s, blocks)| s.with_knob("cluster", blocks))
            .filter(|s| validate(kernel, s, SmVersion::Sm90).is_ok());
        out.extend(spread.map(|s| (s, SmVersion::Sm90)));
    }
    for t in SmVersion::ALL {
        let h = heuristic(kernel, t);
        if !out.iter().any(|(s, _)| *s == h) {
            out.push((h, t));
        }
    }
    let generic = Schedule::Generic { block: 64 };
    if !out.iter().any(|(s, _)| *s == generic) {
        out.push((generic, target));
    }
    out
}

/// The seed of a kernel at its shape: FNV-1a over its name and its
/// dimensions' names and sizes, the same on every machine and release.
pub fn seed(kernel: &Kernel) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for byte in bytes {
            hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(kernel.name.as_bytes());
    for (dim, size) in kernel.shape() {
        eat(dim.as_bytes());
        eat(&size.to_le_bytes());
    }
    hash
}

/// Every kernel of the suite.
///
/// # Panics
///
/// If one of the suite's own kernels no longer parses: a bug in the suite.
pub fn catalogue() -> Vec<Entry> {
    [elementwise(), rows(), matmul(), tensor_cores(), generic()]
        .into_iter()
        .flatten()
        .collect()
}

/// The catalogue's kernels at each of their shapes.
///
/// # Panics
///
/// If an entry names a dimension its kernel does not have: a bug in the
/// suite.
pub fn shaped(catalogue: &[Entry]) -> Vec<Kernel> {
    catalogue
        .iter()
        .flat_map(|e| {
            e.shapes
                .iter()
                .map(|shape| with_shape(&e.kernel, shape).unwrap_or_else(|err| panic!("{err}")))
        })
        .collect()
}

/// One run of the suite: a kernel at one shape, its reference (inputs drawn
/// with a seed of its own), and one schedule point on one target.
#[derive(Debug, Clone, Copy)]
pub struct Run<'a> {
    pub reference: &'a Reference,
    pub schedule: &'a Schedule,
    pub target: SmVersion,
}

/// How many runs of each family the suite made, and the failures.
#[derive(Debug)]
pub struct Report<E> {
    /// Kernels in the catalogue.
    pub kernels: usize,
    /// (kernel, shape) pairs.
    pub shapes: usize,
    /// Runs: (kernel, shape, schedule, target) combinations.
    pub points: usize,
    /// Runs on tensor cores.
    pub tensor: usize,
    /// Tensor-core runs that load fragments one k-step ahead
    /// (`prefetch = 1`).
    pub prefetched: usize,
    /// Tensor-core runs on warpgroups' `wgmma.mma_async` (`wgmma = 1`):
    /// all of them, those split along `K`, those beside a producer
    /// warpgroup (`producer = 1`).
    pub warpgroup: [usize; 3],
    /// Runs walking the grid in groups of block rows: SIMT, tensor cores.
    pub grouped: [usize; 2],
    /// SIMT runs pipelined by `cp.async`.
    pub staged: usize,
    /// Runs split along `K`: SIMT, tensor cores.
    pub split: [usize; 2],
    /// Rows runs that keep the row in registers.
    pub one_pass: usize,
    /// Rows runs that keep the row in shared memory.
    pub shared_row: usize,
    /// Rows runs that combine a row's warps with a shared-memory tree.
    pub shared_tree: usize,
    /// Rows runs that compute two reductions in one pass (`online = 1`:
    /// softmax's maximum and sum, a mean and variance).
    pub online: usize,
    /// What the check returned for the runs that failed.
    pub failures: Vec<E>,
}

/// Runs `check` on every run of the suite over `catalogue`, on `workers`
/// threads (kernels and shapes taken in turn; the points of one shape share
/// its reference, whose inputs, like the sample of points, are drawn with
/// the shape's [`seed`], so that a run fails the same way wherever its
/// kernel stands in the catalogue).
pub fn run<E: Send>(
    catalogue: &[Entry],
    workers: usize,
    check: impl Fn(&Run<'_>) -> Result<(), E> + Sync,
) -> Report<E> {
    let jobs = shaped(catalogue);
    let next = AtomicUsize::new(0);
    let counts: [AtomicUsize; 15] = Default::default();
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..workers.max(1) {
            scope.spawn(|| {
                loop {
                    let j = next.fetch_add(1, Ordering::Relaxed);
                    let Some(kernel) = jobs.get(j) else {
                        break;
                    };
                    let seed = seed(kernel);
                    let reference = Reference::new(kernel, seed);
                    for (schedule, target) in points(kernel, seed) {
                        for (count, family) in counts.iter().zip(families(&schedule)) {
                            count.fetch_add(usize::from(family), Ordering::Relaxed);
                        }
                        let run = Run {
                            reference: &reference,
                            schedule: &schedule,
                            target,
                        };
                        if let Err(e) = check(&run) {
                            failures.lock().unwrap_or_else(|e| e.into_inner()).push(e);
                        }
                    }
                }
            });
        }
    });
    let [
        points,
        tensor,
        prefetched,
        warpgroup,
        warpgroup_split,
        fed,
        simt_grouped,
        tensor_grouped,
        staged,
        simt_split,
        tensor_split,
        one_pass,
        shared_row,
        shared_tree,
        online,
    ] = counts.map(AtomicUsize::into_inner);
    Report {
        kernels: catalogue.len(),
        shapes: jobs.len(),
        points,
        tensor,
        prefetched,
        warpgroup: [warpgroup, warpgroup_split, fed],
        grouped: [simt_grouped, tensor_grouped],
        staged,
        split: [simt_split, tensor_split],
        one_pass,
        shared_row,
        shared_tree,
        online,
        failures: failures.into_inner().unwrap_or_else(|e| e.into_inner()),
    }
}

/// Which of [`Report`]'s counts a run of `schedule` adds to, in the order
/// `run` keeps them: every run, tensor cores, fragments loaded ahead,
/// warpgroups, warpgroups split, warpgroups beside a producer, SIMT
/// grouped, tensor-core grouped, pipelined SIMT, SIMT split, tensor-core split, one pass, row
/// in shared memory, shared-memory tree, two reductions in one pass.
fn families(schedule: &Schedule) -> [bool; 15] {
    let tensor = schedule.kind() == Class::Mma;
    let grouped = grouped(schedule);
    let (cache, tree, online) = match *schedule {
        Schedule::Rows {
            cache,
            tree,
            online,
            ..
        } => (cache, tree == 1, online == 1),
        _ => (0, false, false),
    };
    let prefetched = matches!(schedule, Schedule::Mma(t) if t.prefetch == 1);
    let warpgroup = matches!(schedule, Schedule::Mma(t) if t.wgmma == 1);
    let fed = matches!(schedule, Schedule::Mma(t) if t.producer >= 1);
    [
        true,
        tensor,
        prefetched,
        warpgroup,
        warpgroup && split(schedule),
        fed,
        grouped && !tensor,
        grouped && tensor,
        staged(schedule),
        split(schedule) && !tensor,
        split(schedule) && tensor,
        cache == 1,
        cache == 2,
        tree,
        online,
    ]
}

impl<E> fmt::Display for Report<E> {
    /// The families' counts, then the summary line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [simt_grouped, tensor_grouped] = self.grouped;
        writeln!(
            f,
            "of which on tensor cores: {} schedule points, {} with fragments loaded ahead (prefetch = 1), \
             {} on warpgroups (wgmma = 1), {} of them split along K, {} beside a producer warpgroup",
            self.tensor, self.prefetched, self.warpgroup[0], self.warpgroup[1], self.warpgroup[2]
        )?;
        writeln!(
            f,
            "of which walking the grid in groups of block rows: {simt_grouped} SIMT, \
             {tensor_grouped} tensor-core schedule points"
        )?;
        writeln!(
            f,
            "of which SIMT pipelined by cp.async (stages > 1): {} schedule points",
            self.staged
        )?;
        let [simt_split, tensor_split] = self.split;
        writeln!(
            f,
            "of which split along K (split_k > 1): {simt_split} SIMT, \
             {tensor_split} tensor-core schedule points"
        )?;
        writeln!(
            f,
            "of which rows in one pass: {} schedule points",
            self.one_pass
        )?;
        writeln!(
            f,
            "of which rows kept in shared memory: {} schedule points",
            self.shared_row
        )?;
        writeln!(
            f,
            "of which rows with a shared-memory tree: {} schedule points",
            self.shared_tree
        )?;
        writeln!(
            f,
            "of which rows with two reductions in one pass (online = 1): {} schedule points",
            self.online
        )?;
        write!(
            f,
            "verified {} kernels, {} schedule points, {} shapes: {} mismatches",
            self.kernels,
            self.points,
            self.shapes,
            self.failures.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shapes_seed_is_its_own() {
        let catalogue = catalogue();
        let shaped = shaped(&catalogue);
        let seeds: Vec<u64> = shaped.iter().map(seed).collect();
        let mut distinct = seeds.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), seeds.len(), "two shapes share a seed");
        // Where the shape stands does not matter.
        let alone = shaped.last().expect("a shape").clone();
        assert_eq!(seed(&alone), *seeds.last().expect("a seed"));
        // FNV-1a of "k", then "N" and 3 as 4 little-endian bytes.
        let k = parse(
            quote!(shape(N = 3)),
            quote! { fn k(x: Tensor<f32, N>) -> Tensor<f32, N> { compute(|i| x[i]) } },
        );
        let mut want: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in [b'k', b'N', 3, 0, 0, 0] {
            want = (want ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        assert_eq!(seed(&k), want);
    }
}

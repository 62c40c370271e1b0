//! `ptx::parse` gives back exactly the kernel `ptx::print` printed, for
//! lowered kernels of every class, dtype and target, and names the line of
//! anything else.

use ktune_core::SmVersion;
use ktune_core::lower::{heuristic, lower};
use ktune_core::ptx::{Kernel, parse, print};
use ktune_core::schedule::{Schedule, Tiles};
use ktune_core::syntax::parse_kernel;
use proc_macro2::TokenStream;
use quote::quote;

/// Kernels of every class (generic, elementwise, rows, matmul) and dtype.
fn catalogue() -> Vec<ktune_core::ir::Kernel> {
    let sources: Vec<(TokenStream, TokenStream)> = vec![
        (
            quote!(shape(R = 100, C = 256)),
            quote! {
                fn broadcast_add(x: Tensor<f32, (R, C)>, b: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
                    compute(|r, c| x[r][c] + b[c])
                }
            },
        ),
        (
            quote!(shape(N = 1000)),
            quote! {
                fn scale(x: Tensor<bf16, (N,)>, w: Tensor<f16, (N,)>) -> Tensor<bf16, (N,)> {
                    compute(|i| silu(2.0 * x[i]) + tanh(w[i]) - erf(x[i] as f16))
                }
            },
        ),
        (
            quote!(shape(R = 64, C = 1000)),
            quote! {
                fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                    compute(|r, c| {
                        let mx = max(C, |j| x[r][j]);
                        let s = sum(C, |j| exp(x[r][j] - mx));
                        exp(x[r][c] - mx) / s
                    })
                }
            },
        ),
        (
            quote!(shape(T = 33, D = 96)),
            quote! {
                fn layernorm(x: Tensor<f32, (T, D)>, g: Tensor<f32, (D,)>, b: Tensor<f32, (D,)>) -> Tensor<f16, (T, D)> {
                    compute(|t, d| {
                        let mu = mean(D, |k| x[t][k]);
                        let var = mean(D, |k| (x[t][k] - mu) * (x[t][k] - mu));
                        (x[t][d] - mu) * rsqrt(var + 1e-5) * g[d] + b[d]
                    })
                }
            },
        ),
        (
            quote!(shape(M = 70, N = 96, K = 64)),
            quote! {
                fn matmul_bias_gelu(a: Tensor<bf16, (M, K)>, w: Tensor<bf16, (K, N)>, b: Tensor<f32, (N,)>) -> Tensor<bf16, (M, N)> {
                    compute(|m, n| gelu(sum(K, |k| a[m][k] * w[k][n]) + b[n]))
                }
            },
        ),
        (
            quote!(shape(M = 33, N = 17, K = 5)),
            quote! {
                fn matmul_t(a: Tensor<f32, (K, M)>, w: Tensor<f32, (N, K)>) -> Tensor<f32, (M, N)> {
                    compute(|m, n| max(sum(K, |k| a[k][m] * w[n][k]), 0.0))
                }
            },
        ),
        (
            quote!(shape(R = 7, C = 9)),
            quote! {
                fn generic_mix(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C, R)> {
                    compute(|c, r| select(x[r][c] > 0.0 && !(x[r][c] > 2.0), sqrt(abs(x[r][c])) * r, min(log(1.0 + x[r][c] * x[r][c]), sigmoid(x[r][c]))))
                }
            },
        ),
    ];
    sources
        .into_iter()
        .map(|(attr, item)| parse_kernel(attr, item).expect("catalogue kernels are valid"))
        .collect()
}

fn round_trip(kernel: &Kernel, target: SmVersion) {
    let text = print(kernel, target);
    let parsed = parse(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", kernel.entry));
    assert_eq!(parsed.1, target);
    assert_eq!(parsed.0, *kernel, "{}", kernel.entry);
}

#[test]
fn heuristic_defaults_round_trip_on_every_target() {
    let mut classes = std::collections::BTreeSet::new();
    for kernel in catalogue() {
        for target in SmVersion::ALL {
            let schedule = heuristic(&kernel, target);
            classes.insert(schedule.class());
            let lowered = lower(&kernel, &schedule, target).expect("the default lowers");
            round_trip(&lowered.ptx, target);
        }
    }
    // Generic schedules are covered by `other_schedules_round_trip`.
    assert!(
        ["elementwise", "rows", "matmul"]
            .iter()
            .all(|c| classes.contains(c)),
        "{classes:?}"
    );
}

#[test]
fn other_schedules_round_trip() {
    let kernels = catalogue();
    let find = |name: &str| {
        kernels
            .iter()
            .find(|k| k.name == name)
            .expect("in the catalogue")
    };
    let points = [
        ("broadcast_add", Schedule::Generic { block: 64 }),
        (
            "broadcast_add",
            Schedule::Elementwise {
                block: 128,
                per_thread: 3,
                vector: 2,
            },
        ),
        ("softmax", Schedule::Generic { block: 32 }),
        (
            "softmax",
            Schedule::Rows {
                threads_per_row: 128,
                rows_per_block: 2,
                vector: 1,
                cache: 0,
                tree: 0,
                online: 0,
                cluster: 1,
            },
        ),
        (
            "softmax",
            Schedule::Rows {
                threads_per_row: 128,
                rows_per_block: 2,
                vector: 1,
                cache: 1,
                tree: 1,
                online: 0,
                cluster: 1,
            },
        ),
        (
            "layernorm",
            Schedule::Rows {
                threads_per_row: 8,
                rows_per_block: 4,
                vector: 4,
                cache: 0,
                tree: 0,
                online: 0,
                cluster: 1,
            },
        ),
        (
            "layernorm",
            Schedule::Rows {
                threads_per_row: 64,
                rows_per_block: 4,
                vector: 4,
                cache: 1,
                tree: 0,
                online: 0,
                cluster: 1,
            },
        ),
        // Two reductions in one pass (−∞ immediates), and a row filled into
        // shared memory by `cp.async`.
        (
            "softmax",
            Schedule::Rows {
                threads_per_row: 64,
                rows_per_block: 2,
                vector: 1,
                cache: 0,
                tree: 1,
                online: 1,
                cluster: 1,
            },
        ),
        (
            "layernorm",
            Schedule::Rows {
                threads_per_row: 32,
                rows_per_block: 1,
                vector: 4,
                cache: 0,
                tree: 0,
                online: 1,
                cluster: 1,
            },
        ),
        (
            "softmax",
            Schedule::Rows {
                threads_per_row: 128,
                rows_per_block: 1,
                vector: 1,
                cache: 2,
                tree: 0,
                online: 0,
                cluster: 1,
            },
        ),
        (
            "matmul_bias_gelu",
            Schedule::Matmul(Tiles {
                block_m: 32,
                block_n: 32,
                block_k: 16,
                thread_m: 2,
                thread_n: 4,
                vector_a: 4,
                vector_b: 4,
                group_m: 1,
                stages: 1,
                split_k: 1,
            }),
        ),
        ("matmul_t", Schedule::Generic { block: 128 }),
        (
            "matmul_t",
            Schedule::Matmul(Tiles {
                block_m: 32,
                block_n: 32,
                block_k: 8,
                thread_m: 2,
                thread_n: 2,
                vector_a: 1,
                vector_b: 1,
                group_m: 1,
                stages: 3,
                split_k: 1,
            }),
        ),
    ];
    for (name, schedule) in points {
        let lowered = lower(find(name), &schedule, SmVersion::Sm80)
            .unwrap_or_else(|e| panic!("{name} {}: {e}", schedule.to_json()));
        round_trip(&lowered.ptx, SmVersion::Sm80);
    }
}

#[test]
fn errors_name_the_line() {
    let kernel = catalogue().remove(2);
    let lowered = lower(
        &kernel,
        &heuristic(&kernel, SmVersion::Sm80),
        SmVersion::Sm80,
    )
    .expect("the default lowers");
    let text = print(&lowered.ptx, SmVersion::Sm80);
    let line_of = |needle: &str| {
        text.lines()
            .position(|l| l.contains(needle))
            .expect("present")
            + 1
    };

    let broken = text.replacen("shfl.sync.bfly", "shfl.sync.sideways", 1);
    let err = parse(&broken).unwrap_err();
    assert_eq!(err.line, line_of("shfl.sync.bfly"));
    assert!(err.message.contains("sideways"), "{err}");

    let broken = text.replacen("mul.rn.f32", "mul.f32", 1);
    let err = parse(&broken).unwrap_err();
    assert_eq!(err.line, line_of("mul.rn.f32"));
    assert!(
        err.message.contains("not in the form ktune prints"),
        "{err}"
    );

    let broken = text.replacen(".target sm_80", ".target sm_75", 1);
    let err = parse(&broken).unwrap_err();
    assert_eq!(err.line, 5);
    assert!(
        err.to_string()
            .starts_with("PTX line 5: unknown GPU target `sm_75`"),
        "{err}"
    );

    let broken = text.replacen(".version 7.0", ".version 7.8", 1);
    assert_eq!(parse(&broken).unwrap_err().line, 4);

    let truncated: String = text.lines().take(30).map(|l| format!("{l}\n")).collect();
    let err = parse(&truncated).unwrap_err();
    assert_eq!(err.line, 31);
    assert!(err.message.contains("ends before"), "{err}");

    // Loads have a read-only form, which prints back as it was read;
    // stores have none.
    let read_only = text.replacen("ld.global.", "ld.global.nc.", 1);
    let (parsed, target) = parse(&read_only).expect("a read-only load parses");
    assert_eq!(print(&parsed, target), read_only);
    let broken = text.replacen("st.global.", "st.global.nc.", 1);
    let err = parse(&broken).unwrap_err();
    assert_eq!(err.line, line_of("st.global."));
    assert!(err.message.contains("`.nc` is for loads"), "{err}");

    // A kernel may ask ptxas to leave room for some blocks per SM; the
    // count is positive.
    let hinted = text.replacen(", 1, 1\n", ", 1, 1\n.minnctapersm 1\n", 1);
    let (parsed, target) = parse(&hinted).expect("`.minnctapersm` parses");
    assert_eq!(parsed.min_blocks_per_sm, 1);
    assert_eq!(print(&parsed, target), hinted);
    let broken = text.replacen(", 1, 1\n", ", 1, 1\n.minnctapersm 0\n", 1);
    let err = parse(&broken).unwrap_err();
    assert_eq!(err.line, line_of(".maxntid") + 1);
    assert!(err.message.contains("not a positive count"), "{err}");

    // A kernel may require clusters of blocks along `x`; it never stores to
    // another block's shared memory.
    let clustered = text.replacen(", 1, 1\n", ", 1, 1\n.reqnctapercluster 4, 1, 1\n", 1);
    let (parsed, target) = parse(&clustered).expect("`.reqnctapercluster` parses");
    assert_eq!(parsed.cluster_blocks, 4);
    assert_eq!(print(&parsed, target), clustered);
    let broken = text.replacen(", 1, 1\n", ", 1, 1\n.reqnctapercluster 2, 2, 1\n", 1);
    let err = parse(&broken).unwrap_err();
    assert_eq!(err.line, line_of(".maxntid") + 1);
    assert!(err.message.contains("not `N, 1, 1`"), "{err}");
    let broken = text.replacen("st.global.", "st.shared::cluster.", 1);
    let err = parse(&broken).unwrap_err();
    assert_eq!(err.line, line_of("st.global."));
    assert!(err.message.contains("never stores"), "{err}");

    let undeclared = text.replacen("%f1,", "%f999,", 1);
    let err = parse(&undeclared).unwrap_err();
    assert!(err.message.contains("`%f999` is not declared"), "{err}");
}

/// Every tensor-core, async-copy, packing and atomic instruction in each of
/// its forms, built with the builder's helpers.
fn tensor_core_kernel() -> Kernel {
    use ktune_core::ptx::Builder;
    use ktune_core::ptx::inst::{Addr, CpAsyncCache, MmaKind, Operand, RegClass};

    let mut b = Builder::new();
    let smem = b.shared_base();
    let global = b.param_ptr(0);
    let at = |base, offset| Addr { base, offset };
    let size = b.u32_imm(6);
    b.cp_async(CpAsyncCache::Ca, at(smem, 0), at(global, 0), 4, None);
    b.cp_async(CpAsyncCache::Ca, at(smem, 8), at(global, 8), 8, Some(size));
    b.cp_async(CpAsyncCache::Ca, at(smem, 16), at(global, 16), 16, None);
    b.cp_async(
        CpAsyncCache::Cg,
        at(smem, 32),
        at(global, 32),
        16,
        Some(size),
    );
    b.cp_async_commit();
    b.cp_async_wait(1);
    b.cp_async_wait_all();
    let x1 = b.ldmatrix(1, false, at(smem, 0));
    let x2 = b.ldmatrix(2, true, at(smem, 16));
    let x4 = b.ldmatrix(4, false, at(smem, -16));
    let (lo, hi) = b.unpack_b16x2(x1[0]);
    let packed = b.pack_b16x2(hi, lo);
    let zero = b.f32_imm(0.0);
    let acc = [zero, b.f32_imm(1.0), b.f32_imm(2.0), b.f32_imm(-3.5)];
    let a = [x4[0], x4[1], x4[2], x4[3]];
    b.mma_acc(MmaKind::F16, acc, a, [x2[0], x2[1]]);
    b.mma_acc(MmaKind::Bf16, acc, a, [packed, x2[1]]);
    let t = b.f32_to_tf32(acc[1]);
    let u = b.reg(RegClass::B32);
    b.push(ktune_core::ptx::inst::Op::Mma {
        kind: MmaKind::Tf32,
        d: [zero, acc[1], acc[2], acc[3]],
        a: [t, t, u, u],
        b: [t, u],
        c: acc,
    });
    b.red_add_f32(at(global, 4), acc[0]);
    b.red_add_f32(at(global, 8), Operand::F32(1.5));
    let old = b.atom_add_f32(at(global, 12), acc[2]);
    b.store(
        ktune_core::ptx::inst::Space::Global,
        ktune_core::DType::F32,
        at(global, 16),
        old,
    );
    b.finish("tensor_core".into(), 1, 128, 64)
}

#[test]
fn tensor_core_and_async_copy_instructions_round_trip() {
    let kernel = tensor_core_kernel();
    for target in [SmVersion::Sm80, SmVersion::Sm90] {
        round_trip(&kernel, target);
    }
    let text = print(&kernel, SmVersion::Sm80);
    for line in [
        "\tcp.async.ca.shared.global [%r0], [%rd1], 4;",
        "\tcp.async.ca.shared.global [%r0+8], [%rd1+8], 8, %r1;",
        "\tcp.async.cg.shared.global [%r0+32], [%rd1+32], 16, %r1;",
        "\tcp.async.commit_group;",
        "\tcp.async.wait_group 1;",
        "\tcp.async.wait_all;",
        "\tldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r2}, [%r0];",
        "\tldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%r3, %r4}, [%r0+16];",
        "\tldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r5, %r6, %r7, %r8}, [%r0+(-16)];",
        "\tmov.b32 {%h0, %h1}, %r2;",
        "\tmov.b32 %r9, {%h1, %h0};",
        "\tmma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f0, %f1, %f2, %f3}, {%r5, %r6, %r7, %r8}, {%r3, %r4}, {%f0, %f1, %f2, %f3};",
        "\tmma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f0, %f1, %f2, %f3}, {%r5, %r6, %r7, %r8}, {%r9, %r4}, {%f0, %f1, %f2, %f3};",
        "\tcvt.rna.tf32.f32 %r10, %f1;",
        "\tmma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%f0, %f1, %f2, %f3}, {%r10, %r10, %r11, %r11}, {%r10, %r11}, {%f0, %f1, %f2, %f3};",
        "\tred.global.add.f32 [%rd1+4], %f0;",
        "\tred.global.add.f32 [%rd1+8], 0f3FC00000;",
        "\tatom.global.add.f32 %f4, [%rd1+12], %f2;",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing `{line}` in\n{text}"
        );
    }
    let mangled = text.replace("m8n8.x2.trans", "m8n8.x4.trans");
    let err = parse(&mangled).unwrap_err();
    assert!(
        err.message.contains("not in the form ktune prints"),
        "{err}"
    );
}

/// The instructions split-K's reduction uses: the fence, the u32 atomic
/// that counts arrivals, and L2-only loads of other blocks' partial sums.
#[test]
fn split_k_instructions_round_trip() {
    use ktune_core::DType;
    use ktune_core::ptx::Builder;
    use ktune_core::ptx::inst::{Addr, Op, Operand, Space};

    let mut b = Builder::new();
    let global = b.param_ptr(0);
    let at = |offset| Addr {
        base: global,
        offset,
    };
    let one = b.load_global_cg_f32(at(0), 1);
    let four = b.load_global_cg_f32(at(16), 4);
    b.store(Space::Global, DType::F32, at(32), four[3]);
    b.push(Op::Fence);
    let old = b.atom_add_u32(at(64), Operand::Int(1));
    b.store(Space::Global, DType::F32, at(48), one[0]);
    b.push(Op::St {
        space: Space::Global,
        ty: ktune_core::ptx::inst::Ty::U32,
        addr: at(64),
        srcs: vec![old.into()],
    });
    let kernel = b.finish("split_k".into(), 1, 32, 0);
    for target in [SmVersion::Sm80, SmVersion::Sm90] {
        round_trip(&kernel, target);
    }
    let text = print(&kernel, SmVersion::Sm80);
    for line in [
        "\tld.global.cg.f32 %f0, [%rd1];",
        "\tld.global.cg.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1+16];",
        "\tfence.acq_rel.gpu;",
        "\tatom.global.add.u32 %r0, [%rd1+64], 1;",
        "\tst.global.u32 [%rd1+64], %r0;",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing `{line}` in\n{text}"
        );
    }
    let err = parse(&text.replace("fence.acq_rel.gpu", "fence.sc.gpu")).unwrap_err();
    assert!(err.message.contains("fence.sc.gpu"), "{err}");
}

/// A kernel with Hopper's warpgroup instructions prints for sm_90 as an
/// `sm_90a` module (PTX ISA 8.0, window aligned to 1024 bytes) and parses
/// back; a header that does not match its body is an error naming it.
#[test]
fn warpgroup_kernels_target_sm90a() {
    use ktune_core::ptx::Builder;
    use ktune_core::ptx::inst::{Cmp, MmaKind, Op, RegClass, Special, Ty};

    let mut b = Builder::new();
    let smem = b.shared_base();
    let tid = b.special(Special::TidX);
    let scale = b.setp(Cmp::Ne, Ty::U32, tid, smem);
    let desc = b.reg(RegClass::B64);
    b.push(Op::Mov {
        ty: Ty::B64,
        dst: desc,
        src: ktune_core::ptx::inst::Operand::Int(1 << 62),
    });
    let d: Vec<_> = (0..4).map(|_| b.reg(RegClass::F32)).collect();
    b.push(Op::FenceProxyAsync);
    b.push(Op::WgmmaFence);
    for (kind, trans) in [
        (MmaKind::Bf16, true),
        (MmaKind::F16, false),
        (MmaKind::Tf32, false),
    ] {
        b.push(Op::Wgmma {
            kind,
            d: d.clone(),
            a: desc,
            b: desc,
            scale_d: scale,
            trans_a: false,
            trans_b: trans,
        });
    }
    b.push(Op::WgmmaCommit);
    b.push(Op::WgmmaWait { pending: 0 });
    let kernel = b.finish("warpgroup".into(), 0, 128, 2048);
    let text = print(&kernel, SmVersion::Sm90);
    for line in [
        ".version 8.0",
        ".target sm_90a",
        ".extern .shared .align 1024 .b8 ktune_smem[];",
        "\tfence.proxy.async.shared::cta;",
        "\twgmma.fence.sync.aligned;",
        "\twgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f0, %f1, %f2, %f3}, %rd0, %rd0, %p0, 1, 1, 0, 1;",
        "\twgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%f0, %f1, %f2, %f3}, %rd0, %rd0, %p0, 1, 1, 0, 0;",
        "\twgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%f0, %f1, %f2, %f3}, %rd0, %rd0, %p0, 1, 1;",
        "\twgmma.commit_group.sync.aligned;",
        "\twgmma.wait_group.sync.aligned 0;",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing `{line}` in\n{text}"
        );
    }
    assert_eq!(parse(&text).unwrap(), (kernel.clone(), SmVersion::Sm90));

    let plain = text.replace(".target sm_90a", ".target sm_90");
    let err = parse(&plain).unwrap_err();
    assert_eq!(err.line, 4, "{err}");
    assert!(err.message.contains("`.target sm_90a`"), "{err}");
    let unaligned = text.replace(".align 1024", ".align 16");
    let err = parse(&unaligned).unwrap_err();
    assert!(
        err.message.contains("aligns this kernel's to 1024"),
        "{err}"
    );
    assert_eq!(err.line, 9, "{err}");

    // Without them, sm_90a is not what ktune prints.
    let empty = Builder::new().finish("empty".into(), 0, 32, 0);
    let text = print(&empty, SmVersion::Sm90).replace(".target sm_90", ".target sm_90a");
    let err = parse(&text).unwrap_err();
    assert!(err.message.contains("`.target sm_90`)"), "{err}");
}

/// Named barriers print as `bar.sync` and `bar.arrive` with their number
/// and thread count, and parse back; the whole block's `bar.sync 0` keeps
/// its own form.
#[test]
fn named_barriers_round_trip() {
    use ktune_core::ptx::Builder;
    use ktune_core::ptx::inst::{Op, Operand, Special};

    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    b.push(Op::NamedBar {
        id: Operand::Int(1),
        threads: 256,
        wait: false,
    });
    b.push(Op::NamedBar {
        id: Operand::Int(15),
        threads: 32,
        wait: true,
    });
    b.push(Op::NamedBar {
        id: Operand::Reg(tid),
        threads: 64,
        wait: false,
    });
    b.push(Op::BarSync);
    let kernel = b.finish("named".into(), 1, 256, 0);
    for target in [SmVersion::Sm80, SmVersion::Sm90] {
        round_trip(&kernel, target);
    }
    let text = print(&kernel, SmVersion::Sm80);
    for line in [
        "\tbar.arrive 1, 256;",
        "\tbar.sync 15, 32;",
        "\tbar.arrive %r0, 64;",
        "\tbar.sync 0;",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing `{line}` in\n{text}"
        );
    }
    let err = parse(&text.replace("bar.arrive 1, 256", "bar.arrive 1")).unwrap_err();
    assert!(err.message.contains("operand"), "{err}");
    let err = parse(&text.replace("bar.sync 15, 32", "bar.sync 15, all")).unwrap_err();
    assert!(err.message.contains("`all` is not a thread count"), "{err}");
}

/// A warpgroup's register reallocation prints as `setmaxnreg` with its
/// action and count, makes the module `sm_90a`, and parses back.
#[test]
fn register_reallocation_round_trips() {
    use ktune_core::ptx::Builder;
    use ktune_core::ptx::inst::Op;

    let mut b = Builder::new();
    b.push(Op::SetMaxNReg {
        count: 40,
        raise: false,
    });
    b.push(Op::SetMaxNReg {
        count: 232,
        raise: true,
    });
    let kernel = b.finish("realloc".into(), 0, 384, 0);
    round_trip(&kernel, SmVersion::Sm90);
    let text = print(&kernel, SmVersion::Sm90);
    for line in [
        ".target sm_90a",
        "\tsetmaxnreg.dec.sync.aligned.u32 40;",
        "\tsetmaxnreg.inc.sync.aligned.u32 232;",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing `{line}` in\n{text}"
        );
    }
    let err = parse(&text.replace("u32 232", "u32 many")).unwrap_err();
    assert!(
        err.message.contains("`many` is not a register count"),
        "{err}"
    );
}

/// Memory barriers print as `mbarrier` instructions on the shared
/// window's addresses (and `cp.async`'s arrival at one), and parse back.
#[test]
fn memory_barriers_round_trip() {
    use ktune_core::ptx::Builder;
    use ktune_core::ptx::inst::{Addr, Op, Operand, RegClass};

    let mut b = Builder::new();
    let smem = b.shared_base();
    let count = b.u32_imm(128);
    let full = Addr {
        base: smem,
        offset: 1024,
    };
    let empty = Addr {
        base: smem,
        offset: 1032,
    };
    b.push(Op::MbarrierInit {
        addr: full,
        count: Operand::Int(128),
    });
    b.push(Op::MbarrierInit {
        addr: empty,
        count: count.into(),
    });
    b.push(Op::CpAsyncMbarrierArrive { addr: full });
    b.mbarrier_arrive(empty);
    let parity = b.u32_imm(1);
    b.mbarrier_wait(full, parity.into());
    b.mbarrier_wait_bounded(empty, Operand::Int(0));
    let kernel = b.finish("mbarriers".into(), 0, 256, 1040);
    round_trip(&kernel, SmVersion::Sm90);
    assert!(kernel.reg_counts.contains(&(RegClass::B64, 1)));
    let text = print(&kernel, SmVersion::Sm90);
    for line in [
        "\tmbarrier.init.shared.b64 [%r0+1024], 128;",
        "\tmbarrier.init.shared.b64 [%r0+1032], %r1;",
        "\tcp.async.mbarrier.arrive.noinc.shared.b64 [%r0+1024];",
        "\tmbarrier.arrive.shared.b64 %rd0, [%r0+1032];",
        "\tmbarrier.try_wait.parity.shared.b64 %p0, [%r0+1024], %r2;",
        "\t@!%p0 bra $L__BB1;",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing `{line}` in\n{text}"
        );
    }
    // A bounded wait: a `try_wait`, and where it gives up, retries until
    // four seconds after the first.
    let wait = [
        "\tmbarrier.try_wait.parity.shared.b64 %p1, [%r0+1032], 0;",
        "\t@%p1 bra $L__BB3;",
        "\tmov.u32 %r3, %globaltimer_lo;",
        "$L__BB2:",
        "\tmbarrier.try_wait.parity.shared.b64 %p2, [%r0+1032], 0;",
        "\t@%p2 bra $L__BB3;",
        "\tmov.u32 %r4, %globaltimer_lo;",
        "\tsub.u32 %r5, %r4, %r3;",
        "\tsetp.gt.u32 %p3, %r5, 4000000000;",
        "\t@!%p3 bra $L__BB2;",
        "\ttrap;",
        "$L__BB3:",
    ]
    .join("\n");
    assert!(text.contains(&wait), "{text}");
    let err = parse(&text.replace("[%r0+1024], 128", "[%r0+1024]")).unwrap_err();
    assert!(err.message.contains("operand"), "{err}");
}

/// A kernel with tensor maps declares them after its pointers, states each
/// in a comment, and prints their copies and the barrier arrival that
/// expects their bytes; all of it parses back.
#[test]
fn tensor_map_copies_round_trip() {
    use ktune_core::DType;
    use ktune_core::ptx::inst::{Addr, Op, Operand, RegClass, Ty};
    use ktune_core::ptx::{Builder, Swizzle, TensorMap};

    let mut b = Builder::new();
    let smem = b.shared_base();
    let barrier = Addr {
        base: smem,
        offset: 16384,
    };
    let param = b.reg(RegClass::B64);
    b.push(Op::TensorMapParam {
        dst: param,
        index: 1,
    });
    let map = b.reg(RegClass::B64);
    b.push(Op::CvtaParam {
        dst: map,
        src: param,
    });
    let state = b.reg(RegClass::B64);
    b.push(Op::MbarrierArriveExpectTx {
        state,
        addr: barrier,
        bytes: Operand::Int(16384),
    });
    let coords = vec![b.u32_imm(64), b.u32_imm(128)];
    b.push(Op::CpAsyncBulkTensor {
        dst: Addr {
            base: smem,
            offset: 0,
        },
        map,
        coords: coords.clone(),
        barrier,
        multicast: None,
    });
    // The same box for both blocks of a cluster, and an arrival at the
    // other's barrier.
    b.push(Op::FenceMbarrierInit);
    let mask = b.reg(RegClass::B16);
    b.push(Op::Mov {
        ty: Ty::B16,
        dst: mask,
        src: Operand::Int(3),
    });
    b.push(Op::CpAsyncBulkTensor {
        dst: Addr {
            base: smem,
            offset: 0,
        },
        map,
        coords,
        barrier,
        multicast: Some(mask),
    });
    let remote = b.reg(RegClass::B32);
    b.push(Op::Mapa {
        dst: remote,
        src: smem,
        rank: Operand::Int(1),
    });
    b.push(Op::MbarrierArriveCluster {
        addr: Addr {
            base: remote,
            offset: 16384,
        },
    });
    let mut kernel = b.finish("tma".into(), 3, 128, 16392);
    let a = TensorMap {
        param: 0,
        dtype: DType::Bf16,
        dims: vec![4096, 4096],
        strides: vec![8192],
        boxed: vec![64, 128],
        swizzle: Swizzle::B128,
    };
    let w = TensorMap {
        param: 1,
        dims: vec![11008, 4096],
        strides: vec![22016],
        ..a.clone()
    };
    kernel.tensor_maps = vec![a, w];
    round_trip(&kernel, SmVersion::Sm90);
    let text = print(&kernel, SmVersion::Sm90);
    for line in [
        ".target sm_90a",
        "// map_0: param_0, bf16, dims 4096x4096, strides 8192, box 64x128, swizzle 128B",
        "// map_1: param_1, bf16, dims 11008x4096, strides 22016, box 64x128, swizzle 128B",
        "\t.param .u64 param_2,",
        "\t.param .align 64 .b8 map_0[128],",
        "\t.param .align 64 .b8 map_1[128]",
        "\tmov.b64 %rd0, map_1;",
        "\tcvta.param.u64 %rd1, %rd0;",
        "\tmbarrier.arrive.expect_tx.shared::cta.b64 %rd2, [%r0+16384], 16384;",
        "\tcp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r0], [%rd1, {%r1, %r2}], [%r0+16384];",
        "\tfence.mbarrier_init.release.cluster;",
        "\tcp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%r0], [%rd1, {%r1, %r2}], [%r0+16384], %h0;",
        "\tmbarrier.arrive.shared::cluster.b64 _, [%r3+16384];",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing `{line}` in\n{text}"
        );
    }
    let err = parse(&text.replace(
        "box 64x128, swizzle 128B\n// map_1",
        "box 64x128, swizzle 96B\n// map_1",
    ))
    .unwrap_err();
    assert!(
        err.message.contains("not a tensor map ktune prints"),
        "{err}"
    );
    let err = parse(&text.replace("\t.param .align 64 .b8 map_1[128]\n", "")).unwrap_err();
    assert!(err.message.contains("parameter"), "{err}");
}

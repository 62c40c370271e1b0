use quote::quote;

use super::*;
use crate::lower::matmul::detect;
use crate::lower::{Constraint, LowerError, lower, validate};
use crate::ptx::inst::{MmaKind, Op};
use crate::schedule::Class;
use crate::space::{Rejection, Space};
use crate::syntax::parse_kernel;

/// `out[m][n] = Σ_k x·w` with `x: (M, K)` and `w: (K, N)`, or `(N, K)` when
/// `transposed`.
fn gemm(m: u32, n: u32, k: u32, dtype: &str, transposed: bool) -> Kernel {
    let t = quote::format_ident!("{dtype}");
    let item = if transposed {
        quote! {
            fn gemm(x: Tensor<#t, (M, K)>, w: Tensor<#t, (N, K)>) -> Tensor<f32, (M, N)> {
                compute(|m, n| sum(K, |k| x[m][k] * w[n][k]))
            }
        }
    } else {
        quote! {
            fn gemm(x: Tensor<#t, (M, K)>, w: Tensor<#t, (K, N)>) -> Tensor<f32, (M, N)> {
                compute(|m, n| sum(K, |k| x[m][k] * w[k][n]))
            }
        }
    };
    parse_kernel(quote!(shape(M = #m, N = #n, K = #k)), item).expect("valid kernel")
}

fn tiles(block: (u32, u32, u32), warp: (u32, u32), stages: u32) -> MmaTiles {
    MmaTiles {
        block_m: block.0,
        block_n: block.1,
        block_k: block.2,
        warp_m: warp.0,
        warp_n: warp.1,
        stages,
        group_m: 1,
        split_k: 1,
        min_blocks: 0,
        swizzle: 0,
        prefetch: 0,
        wgmma: 0,
        tail_split: 1,
        persistent: 0,
        producer: 0,
        tma: 0,
        cluster_m: 1,
    }
}

/// The constraint `t` breaks for `k` on `target`, with its reason.
fn rejection(k: &Kernel, t: MmaTiles, target: SmVersion) -> (Constraint, String) {
    match validate(k, &t.to_schedule(), target) {
        Err(LowerError::Invalid {
            constraint, reason, ..
        }) => (constraint, reason),
        other => panic!("{t:?} not rejected: {other:?}"),
    }
}

#[test]
fn validation_names_the_constraint_broken() {
    let k = gemm(1024, 1024, 1024, "bf16", false);
    let sm80 = SmVersion::Sm80;
    let cases = [
        (tiles((96, 128, 32), (32, 32), 3), Constraint::Range),
        (tiles((128, 128, 8), (64, 64), 3), Constraint::Range),
        (tiles((128, 128, 32), (64, 8), 3), Constraint::Range),
        (tiles((128, 128, 32), (64, 64), 5), Constraint::Range),
        (tiles((32, 128, 32), (64, 32), 2), Constraint::Tiling),
        (tiles((256, 256, 32), (16, 16), 2), Constraint::Threads),
        (
            tiles((256, 256, 64), (128, 64), 4),
            Constraint::SharedMemory,
        ),
        (tiles((256, 128, 32), (128, 64), 2), Constraint::Registers),
        (
            MmaTiles {
                group_m: 3,
                ..tiles((64, 64, 32), (32, 32), 3)
            },
            Constraint::Range,
        ),
        // 1024 rows are 8 block rows of 128: a group of 8 is all of them.
        (
            MmaTiles {
                group_m: 8,
                ..tiles((128, 128, 32), (64, 64), 3)
            },
            Constraint::Tiling,
        ),
        (
            MmaTiles {
                min_blocks: 2,
                ..tiles((64, 64, 32), (32, 32), 3)
            },
            Constraint::Range,
        ),
    ];
    for (t, constraint) in cases {
        let (c, reason) = rejection(&k, t, sm80);
        assert_eq!(c, constraint, "{t:?}: {reason}");
        assert!(!reason.is_empty());
    }
    // 4 stages of 128×128×64 tiles: over sm_86's 99 KiB, within sm_80's.
    let deep = tiles((128, 128, 64), (64, 64), 4);
    MmaLayout::new(&k, &detect(&k).expect("a contraction"), deep, sm80).expect("valid");
    assert_eq!(
        rejection(&k, deep, SmVersion::Sm86).0,
        Constraint::SharedMemory
    );
}

#[test]
fn operands_and_alignment_decide_where_tensor_cores_apply() {
    let good = tiles((64, 64, 32), (32, 32), 2);
    let cases = [
        (gemm(64, 64, 64, "f32", false), Constraint::Operands),
        // `x[m][k]` rows 36 elements apart are not 16-byte aligned.
        (gemm(64, 64, 36, "bf16", false), Constraint::Alignment),
        (gemm(64, 36, 64, "f16", false), Constraint::Alignment),
    ];
    for (k, constraint) in cases {
        assert_eq!(rejection(&k, good, SmVersion::Sm80).0, constraint);
    }
    let mixed = parse_kernel(
        quote!(shape(M = 64, N = 64, K = 64)),
        quote! {
            fn mixed(x: Tensor<f16, (M, K)>, w: Tensor<bf16, (K, N)>) -> Tensor<f32, (M, N)> {
                compute(|m, n| sum(K, |k| (x[m][k] as f32) * (w[k][n] as f32)))
            }
        },
    )
    .expect("valid kernel");
    let scaled = parse_kernel(
        quote!(shape(M = 64, N = 64, K = 64)),
        quote! {
            fn scaled(x: Tensor<f16, (M, K)>, w: Tensor<f16, (K, N)>) -> Tensor<f32, (M, N)> {
                compute(|m, n| sum(K, |k| (x[m][k] as f32) * (2.0 * w[k][n])))
            }
        },
    )
    .expect("valid kernel");
    let cast = parse_kernel(
        quote!(shape(M = 64, N = 64, K = 64)),
        quote! {
            fn cast(x: Tensor<f16, (M, K)>, w: Tensor<f16, (K, N)>) -> Tensor<f32, (M, N)> {
                compute(|m, n| sum(K, |k| (x[m][k] as f32) * (w[k][n] as f32)))
            }
        },
    )
    .expect("valid kernel");
    for k in [&mixed, &scaled] {
        let (c, reason) = rejection(k, good, SmVersion::Sm80);
        assert_eq!(c, Constraint::Operands, "{reason}");
        assert!(Space::of(k, SmVersion::Sm80).family(Class::Mma).is_none());
    }
    validate(&cast, &good.to_schedule(), SmVersion::Sm80).expect("casts to f32 are exact");
}

#[test]
fn spaces_offer_tensor_cores_and_reject_misaligned_ones_by_name() {
    let k = gemm(65, 33, 40, "bf16", true);
    let space = Space::of(&k, SmVersion::Sm80);
    let family = space.family(Class::Mma).expect("a tensor-core family");
    let names: Vec<&str> = family.knobs.iter().map(|k| k.name).collect();
    assert_eq!(names, Class::Mma.knobs());
    assert_eq!(family.knobs[0].values, [16, 32, 64, 128]);
    assert_eq!(family.knobs[2].values, [16, 32, 64]);
    assert_eq!(family.knobs[5].values, [1, 2, 3, 4]);
    let survey = space.survey(&k, SmVersion::Sm80);
    assert!(survey.valid.iter().any(|p| p.kind() == Class::Mma));

    let odd = gemm(64, 64, 20, "f16", false);
    let space = Space::of(&odd, SmVersion::Sm80);
    let family = space.family(Class::Mma).expect("a tensor-core family");
    for i in 0..family.size() {
        let point = family.point(i);
        let (why, _) = space
            .reject(&odd, &point, SmVersion::Sm80)
            .expect("no tensor-core point is valid");
        assert!(
            matches!(
                why,
                Rejection::Constraint(
                    Constraint::Alignment
                        | Constraint::Range
                        | Constraint::Tiling
                        | Constraint::Threads
                        | Constraint::Registers
                )
            ),
            "{point:?}: {why:?}"
        );
    }
}

/// The `.trans` flags of a lowered kernel's `ldmatrix.x4`s, in order, runs
/// of one flag merged.
fn ldmatrix_forms(k: &Kernel, t: MmaTiles) -> Vec<bool> {
    let lowered = lower(k, &t.to_schedule(), SmVersion::Sm80).expect("lowers");
    let mut forms: Vec<bool> = lowered
        .ptx
        .body
        .iter()
        .filter_map(|i| match &i.op {
            Op::Ldmatrix { trans, dsts, .. } => {
                assert_eq!(dsts.len(), 4);
                Some(*trans)
            }
            _ => None,
        })
        .collect();
    forms.dedup();
    forms
}

#[test]
fn the_contiguous_dimension_decides_the_ldmatrix_form() {
    let t = tiles((64, 64, 32), (32, 32), 2);
    // A (k-contiguous) without .trans, then B as [K][N] with it.
    assert_eq!(
        ldmatrix_forms(&gemm(64, 64, 64, "bf16", false), t),
        [false, true, false, true]
    );
    // B as [N][K]: no .trans anywhere.
    assert_eq!(ldmatrix_forms(&gemm(64, 64, 64, "bf16", true), t), [false]);
}

#[test]
fn emits_one_mma_per_fragment_pair_and_a_pipelined_loop() {
    let k = gemm(4096, 11008, 4096, "bf16", false);
    let t = tiles((128, 128, 32), (64, 64), 3);
    let lowered = lower(&k, &t.to_schedule(), SmVersion::Sm80).expect("lowers");
    let count = |f: &dyn Fn(&Op) -> bool| lowered.ptx.body.iter().filter(|i| f(&i.op)).count();
    // (64/16)·(64/8) tiles, two k-steps of 16.
    assert_eq!(
        count(&|op| matches!(
            op,
            Op::Mma {
                kind: MmaKind::Bf16,
                ..
            }
        )),
        4 * 8 * 2
    );
    // A 128×32 and a 32×128 tile are 512 chunks each: 4 per thread of 128,
    // in the prologue's two tiles and the loop's one.
    assert_eq!(count(&|op| matches!(op, Op::CpAsync { .. })), 3 * 8);
    assert_eq!(count(&|op| matches!(op, Op::BarSync)), 1);
    assert_eq!(count(&|op| matches!(op, Op::CpAsyncWait { pending: 1 })), 1);
    assert_eq!(lowered.launch.block, [128, 1, 1]);
    assert_eq!(lowered.launch.grid, [32 * 86, 1, 1]);
    // Three slots of (128·(32+8) + 32·(128+8)) bf16: above 48 KiB, so the
    // launch needs the opt-in maximum.
    assert_eq!(
        lowered.launch.dynamic_shared_bytes,
        3 * 2 * (128 * 40 + 32 * 136)
    );
    let text = crate::ptx::print(&lowered.ptx, SmVersion::Sm80);
    assert!(text.contains("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"));
    assert!(text.contains("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"));
    assert!(text.contains("cp.async.cg.shared.global"));
}

#[test]
fn validation_fails_exactly_where_lowering_does() {
    let kernels = [
        gemm(33, 40, 24, "bf16", false),
        gemm(7, 7, 40, "f16", true),
        gemm(64, 64, 20, "bf16", false),
    ];
    for k in &kernels {
        for target in [SmVersion::Sm80, SmVersion::Sm86] {
            let space = Space::of(k, target);
            let family = space.family(Class::Mma).expect("a tensor-core family");
            for i in (0..family.size()).step_by(7) {
                let point = family.point(i);
                let checked = validate(k, &point, target);
                let lowered = lower(k, &point, target);
                assert_eq!(checked.is_ok(), lowered.is_ok(), "{point:?}");
                if let (Err(c), Err(l)) = (checked, lowered) {
                    assert_eq!(c, l);
                }
            }
        }
    }
}

/// [`gemm`] of f32 tensors with `allow_tf32`.
fn tf32_gemm(m: u32, n: u32, k: u32, transposed: bool) -> Kernel {
    Kernel {
        allow_tf32: true,
        ..gemm(m, n, k, "f32", transposed)
    }
}

#[test]
fn f32_contractions_use_tensor_cores_only_with_allow_tf32() {
    let good = tiles((64, 64, 32), (32, 32), 2);
    let exact = gemm(64, 64, 64, "f32", false);
    let (c, reason) = rejection(&exact, good, SmVersion::Sm80);
    assert_eq!(c, Constraint::Operands);
    assert!(reason.contains("allow_tf32"), "{reason}");
    assert!(
        Space::of(&exact, SmVersion::Sm80)
            .family(Class::Mma)
            .is_none()
    );
    assert_ne!(
        crate::lower::heuristic(&exact, SmVersion::Sm80).kind(),
        Class::Mma
    );

    let tf32 = tf32_gemm(64, 64, 64, false);
    validate(&tf32, &good.to_schedule(), SmVersion::Sm80).expect("valid");
    assert!(
        Space::of(&tf32, SmVersion::Sm80)
            .family(Class::Mma)
            .is_some()
    );
    // The flag changes nothing for 16-bit operands.
    let bf16 = Kernel {
        allow_tf32: true,
        ..gemm(64, 64, 64, "bf16", false)
    };
    let plan = detect(&bf16).expect("a contraction");
    let layout = MmaLayout::new(&bf16, &plan, good, SmVersion::Sm80).expect("valid");
    assert_eq!(layout.kind, MmaKind::Bf16);
}

#[test]
fn tf32_fragments_are_read_word_by_word_and_rounded() {
    let k = tf32_gemm(4096, 4096, 4096, false);
    let t = tiles((128, 128, 32), (64, 64), 3);
    let lowered = lower(&k, &t.to_schedule(), SmVersion::Sm80).expect("lowers");
    let count = |f: &dyn Fn(&Op) -> bool| lowered.ptx.body.iter().filter(|i| f(&i.op)).count();
    // (64/16)·(64/8) tiles, four k-steps of 8.
    let mmas = count(&|op| {
        matches!(
            op,
            Op::Mma {
                kind: MmaKind::Tf32,
                ..
            }
        )
    });
    assert_eq!(mmas, 4 * 8 * 4);
    // Per k-step, 4 words per A fragment and 2 per B fragment, each
    // converted once.
    let words = 4 * (4 * 4 + 8 * 2);
    let cvts = count(&|op| {
        matches!(
            op,
            Op::Cvt {
                to: crate::ptx::inst::Ty::Tf32,
                ..
            }
        )
    });
    assert_eq!(cvts, words);
    let shared_loads = count(&|op| {
        matches!(
            op,
            Op::Ld {
                space: crate::ptx::inst::Space::Shared,
                ..
            }
        )
    });
    assert_eq!(shared_loads, words);
    assert_eq!(count(&|op| matches!(op, Op::Ldmatrix { .. })), 0);
    // A 128×32 and a 32×128 f32 tile are 1024 chunks of 4 each: 8 per
    // thread of 128, in the prologue's two tiles and the loop's one.
    assert_eq!(count(&|op| matches!(op, Op::CpAsync { .. })), 3 * 16);
    // Three slots of 128·(32+4) + 32·(128+8) f32.
    assert_eq!(
        lowered.launch.dynamic_shared_bytes,
        3 * 4 * (128 * 36 + 32 * 136)
    );
    let text = crate::ptx::print(&lowered.ptx, SmVersion::Sm80);
    assert!(text.contains("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"));
    assert!(text.contains("cvt.rna.tf32.f32"));
}

#[test]
fn tf32_copies_need_rows_of_four_elements() {
    let good = tiles((64, 64, 32), (32, 32), 2);
    // 36 is a multiple of 4 (16 bytes of f32), not of 8.
    validate(
        &tf32_gemm(64, 36, 36, false),
        &good.to_schedule(),
        SmVersion::Sm80,
    )
    .expect("aligned");
    for k in [tf32_gemm(64, 64, 34, false), tf32_gemm(64, 34, 64, false)] {
        let (c, reason) = rejection(&k, good, SmVersion::Sm80);
        assert_eq!(c, Constraint::Alignment, "{reason}");
        assert!(reason.contains("4-element"), "{reason}");
    }
    // `w[n][k]` leaves N free.
    validate(
        &tf32_gemm(7, 7, 36, true),
        &good.to_schedule(),
        SmVersion::Sm80,
    )
    .expect("aligned");
}

/// The 32-bit shared-memory reads of a tf32 fragment hit 32 distinct banks:
/// lane `l` reads `x` `g + dx`, `k` `t + dk` for the warp's offsets
/// `(dx, dk)` (fragment register, fragment, k-step and warp origin).
#[test]
fn tf32_fragment_reads_are_free_of_bank_conflicts() {
    for transposed in [false, true] {
        for block in [16, 32, 64, 128, 256] {
            for block_k in [16, 32, 64] {
                let warp = block.min(128);
                let k = tf32_gemm(256, 256, 256, transposed);
                let t = tiles((block, block, block_k), (warp, warp), 1);
                let plan = detect(&k).expect("a contraction");
                let layout = match MmaLayout::new(&k, &plan, t, SmVersion::Sm80) {
                    Ok(layout) => layout,
                    Err(v) => {
                        assert!(
                            matches!(
                                v.constraint,
                                Constraint::SharedMemory | Constraint::Registers
                            ),
                            "{v:?}"
                        );
                        continue;
                    }
                };
                for s in [&layout.a, &layout.b] {
                    for dx in (0..s.block_x).step_by(8) {
                        for dk in (0..block_k).step_by(4) {
                            let mut banks: Vec<i64> = (0..32)
                                .map(|lane| {
                                    let at = emit::word_offset(s, lane / 4 + dx, lane % 4 + dk);
                                    (at / 4) % 32
                                })
                                .collect();
                            banks.sort_unstable();
                            banks.dedup();
                            assert_eq!(banks.len(), 32, "{s:?} at ({dx}, {dk})");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn the_default_takes_tf32_tensor_cores_where_the_model_says_they_are_faster() {
    let big = tf32_gemm(4096, 4096, 4096, false);
    for target in [SmVersion::Sm80, SmVersion::Sm86, SmVersion::Sm90] {
        let chosen = crate::lower::heuristic(&big, target);
        assert_eq!(chosen.kind(), Class::Mma, "{target}: {chosen:?}");
        // The same tiles take about twice as long as on bf16 operands:
        // half the tensor rate, twice the bytes.
        let bf16 = gemm(4096, 4096, 4096, "bf16", false);
        let seconds = |k: &Kernel| {
            crate::model::estimate(k, &chosen, target)
                .expect("valid")
                .seconds
        };
        let ratio = seconds(&big) / seconds(&bf16);
        assert!((1.3..=2.5).contains(&ratio), "{target}: {ratio}");
        let exact = gemm(4096, 4096, 4096, "f32", false);
        let simt = crate::lower::heuristic(&exact, target);
        assert_eq!(simt.kind(), Class::Matmul);
        assert!(
            seconds(&big)
                < crate::model::estimate(&exact, &simt, target)
                    .expect("valid")
                    .seconds
        );
    }
    // Odd K and N leave tf32 the SIMT path's.
    let odd = tf32_gemm(100, 99, 101, false);
    assert_eq!(
        crate::lower::heuristic(&odd, SmVersion::Sm80).kind(),
        Class::Matmul
    );
}

#[test]
fn split_k_slices_k_on_tensor_cores_too() {
    let sm90 = SmVersion::Sm90;
    // K = 4096 is 128 tiles of 32: 8 slices of 16.
    let k = gemm(16, 4096, 4096, "bf16", false);
    let split = |split_k| MmaTiles {
        split_k,
        ..tiles((16, 64, 32), (16, 32), 3)
    };
    let lowered = lower(&k, &split(8).to_schedule(), sm90).expect("lowers");
    assert_eq!(lowered.launch.grid, [64, 8, 1]);
    assert_eq!(
        lowered.launch.workspace_bytes,
        8 * 64 * 16 * 64 * 4 + 64 * 4
    );
    assert_eq!(lowered.ptx.param_count, 4);
    assert!(lowered.ptx.body.iter().any(|i| i.op == Op::Fence));
    // K = 40 is 2 tiles of 32: four slices leave two past K.
    let short = gemm(16, 64, 40, "bf16", false);
    let (constraint, reason) = rejection(&short, split(4), sm90);
    assert_eq!(constraint, Constraint::Split);
    assert!(reason.contains("past K = 40"), "{reason}");
    assert!(lower(&short, &split(2).to_schedule(), sm90).is_ok());
}

#[test]
fn min_blocks_reaches_ptxas_as_minnctapersm() {
    let k = gemm(256, 256, 256, "bf16", false);
    let target = SmVersion::Sm90;
    let text = |min_blocks| {
        let t = MmaTiles {
            min_blocks,
            ..tiles((128, 128, 32), (64, 64), 3)
        };
        let lowered = lower(&k, &t.to_schedule(), target).expect("valid");
        assert_eq!(lowered.ptx.min_blocks_per_sm, min_blocks);
        crate::ptx::print(&lowered.ptx, target)
    };
    let (free, hinted) = (text(0), text(1));
    assert!(!free.contains(".minnctapersm"), "{free}");
    assert!(
        hinted.contains(".maxntid 128, 1, 1\n.minnctapersm 1\n"),
        "{hinted}"
    );
    // The hint is the only difference.
    assert_eq!(hinted.replace(".minnctapersm 1\n", ""), free);
}

/// A producer block hands registers over as far as its launch share (the
/// SM's registers over its threads, in eights) allows: none with one
/// consumer warpgroup, whose share is already the most a thread takes.
#[test]
fn a_producer_block_shares_its_registers_as_far_as_its_launch_share_allows() {
    use super::layout::Realloc;

    let fed = |block: (u32, u32, u32), warp: (u32, u32)| MmaTiles {
        wgmma: 1,
        swizzle: 1,
        min_blocks: 1,
        producer: 1,
        ..tiles(block, warp, 4)
    };
    let target = SmVersion::Sm90;
    assert_eq!(Realloc::new(fed((64, 256, 64), (64, 256)), target), None);
    let two = Realloc::new(fed((128, 256, 64), (64, 256)), target);
    assert_eq!(
        two,
        Some(Realloc {
            launch: 168,
            producer: 24,
            consumers: 240
        })
    );
    let four = Realloc::new(fed((256, 128, 64), (64, 128)), target);
    assert_eq!(
        four,
        Some(Realloc {
            launch: 96,
            producer: 24,
            consumers: 112
        })
    );
    let unfed = MmaTiles {
        producer: 0,
        ..fed((128, 256, 64), (64, 256))
    };
    assert_eq!(Realloc::new(unfed, target), None);
}

/// With `tma = 1` the producer copies through two tensor maps, A's and
/// B's, whose boxes are the tiles (a `k`-major one whole, one contiguous
/// along `n` a 128-byte panel at a time) swizzled by their rows' span;
/// one thread issues the copies, one for A's tile and one per panel of
/// B's; the one proxy fence is thread 0's after the barriers' inits,
/// before the block's first barrier.
#[test]
fn a_tma_producer_copies_tiles_through_tensor_maps() {
    use crate::DType;
    use crate::ptx::{Swizzle, TensorMap};

    let k = gemm(1000, 512, 200, "bf16", false);
    let t = MmaTiles {
        wgmma: 1,
        swizzle: 1,
        min_blocks: 1,
        producer: 1,
        tma: 1,
        cluster_m: 1,
        ..tiles((128, 256, 64), (64, 256), 4)
    };
    let lowered = lower(&k, &t.to_schedule(), SmVersion::Sm90).expect("lowers");
    let a = TensorMap {
        param: 0,
        dtype: DType::Bf16,
        dims: vec![200, 1000],
        strides: vec![400],
        boxed: vec![64, 128],
        swizzle: Swizzle::B128,
    };
    let b = TensorMap {
        param: 1,
        dims: vec![512, 200],
        strides: vec![1024],
        boxed: vec![64, 64],
        ..a.clone()
    };
    assert_eq!(lowered.ptx.tensor_maps, [a, b]);
    let ops = &lowered.ptx.body;
    let copies = ops
        .iter()
        .filter(|i| matches!(i.op, Op::CpAsyncBulkTensor { .. }))
        .count();
    assert_eq!(copies, 1 + 256 / 64);
    assert!(ops.iter().any(|i| matches!(
        i.op,
        Op::MbarrierArriveExpectTx {
            bytes: crate::ptx::inst::Operand::Int(49152),
            ..
        }
    )));
    assert!(
        !ops.iter()
            .any(|i| matches!(i.op, Op::CpAsync { .. } | Op::CpAsyncMbarrierArrive { .. }))
    );
    let position = |want: fn(&Op) -> bool| ops.iter().position(|i| want(&i.op));
    let fences = ops
        .iter()
        .filter(|i| matches!(i.op, Op::FenceProxyAsync))
        .count();
    assert_eq!(fences, 1);
    let fence = position(|op| matches!(op, Op::FenceProxyAsync));
    let last_init = ops
        .iter()
        .rposition(|i| matches!(i.op, Op::MbarrierInit { .. }));
    assert!(last_init < fence && fence < position(|op| matches!(op, Op::BarSync)));
    let text = crate::ptx::print(&lowered.ptx, SmVersion::Sm90);
    let (parsed, _) = crate::ptx::parse(&text).expect("parses back");
    assert_eq!(parsed, lowered.ptx);

    let fed = |tma| MmaTiles { tma, ..t };
    let (constraint, reason) = rejection(
        &k,
        MmaTiles {
            producer: 0,
            ..fed(1)
        },
        SmVersion::Sm90,
    );
    assert_eq!(constraint, Constraint::Range);
    assert!(reason.contains("producer = 0 has none"), "{reason}");
    let (_, reason) = rejection(&k, fed(2), SmVersion::Sm90);
    assert!(reason.contains("tma = 2"), "{reason}");
}

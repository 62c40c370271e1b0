use super::*;
use crate::ir::Kernel;
use crate::lower::lower;
use crate::ptx::inst::Op;
use crate::syntax::{is_kernel_attr, parse_kernel_fn};

/// Parses a kernel written with its `#[tuned_kernel(...)]` attribute.
fn kernel(source: &str) -> Kernel {
    let func: syn::ItemFn = syn::parse_str(source).expect("test kernel is a fn item");
    let attr = func
        .attrs
        .iter()
        .find(|a| is_kernel_attr(a))
        .expect("attribute");
    parse_kernel_fn(attr, &func).unwrap_or_else(|e| panic!("test kernel rejected: {e}"))
}

/// `out[m][n] = Σ_k x·w` over `(M, K)` and `(K, N)`, or `(N, K)` when
/// `transposed`.
fn gemm(m: u32, n: u32, k: u32, dtype: &str, transposed: bool) -> Kernel {
    let (w_dims, w_index) = if transposed {
        ("(N, K)", "w[n][k]")
    } else {
        ("(K, N)", "w[k][n]")
    };
    kernel(&format!(
        "#[tuned_kernel(shape(M = {m}, N = {n}, K = {k}))]
         fn gemm(x: Tensor<{dtype}, (M, K)>, w: Tensor<{dtype}, {w_dims}>) -> Tensor<{dtype}, (M, N)> {{
             compute(|m, n| sum(K, |k| x[m][k] * {w_index}))
         }}"
    ))
}

fn plan(k: &Kernel) -> MatmulPlan {
    detect(k).unwrap_or_else(|| panic!("`{}` is not detected as a contraction", k.name))
}

fn name(k: &Kernel, v: VarId) -> &str {
    &k.var(v).name
}

fn tensor<'k>(k: &'k Kernel, o: &MatmulOperand) -> &'k str {
    &k.input(o.tensor).name
}

#[test]
fn detects_a_plain_product() {
    let k = gemm(64, 48, 32, "f32", false);
    let p = plan(&k);
    assert_eq!(
        (name(&k, p.m), name(&k, p.n), name(&k, p.k)),
        ("m", "n", "k")
    );
    assert_eq!((tensor(&k, &p.a), tensor(&k, &p.b)), ("x", "w"));
    assert_eq!((p.a.stride_x, p.a.stride_k), (32, 1));
    assert_eq!((p.b.stride_x, p.b.stride_k), (1, 48));
    assert!(p.batch.is_empty() && !p.mean);
    assert_eq!(p.a.value, p.a.load);
}

#[test]
fn detects_a_transposed_weight() {
    let k = gemm(64, 48, 32, "bf16", true);
    let p = plan(&k);
    assert_eq!((p.b.stride_x, p.b.stride_k), (32, 1));
}

#[test]
fn detects_a_transposed_left_operand_in_either_order() {
    let k = kernel(
        "#[tuned_kernel(shape(M = 8, N = 16, K = 4))]
         fn atb(x: Tensor<f32, (K, M)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
             compute(|m, n| sum(K, |k| w[k][n] * x[k][m]))
         }",
    );
    let p = plan(&k);
    assert_eq!((tensor(&k, &p.a), tensor(&k, &p.b)), ("x", "w"));
    assert_eq!((p.a.stride_x, p.a.stride_k), (1, 8));
}

#[test]
fn walks_the_output_contiguous_variable_as_n() {
    let k = kernel(
        "#[tuned_kernel(shape(M = 8, N = 16, K = 4))]
         fn ct(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (N, M)> {
             compute(|n, m| sum(K, |k| x[m][k] * w[k][n]))
         }",
    );
    let p = plan(&k);
    assert_eq!((name(&k, p.m), name(&k, p.n)), ("n", "m"));
    assert_eq!((tensor(&k, &p.a), tensor(&k, &p.b)), ("w", "x"));
    assert_eq!((p.b.stride_x, p.b.stride_k), (4, 1));
}

#[test]
fn detects_batched_and_broadcast_products() {
    let batched = kernel(
        "#[tuned_kernel(shape(B = 3, M = 5, N = 7, K = 9))]
         fn bmm(x: Tensor<f32, (B, M, K)>, y: Tensor<f32, (B, K, N)>) -> Tensor<f32, (B, M, N)> {
             compute(|b, m, n| sum(K, |k| x[b][m][k] * y[b][k][n]))
         }",
    );
    let p = plan(&batched);
    assert_eq!(p.batch.len(), 1);
    assert_eq!(name(&batched, p.batch[0]), "b");
    assert_eq!((p.a.stride_batch[0], p.b.stride_batch[0]), (45, 63));
    assert_eq!(p.batch_count(&batched), 3);

    let broadcast = kernel(
        "#[tuned_kernel(shape(B = 3, S = 5, N = 7, K = 9))]
         fn proj(x: Tensor<f32, (B, S, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (B, S, N)> {
             compute(|b, s, n| sum(K, |k| x[b][s][k] * w[k][n]))
         }",
    );
    let p = plan(&broadcast);
    assert_eq!(name(&broadcast, p.m), "s");
    assert_eq!(name(&broadcast, p.batch[0]), "b");
    assert_eq!((p.a.stride_batch[0], p.b.stride_batch[0]), (45, 0));
}

#[test]
fn detects_epilogues_and_prologues() {
    let bias_gelu = kernel(
        "#[tuned_kernel(shape(M = 16, N = 32, K = 8))]
         fn ffn(x: Tensor<bf16, (M, K)>, w: Tensor<bf16, (K, N)>, b: Tensor<f32, (N,)>)
             -> Tensor<bf16, (M, N)>
         {
             compute(|m, n| gelu(sum(K, |k| x[m][k] * w[k][n]) + b[n]))
         }",
    );
    plan(&bias_gelu);

    let residual = kernel(
        "#[tuned_kernel(shape(M = 16, N = 32, K = 8))]
         fn proj(x: Tensor<f32, (M, K)>, w: Tensor<f32, (N, K)>, b: Tensor<f32, (N,)>,
                 r: Tensor<f32, (M, N)>) -> Tensor<f32, (M, N)>
         {
             compute(|m, n| {
                 let y = sum(K, |k| x[m][k] * w[n][k]) + b[n];
                 y + r[m][n]
             })
         }",
    );
    plan(&residual);

    let prologue = kernel(
        "#[tuned_kernel(shape(M = 16, N = 32, K = 8))]
         fn scaled(x: Tensor<f16, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
             compute(|m, n| mean(K, |k| (x[m][k] as f32) * (2.0 * w[k][n])))
         }",
    );
    let p = plan(&prologue);
    assert!(p.mean);
    assert_ne!(p.a.value, p.a.load);
    assert_ne!(p.b.value, p.b.load);
}

#[test]
fn rejects_other_kernels() {
    let rejected = [
        "#[tuned_kernel(shape(R = 8, C = 100))]
         fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
             compute(|r, c| {
                 let mx = max(C, |j| x[r][j]);
                 let s = sum(C, |j| exp(x[r][j] - mx));
                 exp(x[r][c] - mx) / s
             })
         }",
        "#[tuned_kernel(shape(R = 8, C = 100))]
         fn add(x: Tensor<f32, (R, C)>, y: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
             compute(|r, c| x[r][c] * y[r][c])
         }",
        "#[tuned_kernel(shape(M = 4, K = 6))]
         fn gemv(a: Tensor<f32, (M, K)>, x: Tensor<f32, (K,)>) -> Tensor<f32, (M,)> {
             compute(|m| sum(K, |k| a[m][k] * x[k]))
         }",
        "#[tuned_kernel(shape(M = 4, N = 5, K = 6))]
         fn dist(a: Tensor<f32, (M, K)>, b: Tensor<f32, (N, K)>) -> Tensor<f32, (M, N)> {
             compute(|i, j| sum(K, |k| (a[i][k] - b[j][k]) * (a[i][k] - b[j][k])))
         }",
        "#[tuned_kernel(shape(M = 4, N = 5, K = 6))]
         fn maxplus(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
             compute(|m, n| max(K, |k| a[m][k] * b[k][n]))
         }",
        "#[tuned_kernel(shape(M = 4, N = 5, K = 6))]
         fn two(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
             compute(|m, n| sum(K, |k| a[m][k] * b[k][n]) / sum(K, |k| a[m][k]))
         }",
        "#[tuned_kernel(shape(M = 4, N = 5, K = 6))]
         fn indexed(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
             compute(|m, n| sum(K, |k| (a[m][k] * k) * b[k][n]))
         }",
    ];
    for source in rejected {
        let k = kernel(source);
        assert_eq!(
            detect(&k),
            None,
            "`{}` was detected as a contraction",
            k.name
        );
    }
}

fn tiles(
    block_m: u32,
    block_n: u32,
    block_k: u32,
    thread_m: u32,
    thread_n: u32,
    vector: u32,
) -> Tiles {
    Tiles {
        block_m,
        block_n,
        block_k,
        thread_m,
        thread_n,
        vector_a: vector,
        vector_b: vector,
        group_m: 1,
        stages: 1,
        split_k: 1,
    }
}

fn check(k: &Kernel, t: Tiles, target: SmVersion) -> Result<Layout, String> {
    Layout::new(k, &plan(k), t, target).map_err(|v| v.reason)
}

#[test]
fn validation_rejects_with_reasons() {
    let k = gemm(1000, 1000, 999, "f32", false);
    let sm80 = SmVersion::Sm80;
    let reason = |t: Tiles, target| check(&k, t, target).expect_err("invalid schedule accepted");
    assert!(reason(tiles(96, 128, 8, 8, 8, 1), sm80).contains("power of two"));
    assert!(reason(tiles(128, 128, 8, 2, 2, 1), sm80).contains("threads per block"));
    assert!(reason(tiles(8, 16, 8, 16, 1, 1), sm80).contains("do not fit"));
    assert!(reason(tiles(128, 128, 8, 8, 8, 4), sm80).contains("not a multiple of 4"));
    assert!(reason(tiles(128, 128, 8, 8, 8, 3), sm80).contains("expected 1, 2, 4"));
    assert!(reason(tiles(256, 256, 64, 16, 16, 1), sm80).contains("registers"));
    // 132 KiB of tiles: over sm_86's 99 KiB, within sm_80's 163 KiB.
    assert!(reason(tiles(256, 256, 64, 16, 16, 1), SmVersion::Sm86).contains("shared memory"));
    assert!(reason(tiles(512, 64, 8, 8, 8, 1), sm80).contains("up to 256"));
    check(&k, tiles(64, 64, 16, 4, 4, 1), sm80).expect("valid");
    let group = |group_m| Tiles {
        group_m,
        ..tiles(64, 64, 16, 4, 4, 1)
    };
    // 1000 rows are 16 block rows of 64.
    assert!(reason(group(0), sm80).contains("power of two up to 16"));
    assert!(reason(group(32), sm80).contains("power of two up to 16"));
    assert!(reason(group(16), sm80).contains("not fewer than the grid's 16"));
    check(&k, group(8), sm80).expect("two groups of 8 block rows");

    let aligned = gemm(1024, 1024, 1024, "bf16", false);
    check(&aligned, tiles(128, 128, 8, 8, 8, 8), sm80).expect("16-byte bf16 loads");
    let f32 = gemm(1024, 1024, 1024, "f32", false);
    assert!(check(&f32, tiles(128, 128, 8, 8, 8, 8), sm80).is_err());
}

#[test]
fn split_k_cuts_k_into_slices_with_a_workspace() {
    let sm90 = SmVersion::Sm90;
    // K = 97 is 13 tiles of 8: 4 slices of 4 tiles, the last past K.
    let k = gemm(5, 70, 97, "f32", false);
    let split = |split_k| Tiles {
        split_k,
        ..tiles(16, 64, 8, 1, 4, 1)
    };
    let layout = check(&k, split(4), sm90).expect("valid");
    let s = layout.split.expect("a split");
    assert_eq!((s.slices, s.tiles, layout.k_tiles()), (4, 4, 4));
    assert!(layout.k_overhangs());
    // Two output tiles of 16 × 64, four slices, then two counters.
    assert_eq!(s.slice_bytes, 2 * 16 * 64 * 4);
    assert_eq!(s.workspace_bytes, 4 * 2 * 16 * 64 * 4 + 2 * 4);
    // 13 tiles in slices of 1 leave three slices past K.
    let err = Layout::new(&k, &plan(&k), split(16), sm90).expect_err("empty slices");
    assert_eq!(err.constraint, crate::lower::Constraint::Split);
    assert!(err.reason.contains("past K = 97"), "{}", err.reason);
    let err = Layout::new(&k, &plan(&k), split(17), sm90).expect_err("too many");
    assert_eq!(err.constraint, crate::lower::Constraint::Range);
    assert_eq!(check(&k, split(1), sm90).expect("valid").split, None);

    let lowered = lower(&k, &split(4).to_schedule(), sm90).expect("lowers");
    assert_eq!(lowered.launch.grid, [2, 4, 1]);
    assert_eq!(lowered.launch.workspace_bytes, s.workspace_bytes);
    assert_eq!(lowered.ptx.param_count, 4);
    let text = crate::ptx::print(&lowered.ptx, sm90);
    for needle in [
        "atom.global.add.u32",
        "fence.acq_rel.gpu",
        "ld.global.cg.f32",
        "%ctaid.y;",
    ] {
        assert!(text.contains(needle), "no `{needle}` in\n{text}");
    }
    let plain = lower(&k, &split(1).to_schedule(), sm90).expect("lowers");
    assert_eq!(plain.launch.grid, [2, 1, 1]);
    assert_eq!(plain.launch.workspace_bytes, 0);
    assert_eq!(plain.ptx.param_count, 3);
}

#[test]
fn stages_copy_plain_f32_tiles_into_a_ring() {
    let k = gemm(1024, 1024, 1024, "f32", false);
    let sm80 = SmVersion::Sm80;
    let staged = |base: Tiles, stages| Tiles { stages, ..base };
    let base = tiles(64, 64, 16, 4, 4, 4);
    let one = check(&k, base, sm80).expect("valid");
    let three = check(&k, staged(base, 3), sm80).expect("valid");
    assert_eq!(three.slot_bytes, one.shared_bytes);
    assert_eq!(three.shared_bytes, 3 * one.shared_bytes);
    for stages in [0, 5] {
        let reason = check(&k, staged(base, stages), sm80).expect_err("out of range");
        assert!(reason.contains("expected 1 to 4"), "{reason}");
    }
    // 64 KiB of tiles: three stages are over sm_80's 163 KiB.
    let large = tiles(128, 128, 64, 8, 8, 4);
    check(&k, staged(large, 2), sm80).expect("two stages fit");
    let reason = check(&k, staged(large, 3), sm80).expect_err("three do not");
    assert!(reason.contains("3 stages of the A and B tiles"), "{reason}");
    // Copies widen nothing: a bf16 operand keeps one stage.
    let bf16 = gemm(1024, 1024, 1024, "bf16", false);
    check(&bf16, tiles(64, 64, 16, 4, 4, 8), sm80).expect("one stage");
    let reason = check(&bf16, staged(tiles(64, 64, 16, 4, 4, 8), 2), sm80)
        .expect_err("cp.async cannot widen");
    assert!(
        reason.contains("cp.async") && reason.contains("bf16"),
        "{reason}"
    );
}

fn targets() -> [SmVersion; 4] {
    SmVersion::ALL
}

/// Shapes the heuristic must handle: `(batch, m, n, k)`.
const SHAPES: [(u32, u32, u32, u32); 14] = [
    (1, 1, 1, 1),
    (1, 1, 4096, 4096),
    (1, 16, 4096, 4096),
    (1, 4096, 16, 4096),
    (1, 1000, 1000, 999),
    (1, 4096, 4096, 4096),
    (1, 777, 3000, 513),
    (1, 1, 7, 1025),
    (1, 13, 17, 19),
    (1, 33, 65, 31),
    (3, 5, 7, 9),
    (8, 512, 512, 64),
    (64, 1, 128, 128),
    (1, 40, 11008, 4096),
];

fn batched(b: u32, m: u32, n: u32, k: u32, dtype: &str, transposed: bool) -> Kernel {
    if b == 1 {
        return gemm(m, n, k, dtype, transposed);
    }
    let (w_dims, w_index) = if transposed {
        ("(B, N, K)", "w[b][n][k]")
    } else {
        ("(B, K, N)", "w[b][k][n]")
    };
    kernel(&format!(
        "#[tuned_kernel(shape(B = {b}, M = {m}, N = {n}, K = {k}))]
         fn bmm(x: Tensor<{dtype}, (B, M, K)>, w: Tensor<{dtype}, {w_dims}>) -> Tensor<{dtype}, (B, M, N)> {{
             compute(|b, m, n| sum(K, |k| x[b][m][k] * {w_index}))
         }}"
    ))
}

#[test]
fn heuristic_always_lowers() {
    for (b, m, n, k) in SHAPES {
        for dtype in ["f32", "bf16", "f16"] {
            for transposed in [false, true] {
                let kernel = batched(b, m, n, k, dtype, transposed);
                let p = plan(&kernel);
                for target in targets() {
                    let schedule = heuristic(&kernel, &p, target);
                    let lowered = lower(&kernel, &schedule, target)
                        .unwrap_or_else(|e| panic!("{b}×{m}×{n}×{k} {dtype} on {target}: {e}"));
                    let blocks = u64::from(lowered.launch.grid[0]);
                    let (block_m, block_n) = match Tiles::from_schedule(&schedule) {
                        Some(t) => (t.block_m, t.block_n),
                        None => {
                            let t = mma::MmaTiles::from_schedule(&schedule)
                                .expect("a contraction schedule");
                            (t.block_m, t.block_n)
                        }
                    };
                    // 16-bit operands aligned for 16-byte copies get tensor cores.
                    let tensor = dtype != "f32"
                        && k.is_multiple_of(8)
                        && (transposed || n.is_multiple_of(8));
                    assert_eq!(
                        schedule.kind() == crate::schedule::Class::Mma,
                        tensor,
                        "{b}×{m}×{n}×{k} {dtype}"
                    );
                    assert_eq!(
                        blocks,
                        u64::from(b)
                            * u64::from(m.div_ceil(block_m))
                            * u64::from(n.div_ceil(block_n))
                    );
                }
            }
        }
    }
}

#[test]
fn heuristic_picks_sensible_tiles() {
    let pick = |b, m, n, k, dtype| {
        let kernel = batched(b, m, n, k, dtype, false);
        Tiles::from_schedule(&heuristic(&kernel, &plan(&kernel), SmVersion::Sm90))
            .expect("a matmul schedule")
    };
    assert_eq!(
        pick(1, 4096, 4096, 4096, "f32"),
        tiles(128, 128, 8, 8, 8, 4)
    );
    // The rules' 64×64 tiles in 4 slices, polished by the model: on the
    // H200 (2026-12-04) 0.071 ms against the rules' 0.083.
    let t = pick(1, 1000, 1000, 999, "f32");
    assert_eq!(
        (t.block_m, t.block_n, t.block_k, t.thread_m, t.thread_n),
        (64, 256, 64, 4, 4)
    );
    assert_eq!((t.vector_a, t.vector_b, t.stages, t.split_k), (1, 4, 2, 2));
    let t = pick(1, 1, 4096, 4095, "bf16");
    assert_eq!((t.block_m, t.block_n, t.thread_m), (1, 32, 1));
    assert_eq!(t.vector_b, 8);
}

#[test]
fn heuristic_groups_block_rows_only_where_the_model_says_it_pays() {
    let group = |m, n, k, target| {
        let kernel = gemm(m, n, k, "bf16", false);
        knob(&heuristic(&kernel, &plan(&kernel), target), "group_m")
    };
    // All of B (128 MiB, beyond L2) read again by every row of blocks.
    assert_eq!(group(2048, 65536, 1024, SmVersion::Sm80), Some(8));
    // Bound by the tensor cores, or small enough for L2.
    assert_eq!(group(4096, 4096, 4096, SmVersion::Sm80), Some(1));
    assert_eq!(group(1000, 1000, 999, SmVersion::Sm80), Some(1));
}

/// A knob's value in a point.
fn knob(schedule: &Schedule, name: &str) -> Option<u32> {
    let at = schedule.kind().knobs().iter().position(|k| *k == name)?;
    Some(schedule.knob_values()[at])
}

#[test]
fn heuristic_splits_k_only_for_grids_that_leave_sms_idle() {
    let split = |m, n, k| {
        let kernel = gemm(m, n, k, "f32", false);
        knob(
            &heuristic(&kernel, &plan(&kernel), SmVersion::Sm90),
            "split_k",
        )
    };
    // A decode shape: 64 blocks of 8 × 128 for 132 SMs, each 8192 deep.
    let decode = split(8, 8192, 8192).expect("a SIMT point");
    assert!(decode > 1, "split_k = {decode}");
    assert!(split(32, 8192, 8192).expect("a SIMT point") > 1);
    assert_eq!(split(4096, 4096, 4096), Some(1));
    // Little K to share out.
    assert_eq!(split(8, 8192, 64), Some(1));
}

#[test]
fn decode_shapes_choose_tile_and_split_together() {
    // 1 × 4096 × 4096 bf16 on sm_90: the narrowest tile (16 × 16) is the
    // first whose grid fills the GPU, but a wider one in more slices fills
    // it as well and reads B in longer rows; the model prefers that.
    let kernel = gemm(1, 4096, 4096, "bf16", false);
    let schedule = heuristic(&kernel, &plan(&kernel), SmVersion::Sm90);
    let tiles = mma::MmaTiles::from_schedule(&schedule).expect("tensor cores");
    assert_eq!(tiles.block_m, 16);
    assert!(tiles.block_n > 16 && tiles.split_k > 1, "{tiles:?}");
    let narrowest = with(&schedule, &[("block_n", 16), ("warp_n", 16)]);
    let seconds = |s: &Schedule| {
        crate::model::estimate(&kernel, s, SmVersion::Sm90)
            .unwrap()
            .seconds
    };
    assert!(seconds(&schedule) < seconds(&narrowest));
    // A product that fills the GPU keeps the rules' tile on `mma.sync`,
    // and on Hopper's warpgroups takes the model's favourite, measured
    // fastest on the H200.
    let big = gemm(4096, 4096, 4096, "bf16", false);
    let tiles = mma::MmaTiles::from_schedule(&portable(&big, &plan(&big), SmVersion::Sm90));
    assert_eq!(
        tiles.map(|t| (t.block_m, t.block_n, t.split_k, t.wgmma)),
        Some((128, 128, 1, 0))
    );
    let tiles = mma::MmaTiles::from_schedule(&heuristic(&big, &plan(&big), SmVersion::Sm90));
    assert_eq!(
        tiles.map(|t| (t.block_m, t.block_n, t.block_k, t.split_k, t.wgmma)),
        Some((128, 256, 64, 1, 1))
    );
}

/// `schedule` with some knobs set.
fn with(schedule: &Schedule, knobs: &[(&str, u32)]) -> Schedule {
    let mut values = schedule.knob_values();
    for (name, value) in knobs {
        let at = schedule
            .kind()
            .knobs()
            .iter()
            .position(|k| k == name)
            .expect("a knob");
        values[at] = *value;
    }
    schedule.kind().schedule(&values).expect("the same knobs")
}

#[test]
fn heuristic_picks_tensor_cores_for_aligned_16_bit_operands() {
    let pick = |m, n, k, dtype, transposed| {
        let kernel = gemm(m, n, k, dtype, transposed);
        mma::MmaTiles::from_schedule(&heuristic(&kernel, &plan(&kernel), SmVersion::Sm80))
    };
    let big = mma::MmaTiles {
        block_m: 128,
        block_n: 128,
        block_k: 32,
        warp_m: 64,
        warp_n: 64,
        stages: 3,
        group_m: 1,
        split_k: 1,
        min_blocks: 0,
        swizzle: 1,
        prefetch: 1,
        wgmma: 0,
        tail_split: 1,
        persistent: 0,
        producer: 0,
        tma: 0,
        cluster_m: 1,
    };
    assert_eq!(pick(4096, 4096, 4096, "bf16", false), Some(big));
    assert_eq!(pick(4096, 11008, 4096, "f16", true), Some(big));
    // Too few 128×128 tiles for the A100's 108 SMs; the rules' 64×32 tiles
    // would all fit on it at once, under a wave: the model takes a wider
    // tile and splits K instead.
    let mid = pick(512, 512, 4096, "bf16", false).expect("tensor cores");
    assert_eq!((mid.block_m, mid.block_n), (64, 128));
    assert!(mid.split_k > 1, "{mid:?}");
    // A decode shape keeps its 16-row side whole; two k tiles, two stages.
    let decode = pick(1, 4096, 64, "bf16", false).expect("tensor cores");
    assert_eq!(
        (
            decode.block_m,
            decode.warp_m,
            decode.stages,
            decode.prefetch
        ),
        (16, 16, 2, 1)
    );
    // One k tile, one stage: nothing to load ahead from.
    let shallow = pick(64, 4096, 32, "bf16", false).expect("tensor cores");
    assert_eq!((shallow.stages, shallow.prefetch), (1, 0));
    // A K that breaks 16-byte alignment of `x[m][k]` rows, and f32, stay SIMT.
    assert_eq!(pick(64, 64, 4095, "bf16", false), None);
    assert_eq!(pick(64, 64, 64, "f32", false), None);
}

#[test]
fn emits_vector_loads_and_one_barrier_pair() {
    let k = gemm(4096, 4096, 4096, "f32", false);
    let p = plan(&k);
    let schedule = heuristic(&k, &p, SmVersion::Sm80);
    let lowered = lower(&k, &schedule, SmVersion::Sm80).expect("lowers");
    let body = &lowered.ptx.body;
    let barriers = body.iter().filter(|i| i.op == Op::BarSync).count();
    assert_eq!(barriers, 2);
    let text = crate::ptx::print(&lowered.ptx, SmVersion::Sm80);
    assert!(text.contains("ld.global.v4.f32"), "{text}");
    assert!(text.contains("ld.shared.v4.f32"));
    assert!(text.contains("st.global.v4.f32"));
    assert_eq!(lowered.launch.block, [256, 1, 1]);
    assert_eq!(lowered.launch.grid, [32 * 32, 1, 1]);
}

#[test]
fn wrong_class_for_other_kernels() {
    let k = kernel(
        "#[tuned_kernel(shape(R = 8, C = 100))]
         fn add(x: Tensor<f32, (R, C)>, y: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
             compute(|r, c| x[r][c] + y[r][c])
         }",
    );
    let err = lower(
        &k,
        &tiles(64, 64, 16, 4, 4, 1).to_schedule(),
        SmVersion::Sm80,
    )
    .expect_err("not a contraction");
    assert!(
        matches!(err, crate::lower::LowerError::WrongClass { .. }),
        "{err}"
    );
}

#[test]
fn simt_defaults_take_the_models_polish_only_where_it_rates_it_far_faster() {
    let target = SmVersion::Sm90;
    let seconds = |kernel: &Kernel, s: &Schedule| {
        crate::model::estimate(kernel, s, target)
            .expect("an estimate")
            .seconds
    };
    // An odd shape: the rules' tiles leave the model's favourites far
    // behind, and the polish ends where no change of one or two knobs
    // lowers the estimate.
    let odd = gemm(32, 8192, 8192, "f32", false);
    let rules = heuristic::by_rules(&odd, &plan(&odd), target);
    let chosen = heuristic::polished(&odd, target, rules.clone());
    assert!(
        seconds(&odd, &rules) >= 1.2 * seconds(&odd, &chosen),
        "{rules:?} -> {chosen:?}"
    );
    let space = crate::space::Space::of(&odd, target);
    assert!(space.reject(&odd, &chosen, target).is_none());
    let family = space.family(crate::schedule::Class::Matmul).expect("SIMT");
    for knob in &family.knobs {
        for &value in &knob.values {
            let next = chosen.with_knob(knob.name, value).expect("a SIMT knob");
            if space.reject(&odd, &next, target).is_none() {
                assert!(seconds(&odd, &next) >= seconds(&odd, &chosen), "{next:?}");
            }
        }
    }
    // A square product: the model rates its favourites within its margin
    // of the rules' tiles, which stay.
    let square = gemm(4096, 4096, 4096, "f32", false);
    let rules = heuristic::by_rules(&square, &plan(&square), target);
    assert_eq!(heuristic::polished(&square, target, rules.clone()), rules);
}

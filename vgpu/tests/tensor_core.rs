//! The tensor-core, async-copy, packing and atomic instructions on
//! hand-written PTX (`snippets`), parsed with ktune's parser and run on the
//! virtual GPU, against results computed here from the PTX ISA's
//! definitions; and every snippet assembled by ptxas for sm_80 and sm_90.

mod common;
mod snippets;

use half::{bf16, f16};
use ktune_core::SmVersion;
use ktune_core::lower::Launch;
use ktune_core::ptx::{Kernel, parse, print};

fn kernel(text: &str) -> Kernel {
    let (kernel, target) = parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(target, SmVersion::Sm80);
    kernel
}

/// Runs `text` on `buffers` (one per parameter) and returns them.
fn run(text: &str, blocks: u32, buffers: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, ktune_vgpu::Fault> {
    let kernel = kernel(text);
    let launch = Launch {
        grid: [blocks, 1, 1],
        block: [kernel.block_threads, 1, 1],
        dynamic_shared_bytes: kernel.dynamic_shared_bytes,
        workspace_bytes: 0,
        persistent: false,
        registers: 0,
    };
    let mut buffers = buffers;
    ktune_vgpu::run(&kernel, &launch, &mut buffers)?;
    Ok(buffers)
}

/// Deterministic pseudo-random bytes.
fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 32) as u8
        })
        .collect()
}

const POISON: u8 = 0xa5;

fn words(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn floats(b: &[u8]) -> Vec<f32> {
    words(b).into_iter().map(f32::from_bits).collect()
}

fn halves_bytes(h: &[u16]) -> Vec<u8> {
    h.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn cp_async_copies_zero_fills_and_lands_at_the_wait() {
    for seed in 0..8 {
        let input = bytes(512, seed);
        let mut sizes: Vec<u32> = bytes(32, seed + 100)
            .iter()
            .map(|b| u32::from(*b) % 17)
            .collect();
        sizes[..3].copy_from_slice(&[0, 16, 5]);
        let sizes_bytes: Vec<u8> = sizes.iter().flat_map(|s| s.to_le_bytes()).collect();
        let out = run(
            &snippets::cp_async(),
            1,
            vec![input.clone(), sizes_bytes, vec![POISON; 1024]],
        )
        .unwrap_or_else(|f| panic!("{f}"))
        .pop()
        .unwrap();
        for t in 0..32 {
            let n = (t + 1) % 32;
            for j in 0..16 {
                let want = if (j as u32) < sizes[n] {
                    input[16 * n + j]
                } else {
                    0
                };
                assert_eq!(out[16 * t + j], want, "seed {seed}, thread {t}, byte {j}");
            }
            assert_eq!(out[512 + 8 * t..520 + 8 * t], input[8 * t..8 * t + 8]);
            for j in 0..4 {
                let want = if (j as u32) < sizes[t].min(4) {
                    input[4 * t + j]
                } else {
                    0
                };
                assert_eq!(out[768 + 4 * t + j], want, "seed {seed}, thread {t}");
            }
            assert_eq!(
                out[896 + 4 * t..900 + 4 * t],
                input[128 + 4 * t..132 + 4 * t]
            );
        }
    }
}

/// What lane `lane` holds in register `m` after `ldmatrix` of `rows`
/// (`rows[8m + r]` is row r of matrix m), per the ISA: row `lane / 4`,
/// columns `2 (lane % 4)` and `+1`; transposed, column `lane / 4` of rows
/// `2 (lane % 4)` and `+1`.
fn ldmatrix_fragment(rows: &[[u16; 8]], m: usize, lane: usize, trans: bool) -> u32 {
    let (g, t) = (lane / 4, lane % 4);
    let (lo, hi) = if trans {
        (rows[8 * m + 2 * t][g], rows[8 * m + 2 * t + 1][g])
    } else {
        (rows[8 * m + g][2 * t], rows[8 * m + g][2 * t + 1])
    };
    u32::from(lo) | u32::from(hi) << 16
}

#[test]
fn ldmatrix_gives_the_documented_fragments() {
    for count in [1usize, 2, 4] {
        for trans in [false, true] {
            for seed in 0..4 {
                let input = bytes(512, seed * 7 + count as u64);
                let stored: Vec<[u16; 8]> = input
                    .chunks_exact(16)
                    .map(|r| std::array::from_fn(|c| u16::from_le_bytes([r[2 * c], r[2 * c + 1]])))
                    .collect();
                // Lane l addresses stored row 5l mod 32.
                let rows: Vec<[u16; 8]> = (0..32).map(|l| stored[5 * l % 32]).collect();
                let out = run(
                    &snippets::ldmatrix(count, trans, None),
                    1,
                    vec![input, vec![POISON; 512]],
                )
                .unwrap_or_else(|f| panic!("{f}"))
                .pop()
                .unwrap();
                let got = words(&out);
                for lane in 0..32 {
                    for m in 0..4 {
                        let want = if m < count {
                            ldmatrix_fragment(&rows, m, lane, trans)
                        } else {
                            u32::from_le_bytes([POISON; 4])
                        };
                        assert_eq!(
                            got[4 * lane + m],
                            want,
                            "x{count} trans {trans} seed {seed} lane {lane} matrix {m}"
                        );
                    }
                }
            }
        }
    }
}

/// The counter sees bank conflicts where there are some: lanes addressing
/// rows `5l mod 32` (16 bytes apart) cover every bank group, lanes
/// addressing rows `8l mod 32` put four distinct rows of each matrix in
/// one group.
#[test]
fn the_wavefront_count_sees_bank_conflicts() {
    for (spread, per_matrix) in [(5, 1), (8, 4)] {
        let text = snippets::ldmatrix_spread(spread);
        let (kernel, _) = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let launch = Launch {
            grid: [1, 1, 1],
            block: [32, 1, 1],
            dynamic_shared_bytes: kernel.dynamic_shared_bytes,
            workspace_bytes: 0,
            persistent: false,
            registers: 0,
        };
        let mut buffers = vec![vec![1u8; 512], vec![0u8; 512]];
        let stats =
            ktune_vgpu::run(&kernel, &launch, &mut buffers).unwrap_or_else(|f| panic!("{f}"));
        assert_eq!(stats.ldmatrix_matrices, 4);
        assert_eq!(stats.ldmatrix_wavefronts, 4 * per_matrix, "spread {spread}");
    }
}

/// The matrix product the vgpu documents: each element `C[i][j]` then a
/// chain of fmas in increasing k.
fn fma_chain(a: &[f32], b: &[f32], c: &[f32], k: usize) -> Vec<f32> {
    (0..16 * 8)
        .map(|ij| {
            let (i, j) = (ij / 8, ij % 8);
            (0..k).fold(c[ij], |acc, kk| a[i * k + kk].mul_add(b[kk * 8 + j], acc))
        })
        .collect()
}

/// Checks `got` against the product in f64 (within f32 rounding of the
/// sum of magnitudes) and bit for bit against the documented fma chain.
fn check_product(got: &[f32], a: &[f32], b: &[f32], c: &[f32], k: usize, what: &str) {
    let chain = fma_chain(a, b, c, k);
    for ij in 0..16 * 8 {
        let (i, j) = (ij / 8, ij % 8);
        let (mut exact, mut magnitude) = (f64::from(c[ij]), f64::from(c[ij].abs()));
        for kk in 0..k {
            let p = f64::from(a[i * k + kk]) * f64::from(b[kk * 8 + j]);
            exact += p;
            magnitude += p.abs();
        }
        let error = (f64::from(got[ij]) - exact).abs();
        assert!(
            error <= magnitude * 1e-6,
            "{what}: D[{i}][{j}] = {} but the product is {exact}",
            got[ij]
        );
        assert_eq!(
            got[ij].to_bits(),
            chain[ij].to_bits(),
            "{what}: D[{i}][{j}]"
        );
    }
}

#[test]
fn mma_f16_and_bf16_compute_the_product_of_the_matrices_ldmatrix_loads() {
    for kind in ["f16", "bf16"] {
        let text = snippets::mma_m16n8k16(kind);
        for seed in 0..24 {
            let to16 = |x: f32| match kind {
                "f16" => f16::from_f32(x).to_bits(),
                _ => bf16::from_f32(x).to_bits(),
            };
            let from16 = |h: u16| match kind {
                "f16" => f16::from_bits(h).to_f32(),
                _ => bf16::from_bits(h).to_f32(),
            };
            let a: Vec<u16> = common::values(16 * 16, seed)
                .into_iter()
                .map(to16)
                .collect();
            let b: Vec<u16> = common::values(16 * 8, seed + 1000)
                .into_iter()
                .map(to16)
                .collect();
            let c = common::values(16 * 8, seed + 2000);
            let out = run(
                &text,
                1,
                vec![
                    halves_bytes(&a),
                    halves_bytes(&b),
                    ktune_vgpu::f32_bytes(&c),
                    vec![POISON; 512],
                ],
            )
            .unwrap_or_else(|f| panic!("{f}"))
            .pop()
            .unwrap();
            let a: Vec<f32> = a.into_iter().map(from16).collect();
            let b: Vec<f32> = b.into_iter().map(from16).collect();
            check_product(
                &floats(&out),
                &a,
                &b,
                &c,
                16,
                &format!("{kind} seed {seed}"),
            );
        }
    }
}

/// `cvt.rna.tf32.f32` computed independently: to nearest multiple of the
/// tf32 ulp (2^(e - 10)), ties away from zero (`f64::round`).
fn tf32(x: f32) -> f32 {
    let e = ((x.to_bits() >> 23) & 0xff) as i32 - 127;
    let ulp = 2f64.powi(e - 10);
    ((f64::from(x) / ulp).round() * ulp) as f32
}

#[test]
fn mma_tf32_computes_the_product_of_the_rounded_matrices() {
    let text = snippets::mma_tf32();
    for seed in 0..24 {
        let a = common::values(16 * 8, seed);
        let b = common::values(8 * 8, seed + 1000);
        let c = common::values(16 * 8, seed + 2000);
        let out = run(
            &text,
            1,
            vec![
                ktune_vgpu::f32_bytes(&a),
                ktune_vgpu::f32_bytes(&b),
                ktune_vgpu::f32_bytes(&c),
                vec![POISON; 512],
            ],
        )
        .unwrap_or_else(|f| panic!("{f}"))
        .pop()
        .unwrap();
        let a: Vec<f32> = a.into_iter().map(tf32).collect();
        let b: Vec<f32> = b.into_iter().map(tf32).collect();
        check_product(&floats(&out), &a, &b, &c, 8, &format!("tf32 seed {seed}"));
    }
}

/// Inputs whose low mantissa bits tf32 drops, with known products: A's
/// `1 + 2⁻¹²` rounds down to 1, B's `1 + 2⁻¹¹` (a tie) away to `1 + 2⁻¹⁰`
/// and its `1 + 3·2⁻¹²` up to the same, `-(1 + 2⁻¹¹)` away to `-(1 + 2⁻¹⁰)`.
/// Exact f32 products would keep the dropped bits.
#[test]
fn mma_tf32_rounds_its_inputs_to_nearest_ties_away() {
    let text = snippets::mma_tf32();
    let a = vec![1.0 + 2f32.powi(-12); 16 * 8];
    // Column j of B: rows alternate between two values per column class.
    let b_value = |k: usize, j: usize| match (j % 2, k % 2) {
        (0, _) => 1.0 + 2f32.powi(-11),
        (1, 0) => 1.0 + 3.0 * 2f32.powi(-12),
        _ => -(1.0 + 2f32.powi(-11)),
    };
    let b: Vec<f32> = (0..8 * 8).map(|i| b_value(i / 8, i % 8)).collect();
    let c = vec![0.5f32; 16 * 8];
    let out = run(
        &text,
        1,
        vec![
            ktune_vgpu::f32_bytes(&a),
            ktune_vgpu::f32_bytes(&b),
            ktune_vgpu::f32_bytes(&c),
            vec![POISON; 512],
        ],
    )
    .unwrap_or_else(|f| panic!("{f}"))
    .pop()
    .unwrap();
    let up = 1.0 + 2f32.powi(-10);
    for (ij, got) in floats(&out).into_iter().enumerate() {
        let j = ij % 8;
        // Even columns: 8 products of 1 · (1 + 2⁻¹⁰); odd ones: four of
        // each sign, which cancel.
        let want = if j % 2 == 0 { 0.5 + 8.0 * up } else { 0.5 };
        assert_eq!(got, want, "D[{}][{j}]", ij / 8);
    }
}

#[test]
fn b16_pairs_pack_and_unpack_low_half_first() {
    let input: Vec<u16> = bytes(128, 9)
        .chunks_exact(2)
        .map(|p| u16::from_le_bytes([p[0], p[1]]))
        .collect();
    let out = run(
        &snippets::pack(),
        1,
        vec![halves_bytes(&input), vec![POISON; 256]],
    )
    .unwrap_or_else(|f| panic!("{f}"))
    .pop()
    .unwrap();
    let got = words(&out);
    for t in 0..32 {
        let (lo, hi) = (u32::from(input[2 * t]), u32::from(input[2 * t + 1]));
        assert_eq!(got[t], lo | hi << 16, "thread {t}");
        assert_eq!(got[32 + t], hi | lo << 16, "thread {t}");
    }
}

#[test]
fn red_and_atom_add_from_every_thread_sum_exactly() {
    let blocks = 3;
    let n = 64 * blocks as usize;
    let input: Vec<f32> = (0..n).map(|g| (g * 37 % 11) as f32 - 5.0).collect();
    let buffers = run(
        &snippets::atomics(),
        blocks,
        vec![
            ktune_vgpu::f32_bytes(&input),
            ktune_vgpu::f32_bytes(&[0.5; 4]),
            ktune_vgpu::f32_bytes(&[0.0]),
            vec![POISON; 4 * n],
        ],
    )
    .unwrap_or_else(|f| panic!("{f}"));
    let sums = floats(&buffers[1]);
    for (j, sum) in sums.iter().enumerate() {
        let want: f32 = 0.5 + input.iter().skip(j).step_by(4).sum::<f32>();
        assert_eq!(*sum, want, "sums[{j}]");
    }
    assert_eq!(floats(&buffers[2]), [n as f32]);
    let mut seen = floats(&buffers[3]);
    seen.sort_by(f32::total_cmp);
    let all: Vec<f32> = (0..n).map(|i| i as f32).collect();
    assert_eq!(seen, all, "each atom returns a distinct earlier count");
}

#[test]
fn snippets_are_in_printed_form_and_assemble_with_ptxas() {
    let ptxas = ktune_build::ptxas::find();
    if ptxas.is_none() {
        eprintln!(
            "ptxas not found: the snippets are checked against ktune's printer only, not assembled \
             (run `cargo xtask test`, which installs ptxas, or set {})",
            ktune_build::ptxas::PTXAS_ENV
        );
    }
    for (name, text) in snippets::all() {
        let kernel = kernel(&text);
        assert_eq!(print(&kernel, SmVersion::Sm80), text, "{name}");
        if let Some(ptxas) = &ptxas {
            for target in [SmVersion::Sm80, SmVersion::Sm90] {
                let printed = print(&kernel, target);
                if let Err(e) = ktune_build::ptxas::assemble(ptxas, &printed, target) {
                    panic!("{name} for {target}: {e}");
                }
            }
        }
    }
}

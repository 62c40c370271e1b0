//! The tensor-core lowering's shared-memory layouts on the virtual GPU:
//! padded and XOR-swizzled operand tiles, each operand contiguous along
//! `k` or along its row, on a shape with edges in every dimension. Every
//! point must compute the reference's result, and every `ldmatrix` must
//! read its matrices without bank conflicts (one shared-memory wavefront
//! per matrix, as the virtual GPU counts them).

mod common;

use ktune_core::schedule::{MmaTiles, Schedule};
use ktune_core::target::SmVersion;
use ktune_vgpu::verify::verify;

/// Block tile (`block_m`, `block_n`, `block_k`) and warp tile.
type Tile = ((u32, u32, u32), (u32, u32));

/// Block and warp tiles covering rows of 2 to 32 chunks (a 256-wide row's
/// copies change key from one pass to the next) and warps of one to eight
/// fragments along each side; the 16-deep ones also split `K` in two (five
/// `k` tiles: slices of three and two).
const TILES: [Tile; 7] = [
    ((16, 16, 16), (16, 16)),
    ((32, 64, 32), (16, 32)),
    ((64, 32, 64), (32, 16)),
    ((64, 64, 32), (32, 32)),
    ((128, 64, 16), (64, 32)),
    ((64, 128, 64), (64, 64)),
    ((64, 256, 32), (32, 128)),
];

#[test]
fn padded_and_swizzled_tiles_compute_the_product_and_read_fragments_without_conflicts() {
    let target = SmVersion::Sm80;
    let mut checked = 0;
    for dtype in ["bf16", "f16"] {
        for (a_transposed, b_transposed) in [(false, false), (false, true), (true, false)] {
            // Edges along M (a partial block row), N and K (a partial tile).
            let kernel = common::gemm(dtype, a_transposed, b_transposed, (72, 88, 72));
            for ((block_m, block_n, block_k), (warp_m, warp_n)) in TILES {
                for (swizzle, prefetch) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                    let schedule = Schedule::Mma(MmaTiles {
                        block_m,
                        block_n,
                        block_k,
                        warp_m,
                        warp_n,
                        stages: 2,
                        group_m: 1,
                        split_k: if block_k == 16 { 2 } else { 1 },
                        min_blocks: 0,
                        swizzle,
                        prefetch,
                        wgmma: 0,
                        tail_split: 1,
                        persistent: 0,
                        producer: 0,
                        tma: 0,
                        cluster_m: 1,
                    });
                    let what =
                        format!("{dtype} A^T {a_transposed} B^T {b_transposed} {schedule:?}");
                    let verified = verify(&kernel, &schedule, target, 7)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    let stats = verified.stats;
                    assert!(stats.ldmatrix_matrices > 0, "{what}");
                    assert_eq!(
                        stats.ldmatrix_wavefronts, stats.ldmatrix_matrices,
                        "{what}: bank conflicts"
                    );
                    // Two stages of both tiles, unpadded when swizzled;
                    // padded rows take 16 bytes more each.
                    let unpadded = 2 * 2 * (block_m + block_n) * block_k;
                    let rows = |x: u32, k_major: bool| if k_major { x } else { block_k };
                    let padding =
                        2 * 16 * (rows(block_m, !a_transposed) + rows(block_n, b_transposed));
                    let expected = unpadded + if swizzle == 1 { 0 } else { padding };
                    assert_eq!(stats.shared_bytes, expected, "{what}");
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 2 * 3 * TILES.len() * 4);
}

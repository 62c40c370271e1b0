//! The rules that give each op class its knobs' values, from the kernel's
//! IR and the target.
//!
//! - **Block sizes** (elementwise `block`, generic `block`): whole warps,
//!   powers of two, from one warp to the target's limit.
//! - **Work per thread** (`per_thread`): powers of two up to the lowering's
//!   unroll limit.
//! - **Vector widths**: the widths the lowering implements, up to 16 bytes
//!   of the operand's dtype for contractions; whether a width divides the
//!   contiguous extents and strides is a constraint, not a rule, so the
//!   survey reports it (rows that a width does not divide are peeled when
//!   read once per pass, `cache = 0`, and an alignment rejection
//!   otherwise; an elementwise output's groups straddle its rows when the
//!   width divides its element count, and are an alignment rejection
//!   otherwise).
//! - **Row reductions**: `threads_per_row` powers of two up to the row's
//!   length rounded up (at least 64, so rows spanning several warps are
//!   always in the space), `rows_per_block` powers of two up to the row
//!   count rounded up; both capped by the block limit. `cache` 0, 1 and 2
//!   when some tensor is read by more than one pass over the row (the only
//!   case where keeping it, in registers or in shared memory, saves a
//!   read), 0 otherwise; what a point keeps follows from the other knobs:
//!   points that keep more than the registers hold are a
//!   [`Constraint::Registers`](crate::lower::Constraint) rejection, points
//!   whose block's rows need more shared memory than the target allows a
//!   [`Constraint::SharedMemory`](crate::lower::Constraint) one. `tree`
//!   0 and 1 (shuffles then shared memory, or a shared-memory tree, across
//!   warps); a row within one warp has no cross-warp combine, so its
//!   `tree = 1` points are [`Constraint::Range`](crate::lower::Constraint)
//!   rejections. `online` 0 and 1 where a maximum is followed by a sum of
//!   exponentials of differences from it (softmax), or a mean by a sum or
//!   mean of squared differences from it (a variance), which one pass can
//!   compute together, 0 otherwise; with `cache` above 0 the row is read
//!   from global memory once already, so those `online = 1` points are
//!   `Range` rejections. `cluster` 1, 2, 4 and 8 on targets with
//!   thread-block clusters (sm_90) for rows longer than a block's most
//!   threads, which one block's threads would each read several times; 1
//!   otherwise.
//! - **Contraction tiles**: `block_m`, `block_n` powers of two from 16 (or
//!   the extent rounded up, when smaller: decode shapes) to the extent
//!   rounded up, at most 256; `block_k` from 8 to 64 likewise along `K`;
//!   thread tiles powers of two up to 16.
//! - **Tensor-core contraction tiles** (a second family, when both
//!   operands are plain f16 or bf16 loads of one dtype, or plain f32 loads
//!   in a kernel with `allow_tf32`): `block_m`,
//!   `block_n` powers of two from 16 to the extent rounded up, at most 256;
//!   `block_k` 16 to 64 likewise along `K`; `warp_m`, `warp_n` from 16 to
//!   the extent rounded up, at most 128 (a warp tile larger than its block
//!   tile is a [`Constraint::Tiling`](crate::lower::Constraint) rejection).
//! - **Pipeline depth** (`stages`, both contraction families): 1 to 4 on
//!   targets with `cp.async` (sm_80 and newer: every target ktune has),
//!   else 1. SIMT points above 1 stage copy tiles unchanged, so a
//!   contraction whose staging widens a 16-bit operand or applies a
//!   prologue has them rejected by
//!   [`Constraint::Operands`](crate::lower::Constraint).
//! - **The grid's walk** (`group_m`, both contraction families): 1 (row by
//!   row), and 4, 8, 16 block rows per group when the grid has more block
//!   rows than that with the family's smallest `block_m` and more than one
//!   block column with its smallest `block_n`; a group of at least the
//!   point's own block rows is a
//!   [`Constraint::Tiling`](crate::lower::Constraint) rejection, one column
//!   of blocks a coverage one.
//! - **Split-K** (`split_k`, both contraction families): 1, and 2, 4, 8, 16 when
//!   even 256 × 256 tiles leave SMs idle and `K` is at least 16 per slice;
//!   a split that leaves a slice wholly past `K` (with the point's
//!   `block_k`) is a [`Constraint::Split`](crate::lower::Constraint)
//!   rejection.
//! - **Tail split** (`tail_split`, tensor-core contractions): 1, and 2, 4
//!   when even 256 × 256 tiles fill every SM at least once (where
//!   `split_k` is not offered); a point whose grid leaves no partial wave
//!   after a whole one, whose last wave its slices would not shorten,
//!   whose slices are shallower than its ring, or that also sets
//!   `split_k` is a
//!   [`Constraint::Split`](crate::lower::Constraint) rejection.
//! - **Register allocation** (`min_blocks`, tensor-core contractions): 0,
//!   ptxas chooses how many registers a thread gets, and 1, ptxas is told
//!   one block an SM is enough (`.minnctapersm 1`), so it may give a
//!   thread more. On sm_90 it gives the 128×128 bf16 tile 202 registers
//!   instead of 168 and keeps more `ldmatrix` fragments ahead of their
//!   `mma`s, at the cost of a resident block. Which wins is for
//!   measurement: the heuristic model does not see it.
//! - **Shared-memory layout** (`swizzle`, tensor-core contractions of
//!   16-bit operands; tf32 fragments, read word by word, keep padded
//!   rows): 0, rows padded by 16 bytes, and 1, unpadded rows whose 16-byte
//!   chunks are XOR-permuted by row. Both keep `ldmatrix` free of bank
//!   conflicts; swizzled rows also start on 128-byte lines, so a warp's
//!   `cp.async` copies fill whole lines, and save the padding's shared
//!   memory, for a few more address registers.
//! - **Fragment loads** (`prefetch`, tensor-core contractions, on targets
//!   with `cp.async`): 0, each k-step's fragments loaded just before its
//!   `mma`s, and 1, one k-step ahead, the next tile's first across the
//!   ring's barrier; with `stages = 1` there is no second slot to read
//!   ahead from (a [`Constraint::Range`](crate::lower::Constraint)
//!   rejection).
//! - **Warpgroups** (`wgmma`, tensor-core contractions of 16-bit operands
//!   on sm_90): 0, each warp's `mma.sync` on the fragments it loads, and
//!   1, Hopper's `wgmma.mma_async`, which reads both operands from shared
//!   memory itself; `warp_m × warp_n` is then a warpgroup's tile, 64 or
//!   128 rows by up to 256 columns (`warp_n` offers 256 there). It needs
//!   swizzled rows, no `prefetch` and no split-K, and reads an operand not
//!   contiguous along `k` from the start of a 128-byte panel (a
//!   [`Constraint::Range`](crate::lower::Constraint) or
//!   [`Constraint::Tiling`](crate::lower::Constraint) rejection otherwise).
//! - **Persistent blocks** (`persistent`, where warpgroups are offered and
//!   64 × 16 tiles outnumber the SMs): 0, a block per output tile, and 1,
//!   as many blocks as the GPU holds at once, each looping over tiles and
//!   filling its ring for the next one before the current one's
//!   epilogue. A point with `split_k` or `tail_split`, without `wgmma`,
//!   or whose tiles do not outnumber the SMs is a
//!   [`Constraint::Split`](crate::lower::Constraint),
//!   [`Constraint::Range`](crate::lower::Constraint) or
//!   [`Constraint::Tiling`](crate::lower::Constraint) rejection.
//! - **Producer warpgroups** (`producer`, where warpgroups are offered):
//!   0, every thread copies, and 1, a warpgroup of its own copies while
//!   the others multiply, handing over ring slots by memory barriers and
//!   giving them its registers; where blocks may loop over tiles, 2, the
//!   same beside two sets of warpgroups taking the tiles in turn
//!   (ping-pong). A point without `wgmma`, with one stage, a split of
//!   `K`, `min_blocks` 0 or, for 2, a block per tile is a
//!   [`Constraint::Range`](crate::lower::Constraint) or
//!   [`Constraint::Split`](crate::lower::Constraint) rejection; one whose
//!   consumers would not fit the registers left them, a
//!   [`Constraint::Registers`](crate::lower::Constraint) one.
//! - **Tensor-map copies** (`tma`, where producers are offered): 0, the
//!   producer's threads copy by `cp.async`, and 1, one of its threads
//!   copies whole tiles by the tensor memory accelerator. A point without
//!   a producer is a [`Constraint::Range`](crate::lower::Constraint)
//!   rejection; one whose operand no tensor map can describe (strides
//!   the driver refuses), a
//!   [`Constraint::Alignment`](crate::lower::Constraint) one.
//! - **Clusters sharing B** (`cluster_m`, where tensor-map copies are
//!   offered and `M` has two tiles or more of the finest 64 rows): 1,
//!   each block copies its own tiles, and 2, two blocks stacked along `M`
//!   share B's by multicast. A point without `tma = 1` is
//!   a [`Constraint::Range`](crate::lower::Constraint) rejection.

use super::{Coverage, Family, Knob, Space};
use crate::dtype::DType;
use crate::ir::Kernel;
use crate::lower::classify::{OpClass, classify};
use crate::lower::elementwise::{MAX_PER_THREAD, VECTOR_WIDTHS};
use crate::lower::matmul::{MAX_STAGES, MatmulPlan, mma, split_k_values, tail_split_values};
use crate::lower::rows::{CachePlan, MAX_CLUSTER, online};
use crate::schedule::Class;
use crate::target::SmVersion;

pub(super) fn space(kernel: &Kernel, target: SmVersion) -> Space {
    let limits = target.limits();
    let blocks = || powers(limits.warp_size, limits.max_threads_per_block);
    let elements = Coverage::Elements(kernel.len_of(&kernel.output));
    let knob = |name, values| Knob { name, values };
    match classify(kernel) {
        OpClass::Generic => Space {
            families: vec![Family {
                class: Class::Generic,
                knobs: vec![knob("block", blocks())],
            }],
            coverage: elements,
        },
        OpClass::Elementwise => Space {
            families: vec![Family {
                class: Class::Elementwise,
                knobs: vec![
                    knob("block", blocks()),
                    knob("per_thread", powers(1, MAX_PER_THREAD)),
                    knob("vector", VECTOR_WIDTHS.to_vec()),
                ],
            }],
            coverage: elements,
        },
        OpClass::Rows(plan) => {
            let length = plan.length(kernel);
            let rows = plan.rows(kernel);
            let cap = limits.max_threads_per_block;
            Space {
                families: vec![Family {
                    class: Class::Rows,
                    knobs: vec![
                        knob(
                            "threads_per_row",
                            powers(1, length.next_power_of_two().clamp(64, cap)),
                        ),
                        knob(
                            "rows_per_block",
                            powers(1, rows.next_power_of_two().min(cap)),
                        ),
                        knob("vector", VECTOR_WIDTHS.to_vec()),
                        knob(
                            "cache",
                            if CachePlan::of(kernel, &plan).is_empty() {
                                vec![0]
                            } else {
                                vec![0, 1, 2]
                            },
                        ),
                        knob("tree", vec![0, 1]),
                        knob(
                            "online",
                            if online::pairs(kernel, &plan).is_empty() {
                                vec![0]
                            } else {
                                vec![0, 1]
                            },
                        ),
                        knob(
                            "cluster",
                            if target.has_clusters() && length > cap {
                                powers(1, MAX_CLUSTER)
                            } else {
                                vec![1]
                            },
                        ),
                    ],
                }],
                coverage: Coverage::Rows(u64::from(rows)),
            }
        }
        OpClass::Matmul(plan) => matmul(kernel, &plan, target),
    }
}

fn matmul(kernel: &Kernel, plan: &MatmulPlan, target: SmVersion) -> Space {
    let tile = |extent: u32, low: u32, high: u32| {
        let top = extent.next_power_of_two().clamp(low, high);
        powers(low.min(extent.next_power_of_two()), top)
    };
    let vectors = |dtype: DType| powers(1, 16 / dtype.size());
    let knob = |name, values| Knob { name, values };
    let (m, n) = (plan.m_extent(kernel), plan.n_extent(kernel));
    let block_m = tile(m, 16, 256);
    let block_n = tile(n, 16, 256);
    let group_m = groups(m.div_ceil(block_m[0]), n.div_ceil(block_n[0]));
    let stages: Vec<u32> = if target.has_async_copy() {
        (1..=MAX_STAGES).collect()
    } else {
        vec![1]
    };
    let mut families = vec![Family {
        class: Class::Matmul,
        knobs: vec![
            knob("block_m", block_m),
            knob("block_n", block_n),
            knob("block_k", tile(plan.k_extent(kernel), 8, 64)),
            knob("thread_m", powers(1, 16)),
            knob("thread_n", powers(1, 16)),
            knob("vector_a", vectors(kernel.input(plan.a.tensor).dtype)),
            knob("vector_b", vectors(kernel.input(plan.b.tensor).dtype)),
            knob("group_m", group_m),
            knob("stages", stages.clone()),
            knob("split_k", split_k_values(kernel, plan, target)),
        ],
    }];
    if mma::applies(kernel, plan) {
        let warpgroups = wgmmas(kernel, plan, target);
        let persistent = persistents(kernel, plan, target, &warpgroups);
        let producer = producers(&warpgroups, &persistent);
        let tma = tmas(&producer);
        let cluster_m = clusters(&tma, m);
        // Tensor-core tiles are at least one 16-wide fragment.
        let tile = |extent: u32, high: u32| powers(16, extent.next_power_of_two().clamp(16, high));
        families.push(Family {
            class: Class::Mma,
            knobs: vec![
                knob("block_m", tile(m, 256)),
                knob("block_n", tile(n, 256)),
                knob("block_k", tile(plan.k_extent(kernel), 64)),
                knob("warp_m", tile(m, 128)),
                // A warpgroup's `wgmma` tiles are up to 256 wide.
                knob(
                    "warp_n",
                    tile(n, if warpgroups.len() > 1 { 256 } else { 128 }),
                ),
                knob("stages", stages.clone()),
                knob("group_m", groups(m.div_ceil(16), n.div_ceil(16))),
                knob("split_k", split_k_values(kernel, plan, target)),
                knob("min_blocks", vec![0, 1]),
                knob("swizzle", swizzles(kernel, plan)),
                knob("prefetch", prefetches(&stages)),
                knob("wgmma", warpgroups),
                knob("tail_split", tail_split_values(kernel, plan, target)),
                knob("persistent", persistent),
                knob("producer", producer),
                knob("tma", tma),
                knob("cluster_m", cluster_m),
            ],
        });
    }
    Space {
        families,
        coverage: Coverage::Tiles { n },
    }
}

/// How blocks take their tiles: a block per tile (0), and where
/// warpgroups are offered and the finest warpgroup tiles (64 × 16)
/// outnumber the target's SMs, blocks looping over tiles (1).
fn persistents(
    kernel: &Kernel,
    plan: &MatmulPlan,
    target: SmVersion,
    warpgroups: &[u32],
) -> Vec<u32> {
    let tiles = u64::from(plan.m_extent(kernel).div_ceil(64))
        * u64::from(plan.n_extent(kernel).div_ceil(16))
        * plan.batch_count(kernel);
    if warpgroups.contains(&1) && tiles > u64::from(target.limits().sm_count) {
        vec![0, 1]
    } else {
        vec![0]
    }
}

/// Who copies a tensor-core block's operand tiles: every thread (0), and
/// where warpgroups are offered, a producer warpgroup of its own (1), and
/// where blocks may loop over tiles too, beside two sets of warpgroups
/// taking the tiles in turn (2).
fn producers(warpgroups: &[u32], persistent: &[u32]) -> Vec<u32> {
    match (warpgroups.contains(&1), persistent.contains(&1)) {
        (false, _) => vec![0],
        (true, false) => vec![0, 1],
        (true, true) => vec![0, 1, 2],
    }
}

/// How a producer warpgroup copies: its threads' `cp.async`s (0), and
/// where producers are offered, one thread's tensor-map copies (1).
fn tmas(producers: &[u32]) -> Vec<u32> {
    if producers.contains(&1) {
        vec![0, 1]
    } else {
        vec![0]
    }
}

/// Blocks per cluster along `M`: 1, and where tensor-map copies are
/// offered and `M` (`m` rows) holds two of the finest warpgroup tiles, 2.
fn clusters(tmas: &[u32], m: u32) -> Vec<u32> {
    if tmas.contains(&1) && m > 64 {
        vec![1, 2]
    } else {
        vec![1]
    }
}

/// Shared-memory layouts of tensor-core tiles: padded rows (0), and for
/// 16-bit operands, read by `ldmatrix`, XOR-swizzled rows (1).
fn swizzles(kernel: &Kernel, plan: &MatmulPlan) -> Vec<u32> {
    match kernel.input(plan.a.tensor).dtype {
        DType::F16 | DType::Bf16 => vec![0, 1],
        _ => vec![0],
    }
}

/// Which tensor-core instructions multiply: warps' `mma.sync` (0), and
/// on sm_90 for 16-bit operands warpgroups' `wgmma.mma_async` (1).
fn wgmmas(kernel: &Kernel, plan: &MatmulPlan, target: SmVersion) -> Vec<u32> {
    match kernel.input(plan.a.tensor).dtype {
        DType::F16 | DType::Bf16 if target == SmVersion::Sm90 => vec![0, 1],
        _ => vec![0],
    }
}

/// When tensor-core fragments are loaded: as needed (0), and where the
/// ring has a second slot to read ahead from, one k-step ahead (1).
fn prefetches(stages: &[u32]) -> Vec<u32> {
    if stages.iter().any(|s| *s > 1) {
        vec![0, 1]
    } else {
        vec![0]
    }
}

/// Block rows per group of the grid's walk: 1, and the groups shorter than
/// the `rows` of the grid's finest tiling when it has more than one column.
fn groups(rows: u32, columns: u32) -> Vec<u32> {
    std::iter::once(1)
        .chain([4, 8, 16].into_iter().filter(|g| *g < rows && columns > 1))
        .collect()
}

/// Powers of two from `low` to `high`, both included (both powers of two).
fn powers(low: u32, high: u32) -> Vec<u32> {
    std::iter::successors(Some(low), |v| v.checked_mul(2))
        .take_while(|v| *v <= high)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_kernels::{matmul, softmax};

    fn values<'a>(space: &'a Space, name: &str) -> &'a [u32] {
        &space.families[0]
            .knobs
            .iter()
            .find(|k| k.name == name)
            .expect("knob")
            .values
    }

    #[test]
    fn tiles_follow_the_extents() {
        let big = Space::of(&matmul(4096, 4096, 4096), SmVersion::Sm90);
        assert_eq!(values(&big, "block_m"), [16, 32, 64, 128, 256]);
        assert_eq!(values(&big, "block_k"), [8, 16, 32, 64]);
        assert_eq!(values(&big, "vector_a"), [1, 2, 4]);
        let decode = Space::of(&matmul(1, 4096, 4096), SmVersion::Sm90);
        assert_eq!(values(&decode, "block_m"), [1, 2, 4, 8, 16]);
        let odd = Space::of(&matmul(33, 65, 17), SmVersion::Sm90);
        assert_eq!(values(&odd, "block_n"), [16, 32, 64, 128]);
        assert_eq!(values(&odd, "block_k"), [8, 16, 32]);
    }

    #[test]
    fn stages_come_with_async_copies() {
        for target in SmVersion::ALL {
            assert!(target.has_async_copy());
            let space = Space::of(&matmul(64, 64, 64), target);
            assert_eq!(values(&space, "stages"), [1, 2, 3, 4]);
        }
    }

    #[test]
    fn splits_only_where_the_grid_leaves_sms_idle() {
        let decode = Space::of(&matmul(8, 8192, 8192), SmVersion::Sm90);
        assert_eq!(values(&decode, "split_k"), [1, 2, 4, 8, 16]);
        let short = Space::of(&matmul(8, 4096, 48), SmVersion::Sm90);
        assert_eq!(values(&short, "split_k"), [1, 2]);
        let big = Space::of(&matmul(4096, 4096, 4096), SmVersion::Sm90);
        assert_eq!(values(&big, "split_k"), [1]);
    }

    #[test]
    fn groups_follow_the_grid() {
        let big = Space::of(&matmul(4096, 4096, 4096), SmVersion::Sm90);
        assert_eq!(values(&big, "group_m"), [1, 4, 8, 16]);
        // 129 rows are 9 block rows of 16: groups of 8 leave one.
        let tall = Space::of(&matmul(129, 65, 17), SmVersion::Sm90);
        assert_eq!(values(&tall, "group_m"), [1, 4, 8]);
        let few = Space::of(&matmul(64, 4096, 64), SmVersion::Sm90);
        assert_eq!(values(&few, "group_m"), [1]);
        let one_column = Space::of(&matmul(4096, 16, 64), SmVersion::Sm90);
        assert_eq!(values(&one_column, "group_m"), [1]);
    }

    #[test]
    fn rows_follow_the_row_length_and_count() {
        let wide = Space::of(&softmax(8, 50257), SmVersion::Sm80);
        assert_eq!(values(&wide, "threads_per_row").last(), Some(&1024));
        assert_eq!(values(&wide, "rows_per_block"), [1, 2, 4, 8]);
        let narrow = Space::of(&softmax(4096, 7), SmVersion::Sm80);
        assert_eq!(values(&narrow, "threads_per_row").last(), Some(&64));
        // Softmax reads its rows three times: keeping them, in registers
        // or in shared memory, is an option.
        assert_eq!(values(&wide, "cache"), [0, 1, 2]);
        assert_eq!(values(&wide, "tree"), [0, 1]);
        // Clusters exist on sm_90 only, for rows longer than a block.
        assert_eq!(values(&wide, "cluster"), [1]);
        let hopper = Space::of(&softmax(8, 50257), SmVersion::Sm90);
        assert_eq!(values(&hopper, "cluster"), [1, 2, 4, 8]);
        let short = Space::of(&softmax(8, 1000), SmVersion::Sm90);
        assert_eq!(values(&short, "cluster"), [1]);
    }

    #[test]
    fn rows_read_once_have_nothing_to_keep() {
        let row_sum = crate::syntax::parse_kernel(
            quote::quote!(shape(R = 64, C = 1000)),
            quote::quote! {
                fn row_sum(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
                    compute(|r| sum(C, |j| x[r][j]))
                }
            },
        )
        .expect("valid kernel");
        let space = Space::of(&row_sum, SmVersion::Sm80);
        assert_eq!(values(&space, "cache"), [0]);
    }

    #[test]
    fn powers_span_both_ends() {
        assert_eq!(powers(1, 1), [1]);
        assert_eq!(powers(32, 1024), [32, 64, 128, 256, 512, 1024]);
    }
}

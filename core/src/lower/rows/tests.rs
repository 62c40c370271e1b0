use quote::quote;

use crate::ir::Kernel;
use crate::lower::{Constraint, LowerError, Lowered, lower};
use crate::ptx::inst::{ArithOp, Op, Operand, Reg, Space, Ty, UnaryOp};
use crate::schedule::{Class, Schedule};
use crate::syntax::parse_kernel;
use crate::target::SmVersion;
use crate::test_kernels::rows_with;

fn layernorm(r: u32, c: u32) -> Kernel {
    layernorm_of(quote!(f32), r, c)
}

/// Layernorm without weights over rows of `c` values of type `dtype`.
fn layernorm_of(dtype: proc_macro2::TokenStream, r: u32, c: u32) -> Kernel {
    parse_kernel(
        quote!(shape(R = #r, C = #c)),
        quote! {
            fn layernorm(x: Tensor<#dtype, (R, C)>) -> Tensor<f32, (R, C)> {
                compute(|r, c| {
                    let mu = mean(C, |j| x[r][j]);
                    let var = mean(C, |j| (x[r][j] - mu) * (x[r][j] - mu));
                    (x[r][c] - mu) * rsqrt(var + 0.00001)
                })
            }
        },
    )
    .expect("valid kernel")
}

fn point(threads_per_row: u32, rows_per_block: u32, vector: u32) -> Schedule {
    Schedule::Rows {
        threads_per_row,
        rows_per_block,
        vector,
        cache: 0,
        tree: 0,
        online: 0,
        cluster: 1,
    }
}

fn invalid(k: &Kernel, s: Schedule, target: SmVersion) -> String {
    match lower(k, &s, target) {
        Err(LowerError::Invalid { reason, .. }) => reason,
        other => panic!("{s:?} should be invalid, got {other:?}"),
    }
}

fn count(l: &Lowered, pred: impl Fn(&Op) -> bool) -> usize {
    l.ptx.body.iter().filter(|i| pred(&i.op)).count()
}

#[test]
fn rejects_invalid_points() {
    let k = layernorm(10, 1025);
    let sm80 = SmVersion::Sm80;
    assert!(invalid(&k, point(0, 1, 1), sm80).contains("power of two"));
    assert!(invalid(&k, point(48, 1, 1), sm80).contains("power of two"));
    assert!(invalid(&k, point(2048, 1, 1), sm80).contains("power of two up to 1024"));
    assert!(invalid(&k, point(32, 0, 1), sm80).contains("0 rows per block"));
    assert!(invalid(&k, point(256, 8, 1), sm80).contains("2048 threads per block"));
    assert!(invalid(&k, point(4, 3, 1), sm80).contains("multiple of 32"));
    // 1025 positions: peeled with cache 0 (see `peel`), not otherwise.
    assert!(lower(&k, &point(32, 1, 2), sm80).is_ok());
    let reason = invalid(&k, rows_with(point(32, 1, 2), 1, 0), sm80);
    assert!(reason.contains("reduced extent `C`"), "{reason}");
    assert!(reason.contains("only with cache 0"), "{reason}");
    let reason = invalid(&layernorm(10, 7), point(32, 1, 4), sm80);
    assert!(reason.contains("shorter than two chunks"), "{reason}");
    assert!(invalid(&k, point(32, 1, 8), sm80).contains("expected 1, 2 or 4"));
    assert!(invalid(&k, point(u32::MAX / 2 + 1, 2, 1), sm80).contains("power of two"));
    let k = layernorm(10, 1024);
    assert!(lower(&k, &point(32, 1, 4), sm80).is_ok());
    assert!(lower(&k, &point(8, 4, 2), sm80).is_ok());

    let constraint = |k: &Kernel, s: Schedule| match lower(k, &s, sm80) {
        Err(LowerError::Invalid { constraint, .. }) => constraint,
        other => panic!("{s:?} should be invalid, got {other:?}"),
    };
    assert!(invalid(&k, rows_with(point(64, 1, 1), 0, 2), sm80).contains("tree 2"));
    assert!(invalid(&k, rows_with(point(32, 2, 1), 0, 1), sm80).contains("within one warp"));
    let reason = invalid(&k, rows_with(point(64, 1, 1), 3, 0), sm80);
    assert!(reason.contains("cache 3"), "{reason}");
    assert!(
        reason.contains("or 2 (one pass, the row in shared memory)"),
        "{reason}"
    );
    // 1024 values per thread on one thread per row; 256 on 4.
    let reason = invalid(&k, rows_with(point(1, 32, 4), 1, 0), sm80);
    assert!(reason.contains("1024 values per thread"), "{reason}");
    assert!(reason.contains("1024 of `x`"), "{reason}");
    assert_eq!(
        constraint(&k, rows_with(point(4, 8, 4), 1, 0)),
        Constraint::Registers
    );
    assert!(lower(&k, &rows_with(point(8, 4, 4), 1, 0), sm80).is_ok());
    // 1024 threads per block leave 64 registers a thread: 24 values.
    assert_eq!(
        constraint(&k, rows_with(point(32, 32, 1), 1, 0)),
        Constraint::Registers
    );
    assert!(lower(&k, &rows_with(point(64, 16, 1), 1, 0), sm80).is_ok());
    assert!(lower(&k, &rows_with(point(64, 1, 4), 1, 1), sm80).is_ok());
    let row_sum = parse_kernel(
        quote!(shape(R = 4, C = 64)),
        quote! {
            fn row_sum(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
                compute(|r| sum(C, |j| x[r][j]))
            }
        },
    )
    .expect("valid kernel");
    let reason = invalid(&row_sum, rows_with(point(32, 1, 1), 1, 0), sm80);
    assert!(reason.contains("keeps nothing"), "{reason}");
    let reason = invalid(&row_sum, rows_with(point(32, 1, 1), 2, 0), sm80);
    assert!(reason.contains("cache 2 keeps nothing"), "{reason}");
}

/// The values each global load of `l` moves, in order.
fn global_loads(l: &Lowered) -> Vec<usize> {
    l.global_accesses()
        .into_iter()
        .filter_map(|(load, n)| load.then_some(n))
        .collect()
}

#[test]
fn one_pass_reads_the_row_once() {
    let k = layernorm(10, 1024);
    // Two reductions and the outputs read `x`: three loops, the
    // variance's with two loads of it.
    let l = lower(&k, &point(128, 3, 4), SmVersion::Sm80).expect("lowers");
    assert_eq!(global_loads(&l), [4, 4, 4, 4]);
    // Kept: 1024 / 4 / 128 = 2 vector loads per thread, before any
    // reduction, and no loop.
    let l = lower(&k, &rows_with(point(128, 3, 4), 1, 0), SmVersion::Sm80).expect("lowers");
    assert_eq!(global_loads(&l), [4, 4]);
    let first_shuffle = l
        .ptx
        .body
        .iter()
        .position(|i| matches!(i.op, Op::Shfl { .. }))
        .expect("a shuffle");
    assert!(last_global_load(&l) < first_shuffle);
    assert_eq!(count(&l, |op| matches!(op, Op::Bra { .. })), 1);
    assert_eq!(count(&l, |op| matches!(op, Op::BarSync)), 2);

    // 1000 = 250 vectors over 128 threads: the second slot is partial,
    // its values drop out of the reductions (selected away) and its
    // stores are guarded.
    let k = layernorm(10, 1000);
    let l = lower(&k, &rows_with(point(128, 1, 4), 1, 0), SmVersion::Sm80).expect("lowers");
    assert_eq!(global_loads(&l), [4, 4]);
    assert_eq!(count(&l, |op| matches!(op, Op::Selp { .. })), 2 * 4);
    let guarded_stores = l
        .ptx
        .body
        .iter()
        .filter(|i| {
            i.guard.is_some()
                && matches!(
                    i.op,
                    Op::St {
                        space: Space::Global,
                        ..
                    }
                )
        })
        .count();
    assert_eq!(guarded_stores, 1);
}

fn loads(l: &Lowered, space: Space) -> Vec<usize> {
    l.ptx
        .body
        .iter()
        .filter_map(|i| match &i.op {
            Op::Ld { space: s, dsts, .. } if *s == space => Some(dsts.len()),
            _ => None,
        })
        .collect()
}

/// The shared stores of `l`: how many values each, and whether guarded.
fn shared_stores(l: &Lowered) -> Vec<(usize, bool)> {
    l.ptx
        .body
        .iter()
        .filter_map(|i| match &i.op {
            Op::St {
                space: Space::Shared,
                srcs,
                ..
            } => Some((srcs.len(), i.guard.is_some())),
            _ => None,
        })
        .collect()
}

/// The `cp.async` copies of `l`: bytes each, and whether guarded.
fn async_copies(l: &Lowered) -> Vec<(u32, bool)> {
    l.ptx
        .body
        .iter()
        .filter_map(|i| match &i.op {
            Op::CpAsync { bytes, .. } => Some((*bytes, i.guard.is_some())),
            _ => None,
        })
        .collect()
}

fn position(l: &Lowered, pred: impl Fn(&Op) -> bool) -> Option<usize> {
    l.ptx.body.iter().position(|i| pred(&i.op))
}

/// Where `l`'s last load from global memory is.
fn last_global_load(l: &Lowered) -> usize {
    l.ptx
        .body
        .iter()
        .rposition(|i| {
            matches!(
                i.op,
                Op::Ld {
                    space: Space::Global | Space::GlobalReadOnly,
                    ..
                }
            )
        })
        .expect("a load")
}

#[test]
fn a_row_in_shared_memory_is_read_from_global_memory_once() {
    let k = layernorm(10, 1024);
    let l = lower(&k, &rows_with(point(128, 3, 4), 2, 0), SmVersion::Sm80).expect("lowers");
    // The fill: 1024 / 4 / 128 = 2 chunks per thread, each one 16-byte
    // `cp.async`, in a loop that always has both in the row; nothing
    // else reads global memory.
    assert_eq!(async_copies(&l), [(16, false), (16, false)]);
    assert!(global_loads(&l).is_empty());
    // Each pass, the variance's too (two loads of `x`), reads the row
    // once from shared memory; the tree reads one slot per reduction.
    assert_eq!(loads(&l, Space::Shared), [4, 1, 4, 1, 4]);
    // Only the warp leaders' slots are stored.
    assert_eq!(shared_stores(&l), [(1, true), (1, true)]);
    // A thread waits for all its copies, then the block at a barrier,
    // before the first pass; then a barrier per reduction.
    assert_eq!(count(&l, |op| matches!(op, Op::BarSync)), 1 + 2);
    let wait = position(&l, |op| matches!(op, Op::CpAsyncWaitAll)).expect("a wait");
    let barrier = position(&l, |op| matches!(op, Op::BarSync)).expect("a barrier");
    let first_read = position(&l, |op| {
        matches!(
            op,
            Op::Ld {
                space: Space::Shared,
                ..
            }
        )
    })
    .expect("a shared load");
    assert_eq!(barrier, wait + 1);
    assert!(barrier < first_read);
    // The tree's two slot sets of 4 warps for 3 rows, then 3 rows of
    // 1024 values.
    assert_eq!(l.launch.dynamic_shared_bytes, 2 * 3 * 4 * 4 + 3 * 4096);
    assert_eq!(l.ptx.dynamic_shared_bytes, l.launch.dynamic_shared_bytes);
    assert_eq!(count(&l, |op| matches!(op, Op::Ret)), 1);

    // An odd row, one value at a time: 1025 values over 128 threads
    // are 9 chunks per thread, the 8 past the first guarded (the last
    // of them lies past the row for all lanes but one).
    let k = layernorm(10, 1025);
    let l = lower(&k, &rows_with(point(128, 2, 1), 2, 0), SmVersion::Sm80).expect("lowers");
    let fill: Vec<bool> = async_copies(&l).iter().map(|c| c.1).collect();
    assert_eq!(
        fill,
        [false, true, true, true, true, true, true, true, true]
    );
    assert!(async_copies(&l).iter().all(|c| c.0 == 4));
    assert_eq!(loads(&l, Space::Shared), [1; 5]);
    // Each row's 4100 bytes take 4112, so that the next row starts
    // 16-byte aligned.
    assert_eq!(l.launch.dynamic_shared_bytes, 2 * 2 * 4 * 4 + 2 * 4112);

    // 1000 = 250 vectors over 128 threads: the second chunk of the
    // fill is guarded; the passes loop over the 250 as without a
    // cache.
    let k = layernorm(10, 1000);
    let l = lower(&k, &rows_with(point(128, 1, 4), 2, 1), SmVersion::Sm90).expect("lowers");
    assert_eq!(async_copies(&l), [(16, false), (16, true)]);
    assert_eq!(
        loads(&l, Space::Shared).iter().filter(|n| **n == 4).count(),
        3
    );
    // A shared-memory tree: a barrier after the fill, then 1 + 7 per
    // reduction.
    assert_eq!(count(&l, |op| matches!(op, Op::BarSync)), 1 + 2 * (1 + 7));
    assert_eq!(l.launch.dynamic_shared_bytes, 2 * 128 * 4 + 4000);
}

#[test]
fn a_16_bit_row_is_widened_through_registers_into_shared_memory() {
    let k = layernorm_of(quote!(bf16), 10, 1024);
    let l = lower(&k, &rows_with(point(128, 3, 4), 2, 0), SmVersion::Sm90).expect("lowers");
    // No `cp.async`: the row is stored as f32. Both chunks are loaded
    // before either is stored, then the warp leaders' slots.
    assert_eq!(async_copies(&l), []);
    assert_eq!(count(&l, |op| matches!(op, Op::CpAsyncWaitAll)), 0);
    assert_eq!(global_loads(&l), [4, 4]);
    assert_eq!(
        shared_stores(&l),
        [(4, false), (4, false), (1, true), (1, true)]
    );
    let barrier = position(&l, |op| matches!(op, Op::BarSync)).expect("a barrier");
    assert!(last_global_load(&l) < barrier);
    assert_eq!(loads(&l, Space::Shared), [4, 1, 4, 1, 4]);
    assert_eq!(l.launch.dynamic_shared_bytes, 2 * 3 * 4 * 4 + 3 * 4096);
}

#[test]
fn a_row_in_shared_memory_must_fit_the_target() {
    // A row of 50257 f32 values: 201028 bytes, 201040 aligned.
    let k = layernorm(4, 50257);
    let one = rows_with(point(512, 1, 1), 2, 0);
    let l = lower(&k, &one, SmVersion::Sm90).expect("fits 227 KiB");
    assert_eq!(l.launch.dynamic_shared_bytes, 2 * 16 * 4 + 201_040);
    assert_eq!(async_copies(&l).len(), 16);
    for (s, target) in [
        (one, SmVersion::Sm86),
        (rows_with(point(512, 2, 1), 2, 0), SmVersion::Sm90),
    ] {
        match lower(&k, &s, target) {
            Err(LowerError::Invalid {
                constraint, reason, ..
            }) => {
                assert_eq!(constraint, Constraint::SharedMemory);
                assert!(reason.contains("bytes of shared memory"), "{reason}");
                let limit = target.limits().max_shared_per_block.to_string();
                assert!(reason.contains(&limit), "{reason}");
            }
            other => panic!("{s:?} should not fit {target}: {other:?}"),
        }
    }
}

#[test]
fn a_division_by_a_row_value_is_a_multiplication_by_its_reciprocal() {
    let k = parse_kernel(
        quote!(shape(R = 10, C = 1000)),
        quote! {
            fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                compute(|r, c| {
                    let mx = max(C, |j| x[r][j]);
                    let s = sum(C, |j| exp(x[r][j] - mx));
                    exp(x[r][c] - mx) / s / (x[r][c] + 2.0)
                })
            }
        },
    )
    .expect("valid kernel");
    let divisions = |l: &Lowered| -> Vec<usize> {
        l.ptx
            .body
            .iter()
            .enumerate()
            .filter(|(_, i)| {
                matches!(
                    i.op,
                    Op::Arith {
                        op: ArithOp::Div,
                        ..
                    }
                )
            })
            .map(|(at, _)| at)
            .collect()
    };
    let first_store = |l: &Lowered| {
        position(l, |op| {
            matches!(
                op,
                Op::St {
                    space: Space::Global,
                    ..
                }
            )
        })
        .expect("a store")
    };
    let reciprocals = |l: &Lowered| -> Vec<(usize, Reg)> {
        l.ptx
            .body
            .iter()
            .enumerate()
            .filter_map(|(at, i)| match i.op {
                Op::Unary {
                    op: UnaryOp::RcpApprox,
                    dst,
                    ..
                } => Some((at, dst)),
                _ => None,
            })
            .collect()
    };
    // Elements a thread evaluates in one stretch of code: a chunk of 4
    // in a loop, or with `cache = 1` its 2 slots of 4, unrolled.
    for (cache, elements) in [(0, 4), (1, 8), (2, 4)] {
        let l = lower(&k, &rows_with(point(128, 1, 4), cache, 0), SmVersion::Sm90).expect("lowers");
        // `1 / s` once, before the first store; the division by an
        // element's own value stays, once per element.
        let [(at, reciprocal)] = reciprocals(&l)[..] else {
            panic!("cache {cache}: not one reciprocal")
        };
        let divisions = divisions(&l);
        assert!(at < first_store(&l), "cache {cache}");
        assert!(divisions.iter().all(|d| *d > at), "cache {cache}");
        assert_eq!(divisions.len(), elements, "cache {cache}");
        let products = count(
            &l,
            |op| matches!(op, Op::Arith { op: ArithOp::Mul, b, .. } if *b == Operand::Reg(reciprocal)),
        );
        assert_eq!(products, elements, "cache {cache}");
    }
}

fn softmax(r: u32, c: u32) -> Kernel {
    parse_kernel(
        quote!(shape(R = #r, C = #c)),
        quote! {
            fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                compute(|r, c| {
                    let mx = max(C, |j| x[r][j]);
                    let s = sum(C, |j| exp(x[r][j] - mx));
                    exp(x[r][c] - mx) / s
                })
            }
        },
    )
    .expect("valid kernel")
}

fn online(s: Schedule) -> Schedule {
    match s {
        Schedule::Rows {
            threads_per_row,
            rows_per_block,
            vector,
            cache,
            tree,
            ..
        } => Schedule::Rows {
            threads_per_row,
            rows_per_block,
            vector,
            cache,
            tree,
            online: 1,
            cluster: 1,
        },
        other => other,
    }
}

#[test]
fn online_softmax_reads_the_row_twice() {
    let k = softmax(10, 1000);
    let exps = |l: &Lowered| {
        count(l, |op| {
            matches!(
                op,
                Op::Unary {
                    op: crate::ptx::inst::UnaryOp::Ex2,
                    ..
                }
            )
        })
    };
    let two_pass = lower(&k, &point(128, 1, 4), SmVersion::Sm90).expect("lowers");
    assert_eq!(global_loads(&two_pass), [4, 4, 4]);
    // The sum's 4 exponentials a chunk, the outputs' 4.
    assert_eq!(exps(&two_pass), 4 + 4);
    for tree in [0, 1] {
        let l = lower(
            &k,
            &online(rows_with(point(128, 1, 4), 0, tree)),
            SmVersion::Sm90,
        )
        .expect("lowers");
        // The maximum and the sum read a chunk once; the outputs again.
        assert_eq!(global_loads(&l), [4, 4]);
        // A chunk's 4 terms and its rescaling, the rescaling to the
        // row's maximum, the outputs' 4.
        assert_eq!(exps(&l), 4 + 1 + 1 + 4);
        // Still one combine per reduction: across warps, a barrier
        // each (shuffles) or one per level and one to start (a tree).
        let barriers = if tree == 0 { 2 } else { 2 * (1 + 7) };
        assert_eq!(count(&l, |op| matches!(op, Op::BarSync)), barriers);
    }
}

#[test]
fn a_mean_and_variance_read_the_row_once_together() {
    let k = layernorm(10, 1000);
    let two_pass = lower(&k, &point(128, 3, 4), SmVersion::Sm90).expect("lowers");
    // The mean, the variance (two loads of `x`), the outputs.
    assert_eq!(global_loads(&two_pass), [4, 4, 4, 4]);
    let l = lower(&k, &online(point(128, 3, 4)), SmVersion::Sm90).expect("lowers");
    // The thread's first chunk, for its shift; the pass; the outputs.
    assert_eq!(global_loads(&l), [4, 4, 4]);
    // Still one combine per reduction, a barrier each across warps.
    assert_eq!(count(&l, |op| matches!(op, Op::BarSync)), 2);
    // Per value: its difference from the shift, added to the sum and,
    // squared, to the sum of squares (one fused multiply-add).
    // Then `n·K + a`, `n·c + 2a` and `c·(n·c + 2a) + b`.
    let fmas = |l: &Lowered| count(l, |op| matches!(op, Op::Mad { ty: Ty::F32, .. }));
    assert_eq!(fmas(&l) - fmas(&two_pass), 4 + 3);
}

#[test]
fn online_needs_a_pair_and_a_row_read_per_pass() {
    let share = parse_kernel(
        quote!(shape(R = 4, C = 64)),
        quote! {
            fn share(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                compute(|r, c| x[r][c] / sum(C, |j| x[r][j]))
            }
        },
    )
    .expect("valid kernel");
    let reason = invalid(&share, online(point(32, 1, 1)), SmVersion::Sm90);
    assert!(reason.contains("online 1 pairs nothing"), "{reason}");
    for cache in [1, 2] {
        let s = online(rows_with(point(32, 1, 1), cache, 0));
        let reason = invalid(&softmax(4, 64), s, SmVersion::Sm90);
        assert!(reason.contains(&format!("with cache {cache}")), "{reason}");
    }
    let s = Class::Rows
        .schedule(&[32, 1, 1, 0, 0, 2, 1])
        .expect("seven knobs");
    let reason = invalid(&softmax(4, 64), s, SmVersion::Sm90);
    assert!(reason.contains("online 2; expected 0"), "{reason}");
}

#[test]
fn clusters_spread_rows_on_sm90_only() {
    let k = softmax(4, 4096);
    let spread = |cluster, cache| {
        Class::Rows
            .schedule(&[1024, 1, 4, cache, 0, 0, cluster])
            .expect("seven knobs")
    };
    for cluster in [3, 16] {
        let reason = invalid(&k, spread(cluster, 0), SmVersion::Sm90);
        assert!(
            reason.contains(&format!("cluster {cluster}; expected 1")),
            "{reason}"
        );
    }
    let reason = invalid(&k, spread(4, 0), SmVersion::Sm80);
    assert!(reason.contains("no thread-block clusters"), "{reason}");
    // Four blocks of 1,024 threads a row: a grid of four blocks a row,
    // a cluster the kernel requires, and one exchange per reduction.
    let lowered = lower(&k, &spread(4, 0), SmVersion::Sm90).expect("valid");
    assert_eq!(lowered.launch.grid, [16, 1, 1]);
    assert_eq!(lowered.ptx.cluster_blocks, 4);
    let waits = count(&lowered, |op| matches!(op, Op::ClusterWait));
    assert_eq!(waits, 3, "two reductions and the wait before the exit");
    let remote = count(&lowered, |op| {
        matches!(
            op,
            Op::Ld {
                space: Space::SharedCluster,
                ..
            }
        )
    });
    assert_eq!(
        remote, 2,
        "a block's value a thread, for each of two reductions"
    );
    let few = Class::Rows
        .schedule(&[4, 8, 1, 0, 0, 0, 8])
        .expect("seven knobs");
    let reason = invalid(&k, few, SmVersion::Sm90);
    assert!(reason.contains("must be at least as many"), "{reason}");
    // Kept in shared memory, each block keeps a quarter of the row.
    let whole = lower(&k, &spread(1, 2), SmVersion::Sm90).expect("valid");
    let quarter = lower(&k, &spread(4, 2), SmVersion::Sm90).expect("valid");
    let kept = |l: &Lowered, slots: u32| l.launch.dynamic_shared_bytes - slots;
    // The tree's 2 × 32 slots; with the cluster, 2 reductions' slots.
    assert_eq!(kept(&whole, 256), 4096 * 4);
    assert_eq!(kept(&quarter, 256 + 16), 1024 * 4);
}

#[test]
fn a_row_that_vector_does_not_divide_is_peeled() {
    // Rows of 1025: each pass reads its chunks four values at a time,
    // then its leftover positions one at a time.
    let k = softmax(10, 1025);
    let l = lower(&k, &point(128, 1, 4), SmVersion::Sm90).expect("lowers");
    let (load, store) = (true, false);
    assert_eq!(
        l.global_accesses(),
        [
            (load, 4),
            (load, 1),
            (load, 4),
            (load, 1),
            (load, 4),
            (store, 4),
            (load, 1),
            (store, 1)
        ]
    );
    let l = lower(&k, &online(point(128, 1, 2)), SmVersion::Sm90).expect("lowers");
    assert_eq!(
        l.global_accesses(),
        [
            (load, 2),
            (load, 1),
            (load, 2),
            (store, 2),
            (load, 1),
            (store, 1)
        ]
    );
    // The variance's shift is read from the thread's first chunk.
    let l = lower(
        &k_affine(3, 1025),
        &online(point(64, 1, 4)),
        SmVersion::Sm90,
    )
    .expect("lowers");
    // `g[c]` and `b[c]` start every row aligned, `x[r][·]` and the
    // output do not: the weights are read one value at a time (four
    // each per chunk of outputs).
    assert_eq!(
        l.global_accesses(),
        [
            (load, 4),
            (load, 4),
            (load, 1),
            (load, 4),
            (load, 1),
            (load, 1),
            (load, 1),
            (load, 1),
            (load, 1),
            (load, 1),
            (load, 1),
            (load, 1),
            (store, 4),
            (load, 1),
            (load, 1),
            (load, 1),
            (store, 1)
        ]
    );
    // A row that `vector` divides is not peeled: no leftovers.
    let l = lower(&softmax(10, 1024), &point(128, 1, 4), SmVersion::Sm90).expect("lowers");
    assert!(l.global_accesses().iter().all(|(_, n)| *n == 4));
}

/// Layernorm over rows of `c` with a weight and a bias.
fn k_affine(r: u32, c: u32) -> Kernel {
    parse_kernel(
        quote!(shape(R = #r, C = #c)),
        quote! {
            fn layernorm(x: Tensor<f32, (R, C)>, g: Tensor<f32, (C,)>, b: Tensor<f32, (C,)>)
                -> Tensor<f32, (R, C)>
            {
                compute(|r, c| {
                    let mu = mean(C, |j| x[r][j]);
                    let var = mean(C, |j| (x[r][j] - mu) * (x[r][j] - mu));
                    (x[r][c] - mu) * rsqrt(var + 0.00001) * g[c] + b[c]
                })
            }
        },
    )
    .expect("valid kernel")
}

#[test]
fn a_shared_tree_has_a_barrier_per_level() {
    let k = layernorm(10, 1024);
    let l = lower(&k, &rows_with(point(128, 3, 4), 0, 1), SmVersion::Sm90).expect("lowers");
    // Per reduction: a barrier after the writes and after each of the 7
    // levels of 128 threads.
    assert_eq!(count(&l, |op| matches!(op, Op::BarSync)), 2 * (1 + 7));
    assert_eq!(count(&l, |op| matches!(op, Op::Shfl { .. })), 0);
    assert_eq!(l.launch.dynamic_shared_bytes, 2 * 3 * 128 * 4);
    assert_eq!(count(&l, |op| matches!(op, Op::Ret)), 1);
}

#[test]
fn launch_and_collectives() {
    let k = layernorm(10, 1024);
    // Two reductions across 4 warps: one barrier each, two slot sets.
    let l = lower(&k, &point(128, 3, 4), SmVersion::Sm90).expect("lowers");
    assert_eq!(l.launch.grid, [4, 1, 1]);
    assert_eq!(l.launch.block, [384, 1, 1]);
    assert_eq!(l.launch.dynamic_shared_bytes, 2 * 3 * 4 * 4);
    assert_eq!(l.ptx.dynamic_shared_bytes, l.launch.dynamic_shared_bytes);
    assert_eq!(count(&l, |op| matches!(op, Op::BarSync)), 2);
    // 5 butterfly steps within a warp and 2 across the 4 warps, per reduction.
    assert_eq!(count(&l, |op| matches!(op, Op::Shfl { .. })), 2 * (5 + 2));
    // The only `ret` is the last instruction: no thread leaves before a
    // collective.
    assert_eq!(count(&l, |op| matches!(op, Op::Ret)), 1);
    assert!(matches!(l.ptx.body.last().map(|i| &i.op), Some(Op::Ret)));

    // Sub-warp groups of 8: three butterfly steps, no shared memory.
    let l = lower(&k, &point(8, 4, 1), SmVersion::Sm80).expect("lowers");
    assert_eq!(l.launch.grid, [3, 1, 1]);
    assert_eq!(l.launch.dynamic_shared_bytes, 0);
    assert_eq!(count(&l, |op| matches!(op, Op::BarSync)), 0);
    assert_eq!(count(&l, |op| matches!(op, Op::Shfl { .. })), 2 * 3);

    // One thread per row: no collective at all.
    let l = lower(&k, &point(1, 32, 1), SmVersion::Sm80).expect("lowers");
    assert_eq!(
        count(&l, |op| matches!(op, Op::Shfl { .. } | Op::BarSync)),
        0
    );
}

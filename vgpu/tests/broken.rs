//! Deliberately broken kernels the virtual GPU must catch: each takes a
//! correctly lowered kernel, breaks one instruction of its list the way a
//! code-generator bug would, and checks that the run stops with the right
//! fault (naming the kernel, block, thread and instruction) or, where the
//! bug only changes numbers, that verification reports the mismatch.

use ktune_core::DType;
use ktune_core::ir::Kernel;
use ktune_core::lower::{Lowered, lower};
use ktune_core::ptx::inst::{ArithOp, Cmp, Guard, Instr, Label, Op, Operand, ShflMode, Space, Ty};
use ktune_core::schedule::{MmaTiles, Schedule, Tiles};
use ktune_core::syntax::parse_kernel;
use ktune_core::target::SmVersion;
use ktune_vgpu::verify::{Failure, Reference, VerifyError};
use ktune_vgpu::{
    Access, BlockOrder, Config, Fault, FaultKind, FenceSide, Memory, first_poisoned, poisoned,
};
use quote::quote;

const TARGET: SmVersion = SmVersion::Sm80;

fn softmax(r: u32, c: u32) -> Kernel {
    parse_kernel(
        quote!(shape(R = #r, C = #c)),
        quote! {
            fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                compute(|r, c| {
                    let mx = max(C, |j| x[r][j]);
                    exp(x[r][c] - mx) / sum(C, |j| exp(x[r][j] - mx))
                })
            }
        },
    )
    .expect("valid kernel")
}

fn lowered(kernel: &Kernel, schedule: &Schedule) -> Lowered {
    lower(kernel, schedule, TARGET).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a (broken) lowered kernel on the reference's inputs and returns the
/// fault it must raise.
fn fault_of(kernel: &Kernel, schedule: &Schedule, broken: &Lowered) -> Fault {
    let reference = Reference::new(kernel, 1);
    match reference.check_lowered(schedule, TARGET, broken) {
        Err(e) => match e.kind {
            Failure::Fault(fault) => *fault,
            other => panic!("expected a fault, got {other:?}"),
        },
        Ok(v) => panic!("the broken kernel passed: {v:?}"),
    }
}

/// The message names the kernel, block, thread and the instruction.
fn assert_names_everything(fault: &Fault, kernel: &Kernel) {
    let message = fault.to_string();
    println!("{message}");
    assert!(
        message.contains(&format!("kernel `ktune_{}`", kernel.name)),
        "{message}"
    );
    assert!(message.contains("block ("), "{message}");
    assert!(message.contains("thread ("), "{message}");
    assert!(!fault.instruction.is_empty(), "{message}");
    assert!(message.contains(&fault.instruction), "{message}");
}

fn rows(threads_per_row: u32) -> Schedule {
    Schedule::Rows {
        threads_per_row,
        rows_per_block: 1,
        vector: 1,
        cache: 0,
        tree: 0,
        online: 0,
        cluster: 1,
    }
}

#[test]
fn a_removed_barrier_is_a_shared_memory_race() {
    let kernel = softmax(3, 200);
    let schedule = rows(64);
    let mut broken = lowered(&kernel, &schedule);
    let before = broken.ptx.body.len();
    broken.ptx.body.retain(|i| i.op != Op::BarSync);
    assert!(broken.ptx.body.len() < before, "no bar.sync to remove");
    let fault = fault_of(&kernel, &schedule, &broken);
    assert_names_everything(&fault, &kernel);
    // Without the barrier, the lane that reads the other warp's slot back
    // waits for that slot to be written (the interpreter defers a load of
    // an unwritten shared byte until the other threads reach their next
    // barrier); the other warp's leader then writes it with no barrier in
    // between: a write-then-read race across threads, not an uninitialised
    // read.
    match fault.kind {
        FaultKind::SharedRace {
            first_was_write,
            second_is_write,
            first_thread,
            ..
        } => {
            assert!(first_was_write && !second_is_write, "{fault}");
            assert_ne!(first_thread, fault.thread);
        }
        _ => panic!("expected a shared-memory race: {fault}"),
    }
    assert!(fault.instruction.starts_with("ld.shared"), "{fault}");
}

/// In a shared-memory tree (`tree = 1`) each level reads slots the level
/// before wrote, with a barrier between; without one, the read meets the
/// other thread's write.
#[test]
fn a_missing_barrier_between_shared_tree_levels_is_a_race() {
    let kernel = softmax(3, 200);
    let schedule = Schedule::Rows {
        threads_per_row: 128,
        rows_per_block: 1,
        vector: 1,
        cache: 1,
        tree: 1,
        online: 0,
        cluster: 1,
    };
    let mut broken = lowered(&kernel, &schedule);
    // The max's tree: a barrier after the writes, then one per level (64,
    // 32, …, 1). Remove the one between levels 64 and 32.
    let barriers: Vec<usize> = broken
        .ptx
        .body
        .iter()
        .enumerate()
        .filter(|(_, i)| i.op == Op::BarSync)
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        barriers.len(),
        2 * (1 + 7),
        "two reductions over 128 threads"
    );
    broken.ptx.body.remove(barriers[1]);
    let fault = fault_of(&kernel, &schedule, &broken);
    assert_names_everything(&fault, &kernel);
    // Slot 32 (byte 128 of the window): level 64 has thread 32 write it,
    // level 32 has thread 0 read it; which comes first is the scheduler's
    // choice, the race is the same.
    match fault.kind {
        FaultKind::SharedRace {
            offset,
            first_was_write,
            second_is_write,
            first_thread,
            ..
        } => {
            assert_eq!(offset, 128, "{fault}");
            assert_ne!(first_was_write, second_is_write, "{fault}");
            let mut threads = [first_thread[0], fault.thread[0]];
            threads.sort_unstable();
            assert_eq!(threads, [0, 32], "{fault}");
        }
        _ => panic!("expected a shared-memory race: {fault}"),
    }
    assert!(fault.to_string().contains("shared-memory race"), "{fault}");
    assert!(fault.to_string().contains("no bar.sync between"), "{fault}");
    assert!(fault.instruction.contains(".shared"), "{fault}");
}

/// A row kept in shared memory (`cache = 2`) is filled by each thread in
/// chunks of `vector`, then read by the outputs one element per thread
/// when the output's innermost variable is not the row's (a transposed
/// output): without the barrier after the fill, a thread reads an element
/// another thread writes in the same barrier interval.
#[test]
fn a_shared_row_read_without_the_fill_barrier_is_a_race() {
    let kernel = parse_kernel(
        quote!(shape(R = 3, C = 64)),
        quote! {
            fn rms_transposed(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C, R)> {
                compute(|c, r| {
                    let ms = mean(C, |j| x[r][j] * x[r][j]);
                    x[r][c] * rsqrt(ms + 0.000001)
                })
            }
        },
    )
    .expect("valid kernel");
    // Two rows of 16 threads a block: shuffles only, so the fill's is the
    // one barrier.
    let schedule = Schedule::Rows {
        threads_per_row: 16,
        rows_per_block: 2,
        vector: 4,
        cache: 2,
        tree: 0,
        online: 0,
        cluster: 1,
    };
    let mut broken = lowered(&kernel, &schedule);
    Reference::new(&kernel, 1)
        .check_lowered(&schedule, TARGET, &broken)
        .expect("with its barrier, the kernel verifies");
    let barriers = broken
        .ptx
        .body
        .iter()
        .filter(|i| i.op == Op::BarSync)
        .count();
    assert_eq!(barriers, 1, "the fill's barrier only");
    broken.ptx.body.retain(|i| i.op != Op::BarSync);
    let fault = fault_of(&kernel, &schedule, &broken);
    assert_names_everything(&fault, &kernel);
    match fault.kind {
        FaultKind::SharedRace {
            first_was_write,
            second_is_write,
            first_thread,
            ..
        } => {
            assert!(first_was_write && !second_is_write, "{fault}");
            assert_ne!(first_thread, fault.thread, "{fault}");
        }
        _ => panic!("expected a shared-memory race: {fault}"),
    }
    assert!(fault.instruction.starts_with("ld.shared"), "{fault}");
}

#[test]
fn an_off_by_one_bound_stores_out_of_bounds() {
    let kernel = parse_kernel(
        quote!(shape(R = 3, C = 5)),
        quote! {
            fn bias_rows(b: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
                compute(|r, c| b[c] * 2.0)
            }
        },
    )
    .expect("valid kernel");
    let schedule = Schedule::Generic { block: 32 };
    let mut broken = lowered(&kernel, &schedule);
    let total = 15;
    let bound = broken
        .ptx
        .body
        .iter_mut()
        .find_map(|i| match &mut i.op {
            Op::Setp {
                cmp: Cmp::Ge,
                b: b @ Operand::Int(15),
                ..
            } => Some(b),
            _ => None,
        })
        .expect("the bounds check against the element count");
    *bound = Operand::Int(total + 1);
    let fault = fault_of(&kernel, &schedule, &broken);
    assert_names_everything(&fault, &kernel);
    match fault.kind {
        FaultKind::OutOfBounds {
            space: Space::Global,
            access: Access::Store,
            param: Some(1),
            offset,
            limit,
            ..
        } => {
            assert_eq!(offset, 60, "{fault}");
            assert_eq!(limit, 60, "{fault}");
        }
        _ => panic!("expected an out-of-bounds store to the output: {fault}"),
    }
    assert_eq!(fault.thread, [15, 0, 0]);
    assert!(fault.instruction.starts_with("st.global"), "{fault}");
    assert!(fault.to_string().contains("param_1"), "{fault}");
}

#[test]
fn a_wrong_shuffle_lane_gives_a_wrong_sum() {
    let kernel = parse_kernel(
        quote!(shape(R = 5, C = 96)),
        quote! {
            fn row_sum(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
                compute(|r| sum(C, |j| x[r][j]))
            }
        },
    )
    .expect("valid kernel");
    let schedule = rows(32);
    let reference = Reference::new(&kernel, 3);
    let good = lowered(&kernel, &schedule);
    reference
        .check_lowered(&schedule, TARGET, &good)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut broken = good;
    let lane = broken
        .ptx
        .body
        .iter_mut()
        .find_map(|i| match &mut i.op {
            Op::Shfl {
                mode: ShflMode::Bfly,
                lane: lane @ Operand::Int(1),
                ..
            } => Some(lane),
            _ => None,
        })
        .expect("the last butterfly step");
    // Lane mask 0: every lane adds its own value instead of its neighbour's.
    *lane = Operand::Int(0);
    let error = assert_mismatch(
        &reference,
        &schedule,
        &broken,
        "a wrong lane must not verify",
    );
    let message = error.to_string();
    assert!(
        message.contains("kernel `row_sum` (R = 5, C = 96)"),
        "{message}"
    );
    assert!(message.contains(&schedule.to_json()), "{message}");
    assert!(message.contains("sm_80"), "{message}");
}

#[test]
fn a_barrier_inside_a_branch_is_a_divergent_barrier() {
    let kernel = softmax(2, 128);
    let schedule = rows(64);
    let mut broken = lowered(&kernel, &schedule);
    let body = &mut broken.ptx.body;
    let bars: Vec<usize> = body
        .iter()
        .enumerate()
        .filter(|(_, i)| i.op == Op::BarSync)
        .map(|(pc, _)| pc)
        .collect();
    assert_eq!(bars.len(), 2, "one barrier per reduction");
    // The warp leaders' guarded store of their slot comes right before the
    // first barrier. Branch the other threads from there to the second
    // barrier, so that the first one sits inside a branch only the leaders
    // take: `if (lane == 0) { slot = acc; __syncthreads(); … }`.
    let leader = body[..bars[0]]
        .iter()
        .rev()
        .find_map(|i| match (&i.op, i.guard) {
            (
                Op::St {
                    space: Space::Shared,
                    ..
                },
                Some(g),
            ) => Some(g.pred),
            _ => None,
        })
        .expect("the warp leader's store");
    let skip = Label(
        body.iter()
            .filter_map(|i| match i.op {
                Op::Label(Label(l)) => Some(l),
                _ => None,
            })
            .max()
            .map_or(0, |l| l + 1),
    );
    body.insert(
        bars[1],
        Instr {
            guard: None,
            op: Op::Label(skip),
        },
    );
    body.insert(
        bars[0],
        Instr {
            guard: Some(Guard {
                pred: leader,
                negate: true,
            }),
            op: Op::Bra { target: skip },
        },
    );
    let fault = fault_of(&kernel, &schedule, &broken);
    assert_names_everything(&fault, &kernel);
    match fault.kind {
        FaultKind::BarrierDivergence { other_pc, .. } => {
            assert_eq!(broken.ptx.body[fault.pc].op, Op::BarSync, "{fault}");
            assert_eq!(broken.ptx.body[other_pc].op, Op::BarSync, "{fault}");
            assert_ne!(fault.pc, other_pc, "{fault}");
        }
        _ => panic!("expected divergent barriers: {fault}"),
    }
    assert!(fault.instruction.starts_with("bar.sync"), "{fault}");
}

#[test]
fn a_matmul_tile_load_without_its_k_guard_reads_out_of_bounds() {
    let kernel = parse_kernel(
        quote!(shape(M = 32, N = 32, K = 13)),
        quote! {
            fn mm(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
                compute(|m, n| sum(K, |k| x[m][k] * w[k][n]))
            }
        },
    )
    .expect("valid kernel");
    let schedule = Schedule::Matmul(Tiles {
        block_m: 32,
        block_n: 32,
        block_k: 8,
        thread_m: 2,
        thread_n: 2,
        vector_a: 1,
        vector_b: 1,
        group_m: 1,
        stages: 1,
        split_k: 1,
    });
    let mut broken = lowered(&kernel, &schedule);
    let mut removed = 0;
    for i in &mut broken.ptx.body {
        if matches!(
            i.op,
            Op::Ld {
                space: Space::Global,
                ..
            }
        ) && i.guard.is_some()
        {
            i.guard = None;
            removed += 1;
        }
    }
    assert!(removed > 0, "no guarded tile load");
    let fault = fault_of(&kernel, &schedule, &broken);
    assert_names_everything(&fault, &kernel);
    match fault.kind {
        FaultKind::OutOfBounds {
            space: Space::Global,
            access: Access::Load,
            param: Some(p),
            ..
        } => assert!(p < 2, "{fault}"),
        _ => panic!("expected an out-of-bounds tile load: {fault}"),
    }
    assert!(fault.instruction.starts_with("ld.global"), "{fault}");
}

#[test]
fn a_grouped_walk_that_forgets_its_partial_last_group_leaves_tiles_unwritten() {
    // 129 rows are 9 block rows of 16: a group of 8, then a group of 1.
    let kernel = parse_kernel(
        quote!(shape(M = 129, N = 40, K = 8)),
        quote! {
            fn mm(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
                compute(|m, n| sum(K, |k| x[m][k] * w[k][n]))
            }
        },
    )
    .expect("valid kernel");
    let schedule = Schedule::Matmul(Tiles {
        block_m: 16,
        block_n: 16,
        block_k: 8,
        thread_m: 2,
        thread_n: 2,
        vector_a: 1,
        vector_b: 1,
        group_m: 8,
        stages: 1,
        split_k: 1,
    });
    let reference = Reference::new(&kernel, 3);
    let good = lowered(&kernel, &schedule);
    reference
        .check_lowered(&schedule, TARGET, &good)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut broken = good;
    let rows = broken
        .ptx
        .body
        .iter_mut()
        .find_map(|i| match &mut i.op {
            Op::Arith {
                op: ArithOp::Min,
                a,
                b: Operand::Int(8),
                ..
            } => Some(a),
            _ => None,
        })
        .expect("the last group's row count");
    // Every group taken as 8 rows tall: the last one walks rows past `M`
    // and skips the columns beyond its first.
    *rows = Operand::Int(8);
    let error = reference
        .check_lowered(&schedule, TARGET, &broken)
        .expect_err("a wrong group remap must not verify");
    println!("{error}");
    match error.kind {
        Failure::Unwritten { index } => assert!(index >= 128 * 40, "{error}"),
        other => panic!("expected an unwritten output, got {other:?}"),
    }
}

#[test]
fn a_pipelined_matmul_without_its_wait_group_reads_an_in_flight_copy() {
    // K = 40 is five tiles of 8 through a ring of three slots.
    let kernel = parse_kernel(
        quote!(shape(M = 33, N = 32, K = 40)),
        quote! {
            fn mm(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
                compute(|m, n| sum(K, |k| x[m][k] * w[k][n]))
            }
        },
    )
    .expect("valid kernel");
    let schedule = Schedule::Matmul(Tiles {
        block_m: 32,
        block_n: 32,
        block_k: 8,
        thread_m: 2,
        thread_n: 2,
        vector_a: 4,
        vector_b: 4,
        group_m: 1,
        stages: 3,
        split_k: 1,
    });
    let good = lowered(&kernel, &schedule);
    Reference::new(&kernel, 1)
        .check_lowered(&schedule, TARGET, &good)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut broken = good;
    let before = broken.ptx.body.len();
    broken
        .ptx
        .body
        .retain(|i| !matches!(i.op, Op::CpAsyncWait { .. }));
    assert_eq!(broken.ptx.body.len() + 1, before, "one cp.async.wait_group");
    let fault = fault_of(&kernel, &schedule, &broken);
    assert_names_everything(&fault, &kernel);
    match fault.kind {
        FaultKind::AsyncCopyPending {
            access: Access::Load,
            copy_pc,
            ..
        } => assert!(
            matches!(broken.ptx.body[copy_pc].op, Op::CpAsync { .. }),
            "{fault}"
        ),
        _ => panic!("expected a read of an in-flight cp.async: {fault}"),
    }
    assert!(fault.instruction.starts_with("ld.shared"), "{fault}");
    assert!(fault.to_string().contains("cp.async.wait_group"), "{fault}");
}

fn tf32_gemm(m: u32, n: u32, k: u32, allow_tf32: bool) -> Kernel {
    let kernel = parse_kernel(
        quote!(shape(M = #m, N = #n, K = #k), allow_tf32),
        quote! {
            fn mm(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
                compute(|m, n| sum(K, |k| x[m][k] * w[k][n]))
            }
        },
    )
    .expect("valid kernel");
    Kernel {
        allow_tf32,
        ..kernel
    }
}

fn tf32_tiles() -> Schedule {
    Schedule::Mma(MmaTiles {
        block_m: 32,
        block_n: 32,
        block_k: 16,
        warp_m: 16,
        warp_n: 16,
        stages: 2,
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
    })
}

#[test]
fn a_tf32_fragment_word_read_from_the_wrong_row_gives_wrong_products() {
    let kernel = tf32_gemm(33, 40, 36, true);
    let schedule = tf32_tiles();
    let reference = Reference::new(&kernel, 5);
    let good = lowered(&kernel, &schedule);
    reference
        .check_lowered(&schedule, TARGET, &good)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut broken = good;
    // The second word of the first A fragment holds row g + 8: read row g
    // again, as an emitter with the wrong register-to-row map would.
    let mut shared_f32 = broken.ptx.body.iter_mut().filter_map(|i| match &mut i.op {
        Op::Ld {
            space: Space::Shared,
            addr,
            ..
        } => Some(addr),
        _ => None,
    });
    let first = shared_f32.next().expect("a fragment read").offset;
    let second = shared_f32.next().expect("a second fragment read");
    assert_ne!(second.offset, first);
    second.offset = first;
    assert_mismatch(
        &reference,
        &schedule,
        &broken,
        "a wrong fragment row must not verify",
    );
}

/// The tf32 allowance is needed and is the only slack: the same tensor-core
/// kernel checked against the exact kernel's reference (same inputs, no
/// `allow_tf32`) is out of tolerance, and against its own within it.
#[test]
fn tf32_products_differ_from_exact_ones_by_more_than_f32_rounding() {
    let schedule = tf32_tiles();
    let tf32 = tf32_gemm(64, 64, 64, true);
    let exact = tf32_gemm(64, 64, 64, false);
    let lowered = lowered(&tf32, &schedule);
    let (rounded, exact) = (Reference::new(&tf32, 9), Reference::new(&exact, 9));
    // The GPU gets the same inputs, as drawn, whichever the reference.
    assert_eq!(rounded.buffers(), exact.buffers());
    let verified = rounded
        .check_lowered(&schedule, TARGET, &lowered)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(verified.max_error > 0.0);
    let error = exact
        .check_lowered(&schedule, TARGET, &lowered)
        .expect_err("tf32 products are not exact f32 ones");
    assert!(matches!(error.kind, Failure::Mismatch { .. }), "{error}");
}

/// `gelu(x·w + bias)` over `K = 97`: 13 tiles of 8 in four slices (4, 4,
/// 4 and 1 tiles), two output tiles of 8 × 32.
fn split_k_case() -> (Kernel, Schedule) {
    let kernel = parse_kernel(
        quote!(shape(M = 5, N = 33, K = 97)),
        quote! {
            fn mm(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>, bias: Tensor<f32, (N,)>)
                -> Tensor<f32, (M, N)>
            {
                compute(|m, n| gelu(sum(K, |k| x[m][k] * w[k][n]) + bias[n]))
            }
        },
    )
    .expect("valid kernel");
    let schedule = Schedule::Matmul(Tiles {
        block_m: 8,
        block_n: 32,
        block_k: 8,
        thread_m: 1,
        thread_n: 2,
        vector_a: 1,
        vector_b: 1,
        group_m: 1,
        stages: 1,
        split_k: 4,
    });
    (kernel, schedule)
}

/// The split-K kernel, checked correct before it is broken.
fn good_split_k(kernel: &Kernel, schedule: &Schedule, reference: &Reference) -> Lowered {
    let good = lowered(kernel, schedule);
    assert_eq!(good.launch.grid, [2, 4, 1]);
    reference
        .check_lowered(schedule, TARGET, &good)
        .unwrap_or_else(|e| panic!("{e}"));
    good
}

#[test]
fn a_split_k_kernel_where_every_block_writes_the_output_races() {
    let (kernel, schedule) = split_k_case();
    let reference = Reference::new(&kernel, 5);
    let mut broken = good_split_k(&kernel, &schedule, &reference);
    // The flag says whether the block arrived last; drop the branch that
    // sends the others away, and every block adds up and stores.
    let flag = broken
        .ptx
        .body
        .iter()
        .position(|i| {
            matches!(
                i.op,
                Op::Ld {
                    space: Space::Shared,
                    ty: Ty::U32,
                    ..
                }
            )
        })
        .expect("the last-arrival flag");
    let exit = flag
        + broken.ptx.body[flag..]
            .iter()
            .position(|i| matches!(i.op, Op::Bra { .. }))
            .expect("the branch of blocks that are not last");
    broken.ptx.body.remove(exit);
    let fault = fault_of(&kernel, &schedule, &broken);
    assert_names_everything(&fault, &kernel);
    match fault.kind {
        FaultKind::GlobalRace { param: 3, .. } => {}
        _ => panic!("expected two blocks storing one output: {fault}"),
    }
    // The store, guarded by its column's bound.
    let store = fault
        .instruction
        .split_once(' ')
        .filter(|(guard, _)| guard.starts_with('@'))
        .map_or(fault.instruction.as_str(), |(_, op)| op);
    assert!(store.starts_with("st.global"), "{fault}");
    assert!(
        fault.to_string().contains("blocks race on global memory"),
        "{fault}"
    );
}

#[test]
fn a_split_k_kernel_that_never_resets_its_counters_fails_its_second_launch() {
    let (kernel, schedule) = split_k_case();
    let reference = Reference::new(&kernel, 6);
    let good = good_split_k(&kernel, &schedule, &reference);
    let launch_twice = |lowered: &Lowered, orders: [BlockOrder; 2]| {
        let mut buffers = reference.buffers().to_vec();
        buffers.push(Vec::new());
        buffers.push(ktune_vgpu::workspace(&lowered.launch));
        let mut memory = Memory::new(buffers);
        orders.map(|order| {
            let output = reference.output().len();
            *memory.buffer_mut(output_param(&kernel)) = poisoned(DType::F32, output);
            let config = Config::default().block_order(order);
            ktune_vgpu::run_with(&lowered.ptx, &lowered.launch, &mut memory, &config)
                .unwrap_or_else(|f| panic!("{f}"));
            memory.buffer(output_param(&kernel)).to_vec()
        })
    };
    // One workspace serves launch after launch, in any block order, and
    // the sum does not depend on which block arrives last.
    let [first, second] = launch_twice(&good, [BlockOrder::Index, BlockOrder::Shuffled(9)]);
    assert_eq!(first_poisoned(DType::F32, &first), None);
    assert_eq!(first, second, "the same bits whichever block is last");

    let mut broken = good;
    let before = broken.ptx.body.len();
    broken.ptx.body.retain(|i| {
        !matches!(
            &i.op,
            Op::St {
                space: Space::Global,
                ty: Ty::U32,
                srcs,
                ..
            } if srcs[..] == [Operand::Int(0)]
        )
    });
    assert_eq!(broken.ptx.body.len() + 1, before, "one counter reset");
    let [first, second] = launch_twice(&broken, [BlockOrder::Index; 2]);
    assert_eq!(
        first,
        launch_twice(&lowered(&kernel, &schedule), [BlockOrder::Index; 2])[0]
    );
    // The counters start the second launch at 4: no block is ever last.
    assert_eq!(first_poisoned(DType::F32, &second), Some(0));
}

#[test]
fn a_split_k_kernel_whose_last_block_sums_only_its_own_slice_is_wrong() {
    let (kernel, schedule) = split_k_case();
    let reference = Reference::new(&kernel, 7);
    let mut broken = good_split_k(&kernel, &schedule, &reference);
    // After the second fence the last block zeroes its accumulators and
    // adds every slice to them; without that it keeps its own.
    let fences = split_k_fences(&broken);
    let last_load = broken
        .ptx
        .body
        .iter()
        .rposition(|i| matches!(i.op, Op::LdGlobalCg { .. }))
        .expect("the sum's loads");
    let back_edge = last_load
        + broken.ptx.body[last_load..]
            .iter()
            .position(|i| matches!(i.op, Op::Bra { .. }))
            .expect("the loop over slices");
    broken.ptx.body.drain(fences[1] + 1..=back_edge);
    assert_mismatch(&reference, &schedule, &broken, "one slice is not the sum");
}

/// Where the split-K kernel's two fences are: after each block's partial
/// store, and after the last block's atomic.
fn split_k_fences(lowered: &Lowered) -> [usize; 2] {
    let fences: Vec<usize> = lowered
        .ptx
        .body
        .iter()
        .enumerate()
        .filter(|(_, i)| i.op == Op::Fence)
        .map(|(at, _)| at)
        .collect();
    fences
        .try_into()
        .unwrap_or_else(|f| panic!("a fence before the arrival, one after: {f:?}"))
}

/// The split-K kernel without one of its two fences: the one after each
/// block's partial store (`first`), or the last block's after its atomic.
fn split_k_without_fence(first: bool) -> (Kernel, Fault) {
    let (kernel, schedule) = split_k_case();
    let reference = Reference::new(&kernel, 8);
    let mut broken = good_split_k(&kernel, &schedule, &reference);
    let fences = split_k_fences(&broken);
    broken.ptx.body.remove(fences[usize::from(!first)]);
    let fault = fault_of(&kernel, &schedule, &broken);
    assert_names_everything(&fault, &kernel);
    assert!(
        fault.instruction.starts_with("ld.global.cg"),
        "the last block's sum loads: {fault}"
    );
    (kernel, fault)
}

#[test]
fn a_split_k_kernel_without_its_release_fence_loads_unordered_partials() {
    let (_, fault) = split_k_without_fence(true);
    match fault.kind {
        FaultKind::UnorderedLoad {
            param: 4,
            missing: FenceSide::Release,
            ..
        } => {}
        _ => panic!("expected a load not ordered after another block's store: {fault}"),
    }
    assert!(
        fault
            .to_string()
            .contains("without a fence after the store"),
        "{fault}"
    );
}

#[test]
fn a_split_k_kernel_without_its_acquire_fence_loads_unordered_partials() {
    let (_, fault) = split_k_without_fence(false);
    match fault.kind {
        FaultKind::UnorderedLoad {
            param: 4,
            missing: FenceSide::Acquire,
            ..
        } => {}
        _ => panic!("expected a load not ordered after this block's atomic: {fault}"),
    }
    assert!(
        fault
            .to_string()
            .contains("between this block's atomic and the load"),
        "{fault}"
    );
}

/// Checks that `broken` verifies with a wrong element (beyond tolerance),
/// not a fault or an unwritten one, and returns the error; `why` says why
/// it must not verify.
fn assert_mismatch(
    reference: &Reference,
    schedule: &Schedule,
    broken: &Lowered,
    why: &str,
) -> VerifyError {
    let error = reference
        .check_lowered(schedule, TARGET, broken)
        .expect_err(why);
    println!("{error}");
    match error.kind {
        Failure::Mismatch {
            got,
            want,
            tolerance,
            ..
        } => assert!((got - want).abs() > tolerance, "{error}"),
        other => panic!("{why}: expected a mismatch, got {other:?}"),
    }
    error
}

/// The output's parameter: after the inputs.
fn output_param(kernel: &Kernel) -> usize {
    kernel.inputs.len()
}

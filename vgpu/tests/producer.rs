//! Warp-specialized warpgroup blocks (`producer = 1`) on the virtual GPU:
//! a producer warpgroup copies every fill of the ring, the others
//! multiply, handing slots over by memory barriers; and ping-pong
//! (`producer = 2`), two sets of them taking tiles in turn. Checked against the
//! CPU reference with edges along `M`, `N` and `K`, rings of 2 to 4 slots
//! (a held slot included), one, two and four consumer warpgroups, a `K`
//! of one tile, an `M` shallower than a pass of the producer's copies, a grouped walk, a batch with a fused epilogue, a block per tile
//! and persistent blocks, copies by `cp.async` and by tensor maps
//! (`tma = 1`); and the points it cannot run rejected by their
//! constraint.

mod common;

use common::{batched_bias_gelu, gemm};
use ktune_core::lower::{Constraint, LowerError, lower, validate};
use ktune_core::ptx::inst::{Op, Reg, RegClass};
use ktune_core::schedule::{MmaTiles, Schedule};
use ktune_core::target::SmVersion;
use ktune_vgpu::verify::Reference;
use ktune_vgpu::{Config, poisoned, run_bytes_with};

fn tiles((block_m, block_n, block_k): (u32, u32, u32), warp_n: u32, stages: u32) -> MmaTiles {
    MmaTiles {
        block_m,
        block_n,
        block_k,
        warp_m: 64,
        warp_n,
        stages,
        group_m: 1,
        split_k: 1,
        min_blocks: 1,
        swizzle: 1,
        prefetch: 0,
        wgmma: 1,
        tail_split: 1,
        persistent: 0,
        producer: 1,
        tma: 0,
        cluster_m: 1,
    }
}

/// Verifies `t` against `reference` and checks that its blocks have a
/// warpgroup more than its tiles ask for, and that the launch states each
/// thread's registers where the consumers take the producer's (so that
/// the virtual GPU keeps the block's register pool); returns the bytes
/// its copies read from global memory.
fn check(reference: &Reference, t: MmaTiles) -> u64 {
    let schedule = Schedule::Mma(t);
    let what = format!("{t:?}");
    let lowered = lower(reference.kernel(), &schedule, SmVersion::Sm90)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let consumers = (t.block_m / t.warp_m) * (t.block_n / t.warp_n) * t.consumer_sets();
    assert_eq!(
        lowered.launch.block,
        [128 * (consumers + 1), 1, 1],
        "{what}"
    );
    assert_eq!(lowered.ptx.min_blocks_per_sm, 1, "{what}");
    let share = match consumers {
        1 => 0,
        2 => 168,
        4 => 96,
        other => panic!("{what}: no share known for {other} consumer warpgroups"),
    };
    assert_eq!(lowered.launch.registers, share, "{what}");
    let verified = reference
        .check(&schedule, SmVersion::Sm90)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(verified.stats.mma_flops > 0, "{what}");
    verified.stats.global_load_bytes
}

#[test]
fn a_producer_warpgroup_feeds_the_others() {
    // 12 × 12 tiles of 64 × 16, the last row and column partial; K's 6
    // tiles of 16, the last partial.
    for (a_t, b_t) in [(false, false), (true, true)] {
        let reference = Reference::new(&gemm("bf16", a_t, b_t, (760, 184, 88)), 7);
        for stages in 2..=4 {
            for persistent in [0, 1] {
                check(
                    &reference,
                    MmaTiles {
                        persistent,
                        ..tiles((64, 16, 16), 16, stages)
                    },
                );
            }
        }
    }
    // Two and four consumer warpgroups, K shallower than the ring (2
    // tiles of 64 in 4 slots) or a single tile; rows walked in groups of 4.
    let reference = Reference::new(&gemm("f16", false, true, (1000, 280, 72)), 7);
    check(&reference, tiles((128, 16, 64), 16, 4));
    check(&reference, tiles((128, 32, 64), 16, 3));
    let single = Reference::new(&gemm("bf16", false, false, (760, 184, 40)), 7);
    for stages in 2..=4 {
        for persistent in [0, 1] {
            check(
                &single,
                MmaTiles {
                    persistent,
                    ..tiles((64, 16, 64), 16, stages)
                },
            );
        }
    }
    // M of 5 rows, fewer than a pass's 16: the producer's later passes
    // read no row at all (141 tiles along N, more than the SMs).
    let decode = Reference::new(&gemm("bf16", false, false, (5, 2248, 88)), 7);
    for persistent in [0, 1] {
        let read = check(
            &decode,
            MmaTiles {
                persistent,
                ..tiles((64, 16, 64), 16, 3)
            },
        );
        // Each of the 141 column tiles reads A's 5 rows, and B once:
        // nothing of the rows past M.
        assert_eq!(read, 141 * 5 * 88 * 2 + 88 * 2248 * 2);
    }
    let grouped = MmaTiles {
        group_m: 4,
        persistent: 1,
        ..tiles((64, 32, 32), 32, 3)
    };
    check(&reference, grouped);
}

/// Ping-pong (`producer = 2`): two sets of warpgroups take a persistent
/// block's tiles in turn, each passing over the other's fills of the
/// ring; the second set of a block with one tile has none.
#[test]
fn two_sets_of_consumers_take_the_tiles_in_turn() {
    let pong = |t: MmaTiles| MmaTiles {
        producer: 2,
        persistent: 1,
        ..t
    };
    let reference = Reference::new(&gemm("bf16", false, true, (760, 184, 88)), 7);
    for stages in 2..=4 {
        check(&reference, pong(tiles((64, 16, 16), 16, stages)));
    }
    // Sets of two warpgroups (8 × 18 tiles of 128 × 16, K shallower
    // than the ring); K of a single tile; a grouped walk.
    let wide = Reference::new(&gemm("f16", false, true, (1000, 280, 72)), 7);
    check(&wide, pong(tiles((128, 16, 64), 16, 4)));
    let single = Reference::new(&gemm("bf16", false, false, (760, 184, 40)), 7);
    for stages in 2..=3 {
        check(&single, pong(tiles((64, 16, 64), 16, stages)));
    }
    let grouped = MmaTiles {
        group_m: 4,
        ..tiles((64, 32, 32), 32, 3)
    };
    check(&wide, pong(grouped));
    let decode = Reference::new(&gemm("bf16", false, false, (5, 2248, 88)), 7);
    let read = check(&decode, pong(tiles((64, 16, 64), 16, 3)));
    assert_eq!(read, 141 * 5 * 88 * 2 + 88 * 2248 * 2);
    let batched = Reference::new(&batched_bias_gelu(), 7);
    check(&batched, pong(tiles((64, 16, 32), 16, 3)));
    // From one block for all 144 tiles to a block per tile, where the
    // second set of every block has nothing to do.
    let kernel = gemm("bf16", false, true, (760, 184, 88));
    common::with_any_number_of_blocks(&kernel, pong(tiles((64, 16, 16), 16, 3)), 144);
}

#[test]
fn a_fused_epilogue_over_a_batch_runs_beside_a_producer() {
    let kernel = batched_bias_gelu();
    // 4 batch elements of 2 × 9 tiles of 128 × 16 (4 × 9 of 64 × 16,
    // persistent), the last row and column partial; K's 3 tiles of 32, the
    // last partial.
    let reference = Reference::new(&kernel, 7);
    check(&reference, tiles((128, 16, 32), 16, 3));
    let persistent = MmaTiles {
        persistent: 1,
        ..tiles((64, 16, 32), 16, 3)
    };
    check(&reference, persistent);
}

#[test]
fn persistent_producers_compute_the_whole_output_with_any_number_of_blocks() {
    let kernel = gemm("bf16", false, true, (760, 184, 88));
    let t = MmaTiles {
        persistent: 1,
        ..tiles((64, 16, 16), 16, 3)
    };
    common::with_any_number_of_blocks(&kernel, t, 144);
}

/// A way to break the pipeline, by editing the lowered kernel's body:
/// the consumers' part comes first (up to its last `wgmma`, the
/// barriers it waits at before it), the producer's after it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Break {
    /// The producer copies into a slot without waiting for it to be
    /// released.
    ProducerDoesNotWait,
    /// The consumers read a slot without waiting for its `full` barrier.
    ConsumersDoNotWait,
    /// The producer arrives at a slot's `full` barrier as it issues its
    /// copies (`mbarrier.arrive`), not as they land.
    SignalBeforeLanding,
    /// The consumers do not fence a fill for the async proxy after their
    /// wait (the producer's copies land in their own time: its own fence
    /// would not do).
    NoProxyFence,
    /// The consumers leave two fills' `wgmma`s in flight, and release the
    /// older while it is still read.
    ReleaseWhileRead,
    /// Ping-pong's sets do not wait for their turn.
    NoTurns,
    /// The consumers never release a slot.
    NoRelease,
}

fn broken(kernel: &ktune_core::ir::Kernel, t: MmaTiles, how: Break) -> ktune_vgpu::Fault {
    let lowered = broken_lowering(kernel, t, how);
    fault_of(kernel, &lowered, &format!("{how:?}"))
}

/// `t` lowered for `kernel`, its body edited to break it `how`.
fn broken_lowering(
    kernel: &ktune_core::ir::Kernel,
    t: MmaTiles,
    how: Break,
) -> ktune_core::lower::Lowered {
    let mut lowered = lower(kernel, &Schedule::Mma(t), SmVersion::Sm90).expect("lowers");
    let products = lowered
        .ptx
        .body
        .iter()
        .rposition(|i| matches!(i.op, Op::Wgmma { .. }))
        .expect("the consumers multiply");
    // A fresh `.b64` register for an arrival's token.
    let tokens = lowered.ptx.reg_counts.iter_mut();
    let token = tokens
        .filter(|(class, _)| *class == RegClass::B64)
        .map(|(class, count)| {
            *count += 1;
            Reg {
                class: *class,
                index: *count - 1,
            }
        })
        .next()
        .expect("a .b64 register class");
    let body = &mut lowered.ptx.body;
    let mut edited = 0;
    for inst in body.iter_mut() {
        match (&mut inst.op, how) {
            (Op::CpAsyncMbarrierArrive { addr }, Break::SignalBeforeLanding) => {
                inst.op = Op::MbarrierArrive {
                    state: token,
                    addr: *addr,
                };
            }
            (Op::WgmmaWait { pending }, Break::ReleaseWhileRead) if *pending == 1 => {
                *pending = 2;
            }
            _ => continue,
        }
        edited += 1;
    }
    // A wait is a `try_wait` and the branch back to it while it fails; or,
    // bounded (the producer's), a `try_wait`, the branch past the rest when
    // it passes, and the retries up to the label that branch goes to. Each
    // wait's first `try_wait` and its span.
    let waits: Vec<(usize, std::ops::Range<usize>)> = (1..body.len())
        .filter_map(|at| {
            let Op::MbarrierTryWait { .. } = body[at].op else {
                return None;
            };
            let Op::Bra { target } = body[at + 1].op else {
                panic!("a try_wait's branch follows it");
            };
            let retried = body[at + 1].guard.is_some_and(|g| g.negate);
            if retried {
                return Some((at, at..at + 2));
            }
            if matches!(body[at - 1].op, Op::Label(_)) {
                // A bounded wait's retry.
                return None;
            }
            let end = (at..body.len())
                .find(|&i| body[i].op == Op::Label(target))
                .expect("the wait's end");
            Some((at, at..end + 1))
        })
        .collect();
    let spans = |keep: &dyn Fn(usize) -> bool| -> Vec<std::ops::Range<usize>> {
        waits
            .iter()
            .filter(|(at, _)| keep(*at))
            .map(|(_, span)| span.clone())
            .collect()
    };
    let removed: Vec<std::ops::Range<usize>> = match how {
        // The turns' waits address their barrier by a register of its own;
        // the slots' by the slot's offset from the window, past the ring.
        Break::NoTurns => spans(&|at| {
            at < products
                && matches!(body[at].op, Op::MbarrierTryWait { addr, .. } if addr.offset == 0)
        }),
        Break::ProducerDoesNotWait => spans(&|at| at > products),
        Break::ConsumersDoNotWait => spans(&|at| at < products),
        Break::NoProxyFence => (0..products)
            .filter(|&at| body[at].op == Op::FenceProxyAsync)
            .map(|at| at..at + 1)
            .collect(),
        Break::NoRelease => (0..body.len())
            .filter(|&at| matches!(body[at].op, Op::MbarrierArrive { .. }))
            .map(|at| at..at + 1)
            .collect(),
        _ => Vec::new(),
    };
    for span in removed.iter().rev() {
        body.drain(span.clone());
    }
    if how == Break::NoTurns {
        assert_eq!(removed.len(), 1, "one wait for the turn");
    }
    edited += removed.len();
    assert!(edited > 0, "{how:?} edits nothing");
    lowered
}

/// The fault a broken kernel (`what`) runs into, on a few resident blocks.
fn fault_of(
    kernel: &ktune_core::ir::Kernel,
    lowered: &ktune_core::lower::Lowered,
    what: &str,
) -> ktune_vgpu::Fault {
    let reference = Reference::new(kernel, 5);
    let inputs: Vec<&[u8]> = reference.buffers().iter().map(Vec::as_slice).collect();
    let output = poisoned(kernel.output.dtype, reference.output().len());
    let config = Config::default().resident_blocks(3);
    match run_bytes_with(&lowered.ptx, &lowered.launch, &inputs, output, &config) {
        Err(fault) => fault,
        Ok((bytes, _)) => panic!(
            "{what} ran, {}",
            match reference.compare(&bytes) {
                Ok(_) => "with the right output".to_owned(),
                Err(e) => format!("with a wrong output: {e}"),
            }
        ),
    }
}

#[test]
fn a_broken_handover_is_a_fault() {
    use ktune_vgpu::FaultKind;

    let kernel = gemm("bf16", false, true, (760, 184, 96));
    // Three slots, one held (released a fill later), and two.
    let held = [
        Break::ProducerDoesNotWait,
        Break::ConsumersDoNotWait,
        Break::SignalBeforeLanding,
        Break::NoProxyFence,
        Break::ReleaseWhileRead,
    ]
    .map(|how| (3, how));
    let two = held[..4].iter().map(|&(_, how)| (2, how));
    for (stages, how) in held.into_iter().chain(two) {
        let t = MmaTiles {
            persistent: 1,
            ..tiles((64, 16, 32), 16, stages)
        };
        let fault = broken(&kernel, t, how);
        let expected = match how {
            // Running ahead, it overwrites a slot still read, or its own
            // copies there, which land only as their phase completes.
            Break::ProducerDoesNotWait => matches!(
                fault.kind,
                FaultKind::WgmmaOverwrite { .. }
                    | FaultKind::SharedRace { .. }
                    | FaultKind::AsyncCopyPending { .. }
            ),
            Break::ReleaseWhileRead => matches!(
                fault.kind,
                FaultKind::WgmmaOverwrite { .. } | FaultKind::SharedRace { .. }
            ),
            // The fill read before it landed, or before it was written.
            Break::ConsumersDoNotWait | Break::SignalBeforeLanding => matches!(
                fault.kind,
                FaultKind::SharedRace { .. }
                    | FaultKind::AsyncCopyPending { .. }
                    | FaultKind::UninitializedShared { .. }
            ),
            Break::NoProxyFence => matches!(fault.kind, FaultKind::AsyncProxyUnfenced { .. }),
            Break::NoTurns | Break::NoRelease => unreachable!("broken in their own tests"),
        };
        assert!(expected, "{how:?}, {stages} stages: {fault}");
    }
}

/// Ping-pong's sets not taking turns: K's 6 tiles over 3 slots put the
/// second set's first fill two phases ahead of its slot's, and the parity
/// it waits for is the one the barrier shows once the first fill landed:
/// it multiplies the first set's fill as its own and releases it too, the
/// slot's `empty` barrier runs a phase ahead of the producer, and the
/// block deadlocks.
#[test]
fn ping_pong_sets_that_do_not_take_turns_go_wrong() {
    let kernel = gemm("bf16", false, true, (760, 184, 176));
    let t = MmaTiles {
        persistent: 1,
        producer: 2,
        ..tiles((64, 16, 32), 16, 3)
    };
    let reference = Reference::new(&kernel, 5);
    let inputs: Vec<&[u8]> = reference.buffers().iter().map(Vec::as_slice).collect();
    let config = Config::default().resident_blocks(3);
    let run = |lowered: &ktune_core::lower::Lowered| {
        let output = poisoned(kernel.output.dtype, reference.output().len());
        run_bytes_with(&lowered.ptx, &lowered.launch, &inputs, output, &config)
            .map(|(bytes, _)| reference.compare(&bytes))
    };
    let lowered = lower(&kernel, &Schedule::Mma(t), SmVersion::Sm90).expect("lowers");
    assert!(matches!(run(&lowered), Ok(Ok(_))));
    let broken = broken_lowering(&kernel, t, Break::NoTurns);
    match run(&broken) {
        Err(fault) => assert!(
            matches!(
                fault.kind,
                ktune_vgpu::FaultKind::Mbarrier {
                    problem: ktune_vgpu::MbarrierProblem::Deadlock { .. },
                    ..
                }
            ),
            "{fault}"
        ),
        Ok(output) => panic!("ran without turns, {output:?}"),
    }
}

/// Consumers that never release a slot leave the producer waiting for one
/// after its first round of fills: a deadlock here, and on a GPU its wait
/// ending in a `trap` past the deadline (`runtime/tests/gpu_deadline.rs`).
#[test]
fn a_slot_never_released_leaves_the_producer_waiting() {
    let kernel = gemm("bf16", false, true, (128, 16, 512));
    let t = tiles((64, 16, 32), 16, 3);
    let fault = broken(&kernel, t, Break::NoRelease);
    assert!(
        matches!(
            fault.kind,
            ktune_vgpu::FaultKind::Mbarrier {
                problem: ktune_vgpu::MbarrierProblem::Deadlock { .. },
                ..
            }
        ),
        "{fault}"
    );
}

/// Two consumer warpgroups raising to 248 registers where the producer's
/// `.dec` to 24 gave back enough for 240: the second waits for registers
/// nobody gives back.
#[test]
fn consumers_raising_past_the_register_pool_deadlock() {
    use ktune_vgpu::FaultKind;

    let kernel = gemm("bf16", false, true, (760, 184, 96));
    let t = tiles((128, 16, 32), 16, 3);
    let mut lowered = lower(&kernel, &Schedule::Mma(t), SmVersion::Sm90).expect("lowers");
    let mut raised = 0;
    for inst in &mut lowered.ptx.body {
        if let Op::SetMaxNReg { count, raise: true } = &mut inst.op {
            assert_eq!(*count, 240);
            *count += 8;
            raised += 1;
        }
    }
    assert_eq!(raised, 1);
    let fault = fault_of(&kernel, &lowered, "raising to 248");
    assert!(
        matches!(
            fault.kind,
            FaultKind::RegisterPool {
                count: 248,
                current: 168,
                ..
            }
        ),
        "{fault}"
    );
}

#[test]
fn points_a_producer_cannot_feed_are_rejected_by_their_constraint() {
    let kernel = gemm("bf16", false, false, (760, 184, 88));
    let good = tiles((64, 16, 16), 16, 2);
    assert!(validate(&kernel, &Schedule::Mma(good), SmVersion::Sm90).is_ok());
    let rejected =
        |t: MmaTiles, want: Constraint| match validate(&kernel, &Schedule::Mma(t), SmVersion::Sm90)
        {
            Err(LowerError::Invalid {
                constraint, reason, ..
            }) if constraint == want => reason,
            other => panic!("{t:?}: {other:?}, expected a {want:?} rejection"),
        };
    for (t, want, says) in [
        (
            MmaTiles {
                producer: 3,
                ..good
            },
            Constraint::Range,
            "producer = 3",
        ),
        (
            MmaTiles {
                producer: 2,
                ..good
            },
            Constraint::Range,
            "persistent = 0",
        ),
        (
            MmaTiles { stages: 1, ..good },
            Constraint::Range,
            "stages = 1",
        ),
        (
            MmaTiles {
                min_blocks: 0,
                ..good
            },
            Constraint::Range,
            "min_blocks = 1, not 0",
        ),
        (
            MmaTiles { split_k: 2, ..good },
            Constraint::Split,
            "split_k = 2",
        ),
        (
            MmaTiles {
                wgmma: 0,
                warp_m: 32,
                ..good
            },
            Constraint::Range,
            "wgmma = 0",
        ),
    ] {
        let reason = rejected(t, want);
        assert!(reason.contains(says), "{reason}");
    }
}

/// With `tma = 1` one thread of the producer copies each fill by the
/// tensor memory accelerator, through a tensor map of each operand: every
/// layout of the operands (a tile contiguous along `m` or `n` in 128-byte
/// panels, 64-byte and 32-byte rows), edges along every dimension (which
/// the copies zero-fill), a single `K` tile, `M` of 5 rows, a batch with
/// a fused epilogue, persistent blocks and ping-pong.
#[test]
fn tensor_map_copies_feed_the_consumers() {
    let by_map = |t: MmaTiles| MmaTiles { tma: 1, ..t };
    for (a_t, b_t) in [(false, false), (true, true), (false, true), (true, false)] {
        let reference = Reference::new(&gemm("bf16", a_t, b_t, (760, 184, 88)), 7);
        // Tiles of 64 × 16 (persistent too: 144 of them), of 64 × 64 in
        // 32-deep slots and of 128 × 128 in 64-deep ones.
        for (block, warp_n, persistent) in [
            ((64, 16, 16), 16, 0),
            ((64, 16, 16), 16, 1),
            ((64, 64, 32), 64, 0),
            ((128, 128, 64), 128, 0),
        ] {
            check(
                &reference,
                by_map(MmaTiles {
                    persistent,
                    ..tiles(block, warp_n, 3)
                }),
            );
        }
    }
    let single = Reference::new(&gemm("f16", false, true, (1000, 280, 40)), 7);
    check(&single, by_map(tiles((128, 32, 64), 16, 4)));
    let decode = Reference::new(&gemm("bf16", false, false, (5, 2248, 88)), 7);
    let pong = |t: MmaTiles| MmaTiles {
        producer: 2,
        persistent: 1,
        ..t
    };
    for t in [tiles((64, 16, 64), 16, 3), pong(tiles((64, 16, 64), 16, 3))] {
        // A copy reads what lies inside the operand: A's 5 rows per
        // column tile, and B once.
        let read = check(&decode, by_map(t));
        assert_eq!(read, 141 * 5 * 88 * 2 + 88 * 2248 * 2);
    }
    let batched = Reference::new(&batched_bias_gelu(), 7);
    check(&batched, by_map(tiles((128, 16, 32), 16, 3)));
    check(&batched, by_map(pong(tiles((64, 16, 32), 16, 3))));
    let kernel = gemm("bf16", false, true, (760, 184, 88));
    common::with_any_number_of_blocks(&kernel, by_map(pong(tiles((64, 16, 16), 16, 3))), 144);
}

/// With `cluster_m = 2` two blocks of a cluster compute tiles stacked
/// along `M` and share B's: each copies half of each of B's boxes,
/// multicast to both, and each block's consumers release every slot in
/// both blocks. Every layout of the operands (B contiguous along `k`, one
/// box halved along `n`, or along `n` in 128-byte panels halved along
/// `k`), an `M` whose last cluster's second tile lies wholly past it (760
/// rows in tiles of 64: 12 tiles, 6 clusters, and 100 rows: the second
/// block of the only cluster computes rows 64..128, of which 36 exist), a
/// single `K` tile, a grouped walk, a batch with a fused epilogue, and
/// persistent clusters, in ping-pong too.
#[test]
fn a_cluster_shares_b_s_tiles_by_multicast() {
    let shared = |t: MmaTiles| MmaTiles {
        tma: 1,
        cluster_m: 2,
        ..t
    };
    for (a_t, b_t) in [(false, false), (true, true), (false, true), (true, false)] {
        let reference = Reference::new(&gemm("bf16", a_t, b_t, (760, 184, 88)), 7);
        for (block, warp_n) in [
            ((64, 16, 16), 16),
            ((64, 64, 32), 64),
            ((128, 128, 64), 128),
        ] {
            check(&reference, shared(tiles(block, warp_n, 3)));
        }
    }
    // A block per tile, a cluster per pair: 6 pairs of the 12 rows of
    // tiles by 12 columns.
    let kernel = gemm("bf16", false, false, (760, 184, 88));
    let t = shared(tiles((64, 16, 16), 16, 3));
    let lowered = lower(&kernel, &Schedule::Mma(t), SmVersion::Sm90).expect("lowers");
    assert_eq!(lowered.launch.grid, [144, 1, 1]);
    assert_eq!(lowered.ptx.cluster_blocks, 2);
    for m in [100, 40] {
        let short = Reference::new(&gemm("f16", false, true, (m, 280, 40)), 7);
        check(&short, shared(tiles((64, 32, 64), 32, 2)));
    }
    let grouped = Reference::new(&gemm("bf16", false, false, (1000, 184, 72)), 7);
    check(
        &grouped,
        shared(MmaTiles {
            group_m: 2,
            ..tiles((64, 16, 16), 16, 4)
        }),
    );
    let batched = Reference::new(&batched_bias_gelu(), 7);
    check(&batched, shared(tiles((128, 16, 32), 16, 3)));
    // Persistent clusters, and ping-pong in them: both blocks of a cluster
    // walk the same tile pairs (144 tiles of 64 × 16, 72 pairs), with any
    // number of clusters resident.
    let persistent = |t: MmaTiles| MmaTiles {
        persistent: 1,
        ..shared(t)
    };
    let pong = |t: MmaTiles| MmaTiles {
        producer: 2,
        ..persistent(t)
    };
    let reference = Reference::new(&gemm("bf16", true, false, (760, 184, 88)), 7);
    for t in [
        persistent(tiles((64, 16, 16), 16, 3)),
        pong(tiles((64, 16, 16), 16, 3)),
        pong(tiles((64, 16, 32), 16, 2)),
    ] {
        check(&reference, t);
    }
    let kernel = gemm("bf16", false, true, (760, 184, 88));
    common::with_any_number_of_blocks(&kernel, pong(tiles((64, 16, 16), 16, 3)), 144);
}

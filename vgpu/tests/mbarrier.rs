//! Memory barriers (`mbarrier`): a producer warp copying rounds of data
//! into a ring of shared-memory slots by `cp.async`, each round signalled
//! as it lands (`cp.async.mbarrier.arrive.noinc`), and a consumer warp
//! waiting for each slot's phase and handing it back through a second
//! barrier; and the races, misuses and deadlocks that break such a ring.

mod common;

use common::one_block;
use ktune_core::ptx::Builder;
use ktune_core::ptx::Kernel;
use ktune_core::ptx::inst::{
    Addr, ArithOp, Cmp, CpAsyncCache, Op, Operand, Reg, RegClass, Space, Special, Ty,
};
use ktune_vgpu::{Access, Fault, FaultKind, MbarrierProblem};

const SLOTS: u32 = 2;
const ROUNDS: u32 = 6;
/// The ring's bytes; the barriers follow it, `full[s]` then `empty[s]`.
const RING: u32 = SLOTS * 32 * 4;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Ring {
    Correct,
    /// The producer stores each round and arrives with `mbarrier.arrive`.
    Stores,
    /// The consumer reads a slot without waiting for its phase.
    ConsumerDoesNotWait,
    /// The consumer waits for the other parity.
    WrongParity,
    /// The producer refills a slot without waiting for it to be empty.
    ProducerDoesNotWait,
    /// No thread initialises the barriers.
    Uninitialized,
    /// Thread 0 initialises them, with no barrier before the others use
    /// them.
    InitUnordered,
    /// The consumer reads a barrier's bytes with `ld.shared`.
    PlainLoad,
    /// The full barriers expect 33 arrivals.
    Overcounted,
}

fn full(smem: Reg, slot: u32) -> Addr {
    Addr {
        base: smem,
        offset: i64::from(RING + 8 * slot),
    }
}

fn empty(smem: Reg, slot: u32) -> Addr {
    full(smem, SLOTS + slot)
}

fn slot_addr(b: &mut Builder, smem: Reg, slot: u32, lane: Reg) -> Addr {
    let index = b.u32_op(ArithOp::Add, lane, Operand::Int(i64::from(slot * 32)));
    let base = b.u32_mad(index, Operand::Int(4), smem);
    Addr { base, offset: 0 }
}

/// The parity of round `i`'s phase of its slot's barriers.
fn parity(i: u32) -> Operand {
    Operand::Int(i64::from(i / SLOTS % 2))
}

/// Lane `l` of warp 0 copies `input[32 i + l]` into slot `i % SLOTS` in
/// round `i`; warp 1 adds up what it finds there and stores its sum at
/// `out[lane]`.
fn ring(kind: Ring) -> Kernel {
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let input = b.param_ptr(0);
    let out = b.param_ptr(1);
    let smem = b.shared_base();
    if kind != Ring::Uninitialized {
        let init = b.label();
        let first = b.setp(Cmp::Eq, Ty::U32, tid, Operand::Int(0));
        b.bra_if(first, true, init);
        for slot in 0..SLOTS {
            let count = if kind == Ring::Overcounted { 33 } else { 32 };
            let addr = full(smem, slot);
            b.push(Op::MbarrierInit {
                addr,
                count: Operand::Int(count),
            });
            let addr = empty(smem, slot);
            b.push(Op::MbarrierInit {
                addr,
                count: Operand::Int(32),
            });
        }
        b.place(init);
        if kind != Ring::InitUnordered {
            b.push(Op::BarSync);
        }
    }
    let consumer = b.label();
    let producer = b.setp(Cmp::Lt, Ty::U32, tid, Operand::Int(32));
    b.bra_if(producer, true, consumer);

    for i in 0..ROUNDS {
        let slot = i % SLOTS;
        if kind != Ring::ProducerDoesNotWait {
            // The first round of each slot waits for the phase before
            // phase 0, which counts as completed.
            let addr = empty(smem, slot);
            b.mbarrier_wait(addr, parity(i + SLOTS));
        }
        let dst = slot_addr(&mut b, smem, slot, tid);
        let index = b.u32_op(ArithOp::Add, tid, Operand::Int(i64::from(32 * i)));
        let src = b.global_addr(input, index, 4);
        let src = Addr {
            base: src,
            offset: 0,
        };
        let addr = full(smem, slot);
        if kind == Ring::Stores {
            let value = b.reg(RegClass::B32);
            b.push(Op::Ld {
                space: Space::GlobalReadOnly,
                ty: Ty::U32,
                dsts: vec![value],
                addr: src,
            });
            b.push(Op::St {
                space: Space::Shared,
                ty: Ty::U32,
                addr: dst,
                srcs: vec![value.into()],
            });
            b.mbarrier_arrive(addr);
        } else {
            b.cp_async(CpAsyncCache::Ca, dst, src, 4, None);
            b.cp_async_commit();
            b.push(Op::CpAsyncMbarrierArrive { addr });
        }
    }
    b.push(Op::Ret);

    b.place(consumer);
    let lane = b.u32_op(ArithOp::Sub, tid, Operand::Int(32));
    if kind == Ring::PlainLoad {
        let value = b.reg(RegClass::B32);
        b.push(Op::Ld {
            space: Space::Shared,
            ty: Ty::U32,
            dsts: vec![value],
            addr: full(smem, 0),
        });
    }
    let mut sum = b.u32_imm(0);
    for i in 0..ROUNDS {
        let slot = i % SLOTS;
        let addr = full(smem, slot);
        match kind {
            Ring::ConsumerDoesNotWait => {}
            Ring::WrongParity => b.mbarrier_wait(addr, parity(i + SLOTS)),
            _ => b.mbarrier_wait(addr, parity(i)),
        }
        let addr = slot_addr(&mut b, smem, slot, lane);
        let value = b.reg(RegClass::B32);
        b.push(Op::Ld {
            space: Space::Shared,
            ty: Ty::U32,
            dsts: vec![value],
            addr,
        });
        sum = b.u32_op(ArithOp::Add, sum, value);
        let addr = empty(smem, slot);
        b.mbarrier_arrive(addr);
    }
    common::store_at_tid(&mut b, out, lane, sum);
    b.finish("ring".into(), 2, 64, RING + 2 * SLOTS * 8)
}

fn input() -> Vec<u32> {
    (0..ROUNDS * 32).map(|i| i * 7 + 3).collect()
}

/// Runs the ring on two blocks, one after the other in the same shared
/// memory.
fn run(kernel: &Kernel) -> Result<Vec<u32>, Fault> {
    let bytes = input().iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut params = vec![bytes, vec![0u8; 32 * 4]];
    let launch = ktune_core::lower::Launch {
        grid: [2, 1, 1],
        ..one_block(64, kernel.dynamic_shared_bytes)
    };
    ktune_vgpu::run(kernel, &launch, &mut params)?;
    Ok(params[1]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn problem(fault: &Fault) -> &MbarrierProblem {
    match &fault.kind {
        FaultKind::Mbarrier { problem, .. } => problem,
        _ => panic!("{fault}: expected a memory barrier's fault"),
    }
}

#[test]
fn a_ring_ordered_by_memory_barriers_passes() {
    let input = input();
    let expected: Vec<u32> = (0..32)
        .map(|lane| (0..ROUNDS).map(|i| input[(32 * i + lane) as usize]).sum())
        .collect();
    assert_eq!(run(&ring(Ring::Correct)).unwrap(), expected);
    assert_eq!(run(&ring(Ring::Stores)).unwrap(), expected);
}

#[test]
fn a_read_of_a_slot_not_waited_for_races_with_its_copy() {
    let fault = run(&ring(Ring::ConsumerDoesNotWait)).unwrap_err();
    assert!(
        matches!(
            fault.kind,
            FaultKind::SharedRace {
                first_was_write: true,
                second_is_write: false,
                ..
            }
        ),
        "{fault}"
    );
    assert!(fault.thread[0] >= 32, "{fault}");
    assert!(fault.instruction.starts_with("ld.shared"), "{fault}");
}

#[test]
fn a_wait_for_the_wrong_parity_or_a_phase_nobody_completes_deadlocks() {
    for kind in [Ring::WrongParity, Ring::Overcounted] {
        let fault = run(&ring(kind)).unwrap_err();
        assert!(
            matches!(problem(&fault), MbarrierProblem::Deadlock { .. }),
            "{kind:?}: {fault}"
        );
        assert!(fault.to_string().contains("deadlock"), "{fault}");
    }
    // The consumer waits for parity 1 at its first full barrier, which the
    // producer's first round completed in phase 0; the producer, the first
    // thread named, for the consumer's first release of slot 0.
    let fault = run(&ring(Ring::WrongParity)).unwrap_err();
    assert_eq!(
        fault.kind,
        FaultKind::Mbarrier {
            offset: RING + 8 * SLOTS,
            problem: MbarrierProblem::Deadlock {
                parity: 0,
                completed: 0,
                expected: 32,
                pending: 32
            }
        },
        "{fault}"
    );
    assert!(
        fault.instruction.starts_with("mbarrier.try_wait"),
        "{fault}"
    );
}

/// Without waiting for the consumer, the producer copies into a slot
/// again while its copy there is still in flight: it lands only when the
/// slot's phase completes, at the arrivals of the other lanes.
#[test]
fn a_refill_of_a_slot_not_waited_for_is_a_fault() {
    let fault = run(&ring(Ring::ProducerDoesNotWait)).unwrap_err();
    assert!(
        matches!(
            fault.kind,
            FaultKind::AsyncCopyPending {
                access: Access::Store,
                ..
            }
        ),
        "{fault}"
    );
    assert!(fault.instruction.starts_with("cp.async"), "{fault}");
}

#[test]
fn barriers_must_be_initialised_before_any_thread_uses_them() {
    let fault = run(&ring(Ring::Uninitialized)).unwrap_err();
    assert_eq!(problem(&fault), &MbarrierProblem::Uninitialized, "{fault}");
    let fault = run(&ring(Ring::InitUnordered)).unwrap_err();
    assert!(
        matches!(
            fault.kind,
            FaultKind::SharedRace {
                first_thread: [0, 0, 0],
                first_was_write: true,
                second_is_write: false,
                ..
            }
        ),
        "{fault}"
    );
    assert!(fault.instruction.starts_with("mbarrier"), "{fault}");
}

#[test]
fn a_plain_access_to_a_barrier_is_a_fault() {
    let fault = run(&ring(Ring::PlainLoad)).unwrap_err();
    assert_eq!(
        problem(&fault),
        &MbarrierProblem::PlainAccess {
            access: Access::Load
        },
        "{fault}"
    );
}

/// A one-warp kernel running `build` after thread 0 initialised a barrier
/// at window offset 0 expecting `count` arrivals, and a `bar.sync`.
fn one_warp(count: i64, build: impl FnOnce(&mut Builder, Addr)) -> Result<(), Fault> {
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let smem = b.shared_base();
    let addr = Addr {
        base: smem,
        offset: 0,
    };
    let skip = b.label();
    let first = b.setp(Cmp::Eq, Ty::U32, tid, Operand::Int(0));
    b.bra_if(first, true, skip);
    b.push(Op::MbarrierInit {
        addr,
        count: Operand::Int(count),
    });
    b.place(skip);
    b.push(Op::BarSync);
    build(&mut b, addr);
    let kernel = b.finish("one_warp".into(), 0, 32, 16);
    ktune_vgpu::run(&kernel, &one_block(32, 16), &mut Vec::new()).map(|_| ())
}

#[test]
fn inits_are_checked() {
    let fault = one_warp(0, |_, _| {}).unwrap_err();
    assert_eq!(
        problem(&fault),
        &MbarrierProblem::Count { count: 0 },
        "{fault}"
    );
    let fault = one_warp(1 << 20, |_, _| {}).unwrap_err();
    assert_eq!(
        problem(&fault),
        &MbarrierProblem::Count { count: 1 << 20 },
        "{fault}"
    );
    let fault = one_warp(32, |b, addr| {
        b.push(Op::MbarrierInit {
            addr,
            count: Operand::Int(32),
        })
    })
    .unwrap_err();
    assert_eq!(problem(&fault), &MbarrierProblem::Reinit, "{fault}");
    let fault = one_warp(32, |b, addr| {
        let misaligned = Addr { offset: 4, ..addr };
        b.mbarrier_arrive(misaligned);
    })
    .unwrap_err();
    assert!(
        matches!(fault.kind, FaultKind::MisalignedAccess { size: 8, .. }),
        "{fault}"
    );
}

/// Every lane arrives, then waits for the phase its arrivals complete: the
/// lanes that arrived first wait for the last, and all go on together.
#[test]
fn a_warp_arriving_and_waiting_at_one_barrier_goes_on_together() {
    one_warp(32, |b, addr| {
        b.mbarrier_arrive(addr);
        b.mbarrier_wait(addr, Operand::Int(0));
        let lane = b.special(Special::LaneId);
        let value = b.u32_imm(1);
        b.push(Op::Shfl {
            mode: ktune_core::ptx::inst::ShflMode::Bfly,
            dst: value,
            src: value,
            lane: lane.into(),
            clamp: 31,
        });
    })
    .unwrap();
    // With 64 expected, the phase never completes.
    let fault = one_warp(64, |b, addr| {
        b.mbarrier_arrive(addr);
        b.mbarrier_wait(addr, Operand::Int(0));
    })
    .unwrap_err();
    assert_eq!(
        problem(&fault),
        &MbarrierProblem::Deadlock {
            parity: 0,
            completed: 0,
            expected: 64,
            pending: 32
        },
        "{fault}"
    );
}

//! Named barriers: a producer warp handing a consumer warp data through a
//! ring of shared-memory slots, each slot with a barrier that says it is
//! full and one that says it is empty; and the races, miscounts and
//! deadlocks that break such a pipeline.

mod common;

use common::one_block;
use ktune_core::ptx::Builder;
use ktune_core::ptx::Kernel;
use ktune_core::ptx::inst::{Addr, ArithOp, Cmp, Op, Operand, Reg, RegClass, Space, Special, Ty};
use ktune_vgpu::{Fault, FaultKind, NamedProblem};

const SLOTS: u32 = 2;
const ROUNDS: u32 = 6;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Pipeline {
    Correct,
    /// The consumer arrives at a full slot's barrier without waiting.
    ConsumerDoesNotWait,
    /// The producer refills a slot without waiting for it to be empty.
    ProducerDoesNotWait,
    /// The consumer counts 96 threads at the full slots' barriers.
    Miscounted,
    /// The consumer waits for one round more than the producer fills.
    ExtraRound,
    /// Every barrier's number is in a register, as a loop over the slots
    /// computes it.
    InRegisters,
    /// The consumer's first wait is at barrier 0, in a register.
    Zero,
}

fn bar(b: &mut Builder, kind: Pipeline, id: u32, wait: bool) {
    let id = match kind {
        Pipeline::InRegisters => Operand::Reg(b.u32_imm(id)),
        _ => Operand::Int(i64::from(id)),
    };
    b.push(Op::NamedBar {
        id,
        threads: 64,
        wait,
    });
}

fn slot_addr(b: &mut Builder, smem: Reg, slot: u32, lane: Reg) -> Addr {
    let index = b.u32_op(ArithOp::Add, lane, Operand::Int(i64::from(slot * 32)));
    let base = b.u32_mad(index, Operand::Int(4), smem);
    Addr { base, offset: 0 }
}

/// Warp 0 writes `100 i + lane` into slot `i % SLOTS` in round `i`; warp 1
/// adds up what it finds there and stores its sum at `out[lane]`. Full
/// barriers are `1 + slot`, empty ones `1 + SLOTS + slot`.
fn pipeline(kind: Pipeline) -> Kernel {
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let out = b.param_ptr(0);
    let smem = b.shared_base();
    let consumer = b.label();
    let producer = b.setp(Cmp::Lt, Ty::U32, tid, Operand::Int(32));
    b.bra_if(producer, true, consumer);

    for i in 0..ROUNDS {
        let slot = i % SLOTS;
        if i >= SLOTS && kind != Pipeline::ProducerDoesNotWait {
            bar(&mut b, kind, 1 + SLOTS + slot, true);
        }
        let value = b.u32_op(ArithOp::Add, tid, Operand::Int(i64::from(100 * i)));
        let addr = slot_addr(&mut b, smem, slot, tid);
        b.push(Op::St {
            space: Space::Shared,
            ty: Ty::U32,
            addr,
            srcs: vec![value.into()],
        });
        bar(&mut b, kind, 1 + slot, false);
    }
    b.push(Op::Ret);

    b.place(consumer);
    let lane = b.u32_op(ArithOp::Sub, tid, Operand::Int(32));
    let mut sum = b.u32_imm(0);
    let rounds = ROUNDS + u32::from(kind == Pipeline::ExtraRound);
    for i in 0..rounds {
        let slot = i % SLOTS;
        let full = 1 + slot;
        match kind {
            Pipeline::ConsumerDoesNotWait => bar(&mut b, kind, full, false),
            Pipeline::Zero if i == 0 => bar(&mut b, Pipeline::InRegisters, 0, true),
            Pipeline::Miscounted => b.push(Op::NamedBar {
                id: Operand::Int(i64::from(full)),
                threads: 96,
                wait: true,
            }),
            _ => bar(&mut b, kind, full, true),
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
        if i + SLOTS < ROUNDS {
            bar(&mut b, kind, 1 + SLOTS + slot, false);
        }
    }
    common::store_at_tid(&mut b, out, lane, sum);
    b.finish("pipeline".into(), 1, 64, SLOTS * 32 * 4)
}

fn run(kernel: &Kernel) -> Result<Vec<u32>, Fault> {
    let mut params = vec![vec![0u8; 32 * 4]];
    let launch = ktune_core::lower::Launch {
        grid: [2, 1, 1],
        ..one_block(64, kernel.dynamic_shared_bytes)
    };
    ktune_vgpu::run(kernel, &launch, &mut params)?;
    Ok(params[0]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

#[test]
fn a_pipeline_ordered_by_named_barriers_passes() {
    let got = run(&pipeline(Pipeline::Correct)).unwrap();
    let rounds: u32 = (0..ROUNDS).map(|i| 100 * i).sum();
    for (lane, sum) in got.iter().enumerate() {
        assert_eq!(*sum, rounds + ROUNDS * lane as u32);
    }
}

#[test]
fn barriers_numbered_by_registers_order_the_pipeline_alike() {
    let got = run(&pipeline(Pipeline::InRegisters)).unwrap();
    assert_eq!(got, run(&pipeline(Pipeline::Correct)).unwrap());
    let fault = run(&pipeline(Pipeline::Zero)).unwrap_err();
    assert!(
        matches!(
            fault.kind,
            FaultKind::NamedBarrier {
                id: 0,
                problem: NamedProblem::Number
            }
        ),
        "{fault}"
    );
}

#[test]
fn a_read_of_a_slot_not_waited_for_races() {
    let fault = run(&pipeline(Pipeline::ConsumerDoesNotWait)).unwrap_err();
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
fn a_refill_of_a_slot_not_waited_for_is_a_fault() {
    // The producer runs ahead: its third round arrives again at the first
    // slot's full barrier, whose phase still waits for the consumer.
    let fault = run(&pipeline(Pipeline::ProducerDoesNotWait)).unwrap_err();
    assert_eq!(
        fault.kind,
        FaultKind::NamedBarrier {
            id: 1,
            problem: NamedProblem::Twice
        },
        "{fault}"
    );
    assert!(fault.thread[0] < 32, "{fault}");
}

#[test]
fn arrivals_disagreeing_on_the_count_are_a_fault() {
    let fault = run(&pipeline(Pipeline::Miscounted)).unwrap_err();
    assert_eq!(
        fault.kind,
        FaultKind::NamedBarrier {
            id: 1,
            problem: NamedProblem::Count {
                expected: 64,
                got: 96
            }
        },
        "{fault}"
    );
}

#[test]
fn a_wait_no_arrival_completes_is_a_deadlock() {
    let fault = run(&pipeline(Pipeline::ExtraRound)).unwrap_err();
    let FaultKind::NamedBarrier { id, problem } = &fault.kind else {
        panic!("expected a named barrier's fault, got {fault}");
    };
    assert_eq!(*id, 1 + ROUNDS % SLOTS);
    assert_eq!(
        *problem,
        NamedProblem::Deadlock {
            threads: 64,
            arrived: 32
        }
    );
    assert!(fault.to_string().contains("deadlock"), "{fault}");
}

/// Each lane of warp 0 writes a word that the same lane of warps 1 to 3
/// reads (more readers than a byte keeps inline), then writes it again
/// after barrier 2, at which `arriving` of those warps arrived.
fn broadcast(arriving: u32) -> Kernel {
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let smem = b.shared_base();
    let lane = b.u32_op(ArithOp::Rem, tid, Operand::Int(32));
    let base = b.u32_mad(lane, Operand::Int(4), smem);
    let word = Addr { base, offset: 0 };
    let readers = b.label();
    let producer = b.setp(Cmp::Lt, Ty::U32, tid, Operand::Int(32));
    b.bra_if(producer, true, readers);
    b.push(Op::St {
        space: Space::Shared,
        ty: Ty::U32,
        addr: word,
        srcs: vec![tid.into()],
    });
    let threads = 32 * (1 + arriving);
    b.push(Op::NamedBar {
        id: Operand::Int(1),
        threads: 128,
        wait: false,
    });
    b.push(Op::NamedBar {
        id: Operand::Int(2),
        threads,
        wait: true,
    });
    b.push(Op::St {
        space: Space::Shared,
        ty: Ty::U32,
        addr: word,
        srcs: vec![Operand::Int(7)],
    });
    b.push(Op::Ret);

    b.place(readers);
    b.push(Op::NamedBar {
        id: Operand::Int(1),
        threads: 128,
        wait: true,
    });
    let value = b.reg(RegClass::B32);
    b.push(Op::Ld {
        space: Space::Shared,
        ty: Ty::U32,
        dsts: vec![value],
        addr: word,
    });
    let done = b.label();
    let arrives = b.setp(Cmp::Lt, Ty::U32, tid, Operand::Int(i64::from(threads)));
    b.bra_if(arrives, true, done);
    b.push(Op::NamedBar {
        id: Operand::Int(2),
        threads,
        wait: false,
    });
    b.place(done);
    b.finish("broadcast".into(), 0, 128, 128)
}

#[test]
fn a_write_after_many_readers_waits_for_every_one() {
    let one = one_block(128, 128);
    assert!(ktune_vgpu::run(&broadcast(3), &one, &mut []).is_ok());
    let fault = ktune_vgpu::run(&broadcast(2), &one, &mut []).unwrap_err();
    let FaultKind::SharedRace {
        first_thread,
        first_was_write: false,
        second_is_write: true,
        ..
    } = fault.kind
    else {
        panic!("expected a race with a read, got {fault}");
    };
    assert!(first_thread[0] >= 96, "{fault}");
    assert_eq!(fault.thread[0] / 32, 0, "{fault}");
}

//! `shfl.sync`: the four modes with the PTX ISA's clamp and segment rules,
//! and the ways a warp fails to arrive together.

mod common;

use common::one_block;
use ktune_core::ptx::Builder;
use ktune_core::ptx::inst::{ArithOp, Cmp, Op, Operand, Reg, RegClass, ShflMode, Special, Ty};
use ktune_vgpu::{FaultKind, LaneState};

fn shfl(b: &mut Builder, mode: ShflMode, src: Reg, lane: impl Into<Operand>, clamp: u32) -> Reg {
    let dst = b.reg(RegClass::B32);
    b.push(Op::Shfl {
        mode,
        dst,
        src,
        lane: lane.into(),
        clamp,
    });
    dst
}

/// Runs `threads` threads that each compute a value from `%tid.x` and
/// store it at `out[tid]`.
fn run(
    threads: u32,
    build: impl FnOnce(&mut Builder, Reg) -> Reg,
) -> Result<Vec<u32>, ktune_vgpu::Fault> {
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let out = b.param_ptr(0);
    let value = build(&mut b, tid);
    common::store_at_tid(&mut b, out, tid, value);
    let kernel = b.finish("shuffle".into(), 1, threads, 0);
    let mut params = vec![vec![0u8; threads as usize * 4]];
    ktune_vgpu::run(&kernel, &one_block(threads, 0), &mut params)?;
    Ok(params[0]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Lane `l` of every warp holds `l * 10 + 1`; returns each lane's result.
fn warp_of(mode: ShflMode, lane: u32, clamp: u32) -> Vec<u32> {
    run(32, |b, t| {
        let v = b.u32_mad(t, Operand::Int(10), Operand::Int(1));
        shfl(b, mode, v, Operand::Int(i64::from(lane)), clamp)
    })
    .unwrap()
}

#[test]
fn butterfly_reduction_sums_every_lane() {
    let got = run(64, |b, t| {
        let mut acc = t;
        for offset in [16, 8, 4, 2, 1] {
            let other = shfl(b, ShflMode::Bfly, acc, Operand::Int(offset), 31);
            acc = b.u32_op(ArithOp::Add, acc, other);
        }
        acc
    })
    .unwrap();
    assert!(
        got[..32].iter().all(|&s| s == (0..32).sum::<u32>()),
        "{got:?}"
    );
    assert!(
        got[32..].iter().all(|&s| s == (32..64).sum::<u32>()),
        "{got:?}"
    );
}

#[test]
fn down_keeps_its_own_value_past_the_clamp() {
    let got = warp_of(ShflMode::Down, 4, 31);
    for (l, v) in got.iter().enumerate() {
        let src = if l + 4 <= 31 { l + 4 } else { l };
        assert_eq!(*v, src as u32 * 10 + 1, "lane {l}");
    }
}

#[test]
fn up_keeps_its_own_value_below_the_segment() {
    let got = warp_of(ShflMode::Up, 3, 0);
    for (l, v) in got.iter().enumerate() {
        let src = if l >= 3 { l - 3 } else { l };
        assert_eq!(*v, src as u32 * 10 + 1, "lane {l}");
    }
    // With the clamp field at 31, maxLane is 31 and `up` never transfers.
    let got = warp_of(ShflMode::Up, 3, 31);
    assert!(got.iter().enumerate().all(|(l, v)| *v == l as u32 * 10 + 1));
}

#[test]
fn idx_broadcasts_within_segments() {
    let got = warp_of(ShflMode::Idx, 7, 31);
    assert!(got.iter().all(|&v| v == 71), "{got:?}");
    // CUDA's width 16: c = ((32 - 16) << 8) | 31.
    let got = warp_of(ShflMode::Idx, 3, 0x101f);
    for (l, v) in got.iter().enumerate() {
        let src = if l < 16 { 3 } else { 19 };
        assert_eq!(*v, src * 10 + 1, "lane {l}");
    }
    // Lane indices wrap at 32 (b[4:0]).
    let got = warp_of(ShflMode::Idx, 33, 31);
    assert!(got.iter().all(|&v| v == 11), "{got:?}");
    let got = warp_of(ShflMode::Bfly, 1, 31);
    assert!(
        got.iter()
            .enumerate()
            .all(|(l, v)| *v == (l as u32 ^ 1) * 10 + 1)
    );
}

#[test]
fn per_lane_source_operands() {
    // Each lane reads from lane (31 - l): a register lane operand.
    let got = run(32, |b, t| {
        let from = b.u32_op(ArithOp::Sub, Operand::Int(31), t);
        let v = b.u32_op(ArithOp::Mul, t, Operand::Int(3));
        shfl(b, ShflMode::Idx, v, from, 31)
    })
    .unwrap();
    assert!(
        got.iter()
            .enumerate()
            .all(|(l, v)| *v == (31 - l as u32) * 3)
    );
}

#[test]
fn a_shuffle_by_half_a_warp_is_caught() {
    let fault = run(32, |b, t| {
        let v = b.u32_op(ArithOp::Add, t, Operand::Int(0));
        let upper = b.setp(Cmp::Ge, Ty::U32, t, Operand::Int(16));
        b.push_guarded(upper, false, Op::Ret);
        let got = shfl(b, ShflMode::Bfly, v, Operand::Int(1), 31);
        b.push(Op::Mov {
            ty: Ty::U32,
            dst: v,
            src: got.into(),
        });
        v
    })
    .unwrap_err();
    assert_eq!(
        fault.kind,
        FaultKind::ShuffleDivergence {
            lane: 16,
            other_thread: [16, 0, 0],
            other: LaneState::Exited,
        },
        "{fault}"
    );
    assert_eq!(fault.thread, [0, 0, 0]);
    assert!(
        fault.instruction.starts_with("shfl.sync.bfly.b32"),
        "{fault}"
    );
    assert!(fault.to_string().contains("has exited"), "{fault}");
}

#[test]
fn a_partial_warp_cannot_shuffle() {
    let fault = run(48, |b, t| shfl(b, ShflMode::Down, t, Operand::Int(1), 31)).unwrap_err();
    assert!(
        matches!(
            fault.kind,
            FaultKind::ShuffleDivergence {
                lane: 16,
                other: LaneState::Missing,
                ..
            }
        ),
        "{fault}"
    );
    assert_eq!(fault.thread, [32, 0, 0]);
}

#[test]
fn lanes_at_different_shuffles_are_caught() {
    let fault = run(32, |b, t| {
        let other = b.label();
        let join = b.label();
        let out = b.reg(RegClass::B32);
        let low = b.setp(Cmp::Lt, Ty::U32, t, Operand::Int(16));
        b.bra_if(low, false, other);
        let x = shfl(b, ShflMode::Bfly, t, Operand::Int(1), 31);
        b.push(Op::Mov {
            ty: Ty::U32,
            dst: out,
            src: x.into(),
        });
        b.bra(join);
        b.place(other);
        let y = shfl(b, ShflMode::Bfly, t, Operand::Int(1), 31);
        b.push(Op::Mov {
            ty: Ty::U32,
            dst: out,
            src: y.into(),
        });
        b.place(join);
        out
    })
    .unwrap_err();
    assert!(
        matches!(
            fault.kind,
            FaultKind::ShuffleDivergence {
                other: LaneState::AtShuffle { .. },
                ..
            }
        ),
        "{fault}"
    );
}

#[test]
fn a_shuffle_against_a_barrier_deadlocks() {
    let fault = run(32, |b, t| {
        let skip = b.label();
        let low = b.setp(Cmp::Lt, Ty::U32, t, Operand::Int(16));
        let v = b.u32_op(ArithOp::Add, t, Operand::Int(0));
        b.bra_if(low, false, skip);
        let x = shfl(b, ShflMode::Bfly, t, Operand::Int(1), 31);
        b.push(Op::Mov {
            ty: Ty::U32,
            dst: v,
            src: x.into(),
        });
        b.place(skip);
        b.push(Op::BarSync);
        v
    })
    .unwrap_err();
    assert!(
        matches!(
            fault.kind,
            FaultKind::BarrierDeadlock {
                other_thread: [0, 0, 0],
                ..
            }
        ),
        "{fault}"
    );
    assert_eq!(fault.thread, [16, 0, 0]);
}

#[test]
fn shuffles_are_counted_per_warp() {
    let mut b = Builder::new();
    let t = b.special(Special::TidX);
    let _ = shfl(&mut b, ShflMode::Bfly, t, Operand::Int(1), 31);
    let kernel = b.finish("count".into(), 0, 128, 0);
    let stats = ktune_vgpu::run(&kernel, &one_block(128, 0), &mut []).unwrap();
    assert_eq!(stats.shuffles, 4);
    assert_eq!(stats.instructions, 128 * 3);
}

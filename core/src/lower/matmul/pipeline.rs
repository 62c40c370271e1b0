//! The `k` loop over a ring of shared-memory slots filled by `cp.async`,
//! shared by the tensor-core lowering and the SIMT lowering's multi-stage
//! points.
//!
//! ```text
//! prologue: copy tiles 0 .. stages-1 into slots 0 .. stages-2, one commit group each
//! loop over the K tiles (kt):
//!     cp.async.wait_group stages-2          (tile kt has landed, for this thread)
//!     bar.sync                               (… for every thread; slot kt-1 is free)
//!     copy tile kt+stages-1 into slot (kt+stages-1) % stages (when there is one); commit
//!     compute on slot kt % stages
//! cp.async.wait_all
//! ```
//!
//! Every slot gets a commit group, empty or not, so that `wait_group`'s
//! count always names tile `kt`. With one stage the loop copies, waits,
//! synchronizes, computes and synchronizes again (nothing overlaps).

use crate::ptx::Builder;
use crate::ptx::inst::{ArithOp, Cmp, Op, Operand, Reg, Ty};

/// The most shared-memory slots a ring has.
pub(crate) const MAX_STAGES: u32 = 4;

/// The ring: how many tiles, slots and bytes per slot.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ring {
    /// Tiles along `K`.
    pub tiles: u32,
    pub stages: u32,
    pub slot_bytes: u32,
}

/// Emits the loop. `issue` starts (without committing) the copies of the
/// current tile into the slot at the byte offset it is given and moves on
/// to the next tile; `compute` works on the slot at the byte offset it is
/// given.
pub(super) fn ring(
    b: &mut Builder,
    ring: Ring,
    issue: impl Fn(&mut Builder, Reg),
    mut compute: impl FnMut(&mut Builder, Reg),
) {
    let Ring {
        tiles,
        stages,
        slot_bytes,
    } = ring;
    let bytes = stages * slot_bytes;
    let next_slot = |b: &mut Builder, slot: Reg| {
        b.push(Op::Arith {
            op: ArithOp::Add,
            ty: Ty::U32,
            dst: slot,
            a: slot.into(),
            b: imm(slot_bytes),
        });
        b.push(Op::Arith {
            op: ArithOp::Rem,
            ty: Ty::U32,
            dst: slot,
            a: slot.into(),
            b: imm(bytes),
        });
    };

    let read = b.u32_imm(0);
    let write = b.u32_imm((stages - 1) * slot_bytes);
    if stages > 1 {
        let slot = b.u32_imm(0);
        for s in 0..stages - 1 {
            if s < tiles {
                issue(b, slot);
            }
            b.cp_async_commit();
            if s + 1 < stages - 1 {
                next_slot(b, slot);
            }
        }
    }

    let counter = b.u32_imm(0);
    let top = b.label();
    b.place(top);
    if stages == 1 {
        issue(b, read);
        b.cp_async_commit();
        b.cp_async_wait(0);
        b.push(Op::BarSync);
    } else {
        b.cp_async_wait(stages - 2);
        // Tile kt is visible to the block, and every thread is done with
        // slot kt - 1, which the next copies overwrite.
        b.push(Op::BarSync);
        if tiles > stages - 1 {
            let skip = b.label();
            let ahead = b.u32_op(ArithOp::Add, counter, imm(stages - 1));
            let more = b.setp(Cmp::Lt, Ty::U32, ahead, imm(tiles));
            b.bra_if(more, true, skip);
            issue(b, write);
            b.place(skip);
        }
        b.cp_async_commit();
    }
    compute(b, read);
    if stages == 1 {
        // The next tile's copies must wait for every thread's reads.
        b.push(Op::BarSync);
    } else {
        next_slot(b, read);
        next_slot(b, write);
    }
    b.push(Op::Arith {
        op: ArithOp::Add,
        ty: Ty::U32,
        dst: counter,
        a: counter.into(),
        b: Operand::Int(1),
    });
    let more = b.setp(Cmp::Lt, Ty::U32, counter, imm(tiles));
    b.bra_if(more, false, top);
    if stages > 1 {
        b.cp_async_wait_all();
    }
}

fn imm(value: u32) -> Operand {
    Operand::Int(i64::from(value))
}

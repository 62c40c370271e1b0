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
//! count always names tile `kt`. Where a block's count of tiles is its own
//! (a tail split's slices and whole tiles), the loop and the refills
//! compare with it in a register; each count fills the prologue's slots. With one stage the loop copies, waits,
//! synchronizes, computes and synchronizes again (nothing overlaps).
//!
//! A ring whose compute leaves its slot still being read (`held = 1`:
//! `wgmma`s in flight past the tile, waited for one tile later) copies
//! one tile less ahead, tile `kt + stages - 2` into slot `(kt - 2) %
//! stages`, whose reads every thread finished before this barrier.
//!
//! [`ring_ahead`] runs the same ring with each of a tile's steps'
//! operands loaded into registers one step ahead of their use, the next
//! tile's first step's across the barrier, before the tile's last step:
//!
//! ```text
//! prologue: as above; cp.async.wait_group stages-2; bar.sync; load step 0 of slot 0
//! loop over the K tiles (kt):
//!     copy tile kt+stages-1 into slot (kt+stages-1) % stages (when there is one); commit
//!     for each step s of the tile:
//!         s < last: load step s+1 of slot kt % stages
//!         s = last: cp.async.wait_group stages-2; bar.sync   (tile kt+1 has landed; slot kt is read)
//!                   load step 0 of slot (kt+1) % stages (of slot kt % stages on the last tile)
//!         compute step s on the operands loaded before
//! cp.async.wait_all
//! ```
//!
//! The barrier comes after every load of slot `kt`, so the copies into it,
//! issued at the top of the next tile, overwrite nothing still to be read.
//! The last tile's look-ahead reads its own slot again, which holds data
//! (the slot past it may never have been written) and is no longer copied
//! into.

use crate::ptx::Builder;
use crate::ptx::inst::{ArithOp, Cmp, Label, Op, Operand, Reg, Ty};

/// The most shared-memory slots a ring has.
pub(crate) const MAX_STAGES: u32 = 4;

/// The ring: how many tiles, slots and bytes per slot.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ring {
    /// Tiles along `K`: the most a block runs over.
    pub tiles: u32,
    /// The block's own count, where blocks run over different counts (a
    /// tail split's slices and whole tiles): at least `stages` of them.
    pub count: Option<Reg>,
    pub stages: u32,
    pub slot_bytes: u32,
    /// Whether the tiles are read through the async proxy (`wgmma`): each
    /// thread then fences its landed copies (`fence.proxy.async`) before
    /// the barrier that hands them to the block.
    pub async_proxy: bool,
    /// Slots still read once their tile's compute has returned (0 or 1:
    /// the `wgmma`s of the tile before, in flight): the copies run that
    /// many tiles less ahead, so that a slot is refilled only after the
    /// barrier that follows its last read. Needs `stages` of 3 or more.
    pub held: u32,
}

/// The registers that walk the ring: the byte offsets of the slot read and
/// the slot written next, and the current tile.
struct Cursor {
    read: Reg,
    write: Reg,
    counter: Reg,
}

impl Ring {
    /// `slot` moved on to the next slot, in place.
    fn next_slot(self, b: &mut Builder, slot: Reg) {
        let next = self.following(b, slot);
        b.push(Op::Mov {
            ty: Ty::U32,
            dst: slot,
            src: next.into(),
        });
    }

    /// The byte offset of the slot after `slot`: one slot further, less
    /// the ring's size where that reaches the ring's end (a compare and a
    /// select, which ptxas keeps on the uniform datapath). No division: a
    /// `rem.u32` by a size that is not a power of two costs the loop a
    /// float reciprocal, and even by a power of two ptxas spent more
    /// instructions on it (the bf16 default's main loop: 141, now 132).
    fn following(self, b: &mut Builder, slot: Reg) -> Reg {
        let further = b.u32_op(ArithOp::Add, slot, imm(self.slot_bytes));
        let size = imm(self.stages * self.slot_bytes);
        let wrapped = b.u32_op(ArithOp::Sub, further, size);
        let past = b.setp(Cmp::Ge, Ty::U32, further, size);
        b.u32_select(past, wrapped, further)
    }

    /// Tiles whose copies are in flight while one is computed: those
    /// [`Ring::fill`] copies.
    pub(super) fn ahead(self) -> u32 {
        self.stages - 1 - self.held
    }

    /// The block's count of tiles, to compare a tile's index with.
    fn limit(self) -> Operand {
        self.count.map_or(imm(self.tiles), Operand::Reg)
    }

    /// The copies of the first [`Ring::ahead`] tiles into the slots from
    /// the first on, one commit group each (none with one stage, whose
    /// loop copies each tile itself).
    pub(super) fn fill(self, b: &mut Builder, issue: &impl Fn(&mut Builder, Reg)) {
        if self.stages == 1 {
            return;
        }
        let slot = b.u32_imm(0);
        for s in 0..self.ahead() {
            if s < self.tiles {
                issue(b, slot);
            }
            b.cp_async_commit();
            if s + 1 < self.ahead() {
                self.next_slot(b, slot);
            }
        }
    }

    /// The registers of a ring whose first tiles have been copied: reading
    /// the first slot, writing the one after those copies, at tile 0.
    fn cursor(self, b: &mut Builder) -> Cursor {
        Cursor {
            read: b.u32_imm(0),
            write: b.u32_imm(self.ahead() * self.slot_bytes),
            counter: b.u32_imm(0),
        }
    }

    /// [`Ring::fill`], then the registers.
    fn prologue(self, b: &mut Builder, issue: &impl Fn(&mut Builder, Reg)) -> Cursor {
        self.fill(b, issue);
        self.cursor(b)
    }

    /// The copies of tile `kt + ahead` into the write slot, when there is
    /// one, and their commit group (`stages` above 1).
    fn refill(self, b: &mut Builder, cursor: &Cursor, issue: &impl Fn(&mut Builder, Reg)) {
        if self.tiles > self.ahead() {
            let skip = b.label();
            let ahead = b.u32_op(ArithOp::Add, cursor.counter, imm(self.ahead()));
            let more = b.setp(Cmp::Lt, Ty::U32, ahead, self.limit());
            b.bra_if(more, true, skip);
            issue(b, cursor.write);
            b.place(skip);
        }
        b.cp_async_commit();
    }

    /// Waits for tile `kt + 1`'s copies (`kt` at the top of the loop body)
    /// and for every thread to reach this point.
    fn wait(self, b: &mut Builder) {
        b.cp_async_wait(self.ahead() - 1);
        self.hand_over(b);
    }

    /// The barrier after a thread's copies have landed, behind the proxy
    /// fence the async proxy's readers need.
    fn hand_over(self, b: &mut Builder) {
        if self.async_proxy {
            b.push(Op::FenceProxyAsync);
        }
        b.push(Op::BarSync);
    }

    /// The loop's tail: the counter moved on and the branch back to `top`.
    fn close(self, b: &mut Builder, cursor: &Cursor, top: Label) {
        b.push(Op::Arith {
            op: ArithOp::Add,
            ty: Ty::U32,
            dst: cursor.counter,
            a: cursor.counter.into(),
            b: Operand::Int(1),
        });
        let more = b.setp(Cmp::Lt, Ty::U32, cursor.counter, self.limit());
        b.bra_if(more, false, top);
        if self.stages > 1 {
            b.cp_async_wait_all();
        }
    }
}

/// Emits the loop. `issue` starts (without committing) the copies of the
/// current tile into the slot at the byte offset it is given and moves on
/// to the next tile; `compute` works on the slot at the byte offset it is
/// given.
pub(super) fn ring(
    b: &mut Builder,
    ring: Ring,
    issue: impl Fn(&mut Builder, Reg),
    compute: impl FnMut(&mut Builder, Reg),
) {
    ring.fill(b, &issue);
    filled(b, ring, issue, compute);
}

/// The loop of [`ring`] once the ring's first tiles have been copied
/// ([`Ring::fill`], which may run well before: a persistent block fills
/// the ring for its next output tile before the current one's epilogue).
/// `issue` then copies the tiles after those.
pub(super) fn filled(
    b: &mut Builder,
    ring: Ring,
    issue: impl Fn(&mut Builder, Reg),
    mut compute: impl FnMut(&mut Builder, Reg),
) {
    assert!(
        ring.held == 0 || ring.stages >= 3,
        "a held slot needs a third"
    );
    let cursor = ring.cursor(b);
    let top = b.label();
    b.place(top);
    if ring.stages == 1 {
        issue(b, cursor.read);
        b.cp_async_commit();
        b.cp_async_wait(0);
        ring.hand_over(b);
    } else {
        // Tile kt is visible to the block, and every thread is done with
        // slot kt - 1, which the next copies overwrite.
        ring.wait(b);
        ring.refill(b, &cursor, &issue);
    }
    compute(b, cursor.read);
    if ring.stages == 1 {
        // The next tile's copies must wait for every thread's reads.
        b.push(Op::BarSync);
    } else {
        ring.next_slot(b, cursor.read);
        ring.next_slot(b, cursor.write);
    }
    ring.close(b, &cursor, top);
}

/// A tile's work as steps whose operands are loaded ahead, for
/// [`ring_ahead`].
pub(super) trait Steps {
    /// One step's operands, in registers.
    type Operands;
    /// Steps per tile.
    fn count(&self) -> u32;
    /// Loads step `step`'s operands from the slot at byte offset `slot`.
    fn load(&self, b: &mut Builder, slot: Reg, step: u32) -> Self::Operands;
    /// Step `step`'s work on its operands.
    fn compute(&self, b: &mut Builder, operands: &Self::Operands, step: u32);
    /// Copies `from`'s registers into `to`'s.
    fn carry(&self, b: &mut Builder, to: &Self::Operands, from: &Self::Operands);
}

/// Emits the loop with each step's operands loaded one step ahead (see
/// the [module docs](self)); `stages` must be at least 2.
pub(super) fn ring_ahead<S: Steps>(
    b: &mut Builder,
    ring: Ring,
    issue: impl Fn(&mut Builder, Reg),
    steps: &S,
) {
    assert!(ring.stages > 1, "loads ahead need a second slot");
    let cursor = ring.prologue(b, &issue);
    ring.wait(b);
    let carried = steps.load(b, cursor.read, 0);
    let top = b.label();
    b.place(top);
    ring.refill(b, &cursor, &issue);
    let count = steps.count();
    let mut loaded: Option<S::Operands> = None;
    for step in 0..count {
        let next = if step + 1 < count {
            steps.load(b, cursor.read, step + 1)
        } else {
            ring.wait(b);
            let following = ring.following(b, cursor.read);
            let tile = b.u32_op(ArithOp::Add, cursor.counter, imm(1));
            let more = b.setp(Cmp::Lt, Ty::U32, tile, ring.limit());
            let slot = b.u32_select(more, following, cursor.read);
            steps.load(b, slot, 0)
        };
        steps.compute(b, loaded.as_ref().unwrap_or(&carried), step);
        loaded = Some(next);
    }
    let first = loaded.expect("a tile has steps");
    steps.carry(b, &carried, &first);
    ring.next_slot(b, cursor.read);
    ring.next_slot(b, cursor.write);
    ring.close(b, &cursor, top);
}

fn imm(value: u32) -> Operand {
    Operand::Int(i64::from(value))
}

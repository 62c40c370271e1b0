//! Emits a warp-specialized warpgroup contraction (`producer = 1`): the
//! block's `(block_m / warp_m) · (block_n / warp_n)` warpgroups only
//! multiply, and one more warpgroup, the producer, only copies.
//!
//! Both walk the same sequence of fills: the block's output tiles
//! `ctaid.x, ctaid.x + nctaid.x, …` (one, unless the launch is
//! persistent), each tile's `K` tiles in turn, fill `j` in ring slot `j %
//! stages`. Each slot has two named barriers over the whole block: `full`
//! (`1 + slot`), at which the producer arrives once the fill has landed
//! and the consumers wait, and `empty` (`1 + stages + slot`), at which the
//! consumers arrive once their `wgmma`s no longer read it and the producer
//! waits before copying into it again. Nothing else orders the two
//! sides, so the producer runs ahead across tiles: while the consumers
//! compute a tile's epilogue, it fills the ring with the next tile's
//! first `K` tiles, as far as the slots allow.
//!
//! ```text
//! a block past the tiles exits; fills = the block's tiles · K tiles
//! producer (the last warpgroup):
//!     setmaxnreg.dec (where the block reallocates, see `layout::Realloc`)
//!     for each fill j (slot s):
//!         j ≥ stages: bar.sync empty[s]; fence.proxy.async (the fill before in s is read)
//!         cp.async fill j into s; commit
//!         j ≥ 1: cp.async.wait_group 1; fence.proxy.async; bar.arrive full[s − 1]
//!     cp.async.wait_group 0; fence.proxy.async; bar.arrive full[last slot]
//! consumers:
//!     setmaxnreg.inc
//!     for each tile: accumulators zeroed;
//!         for each of its fills j (slot s):
//!             bar.sync full[s]; wgmma.fence; the k-steps' wgmma; commit;
//!             wgmma.wait_group held
//!             release the fill whose wgmmas are now done (j − held, within the
//!             tile): bar.arrive empty[its slot] if fill + stages < fills
//!         wgmma.wait_group 0; release the tile's last fill (held = 1); epilogue
//! ```
//!
//! The producer signals a fill once the next has been issued and the fill
//! has landed, so two are in flight while it waits. Before copying fill
//! `j` it waits for the release of fill `j − stages`, which the consumers
//! give once they hold fill `j − stages + held` at most, and it has
//! signalled every fill up to `j − 2` by then: neither side waits for the
//! other in a cycle (a ring of two slots holds nothing in flight past a
//! fill, `held` 0). The
//! consumers' releases and the producer's waits are counted alike: fill
//! `j` is waited for by the copies of fill `j + stages` exactly when
//! there is one.

use super::MmaLayout;
use super::copy::Copier;
use super::emit::{block_shape, imm};
use super::warpgroup::{Warpgroup, accumulators, drain, issuer};
use crate::ir::Kernel;
use crate::lower::Lowered;
use crate::lower::matmul::output::{Tile, assemble};
use crate::lower::matmul::{MatmulPlan, Side};
use crate::ptx::Builder;
use crate::ptx::inst::{ArithOp, Cmp, Label, Op, Operand, Reg, Special, Ty};

/// Threads of a warpgroup.
const WARPGROUP: u32 = 128;

pub(super) fn emit(kernel: &Kernel, plan: &MatmulPlan, layout: &MmaLayout) -> Lowered {
    let t = layout.tiles;
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let smem = b.shared_base();
    let ctaid = b.special(Special::CtaidX);
    let stride = b.special(Special::NctaidX);
    let blocks = (t.block_m, t.block_n);
    let grid = layout.grid;
    let tiles = Operand::Int(grid as i64);
    // Launchers give the kernel at most a block per tile; a block past
    // them has nothing to do.
    let done = b.label();
    let any = b.setp(Cmp::Lt, Ty::U32, ctaid, tiles);
    b.bra_if(any, true, done);
    let last = b.u32_op(ArithOp::Sub, imm(grid as u32 - 1), ctaid);
    let own = b.u32_op(ArithOp::Div, last, stride);
    let own = b.u32_op(ArithOp::Add, own, imm(1));
    let fills = b.u32_op(ArithOp::Mul, own, imm(layout.k_tiles()));
    let ring = Slots::new(&mut b, layout);

    let producer = b.label();
    let consumers = layout.threads - WARPGROUP;
    let copies = b.setp(Cmp::Ge, Ty::U32, tid, imm(consumers));
    b.bra_if(copies, false, producer);

    if let Some(realloc) = layout.realloc {
        b.push(Op::SetMaxNReg {
            count: realloc.consumers,
            raise: true,
        });
    }
    let group = Warpgroup::new(&mut b, layout, tid, smem);
    let index = copy_of(&mut b, ctaid);
    let top = b.label();
    b.place(top);
    let tile = Tile::at(&mut b, (kernel, plan), blocks, t.group_m, (tid, index));
    let acc = accumulators(&mut b, layout);
    let mut compute = group.compute(layout, &acc);
    tiles_loop(&mut b, layout, &ring, |b, kt| {
        ring.wait(b, Barrier::Full, ring.slot);
        let offset = b.u32_op(ArithOp::Mul, ring.slot, imm(layout.slot_bytes));
        compute(b, offset);
        match (t.held(), kt) {
            // The fill's wgmmas are done.
            (0, _) => ring.release(b, ring.fill, ring.slot, fills),
            // The fill before's are: release it, unless this is the tile's
            // first (whose fill before was released with its tile's last).
            (_, Some(kt)) => {
                let first = b.label();
                let at_first = b.setp(Cmp::Eq, Ty::U32, kt, imm(0));
                b.bra_if(at_first, false, first);
                let before = b.u32_op(ArithOp::Sub, ring.fill, imm(1));
                ring.release(b, before, ring.previous, fills);
                b.place(first);
            }
            // A tile of one fill: it is released once drained.
            (_, None) => {}
        }
    });
    drain(&mut b, layout);
    if t.held() == 1 {
        let before = b.u32_op(ArithOp::Sub, ring.fill, imm(1));
        ring.release(&mut b, before, ring.previous, fills);
    }
    group.epilogue(&mut b, (kernel, plan, layout), &tile, &acc);
    next_tile(&mut b, index, stride, tiles, top);
    b.bra(done);

    b.place(producer);
    if let Some(realloc) = layout.realloc {
        b.push(Op::SetMaxNReg {
            count: realloc.producer,
            raise: false,
        });
    }
    let member = b.u32_op(ArithOp::Sub, tid, imm(consumers));
    let index = copy_of(&mut b, ctaid);
    let top = b.label();
    b.place(top);
    let tile = Tile::at(&mut b, (kernel, plan), blocks, t.group_m, (member, index));
    let [a, bs] = [Side::A, Side::B]
        .map(|side| Copier::new(&mut b, kernel, plan, layout, side, &tile, (smem, None)));
    let issue = issuer(&a, &bs);
    tiles_loop(&mut b, layout, &ring, |b, _| {
        let reused = b.label();
        let fresh = b.setp(Cmp::Lt, Ty::U32, ring.fill, imm(t.stages));
        b.bra_if(fresh, false, reused);
        ring.wait(b, Barrier::Empty, ring.slot);
        // The slot's last reads were the async proxy's (`wgmma`); the
        // copies that overwrite it are generic-proxy writes.
        b.push(Op::FenceProxyAsync);
        b.place(reused);
        let offset = b.u32_op(ArithOp::Mul, ring.slot, imm(layout.slot_bytes));
        issue(b, offset);
        b.cp_async_commit();
        let first = b.label();
        let at_first = b.setp(Cmp::Eq, Ty::U32, ring.fill, imm(0));
        b.bra_if(at_first, false, first);
        b.cp_async_wait(1);
        ring.signal(b, ring.previous);
        b.place(first);
    });
    next_tile(&mut b, index, stride, tiles, top);
    b.cp_async_wait(0);
    ring.signal(&mut b, ring.previous);
    b.place(done);
    assemble(b, kernel, grid, block_shape(layout))
}

/// Which of a slot's two barriers.
#[derive(Clone, Copy)]
enum Barrier {
    Full,
    Empty,
}

/// Where a side of the block stands in the sequence of fills.
struct Slots {
    stages: u32,
    /// The block's threads, all of which meet at every barrier.
    threads: u32,
    /// The current fill's index and slot, and the slot of the fill before.
    fill: Reg,
    slot: Reg,
    previous: Reg,
}

impl Slots {
    fn new(b: &mut Builder, layout: &MmaLayout) -> Slots {
        Slots {
            stages: layout.tiles.stages,
            threads: layout.threads,
            fill: b.u32_imm(0),
            slot: b.u32_imm(0),
            previous: b.u32_imm(0),
        }
    }

    /// The number of `slot`'s barrier `which`, in a register.
    fn barrier(&self, b: &mut Builder, which: Barrier, slot: Reg) -> Operand {
        let first = match which {
            Barrier::Full => 1,
            Barrier::Empty => 1 + self.stages,
        };
        b.u32_op(ArithOp::Add, slot, imm(first)).into()
    }

    /// Waits at `slot`'s barrier `which`.
    fn wait(&self, b: &mut Builder, which: Barrier, slot: Reg) {
        let id = self.barrier(b, which, slot);
        b.push(Op::NamedBar {
            id,
            threads: self.threads,
            wait: true,
        });
    }

    /// Hands the fill in `slot`, landed, to the consumers: the copies
    /// fenced for the async proxy `wgmma` reads through, then an arrival
    /// at the slot's `full` barrier.
    fn signal(&self, b: &mut Builder, slot: Reg) {
        b.push(Op::FenceProxyAsync);
        let id = self.barrier(b, Barrier::Full, slot);
        b.push(Op::NamedBar {
            id,
            threads: self.threads,
            wait: false,
        });
    }

    /// Releases fill `fill` in `slot` to the producer, where it copies
    /// another fill into the slot (`fill + stages < fills`).
    fn release(&self, b: &mut Builder, fill: Reg, slot: Reg, fills: Reg) {
        let last = b.label();
        let refilled = b.u32_op(ArithOp::Add, fill, imm(self.stages));
        let more = b.setp(Cmp::Lt, Ty::U32, refilled, fills);
        b.bra_if(more, true, last);
        let id = self.barrier(b, Barrier::Empty, slot);
        b.push(Op::NamedBar {
            id,
            threads: self.threads,
            wait: false,
        });
        b.place(last);
    }

    /// Moves on to the next fill and its slot.
    fn advance(&self, b: &mut Builder) {
        assign(b, self.previous, self.slot);
        let next = b.u32_op(ArithOp::Add, self.slot, imm(1));
        let wrapped = b.setp(Cmp::Eq, Ty::U32, next, imm(self.stages));
        let next = b.u32_select(wrapped, imm(0), next);
        assign(b, self.slot, next);
        let fill = b.u32_op(ArithOp::Add, self.fill, imm(1));
        assign(b, self.fill, fill);
    }
}

/// The loop over a tile's `K` tiles, one fill each: `body` gets the tile's
/// counter (`None` where a tile has one `K` tile), then the ring moves on.
fn tiles_loop(
    b: &mut Builder,
    layout: &MmaLayout,
    ring: &Slots,
    mut body: impl FnMut(&mut Builder, Option<Reg>),
) {
    let k_tiles = layout.k_tiles();
    if k_tiles == 1 {
        body(b, None);
        ring.advance(b);
        return;
    }
    let kt = b.u32_imm(0);
    let top = b.label();
    b.place(top);
    body(b, Some(kt));
    ring.advance(b);
    let next = b.u32_op(ArithOp::Add, kt, imm(1));
    assign(b, kt, next);
    let more = b.setp(Cmp::Lt, Ty::U32, kt, imm(k_tiles));
    b.bra_if(more, false, top);
}

/// Moves `index` on to the block's next tile and loops back to `top`
/// while there is one.
fn next_tile(b: &mut Builder, index: Reg, stride: Reg, tiles: Operand, top: Label) {
    let next = b.u32_op(ArithOp::Add, index, stride);
    assign(b, index, next);
    let more = b.setp(Cmp::Lt, Ty::U32, index, tiles);
    b.bra_if(more, false, top);
}

/// A register of its own holding `value`, to be moved on in a loop.
fn copy_of(b: &mut Builder, value: Reg) -> Reg {
    let own = b.u32_imm(0);
    assign(b, own, value);
    own
}

fn assign(b: &mut Builder, dst: Reg, src: Reg) {
    b.push(Op::Mov {
        ty: Ty::U32,
        dst,
        src: src.into(),
    });
}

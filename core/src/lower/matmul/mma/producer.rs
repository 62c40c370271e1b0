//! Emits a warp-specialized warpgroup contraction (`producer` 1 or 2):
//! the block's `(block_m / warp_m) · (block_n / warp_n)` warpgroups only
//! multiply, and one more warpgroup, the producer, only copies. With
//! `producer = 2` (ping-pong) two such sets of warpgroups take the tiles
//! of a persistent block in turn, so that one's epilogue runs while the
//! other multiplies.
//!
//! Both walk the same sequence of fills: the block's output tiles
//! `ctaid.x, ctaid.x + nctaid.x, …` (one, unless the launch is
//! persistent), each tile's `K` tiles in turn, fill `j` in ring slot `j %
//! stages`. Each slot has two memory barriers (`mbarrier`) after the ring:
//! `full`, at which the producer's 128 threads arrive as their copies of a
//! fill land (`cp.async.mbarrier.arrive.noinc`) and the consumers wait,
//! and `empty`, at which a lane of each consumer warp (of one set, in
//! ping-pong) arrives once its warpgroup's `wgmma`s no longer read the
//! slot and the producer waits
//! before copying into it again. Fill `j` is phase `j / stages` of its
//! slot's barriers; each side keeps that phase's parity, which flips as
//! its slot wraps. Nothing else orders the two sides, so the producer runs
//! ahead across tiles: while the consumers compute a tile's epilogue, it
//! fills the ring with the next tile's first `K` tiles, as far as the
//! slots allow.
//!
//! ```text
//! a block past the tiles exits
//! thread 0: mbarrier.init full[s] 128, empty[s] (a set's consumer warps),
//!     in ping-pong turn[0], turn[1] (as many); bar.sync 0
//! producer (the last warpgroup):
//!     setmaxnreg.dec (where the block reallocates, see `layout::Realloc`)
//!     for each fill j (slot s, parity p):
//!         wait empty[s] for parity p ^ 1 (the fill before in s released; in
//!             the first round the phase before phase 0, complete already)
//!         fence.proxy.async (the slot's last reads were wgmma's)
//!         cp.async fill j into s; cp.async.mbarrier.arrive.noinc full[s]
//!     wait empty[s] as for the next `stages` fills: the consumers are done
//!         with every fill before the producer exits
//! consumers (in ping-pong, set t: from its first tile, t, passing over
//!     set 0's first tile's fills; none, it exits):
//!     setmaxnreg.inc
//!     for each tile (every other one in ping-pong): accumulators zeroed;
//!         in ping-pong, wait turn[t] (the first: set 0 at once, set 1 for
//!             set 0's first tile)
//!         for each of its fills j (slot s, parity p):
//!             wait full[s] for parity p; fence.proxy.async (the copies, the
//!             producer's writes, handed to the async proxy wgmma reads through)
//!             wgmma.fence; the k-steps' wgmma; commit; wgmma.wait_group held
//!             release the fill whose wgmmas are now done (j − held, within the
//!             tile): a lane of each warp arrives at empty[its slot]
//!         in ping-pong, a lane of each warp arrives at the other set's turn
//!         wgmma.wait_group 0; release the tile's last fill (held = 1); epilogue
//!         in ping-pong, pass over the other set's tile's fills
//! ```
//!
//! The consumers see a fill as soon as its copies land, while the
//! producer goes on issuing the next. Before copying fill `j` the producer
//! waits for the release of fill `j − stages`, which the consumers give
//! once they hold fill `j − stages + held` at most, an earlier fill than
//! `j` (`held` is 0 or 1, `stages` at least 2) whose copies the producer
//! issued without waiting for anything later: neither side waits for the
//! other in a cycle.
//!
//! With `tma = 1` one thread of the producer does its copying, by the
//! tensor memory accelerator (`tma`): `full` expects its one arrival, the
//! fill's bytes expected with it, and the copies' bytes complete the
//! phase; the others exit once they have given their registers away.
//! Those copies and `wgmma`'s reads are both the async proxy's: neither
//! the producer before a fill nor the consumers after their wait fence;
//! thread 0 fences once, after the barriers' inits, which the tensor
//! memory accelerator must see.
//!
//! With `cluster_m = 2` (`tma = 1`) the blocks pair up in clusters of two
//! (consecutive along x, `.reqnctapercluster`), a cluster per tile pair:
//! block `ctaid.x` has rank `ctaid.x % 2` in cluster `ctaid.x / 2`, which
//! walks the pairs of tiles stacked along `M` as one block walks tiles,
//! and computes the pair's `rank`-th tile. Both blocks' producers copy
//! half of each of B's tiles into both blocks' slots (multicast, see
//! `tma`), so a slot is free for either only once both blocks'
//! consumers have released it: `empty` counts the warps of both, and a
//! lane of each consumer warp arrives at the slot's `empty` barrier in
//! both blocks (`mapa`, then `mbarrier.arrive.shared::cluster`). Thread 0
//! releases its inits to the cluster (`fence.mbarrier_init`), and the
//! cluster's barrier takes the block's place before any use, for the
//! other block's copies and arrivals come to this one's barriers. Neither
//! block exits while the other may still reach it: a producer leaves
//! only once both blocks' consumers released its last fills, after their
//! last arrivals here, and a fill's copies into a block land before its
//! consumers' waits for it end.
//!
//! In ping-pong, set `s` takes the block's tiles `s, s + 2, …`, passing
//! over the other set's fills in the ring (their slots and phases), and a
//! lane of each warp releases each of its fills (`empty` counts one set's
//! warps). A `turn` barrier for each set orders them (see `Turns`):
//! a set waits for the other to have waited for its tile's last fill
//! before it waits for its own first, which keeps every wait within one
//! phase of its barrier and the sets' products in turn. It cannot cycle:
//! the other set's waits need only fills issued before this set's.

use super::MmaLayout;
use super::copy::Copier;
use super::emit::{block_shape, imm};
use super::tma::Maps;
use super::warpgroup::{Warpgroup, accumulators, drain, issuer};
use crate::ir::Kernel;
use crate::lower::Lowered;
use crate::lower::matmul::output::{Tile, assemble};
use crate::lower::matmul::{MatmulPlan, Side};
use crate::ptx::Builder;
use crate::ptx::inst::{Addr, ArithOp, Cmp, Label, Op, Operand, Reg, RegClass, Special, Ty};

/// Threads of a warpgroup.
const WARPGROUP: u32 = 128;

/// Threads of a warp.
const WARP: u32 = 32;

pub(super) fn emit(kernel: &Kernel, plan: &MatmulPlan, layout: &MmaLayout) -> Lowered {
    let t = layout.tiles;
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let smem = b.shared_base();
    // A cluster of `cluster_m` blocks (consecutive along x) takes tiles
    // stacked along `M` as one: its index is the block's number divided
    // by `cluster_m`, its rank the rest.
    let cluster = t.cluster_m;
    let (ctaid, stride, rank) = {
        let ctaid = b.special(Special::CtaidX);
        let stride = b.special(Special::NctaidX);
        if cluster > 1 {
            let rank = b.u32_op(ArithOp::Rem, ctaid, imm(cluster));
            let index = b.u32_op(ArithOp::Div, ctaid, imm(cluster));
            let stride = b.u32_op(ArithOp::Div, stride, imm(cluster));
            (index, stride, Some(rank))
        } else {
            (ctaid, stride, None)
        }
    };
    // A block per tile (`persistent = 0`), or fewer that loop over them:
    // the clusters walk the tiles' clusters' worth.
    let tiles = Operand::Int((layout.grid / u64::from(cluster)) as i64);
    // Launchers give the kernel at most a block per tile; a block past
    // them has nothing to do.
    let done = b.label();
    let any = b.setp(Cmp::Lt, Ty::U32, ctaid, tiles);
    b.bra_if(any, true, done);
    let consumers = layout.threads - WARPGROUP;
    let sets = t.consumer_sets();
    let per_set = consumers / sets;
    let ring = Slots::new(&mut b, layout, smem);
    let tma = t.tma == 1;
    // A fill's copies arrive at `full` from each of the producer's
    // threads, or by the tensor memory accelerator, as the bytes the one
    // issuing thread's arrival expects.
    let fillers = if tma { 1 } else { WARPGROUP };
    ring.init(&mut b, tid, (fillers, per_set / WARP), (sets, tma));

    let producer = b.label();
    let copies = b.setp(Cmp::Ge, Ty::U32, tid, imm(consumers));
    b.bra_if(copies, false, producer);

    if let Some(realloc) = layout.realloc {
        b.push(Op::SetMaxNReg {
            count: realloc.consumers,
            raise: true,
        });
    }
    let lane = b.u32_op(ArithOp::Rem, tid, imm(WARP));
    let leader = b.setp(Cmp::Eq, Ty::U32, lane, imm(0));
    let index = copy_of(&mut b, ctaid);
    let (member, turns) = if sets == 1 {
        (tid, None)
    } else {
        // Set `s` takes the block's tiles `s, s + sets, …` and passes over
        // the other's fills; the second may have none.
        let set = b.u32_op(ArithOp::Div, tid, imm(per_set));
        let member = b.u32_op(ArithOp::Rem, tid, imm(per_set));
        let first = b.u32_mad(set, stride, index);
        assign(&mut b, index, first);
        let none = b.setp(Cmp::Ge, Ty::U32, index, tiles);
        b.bra_if(none, false, done);
        let skipped = b.u32_op(ArithOp::Mul, set, imm(layout.k_tiles()));
        ring.skip(&mut b, skipped.into());
        let own = ring.turn(&mut b, set);
        let parity = b.u32_op(ArithOp::Xor, set, imm(1));
        let turns = Turns {
            state: b.u32_op(ArithOp::Or, own, parity),
        };
        (member, Some(turns))
    };
    let group = Warpgroup::new(&mut b, layout, member, smem);
    let top = b.label();
    b.place(top);
    let tile = block_tile(&mut b, (kernel, plan), layout, (member, index), rank);
    let acc = accumulators(&mut b, layout);
    let mut compute = group.compute(layout, &acc);
    if let Some(turns) = &turns {
        turns.wait(&mut b);
    }
    tiles_loop(&mut b, layout, &ring, |b, kt| {
        ring.wait(b, Barrier::Full, ring.parity);
        // The fill's `cp.async` copies are the producer's generic-proxy
        // writes; the consumer's fence, after the wait that ordered them
        // before it, makes them visible to the async proxy `wgmma` reads
        // through. The tensor memory accelerator's are that proxy's own.
        if !tma {
            b.push(Op::FenceProxyAsync);
        }
        let offset = b.u32_op(ArithOp::Mul, ring.slot, imm(layout.slot_bytes));
        compute(b, offset);
        match (t.held(), kt) {
            // The fill's wgmmas are done.
            (0, _) => ring.release(b, leader, ring.slot),
            // The fill before's are: release it, unless this is the tile's
            // first (whose fill before was released with its tile's last).
            (_, Some(kt)) => {
                let first = b.label();
                let at_first = b.setp(Cmp::Eq, Ty::U32, kt, imm(0));
                b.bra_if(at_first, false, first);
                ring.release(b, leader, ring.previous);
                b.place(first);
            }
            // A tile of one fill: it is released once drained.
            (_, None) => {}
        }
    });
    if let Some(turns) = &turns {
        turns.pass(&mut b, leader);
    }
    drain(&mut b, layout);
    if t.held() == 1 {
        ring.release(&mut b, leader, ring.previous);
    }
    group.epilogue(&mut b, (kernel, plan, layout), &tile, &acc);
    if sets > 1 {
        ring.skip(&mut b, imm((sets - 1) * layout.k_tiles()));
    }
    let step = if sets > 1 {
        b.u32_op(ArithOp::Mul, stride, imm(sets))
    } else {
        stride
    };
    next_tile(&mut b, index, step, tiles, top);
    b.bra(done);

    b.place(producer);
    if let Some(realloc) = layout.realloc {
        b.push(Op::SetMaxNReg {
            count: realloc.producer,
            raise: false,
        });
    }
    let member = b.u32_op(ArithOp::Sub, tid, imm(consumers));
    let maps = if tma {
        // One thread issues every copy; the warpgroup's others are done.
        let idle = b.setp(Cmp::Ne, Ty::U32, member, imm(0));
        b.bra_if(idle, false, done);
        Some(Maps::new(&mut b, rank))
    } else {
        None
    };
    let index = copy_of(&mut b, ctaid);
    let top = b.label();
    b.place(top);
    let tile = block_tile(&mut b, (kernel, plan), layout, (member, index), rank);
    if let Some(maps) = &maps {
        tiles_loop(&mut b, layout, &ring, |b, kt| {
            ring.acquire(b, false);
            let offset = b.u32_op(ArithOp::Mul, ring.slot, imm(layout.slot_bytes));
            let slot = b.u32_op(ArithOp::Add, smem, offset);
            let full = ring.barrier(b, Barrier::Full, ring.slot);
            maps.fill(b, (kernel, plan, layout), &tile, (kt, slot, full));
        });
    } else {
        let [a, bs] = [Side::A, Side::B]
            .map(|side| Copier::new(&mut b, kernel, plan, layout, side, &tile, (smem, None)));
        let issue = issuer(&a, &bs);
        tiles_loop(&mut b, layout, &ring, |b, _| {
            ring.acquire(b, true);
            let offset = b.u32_op(ArithOp::Mul, ring.slot, imm(layout.slot_bytes));
            issue(b, offset);
            let full = ring.barrier(b, Barrier::Full, ring.slot);
            b.push(Op::CpAsyncMbarrierArrive { addr: full });
        });
    }
    next_tile(&mut b, index, stride, tiles, top);
    // Exit once the consumers have released every fill: the slots as
    // they would be acquired for the next `stages` fills.
    let slots = b.u32_imm(0);
    let tail = b.label();
    b.place(tail);
    ring.acquire(&mut b, !tma);
    ring.advance(&mut b);
    let next = b.u32_op(ArithOp::Add, slots, imm(1));
    assign(&mut b, slots, next);
    let more = b.setp(Cmp::Lt, Ty::U32, slots, imm(t.stages));
    b.bra_if(more, false, tail);
    b.place(done);
    let mut lowered = assemble(b, kernel, layout.grid, block_shape(layout));
    lowered.ptx.tensor_maps.clone_from(&layout.maps);
    if cluster > 1 {
        lowered.ptx.cluster_blocks = cluster;
    }
    lowered
}

/// The tile of the block's cluster at `index` (the block's own, without
/// clusters): for the cluster's block `rank`, its `rank`-th block of rows.
fn block_tile(
    b: &mut Builder,
    (kernel, plan): (&Kernel, &MatmulPlan),
    layout: &MmaLayout,
    (member, index): (Reg, Reg),
    rank: Option<Reg>,
) -> Tile {
    let t = layout.tiles;
    let blocks = (t.block_m * t.cluster_m, t.block_n);
    let mut tile = Tile::at(b, (kernel, plan), blocks, t.group_m, (member, index));
    if let Some(rank) = rank {
        tile.m0 = b.u32_mad(rank, imm(t.block_m), tile.m0);
    }
    tile
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
    /// Blocks of the cluster, whose consumers all release each slot.
    cluster: u32,
    /// The shared window's address.
    smem: Reg,
    /// The window offset of the first slot's `full` barrier, after the
    /// ring; the `empty` barriers follow the `full` ones.
    barriers: u32,
    /// The current fill's slot and the parity of its phase there, and
    /// the slot of the fill before.
    slot: Reg,
    parity: Reg,
    previous: Reg,
}

impl Slots {
    fn new(b: &mut Builder, layout: &MmaLayout, smem: Reg) -> Slots {
        Slots {
            stages: layout.tiles.stages,
            cluster: layout.tiles.cluster_m,
            smem,
            barriers: layout.barriers(),
            slot: b.u32_imm(0),
            parity: b.u32_imm(0),
            previous: b.u32_imm(0),
        }
    }

    /// Thread 0 sets up every slot's barriers, `full` for `fillers`
    /// arrivals of the producer's threads and `empty` for one from each
    /// of the `warps` warps of a set of consumers (of each block of the
    /// cluster: the fill lands in all of them), and with two sets their
    /// `turn`s, for as many; the block's barrier after it orders that
    /// before any use, or in a cluster the cluster's, the inits released
    /// to it first. With `tma` the barriers' bytes complete by the tensor
    /// memory accelerator, which sees their init only once a proxy fence
    /// has made it visible to the async proxy.
    fn init(
        &self,
        b: &mut Builder,
        tid: Reg,
        (fillers, warps): (u32, u32),
        (sets, tma): (u32, bool),
    ) {
        let skip = b.label();
        let first = b.setp(Cmp::Eq, Ty::U32, tid, imm(0));
        b.bra_if(first, true, skip);
        let turns = if sets > 1 { sets } else { 0 };
        let counts = std::iter::repeat_n(fillers, self.stages as usize)
            .chain(std::iter::repeat_n(
                warps * self.cluster,
                self.stages as usize,
            ))
            .chain(std::iter::repeat_n(warps, turns as usize));
        for (barrier, count) in (0..).zip(counts) {
            let addr = Addr {
                base: self.smem,
                offset: i64::from(self.barriers + 8 * barrier),
            };
            b.push(Op::MbarrierInit {
                addr,
                count: imm(count),
            });
        }
        if self.cluster > 1 {
            b.push(Op::FenceMbarrierInit);
        }
        if tma {
            b.push(Op::FenceProxyAsync);
        }
        b.place(skip);
        if self.cluster > 1 {
            b.push(Op::ClusterArrive);
            b.push(Op::ClusterWait);
        } else {
            b.push(Op::BarSync);
        }
    }

    /// The address of set `set`'s `turn` barrier (ping-pong), after the
    /// slots' barriers: the two are the halves of 16 aligned bytes (the
    /// window and the ring are 1024-byte aligned, the barriers before them
    /// 16 bytes a slot).
    fn turn(&self, b: &mut Builder, set: Reg) -> Reg {
        let first = self.barriers + 16 * self.stages;
        let base = b.u32_op(ArithOp::Add, self.smem, imm(first));
        b.u32_mad(set, imm(8), base)
    }

    /// The address of `slot`'s barrier `which`.
    fn barrier(&self, b: &mut Builder, which: Barrier, slot: Reg) -> Addr {
        let first = match which {
            Barrier::Full => self.barriers,
            Barrier::Empty => self.barriers + 8 * self.stages,
        };
        Addr {
            base: b.u32_mad(slot, imm(8), self.smem),
            offset: i64::from(first),
        }
    }

    /// Waits at the current slot's barrier `which` for the phase of
    /// parity `parity`. The producer's waits, at `empty`, give up with a
    /// trap after a deadline: it exits only once the consumers released
    /// every fill, past all of their own waits, so that any wait that
    /// would last forever leaves the producer waiting too, and its trap
    /// ends the kernel. The consumers' waits keep no register for it.
    fn wait(&self, b: &mut Builder, which: Barrier, parity: Reg) {
        let addr = self.barrier(b, which, self.slot);
        match which {
            Barrier::Full => b.mbarrier_wait(addr, parity.into()),
            Barrier::Empty => b.mbarrier_wait_bounded(addr, parity.into()),
        }
    }

    /// The producer takes the current slot once the consumers released
    /// the fill before in it (in the first round, the phase before phase
    /// 0, which counts as completed). The slot's last reads were the async
    /// proxy's (`wgmma`): copies that overwrite it through the generic
    /// proxy (`cp.async`, `fence`) come after a proxy fence.
    fn acquire(&self, b: &mut Builder, fence: bool) {
        let parity = b.u32_op(ArithOp::Xor, self.parity, imm(1));
        self.wait(b, Barrier::Empty, parity);
        if fence {
            b.push(Op::FenceProxyAsync);
        }
    }

    /// Releases the fill in `slot` to the producer: `leader`, a lane of
    /// each consumer warp, arrives at the slot's `empty` barrier, in a
    /// cluster at each block's (the producers copy into each other's
    /// slots).
    fn release(&self, b: &mut Builder, leader: Reg, slot: Reg) {
        let addr = self.barrier(b, Barrier::Empty, slot);
        if self.cluster == 1 {
            let state = b.reg(RegClass::B64);
            b.push_guarded(leader, false, Op::MbarrierArrive { state, addr });
            return;
        }
        let own = b.u32_op(ArithOp::Add, addr.base, imm(addr.offset as u32));
        for rank in 0..self.cluster {
            let there = b.reg(RegClass::B32);
            b.push(Op::Mapa {
                dst: there,
                src: own,
                rank: imm(rank),
            });
            let addr = Addr {
                base: there,
                offset: 0,
            };
            b.push_guarded(leader, false, Op::MbarrierArriveCluster { addr });
        }
    }

    /// Passes over `fills` fills (another set's, in ping-pong): the slot
    /// moves on by as many, its parity flipping at each wrap.
    fn skip(&self, b: &mut Builder, fills: Operand) {
        let at = b.u32_op(ArithOp::Add, self.slot, fills);
        let wraps = b.u32_op(ArithOp::Div, at, imm(self.stages));
        let slot = b.u32_op(ArithOp::Rem, at, imm(self.stages));
        assign(b, self.slot, slot);
        let odd = b.u32_op(ArithOp::And, wraps, imm(1));
        let parity = b.u32_op(ArithOp::Xor, self.parity, odd);
        assign(b, self.parity, parity);
    }

    /// Moves on to the next fill, its slot and its parity there.
    fn advance(&self, b: &mut Builder) {
        assign(b, self.previous, self.slot);
        let next = b.u32_op(ArithOp::Add, self.slot, imm(1));
        let wrapped = b.setp(Cmp::Eq, Ty::U32, next, imm(self.stages));
        let next = b.u32_select(wrapped, imm(0), next);
        assign(b, self.slot, next);
        let flipped = b.u32_op(ArithOp::Xor, self.parity, imm(1));
        let parity = b.u32_select(wrapped, flipped, self.parity);
        assign(b, self.parity, parity);
    }
}

/// Ping-pong's order between the two sets of consumers: a set waits at
/// its `turn` barrier before it waits for its tile's first fill, and once
/// it has waited for the last, a lane of each of its warps arrives at the
/// other set's. The fills of a tile then follow the other set's wait for
/// every fill before them, so no set waits for a slot's phase more than
/// one ahead of the barrier's (a parity names only the next phase to
/// complete), and one set's products run while the other's epilogue does.
/// Set 0's first wait, for the phase before phase 0, passes at once; set
/// 1's first is for set 0's first tile.
struct Turns {
    /// The address of the set's own `turn` barrier (8-byte aligned; the
    /// other set's is the other half of their 16 bytes), with the parity
    /// of the phase the set waits for next in its low bit: one register
    /// held across the tile's loop, not two (ptxas 12.9 spilled the
    /// second in some 64 × 256 sets).
    state: Reg,
}

impl Turns {
    fn wait(&self, b: &mut Builder) {
        let own = Addr {
            base: b.u32_op(ArithOp::And, self.state, imm(!1)),
            offset: 0,
        };
        let parity = b.u32_op(ArithOp::And, self.state, imm(1));
        b.mbarrier_wait(own, parity.into());
        let flipped = b.u32_op(ArithOp::Xor, self.state, imm(1));
        assign(b, self.state, flipped);
    }

    fn pass(&self, b: &mut Builder, leader: Reg) {
        let own = b.u32_op(ArithOp::And, self.state, imm(!1));
        let other = Addr {
            base: b.u32_op(ArithOp::Xor, own, imm(8)),
            offset: 0,
        };
        let state = b.reg(RegClass::B64);
        b.push_guarded(leader, false, Op::MbarrierArrive { state, addr: other });
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

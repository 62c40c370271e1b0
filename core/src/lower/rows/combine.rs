//! Combining the partial results of a row's threads into the row's value,
//! which every thread of the row ends with.
//!
//! Threads of one warp always combine with butterfly shuffles. A row that
//! spans several warps then takes one of two trees (the `tree` knob):
//!
//! - [`Tree::Shuffle`] (0): butterfly shuffles within each warp, then each
//!   warp's leader writes its warp's value to a shared-memory slot; after
//!   one barrier every warp folds the slots with another butterfly. One
//!   barrier per reduction.
//! - [`Tree::Shared`] (1): every thread writes its partial result to a slot
//!   of its own; `log2(threads_per_row)` halving steps, each followed by a
//!   barrier, fold the upper half of the live slots into the lower half;
//!   then every thread reads slot 0. No shuffle, one barrier per level.
//!
//! Both trees use two sets of slots, alternately, so that a reduction's
//! writes never meet the previous reduction's reads: a set is written again
//! only after a later reduction's barrier, which every thread reaches after
//! its reads of that set.
//!
//! A row spread over a thread-block cluster (`cluster` above 1) then
//! combines its blocks' values ([`Exchange`]): the row's first thread in
//! each block writes its block's value to the row's slot for this
//! reduction, after the tree's slots; after the cluster's barrier
//! (`barrier.cluster.arrive`, then `wait`) lane `l` of every warp reads
//! that slot of block `l mod C` of the cluster (`mapa`,
//! `ld.shared::cluster`) and a butterfly over each `C` lanes folds them, so
//! that every thread of every block ends with the same bits. Each
//! reduction has a slot of its own, so none is written while another
//! block may read it; a last arrival after the last reduction, and its
//! wait just before the block exits ([`Combiner::hold_for_cluster`]),
//! keep every block's slots alive until the whole cluster has read them.

use super::Shape;
use crate::dtype::DType;
use crate::ir::ReduceOp;
use crate::lower::expr;
use crate::ptx::Builder;
use crate::ptx::inst::{
    Addr, ArithOp, Cmp, Op, Operand, Reg, RegClass, ShflMode, Space, Special, Ty,
};

/// How a row spanning several warps combines its partial results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tree {
    Shuffle = 0,
    Shared = 1,
}

impl Tree {
    /// The tree a `tree` knob value selects.
    pub fn from_knob(value: u32) -> Option<Tree> {
        match value {
            0 => Some(Tree::Shuffle),
            1 => Some(Tree::Shared),
            _ => None,
        }
    }
}

/// Bytes of shared memory a rows schedule uses: none when a row fits in a
/// warp; otherwise two sets of slots per row, one per warp for
/// [`Tree::Shuffle`] and one per thread for [`Tree::Shared`].
pub fn shared_bytes(threads_per_row: u32, rows_per_block: u32, warp_size: u32, tree: u32) -> u64 {
    if threads_per_row <= warp_size {
        return 0;
    }
    let slots = if tree == 1 {
        threads_per_row
    } else {
        threads_per_row / warp_size
    };
    2 * u64::from(rows_per_block) * u64::from(slots) * 4
}

/// The shared-memory slots of a row that spans several warps.
enum Slots {
    Shuffle {
        /// Whether this thread is lane 0 of its warp.
        warp_leader: Reg,
        /// Shared address of this thread's warp's slot (first set).
        own: Reg,
        /// Shared address of the slot this thread reads back (first set):
        /// that of warp `lane mod warps` of its row.
        peer: Reg,
    },
    Shared {
        /// The thread's index within its row.
        lane: Reg,
        /// Shared address of this thread's slot (first set).
        own: Reg,
        /// Shared address of the row's slot 0 (first set).
        first: Reg,
    },
}

/// The cluster's slots of a row spread over several blocks. Their
/// addresses are computed from `%tid` at each reduction: kept in registers
/// for the whole kernel, they crowded a 1,024-thread block's 64 into
/// spilling.
struct Exchange {
    threads_per_row: u32,
    /// Byte offset of the slots in the shared window, after the tree's.
    offset: u32,
    /// Bytes of one row's slots: one f32 a reduction.
    row_bytes: u32,
    /// Blocks in the cluster.
    blocks: u32,
    /// Reductions combined across the cluster so far (picks the slot).
    done: u32,
}

/// Combines partial results, reduction after reduction, for one row shape.
pub(super) struct Combiner {
    threads_per_row: u32,
    warp: u32,
    slots: Option<Slots>,
    /// Bytes between the two slot sets.
    set_bytes: u32,
    /// Cross-warp reductions done so far (picks the slot set).
    crossings: u32,
    /// Across the cluster, when the row is spread over one.
    exchange: Option<Exchange>,
}

impl Combiner {
    /// Emits the slot addresses a row of `shape` needs; `lane` is the
    /// thread's index within its row.
    pub fn new(b: &mut Builder, shape: &Shape, tid: Reg, lane: Reg, row_in_block: Reg) -> Combiner {
        let warps = shape.warps_per_row();
        let shared = shared_bytes(
            shape.threads_per_row,
            shape.rows_per_block,
            shape.warp,
            shape.tree as u32,
        ) as u32;
        let slots = (warps > 1).then(|| {
            let base = b.shared_base();
            match shape.tree {
                Tree::Shuffle => {
                    let row_slots =
                        b.u32_mad(row_in_block, Operand::Int(i64::from(warps * 4)), base);
                    let warp_shift = Operand::Int(i64::from(shape.warp.trailing_zeros()));
                    let warp_in_row = b.u32_op(ArithOp::Shr, lane, warp_shift);
                    let own = b.u32_mad(warp_in_row, Operand::Int(4), row_slots);
                    let warp_lane =
                        b.u32_op(ArithOp::And, tid, Operand::Int(i64::from(shape.warp - 1)));
                    let peer_warp = b.u32_op(ArithOp::And, tid, Operand::Int(i64::from(warps - 1)));
                    Slots::Shuffle {
                        warp_leader: b.setp(Cmp::Eq, Ty::U32, warp_lane, Operand::Int(0)),
                        own,
                        peer: b.u32_mad(peer_warp, Operand::Int(4), row_slots),
                    }
                }
                Tree::Shared => Slots::Shared {
                    lane,
                    own: b.u32_mad(tid, Operand::Int(4), base),
                    first: b.u32_mad(
                        row_in_block,
                        Operand::Int(i64::from(shape.threads_per_row * 4)),
                        base,
                    ),
                },
            }
        });
        let exchange = (shape.cluster > 1).then_some(Exchange {
            threads_per_row: shape.threads_per_row,
            offset: shared,
            row_bytes: shape.reductions * 4,
            blocks: shape.cluster,
            done: 0,
        });
        Combiner {
            threads_per_row: shape.threads_per_row,
            warp: shape.warp,
            slots,
            set_bytes: shared / 2,
            crossings: 0,
            exchange,
        }
    }

    /// Combines each thread's partial `acc` (folded with `op`) across its
    /// row; every thread of the row gets the same value.
    pub fn combine(&mut self, b: &mut Builder, op: ReduceOp, acc: Reg) -> Reg {
        let total = self.within_block(b, op, acc);
        match &mut self.exchange {
            Some(exchange) => exchange.combine(b, op, total),
            None => total,
        }
    }

    /// After the row's last reduction: the thread's reads of the cluster's
    /// slots are done (its arrival at the cluster's barrier).
    pub fn release_cluster(&self, b: &mut Builder) {
        if self.exchange.as_ref().is_some_and(|e| e.done > 0) {
            b.push(Op::ClusterArrive);
        }
    }

    /// Just before the block exits: waits until every block of the cluster
    /// is done reading this block's slots.
    pub fn hold_for_cluster(&self, b: &mut Builder) {
        if self.exchange.as_ref().is_some_and(|e| e.done > 0) {
            b.push(Op::ClusterWait);
        }
    }

    /// Combines `acc` across the row's threads in this block.
    fn within_block(&mut self, b: &mut Builder, op: ReduceOp, acc: Reg) -> Reg {
        let set = i64::from(self.set_bytes * (self.crossings % 2));
        match &self.slots {
            None => {
                butterfly(b, op, acc, self.threads_per_row.min(self.warp));
                acc
            }
            Some(Slots::Shuffle {
                warp_leader,
                own,
                peer,
            }) => {
                self.crossings += 1;
                butterfly(b, op, acc, self.warp);
                across_warps(b, op, acc, (*warp_leader, *own, *peer), set, self.warps())
            }
            Some(Slots::Shared { lane, own, first }) => {
                self.crossings += 1;
                shared_tree(b, op, acc, (*lane, *own, *first), set, self.threads_per_row)
            }
        }
    }

    fn warps(&self) -> u32 {
        (self.threads_per_row / self.warp).max(1)
    }
}

impl Exchange {
    /// Combines the blocks' values `total` (folded with `op`) across the
    /// cluster.
    fn combine(&mut self, b: &mut Builder, op: ReduceOp, total: Reg) -> Reg {
        let offset = i64::from(self.offset + 4 * self.done);
        self.done += 1;
        let tid = b.special(Special::TidX);
        let threads = self.threads_per_row;
        let lane = b.u32_op(ArithOp::And, tid, Operand::Int(i64::from(threads - 1)));
        let writer = b.setp(Cmp::Eq, Ty::U32, lane, Operand::Int(0));
        let shift = Operand::Int(i64::from(threads.trailing_zeros()));
        let row_in_block = b.u32_op(ArithOp::Shr, tid, shift);
        let base = b.shared_base();
        let own = b.u32_mad(row_in_block, Operand::Int(i64::from(self.row_bytes)), base);
        b.push_guarded(
            writer,
            false,
            Op::St {
                space: Space::Shared,
                ty: Ty::F32,
                addr: Addr { base: own, offset },
                srcs: vec![total.into()],
            },
        );
        b.push(Op::ClusterArrive);
        b.push(Op::ClusterWait);
        // Lane `l` of each warp reads block `l mod blocks`'s slot, and a
        // butterfly over each group of `blocks` lanes folds them: one load
        // a thread, and every lane ends with the same bits. (Every thread
        // loading every block's slot held a 1,024-thread block's 32
        // registers past spilling with 8 blocks.)
        let rank = b.u32_op(ArithOp::And, tid, Operand::Int(i64::from(self.blocks - 1)));
        let base = b.reg(RegClass::B32);
        b.push(Op::Mapa {
            dst: base,
            src: own,
            rank: rank.into(),
        });
        let acc = b.load(Space::SharedCluster, DType::F32, Addr { base, offset });
        butterfly(b, op, acc, self.blocks);
        acc
    }
}

/// Each warp's leader writes its value to the warp's slot; after the
/// barrier, lane `l` of every warp reads slot `l mod warps` and the warp
/// folds them with a butterfly, so every thread of the row ends with the
/// same bits (each step combines the same two values, in either order, and
/// f32 addition, min and max are commutative).
fn across_warps(
    b: &mut Builder,
    op: ReduceOp,
    acc: Reg,
    (warp_leader, own, peer): (Reg, Reg, Reg),
    set: i64,
    warps: u32,
) -> Reg {
    b.push_guarded(
        warp_leader,
        false,
        Op::St {
            space: Space::Shared,
            ty: Ty::F32,
            addr: Addr {
                base: own,
                offset: set,
            },
            srcs: vec![acc.into()],
        },
    );
    b.push(Op::BarSync);
    let total = b.load(
        Space::Shared,
        DType::F32,
        Addr {
            base: peer,
            offset: set,
        },
    );
    butterfly(b, op, total, warps);
    total
}

/// Every thread writes `acc` to its slot; at each level `s` (half the row's
/// threads, then a quarter, … then 1), after a barrier, threads below `s`
/// fold slot `lane + s` into their own value and slot. Within a level a
/// slot is either read or written (by its owner), never both, so one
/// barrier per level orders everything; after the last one, every thread
/// reads slot 0.
fn shared_tree(
    b: &mut Builder,
    op: ReduceOp,
    acc: Reg,
    (lane, own, first): (Reg, Reg, Reg),
    set: i64,
    threads_per_row: u32,
) -> Reg {
    let store = |b: &mut Builder, guard: Option<Reg>| {
        let st = Op::St {
            space: Space::Shared,
            ty: Ty::F32,
            addr: Addr {
                base: own,
                offset: set,
            },
            srcs: vec![acc.into()],
        };
        match guard {
            Some(pred) => b.push_guarded(pred, false, st),
            None => b.push(st),
        }
    };
    store(b, None);
    let mut level = threads_per_row / 2;
    while level > 0 {
        b.push(Op::BarSync);
        // Every thread loads and folds (those at or above `level` their own
        // slot, which nobody writes at this level, into a value they no
        // longer need); only the store is predicated. No register is
        // written on some paths only: ptxas would stretch such a value back
        // to the kernel's entry and spill it.
        let below = b.setp(Cmp::Lt, Ty::U32, lane, Operand::Int(i64::from(level)));
        let step = b.reg(RegClass::B32);
        b.push(Op::Selp {
            ty: Ty::U32,
            dst: step,
            a: Operand::Int(i64::from(level * 4)),
            b: Operand::Int(0),
            cond: below,
        });
        let from = b.u32_op(ArithOp::Add, own, step);
        let other = b.load(
            Space::Shared,
            DType::F32,
            Addr {
                base: from,
                offset: set,
            },
        );
        expr::fold_into(b, op, acc, other);
        store(b, Some(below));
        level /= 2;
    }
    b.push(Op::BarSync);
    b.load(
        Space::Shared,
        DType::F32,
        Addr {
            base: first,
            offset: set,
        },
    )
}

/// Folds `acc` across the aligned groups of `width` lanes (a power of two up
/// to a warp) with butterfly shuffles, in place; every lane of a group ends
/// with the same value.
fn butterfly(b: &mut Builder, op: ReduceOp, acc: Reg, width: u32) {
    let mut offset = width / 2;
    while offset > 0 {
        let other = b.reg(RegClass::F32);
        b.push(Op::Shfl {
            mode: ShflMode::Bfly,
            dst: other,
            src: acc,
            lane: Operand::Int(i64::from(offset)),
            clamp: 0x1f,
        });
        expr::fold_into(b, op, acc, other);
        offset /= 2;
    }
}

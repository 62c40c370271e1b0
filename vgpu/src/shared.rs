//! A block's dynamic shared memory, with initialisation and race tracking.
//!
//! Every byte records the last thread that wrote it and in which barrier
//! interval ("epoch"), and the threads that read it in the current
//! interval. The epoch advances when a `bar.sync 0` of the block completes,
//! and it keeps counting across blocks: a byte whose last write is older
//! than the current block's first epoch was never written by this block,
//! so nothing has to be cleared between blocks.
//!
//! Races are detected per byte, independently of the order in which the
//! interpreter happens to run threads: a write conflicts with any write or
//! read by another thread in the same epoch, a read with a write by another
//! thread in the same epoch, unless named barriers order the two
//! ([`crate::order`]: each access is stamped with its thread's clock). Two
//! readers are kept inline; a byte read by more threads that no barrier
//! orders is *crowded*, and in a kernel without named barriers any write
//! to it by the end of the epoch is then a race; in a kernel with them the
//! further readers are kept aside for the epoch. A `cp.async` destination
//! is *pending* from the copy's start until it lands: any access to it
//! then is a fault; it lands as a write by the issuing thread at the
//! `cp.async.wait_group` that completes it, or as the memory-barrier phase
//! its thread's `cp.async.mbarrier.arrive` arrived in completes
//! ([`mbarrier`], which also keeps the barriers themselves). A tensor
//! copy's destination is pending likewise from its issue, and lands as
//! the phase it completed its bytes in completes, as the async proxy's
//! write ([`mbarrier`]).
//!
//! Hopper's `wgmma.mma_async` reads shared memory through the async proxy
//! ([`Shared::async_read`]): a byte must have been written before the
//! current barrier interval, or by a write a named or memory barrier
//! orders before the reading warpgroup, and made visible to that proxy by
//! a `fence.proxy.async` after the write: its writer's (each write is
//! numbered, and each thread remembers the number current at its last such
//! fence), or that of a thread of the reading warpgroup the write was
//! ordered before when it fenced (each thread remembers what it knew
//! then). A copy landed by a memory barrier's phase counts only the
//! latter; a tensor copy's bytes, the async proxy's own write, need no
//! fence, only the order. (A write after a `wgmma`'s read is checked for
//! its order, not for a proxy fence.) While the instruction is in flight its bytes must not be
//! written, and until the next barrier no thread of another warpgroup may
//! write them: the read is unordered with such a write, whichever the
//! interpreter runs first (each byte keeps the warpgroups that read it in
//! the current interval). A named barrier orders the read before a write
//! where a thread of the warpgroup arrived there after the
//! `wgmma.wait_group` that completed it and the writer waited there: the
//! completion is a ticket stamped with the warpgroup's clocks.
//!
//! Other blocks of a thread-block cluster read the window too
//! ([`Shared::remote_load`]), ordered by the cluster's barriers, which are
//! counted per thread: barrier `n` orders what a thread did before its
//! `n`-th `barrier.cluster.arrive` before what any thread does after its
//! `n`-th `barrier.cluster.wait`. A write is published by the writer's
//! next arrival's barrier (its arrivals so far, plus one); a remote read
//! is ordered by the reader's next arrival's barrier likewise. A remote
//! read faults unless the reader has waited at the barrier that publishes
//! the byte's last write; a write faults unless the writer has waited at
//! the barrier that orders the byte's last remote read; and the block
//! must not exit before each of its threads has waited at the barrier
//! that orders every remote read of its window.
//!
//! Other blocks' threads reach the window's memory barriers as well: they
//! arrive there (`mbarrier.arrive.shared::cluster` at an address `mapa`
//! gave), and their multicast tensor copies land here, completing bytes
//! at this block's barrier at the offset they name in their own window.
//! The cluster delivers each ([`crate::block`]) as a [`Message`] from the
//! sending block's outbox, and it is checked as an access by a
//! [`Writer::Remote`]: what the sending thread knew of this block's
//! threads when it sent it. A thread comes to know them by waiting for a
//! phase of one of its own block's barriers at which they arrived (each
//! barrier keeps, for each other block, the join of what its arriving
//! threads knew of their own, `mbarrier`), or by a cluster barrier after
//! their accesses. This block's `bar.sync`s order nothing before such a
//! thread, so every access the bytes keep since the block began must be
//! ordered before it. What a thread learns of another block passes on
//! through the barrier it waited at only, not through its own block's
//! barriers after it: stricter than the hardware, which a kernel meets by
//! having the thread that copies or arrives wait itself. The block must
//! not exit before one of its threads has waited for a phase that each
//! other block's thread's last arrival here was part of (a cluster
//! barrier does not count here: stricter again), lest the arrival come
//! after the exit.

mod mbarrier;

use ktune_core::ptx::inst::Space;

use crate::block::warpgroup::WARPGROUP;
use crate::fault::{Access, ClusterProblem, FaultKind, MbarrierProblem};
use crate::order::Order;

pub(crate) use mbarrier::Waited;

/// The address `mov.u32 %r, ktune_smem` yields: a fake base, so a shared
/// offset used as an address (or the reverse) is caught.
pub const SHARED_BASE: u32 = 0x0100_0000;

const NOBODY: u32 = u32::MAX;

/// Who accesses the window: one of the block's threads, or a thread of
/// another block of the cluster (its index in its own block), which knows
/// of this block's threads what it acquired through memory barriers it
/// waited at and others of this block arrived at (`view`, a clock for
/// each column of this block's [`Order`]; see `mbarrier`), and of its
/// cluster barriers, the `waited` it has waited at.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Writer<'a> {
    Thread(u32),
    Remote {
        thread: u32,
        view: &'a [u32],
        waited: u32,
    },
}

impl Writer<'_> {
    /// The thread, in its own block.
    fn thread(&self) -> u32 {
        match *self {
            Writer::Thread(t) | Writer::Remote { thread: t, .. } => t,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct ByteState {
    writer: u32,
    write_epoch: u32,
    /// The writer's clock at the write.
    write_clock: u32,
    /// Threads that read in `read_epoch`, with their clocks, none ordered
    /// before the other's read.
    readers: [(u32, u32); 2],
    read_epoch: u32,
    /// More readers than `readers` holds read in `read_epoch`: the index of
    /// the others in [`Shared::crowds`], or [`CROWDED`].
    crowd: u32,
    /// The thread whose `cp.async` into this byte has not landed yet.
    copier: u32,
    /// That `cp.async`'s index in the kernel body.
    copy_pc: u32,
    /// The number of the last write ([`Shared::writes`] then).
    write_number: u64,
    /// In-flight `wgmma.mma_async`s reading the byte.
    async_readers: u16,
    /// The warpgroups whose `wgmma.mma_async`s read the byte in
    /// `async_read_epoch`, one bit each (a block has at most 8): a thread
    /// of another warpgroup may write the byte only after a barrier.
    async_read_groups: u8,
    async_read_epoch: u32,
    /// The cluster barrier that publishes the last write (see the module
    /// comment).
    release: u32,
    /// The cluster barrier that orders the last read of the byte by
    /// another block of the cluster, that block's rank, and the epoch of
    /// the read (which tells this block's reads from an earlier one's).
    remote_read: u32,
    remote_reader: u32,
    remote_read_epoch: u32,
    /// Whether the byte is part of a live memory barrier (see
    /// [`mbarrier`]).
    mbarrier: bool,
    /// Whether the last write was a copy that landed as a memory
    /// barrier's phase completed (see [`Shared::write_before`]).
    landed: bool,
    /// Whether the copy in flight into the byte (see `copier`) is a
    /// tensor copy, landing as its memory barrier's phase completes.
    copy_tensor: bool,
    /// For a byte a tensor copy landed (the async proxy's write), the
    /// agent of [`Order`] that orders it (its barrier's); [`NOBODY`]
    /// otherwise.
    agent: u32,
}

/// [`ByteState::crowd`] when no further reader was kept.
const CROWDED: u32 = u32::MAX - 1;

const FRESH: ByteState = ByteState {
    writer: NOBODY,
    write_epoch: 0,
    write_clock: 0,
    readers: [(NOBODY, 0); 2],
    read_epoch: 0,
    crowd: NOBODY,
    copier: NOBODY,
    copy_pc: 0,
    write_number: 0,
    async_readers: 0,
    async_read_groups: 0,
    async_read_epoch: 0,
    release: 0,
    remote_read: 0,
    remote_reader: NOBODY,
    remote_read_epoch: 0,
    mbarrier: false,
    landed: false,
    copy_tensor: false,
    agent: NOBODY,
};

#[derive(Debug)]
pub(crate) struct Shared {
    data: Vec<u8>,
    state: Vec<ByteState>,
    epoch: u32,
    block_start: u32,
    /// For each thread: its `barrier.cluster.arrive`s, and the cluster
    /// barriers it has waited at, in this block.
    arrived: Vec<u32>,
    waited: Vec<u32>,
    /// The cluster barrier that orders every read of this block's window
    /// by another block so far, and the last such reader's rank.
    read_until: u32,
    last_reader: u32,
    /// Writes so far (stores and landed copies), which numbers them.
    writes: u64,
    /// For each thread, [`Shared::writes`] at its last `fence.proxy.async`:
    /// its writes numbered below are visible to the async proxy.
    proxy_fenced: Vec<u64>,
    /// For each thread, what it knew at its last `fence.proxy.async`
    /// (its row of [`Order`]): the other threads' writes ordered before
    /// the fence are visible to the async proxy too. Kept in kernels with
    /// named or memory barriers, allocated at the first fence.
    proxy_rows: Vec<u32>,
    /// `%ntid`, to name threads in faults.
    ntid: [u32; 3],
    /// The order named barriers put threads in.
    pub(crate) order: Order,
    /// Whether the kernel has named barriers: whether crowded bytes keep
    /// every reader.
    named: bool,
    /// The readers of crowded bytes past their first two, this epoch.
    crowds: Vec<Vec<(u32, u32)>>,
    /// `wgmma` reads completed in this block: each one's warpgroup and the
    /// clocks of its threads at the completion (empty while in flight).
    tickets: Vec<(u8, Vec<u32>)>,
    /// For each byte, and each warpgroup whose `wgmma`s read it in its
    /// `async_read_epoch`, the ticket of the last such read (allocated by
    /// the first `wgmma`).
    async_tickets: Vec<[u32; 8]>,
    /// The block's memory barriers.
    mbarriers: Vec<mbarrier::Mbarrier>,
    /// The agent of [`Order`] of each memory barrier (its window offset)
    /// that has landed tensor copies, kept from block to block.
    agents: Vec<(u32, u32)>,
    /// Whether a memory barrier's phase landed copies in this block: a
    /// `bar.sync 0` then hands on what each thread's waits acquired.
    landed_any: bool,
    /// For each thread, [`Shared::writes`] at its last
    /// `fence.mbarrier_init`: its barrier inits numbered below are
    /// released to the cluster.
    init_fenced: Vec<u64>,
    /// For each thread, and each other block of the cluster (by rank),
    /// what it knows of that block's threads: the joins it acquired by
    /// waiting at barriers where they arrived (see `mbarrier`), a clock
    /// for each column of that block's [`Order`].
    views: Vec<Vec<Vec<u32>>>,
    /// What the block's threads sent to other blocks of the cluster since
    /// the cluster last delivered it ([`crate::block`]).
    pub(crate) outbox: Vec<Message>,
    /// The other blocks' threads that arrived at the block's memory
    /// barriers: for each (its block's rank, the thread), the clock its
    /// last arrival released, which a wait of one of this block's threads
    /// must have acquired before the block exits.
    arrivals: Vec<(u32, u32, u32)>,
}

/// An access of one block's thread to another block's shared memory, for
/// the cluster to deliver: `thread` (at body index `pc`) of the sending
/// block reaches block `to`, knowing `view` of its threads and having
/// waited at `waited` cluster barriers.
#[derive(Debug)]
pub(crate) struct Message {
    pub thread: u32,
    pub pc: u32,
    pub to: u32,
    pub view: Vec<u32>,
    pub waited: u32,
    pub kind: MessageKind,
}

#[derive(Debug)]
pub(crate) enum MessageKind {
    /// An arrival at the barrier at shared address `addr` of block `to`,
    /// releasing `join`: what the thread knew of its own block's threads.
    Arrive { addr: u64, join: Vec<u32> },
    /// A multicast tensor copy's landing in block `to`: the box's bytes
    /// `data`, for shared address `dst` with `swizzle`, completing at the
    /// barrier at `barrier`.
    Tensor {
        dst: u64,
        barrier: u64,
        swizzle: ktune_core::ptx::Swizzle,
        data: Vec<u8>,
    },
}

impl Shared {
    pub(crate) fn new(bytes: u32, ntid: [u32; 3], named: bool) -> Shared {
        let threads = ntid.iter().product::<u32>() as usize;
        Shared {
            data: vec![0; bytes as usize],
            state: vec![FRESH; bytes as usize],
            epoch: 0,
            block_start: 0,
            arrived: vec![0; ntid.iter().product::<u32>() as usize],
            waited: vec![0; ntid.iter().product::<u32>() as usize],
            read_until: 0,
            last_reader: NOBODY,
            writes: 0,
            proxy_fenced: vec![0; threads],
            proxy_rows: Vec::new(),
            ntid,
            order: Order::new(threads),
            named,
            crowds: Vec::new(),
            tickets: Vec::new(),
            async_tickets: Vec::new(),
            mbarriers: Vec::new(),
            agents: Vec::new(),
            landed_any: false,
            init_fenced: vec![0; threads],
            views: Vec::new(),
            outbox: Vec::new(),
            arrivals: Vec::new(),
        }
    }

    /// The window's size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.data.len()
    }

    /// Starts a new block: every byte becomes uninitialised.
    pub(crate) fn begin_block(&mut self) {
        self.advance();
        self.block_start = self.epoch;
        self.arrived.fill(0);
        self.waited.fill(0);
        self.read_until = 0;
        self.last_reader = NOBODY;
        self.order.begin_block();
        self.tickets.clear();
        self.end_mbarriers();
        self.landed_any = false;
        self.views.clear();
        self.outbox.clear();
        self.arrivals.clear();
    }

    /// An arrival of another block's thread that the block, exiting, has
    /// not waited for: that block's rank and the thread's coordinates.
    pub(crate) fn arrival_at_exit(&self) -> Option<(u32, [u32; 3])> {
        self.arrivals
            .iter()
            .find(|&&(rank, thread, clock)| {
                !self.views.iter().any(|v| {
                    v.get(rank as usize)
                        .and_then(|view| view.get(thread as usize))
                        .is_some_and(|c| *c >= clock)
                })
            })
            .map(|&(rank, thread, _)| (rank, self.coords(thread)))
    }

    /// What `thread` knows of the threads of the cluster's block `rank`.
    fn view(&self, thread: u32, rank: u32) -> &[u32] {
        self.views
            .get(thread as usize)
            .and_then(|v| v.get(rank as usize))
            .map_or(&[], Vec::as_slice)
    }

    fn view_mut(&mut self, thread: u32, rank: u32) -> &mut Vec<u32> {
        let (t, r) = (thread as usize, rank as usize);
        if self.views.len() <= t {
            self.views.resize(t + 1, Vec::new());
        }
        if self.views[t].len() <= r {
            self.views[t].resize(r + 1, Vec::new());
        }
        &mut self.views[t][r]
    }

    /// `thread` (at body index `pc`) sends `kind` to block `to` of the
    /// cluster; an arrival releases what the thread did so far.
    pub(crate) fn send(&mut self, thread: u32, pc: u32, to: u32, kind: MessageKind) {
        let kind = match kind {
            MessageKind::Arrive { addr, mut join } => {
                self.order.release(thread, &mut join);
                MessageKind::Arrive { addr, join }
            }
            tensor => tensor,
        };
        self.outbox.push(Message {
            thread,
            pc,
            to,
            view: self.view(thread, to).to_vec(),
            waited: self.waited[thread as usize],
            kind,
        });
    }

    /// A `bar.sync 0` completed, or a barrier of the whole cluster.
    pub(crate) fn barrier(&mut self) {
        self.advance();
        if self.landed_any {
            self.order.sync_all();
        }
    }

    /// `thread`'s `barrier.cluster.arrive`; false when it has arrived
    /// already and not waited since.
    pub(crate) fn arrive(&mut self, thread: u32) -> bool {
        let t = thread as usize;
        if self.arrived[t] > self.waited[t] {
            return false;
        }
        self.arrived[t] += 1;
        true
    }

    /// `thread`'s cluster barriers arrived at and waited at.
    pub(crate) fn cluster_counts(&self, thread: u32) -> (u32, u32) {
        (self.arrived[thread as usize], self.waited[thread as usize])
    }

    /// `thread`'s wait at its cluster barrier completed.
    pub(crate) fn waited_at_cluster(&mut self, thread: u32) {
        self.waited[thread as usize] += 1;
    }

    /// The rank of a block of the cluster that read this window, where the
    /// block, exiting, has threads that have not waited at the barrier
    /// that orders that read.
    pub(crate) fn read_at_exit(&self) -> Option<u32> {
        let least = self.waited.iter().copied().min().unwrap_or(0);
        (least < self.read_until).then_some(self.last_reader)
    }

    fn advance(&mut self) {
        if self.epoch == u32::MAX {
            self.rebase();
        }
        self.epoch += 1;
        self.crowds.clear();
    }

    /// Whether `u`'s access stamped `stamp` in the current epoch is ordered
    /// before what `x` does now.
    fn before(&self, u: u32, stamp: u32, x: u32) -> bool {
        u == x || self.order.before(u, stamp, x)
    }

    /// Whether `u`'s access stamped `stamp` is ordered before what `writer`
    /// does now: for another block's thread, through what it acquired of
    /// this block's clocks (a `bar.sync` of this block orders nothing
    /// before it).
    fn known(&self, writer: Writer<'_>, u: u32, stamp: u32) -> bool {
        match writer {
            Writer::Thread(x) => self.before(u, stamp, x),
            Writer::Remote { view, .. } => view.get(u as usize).is_some_and(|c| *c > stamp),
        }
    }

    /// [`Shared::write_before`] for `writer`. Another block's thread is
    /// ordered after this block's write by its clocks, or by a cluster
    /// barrier it waited at that published the write; after a copy that
    /// landed as a memory barrier's phase completed, in its own time, by
    /// its clocks alone (a cluster barrier orders nothing of it).
    fn write_before_by(&self, s: &ByteState, writer: Writer<'_>) -> bool {
        match writer {
            Writer::Thread(x) => self.write_before(s, x),
            Writer::Remote { .. } if self.landed(s) => {
                self.known(writer, Self::orderer(s), s.write_clock)
            }
            Writer::Remote { waited, .. } => {
                s.write_epoch < self.block_start
                    || waited >= s.release
                    || self.known(writer, s.writer, s.write_clock)
            }
        }
    }

    /// Whether the last write of a byte (its state `s`) in this block is
    /// ordered before what `x` does now: by a `bar.sync 0` since, or by
    /// named or memory barriers. A copy that landed as a memory barrier's
    /// phase completed lands in its own time, whatever its thread or the
    /// block's barriers do meanwhile: only the waits that saw the phase
    /// complete, and what they are ordered before, come after it (a
    /// `bar.sync 0` after such a wait included, through
    /// [`Order::sync_all`]).
    fn write_before(&self, s: &ByteState, x: u32) -> bool {
        if self.landed(s) {
            self.order.before(Self::orderer(s), s.write_clock, x)
        } else {
            s.write_epoch != self.epoch || self.before(s.writer, s.write_clock, x)
        }
    }

    /// Whether the last write of a byte (its state `s`) is a copy this
    /// block landed as a memory barrier's phase completed.
    fn landed(&self, s: &ByteState) -> bool {
        s.landed && s.write_epoch >= self.block_start
    }

    /// The column of [`Order`] whose clock stamps the last write of a
    /// byte (its state `s`): its barrier's agent for a tensor copy, else
    /// its writer.
    fn orderer(s: &ByteState) -> u32 {
        if s.agent != NOBODY { s.agent } else { s.writer }
    }

    /// Renumbers epochs before the counter overflows, keeping what matters:
    /// written (or read by another block) in this block or not, and
    /// accesses in the current interval.
    fn rebase(&mut self) {
        let (epoch, block_start) = (self.epoch, self.block_start);
        let renumber = |e: u32| match e {
            e if e == epoch => 2,
            e if e >= block_start => 1,
            _ => 0,
        };
        for s in &mut self.state {
            s.write_epoch = renumber(s.write_epoch);
            s.read_epoch = if s.read_epoch == epoch { 2 } else { 0 };
            s.async_read_epoch = if s.async_read_epoch == epoch { 2 } else { 0 };
            s.remote_read_epoch = renumber(s.remote_read_epoch);
        }
        self.epoch = 2;
        self.block_start = 1;
    }

    fn coords(&self, linear: u32) -> [u32; 3] {
        crate::block::thread_coords(linear, self.ntid)
    }

    /// The window offset of an access, after the alignment and bounds
    /// checks. `size` is a power of two.
    fn offset(&self, addr: u64, size: u32, access: Access) -> Result<usize, FaultKind> {
        if addr & (u64::from(size) - 1) != 0 {
            return Err(FaultKind::MisalignedAccess {
                space: Space::Shared,
                access,
                addr,
                size,
            });
        }
        let offset = addr as i64 - i64::from(SHARED_BASE);
        if offset < 0 || offset as u64 + u64::from(size) > self.data.len() as u64 {
            return Err(FaultKind::OutOfBounds {
                space: Space::Shared,
                access,
                addr,
                size,
                param: None,
                offset,
                limit: self.data.len() as u64,
            });
        }
        Ok(offset as usize)
    }

    /// Byte `i`'s state if it may be read: no copy into it in flight, and
    /// written by this block.
    fn written(&self, i: usize) -> Result<ByteState, FaultKind> {
        let s = self.state[i];
        let offset = i as u32;
        if s.copier != NOBODY {
            return Err(self.pending(offset, s, Access::Load));
        }
        if s.mbarrier {
            let problem = MbarrierProblem::PlainAccess {
                access: Access::Load,
            };
            return Err(FaultKind::Mbarrier { offset, problem });
        }
        if s.writer == NOBODY || s.write_epoch < self.block_start {
            return Err(FaultKind::UninitializedShared {
                addr: u64::from(SHARED_BASE) + u64::from(offset),
                offset,
            });
        }
        Ok(s)
    }

    /// The `size` bytes a load by `thread` reads, after the initialisation
    /// and race checks.
    pub(crate) fn load(&mut self, thread: u32, addr: u64, size: u32) -> Result<&[u8], FaultKind> {
        let start = self.offset(addr, size, Access::Load)?;
        let end = start + size as usize;
        for i in start..end {
            let s = self.written(i)?;
            let offset = i as u32;
            if !self.write_before(&s, thread) {
                return Err(self.race(offset, s.writer, true, false));
            }
            self.note_read(i, thread);
        }
        Ok(&self.data[start..end])
    }

    /// Records `thread`'s read of byte `i`: in place of a read ordered
    /// before it, else beside the others.
    fn note_read(&mut self, i: usize, thread: u32) {
        let read = (thread, self.order.clock(thread));
        let s = &mut self.state[i];
        if s.read_epoch != self.epoch {
            s.read_epoch = self.epoch;
            s.readers = [read, (NOBODY, 0)];
            s.crowd = NOBODY;
            return;
        }
        let (readers, crowd) = (s.readers, s.crowd);
        let kept = readers
            .iter()
            .position(|&(u, _)| u == thread)
            .or_else(|| readers.iter().position(|&(u, _)| u == NOBODY))
            .or_else(|| {
                readers
                    .iter()
                    .position(|&(u, stamp)| self.order.before(u, stamp, thread))
            });
        if let Some(k) = kept {
            self.state[i].readers[k] = read;
        } else if !self.named {
            self.state[i].crowd = CROWDED;
        } else if crowd == NOBODY {
            self.state[i].crowd = self.crowds.len() as u32;
            self.crowds.push(vec![read]);
        } else {
            self.crowds[crowd as usize].push(read);
        }
    }

    /// The `size` bytes at `addr` (in this block, of rank `rank`) as block
    /// `reader` of the cluster reads them, its reading thread having
    /// arrived at and waited at `(arrived, waited)` cluster barriers: each
    /// byte's last write published by a barrier the reader has waited at.
    /// Each byte is then held unwritten until a barrier that orders the
    /// read, and the block from exiting.
    pub(crate) fn remote_load(
        &mut self,
        (reader, arrived, waited): (u32, u32, u32),
        rank: u32,
        addr: u64,
        size: u32,
    ) -> Result<&[u8], FaultKind> {
        let start = self.offset(addr, size, Access::Load)?;
        let end = start + size as usize;
        for i in start..end {
            let offset = i as u32;
            let s = self.written(i).map_err(|kind| match kind {
                FaultKind::UninitializedShared { .. } => FaultKind::Cluster {
                    problem: ClusterProblem::Unwritten { rank, offset },
                },
                other => other,
            })?;
            if waited < s.release {
                return Err(FaultKind::Cluster {
                    problem: ClusterProblem::Unordered {
                        rank,
                        offset,
                        writer: self.coords(s.writer),
                    },
                });
            }
        }
        let ordered_by = arrived + 1;
        let block_start = self.block_start;
        for s in &mut self.state[start..end] {
            s.remote_read = match s.remote_read_epoch >= block_start {
                true => s.remote_read.max(ordered_by),
                false => ordered_by,
            };
            s.remote_reader = reader;
            s.remote_read_epoch = self.epoch;
        }
        self.read_until = self.read_until.max(ordered_by);
        self.last_reader = reader;
        Ok(&self.data[start..end])
    }

    /// The `size` bytes a store by `thread` writes, after the race check.
    pub(crate) fn store(
        &mut self,
        thread: u32,
        addr: u64,
        size: u32,
    ) -> Result<&mut [u8], FaultKind> {
        let start = self.offset(addr, size, Access::Store)?;
        let end = start + size as usize;
        self.check_write(thread, start, end)?;
        self.mark_written(thread, self.order.clock(thread), start, end);
        Ok(&mut self.data[start..end])
    }

    /// Records a write by `thread` of window bytes `start..end`, stamped
    /// with its clock `clock`.
    fn mark_written(&mut self, thread: u32, clock: u32, start: usize, end: usize) {
        self.writes += 1;
        self.mark_range(thread, clock, start, end);
    }

    /// [`Shared::mark_written`] as part of the write numbered
    /// [`Shared::writes`] now.
    fn mark_range(&mut self, thread: u32, clock: u32, start: usize, end: usize) {
        let release = self.arrived[thread as usize] + 1;
        for s in &mut self.state[start..end] {
            s.writer = thread;
            s.write_epoch = self.epoch;
            s.write_clock = clock;
            s.landed = false;
            s.agent = NOBODY;
            s.write_number = self.writes;
            s.release = release;
        }
    }

    /// A `fence.proxy.async` by `thread`: its writes so far become visible
    /// to the async proxy.
    pub(crate) fn fence_proxy(&mut self, thread: u32) {
        self.proxy_fenced[thread as usize] = self.writes + 1;
        if self.named {
            let n = self.proxy_fenced.len();
            if self.proxy_rows.is_empty() {
                self.proxy_rows = vec![0; n * n];
            }
            let t = thread as usize;
            self.proxy_rows[t * n..(t + 1) * n].copy_from_slice(self.order.row(thread));
        }
    }

    /// Whether a fence of one of `members` made the last write of a byte
    /// (its state `s`) visible to the async proxy: its writer's fence after
    /// the write (not for a copy landed by a memory barrier's phase, which
    /// lands in its own time), or another's after the write was ordered
    /// before it. A tensor copy's bytes are the async proxy's own write.
    fn proxy_visible(&self, members: std::ops::Range<u32>, s: &ByteState) -> bool {
        if self.landed(s) && s.agent != NOBODY {
            return true;
        }
        if !self.landed(s) && self.proxy_fenced[s.writer as usize] > s.write_number {
            return true;
        }
        let n = self.proxy_fenced.len();
        !self.proxy_rows.is_empty()
            && members
                .map(|m| m as usize)
                .any(|m| m < n && self.proxy_rows[m * n + s.writer as usize] > s.write_clock)
    }

    /// The `size` bytes at `addr` as an in-flight `wgmma.mma_async` reads
    /// them: written before this barrier interval, visible to the async
    /// proxy, and then held until [`Shared::release_async_read`]. Returns
    /// the window offset and the bytes.
    pub(crate) fn async_read(
        &mut self,
        addr: u64,
        size: u32,
        group: usize,
        ticket: u32,
    ) -> Result<(u32, &[u8]), FaultKind> {
        let start = self.offset(addr, size, Access::Load)?;
        let end = start + size as usize;
        let members = group as u32 * WARPGROUP as u32..(group as u32 + 1) * WARPGROUP as u32;
        // The bytes of one write share its number, writer and stamp.
        let mut visible = (0, false);
        for i in start..end {
            let s = self.written(i)?;
            let offset = i as u32;
            // The async proxy is an agent of its own: even the issuing
            // threads' writes need a barrier before it reads them.
            let ordered = || {
                members
                    .clone()
                    .any(|m| self.order.before(Self::orderer(&s), s.write_clock, m))
            };
            if (s.write_epoch == self.epoch || self.landed(&s)) && !ordered() {
                return Err(self.race(offset, s.writer, true, false));
            }
            if visible.0 != s.write_number {
                let fenced = self.proxy_visible(members.clone(), &s);
                visible = (s.write_number, fenced);
            }
            if !visible.1 {
                return Err(FaultKind::AsyncProxyUnfenced {
                    addr: u64::from(SHARED_BASE) + u64::from(offset),
                    offset,
                    writer: self.coords(s.writer),
                });
            }
        }
        let epoch = self.epoch;
        for (s, tickets) in self.state[start..end]
            .iter_mut()
            .zip(&mut self.async_tickets[start..end])
        {
            s.async_readers += 1;
            if s.async_read_epoch != epoch {
                (s.async_read_groups, s.async_read_epoch) = (0, epoch);
            }
            s.async_read_groups |= 1 << group;
            tickets[group] = ticket;
        }
        Ok((start as u32, &self.data[start..end]))
    }

    /// A ticket for the reads of a `wgmma.mma_async` warpgroup `group`
    /// issues, stamped by [`Shared::complete_ticket`].
    pub(crate) fn open_ticket(&mut self, group: usize) -> u32 {
        if self.async_tickets.is_empty() {
            self.async_tickets = vec![[0; 8]; self.data.len()];
        }
        self.tickets.push((group as u8, Vec::new()));
        self.tickets.len() as u32 - 1
    }

    /// The `wgmma.wait_group` that completes the reads of `ticket`: stamped
    /// with the clocks of its warpgroup's threads now.
    pub(crate) fn complete_ticket(&mut self, ticket: u32) {
        let group = u32::from(self.tickets[ticket as usize].0);
        let members = group * WARPGROUP as u32..(group + 1) * WARPGROUP as u32;
        let clocks = members.map(|m| self.order.clock(m)).collect();
        self.tickets[ticket as usize].1 = clocks;
    }

    /// Whether the completed reads of `ticket` are ordered before what
    /// `writer` does now.
    fn ticket_before(&self, ticket: u32, writer: Writer<'_>) -> bool {
        let (group, clocks) = &self.tickets[ticket as usize];
        let first = u32::from(*group) * WARPGROUP as u32;
        (first..).zip(clocks).any(|(m, stamp)| match writer {
            Writer::Thread(x) => self.order.before(m, *stamp, x),
            Writer::Remote { .. } => self.known(writer, m, *stamp),
        })
    }

    /// An in-flight `wgmma.mma_async`'s read of `size` bytes at window
    /// `offset` ends (its group completed).
    pub(crate) fn release_async_read(&mut self, offset: u32, size: u32) {
        let start = offset as usize;
        for s in &mut self.state[start..start + size as usize] {
            s.async_readers -= 1;
        }
    }

    /// The checks of a write by `thread` to window bytes `start..end`:
    /// nothing pending, no other thread's access in this barrier interval.
    fn check_write(&self, thread: u32, start: usize, end: usize) -> Result<(), FaultKind> {
        self.check_write_by(Writer::Thread(thread), start, end)
    }

    /// [`Shared::check_write`] by `writer`. Another block's thread must be
    /// ordered after every access the bytes keep since this block began
    /// (its `bar.sync`s order nothing before it).
    fn check_write_by(
        &self,
        writer: Writer<'_>,
        start: usize,
        end: usize,
    ) -> Result<(), FaultKind> {
        let (own_group, interval) = match writer {
            Writer::Thread(t) => (1 << (t as usize / WARPGROUP), self.epoch),
            Writer::Remote { .. } => (0, self.block_start),
        };
        for i in start..end {
            let s = self.state[i];
            let offset = i as u32;
            if s.copier != NOBODY {
                return Err(self.pending(offset, s, Access::Store));
            }
            if s.mbarrier {
                let problem = MbarrierProblem::PlainAccess {
                    access: Access::Store,
                };
                return Err(FaultKind::Mbarrier { offset, problem });
            }
            if s.async_readers > 0 {
                return Err(FaultKind::WgmmaOverwrite {
                    addr: u64::from(SHARED_BASE) + u64::from(offset),
                    offset,
                });
            }
            let others = s.async_read_groups & !own_group;
            if s.async_read_epoch >= interval {
                let unordered = (0..8).find(|&g| {
                    others & (1 << g) != 0 && !self.ticket_before(self.async_tickets[i][g], writer)
                });
                if let Some(g) = unordered {
                    return Err(self.race_by(writer, offset, (g * WARPGROUP) as u32, false));
                }
            }
            let waited = match writer {
                Writer::Thread(t) => self.waited[t as usize],
                Writer::Remote { waited, .. } => waited,
            };
            if s.remote_reader != NOBODY
                && s.remote_read_epoch >= self.block_start
                && waited < s.remote_read
            {
                return Err(FaultKind::Cluster {
                    problem: ClusterProblem::Overwrite {
                        offset,
                        reader: s.remote_reader,
                    },
                });
            }
            if s.writer != NOBODY && !self.write_before_by(&s, writer) {
                return Err(self.race_by(writer, offset, s.writer, true));
            }
            if s.read_epoch >= interval
                && let Some(reader) = self.unordered_reader(s, writer)
            {
                return Err(self.race_by(writer, offset, reader, false));
            }
        }
        Ok(())
    }

    /// A thread whose read of a byte (its state `s`) is not ordered
    /// before what `writer` does now.
    fn unordered_reader(&self, s: ByteState, writer: Writer<'_>) -> Option<u32> {
        let crowd: &[(u32, u32)] = match s.crowd {
            NOBODY => &[],
            CROWDED => {
                // Three threads or more read it, no two of them ordered:
                // at least one other than the writer.
                let other = s.readers.iter().find(|(u, _)| match writer {
                    Writer::Thread(t) => *u != t,
                    Writer::Remote { .. } => *u != NOBODY,
                });
                return other.map(|(u, _)| *u);
            }
            k => &self.crowds[k as usize],
        };
        s.readers
            .iter()
            .chain(crowd)
            .find(|&&(u, stamp)| u != NOBODY && !self.known(writer, u, stamp))
            .map(|(u, _)| *u)
    }

    /// Starts a `cp.async` by `thread` (its body index `pc`) of `size` bytes
    /// to `addr`: checked as a write now (alignment, bounds, races with this
    /// interval's accesses), the bytes stay pending until
    /// [`Shared::finish_async`]. Returns the window offset.
    pub(crate) fn start_async(
        &mut self,
        thread: u32,
        pc: u32,
        addr: u64,
        size: u32,
    ) -> Result<u32, FaultKind> {
        let start = self.offset(addr, size, Access::Store)?;
        let end = start + size as usize;
        self.check_write(thread, start, end)?;
        for s in &mut self.state[start..end] {
            s.copier = thread;
            s.copy_pc = pc;
        }
        Ok(start as u32)
    }

    /// Lands a `cp.async` started by `thread`: a store of `data` at window
    /// `offset`, by that thread, stamped with its clock `stamp`.
    pub(crate) fn finish_async(
        &mut self,
        thread: u32,
        stamp: u32,
        offset: u32,
        data: &[u8],
    ) -> Result<(), FaultKind> {
        let start = offset as usize;
        let end = start + data.len();
        self.cancel_async(offset, data.len() as u32);
        self.check_write(thread, start, end)?;
        self.mark_written(thread, stamp, start, end);
        self.data[start..end].copy_from_slice(data);
        Ok(())
    }

    /// The bytes of a `cp.async` stop being pending (it landed, or its block
    /// ended without waiting for it).
    pub(crate) fn cancel_async(&mut self, offset: u32, size: u32) {
        let start = offset as usize;
        for s in &mut self.state[start..start + size as usize] {
            s.copier = NOBODY;
            s.copy_tensor = false;
        }
    }

    fn pending(&self, offset: u32, s: ByteState, access: Access) -> FaultKind {
        FaultKind::AsyncCopyPending {
            access,
            addr: u64::from(SHARED_BASE) + u64::from(offset),
            offset,
            copier: self.coords(s.copier),
            copy_pc: s.copy_pc as usize,
            tensor: s.copy_tensor,
        }
    }

    /// What a load of a byte that was unwritten when it ran turns out to
    /// be, now that every other thread has run up to its next barrier.
    pub(crate) fn settle(&self, thread: u32, offset: u32) -> FaultKind {
        let s = self.state[offset as usize];
        if s.writer != NOBODY && !self.write_before(&s, thread) {
            self.race(offset, s.writer, true, false)
        } else {
            FaultKind::UninitializedShared {
                addr: u64::from(SHARED_BASE) + u64::from(offset),
                offset,
            }
        }
    }

    /// The race of `writer`'s write (or, where it arrives at a barrier,
    /// its access) at window `offset` with `first`'s earlier access: for
    /// another block's thread, one that no cluster barrier or memory
    /// barrier orders.
    fn race_by(
        &self,
        writer: Writer<'_>,
        offset: u32,
        first: u32,
        first_was_write: bool,
    ) -> FaultKind {
        match writer {
            Writer::Thread(_) => self.race(offset, first, first_was_write, true),
            Writer::Remote { .. } => FaultKind::Cluster {
                problem: ClusterProblem::RemoteRace {
                    rank: NOBODY,
                    offset,
                    other_thread: self.coords(first),
                    other_wrote: first_was_write,
                },
            },
        }
    }

    fn race(
        &self,
        offset: u32,
        first: u32,
        first_was_write: bool,
        second_is_write: bool,
    ) -> FaultKind {
        FaultKind::SharedRace {
            addr: u64::from(SHARED_BASE) + u64::from(offset),
            offset,
            first_thread: self.coords(first),
            first_was_write,
            second_is_write,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT: u64 = SHARED_BASE as u64;

    /// A window of 16 bytes for two warpgroups, written by thread 0 and
    /// handed to the async proxy behind a barrier; then the warpgroups in
    /// `readers` read it through the async proxy, and their `wgmma`s
    /// complete.
    fn read_by(readers: &[usize]) -> Shared {
        let mut shared = Shared::new(16, [256, 1, 1], false);
        shared.begin_block();
        shared.store(0, AT, 16).expect("a fresh window");
        shared.fence_proxy(0);
        shared.barrier();
        for &group in readers {
            let ticket = shared.open_ticket(group);
            let (offset, _) = shared.async_read(AT, 16, group, ticket).expect("fenced");
            shared.release_async_read(offset, 16);
            shared.complete_ticket(ticket);
        }
        shared
    }

    fn race_with(fault: Result<&mut [u8], FaultKind>) -> [u32; 3] {
        match fault {
            Err(FaultKind::SharedRace {
                first_thread,
                first_was_write: false,
                second_is_write: true,
                ..
            }) => first_thread,
            other => panic!("{other:?}: expected a race with a read"),
        }
    }

    #[test]
    fn a_wgmma_read_orders_other_warpgroups_writes_until_the_next_barrier() {
        // Warpgroup 0 read: its own threads may write once its group
        // completed, warpgroup 1's only after a barrier.
        let mut shared = read_by(&[0]);
        assert!(shared.store(5, AT, 4).is_ok());
        assert_eq!(race_with(shared.store(130, AT + 4, 4)), [0, 0, 0]);
        shared.barrier();
        assert!(shared.store(130, AT + 4, 4).is_ok());
    }

    #[test]
    fn a_named_barrier_orders_a_wgmma_read_completed_before_its_arrivals() {
        for completed_first in [true, false] {
            let mut shared = Shared::new(16, [256, 1, 1], true);
            shared.begin_block();
            shared.store(0, AT, 16).expect("a fresh window");
            shared.fence_proxy(0);
            shared.barrier();
            let ticket = shared.open_ticket(0);
            let (offset, _) = shared.async_read(AT, 16, 0, ticket).expect("fenced");
            shared.release_async_read(offset, 16);
            if completed_first {
                shared.complete_ticket(ticket);
            }
            // Warpgroup 0 arrives, warpgroup 1 waits.
            for t in 0..256 {
                shared
                    .order
                    .arrive(t, 1, 1, 256, t >= 128)
                    .expect("a phase");
            }
            if !completed_first {
                shared.complete_ticket(ticket);
            }
            let write = shared.store(130, AT + 4, 4);
            if completed_first {
                assert!(write.is_ok());
            } else {
                assert_eq!(race_with(write), [0, 0, 0]);
            }
        }
    }

    /// Thread 200 writes 16 bytes and arrives at a memory barrier at
    /// window offset 16, after `fence_first` (a thread, if any) fenced for
    /// the async proxy; thread 5 waits for the phase, and warpgroup 0
    /// opens a ticket for its `wgmma`'s reads.
    fn waited_for_a_write(fence_first: Option<u32>) -> (Shared, u32) {
        let mut shared = Shared::new(24, [256, 1, 1], true);
        shared.begin_block();
        shared.mbarrier_init(0, AT + 16, 1).expect("a fresh window");
        shared.barrier();
        shared.store(200, AT, 16).expect("the data");
        if let Some(thread) = fence_first {
            shared.fence_proxy(thread);
        }
        shared
            .mbarrier_arrive(200, AT + 16, Vec::new())
            .expect("an arrival");
        let waited = shared.mbarrier_try_wait(5, AT + 16, 0).expect("a wait");
        assert_eq!(waited, Waited::Done);
        let ticket = shared.open_ticket(0);
        (shared, ticket)
    }

    /// Thread 200 (warpgroup 1) writes 16 bytes and arrives at a memory
    /// barrier; thread 5 (warpgroup 0) waits for its phase. Warpgroup 0's
    /// `wgmma` may read the bytes once thread 5 has fenced for the async
    /// proxy after its wait, though the writer never fenced.
    #[test]
    fn a_fence_after_a_memory_barrier_hands_another_threads_write_to_the_async_proxy() {
        let (mut shared, ticket) = waited_for_a_write(None);
        assert!(matches!(
            shared.async_read(AT, 16, 0, ticket),
            Err(FaultKind::AsyncProxyUnfenced {
                writer: [200, 0, 0],
                ..
            })
        ));
        // A fence by a thread of another warpgroup that waited too counts
        // for its warpgroup only.
        assert_eq!(shared.mbarrier_try_wait(130, AT + 16, 0), Ok(Waited::Done));
        shared.fence_proxy(130);
        assert!(matches!(
            shared.async_read(AT, 16, 0, ticket),
            Err(FaultKind::AsyncProxyUnfenced { .. })
        ));
        shared.fence_proxy(5);
        assert!(shared.async_read(AT, 16, 0, ticket).is_ok());
    }

    /// A fence before the wait that ordered the write hands nothing over.
    #[test]
    fn a_fence_before_the_wait_hands_over_nothing() {
        let (mut shared, ticket) = waited_for_a_write(Some(5));
        assert!(matches!(
            shared.async_read(AT, 16, 0, ticket),
            Err(FaultKind::AsyncProxyUnfenced { .. })
        ));
    }

    #[test]
    fn every_warpgroup_that_read_is_remembered_whatever_the_order() {
        for readers in [[0, 1], [1, 0]] {
            let mut shared = read_by(&readers);
            assert_eq!(race_with(shared.store(7, AT, 4)), [128, 0, 0]);
            assert_eq!(race_with(shared.store(200, AT + 8, 4)), [0, 0, 0]);
        }
    }
}

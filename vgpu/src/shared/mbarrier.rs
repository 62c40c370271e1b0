//! Memory barriers (`mbarrier`): 64-bit objects in shared memory that
//! count arrivals and transaction bytes in phases, and the order they put
//! threads in.
//!
//! `mbarrier.init` turns 8 aligned bytes into a barrier expecting `count`
//! arrivals a phase, starting in phase 0. Other blocks of a cluster may
//! use it once its thread has released the init to the cluster
//! (`fence.mbarrier_init.release.cluster`) and a cluster barrier, or a
//! chain of memory barriers, orders it before them. The init is a write of those
//! bytes: another thread's arrival or wait must be ordered after it (a
//! `bar.sync`), or the two race. From then until the block ends the bytes
//! are the barrier's: a plain load, store or copy of them is a fault.
//!
//! An arrival (`mbarrier.arrive`) releases what its thread did before it:
//! it joins the thread's vector clock (see [`crate::order`]) into the
//! barrier's, which accumulates every arrival. Each phase also counts
//! transaction bytes (sm_90): `mbarrier.arrive.expect_tx` raises the
//! count by its operand, then arrives; a tensor copy completing its bytes
//! at the barrier lowers it (the count may go negative, the copy's bytes
//! completing before the arrival that expects them). The count must stay
//! within ±(2^20 − 1), and an arrival at a phase whose arrivals are all in
//! (it waits for bytes only) is a fault. The phase completes once its
//! last expected arrival is in and its count is 0, when the join is
//! published and the next phase starts with the full arrival count and
//! no bytes. A wait for a phase of parity `p`
//! (`mbarrier.try_wait.parity`) succeeds once the current phase's parity
//! differs from `p`, and acquires what the last completed phase
//! published (of another block's threads that arrived, what they knew of
//! their own block: see [`Writer::Remote`]); one that would fail parks its thread
//! ([`crate::exec::State::MbarrierWait`]) until a phase completes, when it
//! tries again, in place of spinning. A wait nobody can end is a deadlock
//! that names the arrivals and bytes the phase still misses.
//!
//! `cp.async.mbarrier.arrive.noinc` takes every copy its thread started
//! and has not waited for (a later `cp.async.wait_group` no longer lands
//! them, which is stricter than the hardware) and arrives once they land.
//! They land as the phase completes (the last moment the hardware may land
//! them), as writes by that thread stamped before its arrival, but
//! ordered before nothing but the waits that see the phase complete and
//! what those are ordered before (a `bar.sync` after such a wait
//! included): not before the thread's own later accesses, nor across a
//! `bar.sync` alone, and visible to the async proxy only through a fence
//! after such a wait. The arrival releases what else the thread did before
//! it too (the vector clocks cannot tell the two apart): more than the
//! hardware promises.
//!
//! A tensor copy (`cp.async.bulk.tensor`, [`Shared::tensor_copy`]) is
//! checked as a write by its thread when it issues (the barrier's init
//! made visible to the async proxy by a `fence.proxy.async` of the
//! initialising thread after it, alignment, bounds,
//! races with the accesses before it, `wgmma`s still reading), and its
//! bytes are pending from then on. It completes its transaction bytes at
//! once, in the barrier's current phase, and its data lands as that phase
//! completes: a write by the async proxy, stamped with the clock of the
//! barrier's agent ([`crate::order::Order::add_agent`]), which the phase
//! publishes. So, like a landed `cp.async`, it is ordered before exactly
//! the waits that see the phase (or a later one of the barrier) complete
//! and what those are ordered before; and being the async proxy's own
//! write, `wgmma` reads it without a `fence.proxy.async`. Copies whose
//! phase has not completed when the block ends are dropped, as are
//! `cp.async`s waiting for a phase.

use super::{FRESH, SHARED_BASE, Shared, Writer};
use crate::async_copy::AsyncCopy;
use crate::fault::{Access, ClusterProblem, FaultKind, MbarrierProblem, TensorCopyProblem};
use ktune_core::ptx::Swizzle;
use ktune_core::ptx::inst::Space;

/// The most arrivals a phase may expect, and the most transaction bytes
/// its count may hold either way.
const MAX_COUNT: u64 = (1 << 20) - 1;

/// Bytes of a barrier object.
const SIZE: u32 = 8;

/// The alignment of a tensor copy's destination.
const TENSOR_ALIGN: u64 = 128;

/// A tensor copy's bytes go in 16-byte chunks, which a swizzle moves
/// whole.
const CHUNK: usize = 16;

/// A live memory barrier of the block.
#[derive(Debug)]
pub(super) struct Mbarrier {
    /// Its window offset.
    offset: u32,
    /// Arrivals each phase expects, and those still missing in the current
    /// one.
    expected: u32,
    pending: u32,
    /// The current phase's transaction bytes expected and not yet
    /// completed (negative: completed before an arrival expected them).
    transactions: i32,
    /// Phases completed.
    completed: u32,
    /// The thread that initialised it, and the number of that write: a
    /// tensor copy completes bytes at the barrier only once a
    /// `fence.proxy.async` of that thread after it has made the init
    /// visible to the async proxy.
    init_by: u32,
    init_write: u64,
    /// The join of every arrival's clocks so far.
    join: Vec<u32>,
    /// `join` when the last phase completed: what a wait acquires.
    published: Vec<u32>,
    /// Copies whose arrival has been counted, landing when the phase
    /// completes: each thread's, with its clock before the arrival.
    landing: Vec<(u32, u32, Vec<AsyncCopy>)>,
    /// Tensor copies that completed their bytes in the current phase,
    /// landing when it completes.
    tensors: Vec<TensorLanding>,
    /// For each other block of the cluster whose threads arrived here
    /// (its rank), the join of what they knew of that block's threads
    /// (`Order::release` there), and that join when the last phase
    /// completed: what a wait here acquires of that block.
    remote: Vec<(u32, Vec<u32>)>,
    remote_published: Vec<(u32, Vec<u32>)>,
}

/// A tensor copy waiting for its phase: the issuing thread, and its
/// 16-byte chunks, each with the window offset it lands at.
#[derive(Debug)]
struct TensorLanding {
    thread: u32,
    chunks: Vec<(u32, [u8; CHUNK])>,
}

/// How a `try_wait` went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waited {
    Done,
    /// The phase has not completed; try again once the barrier at
    /// `offset` has completed more than `completed` phases.
    Parked {
        offset: u32,
        completed: u32,
    },
}

impl Shared {
    /// `mbarrier.init` by `thread` of the 8 bytes at `addr`, expecting
    /// `count` arrivals a phase.
    pub(crate) fn mbarrier_init(
        &mut self,
        thread: u32,
        addr: u64,
        count: u64,
    ) -> Result<(), FaultKind> {
        let start = self.offset(addr, SIZE, Access::Store)?;
        let offset = start as u32;
        let fault = |problem| FaultKind::Mbarrier { offset, problem };
        if self.mbarriers.iter().any(|m| m.offset == offset) {
            return Err(fault(MbarrierProblem::Reinit));
        }
        if count == 0 || count > MAX_COUNT {
            return Err(fault(MbarrierProblem::Count { count }));
        }
        let end = start + SIZE as usize;
        self.check_write(thread, start, end)?;
        self.mark_written(thread, self.order.clock(thread), start, end);
        for s in &mut self.state[start..end] {
            s.mbarrier = true;
        }
        let threads = self.proxy_fenced.len();
        self.mbarriers.push(Mbarrier {
            offset,
            expected: count as u32,
            pending: count as u32,
            transactions: 0,
            completed: 0,
            init_by: thread,
            init_write: self.writes,
            join: vec![0; threads],
            published: vec![0; threads],
            landing: Vec::new(),
            tensors: Vec::new(),
            remote: Vec::new(),
            remote_published: Vec::new(),
        });
        Ok(())
    }

    /// `fence.mbarrier_init.release.cluster` by `thread`: its inits so far
    /// are released to the cluster's other blocks.
    pub(crate) fn fence_mbarrier_init(&mut self, thread: u32) {
        self.init_fenced[thread as usize] = self.writes + 1;
    }

    /// The index of the barrier at `addr`, whose init must be ordered
    /// before what `thread` does now.
    fn mbarrier(&self, thread: u32, addr: u64) -> Result<usize, FaultKind> {
        self.mbarrier_by(Writer::Thread(thread), addr)
    }

    /// [`Shared::mbarrier`] for `who`. Another block's thread must be
    /// ordered after the init by a cluster barrier (or clocks), and the
    /// init released to the cluster by a `fence.mbarrier_init` of its
    /// thread.
    fn mbarrier_by(&self, who: Writer<'_>, addr: u64) -> Result<usize, FaultKind> {
        let start = self.offset(addr, SIZE, Access::Load)?;
        let offset = start as u32;
        let Some(k) = self.mbarriers.iter().position(|m| m.offset == offset) else {
            let problem = MbarrierProblem::Uninitialized;
            return Err(FaultKind::Mbarrier { offset, problem });
        };
        let s = self.state[start];
        match who {
            Writer::Thread(thread) => {
                if s.write_epoch == self.epoch && !self.before(s.writer, s.write_clock, thread) {
                    return Err(self.race(offset, s.writer, true, false));
                }
            }
            Writer::Remote { .. } => {
                let init = &self.mbarriers[k];
                if self.init_fenced[init.init_by as usize] <= init.init_write {
                    let problem = ClusterProblem::UnreleasedInit { offset };
                    return Err(FaultKind::Cluster { problem });
                }
                if !self.write_before_by(&s, who) {
                    return Err(self.race_by(who, offset, s.writer, true));
                }
            }
        }
        Ok(k)
    }

    /// Barrier `k`'s transaction count moved by `delta` bytes, if it stays
    /// in range.
    fn transactions(&self, k: usize, delta: i64) -> Result<i32, FaultKind> {
        let barrier = &self.mbarriers[k];
        let count = i64::from(barrier.transactions) + delta;
        if count.unsigned_abs() > MAX_COUNT {
            return Err(FaultKind::Mbarrier {
                offset: barrier.offset,
                problem: MbarrierProblem::Transactions { count },
            });
        }
        Ok(count as i32)
    }

    /// An arrival by `thread` at the barrier at `addr`, once `copies` (the
    /// thread's, for `cp.async.mbarrier.arrive`) land. Returns the phase
    /// it arrived in and the bytes that landed as it completed.
    pub(crate) fn mbarrier_arrive(
        &mut self,
        thread: u32,
        addr: u64,
        copies: Vec<AsyncCopy>,
    ) -> Result<(u32, u64), FaultKind> {
        let k = self.mbarrier(thread, addr)?;
        self.arrive_at(thread, k, copies)
    }

    /// `mbarrier.arrive.expect_tx` by `thread` at the barrier at `addr`:
    /// the current phase expects `bytes` more transaction bytes, then the
    /// thread arrives. Returns what [`Shared::mbarrier_arrive`] does.
    pub(crate) fn mbarrier_arrive_expect(
        &mut self,
        thread: u32,
        addr: u64,
        bytes: u64,
    ) -> Result<(u32, u64), FaultKind> {
        let k = self.mbarrier(thread, addr)?;
        let barrier = &self.mbarriers[k];
        if bytes > MAX_COUNT {
            return Err(FaultKind::Mbarrier {
                offset: barrier.offset,
                problem: MbarrierProblem::Transactions {
                    count: bytes as i64,
                },
            });
        }
        let transactions = self.transactions(k, bytes as i64)?;
        // The arrival's own checks come before the count moves.
        self.arrival_allowed(k)?;
        self.mbarriers[k].transactions = transactions;
        self.arrive_at(thread, k, Vec::new())
    }

    /// An arrival at the barrier at `addr` by a thread of the cluster's
    /// block `rank` (`who`), which released `join` there: what it knew of
    /// its own block's threads. Returns the bytes that landed as the
    /// arrival completed the phase.
    pub(crate) fn mbarrier_arrive_remote(
        &mut self,
        who: Writer<'_>,
        rank: u32,
        join: &[u32],
        addr: u64,
    ) -> Result<u64, FaultKind> {
        let k = self.mbarrier_by(who, addr)?;
        self.arrival_allowed(k)?;
        let thread = who.thread();
        let clock = join.get(thread as usize).copied().unwrap_or(0);
        match self
            .arrivals
            .iter_mut()
            .find(|(r, t, _)| (*r, *t) == (rank, thread))
        {
            Some(arrival) => arrival.2 = arrival.2.max(clock),
            None => self.arrivals.push((rank, thread, clock)),
        }
        let barrier = &mut self.mbarriers[k];
        let entry = match barrier.remote.iter().position(|(r, _)| *r == rank) {
            Some(i) => &mut barrier.remote[i].1,
            None => {
                barrier.remote.push((rank, Vec::new()));
                &mut barrier.remote.last_mut().expect("pushed").1
            }
        };
        join_into(entry, join);
        barrier.pending -= 1;
        if barrier.pending > 0 || barrier.transactions != 0 {
            return Ok(0);
        }
        self.complete_phase(k)
    }

    /// Faults if barrier `k`'s current phase has all its arrivals in.
    fn arrival_allowed(&self, k: usize) -> Result<(), FaultKind> {
        let barrier = &self.mbarriers[k];
        if barrier.pending == 0 {
            return Err(FaultKind::Mbarrier {
                offset: barrier.offset,
                problem: MbarrierProblem::ExtraArrival {
                    expected: barrier.expected,
                    transactions: barrier.transactions,
                },
            });
        }
        Ok(())
    }

    fn arrive_at(
        &mut self,
        thread: u32,
        k: usize,
        copies: Vec<AsyncCopy>,
    ) -> Result<(u32, u64), FaultKind> {
        self.arrival_allowed(k)?;
        let barrier = &mut self.mbarriers[k];
        let stamp = self.order.release(thread, &mut barrier.join);
        let phase = barrier.completed;
        if !copies.is_empty() {
            barrier.landing.push((thread, stamp, copies));
        }
        barrier.pending -= 1;
        if barrier.pending > 0 || barrier.transactions != 0 {
            return Ok((phase, 0));
        }
        Ok((phase, self.complete_phase(k)?))
    }

    /// Barrier `k`'s current phase completes: what its arrivals released
    /// is published, the next phase starts, and the copies waiting for it
    /// land. Returns the bytes landed.
    fn complete_phase(&mut self, k: usize) -> Result<u64, FaultKind> {
        let offset = self.mbarriers[k].offset;
        let tensors = std::mem::take(&mut self.mbarriers[k].tensors);
        // The async proxy's writes are stamped with the barrier's agent,
        // whose next clock the phase publishes.
        let tensor_stamp = match tensors.is_empty() {
            true => None,
            false => {
                let agent = self.agent(offset);
                let stamp = self.order.tick(agent, &mut self.mbarriers[k].join);
                Some((agent, stamp))
            }
        };
        let barrier = &mut self.mbarriers[k];
        barrier.pending = barrier.expected;
        barrier.transactions = 0;
        barrier.completed += 1;
        barrier.published.clone_from(&barrier.join);
        barrier.remote_published.clone_from(&barrier.remote);
        let landing = std::mem::take(&mut barrier.landing);
        let mut landed = 0;
        for (copier, stamp, copies) in landing {
            for copy in copies {
                let data = &copy.data[..usize::from(copy.len)];
                self.finish_async(copier, stamp, copy.offset, data)?;
                let start = copy.offset as usize;
                for s in &mut self.state[start..start + data.len()] {
                    s.landed = true;
                }
                landed += u64::from(copy.len);
                self.landed_any = true;
            }
        }
        if let Some((agent, stamp)) = tensor_stamp {
            for copy in tensors {
                landed += self.land_tensor(agent, stamp, copy);
            }
            self.landed_any = true;
        }
        Ok(landed)
    }

    /// The agent of the barrier at window `offset`, added at its first
    /// landing of a tensor copy.
    fn agent(&mut self, offset: u32) -> u32 {
        if let Some(&(_, agent)) = self.agents.iter().find(|(o, _)| *o == offset) {
            return agent;
        }
        let agent = self.order.add_agent();
        self.agents.push((offset, agent));
        agent
    }

    /// Lands a tensor copy: its bytes stop being pending and become the
    /// async proxy's write, stamped `stamp` by `agent`. Its bytes were
    /// checked as a write when it issued, and nothing could touch them
    /// since. Returns the bytes landed.
    fn land_tensor(&mut self, agent: u32, stamp: u32, copy: TensorLanding) -> u64 {
        // One write: the chunks share its number.
        self.writes += 1;
        for (offset, data) in &copy.chunks {
            let (start, end) = (*offset as usize, *offset as usize + CHUNK);
            self.cancel_async(*offset, CHUNK as u32);
            self.mark_range(copy.thread, stamp, start, end);
            for s in &mut self.state[start..end] {
                s.landed = true;
                s.agent = agent;
            }
            self.data[start..end].copy_from_slice(data);
        }
        (copy.chunks.len() * CHUNK) as u64
    }

    /// `cp.async.bulk.tensor` by `thread` (its body index `pc`): `data`,
    /// the box's bytes row-major, copied to `dst` (128-byte aligned, in
    /// the window), each byte placed by `swizzle` on its window offset,
    /// completing its bytes as transactions of the barrier at `barrier`.
    /// Returns the bytes that landed, should the copy complete the phase.
    pub(crate) fn tensor_copy(
        &mut self,
        thread: u32,
        pc: u32,
        dst: u64,
        barrier: u64,
        swizzle: Swizzle,
        data: &[u8],
    ) -> Result<u64, FaultKind> {
        self.tensor_copy_by(Writer::Thread(thread), pc, (dst, barrier), swizzle, data)
    }

    /// [`Shared::tensor_copy`] by `writer`: a multicast copy of another
    /// block of the cluster lands here, checked against what its thread
    /// knows of this block, at the addresses its operands name in its own
    /// window. Its bytes then record the sending thread's index in its
    /// own block as their writer, which faults name by its coordinates.
    pub(crate) fn tensor_copy_by(
        &mut self,
        writer: Writer<'_>,
        pc: u32,
        (dst, barrier): (u64, u64),
        swizzle: Swizzle,
        data: &[u8],
    ) -> Result<u64, FaultKind> {
        let thread = writer.thread();
        let k = self.mbarrier_by(writer, barrier)?;
        let init = &self.mbarriers[k];
        if self.proxy_fenced[init.init_by as usize] <= init.init_write {
            return Err(FaultKind::TensorCopy {
                problem: TensorCopyProblem::UnfencedInit {
                    offset: init.offset,
                },
            });
        }
        // A swizzled box starts its pattern's period: the hardware's
        // pattern follows address bits, and ktune's layouts assume it from
        // the destination on. (The window's base is 1024-aligned.)
        let align = swizzle
            .span()
            .map_or(TENSOR_ALIGN, |span| 8 * u64::from(span));
        if !dst.is_multiple_of(align) {
            return Err(FaultKind::TensorCopy {
                problem: TensorCopyProblem::Misaligned { addr: dst, align },
            });
        }
        // The swizzle keeps each chunk within its 128-byte line, and the
        // destination starts one: the lines the box covers hold it.
        let offset = dst as i64 - i64::from(SHARED_BASE);
        let lines = (data.len() as u64).div_ceil(TENSOR_ALIGN) * TENSOR_ALIGN;
        let out_of_bounds = || FaultKind::OutOfBounds {
            space: Space::Shared,
            access: Access::Store,
            addr: dst,
            size: data.len() as u32,
            param: None,
            offset,
            limit: self.data.len() as u64,
        };
        if offset < 0 || offset as u64 + lines > self.data.len() as u64 + TENSOR_ALIGN {
            return Err(out_of_bounds());
        }
        let chunks: Vec<u32> = (0..data.len() / CHUNK)
            .map(|j| swizzle.place(offset as u32 + (j * CHUNK) as u32))
            .collect();
        if chunks.iter().any(|c| *c as usize + CHUNK > self.data.len()) {
            return Err(out_of_bounds());
        }
        for chunk in &chunks {
            let start = *chunk as usize;
            self.check_write_by(writer, start, start + CHUNK)?;
        }
        let transactions = self.transactions(k, -(data.len() as i64))?;
        for chunk in &chunks {
            let start = *chunk as usize;
            for s in &mut self.state[start..start + CHUNK] {
                s.copier = thread;
                s.copy_pc = pc;
                s.copy_tensor = true;
            }
        }
        let landing = TensorLanding {
            thread,
            chunks: chunks
                .iter()
                .zip(data.chunks_exact(CHUNK))
                .map(|(at, bytes)| {
                    let mut chunk = [0; CHUNK];
                    chunk.copy_from_slice(bytes);
                    (*at, chunk)
                })
                .collect(),
        };
        let barrier = &mut self.mbarriers[k];
        barrier.tensors.push(landing);
        barrier.transactions = transactions;
        if barrier.pending > 0 || barrier.transactions != 0 {
            return Ok(0);
        }
        self.complete_phase(k)
    }

    /// `mbarrier.try_wait.parity` by `thread` at the barrier at `addr` for
    /// the phase of parity `parity`.
    pub(crate) fn mbarrier_try_wait(
        &mut self,
        thread: u32,
        addr: u64,
        parity: u64,
    ) -> Result<Waited, FaultKind> {
        let k = self.mbarrier(thread, addr)?;
        let barrier = &self.mbarriers[k];
        if u64::from(barrier.completed & 1) == parity & 1 {
            return Ok(Waited::Parked {
                offset: barrier.offset,
                completed: barrier.completed,
            });
        }
        let published = std::mem::take(&mut self.mbarriers[k].published);
        self.order.acquire(thread, &published);
        self.mbarriers[k].published = published;
        let remote = std::mem::take(&mut self.mbarriers[k].remote_published);
        for (rank, join) in &remote {
            join_into(self.view_mut(thread, *rank), join);
        }
        self.mbarriers[k].remote_published = remote;
        Ok(Waited::Done)
    }

    /// Phases the barrier at window `offset` has completed.
    pub(crate) fn mbarrier_completed(&self, offset: u32) -> u32 {
        self.mbarriers
            .iter()
            .find(|m| m.offset == offset)
            .map_or(0, |m| m.completed)
    }

    /// The arrivals each phase of the barrier at window `offset` expects,
    /// those its current phase still misses, and its transaction bytes
    /// still expected.
    pub(crate) fn mbarrier_pending(&self, offset: u32) -> (u32, u32, i32) {
        self.mbarriers
            .iter()
            .find(|m| m.offset == offset)
            .map_or((0, 0, 0), |m| (m.expected, m.pending, m.transactions))
    }

    /// The block's barriers end with it: their bytes become plain memory
    /// again, and copies still waiting for a phase are dropped.
    pub(super) fn end_mbarriers(&mut self) {
        for barrier in std::mem::take(&mut self.mbarriers) {
            let start = barrier.offset as usize;
            for s in &mut self.state[start..start + SIZE as usize] {
                s.mbarrier = FRESH.mbarrier;
            }
            for copy in barrier.landing.into_iter().flat_map(|(_, _, c)| c) {
                self.cancel_async(copy.offset, u32::from(copy.len));
            }
            for copy in barrier.tensors {
                for (offset, _) in copy.chunks {
                    self.cancel_async(offset, CHUNK as u32);
                }
            }
        }
    }
}

/// `into`, entry by entry the larger of itself and `from` (a clock of
/// each column; missing entries are 0).
fn join_into(into: &mut Vec<u32>, from: &[u32]) {
    if into.len() < from.len() {
        into.resize(from.len(), 0);
    }
    for (i, f) in into.iter_mut().zip(from) {
        *i = (*i).max(*f);
    }
}

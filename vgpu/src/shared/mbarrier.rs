//! Memory barriers (`mbarrier`): 64-bit objects in shared memory that
//! count arrivals in phases, and the order they put threads in.
//!
//! `mbarrier.init` turns 8 aligned bytes into a barrier expecting `count`
//! arrivals a phase, starting in phase 0. The init is a write of those
//! bytes: another thread's arrival or wait must be ordered after it (a
//! `bar.sync`), or the two race. From then until the block ends the bytes
//! are the barrier's: a plain load, store or copy of them is a fault.
//!
//! An arrival (`mbarrier.arrive`) releases what its thread did before it:
//! it joins the thread's vector clock (see [`crate::order`]) into the
//! barrier's, which accumulates every arrival, and the phase completes at
//! its last expected arrival, when that join is published. A wait for a
//! phase of parity `p` (`mbarrier.try_wait.parity`) succeeds once the
//! current phase's parity differs from `p`, and acquires what the last
//! completed phase published; one that would fail parks its thread
//! ([`crate::exec::State::MbarrierWait`]) until a phase completes, when it
//! tries again, in place of spinning.
//!
//! `cp.async.mbarrier.arrive.noinc` takes every copy its thread started
//! and has not waited for (a later `cp.async.wait_group` no longer lands
//! them, which is stricter than the hardware) and arrives once they land.
//! They land as the phase completes (the last moment the hardware may land
//! them), as writes by that thread stamped before its arrival, but
//! ordered before nothing but the waits that see the phase complete and
//! what those are ordered before: not before the thread's own later
//! accesses, nor across a `bar.sync`, and visible to the async proxy only
//! through a fence after such a wait. The arrival releases what else the
//! thread did before it too (the vector clocks cannot tell the two
//! apart): more than the hardware promises.

use super::{FRESH, Shared};
use crate::async_copy::AsyncCopy;
use crate::fault::{Access, FaultKind, MbarrierProblem};

/// The most arrivals a phase may expect.
const MAX_COUNT: u64 = (1 << 20) - 1;

/// Bytes of a barrier object.
const SIZE: u32 = 8;

/// A live memory barrier of the block.
#[derive(Debug)]
pub(super) struct Mbarrier {
    /// Its window offset.
    offset: u32,
    /// Arrivals each phase expects, and those still missing in the current
    /// one.
    expected: u32,
    pending: u32,
    /// Phases completed.
    completed: u32,
    /// The join of every arrival's clocks so far.
    join: Vec<u32>,
    /// `join` when the last phase completed: what a wait acquires.
    published: Vec<u32>,
    /// Copies whose arrival has been counted, landing when the phase
    /// completes: each thread's, with its clock before the arrival.
    landing: Vec<(u32, u32, Vec<AsyncCopy>)>,
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
            completed: 0,
            join: vec![0; threads],
            published: vec![0; threads],
            landing: Vec::new(),
        });
        Ok(())
    }

    /// The index of the barrier at `addr`, whose init must be ordered
    /// before what `thread` does now.
    fn mbarrier(&self, thread: u32, addr: u64) -> Result<usize, FaultKind> {
        let start = self.offset(addr, SIZE, Access::Load)?;
        let offset = start as u32;
        let Some(k) = self.mbarriers.iter().position(|m| m.offset == offset) else {
            let problem = MbarrierProblem::Uninitialized;
            return Err(FaultKind::Mbarrier { offset, problem });
        };
        let s = self.state[start];
        if s.write_epoch == self.epoch && !self.before(s.writer, s.write_clock, thread) {
            return Err(self.race(offset, s.writer, true, false));
        }
        Ok(k)
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
        let barrier = &mut self.mbarriers[k];
        let stamp = self.order.release(thread, &mut barrier.join);
        let phase = barrier.completed;
        if !copies.is_empty() {
            barrier.landing.push((thread, stamp, copies));
        }
        barrier.pending -= 1;
        if barrier.pending > 0 {
            return Ok((phase, 0));
        }
        barrier.pending = barrier.expected;
        barrier.completed += 1;
        barrier.published.clone_from(&barrier.join);
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
            }
        }
        Ok((phase, landed))
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
    /// and those its current phase still misses.
    pub(crate) fn mbarrier_pending(&self, offset: u32) -> (u32, u32) {
        self.mbarriers
            .iter()
            .find(|m| m.offset == offset)
            .map_or((0, 0), |m| (m.expected, m.pending))
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
        }
    }
}

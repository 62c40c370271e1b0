//! Warpgroups (the four warps `4i..4i+4` of a block) and Hopper's
//! warpgroup matrix instructions: `wgmma.fence`, `wgmma.mma_async`,
//! `wgmma.commit_group` and `wgmma.wait_group`, each executed by the 128
//! threads of a warpgroup together.
//!
//! The model is stricter than any one GPU:
//! - a `wgmma.mma_async` computes its result when issued, from shared
//!   memory as it is then; the bytes it read stay held by it until the
//!   `wgmma.wait_group` that completes its group, and a write to them
//!   before is a fault, as is a write by another warpgroup's thread not
//!   ordered after that wait by a barrier (a `bar.sync 0`, or a named
//!   barrier the warpgroup arrived at after it);
//!   [`crate::shared::Shared::async_read`] also checks that they were
//!   written before a barrier the warpgroup passed and made visible to
//!   the async proxy;
//! - its accumulator registers belong to it until then: the result lands in
//!   them when the group completes, and another instruction reading them
//!   before is a fault, as is one writing them (found when the result
//!   lands); a later `wgmma.mma_async` of the same warpgroup may chain on
//!   them, reading the result still in flight;
//! - a `wgmma.mma_async` whose accumulators another instruction wrote
//!   since the warpgroup's last `wgmma.fence` is a fault: each holds what
//!   it held at the fence or what a `wgmma` landed in it since (a write of
//!   the value already there goes unseen);
//! - descriptors and `scale-d` must be the same in every thread;
//! - a warpgroup that exits with groups in flight is a fault.
//!
//! `setmaxnreg` is warpgroup-collective too: every thread of the
//! warpgroup executes the same one together. Its count is a multiple of 8
//! from 24 to 256 (checked when decoding); `.inc` may only raise it and
//! `.dec` only lower it. Where the launch says how many registers each
//! thread starts with ([`ktune_core::lower::Launch::registers`]), the
//! model keeps the block's pool: it holds what `.dec`s gave back, an
//! `.inc` takes what it adds from it and waits while it holds too few,
//! and an `.inc` still waiting when no other thread of the block can run
//! is a deadlock ([`FaultKind::RegisterPool`]). Where the launch does not
//! say, the first `setmaxnreg` sets the count unchecked and the pool is
//! not modelled.

use std::collections::{HashMap, VecDeque};

use super::{Block, internal};
use crate::Stats;
use crate::decode::{Exec, Slot, Wgmma};
use crate::descriptor::{self, Descriptor};
use crate::exec::{BlockEnv, Cell, State};
use crate::fault::{Fault, FaultKind, LaneState};
use crate::fragment;
use ktune_core::ptx::inst::MmaKind;

pub(crate) const WARPGROUP: usize = 128;

/// The `wgmma` state of each warpgroup of a block.
#[derive(Debug, Default)]
pub(super) struct Warpgroups {
    groups: Vec<Group>,
    /// The registers of the block's pool no warpgroup holds, where the
    /// launch says each thread's count.
    pool: Option<u32>,
}

#[derive(Debug, Default, Clone)]
struct Group {
    open: Vec<Issued>,
    committed: VecDeque<Vec<Issued>>,
    /// For each accumulator register in-flight instructions write, how
    /// many do.
    in_flight: HashMap<Slot, u32>,
    /// What each accumulator register may hold when a `wgmma` uses it, per
    /// thread: its value at the last `wgmma.fence` (`None`: unwritten), or
    /// what a `wgmma` landed in it since. Empty before the first fence.
    fenced: HashMap<Slot, Vec<Option<u64>>>,
    /// The warpgroup's register count: the launch's, or the one its last
    /// `setmaxnreg` set (`None` while the launch's is not known).
    registers: Option<u32>,
}

/// An in-flight `wgmma.mma_async`.
#[derive(Debug, Clone)]
struct Issued {
    d: Vec<Slot>,
    /// `values[reg][thread]`, f32 bits.
    values: Vec<Vec<u32>>,
    /// The shared bytes it holds: window offsets and lengths.
    reads: Vec<(u32, u32)>,
    /// Its reads' ticket (see [`crate::shared`]).
    ticket: u32,
}

impl Group {
    /// The newest in-flight value of accumulator `slot`, per thread.
    fn newest(&self, slot: Slot) -> Option<&Vec<u32>> {
        self.committed
            .iter()
            .flatten()
            .chain(&self.open)
            .rev()
            .find_map(|op| op.d.iter().position(|s| *s == slot).map(|r| &op.values[r]))
    }

    fn groups_in_flight(&self) -> usize {
        self.committed.len() + usize::from(!self.open.is_empty())
    }
}

impl Warpgroups {
    /// Starts a block of `threads` threads, each given `registers` at
    /// launch (0: unknown).
    pub(super) fn begin_block(&mut self, threads: usize, registers: u32) {
        let group = Group {
            registers: (registers > 0).then_some(registers),
            ..Group::default()
        };
        self.groups = vec![group; threads.div_ceil(WARPGROUP)];
        self.pool = (registers > 0).then_some(0);
    }

    /// Whether the register named `reg` of thread `thread` is an
    /// accumulator an in-flight `wgmma.mma_async` writes.
    pub(super) fn holds(&self, thread: usize, reg: &str, name: impl Fn(Slot) -> String) -> bool {
        self.groups
            .get(thread / WARPGROUP)
            .is_some_and(|g| g.in_flight.keys().any(|s| name(*s) == reg))
    }

    /// The first warpgroup with groups in flight: its first thread and how
    /// many.
    pub(super) fn unfinished(&self) -> Option<(usize, usize)> {
        self.groups
            .iter()
            .enumerate()
            .find(|(_, g)| g.groups_in_flight() > 0)
            .map(|(i, g)| (i * WARPGROUP, g.groups_in_flight()))
    }
}

impl Block<'_> {
    /// Completes every warpgroup-collective instruction a whole warpgroup
    /// waits at; whether any did. Runs after the warp-collective ones, so a
    /// thread of the warpgroup still elsewhere is either ready again (and
    /// the warpgroup waits for it) or stuck, which is a fault.
    pub(super) fn warpgroup_collectives(
        &mut self,
        env: &BlockEnv<'_>,
        stats: &mut Stats,
    ) -> Result<bool, Fault> {
        let mut any = false;
        for group in 0..self.threads.len().div_ceil(WARPGROUP) {
            let Some(first) = self.warpgroup_at(env, group)? else {
                continue;
            };
            let pc = self.threads[first].pc;
            match self.program.insts[pc as usize].exec {
                Exec::WgmmaFence => self.wgmma_fence(env, group),
                Exec::WgmmaCommit => {
                    let g = &mut self.warpgroups.groups[group];
                    let open = std::mem::take(&mut g.open);
                    g.committed.push_back(open);
                }
                Exec::WgmmaWait { pending } => self.wgmma_wait(env, group, pending as usize)?,
                Exec::Wgmma { index } => self.wgmma_issue(env, stats, group, index as usize)?,
                Exec::SetMaxNReg { count, raise } => {
                    let Warpgroups { groups, pool } = &mut self.warpgroups;
                    let g = &mut groups[group];
                    match (g.registers, pool) {
                        (Some(current), _) if (count < current) == raise && count != current => {
                            let kind = FaultKind::RegisterCount {
                                count,
                                current,
                                raise,
                            };
                            return Err(self.fault(env, first, kind));
                        }
                        (Some(current), Some(free)) if raise => {
                            let wanted = (count - current) * WARPGROUP as u32;
                            if wanted > *free {
                                // It waits for another warpgroup's `.dec`.
                                continue;
                            }
                            *free -= wanted;
                        }
                        (Some(current), Some(free)) => {
                            *free += (current - count) * WARPGROUP as u32
                        }
                        _ => {}
                    }
                    g.registers = Some(count);
                }
                _ => return Err(self.fault(env, first, internal("a warpgroup stopped elsewhere"))),
            }
            for t in &mut self.threads[first..first + WARPGROUP] {
                t.pc += 1;
                t.state = State::Ready;
            }
            any = true;
        }
        Ok(any)
    }

    /// Reports a warpgroup waiting at a `setmaxnreg.inc` the block's pool
    /// cannot meet; called once no thread of the block can run on and none
    /// waits for the cluster, when no warpgroup is left to give registers
    /// back.
    pub(super) fn register_deadlock(&self, env: &BlockEnv<'_>) -> Result<(), Fault> {
        let Some(free) = self.warpgroups.pool else {
            return Ok(());
        };
        for group in 0..self.threads.len().div_ceil(WARPGROUP) {
            let Some(first) = self.warpgroup_at(env, group)? else {
                continue;
            };
            let pc = self.threads[first].pc as usize;
            if let Exec::SetMaxNReg { count, raise: true } = self.program.insts[pc].exec {
                let current = self.warpgroups.groups[group].registers.unwrap_or(0);
                let kind = FaultKind::RegisterPool {
                    count,
                    current,
                    free,
                };
                return Err(self.fault(env, first, kind));
            }
        }
        Ok(())
    }

    /// The first thread of warpgroup `group` if all its 128 threads wait at
    /// the same warpgroup-collective instruction; `None` if none waits at
    /// one, or some thread is ready to run on.
    fn warpgroup_at(&self, env: &BlockEnv<'_>, group: usize) -> Result<Option<usize>, Fault> {
        let start = group * WARPGROUP;
        let lanes = start..(start + WARPGROUP).min(self.threads.len());
        let at_warpgroup = |i: usize| {
            let t = &self.threads[i];
            t.state == State::Collective && self.program.insts[t.pc as usize].exec.is_warpgroup()
        };
        let Some(first) = lanes.clone().find(|&i| at_warpgroup(i)) else {
            return Ok(None);
        };
        let divergence = |lane: usize, other_thread, other| FaultKind::WarpgroupDivergence {
            lane: lane as u32,
            other_thread,
            other,
        };
        if lanes.len() < WARPGROUP {
            let kind = divergence(lanes.len(), [0; 3], LaneState::Missing);
            return Err(self.fault(env, first, kind));
        }
        let pc = self.threads[first].pc;
        for (lane, i) in lanes.enumerate() {
            let t = self.threads[i];
            let other = match t.state {
                State::Collective if t.pc == pc => continue,
                State::Collective if at_warpgroup(i) => LaneState::AtCollective {
                    pc: self.program.origin[t.pc as usize],
                },
                // Its warp's collective completed in this round, or its
                // load of the cluster's shared memory is still to come, or
                // it waits at a memory barrier (not `.aligned`: other warps
                // may complete the phase first, and a wait no one ends is
                // reported as the deadlock it is).
                State::Ready
                | State::Collective
                | State::Shuffle { .. }
                | State::Remote { .. }
                | State::MbarrierWait { .. } => {
                    return Ok(None);
                }
                State::Barrier | State::NamedWait { .. } | State::ClusterWait => {
                    let kind = FaultKind::BarrierDeadlock {
                        other_thread: t.tid,
                        other_pc: self.program.origin[t.pc as usize],
                    };
                    return Err(self.fault(env, first, kind));
                }
                State::Exited | State::Parked { .. } => LaneState::Exited,
            };
            return Err(self.fault(env, first, divergence(lane, t.tid, other)));
        }
        Ok(Some(first))
    }

    /// The value every thread of warpgroup `group` holds in `slot`.
    fn uniform(&self, env: &BlockEnv<'_>, group: usize, slot: Slot) -> Result<u64, Fault> {
        let first = group * WARPGROUP;
        let value = self.get(env, first, slot)?;
        for i in first + 1..first + WARPGROUP {
            if self.get(env, i, slot)? != value {
                let kind = FaultKind::WgmmaOperands {
                    reason: format!(
                        "{} is {value:#x} in the warpgroup's first thread and {:#x} in this one; a wgmma's descriptors and scale-d are the warpgroup's",
                        self.program.reg_name(slot),
                        self.get(env, i, slot)?
                    ),
                };
                return Err(self.fault(env, i, kind));
            }
        }
        Ok(value)
    }

    fn wgmma_issue(
        &mut self,
        env: &BlockEnv<'_>,
        stats: &mut Stats,
        group: usize,
        index: usize,
    ) -> Result<(), Fault> {
        let first = group * WARPGROUP;
        let program = self.program;
        let op: &Wgmma = &program.wgmma[index];
        let (kind, n, k) = (op.kind, 2 * op.d.len(), op.kind.k() as usize);
        let operand_fault = |reason: String| FaultKind::WgmmaOperands { reason };
        let a = Descriptor::decode(self.uniform(env, group, op.a)?)
            .map_err(|r| self.fault(env, first, operand_fault(format!("A: {r}"))))?;
        let b = Descriptor::decode(self.uniform(env, group, op.b)?)
            .map_err(|r| self.fault(env, first, operand_fault(format!("B: {r}"))))?;
        let scale_d = self.uniform(env, group, op.scale_d)? != 0;
        self.check_fenced(env, group, &op.d)?;

        let elem: u64 = if kind == MmaKind::Tf32 { 4 } else { 2 };
        let ticket = self.shared.open_ticket(group);
        let mut reads = Vec::with_capacity(64 * k + k * n);
        let mut am = vec![0f32; 64 * k];
        let mut bm = vec![0f32; k * n];
        for (matrix, desc, rows, major) in [(0, a, 64, op.trans_a), (1, b, n, op.trans_b)] {
            for mn in 0..rows {
                for kk in 0..k {
                    let addr = desc.address(mn as u64, kk as u64, elem, major);
                    let (offset, bits) =
                        match self.shared.async_read(addr, elem as u32, group, ticket) {
                            Ok((offset, bytes)) => (
                                offset,
                                bytes
                                    .iter()
                                    .rev()
                                    .fold(0u32, |acc, b| acc << 8 | u32::from(*b)),
                            ),
                            Err(kind) => return Err(self.fault(env, first, kind)),
                        };
                    let value = fragment::value(kind, bits);
                    if matrix == 0 {
                        am[mn * k + kk] = value;
                    } else {
                        bm[kk * n + mn] = value;
                    }
                    reads.push((offset, elem as u32));
                }
            }
        }
        stats.shared_load_bytes += (reads.len() as u64) * elem;
        let flops = 2 * 64 * n as u64 * k as u64;
        stats.mma_flops += flops;
        if kind == MmaKind::Tf32 {
            stats.tf32_flops += flops;
        }

        let g = &self.warpgroups.groups[group];
        let mut values = Vec::with_capacity(op.d.len());
        for (reg, slot) in op.d.iter().enumerate() {
            let newest = g.newest(*slot).cloned();
            let mut column = Vec::with_capacity(WARPGROUP);
            for thread in 0..WARPGROUP {
                let (row, col) = descriptor::accumulator(thread, reg);
                let c = match (&newest, scale_d) {
                    (_, false) => 0.0,
                    (Some(v), true) => f32::from_bits(v[thread]),
                    (None, true) => f32::from_bits(self.get(env, first + thread, *slot)? as u32),
                };
                // The same chain of fused multiply-adds as `mma.sync`'s.
                let sum = (0..k).fold(c, |acc, kk| am[row * k + kk].mul_add(bm[kk * n + col], acc));
                column.push(sum.to_bits());
            }
            values.push(column);
        }
        let d = op.d.clone();
        for slot in &d {
            for thread in first..first + WARPGROUP {
                self.regs[thread * self.program.slots as usize + *slot as usize] = Cell::default();
            }
        }
        let g = &mut self.warpgroups.groups[group];
        for slot in &d {
            *g.in_flight.entry(*slot).or_default() += 1;
        }
        g.open.push(Issued {
            d,
            values,
            reads,
            ticket,
        });
        Ok(())
    }

    /// Thread `thread`'s register `slot`: its value, `None` if unwritten
    /// in this block.
    fn peek(&self, env: &BlockEnv<'_>, thread: usize, slot: Slot) -> Option<u64> {
        let cell = self.regs[thread * self.program.slots as usize + slot as usize];
        (cell.block == env.serial).then_some(cell.value)
    }

    /// `wgmma.fence`: what every accumulator register holds now is what a
    /// `wgmma` may find there.
    fn wgmma_fence(&mut self, env: &BlockEnv<'_>, group: usize) {
        let first = group * WARPGROUP;
        let fenced = self
            .program
            .wgmma_accumulators
            .iter()
            .map(|slot| {
                let values = (first..first + WARPGROUP)
                    .map(|i| self.peek(env, i, *slot))
                    .collect();
                (*slot, values)
            })
            .collect();
        self.warpgroups.groups[group].fenced = fenced;
    }

    /// Faults unless every accumulator in `d` is in flight (chained) or
    /// holds what it held at the last `wgmma.fence` or what a `wgmma`
    /// landed in it since.
    fn check_fenced(&self, env: &BlockEnv<'_>, group: usize, d: &[Slot]) -> Result<(), Fault> {
        let g = &self.warpgroups.groups[group];
        let first = group * WARPGROUP;
        for slot in d {
            if g.in_flight.contains_key(slot) {
                continue;
            }
            let untouched = g.fenced.get(slot).is_some_and(|values| {
                values
                    .iter()
                    .enumerate()
                    .all(|(t, v)| self.peek(env, first + t, *slot) == *v)
            });
            if !untouched {
                let kind = FaultKind::WgmmaUnfenced {
                    reg: self.program.reg_name(*slot),
                };
                return Err(self.fault(env, first, kind));
            }
        }
        Ok(())
    }

    /// `wgmma.wait_group pending`: the oldest committed groups complete
    /// until at most `pending` remain; their results land.
    fn wgmma_wait(
        &mut self,
        env: &BlockEnv<'_>,
        group: usize,
        pending: usize,
    ) -> Result<(), Fault> {
        let first = group * WARPGROUP;
        while self.warpgroups.groups[group].committed.len() > pending {
            let done = self.warpgroups.groups[group]
                .committed
                .pop_front()
                .unwrap_or_default();
            for op in done {
                for (offset, len) in &op.reads {
                    self.shared.release_async_read(*offset, *len);
                }
                self.shared.complete_ticket(op.ticket);
                for (slot, values) in op.d.iter().zip(op.values) {
                    let g = &mut self.warpgroups.groups[group];
                    let count = g.in_flight.get_mut(slot).map_or(0, |c| {
                        *c -= 1;
                        *c
                    });
                    if count > 0 {
                        // A later instruction writes it too, and lands later.
                        continue;
                    }
                    g.in_flight.remove(slot);
                    for (t, v) in values.iter().enumerate() {
                        let i = first + t;
                        if self.regs[i * self.program.slots as usize + *slot as usize].block
                            == env.serial
                        {
                            let kind = FaultKind::WgmmaPending {
                                reg: self.program.reg_name(*slot),
                            };
                            return Err(self.fault(env, i, kind));
                        }
                        self.set(env, i, *slot, u64::from(*v));
                    }
                    let landed = values.iter().map(|v| Some(u64::from(*v))).collect();
                    self.warpgroups.groups[group].fenced.insert(*slot, landed);
                }
            }
        }
        Ok(())
    }
}

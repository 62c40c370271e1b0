//! Named barriers (`bar.sync id, n` and `bar.arrive id, n`) and the order
//! they, and memory barriers (`shared::mbarrier`, through
//! [`Order::release`] and [`Order::acquire`]), put a block's threads'
//! shared-memory accesses in.
//!
//! A block-wide `bar.sync 0` orders everything before it against
//! everything after it, which [`crate::shared`] counts in epochs. A named
//! barrier orders less: what each arriving thread did before its arrival
//! against what each thread that waited there (`bar.sync`) does after the
//! barrier completes; a thread that only arrives (`bar.arrive`) goes on at
//! once and is ordered after nothing. That order is kept with vector
//! clocks:
//! - each thread's clock counts its arrivals at named and memory barriers,
//!   and an access is stamped with its thread's clock;
//! - each thread keeps, for every thread `u`, the clock `u` had at the last
//!   arrival of its that has been ordered before this thread, through a
//!   chain of barriers;
//! - so `u`'s access stamped `c` is ordered before thread `x` exactly when
//!   `x`'s entry for `u` exceeds `c`.
//!
//! Clocks only grow, from one block to the next too, so no entry is ever
//! cleared: an entry from an earlier epoch or block is below every stamp
//! of an access since.
//!
//! Besides the threads, the order has *agents*: clocks that stand for no
//! thread, each a column of every thread's row ([`Order::add_agent`]).
//! A memory barrier that lands tensor copies has one (`shared::mbarrier`):
//! the async proxy's writes are stamped with its clock, which the phase
//! that lands them publishes ([`Order::tick`]), so they are ordered before
//! exactly the threads that waited for that phase, or a later one of the
//! same barrier, and what those are ordered before.
//!
//! A `bar.sync 0` orders everything before it against everything after it
//! through epochs, not through the clocks; where a memory barrier's phase
//! landed copies in the block, it also hands every thread what any thread
//! knew before it ([`Order::sync_all`]), so that a copy one thread waited
//! for is ordered before what every thread does after the `bar.sync`.
//!
//! Each barrier counts the arrivals of its current phase. The arrival that
//! brings the count to the phase's thread count completes it: each thread
//! that waits there takes in what every arriving thread knew when it
//! arrived, and is released by the block's scheduler ([`crate::block`]).
//! A phase must be reached by whole warps, each warp's lanes at the same
//! instruction; a thread arriving again before its phase completed, or
//! with another thread count, is a fault.

use crate::fault::{FaultKind, NamedProblem};

/// Named barriers are numbered 1 to 15 (0 is the block's `bar.sync 0`).
pub(crate) const NAMED_BARRIERS: usize = 16;

const WARP: usize = 32;

#[derive(Debug, Clone, Default)]
struct Phase {
    /// The thread count of the phase, set by its first arrival.
    threads: u32,
    /// Who arrived, and at which instruction.
    arrived: Vec<(u32, u32)>,
    waiters: Vec<u32>,
    /// The join of the arriving threads' entries, their own clocks
    /// included.
    join: Vec<u32>,
}

#[derive(Debug)]
pub(crate) struct Order {
    threads: usize,
    /// Entries of each row: the threads', then the agents'.
    cols: usize,
    /// Each thread's clock, then each agent's.
    clock: Vec<u32>,
    /// `rows[x * cols + u]`: see the module comment.
    rows: Vec<u32>,
    phases: Vec<Phase>,
    /// Phases of each barrier completed in this block.
    completed: [u32; NAMED_BARRIERS],
    /// Whether a named barrier completed, or a memory barrier's wait
    /// acquired, since [`Order::begin_block`]:
    /// until then the rows are not consulted.
    used: bool,
}

impl Order {
    pub(crate) fn new(threads: usize) -> Order {
        Order {
            threads,
            cols: threads,
            clock: vec![0; threads],
            rows: vec![0; threads * threads],
            phases: vec![Phase::default(); NAMED_BARRIERS],
            completed: [0; NAMED_BARRIERS],
            used: false,
        }
    }

    pub(crate) fn begin_block(&mut self) {
        for p in &mut self.phases {
            p.threads = 0;
            p.arrived.clear();
            p.waiters.clear();
        }
        self.completed = [0; NAMED_BARRIERS];
        self.used = false;
    }

    /// `thread`'s clock: the stamp of its accesses now.
    pub(crate) fn clock(&self, thread: u32) -> u32 {
        self.clock[thread as usize]
    }

    /// Whether `u`'s access stamped `stamp` is ordered before what thread
    /// `x` does now by named or memory barriers (not by program order:
    /// `u == x` counts only through a barrier too).
    pub(crate) fn before(&self, u: u32, stamp: u32, x: u32) -> bool {
        self.used && self.rows[x as usize * self.cols + u as usize] > stamp
    }

    /// A new agent (see the module comment): its column, whose clock
    /// starts at 0 and which no thread knows anything of yet.
    pub(crate) fn add_agent(&mut self) -> u32 {
        let (n, cols) = (self.threads, self.cols);
        let mut rows = vec![0; n * (cols + 1)];
        for (new, old) in rows
            .chunks_exact_mut(cols + 1)
            .zip(self.rows.chunks_exact(cols))
        {
            new[..cols].copy_from_slice(old);
        }
        self.rows = rows;
        self.cols += 1;
        self.clock.push(0);
        cols as u32
    }

    /// Agent `agent` acts: its clock moves on, and `into` (a memory
    /// barrier's join) learns the new value. Returns the clock before, the
    /// stamp of what it did.
    pub(crate) fn tick(&mut self, agent: u32, into: &mut Vec<u32>) -> u32 {
        let a = agent as usize;
        let stamp = self.clock[a];
        self.clock[a] += 1;
        if into.len() < self.cols {
            into.resize(self.cols, 0);
        }
        into[a] = self.clock[a];
        stamp
    }

    /// A `bar.sync 0` completed: every thread knows what any thread knew
    /// before it (their own clocks are left alone: the epochs order their
    /// accesses).
    pub(crate) fn sync_all(&mut self) {
        if !self.used {
            return;
        }
        let cols = self.cols;
        let mut join = vec![0; cols];
        for row in self.rows.chunks_exact(cols) {
            for (j, r) in join.iter_mut().zip(row) {
                *j = (*j).max(*r);
            }
        }
        for row in self.rows.chunks_exact_mut(cols) {
            row.copy_from_slice(&join);
        }
    }

    /// Phases of barrier `id` completed in this block.
    pub(crate) fn completed(&self, id: u32) -> u32 {
        self.completed[id as usize]
    }

    /// The thread count of barrier `id`'s current phase and how many have
    /// arrived.
    pub(crate) fn pending(&self, id: u32) -> (u32, usize) {
        let p = &self.phases[id as usize];
        (p.threads, p.arrived.len())
    }

    /// `thread` (at body index `pc`) arrives at barrier `id`, expecting
    /// `threads` threads, and with `wait` waits there. Returns the phase it
    /// arrived in; the phase has completed once [`Order::completed`]
    /// exceeds it.
    pub(crate) fn arrive(
        &mut self,
        thread: u32,
        pc: u32,
        id: u32,
        threads: u32,
        wait: bool,
    ) -> Result<u32, FaultKind> {
        let fault = |problem| FaultKind::NamedBarrier { id, problem };
        if id == 0 || id as usize >= self.phases.len() {
            return Err(fault(NamedProblem::Number));
        }
        let n = self.cols;
        let phase = &mut self.phases[id as usize];
        if phase.arrived.is_empty() {
            phase.threads = threads;
            phase.join.clear();
            phase.join.resize(n, 0);
        } else if phase.join.len() < n {
            // An agent was added during the phase.
            phase.join.resize(n, 0);
        }
        if phase.threads != threads {
            return Err(fault(NamedProblem::Count {
                expected: phase.threads,
                got: threads,
            }));
        }
        if phase.arrived.iter().any(|&(t, _)| t == thread) {
            return Err(fault(NamedProblem::Twice));
        }
        let t = thread as usize;
        self.clock[t] += 1;
        let row = &self.rows[t * n..(t + 1) * n];
        for (j, r) in phase.join.iter_mut().zip(row) {
            *j = (*j).max(*r);
        }
        phase.join[t] = self.clock[t];
        phase.arrived.push((thread, pc));
        if wait {
            phase.waiters.push(thread);
        }
        let number = self.completed[id as usize];
        if phase.arrived.len() as u32 == threads {
            self.complete(id)?;
        }
        Ok(number)
    }

    /// `thread` releases what it did so far through a memory barrier
    /// (`mbarrier.arrive`): its clock moves on, and what it knows, its own
    /// clock included, is joined into `into` (one entry per thread).
    /// Returns its clock before the arrival, the stamp of what it did
    /// before.
    pub(crate) fn release(&mut self, thread: u32, into: &mut Vec<u32>) -> u32 {
        let (t, n) = (thread as usize, self.cols);
        let stamp = self.clock[t];
        self.clock[t] += 1;
        if into.len() < n {
            into.resize(n, 0);
        }
        for (j, r) in into.iter_mut().zip(&self.rows[t * n..(t + 1) * n]) {
            *j = (*j).max(*r);
        }
        into[t] = self.clock[t];
        stamp
    }

    /// `thread` acquires what a memory barrier's completed phases released
    /// (`join`, from [`Order::release`]).
    pub(crate) fn acquire(&mut self, thread: u32, join: &[u32]) {
        let (t, n) = (thread as usize, self.cols);
        for (r, j) in self.rows[t * n..(t + 1) * n].iter_mut().zip(join) {
            *r = (*r).max(*j);
        }
        self.used = true;
    }

    /// What `thread` knows now: for each thread, the clock up to which its
    /// accesses are ordered before `thread`'s (the agents' entries left
    /// out).
    pub(crate) fn row(&self, thread: u32) -> &[u32] {
        let (t, n) = (thread as usize, self.cols);
        &self.rows[t * n..t * n + self.threads]
    }

    fn complete(&mut self, id: u32) -> Result<(), FaultKind> {
        let (n, cols) = (self.threads, self.cols);
        let phase = &mut self.phases[id as usize];
        phase.arrived.sort_unstable();
        for warp in phase
            .arrived
            .chunk_by(|a, b| a.0 as usize / WARP == b.0 as usize / WARP)
        {
            let lanes = WARP.min(n - warp[0].0 as usize / WARP * WARP);
            if warp.len() != lanes {
                return Err(FaultKind::NamedBarrier {
                    id,
                    problem: NamedProblem::PartialWarp {
                        warp: warp[0].0 / WARP as u32,
                        lanes: warp.len() as u32,
                    },
                });
            }
            if let Some(&(other, pc)) = warp.iter().find(|(_, pc)| *pc != warp[0].1) {
                return Err(FaultKind::NamedBarrier {
                    id,
                    problem: NamedProblem::Divergence {
                        thread: warp[0].0,
                        other,
                        pcs: [warp[0].1, pc],
                    },
                });
            }
        }
        for &w in &phase.waiters {
            let w = w as usize;
            for (r, j) in self.rows[w * cols..(w + 1) * cols]
                .iter_mut()
                .zip(&phase.join)
            {
                *r = (*r).max(*j);
            }
        }
        phase.threads = 0;
        phase.arrived.clear();
        phase.waiters.clear();
        self.completed[id as usize] += 1;
        self.used = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiter_is_ordered_after_what_arrivals_did_before_arriving() {
        let mut order = Order::new(64);
        let (producer, consumer) = (0..32, 32..64);
        let stamp = order.clock(3);
        for t in producer.clone() {
            assert_eq!(order.arrive(t, 7, 1, 64, false), Ok(0));
        }
        let after = order.clock(3);
        for t in consumer.clone() {
            assert_eq!(order.arrive(t, 9, 1, 64, true), Ok(0));
        }
        assert_eq!(order.completed(1), 1);
        assert!(order.before(3, stamp, 40));
        // What the producer does after arriving, and what the consumers
        // did, is ordered before no one.
        assert!(!order.before(3, after, 40));
        assert!(!order.before(40, order.clock(40) - 1, 3));
        assert!(!order.before(3, stamp, 5));
    }

    /// An agent's stamp is ordered before the threads that acquire the
    /// join it ticked into, and those a `bar.sync` puts after them; an
    /// agent added later leaves what threads knew in place.
    #[test]
    fn an_agent_s_acts_reach_the_threads_that_acquire_them() {
        let mut order = Order::new(64);
        let mut join = vec![0; 64];
        order.release(3, &mut join);
        let agent = order.add_agent();
        assert_eq!(agent, 64);
        let stamp = order.tick(agent, &mut join);
        order.acquire(10, &join);
        assert!(order.before(agent, stamp, 10));
        assert!(order.before(3, 0, 10));
        assert!(!order.before(agent, stamp, 11));
        let other = order.add_agent();
        assert!(order.before(agent, stamp, 10));
        assert!(!order.before(other, 0, 10));
        order.sync_all();
        assert!(order.before(agent, stamp, 11));
        assert!(!order.before(agent, stamp + 1, 11));
    }

    #[test]
    fn order_is_transitive_through_chains_of_barriers() {
        let mut order = Order::new(96);
        let stamp = order.clock(0);
        for t in 0..64 {
            order.arrive(t, 1, 1, 64, t >= 32).expect("a phase");
        }
        for t in 32..96 {
            order.arrive(t, 2, 2, 64, t >= 64).expect("a phase");
        }
        assert!(order.before(0, stamp, 70));
    }

    #[test]
    fn broken_phases_are_faults() {
        let mut order = Order::new(64);
        order.arrive(0, 1, 3, 64, false).expect("a first arrival");
        let named = |problem| Err(FaultKind::NamedBarrier { id: 3, problem });
        assert_eq!(order.arrive(0, 1, 3, 64, false), named(NamedProblem::Twice));
        assert_eq!(
            order.arrive(1, 1, 3, 32, false),
            named(NamedProblem::Count {
                expected: 64,
                got: 32
            })
        );
        let mut order = Order::new(64);
        for t in (32..64).chain(0..15) {
            order.arrive(t, 1, 3, 48, true).expect("arrivals");
        }
        assert_eq!(
            order.arrive(15, 1, 3, 48, true),
            named(NamedProblem::PartialWarp { warp: 0, lanes: 16 })
        );
        let mut order = Order::new(64);
        for t in 0..16 {
            order.arrive(t, 1, 3, 32, true).expect("arrivals");
        }
        for t in 16..32 {
            let last = order.arrive(t, 2, 3, 32, true);
            if t < 31 {
                last.expect("arrivals");
            } else {
                assert_eq!(
                    last,
                    named(NamedProblem::Divergence {
                        thread: 0,
                        other: 16,
                        pcs: [1, 2]
                    })
                );
            }
        }
    }
}

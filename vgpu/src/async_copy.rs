//! `cp.async`: copies each thread has started, grouped by
//! `cp.async.commit_group`, landing in shared memory when the thread's
//! `cp.async.wait_group` (or `wait_all`) completes their group, or, taken
//! by a `cp.async.mbarrier.arrive`, as the memory barrier's phase
//! completes (see `shared::mbarrier`).
//!
//! The source is read (and checked) when the copy starts; the destination
//! bytes are then *pending* in [`Shared`] until the copy lands, and any
//! access to them by any thread is a fault. Landing at a wait is a store
//! by the issuing thread there, so another thread sees the data only
//! after a `bar.sync`, like any other store, and the race checks apply.
//! Tensor copies (`cp.async.bulk.tensor`) are not kept here: they belong
//! to the memory barrier they complete at (`shared::mbarrier`).

use std::collections::VecDeque;

use crate::fault::FaultKind;
use crate::shared::Shared;

/// One copy in flight: `len` bytes of `data` (zero-filled past what the
/// source supplied) for the shared window at `offset`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AsyncCopy {
    pub offset: u32,
    pub len: u8,
    pub data: [u8; 16],
}

#[derive(Debug, Default)]
struct Queue {
    /// Started since the last commit.
    open: Vec<AsyncCopy>,
    /// Committed groups, oldest first.
    groups: VecDeque<Vec<AsyncCopy>>,
}

/// The copies in flight of every thread of a block.
#[derive(Debug)]
pub(crate) struct AsyncCopies {
    threads: Vec<Queue>,
}

impl AsyncCopies {
    pub(crate) fn new(threads: usize) -> AsyncCopies {
        AsyncCopies {
            threads: (0..threads).map(|_| Queue::default()).collect(),
        }
    }

    /// Starts a new block: copies the last one never waited for are dropped
    /// (their bytes stop being pending).
    pub(crate) fn begin_block(&mut self, shared: &mut Shared) {
        for q in &mut self.threads {
            for copy in q.open.drain(..).chain(q.groups.drain(..).flatten()) {
                shared.cancel_async(copy.offset, u32::from(copy.len));
            }
        }
    }

    pub(crate) fn start(&mut self, thread: u32, copy: AsyncCopy) {
        self.threads[thread as usize].open.push(copy);
    }

    /// Every copy `thread` started and has not waited for, committed or
    /// not, taken out of its groups (for `cp.async.mbarrier.arrive`).
    pub(crate) fn take(&mut self, thread: u32) -> Vec<AsyncCopy> {
        let q = &mut self.threads[thread as usize];
        let mut copies: Vec<AsyncCopy> = q.groups.drain(..).flatten().collect();
        copies.append(&mut q.open);
        copies
    }

    pub(crate) fn commit(&mut self, thread: u32) {
        let q = &mut self.threads[thread as usize];
        let group = std::mem::take(&mut q.open);
        q.groups.push_back(group);
    }

    /// `cp.async.wait_group pending`: lands the oldest groups until at most
    /// `pending` remain; returns the bytes landed.
    pub(crate) fn wait(
        &mut self,
        thread: u32,
        pending: u32,
        shared: &mut Shared,
    ) -> Result<u64, FaultKind> {
        let q = &mut self.threads[thread as usize];
        let mut landed = 0;
        while q.groups.len() > pending as usize {
            let Some(group) = q.groups.pop_front() else {
                break;
            };
            for copy in group {
                let stamp = shared.order.clock(thread);
                let data = &copy.data[..usize::from(copy.len)];
                shared.finish_async(thread, stamp, copy.offset, data)?;
                landed += u64::from(copy.len);
            }
        }
        Ok(landed)
    }
}

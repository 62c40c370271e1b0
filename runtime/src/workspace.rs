//! Split-K's workspace on the GPU: zeroed once, then reused by launch
//! after launch.
//!
//! A variant with split-K takes a global workspace after its output:
//! partial tiles, then one arrival counter per output tile, which must be
//! zero when a launch starts. Every launch that runs to the end leaves them
//! zero (the last block of each tile resets its counter), so a workspace
//! is zeroed when it is allocated and reused from then on: a launch costs
//! no allocation and no memset, the same as in the measurements the tuner
//! and the benchmark make. Two launches must not use one workspace while
//! both run, so each carries an event recorded after its last launch, and
//! the next launch's stream waits for that event first (on the same
//! stream the wait costs nothing: the stream's order already holds).
//!
//! A loaded variant keeps a pool of them. A launch takes an idle one whose
//! last launch has finished, else one last used on its own stream, else a
//! new one while fewer than [`MAX_WORKSPACES`] exist (or every one is in
//! the hands of another thread's launch), else the one idle longest, and
//! waits. They are never freed: like the loaded module, they live as long
//! as the process.
//!
//! On a stream being captured into a CUDA graph a launch allocates a
//! fresh zeroed workspace instead (the allocation and the memset become
//! nodes of the graph), since a capture cannot wait on an event recorded
//! outside it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::sys::{CUdeviceptr, CUstreamCaptureStatus};
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DriverError};

/// Workspaces a loaded variant allocates before launches on other streams
/// wait for each other's.
pub(crate) const MAX_WORKSPACES: usize = 4;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

/// How many pooled workspaces this process has allocated, for tests of
/// their reuse.
pub fn workspace_allocations() -> usize {
    ALLOCATED.load(Ordering::Relaxed)
}

/// A loaded variant's workspaces.
#[derive(Default)]
pub(crate) struct Pool {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Those no launch holds now, the one given back longest ago first.
    idle: Vec<Pooled>,
    /// All allocated, idle or held.
    allocated: usize,
}

/// A pooled workspace.
pub(crate) struct Pooled {
    pointer: CUdeviceptr,
    /// Recorded after the last launch that used it.
    done: CudaEvent,
    /// The stream of that launch, as a handle (only compared).
    stream: usize,
}

/// The workspace of one launch.
pub(crate) enum Workspace {
    Pooled(Pooled),
    Fresh(CudaSlice<u8>),
}

impl Pool {
    /// A zeroed workspace of `bytes` for a launch on `stream`, which waits
    /// for its previous launch; give it back with [`Pool::give_back`].
    pub(crate) fn take(
        &self,
        stream: &Arc<CudaStream>,
        bytes: usize,
    ) -> Result<Workspace, DriverError> {
        if stream.capture_status()? != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
            return Ok(Workspace::Fresh(stream.alloc_zeros(bytes)?));
        }
        let here = stream.cu_stream() as usize;
        let taken = {
            let mut state = self.lock();
            let idle = &state.idle;
            let found = idle
                .iter()
                .position(|w| w.done.is_complete())
                .or_else(|| idle.iter().position(|w| w.stream == here))
                .or_else(|| (state.allocated >= MAX_WORKSPACES && !idle.is_empty()).then_some(0));
            match found {
                Some(i) => Some(state.idle.remove(i)),
                None => {
                    state.allocated += 1;
                    None
                }
            }
        };
        let workspace = match taken {
            Some(workspace) => workspace,
            None => allocate(stream, bytes, here).inspect_err(|_| self.lock().allocated -= 1)?,
        };
        if let Err(e) = stream.wait(&workspace.done) {
            self.lock().idle.push(workspace);
            return Err(e);
        }
        Ok(Workspace::Pooled(workspace))
    }

    /// Returns a pooled workspace after its launch was queued on `stream`
    /// (`launched`) or was not. A queued launch is recorded in its event;
    /// when that fails, the workspace is dropped from the pool (its memory
    /// stays allocated, as the launch may use it).
    pub(crate) fn give_back(
        &self,
        mut workspace: Pooled,
        stream: &CudaStream,
        launched: bool,
    ) -> Result<(), DriverError> {
        if launched {
            if let Err(e) = workspace.done.record(stream) {
                self.lock().allocated -= 1;
                return Err(e);
            }
            workspace.stream = stream.cu_stream() as usize;
        }
        self.lock().idle.push(workspace);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A new workspace, zeroed on `stream` (so ordered before the launch that
/// takes it), with an event recording nothing yet.
fn allocate(stream: &Arc<CudaStream>, bytes: usize, here: usize) -> Result<Pooled, DriverError> {
    let done = stream.context().new_event(None)?;
    let pointer = stream.alloc_zeros::<u8>(bytes)?.leak();
    ALLOCATED.fetch_add(1, Ordering::Relaxed);
    Ok(Pooled {
        pointer,
        done,
        stream: here,
    })
}

impl Workspace {
    /// The device pointer the kernel takes.
    pub(crate) fn pointer(&self, stream: &CudaStream) -> CUdeviceptr {
        match self {
            Workspace::Pooled(w) => w.pointer,
            Workspace::Fresh(slice) => {
                use cudarc::driver::DevicePtr;
                slice.device_ptr(stream).0
            }
        }
    }
}

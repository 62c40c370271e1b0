//! The GPU: opening it (through ktune's runtime, which probes the driver
//! so that nothing panics without one), device buffers, loading and
//! launching lowered kernels, and timing with CUDA events.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, anyhow, bail, ensure};
use cudarc::driver::sys::{
    self, CUdevice_attribute, CUdeviceptr, CUevent_flags, CUfunction_attribute,
};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut,
    LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use ktune::__private::{EncodedMap, resident_blocks};
use ktune_bench::plan::{Variant, target_for};
use ktune_bench::probe::{self, MemoryProbe};
use ktune_bench::report::GpuInfo;
use ktune_bench::turns;
use ktune_core::ir::Kernel;
use ktune_core::{DType, SmVersion, ptx};
use ktune_vgpu::{POISON_16, POISON_F32};

/// Bytes of the scratch buffer cleared before each batch of timed runs:
/// the clear keeps the GPU busy while the batch is queued (about 0.6 ms at
/// H200 bandwidth, against roughly 10–20 µs of CPU time to queue one run
/// with its two events), so that the runs execute back to back rather than
/// at the pace the CPU launches them.
const QUEUE_AHEAD_BYTES: usize = 2 << 30;

/// About how many timed runs are queued behind one scratch clear.
const BATCH: usize = 16;

/// Why the GPU could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// No driver or no device: the distinct exit code.
    NoGpu(String),
    Failed(anyhow::Error),
}

/// The first CUDA GPU, its default stream, and what the results file
/// records about it.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub target: SmVersion,
    pub info: GpuInfo,
    scratch: CudaSlice<u8>,
}

impl Gpu {
    pub fn open() -> Result<Gpu, OpenError> {
        let device = ktune::Device::cuda(0).map_err(|e| match e {
            ktune::Error::NoDriver => {
                OpenError::NoGpu("the CUDA driver library, libcuda.so, is not installed".into())
            }
            ktune::Error::NoDevice { .. } => OpenError::NoGpu("the CUDA driver sees no GPU".into()),
            other => OpenError::Failed(anyhow!(other)),
        })?;
        let (Some(ctx), Some(stream)) = (device.context(), device.stream()) else {
            return Err(OpenError::NoGpu("device 0 is not a CUDA device".into()));
        };
        Gpu::describe(ctx.clone(), stream.clone()).map_err(OpenError::Failed)
    }

    fn describe(ctx: Arc<CudaContext>, stream: Arc<CudaStream>) -> Result<Gpu> {
        let name = ctx.name()?;
        let (major, minor) = ctx.compute_capability()?;
        let cc = (
            u32::try_from(major).unwrap_or(0),
            u32::try_from(minor).unwrap_or(0),
        );
        let Some(target) = target_for(cc.0, cc.1) else {
            bail!(
                "{name} has compute capability {major}.{minor}; ktune generates code for 8.0 and newer"
            );
        };
        let attribute = |a| -> Result<u32> { Ok(u32::try_from(ctx.attribute(a)?).unwrap_or(0)) };
        let mut version = 0;
        // SAFETY: cuDriverGetVersion writes one int; the driver is loaded
        // (the context exists).
        unsafe { sys::cuDriverGetVersion(&mut version) }.result()?;
        let info = GpuInfo {
            name,
            compute_capability: format!("{major}.{minor}"),
            target: target.name().to_owned(),
            sm_count: attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            l2_bytes: u64::from(attribute(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
            )?),
            memory_bytes: ctx.total_mem()? as u64,
            driver_version: kernel_driver_version(),
            cuda_version: format!("{}.{}", version / 1000, (version % 1000) / 10),
            cublas_version: None,
        };
        // SAFETY: the scratch buffer is only ever written (cleared).
        let scratch = unsafe { stream.alloc::<u8>(QUEUE_AHEAD_BYTES) }?;
        Ok(Gpu {
            ctx,
            stream,
            target,
            info,
            scratch,
        })
    }

    pub fn upload(&self, bytes: &[u8]) -> Result<CudaSlice<u8>> {
        Ok(self.stream.clone_htod(bytes)?)
    }

    pub fn copy(&self, src: &CudaSlice<u8>) -> Result<CudaSlice<u8>> {
        Ok(self.stream.clone_dtod(src)?)
    }

    pub fn download(&self, buffer: &CudaSlice<u8>) -> Result<Vec<u8>> {
        Ok(self.stream.clone_dtoh(buffer)?)
    }

    /// A buffer of `elements` elements of `dtype`, every one poisoned.
    pub fn alloc_poisoned(&self, dtype: DType, elements: usize) -> Result<CudaSlice<u8>> {
        // SAFETY: filled with the poison right away, before any read.
        let mut buffer = unsafe { self.stream.alloc::<u8>(elements * dtype.size() as usize) }?;
        self.poison(&mut buffer, dtype)?;
        Ok(buffer)
    }

    /// Fills `buffer` with `dtype`'s poison pattern.
    pub fn poison(&self, buffer: &mut CudaSlice<u8>, dtype: DType) -> Result<()> {
        let bytes = buffer.len();
        let (ptr, _written) = buffer.device_ptr_mut(&self.stream);
        let stream = self.stream.cu_stream();
        // SAFETY: the pointer covers `bytes` bytes, written as whole
        // elements of the buffer's dtype.
        match dtype {
            DType::F32 => unsafe { sys::cuMemsetD32Async(ptr, POISON_F32, bytes / 4, stream) },
            DType::F16 | DType::Bf16 => unsafe {
                sys::cuMemsetD16Async(ptr, POISON_16, bytes / 2, stream)
            },
        }
        .result()?;
        Ok(())
    }

    /// Loads a lowered kernel as its own module, compiled by the driver
    /// as ktune's runtime does.
    pub fn load(&self, kernel: &Kernel, variant: &Variant) -> Result<Loaded> {
        ensure!(
            !variant.ptx.contains('\0'),
            "the PTX of {} contains a NUL byte",
            variant.schedule.to_json()
        );
        self.load_module(kernel, variant, Ptx::from_src(variant.ptx.as_str()))
    }

    /// Loads a lowered kernel as its own module, assembled for this GPU by
    /// `ptxas` first. The driver compiles PTX one module at a time, however
    /// many threads load (about 30 small modules a second from 16 threads
    /// on an H200); separate ptxas processes run on every core.
    pub fn load_assembled(
        &self,
        kernel: &Kernel,
        variant: &Variant,
        ptxas: &Path,
    ) -> Result<Loaded> {
        let assembled = ktune_build::ptxas::assemble(ptxas, &variant.ptx, self.target)?;
        self.load_module(kernel, variant, Ptx::from_binary(assembled.cubin))
    }

    fn load_module(&self, kernel: &Kernel, variant: &Variant, code: Ptx) -> Result<Loaded> {
        let module = self.ctx.load_module(code)?;
        let function = module.load_function(&variant.entry)?;
        let launch = variant.launch;
        // Warpgroups that hand registers to each other wait forever where
        // the driver gave each thread fewer than the kernel counts on.
        if launch.registers > 0 {
            self.ctx.bind_to_thread()?;
            let given = function.num_regs()?;
            ensure!(
                u32::try_from(given).unwrap_or(0) >= launch.registers,
                "compiled to {given} registers per thread; its warpgroups hand each other registers from {} each",
                launch.registers
            );
        }
        if launch.dynamic_shared_bytes > 48 * 1024 {
            // Blocks may use more than 48 KiB of dynamic shared memory only
            // after opting in, with the context current.
            self.ctx.bind_to_thread()?;
            function.set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                i32::try_from(launch.dynamic_shared_bytes).unwrap_or(i32::MAX),
            )?;
        }
        let tensor_bytes = kernel
            .inputs
            .iter()
            .chain(std::iter::once(&kernel.output))
            .map(|t| kernel.len_of(t) as usize * t.dtype.size() as usize)
            .collect();
        let workspace = match launch.workspace_bytes {
            0 => None,
            bytes => Some(self.stream.alloc_zeros::<u8>(bytes as usize)?),
        };
        let resident = if launch.persistent {
            let shape = (launch.block, launch.dynamic_shared_bytes, variant.cluster);
            resident_blocks(&function, &self.stream, shape)?
        } else {
            0
        };
        Ok(Loaded {
            function,
            config: LaunchConfig {
                grid_dim: launch.grid_for(resident).into(),
                block_dim: launch.block.into(),
                shared_mem_bytes: launch.dynamic_shared_bytes,
            },
            persistent: launch.persistent,
            tensor_bytes,
            workspace,
            maps: variant.maps.clone(),
            encoded: Mutex::default(),
        })
    }

    /// How fast reads stream from L2 and from DRAM ([`probe`]): the probe
    /// kernel on a buffer a quarter of L2's size read 64 times, then on
    /// one four times L2's size read once; each the median of 20 runs
    /// after a warm-up.
    pub fn memory_probe(&mut self) -> Result<MemoryProbe> {
        let (l2_bytes, dram_bytes) = probe::buffer_sizes(self.info.l2_bytes);
        let blocks = self.info.sm_count.max(1) * 8;
        let mut rate = |bytes: u64, passes: u32| -> Result<f64> {
            let probe = probe::read_kernel(bytes, passes, blocks, self.target);
            let module = self.ctx.load_module(Ptx::from_src(probe.ptx.as_str()))?;
            let function = module.load_function(&probe.kernel.entry)?;
            let source = self.stream.alloc_zeros::<u8>(bytes as usize)?;
            let mut sums = self
                .stream
                .alloc_zeros::<f32>((blocks * probe::THREADS) as usize)?;
            let config = LaunchConfig {
                grid_dim: probe.launch.grid.into(),
                block_dim: probe.launch.block.into(),
                shared_mem_bytes: 0,
            };
            let mut times = self.time(21, 1, |gpu, _| {
                let mut builder = gpu.stream.launch_builder(&function);
                builder.arg(&source).arg(&mut sums);
                // SAFETY: the probe kernel takes the buffer it reads
                // (`bytes` long, which is what it was generated for) and one
                // f32 per thread of the launch it was generated for.
                unsafe { builder.launch(config) }?;
                Ok(())
            })?;
            // The first run warms up.
            times.remove(0);
            times.sort_by(f32::total_cmp);
            let median_s = f64::from(times[times.len() / 2]) * 1e-3;
            Ok(probe.bytes_read as f64 / median_s)
        };
        Ok(MemoryProbe {
            l2_read_bytes_per_s: rate(l2_bytes, 64)?,
            l2_buffer_bytes: l2_bytes,
            dram_read_bytes_per_s: rate(dram_bytes, 1)?,
            dram_buffer_bytes: dram_bytes,
        })
    }

    /// Runs `run(k)` for `k` in `0..reps`, each between two timing events,
    /// and returns each run's time in milliseconds. The runs are queued in
    /// batches behind a scratch clear, whose lengths let the run after each
    /// clear rotate over `subjects` taking turns ([`turns::batch`]).
    pub fn time(
        &mut self,
        reps: usize,
        subjects: usize,
        mut run: impl FnMut(&Gpu, usize) -> Result<()>,
    ) -> Result<Vec<f32>> {
        let mut times = Vec::with_capacity(reps);
        let mut done = 0;
        let batch = turns::batch(subjects, reps / subjects.max(1), BATCH);
        while done < reps {
            let batch = batch.min(reps - done);
            let events = (0..batch)
                .map(|_| -> Result<(CudaEvent, CudaEvent)> {
                    let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
                    Ok((self.ctx.new_event(timing)?, self.ctx.new_event(timing)?))
                })
                .collect::<Result<Vec<_>>>()?;
            self.stream.memset_zeros(&mut self.scratch)?;
            for (i, (start, end)) in events.iter().enumerate() {
                start.record(&self.stream)?;
                run(self, done + i)?;
                end.record(&self.stream)?;
            }
            self.stream
                .synchronize()
                .context("running timed launches")?;
            for (start, end) in &events {
                times.push(start.elapsed_ms(end)?);
            }
            done += batch;
        }
        Ok(times)
    }
}

/// A kernel loaded on the GPU, with the byte length each of its tensors
/// must have.
pub struct Loaded {
    function: CudaFunction,
    config: LaunchConfig,
    persistent: bool,
    tensor_bytes: Vec<usize>,
    /// Split-K's workspace, zeroed when allocated; the kernel leaves it
    /// ready for its next launch.
    workspace: Option<CudaSlice<u8>>,
    /// The tensor maps the kernel takes after its pointers.
    maps: Vec<ptx::TensorMap>,
    /// Those maps encoded for each set of input buffers launched with so
    /// far, by the buffers' addresses: encoded at a set's first launch (a
    /// warm-up's), not between a timed run's events.
    encoded: Mutex<HashMap<Vec<CUdeviceptr>, Vec<EncodedMap>>>,
}

impl Loaded {
    /// The blocks a persistent kernel is launched with.
    pub fn persistent_blocks(&self) -> Option<u32> {
        self.persistent.then_some(self.config.grid_dim.0)
    }

    /// Queues one launch: the inputs in the kernel's order, then the output.
    pub fn launch(
        &self,
        stream: &CudaStream,
        inputs: &[&CudaSlice<u8>],
        output: &mut CudaSlice<u8>,
    ) -> Result<()> {
        let lens: Vec<usize> = inputs
            .iter()
            .map(|b| b.len())
            .chain(std::iter::once(output.len()))
            .collect();
        ensure!(
            lens == self.tensor_bytes,
            "buffers of {lens:?} bytes for a kernel whose tensors have {:?}",
            self.tensor_bytes
        );
        let maps = self.encoded_maps(stream, inputs)?;
        let mut builder = stream.launch_builder(&self.function);
        for input in inputs {
            builder.arg(*input);
        }
        builder.arg(output);
        if let Some(workspace) = &self.workspace {
            builder.arg(workspace);
        }
        for map in &maps {
            builder.arg(map);
        }
        // SAFETY: the PTX was lowered by ktune for the kernel whose tensor
        // sizes are `tensor_bytes` (checked above against the buffers): its
        // entry takes one global pointer per tensor, inputs then output, and
        // touches each only within its length. The output is borrowed
        // mutably, so no input aliases it. A kernel with a workspace takes
        // it last, as long as its launch asks and zeroed at allocation; it
        // writes it though it is passed shared, which is sound because only
        // this `Loaded`'s launches use it, all on one stream, in order.
        // Tensor maps of the inputs, read only, come last.
        unsafe { builder.launch(self.config) }?;
        Ok(())
    }

    /// The kernel's tensor maps encoded for `inputs` (none for most
    /// kernels), encoded once per set of buffers.
    fn encoded_maps(
        &self,
        stream: &CudaStream,
        inputs: &[&CudaSlice<u8>],
    ) -> Result<Vec<EncodedMap>> {
        if self.maps.is_empty() {
            return Ok(Vec::new());
        }
        let key: Vec<CUdeviceptr> = inputs.iter().map(|b| b.device_ptr(stream).0).collect();
        let mut encoded = self
            .encoded
            .lock()
            .map_err(|_| anyhow!("a launch panicked while encoding tensor maps"))?;
        if let Some(maps) = encoded.get(&key) {
            return Ok(maps.clone());
        }
        let maps = self
            .maps
            .iter()
            .map(|map| ktune_measure::tensor_map(map, inputs[map.param], stream))
            .collect::<Result<Vec<_>, _>>()?;
        encoded.insert(key, maps.clone());
        Ok(maps)
    }
}

/// The NVIDIA kernel module's version, from `/proc/driver/nvidia/version`.
fn kernel_driver_version() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    version_in(text.lines().next()?).map(str::to_owned)
}

/// The first word of `line` that looks like a version: the proprietary
/// module says "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.03
/// …", the open one "NVRM version: NVIDIA UNIX Open Kernel Module for
/// x86_64  580.159.04  Release Build …".
fn version_in(line: &str) -> Option<&str> {
    line.split_whitespace()
        .find(|w| w.contains('.') && w.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

#[cfg(test)]
mod tests {
    use super::version_in;

    #[test]
    fn the_driver_version_is_read_from_either_kernel_module() {
        let proprietary =
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.03  Thu Oct 2 2025";
        let open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22)  Thu Oct 2 2025";
        assert_eq!(version_in(proprietary), Some("580.159.03"));
        assert_eq!(version_in(open), Some("580.159.04"));
        assert_eq!(version_in("NVRM version: unknown"), None);
    }
}

//! Measuring on a CUDA GPU: load the PTX, check one run against the
//! expected output, then time with CUDA events under the GPU's lock.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys::{CUdevice_attribute, CUevent_flags, CUfunction_attribute};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr,
    DriverError, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use ktune::__private::{EncodedMap, encode_tensor_map, resident_blocks};
use ktune_core::ir::Kernel;
use ktune_core::lower::{self, Lowered};
use ktune_core::{SmVersion, ptx};
use ktune_vgpu::sample::Sample;
use ktune_vgpu::verify::{Reference, decode, encode, random_inputs};
use ktune_vgpu::{first_poisoned, poisoned};

use crate::lock::{GpuLock, lock_path};
use crate::sensors::{Reading, Sensors};
use crate::stats::{converged, quantile, slowed_down};
use crate::{DeviceInfo, Measured, Rejected, SAMPLED_POINTS, Settings, device};

/// A rejection, and whether the worker must exit after answering because
/// the context is no longer usable (a fault is sticky in CUDA).
pub(crate) type GpuRejected = (Rejected, bool);

/// What a candidate's first run is compared with.
#[derive(Debug)]
pub(crate) enum Expected {
    /// The CPU evaluation of the kernel, every element.
    Interp(Box<Reference>),
    /// The output of the target's heuristic schedule on this GPU, for
    /// kernels too big to evaluate on the CPU.
    Baseline {
        inputs: Vec<Vec<u8>>,
        want: Vec<f32>,
        rel: f32,
        scale: f32,
    },
}

impl Expected {
    fn inputs(&self) -> &[Vec<u8>] {
        match self {
            Expected::Interp(r) => r.buffers(),
            Expected::Baseline { inputs, .. } => inputs,
        }
    }

    fn want(&self) -> &[f32] {
        match self {
            Expected::Interp(r) => r.output(),
            Expected::Baseline { want, .. } => want,
        }
    }

    /// How far output element `index`, expected to be `want`, may be off.
    fn tolerance(&self, index: usize, want: f32) -> f32 {
        match self {
            Expected::Interp(r) => r.tolerance(index),
            Expected::Baseline { rel, scale, .. } => rel * want.abs() + 0.1 * rel * scale,
        }
    }

    fn source(&self) -> &'static str {
        match self {
            Expected::Interp(_) => "the CPU reference",
            Expected::Baseline { .. } => "the heuristic schedule's output on this GPU",
        }
    }
}

/// An open GPU: a context of this process and its default stream.
#[derive(Debug)]
pub(crate) struct Gpu {
    context: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: DeviceInfo,
    lock: PathBuf,
    /// NVML for this GPU, where the driver has it.
    sensors: Option<Sensors>,
}

/// A candidate's module, loaded.
pub(crate) struct Program {
    function: CudaFunction,
    config: LaunchConfig,
    /// The bytes of global workspace the kernel takes after its output
    /// (none: 0).
    workspace_bytes: usize,
    /// The tensor maps the kernel takes after its pointers.
    maps: Vec<ptx::TensorMap>,
    _module: Arc<CudaModule>,
}

/// A loaded candidate ready to launch on a [`Gpu`]'s stream, with its own
/// workspace when it takes one: zeroed when allocated, and left zeroed by
/// each launch for the next (launches on one stream never overlap).
struct Armed<'a> {
    program: &'a Program,
    workspace: Option<CudaSlice<u8>>,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("grid", &self.config.grid_dim)
            .field("block", &self.config.block_dim)
            .finish_non_exhaustive()
    }
}

/// Loads candidates' modules into a GPU's context from any thread, so that
/// the driver's JIT compiles several at once.
#[derive(Clone)]
pub(crate) struct Loader(Arc<CudaContext>);

impl Loader {
    /// [`Gpu::load`] on the calling thread, the context bound to it first.
    pub(crate) fn load(
        &self,
        lowered: &Lowered,
        target: SmVersion,
    ) -> Result<Program, GpuRejected> {
        self.0
            .bind_to_thread()
            .map_err(driver("binding the GPU's context to a compiling thread"))
            .map_err(|e| (Rejected::CompileFailed(e), false))?;
        Gpu::load_in(&self.0, lowered, target)
    }
}

/// The most input sets rotated: beyond it, a kernel is so small that
/// its launches, not its memory traffic, set its time.
const MAX_SETS: u64 = 4096;

/// A kernel's input sets on the GPU, the first also for the correctness
/// check, kept from one candidate to the next.
#[derive(Default)]
pub(crate) struct Rotation {
    sets: Vec<Buffers>,
}

impl std::fmt::Debug for Rotation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rotation")
            .field("sets", &self.sets.len())
            .finish()
    }
}

/// One input set and an output buffer.
struct Buffers {
    inputs: Vec<CudaSlice<u8>>,
    output: CudaSlice<u8>,
}

/// The bytes of `kernel`'s output, every element poisoned.
fn poisoned_output(kernel: &Kernel) -> Vec<u8> {
    let elements = usize::try_from(kernel.len_of(&kernel.output)).unwrap_or(usize::MAX);
    poisoned(kernel.output.dtype, elements)
}

fn driver(what: &str) -> impl Fn(cudarc::driver::DriverError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

impl Gpu {
    /// What the driver told about the GPU when it was opened.
    pub(crate) fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Opens GPU `ordinal`, reading what the driver tells about it.
    pub(crate) fn open(ordinal: usize) -> Result<Gpu, String> {
        let count = device::gpu_count()?;
        if ordinal >= count {
            return Err(format!(
                "the driver sees {count} GPU(s), so there is no ordinal {ordinal}"
            ));
        }
        let context =
            CudaContext::new(ordinal).map_err(driver("creating a CUDA context on the GPU"))?;
        // SAFETY: the worker uses one stream only, the context's default
        // stream, so every use of every buffer is ordered on it and nothing
        // needs events to order it.
        unsafe { context.disable_event_tracking() };
        let stream = context.default_stream();
        let attribute = |a: CUdevice_attribute| context.attribute(a).ok();
        let positive = |v: Option<i32>| v.and_then(|v| u32::try_from(v).ok());
        let (major, minor) = context
            .compute_capability()
            .map_err(driver("reading the compute capability"))?;
        let uuid = context.uuid().ok().map(|u| format_uuid(&u.bytes));
        let info = DeviceInfo {
            name: context.name().map_err(driver("reading the GPU's name"))?,
            compute_capability: (
                u32::try_from(major).unwrap_or(0),
                u32::try_from(minor).unwrap_or(0),
            ),
            sm_count: positive(attribute(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            ))
            .unwrap_or(0),
            driver_version: kernel_driver_version(),
            cuda_version: cuda_version(),
            max_sm_clock_mhz: positive(attribute(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE,
            ))
            .map(|khz| khz / 1000),
            memory_clock_mhz: positive(attribute(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE,
            ))
            .map(|khz| khz / 1000),
            l2_bytes: positive(attribute(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
            ))
            .map(u64::from),
            uuid: uuid.clone(),
            virtual_gpu: false,
        };
        let pci = [
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID,
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID,
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID,
        ]
        .map(|a| attribute(a).and_then(|v| u32::try_from(v).ok()));
        let sensors = match pci {
            [Some(domain), Some(bus), Some(device)] => Sensors::open(domain, bus, device),
            _ => None,
        };
        Ok(Gpu {
            lock: lock_path(uuid.as_deref(), ordinal),
            context,
            stream,
            info,
            sensors,
        })
    }

    /// What a candidate's output is compared with: the CPU reference when
    /// the kernel is small enough, the heuristic schedule's output on this
    /// GPU otherwise (see [`Settings::reference_flops`]).
    pub(crate) fn expected(
        &self,
        kernel: &Kernel,
        target: SmVersion,
        settings: &Settings,
    ) -> Result<Expected, GpuRejected> {
        if kernel.flops() <= settings.reference_flops {
            return Ok(Expected::Interp(Box::new(Reference::new(
                kernel,
                settings.seed,
            ))));
        }
        let values = random_inputs(kernel, settings.seed);
        let inputs: Vec<Vec<u8>> = kernel
            .inputs
            .iter()
            .zip(&values)
            .map(|(t, values)| encode(t.dtype, values))
            .collect();
        let schedule = lower::heuristic(kernel, target);
        let baseline = lower::lower(kernel, &schedule, target).map_err(|e| {
            let why = format!("the heuristic schedule does not lower: {e}");
            (Rejected::Invalid(why), false)
        })?;
        let what = |e: (Rejected, bool)| {
            let why = format!(
                "the heuristic schedule, run as the reference, failed: {}",
                e.0
            );
            (Rejected::Fault(why), e.1)
        };
        let program = self.load(&baseline, target).map_err(what)?;
        let mut armed = self.arm(&program).map_err(what)?;
        let mut buffers = self.upload(kernel, &inputs).map_err(what)?;
        let bytes = self.run_once(&mut armed, &mut buffers).map_err(what)?;
        let dtype = kernel.output.dtype;
        if let Some(index) = first_poisoned(dtype, &bytes) {
            let why = format!("output element {index} was never written");
            return Err(what((Rejected::WrongResult(why), false)));
        }
        let want = decode(dtype, &bytes);
        // The heuristic schedule's output answers for every element; the
        // CPU answers for it at sampled elements, where it can afford to.
        let affordable = Sample::flops(kernel, SAMPLED_POINTS)
            .is_some_and(|flops| flops <= settings.reference_flops);
        if let Some(sample) = affordable
            .then(|| Sample::new(kernel, &values, SAMPLED_POINTS, settings.seed))
            .flatten()
        {
            sample.check(&want).map_err(|m| {
                let why = format!(
                    "output element {} is {} where the CPU reference gives {} (tolerance {})",
                    m.index, m.got, m.want, m.tolerance
                );
                what((Rejected::WrongResult(why), false))
            })?;
        }
        let scale = want
            .iter()
            .filter(|w| w.is_finite())
            .fold(0.0f32, |m, w| m.max(w.abs()))
            .max(f32::MIN_POSITIVE);
        Ok(Expected::Baseline {
            inputs,
            want,
            rel: baseline_tolerance(kernel),
            scale,
        })
    }

    /// Checks and times one loaded candidate; `rotation` holds the
    /// kernel's buffers from one candidate to the next.
    pub(crate) fn measure(
        &self,
        kernel: &Kernel,
        expected: &Expected,
        rotation: &mut Rotation,
        program: &Program,
        settings: &Settings,
    ) -> Result<Measured, GpuRejected> {
        let mut armed = self.arm(program)?;
        if rotation.sets.is_empty() {
            rotation.sets.push(self.upload(kernel, expected.inputs())?);
        }
        let first = &mut rotation.sets[0];
        self.stream
            .memcpy_htod(&poisoned_output(kernel), &mut first.output)
            .map_err(driver("poisoning the output"))
            .map_err(|e| (Rejected::Fault(e), true))?;
        let bytes = self.run_once(&mut armed, first)?;
        check_output(kernel, expected, &bytes)?;

        let set_bytes = expected.inputs().iter().map(Vec::len).sum::<usize>() + bytes.len();
        while rotation.sets.len() < self.set_count(set_bytes as u64) {
            rotation.sets.push(self.upload(kernel, expected.inputs())?);
        }

        let _lock =
            GpuLock::acquire(&self.lock).map_err(|e| (Rejected::WorkerCrashed(e), false))?;
        let times = self.time(&mut armed, &mut rotation.sets, settings)?;
        let sensors = self.sensors.as_ref().and_then(Sensors::read);
        let mut sorted = times.clone();
        sorted.sort_by(f64::total_cmp);
        Ok(Measured {
            median_us: quantile(&sorted, 0.5),
            p10_us: quantile(&sorted, 0.1),
            p90_us: quantile(&sorted, 0.9),
            samples: u32::try_from(times.len()).unwrap_or(u32::MAX),
            device: self.info.clone(),
            throttled: slowed_down(&times) || sensors.as_ref().is_some_and(Reading::throttled),
            sensors,
        })
    }

    /// How many input sets to rotate so that together they exceed twice
    /// the L2 cache (at least one; at most [`MAX_SETS`], and a quarter of
    /// the free memory). The sets are copies of the checked inputs in
    /// separate allocations: what defeats the cache is the addresses, and
    /// the values stay random.
    fn set_count(&self, set_bytes: u64) -> usize {
        let set_bytes = set_bytes.max(1);
        let l2 = self.info.l2_bytes.unwrap_or(64 << 20);
        let wanted = 2 * l2 / set_bytes + 1;
        let room = self
            .context
            .mem_get_info()
            .map(|(free, _)| free as u64 / 4 / set_bytes)
            .unwrap_or(1);
        usize::try_from(wanted.min(room).min(MAX_SETS))
            .unwrap_or(1)
            .max(1)
    }

    /// Loads a candidate's PTX (the driver compiles it for this GPU).
    pub(crate) fn load(
        &self,
        lowered: &Lowered,
        target: SmVersion,
    ) -> Result<Program, GpuRejected> {
        Gpu::load_in(&self.context, lowered, target)
    }

    /// What loads candidates from other threads.
    pub(crate) fn loader(&self) -> Loader {
        Loader(self.context.clone())
    }

    /// Loads a candidate's PTX into `context` (the driver compiles it for the
    /// GPU).
    fn load_in(
        context: &Arc<CudaContext>,
        lowered: &Lowered,
        target: SmVersion,
    ) -> Result<Program, GpuRejected> {
        let compile = |e: String| (Rejected::CompileFailed(e), false);
        let text = ptx::print(&lowered.ptx, target);
        let module = context
            .load_module(Ptx::from_src(text))
            .map_err(driver("loading the PTX module"))
            .map_err(compile)?;
        let function = module
            .load_function(&lowered.ptx.entry)
            .map_err(driver("finding the kernel's entry"))
            .map_err(compile)?;
        // Warpgroups that hand registers to each other wait forever where
        // the driver gave each thread fewer than the kernel counts on.
        let registers = lowered.launch.registers;
        if registers > 0 {
            let given = function
                .num_regs()
                .map_err(driver("reading the kernel's registers"))
                .map_err(compile)?;
            if u32::try_from(given).unwrap_or(0) < registers {
                return Err(compile(format!(
                    "the driver compiled it to {given} registers per thread; its warpgroups hand each other registers from {registers} each"
                )));
            }
        }
        let shared = lowered.launch.dynamic_shared_bytes;
        // Blocks may use more than 48 KiB of dynamic shared memory only after
        // opting in.
        if shared > 48 * 1024 {
            function
                .set_attribute(
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    i32::try_from(shared).unwrap_or(i32::MAX),
                )
                .map_err(driver("allowing the kernel's dynamic shared memory"))
                .map_err(compile)?;
        }
        let [bx, by, bz] = lowered.launch.block;
        let resident = if lowered.launch.persistent {
            let shape = (
                lowered.launch.block,
                shared,
                lowered.ptx.cluster_blocks.max(1),
            );
            resident_blocks(&function, &context.default_stream(), shape)
                .map_err(driver(
                    "reading how many of the kernel's blocks the GPU holds",
                ))
                .map_err(compile)?
        } else {
            0
        };
        let [gx, gy, gz] = lowered.launch.grid_for(resident);
        Ok(Program {
            function,
            config: LaunchConfig {
                grid_dim: (gx, gy, gz),
                block_dim: (bx, by, bz),
                shared_mem_bytes: shared,
            },
            workspace_bytes: usize::try_from(lowered.launch.workspace_bytes).unwrap_or(usize::MAX),
            maps: lowered.ptx.tensor_maps.clone(),
            _module: module,
        })
    }

    /// Copies one input set to the GPU, with a poisoned output buffer.
    fn upload(&self, kernel: &Kernel, inputs: &[Vec<u8>]) -> Result<Buffers, GpuRejected> {
        let fault = |e: String| (Rejected::Fault(e), true);
        let inputs = inputs
            .iter()
            .map(|b| self.stream.clone_htod(b))
            .collect::<Result<Vec<_>, _>>()
            .map_err(driver("copying the inputs to the GPU"))
            .map_err(fault)?;
        let output = self
            .stream
            .clone_htod(&poisoned_output(kernel))
            .map_err(driver("copying the poisoned output to the GPU"))
            .map_err(fault)?;
        Ok(Buffers { inputs, output })
    }

    /// `program` with its zeroed workspace, if it takes one.
    fn arm<'a>(&self, program: &'a Program) -> Result<Armed<'a>, GpuRejected> {
        let workspace = match program.workspace_bytes {
            0 => None,
            bytes => Some(
                self.stream
                    .alloc_zeros::<u8>(bytes)
                    .map_err(driver("allocating the kernel's workspace"))
                    .map_err(|e| (Rejected::Fault(e), true))?,
            ),
        };
        Ok(Armed { program, workspace })
    }

    /// The tensor maps `program` takes, encoded for `buffers`' inputs
    /// (none for most programs): before a launch's timing starts.
    fn maps(&self, program: &Program, buffers: &Buffers) -> Result<Vec<EncodedMap>, String> {
        program
            .maps
            .iter()
            .map(|map| tensor_map(map, &buffers.inputs[map.param], &self.stream))
            .collect::<Result<Vec<_>, _>>()
            .map_err(driver("encoding a tensor map"))
    }

    /// Queues one launch, with `maps` encoded for `buffers`.
    fn launch(
        &self,
        armed: &mut Armed<'_>,
        buffers: &mut Buffers,
        maps: &[EncodedMap],
    ) -> Result<(), String> {
        let program = armed.program;
        let mut builder = self.stream.launch_builder(&program.function);
        for input in &buffers.inputs {
            builder.arg(input);
        }
        builder.arg(&mut buffers.output);
        if let Some(workspace) = armed.workspace.as_mut() {
            builder.arg(workspace);
        }
        for map in maps {
            builder.arg(map);
        }
        // SAFETY: the PTX was lowered for this kernel: its entry takes one
        // global pointer per tensor, the inputs in order then the output,
        // and accesses each within the length its shape implies, which is
        // each buffer's length (allocated from the kernel's shape above);
        // a kernel with a workspace takes it after them, zeroed and as long
        // as its launch asks, and tensor maps of its inputs last.
        // A kernel that does not keep to that (an injected fault) faults on
        // the GPU, and the worker exits after reporting it.
        unsafe { builder.launch(program.config) }
            .map(|_| ())
            .map_err(driver("launching the kernel"))
    }

    /// Runs once and returns the output's bytes.
    fn run_once(
        &self,
        armed: &mut Armed<'_>,
        buffers: &mut Buffers,
    ) -> Result<Vec<u8>, GpuRejected> {
        let fault = |e: String| (Rejected::Fault(e), true);
        let maps = self.maps(armed.program, buffers).map_err(fault)?;
        self.launch(armed, buffers, &maps).map_err(fault)?;
        self.stream
            .synchronize()
            .map_err(driver("running the kernel"))
            .map_err(fault)?;
        self.stream
            .clone_dtoh(&buffers.output)
            .map_err(driver("copying the output from the GPU"))
            .map_err(fault)
    }

    /// Warms up, then times launches rotating over `sets` until the median
    /// is known closely enough or the time cap passes; the run times in
    /// microseconds, in the order they ran.
    fn time(
        &self,
        armed: &mut Armed<'_>,
        sets: &mut [Buffers],
        settings: &Settings,
    ) -> Result<Vec<f64>, GpuRejected> {
        const BATCH: usize = 8;
        let fault = |e: String| (Rejected::Fault(e), true);
        let maps = sets
            .iter()
            .map(|set| self.maps(armed.program, set))
            .collect::<Result<Vec<_>, _>>()
            .map_err(fault)?;
        let warmup = Instant::now();
        let mut runs = 0u32;
        while runs < settings.warmup_runs || warmup.elapsed() < Duration::from_millis(10) {
            let at = runs as usize % sets.len();
            self.launch(armed, &mut sets[at], &maps[at])
                .map_err(fault)?;
            self.stream
                .synchronize()
                .map_err(driver("warming up"))
                .map_err(fault)?;
            runs += 1;
        }
        let event = || {
            self.context
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(driver("creating a timing event"))
                .map_err(fault)
        };
        let events: Vec<(CudaEvent, CudaEvent)> = (0..BATCH)
            .map(|_| Ok((event()?, event()?)))
            .collect::<Result<_, GpuRejected>>()?;
        let cap = Duration::from_secs_f64(settings.time_cap_s.max(0.0));
        let started = Instant::now();
        let mut times = Vec::new();
        let mut next = 0usize;
        loop {
            for (start, end) in &events {
                let record = |e: &CudaEvent| e.record(&self.stream);
                record(start)
                    .map_err(driver("recording an event"))
                    .map_err(fault)?;
                let at = next % sets.len();
                self.launch(armed, &mut sets[at], &maps[at])
                    .map_err(fault)?;
                record(end)
                    .map_err(driver("recording an event"))
                    .map_err(fault)?;
                next += 1;
            }
            for (start, end) in &events {
                let ms = start
                    .elapsed_ms(end)
                    .map_err(driver("running the kernel while timing"))
                    .map_err(fault)?;
                times.push(f64::from(ms) * 1e3);
            }
            let mut sorted = times.clone();
            sorted.sort_by(f64::total_cmp);
            let enough = times.len() >= settings.min_samples as usize;
            if enough && (converged(&sorted, settings.confidence) || started.elapsed() >= cap) {
                return Ok(times);
            }
        }
    }
}

/// Compares a candidate's output with what is expected.
fn check_output(kernel: &Kernel, expected: &Expected, bytes: &[u8]) -> Result<(), GpuRejected> {
    let dtype = kernel.output.dtype;
    let wrong = |why: String| (Rejected::WrongResult(why), false);
    if let Some(index) = first_poisoned(dtype, bytes) {
        return Err(wrong(format!("output element {index} was never written")));
    }
    let got = decode(dtype, bytes);
    for (index, (&g, &w)) in got.iter().zip(expected.want()).enumerate() {
        if g == w || (g.is_nan() && w.is_nan()) {
            continue;
        }
        let tolerance = expected.tolerance(index, w);
        let error = (g - w).abs();
        if error.is_nan() || error > tolerance {
            return Err(wrong(format!(
                "output element {index} is {g:e}, {} says {w:e} ± {tolerance:e}",
                expected.source()
            )));
        }
    }
    Ok(())
}

/// The tolerance between two GPU runs of the kernel: twice what the
/// virtual GPU's verification allows between one run and the reference
/// (each run rounds its sums in its own order), and for an `allow_tf32`
/// contraction the allowance between tf32 and exact products.
fn baseline_tolerance(kernel: &Kernel) -> f32 {
    use ktune_vgpu::verify::{TF32_BASELINE, relative_tolerance, tf32_factors};
    let tf32 = if tf32_factors(kernel).is_some() {
        TF32_BASELINE
    } else {
        0.0
    };
    2.0 * relative_tolerance(kernel) + tf32
}

/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as nvidia-smi writes it.
fn format_uuid(bytes: &[std::ffi::c_char; 16]) -> String {
    let hex: Vec<String> = bytes.iter().map(|b| format!("{:02x}", *b as u8)).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex[..4].concat(),
        hex[4..6].concat(),
        hex[6..8].concat(),
        hex[8..10].concat(),
        hex[10..].concat()
    )
}

/// The CUDA version the driver supports, `major.minor`.
fn cuda_version() -> Option<String> {
    let mut version = 0;
    // SAFETY: the driver library is loaded (the context exists) and the
    // call writes one int through a valid pointer.
    let result = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) };
    (result == cudarc::driver::sys::CUresult::CUDA_SUCCESS && version > 0)
        .then(|| format!("{}.{}", version / 1000, version % 1000 / 10))
}

/// The kernel driver's version, from the first line of
/// `/proc/driver/nvidia/version` ("NVRM version: NVIDIA UNIX x86_64 Kernel
/// Module  570.86.15  …"): the first word that looks like a version.
fn kernel_driver_version() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    let first = text.lines().next()?;
    first
        .split_whitespace()
        .find(|w| w.contains('.') && w.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .map(str::to_string)
}

/// `map` encoded by the driver for `buffer`, the input it maps (a lowered
/// kernel's [`ptx::TensorMap`] as its launch passes it).
pub fn tensor_map(
    map: &ptx::TensorMap,
    buffer: &CudaSlice<u8>,
    stream: &CudaStream,
) -> Result<EncodedMap, DriverError> {
    let (address, _read) = buffer.device_ptr(stream);
    encode_tensor_map(
        address,
        map.dtype.name(),
        (&map.dims, &map.strides, &map.boxed),
        map.swizzle.span().unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_poisoned_output_is_as_long_as_the_output_buffer() {
        let item: syn::ItemFn = syn::parse_str(
            "#[tuned_kernel(shape(M = 3, N = 5))]
             fn twice(a: Tensor<bf16, (M, N)>) -> Tensor<bf16, (M, N)> {
                 compute(|m, n| a[m][n] * 2.0)
             }",
        )
        .expect("parses");
        let attr = &item.attrs[0];
        let kernel = ktune_core::syntax::parse_kernel_fn(attr, &item).expect("a kernel");
        let bytes = poisoned_output(&kernel);
        assert_eq!(bytes.len(), 3 * 5 * 2);
        assert_eq!(first_poisoned(ktune_core::DType::Bf16, &bytes), Some(0));
        assert!(bytes.chunks_exact(2).all(|e| e == &bytes[..2]));
    }

    #[test]
    fn uuids_print_like_nvidia_smi() {
        let bytes: [std::ffi::c_char; 16] = std::array::from_fn(|i| (i * 17) as u8 as _);
        assert_eq!(
            format_uuid(&bytes),
            "GPU-00112233-4455-6677-8899-aabbccddeeff"
        );
    }
}

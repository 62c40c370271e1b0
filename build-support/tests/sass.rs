//! Static quality of the machine code ptxas makes of ktune's default
//! schedules, read from nvdisasm's listing (`ktune_build::sass`), for sm_80
//! and sm_90: the demo's kernels and three benchmark-style contractions, an
//! f32 SGEMM at 4096³ (exact, and with `allow_tf32`) and a bf16 matmul +
//! bias + gelu at 4096×11008×4096.
//!
//! Thresholds: no register spills; where a schedule moves 16 bytes per
//! global access (vector width 4 for f32, 8 for 16-bit types), 128-bit
//! global loads; where a contraction's thread tile reads four consecutive
//! f32 values from shared memory, 128-bit shared loads; in the SGEMM's main
//! loop, at least 70 % FFMA; the bf16 matmul's and the tf32 SGEMM's
//! defaults run on tensor cores, with every `mma.sync` of their main loops
//! an HMMA there.
//!
//! Needs ptxas and nvdisasm: `cargo xtask setup` installs both into the
//! workspace's `.venv` (or set `KTUNE_PTXAS` and `KTUNE_NVDISASM`). Without
//! them these tests fail; they never pass silently.

use std::fmt::Write as _;
use std::path::Path;

use ktune_build::sass::{self, Inspection, Request, Tools};
use ktune_core::SmVersion;
use ktune_core::ir::Kernel;
use ktune_core::lower::{self, Lowered, matmul};
use ktune_core::schedule::{Class, MmaTiles, Schedule, Tiles};
use ktune_core::syntax::parse_kernel;
use quote::quote;

const TARGETS: [SmVersion; 2] = [SmVersion::Sm80, SmVersion::Sm90];

fn tools() -> Tools {
    Tools::find().unwrap_or_else(|e| panic!("{e}"))
}

fn sgemm_4096() -> Kernel {
    parse_kernel(
        quote!(shape(M = 4096, N = 4096, K = 4096)),
        quote! {
            fn sgemm(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
                compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
            }
        },
    )
    .expect("the SGEMM parses")
}

fn tf32_sgemm_4096() -> Kernel {
    let sgemm = sgemm_4096();
    let tf32 = parse_kernel(
        quote!(shape(M = 4096, N = 4096, K = 4096), allow_tf32),
        quote! {
            fn sgemm(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
                compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
            }
        },
    )
    .expect("the tf32 SGEMM parses");
    assert_eq!(
        tf32,
        Kernel {
            allow_tf32: true,
            ..sgemm
        }
    );
    tf32
}

fn bf16_matmul_bias_gelu() -> Kernel {
    bf16_matmul_bias_gelu_of(quote!(shape(M = 4096, N = 11008, K = 4096)))
}

/// The bf16 matmul + bias + gelu at `shape`.
fn bf16_matmul_bias_gelu_of(shape: proc_macro2::TokenStream) -> Kernel {
    parse_kernel(
        shape,
        quote! {
            fn mm_bias_gelu(a: Tensor<bf16, (M, K)>, w: Tensor<bf16, (K, N)>, bias: Tensor<bf16, (N,)>)
                -> Tensor<bf16, (M, N)>
            {
                compute(|m, n| gelu(sum(K, |k| a[m][k] * w[k][n]) + bias[n]))
            }
        },
    )
    .expect("the bf16 matmul parses")
}

fn demo_kernels() -> Vec<Kernel> {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/demo");
    let scan = ktune_build::scan::scan(&demo, &[demo.join("src")]).expect("the demo scans");
    assert!(!scan.kernels.is_empty(), "the demo has kernels");
    scan.kernels.into_iter().map(|f| f.kernel).collect()
}

/// The default schedule of `kernel` on `target`, lowered and inspected.
fn inspect_default(tools: &Tools, kernel: &Kernel, target: SmVersion) -> (Schedule, Inspection) {
    inspect(tools, kernel, lower::heuristic(kernel, target), target)
}

/// `schedule` for `kernel` on `target`, lowered and inspected.
fn inspect(
    tools: &Tools,
    kernel: &Kernel,
    schedule: Schedule,
    target: SmVersion,
) -> (Schedule, Inspection) {
    let lowered = lower::lower(kernel, &schedule, target)
        .unwrap_or_else(|e| panic!("{} does not lower for {target}: {e}", kernel.name));
    let inspection = sass::inspect(tools, &Request::lowered(&lowered, target))
        .unwrap_or_else(|e| panic!("{} {target}: {e}", kernel.name));
    (schedule, inspection)
}

/// The machine code ptxas makes of a lowered kernel, in listing order.
fn machine_code(tools: &Tools, lowered: &Lowered, target: SmVersion) -> Vec<sass::Instruction> {
    let ptx = ktune_core::ptx::print(&lowered.ptx, target);
    let report = ktune_build::ptxas::assemble(&tools.ptxas, &ptx, target)
        .unwrap_or_else(|e| panic!("{}: {e}", lowered.ptx.entry));
    let listing = sass::disassemble(&tools.nvdisasm, &report.cubin).expect("disassembles");
    sass::parse(&listing).expect("parses")
}

/// The `ldmatrix` (LDSM) among `instructions` before their first HMMA.
fn ldmatrix_before_first_mma(instructions: &[sass::Instruction]) -> usize {
    let first_mma = instructions
        .iter()
        .position(|i| i.opcode.name == "HMMA")
        .expect("an HMMA");
    instructions[..first_mma]
        .iter()
        .filter(|i| i.opcode.name == "LDSM")
        .count()
}

/// What a schedule asks of the machine code's access widths.
#[derive(Debug, PartialEq, Eq)]
struct Wants {
    global_128: bool,
    shared_128: bool,
}

fn wants(kernel: &Kernel, schedule: &Schedule) -> Wants {
    match *schedule {
        Schedule::Elementwise { vector, .. } | Schedule::Rows { vector, .. } => Wants {
            global_128: kernel.inputs.iter().any(|t| vector * t.dtype.size() == 16),
            shared_128: false,
        },
        Schedule::Matmul(Tiles {
            thread_m,
            thread_n,
            vector_a,
            vector_b,
            stages,
            ..
        }) => {
            let plan = matmul::detect(kernel).expect("a matmul schedule is for a contraction");
            let bytes = |operand: &matmul::MatmulOperand| kernel.input(operand.tensor).dtype.size();
            Wants {
                // Above one stage, tiles travel by `cp.async` (LDGSTS).
                global_128: stages == 1
                    && (vector_a * bytes(&plan.a) == 16 || vector_b * bytes(&plan.b) == 16),
                // Fragments are read from shared memory as f32, up to four
                // consecutive values.
                shared_128: thread_m >= 4 || thread_n >= 4,
            }
        }
        // Tensor-core tiles travel by `cp.async` (LDGSTS) and `ldmatrix`
        // (LDSM), neither of them a plain load.
        Schedule::Generic { .. } | Schedule::Mma(_) => Wants {
            global_128: false,
            shared_128: false,
        },
    }
}

/// One line of the printed table.
fn row(table: &mut String, kernel: &str, schedule: &Schedule, i: &Inspection) {
    let (ffma, loop_len) = i
        .main_loop
        .as_ref()
        .map_or((0.0, 0), |l| (l.ffma_fraction * 100.0, l.instructions));
    let _ = writeln!(
        table,
        "{kernel:<14} {:<6} regs {:>3} spill {}/{} smem {:>6} occ {:>5.1}% ({}) loop {:>4} FFMA {:>5.1}% \
         gld [{}] sld [{}]  {}",
        i.target,
        i.registers,
        i.spill_stores,
        i.spill_loads,
        i.shared.total(),
        i.occupancy.fraction * 100.0,
        i.occupancy
            .limited_by
            .iter()
            .map(|r| r.describe())
            .collect::<Vec<_>>()
            .join(", "),
        loop_len,
        ffma,
        i.memory.global_loads.describe(),
        i.memory.shared_loads.describe(),
        schedule.to_json()
    );
}

/// `mma.sync` (HMMA) instructions in the main loop (0 when none was
/// found).
fn main_loop_hmma(i: &Inspection) -> u32 {
    main_loop_count(i, "HMMA")
}

/// Instructions named `name` in the main loop (0 when none was found).
fn main_loop_count(i: &Inspection, name: &str) -> u32 {
    i.main_loop
        .as_ref()
        .map_or(0, |l| l.mix.get(name).copied().unwrap_or(0))
}

/// The failures of the thresholds every default schedule must meet.
fn check(kernel: &Kernel, schedule: &Schedule, i: &Inspection) -> Vec<String> {
    let at = format!("{} {} {}", kernel.name, i.target, schedule.to_json());
    let mut failures = Vec::new();
    if i.spills() {
        failures.push(format!(
            "{at}: spills {} B stored, {} B loaded",
            i.spill_stores, i.spill_loads
        ));
    }
    if i.occupancy.blocks_per_sm == 0 {
        failures.push(format!("{at}: no block fits on an SM"));
    }
    let wanted = wants(kernel, schedule);
    if wanted.global_128 && i.memory.global_loads.count(128) == 0 {
        failures.push(format!(
            "{at}: asks for 16-byte global loads, has {}",
            i.memory.global_loads.describe()
        ));
    }
    if wanted.shared_128 && i.memory.shared_loads.count(128) == 0 {
        failures.push(format!(
            "{at}: asks for 4-wide shared fragment reads, has {}",
            i.memory.shared_loads.describe()
        ));
    }
    failures
}

#[test]
fn demo_kernels_meet_the_static_thresholds() {
    let tools = tools();
    let mut table = String::new();
    let mut failures = Vec::new();
    for kernel in demo_kernels() {
        for target in TARGETS {
            let (schedule, inspection) = inspect_default(&tools, &kernel, target);
            row(&mut table, &kernel.name, &schedule, &inspection);
            failures.extend(check(&kernel, &schedule, &inspection));
        }
    }
    eprintln!("{table}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn sgemm_4096_main_loop_is_mostly_ffma() {
    let tools = tools();
    let kernel = sgemm_4096();
    let mut table = String::new();
    let mut failures = Vec::new();
    for target in TARGETS {
        let (schedule, i) = inspect_default(&tools, &kernel, target);
        row(&mut table, &kernel.name, &schedule, &i);
        failures.extend(check(&kernel, &schedule, &i));
        let Some(main) = &i.main_loop else {
            failures.push(format!("sgemm {target}: no main loop"));
            continue;
        };
        if main.ffma_fraction < 0.70 {
            failures.push(format!(
                "sgemm {target} {}: FFMA is {:.1}% of the main loop's {} instructions (want ≥ 70%): {:?}",
                schedule.to_json(),
                main.ffma_fraction * 100.0,
                main.instructions,
                main.mix
            ));
        }
        // With 16-byte vectors on both operands and 4-wide fragments, the
        // loop's global and shared loads are all 128-bit.
        let Schedule::Matmul(Tiles {
            vector_a, vector_b, ..
        }) = schedule
        else {
            panic!("the SGEMM's default schedule is a matmul");
        };
        if (vector_a, vector_b) == (4, 4)
            && main.memory.global_loads.count(128) != main.memory.global_loads.total()
        {
            failures.push(format!(
                "sgemm {target}: main-loop global loads {}",
                main.memory.global_loads.describe()
            ));
        }
        if main.memory.shared_loads.count(128) != main.memory.shared_loads.total() {
            failures.push(format!(
                "sgemm {target}: main-loop shared loads {}",
                main.memory.shared_loads.describe()
            ));
        }
    }
    eprintln!("{table}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn bf16_matmul_bias_gelu_meets_the_static_thresholds() {
    let tools = tools();
    let kernel = bf16_matmul_bias_gelu();
    let mut table = String::new();
    let mut failures = Vec::new();
    // Each target's default, and sm_90's portable one (`mma.sync`, what
    // GPUs newer than Hopper get) beside Hopper's own.
    let defaults = TARGETS
        .map(|target| (target, lower::heuristic(&kernel, target)))
        .into_iter()
        .chain([(
            SmVersion::Sm90,
            lower::portable_heuristic(&kernel, SmVersion::Sm90),
        )]);
    for (target, schedule) in defaults {
        let (schedule, i) = inspect(&tools, &kernel, schedule, target);
        row(&mut table, &kernel.name, &schedule, &i);
        let Schedule::Mma(tiles) = schedule else {
            panic!(
                "the default bf16 schedule is a tensor-core one: {}",
                schedule.to_json()
            )
        };
        failures.extend(check(&kernel, &schedule, &i));
        if !i.uses_tensor_cores() {
            failures.push(format!("bf16 {target}: no HMMA or HGMMA"));
        }
        if tiles.wgmma == 1 {
            // Hopper's default: one `wgmma` a k-step for each of the
            // thread's warpgroup, no fragments in registers.
            let hgmma = main_loop_count(&i, "HGMMA");
            let _ = writeln!(table, "  main loop HGMMA {hgmma}");
            if hgmma < tiles.block_k / 16 || main_loop_hmma(&i) + main_loop_count(&i, "LDSM") > 0 {
                failures.push(format!(
                    "bf16 {target}: {hgmma} HGMMA in the main loop (want ≥ {}, and no HMMA or LDSM): {:?}",
                    tiles.block_k / 16,
                    i.main_loop
                ));
            }
            continue;
        }
        let hmma = main_loop_hmma(&i);
        let _ = writeln!(table, "  main loop HMMA {hmma}");
        // A warp's 64×64 tile is 32 m16n8 fragments, times two k-steps of 16.
        if hmma < 64 {
            failures.push(format!(
                "bf16 {target}: {hmma} HMMA in the main loop (want ≥ 64): {:?}",
                i.main_loop
            ));
        }
    }
    eprintln!("{table}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn tf32_sgemm_default_runs_on_tensor_cores() {
    let tools = tools();
    let kernel = tf32_sgemm_4096();
    let mut table = String::new();
    let mut failures = Vec::new();
    for target in TARGETS {
        let (schedule, i) = inspect_default(&tools, &kernel, target);
        row(&mut table, &kernel.name, &schedule, &i);
        assert_eq!(
            schedule.kind(),
            Class::Mma,
            "the default allow_tf32 SGEMM schedule is a tensor-core one: {}",
            schedule.to_json()
        );
        failures.extend(check(&kernel, &schedule, &i));
        let Schedule::Mma(MmaTiles {
            warp_m,
            warp_n,
            block_k,
            ..
        }) = schedule
        else {
            unreachable!("checked above")
        };
        let hmma = main_loop_hmma(&i);
        let _ = writeln!(table, "  main loop HMMA {hmma}");
        // One m16n8k8 per fragment of the warp's tile per k-step of 8.
        let want = (warp_m / 16) * (warp_n / 8) * (block_k / 8);
        if hmma < want {
            failures.push(format!(
                "tf32 {target}: {hmma} HMMA in the main loop (want ≥ {want}): {:?}",
                i.main_loop
            ));
        }
    }
    eprintln!("{table}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One warp's `mma.sync` m16n8k16 with bf16 inputs and f32 accumulators, on
/// fragments loaded from and stored to global memory.
const MMA_PTX: &str = r#"
.version 7.0
.target sm_80
.address_size 64

.visible .entry mma_bf16(.param .u64 frags)
{
    .reg .b32 %a<4>;
    .reg .b32 %b<2>;
    .reg .f32 %c<4>;
    .reg .b64 %rd<3>;
    .reg .b32 %r<2>;

    ld.param.u64 %rd0, [frags];
    cvta.to.global.u64 %rd0, %rd0;
    mov.u32 %r0, %tid.x;
    mul.wide.u32 %rd1, %r0, 48;
    add.u64 %rd2, %rd0, %rd1;
    ld.global.v4.b32 {%a0, %a1, %a2, %a3}, [%rd2];
    ld.global.v2.b32 {%b0, %b1}, [%rd2+16];
    ld.global.v4.f32 {%c0, %c1, %c2, %c3}, [%rd2+32];
    mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
        {%c0, %c1, %c2, %c3}, {%a0, %a1, %a2, %a3}, {%b0, %b1}, {%c0, %c1, %c2, %c3};
    st.global.v4.f32 [%rd2+32], {%c0, %c1, %c2, %c3};
    ret;
}
"#;

#[test]
fn mma_sync_runs_on_the_tensor_cores() {
    let tools = tools();
    for target in TARGETS {
        let ptx = MMA_PTX
            .replace(".target sm_80", &format!(".target {target}"))
            .replace(".version 7.0", &format!(".version {}", target.ptx_isa()));
        let request = Request {
            ptx,
            target,
            threads_per_block: 32,
            dynamic_shared_bytes: 0,
        };
        let i = sass::inspect(&tools, &request).unwrap_or_else(|e| panic!("{target}: {e}"));
        assert!(i.uses_tensor_cores(), "{target}: no HMMA in {i:?}");
        assert_eq!(i.main_loop, None, "{target}: the snippet has no loop");
        assert_eq!(
            i.memory.global_loads.count(128),
            2,
            "{target}: {:?}",
            i.memory
        );
    }
    let scalar = MMA_PTX.replace(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32\n        {%c0, %c1, %c2, %c3}, {%a0, %a1, %a2, %a3}, {%b0, %b1}, {%c0, %c1, %c2, %c3};",
        "fma.rn.f32 %c0, %c1, %c2, %c3;",
    );
    let request = Request {
        ptx: scalar,
        target: SmVersion::Sm80,
        threads_per_block: 32,
        dynamic_shared_bytes: 0,
    };
    let i = sass::inspect(&tools, &request).expect("the scalar variant assembles");
    assert!(!i.uses_tensor_cores(), "{i:?}");
}

/// A row kernel's loads that follow its stores take the read-only path
/// (`ld.global.nc`, `LDG…CONSTANT`), which lets ptxas issue them ahead of
/// those stores. With plain loads it could not (a store might change what
/// they read): in the demo's layernorm at 16 threads a row, the loads of
/// `gamma` and `beta` alternated with the stores, each pair waiting on the
/// last.
#[test]
fn loads_after_stores_take_the_read_only_path() {
    let tools = tools();
    let rows = Schedule::Rows {
        threads_per_row: 16,
        rows_per_block: 16,
        vector: 1,
        cache: 1,
        tree: 0,
        online: 0,
        cluster: 1,
    };
    let target = SmVersion::Sm90;
    let mut checked = 0;
    for kernel in demo_kernels() {
        let default = lower::heuristic(&kernel, target);
        if !matches!(default, Schedule::Rows { .. }) {
            continue;
        }
        for schedule in [default, rows.clone()] {
            let lowered = lower::lower(&kernel, &schedule, target)
                .unwrap_or_else(|e| panic!("{} {schedule:?}: {e}", kernel.name));
            let instructions = machine_code(&tools, &lowered, target);
            let first_store = instructions
                .iter()
                .position(|i| i.opcode.name == "STG")
                .unwrap_or_else(|| panic!("{}: no global stores", kernel.name));
            let later: Vec<_> = instructions[first_store..]
                .iter()
                .filter(|i| i.opcode.name == "LDG")
                .collect();
            checked += later.len();
            for load in later {
                assert!(
                    load.opcode.modifiers.iter().any(|m| m == "CONSTANT"),
                    "{} {schedule:?}: {load:?} follows a store and is not a read-only load",
                    kernel.name
                );
            }
        }
    }
    // layernorm's weights are read after its first stores.
    assert!(checked > 0, "no loads after a store");
}

/// With `min_blocks = 1` (`.minnctapersm 1`), ptxas gives the bf16 matmul's
/// default tile, in padded rows and fragments loaded as needed, more
/// registers and spends them loading a
/// k-step's `ldmatrix` fragments ahead of its `mma`s; left to itself it
/// fits three blocks an SM and loads each A fragment just before its eight
/// `mma`s. Neither spills.
/// The bf16 matmul's portable tensor-core default on sm_90 (`mma.sync`)
/// with `change` made, lowered and inspected; it must not spill.
fn bf16_default_with(
    tools: &Tools,
    change: impl Fn(MmaTiles) -> MmaTiles,
) -> (MmaTiles, Lowered, Inspection) {
    let kernel = bf16_matmul_bias_gelu();
    let target = SmVersion::Sm90;
    let Schedule::Mma(default) = lower::portable_heuristic(&kernel, target) else {
        panic!("the bf16 default is a tensor-core schedule")
    };
    let schedule = Schedule::Mma(change(default));
    let lowered = lower::lower(&kernel, &schedule, target)
        .unwrap_or_else(|e| panic!("{}: {e}", schedule.to_json()));
    let inspection = sass::inspect(tools, &Request::lowered(&lowered, target))
        .unwrap_or_else(|e| panic!("{}: {e}", schedule.to_json()));
    assert!(
        !inspection.spills(),
        "{}: {inspection:?}",
        schedule.to_json()
    );
    (default, lowered, inspection)
}

#[test]
fn one_block_an_sm_lets_ptxas_load_fragments_ahead_of_their_mmas() {
    let tools = tools();
    let [free, hinted] = [0, 1].map(|min_blocks| {
        let (default, lowered, inspection) = bf16_default_with(&tools, |t| MmaTiles {
            min_blocks,
            swizzle: 0,
            prefetch: 0,
            ..t
        });
        assert_eq!(default.min_blocks, 0);
        let instructions = machine_code(&tools, &lowered, SmVersion::Sm90);
        (inspection, ldmatrix_before_first_mma(&instructions))
    });
    assert!(
        hinted.0.registers > free.0.registers,
        "{} registers with the hint, {} without",
        hinted.0.registers,
        free.0.registers
    );
    assert!(
        hinted.1 > free.1,
        "{} ldmatrix before the first mma with the hint, {} without",
        hinted.1,
        free.1
    );
    assert_eq!(
        hinted.0.tensor_core_instructions,
        free.0.tensor_core_instructions
    );
}

/// The bf16 default's swizzled rows cost its main loop nothing: the XOR of
/// each lane's row key is taken once, before the loop, into one address
/// register per class of fragments, and the loop runs the same
/// instructions as with padded rows. The layout saves the padding's
/// shared memory; neither spills.
#[test]
fn swizzled_rows_cost_the_main_loop_no_instructions() {
    let tools = tools();
    let [padded, swizzled] = [0, 1].map(|swizzle| {
        let (default, _, inspection) = bf16_default_with(&tools, |t| MmaTiles { swizzle, ..t });
        assert_eq!(default.swizzle, 1);
        inspection
    });
    let main_loop = |i: &Inspection| i.main_loop.clone().expect("a main loop");
    let (p, s) = (main_loop(&padded), main_loop(&swizzled));
    assert_eq!(s.instructions, p.instructions, "{p:?}\n{s:?}");
    assert_eq!(s.mix, p.mix);
    assert!(
        swizzled.shared.dynamic_bytes < padded.shared.dynamic_bytes,
        "{:?} against {:?}",
        swizzled.shared,
        padded.shared
    );
}

/// The bf16 default loads its fragments one k-step ahead (`prefetch = 1`):
/// ptxas then issues an `mma` first after the main loop's barrier, each
/// `ldmatrix` among the `mma`s of the step before, with as many blocks an
/// SM (it takes 230 registers instead of 206; two blocks fit either way).
/// Loading as needed, a dozen `ldmatrix` come between the barrier and the
/// first `mma` of every tile.
#[test]
fn fragments_loaded_ahead_keep_mmas_issuing_across_the_barrier() {
    let tools = tools();
    let [needed, ahead] = [0, 1].map(|prefetch| {
        let (default, lowered, inspection) =
            bf16_default_with(&tools, |t| MmaTiles { prefetch, ..t });
        assert_eq!(default.prefetch, 1);
        let instructions = machine_code(&tools, &lowered, SmVersion::Sm90);
        let body = &instructions[sass::main_loop(&instructions).expect("a main loop")];
        let barrier = body
            .iter()
            .position(|i| i.opcode.name == "BAR")
            .expect("a barrier in the main loop");
        (inspection, ldmatrix_before_first_mma(&body[barrier..]))
    });
    assert_eq!(ahead.1, 0, "ldmatrix between the barrier and the first mma");
    assert!(
        needed.1 >= 8,
        "{} ldmatrix between the barrier and the first mma when loading as needed",
        needed.1
    );
    assert_eq!(
        ahead.0.occupancy.blocks_per_sm, needed.0.occupancy.blocks_per_sm,
        "{} registers ahead, {} as needed",
        ahead.0.registers, needed.0.registers
    );
    assert_eq!(
        ahead.0.tensor_core_instructions,
        needed.0.tensor_core_instructions
    );
}

/// The bf16 matmul + bias + gelu on Hopper's warpgroup instructions
/// (`wgmma = 1`, sm_90a), on 128×256 tiles of two warpgroups, each 64×256
/// (B, stored `(K, N)`, in four 128-byte panels): its main loop issues
/// each k-step's `wgmma` as HGMMA.64x256x16 and loads no fragments (no
/// LDSM, no HMMA), and it does not spill.
#[test]
fn warpgroup_tiles_run_on_hgmma() {
    let tools = tools();
    let kernel = bf16_matmul_bias_gelu();
    let target = SmVersion::Sm90;
    let tiles = MmaTiles {
        block_m: 128,
        block_n: 256,
        block_k: 64,
        warp_m: 64,
        warp_n: 256,
        stages: 3,
        group_m: 8,
        split_k: 1,
        min_blocks: 0,
        swizzle: 1,
        prefetch: 0,
        wgmma: 1,
        tail_split: 1,
        persistent: 0,
        producer: 0,
        tma: 0,
        cluster_m: 1,
    };
    let schedule = Schedule::Mma(tiles);
    let lowered = lower::lower(&kernel, &schedule, target)
        .unwrap_or_else(|e| panic!("{}: {e}", schedule.to_json()));
    let ptx = ktune_core::ptx::print(&lowered.ptx, target);
    assert!(ptx.contains("\n.target sm_90a\n"), "{ptx}");
    let inspection = sass::inspect(&tools, &Request::lowered(&lowered, target))
        .unwrap_or_else(|e| panic!("{}: {e}", schedule.to_json()));
    assert!(!inspection.spills(), "{inspection:?}");
    let instructions = machine_code(&tools, &lowered, target);
    let body = &instructions[sass::main_loop(&instructions).expect("a main loop")];
    let count = |name: &str| body.iter().filter(|i| i.opcode.name == name).count();
    // One m64n256k16 a k-step, four k-steps a tile.
    let hgmma: Vec<_> = body.iter().filter(|i| i.opcode.name == "HGMMA").collect();
    assert_eq!(hgmma.len(), 4, "{body:#?}");
    assert!(
        hgmma
            .iter()
            .all(|i| i.opcode.modifiers.first().map(String::as_str) == Some("64x256x16")),
        "{hgmma:#?}"
    );
    assert_eq!(count("HMMA") + count("LDSM"), 0);
    // The warpgroup's descriptors are computed on the uniform datapath,
    // which HGMMA reads them from: none is moved there in the loop.
    assert_eq!(count("R2UR"), 0, "{body:#?}");
    // Three slots of 48 KiB: the ring's advance divides nothing.
    assert_eq!(count("MUFU") + count("I2F") + count("F2I"), 0, "{body:#?}");
    assert_eq!(inspection.threads_per_block, 256);
}

/// Two consumer warpgroups of 64 × 256 beside a producer warpgroup,
/// copying by `cp.async`, on blocks looping over 128 × 256 × 64 tiles in
/// four slots.
fn fed_tiles() -> MmaTiles {
    MmaTiles {
        block_m: 128,
        block_n: 256,
        block_k: 64,
        warp_m: 64,
        warp_n: 256,
        stages: 4,
        group_m: 8,
        split_k: 1,
        min_blocks: 1,
        swizzle: 1,
        prefetch: 0,
        wgmma: 1,
        tail_split: 1,
        persistent: 1,
        producer: 1,
        tma: 0,
        cluster_m: 1,
    }
}

/// The bf16 matmul + bias + gelu with a producer warpgroup (`producer =
/// 1`) and two consumer warpgroups of 128 accumulators, sharing a tile or
/// taking tiles in turn (`producer = 2`): ptxas gives each
/// thread the block's share of the SM's registers at launch (168 of 384
/// threads) and honours the warpgroups' `setmaxnreg` (it says where it
/// cannot), and neither the producer's copies in 24 registers nor the
/// consumers' products and epilogue in 240 spill, also where every
/// dimension overhangs its tile (the producer guards each row it copies).
/// Four consumers of 64 accumulators, estimated at 120 registers where the
/// producer leaves them 112, are rejected.
#[test]
fn a_producer_warpgroup_gives_its_registers_to_the_others() {
    let tools = tools();
    let kernel = bf16_matmul_bias_gelu();
    let edged = bf16_matmul_bias_gelu_of(quote!(shape(M = 4000, N = 11000, K = 4000)));
    let target = SmVersion::Sm90;
    let base = fed_tiles();
    let square = MmaTiles {
        block_m: 256,
        block_n: 128,
        warp_m: 128,
        warp_n: 128,
        ..base
    };
    // Ping-pong: two sets of one 128 × 128 warpgroup, or of one 64 × 256
    // (which spilled up to 132 bytes in the 232 registers a producer of
    // 40 leaves, where the product has no edge; ptxas 12.9).
    let pong = MmaTiles {
        block_m: 128,
        warp_m: 128,
        producer: 2,
        ..square
    };
    let wide_pong = MmaTiles {
        block_m: 64,
        producer: 2,
        ..base
    };
    for (kernel, tiles) in [
        (&kernel, base),
        (&kernel, square),
        (&edged, base),
        (&edged, square),
        (&kernel, pong),
        (&edged, pong),
        (&kernel, wide_pong),
        (&edged, wide_pong),
    ] {
        let schedule = Schedule::Mma(tiles);
        let lowered = lower::lower(kernel, &schedule, target)
            .unwrap_or_else(|e| panic!("{}: {e}", schedule.to_json()));
        let ptx = ktune_core::ptx::print(&lowered.ptx, target);
        assert!(
            ptx.contains("\tsetmaxnreg.inc.sync.aligned.u32 240;\n"),
            "{ptx}"
        );
        assert!(
            ptx.contains("\tsetmaxnreg.dec.sync.aligned.u32 24;\n"),
            "{ptx}"
        );
        let report = ktune_build::ptxas::assemble(&tools.ptxas, &ptx, target)
            .unwrap_or_else(|e| panic!("{}: {e}", schedule.to_json()));
        assert_eq!(report.registers, 168, "{}", report.log);
        assert!(!report.log.contains("setmaxnreg"), "{}", report.log);
        assert!(!report.spills(), "{}", report.log);
        let instructions = machine_code(&tools, &lowered, target);
        assert_eq!(
            sass::Reallocation::of(&instructions),
            Some(sass::Reallocation {
                lowered_to: Some(24),
                raised_to: Some(240)
            }),
            "{}",
            schedule.to_json()
        );
        // Every product is in the main loop, which the waits' retries,
        // moved past the function's end by ptxas, do not hide.
        let main = sass::main_loop(&instructions).expect("a main loop");
        let hgmma = instructions[main]
            .iter()
            .filter(|i| i.opcode.name == "HGMMA")
            .count();
        assert_eq!(
            hgmma as u32,
            4 * (tiles.warp_m / 64),
            "{}",
            schedule.to_json()
        );
    }
    // Four consumers of 32 accumulators: 640 threads get 96 registers at
    // launch, and the consumers take 112.
    let four = MmaTiles {
        block_n: 128,
        warp_n: 64,
        ..base
    };
    let lowered = lower::lower(&kernel, &Schedule::Mma(four), target).expect("four consumers");
    let ptx = ktune_core::ptx::print(&lowered.ptx, target);
    assert!(
        ptx.contains("\tsetmaxnreg.inc.sync.aligned.u32 112;\n"),
        "{ptx}"
    );
    let report = ktune_build::ptxas::assemble(&tools.ptxas, &ptx, target).expect("assembles");
    assert_eq!(report.registers, 96, "{}", report.log);
    assert!(!report.log.contains("setmaxnreg"), "{}", report.log);
    assert!(!report.spills(), "{}", report.log);
    let narrow = MmaTiles {
        block_m: 256,
        block_n: 128,
        warp_n: 128,
        ..base
    };
    match lower::validate(&kernel, &Schedule::Mma(narrow), target) {
        Err(lower::LowerError::Invalid {
            constraint, reason, ..
        }) => {
            assert_eq!(constraint, lower::Constraint::Registers, "{reason}");
            assert!(reason.contains("at most 112 fit"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

/// The same producer points copying by tensor maps (`tma = 1`): the
/// producer's one issuing thread's copies are `UTMALDG`s, one for A's
/// tile and one for each 128-byte panel of B's, and no `cp.async`
/// (`LDGSTS`) is left; the consumers keep their 240 registers and
/// nothing spills, with edges along every dimension too (the tensor
/// memory accelerator zero-fills what lies outside the operands).
#[test]
fn a_tma_producer_copies_tiles_by_tensor_maps() {
    let tools = tools();
    let edged = bf16_matmul_bias_gelu_of(quote!(shape(M = 4000, N = 11000, K = 4000)));
    let target = SmVersion::Sm90;
    let base = MmaTiles {
        tma: 1,
        cluster_m: 1,
        ..fed_tiles()
    };
    let pong = MmaTiles {
        block_m: 128,
        block_n: 128,
        warp_m: 128,
        warp_n: 128,
        producer: 2,
        ..base
    };
    for tiles in [base, pong] {
        let schedule = Schedule::Mma(tiles);
        let lowered = lower::lower(&edged, &schedule, target)
            .unwrap_or_else(|e| panic!("{}: {e}", schedule.to_json()));
        let ptx = ktune_core::ptx::print(&lowered.ptx, target);
        assert!(
            ptx.contains("\tsetmaxnreg.inc.sync.aligned.u32 240;\n"),
            "{ptx}"
        );
        let report = ktune_build::ptxas::assemble(&tools.ptxas, &ptx, target)
            .unwrap_or_else(|e| panic!("{}: {e}", schedule.to_json()));
        assert_eq!(report.registers, 168, "{}", report.log);
        assert!(!report.spills(), "{}", report.log);
        let instructions = machine_code(&tools, &lowered, target);
        let count = |name: &str| {
            instructions
                .iter()
                .filter(|i| i.opcode.name == name)
                .count()
        };
        assert_eq!(
            count("UTMALDG") as u32,
            1 + tiles.block_n / 64,
            "{}",
            schedule.to_json()
        );
        assert_eq!(count("LDGSTS"), 0, "{}", schedule.to_json());
    }
}

/// Two blocks of a cluster sharing B's tiles (`cluster_m = 2`): the
/// issuing thread still copies A's tile and each of B's four 128-byte
/// panels, B's halves by multicast (`UTMALDG` with `MULTICAST`), the
/// consumers release slots in both blocks without a memory barrier, and
/// they keep their 240 registers without spilling, edges along every
/// dimension too.
#[test]
fn a_cluster_shares_b_s_tiles_by_multicast_copies() {
    let tools = tools();
    let edged = bf16_matmul_bias_gelu_of(quote!(shape(M = 4000, N = 11000, K = 4000)));
    let target = SmVersion::Sm90;
    let tiles = MmaTiles {
        tma: 1,
        cluster_m: 2,
        persistent: 0,
        ..fed_tiles()
    };
    let schedule = Schedule::Mma(tiles);
    let lowered = lower::lower(&edged, &schedule, target)
        .unwrap_or_else(|e| panic!("{}: {e}", schedule.to_json()));
    let ptx = ktune_core::ptx::print(&lowered.ptx, target);
    assert!(ptx.contains("\n.reqnctapercluster 2, 1, 1\n"), "{ptx}");
    let report = ktune_build::ptxas::assemble(&tools.ptxas, &ptx, target)
        .unwrap_or_else(|e| panic!("{}: {e}", schedule.to_json()));
    assert_eq!(report.registers, 168, "{}", report.log);
    assert!(!report.spills(), "{}", report.log);
    let instructions = machine_code(&tools, &lowered, target);
    let copies: Vec<_> = instructions
        .iter()
        .filter(|i| i.opcode.name == "UTMALDG")
        .collect();
    assert_eq!(copies.len(), 5, "{}", schedule.to_json());
    let multicast = copies
        .iter()
        .filter(|i| i.opcode.modifiers.iter().any(|m| m == "MULTICAST"))
        .count();
    assert_eq!(multicast, 4, "{copies:?}");
    // The consumers' arrivals at both blocks' barriers (`RED`: by the
    // cluster's window) come with no memory barrier: past the cluster's
    // barrier after the inits, the kernel has none.
    let after_init = instructions
        .iter()
        .position(|i| i.opcode.name == "UCGABAR_WAIT")
        .expect("a cluster barrier");
    let later = &instructions[after_init..];
    assert!(later.iter().all(|i| i.opcode.name != "MEMBAR"), "{later:?}");
    let remote = later
        .iter()
        .filter(|i| i.opcode.name == "SYNCS" && i.opcode.modifiers.iter().any(|m| m == "RED"))
        .count();
    assert!(remote >= 2, "{remote} arrivals by the cluster's window");
}

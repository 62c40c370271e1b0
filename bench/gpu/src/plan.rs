//! What runs for a case: the default (heuristic) schedule, the candidates
//! a build's bounded search would measure after it, and a seeded sample of
//! the rest of the space, each lowered to PTX text; and the
//! dry run, which shows all of it and assembles it with ptxas where one is
//! installed, without a GPU.

use std::io::{self, Write};
use std::path::Path;

use ktune_build::ptxas;
use ktune_build::tune::{BOUNDED_CANDIDATES, Task};
use ktune_core::ir::Kernel;
use ktune_core::lower::classify::OpClass;
use ktune_core::lower::{self, Launch, LowerError, Lowered};
use ktune_core::model::Estimate;
use ktune_core::schedule::{MmaTiles, Schedule};
use ktune_core::{SmVersion, model, ptx, space};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;

use crate::cases::{Case, ParseError};

/// A schedule lowered for a target: the PTX module's text and how to
/// launch its one entry.
#[derive(Debug, Clone)]
pub struct Variant {
    pub schedule: Schedule,
    pub ptx: String,
    pub entry: String,
    pub launch: Launch,
    /// The tensor maps the kernel takes after its pointers.
    pub maps: Vec<ptx::TensorMap>,
    /// Blocks per thread-block cluster (1: none).
    pub cluster: u32,
}

impl Variant {
    pub fn lower(
        kernel: &Kernel,
        schedule: &Schedule,
        target: SmVersion,
    ) -> Result<Self, LowerError> {
        let lowered = lower::lower(kernel, schedule, target)?;
        Ok(Variant::of(schedule, &lowered, target))
    }

    /// An already lowered kernel's variant.
    pub fn of(schedule: &Schedule, lowered: &Lowered, target: SmVersion) -> Self {
        Variant {
            schedule: schedule.clone(),
            ptx: ptx::print(&lowered.ptx, target),
            entry: lowered.ptx.entry.clone(),
            launch: lowered.launch,
            maps: lowered.ptx.tensor_maps.clone(),
            cluster: lowered.ptx.cluster_blocks.max(1),
        }
    }
}

/// A case's kernel at its benchmark shape and the schedules measured.
/// Warpgroup (`wgmma`) points measured beside a tensor-core default.
pub const WGMMA_ALTERNATIVES: usize = 3;

#[derive(Debug, Clone)]
pub struct Plan {
    pub case: &'static Case,
    pub kernel: Kernel,
    pub target: SmVersion,
    /// What ktune uses when nothing has been measured.
    pub default: Schedule,
    /// How many points the kernel's space has on the target.
    pub space_size: usize,
    /// What a build's bounded search measures besides the default, in its
    /// order: [`BOUNDED_CANDIDATES`] of the model's best points, spread
    /// over the knobs, less the default.
    pub bounded: Vec<Schedule>,
    /// On sm_90, the heuristic model's [`WGMMA_ALTERNATIVES`] favourite
    /// points on Hopper's warpgroup instructions (`wgmma = 1`) other than
    /// the default, and its favourite of those on the portable default's
    /// block tile; then the default with its fragment loads (`prefetch`)
    /// flipped, then its tensor-core layout and register knobs
    /// (`swizzle`, `min_blocks`) flipped, one and both, then with tiles
    /// twice as deep in either layout, where valid: an A/B of the choices
    /// the heuristic model cannot make. Where the default is Hopper's own
    /// (on warpgroups), the portable default newer GPUs get follows, with
    /// its flips.
    pub alternatives: Vec<Schedule>,
    /// `sample` points of the space other than the default, drawn with the
    /// seed and put in a seeded random order, the order they are screened
    /// in: when the time budget cuts screening short, what was screened is
    /// still a random subset, not the start of the space's order.
    pub sample: Vec<Schedule>,
    /// Every valid point of the space, and each with the heuristic model's
    /// estimate, fastest first: what a search of the space starts from
    /// ([`Plan::task`]).
    valid: Vec<Schedule>,
    ranked: Vec<(Schedule, Estimate)>,
}

/// Whether `schedule` has a producer warpgroup (`producer` 1 or 2), whose
/// memory barriers, should a phase never complete, end the kernel with a
/// trap.
pub fn has_producer(schedule: &Schedule) -> bool {
    matches!(schedule, Schedule::Mma(t) if t.producer > 0)
}

/// Whether `schedule`'s producer copies by tensor maps (`tma = 1`).
pub fn has_tma(schedule: &Schedule) -> bool {
    matches!(schedule, Schedule::Mma(t) if t.tma == 1)
}

/// Whether `schedule`'s blocks share B's tiles in clusters
/// (`cluster_m = 2`).
pub fn has_cluster(schedule: &Schedule) -> bool {
    matches!(schedule, Schedule::Mma(t) if t.cluster_m > 1)
}

/// The schedules a run leaves out, for a GPU on which the runtime's test
/// of their kind failed: should one trap, the process's CUDA context is
/// unusable for every run after.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeftOut {
    /// Those with a producer warpgroup (`--without-producer`).
    pub producer: bool,
    /// Those whose producer copies by tensor maps (`--without-tma`).
    pub tma: bool,
    /// Those whose blocks share B's tiles in clusters
    /// (`--without-cluster`).
    pub cluster: bool,
}

impl LeftOut {
    /// Why `schedule` is left out, if it is.
    pub fn reason(self, schedule: &Schedule) -> Option<&'static str> {
        if self.producer && has_producer(schedule) {
            Some("it has a producer warpgroup (--without-producer)")
        } else if self.tma && has_tma(schedule) {
            Some("its producer copies by tensor maps (--without-tma)")
        } else if self.cluster && has_cluster(schedule) {
            Some("its blocks share B's tiles in clusters (--without-cluster)")
        } else {
            None
        }
    }
}

impl Plan {
    pub fn new(
        case: &'static Case,
        target: SmVersion,
        sample: usize,
        seed: u64,
    ) -> Result<Plan, ParseError> {
        let kernel = case.kernel()?;
        let default = lower::heuristic(&kernel, target);
        let valid = space::candidates(&kernel, target);
        let ranked = model::rank(&kernel, target, &valid);
        let bounded = Task::surveyed(&kernel, case.source, target, &[], &valid, &ranked)
            .bounded_candidates(BOUNDED_CANDIDATES);
        // On sm_90 the model's favourite warpgroup (`wgmma`) points first,
        // then its favourite on the portable default's block tile (the
        // same tile on the other instruction).
        let portable = lower::portable_heuristic(&kernel, target);
        let on_warpgroups = |s: &Schedule| matches!(s, Schedule::Mma(t) if t.wgmma == 1);
        let mut warpgroup: Vec<Schedule> = ranked
            .iter()
            .filter(|(s, _)| on_warpgroups(s) && *s != default)
            .take(WGMMA_ALTERNATIVES)
            .map(|(s, _)| s.clone())
            .collect();
        if let Schedule::Mma(d) = portable
            && let Some((same_tile, _)) = ranked.iter().find(|(s, _)| {
                on_warpgroups(s)
                    && *s != default
                    && matches!(s, Schedule::Mma(t) if (t.block_m, t.block_n) == (d.block_m, d.block_n))
            })
            && !warpgroup.contains(same_tile)
        {
            warpgroup.push(same_tile.clone());
        }
        // Then the default's own flips; where the default is Hopper's own,
        // the portable default newer GPUs get and its flips.
        let row_length = match lower::Lowering::new(&kernel, target).class() {
            OpClass::Rows(rows) => rows.length(&kernel),
            _ => 0,
        };
        let flips = alternatives(&default, row_length);
        let portable_flips = (portable != default)
            .then(|| std::iter::once(portable.clone()).chain(alternatives(&portable, row_length)))
            .into_iter()
            .flatten();
        let mut alternatives: Vec<Schedule> = Vec::new();
        for s in warpgroup.into_iter().chain(flips).chain(portable_flips) {
            if s != default && valid.contains(&s) && !alternatives.contains(&s) {
                alternatives.push(s);
            }
        }
        let others: Vec<Schedule> = valid.iter().filter(|p| **p != default).cloned().collect();
        let mut sample = space::sample(&others, sample, seed);
        sample.shuffle(&mut SmallRng::seed_from_u64(seed));
        Ok(Plan {
            case,
            target,
            default,
            space_size: valid.len(),
            bounded,
            alternatives,
            sample,
            kernel,
            valid,
            ranked,
        })
    }

    /// Leaves the schedules `left_out` names out of the alternatives, the
    /// bounded search's candidates and the sample.
    pub fn leave_out(&mut self, left_out: LeftOut) {
        for schedules in [&mut self.alternatives, &mut self.bounded, &mut self.sample] {
            schedules.retain(|s| left_out.reason(s).is_none());
        }
    }

    /// The search of the case's space a build would run on this target
    /// (`max-autotune`'s with [`Method::Evolutionary`](ktune_build::tune::Method)).
    pub fn task(&self) -> Task<'_> {
        Task::surveyed(
            &self.kernel,
            self.case.source,
            self.target,
            &[],
            &self.valid,
            &self.ranked,
        )
    }
}

/// The longest rows whose alternatives leave clusters out: 16 values a
/// thread of a block of 1,024. Shorter rows (the benchmark's 4096-wide
/// ones: 4 values a thread) gain nothing from spreading over blocks but
/// the exchanges' cost, and their 54 cluster points took screening time
/// the long rows' need.
const CLUSTER_ROWS_FROM: u32 = 16 * 1024;

/// For a tensor-core `default`: it with `prefetch` flipped between 0 and
/// 1, then with `swizzle`, `min_blocks` or both flipped, then twice as
/// deep (`block_k`, up to 64) in either layout: whole 128-byte rows of
/// 16-bit `k`-contiguous operands per copy; then with its last partial
/// wave split 2 and 4 ways, and with `persistent` flipped; for warpgroups,
/// with a producer warpgroup, and in ping-pong (see below), each copying
/// by `cp.async` and by tensor maps (`tma`), the latter also in clusters
/// of two blocks sharing B's tiles (`cluster_m = 2`). For a rows `default`: its row read once per pass, with two
/// reductions in one pass where they pair (`online = 1`) or not, or kept
/// in shared memory (`cache = 2`), at its own threads per row and, one row
/// a block, at a block's most (1024) and half of it (512: the fastest of
/// softmax's rows of 50257 kept in shared memory on the H200, 2026-12-04),
/// each at its vector width, one value at a time and four (a peeled row
/// read 4 values at a time against one value at a time), other than
/// itself; then the row
/// spread over a cluster of 2, 4 or 8 blocks (sm_90) of 1024, 512 or 256
/// threads each, read once in one pass (`online = 1`) or kept in
/// registers (`cache = 1`: read once in all, where a block's slice fits)
/// or in shared memory, each block keeping its share: for rows of
/// `row_length` above [`CLUSTER_ROWS_FROM`], which one block holds only
/// with many values a thread. None for others. The caller keeps the
/// valid ones.
fn alternatives(default: &Schedule, row_length: u32) -> Vec<Schedule> {
    if let Schedule::Rows {
        threads_per_row,
        rows_per_block,
        vector,
        tree,
        ..
    } = *default
    {
        let shapes = [(threads_per_row, rows_per_block), (1024, 1), (512, 1)];
        let variants = [(0, 0), (0, 1), (2, 0)];
        let clusters: &[u32] = if row_length > CLUSTER_ROWS_FROM {
            &[2, 4, 8]
        } else {
            &[]
        };
        let clustered = clusters.iter().flat_map(|&cluster| {
            [1024, 512, 256].into_iter().flat_map(move |threads| {
                [(0, 1), (1, 0), (2, 0)].map(|variant| (threads, 1, variant, cluster))
            })
        });
        let points = shapes
            .into_iter()
            .flat_map(|shape| variants.map(|variant| (shape.0, shape.1, variant, 1)))
            .chain(clustered);
        let mut out: Vec<Schedule> = Vec::new();
        for (threads_per_row, rows_per_block, (cache, online), cluster) in points {
            for vector in [vector, 1, 4] {
                let s = Schedule::Rows {
                    threads_per_row,
                    rows_per_block,
                    vector,
                    cache,
                    tree,
                    online,
                    cluster,
                };
                if s != *default && !out.contains(&s) {
                    out.push(s);
                }
            }
        }
        return out;
    }
    let Schedule::Mma(t) = *default else {
        return Vec::new();
    };
    let flip = |v: u32| u32::from(v == 0);
    let prefetch = MmaTiles {
        prefetch: flip(t.prefetch),
        ..t
    };
    let flips = [
        (flip(t.swizzle), t.min_blocks),
        (t.swizzle, flip(t.min_blocks)),
        (flip(t.swizzle), flip(t.min_blocks)),
    ]
    .map(|(swizzle, min_blocks)| MmaTiles {
        swizzle,
        min_blocks,
        ..t
    });
    let deeper = (t.block_k < 64)
        .then(|| {
            [t.swizzle, flip(t.swizzle)].map(|swizzle| MmaTiles {
                block_k: 2 * t.block_k,
                swizzle,
                ..t
            })
        })
        .into_iter()
        .flatten();
    // The last wave split, where the grid leaves one to split.
    let tails = [2, 4].map(|tail_split| MmaTiles { tail_split, ..t });
    // Blocks looping over tiles, or a block per tile, for warpgroups.
    let persistent = MmaTiles {
        persistent: flip(t.persistent),
        ..t
    };
    // For warpgroups, a producer warpgroup: beside the default's tiles, a
    // block per tile or looping over tiles; and on the two shapes of two
    // warpgroups of 128 accumulators that the producer's registers make
    // room for (128 × 256 as 64 × 256 each, 256 × 128 as 128 × 128),
    // 64 deep over four slots, looping over tiles.
    let fed = |t: MmaTiles| MmaTiles {
        producer: 1,
        min_blocks: 1,
        ..t
    };
    let wide =
        [(128, 256, 64, 256), (256, 128, 128, 128)].map(|(block_m, block_n, warp_m, warp_n)| {
            fed(MmaTiles {
                block_m,
                block_n,
                block_k: 64,
                warp_m,
                warp_n,
                stages: 4,
                persistent: 1,
                ..t
            })
        });
    // And ping-pong on the same warpgroups: two sets of one 64 × 256 or
    // 128 × 128 warpgroup taking tiles in turn, one's epilogue beside the
    // other's products.
    let pong = wide.map(|t| MmaTiles {
        block_m: t.warp_m,
        producer: 2,
        ..t
    });
    // Each producer copying by its threads' `cp.async`s, then by one
    // thread's tensor-map copies, and those in clusters of two blocks
    // sharing B's tiles.
    let producers = (t.wgmma == 1)
        .then(|| {
            [fed(t), fed(persistent)]
                .into_iter()
                .chain(wide)
                .chain(pong)
                .flat_map(|p| {
                    let by_map = MmaTiles { tma: 1, ..p };
                    let shared = MmaTiles {
                        cluster_m: 2,
                        ..by_map
                    };
                    [p, by_map, shared]
                })
        })
        .into_iter()
        .flatten();
    let mut out: Vec<Schedule> = Vec::new();
    for s in std::iter::once(prefetch)
        .chain(flips)
        .chain(deeper)
        .chain(tails)
        .chain(std::iter::once(persistent))
        .chain(producers)
        .map(Schedule::Mma)
    {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// The SM version ktune generates for a device of compute capability
/// `(major, minor)`: its own, else the newest older one ktune knows (PTX
/// for an older target runs on newer GPUs).
pub fn target_for(major: u32, minor: u32) -> Option<SmVersion> {
    SmVersion::ALL
        .into_iter()
        .filter(|sm| sm.compute_capability() <= (major, minor))
        .max()
}

/// What a dry run found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DryRun {
    /// Schedules lowered (the default, its alternatives, the bounded
    /// search's candidates and the sample of every case).
    pub lowered: usize,
    /// Of those, how many ptxas assembled (0 without ptxas).
    pub assembled: usize,
    /// One line per schedule that did not lower or assemble.
    pub failures: Vec<String>,
}

/// Lists every case with its shape, default schedule, bounded search's
/// candidates and sample, lowering
/// each schedule and, with `ptxas`, assembling it; writes the listing to
/// `out`.
pub fn dry_run(
    cases: &[&'static Case],
    target: SmVersion,
    sample: usize,
    seed: u64,
    ptxas: Option<&Path>,
    out: &mut dyn Write,
) -> io::Result<DryRun> {
    let mut summary = DryRun::default();
    match ptxas {
        Some(path) => writeln!(out, "target {target}; assembling with {}", path.display())?,
        None => writeln!(
            out,
            "target {target}; no ptxas found (set KTUNE_PTXAS or run `cargo xtask setup`): lowering only"
        )?,
    }
    for case in cases {
        let plan = match Plan::new(case, target, sample, seed) {
            Ok(plan) => plan,
            Err(e) => {
                writeln!(out, "{}: {e}", case.name)?;
                summary.failures.push(e.to_string());
                continue;
            }
        };
        let kernel = &plan.kernel;
        writeln!(
            out,
            "\n{} [{}] {:?} {}: {} ({:.1} GFLOP, {:.1} MB compulsory), baseline {:?}",
            case.name,
            case.group,
            case.kind,
            kernel
                .inputs
                .first()
                .map_or(kernel.output.dtype, |t| t.dtype),
            case.shape_text(),
            kernel.flops() as f64 / 1e9,
            kernel.compulsory_bytes() as f64 / 1e6,
            case.kind.baseline(),
        )?;
        writeln!(
            out,
            "  space: {} points; bounded search: {}; alternatives: {}; sample: {} (seed {seed})",
            plan.space_size,
            plan.bounded.len(),
            plan.alternatives.len(),
            plan.sample.len()
        )?;
        let chosen = std::iter::once(("default", &plan.default))
            .chain(plan.alternatives.iter().map(|s| ("altern.", s)))
            .chain(plan.bounded.iter().map(|s| ("bounded", s)))
            .chain(plan.sample.iter().map(|s| ("sample", s)));
        for (role, schedule) in chosen {
            let line = check_schedule(kernel, schedule, target, ptxas, &mut summary);
            writeln!(out, "  {role:7} {} {line}", schedule.to_json())?;
        }
    }
    writeln!(
        out,
        "\ndry run: {} schedules lowered, {} assembled, {} failed",
        summary.lowered,
        summary.assembled,
        summary.failures.len()
    )?;
    for failure in &summary.failures {
        writeln!(out, "  FAILED {failure}")?;
    }
    Ok(summary)
}

/// Lowers and (with ptxas) assembles one schedule; returns the listing's
/// note for it and records the outcome in `summary`.
fn check_schedule(
    kernel: &Kernel,
    schedule: &Schedule,
    target: SmVersion,
    ptxas: Option<&Path>,
    summary: &mut DryRun,
) -> String {
    let variant = match Variant::lower(kernel, schedule, target) {
        Ok(v) => v,
        Err(e) => {
            summary.failures.push(e.to_string());
            return format!("does not lower: {e}");
        }
    };
    summary.lowered += 1;
    let Launch {
        grid,
        block,
        dynamic_shared_bytes,
        workspace_bytes,
        persistent,
        registers,
    } = variant.launch;
    let mut launch = format!(
        "grid {}×{}×{} block {}×{}×{} smem {dynamic_shared_bytes}",
        grid[0], grid[1], grid[2], block[0], block[1], block[2]
    );
    if workspace_bytes > 0 {
        launch.push_str(&format!(" workspace {workspace_bytes}"));
    }
    if persistent {
        launch.push_str(" persistent");
    }
    if registers > 0 {
        launch.push_str(&format!(" registers {registers}"));
    }
    let Some(ptxas) = ptxas else {
        return launch;
    };
    match ptxas::assemble(ptxas, &variant.ptx, target) {
        Ok(report) => {
            summary.assembled += 1;
            let spills = if report.spills() {
                format!(", SPILLS {}/{} B", report.spill_stores, report.spill_loads)
            } else {
                String::new()
            };
            format!("{launch}; ptxas: {} registers{spills}", report.registers)
        }
        Err(e) => {
            let first = e.to_string().lines().next().unwrap_or_default().to_owned();
            summary
                .failures
                .push(format!("{} {}: {first}", kernel.name, schedule.to_json()));
            format!("{launch}; ptxas FAILED: {first}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_fall_back_to_the_newest_older_one() {
        assert_eq!(target_for(9, 0), Some(SmVersion::Sm90));
        assert_eq!(target_for(10, 0), Some(SmVersion::Sm90));
        assert_eq!(target_for(8, 7), Some(SmVersion::Sm86));
        assert_eq!(target_for(7, 5), None);
    }

    fn case(name: &str) -> &'static crate::cases::Case {
        crate::cases::select(name).expect("a case")[0]
    }

    /// The fused case's plan measures producer points among the default's
    /// alternatives and the bounded search's candidates (the sample may
    /// draw some too), some copying by tensor maps, some of those in
    /// clusters; `--without-tma` leaves the tensor-map ones out,
    /// `--without-cluster` the clustered ones, `--without-producer` every
    /// producer point, and each keeps the rest.
    #[test]
    fn producer_points_can_be_left_out() {
        let plan =
            Plan::new(case("matmul_bias_gelu_bf16"), SmVersion::Sm90, 64, 1).expect("a plan");
        // Of the alternatives, the bounded search's candidates and the
        // sample, how many `pick` takes.
        let count = |plan: &Plan, pick: fn(&Schedule) -> bool| {
            [&plan.alternatives, &plan.bounded, &plan.sample]
                .map(|list| list.iter().filter(|s| pick(s)).count())
        };
        let [alternatives, bounded, _] = count(&plan, has_producer);
        assert!(
            alternatives >= 3 && bounded >= 1,
            "{:?}",
            count(&plan, has_producer)
        );
        assert!(count(&plan, has_tma)[0] >= 3, "{:?}", count(&plan, has_tma));
        let shared = count(&plan, has_cluster);
        assert!(shared[0] >= 1, "{shared:?}");
        // Leaving out what `pick` takes leaves none of it, and all else.
        let leave_out = |left_out: LeftOut, pick: fn(&Schedule) -> bool| {
            let mut rest = plan.clone();
            rest.leave_out(left_out);
            assert_eq!(count(&rest, pick), [0, 0, 0]);
            let (before, picked, after) = (
                count(&plan, |_| true),
                count(&plan, pick),
                count(&rest, |_| true),
            );
            for i in 0..3 {
                assert_eq!(after[i], before[i] - picked[i]);
            }
            rest
        };
        let tma = LeftOut {
            tma: true,
            ..LeftOut::default()
        };
        leave_out(tma, has_tma);
        let clusters = LeftOut {
            cluster: true,
            ..LeftOut::default()
        };
        leave_out(clusters, has_cluster);
        let producers = LeftOut {
            producer: true,
            ..LeftOut::default()
        };
        let plan = leave_out(producers, has_producer);
        assert!(!has_producer(&plan.default));
    }

    #[test]
    fn the_defaults_alternatives_try_warpgroups_flip_the_loads_the_layout_and_the_register_hint_and_go_deeper()
     {
        let plan = Plan::new(case("bf16_gemm_4096"), SmVersion::Sm90, 0, 1).expect("a plan");
        let Schedule::Mma(default) = plan.default else {
            panic!("a tensor-core default: {:?}", plan.default)
        };
        assert_eq!(default.wgmma, 1, "Hopper's default is on warpgroups");
        let portable = lower::portable_heuristic(&plan.kernel, SmVersion::Sm90);
        let Schedule::Mma(portable) = portable else {
            panic!("a tensor-core portable default: {portable:?}")
        };
        assert_eq!(portable.wgmma, 0);
        // The model's favourite warpgroup points come first, one of them
        // on the portable default's block tile.
        let warpgroups = plan
            .alternatives
            .iter()
            .take_while(|s| matches!(s, Schedule::Mma(t) if t.wgmma == 1))
            .count();
        let (warpgroup, rest) = plan.alternatives.split_at(warpgroups);
        assert!(warpgroups > WGMMA_ALTERNATIVES, "{warpgroup:?}");
        assert!(!warpgroup.contains(&plan.default), "{warpgroup:?}");
        assert!(
            warpgroup.iter().any(|s| matches!(s, Schedule::Mma(t)
                if (t.block_m, t.block_n) == (portable.block_m, portable.block_n))),
            "{warpgroup:?}"
        );
        // Then the portable default and its flips.
        assert_eq!(rest[0], Schedule::Mma(portable));
        let knobs: Vec<(u32, u32, u32, u32)> = rest[1..]
            .iter()
            .map(|s| match *s {
                Schedule::Mma(t) => {
                    let tiles = |t: MmaTiles| MmaTiles {
                        block_k: 0,
                        swizzle: 0,
                        min_blocks: 0,
                        prefetch: 0,
                        ..t
                    };
                    assert_eq!(tiles(t), tiles(portable));
                    (t.block_k, t.swizzle, t.min_blocks, t.prefetch)
                }
                _ => panic!("{s:?}"),
            })
            .collect();
        let (k, s, m, p) = (
            portable.block_k,
            portable.swizzle,
            portable.min_blocks,
            portable.prefetch,
        );
        assert_eq!(
            knobs,
            [
                (k, s, m, 1 - p),
                (k, 1 - s, m, p),
                (k, s, 1 - m, p),
                (k, 1 - s, 1 - m, p),
                (2 * k, s, m, p),
                (2 * k, 1 - s, m, p)
            ]
        );
        // tf32 tiles have one layout, and twice as deep their 32 copies
        // a thread's pointers would take more registers than it has: only
        // the loads and the hint flip.
        let tf32 = case("sgemm_tf32_4096");
        let plan = Plan::new(tf32, SmVersion::Sm90, 0, 1).expect("a plan");
        assert_eq!(plan.alternatives.len(), 2, "{:?}", plan.alternatives);
        // SIMT defaults have none.
        let sgemm = case("sgemm_4096");
        let plan = Plan::new(sgemm, SmVersion::Sm90, 0, 1).expect("a plan");
        assert!(plan.alternatives.is_empty());
    }

    #[test]
    fn a_rows_defaults_alternatives_read_keep_or_pair_at_its_width_and_the_widest() {
        let knobs = |s: &Schedule| match *s {
            Schedule::Rows {
                threads_per_row,
                vector,
                cache,
                online,
                ..
            } => (threads_per_row, vector, cache, online),
            _ => panic!("{s:?}"),
        };
        // The alternatives in one block, and those over a cluster, with
        // its blocks.
        let split = |alternatives: &[Schedule]| {
            let (single, spread): (Vec<&Schedule>, Vec<&Schedule>) = alternatives
                .iter()
                .partition(|s| matches!(s, Schedule::Rows { cluster: 1, .. }));
            let clusters = spread.iter().map(|s| match s {
                Schedule::Rows { cluster, .. } => *cluster,
                _ => panic!("{s:?}"),
            });
            let single: Vec<_> = single.into_iter().map(knobs).collect();
            let spread: Vec<_> = spread.iter().map(|s| knobs(s)).zip(clusters).collect();
            (single, spread)
        };
        // Layernorm over rows of 50257: by default 1024 threads a row, the
        // row kept in shared memory, one value at a time (a kept row is
        // not peeled); read once per pass, it is peeled for 4-wide loads.
        let plan = Plan::new(case("layernorm_4096x50257"), SmVersion::Sm90, 0, 1).expect("a plan");
        assert_eq!(knobs(&plan.default), (1024, 1, 2, 0));
        let (alternatives, clustered) = split(&plan.alternatives);
        // Spread over 2, 4 or 8 blocks of a cluster: each in one pass,
        // 4 values at a time (peeled) or 1, kept in registers (not the 25
        // values a thread of 1024 threads over 2 blocks: with the row's
        // other work, 65 registers of 64) or kept in shared memory.
        let spread: Vec<_> = [2, 4, 8]
            .into_iter()
            .flat_map(|cluster| {
                [1024, 512, 256].into_iter().flat_map(move |threads| {
                    [
                        (threads, 1, 0, 1),
                        (threads, 4, 0, 1),
                        (threads, 1, 1, 0),
                        (threads, 1, 2, 0),
                    ]
                    .into_iter()
                    .filter(move |k| k.2 != 1 || (threads, cluster) != (1024, 2))
                    .map(move |k| (k, cluster))
                })
            })
            .collect();
        assert_eq!(clustered, spread);
        assert_eq!(
            alternatives,
            [
                (1024, 1, 0, 0),
                (1024, 4, 0, 0),
                (1024, 1, 0, 1),
                (1024, 4, 0, 1),
                (512, 1, 0, 0),
                (512, 4, 0, 0),
                (512, 1, 0, 1),
                (512, 4, 0, 1),
                (512, 1, 2, 0)
            ]
        );
        // Rows of 4096, 4 values a thread of one block: none over a
        // cluster.
        let plan = Plan::new(case("softmax_8192x4096"), SmVersion::Sm90, 0, 1).expect("a plan");
        let (alternatives, clustered) = split(&plan.alternatives);
        assert!(clustered.is_empty(), "{clustered:?}");
        assert!(alternatives.len() >= 6, "{alternatives:?}");
        // Rows of 128256 do not fit shared memory: no `cache = 2`; 4
        // divides them.
        let plan = Plan::new(case("softmax_4096x128256"), SmVersion::Sm90, 0, 1).expect("a plan");
        assert_eq!(knobs(&plan.default), (512, 4, 0, 1));
        let (alternatives, clustered) = split(&plan.alternatives);
        // Over a cluster of 4 blocks or 8, a block's slice of them does,
        // at each width.
        let kept: Vec<_> = clustered.iter().filter(|(k, _)| k.2 == 2).collect();
        assert_eq!(kept.len(), 2 * 3 * 2, "{kept:?}");
        assert!(kept.iter().all(|(_, cluster)| *cluster >= 4), "{kept:?}");
        assert_eq!(
            alternatives,
            [
                (512, 4, 0, 0),
                (512, 1, 0, 0),
                (512, 1, 0, 1),
                (1024, 4, 0, 0),
                (1024, 1, 0, 0),
                (1024, 4, 0, 1),
                (1024, 1, 0, 1)
            ]
        );
    }
}

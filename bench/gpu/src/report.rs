//! The results file (JSON) and the Markdown table of ratios.
//!
//! Ratios are speed ratios, `baseline time / ktune time`: above 1 ktune is
//! faster. For the row and elementwise kernels the baseline is a device-to-device copy of
//! the input's bytes, so the ratio is also the fraction of the measured
//! copy bandwidth the kernel reaches.

use std::fmt::Write as _;

use ktune_core::schedule::Schedule;
use serde::Serialize;

use crate::cases::{Baseline, Case, Kind};
use crate::check::Check;
use crate::probe::MemoryProbe;

/// Everything one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    pub tool: &'static str,
    pub ktune_version: &'static str,
    pub generator_version: u32,
    /// UTC, ISO 8601.
    pub date: String,
    pub gpu: GpuInfo,
    pub settings: Settings,
    /// Read bandwidth from L2 and from DRAM ([`crate::probe`]); absent when
    /// the probe failed.
    pub memory: Option<MemoryProbe>,
    pub cases: Vec<CaseResult>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GpuInfo {
    pub name: String,
    /// `major.minor`.
    pub compute_capability: String,
    /// The SM version ktune generated code for.
    pub target: String,
    pub sm_count: u32,
    pub l2_bytes: u64,
    pub memory_bytes: u64,
    /// The kernel driver's version (`/proc/driver/nvidia/version`), when
    /// readable.
    pub driver_version: Option<String>,
    /// The CUDA version the driver supports (`cuDriverGetVersion`).
    pub cuda_version: String,
    /// cuBLAS's version, when it was loaded.
    pub cublas_version: Option<String>,
}

/// How the run was configured (the command line, resolved).
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    pub sample: usize,
    /// Evaluations of `max-autotune`'s search per case (0: none).
    pub search: usize,
    pub seed: u64,
    pub quick: bool,
    /// Seconds of wall-clock time the run aimed to stay within.
    pub budget_s: f64,
    /// Timed runs per full measurement: at least this many ...
    pub min_reps: usize,
    /// ... and at most this many, fewer past `time_cap_ms` of runs.
    pub max_reps: usize,
    pub time_cap_ms: f64,
    /// Timed runs per sampled schedule when screening for the best.
    pub screen_reps: usize,
    /// Whether schedules with a producer warpgroup were left out
    /// (`--without-producer`).
    pub without_producer: bool,
    /// Whether schedules whose producer copies by tensor maps were left
    /// out (`--without-tma`).
    pub without_tma: bool,
    /// Whether schedules whose blocks share B's tiles in clusters were
    /// left out (`--without-cluster`).
    pub without_cluster: bool,
}

/// One case's measurements. The baseline and the schedules measured in
/// full (`default`, `tuned`, `best`, `alternative`, `searched`) are timed
/// side by side, in turns ([`crate::turns`]); screened schedules in turn
/// with the default.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    pub name: &'static str,
    pub group: &'static str,
    pub kind: Kind,
    pub dtype: String,
    pub shape: Vec<(&'static str, u32)>,
    /// Floating-point operations of one run (see `ir::Kernel::flops`).
    pub flops: u64,
    /// Bytes one run must read and write at least.
    pub bytes: u64,
    /// Copies of the inputs the final, side-by-side measurement rotates
    /// through, so that the inputs of consecutive runs together exceed
    /// twice the L2 cache (screenings rotate through the first of them, an
    /// odd number: [`crate::turns::input_sets`]).
    pub input_copies: usize,
    pub default: Option<Measured>,
    /// What a build's bounded search on this GPU keeps: the faster of the
    /// default and the fastest correct of its candidates (`bounded`),
    /// both measured in full.
    pub tuned: Option<Measured>,
    /// The fastest correct schedule of the sample, re-measured in full.
    pub best: Option<Measured>,
    /// The fastest correct of the default's alternatives, re-measured in
    /// full.
    pub alternative: Option<Measured>,
    /// What `max-autotune`'s search (the evolutionary search with its cost
    /// model) found in `search`'s evaluations, re-measured in full.
    pub searched: Option<Measured>,
    pub baseline_kind: Baseline,
    pub baseline: Option<Measured>,
    /// What became of the default's alternatives (its fragment loads,
    /// layout and register knobs flipped, its tiles deeper), screened like
    /// the bounded search's candidates.
    pub alternatives: Sampled,
    /// What became of the bounded search's candidates.
    pub bounded: Sampled,
    pub sampled: Sampled,
    /// The search's evaluations, in the order it made them.
    pub search: Sampled,
    pub ratios: Ratios,
    /// What went wrong (driver errors, a missing baseline); the case's other
    /// numbers stand.
    pub errors: Vec<String>,
}

impl CaseResult {
    /// `case`'s result before anything is measured.
    pub fn new(case: &'static Case) -> CaseResult {
        CaseResult {
            name: case.name,
            group: case.group,
            kind: case.kind,
            dtype: String::new(),
            shape: case.shape.to_vec(),
            flops: 0,
            bytes: 0,
            input_copies: 0,
            default: None,
            tuned: None,
            best: None,
            alternative: None,
            searched: None,
            baseline_kind: case.kind.baseline(),
            baseline: None,
            alternatives: Sampled::default(),
            bounded: Sampled::default(),
            sampled: Sampled::default(),
            search: Sampled::default(),
            ratios: Ratios::default(),
            errors: Vec::new(),
        }
    }
}

/// One measured thing: a ktune schedule or a baseline.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    /// The schedule, for ktune kernels.
    pub schedule: Option<Schedule>,
    pub times: Times,
    pub tflops: f64,
    /// Compulsory bytes over time (for a copy: bytes read plus written).
    pub gbps: f64,
    pub check: Option<Check>,
}

/// Times of the timed runs, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Times {
    pub median_ms: f64,
    pub p10_ms: f64,
    pub p90_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub reps: usize,
}

impl Times {
    /// Summarizes run times (nearest-rank percentiles); `None` when empty.
    pub fn from_ms(ms: &[f32]) -> Option<Times> {
        let mut sorted: Vec<f64> = ms.iter().map(|t| f64::from(*t)).collect();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let at = |q: f64| sorted[((q * (n - 1) as f64).round() as usize).min(n - 1)];
        let median = if n == 0 {
            return None;
        } else if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Some(Times {
            median_ms: median,
            p10_ms: at(0.1),
            p90_ms: at(0.9),
            min_ms: sorted[0],
            max_ms: sorted[n - 1],
            reps: n,
        })
    }
}

/// What became of a list of schedules screened (the sample, the bounded
/// search's candidates, the search's evaluations).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Sampled {
    /// Schedules in the list.
    pub planned: usize,
    /// Screened: run, checked and timed briefly.
    pub screened: Vec<Screened>,
    /// Left unmeasured because the case's share of the time budget ran out.
    pub skipped_for_budget: usize,
}

/// One screening's times: the schedule's median, and the default's over
/// its runs in turn with the schedule's (none where the default failed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Screen {
    pub median_ms: f64,
    pub default_ms: Option<f64>,
    /// The blocks a persistent schedule was launched with.
    pub blocks: Option<u32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Screened {
    pub schedule: Schedule,
    /// Median of the screening runs, as timed; absent when it failed. (A
    /// list's fastest, and the search's comparisons, scale it by the
    /// default's drift: [`crate::turns::normalized`].)
    pub median_ms: Option<f64>,
    /// The default schedule's median over runs timed in turn with the
    /// screening runs ([`crate::turns`]); absent where the default failed,
    /// and in files written before 2026-12-06.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_ms: Option<f64>,
    /// Why it was excluded (wrong output, failed to load or launch).
    pub excluded: Option<String>,
    /// The blocks a persistent schedule (`persistent = 1`) was launched
    /// with: the GPU's SMs times the blocks the driver says one holds, at
    /// most the tiles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocks: Option<u32>,
}

impl Screened {
    /// The record of `schedule`'s screening, or of why it failed.
    pub fn new(schedule: Schedule, screen: &Result<Screen, String>) -> Screened {
        Screened {
            schedule,
            median_ms: screen.as_ref().ok().map(|s| s.median_ms),
            default_ms: screen.as_ref().ok().and_then(|s| s.default_ms),
            excluded: screen.as_ref().err().cloned(),
            blocks: screen.as_ref().ok().and_then(|s| s.blocks),
        }
    }
}

/// Speed ratios against the baseline (`baseline / ktune`, median times).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Ratios {
    pub default_vs_baseline: Option<f64>,
    pub tuned_vs_baseline: Option<f64>,
    pub best_vs_baseline: Option<f64>,
    pub alternative_vs_baseline: Option<f64>,
    pub searched_vs_baseline: Option<f64>,
}

impl Ratios {
    /// The ratios of a case's results.
    pub fn of(case: &CaseResult) -> Ratios {
        let ratio = |m: &Option<Measured>| {
            let base = case.baseline.as_ref()?.times.median_ms;
            Some(base / m.as_ref()?.times.median_ms)
        };
        Ratios {
            default_vs_baseline: ratio(&case.default),
            tuned_vs_baseline: ratio(&case.tuned),
            best_vs_baseline: ratio(&case.best),
            alternative_vs_baseline: ratio(&case.alternative),
            searched_vs_baseline: ratio(&case.searched),
        }
    }
}

/// The Markdown table printed at the end of a run.
pub fn markdown(results: &Results) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "ktune-bench on {} (sm {}), {}; ratios are baseline time / ktune time (> 1: ktune faster)\n",
        results.gpu.name, results.gpu.compute_capability, results.date
    );
    if let Some(m) = &results.memory {
        let _ = writeln!(
            out,
            "Reads: {:.0} GB/s from L2 ({} MB read 64 times), {:.0} GB/s from DRAM ({} MB read once), {:.2}× (the heuristic model assumes {:.1}×)\n",
            m.l2_read_bytes_per_s / 1e9,
            m.l2_buffer_bytes >> 20,
            m.dram_read_bytes_per_s / 1e9,
            m.dram_buffer_bytes >> 20,
            m.l2_over_dram(),
            ktune_core::model::L2_OVER_DRAM,
        );
    }
    out.push_str("| case | dtype | shape | baseline | baseline ms | default ms | bounded ms | best ms | alternative ms | searched ms | default/base | bounded/base | best/base | alternative/base | searched/base | rate (fastest) | notes |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for case in &results.cases {
        let ms = |m: &Option<Measured>| {
            m.as_ref()
                .map_or("—".to_owned(), |m| format!("{:.3}", m.times.median_ms))
        };
        let ratio = |r: Option<f64>| r.map_or("—".to_owned(), |r| format!("{r:.2}"));
        let rate = [
            &case.default,
            &case.tuned,
            &case.best,
            &case.alternative,
            &case.searched,
        ]
        .into_iter()
        .flatten()
        .min_by(|a, b| a.times.median_ms.total_cmp(&b.times.median_ms))
        .map_or("—".to_owned(), |m| match case.kind {
            Kind::Softmax | Kind::LayerNorm | Kind::Elementwise => {
                format!("{:.0} GB/s", m.gbps)
            }
            Kind::Matmul | Kind::MatmulBiasGelu | Kind::MatmulEpilogue => {
                format!("{:.1} TFLOP/s", m.tflops)
            }
        });
        let mut notes = Vec::new();
        for (list, name) in [
            (&case.alternatives, "alternatives"),
            (&case.bounded, "bounded"),
            (&case.sampled, "sampled"),
            (&case.search, "search"),
        ] {
            let wrong = list
                .screened
                .iter()
                .filter(|s| s.excluded.is_some())
                .count();
            if wrong > 0 {
                notes.push(format!("{wrong} {name} excluded"));
            }
            if list.skipped_for_budget > 0 {
                notes.push(format!(
                    "{} {name} skipped (budget)",
                    list.skipped_for_budget
                ));
            }
        }
        if !case.errors.is_empty() {
            notes.push(format!("{} errors", case.errors.len()));
        }
        let shape: Vec<String> = case.shape.iter().map(|(_, n)| n.to_string()).collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            case.name,
            case.dtype,
            shape.join("×"),
            baseline_name(case.baseline_kind),
            ms(&case.baseline),
            ms(&case.default),
            ms(&case.tuned),
            ms(&case.best),
            ms(&case.alternative),
            ms(&case.searched),
            ratio(case.ratios.default_vs_baseline),
            ratio(case.ratios.tuned_vs_baseline),
            ratio(case.ratios.best_vs_baseline),
            ratio(case.ratios.alternative_vs_baseline),
            ratio(case.ratios.searched_vs_baseline),
            rate,
            notes.join("; "),
        );
    }
    alternatives_table(&mut out, results);
    out
}

/// The default's screened alternatives beside the default, where any
/// was screened: `default ms / alternative ms` (> 1: the alternative is
/// faster), the default's time from its runs in turn with the
/// alternative's where it has them, else from its full measurement.
fn alternatives_table(out: &mut String, results: &Results) {
    let rows: Vec<(&CaseResult, &Screened, f64)> = results
        .cases
        .iter()
        .filter_map(|case| Some((case, case.default.as_ref()?.times.median_ms)))
        .flat_map(|(case, default_ms)| {
            case.alternatives
                .screened
                .iter()
                .map(move |s| (case, s, s.default_ms.unwrap_or(default_ms)))
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    out.push_str(
        "\nThe default's alternatives (screened, in turn with the default), as default time / alternative time (> 1: the alternative is faster):\n\n",
    );
    out.push_str(
        "| case | alternative | ms | default ms | default/alternative |\n|---|---|---|---|---|\n",
    );
    for (case, screened, default_ms) in rows {
        let (ms, ratio) = match screened.median_ms {
            Some(ms) => (format!("{ms:.3}"), format!("{:.2}", default_ms / ms)),
            None => (
                screened.excluded.clone().unwrap_or_default(),
                "—".to_owned(),
            ),
        };
        let blocks = screened
            .blocks
            .map_or(String::new(), |blocks| format!(" ({blocks} blocks)"));
        let _ = writeln!(
            out,
            "| {} | {}{blocks} | {ms} | {default_ms:.3} | {ratio} |",
            case.name,
            screened.schedule.to_json()
        );
    }
}

/// `unix_secs` as an ISO 8601 UTC date and time (`2026-11-29T12:00:00Z`).
pub fn iso_date(unix_secs: u64) -> String {
    let days = (unix_secs / 86_400) as i64;
    let secs = unix_secs % 86_400;
    // Days to the proleptic Gregorian calendar (H. Hinnant's civil_from_days).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

fn baseline_name(baseline: Baseline) -> &'static str {
    match baseline {
        Baseline::Cublas => "cuBLAS",
        Baseline::CublasThenBiasGelu => "cuBLAS + bias-gelu",
        Baseline::CublasProduct => "cuBLAS product",
        Baseline::Copy => "copy",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results() -> Results {
        Results {
            tool: "ktune-bench",
            ktune_version: "0",
            generator_version: 1,
            date: iso_date(0),
            gpu: GpuInfo {
                name: "GPU".into(),
                compute_capability: "9.0".into(),
                target: "sm_90".into(),
                sm_count: 132,
                l2_bytes: 60 << 20,
                memory_bytes: 1 << 30,
                driver_version: None,
                cuda_version: "13.0".into(),
                cublas_version: None,
            },
            settings: Settings {
                sample: 0,
                search: 0,
                seed: 1,
                quick: true,
                budget_s: 1.0,
                min_reps: 1,
                max_reps: 1,
                time_cap_ms: 1.0,
                screen_reps: 1,
                without_producer: false,
                without_tma: false,
                without_cluster: false,
            },
            memory: None,
            cases: Vec::new(),
        }
    }

    fn measured(ms: f32) -> Measured {
        Measured {
            schedule: None,
            times: Times::from_ms(&[ms]).expect("one"),
            tflops: 0.0,
            gbps: 0.0,
            check: None,
        }
    }

    #[test]
    fn the_table_states_the_memory_probe_beside_the_models_assumption() {
        let mut results = results();
        assert!(!markdown(&results).contains("Reads:"));
        results.memory = Some(MemoryProbe {
            l2_read_bytes_per_s: 6.0e12,
            l2_buffer_bytes: 15 << 20,
            dram_read_bytes_per_s: 4.0e12,
            dram_buffer_bytes: 240 << 20,
        });
        let table = markdown(&results);
        assert!(
            table.contains(
                "Reads: 6000 GB/s from L2 (15 MB read 64 times), 4000 GB/s from DRAM (240 MB read once), 1.50× (the heuristic model assumes 3.0×)"
            ),
            "{table}"
        );
    }

    #[test]
    fn percentiles_and_medians() {
        let t = Times::from_ms(&[5.0, 1.0, 3.0, 2.0, 4.0]).expect("non-empty");
        assert_eq!(
            (t.median_ms, t.min_ms, t.max_ms, t.reps),
            (3.0, 1.0, 5.0, 5)
        );
        assert_eq!((t.p10_ms, t.p90_ms), (1.0, 5.0));
        let even = Times::from_ms(&[1.0, 2.0, 3.0, 10.0]).expect("non-empty");
        assert_eq!(even.median_ms, 2.5);
        assert_eq!(Times::from_ms(&[]), None);
    }

    #[test]
    fn dates_are_iso_utc() {
        assert_eq!(iso_date(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso_date(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(iso_date(1_798_543_845), "2026-12-29T11:30:45Z");
    }

    #[test]
    fn the_defaults_alternatives_are_set_beside_the_default() {
        let mut results = results();
        let mut case = CaseResult::new(&crate::cases::CASES[0]);
        case.default = Some(measured(3.0));
        let swizzled = Schedule::from_json(
            r#"{"class":"mma","block_m":128,"block_n":128,"block_k":32,"warp_m":64,"warp_n":64,"stages":3,"swizzle":1}"#,
        )
        .expect("a schedule");
        case.alternatives.screened = vec![
            Screened {
                schedule: swizzled.clone(),
                median_ms: Some(2.0),
                default_ms: None,
                excluded: None,
                blocks: None,
            },
            Screened {
                schedule: swizzled.clone(),
                median_ms: Some(2.0),
                default_ms: Some(2.5),
                excluded: None,
                blocks: Some(132),
            },
            Screened {
                schedule: swizzled,
                median_ms: None,
                default_ms: None,
                excluded: Some("wrong output".to_owned()),
                blocks: None,
            },
        ];
        results.cases.push(case);
        let table = markdown(&results);
        // Without runs of the default beside it, against the default's full
        // measurement; with them, against those.
        assert!(
            table.contains(r#","stages":3,"swizzle":1} | 2.000 | 3.000 | 1.50 |"#),
            "{table}"
        );
        // A persistent schedule's blocks beside it.
        assert!(
            table.contains(r#","stages":3,"swizzle":1} (132 blocks) | 2.000 | 2.500 | 1.25 |"#),
            "{table}"
        );
        assert!(table.contains("| wrong output | 3.000 | — |"), "{table}");
        assert!(table.contains("1 alternatives excluded"), "{table}");
        results.cases[0].alternatives.screened.clear();
        assert!(!markdown(&results).contains("alternatives (screened)"));
    }

    #[test]
    fn ratios_are_baseline_over_ktune() {
        let mut case = CaseResult::new(&crate::cases::CASES[0]);
        case.default = Some(measured(4.0));
        case.tuned = Some(measured(1.0));
        case.baseline = Some(measured(2.0));
        let r = Ratios::of(&case);
        assert_eq!(r.default_vs_baseline, Some(0.5));
        assert_eq!(r.tuned_vs_baseline, Some(2.0));
        assert_eq!(r.best_vs_baseline, None);
        case.searched = Some(measured(0.5));
        assert_eq!(Ratios::of(&case).searched_vs_baseline, Some(4.0));
        case.alternative = Some(measured(8.0));
        assert_eq!(Ratios::of(&case).alternative_vs_baseline, Some(0.25));
        case.baseline = None;
        assert_eq!(Ratios::of(&case).default_vs_baseline, None);
    }
}

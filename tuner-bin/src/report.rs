//! `cargo ktune report`: the last `tune` run as one HTML page with SVG
//! plots (drawn with plotters), self-contained:
//!
//! - per kernel, the best time so far against trials, every measurement
//!   as a dot and the heuristic default as a line;
//! - the cost models against the measurements: the learned model's score
//!   when it chose a candidate, and the heuristic model's estimate, each
//!   with its rank correlation to the measured times (1: it orders the
//!   candidates exactly as the GPU does);
//! - the speed-up of each kernel's winner over its default, and, given the
//!   GPU benchmark's results, ktune against cuBLAS (or the copy bandwidth)
//!   per benchmark case.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use ktune_core::db::MeasuredOn;
use ktune_measure::stats::spearman;
use plotters::prelude::*;
use serde::Serialize;

use crate::CrateArgs;
use crate::tune::{History, KernelHistory, history_path, work_dir};

const WIDTH: u32 = 640;
const HEIGHT: u32 = 360;

/// A kernel's figures in the report.
#[derive(Debug, Serialize)]
struct KernelFigures {
    kernel: String,
    trials: usize,
    rejected: usize,
    default_us: Option<f64>,
    best_us: Option<f64>,
    speedup: Option<f64>,
    /// Trials until the best time was first within 5% of the final best.
    trials_to_within_5_percent: Option<usize>,
    /// Spearman's rank correlation of the learned model's scores with the
    /// measured times, over the candidates it chose.
    learned_model_correlation: Option<f64>,
    /// How many candidates that is.
    learned_model_points: usize,
    /// The same for the heuristic model's estimates, over every measured
    /// candidate.
    heuristic_model_correlation: Option<f64>,
    heuristic_model_points: usize,
}

/// One benchmark case against its baseline.
#[derive(Debug, Serialize)]
struct BenchFigures {
    case: String,
    baseline: String,
    /// Baseline time over ktune's time (above 1: ktune is faster).
    default_vs_baseline: Option<f64>,
    /// What a plain build's bounded search keeps.
    bounded_vs_baseline: Option<f64>,
    /// The best of the random sample of the space.
    best_vs_baseline: Option<f64>,
    /// What `max-autotune`'s search found (`ktune-bench --search`).
    searched_vs_baseline: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Figures {
    /// The run's crate, device and date.
    krate: String,
    gpu: String,
    measured_on: MeasuredOn,
    date: String,
    kernels: Vec<KernelFigures>,
    bench: Vec<BenchFigures>,
}

/// The options of `cargo ktune report`.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// The work folder `tune` wrote its history to (default: `ktune/` in
    /// the target directory).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// The page to write (default: `report.html` in the work folder).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The GPU benchmark's results (`ktune-bench` JSON) for speed-ups over
    /// cuBLAS.
    #[arg(long)]
    pub bench: Option<PathBuf>,
    /// Print the report's figures as JSON instead.
    #[arg(long)]
    pub json: bool,
}

pub fn report(args: &CrateArgs, options: &Options) -> Result<()> {
    let work = work_dir(args, options.work_dir.as_deref())?;
    let path = history_path(&work);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "no `cargo ktune tune` run recorded: cannot read {}",
            path.display()
        )
    })?;
    let history: History = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a tune run's history", path.display()))?;
    // The crates of a workspace share a target directory, and so its last
    // run: the report is of the crate it is asked in.
    if options.work_dir.is_none() {
        let asked = crate::load_crate(args)?.name;
        if history.krate != asked {
            bail!(
                "the last `cargo ktune tune` run in {} was of crate `{}`, not `{asked}`: tune `{asked}` first",
                work.display(),
                history.krate
            );
        }
    }
    let bench = match &options.bench {
        Some(p) => bench_figures(p)?,
        None => Vec::new(),
    };
    let figures = Figures {
        krate: history.krate.clone(),
        gpu: history.gpu.name.clone(),
        measured_on: history.measured_on,
        date: history.date.clone(),
        kernels: history.kernels.iter().map(kernel_figures).collect(),
        bench,
    };
    if options.json {
        println!("{}", serde_json::to_string_pretty(&figures)?);
        return Ok(());
    }
    let page = page(&history, &figures)?;
    let out = options
        .out
        .clone()
        .unwrap_or_else(|| work.join("report.html"));
    std::fs::write(&out, page).with_context(|| format!("cannot write {}", out.display()))?;
    println!("{}", out.display());
    Ok(())
}

fn kernel_figures(k: &KernelHistory) -> KernelFigures {
    let times: Vec<Option<f64>> = k
        .steps
        .iter()
        .map(|s| s.result.as_ref().ok().map(|t| t.median_us))
        .collect();
    // Against the best the search itself measured: the winner's recorded
    // time is its confirmation's, measured again after the search.
    let searched_best = times.iter().flatten().copied().reduce(f64::min);
    let trials_to_within_5_percent = searched_best.and_then(|best| {
        times
            .iter()
            .position(|t| t.is_some_and(|t| t <= best * 1.05))
            .map(|i| i + 1)
    });
    let pairs = |pick: &dyn Fn(&ktune_build::tune::Step) -> Option<f64>| -> Vec<(f64, f64)> {
        k.steps
            .iter()
            .filter_map(|s| Some((pick(s)?, s.result.as_ref().ok()?.median_us)))
            .collect()
    };
    KernelFigures {
        kernel: k.kernel.clone(),
        trials: k.steps.len(),
        rejected: times.iter().filter(|t| t.is_none()).count(),
        default_us: k.default_us,
        best_us: k.best_us,
        speedup: k.default_us.zip(k.best_us).map(|(d, b)| d / b),
        trials_to_within_5_percent,
        learned_model_correlation: spearman(&pairs(&|s| s.predicted)),
        learned_model_points: pairs(&|s| s.predicted).len(),
        heuristic_model_correlation: spearman(&pairs(&|s| s.estimate_us)),
        heuristic_model_points: pairs(&|s| s.estimate_us).len(),
    }
}

/// The GPU benchmark's cases, each against its baseline.
fn bench_figures(path: &Path) -> Result<Vec<BenchFigures>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let results: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let Some(cases) = results.get("cases").and_then(|c| c.as_array()) else {
        bail!(
            "{} has no `cases`: not a ktune-bench results file",
            path.display()
        );
    };
    let median = |case: &serde_json::Value, key: &str| {
        case.get(key)?.get("times")?.get("median_ms")?.as_f64()
    };
    Ok(cases
        .iter()
        .map(|case| {
            let baseline = median(case, "baseline");
            let vs = |key: &str| baseline.zip(median(case, key)).map(|(b, t)| b / t);
            BenchFigures {
                case: case["name"].as_str().unwrap_or("?").to_owned(),
                baseline: case["baseline_kind"].as_str().unwrap_or("?").to_owned(),
                default_vs_baseline: vs("default"),
                bounded_vs_baseline: vs("tuned"),
                best_vs_baseline: vs("best"),
                searched_vs_baseline: vs("searched"),
            }
        })
        .collect())
}

fn page(history: &History, figures: &Figures) -> Result<String> {
    let mut html = String::new();
    let title = format!("ktune tuning report: {}", history.krate);
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{}</title>\
         <style>body{{font-family:sans-serif;max-width:1400px;margin:2em auto}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}\
         td:first-child,th:first-child{{text-align:left}}.plots{{display:flex;flex-wrap:wrap;gap:1em}}\
         .note{{color:#a40}}</style></head><body>\n<h1>{}</h1>\n",
        escape(&title),
        escape(&title)
    );
    // The virtual GPU's name holds its target already.
    let device = match history.measured_on {
        MeasuredOn::Vgpu => history.gpu.name.clone(),
        MeasuredOn::Gpu => format!("{} ({})", history.gpu.name, history.target),
    };
    let run: usize = history.kernels.iter().map(|k| k.steps.len()).sum();
    let _ = writeln!(
        html,
        "<p>{} on {}, strategy {}, {} of a budget of {} in {:.1} s.</p>",
        escape(&history.date),
        escape(&device),
        escape(&history.strategy),
        ktune_build::counted(run, "trial"),
        history.trials,
        history.seconds
    );
    if history.measured_on == MeasuredOn::Vgpu {
        html.push_str(
            "<p class=\"note\">Measured on ktune's virtual GPU: every candidate was verified, \
             but the times are estimates from instruction and memory counts, not GPU timings.</p>\n",
        );
    }
    html.push_str(
        "<h2>Summary</h2>\n<table><tr><th>kernel</th><th>trials</th><th>rejected</th>\
         <th>default µs</th><th>best µs</th><th>speed-up over default</th>\
         <th>trials to within 5%</th><th>learned model ρ</th><th>heuristic model ρ</th></tr>\n",
    );
    let num =
        |v: Option<f64>, digits: usize| v.map_or("–".to_owned(), |v| format!("{v:.digits$}"));
    // A rank correlation over few points says little: its count beside it.
    let correlation =
        |rho: Option<f64>, n: usize| rho.map_or("–".to_owned(), |r| format!("{r:.2} (n = {n})"));
    for k in &figures.kernels {
        let _ = writeln!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&k.kernel),
            k.trials,
            k.rejected,
            num(k.default_us, 2),
            num(k.best_us, 2),
            k.speedup.map_or("–".to_owned(), |s| format!("{s:.2}×")),
            k.trials_to_within_5_percent
                .map_or("–".to_owned(), |n| n.to_string()),
            correlation(k.learned_model_correlation, k.learned_model_points),
            correlation(k.heuristic_model_correlation, k.heuristic_model_points),
        );
    }
    html.push_str("</table>\n");
    html.push_str("<h2>Speed-up over the heuristic default</h2>\n");
    html.push_str(&speedup_svg(&figures.kernels)?);
    for k in &history.kernels {
        let _ = writeln!(
            html,
            "<h2>{}</h2>\n<div class=\"plots\">",
            escape(&k.kernel)
        );
        html.push_str(&curve_svg(k)?);
        let measured = |pick: &dyn Fn(&ktune_build::tune::Step) -> Option<f64>| -> Vec<(f64, f64)> {
            k.steps
                .iter()
                .filter_map(|s| Some((pick(s)?, s.result.as_ref().ok()?.median_us)))
                .collect()
        };
        let learned = measured(&|s| s.predicted);
        if !learned.is_empty() {
            html.push_str(&scatter_svg(
                "learned model: score when chosen vs measured",
                "model score (lower: faster)",
                &learned,
                false,
            )?);
        }
        let heuristic = measured(&|s| s.estimate_us);
        if !heuristic.is_empty() {
            html.push_str(&scatter_svg(
                "heuristic model: estimate vs measured",
                "estimated µs",
                &heuristic,
                true,
            )?);
        }
        html.push_str("</div>\n");
    }
    if !figures.bench.is_empty() {
        html.push_str(
            "<h2>GPU benchmark</h2>\n<table><tr><th>case</th><th>baseline</th>\
             <th>default vs baseline</th><th>bounded vs baseline</th>\
             <th>best sampled vs baseline</th><th>searched vs baseline</th></tr>\n",
        );
        let ratio = |r: Option<f64>| r.map_or("–".to_owned(), |r| format!("{r:.2}×"));
        for b in &figures.bench {
            let _ = writeln!(
                html,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&b.case),
                escape(&b.baseline),
                ratio(b.default_vs_baseline),
                ratio(b.bounded_vs_baseline),
                ratio(b.best_vs_baseline),
                ratio(b.searched_vs_baseline),
            );
        }
        html.push_str("</table>\n<p>Baseline time over ktune's: above 1, ktune is faster.</p>\n");
    }
    html.push_str("</body></html>\n");
    Ok(html)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Draws into an SVG string.
fn svg(
    draw: impl FnOnce(DrawingArea<SVGBackend<'_>, plotters::coord::Shift>) -> Result<()>,
) -> Result<String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        draw(root.clone())?;
        root.present().map_err(plot_error)?;
    }
    Ok(out)
}

fn plot_error<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> anyhow::Error {
    anyhow::anyhow!("cannot draw a plot: {e}")
}

/// Padded bounds of some values.
fn range(values: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !lo.is_finite() {
        return 0.0..1.0;
    }
    let pad = ((hi - lo) * 0.05).max(hi.abs() * 0.01).max(1e-9);
    (lo - pad)..(hi + pad)
}

/// Best so far against trials, every measurement as a dot, the default as
/// a dashed line.
fn curve_svg(k: &KernelHistory) -> Result<String> {
    let points: Vec<(f64, f64)> = k
        .steps
        .iter()
        .enumerate()
        .filter_map(|(i, s)| Some(((i + 1) as f64, s.result.as_ref().ok()?.median_us)))
        .collect();
    let curve: Vec<(f64, f64)> = points
        .iter()
        .scan(f64::INFINITY, |best, &(x, y)| {
            *best = best.min(y);
            Some((x, *best))
        })
        .collect();
    let trials = k.steps.len().max(1) as f64;
    svg(|root| {
        let mut chart = ChartBuilder::on(&root)
            .caption("best so far (µs) vs trials", ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..trials + 1.0, range(points.iter().map(|p| p.1)))
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc("trial")
            // Whole trials: a label a trial at most.
            .x_labels((trials as usize + 2).min(11))
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_desc("µs")
            .draw()
            .map_err(plot_error)?;
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&p| Circle::new(p, 2, BLUE.mix(0.4).filled())),
            )
            .map_err(plot_error)?;
        chart
            .draw_series(LineSeries::new(curve, RED.stroke_width(2)))
            .map_err(plot_error)?
            .label("best so far")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RED));
        if let Some(d) = k.default_us {
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(0.0, d), (trials + 1.0, d)],
                    6,
                    4,
                    BLACK.into(),
                ))
                .map_err(plot_error)?
                .label("heuristic default")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(plot_error)?;
        Ok(())
    })
}

/// Model value against measured time, one dot per candidate.
fn scatter_svg(title: &str, x_desc: &str, pairs: &[(f64, f64)], log: bool) -> Result<String> {
    let pairs: Vec<(f64, f64)> = pairs
        .iter()
        .map(|&(x, y)| if log { (x.ln(), y.ln()) } else { (x, y.ln()) })
        .collect();
    svg(|root| {
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(
                range(pairs.iter().map(|p| p.0)),
                range(pairs.iter().map(|p| p.1)),
            )
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc(if log {
                format!("ln {x_desc}")
            } else {
                x_desc.to_owned()
            })
            .y_desc("ln measured µs")
            .draw()
            .map_err(plot_error)?;
        chart
            .draw_series(
                pairs
                    .iter()
                    .map(|&p| Circle::new(p, 3, BLUE.mix(0.6).filled())),
            )
            .map_err(plot_error)?;
        Ok(())
    })
}

/// One bar per kernel: its winner's speed-up over its default.
fn speedup_svg(kernels: &[KernelFigures]) -> Result<String> {
    let bars: Vec<(usize, f64)> = kernels
        .iter()
        .enumerate()
        .filter_map(|(i, k)| Some((i, k.speedup?)))
        .collect();
    let top = bars.iter().map(|b| b.1).fold(1.0, f64::max) * 1.1;
    let names: Vec<String> = kernels.iter().map(|k| k.kernel.clone()).collect();
    svg(|root| {
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "speed-up of the winner over the default",
                ("sans-serif", 18),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5..(names.len() as f64 - 0.5), 0.0..top)
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(names.len().max(1))
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    names.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc("× the default")
            .draw()
            .map_err(plot_error)?;
        chart
            .draw_series(bars.iter().map(|&(i, s)| {
                let x = i as f64;
                Rectangle::new([(x - 0.3, 0.0), (x + 0.3, s)], GREEN.mix(0.7).filled())
            }))
            .map_err(plot_error)?;
        chart
            .draw_series(DashedLineSeries::new(
                vec![(-0.5, 1.0), (names.len() as f64 - 0.5, 1.0)],
                6,
                4,
                BLACK.into(),
            ))
            .map_err(plot_error)?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_figures_are_baseline_over_each_ktune_time() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("bench.json");
        let timed = |ms: f64| serde_json::json!({ "times": { "median_ms": ms } });
        let results = serde_json::json!({ "cases": [{
            "name": "tail", "baseline_kind": "cublas",
            "baseline": timed(2.0), "default": timed(4.0), "tuned": timed(2.0),
            "best": timed(1.0), "searched": timed(0.5),
        }, {
            "name": "older", "baseline_kind": "copy",
            "baseline": timed(1.0), "default": timed(2.0), "best": null,
        }]});
        std::fs::write(&path, results.to_string()).expect("written");
        let figures = bench_figures(&path).expect("a results file");
        let ratios = |b: &BenchFigures| {
            [
                b.default_vs_baseline,
                b.bounded_vs_baseline,
                b.best_vs_baseline,
                b.searched_vs_baseline,
            ]
        };
        assert_eq!(figures[0].case, "tail");
        assert_eq!(
            ratios(&figures[0]),
            [Some(0.5), Some(1.0), Some(2.0), Some(4.0)]
        );
        assert_eq!(ratios(&figures[1]), [Some(0.5), None, None, None]);
        std::fs::write(&path, "{}").expect("written");
        let err = bench_figures(&path).expect_err("no cases");
        assert!(err.to_string().contains("no `cases`"), "{err}");
    }
}

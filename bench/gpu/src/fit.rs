//! How well the heuristic model ([`ktune_core::model`]) ranks the schedules
//! a benchmark run measured: `ktune-bench --fit bench.json`. For each case,
//! every schedule the run timed (the default, the bounded search's
//! candidates, the screened sample, the default's alternatives and the
//! search's evaluations) gets
//! the model's estimate, and the two orders are compared. This is how the
//! model is checked against a real GPU without one: each run on a GPU
//! leaves a results file, and the fit can be read again after every change
//! to the model.

use std::fmt::Write as _;

use ktune_core::model;
use ktune_core::schedule::Schedule;
use ktune_core::target::SmVersion;
use ktune_measure::stats::spearman;
use serde::Serialize;
use serde_json::Value;

use crate::cases::{self, Case};
use crate::turns;

/// The model against one case's measurements.
#[derive(Debug, Clone, Serialize)]
pub struct CaseFit {
    pub case: String,
    /// Schedules with both a measured time and an estimate, fastest
    /// measured first.
    pub points: Vec<FittedPoint>,
    /// Spearman's rank correlation of estimated and measured times (1: the
    /// model orders them as the GPU did; 0: no relation); `None` below
    /// three points.
    pub spearman: Option<f64>,
    /// Measured time of the point the model ranks first, over the fastest
    /// measured (1: the model would have picked the best of them).
    pub pick_over_best: f64,
    /// Measured time of the default, over the fastest measured.
    pub default_over_best: Option<f64>,
    /// The fastest measured schedule, and the model's favourite.
    pub best: Schedule,
    pub pick: Schedule,
}

/// One measured schedule beside the model's estimate of it.
#[derive(Debug, Clone, Serialize)]
pub struct FittedPoint {
    pub schedule: Schedule,
    pub measured_ms: f64,
    pub estimate: model::Estimate,
}

/// Why a results file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FitError {
    #[error("the results file has no `{0}`")]
    Missing(&'static str),
    #[error("target `{0}` of the results file is not one ktune knows")]
    Target(String),
    #[error("case `{case}`: {message}")]
    Case { case: String, message: String },
}

/// The fit of every case of `results` (a `bench.json`) that the catalogue
/// still has, on the target the run recorded.
///
/// # Errors
///
/// A file without the fields `ktune-bench` writes, or a case whose kernel
/// or schedule no longer parses.
pub fn fit(results: &Value) -> Result<Vec<CaseFit>, FitError> {
    let target_name = results["gpu"]["target"]
        .as_str()
        .ok_or(FitError::Missing("gpu.target"))?;
    let target: SmVersion = target_name
        .parse()
        .map_err(|_| FitError::Target(target_name.to_owned()))?;
    let cases = results["cases"]
        .as_array()
        .ok_or(FitError::Missing("cases"))?;
    let mut fits = Vec::new();
    for case in cases {
        let name = case["name"]
            .as_str()
            .ok_or(FitError::Missing("cases.name"))?;
        let Some(known) = cases::CASES.iter().find(|c| c.name == name) else {
            continue;
        };
        if let Some(f) = fit_case(known, case, target)? {
            fits.push(f);
        }
    }
    Ok(fits)
}

/// One case's fit; `None` when fewer than two of its points were measured.
fn fit_case(case: &Case, results: &Value, target: SmVersion) -> Result<Option<CaseFit>, FitError> {
    let failed = |message: String| FitError::Case {
        case: case.name.to_owned(),
        message,
    };
    let kernel = case.kernel().map_err(|e| failed(e.to_string()))?;
    let schedule = |v: &Value| {
        serde_json::from_value::<Schedule>(v.clone()).map_err(|e| failed(e.to_string()))
    };
    let mut measured: Vec<(Schedule, f64)> = Vec::new();
    let default = schedule(&results["default"]["schedule"])?;
    let default_ms = results["default"]["times"]["median_ms"].as_f64();
    if let Some(ms) = default_ms {
        measured.push((default.clone(), ms));
    }
    // Files written before the bounded search's candidates were measured
    // have no `bounded`, before the search no `search`, before the
    // default's alternatives no `alternatives`, before screenings were
    // timed in turn with the default no `default_ms` beside them (where
    // they have it, the screened time is scaled by the default's drift).
    // A schedule timed twice (the search starts from the default) counts
    // once, as first timed.
    let screened = ["bounded", "sampled", "alternatives", "search"]
        .iter()
        .flat_map(|list| results[list]["screened"].as_array().into_iter().flatten());
    for screened in screened {
        let beside = screened["default_ms"].as_f64();
        let median = screened["median_ms"].as_f64();
        if let Some(ms) = median.map(|ms| turns::normalized(ms, beside, default_ms)) {
            let schedule = schedule(&screened["schedule"])?;
            if measured.iter().all(|(s, _)| *s != schedule) {
                measured.push((schedule, ms));
            }
        }
    }
    let mut points: Vec<FittedPoint> = measured
        .into_iter()
        .filter_map(|(schedule, measured_ms)| {
            let estimate = model::estimate(&kernel, &schedule, target).ok()?;
            Some(FittedPoint {
                schedule,
                measured_ms,
                estimate,
            })
        })
        .collect();
    if points.len() < 2 {
        return Ok(None);
    }
    // The model's favourite in the file's order (the default first), so
    // that a tie in its estimates does not go to the faster measurement.
    let pick = points
        .iter()
        .min_by(|a, b| a.estimate.seconds.total_cmp(&b.estimate.seconds))
        .map(|p| (p.schedule.clone(), p.measured_ms))
        .expect("two points or more");
    points.sort_by(|a, b| a.measured_ms.total_cmp(&b.measured_ms));
    let best = &points[0];
    let pairs: Vec<(f64, f64)> = points
        .iter()
        .map(|p| (p.measured_ms, p.estimate.seconds))
        .collect();
    Ok(Some(CaseFit {
        case: case.name.to_owned(),
        spearman: spearman(&pairs),
        pick_over_best: pick.1 / best.measured_ms,
        default_over_best: default_ms.map(|ms| ms / best.measured_ms),
        best: best.schedule.clone(),
        pick: pick.0,
        points,
    }))
}

/// The fits as a Markdown table, with the median correlation last.
pub fn table(fits: &[CaseFit]) -> String {
    let mut out = String::from(
        "| case | points | Spearman ρ | model's pick / best | default / best |\n|---|---|---|---|---|\n",
    );
    for f in fits {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.2} | {} |",
            f.case,
            f.points.len(),
            f.spearman.map_or("—".to_owned(), |r| format!("{r:.2}")),
            f.pick_over_best,
            f.default_over_best
                .map_or("—".to_owned(), |r| format!("{r:.2}")),
        );
    }
    if let Some((median, cases)) = median_spearman(fits) {
        let _ = writeln!(out, "\nmedian Spearman ρ over {cases} cases: {median:.2}");
    }
    out
}

/// The median of the cases' Spearman correlations, and over how many cases.
pub fn median_spearman(fits: &[CaseFit]) -> Option<(f64, usize)> {
    let mut rhos: Vec<f64> = fits.iter().filter_map(|f| f.spearman).collect();
    rhos.sort_by(f64::total_cmp);
    rhos.get(rhos.len() / 2).map(|&m| (m, rhos.len()))
}

/// The fits as JSON: every case with its points (the measured time beside
/// the model's whole estimate: bound, occupancy, waves…), and the median
/// correlation.
pub fn json(fits: &[CaseFit]) -> Value {
    serde_json::json!({
        "cases": fits,
        "median_spearman": median_spearman(fits).map(|(m, _)| m),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn screened_times_are_scaled_by_the_defaults_runs_beside_them() {
        let default = json!({"class": "rows", "threads_per_row": 128, "rows_per_block": 1, "vector": 4, "cache": 1});
        let other = json!({"class": "rows", "threads_per_row": 16, "rows_per_block": 2, "vector": 4, "online": 1});
        let results = |beside: Option<f64>| {
            json!({
                "gpu": {"target": "sm_90"},
                "cases": [{
                    "name": "softmax_8192x4096",
                    "default": {"schedule": default, "times": {"median_ms": 1.0}},
                    "bounded": {"screened": [
                        {"schedule": other, "median_ms": 1.2, "default_ms": beside},
                    ]},
                }],
            })
        };
        let measured = |beside| {
            let fits = fit(&results(beside)).expect("a fit");
            let point = fits[0]
                .points
                .iter()
                .find(|p| p.schedule.to_json().contains("online"))
                .expect("the screened point");
            point.measured_ms
        };
        // The default ran 1.5 ms beside it, 1.0 in full: the clock was
        // lower while it was screened.
        assert!((measured(Some(1.5)) - 0.8).abs() < 1e-12);
        assert_eq!(measured(None), 1.2);
    }
}

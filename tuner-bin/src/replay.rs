//! `cargo ktune replay`: a search strategy run on a recorded, exhaustively
//! measured tuning space (a Kernel Tuner cache file) over many seeds, scored
//! by the evaluations it needs to reach within 5% of the optimum.
//!
//! With `--known`, the evolutionary strategies start from the winners of
//! other recordings of the same kernel (on other GPUs), as a build's search
//! starts from the database's winners for the GPUs it was tuned on before.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use ktune_search::replay::Replay;
use ktune_search::score::{self, Summary};
use ktune_search::space::Point;
use ktune_search::strategy::{CoordinateDescent, Evolutionary, Random, Strategy};
use serde_json::Value;

/// What to run.
pub(crate) struct Options<'a> {
    pub space: &'a Path,
    pub strategy: &'a str,
    /// Recordings of the same kernel on other GPUs, whose winners the
    /// search starts from.
    pub known: &'a [PathBuf],
    pub seeds: u64,
    pub budget: usize,
    pub json: bool,
}

/// The strategies by name; `evolutionary` is the default of max-autotune.
const NAMES: &[&str] = &[
    "random",
    "coordinate_descent",
    "evolutionary",
    "evolutionary-knn",
    #[cfg(feature = "xgboost")]
    "evolutionary-xgb-rank",
    #[cfg(feature = "xgboost")]
    "evolutionary-xgb-reg",
];

/// The strategy called `name`, starting from `starts` when `--known` was
/// given (only the evolutionary strategies take start points).
fn strategy(name: &str, starts: Option<Vec<Point>>) -> Result<Box<dyn Strategy>> {
    let evolutionary = match name {
        "random" | "coordinate_descent" if starts.is_some() => {
            bail!("--known: only the evolutionary strategies start from known points, not `{name}`")
        }
        "random" => return Ok(Box::new(Random)),
        "coordinate_descent" => return Ok(Box::new(CoordinateDescent::default())),
        "evolutionary" => Evolutionary::max_autotune(),
        "evolutionary-knn" => Evolutionary::knn(),
        #[cfg(feature = "xgboost")]
        "evolutionary-xgb-rank" => {
            Evolutionary::xgboost(ktune_search::model::XgbObjective::RankPairwise)
        }
        #[cfg(feature = "xgboost")]
        "evolutionary-xgb-reg" => {
            Evolutionary::xgboost(ktune_search::model::XgbObjective::Regression)
        }
        _ => bail!(
            "unknown strategy `{name}`: expected one of {}",
            NAMES.join(", ")
        ),
    };
    Ok(Box::new(Evolutionary {
        starts: starts.unwrap_or_default(),
        ..evolutionary
    }))
}

/// The winners of the `known` recordings as points of `replay`'s space, in
/// order and without repeats. A winner that is not a valid point here is
/// left out, as a build leaves out a database winner its space does not
/// hold; a recording of another kernel (other knobs or values) is an error.
fn known_winners(replay: &Replay, space: &Path, known: &[PathBuf]) -> Result<Vec<Point>> {
    let mut starts = Vec::new();
    for path in known {
        if path.canonicalize().ok() == space.canonicalize().ok() {
            bail!(
                "--known {}: that is the replayed space itself",
                path.display()
            );
        }
        let other = Replay::load(path)?;
        let winner = other
            .winner()
            .with_context(|| format!("--known {}: no configuration has a time", path.display()))?;
        let point = replay
            .space()
            .translate(other.space(), winner)
            .map_err(|why| {
                anyhow::anyhow!(
                    "--known {}: its winner is not a point of {}: {why}",
                    path.display(),
                    space.display()
                )
            })?;
        if !replay.space().is_valid(&point) {
            eprintln!(
                "note: --known {}: its winner ({}) is not a valid point of {}; left out",
                path.display(),
                replay.space().describe(&point),
                space.display()
            );
        } else if !starts.contains(&point) {
            starts.push(point);
        }
    }
    Ok(starts)
}

pub(crate) fn replay(options: &Options<'_>) -> Result<()> {
    let replay = Replay::load(options.space)?;
    let starts = (!options.known.is_empty())
        .then(|| known_winners(&replay, options.space, options.known))
        .transpose()?;
    let strategy = strategy(options.strategy, starts)?;
    let runs_as = strategy.name();
    if options.strategy == "evolutionary" && runs_as == Evolutionary::knn().name() {
        eprintln!(
            "note: this cargo-ktune was built without the `xgboost` feature, so `evolutionary` \
             runs with the nearest-neighbour model ({runs_as}), not max-autotune's XGBoost; \
             build with `--features xgboost` to replay max-autotune's search"
        );
    }
    let summary = score::score(&replay, strategy.as_ref(), options.seeds, options.budget)
        .with_context(|| format!("{}: no configuration has a time", options.space.display()))?;
    if options.json {
        println!("{}", json_line(options, &runs_as, &summary));
    } else {
        println!("{}", human_line(options, &runs_as, &summary));
    }
    Ok(())
}

/// The result as one JSON object; `runs_as` is the strategy's full name
/// (`evolutionary` with its model).
fn json_line(options: &Options<'_>, runs_as: &str, s: &Summary) -> String {
    let number = |v: Option<f64>| v.map_or(Value::Null, Value::from);
    let evals: Vec<Value> = s
        .evals
        .iter()
        .map(|e| e.map_or(Value::Null, Value::from))
        .collect();
    // Written field by field to keep this order, shared with the Kernel
    // Tuner helper's lines.
    let fields: [(&str, Value); 14] = [
        ("tool", Value::from("ktune")),
        (
            "space",
            Value::from(options.space.to_string_lossy().into_owned()),
        ),
        ("strategy", Value::from(options.strategy)),
        ("runs_as", Value::from(runs_as)),
        ("seeds", Value::from(s.seeds)),
        ("budget", Value::from(s.budget)),
        ("evals", Value::from(evals)),
        ("median", number(s.median)),
        (
            "median_interval",
            Value::from(vec![
                number(s.median_interval.0),
                number(s.median_interval.1),
            ]),
        ),
        ("q1", number(s.q1)),
        ("q3", number(s.q3)),
        ("success_fraction", Value::from(s.success_fraction)),
        ("auc", Value::from(s.auc)),
        (
            "known",
            Value::from(
                options
                    .known
                    .iter()
                    .map(|p| p.to_string_lossy().into_owned())
                    .collect::<Vec<_>>(),
            ),
        ),
    ];
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}:{v}", Value::from(*k)))
        .collect();
    format!("{{{}}}", body.join(","))
}

fn human_line(options: &Options<'_>, runs_as: &str, s: &Summary) -> String {
    let show = |v: Option<f64>| v.map_or("unreached".to_string(), |x| format!("{x}"));
    let name = if runs_as == options.strategy {
        runs_as.to_string()
    } else {
        format!("{} ({runs_as})", options.strategy)
    };
    let known = if options.known.is_empty() {
        String::new()
    } else {
        let files: Vec<String> = options
            .known
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        format!(" starting from the winners of {}", files.join(", "))
    };
    format!(
        "{name}{known} on {}: evaluations to within 5% of the optimum: median {} (95% interval {} to {}), quartiles {} and {}, reached by {:.0}% of {} seeds within {}, auc {:.3}",
        options.space.display(),
        show(s.median),
        show(s.median_interval.0),
        show(s.median_interval.1),
        show(s.q1),
        show(s.q3),
        s.success_fraction * 100.0,
        s.seeds,
        s.budget,
        s.auc,
    )
}

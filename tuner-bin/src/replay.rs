//! `cargo ktune replay`: a search strategy run on a recorded, exhaustively
//! measured tuning space (a Kernel Tuner cache file) over many seeds, scored
//! by the evaluations it needs to reach within 5% of the optimum.

use std::path::Path;

use anyhow::{Context, Result, bail};
use ktune_search::replay::Replay;
use ktune_search::score::{self, Summary};
use ktune_search::strategy::{CoordinateDescent, Evolutionary, Random, Strategy};
use serde_json::Value;

/// What to run.
pub(crate) struct Options<'a> {
    pub space: &'a Path,
    pub strategy: &'a str,
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

fn strategy(name: &str) -> Result<Box<dyn Strategy>> {
    Ok(match name {
        "random" => Box::new(Random),
        "coordinate_descent" => Box::new(CoordinateDescent::default()),
        "evolutionary" => Box::new(Evolutionary::max_autotune()),
        "evolutionary-knn" => Box::new(Evolutionary::knn()),
        #[cfg(feature = "xgboost")]
        "evolutionary-xgb-rank" => Box::new(Evolutionary::xgboost(
            ktune_search::model::XgbObjective::RankPairwise,
        )),
        #[cfg(feature = "xgboost")]
        "evolutionary-xgb-reg" => Box::new(Evolutionary::xgboost(
            ktune_search::model::XgbObjective::Regression,
        )),
        _ => bail!(
            "unknown strategy `{name}`: expected one of {}",
            NAMES.join(", ")
        ),
    })
}

pub(crate) fn replay(options: &Options<'_>) -> Result<()> {
    let strategy = strategy(options.strategy)?;
    let runs_as = strategy.name();
    if options.strategy == "evolutionary" && runs_as == Evolutionary::knn().name() {
        eprintln!(
            "note: this cargo-ktune was built without the `xgboost` feature, so `evolutionary` \
             runs with the nearest-neighbour model ({runs_as}), not max-autotune's XGBoost; \
             build with `--features xgboost` to replay max-autotune's search"
        );
    }
    let replay = Replay::load(options.space)?;
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
    let fields: [(&str, Value); 13] = [
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
    format!(
        "{name} on {}: evaluations to within 5% of the optimum: median {} (95% interval {} to {}), quartiles {} and {}, reached by {:.0}% of {} seeds within {}, auc {:.3}",
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

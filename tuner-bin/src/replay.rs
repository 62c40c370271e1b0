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

/// The strategies that need a `cargo-ktune` built with the `xgboost`
/// feature.
const XGBOOST_NAMES: &[&str] = &["evolutionary-xgb-rank", "evolutionary-xgb-reg"];

/// A strategy chosen by name, before the space is loaded: an evolutionary
/// one is kept apart, to be given the known points it starts from.
enum Chosen {
    Evolutionary(Evolutionary),
    Other(Box<dyn Strategy>),
}

/// The strategy called `name`; `known` says whether `--known` was given
/// (only the evolutionary strategies take start points).
fn choose(name: &str, known: bool) -> Result<Chosen> {
    let evolutionary = match name {
        "random" | "coordinate_descent" if known => {
            bail!("--known: only the evolutionary strategies start from known points, not `{name}`")
        }
        "random" => return Ok(Chosen::Other(Box::new(Random))),
        "coordinate_descent" => return Ok(Chosen::Other(Box::new(CoordinateDescent::default()))),
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
        _ if XGBOOST_NAMES.contains(&name) => bail!(
            "strategy `{name}` needs a cargo-ktune built with `--features xgboost` (XGBoost is \
             built from source: cmake and libclang, which `cargo xtask setup` installs)"
        ),
        "bounded" => bail!(
            "strategy `bounded` ranks ktune's own schedule spaces by its heuristic model, which a \
             recorded space has not; expected one of {}",
            NAMES.join(", ")
        ),
        _ => bail!(
            "unknown strategy `{name}`: expected one of {}",
            NAMES.join(", ")
        ),
    };
    Ok(Chosen::Evolutionary(evolutionary))
}

impl Chosen {
    fn starting_from(self, starts: Vec<Point>) -> Box<dyn Strategy> {
        match self {
            Chosen::Evolutionary(evolutionary) => Box::new(Evolutionary {
                starts,
                ..evolutionary
            }),
            Chosen::Other(strategy) => strategy,
        }
    }
}

/// The winners of the `known` recordings as points of `replay`'s space, in
/// order and without repeats. A winner that is not a valid point here is
/// left out, as a build leaves out a database winner its space does not
/// hold; a recording of another kernel (other knobs or values) is an error.
fn known_winners(replay: &Replay, space: &Path, known: &[PathBuf]) -> Result<Vec<Point>> {
    let mut starts = Vec::new();
    for (i, path) in known.iter().enumerate() {
        let same = |other: &Path| path.canonicalize().ok() == other.canonicalize().ok();
        if same(space) {
            bail!(
                "--known {}: that is the replayed space itself",
                path.display()
            );
        }
        if known[..i].iter().any(|earlier| same(earlier)) {
            bail!("--known {}: given twice", path.display());
        }
        let other = Replay::load(path).context("--known")?;
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
    let chosen = choose(options.strategy, !options.known.is_empty())?;
    let replay = Replay::load(options.space)?;
    let starts = known_winners(&replay, options.space, options.known)?;
    let strategy = chosen.starting_from(starts);
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
    let interval = s.median_interval.map_or(Value::Null, |(low, high)| {
        Value::from(vec![number(low), number(high)])
    });
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
        ("median_interval", interval),
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
    let show = |v: Option<f64>| v.map_or(format!(">{}", s.budget), |x| format!("{x}"));
    let interval = match s.median_interval {
        Some((low, high)) => format!("95% interval {} to {}", show(low), show(high)),
        None => format!(
            "no 95% interval with fewer than {} seeds",
            score::MIN_INTERVAL_VALUES
        ),
    };
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
        "{name}{known} on {}, {} of at most {} (failed configurations count; a seed \
         that does not get there counts as >{}):\n  evaluations to within 5% of the optimum: \
         median {} ({interval}), quartiles {} and {}\n  reached by {:.0}% of the seeds\n  area \
         under the best-so-far curve (the optimum over the best time so far, averaged over \
         the budget and the seeds): {:.3}",
        options.space.display(),
        ktune_build::counted(s.seeds as usize, "seed"),
        ktune_build::counted(s.budget, "evaluation"),
        s.budget,
        show(s.median),
        show(s.q1),
        show(s.q3),
        s.success_fraction * 100.0,
        s.auc,
    )
}

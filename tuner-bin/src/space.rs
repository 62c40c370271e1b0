//! `cargo ktune space`: one kernel's schedule space, surveyed and ranked,
//! and what a build's bounded search would measure in it.

use anyhow::Result;
use ktune_build::tune::{BOUNDED_CANDIDATES, Task};
use ktune_core::SmVersion;
use ktune_core::model::{self, Estimate};
use ktune_core::schedule::Schedule;
use ktune_core::space::Space;
use serde_json::json;

use crate::{CrateArgs, load_crate};

pub fn space(
    args: &CrateArgs,
    name: &str,
    target: SmVersion,
    top: usize,
    json: bool,
) -> Result<()> {
    let krate = load_crate(args)?;
    let found = krate.kernel(name)?;
    let kernel = &found.kernel;
    let space = Space::of(kernel, target);
    let survey = space.survey(kernel, target);
    let ranked = model::rank(kernel, target, &survey.valid);
    let default = ktune_core::lower::heuristic(kernel, target);
    let default_rank = ranked.iter().position(|(s, _)| *s == default);
    let default_estimate = model::estimate(kernel, &default, target)?;
    // What a build's bounded search measures after the default.
    let bounded: Vec<(Schedule, Estimate)> =
        Task::surveyed(kernel, &found.source, target, &[], &survey.valid, &ranked)
            .bounded_candidates(BOUNDED_CANDIDATES)
            .into_iter()
            .filter(|s| *s != default)
            .map(|s| {
                let estimate = model::estimate(kernel, &s, target)?;
                Ok((s, estimate))
            })
            .collect::<Result<_>>()?;

    if json {
        let point = |(s, e): &(Schedule, Estimate)| json!({ "schedule": s, "estimate": e });
        let report = json!({
            "kernel": kernel.name,
            "target": target,
            "families": space.families.iter().map(|f| json!({
                "class": f.class.name(),
                "size": f.size(),
                "knobs": f.knobs.iter().map(|k| json!({ "name": k.name, "values": k.values })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "size": survey.size,
            "valid": survey.valid.len(),
            "valid_fraction": survey.valid_fraction(),
            "rejected": survey.rejected.iter().map(|(why, (count, example))| {
                json!({ "constraint": why.name(), "points": count, "example": example })
            }).collect::<Vec<_>>(),
            "default": {
                "schedule": default,
                "estimate": default_estimate,
                "model_rank": default_rank.map(|r| r + 1),
            },
            "best": ranked.iter().take(top).map(point).collect::<Vec<_>>(),
            "bounded": bounded.iter().map(point).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }

    println!("kernel `{}` on {target}", kernel.name);
    for family in &space.families {
        println!(
            "  {} schedules ({} points), knobs:",
            family.class.name(),
            family.size()
        );
        for knob in &family.knobs {
            let values: Vec<String> = knob.values.iter().map(u32::to_string).collect();
            println!("    {:<16} {}", knob.name, values.join(" "));
        }
    }
    println!(
        "  {} points, {} valid ({:.1}%)",
        survey.size,
        survey.valid.len(),
        100.0 * survey.valid_fraction()
    );
    if !survey.rejected.is_empty() {
        println!("  rejected by:");
        for (why, (count, example)) in &survey.rejected {
            println!("    {:<14} {count:>7}   e.g. {example}", why.name());
        }
    }
    println!(
        "  default (heuristic): {}\n    model: {}, rank {} of {}",
        default.to_json(),
        describe(&default_estimate),
        default_rank.map_or("-".to_owned(), |r| (r + 1).to_string()),
        ranked.len()
    );
    println!("  model's best:");
    print_points(ranked.iter().take(top));
    println!(
        "  bounded search (what a build on a miss measures after the default: the model's best, spread over the knobs):"
    );
    print_points(bounded.iter());
    Ok(())
}

fn print_points<'a>(points: impl Iterator<Item = &'a (Schedule, Estimate)>) {
    for (i, (schedule, estimate)) in points.enumerate() {
        println!(
            "    {:>3}  {}  {}",
            i + 1,
            describe(estimate),
            schedule.to_json()
        );
    }
}

fn describe(e: &Estimate) -> String {
    let kept = match e.cached_per_thread {
        0 => String::new(),
        n => format!(", {n} values per thread in registers"),
    };
    format!(
        "{:>9.1} µs {:<13} occupancy {:>3.0}%{kept}",
        e.seconds * 1e6,
        format!("{:?}", e.bound).to_lowercase(),
        100.0 * e.occupancy.fraction
    )
}

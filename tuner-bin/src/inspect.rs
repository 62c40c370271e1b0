//! `cargo ktune inspect`: static measures of one kernel's machine code for
//! one target and schedule, without a GPU: registers, spills, shared
//! memory, occupancy, the main loop's instruction mix and the widths of its
//! memory accesses (see `ktune_build::sass`).

use anyhow::{Context, Result, bail};
use ktune_build::layer::{self, Layers};
use ktune_build::sass::{self, Accesses, Inspection, Request, Tools};
use ktune_build::{Source, Variant, counted, select};
use ktune_core::SmVersion;
use ktune_core::db::MeasuredOn;
use ktune_core::schedule::Schedule;
use serde_json::json;

use crate::{Crate, CrateArgs, load_crate};

pub fn inspect(
    args: &CrateArgs,
    name: &str,
    target: SmVersion,
    schedule: &str,
    as_json: bool,
) -> Result<()> {
    let tools = Tools::find()?;
    let krate = load_crate(args)?;
    let variant = choose(&krate, name, target, schedule)?;
    let inspection = sass::inspect(&tools, &Request::lowered(&variant.lowered, target))
        .with_context(|| format!("cannot inspect kernel `{name}` for {target}"))?;
    if as_json {
        let value = json!({
            "kernel": name,
            "target": target,
            "schedule": variant.schedule,
            "source": variant.source.to_string(),
            "gpu": variant.gpu,
            "inspection": inspection,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print(name, &variant, &inspection);
    }
    Ok(())
}

/// The variant `--schedule` names: `default` (the heuristic's), `best` (the
/// database's winner for the target) or a schedule as JSON.
fn choose(krate: &Crate, name: &str, target: SmVersion, schedule: &str) -> Result<Variant> {
    let Some(found) = krate.kernels.iter().find(|f| f.kernel.name == name) else {
        let names: Vec<&str> = krate
            .kernels
            .iter()
            .map(|f| f.kernel.name.as_str())
            .collect();
        bail!(
            "no kernel `{name}` in crate `{}`; its kernels: {}",
            krate.name,
            names.join(", ")
        );
    };
    match schedule {
        "default" => Ok(select::variants(&found.kernel, &found.location, &[target])?.remove(0)),
        "best" => {
            let stack = layer::stack(
                krate.root.join(ktune_build::db::DEFAULT_PATH),
                Some(&krate.name),
            );
            let paths: Vec<String> = stack.iter().map(|(_, p)| p.display().to_string()).collect();
            let layers = Layers::open(stack)?;
            for warning in layers.warnings() {
                eprintln!("{warning}");
            }
            let tuned = select::tuned(&found.kernel, &layers);
            let checksum = ktune_core::canon::checksum(&found.kernel);
            let virtual_records = layers
                .records()
                .filter(|(_, r)| {
                    r.checksum == checksum
                        && r.gpu.compute_capability.target() == Some(target)
                        && r.provenance.measured_on == MeasuredOn::Vgpu
                })
                .count();
            tuned
                .variants
                .into_iter()
                .find(|v| v.target == target)
                .with_context(|| {
                    let read = paths.join(", ");
                    let mut message = match virtual_records {
                        0 => format!("no database record for kernel `{name}` on {target} (read {read})"),
                        n => format!(
                            "kernel `{name}` has no record for a GPU on {target} (read {read}), only {} on the virtual GPU, whose times are estimates and never chosen: pass one's schedule as --schedule JSON (`cargo ktune db show` lists them)",
                            counted(n, "record")
                        ),
                    };
                    for warning in &tuned.warnings {
                        message.push_str(&format!("\n  {warning}"));
                    }
                    message
                })
        }
        json => {
            let schedule = Schedule::from_json(json).with_context(|| {
                format!("`{json}` is not a schedule: expected default, best or a schedule as JSON")
            })?;
            Ok(select::variant(
                &found.kernel,
                &found.location,
                target,
                schedule,
                Source::Explicit,
            )?)
        }
    }
}

fn print(name: &str, variant: &Variant, i: &Inspection) {
    let gpu = variant
        .gpu
        .as_deref()
        .map(|g| format!(", tuned on {g}"))
        .unwrap_or_default();
    println!(
        "{name} on {}: {} ({}{gpu})",
        i.target,
        variant.schedule.to_json(),
        variant.source
    );
    println!(
        "  registers      {} per thread; spills {} B stored, {} B loaded",
        i.registers, i.spill_stores, i.spill_loads
    );
    if let Some(r) = i.reallocation {
        let count = |c: Option<u32>| c.map_or("-".to_owned(), |c| c.to_string());
        println!(
            "  setmaxnreg     {} per thread at launch; lowered to {}, raised to {}",
            i.registers,
            count(r.lowered_to),
            count(r.raised_to)
        );
    }
    println!(
        "  shared memory  {} B per block ({} static + {} dynamic)",
        i.shared.total(),
        i.shared.static_bytes,
        i.shared.dynamic_bytes
    );
    let o = &i.occupancy;
    let limits: Vec<&str> = o.limited_by.iter().map(|r| r.describe()).collect();
    println!(
        "  occupancy      {:.1}%: {} blocks of {} threads per SM, {} warps; limited by {}",
        o.fraction * 100.0,
        o.blocks_per_sm,
        i.threads_per_block,
        o.active_warps,
        limits.join(", ")
    );
    println!(
        "  tensor cores   {}",
        if i.uses_tensor_cores() {
            format!("{} HMMA/HGMMA", i.tensor_core_instructions)
        } else {
            "none".to_owned()
        }
    );
    println!("  kernel         {} instructions", i.instructions);
    print_accesses("    ", &i.memory);
    match &i.main_loop {
        None => println!("  main loop      none (no backward branch)"),
        Some(l) => {
            println!(
                "  main loop      {:#06x}..={:#06x}, {} instructions, FFMA {:.1}%",
                l.first_offset,
                l.last_offset,
                l.instructions,
                l.ffma_fraction * 100.0
            );
            let mut mix: Vec<(&String, &u32)> = l.mix.iter().collect();
            mix.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let mix: Vec<String> = mix.iter().map(|(op, n)| format!("{op} {n}")).collect();
            println!("    mix          {}", mix.join(", "));
            print_accesses("    ", &l.memory);
        }
    }
}

fn print_accesses(indent: &str, a: &Accesses) {
    println!(
        "{indent}global       loads {}; stores {}",
        a.global_loads.describe(),
        a.global_stores.describe()
    );
    println!(
        "{indent}shared       loads {}; stores {}",
        a.shared_loads.describe(),
        a.shared_stores.describe()
    );
}

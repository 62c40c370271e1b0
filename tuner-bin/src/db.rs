//! `cargo ktune db`: the tuning database, for people.

mod assemble;
mod diff;
mod merge;
mod prune;

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use ktune_core::db::{Database, MeasuredOn, Record};
use ktune_core::ir::Kernel;

use crate::status::load_with_dependencies;
use crate::{CrateArgs, load_crate};

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Print the database as a table: kernel, shape, GPU, schedule, time,
    /// speed-up over the default schedule, and which record is chosen.
    Show {
        /// Print the records as JSON, each with whether it is chosen.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        file: FileArgs,
    },
    /// Check every record: its form, whether its kernel changed since it
    /// was tuned, and whether its schedule still lowers for its GPU.
    /// Fails if any record has a problem.
    Verify {
        #[command(flatten)]
        file: FileArgs,
    },
    /// What changed between two databases, per key: records added or
    /// removed, and chosen schedules that changed, with their speed-ups.
    Diff {
        /// The old database.
        old: PathBuf,
        /// The new database.
        new: PathBuf,
        /// Print the changes as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Merge databases into one, keeping what the hysteresis keeps, and
    /// report the keys whose chosen schedules disagreed.
    Merge {
        /// The database to merge into (created if missing).
        into: PathBuf,
        /// The databases to merge from.
        #[arg(required = true)]
        from: Vec<PathBuf>,
        /// Print what would change; write nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Drop records that no longer serve: stale ones (`--stale`) and those
    /// no key chooses (`--superseded`); both unless one is named.
    Prune {
        #[command(flatten)]
        file: FileArgs,
        /// Drop records whose kernel changed or vanished, or that an older
        /// code generator measured.
        #[arg(long)]
        stale: bool,
        /// Keep only the record each key chooses.
        #[arg(long)]
        superseded: bool,
        /// List what would be dropped; write nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Args)]
pub(crate) struct FileArgs {
    /// The database (default: `tuning/ktune.json` in the crate's folder).
    #[arg(long)]
    file: Option<PathBuf>,
    #[command(flatten)]
    krate: CrateArgs,
}

pub(crate) fn run(command: Command) -> Result<()> {
    match command {
        Command::Show { json, file } => show(&file, json),
        Command::Verify { file } => verify(&file),
        Command::Diff { old, new, json } => diff::run(&old, &new, json),
        Command::Merge {
            into,
            from,
            dry_run,
        } => merge::run(&into, &from, dry_run),
        Command::Prune {
            file,
            stale,
            superseded,
            dry_run,
        } => {
            let (stale, superseded) = if stale || superseded {
                (stale, superseded)
            } else {
                (true, true)
            };
            prune::run(
                &file,
                &prune::Options {
                    stale,
                    superseded,
                    dry_run,
                },
            )
        }
    }
}

/// Reads a database that must exist: a missing file is an error, not an
/// empty database.
fn open_existing(path: &Path) -> Result<Database> {
    if !path.exists() {
        bail!("{}: no such database", path.display());
    }
    Ok(ktune_build::db::open(path)?)
}

/// Prints rows as columns aligned on the widest cell.
fn print_table(rows: &[Vec<String>]) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        println!("{}", cells.join("  ").trim_end());
    }
}

/// `N=4096,M=128 f32`
fn shape(r: &Record) -> String {
    let dims: Vec<String> = r.shape.iter().map(|(d, n)| format!("{d}={n}")).collect();
    format!("{} {}", dims.join(","), r.dtype)
}

/// `8.00 µs ±0.08`
fn median(r: &Record) -> String {
    format!(
        "{:.2} µs ±{:.2}",
        r.stats.median_us,
        (r.stats.high_us - r.stats.low_us) / 2.0
    )
}

fn ratio(x: Option<f64>) -> String {
    x.map_or("-".to_owned(), |x| format!("{x:.2}x"))
}

fn path(args: &FileArgs) -> Result<PathBuf> {
    match &args.file {
        Some(file) => Ok(file.clone()),
        None => Ok(load_crate(&args.krate)?
            .root
            .join(ktune_build::db::DEFAULT_PATH)),
    }
}

fn show(args: &FileArgs, json: bool) -> Result<()> {
    let path = path(args)?;
    let db = ktune_build::db::open(&path)?;
    if args.file.is_none() && !json {
        point_at_the_user_cache(&args.krate)?;
    }
    if json {
        let records: Vec<serde_json::Value> = db
            .records
            .iter()
            .map(|r| {
                serde_json::json!({
                    "chosen": r.provenance.measured_on != MeasuredOn::Vgpu && db.is_winner(r),
                    "speedup": r.speedup(),
                    "record": r,
                })
            })
            .collect();
        let value = serde_json::json!({ "database": path, "records": records });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    if db.records.is_empty() {
        println!("{}: no records", path.display());
        return Ok(());
    }
    let header = [
        "", "kernel", "shape", "GPU", "schedule", "median", "speed-up",
    ]
    .map(String::from);
    let mut rows = vec![header.to_vec()];
    rows.extend(db.records.iter().map(|r| row(&db, r).to_vec()));
    println!("{}: {} records", path.display(), db.records.len());
    print_table(&rows);
    println!("\n* chosen for its GPU; vgpu: measured on the virtual GPU, never chosen");
    Ok(())
}

/// A plain build's search writes to the per-user cache, not the crate's
/// database: say where its records are, when there are any.
fn point_at_the_user_cache(krate: &CrateArgs) -> Result<()> {
    let name = load_crate(krate)?.name;
    let Some(cache) = ktune_build::layer::user_cache_path(&name) else {
        return Ok(());
    };
    let records = ktune_build::db::open(&cache).map_or(0, |db| db.records.len());
    if records > 0 {
        eprintln!(
            "the per-user cache holds {} too: cargo ktune db show --file {}",
            ktune_build::counted(records, "record"),
            cache.display()
        );
    }
    Ok(())
}

fn row(db: &Database, r: &Record) -> [String; 7] {
    let marker = if r.provenance.measured_on == MeasuredOn::Vgpu {
        "vgpu"
    } else if db.is_winner(r) {
        "*"
    } else {
        ""
    };
    [
        marker.to_owned(),
        r.kernel.clone(),
        shape(r),
        r.gpu.fingerprint().to_string(),
        r.schedule.to_json(),
        median(r),
        ratio(r.speedup()),
    ]
}

fn verify(args: &FileArgs) -> Result<()> {
    let (krate, dependencies) = load_with_dependencies(&args.krate)?;
    let path = match &args.file {
        Some(file) => file.clone(),
        None => krate.root.join(ktune_build::db::DEFAULT_PATH),
    };
    let db = ktune_build::db::open(&path)?;
    // An application's database may hold records of its dependencies'
    // kernels.
    let kernels: Vec<Kernel> = std::iter::once(&krate)
        .chain(&dependencies)
        .flat_map(|c| &c.kernels)
        .map(|f| f.kernel.clone())
        .collect();
    let mut problems = db.check();
    problems.extend(db.check_against(&kernels));
    problems.sort_by_key(|p| (p.index, p.kind));
    problems.dedup();
    for p in &problems {
        println!("{}: {p}", path.display());
    }
    let checked: Vec<usize> = problems.iter().map(|p| p.index).collect();
    let assembly = assemble::check(&db, &kernels, &checked);
    let failures = match &assembly {
        assemble::Outcome::NoPtxas => {
            println!("ptxas not found: assembly not checked");
            0
        }
        assemble::Outcome::Checked {
            assembled,
            failures,
        } => {
            for (index, message) in failures {
                let kernel = &db.records[*index].kernel;
                println!(
                    "{}: record {index} (kernel `{kernel}`): {message}",
                    path.display()
                );
            }
            println!(
                "ptxas: {assembled} records assembled for their GPUs, {} failed or spilled",
                failures.len()
            );
            failures.len()
        }
    };
    let count = problems.len() + failures;
    if count == 0 {
        println!(
            "{}: {}, all valid",
            path.display(),
            ktune_build::counted(db.records.len(), "record")
        );
        Ok(())
    } else {
        bail!(
            "{}: {} in {}",
            path.display(),
            ktune_build::counted(count, "problem"),
            ktune_build::counted(db.records.len(), "record")
        )
    }
}

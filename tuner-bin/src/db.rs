//! `cargo ktune db`: the tuning database, for people.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use ktune_core::db::{Database, MeasuredOn, Record};

use crate::{CrateArgs, load_crate};

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Print the database as a table: kernel, shape, GPU, schedule, time,
    /// speed-up over the default schedule, and which record is chosen.
    Show {
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
        Command::Show { file } => show(&file),
        Command::Verify { file } => verify(&file),
    }
}

fn path(args: &FileArgs) -> Result<PathBuf> {
    match &args.file {
        Some(file) => Ok(file.clone()),
        None => Ok(load_crate(&args.krate)?
            .root
            .join(ktune_build::db::DEFAULT_PATH)),
    }
}

fn show(args: &FileArgs) -> Result<()> {
    let path = path(args)?;
    let db = ktune_build::db::open(&path)?;
    if db.records.is_empty() {
        println!("{}: no records", path.display());
        return Ok(());
    }
    let header = [
        "", "kernel", "shape", "GPU", "schedule", "median", "speed-up",
    ]
    .map(String::from);
    let mut rows = vec![header];
    rows.extend(db.records.iter().map(|r| row(&db, r)));
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    println!("{}: {} records", path.display(), db.records.len());
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        println!("{}", cells.join("  ").trim_end());
    }
    println!("\n* chosen for its GPU; vgpu: measured on the virtual GPU, never chosen");
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
    let shape: Vec<String> = r.shape.iter().map(|(d, n)| format!("{d}={n}")).collect();
    [
        marker.to_owned(),
        r.kernel.clone(),
        format!("{} {}", shape.join(","), r.dtype),
        r.gpu.fingerprint().to_string(),
        r.schedule.to_json(),
        format!(
            "{:.2} µs ±{:.2}",
            r.stats.median_us,
            (r.stats.high_us - r.stats.low_us) / 2.0
        ),
        r.speedup().map_or("-".to_owned(), |s| format!("{s:.2}x")),
    ]
}

fn verify(args: &FileArgs) -> Result<()> {
    let krate = load_crate(&args.krate)?;
    let path = match &args.file {
        Some(file) => file.clone(),
        None => krate.root.join(ktune_build::db::DEFAULT_PATH),
    };
    let db = ktune_build::db::open(&path)?;
    let kernels: Vec<_> = krate.kernels.iter().map(|f| f.kernel.clone()).collect();
    let mut problems = db.check();
    problems.extend(db.check_against(&kernels));
    problems.sort_by_key(|p| (p.index, p.kind));
    problems.dedup();
    for p in &problems {
        println!("{}: {p}", path.display());
    }
    if problems.is_empty() {
        println!(
            "{}: {} records, all valid",
            path.display(),
            db.records.len()
        );
        Ok(())
    } else {
        bail!(
            "{}: {} problems in {} records",
            path.display(),
            problems.len(),
            db.records.len()
        )
    }
}

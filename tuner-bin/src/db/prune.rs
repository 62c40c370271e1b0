//! `db prune`: drop the records that no longer serve, under the lock.

use anyhow::Result;
use ktune_core::db::{Database, ProblemKind, Record};
use ktune_core::ir::Kernel;

use super::{FileArgs, median, open_existing, path, print_table, shape};
use crate::status::linked_kernels;

pub(super) struct Options {
    pub(super) stale: bool,
    pub(super) superseded: bool,
    pub(super) dry_run: bool,
}

/// Why a record is dropped.
enum Why {
    /// Another record of its key beats it: it is dropped by any write (a
    /// file ktune wrote holds none).
    Beaten,
    /// Its kernel changed or vanished, or the code generator did.
    Stale(String),
    /// Not its key's choice (see [`Database::compact`]).
    Superseded,
}

pub(super) fn run(args: &FileArgs, options: &Options) -> Result<()> {
    let path = path(args)?;
    let kernels: Option<Vec<Kernel>> = if options.stale {
        Some(linked_kernels(&args.krate)?)
    } else {
        None
    };
    let current = open_existing(&path)?;
    let total = current.records.len();
    let prune = |db: &mut Database| plan(db, kernels.as_deref(), options.superseded);
    let dropped = if options.dry_run {
        prune(&mut current.clone())
    } else {
        ktune_build::db::update(&path, prune)?
    };
    if dropped.is_empty() {
        println!("{}: nothing to prune in {total} records", path.display());
        return Ok(());
    }
    let mut rows = Vec::new();
    for (r, why) in &dropped {
        let why = match why {
            Why::Beaten => "beaten beyond noise".to_owned(),
            Why::Stale(message) => message.clone(),
            Why::Superseded => "superseded: not its key's choice".to_owned(),
        };
        rows.push(vec![
            r.kernel.clone(),
            shape(r),
            r.gpu.fingerprint().to_string(),
            r.schedule.to_json(),
            median(r),
            why,
        ]);
    }
    print_table(&rows);
    if options.dry_run {
        println!(
            "{}: would drop {} of {total} records (dry run: nothing written)",
            path.display(),
            dropped.len()
        );
    } else {
        println!(
            "{}: dropped {} of {total} records",
            path.display(),
            dropped.len()
        );
    }
    Ok(())
}

/// Drops from `db` the stale records (with `kernels`), then, with
/// `superseded`, every record its key does not choose; returns what it
/// dropped. Stale records go first so that a key whose choice is stale
/// keeps its best current record.
fn plan(db: &mut Database, kernels: Option<&[Kernel]>, superseded: bool) -> Vec<(Record, Why)> {
    let before = db.records.clone();
    db.normalize();
    let mut dropped: Vec<(Record, Why)> = before
        .into_iter()
        .filter(|r| !db.records.contains(r))
        .map(|r| (r, Why::Beaten))
        .collect();
    if let Some(kernels) = kernels {
        let mut stale: Vec<Option<String>> = vec![None; db.records.len()];
        for p in db.check_against(kernels) {
            if matches!(p.kind, ProblemKind::Stale | ProblemKind::Orphan) {
                stale[p.index].get_or_insert(p.message);
            }
        }
        let records = std::mem::take(&mut db.records);
        for (r, why) in records.into_iter().zip(stale) {
            match why {
                Some(message) => dropped.push((r, Why::Stale(message))),
                None => db.records.push(r),
            }
        }
    }
    if superseded {
        dropped.extend(db.compact().into_iter().map(|r| (r, Why::Superseded)));
    }
    dropped
}

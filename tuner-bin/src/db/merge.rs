//! `db merge`: the union of databases with the hysteresis of
//! [`Database::merge`], written under the lock, and the keys whose chosen
//! schedules disagreed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use ktune_core::db::{Database, Key, MeasuredOn, Record, beats};

use super::{diff, median, open_existing, print_table, shape};

/// A key whose databases chose different records.
struct Conflict {
    key: (Key, MeasuredOn),
    /// Each database's choice: its index among the sides and the record.
    choices: Vec<(usize, Record)>,
    /// The merged database's choice.
    winner: Record,
}

/// Why a side's choice lost.
enum Loss<'a> {
    /// A record of the merge beats it beyond noise (the winner itself when
    /// it does).
    Beaten(&'a Record),
    /// Neither beats the other beyond noise: the older record, the
    /// incumbent, stays.
    WithinNoise,
}

pub(super) fn run(into: &Path, from: &[PathBuf], dry_run: bool) -> Result<()> {
    let sources: Vec<Database> = from
        .iter()
        .map(|path| open_existing(path))
        .collect::<Result<_>>()?;
    let mut labels = vec![into.display().to_string()];
    labels.extend(from.iter().map(|p| p.display().to_string()));
    let apply = |db: &mut Database| {
        let before = db.clone();
        for source in &sources {
            db.merge(source.clone());
        }
        (before, db.clone())
    };
    let (before, after) = if dry_run {
        let mut db = ktune_build::db::open(into)?;
        apply(&mut db)
    } else {
        ktune_build::db::update(into, apply)?
    };

    let mut sides = vec![&before];
    sides.extend(&sources);
    let conflicts = conflicts(&sides, &after);
    for c in &conflicts {
        print_conflict(c, &labels, &after);
    }
    let changes = diff::diff(&before, &after);
    let verb = if dry_run { "would change" } else { "changed" };
    println!(
        "{}: {} conflicts; {verb}: {}",
        into.display(),
        conflicts.len(),
        diff::summary(&changes)
    );
    diff::print_changes(&changes);
    if dry_run {
        println!("dry run: nothing written");
    }
    Ok(())
}

fn conflicts(sides: &[&Database], merged: &Database) -> Vec<Conflict> {
    let mut choices: BTreeMap<(Key, MeasuredOn), Vec<(usize, Record)>> = BTreeMap::new();
    for (side, db) in sides.iter().enumerate() {
        for (key, record) in db.winners() {
            choices.entry(key).or_default().push((side, record.clone()));
        }
    }
    let winners = merged.winners();
    choices
        .into_iter()
        .filter(|(_, choices)| choices.iter().any(|(_, r)| *r != choices[0].1))
        .filter_map(|(key, choices)| {
            let winner = (*winners.get(&key)?).clone();
            Some(Conflict {
                key,
                choices,
                winner,
            })
        })
        .collect()
}

fn loss<'a>(choice: &Record, winner: &'a Record, merged: &'a Database) -> Loss<'a> {
    if beats(winner, choice) {
        return Loss::Beaten(winner);
    }
    let beater = merged.records.iter().find(|r| {
        r.provenance.measured_on == choice.provenance.measured_on
            && r.key() == choice.key()
            && beats(r, choice)
    });
    match beater {
        Some(r) => Loss::Beaten(r),
        None => Loss::WithinNoise,
    }
}

fn print_conflict(c: &Conflict, labels: &[String], merged: &Database) {
    let (key, device) = &c.key;
    let vgpu = if *device == MeasuredOn::Vgpu {
        " [vgpu]"
    } else {
        ""
    };
    println!(
        "conflict: `{}` {} on {}{vgpu}",
        c.winner.kernel,
        shape(&c.winner),
        key.gpu
    );
    let mut rows = Vec::new();
    for (side, choice) in &c.choices {
        let verdict = if *choice == c.winner {
            "won".to_owned()
        } else {
            match loss(choice, &c.winner, merged) {
                Loss::Beaten(by) => format!(
                    "lost: beaten beyond noise by {} ({})",
                    by.schedule.to_json(),
                    median(by)
                ),
                Loss::WithinNoise => format!(
                    "lost: incumbent within noise ({}, measured {}, stays)",
                    c.winner.schedule.to_json(),
                    c.winner.provenance.date
                ),
            }
        };
        rows.push(vec![
            format!("  {}", labels[*side]),
            choice.schedule.to_json(),
            median(choice),
            choice.provenance.date.clone(),
            verdict,
        ]);
    }
    if !c.choices.iter().any(|(_, r)| *r == c.winner) {
        rows.push(vec![
            "  (merged)".to_owned(),
            c.winner.schedule.to_json(),
            median(&c.winner),
            c.winner.provenance.date.clone(),
            "won: kept by one side, not its choice".to_owned(),
        ]);
    }
    print_table(&rows);
}

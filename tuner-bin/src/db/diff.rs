//! `db diff`: what changed between two databases, per key and kind of
//! device, for reviewing a pull request.
//!
//! Records are compared as sets, so a file only re-ordered (or re-written
//! in canonical form) shows no change.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use ktune_core::db::{Database, Key, MeasuredOn, Record};
use serde_json::{Value, json};

use super::{median, open_existing, print_table, ratio, shape};

/// How a key's records changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// The key has records only in the new database.
    Added,
    /// The key has records only in the old database.
    Removed,
    /// The key's chosen record changed.
    Winner,
    /// The chosen record is the same; others were added or removed.
    Records,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Added => "added",
            Kind::Removed => "removed",
            Kind::Winner => "winner changed",
            Kind::Records => "winner kept",
        }
    }
}

/// One key whose records differ.
pub(super) struct Change<'a> {
    pub(super) kind: Kind,
    pub(super) device: MeasuredOn,
    /// The record chosen for the key in each database.
    pub(super) old: Option<&'a Record>,
    pub(super) new: Option<&'a Record>,
    /// Any record of the key, for its kernel, shape and GPU.
    pub(super) sample: &'a Record,
    pub(super) added: usize,
    pub(super) removed: usize,
}

impl Change<'_> {
    /// The new chosen record's speed-up over the old one.
    fn speedup(&self) -> Option<f64> {
        Some(self.old?.stats.median_us / self.new?.stats.median_us)
    }
}

type Group = (String, Key, MeasuredOn);

fn groups(db: &Database) -> BTreeMap<Group, Vec<&Record>> {
    let mut groups: BTreeMap<Group, Vec<&Record>> = BTreeMap::new();
    for r in &db.records {
        groups
            .entry((r.kernel.clone(), r.key(), r.provenance.measured_on))
            .or_default()
            .push(r);
    }
    groups
}

/// The keys whose records differ, by kernel name, then key.
pub(super) fn diff<'a>(old: &'a Database, new: &'a Database) -> Vec<Change<'a>> {
    let (old_groups, new_groups) = (groups(old), groups(new));
    let (old_winners, new_winners) = (old.winners(), new.winners());
    let mut names: Vec<&Group> = old_groups.keys().chain(new_groups.keys()).collect();
    names.sort();
    names.dedup();
    let mut changes = Vec::new();
    for group in names {
        let before = old_groups.get(group).map_or(&[][..], Vec::as_slice);
        let after = new_groups.get(group).map_or(&[][..], Vec::as_slice);
        let removed = before.iter().filter(|r| !after.contains(r)).count();
        let added = after.iter().filter(|r| !before.contains(r)).count();
        let Some(sample) = before.first().or(after.first()).copied() else {
            continue;
        };
        if added == 0 && removed == 0 {
            continue;
        }
        let id = (group.1.clone(), group.2);
        let (old_w, new_w) = (old_winners.get(&id).copied(), new_winners.get(&id).copied());
        let kind = match (before.is_empty(), after.is_empty()) {
            (true, _) => Kind::Added,
            (_, true) => Kind::Removed,
            _ if old_w != new_w => Kind::Winner,
            _ => Kind::Records,
        };
        changes.push(Change {
            kind,
            device: group.2,
            old: old_w,
            new: new_w,
            sample,
            added,
            removed,
        });
    }
    changes
}

pub(super) fn run(old_path: &Path, new_path: &Path, json: bool) -> Result<()> {
    let old = open_existing(old_path)?;
    let new = open_existing(new_path)?;
    let changes = diff(&old, &new);
    if json {
        let value = json!({
            "old": old_path.display().to_string(),
            "new": new_path.display().to_string(),
            "changes": changes.iter().map(to_json).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        println!(
            "{} → {}: {}",
            old_path.display(),
            new_path.display(),
            summary(&changes)
        );
        print_changes(&changes);
    }
    Ok(())
}

/// `1 added, 2 winners changed` or `no changes`.
pub(super) fn summary(changes: &[Change<'_>]) -> String {
    let parts: Vec<String> = [Kind::Added, Kind::Removed, Kind::Winner, Kind::Records]
        .into_iter()
        .filter_map(|kind| {
            let n = changes.iter().filter(|c| c.kind == kind).count();
            (n > 0).then(|| format!("{n} {}", kind.name()))
        })
        .collect();
    if parts.is_empty() {
        "no changes".to_owned()
    } else {
        parts.join(", ")
    }
}

pub(super) fn print_changes(changes: &[Change<'_>]) {
    if changes.is_empty() {
        return;
    }
    let header = [
        "change",
        "kernel",
        "shape",
        "GPU",
        "old schedule",
        "old median",
        "new schedule",
        "new median",
        "new/old",
        "vs default",
    ];
    let mut rows = vec![header.map(String::from).to_vec()];
    for c in changes {
        let mut change = c.kind.name().to_owned();
        if c.kind == Kind::Records {
            change.push_str(&format!(" (+{} -{})", c.added, c.removed));
        }
        if c.device == MeasuredOn::Vgpu {
            change.push_str(" [vgpu]");
        }
        let schedule = |r: Option<&Record>| r.map_or("-".to_owned(), |r| r.schedule.to_json());
        let time = |r: Option<&Record>| r.map_or("-".to_owned(), median);
        let baseline = match (
            c.old.and_then(Record::speedup),
            c.new.and_then(Record::speedup),
        ) {
            (Some(old), Some(new)) if c.kind != Kind::Records => {
                format!("{} → {}", ratio(Some(old)), ratio(Some(new)))
            }
            (old, None) if c.kind == Kind::Removed => ratio(old),
            (_, new) => ratio(new),
        };
        rows.push(vec![
            change,
            c.sample.kernel.clone(),
            shape(c.sample),
            c.sample.gpu.fingerprint().to_string(),
            schedule(c.old),
            time(c.old),
            schedule(c.new),
            time(c.new),
            ratio(c.speedup()),
            baseline,
        ]);
    }
    print_table(&rows);
}

fn to_json(c: &Change<'_>) -> Value {
    let side = |r: Option<&Record>| {
        r.map_or(Value::Null, |r| {
            json!({
                "schedule": r.schedule,
                "median_us": r.stats.median_us,
                "low_us": r.stats.low_us,
                "high_us": r.stats.high_us,
                "baseline_us": r.stats.baseline_us,
                "speedup_over_default": r.speedup(),
                "date": r.provenance.date,
            })
        })
    };
    let r = c.sample;
    json!({
        "change": match c.kind {
            Kind::Added => "added",
            Kind::Removed => "removed",
            Kind::Winner => "winner",
            Kind::Records => "records",
        },
        "kernel": r.kernel,
        "checksum": r.checksum,
        "shape": r.shape,
        "dtype": r.dtype,
        "gpu": r.gpu.fingerprint().to_string(),
        "measured_on": r.provenance.measured_on,
        "old": side(c.old),
        "new": side(c.new),
        "speedup": c.speedup(),
        "records_added": c.added,
        "records_removed": c.removed,
    })
}

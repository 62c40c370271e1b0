//! Hysteresis as an order-independent merge.
//!
//! Replacing a winner "when the newcomer is faster beyond noise" depends on
//! the order of arrival, because "within noise" is not transitive. Instead,
//! a database keeps, per key, every record that no other record of the key
//! [`beats`]. `beats` is an interval order (transitive and irreflexive), so
//! the kept set is a function of the set of all records ever inserted:
//! insertion is a union followed by this pruning, which is commutative,
//! associative and idempotent. The winner is the oldest kept record, so an
//! incumbent stays until something beats it.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use super::{Database, FORMAT_VERSION, Key, MeasuredOn, Record};

/// The relative margin by which a record must beat another, beyond their
/// confidence intervals not overlapping.
pub const MARGIN: f64 = 0.02;

/// Whether `a` is faster than `b` beyond noise: `a`'s interval, widened by
/// [`MARGIN`], lies entirely below `b`'s.
pub fn beats(a: &Record, b: &Record) -> bool {
    let (_, a_high) = interval(a);
    let (b_low, _) = interval(b);
    a_high + MARGIN * a_high.abs() < b_low
}

// Ordered even when the stored bounds are not, so that `beats` stays an
// interval order on any input.
fn interval(r: &Record) -> (f64, f64) {
    let s = &r.stats;
    let low = s.low_us.min(s.median_us).min(s.high_us);
    let high = s.low_us.max(s.median_us).max(s.high_us);
    (low, high)
}

/// Oldest first; ties broken by the schedule, then by the whole record, so
/// that the choice never depends on the order records arrived in.
pub(super) fn age_order(a: &Record, b: &Record) -> Ordering {
    a.provenance
        .date
        .cmp(&b.provenance.date)
        .then_with(|| a.schedule.to_json().cmp(&b.schedule.to_json()))
        .then_with(|| json(a).cmp(&json(b)))
}

fn json(r: &Record) -> String {
    serde_json::to_string(r).unwrap_or_default()
}

impl Database {
    /// Adds measurements, then drops every record another record of its key
    /// (measured on the same kind of device) beats.
    pub fn insert(&mut self, records: impl IntoIterator<Item = Record>) {
        self.records.extend(records);
        self.normalize();
    }

    /// The union of two databases, pruned as by [`Database::insert`].
    pub fn merge(&mut self, other: Database) {
        self.insert(other.records);
    }

    /// The record chosen for each key and kind of device: the oldest of the
    /// key's records that no other of the same device kind beats. For
    /// [`MeasuredOn::Gpu`] it is [`Database::winner`].
    pub fn winners(&self) -> BTreeMap<(Key, MeasuredOn), &Record> {
        let mut groups: BTreeMap<(Key, MeasuredOn), Vec<&Record>> = BTreeMap::new();
        for r in &self.records {
            groups
                .entry((r.key(), r.provenance.measured_on))
                .or_default()
                .push(r);
        }
        groups
            .into_iter()
            .filter_map(|(group, members)| {
                let chosen = members
                    .iter()
                    .copied()
                    .filter(|r| !members.iter().any(|other| beats(other, r)))
                    .min_by(|a, b| age_order(a, b))?;
                Some((group, chosen))
            })
            .collect()
    }

    /// Normalizes, then keeps only each key's [winner](Database::winners)
    /// (per kind of device) and returns the records it drops.
    ///
    /// No key's choice changes. After [`Database::normalize`] a key's
    /// records are exactly those no other record of the key beats, and the
    /// winner is the oldest of them. Dropping one of the others cannot
    /// make the winner beaten (nothing left beats it, and removing records
    /// adds no beaters), nor make an older record unbeaten (every record
    /// left was already unbeaten), so the winner stays the oldest unbeaten
    /// record of what is left.
    ///
    /// What compaction gives up is evidence for later merges: a dropped
    /// record would have beaten some incoming records, or outlived a
    /// winner that a newcomer beats. After compaction the merge is still
    /// order-independent, but over the compacted set: a newcomer that
    /// beats the winner replaces it, where the full set might have chosen
    /// a dropped record that the newcomer did not beat.
    pub fn compact(&mut self) -> Vec<Record> {
        self.normalize();
        let keep: Vec<Record> = self.winners().into_values().cloned().collect();
        let all = std::mem::take(&mut self.records);
        let (kept, dropped): (Vec<Record>, Vec<Record>) =
            all.into_iter().partition(|r| keep.contains(r));
        self.records = kept;
        dropped
    }

    /// Puts the database in its canonical form: current format version,
    /// records sorted by kernel, key, device kind, date and content,
    /// duplicates and beaten records removed.
    pub fn normalize(&mut self) {
        self.version = FORMAT_VERSION;
        let records = std::mem::take(&mut self.records);
        let mut keyed: Vec<(SortKey, Record)> =
            records.into_iter().map(|r| (SortKey::of(&r), r)).collect();
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        keyed.dedup_by(|a, b| a.0 == b.0);

        let mut groups: BTreeMap<_, Vec<usize>> = BTreeMap::new();
        for (i, (_, r)) in keyed.iter().enumerate() {
            groups
                .entry((r.key(), r.provenance.measured_on))
                .or_default()
                .push(i);
        }
        let mut beaten = vec![false; keyed.len()];
        for members in groups.values() {
            for &i in members {
                beaten[i] = members
                    .iter()
                    .any(|&j| j != i && beats(&keyed[j].1, &keyed[i].1));
            }
        }
        self.records = keyed
            .into_iter()
            .zip(beaten)
            .filter(|(_, beaten)| !beaten)
            .map(|((_, r), _)| r)
            .collect();
    }
}

/// The file order: the key's parts, most readable first, then age. The
/// whole record's JSON last makes it total, and equal keys mean duplicates.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct SortKey {
    kernel: String,
    checksum: String,
    shape: BTreeMap<String, u32>,
    dtype: crate::DType,
    gpu: super::Fingerprint,
    measured_on: super::MeasuredOn,
    date: String,
    schedule: String,
    json: String,
}

impl SortKey {
    fn of(r: &Record) -> SortKey {
        SortKey {
            kernel: r.kernel.clone(),
            checksum: r.checksum.clone(),
            shape: r.shape.clone(),
            dtype: r.dtype,
            gpu: r.gpu.fingerprint(),
            measured_on: r.provenance.measured_on,
            date: r.provenance.date.clone(),
            schedule: r.schedule.to_json(),
            json: json(r),
        }
    }
}

//! The tuning database file: order-independent inserts, concurrent writers
//! in separate processes, corrupt files left untouched.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use ktune_build::db;
use ktune_core::db::{Database, Gpu, MeasuredOn, Provenance, Record, Stats};
use ktune_core::schedule::Schedule;
use ktune_core::{DType, SmVersion};
use proptest::prelude::*;

const CHILD_FILE: &str = "KTUNE_DB_TEST_CHILD_FILE";
const CHILD_RECORDS: &str = "KTUNE_DB_TEST_CHILD_RECORDS";

/// A record from a few small numbers, so that records often share a key
/// and often lie within each other's noise.
fn record(kernel: u8, gpu: u8, block: u8, median: u8, spread: u8, day: u8) -> Record {
    let kernel = ["add", "softmax", "matmul"][usize::from(kernel % 3)];
    let (name, sm) = [
        ("NVIDIA H100 80GB HBM3", SmVersion::Sm90),
        ("NVIDIA A100-SXM4-40GB", SmVersion::Sm80),
    ][usize::from(gpu % 2)];
    let median = 10.0 + f64::from(median % 8);
    let spread = [0.0, 0.1, 0.5, 2.0][usize::from(spread % 4)];
    Record {
        kernel: kernel.to_owned(),
        checksum: format!("{:0>32x}", kernel.len()),
        canonical: format!("kernel {kernel}\n"),
        shape: BTreeMap::from([("N".to_owned(), 1 << 20)]),
        dtype: DType::F32,
        gpu: Gpu {
            name: name.to_owned(),
            compute_capability: sm.into(),
            sm_count: sm.limits().sm_count,
            driver: "570.86.15".to_owned(),
            cuda: "12.8".to_owned(),
            clocks_mhz: None,
        },
        schedule: Schedule::Generic {
            block: 64 << (block % 3),
        },
        stats: Stats {
            median_us: median,
            low_us: median - spread,
            high_us: median + spread,
            samples: 100,
            baseline_us: Some(25.0),
            throughput: None,
        },
        provenance: Provenance {
            ktune_version: "0.1.0".to_owned(),
            generator_version: ktune_core::GENERATOR_VERSION,
            measured_on: if day % 5 == 4 {
                MeasuredOn::Vgpu
            } else {
                MeasuredOn::Gpu
            },
            date: format!("2026-11-{:02}T12:00:00Z", 1 + day % 5),
        },
    }
}

fn arb_record() -> impl Strategy<Value = Record> {
    any::<(u8, u8, u8, u8, u8, u8)>().prop_map(|(k, g, b, m, s, d)| record(k, g, b, m, s, d))
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn inserts_in_any_order_give_the_same_bytes(
        batches in prop::collection::vec(prop::collection::vec(arb_record(), 1..4), 1..6),
        rotate in any::<usize>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let forward = dir.path().join("forward/ktune.json");
        let backward = dir.path().join("backward/ktune.json");
        let rotated = dir.path().join("rotated/ktune.json");
        for batch in &batches {
            db::insert(&forward, batch.clone()).unwrap();
        }
        for batch in batches.iter().rev() {
            db::insert(&backward, batch.iter().rev().cloned()).unwrap();
        }
        let mut all: Vec<Record> = batches.concat();
        let n = all.len();
        all.rotate_left(rotate % n);
        for r in all {
            db::insert(&rotated, [r]).unwrap();
        }
        prop_assert_eq!(read(&forward), read(&backward));
        prop_assert_eq!(read(&forward), read(&rotated));
        let parsed = db::open(&forward).unwrap();
        prop_assert_eq!(parsed.to_text().into_bytes(), read(&forward));
    }
}

/// Run as a child process by `concurrent_processes_lose_nothing`: inserts
/// the records of a JSON file one at a time. Does nothing otherwise.
#[test]
fn child_process_inserts() {
    let (Some(file), Some(records)) = (
        std::env::var_os(CHILD_FILE),
        std::env::var_os(CHILD_RECORDS),
    ) else {
        return;
    };
    let records: Vec<Record> = serde_json::from_slice(&read(Path::new(&records))).unwrap();
    for r in records {
        db::insert(Path::new(&file), [r]).unwrap();
    }
}

#[test]
fn concurrent_processes_lose_nothing() {
    const PROCESSES: usize = 6;
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("tuning/ktune.json");
    let sequential = dir.path().join("sequential.json");
    let records: Vec<Record> = (0..60u8)
        .map(|i| {
            let x = i.wrapping_mul(37).wrapping_add(11);
            record(i, i / 3, x, x / 7, i / 2, x / 5)
        })
        .collect();

    let children: Vec<_> = (0..PROCESSES)
        .map(|p| {
            let mine: Vec<&Record> = records.iter().skip(p).step_by(PROCESSES).collect();
            let list = dir.path().join(format!("child{p}.json"));
            std::fs::write(&list, serde_json::to_vec(&mine).unwrap()).unwrap();
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "child_process_inserts",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_FILE, &shared)
                .env(CHILD_RECORDS, &list)
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }

    db::insert(&sequential, records.clone()).unwrap();
    assert_eq!(
        String::from_utf8(read(&shared)).unwrap(),
        String::from_utf8(read(&sequential)).unwrap()
    );
    let mut all = Database::new();
    all.insert(records.clone());
    let file = db::open(&shared).unwrap();
    let mut winners = 0;
    for r in &records {
        if let Some(w) = all.winner(&r.key()) {
            assert!(file.records.contains(w), "lost the winner {w:?}");
            winners += 1;
        }
    }
    assert!(winners > 0);
}

#[test]
fn a_corrupt_file_is_reported_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ktune.json");
    db::insert(&path, (0..4).map(|i| record(i, i, i, i, 0, 0))).unwrap();
    let good = String::from_utf8(read(&path)).unwrap();

    let wrong_type = {
        let at = good.rfind("\"samples\": 100").unwrap();
        format!("{}\"samples\": \"100\"{}", &good[..at], &good[at + 14..])
    };
    let cases = [
        (
            "truncated",
            good[..good.len() * 2 / 3].to_owned(),
            "git checkout",
        ),
        (
            "invalid JSON",
            good.replacen("\"median_us\"", "median_us", 1),
            "git checkout",
        ),
        ("wrong type", wrong_type.clone(), "record 3"),
        (
            "future version",
            good.replacen("\"version\": 1", "\"version\": 2", 1),
            "upgrade ktune",
        ),
    ];
    for (what, text, hint) in cases {
        std::fs::write(&path, &text).unwrap();
        let e = db::insert(&path, [record(5, 0, 0, 0, 0, 1)]).unwrap_err();
        let message = e.to_string();
        assert!(
            message.starts_with(&format!("{}:", path.display())),
            "{what}: {message}"
        );
        assert!(message.contains(hint), "{what}: {message}");
        let line: usize = message[path.display().to_string().len() + 1..]
            .split(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            line >= 1 && line <= text.lines().count().max(1),
            "{what}: {message}"
        );
        assert_eq!(read(&path), text.as_bytes(), "{what}: the file changed");
        assert!(db::open(&path).is_err(), "{what}");
    }
    let line = wrong_type
        .lines()
        .position(|l| l.contains("\"100\""))
        .unwrap()
        + 1;
    std::fs::write(&path, &wrong_type).unwrap();
    let e = db::open(&path).unwrap_err().to_string();
    assert!(e.contains(&format!(":{line}:")), "{e}");
}

#[test]
fn a_missing_file_is_an_empty_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("none/ktune.json");
    assert_eq!(db::open(&path).unwrap(), Database::new());
    assert!(!path.exists());
    assert_eq!(db::DEFAULT_PATH, "tuning/ktune.json");
}

/// A file made empty (`touch tuning/ktune.json`, to start one) is an empty
/// database too, and the first insert writes it whole.
#[test]
fn an_empty_file_is_an_empty_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ktune.json");
    std::fs::write(&path, " \n").unwrap();
    assert_eq!(db::open(&path).unwrap(), Database::new());
    let one = record(1, 1, 8, 10, 1, 1);
    db::insert(&path, [one.clone()]).unwrap();
    assert_eq!(db::open(&path).unwrap().records, [one]);
}

/// A search that finds its key's chosen schedule again banks nothing: the
/// incumbent keeps its record and the file its bytes (nothing rebuilds).
/// Another schedule is inserted as `insert` would.
#[test]
fn banking_the_incumbents_schedule_again_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ktune.json");
    // add on the H100, 128 threads, day 1; then the same schedule, day 2,
    // within noise of it: `insert` would keep both.
    let incumbent = record(0, 0, 1, 2, 1, 0);
    let twin = record(0, 0, 1, 2, 1, 1);
    db::bank(&path, [incumbent.clone()]).unwrap();
    let before = read(&path);
    db::bank(&path, [twin.clone()]).unwrap();
    assert_eq!(read(&path), before);
    assert_eq!(
        db::open(&path).unwrap().records,
        std::slice::from_ref(&incumbent)
    );
    let mut both = Database::new();
    both.insert([incumbent.clone(), twin.clone()]);
    assert_eq!(both.records.len(), 2, "insert keeps the twin");
    // An incumbent of another code generator is no incumbent: its schedule
    // found again is recorded anew.
    let old = dir.path().join("old.json");
    let mut older = incumbent.clone();
    older.provenance.generator_version -= 1;
    db::bank(&old, [older.clone()]).unwrap();
    db::bank(&old, [twin.clone()]).unwrap();
    assert_eq!(db::open(&old).unwrap().records, [older, twin]);
    // 256 threads, faster beyond noise: another schedule, inserted, and
    // the incumbent it beats dropped.
    let other = record(0, 0, 2, 0, 1, 1);
    db::bank(&path, [other.clone()]).unwrap();
    assert_eq!(db::open(&path).unwrap().records, [other]);
}

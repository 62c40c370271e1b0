//! The tuning database's pure part: text form, order-independent merge with
//! hysteresis, parse errors, validation.

use std::collections::BTreeMap;

use ktune_core::db::{
    ComputeCapability, Database, FORMAT_VERSION, Gpu, MeasuredOn, ProblemKind, Provenance, Record,
    Stats,
};
use ktune_core::schedule::{MmaTiles, Schedule, Tiles};
use ktune_core::{DType, SmVersion};
use proptest::prelude::*;

fn record(kernel: &str, block: u32, median: f64, spread: f64, date: &str) -> Record {
    Record {
        kernel: kernel.to_owned(),
        checksum: format!("{:0>32}", kernel.len()),
        canonical: String::new(),
        shape: BTreeMap::from([("N".to_owned(), 4096)]),
        dtype: DType::F32,
        gpu: Gpu {
            name: "NVIDIA H100 80GB HBM3".to_owned(),
            compute_capability: SmVersion::Sm90.into(),
            sm_count: 132,
            driver: "570.86".to_owned(),
            cuda: "12.8".to_owned(),
            clocks_mhz: None,
        },
        schedule: Schedule::Generic { block },
        stats: Stats {
            median_us: median,
            low_us: median - spread,
            high_us: median + spread,
            samples: 50,
            baseline_us: Some(20.0),
            throughput: None,
        },
        provenance: Provenance {
            ktune_version: "0.1.0".to_owned(),
            generator_version: ktune_core::GENERATOR_VERSION,
            measured_on: MeasuredOn::Gpu,
            date: date.to_owned(),
        },
    }
}

fn db_of(records: Vec<Record>) -> Database {
    let mut db = Database::new();
    db.insert(records);
    db
}

prop_compose! {
    fn arb_record()(
        kernel in prop::sample::select(vec!["add", "softmax"]),
        block in prop::sample::select(vec![64u32, 128, 256]),
        // Few distinct medians and spreads, so that records often overlap
        // (within noise) and often do not (beyond noise).
        median in 10u32..20,
        spread in prop::sample::select(vec![0.0, 0.1, 0.5, 2.0]),
        day in 1u32..4,
        vgpu in prop::bool::weighted(0.2),
    ) -> Record {
        let mut r = record(kernel, block, f64::from(median), spread, &format!("2026-11-0{day}T00:00:00Z"));
        if vgpu {
            r.provenance.measured_on = MeasuredOn::Vgpu;
        }
        r
    }
}

proptest! {
    #[test]
    fn insertion_order_does_not_matter(
        records in prop::collection::vec(arb_record(), 0..12),
        seed in any::<u64>(),
    ) {
        let mut shuffled = records.clone();
        // A deterministic permutation from the seed.
        let n = shuffled.len();
        for i in (1..n).rev() {
            let j = (seed.wrapping_mul(6364136223846793005).wrapping_add(i as u64) >> 33) as usize % (i + 1);
            shuffled.swap(i, j);
        }
        let one_by_one = records.iter().fold(Database::new(), |mut db, r| {
            db.insert([r.clone()]);
            db
        });
        prop_assert_eq!(db_of(records).to_text(), one_by_one.to_text());
        prop_assert_eq!(db_of(shuffled).to_text(), one_by_one.to_text());
    }

    #[test]
    fn merge_is_associative_commutative_idempotent(
        a in prop::collection::vec(arb_record(), 0..6),
        b in prop::collection::vec(arb_record(), 0..6),
        c in prop::collection::vec(arb_record(), 0..6),
    ) {
        let (a, b, c) = (db_of(a), db_of(b), db_of(c));
        let merged = |x: &Database, y: &Database| {
            let mut x = x.clone();
            x.merge(y.clone());
            x
        };
        prop_assert_eq!(merged(&a, &b).to_text(), merged(&b, &a).to_text());
        prop_assert_eq!(
            merged(&merged(&a, &b), &c).to_text(),
            merged(&a, &merged(&b, &c)).to_text()
        );
        prop_assert_eq!(merged(&a, &a).to_text(), a.to_text());
    }

    #[test]
    fn text_round_trips(records in prop::collection::vec(arb_record(), 0..8)) {
        let db = db_of(records);
        let text = db.to_text();
        let parsed = Database::parse(&text).unwrap();
        prop_assert_eq!(&parsed, &db);
        prop_assert_eq!(parsed.to_text(), text);
    }

    #[test]
    fn compaction_keeps_every_choice_and_only_the_choices(
        records in prop::collection::vec(arb_record(), 0..12),
    ) {
        let db = db_of(records);
        let mut compact = db.clone();
        let dropped = compact.compact();
        prop_assert_eq!(compact.records.len() + dropped.len(), db.records.len());
        prop_assert_eq!(&compact.winners(), &db.winners());
        prop_assert_eq!(compact.records.len(), db.winners().len());
        for r in &db.records {
            prop_assert_eq!(compact.winner(&r.key()), db.winner(&r.key()));
        }
        prop_assert_eq!(Database::parse(&compact.to_text()).unwrap(), compact);
    }

    #[test]
    fn the_winner_is_never_beaten_nor_virtual(records in prop::collection::vec(arb_record(), 1..10)) {
        let db = db_of(records);
        for r in &db.records {
            if let Some(w) = db.winner(&r.key()) {
                prop_assert_eq!(w.provenance.measured_on, MeasuredOn::Gpu);
                for other in &db.records {
                    let rival = other.key() == w.key() && other.provenance.measured_on == MeasuredOn::Gpu;
                    prop_assert!(!(rival && ktune_core::db::beats(other, w)));
                }
            }
        }
    }
}

#[test]
fn an_incumbent_stays_until_beaten_beyond_noise() {
    let incumbent = record("add", 128, 10.0, 0.2, "2026-11-01T00:00:00Z");
    let close = record("add", 256, 9.8, 0.2, "2026-11-02T00:00:00Z");
    let mut db = db_of(vec![incumbent.clone(), close.clone()]);
    assert_eq!(db.records.len(), 2, "within noise: both kept");
    assert_eq!(db.winner(&incumbent.key()), Some(&incumbent));

    let faster = record("add", 64, 8.0, 0.1, "2026-11-03T00:00:00Z");
    db.insert([faster.clone()]);
    assert_eq!(db.records, vec![faster.clone()]);
    assert_eq!(db.winner(&incumbent.key()), Some(&faster));
}

#[test]
fn virtual_gpu_records_are_kept_but_never_win() {
    let mut v = record("add", 128, 1.0, 0.0, "2026-11-01T00:00:00Z");
    v.provenance.measured_on = MeasuredOn::Vgpu;
    let real = record("add", 256, 10.0, 0.1, "2026-11-02T00:00:00Z");
    let db = db_of(vec![v.clone(), real.clone()]);
    assert_eq!(db.records.len(), 2);
    assert_eq!(db.winner(&real.key()), Some(&real));
    assert_eq!(db_of(vec![v.clone()]).winner(&v.key()), None);
}

#[test]
fn the_text_form_is_stable_and_adding_a_record_only_adds_lines() {
    let a = record("add", 128, 10.0, 0.2, "2026-11-01T00:00:00Z");
    let b = record("softmax", 128, 10.0, 0.2, "2026-11-01T00:00:00Z");
    let c = record("zeta", 128, 10.0, 0.2, "2026-11-01T00:00:00Z");
    let text = db_of(vec![b.clone()]).to_text();
    assert!(text.starts_with(
        "{\n  \"version\": 1,\n  \"records\": [\n    {\n      \"kernel\": \"softmax\",\n"
    ));
    assert!(text.ends_with("    }\n  ]\n}\n"));
    for added in [a, c] {
        let more = db_of(vec![b.clone(), added]).to_text();
        let old: Vec<&str> = text.lines().collect();
        let new: Vec<&str> = more.lines().collect();
        // `old` is a subsequence of `new`: nothing changed, lines were added.
        let mut it = new.iter();
        assert!(old.iter().all(|line| it.any(|n| n == line)), "{more}");
    }
    assert_eq!(
        Database::new().to_text(),
        "{\n  \"version\": 1,\n  \"records\": [\n  ]\n}\n"
    );
}

#[test]
fn parse_errors_name_the_place_and_what_to_do() {
    let text = db_of(vec![
        record("add", 128, 10.0, 0.2, "2026-11-01T00:00:00Z"),
        record("softmax", 128, 10.0, 0.2, "2026-11-01T00:00:00Z"),
    ])
    .to_text();

    let truncated = &text[..text.len() / 2];
    let e = Database::parse(truncated).unwrap_err();
    assert!(e.message.contains("git checkout"), "{e}");
    assert_eq!(e.line, truncated.lines().count(), "{e}");

    let wrong = text.replacen("\"samples\": 50", "\"samples\": \"many\"", 2);
    let wrong = wrong.replacen("\"samples\": \"many\"", "\"samples\": 50", 1);
    let e = Database::parse(&wrong).unwrap_err();
    let line = wrong.lines().position(|l| l.contains("\"many\"")).unwrap() + 1;
    assert_eq!(e.line, line, "{e}");
    let column = wrong
        .lines()
        .nth(line - 1)
        .unwrap()
        .find("\"many\"")
        .unwrap()
        + 1;
    assert!(e.column >= column, "{e}");
    assert!(e.message.contains("record 1 (kernel `softmax`)"), "{e}");

    let future = text.replace(&format!("\"version\": {FORMAT_VERSION}"), "\"version\": 7");
    let e = Database::parse(&future).unwrap_err();
    assert_eq!((e.line, e.column), (2, 3), "{e}");
    assert!(e.message.contains("newer ktune (format 7"), "{e}");
    assert!(e.message.contains("upgrade ktune"), "{e}");

    let e = Database::parse("[1, 2]").unwrap_err();
    assert!(e.message.contains("not a ktune database"), "{e}");
}

/// A misspelt or unknown field is an error at its key, never dropped: a
/// schedule read without its `stages` would ship a schedule nobody
/// measured, and the next write would lose the field.
#[test]
fn unknown_fields_are_errors_named_at_their_key() {
    let mut mma = record("mm", 128, 10.0, 0.2, "2026-11-01T00:00:00Z");
    mma.schedule = Schedule::Mma(MmaTiles {
        block_m: 128,
        block_n: 128,
        block_k: 32,
        warp_m: 64,
        warp_n: 64,
        stages: 4,
        group_m: 1,
        split_k: 1,
        min_blocks: 0,
        swizzle: 1,
        prefetch: 0,
        wgmma: 0,
        tail_split: 1,
        persistent: 0,
        producer: 0,
        tma: 0,
        cluster_m: 1,
    });
    let text = db_of(vec![
        record("add", 128, 10.0, 0.2, "2026-11-01T00:00:00Z"),
        mma,
    ])
    .to_text();
    let at = |text: &str, needle: &str| {
        let line = text.lines().position(|l| l.contains(needle)).unwrap();
        let column = text.lines().nth(line).unwrap().find(needle).unwrap();
        (line + 1, column + 1)
    };

    let knob = text.replace("\"stages\": 4", "\"stage\": 4");
    let e = Database::parse(&knob).unwrap_err();
    assert_eq!((e.line, e.column), at(&knob, "\"stage\""), "{e}");
    assert!(
        e.message
            .starts_with("record 1 (kernel `mm`): unknown field `stage`, expected one of"),
        "{e}"
    );
    assert!(e.message.ends_with("fix this record or remove it"), "{e}");

    let field = text.replacen(
        "\"dtype\": \"f32\",",
        "\"dtype\": \"f32\",\n      \"dtyp\": \"f32\",",
        1,
    );
    let e = Database::parse(&field).unwrap_err();
    assert_eq!((e.line, e.column), at(&field, "\"dtyp\""), "{e}");
    assert!(
        e.message
            .starts_with("record 0 (kernel `add`): unknown field `dtyp`"),
        "{e}"
    );

    let nested = text.replacen("\"samples\": 50", "\"samples\": 50, \"sample\": 50", 1);
    let e = Database::parse(&nested).unwrap_err();
    assert_eq!((e.line, e.column), at(&nested, "\"sample\""), "{e}");

    // An unknown key that is a known one elsewhere in the record (the
    // GPU's `name`) is placed where it is unknown.
    let generator = format!("\"generator_version\": {}", ktune_core::GENERATOR_VERSION);
    let misplaced = text.replacen(&generator, &format!("{generator}, \"name\": \"me\""), 1);
    let e = Database::parse(&misplaced).unwrap_err();
    assert!(e.message.contains("unknown field `name`"), "{e}");
    assert_eq!(
        (e.line, e.column),
        at(&misplaced, "\"name\": \"me\""),
        "{e}"
    );
    let accented = misplaced.replacen("\"me\"", "\"mé\", \"ñame\": \"ü\"", 1);
    let e = Database::parse(&accented).unwrap_err();
    assert_eq!((e.line, e.column), at(&accented, "\"name\": \"mé\""), "{e}");
    let wrong_type = text.replacen("\"samples\": 50", "\"samples\": \"fïfty\"", 1);
    let e = Database::parse(&wrong_type).unwrap_err();
    assert_eq!(e.line, at(&wrong_type, "fïfty").0, "{e}");

    // A knob a newer code generator added: upgrade, rather than fix.
    let newer = knob.replacen(
        &format!("\"generator_version\": {}", ktune_core::GENERATOR_VERSION),
        "\"generator_version\": 99",
        2,
    );
    let e = Database::parse(&newer).unwrap_err();
    assert!(e.message.contains("unknown field `stage`"), "{e}");
    assert!(
        e.message.ends_with(&format!(
            "it was written by a newer ktune (code generator 99, this one's is {}): upgrade ktune, or remove the record",
            ktune_core::GENERATOR_VERSION
        )),
        "{e}"
    );

    let top = text.replace("\"records\"", "\"recods\"");
    let e = Database::parse(&top).unwrap_err();
    assert!(e.message.starts_with("unknown field `recods`"), "{e}");
    assert!(
        e.message
            .contains("a database holds `version` and `records`"),
        "{e}"
    );
    assert_eq!(
        Schedule::from_json(
            r#"{"class":"rows","threads_per_row":64,"rows_per_block":2,"vector":4,"cach":1}"#
        )
        .unwrap_err()
        .to_string()
        .split(',')
        .next(),
        Some("unknown field `cach`")
    );
}

#[test]
fn invalid_records_are_kept_and_reported() {
    let mut unknown = record("add", 128, 10.0, 0.2, "2026-11-01T00:00:00Z");
    unknown.gpu.compute_capability = ComputeCapability {
        major: 12,
        minor: 0,
    };
    let mut bad_block = record("add", 100, 10.0, 0.2, "2026-11-01T00:00:00Z");
    bad_block.stats.low_us = 11.0;
    let db = db_of(vec![unknown, bad_block]);
    let db = Database::parse(&db.to_text()).unwrap();
    assert_eq!(db.records.len(), 2);
    let kinds: Vec<ProblemKind> = db.check().iter().map(|p| p.kind).collect();
    assert!(kinds.contains(&ProblemKind::UnknownGpu), "{kinds:?}");
    assert!(kinds.contains(&ProblemKind::Stats), "{kinds:?}");
    assert!(kinds.contains(&ProblemKind::Schedule), "{kinds:?}");
}

#[test]
fn contraction_knobs_out_of_range_are_reported_not_trusted() {
    let simt = Tiles {
        block_m: u32::MAX,
        block_n: u32::MAX,
        block_k: 8,
        thread_m: 1,
        thread_n: 1,
        vector_a: 1,
        vector_b: 1,
        group_m: 1,
        stages: 1,
        split_k: 1,
    };
    let tensor = MmaTiles {
        block_m: u32::MAX,
        block_n: u32::MAX,
        block_k: 32,
        warp_m: 16,
        warp_n: 16,
        stages: 3,
        group_m: 1,
        split_k: 1,
        min_blocks: 0,
        swizzle: 0,
        prefetch: 0,
        wgmma: 0,
        tail_split: 1,
        persistent: 0,
        producer: 0,
        tma: 0,
        cluster_m: 1,
    };
    let schedules = [
        Schedule::Matmul(simt),
        Schedule::Matmul(Tiles { split_k: 0, ..simt }),
        Schedule::Mma(tensor),
        Schedule::Mma(MmaTiles {
            block_m: 64,
            block_n: 64,
            warp_m: 0,
            ..tensor
        }),
    ];
    for schedule in schedules {
        let mut r = record("mm", 128, 10.0, 0.2, "2026-11-01T00:00:00Z");
        r.schedule = schedule.clone();
        let db = Database::parse(&db_of(vec![r]).to_text()).unwrap();
        let problems = db.check();
        assert!(
            problems.iter().any(|p| p.kind == ProblemKind::Schedule),
            "{schedule:?}: {problems:?}"
        );
    }
}

#[test]
fn tensor_core_records_pass_with_or_without_the_register_hint_the_swizzle_or_the_prefetch() {
    for bits in 0..8 {
        let [min_blocks, swizzle, prefetch] = [bits & 1, bits >> 1 & 1, bits >> 2];
        let mut r = record("mm", 128, 10.0, 0.2, "2026-11-01T00:00:00Z");
        r.schedule = Schedule::Mma(MmaTiles {
            block_m: 128,
            block_n: 128,
            block_k: 32,
            warp_m: 64,
            warp_n: 64,
            stages: 3,
            group_m: 1,
            split_k: 1,
            min_blocks,
            swizzle,
            prefetch,
            wgmma: 0,
            tail_split: 1,
            persistent: 0,
            producer: 0,
            tma: 0,
            cluster_m: 1,
        });
        let db = Database::parse(&db_of(vec![r]).to_text()).unwrap();
        assert_eq!(
            db.check(),
            vec![],
            "min_blocks = {min_blocks}, swizzle = {swizzle}, prefetch = {prefetch}"
        );
    }
}

#[test]
fn records_are_checked_against_the_kernels() {
    let kernel = |body: &str| {
        let item: proc_macro2::TokenStream = format!(
            "fn add(a: Tensor<f32, (N,)>, b: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {{ compute(|i| {body}) }}"
        )
        .parse()
        .unwrap();
        let args: proc_macro2::TokenStream = "shape(N = 4096)".parse().unwrap();
        ktune_core::syntax::parse_kernel(args, item).unwrap()
    };
    let old = kernel("a[i] + b[i]");
    let new = kernel("a[i] * b[i]");
    let mut r = record("add", 128, 10.0, 0.2, "2026-11-01T00:00:00Z");
    r.checksum = ktune_core::canon::checksum(&old);
    r.canonical = ktune_core::canon::canonical_form(&old);
    let mut db = db_of(vec![r.clone()]);
    assert_eq!(db.check_against(std::slice::from_ref(&old)), vec![]);

    let problems = db.check_against(std::slice::from_ref(&new));
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].kind, ProblemKind::Stale);
    assert!(
        problems[0]
            .message
            .contains("the kernel changed since this was tuned")
    );
    assert!(
        problems[0].message.contains("add(a[i], b[i])"),
        "{}",
        problems[0]
    );

    let mut bad = r.clone();
    bad.schedule = Schedule::Generic { block: 2048 };
    db.insert([bad]);
    let problems = db.check_against(std::slice::from_ref(&old));
    assert!(
        problems.iter().any(|p| p.kind == ProblemKind::Schedule),
        "{problems:?}"
    );
    assert_eq!(db.check_against(&[]).len(), 2);

    // The kernel now declares another size: the record is never chosen.
    let mut resized = r.clone();
    resized.shape.insert("N".to_owned(), 1024);
    let problems = db_of(vec![resized.clone()]).check_against(std::slice::from_ref(&old));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].kind, ProblemKind::Stale);
    assert_eq!(
        problems[0].message,
        "stale: measured at N=1024, the kernel now declares N=4096"
    );
    // An application's database over two crates' kernels of one name and
    // computation, at two sizes: each record is checked against its own.
    let item: proc_macro2::TokenStream =
        "fn add(a: Tensor<f32, (N,)>, b: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|i| a[i] + b[i]) }"
            .parse()
            .unwrap();
    let small = ktune_core::syntax::parse_kernel("shape(N = 1024)".parse().unwrap(), item).unwrap();
    assert_eq!(
        db_of(vec![r.clone(), resized.clone()]).check_against(&[old.clone(), small]),
        vec![]
    );
}

#[test]
fn a_record_is_checked_against_the_kernel_of_its_name_with_its_checksum() {
    // An application's database is checked against its kernels and its
    // dependencies': two crates may each have a kernel `add`.
    let kernel = |body: &str| {
        let item: proc_macro2::TokenStream = format!(
            "fn add(a: Tensor<f32, (N,)>, b: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {{ compute(|i| {body}) }}"
        )
        .parse()
        .unwrap();
        let args: proc_macro2::TokenStream = "shape(N = 4096)".parse().unwrap();
        ktune_core::syntax::parse_kernel(args, item).unwrap()
    };
    let application = kernel("a[i] + b[i]");
    let library = kernel("a[i] * b[i]");
    let mut r = record("add", 128, 10.0, 0.2, "2026-11-01T00:00:00Z");
    r.checksum = ktune_core::canon::checksum(&library);
    let both = [application.clone(), library.clone()];
    assert_eq!(r.kernel_in(&both), Some(&library));
    let db = db_of(vec![r.clone()]);
    assert_eq!(db.check_against(&both), vec![]);
    // With no kernel of its checksum, the first of its name: stale.
    assert_eq!(
        r.kernel_in(std::slice::from_ref(&application)),
        Some(&application)
    );
    let problems = db.check_against(std::slice::from_ref(&application));
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].kind, ProblemKind::Stale);
}

#[test]
fn allow_tf32_makes_a_record_without_it_stale() {
    let kernel = |args: &str| {
        let item: proc_macro2::TokenStream = "fn mm(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> { compute(|m, n| sum(K, |k| a[m][k] * b[k][n])) }"
            .parse()
            .unwrap();
        ktune_core::syntax::parse_kernel(args.parse().unwrap(), item).unwrap()
    };
    let exact = kernel("shape(M = 64, N = 64, K = 64)");
    let tf32 = kernel("shape(M = 64, N = 64, K = 64), allow_tf32");
    assert!(!exact.allow_tf32 && tf32.allow_tf32);
    assert_ne!(
        ktune_core::canon::checksum(&exact),
        ktune_core::canon::checksum(&tf32)
    );
    let mut r = record("mm", 128, 10.0, 0.2, "2026-11-01T00:00:00Z");
    r.shape = BTreeMap::from([
        ("M".to_owned(), 64),
        ("N".to_owned(), 64),
        ("K".to_owned(), 64),
    ]);
    r.checksum = ktune_core::canon::checksum(&exact);
    let db = db_of(vec![r]);
    assert_eq!(db.check_against(std::slice::from_ref(&exact)), vec![]);
    let problems = db.check_against(std::slice::from_ref(&tf32));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].kind, ProblemKind::Stale);
}

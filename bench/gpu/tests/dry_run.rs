//! The dry run over every case: each default, its alternatives, each
//! bounded-search candidate and sampled schedule lowers for sm_90 and, where ptxas is installed (`cargo
//! xtask test` installs it), assembles; and what each case's plan holds.
//! Surveying and ranking a large space is the slow part of a plan (tens of
//! seconds in a debug build), so each case is planned once per test.

use ktune_bench::cases::CASES;
use ktune_bench::plan::{Plan, dry_run};
use ktune_build::tune::BOUNDED_CANDIDATES;
use ktune_core::schedule::Schedule;
use ktune_core::{SmVersion, model, space};
use ktune_search::strategy::SCORE_BAND;

#[test]
fn every_case_lowers_and_assembles_its_default_alternatives_bounded_candidates_and_sample() {
    let cases: Vec<_> = CASES.iter().collect();
    let ptxas = ktune_build::ptxas::find();
    let mut listing = Vec::new();
    let summary = dry_run(
        &cases,
        SmVersion::Sm90,
        3,
        1,
        ptxas.as_deref(),
        &mut listing,
    )
    .expect("writing to a Vec");
    let listing = String::from_utf8(listing).expect("UTF-8");
    assert!(summary.failures.is_empty(), "{listing}");
    assert_eq!(
        listing.matches("  default ").count(),
        CASES.len(),
        "{listing}"
    );
    assert_eq!(
        listing.matches("  sample ").count(),
        3 * CASES.len(),
        "{listing}"
    );
    // 8 candidates a case, 7 where the default is one of them.
    let bounded = listing.matches("  bounded ").count();
    let per_case = (BOUNDED_CANDIDATES - 1) * CASES.len()..=BOUNDED_CANDIDATES * CASES.len();
    assert!(per_case.contains(&bounded), "{listing}");
    // The tensor-core defaults' alternatives (see the plan's test).
    let alternatives = listing.matches("  altern. ").count();
    assert!(alternatives > 0, "{listing}");
    let expected = 4 * CASES.len() + alternatives + bounded;
    assert_eq!(summary.lowered, expected, "{listing}");
    match ptxas {
        Some(_) => assert_eq!(summary.assembled, expected, "{listing}"),
        None => eprintln!("no ptxas: lowering checked, assembly not (run `cargo xtask setup`)"),
    }
    for case in CASES {
        assert!(
            listing.contains(case.name),
            "{} missing:\n{listing}",
            case.name
        );
    }
}

#[test]
fn plans_sample_the_space_and_take_the_bounded_searchs_candidates() {
    for case in CASES {
        let plan = Plan::new(case, SmVersion::Sm90, 8, 1).expect("parses");
        assert!(!plan.sample.contains(&plan.default), "{}", case.name);
        assert_eq!(
            plan.sample.len(),
            8.min(plan.space_size - 1),
            "{}",
            case.name
        );
        let n = plan.bounded.len();
        assert!(
            n == BOUNDED_CANDIDATES || n + 1 == BOUNDED_CANDIDATES,
            "{}: {n} candidates",
            case.name
        );
        assert!(!plan.bounded.contains(&plan.default), "{}", case.name);
        for (i, c) in plan.bounded.iter().enumerate() {
            assert!(!plan.bounded[..i].contains(c), "{}: twice", case.name);
        }
    }
    // Seeded: the same seed gives the same sample, another seed another.
    let decode = CASES.iter().find(|c| c.name == "decode_m16").expect("case");
    let plan = Plan::new(decode, SmVersion::Sm90, 8, 1).expect("parses");
    let again = Plan::new(decode, SmVersion::Sm90, 8, 1).expect("parses");
    assert_eq!(plan.sample, again.sample);
    assert_eq!(plan.bounded, again.bounded);
    assert_ne!(
        plan.sample,
        Plan::new(decode, SmVersion::Sm90, 8, 2)
            .expect("parses")
            .sample
    );
    assert_eq!(plan.default.class(), "mma");
    assert!(plan.space_size > 100, "{} points", plan.space_size);
}

#[test]
fn bounded_candidates_are_among_the_models_favourites() {
    // Cases whose spaces are quick to rank: a tensor-core decode shape and
    // a SIMT long-tail one, whose best estimates tie over thousands of
    // points, and rows, where fewer than 8 points are within the band.
    for name in [
        "decode_m16",
        "tail_32x8192x8192",
        "softmax_4096x50257",
        "layernorm_8192x4096",
    ] {
        let case = CASES.iter().find(|c| c.name == name).expect("case");
        let plan = Plan::new(case, SmVersion::Sm90, 0, 1).expect("parses");
        // The candidates are the points the model estimates within the
        // band of its best, when there are enough of those; else all of
        // them and then the next best.
        let points = space::candidates(&plan.kernel, SmVersion::Sm90);
        let ranked = model::rank(&plan.kernel, SmVersion::Sm90, &points);
        let limit = ranked[0].1.seconds * (1.0 + SCORE_BAND);
        let band: Vec<&Schedule> = ranked
            .iter()
            .filter(|(_, e)| e.seconds <= limit)
            .map(|(s, _)| s)
            .collect();
        let in_band = plan.bounded.iter().filter(|c| band.contains(c)).count();
        let band_left = band.iter().filter(|s| ***s != plan.default).count();
        assert_eq!(in_band, plan.bounded.len().min(band_left), "{name}");
    }
}

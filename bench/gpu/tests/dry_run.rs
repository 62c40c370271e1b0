//! The dry run over every case: each default, bounded-search candidate and
//! sampled schedule lowers for sm_90 and, where ptxas is installed (`cargo
//! xtask test` installs it), assembles.

use ktune_bench::cases::CASES;
use ktune_bench::plan::{Plan, dry_run};
use ktune_build::tune::BOUNDED_CANDIDATES;
use ktune_core::schedule::Schedule;
use ktune_core::{SmVersion, model, space};
use ktune_search::strategy::SCORE_BAND;

#[test]
fn every_case_lowers_and_assembles_its_default_bounded_candidates_and_sample() {
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
    let bounded: usize = CASES
        .iter()
        .map(|c| {
            Plan::new(c, SmVersion::Sm90, 3, 1)
                .expect("parses")
                .bounded
                .len()
        })
        .sum();
    assert_eq!(listing.matches("  bounded ").count(), bounded, "{listing}");
    let expected = 4 * CASES.len() + bounded;
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
fn samples_are_seeded_exclude_the_default_and_cover_the_matmul_space() {
    for case in CASES {
        let plan = Plan::new(case, SmVersion::Sm90, 8, 1).expect("parses");
        assert!(!plan.sample.contains(&plan.default), "{}", case.name);
        assert_eq!(
            plan.sample.len(),
            8.min(plan.space_size - 1),
            "{}",
            case.name
        );
    }
    let sgemm = CASES.iter().find(|c| c.name == "sgemm_4096").expect("case");
    let plan = Plan::new(sgemm, SmVersion::Sm90, 8, 1).expect("parses");
    let again = Plan::new(sgemm, SmVersion::Sm90, 8, 1).expect("parses");
    assert_eq!(plan.sample, again.sample);
    assert_ne!(
        plan.sample,
        Plan::new(sgemm, SmVersion::Sm90, 8, 2)
            .expect("parses")
            .sample
    );
    assert_eq!(plan.default.class(), "matmul");
    assert!(plan.space_size > 100, "{} points", plan.space_size);
}

#[test]
fn bounded_candidates_are_among_the_models_favourites() {
    for case in CASES {
        let plan = Plan::new(case, SmVersion::Sm90, 0, 1).expect("parses");
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
        // The candidates are the points the model estimates within the band
        // of its best, when there are enough of those; else all of them and
        // then the next best.
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
        assert_eq!(in_band, n.min(band_left), "{}", case.name);
    }
}

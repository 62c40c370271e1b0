//! The dry run over every case: each default and sampled schedule lowers
//! for sm_90 and, where ptxas is installed (`cargo xtask test` installs
//! it), assembles.

use ktune_bench::cases::CASES;
use ktune_bench::plan::{Plan, dry_run};
use ktune_core::SmVersion;

#[test]
fn every_case_lowers_and_assembles_its_default_and_sample() {
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
    let expected = 4 * CASES.len();
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

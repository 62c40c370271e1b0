//! The heuristic model against the runs on a real GPU (an H200,
//! `bench/results/gpu/2026-11-30-h200/bench.json`, the second visit's
//! `2026-11-30-h200-2/bench.json`, the third's `2026-11-30-h200-3` and the
//! fourth's two calls, `2026-12-04-h200/call-1` and `call-2`):
//! fixed records, so the fit is
//! deterministic and a change to the model that orders the measured
//! schedules worse shows here.

use ktune_bench::fit::{CaseFit, fit};
use ktune_core::schedule::Schedule;
use ktune_measure::stats::spearman;

fn run(folder: &str) -> Vec<CaseFit> {
    let path = format!(
        "{}/../results/gpu/{folder}/bench.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).expect("the H200 results are committed");
    let results = serde_json::from_str(&text).expect("JSON");
    fit(&results).expect("every case of the run is read")
}

fn h200() -> Vec<CaseFit> {
    run("2026-11-30-h200")
}

fn h200_second_visit() -> Vec<CaseFit> {
    run("2026-11-30-h200-2")
}

fn h200_third_visit() -> Vec<CaseFit> {
    run("2026-11-30-h200-3")
}

fn h200_fourth_visit() -> Vec<CaseFit> {
    run("2026-12-04-h200/call-1")
}

/// Asserts that the model's pick among each case's measured points is at
/// most `limit` times the fastest of them.
fn assert_picks_within<'a>(fits: impl IntoIterator<Item = &'a CaseFit>, limit: f64) {
    for f in fits {
        assert!(
            f.pick_over_best <= limit,
            "{}: the model's pick is {:.2}× the fastest measured",
            f.case,
            f.pick_over_best
        );
    }
}

#[test]
fn every_case_of_the_h200_run_is_fitted() {
    let fits = h200();
    assert_eq!(fits.len(), 16);
    for f in &fits {
        assert!(
            f.points.len() >= 20,
            "{}: {} points",
            f.case,
            f.points.len()
        );
        assert!(f.pick_over_best >= 1.0, "{}", f.case);
        assert!(f.spearman.is_some(), "{}", f.case);
    }
}

#[test]
fn the_model_orders_the_h200_measurements_well() {
    // Median 0.82 over the 16 cases when the file was committed, 0.85
    // since long rows' re-reads come from DRAM in the model; none below
    // 0.38, every case positive.
    let fits = h200();
    let mut rhos: Vec<f64> = fits.iter().filter_map(|f| f.spearman).collect();
    rhos.sort_by(f64::total_cmp);
    let median = rhos[rhos.len() / 2];
    assert!(median >= 0.8, "median Spearman ρ {median:.2}: {rhos:?}");
    assert!(rhos[0] > 0.3, "worst case's Spearman ρ {:.2}", rhos[0]);
}

#[test]
fn the_models_pick_on_the_decode_shapes_is_near_the_fastest_measured() {
    // 2.31× and 1.36× the fastest measured point before the model counted
    // short rows of an operand as whole DRAM segments; 1.10× and 1.00× since.
    for f in h200().iter().filter(|f| f.case.starts_with("decode_")) {
        assert!(
            f.pick_over_best <= 1.15,
            "{}: the model's pick is {:.2}× the fastest measured",
            f.case,
            f.pick_over_best
        );
    }
}

#[test]
fn the_model_orders_the_second_h200_visits_measurements_well() {
    // Median 0.85 when the file was committed, 0.90 since passes over a
    // row in shared memory wait on every iteration in the model. Points
    // that keep the row in shared memory are left out since the model
    // follows the `cp.async` fills of 2026-12-01 (see the fourth visit's
    // tests below): that visit filled them through registers. Without
    // them the median was 0.875 before that refit and is 0.875 after
    // (softmax over 8192 rows 0.686, then 0.680).
    let fits = h200_second_visit();
    assert_eq!(fits.len(), 16);
    let mut rhos: Vec<f64> = fits
        .iter()
        .filter_map(|f| {
            let pairs: Vec<(f64, f64)> = f
                .points
                .iter()
                .filter(|p| !matches!(p.schedule, Schedule::Rows { cache: 2, .. }))
                .map(|p| (p.measured_ms, p.estimate.seconds))
                .collect();
            spearman(&pairs)
        })
        .collect();
    assert_eq!(rhos.len(), 16);
    rhos.sort_by(f64::total_cmp);
    let median = rhos[rhos.len() / 2];
    assert!(median >= 0.87, "median Spearman ρ {median:.2}: {rhos:?}");
}

#[test]
fn the_models_pick_on_rows_kept_in_shared_memory_is_near_the_fastest_measured() {
    // Rows of 50257 on the fourth visit, whose rows in shared memory are
    // filled by `cp.async`: 1.34× (softmax) and 1.41× (layernorm) the
    // fastest measured point while the model took a pass's iteration over
    // the row at 80 cycles and missed the output pass's re-read; 1.10×
    // (a one-pass read, 0.605 ms, against the row kept in shared memory,
    // 0.551 ms) and 1.01× since.
    let fits = h200_fourth_visit();
    let long: Vec<&CaseFit> = fits
        .iter()
        .filter(|f| f.case.ends_with("_4096x50257"))
        .collect();
    assert_eq!(long.len(), 2);
    assert_picks_within(long, 1.12);
}

#[test]
fn the_model_counts_the_output_pass_re_reading_a_row() {
    // Rows of 4096 on the fourth visit: 1.73× (softmax) and 2.10×
    // (layernorm) the fastest measured point while the model counted the
    // re-reads of a row by its reductions alone (and at every input's
    // bytes an element), so that a one-pass `online` point with a few
    // threads a row looked as cheap as one that keeps the row; 1.00×
    // since.
    let fits = h200_fourth_visit();
    let rows: Vec<&CaseFit> = fits
        .iter()
        .filter(|f| f.case.ends_with("_8192x4096"))
        .collect();
    assert_eq!(rows.len(), 2);
    assert_picks_within(rows, 1.02);
}

#[test]
fn the_models_pick_on_rows_kept_in_registers_is_near_the_fastest_measured() {
    // Rows of 4096 and the demo's of 384, whose measured points mostly keep
    // the row in registers: 1.56×, 1.32× (second visit), 1.57×, 1.32×,
    // 4.65× and 1.05× (third) the fastest measured point while a pass over
    // kept values cost nothing in the model; at most 1.05× since each
    // value costs every pass a link of its fold's dependent chain.
    let second = h200_second_visit();
    let third = h200_third_visit();
    let rows: Vec<&CaseFit> = second
        .iter()
        .chain(&third)
        .filter(|f| {
            f.case.ends_with("_8192x4096") || f.case == "demo_layernorm" || f.case == "demo_softmax"
        })
        .collect();
    assert_eq!(rows.len(), 6);
    assert_picks_within(rows, 1.05);
}

#[test]
fn the_models_pick_on_large_tensor_core_products_counts_the_warps_feeding_them() {
    // The LLM shape, fused or not, the batched product and the demo's
    // `ffn_up` (second and third visits): 1.17× to 1.75× the fastest
    // measured point while a block of 4 warps alone on an SM was taken to
    // keep the tensor cores as busy as 8; 1.04× to 1.24× since a scheduler
    // with one warp feeds them half the time.
    let second = h200_second_visit();
    let third = h200_third_visit();
    let products: Vec<&CaseFit> = second
        .iter()
        .chain(&third)
        .filter(|f| {
            f.case.starts_with("llm_")
                || f.case.starts_with("bmm_")
                || f.case == "matmul_bias_gelu_bf16"
                || f.case == "demo_ffn_up"
        })
        .collect();
    assert_eq!(products.len(), 7);
    assert_picks_within(products, 1.25);
}

#[test]
fn the_models_pick_on_the_long_tail_is_near_the_fastest_measured() {
    // The SIMT shapes of the third visit: 1.75×, 2.14× and 1.35× the
    // fastest measured point while every SM's warps were taken to keep all
    // four schedulers busy; 1.05×, 1.03× and 1.05× since a scheduler with
    // few warps is busy only part of the time. The rank correlations went
    // from 0.21, 0.35 and 0.34 to 0.84, 0.88 and 0.58.
    let fits = h200_third_visit();
    let tails: Vec<&CaseFit> = fits
        .iter()
        .filter(|f| f.case.starts_with("tail_"))
        .collect();
    assert_eq!(tails.len(), 3);
    for f in tails {
        assert!(
            f.pick_over_best <= 1.1,
            "{}: the model's pick is {:.2}× the fastest measured",
            f.case,
            f.pick_over_best
        );
        let rho = f.spearman.expect("several points");
        assert!(rho >= 0.5, "{}: Spearman ρ {rho:.2}", f.case);
    }
}

#[test]
fn the_models_pick_on_the_demos_fused_up_projection_is_the_fastest_measured() {
    // The demo's matmul + GELU: 1.43× (the fourth visit's first call) and
    // 1.27× (its second) the fastest measured point while the model
    // counted no epilogue, Spearman ρ 0.73 and 0.16; the fastest in both
    // since the GELU's instructions hold back a block alone on its SM,
    // ρ 0.82 and 0.68.
    let second_call = run("2026-12-04-h200/call-2");
    let fits = h200_fourth_visit();
    let up: Vec<&CaseFit> = fits
        .iter()
        .chain(&second_call)
        .filter(|f| f.case == "demo_ffn_up")
        .collect();
    assert_eq!(up.len(), 2);
    for f in &up {
        let rho = f.spearman.expect("several points");
        assert!(rho > 0.6, "Spearman ρ {rho:.2}");
    }
    assert_picks_within(up, 1.0);
}

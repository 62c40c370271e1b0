//! The committed fixture database reaches the binary: the H200's winner is
//! embedded beside the heuristic defaults, the virtual-GPU and stale records
//! are not, and the runtime dispatches by GPU model, then compute
//! capability, then the newest older default.

use ktune::select_variant;
use ktune_core::db::Database;
use ktune_db_e2e::softmax;

const H200_SCHEDULE: &str =
    r#"{"class":"rows","threads_per_row":256,"rows_per_block":2,"vector":1}"#;

fn labels() -> Vec<(Option<&'static str>, (u32, u32))> {
    softmax::variants().iter().map(|v| (v.gpu, v.sm)).collect()
}

#[test]
fn the_binary_holds_the_defaults_and_the_h200_winner_only() {
    assert_eq!(
        labels(),
        [
            (None, (8, 0)),
            (None, (9, 0)),
            (Some("NVIDIA H200"), (9, 0))
        ]
    );
    let h200 = &softmax::variants()[2];
    assert_eq!(h200.schedule, H200_SCHEDULE);
    assert_ne!(softmax::variants()[1].schedule, H200_SCHEDULE);
}

#[test]
fn the_fixture_holds_the_records_the_binary_leaves_out() {
    let text = include_str!("../tuning/ktune.json");
    let db = Database::parse(text).expect("the fixture parses");
    assert_eq!(db.to_text(), text, "the fixture is in canonical form");
    let gpus: Vec<&str> = db.records.iter().map(|r| r.gpu.name.as_str()).collect();
    assert!(gpus.contains(&"NVIDIA L4"), "a virtual-GPU record");
    assert!(gpus.contains(&"NVIDIA A100-SXM4-80GB"), "a stale record");
    assert!(
        db.records.iter().all(|r| r.gpu.driver == "fixture"),
        "every record is marked as a fixture"
    );
    for gpu in ["NVIDIA L4", "NVIDIA A100-SXM4-80GB"] {
        assert!(softmax::variants().iter().all(|v| v.gpu != Some(gpu)));
    }
}

#[test]
fn dispatch_prefers_the_model_then_the_compute_capability_then_the_default() {
    let pick = |gpu: &str, cc| {
        let v = select_variant(&softmax::KERNEL, softmax::variants(), gpu, cc).expect("a variant");
        (v.gpu, v.sm)
    };
    assert_eq!(pick("NVIDIA H200", (9, 0)), (Some("NVIDIA H200"), (9, 0)));
    // Same architecture, another model: the H200's measured schedule.
    assert_eq!(
        pick("NVIDIA H100 80GB HBM3", (9, 0)),
        (Some("NVIDIA H200"), (9, 0))
    );
    // No variant for sm_89: the newest older default, not a tuned one.
    assert_eq!(pick("NVIDIA L4", (8, 9)), (None, (8, 0)));
    assert_eq!(pick("NVIDIA A100-SXM4-80GB", (8, 0)), (None, (8, 0)));
    // A newer architecture runs the sm_90 default (PTX is forward-compatible).
    assert_eq!(pick("NVIDIA B200", (10, 0)), (None, (9, 0)));
}

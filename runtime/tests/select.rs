//! Variant selection: exact GPU model, then exact compute capability, then
//! the newest older SM; never a newer SM.

use ktune::{Error, KernelInfo, TensorInfo, Variant, select_variant};

static KERNEL: KernelInfo = KernelInfo {
    name: "matmul",
    checksum: "c",
    dims: &[("N", 4)],
    inputs: &[],
    output: TensorInfo {
        name: "out",
        dtype: "f32",
        dims: &["N"],
        len: 4,
    },
    flops: 0,
    bytes: 0,
};

/// A variant identified by its entry name, which is all these tests look at.
const fn variant(gpu: Option<&'static str>, sm: (u32, u32), entry: &'static str) -> Variant {
    Variant {
        gpu,
        sm,
        arch_specific: false,
        schedule: "{}",
        entry,
        ptx: "",
        grid: [1, 1, 1],
        block: [32, 1, 1],
        dynamic_shared_bytes: 0,
        workspace_bytes: 0,
        persistent: false,
        cluster: 1,
        registers: 0,
        tensor_maps: &[],
    }
}

/// What a build for an H100, an H200, an A100 and an L4 might embed.
static VARIANTS: [Variant; 6] = [
    variant(Some("NVIDIA H100 80GB HBM3"), (9, 0), "h100"),
    variant(Some("NVIDIA A100-SXM4-80GB"), (8, 0), "a100"),
    variant(Some("NVIDIA L4"), (8, 9), "l4"),
    variant(None, (9, 0), "default_sm90"),
    variant(Some("NVIDIA H200"), (9, 0), "h200"),
    variant(None, (8, 0), "default_sm80"),
];

fn pick(gpu: &str, cc: (u32, u32)) -> Result<&'static str, Error> {
    select_variant(&KERNEL, &VARIANTS, gpu, cc).map(|v| v.entry)
}

#[test]
fn exact_gpu_model_wins() {
    assert_eq!(pick("NVIDIA H200", (9, 0)), Ok("h200"));
    assert_eq!(pick("NVIDIA H100 80GB HBM3", (9, 0)), Ok("h100"));
    assert_eq!(pick("NVIDIA A100-SXM4-80GB", (8, 0)), Ok("a100"));
    assert_eq!(pick("NVIDIA L4", (8, 9)), Ok("l4"));
}

#[test]
fn model_names_match_exactly() {
    // Another H100 model, same architecture: not the H100 SXM's own
    // variant by name, but a variant measured on sm_90 beats the default.
    assert_eq!(pick("NVIDIA H100 PCIe", (9, 0)), Ok("h100"));
    assert_eq!(pick("nvidia h200", (9, 0)), Ok("h100"));
}

#[test]
fn exact_compute_capability_next() {
    // An sm_80 GPU other than the A100 tuned here: the A100's tuning.
    assert_eq!(pick("NVIDIA A800", (8, 0)), Ok("a100"));
    // sm_89 without its own tuning: the L4's.
    assert_eq!(pick("NVIDIA GeForce RTX 4090", (8, 9)), Ok("l4"));
}

#[test]
fn exact_compute_capability_prefers_tuned_then_list_order() {
    static ONLY_DEFAULTS: [Variant; 3] = [
        variant(None, (8, 0), "default_sm80"),
        variant(None, (9, 0), "default_sm90_first"),
        variant(None, (9, 0), "default_sm90_second"),
    ];
    let v = select_variant(&KERNEL, &ONLY_DEFAULTS, "NVIDIA H200", (9, 0)).unwrap();
    assert_eq!(v.entry, "default_sm90_first");
}

#[test]
fn newest_older_sm_otherwise_preferring_the_default() {
    // sm_86 has no variant of its own: the newest older one is sm_80, where
    // the heuristic default beats the A100's tuning (A100 shared memory is
    // larger than an sm_86 GPU's).
    assert_eq!(pick("NVIDIA A10", (8, 6)), Ok("default_sm80"));
    // A GPU newer than any variant (Blackwell): the newest, sm_90 default.
    assert_eq!(pick("NVIDIA B200", (10, 0)), Ok("default_sm90"));
    assert_eq!(pick("NVIDIA GeForce RTX 5090", (12, 0)), Ok("default_sm90"));
}

#[test]
fn newer_sm_is_never_picked_even_for_the_same_model_name() {
    static ODD: [Variant; 2] = [
        variant(Some("Mystery GPU"), (9, 0), "mystery_sm90"),
        variant(None, (8, 0), "default_sm80"),
    ];
    let v = select_variant(&KERNEL, &ODD, "Mystery GPU", (8, 6)).unwrap();
    assert_eq!(v.entry, "default_sm80");
    // The sm_89 L4 variant never runs on an sm_86 GPU.
    assert_ne!(pick("NVIDIA L4", (8, 6)), Ok("l4"));
}

#[test]
fn same_model_prefers_the_newest_runnable_sm() {
    static TWO: [Variant; 3] = [
        variant(Some("NVIDIA H200"), (8, 0), "h200_sm80"),
        variant(Some("NVIDIA H200"), (9, 0), "h200_sm90"),
        variant(None, (9, 0), "default_sm90"),
    ];
    let v = select_variant(&KERNEL, &TWO, "NVIDIA H200", (9, 0)).unwrap();
    assert_eq!(v.entry, "h200_sm90");
}

#[test]
fn pre_ampere_gpu_has_no_variant() {
    let err = pick("Tesla T4", (7, 5)).unwrap_err();
    assert_eq!(
        err,
        Error::NoVariant {
            kernel: "matmul",
            device: "Tesla T4 (sm_75)".to_owned()
        }
    );
    let message = err.to_string();
    assert!(
        message.contains("`matmul`") && message.contains("Tesla T4 (sm_75)"),
        "{message}"
    );
    assert!(message.contains("KTUNE_BACKEND=cpu"), "{message}");
    assert!(pick("Tesla V100", (7, 0)).is_err());
}

#[test]
fn no_variants_at_all_is_a_stale_build() {
    assert_eq!(
        select_variant(&KERNEL, &[], "NVIDIA H200", (9, 0)).unwrap_err(),
        Error::StaleBuild { kernel: "matmul" }
    );
}

#[test]
fn labels() {
    assert_eq!(VARIANTS[4].label(), "sm_90 NVIDIA H200");
    assert_eq!(ktune::variant_label(&VARIANTS[5]), "sm_80 default");
    assert!(VARIANTS[4].is_tuned());
    assert!(!VARIANTS[5].is_tuned());
}

/// `variant`, its PTX for `sm_XYa` (Hopper's `wgmma`).
const fn specific(gpu: Option<&'static str>, sm: (u32, u32), entry: &'static str) -> Variant {
    Variant {
        arch_specific: true,
        ..variant(gpu, sm, entry)
    }
}

#[test]
fn architecture_specific_code_runs_on_its_own_compute_capability_alone() {
    // What a build declaring sm_90 embeds for a bf16 product: the sm_90a
    // default on warpgroups, the portable sm_90 default beside it, and
    // an H200's tuned winner on warpgroups.
    static HOPPER: [Variant; 4] = [
        variant(None, (8, 0), "default_sm80"),
        variant(None, (9, 0), "default_sm90"),
        specific(None, (9, 0), "default_sm90a"),
        specific(Some("NVIDIA H200"), (9, 0), "h200_sm90a"),
    ];
    let pick = |gpu: &str, cc| select_variant(&KERNEL, &HOPPER, gpu, cc).map(|v| v.entry);
    assert_eq!(pick("NVIDIA H200", (9, 0)), Ok("h200_sm90a"));
    // Another Hopper: the H200's tuning (measured on the same
    // architecture) before the defaults.
    assert_eq!(pick("NVIDIA H100 80GB HBM3", (9, 0)), Ok("h200_sm90a"));
    // A Blackwell GPU cannot load sm_90a code: the portable default.
    assert_eq!(pick("NVIDIA B200", (10, 0)), Ok("default_sm90"));
    // Even one named like the tuned GPU, on another architecture.
    assert_eq!(pick("NVIDIA H200", (10, 0)), Ok("default_sm90"));

    // Without a tuned variant, Hopper prefers its own default.
    static DEFAULTS: [Variant; 3] = [
        variant(None, (8, 0), "default_sm80"),
        variant(None, (9, 0), "default_sm90"),
        specific(None, (9, 0), "default_sm90a"),
    ];
    let v = select_variant(&KERNEL, &DEFAULTS, "NVIDIA H100 PCIe", (9, 0)).unwrap();
    assert_eq!(v.entry, "default_sm90a");
    assert_eq!(v.to_string(), "sm_90a default");

    // A crate that declares only the baseline, with an H200 record on
    // warpgroups: newer GPUs fall back to the sm_80 default.
    static BASELINE: [Variant; 2] = [
        variant(None, (8, 0), "default_sm80"),
        specific(Some("NVIDIA H200"), (9, 0), "h200_sm90a"),
    ];
    let v = select_variant(&KERNEL, &BASELINE, "NVIDIA B200", (10, 0)).unwrap();
    assert_eq!(v.entry, "default_sm80");
}

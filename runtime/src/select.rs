//! Choosing the compiled variant for a GPU.

use crate::{Error, KernelInfo, Variant};

/// Picks the variant of `kernel` to run on a GPU named `gpu_name` with
/// compute capability `cc`.
///
/// PTX for sm_X runs on sm_X and every newer GPU (the driver compiles it), so
/// a variant whose `sm` is newer than `cc` is never picked, nor an
/// architecture-specific one (`sm_XYa`) for another compute capability than
/// its own. Among the others:
///
/// 1. a variant tuned on this exact GPU model (the newest `sm` if several);
/// 2. else one for exactly this compute capability, preferring one tuned on
///    another GPU of the same architecture (same limits, measured) over the
///    heuristic defaults, and of those the architecture's own (Hopper's
///    `wgmma` default) over the portable one;
/// 3. else the newest `sm` below `cc`, preferring the heuristic default over
///    one tuned on another architecture (which may rely on that GPU's
///    shared-memory capacity).
///
/// Ties go to the variant listed first. The sm_80 default, which every build
/// emits, makes step 3 succeed on every Ampere or newer GPU.
///
/// Launching on a GPU goes one step further: a variant whose warpgroups
/// hand registers to each other ([`Variant::registers`]) and that the
/// driver compiled to fewer registers per thread than it needs is passed
/// over for the next choice by these rules ([`Error::RegisterShare`] where
/// there is none).
///
/// # Errors
///
/// [`Error::NoVariant`] when every variant is newer than the GPU (e.g. a
/// Turing GPU, sm_75); [`Error::StaleBuild`] when there are no variants at all.
pub fn select_variant(
    kernel: &'static KernelInfo,
    variants: &'static [Variant],
    gpu_name: &str,
    cc: (u32, u32),
) -> Result<&'static Variant, Error> {
    select_among(kernel, variants, gpu_name, cc, |_| true)
}

/// [`select_variant`] among the variants `usable` accepts.
pub(crate) fn select_among(
    kernel: &'static KernelInfo,
    variants: &'static [Variant],
    gpu_name: &str,
    cc: (u32, u32),
    usable: impl Fn(&Variant) -> bool + Copy,
) -> Result<&'static Variant, Error> {
    if variants.is_empty() {
        return Err(Error::StaleBuild {
            kernel: kernel.name,
        });
    }
    let runnable = || {
        variants
            .iter()
            .filter(move |v| v.sm <= cc && (!v.arch_specific || v.sm == cc) && usable(v))
    };

    let same_model = first_max_by_key(runnable().filter(|v| v.gpu == Some(gpu_name)), |v| v.sm);
    let same_cc = || {
        first_max_by_key(runnable().filter(|v| v.sm == cc), |v| {
            (v.is_tuned(), v.arch_specific)
        })
    };
    let newest_older = || first_max_by_key(runnable(), |v| (v.sm, !v.is_tuned()));

    same_model
        .or_else(same_cc)
        .or_else(newest_older)
        .ok_or_else(|| Error::NoVariant {
            kernel: kernel.name,
            device: format!("{gpu_name} (sm_{}{})", cc.0, cc.1),
        })
}

/// The first item with the greatest key (`Iterator::max_by_key` returns the last).
fn first_max_by_key<'a, K: Ord>(
    items: impl Iterator<Item = &'a Variant>,
    key: impl Fn(&Variant) -> K,
) -> Option<&'a Variant> {
    let mut best: Option<(&'a Variant, K)> = None;
    for item in items {
        let k = key(item);
        if best.as_ref().is_none_or(|(_, best_key)| k > *best_key) {
            best = Some((item, k));
        }
    }
    best.map(|(item, _)| item)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TensorInfo;

    static KERNEL: KernelInfo = KernelInfo {
        name: "mm",
        checksum: "c",
        dims: &[],
        inputs: &[],
        output: TensorInfo {
            name: "out",
            dtype: "bf16",
            dims: &[],
            len: 1,
        },
        flops: 0,
        bytes: 0,
    };

    const fn variant(sm: (u32, u32), arch_specific: bool, entry: &'static str) -> Variant {
        Variant {
            gpu: None,
            sm,
            arch_specific,
            schedule: "{}",
            entry,
            ptx: "",
            grid: [1, 1, 1],
            block: [384, 1, 1],
            dynamic_shared_bytes: 0,
            workspace_bytes: 0,
            persistent: false,
            cluster: 1,
            registers: 0,
            tensor_maps: &[],
        }
    }

    static VARIANTS: [Variant; 3] = [
        variant((8, 0), false, "sm80"),
        variant((9, 0), true, "sm90a"),
        variant((9, 0), false, "sm90"),
    ];

    #[test]
    fn a_variant_passed_over_gives_way_to_the_next_choice() {
        let pick = |usable: &dyn Fn(&Variant) -> bool| {
            select_among(&KERNEL, &VARIANTS, "NVIDIA H200", (9, 0), |v| usable(v)).map(|v| v.entry)
        };
        assert_eq!(pick(&|_| true), Ok("sm90a"));
        assert_eq!(pick(&|v| v.entry != "sm90a"), Ok("sm90"));
        assert_eq!(pick(&|v| v.sm == (8, 0)), Ok("sm80"));
        assert!(matches!(
            pick(&|_| false),
            Err(Error::NoVariant { kernel: "mm", .. })
        ));
    }
}

//! Timing several subjects side by side. A GPU's clock is not steady under
//! sustained load (on the H200 the large tensor-core kernels' runs of one
//! measurement spread by up to 12%), so subjects timed one after another
//! are compared at different clocks. Timed in turns instead, one run of
//! each subject after another, every subject sees the same drift.
//!
//! Run `k` of a measurement of `n` subjects times subject `k % n` on input
//! set `k % sets`: consecutive runs always read different copies of the
//! inputs (so that no run finds its inputs left in L2 by the one before),
//! and where the number of sets shares no factor with `n`, each subject
//! reads every set about equally often (exactly, over a multiple of `n`
//! times the sets runs).

/// How many input sets a side-by-side measurement of `subjects` rotates
/// through: the fewest, at least `minimum` and 2, that share no factor
/// with `subjects`.
pub fn input_sets(minimum: usize, subjects: usize) -> usize {
    (minimum.max(2)..)
        .find(|&sets| gcd(sets, subjects.max(1)) == 1)
        .expect("some count above any bound is coprime with `subjects`")
}

/// The subject and the input set of run `k`.
pub fn turn(k: usize, subjects: usize, sets: usize) -> (usize, usize) {
    (k % subjects.max(1), k % sets.max(1))
}

/// How many runs to queue behind each of the clears that keep the GPU
/// busy while runs are queued, for `reps` runs of each of `subjects`: one
/// more than a multiple of `subjects`, so that the run right after a clear
/// (which evicted the L2's contents and left it dirty) is each subject's in
/// turn. Where `reps` itself is such a number, at most `preferred` (a
/// screening's 3 runs of 2 subjects), batches of `reps`: each subject's
/// run follows a clear exactly once. Else about `preferred`: over many
/// batches, each subject's about equally often.
pub fn batch(subjects: usize, reps: usize, preferred: usize) -> usize {
    let subjects = subjects.max(1);
    if subjects == 1 {
        return preferred.max(1);
    }
    if reps % subjects == 1 && reps <= preferred {
        return reps;
    }
    subjects * (preferred.saturating_sub(1) / subjects).max(1) + 1
}

/// Each subject's times, in order, from the times of a measurement's runs.
pub fn by_subject(times: &[f32], subjects: usize) -> Vec<Vec<f32>> {
    let subjects = subjects.max(1);
    let mut split = vec![Vec::with_capacity(times.len() / subjects + 1); subjects];
    for (k, &ms) in times.iter().enumerate() {
        split[k % subjects].push(ms);
    }
    split
}

/// A screened schedule's median as the default's full measurement would
/// put it: `median_ms` scaled by how much slower the default ran in its
/// full measurement (`default_full_ms`) than in its runs taken in turn
/// with the schedule's (`default_beside_ms`). Without either, the median
/// as it is.
pub fn normalized(
    median_ms: f64,
    default_beside_ms: Option<f64>,
    default_full_ms: Option<f64>,
) -> f64 {
    match (default_beside_ms, default_full_ms) {
        (Some(beside), Some(full)) if beside > 0.0 => median_ms * full / beside,
        _ => median_ms,
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_runs_read_different_sets_and_each_subject_reads_every_set() {
        for subjects in 1..=7 {
            for minimum in 0..=6 {
                let sets = input_sets(minimum, subjects);
                assert!(
                    sets >= minimum.max(2),
                    "{subjects} subjects, minimum {minimum}"
                );
                let runs = subjects * sets * 3;
                let mut seen = vec![vec![0; sets]; subjects];
                for k in 0..runs {
                    let (subject, set) = turn(k, subjects, sets);
                    seen[subject][set] += 1;
                    if k > 0 {
                        assert_ne!(set, turn(k - 1, subjects, sets).1);
                    }
                }
                for counts in &seen {
                    assert!(
                        counts.iter().all(|&c| c == 3),
                        "{subjects} subjects, {sets} sets: {seen:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_fewest_sets_coprime_with_the_subjects() {
        assert_eq!(input_sets(2, 1), 2);
        assert_eq!(input_sets(2, 2), 3);
        assert_eq!(input_sets(2, 6), 5);
        assert_eq!(input_sets(4, 2), 5);
        assert_eq!(input_sets(4, 3), 4);
    }

    /// The subjects whose runs follow a clear, over `reps` runs of each.
    fn after_clears(subjects: usize, reps: usize) -> Vec<usize> {
        let batch = batch(subjects, reps, 16);
        (0..reps * subjects)
            .step_by(batch)
            .map(|k| turn(k, subjects, 2).0)
            .collect()
    }

    #[test]
    fn the_run_after_each_clear_is_each_subjects_in_turn() {
        assert_eq!(batch(1, 200, 16), 16);
        // A screening, 3 runs of the schedule and 3 of the default (1 and 1
        // with `--quick`): each follows a clear once.
        assert_eq!(after_clears(2, 3), [0, 1]);
        assert_eq!(after_clears(2, 1), [0, 1]);
        for subjects in 2..=20 {
            for reps in [2, 20, 200] {
                let batch = batch(subjects, reps, 16);
                assert!(batch <= 16.max(subjects + 1), "{subjects}: {batch}");
                let mut counts = vec![0; subjects];
                for s in after_clears(subjects, reps) {
                    counts[s] += 1;
                }
                let (least, most) = (counts.iter().min(), counts.iter().max());
                assert!(
                    most.zip(least).is_some_and(|(m, l)| m - l <= 1),
                    "{subjects} subjects, {reps} runs each, batches of {batch}: {counts:?}"
                );
            }
        }
    }

    #[test]
    fn runs_are_dealt_back_to_their_subjects_in_order() {
        let times = [1.0, 10.0, 100.0, 2.0, 20.0, 200.0, 3.0];
        assert_eq!(
            by_subject(&times, 3),
            vec![vec![1.0, 2.0, 3.0], vec![10.0, 20.0], vec![100.0, 200.0]]
        );
    }

    #[test]
    fn a_screened_time_is_scaled_by_the_defaults_drift() {
        // The default ran 10% slower beside the schedule than in full: the
        // clock was lower, so the schedule's time is scaled down alike.
        assert!((normalized(2.2, Some(1.1), Some(1.0)) - 2.0).abs() < 1e-12);
        assert_eq!(normalized(2.2, None, Some(1.0)), 2.2);
        assert_eq!(normalized(2.2, Some(1.1), None), 2.2);
    }
}

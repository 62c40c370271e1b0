//! The search on a miss, with a stand-in device: which candidates it
//! measures, what it records, how it treats rejected candidates, and that
//! an interrupted search resumes from its journal.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ktune_build::tune::{
    Bench, CONFIRM_MOST, CONFIRM_WITHIN, Campaign, Effort, Journal, Method, Progress, Settings,
    Task, Timing, search,
};
use ktune_core::SmVersion;
use ktune_core::db::{ComputeCapability, Gpu, MeasuredOn};
use ktune_core::ir::Kernel;
use ktune_core::lower::{heuristic, portable_heuristic};
use ktune_core::schedule::Schedule;
use ktune_core::syntax::parse_kernel;
use ktune_search::measure::Rejection;
use ktune_search::session::Deadline;
use quote::quote;

fn softmax() -> Kernel {
    softmax_of(300)
}

fn softmax_of(rows: u64) -> Kernel {
    let rows = proc_macro2::Literal::u64_unsuffixed(rows);
    parse_kernel(
        quote!(shape(R = #rows, C = 1000)),
        quote! {
            fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                compute(|r, c| {
                    let mx = max(C, |j| x[r][j]);
                    exp(x[r][c] - mx) / sum(C, |j| exp(x[r][j] - mx))
                })
            }
        },
    )
    .expect("valid kernel")
}

/// A device whose times are a fixed function of the schedule (fastest at
/// 128 threads per row with vector 4), and which rejects every point with
/// 2 threads per row, as a wrong kernel would be.
#[derive(Default)]
struct Fake {
    measured: Vec<Schedule>,
    /// The rows of the kernel of each measurement.
    rows: Vec<u32>,
    /// The batches announced before being measured.
    prepared: Vec<Vec<Schedule>>,
    /// The schedules' differences in time 50 times smaller: many
    /// candidates within a few percent of each other.
    flat: bool,
    /// From this measurement on, the points of 128 threads a row fail: a
    /// candidate that failed only once measured again.
    fails_from: Option<usize>,
    /// How much slower each measurement runs than the one before, as a
    /// fraction of the first's time: a clock falling (rising, below 0)
    /// steadily.
    drift: f64,
    /// Raised (a Ctrl-C) during this measurement, counted from 1.
    interrupt: Option<(usize, &'static AtomicBool)>,
}

impl Fake {
    /// What `schedule` takes on this device with the clock as at the first
    /// measurement.
    fn time_on(&self, kernel: &Kernel, schedule: &Schedule) -> Option<f64> {
        Fake {
            flat: self.flat,
            ..Fake::default()
        }
        .measure(kernel, "", schedule)
        .ok()
        .map(|t| t.median_us)
    }

    /// What `schedule` takes on the default device.
    fn time(kernel: &Kernel, schedule: &Schedule) -> Option<f64> {
        Fake::default().time_on(kernel, schedule)
    }
}

impl Bench for Fake {
    fn gpu(&self) -> Gpu {
        Gpu {
            name: "Fake GPU".into(),
            compute_capability: ComputeCapability { major: 9, minor: 0 },
            sm_count: 132,
            driver: String::new(),
            cuda: String::new(),
            clocks_mhz: None,
        }
    }

    fn measured_on(&self) -> MeasuredOn {
        MeasuredOn::Gpu
    }

    fn target(&self) -> SmVersion {
        SmVersion::Sm90
    }

    fn measure(
        &mut self,
        kernel: &Kernel,
        _: &str,
        schedule: &Schedule,
    ) -> Result<Timing, Rejection> {
        let slowdown = 1.0 + self.drift * self.measured.len() as f64;
        self.measured.push(schedule.clone());
        if let Some((during, flag)) = self.interrupt
            && self.measured.len() == during
        {
            flag.store(true, Ordering::Relaxed);
        }
        self.rows.push(kernel.dims[0].size);
        let Schedule::Rows {
            threads_per_row,
            rows_per_block,
            vector,
            ..
        } = *schedule
        else {
            panic!("a rows kernel");
        };
        if threads_per_row == 2 {
            return Err(Rejection::WrongResult("element 7 differs".into()));
        }
        if threads_per_row == 128 && self.fails_from.is_some_and(|n| self.measured.len() > n) {
            return Err(Rejection::WrongResult("element 9 differs".into()));
        }
        // Proportional to the rows, as a real kernel's time would be.
        let rows = kernel.dims[0].size as f64 / 300.0;
        let differences = f64::from(threads_per_row.abs_diff(128)) / 8.0
            + f64::from(4 - vector)
            + f64::from(rows_per_block) / 16.0;
        let scale = if self.flat { 0.02 } else { 1.0 };
        let t = slowdown * rows * (10.0 + scale * differences);
        Ok(Timing {
            median_us: t,
            low_us: t * 0.99,
            high_us: t * 1.01,
            samples: 20,
            throttled: false,
        })
    }

    fn prepare(&mut self, _: &Kernel, _: &str, schedules: &[Schedule], _: Option<Instant>) {
        self.prepared.push(schedules.to_vec());
    }
}

/// Whether every prepared batch was then measured, in its order.
fn measured_as_prepared(bench: &Fake) -> bool {
    let mut measured = bench.measured.iter();
    bench
        .prepared
        .iter()
        .flatten()
        .all(|p| measured.any(|m| m == p))
}

/// The candidates confirmed after a search's `searched` measurements: the
/// measurements after them must be two rounds over the same distinct
/// candidates, the second in reverse order, each within the confirmation's
/// reach of the fastest (on an unchanging clock).
fn confirmation(kernel: &Kernel, measured: &[Schedule], searched: usize) -> Vec<Schedule> {
    confirmation_on(&Fake::default(), kernel, measured, searched)
}

/// [`confirmation`] on a device like `bench`.
fn confirmation_on(
    bench: &Fake,
    kernel: &Kernel,
    measured: &[Schedule],
    searched: usize,
) -> Vec<Schedule> {
    let rounds = &measured[searched..];
    assert_eq!(rounds.len() % 2, 0, "two rounds: {rounds:?}");
    let (first, second) = rounds.split_at(rounds.len() / 2);
    assert!(
        first.iter().eq(second.iter().rev()),
        "the second round reversed"
    );
    assert!(first.len() <= CONFIRM_MOST + 1);
    assert_ne!(first.len(), 1, "one candidate is not confirmed");
    let default = heuristic(kernel, SmVersion::Sm90);
    let distinct: HashSet<String> = first.iter().map(Schedule::to_json).collect();
    assert_eq!(distinct.len(), first.len());
    let fastest = measured[..searched]
        .iter()
        .filter_map(|s| bench.time_on(kernel, s))
        .fold(f64::INFINITY, f64::min);
    for s in first.iter().filter(|s| **s != default) {
        let t = bench
            .time_on(kernel, s)
            .expect("a confirmed candidate runs");
        assert!(
            t <= fastest * CONFIRM_WITHIN,
            "{s:?}: {t} against {fastest}"
        );
    }
    first.to_vec()
}

/// The bounded search of `candidates` on `bench`, with a fresh journal.
fn bounded(kernel: &Kernel, bench: &mut Fake, candidates: usize) -> ktune_build::tune::Tuned {
    search(
        kernel,
        "",
        bench,
        &settings(Effort::Bounded { candidates }),
        &[],
        &mut Journal::in_memory(),
        &mut Progress::silent(),
    )
    .expect("something measured")
}

fn settings(effort: Effort) -> Settings {
    Settings {
        device: Some(ktune_measure::DeviceKind::Vgpu),
        effort,
        time: Duration::from_secs(600),
        write_crate: false,
    }
}

#[test]
fn bounded_search_measures_the_default_and_the_models_best() {
    let k = softmax();
    let mut bench = Fake::default();
    let tuned = bounded(&k, &mut bench, 6);
    // The default, then 6 others (the default among the model's best
    // does not take a candidate's place), then the fastest confirmed.
    assert_eq!(bench.measured[0], heuristic(&k, SmVersion::Sm90));
    assert_eq!(tuned.evaluations, 7);
    confirmation(&k, &bench.measured, 7);
    let mut unique = bench.measured[..7].to_vec();
    unique.sort_by_key(Schedule::to_json);
    unique.dedup();
    assert_eq!(unique.len(), 7, "a point measured twice");
    let best = bench.measured[..7]
        .iter()
        .filter_map(|s| Some((s, Fake::time(&k, s)?)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .expect("a time");
    assert_eq!(&tuned.record.schedule, best.0);
    let stats = &tuned.record.stats;
    assert_eq!(stats.median_us, best.1);
    assert!(stats.baseline_us.is_some_and(|b| b >= stats.median_us));
    assert_eq!(tuned.record.gpu.name, "Fake GPU");
    assert_eq!(tuned.record.provenance.measured_on, MeasuredOn::Gpu);
    assert_eq!(tuned.record.checksum, ktune_core::canon::checksum(&k));
}

#[test]
fn on_hopper_a_large_bf16_products_default_and_bounded_candidates_lead_with_warpgroups() {
    let k = parse_kernel(
        quote!(shape(M = 4096, N = 4096, K = 4096)),
        quote! {
            fn gemm(a: Tensor<bf16, (M, K)>, b: Tensor<bf16, (K, N)>) -> Tensor<f32, (M, N)> {
                compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
            }
        },
    )
    .expect("valid kernel");
    let warpgroup = |s: &Schedule| matches!(s, Schedule::Mma(t) if t.wgmma == 1);
    // Measured on the H200, `wgmma` tiles ran 1.65 times as fast as the
    // `mma.sync` default on this product's 4096³: the build measures the
    // warpgroup default first and the model's best points after it.
    assert!(warpgroup(&heuristic(&k, SmVersion::Sm90)));
    assert!(!warpgroup(&portable_heuristic(&k, SmVersion::Sm90)));
    let candidates = Task::new(&k, "", SmVersion::Sm90, &[]).bounded_candidates(8);
    assert_eq!(candidates.len(), 8);
    assert!(warpgroup(&candidates[0]), "{candidates:?}");
    // Before Hopper there are none.
    let candidates = Task::new(&k, "", SmVersion::Sm80, &[]).bounded_candidates(8);
    assert_eq!(candidates.len(), 8);
    assert!(!candidates.iter().any(warpgroup));
}

#[test]
fn a_clock_rising_through_the_search_does_not_choose_its_winner() {
    let k = softmax();
    let run = |drift| {
        let mut bench = Fake {
            drift,
            flat: true,
            ..Fake::default()
        };
        (bounded(&k, &mut bench, 8), bench)
    };
    let (steady, _) = run(0.0);
    // Each measurement 1% of the first's time faster than the one before
    // (the GPU's clock rising from idle): the candidates measured late
    // look faster than they are.
    let (drifting, bench) = run(-0.01);
    let confirmed = confirmation_on(&bench, &k, &bench.measured, drifting.evaluations);
    let fastest_measured = drifting
        .history
        .iter()
        .filter_map(|s| Some((&s.schedule, s.result.as_ref().ok()?.median_us)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(s, _)| s.clone())
        .expect("a time");
    assert_ne!(
        fastest_measured, steady.record.schedule,
        "the drift hides the fastest from the search"
    );
    assert!(confirmed.contains(&steady.record.schedule));
    assert_eq!(drifting.record.schedule, steady.record.schedule);
}

#[test]
fn a_winner_that_fails_when_confirmed_is_rejected() {
    let k = softmax();
    let mut bench = Fake {
        fails_from: Some(9),
        ..Fake::default()
    };
    let tuned = bounded(&k, &mut bench, 8);
    assert_eq!(tuned.evaluations, 9);
    let default = heuristic(&k, SmVersion::Sm90);
    let fastest = bench.measured[..9]
        .iter()
        .min_by(|a, b| {
            let time = |s| Fake::time(&k, s).unwrap_or(f64::INFINITY);
            time(a).total_cmp(&time(b))
        })
        .expect("measured")
        .clone();
    assert!(
        matches!(
            fastest,
            Schedule::Rows {
                threads_per_row: 128,
                ..
            }
        ),
        "{fastest:?}"
    );
    // The search's fastest fails in the first round and is not measured
    // in the second; the default, the only other in reach, wins.
    assert_eq!(
        bench.measured[9..],
        [fastest.clone(), default.clone(), default.clone()]
    );
    assert_eq!(tuned.record.schedule, default);
    assert!(
        tuned
            .rejected
            .iter()
            .any(|(s, why)| *s == fastest && why.contains("element 9 differs")),
        "{:?}",
        tuned.rejected
    );
    let default_us = Fake::time(&k, &default).expect("a time");
    assert_eq!(tuned.record.stats.median_us, default_us);
    assert_eq!(tuned.record.stats.baseline_us, Some(default_us));
}

#[test]
fn full_search_rejects_wrong_candidates_with_their_reason_and_goes_on() {
    let k = softmax();
    let mut bench = Fake::default();
    let tuned = search(
        &k,
        "",
        &mut bench,
        &settings(Effort::Full { evaluations: 40 }),
        &[],
        &mut Journal::in_memory(),
        &mut Progress::silent(),
    )
    .expect("something measured");
    // A fresh journal: every evaluation was measured.
    assert!(tuned.evaluations <= 40);
    confirmation(&k, &bench.measured, tuned.evaluations);
    for (schedule, why) in &tuned.rejected {
        assert!(matches!(
            schedule,
            Schedule::Rows {
                threads_per_row: 2,
                ..
            }
        ));
        assert!(why.contains("element 7 differs"), "{why}");
    }
    assert!(!matches!(
        tuned.record.schedule,
        Schedule::Rows {
            threads_per_row: 2,
            ..
        }
    ));
    assert!(tuned.speedup().is_some_and(|s| s >= 1.0));
    assert!(
        bench.prepared.iter().any(|b| b.len() > 1),
        "the search announces its batches"
    );
    assert!(measured_as_prepared(&bench));
}

#[test]
fn an_interrupted_search_resumes_from_its_journal() {
    let k = softmax();
    let dir = tempfile::tempdir().expect("temp dir");
    let effort = Effort::Full { evaluations: 24 };
    let gpu = Fake::default().gpu();

    let mut first = Fake::default();
    let whole = search(
        &k,
        "",
        &mut first,
        &settings(effort),
        &[],
        &mut Journal::open(dir.path(), &k, &gpu),
        &mut Progress::silent(),
    )
    .expect("something measured");
    // One journal, for this code generator's version only: another
    // version's code may run at another speed.
    let files: Vec<String> = std::fs::read_dir(dir.path())
        .expect("the journal's folder")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let version = format!("-g{}.jsonl", ktune_core::GENERATOR_VERSION);
    assert!(files[0].ends_with(&version), "{files:?}");

    // The same search again: every point comes from the journal.
    let mut again = Fake::default();
    let journal = Journal::open(dir.path(), &k, &gpu);
    assert_eq!(journal.len(), whole.evaluations);
    let confirmed = confirmation(&k, &first.measured, whole.evaluations);
    let mut journal = journal;
    let resumed = search(
        &k,
        "",
        &mut again,
        &settings(effort),
        &[],
        &mut journal,
        &mut Progress::silent(),
    )
    .expect("something measured");
    // Only the confirmation, which is not journaled, measures again.
    assert!(!confirmed.is_empty());
    assert_eq!(confirmation(&k, &again.measured, 0), confirmed);
    assert!(
        again.prepared.is_empty(),
        "points the journal answers are not prepared: {:?}",
        again.prepared
    );
    assert_eq!(resumed.record.schedule, whole.record.schedule);

    // A journal cut short (the build was interrupted): only the rest is
    // measured.
    let path = std::fs::read_dir(dir.path())
        .expect("journal dir")
        .next()
        .expect("a journal")
        .expect("entry")
        .path();
    let text = std::fs::read_to_string(&path).expect("journal");
    let lines: Vec<&str> = text.lines().collect();
    let kept = lines.len() / 2;
    // Torn within a character (the `µ` of a rejection's reason): one bad
    // line, not an unreadable file.
    let mut torn = (lines[..kept].join("\n") + "\n{\"schedule\":\"").into_bytes();
    torn.push("µ".as_bytes()[0]);
    std::fs::write(&path, torn).expect("cut");
    let mut rest = Fake::default();
    let cut = search(
        &k,
        "",
        &mut rest,
        &settings(effort),
        &[],
        &mut Journal::open(dir.path(), &k, &gpu),
        &mut Progress::silent(),
    )
    .expect("something measured");
    let searched = whole.evaluations - kept;
    assert_eq!(confirmation(&k, &rest.measured, searched), confirmed);
    assert_eq!(cut.record.schedule, whole.record.schedule);
    let earlier: HashSet<String> = first.measured.iter().map(Schedule::to_json).collect();
    assert!(rest.measured.iter().all(|s| earlier.contains(&s.to_json())));
    assert!(!rest.prepared.is_empty());
    assert!(measured_as_prepared(&rest), "only what is left is prepared");
    let prepared: Vec<&Schedule> = rest.prepared.iter().flatten().collect();
    let unique: HashSet<String> = prepared.iter().map(|s| s.to_json()).collect();
    assert_eq!(unique.len(), prepared.len(), "a point prepared twice");
    // What was measured after the torn line is all journaled: the first
    // entry started a line of its own.
    assert_eq!(Journal::open(dir.path(), &k, &gpu).len(), whole.evaluations);
}

#[test]
fn a_campaign_spends_its_budget_where_the_time_is() {
    let small = softmax_of(300);
    let large = softmax_of(3000);
    let target = SmVersion::Sm90;
    let campaign = |evaluations, deadline: Instant| Campaign {
        tasks: vec![
            (Task::new(&small, "", target, &[]), 1.0),
            (Task::new(&large, "", target, &[]), 1.0),
        ],
        method: Method::Evolutionary,
        evaluations,
        deadline: deadline.into(),
        journals: None,
    };
    let mut bench = Fake::default();
    let hour = Instant::now() + Duration::from_secs(3600);
    let result = campaign(96, hour).run(&mut bench, &mut Progress::silent());
    // The whole budget, then each kernel's fastest confirmed.
    for kernel in [&small, &large] {
        let of_kernel = |to: usize| -> Vec<Schedule> {
            bench.measured[..to]
                .iter()
                .zip(&bench.rows)
                .filter(|(_, rows)| **rows == kernel.dims[0].size)
                .map(|(s, _)| s.clone())
                .collect()
        };
        let searched = of_kernel(96).len();
        let confirmed = confirmation(kernel, &of_kernel(bench.measured.len()), searched);
        assert!(!confirmed.is_empty(), "each kernel's winner confirmed");
    }
    let budget = &bench.measured[..96];
    let distinct: HashSet<String> = budget.iter().map(Schedule::to_json).collect();
    let per_kernel: Vec<usize> = result
        .runs
        .iter()
        .map(|r| r.tuned.as_ref().expect("tuned").evaluations)
        .collect();
    assert_eq!(per_kernel.iter().sum::<usize>(), 96);
    // The large kernel takes ten times as long: most of the budget is its.
    assert!(per_kernel[1] > per_kernel[0], "{per_kernel:?}");
    assert!(distinct.len() <= 96);
    for (run, kernel) in result.runs.iter().zip([&small, &large]) {
        let tuned = run.tuned.as_ref().expect("tuned");
        assert_eq!(tuned.history.len(), tuned.evaluations);
        assert_eq!(tuned.history[0].schedule, heuristic(kernel, target));
        assert_eq!(tuned.record.kernel, kernel.name);
    }

    // Past its deadline, a campaign measures nothing.
    let mut idle = Fake::default();
    let result = campaign(96, Instant::now()).run(&mut idle, &mut Progress::silent());
    assert!(idle.measured.is_empty());
    assert!(result.runs.iter().all(|r| r.tuned.is_none()));
}

#[test]
fn an_interrupted_campaign_ends_with_the_measurement_in_progress_and_keeps_its_finds() {
    static INTERRUPT: AtomicBool = AtomicBool::new(false);
    let (small, large) = (softmax_of(300), softmax_of(3000));
    let target = SmVersion::Sm90;
    let hour = Deadline::at(Instant::now() + Duration::from_secs(3600));
    let campaign = Campaign {
        tasks: vec![
            (Task::new(&small, "", target, &[]), 1.0),
            (Task::new(&large, "", target, &[]), 1.0),
        ],
        method: Method::Evolutionary,
        evaluations: 96,
        deadline: hour.or_interrupt(&INTERRUPT),
        journals: None,
    };
    let mut bench = Fake {
        interrupt: Some((12, &INTERRUPT)),
        ..Fake::default()
    };
    let result = campaign.run(&mut bench, &mut Progress::silent());
    assert!(result.interrupted);
    // Each kernel's first round is 8 evaluations: the second kernel's was
    // cut after its fourth, and no winner was measured again to confirm it.
    assert_eq!(bench.measured.len(), 12);
    let evaluations: Vec<usize> = result
        .runs
        .iter()
        .map(|r| {
            r.tuned
                .as_ref()
                .expect("found before the interrupt")
                .evaluations
        })
        .collect();
    assert_eq!(evaluations, [8, 4]);
}

#[test]
fn settings_come_from_the_environment_and_name_bad_values() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    let bounded = Settings::from_env(env(&[("KTUNE_DEVICE", "vgpu")]), false).expect("valid");
    assert_eq!(bounded.device, Some(ktune_measure::DeviceKind::Vgpu));
    assert_eq!(
        bounded.effort,
        Effort::Bounded {
            candidates: ktune_build::tune::BOUNDED_CANDIDATES
        }
    );
    assert!(!bounded.write_crate);
    assert_eq!(
        bounded.time,
        Duration::from_secs(ktune_build::tune::VGPU_SECONDS)
    );
    let plain = Settings::from_env(env(&[("KTUNE_DEVICE", "none")]), false).expect("valid");
    assert_eq!(
        plain.time,
        Duration::from_secs(30),
        "a plain build waits little"
    );

    let full = Settings::from_env(
        env(&[("KTUNE_DEVICE", "none"), ("KTUNE_BUDGET", "100")]),
        true,
    )
    .expect("valid");
    assert_eq!(full.device, None);
    assert_eq!(full.effort, Effort::Full { evaluations: 100 });
    assert_eq!(full.time, Duration::from_secs(300));
    assert!(full.write_crate);

    let user = Settings::from_env(
        env(&[("KTUNE_DEVICE", "vgpu"), ("KTUNE_WRITE", "user")]),
        true,
    )
    .expect("valid");
    assert!(!user.write_crate);

    for (pairs, named) in [
        (&[("KTUNE_DEVICE", "tpu")][..], "KTUNE_DEVICE"),
        (&[("KTUNE_BUDGET", "0")][..], "KTUNE_BUDGET"),
        (&[("KTUNE_SECONDS", "soon")][..], "KTUNE_SECONDS"),
        (&[("KTUNE_WRITE", "disk")][..], "KTUNE_WRITE"),
    ] {
        let pairs: &'static [(&'static str, &'static str)] = pairs;
        let err = Settings::from_env(env(pairs), false).expect_err("invalid");
        assert!(err.to_string().contains(named), "{err}");
    }
}

//! The worker protocol end to end: a real child process (the
//! `ktune-measure-worker` binary) measuring on the virtual GPU, and every
//! kind of failure rejected with its reason while the session goes on.

use std::time::{Duration, Instant};

use ktune_core::SmVersion;
use ktune_core::lower;
use ktune_core::schedule::Schedule;
use ktune_measure::search::KernelMeasurer;
use ktune_measure::{
    DeviceKind, Injection, Job, Measured, Rejected, VGPU_NAME, Worker, WorkerConfig, WorkerError,
};
use ktune_search::measure::{Measurer, Rejection};
use ktune_search::session::{Budget, Session};
use ktune_search::space::{Knob, Point, Space};

const WORKER: &str = env!("CARGO_BIN_EXE_ktune-measure-worker");

const SCALE: &str = "
    #[tuned_kernel(shape(N = 4096))]
    fn scale(x: Tensor<f32, N>, y: Tensor<f32, N>) -> Tensor<f32, N> {
        compute(|i| 2.0 * x[i] + y[i])
    }";

const SOFTMAX: &str = "
    #[tuned_kernel(shape(R = 16, C = 200))]
    pub fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
        compute(|r, c| {
            let mx = max(C, |j| x[r][j]);
            let s = sum(C, |j| exp(x[r][j] - mx));
            exp(x[r][c] - mx) / s
        })
    }";

fn vgpu_worker(timeout: Duration) -> Worker {
    let config = WorkerConfig::with_program(WORKER, DeviceKind::Vgpu).timeout(timeout);
    Worker::spawn(config).expect("the worker starts")
}

fn heuristic(job: &Job) -> Schedule {
    let kernel = job.parse().expect("the kernel parses");
    lower::heuristic(&kernel, job.target)
}

fn assert_virtual(measured: &Measured) {
    assert!(measured.device.is_virtual());
    assert_eq!(measured.device.name, VGPU_NAME);
    assert_eq!(measured.samples, 1);
    assert!(measured.median_us > 0.0 && measured.median_us.is_finite());
    assert_eq!(measured.p10_us, measured.median_us);
    assert_eq!(measured.p90_us, measured.median_us);
    assert!(!measured.throttled);
}

#[test]
fn a_correct_candidate_is_measured_with_an_estimate_from_its_run() {
    let mut worker = vgpu_worker(Duration::from_secs(120));
    for (source, target) in [(SCALE, SmVersion::Sm80), (SOFTMAX, SmVersion::Sm90)] {
        let job = Job::new(source, target);
        let schedule = heuristic(&job);
        let measured = worker
            .measure(&job, &schedule)
            .expect("the heuristic point is correct");
        assert_virtual(&measured);
        assert_eq!(
            measured.device.compute_capability,
            target.compute_capability()
        );
        let kernel = job.parse().expect("parses");
        let lowered = ktune_core::lower::lower(&kernel, &schedule, target).expect("lowers");
        let run = ktune_vgpu::verify::Reference::new(&kernel, 1)
            .check_lowered(&schedule, target, &lowered)
            .expect("correct");
        let estimate = ktune_vgpu::timing::estimate(
            &run.stats,
            &lowered.launch,
            target,
            kernel.compulsory_bytes(),
        );
        assert_eq!(measured.median_us, estimate * 1e6);
        // The estimate is deterministic: measuring again gives the same.
        assert_eq!(worker.measure(&job, &schedule), Ok(measured));
    }
    // A point other than the heuristic's, of another op class's lowering.
    let rows = Schedule::Rows {
        threads_per_row: 32,
        rows_per_block: 4,
        vector: 1,
        cache: 0,
        tree: 0,
        online: 0,
        cluster: 1,
    };
    assert_virtual(
        &worker
            .measure(&Job::new(SOFTMAX, SmVersion::Sm80), &rows)
            .expect("correct"),
    );
    assert_eq!(worker.restarts(), 0);
}

#[test]
fn broken_candidates_are_rejected_with_their_reason_and_the_session_goes_on() {
    let mut worker = vgpu_worker(Duration::from_secs(120));
    let job = Job::new(SCALE, SmVersion::Sm80);
    let schedule = heuristic(&job);

    let wrong = worker.measure_injected(&job, &schedule, Injection::WrongStore);
    match &wrong {
        Err(Rejected::WrongResult(why)) => {
            assert!(why.contains("the reference says"), "{why}");
            assert!(why.contains("scale"), "names the kernel: {why}");
        }
        other => panic!("expected a wrong result, got {other:?}"),
    }

    let out_of_bounds = worker.measure_injected(&job, &schedule, Injection::OutOfBounds);
    match &out_of_bounds {
        Err(Rejected::Fault(why)) => assert!(why.contains("out-of-bounds global store"), "{why}"),
        other => panic!("expected a fault, got {other:?}"),
    }
    assert!(
        out_of_bounds
            .unwrap_err()
            .to_string()
            .starts_with("fault: ")
    );

    let invalid = Schedule::Elementwise {
        block: 33,
        per_thread: 1,
        vector: 1,
    };
    match worker.measure(&job, &invalid) {
        Err(Rejected::Invalid(why)) => assert!(why.contains("33"), "{why}"),
        other => panic!("expected an invalid point, got {other:?}"),
    }

    let unparsable = Job::new("fn scale(", SmVersion::Sm80);
    match worker.measure(&unparsable, &schedule) {
        Err(Rejected::Invalid(why)) => assert!(why.contains("does not parse"), "{why}"),
        other => panic!("expected an unparsable kernel, got {other:?}"),
    }

    assert_virtual(&worker.measure(&job, &schedule).expect("still serving"));
    assert_eq!(worker.restarts(), 0, "rejections do not cost the worker");
}

#[test]
fn an_endless_loop_times_out_and_the_next_request_runs_in_a_new_worker() {
    let mut worker = vgpu_worker(Duration::from_secs(2));
    let job = Job::new(SCALE, SmVersion::Sm80);
    let schedule = heuristic(&job);
    // A first request parses the kernel and computes the reference, so
    // the one that hangs does nothing else.
    worker.measure(&job, &schedule).expect("correct");

    let hung = worker.measure_injected(&job, &schedule, Injection::EndlessLoop);
    assert_eq!(hung, Err(Rejected::Timeout { after_s: 2.0 }));
    assert!(hung.unwrap_err().to_string().contains("2.0 s"));

    assert_virtual(
        &worker
            .measure(&job, &schedule)
            .expect("a new worker answers"),
    );
    assert_eq!(worker.restarts(), 1);
}

#[test]
fn a_worker_that_exits_mid_request_is_reported_and_replaced() {
    let mut worker = vgpu_worker(Duration::from_secs(120));
    let job = Job::new(SCALE, SmVersion::Sm80);
    let schedule = heuristic(&job);

    match worker.measure_injected(&job, &schedule, Injection::Exit { code: 3 }) {
        Err(Rejected::WorkerCrashed(why)) => {
            assert!(why.contains("in the middle of the request"), "{why}");
            assert!(why.contains("exited with code 3"), "{why}");
        }
        other => panic!("expected a crash, got {other:?}"),
    }
    assert_virtual(
        &worker
            .measure(&job, &schedule)
            .expect("a new worker answers"),
    );
    assert_eq!(worker.restarts(), 1);

    // Twice in a row, each time replaced.
    for code in [0, 101] {
        let crashed = worker.measure_injected(&job, &schedule, Injection::Exit { code });
        assert!(
            matches!(crashed, Err(Rejected::WorkerCrashed(_))),
            "{crashed:?}"
        );
    }
    assert!(worker.measure(&job, &schedule).is_ok());
    assert_eq!(worker.restarts(), 3);
}

#[cfg(unix)]
#[test]
fn a_program_that_is_no_worker_fails_the_handshake() {
    let config = WorkerConfig::with_program("true", DeviceKind::Vgpu);
    match Worker::spawn(config) {
        Err(WorkerError::Handshake { detail, .. }) => {
            assert!(detail.contains("exited without a word"), "{detail}");
        }
        other => panic!("expected a failed handshake, got {other:?}"),
    }
    let missing = WorkerConfig::with_program("/nonexistent/ktune-worker", DeviceKind::Vgpu);
    let err = Worker::spawn(missing).unwrap_err();
    assert!(matches!(err, WorkerError::Spawn { .. }), "{err}");
    assert!(
        err.to_string().contains("/nonexistent/ktune-worker"),
        "{err}"
    );
}

#[test]
fn the_worker_binary_run_by_hand_explains_itself() {
    let output = std::process::Command::new(WORKER)
        .env_remove(ktune_measure::WORKER_ENV)
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(ktune_measure::WORKER_ENV), "{stderr}");
}

#[test]
fn the_search_measures_points_through_the_worker() {
    let mut worker = vgpu_worker(Duration::from_secs(120));
    let job = Job::new(SCALE, SmVersion::Sm80);
    let space = Space::new(vec![Knob::ints("block", &[33, 64, 128])]);
    let mut measurer = KernelMeasurer::new(&mut worker, job, |space: &Space, point: &Point| {
        let block = space.value(point, 0).as_f64()? as u32;
        Some(Schedule::Elementwise {
            block,
            per_thread: 1,
            vector: 1,
        })
    });
    let invalid = measurer.measure(&space, &Point(vec![0]));
    assert!(matches!(invalid, Err(Rejection::Invalid(_))), "{invalid:?}");
    let measured = measurer.measure(&space, &Point(vec![1])).expect("valid");
    assert!(measured.time > 0.0);
    let history = measurer.history();
    assert_eq!(history.len(), 2);
    let (schedule, result) = &history[1];
    assert_eq!(schedule.knob_values()[0], 64);
    assert_eq!(
        result.as_ref().map(|m| m.median_us),
        Ok(measured.time),
        "the search sees the median"
    );
}

fn elementwise(block: u32) -> Schedule {
    Schedule::Elementwise {
        block,
        per_thread: 1,
        vector: 1,
    }
}

/// A batch of candidates, some broken: a block of 33 threads does not
/// lower, one stores wrong values, one stores out of bounds.
fn mixed_batch(job: &Job) -> Vec<(Schedule, Option<Injection>)> {
    vec![
        (heuristic(job), None),
        (elementwise(33), None),
        (elementwise(64), Some(Injection::WrongStore)),
        (elementwise(128), None),
        (elementwise(128), Some(Injection::OutOfBounds)),
        (elementwise(256), None),
    ]
}

fn measure_all(
    worker: &mut Worker,
    job: &Job,
    batch: &[(Schedule, Option<Injection>)],
) -> Vec<Result<Measured, Rejected>> {
    batch
        .iter()
        .map(|(schedule, inject)| match inject {
            Some(injection) => worker.measure_injected(job, schedule, *injection),
            None => worker.measure(job, schedule),
        })
        .collect()
}

#[test]
fn a_prepared_batch_measures_exactly_as_one_by_one() {
    let job = Job::new(SCALE, SmVersion::Sm80);
    let batch = mixed_batch(&job);
    let mut sequential = vgpu_worker(Duration::from_secs(120));
    let want = measure_all(&mut sequential, &job, &batch);
    assert!(
        want[0].is_ok() && want[3].is_ok() && want[5].is_ok(),
        "{want:?}"
    );
    assert!(
        matches!(want[1], Err(Rejected::Invalid(_))),
        "{:?}",
        want[1]
    );
    assert!(
        matches!(want[2], Err(Rejected::WrongResult(_))),
        "{:?}",
        want[2]
    );
    assert!(matches!(want[4], Err(Rejected::Fault(_))), "{:?}", want[4]);

    for jobs in [1, 3] {
        let config = WorkerConfig::with_program(WORKER, DeviceKind::Vgpu).jobs(jobs);
        let mut worker = Worker::spawn(config).expect("the worker starts");
        assert_eq!(
            worker.prepare_injected(&job, &batch, None),
            5,
            "all but the one that does not lower, on {jobs} thread(s)"
        );
        assert_eq!(
            measure_all(&mut worker, &job, &batch),
            want,
            "{jobs} thread(s)"
        );
        assert_eq!(worker.restarts(), 0);
    }

    // A batch announced as its search's time runs out compiles nothing
    // (no candidate starts after the deadline) and measures the same.
    let mut late = vgpu_worker(Duration::from_secs(120));
    assert_eq!(late.prepare_injected(&job, &batch, Some(Instant::now())), 0);
    assert_eq!(measure_all(&mut late, &job, &batch), want);
    let mut early = vgpu_worker(Duration::from_secs(120));
    let deadline = Instant::now() + Duration::from_secs(3600);
    assert_eq!(early.prepare_injected(&job, &batch, Some(deadline)), 5);
}

#[test]
fn the_search_prepares_its_batches_in_the_worker() {
    let mut worker = vgpu_worker(Duration::from_secs(120));
    let job = Job::new(SCALE, SmVersion::Sm80);
    let space = Space::new(vec![Knob::ints("block", &[33, 64, 128, 256])]);
    let schedule_of =
        |space: &Space, point: &Point| Some(elementwise(space.value(point, 0).as_f64()? as u32));
    let points: Vec<Point> = (0..4).map(|i| Point(vec![i])).collect();

    let mut batched = KernelMeasurer::new(&mut worker, job.clone(), schedule_of);
    let mut session = Session::new(&space, &mut batched, Budget::evaluations(4));
    session.measure_batch(&points);
    let history = session.into_history();
    let measured = batched.into_history();

    let mut one_by_one = vgpu_worker(Duration::from_secs(120));
    let mut single = KernelMeasurer::new(&mut one_by_one, job, schedule_of);
    for point in &points {
        single.measure(&space, point).ok();
    }
    assert_eq!(measured, single.into_history());
    assert_eq!(history.len(), 4);
    assert!(matches!(history[0].outcome, Err(Rejection::Invalid(_))));
    assert!(
        history[1..].iter().all(|e| e.outcome.is_ok()),
        "{history:?}"
    );
}

#[test]
fn rejections_map_onto_the_searchs() {
    let cases = [
        (
            Rejected::Invalid("a".into()),
            Rejection::Invalid("a".into()),
        ),
        (
            Rejected::CompileFailed("b".into()),
            Rejection::CompileFailed("b".into()),
        ),
        (
            Rejected::WrongResult("c".into()),
            Rejection::WrongResult("c".into()),
        ),
        (
            Rejected::Fault("d".into()),
            Rejection::RuntimeFailed("fault: d".into()),
        ),
        (
            Rejected::Timeout { after_s: 2.0 },
            Rejection::RuntimeFailed("timed out: no answer after 2.0 s, worker killed".into()),
        ),
        (
            Rejected::WorkerCrashed("e".into()),
            Rejection::RuntimeFailed("worker crashed: e".into()),
        ),
    ];
    for (ours, theirs) in cases {
        assert_eq!(Rejection::from(ours), theirs);
    }
}

/// On a GPU: the heuristic point is correct and timed; a fault is rejected
/// and the next point runs in a new worker (the faulted context is gone).
#[test]
#[ignore = "needs a GPU"]
fn a_gpu_measures_and_survives_a_fault() {
    let device = ktune_measure::detect().expect("a GPU");
    let config = WorkerConfig::with_program(WORKER, device).timeout(Duration::from_secs(120));
    let mut worker = Worker::spawn(config).expect("the worker starts");
    let job = Job::new(SOFTMAX, SmVersion::Sm80);
    let schedule = heuristic(&job);
    let measured = worker.measure(&job, &schedule).expect("correct and timed");
    assert!(!measured.device.is_virtual());
    assert!(measured.samples >= ktune_measure::Settings::default().min_samples);
    assert!(measured.p10_us <= measured.median_us && measured.median_us <= measured.p90_us);
    assert!(measured.device.sm_count > 0);

    let wrong = worker.measure_injected(&job, &schedule, Injection::WrongStore);
    assert!(matches!(wrong, Err(Rejected::WrongResult(_))), "{wrong:?}");
    let fault = worker.measure_injected(&job, &schedule, Injection::OutOfBounds);
    assert!(matches!(fault, Err(Rejected::Fault(_))), "{fault:?}");
    assert!(worker.measure(&job, &schedule).is_ok());
    assert_eq!(worker.restarts(), 1);
}

/// On a GPU: a batch loaded on several threads is then checked and timed
/// one candidate at a time, each rejected or measured as it would be alone
/// (times differ from run to run; the verdicts do not).
#[test]
#[ignore = "needs a GPU"]
fn a_gpu_measures_a_prepared_batch_as_one_by_one() {
    let device = ktune_measure::detect().expect("a GPU");
    let config = WorkerConfig::with_program(WORKER, device)
        .timeout(Duration::from_secs(120))
        .jobs(4);
    let job = Job::new(SCALE, SmVersion::Sm80);
    let batch = mixed_batch(&job);
    let mut sequential = Worker::spawn(config.clone()).expect("the worker starts");
    let want = measure_all(&mut sequential, &job, &batch);
    let mut worker = Worker::spawn(config).expect("the worker starts");
    assert_eq!(worker.prepare_injected(&job, &batch, None), 5);
    let got = measure_all(&mut worker, &job, &batch);
    let verdict = |r: &Result<Measured, Rejected>| match r {
        Ok(m) => {
            assert!(!m.device.is_virtual() && m.median_us > 0.0, "{m:?}");
            "measured"
        }
        Err(Rejected::Invalid(_)) => "invalid",
        Err(Rejected::CompileFailed(_)) => "compile failed",
        Err(Rejected::WrongResult(_)) => "wrong result",
        Err(Rejected::Fault(_)) => "fault",
        Err(Rejected::Timeout { .. }) => "timeout",
        Err(Rejected::WorkerCrashed(_)) => "crashed",
    };
    let verdicts = |rs: &[Result<Measured, Rejected>]| rs.iter().map(verdict).collect::<Vec<_>>();
    assert_eq!(verdicts(&got), verdicts(&want), "{got:?}\n{want:?}");
    assert!(matches!(got[4], Err(Rejected::Fault(_))), "{:?}", got[4]);
}

/// On a GPU: a kernel that never ends is killed with its worker, and the
/// GPU serves the next worker.
#[test]
#[ignore = "needs a GPU"]
fn a_hung_gpu_kernel_is_killed_with_its_worker() {
    let device = ktune_measure::detect().expect("a GPU");
    let config = WorkerConfig::with_program(WORKER, device).timeout(Duration::from_secs(10));
    let mut worker = Worker::spawn(config).expect("the worker starts");
    let job = Job::new(SCALE, SmVersion::Sm80);
    let schedule = heuristic(&job);
    worker.measure(&job, &schedule).expect("correct and timed");
    let hung = worker.measure_injected(&job, &schedule, Injection::EndlessLoop);
    assert_eq!(hung, Err(Rejected::Timeout { after_s: 10.0 }));
    assert!(worker.measure(&job, &schedule).is_ok());
}

/// On a GPU, with the CPU reference ruled out: candidates are compared
/// with the heuristic schedule's output on the same GPU.
#[test]
#[ignore = "needs a GPU"]
fn a_gpu_compares_big_kernels_with_the_heuristic_schedule() {
    let device = ktune_measure::detect().expect("a GPU");
    let settings = ktune_measure::Settings {
        reference_flops: 0,
        ..ktune_measure::Settings::default()
    };
    let config = WorkerConfig::with_program(WORKER, device)
        .timeout(Duration::from_secs(120))
        .settings(settings);
    let mut worker = Worker::spawn(config).expect("the worker starts");
    let job = Job::new(SOFTMAX, SmVersion::Sm80);
    let other = Schedule::Rows {
        threads_per_row: 32,
        rows_per_block: 4,
        vector: 1,
        cache: 0,
        tree: 0,
        online: 0,
        cluster: 1,
    };
    assert!(worker.measure(&job, &other).is_ok());
    match worker.measure_injected(&job, &other, Injection::WrongStore) {
        Err(Rejected::WrongResult(why)) => assert!(why.contains("heuristic schedule"), "{why}"),
        other => panic!("expected a wrong result, got {other:?}"),
    }
}

//! A stand-alone measurement worker, for tools and tests that measure from
//! an executable that is not itself a worker: `WorkerConfig::with_program`
//! with this program's path.

fn main() {
    ktune_measure::worker_main_if_requested();
    eprintln!(
        "ktune-measure-worker serves ktune's measurement requests on stdin and stdout; \
         it is started by ktune_measure::Worker with {}=1, not by hand",
        ktune_measure::WORKER_ENV
    );
    std::process::exit(2);
}

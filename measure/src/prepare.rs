//! Candidates compiled ahead of their measurement, several at once: the
//! parent announces a batch ([`crate::Worker::prepare`]), the worker lowers
//! each candidate on a pool of threads — on the virtual GPU it also runs
//! the whole check, which is deterministic CPU work; on a GPU it loads the
//! module, the driver's JIT compile — and keeps the results for the
//! measure requests that follow. Checks and timings on a GPU stay one at a
//! time, under its lock.

/// The environment variable holding the build's job limit: Cargo sets it
/// for build scripts.
pub const JOBS_ENV: &str = "NUM_JOBS";

/// The most candidates a worker keeps compiled; a batch beyond it is
/// compiled up to it (the rest are compiled when measured).
pub(crate) const CACHE_LIMIT: usize = 64;

/// How many threads compile candidates by default: [`JOBS_ENV`] when it
/// holds a positive number (in a build script, the build's job limit),
/// else the machine's available parallelism.
pub fn default_jobs() -> usize {
    jobs_from(std::env::var(JOBS_ENV).ok().as_deref())
}

fn jobs_from(num_jobs: Option<&str>) -> usize {
    num_jobs
        .and_then(|n| n.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(ktune_core::parallel::available)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_limit_comes_from_num_jobs_when_it_is_a_positive_number() {
        assert_eq!(jobs_from(Some("3")), 3);
        assert_eq!(jobs_from(Some("1")), 1);
        let machine = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(jobs_from(None), machine);
        assert_eq!(jobs_from(Some("0")), machine);
        assert_eq!(jobs_from(Some("many")), machine);
    }
}

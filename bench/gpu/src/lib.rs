//! ktune's GPU benchmark, the parts that need no GPU: the case catalogue
//! ([`cases`]), the schedules each case measures and the dry run
//! ([`plan`]), inputs and the sampled CPU reference ([`check`]), and the
//! results file ([`report`]), the heuristic model's fit to a run's
//! measurements ([`fit`]), `max-autotune`'s search over a case's
//! space with the screening left to the caller ([`search`]), the memory
//! probe's kernel ([`probe`]) and the order of runs that times subjects
//! side by side ([`turns`]). The
//! `ktune-bench` binary adds the GPU side: loading and timing kernels,
//! cuBLAS and the copy baseline. See the crate's README.md.

pub mod agreement;
pub mod cases;
pub mod check;
pub mod fit;
pub mod plan;
pub mod probe;
pub mod report;
pub mod search;
pub mod turns;

//! ktune's search layer: find the fastest points of a schedule space in few
//! measurements.
//!
//! - [`space`]: a generic space (named knobs with ordered values, validity
//!   by predicate or by list), random valid points, neighbourhoods.
//! - [`measure`]: the `Measurer` trait (a point gives a time, or a
//!   `Rejection` with its reason); [`replay`]: a recorded Kernel Tuner cache
//!   file played back as one.
//! - [`session`]: one run, enforcing the budget and never measuring a point
//!   twice.
//! - The strategies, in [`strategy`]: `Random`, `Bounded` (a heuristic
//!   score, the best k), `CoordinateDescent`, and `Evolutionary` guided by a
//!   `CostModel` (in [`model`]: k nearest neighbours, or XGBoost with the
//!   `xgboost` feature), starting from a space-filling design (`spread`).
//! - [`scheduler`]: one evaluation budget spread over several searches
//!   (a crate's kernels), more where the expected saving is larger.
//! - [`score`]: a strategy run over many seeds on a replayed space,
//!   summarised as evaluations to reach within 5% of the optimum.
//!
//! ```
//! use ktune_search::measure::{Measurement, Outcome};
//! use ktune_search::session::{Budget, Session};
//! use ktune_search::space::{Knob, Point, Space};
//! use ktune_search::strategy::{Evolutionary, Strategy};
//!
//! let space = Space::new(vec![Knob::ints("block", &[32, 64, 128, 256]), Knob::ints("unroll", &[1, 2, 4])]);
//! // A stand-in for a GPU: the time of a point.
//! let mut gpu = |s: &Space, p: &Point| -> Outcome {
//!     let block = s.value(p, 0).as_f64().unwrap_or(0.0);
//!     let unroll = s.value(p, 1).as_f64().unwrap_or(0.0);
//!     Ok(Measurement::new((block - 128.0).abs() + (unroll - 2.0).abs() + 1.0))
//! };
//! let mut session = Session::new(&space, &mut gpu, Budget::evaluations(12));
//! Evolutionary::knn().run(&mut session, 7);
//! assert!(session.history().len() <= 12);
//! let (best, _time) = session.best().expect("something was measured");
//! assert_eq!(space.describe(best), "block=128,unroll=2");
//! ```

pub mod measure;
pub mod model;
pub mod replay;
pub mod scheduler;
pub mod score;
pub mod session;
pub mod space;
pub mod strategy;

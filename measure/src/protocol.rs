//! The worker protocol: JSON, one message per line. The worker writes a
//! [`Hello`] when it starts; then the parent writes a [`Request`] and waits
//! for its [`Response`], one at a time: a [`Measure`] is answered with
//! [`Response::Done`], a [`Prepare`] (the candidates about to be measured,
//! compiled in parallel and cached) with [`Response::Prepared`].

use std::time::Duration;

use ktune_core::schedule::Schedule;
use serde::{Deserialize, Serialize};

use crate::{DeviceKind, Injection, Job, Measured, Rejected, Settings};

/// The version of the worker protocol, checked at the handshake: the parent
/// and the worker are normally the same executable, but a stale build
/// script binary must not be fed requests it misreads.
pub const PROTOCOL_VERSION: u32 = 3;

/// The worker's first line.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Hello {
    pub ktune_measure_worker: u32,
    pub pid: u32,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Request {
    Measure(Measure),
    Prepare(Prepare),
}

/// Check and time one candidate.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Measure {
    pub id: u64,
    pub device: DeviceKind,
    pub job: Job,
    pub schedule: Schedule,
    pub settings: Settings,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inject: Option<Injection>,
}

/// Compile these candidates, on `jobs` threads, for the [`Measure`]
/// requests that follow (a candidate is a schedule and the injection its
/// measure request will carry); with `within`, start none after that long
/// (the search's deadline, which no measurement starts after).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Prepare {
    pub id: u64,
    pub device: DeviceKind,
    pub job: Job,
    pub candidates: Vec<(Schedule, Option<Injection>)>,
    pub settings: Settings,
    pub jobs: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within: Option<Duration>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Response {
    /// The answer to request `id`. With `retire`, the worker exits after
    /// writing it (its GPU context is unusable after a fault).
    Done {
        id: u64,
        result: Result<Box<Measured>, Rejected>,
        retire: bool,
    },
    /// The answer to prepare request `id`: how many of its candidates are
    /// now cached (those that lower).
    Prepared { id: u64, cached: usize },
    /// A line the worker could not read as a request.
    BadRequest { message: String },
}

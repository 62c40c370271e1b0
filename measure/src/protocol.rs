//! The worker protocol: JSON, one message per line. The worker writes a
//! [`Hello`] when it starts; then the parent writes a [`Request`] and waits
//! for its [`Response`], one at a time.

use ktune_core::schedule::Schedule;
use serde::{Deserialize, Serialize};

use crate::{DeviceKind, Injection, Job, Measured, Rejected, Settings};

/// The version of the worker protocol, checked at the handshake: the parent
/// and the worker are normally the same executable, but a stale build
/// script binary must not be fed requests it misreads.
pub const PROTOCOL_VERSION: u32 = 1;

/// The worker's first line.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Hello {
    pub ktune_measure_worker: u32,
    pub pid: u32,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Request {
    pub id: u64,
    pub device: DeviceKind,
    pub job: Job,
    pub schedule: Schedule,
    pub settings: Settings,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inject: Option<Injection>,
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
    /// A line the worker could not read as a request.
    BadRequest { message: String },
}

//! A recorded, exhaustively measured space played back as a [`Measurer`].
//!
//! The recording is a Kernel Tuner cache file (JSON, gzipped or not, as its
//! first bytes say): `tune_params_keys` orders the knobs, `tune_params` gives
//! each knob's values, and `cache` maps each measured configuration to its
//! record. The configurations the space's restrictions excluded are absent,
//! so the recorded configurations are the valid points. A record whose
//! `time` is a string (`"CompilationFailedConfig"`, ...) failed: replaying it
//! gives a rejection.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;
use serde_json::Value as Json;

use crate::measure::{Measurement, Measurer, Outcome, Rejection};
use crate::space::{Knob, Point, Space, Value};

/// The first bytes of a gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Kernel Tuner's names for the thread block's dimensions (its default
/// `block_size_names`): these knobs count threads.
const BLOCK_SIZE_NAMES: [&str; 3] = ["block_size_x", "block_size_y", "block_size_z"];

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not JSON: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{path}: {what}")]
    Format { path: PathBuf, what: String },
}

/// A replayed space: its knobs, its valid points and their outcomes.
#[derive(Debug, Clone)]
pub struct Replay {
    space: Space,
    outcomes: HashMap<Point, Outcome>,
    /// The fastest point that did not fail, and its time.
    best: Option<(Point, f64)>,
}

impl Replay {
    /// Loads a cache file.
    pub fn load(path: &Path) -> Result<Replay, ReplayError> {
        let io = |source| ReplayError::Io {
            path: path.to_path_buf(),
            source,
        };
        let bytes = std::fs::read(path).map_err(io)?;
        let mut text = String::new();
        if bytes.starts_with(&GZIP_MAGIC) {
            GzDecoder::new(bytes.as_slice())
                .read_to_string(&mut text)
                .map_err(io)?;
        } else {
            text = String::from_utf8(bytes).map_err(|e| ReplayError::Format {
                path: path.to_path_buf(),
                what: format!(
                    "not text (byte {} is not UTF-8) and not gzipped",
                    e.utf8_error().valid_up_to()
                ),
            })?;
        }
        let json: Json = serde_json::from_str(&text).map_err(|source| ReplayError::Json {
            path: path.to_path_buf(),
            source,
        })?;
        Replay::from_json(&json).map_err(|what| ReplayError::Format {
            path: path.to_path_buf(),
            what,
        })
    }

    /// Reads a cache file's parsed JSON.
    pub fn from_json(json: &Json) -> Result<Replay, String> {
        let names = json
            .get("tune_params_keys")
            .and_then(Json::as_array)
            .ok_or("no `tune_params_keys` list")?;
        let params = json
            .get("tune_params")
            .and_then(Json::as_object)
            .ok_or("no `tune_params` object")?;
        if names.is_empty() {
            return Err("`tune_params_keys` is empty: a space needs at least one knob".into());
        }
        let mut knobs = Vec::new();
        let mut raw_values = Vec::new();
        for name in names {
            let name = name
                .as_str()
                .ok_or("a `tune_params_keys` entry is not a string")?;
            let values = params
                .get(name)
                .and_then(Json::as_array)
                .ok_or_else(|| format!("`tune_params` has no list for `{name}`"))?;
            let typed = values
                .iter()
                .map(|v| value_of(v).ok_or_else(|| format!("`{name}` has an unusable value {v}")))
                .collect::<Result<Vec<_>, _>>()?;
            let knob = Knob::new(name, typed);
            knobs.push(if BLOCK_SIZE_NAMES.contains(&name) {
                knob.counting_threads()
            } else {
                knob
            });
            raw_values.push(values.clone());
        }
        let cache = json
            .get("cache")
            .and_then(Json::as_object)
            .ok_or("no `cache` object")?;
        let mut outcomes = HashMap::with_capacity(cache.len());
        for (key, record) in cache {
            let mut indices = Vec::with_capacity(knobs.len());
            for (knob, values) in knobs.iter().zip(&raw_values) {
                let v = record
                    .get(&knob.name)
                    .ok_or_else(|| format!("record `{key}` has no `{}`", knob.name))?;
                let i = values
                    .iter()
                    .position(|x| same_value(x, v))
                    .ok_or_else(|| {
                        format!(
                            "record `{key}`: `{}` = {v} is not a listed value",
                            knob.name
                        )
                    })?;
                indices.push(i as u32);
            }
            let outcome = match record.get("time") {
                Some(Json::Number(t)) => {
                    let time = t
                        .as_f64()
                        .filter(|t| t.is_finite() && *t > 0.0)
                        .ok_or_else(|| {
                            format!("record `{key}`: `time` = {t}; a time must be positive")
                        })?;
                    let samples = record
                        .get("times")
                        .and_then(Json::as_array)
                        .map(|ts| ts.iter().filter_map(Json::as_f64).collect())
                        .unwrap_or_default();
                    Ok(Measurement { time, samples })
                }
                Some(Json::String(why)) => Err(rejection_of(why)),
                Some(other) => {
                    return Err(format!(
                        "record `{key}`: `time` = {other}; expected a time or the name of a failure"
                    ));
                }
                None => return Err(format!("record `{key}` has no `time`")),
            };
            outcomes.insert(Point(indices), outcome);
        }
        // Ties go to the first point in the space's order, so that the
        // winner does not depend on the hash map's.
        let best = outcomes
            .iter()
            .filter_map(|(p, o)| o.as_ref().ok().map(|m| (m.time, p)))
            .min_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)))
            .map(|(time, p)| (p.clone(), time));
        let space = Space::listed(knobs, outcomes.keys().cloned());
        Ok(Replay {
            space,
            outcomes,
            best,
        })
    }

    pub fn space(&self) -> &Space {
        &self.space
    }

    /// The best mean time over the valid points that did not fail.
    pub fn optimum(&self) -> Option<f64> {
        self.best.as_ref().map(|(_, time)| *time)
    }

    /// The point with the optimum time (the first in the space's order
    /// when several tie): what a tuning database would hold as the winner
    /// for the recording's GPU.
    pub fn winner(&self) -> Option<&Point> {
        self.best.as_ref().map(|(p, _)| p)
    }

    /// How many configurations the recording holds (failed ones included).
    pub fn len(&self) -> usize {
        self.outcomes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.outcomes.is_empty()
    }

    /// The recorded outcome of a point.
    pub fn outcome(&self, point: &Point) -> Option<&Outcome> {
        self.outcomes.get(point)
    }
}

impl Measurer for Replay {
    fn measure(&mut self, _space: &Space, point: &Point) -> Outcome {
        self.outcomes
            .get(point)
            .cloned()
            .unwrap_or_else(|| Err(Rejection::Invalid("not in the recorded space".into())))
    }
}

/// A replay measurer that borrows the recording (so many seeds can share one
/// loaded file).
impl Measurer for &Replay {
    fn measure(&mut self, _space: &Space, point: &Point) -> Outcome {
        self.outcomes
            .get(point)
            .cloned()
            .unwrap_or_else(|| Err(Rejection::Invalid("not in the recorded space".into())))
    }
}

fn value_of(v: &Json) -> Option<Value> {
    match v {
        Json::Number(n) => n
            .as_i64()
            .map(Value::Int)
            .or_else(|| n.as_f64().map(Value::Float)),
        Json::String(s) => Some(Value::Str(s.clone())),
        Json::Bool(b) => Some(Value::Str(b.to_string())),
        _ => None,
    }
}

/// JSON equality, with numbers compared by value (`1` matches `1.0`).
fn same_value(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn rejection_of(why: &str) -> Rejection {
    match why {
        "CompilationFailedConfig" => Rejection::CompileFailed(why.to_string()),
        "RuntimeFailedConfig" => Rejection::RuntimeFailed(why.to_string()),
        "InvalidConfig" => Rejection::Invalid(why.to_string()),
        _ => Rejection::RuntimeFailed(why.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_small_cache() {
        let json: Json = serde_json::from_str(
            r#"{"tune_params_keys": ["b", "v"],
                "tune_params": {"b": [32, 64], "v": ["x", "y"]},
                "cache": {
                  "32,x": {"b": 32, "v": "x", "time": 2.0, "times": [1.9, 2.1]},
                  "64,y": {"b": 64, "v": "y", "time": "CompilationFailedConfig"},
                  "64,x": {"b": 64, "v": "x", "time": 1.5}}}"#,
        )
        .expect("json");
        let mut r = Replay::from_json(&json).expect("replay");
        assert_eq!(r.len(), 3);
        assert_eq!(r.optimum(), Some(1.5));
        assert_eq!(r.winner(), Some(&Point(vec![1, 0])));
        let space = r.space().clone();
        assert_eq!(space.valid_points().len(), 3);
        assert!(!space.is_valid(&Point(vec![0, 1])));
        let m = r.measure(&space, &Point(vec![0, 0])).expect("measured");
        assert_eq!(m.samples, vec![1.9, 2.1]);
        assert!(matches!(
            r.measure(&space, &Point(vec![1, 1])),
            Err(Rejection::CompileFailed(_))
        ));
        assert!(matches!(
            r.measure(&space, &Point(vec![0, 1])),
            Err(Rejection::Invalid(_))
        ));
    }

    #[test]
    fn names_what_is_wrong_with_a_cache() {
        let cache = |keys: &str, time: &str| {
            let text = format!(
                r#"{{"tune_params_keys": {keys}, "tune_params": {{"b": [32, 64]}},
                    "cache": {{"32": {{"b": 32, "time": {time}}}}}}}"#
            );
            Replay::from_json(&serde_json::from_str(&text).expect("json")).map(|r| r.len())
        };
        assert_eq!(cache(r#"["b"]"#, "1.5"), Ok(1));
        assert_eq!(
            cache("[]", "1.5"),
            Err("`tune_params_keys` is empty: a space needs at least one knob".into())
        );
        for time in ["0.0", "-1"] {
            assert_eq!(
                cache(r#"["b"]"#, time),
                Err(format!(
                    "record `32`: `time` = {time}; a time must be positive"
                ))
            );
        }
        assert_eq!(
            cache(r#"["b"]"#, "null"),
            Err("record `32`: `time` = null; expected a time or the name of a failure".into())
        );
    }

    #[test]
    fn a_file_is_gzipped_whatever_its_name() {
        let dir = std::env::temp_dir().join(format!("ktune-replay-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let text = r#"{"tune_params_keys": ["b"], "tune_params": {"b": [32]},
                       "cache": {"32": {"b": 32, "time": 1.5}}}"#;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut gz, text.as_bytes()).expect("compress");
        let zipped = gz.finish().expect("compress");
        for (name, bytes) in [
            ("plain.json.gz", text.as_bytes()),
            ("zipped.json", &zipped[..]),
        ] {
            std::fs::write(dir.join(name), bytes).expect("write");
            let replay = Replay::load(&dir.join(name)).expect(name);
            assert_eq!(replay.optimum(), Some(1.5), "{name}");
        }
        std::fs::write(dir.join("binary.json"), [0xff, 0xfe, 0x00]).expect("write");
        let e = Replay::load(&dir.join("binary.json")).expect_err("not text");
        assert!(
            e.to_string()
                .ends_with("binary.json: not text (byte 0 is not UTF-8) and not gzipped"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}

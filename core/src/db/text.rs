//! The text form: deterministic pretty JSON, and parsing with errors that
//! say where and what to do.
//!
//! ```text
//! {
//!   "version": 1,
//!   "records": [
//!     {
//!       "kernel": "softmax",
//!       ...
//!     }
//!     ,
//!     {
//!       ...
//!     }
//!   ]
//! }
//! ```
//!
//! Records are separated by a line holding only a comma, so inserting one
//! anywhere (first and last included) adds lines and changes none.

use serde::Deserialize;
use serde::ser::Serialize;
use serde_json::value::RawValue;

use super::{Database, FORMAT_VERSION, Record};
use crate::GENERATOR_VERSION;

/// Why a database's text cannot be read, with the place (1-based line and
/// column) and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{column}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub column: usize,
    pub message: String,
    /// Whether a newer ktune wrote what cannot be read (a newer format, a
    /// record of a newer code generator): not the file's fault.
    pub newer: bool,
}

#[derive(Deserialize)]
struct Header {
    version: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw<'a> {
    #[serde(rename = "version")]
    _version: serde::de::IgnoredAny,
    #[serde(borrow, default)]
    records: Vec<&'a RawValue>,
}

impl Database {
    /// Reads a database's text. The error names the line and column, and,
    /// for a bad record, its index and kernel.
    pub fn parse(text: &str) -> Result<Database, ParseError> {
        let invalid = |e: serde_json::Error| ParseError {
            newer: false,
            line: e.line(),
            column: e.column(),
            message: format!(
                "invalid JSON ({}); fix or restore the file (e.g. `git checkout` it)",
                strip_position(&e)
            ),
        };
        serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(invalid)?;
        let header: Header = serde_json::from_str(text).map_err(|e| ParseError {
            newer: false,
            line: e.line(),
            column: e.column(),
            message: format!(
                "not a ktune database: {}; expected {{\"version\": {FORMAT_VERSION}, \"records\": [...]}}",
                strip_position(&e)
            ),
        })?;
        if header.version != FORMAT_VERSION {
            let (line, column) = position(text, text.find("\"version\"").unwrap_or(0));
            let message = if header.version > FORMAT_VERSION {
                format!(
                    "this file was written by a newer ktune (format {}, this ktune reads format {FORMAT_VERSION}); upgrade ktune",
                    header.version
                )
            } else {
                format!(
                    "unknown format version {}; this ktune reads format {FORMAT_VERSION}",
                    header.version
                )
            };
            return Err(ParseError {
                line,
                column,
                message,
                newer: header.version > FORMAT_VERSION,
            });
        }
        let raw: Raw<'_> = serde_json::from_str(text).map_err(|e| ParseError {
            newer: false,
            line: e.line(),
            column: e.column(),
            message: format!(
                "{}; a database holds `version` and `records`, a list of records",
                strip_position(&e)
            ),
        })?;
        let mut records = Vec::with_capacity(raw.records.len());
        for (index, value) in raw.records.into_iter().enumerate() {
            let slice = value.get();
            let offset = slice.as_ptr() as usize - text.as_ptr() as usize;
            let record = serde_json::from_str::<Record>(slice).map_err(|e| {
                // serde_json places an error at the last character it read
                // (an unknown field: its key's), or, within a schedule (an
                // internally tagged enum, read whole first), at the
                // schedule's end; an unknown field is named at its key, the
                // last of its name read by then.
                let read = read_to(slice, e.line(), e.column());
                let at = unknown_field(&e)
                    .and_then(|f| slice[..read].rfind(&f))
                    .unwrap_or_else(|| slice[..read].char_indices().next_back().map_or(0, |(i, _)| i));
                let (line, column) = position(text, offset + at);
                let kernel = serde_json::from_str::<KernelName>(slice)
                    .map(|k| format!(" (kernel `{}`)", k.kernel))
                    .unwrap_or_default();
                let newer = serde_json::from_str::<Written>(slice)
                    .ok()
                    .map(|w| w.provenance.generator_version)
                    .filter(|v| *v > GENERATOR_VERSION);
                let advice = match newer {
                    Some(v) => format!(
                        "it was written by a newer ktune (code generator {v}, this one's is {GENERATOR_VERSION}): upgrade ktune, or remove the record"
                    ),
                    None => "fix this record or remove it".to_owned(),
                };
                ParseError {
                    line,
                    column,
                    message: format!("record {index}{kernel}: {}; {advice}", strip_position(&e)),
                    newer: newer.is_some(),
                }
            })?;
            records.push(record);
        }
        Ok(Database {
            version: header.version,
            records,
        })
    }

    /// The canonical text: normalized (see [`Database::normalize`]), pretty
    /// JSON with fields in a fixed order, one block per record, and a
    /// final newline.
    pub fn to_text(&self) -> String {
        let mut db = self.clone();
        db.normalize();
        let mut out = format!("{{\n  \"version\": {},\n  \"records\": [\n", db.version);
        for (i, record) in db.records.iter().enumerate() {
            if i > 0 {
                out.push_str("    ,\n");
            }
            for line in pretty(record).lines() {
                out.push_str("    ");
                out.push_str(line);
                out.push('\n');
            }
        }
        out.push_str("  ]\n}\n");
        out
    }
}

#[derive(Deserialize)]
struct KernelName {
    kernel: String,
}

/// The code generator a record was written by, read apart from the rest.
#[derive(Deserialize)]
struct Written {
    provenance: GeneratorOf,
}

#[derive(Deserialize)]
struct GeneratorOf {
    generator_version: u32,
}

/// The quoted key of the field an error says is unknown.
fn unknown_field(e: &serde_json::Error) -> Option<String> {
    let message = e.to_string();
    let name = message.strip_prefix("unknown field `")?.split('`').next()?;
    Some(format!("\"{name}\""))
}

fn pretty(record: &Record) -> String {
    let mut buf = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"  ");
    let mut serializer = serde_json::Serializer::with_formatter(&mut buf, formatter);
    // Writing to a Vec cannot fail, and a record has only string map keys.
    let _ = record.serialize(&mut serializer);
    String::from_utf8(buf).unwrap_or_default()
}

/// How far into `text` serde_json had read when it placed an error at its
/// 1-based `line` and `column` (in bytes): the end of the character there,
/// as a byte offset.
fn read_to(text: &str, line: usize, column: usize) -> usize {
    let start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    (start + column.max(1)..text.len())
        .find(|&end| text.is_char_boundary(end))
        .unwrap_or(text.len())
}

/// 1-based line and column of a byte offset.
fn position(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, str::len) + 1;
    (line, column)
}

/// serde_json's message without its " at line L column C" suffix, which
/// the [`ParseError`] carries separately.
fn strip_position(e: &serde_json::Error) -> String {
    let message = e.to_string();
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message,
    }
}

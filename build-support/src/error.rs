use std::fmt;
use std::path::PathBuf;

use ktune_core::lower::LowerError;

/// What went wrong while preparing a crate's kernels.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("cargo did not set `{0}`: ktune_build must be called from a build script")]
    MissingEnv(&'static str),
    #[error("cannot read `{path}`: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write `{path}`: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{error}", .path.display())]
    Database {
        path: PathBuf,
        error: ktune_core::db::ParseError,
    },
    #[error("cannot lock `{path}`: {source}")]
    Lock {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}", render_diagnostics(.0))]
    Kernel(Vec<Diagnostic>),
    #[error("`{path}`: [package.metadata.ktune] {message}")]
    Manifest { path: PathBuf, message: String },
    #[error("cannot tune on `{device}`: {reason}")]
    Device { device: String, reason: String },
    #[error("{name}={value:?}: expected {expected}")]
    Setting {
        name: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error(
        "kernel `{name}` is defined twice: at {first} and at {second}; kernel names must be unique within a crate"
    )]
    DuplicateKernel {
        name: String,
        first: Location,
        second: Location,
    },
    #[error("kernel `{kernel}` at {location}: {error}")]
    Lower {
        kernel: String,
        location: Location,
        error: Box<LowerError>,
    },
}

/// A place in a source file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file.display(), self.line, self.column)
    }
}

/// One kernel-language error, located in its file, with the source line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub location: Location,
    pub message: String,
    /// The offending source line and the width of the marked span on it.
    pub snippet: Option<(String, usize)>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "error: {}", self.message)?;
        write!(f, "  --> {}", self.location)?;
        if let Some((line, width)) = &self.snippet {
            let number = self.location.line.to_string();
            let pad = " ".repeat(number.len());
            write!(
                f,
                "\n{pad} |\n{number} | {line}\n{pad} | {}{}",
                " ".repeat(self.location.column.saturating_sub(1)),
                "^".repeat((*width).max(1))
            )?;
        }
        Ok(())
    }
}

fn render_diagnostics(diagnostics: &[Diagnostic]) -> String {
    diagnostics
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("\n\n")
}

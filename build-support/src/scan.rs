//! Finds every `#[tuned_kernel]` in a crate's sources and checks it with the
//! shared front-end.

use std::path::{Path, PathBuf};

use ktune_core::ir::Kernel;
use ktune_core::syntax;
use quote::ToTokens;
use syn::visit::Visit;

use crate::error::{Diagnostic, Error, Location};

/// A kernel found in the sources.
#[derive(Debug, Clone)]
pub struct Found {
    pub kernel: Kernel,
    pub location: Location,
    /// The kernel's function with its attribute, as source text (what a
    /// measurement worker parses again).
    pub source: String,
}

/// The result of scanning: the kernels and every file read.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    pub kernels: Vec<Found>,
    pub files: Vec<PathBuf>,
}

/// Scans every `.rs` file under `dirs` (recursively, in sorted order).
/// `root` is stripped from file names in messages. A kernel-language error
/// (or a file that is not Rust) is an [`Error::Kernel`] locating each.
pub fn scan(root: &Path, dirs: &[PathBuf]) -> Result<Scan, Error> {
    let (scan, diagnostics) = scan_all(root, dirs)?;
    match diagnostics.is_empty() {
        true => Ok(scan),
        false => Err(Error::Kernel(diagnostics)),
    }
}

/// [`scan`] for a build script: the kernels that check, the others left
/// to the compiler. Its expansion of `#[tuned_kernel]` reports the same
/// errors at their tokens, as compile errors; a build script's failure
/// would bury them under Cargo's "failed to run custom build command".
pub fn scan_leaving_errors_to_the_compiler(root: &Path, dirs: &[PathBuf]) -> Result<Scan, Error> {
    scan_all(root, dirs).map(|(scan, _)| scan)
}

fn scan_all(root: &Path, dirs: &[PathBuf]) -> Result<(Scan, Vec<Diagnostic>), Error> {
    let mut files = Vec::new();
    for dir in dirs {
        collect_rust_files(dir, &mut files)?;
    }
    files.sort();
    let mut out = Scan::default();
    let mut diagnostics = Vec::new();
    for file in &files {
        let source = std::fs::read_to_string(file).map_err(|source| Error::Read {
            path: file.clone(),
            source,
        })?;
        let shown = file.strip_prefix(root).unwrap_or(file).to_path_buf();
        scan_source(&shown, &source, &mut out.kernels, &mut diagnostics);
    }
    check_unique(&out.kernels)?;
    out.files = files;
    Ok((out, diagnostics))
}

fn collect_rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), Error> {
    let entries = std::fs::read_dir(dir).map_err(|source| Error::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    for entry in entries {
        let path = entry
            .map_err(|source| Error::Read {
                path: dir.to_path_buf(),
                source,
            })?
            .path();
        if path.is_dir() {
            collect_rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// Finds and checks the kernels of one file's source text.
pub fn scan_source(
    file: &Path,
    source: &str,
    kernels: &mut Vec<Found>,
    diagnostics: &mut Vec<Diagnostic>,
) {
    let parsed = match syn::parse_file(source) {
        Ok(parsed) => parsed,
        Err(e) => {
            diagnostics.extend(to_diagnostics(file, source, e));
            return;
        }
    };
    let mut visitor = Visitor {
        file,
        source,
        kernels,
        diagnostics,
    };
    visitor.visit_file(&parsed);
}

struct Visitor<'a> {
    file: &'a Path,
    source: &'a str,
    kernels: &'a mut Vec<Found>,
    diagnostics: &'a mut Vec<Diagnostic>,
}

impl<'ast> Visit<'ast> for Visitor<'_> {
    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        let Some(attr) = item.attrs.iter().find(|a| syntax::is_kernel_attr(a)) else {
            return;
        };
        match syntax::parse_kernel_fn(attr, item) {
            Ok(kernel) => self.kernels.push(Found {
                kernel,
                location: location(self.file, item.sig.ident.span()),
                source: item.to_token_stream().to_string(),
            }),
            Err(e) => self
                .diagnostics
                .extend(to_diagnostics(self.file, self.source, e)),
        }
    }
}

fn location(file: &Path, span: proc_macro2::Span) -> Location {
    let start = span.start();
    Location {
        file: file.to_path_buf(),
        line: start.line,
        column: start.column + 1,
    }
}

fn to_diagnostics(file: &Path, source: &str, error: syn::Error) -> Vec<Diagnostic> {
    error
        .into_iter()
        .map(|e| {
            let span = e.span();
            let (start, end) = (span.start(), span.end());
            let snippet = source
                .lines()
                .nth(start.line.saturating_sub(1))
                .map(|line| {
                    let width = if end.line == start.line {
                        end.column.saturating_sub(start.column)
                    } else {
                        line.chars().count().saturating_sub(start.column)
                    };
                    (line.to_owned(), width)
                });
            Diagnostic {
                location: location(file, span),
                message: e.to_string(),
                snippet,
            }
        })
        .collect()
}

fn check_unique(kernels: &[Found]) -> Result<(), Error> {
    for (i, a) in kernels.iter().enumerate() {
        if let Some(b) = kernels[..i].iter().find(|b| b.kernel.name == a.kernel.name) {
            return Err(Error::DuplicateKernel {
                name: a.kernel.name.clone(),
                first: b.location.clone(),
                second: a.location.clone(),
            });
        }
    }
    Ok(())
}

//! The crate's ktune settings: `[package.metadata.ktune]` in Cargo.toml.

use std::path::Path;

use ktune_core::SmVersion;
use serde::Deserialize;

use crate::error::Error;

/// Settings a crate declares in `[package.metadata.ktune]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    /// The package's name (`[package] name`), which keys its user cache.
    pub name: Option<String>,
    /// GPU targets to emit variants for, besides the sm_80 baseline.
    pub targets: Vec<SmVersion>,
}

#[derive(Deserialize)]
struct Manifest {
    package: Option<Package>,
}

#[derive(Deserialize)]
struct Package {
    name: Option<String>,
    metadata: Option<PackageMetadata>,
}

#[derive(Deserialize)]
struct PackageMetadata {
    ktune: Option<RawKtune>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKtune {
    #[serde(default)]
    targets: Vec<String>,
}

/// Reads `[package.metadata.ktune]` from the manifest at `path`.
pub fn read(path: &Path) -> Result<Metadata, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(path, &text)
}

/// Parses a manifest's text (`path` names it in errors).
pub fn parse(path: &Path, text: &str) -> Result<Metadata, Error> {
    let invalid = |message: String| Error::Manifest {
        path: path.to_path_buf(),
        message,
    };
    let manifest: Manifest = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
    let package = manifest.package;
    let name = package.as_ref().and_then(|p| p.name.clone());
    let Some(raw) = package.and_then(|p| p.metadata).and_then(|m| m.ktune) else {
        return Ok(Metadata {
            name,
            ..Metadata::default()
        });
    };
    let mut targets = Vec::new();
    for name in raw.targets {
        let sm: SmVersion = name.parse().map_err(|e| invalid(format!("targets: {e}")))?;
        if !targets.contains(&sm) {
            targets.push(sm);
        }
    }
    targets.sort();
    Ok(Metadata { name, targets })
}

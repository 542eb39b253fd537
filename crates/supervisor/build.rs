//! Gives this build of the supervisor an identity, `FLEET_BUILD_ID`: a hash of the sources the
//! fork server and the shim are compiled from (this crate's and those of every workspace crate
//! it depends on, found from its manifest so that a new one is never left out), the locked
//! dependency versions and the enabled features.
//!
//! Why: the daemon and the fork server's own program (`fleet-forksrv`) are two binaries that
//! must speak the same request layout. Both link this crate, so one build gives both the same
//! identity; a `fleet-forksrv` left from another build — of another commit with the same
//! version number, or not rebuilt by a `cargo run` that builds `fleet` alone — has another,
//! and the daemon does not use it (`shim::forkserver`).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let crates = manifest.parent().expect("crates/").to_path_buf();
    let mut inputs = vec![manifest.join("src"), manifest.join("Cargo.toml")];
    for dependency in workspace_dependencies(&manifest, &crates) {
        inputs.push(dependency.join("src"));
        inputs.push(dependency.join("Cargo.toml"));
    }
    inputs.push(crates.parent().expect("workspace").join("Cargo.lock"));
    let mut hasher = DefaultHasher::new();
    for input in &inputs {
        println!("cargo::rerun-if-changed={}", input.display());
        hash_tree(input, &crates, &mut hasher);
    }
    // The features change the code (failpoints compiled in or not).
    let mut features: Vec<String> = std::env::vars()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("CARGO_FEATURE_"))
        .collect();
    features.sort();
    features.hash(&mut hasher);
    println!("cargo::rustc-env=FLEET_BUILD_ID={:016x}", hasher.finish());
}

/// The folders of the crates beside this one (in `crates`) that its manifest's
/// `[dependencies]` name, in name order. A crate's name is its manifest's first `name = "…"`.
fn workspace_dependencies(manifest: &Path, crates: &Path) -> Vec<PathBuf> {
    let own = std::fs::read_to_string(manifest.join("Cargo.toml")).expect("own manifest");
    let dependencies: Vec<&str> = own
        .split("[dependencies]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .unwrap_or("")
        .lines()
        .filter_map(|line| line.split(['.', ' ', '=']).next())
        .filter(|name| !name.is_empty())
        .collect();
    let mut found: Vec<PathBuf> = std::fs::read_dir(crates)
        .expect("crates/")
        .flatten()
        .map(|e| e.path())
        .filter(|dir| {
            let Ok(text) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
                return false;
            };
            let name = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("name = "))
                .map(|n| n.trim_matches('"'));
            name.is_some_and(|n| dependencies.contains(&n)) && dir.as_path() != manifest
        })
        .collect();
    found.sort();
    found
}

/// Hashes `path` (a file, or every file below a folder, in name order) with its name relative
/// to `base`. What cannot be read is skipped: the identity only has to differ between builds
/// that differ, and an unreadable file is not compiled either.
fn hash_tree(path: &Path, base: &Path, hasher: &mut DefaultHasher) {
    if path.is_dir() {
        let Ok(entries) = std::fs::read_dir(path) else {
            return;
        };
        let mut children: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        children.sort();
        for child in children {
            hash_tree(&child, base, hasher);
        }
    } else if let Ok(bytes) = std::fs::read(path) {
        path.strip_prefix(base).unwrap_or(path).hash(hasher);
        bytes.hash(hasher);
    }
}

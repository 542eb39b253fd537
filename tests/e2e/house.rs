//! The layout's own rules, checked on the sources: no file of non-test source over 700 lines
//! (a file that long holds more than one thing), and no module found by a path attribute (a module is
//! where its name says).

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn no_source_file_is_over_700_lines() {
    let mut files = Vec::new();
    rust_files(&root().join("crates"), &mut files);
    let long: Vec<String> = files
        .iter()
        .filter(|p| {
            let rel = p
                .strip_prefix(root())
                .unwrap()
                .to_string_lossy()
                .into_owned();
            // Non-test source: under a crate's src/, not a test module of its own.
            rel.contains("/src/")
                && !rel.contains("/tests/")
                && !rel.ends_with("/tests.rs")
                && !rel.ends_with("_tests.rs")
        })
        .filter_map(|p| {
            let n = std::fs::read_to_string(p).unwrap().lines().count();
            (n > 700).then(|| format!("{} ({n} lines)", p.display()))
        })
        .collect();
    assert!(long.is_empty(), "split these: {long:#?}");
}

#[test]
fn no_module_is_found_by_path() {
    let mut files = Vec::new();
    rust_files(&root().join("crates"), &mut files);
    rust_files(&root().join("tests"), &mut files);
    let marker = ["#[", "path"].concat();
    let found: Vec<String> = files
        .iter()
        .filter(|p| std::fs::read_to_string(p).unwrap().contains(&marker))
        .map(|p| p.display().to_string())
        .collect();
    assert!(found.is_empty(), "modules found by path: {found:#?}");
}

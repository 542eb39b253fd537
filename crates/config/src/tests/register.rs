//! The register of keys ([`KEYS`]) against docs/CONFIG.md and the checker.

use std::collections::BTreeMap;

use super::{docs_path, path, FULL};
use crate::validate::checker::allowed_keys;
use crate::{Config, KEYS};

#[test]
fn example_in_docs_is_valid() {
    let doc = std::fs::read_to_string(docs_path()).unwrap();
    let start = doc.find("```toml\n").expect("CONFIG.md has a toml example") + 8;
    let len = doc[start..].find("```").unwrap();
    let c = Config::parse(&doc[start..start + len], path()).unwrap();
    for (key, _) in KEYS {
        // every key is shown in the example
        let leaf = key.rsplit('.').next().unwrap();
        assert!(
            doc[start..start + len].contains(&format!("{leaf} =")),
            "{key}"
        );
    }
    assert!(c.project("hello").is_some());
}

/// The register of keys and docs/CONFIG.md agree: every key in [`KEYS`] has a table row in the
/// doc (first cell `` `key` ``, third cell its default), and the doc documents no other key.
#[test]
fn keys_register_matches_docs_config_md() {
    let doc = std::fs::read_to_string(docs_path()).expect("docs/CONFIG.md is readable");
    let mut documented: BTreeMap<String, String> = BTreeMap::new();
    for line in doc.lines() {
        let Some(row) = line.trim().strip_prefix('|') else {
            continue;
        };
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let first = cells[0];
        let Some(key) = first.strip_prefix('`').and_then(|k| k.strip_suffix('`')) else {
            continue;
        };
        let default = cells.get(2).copied().unwrap_or("").trim_matches('`');
        assert!(
            documented
                .insert(key.to_string(), default.to_string())
                .is_none(),
            "docs/CONFIG.md documents `{key}` twice"
        );
    }
    for (key, default) in KEYS {
        match documented.get(*key) {
            None => panic!("key `{key}` is in config::KEYS but not documented in docs/CONFIG.md"),
            Some(d) => assert_eq!(
                d, default,
                "docs/CONFIG.md gives `{key}` the default {d:?}, config::KEYS says {default:?}"
            ),
        }
    }
    for key in documented.keys() {
        assert!(
            KEYS.iter().any(|(k, _)| k == key),
            "docs/CONFIG.md documents `{key}`, which is not in config::KEYS"
        );
    }
}

/// The register drives the unknown-key check: every key in it is accepted where it belongs.
#[test]
fn every_registered_key_is_accepted() {
    let c = Config::parse(FULL, path()).unwrap();
    assert_eq!(c.projects.len(), 3);
    for (key, _) in KEYS {
        let leaf = key.rsplit('.').next().unwrap();
        assert!(FULL.contains(&format!("\n{leaf} =")), "FULL lacks {key}");
    }
    assert_eq!(
        allowed_keys(""),
        vec![
            "state_dir",
            "max_concurrency",
            "tick",
            "http_listen",
            "log_format",
            "database",
            "namespaces",
            "projects",
            "keep_runs",
            "keep_for",
            "max_log_size",
            "host",
            "hosts"
        ]
    );
}

//! No text, however broken, makes the checker panic.

use proptest::prelude::*;

use super::{path, FULL};
use crate::{Config, KEYS};

#[test]
fn no_panic_on_any_prefix_of_a_valid_file() {
    for end in 0..=FULL.len() {
        if FULL.is_char_boundary(end) {
            let _ = Config::parse(&FULL[..end], path());
        }
    }
    // and on every suffix
    for start in 0..=FULL.len() {
        if FULL.is_char_boundary(start) {
            let _ = Config::parse(&FULL[start..], path());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn no_panic_on_garbage(text in "\\PC*") {
        let _ = Config::parse(&text, path());
    }

    #[test]
    fn no_panic_on_toml_like_garbage(
        text in "([a-z_.\\[\\]\"'=\\-0-9{}, \n*/#]|command|projects|namespaces|max_concurrency|schedule|timeout){0,120}"
    ) {
        let _ = Config::parse(&text, path());
    }

    #[test]
    fn no_panic_on_mutations_of_a_valid_file(
        edits in proptest::collection::vec((0usize..FULL.len(), any::<char>()), 1..6)
    ) {
        let mut text: Vec<char> = FULL.chars().collect();
        for (at, c) in edits {
            let at = at % text.len();
            text[at] = c;
        }
        let text: String = text.into_iter().collect();
        let _ = Config::parse(&text, path());
    }

    #[test]
    fn no_panic_on_any_value_of_any_key(
        key_index in 0usize..KEYS.len(),
        value in "(\"[^\"\\\\]{0,20}\"|-?[0-9]{1,25}|[0-9]\\.[0-9]|true|\\[\\]|\\[\"\"\\]|\\{\\}|1979-05-27)",
    ) {
        let (pattern, _) = KEYS[key_index];
        let text = match pattern.strip_prefix("projects.<name>.") {
            Some(leaf) => format!("[projects.p]\n{leaf} = {value}\n"),
            None => match pattern.strip_prefix("namespaces.<name>.") {
                Some(leaf) => format!("[namespaces.n]\n{leaf} = {value}\n"),
                None => format!("{pattern} = {value}\n"),
            },
        };
        let _ = Config::parse(&text, path());
    }
}

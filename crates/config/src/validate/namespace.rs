//! `[namespaces.<name>]` tables: the name, `max_concurrency` and `weight`, each checked by its
//! own function.
//!
//! This module never looks at projects; it hands back every declared name, valid or not, so
//! that the project checks can tell an unknown namespace from a broken one.

use std::collections::{BTreeMap, BTreeSet};

use toml::de::DeTable;

use super::checker::{join, key_segment, lookup, Checker, Key, Value};
use crate::model::DEFAULT_WEIGHT;
use crate::{NamespaceConfig, DEFAULT_NAMESPACE};

impl Checker<'_> {
    /// The valid `[namespaces.<name>]` tables of `root`, by name, and every declared namespace
    /// name (valid or not, plus [`DEFAULT_NAMESPACE`]): a bad namespace table must not also make
    /// each project in it an "unknown namespace".
    pub(super) fn namespaces(
        &mut self,
        root: &DeTable<'_>,
    ) -> (BTreeMap<String, NamespaceConfig>, BTreeSet<String>) {
        let mut namespaces = BTreeMap::new();
        let mut declared: BTreeSet<String> = BTreeSet::new();
        declared.insert(DEFAULT_NAMESPACE.to_string());
        let Some(table) = self.optional(root, "", "namespaces", Self::expect_table) else {
            return (namespaces, declared);
        };
        for (k, v) in table.iter() {
            let name = k.get_ref().as_ref();
            declared.insert(name.to_string());
            if let Some(ns) = self.namespace(k, v) {
                namespaces.insert(name.to_string(), ns);
            }
        }
        (namespaces, declared)
    }

    /// One `[namespaces.<name>]` table: `k` is its name, `v` its value. `None` when invalid.
    fn namespace(&mut self, k: &Key<'_>, v: &Value<'_>) -> Option<NamespaceConfig> {
        let dotted = format!("namespaces.{}", key_segment(k.get_ref()));
        self.check_name(k, &dotted, "namespace");
        let table = self.expect_table(v, &dotted)?;
        self.check_keys(table, "namespaces.<name>", &dotted);

        let max_concurrency = self.required(table, k, &dotted, "max_concurrency", Self::expect_cap);
        let weight = match lookup(table, "weight") {
            Some((_, v)) => self.weight(v, &join(&dotted, "weight")),
            None => Some(DEFAULT_WEIGHT),
        };
        Some(NamespaceConfig {
            max_concurrency: max_concurrency?,
            weight: weight?,
        })
    }

    /// `weight`: an integer of at least 1 that fits `u32`.
    fn weight(&mut self, v: &Value<'_>, key: &str) -> Option<u32> {
        self.expect_u32(v, key, 1)
    }
}

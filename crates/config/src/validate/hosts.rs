//! The host keys: `host` (this daemon's name), the `[hosts.<name>]` tables and a project's
//! `hosts` list, each checked by its own function.
//!
//! A host named in a project's `hosts` need not be declared under `[hosts]` (a host without a
//! table simply has no capacity of its own); `fleet validate` warns about such names instead,
//! from the parsed config. This module never decides what runs where: the packer does, from
//! the caps the config gives it.

use std::collections::{BTreeMap, BTreeSet};

use toml::de::{DeTable, DeValue};

use super::checker::{describe, key_segment, Checker, Key, Value};
use crate::host::{host_name_problem, machine_hostname, HostConfig};

impl Checker<'_> {
    /// `host`: a valid host name; absent, the machine's hostname (an error at the top of the
    /// file, naming the key, when that cannot serve as one).
    pub(super) fn host(&mut self, root: &DeTable<'_>) -> String {
        if let Some(name) = self.optional(root, "", "host", Self::host_name) {
            return name;
        }
        if root.iter().any(|(k, _)| k.get_ref().as_ref() == "host") {
            // Set but invalid: already reported.
            return String::new();
        }
        match machine_hostname() {
            Ok(name) => name,
            Err(why) => {
                self.error(0..0, "host", why);
                String::new()
            }
        }
    }

    /// A host name as a string value: the `host` key, or an item of a project's `hosts`.
    fn host_name(&mut self, v: &Value<'_>, key: &str) -> Option<String> {
        let s = self.expect_str(v, key)?;
        match host_name_problem(s) {
            None => Some(s.to_string()),
            Some(why) => {
                self.error(v.span(), key, why);
                None
            }
        }
    }

    /// The valid `[hosts.<name>]` tables of `root`, by name.
    pub(super) fn hosts(&mut self, root: &DeTable<'_>) -> BTreeMap<String, HostConfig> {
        let mut hosts = BTreeMap::new();
        let Some(table) = self.optional(root, "", "hosts", Self::expect_table) else {
            return hosts;
        };
        for (k, v) in table.iter() {
            if let Some(h) = self.host_table(k, v) {
                hosts.insert(k.get_ref().to_string(), h);
            }
        }
        hosts
    }

    /// One `[hosts.<name>]` table: `k` is its name, `v` its value. `None` when invalid.
    fn host_table(&mut self, k: &Key<'_>, v: &Value<'_>) -> Option<HostConfig> {
        let name = k.get_ref().as_ref();
        let dotted = format!("hosts.{}", key_segment(name));
        let bad_name = host_name_problem(name);
        if let Some(why) = &bad_name {
            self.error(k.span(), &dotted, why.clone());
        }
        let table = self.expect_table(v, &dotted)?;
        self.check_keys(table, "hosts.<name>", &dotted);
        let max_concurrency = self.required(table, k, &dotted, "max_concurrency", Self::expect_cap);
        if bad_name.is_some() {
            return None;
        }
        Some(HostConfig {
            max_concurrency: max_concurrency?,
        })
    }

    /// A project's `hosts`: a non-empty array of valid host names, where the project may run.
    /// Every bad item is reported, under `key[i]`.
    pub(super) fn project_hosts(&mut self, v: &Value<'_>, key: &str) -> Option<BTreeSet<String>> {
        let DeValue::Array(items) = v.get_ref() else {
            self.error(
                v.span(),
                key,
                format!(
                    "expected an array of host names such as [\"a\", \"b\"], found {}",
                    describe(v.get_ref())
                ),
            );
            return None;
        };
        if items.is_empty() {
            // An empty list would mean "nowhere": the project's runs would wait for ever.
            self.error(
                v.span(),
                key,
                "must not be empty (leave the key out to run on any host)",
            );
            return None;
        }
        let mut hosts = BTreeSet::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            match self.host_name(item, &format!("{key}[{i}]")) {
                Some(name) => {
                    hosts.insert(name);
                }
                None => ok = false,
            }
        }
        ok.then_some(hosts)
    }
}
